/*
 * wgmma.cl — Hopper's warpgroup MMA (wgmma.mma_async m64nNk16, A from
 * registers, B from a shared-memory descriptor) for the kernels that use
 * it, N 8 to 128, with its two stand-ins: the same operands emulated
 * through local memory (WGMMA_EMULATE, any device) and mma.sync m16n8k16
 * on the same local tile (neither: the sm_90a stage's fallback build).
 * Compiled after mma.cl (16-bit types); the layouts are those the probe
 * (wgmma_probe.cl) checked exactly on the H100, docs/design.md.
 *
 * A warpgroup is 128 work-items of the work-group (which has WARPGROUPS
 * of them, each its own products); its warp w holds rows
 * 16 w .. 16 w + 15 of its 64, as mma.sync m16n8k16's A and C fragments
 * (a C fragment per 8 columns: d[4 j + i] is mma.sync's c[i] of columns
 * 8 j ..). B is a local tile without swizzle, made of core matrices of
 * 8 x 8 elements, 16 bytes a row, 128 contiguous bytes:
 *   - K-major (WG_MMA, imm-trans-b 0): a core matrix's rows are 8 columns
 *     n, each 8 k; those adjacent in k WG_LBO bytes apart (the leading
 *     byte offset), those adjacent in n `sbo` apart (the stride byte
 *     offset; 16 times the tile's k where the k-steps are together);
 *   - MN-major (WG_MMA_T, imm-trans-b 1, 16-bit types only): a core
 *     matrix's rows are 8 k, each 8 columns n; those adjacent in n
 *     WG_LBO bytes apart (now the stride byte offset), those adjacent in k
 *     `lbo` apart (the leading byte offset). Without swizzle both offsets
 *     keep their meaning (k-adjacent: leading, n-adjacent: stride); only
 *     the core matrix is transposed (docs/design.md).
 */

#ifndef FCL_WGMMA
#define FCL_WGMMA 0
#endif
#ifndef WGMMA_EMULATE
#define WGMMA_EMULATE 0
#endif
/* warpgroups a work-group: the emulations' scratch is theirs */
#ifndef WARPGROUPS
#define WARPGROUPS 1
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

/* ... and in an MN-major tile whose k-adjacent core matrices are lbo bytes
 * apart. */
inline uint wg_bt_offset(int k, int n, uint lbo) {
  return (k >> 3) * lbo + (n >> 3) * WG_LBO + (k & 7) * 16 + (n & 7) * 2;
}

/* A descriptor: start address (shared memory's, the __local pointer's
 * 32-bit value) >> 4, the offsets >> 4, no swizzle. */
inline ulong wg_descriptor_of(__local const ushort *tile, uint lbo, uint sbo) {
  return (ulong)((((uint)(size_t)tile) & 0x3ffffu) >> 4) | ((ulong)(lbo >> 4) << 16) |
         ((ulong)(sbo >> 4) << 32);
}
/* A K-major tile's first k-step; k-step s's is it plus WG_STEP s. */
inline ulong wg_descriptor(__local const ushort *tile, uint sbo) {
  return wg_descriptor_of(tile, WG_LBO, sbo);
}
#define WG_STEP ((2 * WG_LBO) >> 4)
/* An MN-major tile's first k-step; k-step s's is it plus WG_STEP_T(lbo) s. */
inline ulong wg_descriptor_t(__local const ushort *tile, uint lbo) {
  return wg_descriptor_of(tile, lbo, WG_LBO);
}
#define WG_STEP_T(lbo) ((2 * (lbo)) >> 4)

/* B[k][n]'s byte offset from a descriptor's start, as the instruction reads
 * it (the stand-ins below): K-major (trans 0) or MN-major (trans 1). */
inline uint wg_desc_at(ulong desc, int k, int n, int trans) {
  const uint lbo = 16 * ((uint)(desc >> 16) & 0x3fffu), sbo = 16 * ((uint)(desc >> 32) & 0x3fffu);
  return (n >> 3) * sbo + (k >> 3) * lbo +
         (trans ? (k & 7) * 16 + (n & 7) * 2 : (n & 7) * 16 + (k & 7) * 2);
}
/* The descriptor's start relative to the tile's, in bytes (a CPU's
 * pointers do not fit its 18 bits). */
