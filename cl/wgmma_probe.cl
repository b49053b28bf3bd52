/*
 * wgmma_probe.cl — one 64 x N x (16 KSTEPS) product, D = A B, with Hopper's
 * warpgroup MMA (wgmma.mma_async m64nNk16, A from registers, B from a
 * shared-memory descriptor), for host/model/wgmma_probe.c: whether the
 * fragment and descriptor layouts below are the hardware's, and how fast
 * a loop of them runs. Compiled after common.cl, mma.cl and wgmma.cl (the
 * instructions and their two stand-ins, shared with the kernels), 16-bit
 * types.
 *
 * Paths (WGMMA_PATH, written to path[0] so the host knows which ran):
 *   2  FCL_WGMMA 1: the instructions, each an inline-asm string that is a
 *      PTX comment (WG_MARK); NVIDIA's compiler emits sm_90 PTX, and
 *      the library's sm_90a stage (host/run/sm90a.c) removes the markers
 *      and rebuilds. Where that stage refuses, the program is built with
 *      FCL_WGMMA 0 instead.
 *   1  WGMMA_EMULATE 1: the same fragments and descriptor, read back by an
 *      emulation through local memory (any device): the layouts checked
 *      without Hopper.
 *   0  neither: mma.sync m16n8k16 (mma.cl, emulated off NVIDIA) on the
 *      same local tile, each warp its 16 rows.
 *
 * Layouts (PTX ISA, "Register fragments and shared memory matrix layouts"
 * for wgmma m64nNk16), warp w of the warpgroup, lane 4 g + t:
 *   - A, per warp 16 rows as mma.sync m16n8k16's A: a[0..3] at rows
 *     16w + g, + 8, + 0, + 8 and columns 2t..2t+1, same, 2t+8..2t+9, same;
 *   - D, N/2 floats: d[i] at row 16w + g + 8 ((i >> 1) & 1), column
 *     8 (i >> 2) + 2t + (i & 1);
 *   - B in local memory, K-major without swizzle: core matrices of 8
 *     columns n by 8 k (16 bytes a column, 128 contiguous bytes), those
 *     adjacent in k WG_LBO bytes apart (the descriptor's leading byte
 *     offset), those adjacent in n B_SBO apart (its stride byte offset);
 *   - with TRANS_B 1, B MN-major without swizzle (imm-trans-b 1): core
 *     matrices of 8 k by 8 columns n (16 bytes a k), those adjacent in n
 *     WG_LBO bytes apart (the stride byte offset), those adjacent in k
 *     B_LBO_T apart (the leading byte offset): at N 16 and more the two
 *     differ, so that a swap of their meanings shows.
 */

#ifndef WGMMA_N
#define WGMMA_N 64          // 8, 16, 32, 64 or 128
#endif
#ifndef KSTEPS
#define KSTEPS 1            // k-steps of 16
#endif
#define WGMMA_K (16 * KSTEPS)
#define WGMMA_PATH (FCL_WGMMA ? 2 : WGMMA_EMULATE ? 1 : 0)
#ifndef TRANS_B
#define TRANS_B 0           // B MN-major
#endif
#define B_SBO (WGMMA_K * 16)  // n-adjacent core matrices: after all of a column group's k
#define B_LBO_T (WGMMA_N * 16)  // MN-major, k-adjacent: after all of a row group's n
#if TRANS_B
#define B_AT(k, n) wg_bt_offset(k, n, B_LBO_T)
#define B_DESC(s) (wg_descriptor_t(tile, B_LBO_T) + (s) * WG_STEP_T(B_LBO_T))
#define B_MMA WG_MMA_T
#else
#define B_AT(k, n) wg_b_offset(k, n, B_SBO)
#define B_DESC(s) (wg_descriptor(tile, B_SBO) + (s) * WG_STEP)
#define B_MMA WG_MMA
#endif

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void wgmma_probe(__global const ushort *a,   // [64][WGMMA_K], the storage type's bits
                 __global const ushort *bt,  // [WGMMA_N][WGMMA_K]: B transposed, k fastest
                 __global float *d,          // [64][WGMMA_N] = A B, times reps
                 __global int *path,         // [1]: WGMMA_PATH
                 const uint reps) {          // products summed (a timing loop)
  __local ushort tile[WGMMA_N * WGMMA_K] __attribute__((aligned(16)));
  WG_SCRATCH_DECLARE;
  const int lid = get_local_id(0), w = lid >> 5, g = (lid & 31) >> 2, t = lid & 3;
  for (int e = lid; e < WGMMA_N * WGMMA_K; e += 128)
    tile[B_AT(e % WGMMA_K, e / WGMMA_K) / 2] = bt[e];
  WG_FENCE_STORES();
  barrier(CLK_LOCAL_MEM_FENCE);

  /* every loop over the fragments unrolled: they stay in registers */
  uint af[KSTEPS][4];
#pragma unroll
  for (int s = 0; s < KSTEPS; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * w + g + 8 * (i & 1), k = 16 * s + 2 * t + 8 * (i >> 1);
      af[s][i] = (uint)a[row * WGMMA_K + k] | ((uint)a[row * WGMMA_K + k + 1] << 16);
    }
  float acc[WGMMA_N / 2];
#pragma unroll
  for (int i = 0; i < WGMMA_N / 2; ++i) acc[i] = 0.0f;
  /* computed before the loop, and made opaque so that the compiler does
   * not recompute them between a fence and its wait */
  ulong desc[KSTEPS];
#pragma unroll
  for (int s = 0; s < KSTEPS; ++s) {
    desc[s] = B_DESC(s);
#if FCL_WGMMA
    asm volatile("" : "+l"(desc[s]));
#endif
  }

  for (uint r = 0; r < reps; ++r) {
    WG_BEGIN();
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) B_MMA(WGMMA_N, acc, af[s], desc[s], tile, wg_a_rows);
    WG_END();
  }
#pragma unroll
  for (int i = 0; i < WGMMA_N / 2; ++i)
    d[(16 * w + g + 8 * ((i >> 1) & 1)) * WGMMA_N + 8 * (i >> 2) + 2 * t + (i & 1)] = acc[i];
  if (lid == 0) path[0] = WGMMA_PATH;
}
