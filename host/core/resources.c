/*
 * resources.c — every host allocation, OpenCL object, device buffer and
 * enqueue of the library goes through these wrappers, so that a test can
 * make the n-th one fail (as SQLite tests its malloc failures) and check
 * that nothing leaks and no output is left half written. resources.h lists
 * what each kind of injected failure simulates and the status it becomes.
 */
#include "context.h"
#include "errors.h"
#include "resources.h"
#include "args.h"

#include <stdlib.h>
#include <time.h>

/* Injection armed for the calling thread (fcl__inject_failures(NULL, ...)):
 * covers what happens before a context exists (device listing, context
 * creation) and lets threads be tested independently of each other. */
typedef struct inject_state {
  unsigned mask;
  long countdown;
  long ops;
} inject_state;

static _Thread_local inject_state thread_inject;

long fcl__inject_failures(fcl_context *ctx, unsigned mask, long n) {
  if (!ctx) {
    long ran = thread_inject.mask ? thread_inject.ops : 0;
    thread_inject.mask = n > 0 ? mask : 0;
    thread_inject.countdown = n;
    thread_inject.ops = 0;
    return ran;
  }
  pthread_mutex_lock(&ctx->lock);
  long ran = ctx->inject_mask ? ctx->inject_ops : 0;
  __atomic_store_n(&ctx->inject_mask, n > 0 ? mask : 0, __ATOMIC_RELAXED);
  ctx->inject_countdown = n;
  ctx->inject_ops = 0;
  pthread_mutex_unlock(&ctx->lock);
  return ran;
}

int fcl__injected(fcl_context *ctx, unsigned kind) {
  /* A quick look without the lock: injection is off but in tests. */
  if (ctx && (__atomic_load_n(&ctx->inject_mask, __ATOMIC_RELAXED) & kind)) {
    pthread_mutex_lock(&ctx->lock);
    int fail = 0;
    if (ctx->inject_mask & kind) {
      ctx->inject_ops++;
      fail = --ctx->inject_countdown == 0;
    }
    pthread_mutex_unlock(&ctx->lock);
    return fail;
  }
  if (thread_inject.mask & kind) {
    thread_inject.ops++;
    return --thread_inject.countdown == 0;
  }
  return 0;
}

void *fcl__malloc(fcl_context *ctx, size_t bytes) {
  if (fcl__injected(ctx, FCL_INJECT_HOST_ALLOC)) return NULL;
  return malloc(bytes ? bytes : 1);
}

void *fcl__calloc(fcl_context *ctx, size_t count, size_t size) {
  if (fcl__injected(ctx, FCL_INJECT_HOST_ALLOC)) return NULL;
  return calloc(count ? count : 1, size ? size : 1);
}

void *fcl__realloc(fcl_context *ctx, void *p, size_t bytes) {
  if (fcl__injected(ctx, FCL_INJECT_HOST_ALLOC)) return NULL;
  return realloc(p, bytes ? bytes : 1);
}

void fcl__free(void *p) { free(p); }

/* Live buffers of the library's own, for tests that look for leaks over
 * long runs (tests/soak.c). */
static long live_buffers;

long fcl__live_buffers(void) { return __atomic_load_n(&live_buffers, __ATOMIC_RELAXED); }

static cl_mem create_buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes, void *host,
                            const char *what, fcl_status *status) {
  cl_int err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
  cl_mem mem = NULL;
  if (!fcl__injected(ctx, FCL_INJECT_DEVICE_ALLOC))
    mem = clCreateBuffer(ctx->cl, flags, bytes, host, &err);
  if (!mem) {
    *status = fcl__fail(ctx,
                        err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                err == CL_OUT_OF_HOST_MEMORY ||
                                err == CL_INVALID_BUFFER_SIZE
                            ? FCL_ERROR_OUT_OF_MEMORY
                            : FCL_ERROR_OPENCL,
                        "allocating %zu bytes for %s failed: %s (%d)", bytes,
                        what, fcl__cl_error_name(err), (int)err);
    return NULL;
  }
  __atomic_add_fetch(&live_buffers, 1, __ATOMIC_RELAXED);
  *status = FCL_SUCCESS;
  return mem;
}

cl_mem fcl__buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes, const char *what,
                   fcl_status *status) {
  return create_buffer(ctx, flags, bytes, NULL, what, status);
}

cl_mem fcl__upload(fcl_context *ctx, const void *host, size_t bytes, const char *what,
                   fcl_status *status) {
  /* OpenCL copies from host at creation: the const is only cast away for
   * the signature */
  return create_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, what,
                       status);
}

