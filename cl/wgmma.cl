/*
 * wgmma.cl — Hopper's warpgroup MMA (wgmma.mma_async m64nNk16, A from
 * registers, B from a shared-memory descriptor) for the kernels that use
 * it, N 8 to 128, with its two stand-ins: the same operands emulated
 * through local memory (WGMMA_EMULATE, any device) and mma.sync m16n8k16
 * on the same local tile (neither: the sm_90a stage's fallback build).
 * Compiled after mma.cl (16-bit types); the layouts are those the probe
 * (wgmma_probe.cl) checked exactly on the H100, docs/design.md.
 *
 * A warpgroup is the work-group's 128 work-items; warp w holds rows
 * 16 w .. 16 w + 15 of the 64, as mma.sync m16n8k16's A and C fragments
 * (a C fragment per 8 columns: d[4 j + i] is mma.sync's c[i] of columns
 * 8 j ..). B is a K-major local tile without swizzle: core matrices of 8
 * columns n by 8 k (16 bytes a column), those adjacent in k WG_LBO bytes
 * apart, those adjacent in n `sbo` bytes apart (16 times the tile's k).
 */

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
#if FCL_DTYPE == 0
#error "wgmma.cl: 16-bit types only"
#endif

/* What starts a Hopper-only instruction (host/run/ptx.h, FCL_PTX_MARK). */
#define WG_MARK "//@@ "
#define WG_LBO 128  // k-adjacent core matrices: the two of a k-step together

/* B[k][n]'s byte offset in a tile whose n-adjacent core matrices are sbo
 * bytes apart. */
inline uint wg_b_offset(int k, int n, uint sbo) {
  return (n >> 3) * sbo + (k >> 3) * WG_LBO + (n & 7) * 16 + (k & 7) * 2;
}

/* The descriptor of a tile's first k-step: start address (shared memory's,
 * the __local pointer's 32-bit value) >> 4, the offsets >> 4, no swizzle.
 * k-step s's is it plus WG_STEP s. */
inline ulong wg_descriptor(__local const ushort *tile, uint sbo) {
  return (ulong)((((uint)(size_t)tile) & 0x3ffffu) >> 4) | ((ulong)(WG_LBO >> 4) << 16) |
         ((ulong)(sbo >> 4) << 32);
}
#define WG_STEP ((2 * WG_LBO) >> 4)

#if FCL_WGMMA
/* The accumulators' operands, %0 .. %(N/2 - 1), then A's four and the
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

/* Ordinary stores to local memory made visible to the wgmma's reads. */
inline void wg_fence_stores(void) {
  asm volatile(WG_MARK "fence.proxy.async.shared::cta;" ::: "memory");
}
inline void wg_fence(void) { asm volatile(WG_MARK "wgmma.fence.sync.aligned;" ::: "memory"); }
inline void wg_commit(void) {
  asm volatile(WG_MARK "wgmma.commit_group.sync.aligned;" ::: "memory");
}
inline void wg_wait_all(void) {
  asm volatile(WG_MARK "wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
/* wgmma_n<N>(d, a, desc): d (64 x N) += a b, scale-d 1 (accumulate), A
 * and B unscaled, B K-major; `ab` names A's four operands and the
 * descriptor. */
#define WG_DEFINE(n, dregs, outs, ab)                                                    \
  inline void wgmma_n##n(float *d, const uint *a, ulong desc) {                          \
    asm volatile(WG_MARK "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." MMA_TYPE "."  \
                 MMA_TYPE " {" dregs "}, " ab ", 1, 1, 1, 0;"                            \
                 : outs(d)                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)                 \
                 : "memory");                                                            \
  }
WG_DEFINE(8, WG_D8, WG_F8, "{%4, %5, %6, %7}, %8")
WG_DEFINE(16, WG_D16, WG_F16, "{%8, %9, %10, %11}, %12")
WG_DEFINE(32, WG_D32, WG_F32, "{%16, %17, %18, %19}, %20")
WG_DEFINE(64, WG_D64, WG_F64, "{%32, %33, %34, %35}, %36")
WG_DEFINE(128, WG_D128, WG_F128, "{%64, %65, %66, %67}, %68")
/* WG_MMA(n, d, a, desc, tile, scratch): d (64 x n) += a b on whichever
 * path is built (tile and scratch: the emulations'). */
#define WG_MMA_(n, d, a, desc) wgmma_n##n(d, a, desc)
#define WG_MMA(n, d, a, desc, tile, scratch) WG_MMA_(n, d, a, desc)  // n expanded first
#define WG_SCRATCH_DECLARE MMA_DECLARE_SCRATCH(4)
#define WG_FENCE_STORES() wg_fence_stores()
#define WG_BEGIN() wg_fence()
#define WG_END() (wg_commit(), wg_wait_all())

#else
#if WGMMA_EMULATE
/* d (64 x n) += a b as the instruction computes it from the same operands:
 * the warpgroup's A fragments through local memory, B through the
 * descriptor (its start relative to the tile's, as a CPU's pointers do
 * not fit its 18 bits). */
inline void wgmma_emulated(float *d, const uint *a, ulong desc, const int n_cols,
                           __local const ushort *tile, __local float *a_rows) {
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
  for (int i = 0; i < n_cols / 2; ++i) {
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
#define WG_MMA(n, d, a, desc, tile, scratch) wgmma_emulated(d, a, desc, n, tile, scratch)
/* the A rows, and the quads' scratch (no mma.sync products) */
#define WG_SCRATCH_DECLARE                                       \
  __local float wg_a_rows[64 * 16], quad[32 * 4];                \
  __local float *const mma_a = 0, *const mma_b = 0
#else
/* The fallback: each warp its 16 rows on mma.sync m16n8k16, B's fragment
 * words read from the same tile (k 2t and 2t + 1 are adjacent in it). */
inline void wgmma_mma_sync(float *d, const uint *a, ulong desc, const int n_cols,
                           __local const ushort *tile MMA_SCRATCH) {
  const int lid = get_local_id(0), g = (lid & 31) >> 2, t = lid & 3;
  const uint base = (((uint)(size_t)tile & 0x3ffffu) >> 4);
  const uint start = (((uint)desc & 0x3fffu) - base) & 0x3fffu;
  const uint sbo = 16 * ((uint)(desc >> 32) & 0x3fffu);
  __local const uchar *b = (__local const uchar *)tile + 16 * start;
  UNROLL for (int j = 0; j < n_cols / 8; ++j) {
    const uint bw[2] = {*(__local const uint *)(b + wg_b_offset(2 * t, 8 * j + g, sbo)),
                        *(__local const uint *)(b + wg_b_offset(2 * t + 8, 8 * j + g, sbo))};
    mma_16bit(d + 4 * j, a, bw MMA_ARGS);
  }
}
#define WG_MMA(n, d, a, desc, tile, scratch) wgmma_mma_sync(d, a, desc, n, tile MMA_ARGS)
#define WG_SCRATCH_DECLARE MMA_DECLARE_SCRATCH(4)
#endif
#define WG_FENCE_STORES() ((void)0)
#define WG_BEGIN() ((void)0)
#define WG_END() ((void)0)
#endif
