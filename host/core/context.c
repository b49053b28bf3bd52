/*
 * context.c — finding devices, choosing one from a selector, and the
 * context that owns (or wraps) an OpenCL context, device and queue.
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

/* Default scratch cap as a share of global memory: leaves room for the
 * caller's tensors and for CLBlast's own temporaries. */
#define FCL_DEFAULT_SCRATCH_SHARE 0.4

/* The ICD loader's answer when no platform is installed (cl_khr_icd). */
#define FCL_PLATFORM_NOT_FOUND_KHR (-1001)

/* Device enumeration and context creation run one at a time in the
 * process: PoCL 3.1 initialises its devices lazily, and three threads
 * creating contexts at once crashed in clGetDeviceInfo(CL_DEVICE_NAME) or
 * had clGetDeviceIDs report CL_DEVICE_NOT_FOUND for a platform that has a
 * device. Held for the whole listing or creation, never while a context
 * runs work. */
static pthread_mutex_t enumeration_lock = PTHREAD_MUTEX_INITIALIZER;

static void query_string(cl_device_id dev, cl_device_info what, char *out,
                         size_t size) {
  out[0] = '\0';
  if (clGetDeviceInfo(dev, what, size, out, NULL) != CL_SUCCESS) out[0] = '\0';
  out[size - 1] = '\0';
}

