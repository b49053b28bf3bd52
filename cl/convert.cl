/*
 * convert.cl — tensors between the storage type and float, through the
 * same LOAD and STORE macros as every other kernel (common.cl): the naive
 * algorithm runs bf16 through its f32 path with them (naive.c), and the
 * tests run every 16-bit pattern through them to check the conversions.
 *
 *   convert_to_f32    y[i] = float(x[i])            (exact for f16 and bf16)
 *   convert_from_f32  y[i] = x[i] rounded to nearest even
 *
 * Each work-item converts CONVERT_WIDTH consecutive elements: 4 with the
 * vector macros (vload_half4 and friends) and a scalar tail, or 1 with the
 * scalar macros only.
 */

#ifndef CONVERT_WIDTH
#define CONVERT_WIDTH 4  // elements per work-item: 4 (vector access) or 1
#endif
#if CONVERT_WIDTH != 1 && CONVERT_WIDTH != 4
#error "CONVERT_WIDTH must be 1 or 4"
#endif

__kernel void convert_to_f32(__global const store_t *x,  // [n], storage type
                             __global float *y,          // [n]
                             const ulong n
                             FCL_IO_PARAM) {
  FCL_IO_INIT;
  const ulong i = (ulong)get_global_id(0) * CONVERT_WIDTH;
#if CONVERT_WIDTH == 4
  if (i + 4 <= n) {
    const float4 v = LOAD4(x, i);
    STORE4_F32(y, i, v);
  } else {
    for (ulong j = i; j < n; ++j) {
      const float v = LOAD1(x, j);
      STORE_F32(y, j, v);
    }
  }
#else
  if (i < n) {
    const float v = LOAD1(x, i);
    STORE_F32(y, i, v);
  }
#endif
  FCL_IO_COMMIT();
}

__kernel void convert_from_f32(__global const float *x,  // [n]
                               __global store_t *y,      // [n], storage type
                               const ulong n
                               FCL_IO_PARAM) {
  FCL_IO_INIT;
  const ulong i = (ulong)get_global_id(0) * CONVERT_WIDTH;
#if CONVERT_WIDTH == 4
  if (i + 4 <= n) {
    const float4 v = LOAD4_F32(x, i);
    STORE4(y, i, v);
  } else {
    for (ulong j = i; j < n; ++j) {
      const float v = LOAD_F32(x, j);
      STORE1(y, j, v);
    }
  }
#else
  if (i < n) {
    const float v = LOAD_F32(x, i);
    STORE1(y, i, v);
  }
#endif
  FCL_IO_COMMIT();
}
