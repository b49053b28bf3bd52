/*
 * peaks.cl — two kernels that measure what a device can do at best: a copy
 * (bandwidth ceiling of a roofline) and independent fp32 FMA chains
 * (compute ceiling). Nothing here touches attention.
 */

#ifndef FMA_CHAINS
#define FMA_CHAINS 4    // independent float8 chains per work-item (32 lanes)
#endif

__kernel void peak_copy(__global const float4 *src, __global float4 *dst,
                        const ulong n4) {
  for (size_t i = get_global_id(0); i < n4; i += get_global_size(0)) dst[i] = src[i];
}

/* float8 chains: explicit SIMD for CPUs, whose OpenCL compilers vectorise
 * across work-items only when the kernel has no inner loop; on GPUs they
 * are simply 32 independent scalar chains that hide the FMA latency. */
__kernel void peak_fma(__global float *out, const int iterations, const float a,
                       const float b) {
  float8 x[FMA_CHAINS];
#pragma unroll
  for (int c = 0; c < FMA_CHAINS; ++c)
    x[c] = (float8)((float)(get_global_id(0) + c) * 1e-6f);
  for (int i = 0; i < iterations; ++i) {
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; ++c) x[c] = fma(x[c], (float8)(a), (float8)(b));
  }
  float8 sum = (float8)(0.0f);
#pragma unroll
  for (int c = 0; c < FMA_CHAINS; ++c) sum += x[c];
  out[get_global_id(0)] = sum.s0 + sum.s1 + sum.s2 + sum.s3 + sum.s4 + sum.s5 + sum.s6 +
                          sum.s7;  // keeps the chains alive
}