static int has_extension(const char *extensions, const char *name) {
  size_t len = strlen(name);
  for (const char *p = extensions; (p = strstr(p, name)) != NULL; p += len)
    if ((p == extensions || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
      return 1;
  return 0;
}

/* The vendor, from its PCI id, and the width its hardware runs work-items
 * in lockstep, each from the vendor's own query (0 where there is none). */
static void read_vendor(cl_device_id dev, fcl_device_limits *lim) {
  cl_uint id = 0, u32 = 0;
  lim->vendor = FCL_VENDOR_OTHER;
  if (lim->is_gpu && clGetDeviceInfo(dev, CL_DEVICE_VENDOR_ID, sizeof id, &id, NULL) == CL_SUCCESS)
    lim->vendor = id == 0x10de ? FCL_VENDOR_NVIDIA
                  : id == 0x1002 ? FCL_VENDOR_AMD
                  : id == 0x8086 ? FCL_VENDOR_INTEL
                                 : FCL_VENDOR_OTHER;
  lim->sub_group_size = 0;
  if (lim->vendor == FCL_VENDOR_NVIDIA) {
    /* CL_DEVICE_WARP_SIZE_NV */
    if (clGetDeviceInfo(dev, 0x4003, sizeof u32, &u32, NULL) == CL_SUCCESS) lim->sub_group_size = u32;
  } else if (lim->vendor == FCL_VENDOR_AMD) {
    /* CL_DEVICE_WAVEFRONT_WIDTH_AMD */
    if (clGetDeviceInfo(dev, 0x4043, sizeof u32, &u32, NULL) == CL_SUCCESS) lim->sub_group_size = u32;
  } else if (lim->vendor == FCL_VENDOR_INTEL) {
    /* CL_DEVICE_SUB_GROUP_SIZES_INTEL: the narrowest, whose lanes get the
     * most registers (the planner's budget, plan.c) */
    size_t sizes[8] = {0}, bytes = 0;
    if (clGetDeviceInfo(dev, 0x4108, sizeof sizes, sizes, &bytes) == CL_SUCCESS)
      for (size_t i = 0; i < bytes / sizeof sizes[0] && i < 8; ++i)
        if (sizes[i] && (!lim->sub_group_size || sizes[i] < lim->sub_group_size))
          lim->sub_group_size = (unsigned)sizes[i];
  }
}

/* Fills `out`; fails only when the extension list cannot be allocated
 * (the limits would be wrong, not merely incomplete). `ctx` (may be NULL)
 * is where injected failures are counted and messages go. */
static fcl_status describe(fcl_context *ctx, cl_platform_id platform,
                           cl_device_id dev, unsigned pi, unsigned di,
                           fcl_device_info *out) {
  memset(out, 0, sizeof *out);
  out->platform_index = pi;
  out->device_index = di;
  query_string(dev, CL_DEVICE_NAME, out->name, sizeof out->name);
  query_string(dev, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
  query_string(dev, CL_DEVICE_VERSION, out->version, sizeof out->version);
  query_string(dev, CL_DRIVER_VERSION, out->driver, sizeof out->driver);
  if (clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof out->platform,
                        out->platform, NULL) != CL_SUCCESS)
    out->platform[0] = '\0';
  out->platform[sizeof out->platform - 1] = '\0';

  fcl_device_limits *lim = &out->limits;
  cl_ulong u64 = 0;
  cl_uint u32 = 0;
  size_t sz = 0;
  cl_device_type type = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof u64, &u64, NULL) == CL_SUCCESS)
    lim->local_mem_bytes = u64;
  if (clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u64, &u64, NULL) == CL_SUCCESS)
    lim->global_mem_bytes = u64;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u64, &u64, NULL) == CL_SUCCESS)
    lim->max_alloc_bytes = u64;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL) == CL_SUCCESS)
    lim->max_work_group_size = sz;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u32, &u32, NULL) == CL_SUCCESS)
    lim->compute_units = u32;
  if (clGetDeviceInfo(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u32, &u32, NULL) == CL_SUCCESS)
    out->max_clock_mhz = u32;
  if (clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS)
    lim->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;

  size_t ext_len = 0;
  int amd_compiler = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS &&
      ext_len > 0) {
    char *ext = fcl__malloc(ctx, ext_len + 1);
    if (!ext)
      return fcl__fail(ctx, FCL_ERROR_OUT_OF_MEMORY,
                       "out of host memory reading the extensions of %s", out->name);
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
      ext[ext_len] = '\0';
      lim->has_fp16 = has_extension(ext, "cl_khr_fp16");
      lim->has_fp64 = has_extension(ext, "cl_khr_fp64");
      lim->has_int64_atomics = has_extension(ext, "cl_khr_int64_base_atomics");
      /* cl_nv_device_attribute_query marks NVIDIA's own driver, whose
       * compiler accepts inline PTX (checked on an H200). */
      lim->nvidia_ptx = has_extension(ext, "cl_nv_device_attribute_query");
      /* AMD's own runtime (ROCm, and the driver before it) compiles with
       * LLVM's amdgcn target, whose builtins the AMD shuffle uses; Mesa's
       * drivers do not have this extension. */
      amd_compiler = has_extension(ext, "cl_amd_media_ops");
    }
    fcl__free(ext);
  }
  if (lim->nvidia_ptx) {
    /* CL_DEVICE_COMPUTE_CAPABILITY_{MAJOR,MINOR}_NV of that extension */
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(dev, 0x4000, sizeof major, &major, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, 0x4001, sizeof minor, &minor, NULL) == CL_SUCCESS)
      lim->nvidia_sm = major * 10 + minor;
  }
  read_vendor(dev, lim);
  /* Intel's shuffles are not used: IGC spilled the SIMT kernels far more
   * with them than with local-memory sums (docs/performance.md, Vendors). */
  lim->shuffle = lim->nvidia_ptx                                   ? FCL_SHUFFLE_NVIDIA_PTX
                 : lim->vendor == FCL_VENDOR_AMD && amd_compiler ? FCL_SHUFFLE_AMD
                                                                 : FCL_SHUFFLE_NONE;
  if (lim->shuffle != FCL_SHUFFLE_NVIDIA_PTX && !lim->sub_group_size)
    lim->shuffle = FCL_SHUFFLE_NONE;  /* a width to plan with is needed */
  return FCL_SUCCESS;
}

/* Calls `visit` for every device of every platform, in order, until it
 * returns nonzero. */
typedef int (*device_visitor)(cl_platform_id, cl_device_id, unsigned pi,
                              unsigned di, void *user);

static cl_int each_device(device_visitor visit, void *user) {
  cl_uint n_platforms = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &n_platforms);
  if (err == FCL_PLATFORM_NOT_FOUND_KHR || n_platforms == 0) return CL_SUCCESS;
  if (err != CL_SUCCESS) return err;
  cl_platform_id platforms[64];
  if (n_platforms > 64) n_platforms = 64;
  if ((err = clGetPlatformIDs(n_platforms, platforms, NULL)) != CL_SUCCESS) return err;
  for (cl_uint p = 0; p < n_platforms; ++p) {
    cl_uint n_devices = 0;
    /* A platform without devices says CL_DEVICE_NOT_FOUND; any other
     * failure would silently hide devices, so it is the caller's error. */
    err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n_devices);
    if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && n_devices == 0)) continue;
    if (err != CL_SUCCESS) return err;
    cl_device_id devices[64];
    if (n_devices > 64) n_devices = 64;
    err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, n_devices, devices, NULL);
    if (err != CL_SUCCESS) return err;
    for (cl_uint d = 0; d < n_devices; ++d)
      if (visit(platforms[p], devices[d], p, d, user)) return CL_SUCCESS;
  }
  return CL_SUCCESS;
}

