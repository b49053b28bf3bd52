/*
 * convert.c — whole tensors between a 16-bit storage type and float on the
 * device (convert.cl): how the naive algorithm runs bf16 storage through
 * its f32 path, and what the tests check the kernels' conversions with.
 */
#include "errors.h"
#include "resources.h"
#include "program.h"
#include "calls.h"

/* Work-items per work-group of the conversion kernels. */
#define CONVERT_WG 256u

fcl_status fcl__convert(fcl_context *ctx, fcl_dtype dtype, int to_f32, cl_mem from,
                        cl_mem to, size_t n, unsigned width, cl_mem io_counter) {
  FCL_RETURN_IF(ctx, dtype != FCL_DTYPE_F16 && dtype != FCL_DTYPE_BF16,
                FCL_ERROR_INVALID_ARGUMENT, "converting %s: only f16 and bf16 convert",
                fcl_dtype_name(dtype));
  FCL_RETURN_IF(ctx, width != 1 && width != 4, FCL_ERROR_INVALID_ARGUMENT,
                "conversion width %u; it must be 1 or 4", width);
  if (n == 0) return FCL_SUCCESS;
  const char *name = to_f32 ? "convert_to_f32" : "convert_from_f32";
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", (long)dtype);
  fcl__options_define(&opts, "CONVERT_WIDTH", (long)width);
  fcl__options_count_io(&opts, io_counter);
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_CONVERT, &opts, name, &kernel));
  const cl_ulong count = n;
  fcl__arg args[] = {FCL_ARG(from), FCL_ARG(to), FCL_ARG(count), FCL_ARG(io_counter)};
  fcl_status status = fcl__set_args(ctx, kernel, name, args, io_counter ? 4 : 3);
  if (status == FCL_SUCCESS)
    status = fcl__launch_items(ctx, kernel, name, (n + width - 1) / width, CONVERT_WG);
  fcl__kernel_return(ctx, &kernel);
  return status;
}
