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

/* y[j] = x[j] for this work-item's elements below n. The loads and stores
 * passed in decide which side is the storage type. */
#if CONVERT_WIDTH == 4
#define CONVERT_ITEMS(load4, load1, store4, store1) \
  do {                                               \
    const ulong i = (ulong)get_global_id(0) * 4;     \
    if (i + 4 <= n) {                                \
      const float4 v = load4(x, i);                  \
      store4(y, i, v);                               \
    } else {                                         \
      for (ulong j = i; j < n; ++j) {                \
        const float v = load1(x, j);                 \
        store1(y, j, v);                             \
      }                                              \
    }                                                \
  } while (0)
#else
#define CONVERT_ITEMS(load4, load1, store4, store1) \
  do {                                               \
    const ulong i = get_global_id(0);                \
    if (i < n) {                                     \
      const float v = load1(x, i);                   \
      store1(y, i, v);                               \
    }                                                \
  } while (0)
#endif

__kernel void convert_to_f32(__global const store_t *x,  // [n], storage type
                             __global float *y,          // [n]
                             const ulong n
                             FCL_IO_PARAM) {
  FCL_IO_INIT;
  CONVERT_ITEMS(LOAD4, LOAD1, STORE4_F32, STORE_F32);
  FCL_IO_COMMIT();
}

__kernel void convert_from_f32(__global const float *x,  // [n]
                               __global store_t *y,      // [n], storage type
                               const ulong n
                               FCL_IO_PARAM) {
  FCL_IO_INIT;
  CONVERT_ITEMS(LOAD4_F32, LOAD_F32, STORE4, STORE1);
  FCL_IO_COMMIT();
}