cl_mem fcl__zeroed_buffer(fcl_context *ctx, size_t bytes, const char *what,
                          fcl_status *status) {
  void *zeros = fcl__calloc(ctx, bytes ? bytes : 1, 1);
  if (!zeros) {
    *status = fcl__fail(ctx, FCL_ERROR_OUT_OF_MEMORY, "allocating %zu bytes of zeros for %s failed",
                        bytes, what);
    return NULL;
  }
  cl_mem mem = create_buffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes ? bytes : 1,
                             zeros, what, status);
  fcl__free(zeros);
  return mem;
}

cl_int fcl__retain_mem(cl_mem mem) {
  const cl_int err = clRetainMemObject(mem);
  if (err == CL_SUCCESS) __atomic_add_fetch(&live_buffers, 1, __ATOMIC_RELAXED);
  return err;
}

void fcl__release_mem(cl_mem *mem) {
  if (*mem) {
    clReleaseMemObject(*mem);
    __atomic_sub_fetch(&live_buffers, 1, __ATOMIC_RELAXED);
  }
  *mem = NULL;
}

/* Enqueue failures: allocation codes are out of memory, the rest OpenCL. */
static fcl_status enqueue_status(cl_int err) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY
             ? FCL_ERROR_OUT_OF_MEMORY
             : FCL_ERROR_OPENCL;
}

fcl_status fcl__launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                       cl_uint dims, const size_t *global, const size_t *local) {
  cl_int err = CL_OUT_OF_RESOURCES;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local,
                                 0, NULL, NULL);
  if (err == CL_SUCCESS && ctx->serial_launches) err = clFinish(ctx->queue);
  if (err != CL_SUCCESS)
    return fcl__fail(ctx, enqueue_status(err),
                     "launching %s (global %zu x %zu x %zu, local %zu) failed: "
                     "%s (%d)",
                     name, global[0], dims > 1 ? global[1] : 1,
                     dims > 2 ? global[2] : 1, local ? local[0] : 0,
                     fcl__cl_error_name(err), (int)err);
  return FCL_SUCCESS;
}

fcl_status fcl__launch_items(fcl_context *ctx, cl_kernel kernel, const char *name, size_t items,
                             size_t wg) {
  size_t local = wg;
  while (local > ctx->info.limits.max_work_group_size && local > 1) local /= 2;
  const size_t global = (items + local - 1) / local * local;
  return fcl__launch(ctx, kernel, name, 1, &global, &local);
}

static fcl_status enqueued(fcl_context *ctx, cl_int err, const char *what) {
  if (err == CL_SUCCESS) return FCL_SUCCESS;
  return fcl__fail(ctx, enqueue_status(err), "%s failed: %s (%d)", what,
                   fcl__cl_error_name(err), (int)err);
}

fcl_status fcl__copy(fcl_context *ctx, cl_mem from, cl_mem to, size_t bytes,
                     const char *what) {
  cl_int err = CL_OUT_OF_RESOURCES;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueCopyBuffer(ctx->queue, from, to, 0, 0, bytes, 0, NULL, NULL);
  return enqueued(ctx, err, what);
}

fcl_status fcl__fill(fcl_context *ctx, cl_mem mem, const void *pattern,
                     size_t pattern_size, size_t bytes, const char *what) {
  cl_int err = CL_OUT_OF_RESOURCES;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueFillBuffer(ctx->queue, mem, pattern, pattern_size, 0, bytes,
                              0, NULL, NULL);
  return enqueued(ctx, err, what);
}

fcl_status fcl__read(fcl_context *ctx, cl_mem mem, void *out, size_t bytes,
                     const char *what) {
  cl_int err = CL_OUT_OF_RESOURCES;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueReadBuffer(ctx->queue, mem, CL_TRUE, 0, bytes, out, 0, NULL,
                              NULL);
  return enqueued(ctx, err, what);
}

fcl_status fcl__read_rect(fcl_context *ctx, cl_mem mem, size_t pitch, size_t col,
                          size_t row_bytes, size_t rows, void *out, const char *what) {
  const size_t from[3] = {col, 0, 0}, to[3] = {0, 0, 0}, region[3] = {row_bytes, rows, 1};
  cl_int err = CL_OUT_OF_RESOURCES;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueReadBufferRect(ctx->queue, mem, CL_TRUE, from, to, region, pitch, 0,
                                  row_bytes, 0, out, 0, NULL, NULL);
  return enqueued(ctx, err, what);
}

fcl_status fcl__marker(fcl_context *ctx, cl_event *event, const char *what) {
  cl_int err = CL_OUT_OF_RESOURCES;
  *event = NULL;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
  if (err != CL_SUCCESS) *event = NULL;
  return enqueued(ctx, err, what);
}

