/*
 * wgmma_probe.cl — one 64 x N x (16 KSTEPS) product, D = A B, with Hopper's
 * warpgroup MMA (wgmma.mma_async m64nNk16, A from registers, B from a
 * shared-memory descriptor), for host/model/wgmma_probe.c: whether the
 * fragment and descriptor layouts below are the hardware's, and how fast
 * a loop of them runs. Compiled after common.cl and mma.cl, 16-bit types.
 *
 * Paths (WGMMA_PATH, written to path[0] so the host knows which ran):
 *   2  FCL_WGMMA 1: the instructions, each an inline-asm string that is a
 *      PTX comment (WGMMA_MARK); NVIDIA's compiler emits sm_90 PTX, and
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
 *     adjacent in k B_LBO bytes apart (the descriptor's leading byte
 *     offset), those adjacent in n B_SBO apart (its stride byte offset).
 */

#ifndef WGMMA_N
#define WGMMA_N 64          // 8, 16, 32, 64 or 128
#endif
#ifndef KSTEPS
#define KSTEPS 1            // k-steps of 16
#endif
#ifndef FCL_WGMMA
#define FCL_WGMMA 0
#endif
#ifndef WGMMA_EMULATE
#define WGMMA_EMULATE 0
#endif
#if FCL_WGMMA && !FCL_NVIDIA_PTX
#error "FCL_WGMMA needs NVIDIA's compiler (its inline PTX)"
#endif
#if WGMMA_EMULATE && !MMA_EMULATE
#error "WGMMA_EMULATE needs MMA_EMULATE (its conversions)"
#endif
#define WGMMA_K (16 * KSTEPS)
#define WGMMA_PATH (FCL_WGMMA ? 2 : WGMMA_EMULATE ? 1 : 0)

/* What starts a Hopper-only instruction (host/run/ptx.h, FCL_PTX_MARK). */
#define WGMMA_MARK "//@@ "
#define WGMMA_STR_(x) #x
#define WGMMA_STR(x) WGMMA_STR_(x)

#define B_LBO 128             // k-adjacent core matrices: the two of a k-step together
#define B_SBO (WGMMA_K * 16)  // n-adjacent: after all of a column group's k

/* B[k][n]'s byte offset in the tile. */
inline uint b_offset(int k, int n) {
  return (n >> 3) * B_SBO + (k >> 3) * B_LBO + (n & 7) * 16 + (k & 7) * 2;
}

/* The descriptor of the 16 x N tile of k-step s: start address (shared
 * memory's, the __local pointer's 32-bit value) >> 4, the two offsets
 * >> 4, swizzle mode 0 (none). */
inline ulong wgmma_descriptor(__local const ushort *tile, int s) {
  const uint start = (uint)(size_t)tile + s * 2 * B_LBO;
  return (ulong)((start & 0x3ffffu) >> 4) | ((ulong)(B_LBO >> 4) << 16) |
         ((ulong)(B_SBO >> 4) << 32);
}

#if FCL_WGMMA
/* The accumulators' operands: %0 .. %(N/2 - 1), then A's four and the
 * descriptor. */
#define WG_D8 "%0, %1, %2, %3"
#define WG_D16 WG_D8 ", %4, %5, %6, %7"
#define WG_D32 WG_D16 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define WG_D64 WG_D32 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, " \
                      "%29, %30, %31"
#define WG_D128 WG_D64 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
                       "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "     \
                       "%58, %59, %60, %61, %62, %63"
#define WG_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_F8(d) WG_F4(d, 0)
#define WG_F16(d) WG_F8(d), WG_F4(d, 4)
#define WG_F32(d) WG_F16(d), WG_F4(d, 8), WG_F4(d, 12)
#define WG_F64(d) WG_F32(d), WG_F4(d, 16), WG_F4(d, 20), WG_F4(d, 24), WG_F4(d, 28)
#define WG_F128(d) WG_F64(d), WG_F4(d, 32), WG_F4(d, 36), WG_F4(d, 40), WG_F4(d, 44), \
                   WG_F4(d, 48), WG_F4(d, 52), WG_F4(d, 56), WG_F4(d, 60)
#if WGMMA_N == 8
#define WG_D WG_D8
#define WG_OUT WG_F8
#define WG_AB "{%4, %5, %6, %7}, %8"
#elif WGMMA_N == 16
#define WG_D WG_D16
#define WG_OUT WG_F16
#define WG_AB "{%8, %9, %10, %11}, %12"
#elif WGMMA_N == 32
#define WG_D WG_D32
#define WG_OUT WG_F32
#define WG_AB "{%16, %17, %18, %19}, %20"
#elif WGMMA_N == 64
#define WG_D WG_D64
#define WG_OUT WG_F64
#define WG_AB "{%32, %33, %34, %35}, %36"
#elif WGMMA_N == 128
#define WG_D WG_D128
#define WG_OUT WG_F128
#define WG_AB "{%64, %65, %66, %67}, %68"
#else
#error "WGMMA_N: 8, 16, 32, 64 or 128"
#endif

