/*
 * peaks.cl — two kernels that measure what a device can do at best: a copy
 * (bandwidth ceiling of a roofline) and independent fp32 FMA chains
 * (compute ceiling). Nothing here touches attention.
 */

#ifndef FMA_CHAINS
#define FMA_CHAINS 4    // independent vector chains per work-item
#endif
#ifndef FMA_WIDTH
#define FMA_WIDTH 8     // lanes of a chain: 8 or 16 (an AVX-512 register)
#endif
#if FMA_WIDTH == 16
typedef float16 fma_t;
#define FMA_HALVES(v) ((v).lo + (v).hi)
#elif FMA_WIDTH == 8
typedef float8 fma_t;
#define FMA_HALVES(v) (v)
#else
#error "FMA_WIDTH must be 8 or 16"
#endif

__kernel void peak_copy(__global const float4 *src, __global float4 *dst,
                        const ulong n4) {
  for (size_t i = get_global_id(0); i < n4; i += get_global_size(0)) dst[i] = src[i];
}

/* Vector chains: explicit SIMD for CPUs, whose OpenCL compilers vectorise
 * across work-items only when the kernel has no inner loop (there a chain
 * fills a vector register, and enough chains cover the FMA latency of
 * every port); on GPUs they are simply independent scalar chains that hide
 * the FMA latency. */
__kernel void peak_fma(__global float *out, const int iterations, const float a,
                       const float b) {
  fma_t x[FMA_CHAINS];
#pragma unroll
  for (int c = 0; c < FMA_CHAINS; ++c)
    x[c] = (fma_t)((float)(get_global_id(0) + c) * 1e-6f);
  for (int i = 0; i < iterations; ++i) {
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; ++c) x[c] = fma(x[c], (fma_t)(a), (fma_t)(b));
  }
  fma_t all = (fma_t)(0.0f);
#pragma unroll
  for (int c = 0; c < FMA_CHAINS; ++c) all += x[c];
  const float8 sum = FMA_HALVES(all);
  out[get_global_id(0)] = sum.s0 + sum.s1 + sum.s2 + sum.s3 + sum.s4 + sum.s5 + sum.s6 +
                          sum.s7;  // keeps the chains alive
}