fcl_status fcl__create_program(fcl_context *ctx, cl_uint count,
                               const char **texts, cl_program *program) {
  cl_int err = CL_OUT_OF_HOST_MEMORY;
  *program = NULL;
  if (!fcl__injected(ctx, FCL_INJECT_HOST_ALLOC))
    *program = clCreateProgramWithSource(ctx->cl, count, texts, NULL, &err);
  if (*program) return FCL_SUCCESS;
  return fcl__cl_fail(ctx, err, "clCreateProgramWithSource");
}

void fcl__hold_builds(fcl_context *ctx, int hold) {
  pthread_mutex_lock(&ctx->lock);
  __atomic_store_n(&ctx->builds_gated, hold, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&ctx->gate_changed);
  pthread_mutex_unlock(&ctx->lock);
}

int fcl__await_held_builds(fcl_context *ctx, int n, long timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&ctx->lock);
  int timed_out = 0;
  while (ctx->builds_at_gate < n && !timed_out)
    timed_out = pthread_cond_timedwait(&ctx->gate_changed, &ctx->lock, &until) != 0;
  const int reached = ctx->builds_at_gate >= n;
  pthread_mutex_unlock(&ctx->lock);
  return reached;
}

/* Where a test holds builds (fcl__hold_builds): nothing to do otherwise. */
static void build_gate(fcl_context *ctx) {
  if (!__atomic_load_n(&ctx->builds_gated, __ATOMIC_RELAXED)) return;
  pthread_mutex_lock(&ctx->lock);
  ctx->builds_at_gate++;
  pthread_cond_broadcast(&ctx->gate_changed);
  while (__atomic_load_n(&ctx->builds_gated, __ATOMIC_RELAXED))
    pthread_cond_wait(&ctx->gate_changed, &ctx->lock);
  ctx->builds_at_gate--;
  pthread_mutex_unlock(&ctx->lock);
}

cl_int fcl__build_program(fcl_context *ctx, cl_program program,
                          const char *options) {
  if (fcl__injected(ctx, FCL_INJECT_HOST_ALLOC)) return CL_OUT_OF_HOST_MEMORY;
  build_gate(ctx);
  return clBuildProgram(program, 1, &ctx->device, options, NULL, NULL);
}

fcl_status fcl__create_kernel(fcl_context *ctx, cl_program program,
                              const char *name, cl_kernel *kernel) {
  cl_int err = CL_OUT_OF_HOST_MEMORY;
  *kernel = NULL;
  if (!fcl__injected(ctx, FCL_INJECT_HOST_ALLOC))
    *kernel = clCreateKernel(program, name, &err);
  if (*kernel) return FCL_SUCCESS;
  return fcl__fail(ctx, err == CL_OUT_OF_HOST_MEMORY ? FCL_ERROR_OUT_OF_MEMORY
                                                     : FCL_ERROR_OPENCL,
                   "clCreateKernel(%s) failed: %s (%d)", name,
                   fcl__cl_error_name(err), (int)err);
}

int fcl__local_bytes_agree(size_t planned, cl_ulong built) {
  return built >= planned && built - planned <= FCL__LOCAL_DRIVER_BYTES;
}

fcl_status fcl__check_local_bytes(fcl_context *ctx, cl_kernel kernel, const char *name,
                                  size_t planned) {
  cl_ulong built = 0;
  cl_int err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE,
                                        sizeof built, &built, NULL);
  if (err != CL_SUCCESS)
    return fcl__cl_fail(ctx, err, "clGetKernelWorkGroupInfo(CL_KERNEL_LOCAL_MEM_SIZE)");
  FCL_RETURN_IF(ctx, !fcl__local_bytes_agree(planned, built), FCL_ERROR_BUILD_FAILED,
                "kernel %s declares %llu bytes of local memory, and its plan %zu (a driver "
                "may add up to %d of its own): the planner's model of it is wrong",
                name, (unsigned long long)built, planned, FCL__LOCAL_DRIVER_BYTES);
  return FCL_SUCCESS;
}

fcl_status fcl__set_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                         const fcl__arg *args, cl_uint count) {
  cl_uint declared = 0;
  cl_int err = clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof declared, &declared, NULL);
  if (err != CL_SUCCESS) return fcl__cl_fail(ctx, err, "clGetKernelInfo(CL_KERNEL_NUM_ARGS)");
  FCL_RETURN_IF(ctx, declared != count, FCL_ERROR_BUILD_FAILED,
                "kernel %s takes %u arguments, and the host sets %u", name, declared, count);
  for (cl_uint i = 0; i < count; ++i) {
    err = clSetKernelArg(kernel, i, args[i].size, args[i].value);
    if (err != CL_SUCCESS)
      return fcl__fail(ctx, FCL_ERROR_OPENCL,
                       "setting argument %u of %s failed: %s (%d)", i, name,
                       fcl__cl_error_name(err), (int)err);
  }
  return FCL_SUCCESS;
}