/* Ordinary stores to local memory made visible to the wgmma's reads. */
inline void wgmma_fence_stores(void) {
  asm volatile(WGMMA_MARK "fence.proxy.async.shared::cta;" ::: "memory");
}
inline void wgmma_fence(void) { asm volatile(WGMMA_MARK "wgmma.fence.sync.aligned;" ::: "memory"); }
inline void wgmma_commit(void) {
  asm volatile(WGMMA_MARK "wgmma.commit_group.sync.aligned;" ::: "memory");
}
inline void wgmma_wait_all(void) {
  asm volatile(WGMMA_MARK "wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
/* d += a b: scale-d 1 (accumulate), A and B unscaled, B K-major. */
inline void wgmma(float *d, const uint *a, ulong desc) {
  asm volatile(WGMMA_MARK "wgmma.mma_async.sync.aligned.m64n" WGMMA_STR(WGMMA_N) "k16.f32."
               MMA_TYPE "." MMA_TYPE " {" WG_D "}, " WG_AB ", 1, 1, 1, 0;"
               : WG_OUT(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
               : "memory");
}

#elif WGMMA_EMULATE
/* d += a b as the instruction would compute it from the same operands:
 * the warpgroup's A fragments through local memory, B through the
 * descriptor (its start relative to the tile's, as a CPU's pointers do
 * not fit its 18 bits). */
inline void wgmma_emulated(float *d, const uint *a, ulong desc, __local const ushort *tile,
                           __local float *a_rows) {
  const int lid = get_local_id(0), w = lid >> 5, g = (lid & 31) >> 2, t = lid & 3;
  for (int i = 0; i < 4; ++i)
    for (int h = 0; h < 2; ++h)
      a_rows[(16 * w + g + 8 * (i & 1)) * 16 + 2 * t + h + 8 * (i >> 1)] =
          from_bits((ushort)(a[i] >> (16 * h)));
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint base = (((uint)(size_t)tile & 0x3ffffu) >> 4);
  const uint start = (((uint)desc & 0x3fffu) - base) & 0x3fffu;
  const uint lbo = (uint)(desc >> 16) & 0x3fffu, sbo = (uint)(desc >> 32) & 0x3fffu;
  __local const uchar *b = (__local const uchar *)tile + 16 * start;
  for (int i = 0; i < WGMMA_N / 2; ++i) {
    const int row = 16 * w + g + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * t + (i & 1);
    exact_t acc = d[i];
    for (int k = 0; k < 16; ++k) {
      const uint at = (n >> 3) * 16 * sbo + (k >> 3) * 16 * lbo + (n & 7) * 16 + (k & 7) * 2;
      acc += (exact_t)a_rows[row * 16 + k] * from_bits(*(__local const ushort *)(b + at));
    }
    d[i] = TRUNCATE(acc);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void wgmma_probe(__global const ushort *a,   // [64][WGMMA_K], the storage type's bits
                 __global const ushort *bt,  // [WGMMA_N][WGMMA_K]: B transposed, k fastest
                 __global float *d,          // [64][WGMMA_N] = A B, times reps
                 __global int *path,         // [1]: WGMMA_PATH
                 const uint reps) {          // products summed (a timing loop)
  __local ushort tile[WGMMA_N * WGMMA_K] __attribute__((aligned(16)));
#if WGMMA_EMULATE && !FCL_WGMMA
  __local float a_rows[64 * 16];
#elif !FCL_WGMMA
  MMA_DECLARE_PRODUCT_SCRATCH(4);
#endif
  const int lid = get_local_id(0), w = lid >> 5, g = (lid & 31) >> 2, t = lid & 3;
  for (int e = lid; e < WGMMA_N * WGMMA_K; e += 128)
    tile[b_offset(e % WGMMA_K, e / WGMMA_K) / 2] = bt[e];
#if FCL_WGMMA
  wgmma_fence_stores();
#endif
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
    desc[s] = wgmma_descriptor(tile, s);
#if FCL_WGMMA
    asm volatile("" : "+l"(desc[s]));
#endif
  }

  for (uint r = 0; r < reps; ++r) {
#if FCL_WGMMA
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) wgmma(acc, af[s], desc[s]);
    wgmma_commit();
    wgmma_wait_all();
#elif WGMMA_EMULATE
    for (int s = 0; s < KSTEPS; ++s)
      wgmma_emulated(acc, af[s], desc[s], tile, a_rows);
#else
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s)
#pragma unroll
      for (int j = 0; j < WGMMA_N / 8; ++j) {
        const int k = 16 * s + 2 * t, n = 8 * j + g;
        const uint b[2] = {*(__local const uint *)(tile + b_offset(k, n) / 2),
                           *(__local const uint *)(tile + b_offset(k + 8, n) / 2)};
        mma_16bit(acc + 4 * j, af[s], b MMA_ARGS);
      }
#endif
  }
#pragma unroll
  for (int i = 0; i < WGMMA_N / 2; ++i)
    d[(16 * w + g + 8 * ((i >> 1) & 1)) * WGMMA_N + 8 * (i >> 2) + 2 * t + (i & 1)] = acc[i];
  if (lid == 0) path[0] = WGMMA_PATH;
}
