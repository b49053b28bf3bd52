/*
 * mma_probe.cl — one 16 x 8 x 8 product through mma.cl's f32 instructions,
 * for tests/test_mma.c: what the kernels assume of the operands they hand
 * the tensor cores, checked on the device that runs them (the emulation
 * models the same assumptions, so that elsewhere it checks the model).
 * Compiled after common.cl and mma.cl, f32 storage.
 */

#ifndef SPLIT
#define SPLIT 0   // 0: a and b go to mma_tf32 as given; 1: split_tf32, mma_3xtf32
#endif

__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void mma_probe(__global const float *a,  // [16][8], row-major
               __global const float *b,  // [8][8], b[k][n]
               __global float *c) {      // [16][8] = a b
  MMA_DECLARE_PRODUCT_SCRATCH(1);
  const int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  float a_frag[4], b_frag[2], acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < 4; ++i) a_frag[i] = a[(g + 8 * (i & 1)) * 8 + t + 4 * (i >> 1)];
  for (int i = 0; i < 2; ++i) b_frag[i] = b[(t + 4 * i) * 8 + g];
#if SPLIT
  uint a_big[4], a_small[4], b_big[2], b_small[2];
  for (int i = 0; i < 4; ++i) split_tf32(a_frag[i], &a_big[i], &a_small[i]);
  for (int i = 0; i < 2; ++i) split_tf32(b_frag[i], &b_big[i], &b_small[i]);
  mma_3xtf32(acc, a_big, a_small, b_big, b_small MMA_ARGS);
#else
  uint a_bits[4], b_bits[2];
  for (int i = 0; i < 4; ++i) a_bits[i] = as_uint(a_frag[i]);
  for (int i = 0; i < 2; ++i) b_bits[i] = as_uint(b_frag[i]);
  mma_tf32(acc, a_bits, b_bits MMA_ARGS);
#endif
  for (int i = 0; i < 4; ++i) c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = acc[i];
}
