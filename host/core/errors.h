/*
 * errors.h — errors as values (status.c): the context's last error per thread, the FCL_RETURN_IF family.
 */
#ifndef FCL_ERRORS_H
#define FCL_ERRORS_H

#include "common.h"
#include "context.h"

/** Records a formatted detail as the calling thread's last error on the
 *  context and returns `status`. ctx may be NULL (the message is then
 *  dropped). */
fcl_status fcl__fail(fcl_context *ctx, fcl_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/** Forgets the calling thread's last error on the context. */
void fcl__clear_error(fcl_context *ctx);

/** Frees every thread's error text; for fcl_context_release. */
void fcl__errors_release(fcl_context *ctx);

/** Formats a reason into a caller's buffer (the context-free functions'
 *  way of explaining a failure); NULL or zero-length buffers are skipped. */
void fcl__say(char *why, size_t why_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/** Records "what failed: CL_NAME (code)" and maps the code to a status:
 *  allocation failures become FCL_ERROR_OUT_OF_MEMORY, the rest
 *  FCL_ERROR_OPENCL. */
fcl_status fcl__cl_fail(fcl_context *ctx, cl_int err, const char *what);

/** @return the name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES". */
const char *fcl__cl_error_name(cl_int err);

#define FCL_RETURN_IF(ctx, cond, status, ...)        \
  do {                                               \
    if (cond) return fcl__fail((ctx), (status), __VA_ARGS__); \
  } while (0)

/** In the context-free checks, which explain a failure in why[why_len]:
 *  formats the reason and returns `status` when `cond` holds. */
#define FCL_WHY_IF(cond, status, ...)           \
  do {                                          \
    if (cond) {                                 \
      fcl__say(why, why_len, __VA_ARGS__);      \
      return (status);                          \
    }                                           \
  } while (0)
/** Each of n named sizes at least 1 and at most INT_MAX (kernels index
 *  with 32-bit ints): FCL_ERROR_INVALID_SHAPE naming the first that is
 *  not. */
fcl_status fcl__check_sizes(const char *const names[], const size_t values[], size_t n,
                            char *why, size_t why_len);
#define FCL_FORWARD_IF(expr)                         \
  do {                                               \
    fcl_status fcl_s_ = (expr);                      \
    if (fcl_s_ != FCL_SUCCESS) return fcl_s_;        \
  } while (0)

#define FCL_CL_RETURN_IF(ctx, err, what)             \
  do {                                               \
    cl_int fcl_e_ = (err);                           \
    if (fcl_e_ != CL_SUCCESS) return fcl__cl_fail((ctx), fcl_e_, (what)); \
  } while (0)

#endif