typedef struct list_state {
  fcl_device_info *out;
  size_t capacity, count;
  fcl_status status;
} list_state;

static int list_visit(cl_platform_id platform, cl_device_id dev, unsigned pi,
                      unsigned di, void *user) {
  list_state *st = user;
  if (st->count < st->capacity)
    st->status = describe(NULL, platform, dev, pi, di, &st->out[st->count]);
  st->count++;
  return st->status != FCL_SUCCESS;
}

fcl_status fcl_devices(fcl_device_info *out, size_t capacity, size_t *count) {
  if (!count) return FCL_ERROR_INVALID_ARGUMENT;
  *count = 0;
  if (!out && capacity) return FCL_ERROR_INVALID_ARGUMENT;
  list_state st = {out, capacity, 0, FCL_SUCCESS};
  pthread_mutex_lock(&enumeration_lock);
  cl_int err = each_device(list_visit, &st);
  pthread_mutex_unlock(&enumeration_lock);
  if (st.status != FCL_SUCCESS) return st.status;
  if (err != CL_SUCCESS) return err == CL_OUT_OF_HOST_MEMORY ? FCL_ERROR_OUT_OF_MEMORY
                                                             : FCL_ERROR_OPENCL;
  *count = st.count;
  return FCL_SUCCESS;
}

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
      query_string(dev, CL_DEVICE_NAME, name, sizeof name);
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
  FCL_FORWARD_IF(describe(ctx, platform, ctx->device, pi, di, &ctx->info));
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
  pthread_mutex_lock(&enumeration_lock);
  fcl_status status = context_create(ctx, selector);
  pthread_mutex_unlock(&enumeration_lock);
  return status;
}

/* The selection and the OpenCL objects of fcl_context_create; the caller
 * holds enumeration_lock. */
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

  cl_int err = each_device(select_visit, &st);
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
  pthread_mutex_lock(&enumeration_lock);
  fcl_status status = context_wrap(ctx, context, device, queue);
  pthread_mutex_unlock(&enumeration_lock);
  return status;
}

/* The checks and bookkeeping of fcl_context_wrap; the caller holds
 * enumeration_lock. */
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
  each_device(find_visit, &st);  /* indices only: a failure leaves them 0 */
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

fcl_status fcl_context_set_scratch_limit(fcl_context *ctx, uint64_t bytes) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.scratch_limit = bytes;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}

uint64_t fcl__default_scratch_limit(const fcl_device_limits *limits) {
  return (uint64_t)((double)limits->global_mem_bytes * FCL_DEFAULT_SCRATCH_SHARE);
}

fcl__settings fcl__context_settings(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  fcl__settings settings = ctx->settings;
  pthread_mutex_unlock(&ctx->lock);
  return settings;
}

uint64_t fcl__scratch_limit(const fcl_context *ctx) {
  fcl__settings settings = fcl__context_settings((fcl_context *)ctx);
  if (settings.scratch_limit) return settings.scratch_limit;
  return fcl__default_scratch_limit(&ctx->info.limits);
}

fcl_status fcl_context_set_block_table_checks(fcl_context *ctx, int enable) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, enable != 0 && enable != 1, FCL_ERROR_INVALID_ARGUMENT,
                "block table checks must be 0 or 1, got %d", enable);
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.table_unchecked = !enable;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}

fcl_status fcl_context_set_count_io(fcl_context *ctx, int enable) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, enable != 0 && enable != 1, FCL_ERROR_INVALID_ARGUMENT,
                "count_io must be 0 or 1, got %d", enable);
  FCL_RETURN_IF(ctx, enable && !ctx->info.limits.has_int64_atomics,
                FCL_ERROR_UNSUPPORTED,
                "I/O counting needs cl_khr_int64_base_atomics, which %s lacks",
                ctx->info.name);
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.count_io = enable;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}