inline uint wg_desc_start(ulong desc, __local const ushort *tile) {
  const uint base = (((uint)(size_t)tile & 0x3ffffu) >> 4);
  return 16 * ((((uint)desc & 0x3fffu) - base) & 0x3fffu);
}

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
/* all but the latest committed group done */
inline void wg_wait_but_one(void) {
  asm volatile(WG_MARK "wgmma.wait_group.sync.aligned 1;" ::: "memory");
}
/* wgmma_n<N>(d, a, desc): d (64 x N) += a b, scale-d 1 (accumulate), A
 * and B unscaled, B K-major; wgmma_t_n<N>, B MN-major (imm-trans-b 1);
 * `ab` names A's four operands and the descriptor. */
#define WG_DEFINE_(name, n, trans, dregs, outs, ab)                                       \
  inline void name(float *d, const uint *a, ulong desc) {                                \
    asm volatile(WG_MARK "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." MMA_TYPE "."  \
                 MMA_TYPE " {" dregs "}, " ab ", 1, 1, 1, " #trans ";"                   \
                 : outs(d)                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)                 \
                 : "memory");                                                            \
  }
#define WG_DEFINE(n, dregs, outs, ab)                  \
  WG_DEFINE_(wgmma_n##n, n, 0, dregs, outs, ab)        \
  WG_DEFINE_(wgmma_t_n##n, n, 1, dregs, outs, ab)
WG_DEFINE(8, WG_D8, WG_F8, "{%4, %5, %6, %7}, %8")
WG_DEFINE(16, WG_D16, WG_F16, "{%8, %9, %10, %11}, %12")
WG_DEFINE(32, WG_D32, WG_F32, "{%16, %17, %18, %19}, %20")
WG_DEFINE(64, WG_D64, WG_F64, "{%32, %33, %34, %35}, %36")
WG_DEFINE(128, WG_D128, WG_F128, "{%64, %65, %66, %67}, %68")
/* WG_MMA(n, d, a, desc, tile, scratch): d (64 x n) += a b on whichever
 * path is built (tile and scratch: the emulations'); WG_MMA_T, B
 * MN-major. */
#define WG_MMA_(n, d, a, desc) wgmma_n##n(d, a, desc)
#define WG_MMA(n, d, a, desc, tile, scratch) WG_MMA_(n, d, a, desc)  // n expanded first
#define WG_MMA_T_(n, d, a, desc) wgmma_t_n##n(d, a, desc)
#define WG_MMA_T(n, d, a, desc, tile, scratch) WG_MMA_T_(n, d, a, desc)
#define WG_SCRATCH_DECLARE MMA_DECLARE_SCRATCH(4 * WARPGROUPS)
#define WG_FENCE_STORES() wg_fence_stores()
#define WG_BEGIN() wg_fence()
#define WG_END() (wg_commit(), wg_wait_all())
/* The pipeline's pieces: WG_COMMIT closes the products issued since the
 * last one into a group; WG_WAIT_BUT_ONE returns once only the latest
 * group may still run, WG_WAIT_ALL once none does. */
#define WG_COMMIT() wg_commit()
#define WG_WAIT_BUT_ONE() wg_wait_but_one()
#define WG_WAIT_ALL() wg_wait_all()
/* WG_PIN(x, n): n floats at x (registers) tied to this point among the
 * instructions above: the compiler may otherwise move arithmetic on an
 * accumulator across a fence or a wait, which names no register (it would
 * then touch it while a product runs, and ptxas serialize). Before a
 * fence, after a wait. WG_PIN_A: n A-fragment words, before a fence. */
#define WG_PIN(x, n)                                              \
  do {                                                            \
    UNROLL for (int i_ = 0; i_ < (n); ++i_)                       \
      asm volatile("" : "+f"((x)[i_]) :: "memory");               \
  } while (0)
#define WG_PIN_A(x, n)                                            \
  do {                                                            \
    UNROLL for (int i_ = 0; i_ < (n); ++i_)                       \
      asm volatile("" : "+r"((x)[i_]) :: "memory");               \
  } while (0)

#else
#if WGMMA_EMULATE
/* d (64 x n) += a b as the instruction computes it from the same operands:
 * the warpgroup's A fragments through local memory, B through the
 * descriptor, K-major or MN-major (trans). */
inline void wgmma_emulated(float *d, const uint *a, ulong desc, const int n_cols, const int trans,
                           __local const ushort *tile, __local float *a_rows) {
  const int lid = get_local_id(0), w = lid >> 5, g = (lid & 31) >> 2, t = lid & 3;
  for (int i = 0; i < 4; ++i)
    for (int h = 0; h < 2; ++h)
      a_rows[(16 * w + g + 8 * (i & 1)) * 16 + 2 * t + h + 8 * (i >> 1)] =
          from_bits((ushort)(a[i] >> (16 * h)));
  barrier(CLK_LOCAL_MEM_FENCE);
  __local const uchar *b = (__local const uchar *)tile + wg_desc_start(desc, tile);
  for (int i = 0; i < n_cols / 2; ++i) {
    const int row = 16 * w + g + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * t + (i & 1);
    exact_t acc = d[i];
    for (int k = 0; k < 16; ++k)
      acc += (exact_t)a_rows[row * 16 + k] *
             from_bits(*(__local const ushort *)(b + wg_desc_at(desc, k, n, trans)));
    d[i] = TRUNCATE(acc);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
#define WG_MMA(n, d, a, desc, tile, scratch) wgmma_emulated(d, a, desc, n, 0, tile, scratch)
#define WG_MMA_T(n, d, a, desc, tile, scratch) wgmma_emulated(d, a, desc, n, 1, tile, scratch)
/* the A rows, and the quads' scratch (no mma.sync products) */
#define WG_SCRATCH_DECLARE                                       \
  __local float wg_a_rows[WARPGROUPS * 64 * 16], quad[32 * 4 * WARPGROUPS]; \
  __local float *const mma_a = 0, *const mma_b = 0
#else
/* The fallback: each warp its 16 rows on mma.sync m16n8k16, B's fragment
 * words (k 2t and 2t + 1 of column g) read from the same tile through the
 * descriptor, K-major or MN-major (trans). */
inline void wgmma_mma_sync(float *d, const uint *a, ulong desc, const int n_cols, const int trans,
                           __local const ushort *tile MMA_SCRATCH) {
  const int lid = get_local_id(0), g = (lid & 31) >> 2, t = lid & 3;
  __local const uchar *b = (__local const uchar *)tile + wg_desc_start(desc, tile);
#define WG_B_AT(k, n) (*(__local const ushort *)(b + wg_desc_at(desc, k, n, trans)))
  UNROLL for (int j = 0; j < n_cols / 8; ++j) {
    const int n = 8 * j + g;
    const uint bw[2] = {(uint)WG_B_AT(2 * t, n) | ((uint)WG_B_AT(2 * t + 1, n) << 16),
                        (uint)WG_B_AT(2 * t + 8, n) | ((uint)WG_B_AT(2 * t + 9, n) << 16)};
    mma_16bit(d + 4 * j, a, bw MMA_ARGS);
  }
#undef WG_B_AT
}
#define WG_MMA(n, d, a, desc, tile, scratch) wgmma_mma_sync(d, a, desc, n, 0, tile MMA_ARGS)
#define WG_MMA_T(n, d, a, desc, tile, scratch) wgmma_mma_sync(d, a, desc, n, 1, tile MMA_ARGS)
#define WG_SCRATCH_DECLARE MMA_DECLARE_SCRATCH(4 * WARPGROUPS)
#endif
#define WG_FENCE_STORES() ((void)0)
#define WG_BEGIN() ((void)0)
#define WG_END() ((void)0)
#define WG_COMMIT() ((void)0)
#define WG_WAIT_BUT_ONE() ((void)0)
#define WG_WAIT_ALL() ((void)0)
#define WG_PIN(x, n) ((void)0)
#define WG_PIN_A(x, n) ((void)0)
#endif
