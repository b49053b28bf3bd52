/*
 * context.c — choosing a device from a selector (devices.c lists and
 * describes them), and the context that owns (or wraps) an OpenCL context,
 * device and queue.
 */
#include "context.h"
#include "tuning.h"
#include "errors.h"
#include "resources.h"
#include "program.h"
#include "problem.h"
#include "calls.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- selection ---------------------------------------------------------- */

typedef enum { SEL_DEFAULT, SEL_TYPE, SEL_INDEX, SEL_NAME } sel_kind;

typedef struct select_state {
  sel_kind kind;
  cl_device_type type;
  unsigned pi, di;
  const char *name;
  /* result */
  int found;
  cl_platform_id platform;
  cl_device_id device;
  unsigned found_pi, found_di;
  /* SEL_DEFAULT remembers the first device in case no GPU exists */
  int have_first;
  cl_platform_id first_platform;
  cl_device_id first_device;
  unsigned first_pi, first_di;
} select_state;

static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; ++hay) {
    size_t i = 0;
    while (i < n && hay[i] &&
           tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      ++i;
    if (i == n) return 1;
  }
  return n == 0;
}

static int select_visit(cl_platform_id platform, cl_device_id dev, unsigned pi,
                        unsigned di, void *user) {
  select_state *st = user;
  cl_device_type type = 0;
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  int match = 0;
  switch (st->kind) {
    case SEL_DEFAULT:
      if (!st->have_first) {
        st->have_first = 1;
        st->first_platform = platform;
        st->first_device = dev;
        st->first_pi = pi;
        st->first_di = di;
      }
      match = (type & CL_DEVICE_TYPE_GPU) != 0;
      break;
    case SEL_TYPE: match = (type & st->type) != 0; break;
    case SEL_INDEX: match = pi == st->pi && di == st->di; break;
    case SEL_NAME: {
      char name[256];
      fcl__query_string(dev, CL_DEVICE_NAME, name, sizeof name);
      match = contains_nocase(name, st->name);
      break;
    }
  }
  if (match) {
    st->found = 1;
    st->platform = platform;
    st->device = dev;
    st->found_pi = pi;
    st->found_di = di;
  }
  return match;
}

static int parse_index(const char *s, unsigned *pi, unsigned *di) {
  char *end;
  unsigned long p = strtoul(s, &end, 10);
  if (end == s || *end != ':') return 0;
  const char *d_start = end + 1;
  unsigned long d = strtoul(d_start, &end, 10);
  if (end == d_start || *end != '\0' || p > 63 || d > 63) return 0;
  *pi = (unsigned)p;
  *di = (unsigned)d;
  return 1;
}

static fcl_context *context_alloc(void) {
  fcl_context *ctx = fcl__calloc(NULL, 1, sizeof *ctx);
  if (!ctx) return NULL;
  /* `lock` guards small state only and is held for moments; recursive so
   * that a helper taking it may be called by one that holds it. */
  pthread_mutexattr_t attr;
  const int have_attr = pthread_mutexattr_init(&attr) == 0;
  const int lock = have_attr && pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE) == 0 &&
                   pthread_mutex_init(&ctx->lock, &attr) == 0;
  if (have_attr) pthread_mutexattr_destroy(&attr);
  const int cache_lock = lock && pthread_mutex_init(&ctx->cache_lock, NULL) == 0;
  const int cache_built = cache_lock && pthread_cond_init(&ctx->cache_built, NULL) == 0;
  const int gate = cache_built && pthread_cond_init(&ctx->gate_changed, NULL) == 0;
  if (gate) return ctx;
  if (cache_built) pthread_cond_destroy(&ctx->cache_built);
  if (cache_lock) pthread_mutex_destroy(&ctx->cache_lock);
  if (lock) pthread_mutex_destroy(&ctx->lock);
  fcl__free(ctx);
  return NULL;
}

static fcl_status context_finish(fcl_context *ctx, cl_platform_id platform,
                                 unsigned pi, unsigned di) {
  FCL_FORWARD_IF(fcl__describe_device(ctx, platform, ctx->device, pi, di, &ctx->info));
  cl_command_queue_properties props = 0;
  if (clGetCommandQueueInfo(ctx->queue, CL_QUEUE_PROPERTIES, sizeof props,
                            &props, NULL) == CL_SUCCESS)
    ctx->queue_profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
  /* PoCL compiles a kernel when a launch of it is first submitted, on
   * whichever of its worker threads takes it, and two compiles at once can
   * crash inside clang's driver (PoCL 3.1: seen as segfaults and bad_alloc
   * when the flash backward's three kernels were enqueued back to back with
   * an empty kernel cache). There, each launch waits for the previous one. */
  ctx->serial_launches = strstr(ctx->info.platform, "Portable Computing Language") != NULL;
  ctx->usable = 1;
  fcl__tuning_load(ctx, NULL);
  fcl__clear_error(ctx);
  return FCL_SUCCESS;
}

