/*
 * resources.c — every host allocation, device buffer and kernel launch of
 * the library goes through these wrappers, so that a test can make the n-th
 * one fail (as SQLite tests its malloc failures) and check that nothing
 * leaks and no output is left half written.
 */
#include "internal.h"

#include <stdlib.h>

long fcl__inject_failures(fcl_context *ctx, unsigned mask, long n) {
  pthread_mutex_lock(&ctx->lock);
  long ran = ctx->inject_mask ? ctx->inject_ops : 0;
  ctx->inject_mask = n > 0 ? mask : 0;
  ctx->inject_countdown = n;
  ctx->inject_ops = 0;
  pthread_mutex_unlock(&ctx->lock);
  return ran;
}

int fcl__injected(fcl_context *ctx, unsigned kind) {
  if (!ctx || !(ctx->inject_mask & kind)) return 0;
  pthread_mutex_lock(&ctx->lock);
  int fail = 0;
  if (ctx->inject_mask & kind) {
    ctx->inject_ops++;
    fail = --ctx->inject_countdown == 0;
  }
  pthread_mutex_unlock(&ctx->lock);
  return fail;
}

void *fcl__malloc(fcl_context *ctx, size_t bytes) {
  if (fcl__injected(ctx, FCL_INJECT_HOST_ALLOC)) return NULL;
  return malloc(bytes ? bytes : 1);
}

void *fcl__calloc(fcl_context *ctx, size_t count, size_t size) {
  if (fcl__injected(ctx, FCL_INJECT_HOST_ALLOC)) return NULL;
  return calloc(count ? count : 1, size ? size : 1);
}

void fcl__free(void *p) { free(p); }

cl_mem fcl__buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes,
                   const char *what, fcl_status *status) {
  cl_int err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
  cl_mem mem = NULL;
  if (!fcl__injected(ctx, FCL_INJECT_DEVICE_ALLOC))
    mem = clCreateBuffer(ctx->cl, flags, bytes, NULL, &err);
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
  *status = FCL_SUCCESS;
  return mem;
}

void fcl__release_mem(cl_mem *mem) {
  if (*mem) clReleaseMemObject(*mem);
  *mem = NULL;
}

fcl_status fcl__launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                       cl_uint dims, const size_t *global, const size_t *local) {
  cl_int err = CL_OUT_OF_RESOURCES;
  if (!fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local,
                                 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return fcl__fail(ctx,
                     err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                             err == CL_OUT_OF_HOST_MEMORY
                         ? FCL_ERROR_OUT_OF_MEMORY
                         : FCL_ERROR_OPENCL,
                     "launching %s (global %zu x %zu x %zu, local %zu) failed: "
                     "%s (%d)",
                     name, global[0], dims > 1 ? global[1] : 1,
                     dims > 2 ? global[2] : 1, local ? local[0] : 0,
                     fcl__cl_error_name(err), (int)err);
  return FCL_SUCCESS;
}

fcl_status fcl__set_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                         const fcl__arg *args, cl_uint count) {
  for (cl_uint i = 0; i < count; ++i) {
    cl_int err = clSetKernelArg(kernel, i, args[i].size, args[i].value);
    if (err != CL_SUCCESS)
      return fcl__fail(ctx, FCL_ERROR_OPENCL,
                       "setting argument %u of %s failed: %s (%d)", i, name,
                       fcl__cl_error_name(err), (int)err);
  }
  return FCL_SUCCESS;
}