static fcl_status context_create(fcl_context *ctx, const char *selector);

fcl_status fcl_context_create(const char *selector, fcl_context **out) {
  if (!out) return FCL_ERROR_INVALID_ARGUMENT;
  fcl_context *ctx = *out = context_alloc();
  if (!ctx) return FCL_ERROR_OUT_OF_MEMORY;
  fcl__devices_lock(1);
  fcl_status status = context_create(ctx, selector);
  fcl__devices_lock(0);
  return status;
}

/* The selection and the OpenCL objects of fcl_context_create; the caller
 * holds the devices' lock (fcl__devices_lock). */
static fcl_status context_create(fcl_context *ctx, const char *selector) {

  if (!selector || !*selector) {
    const char *env = getenv("FLASHCL_DEVICE");
    selector = env && *env ? env : NULL;
  }
  select_state st;
  memset(&st, 0, sizeof st);
  if (!selector) {
    st.kind = SEL_DEFAULT;
  } else if (!strcmp(selector, "gpu") || !strcmp(selector, "GPU")) {
    st.kind = SEL_TYPE;
    st.type = CL_DEVICE_TYPE_GPU;
  } else if (!strcmp(selector, "cpu") || !strcmp(selector, "CPU")) {
    st.kind = SEL_TYPE;
    st.type = CL_DEVICE_TYPE_CPU;
  } else if (!strcmp(selector, "all")) {
    return fcl__fail(ctx, FCL_ERROR_DEVICE_NOT_FOUND,
                     "selector \"all\" names several devices; a context has "
                     "one: list them with fcl_devices() and use \"P:D\"");
  } else if (parse_index(selector, &st.pi, &st.di)) {
    st.kind = SEL_INDEX;
  } else {
    st.kind = SEL_NAME;
    st.name = selector;
  }

  cl_int err = fcl__each_device(select_visit, &st);
  if (err != CL_SUCCESS) return fcl__cl_fail(ctx, err, "listing OpenCL devices");
  if (!st.found && st.kind == SEL_DEFAULT && st.have_first) {
    st.found = 1;
    st.platform = st.first_platform;
    st.device = st.first_device;
    st.found_pi = st.first_pi;
    st.found_di = st.first_di;
  }
  if (!st.found)
    return fcl__fail(ctx, FCL_ERROR_DEVICE_NOT_FOUND,
                     "no OpenCL device matches \"%s\" (is an ICD installed, "
                     "e.g. pocl-opencl-icd? flashcl-info lists what is seen)",
                     selector ? selector : "(default: first GPU, else first device)");

  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   (cl_context_properties)st.platform, 0};
  /* Context and queue are host allocations of the driver: a test's
   * injected failure makes them fail as if host memory ran out. */
  err = CL_OUT_OF_HOST_MEMORY;
  if (!fcl__injected(ctx, FCL_INJECT_HOST_ALLOC))
    ctx->cl = clCreateContext(props, 1, &st.device, NULL, NULL, &err);
  if (!ctx->cl) return fcl__cl_fail(ctx, err, "clCreateContext");
  ctx->device = st.device;
  clRetainDevice(st.device);  /* balanced in release, as for a wrapped one */
  err = CL_OUT_OF_HOST_MEMORY;
  if (!fcl__injected(ctx, FCL_INJECT_HOST_ALLOC))
    ctx->queue = clCreateCommandQueue(ctx->cl, st.device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!ctx->queue) return fcl__cl_fail(ctx, err, "clCreateCommandQueue");
  return context_finish(ctx, st.platform, st.found_pi, st.found_di);
}

/* Finds the indices fcl_devices would give `device`. */
typedef struct find_state {
  cl_device_id device;
  unsigned pi, di;
  int found;
} find_state;

static int find_visit(cl_platform_id platform, cl_device_id dev, unsigned pi,
                      unsigned di, void *user) {
  (void)platform;
  find_state *st = user;
  if (dev != st->device) return 0;
  st->pi = pi;
  st->di = di;
  st->found = 1;
  return 1;
}

static fcl_status context_wrap(fcl_context *ctx, cl_context context, cl_device_id device,
                               cl_command_queue queue);

fcl_status fcl_context_wrap(cl_context context, cl_device_id device,
                            cl_command_queue queue, fcl_context **out) {
  if (!out) return FCL_ERROR_INVALID_ARGUMENT;
  /* As with fcl_context_create, a context carries the reason of a failure. */
  fcl_context *ctx = *out = context_alloc();
  if (!ctx) return FCL_ERROR_OUT_OF_MEMORY;
  fcl__devices_lock(1);
  fcl_status status = context_wrap(ctx, context, device, queue);
  fcl__devices_lock(0);
  return status;
}

/* The checks and bookkeeping of fcl_context_wrap; the caller holds
 * the devices' lock (fcl__devices_lock). */
static fcl_status context_wrap(fcl_context *ctx, cl_context context, cl_device_id device,
                               cl_command_queue queue) {
  FCL_RETURN_IF(ctx, !context || !device || !queue, FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: %s is NULL",
                !context ? "context" : !device ? "device" : "queue");
  cl_context queue_context = NULL;
  cl_device_id queue_device = NULL;
  cl_uint context_devices = 0;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof queue_context,
                                     &queue_context, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof queue_device,
                                &queue_device, NULL);
  FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: queue is not a valid command queue (%s)",
                fcl__cl_error_name(err));
  FCL_RETURN_IF(ctx, queue_context != context, FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: queue belongs to another OpenCL context "
                "than context");
  FCL_RETURN_IF(ctx, queue_device != device, FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: queue runs on another device than device");
  /* A call's commands, the kept scratch's leases and the split forward's
   * arrival counts (scratch.c) rely on one command finishing before the
   * next starts. */
  cl_command_queue_properties props = 0;
  err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  FCL_RETURN_IF(ctx, err == CL_SUCCESS && (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE),
                FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: queue executes out of order; flashcl needs an in-order "
                "queue");
  err = clGetContextInfo(context, CL_CONTEXT_NUM_DEVICES, sizeof context_devices,
                         &context_devices, NULL);
  FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: context is not a valid OpenCL context (%s)",
                fcl__cl_error_name(err));
  cl_platform_id platform = NULL;
  err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
  FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                "fcl_context_wrap: device is not a valid device (%s)",
                fcl__cl_error_name(err));

  clRetainContext(context);
  clRetainDevice(device);
  clRetainCommandQueue(queue);
  ctx->cl = context;
  ctx->device = device;
  ctx->queue = queue;
  find_state st = {device, 0, 0, 0};
  fcl__each_device(find_visit, &st);  /* indices only: a failure leaves them 0 */
  return context_finish(ctx, platform, st.pi, st.di);
}

void fcl_context_release(fcl_context *ctx) {
  if (!ctx) return;
  fcl__programs_release(ctx);
  fcl__scratch_release(ctx);
  fcl__clblast_release(ctx);
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->device) clReleaseDevice(ctx->device);
  if (ctx->cl) clReleaseContext(ctx->cl);
  fcl__errors_release(ctx);
  fcl__tuning_release(ctx);
  pthread_cond_destroy(&ctx->gate_changed);
  pthread_cond_destroy(&ctx->cache_built);
  pthread_mutex_destroy(&ctx->cache_lock);
  pthread_mutex_destroy(&ctx->lock);
  fcl__free(ctx);
}

fcl_status fcl__check_context(fcl_context *ctx) {
  if (!ctx) return FCL_ERROR_INVALID_ARGUMENT;
  FCL_RETURN_IF(ctx, !ctx->usable, FCL_ERROR_INVALID_ARGUMENT,
                "the context was not created successfully; release it");
  return FCL_SUCCESS;
}

fcl_status fcl_context_device(const fcl_context *ctx, fcl_device_info *out) {
  if (!ctx || !ctx->usable || !out) return FCL_ERROR_INVALID_ARGUMENT;
  *out = ctx->info;
  return FCL_SUCCESS;
}

cl_context fcl_context_cl_context(const fcl_context *ctx) {
  return ctx && ctx->usable ? ctx->cl : NULL;
}
cl_device_id fcl_context_cl_device(const fcl_context *ctx) {
  return ctx && ctx->usable ? ctx->device : NULL;
}
cl_command_queue fcl_context_cl_queue(const fcl_context *ctx) {
  return ctx && ctx->usable ? ctx->queue : NULL;
}
