/*
 * flash_fwd_wgmma.cl — FlashAttention forward on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a, through the library's post-compile stage:
 * docs/design.md, "Hopper's sm_90a instructions").
 *
 * The algorithm and the softmax are flash_fwd_mma.cl's (mma.cl's
 * MMA_MASK_SCORES and MMA_ONLINE_SOFTMAX: a wgmma m64nN accumulator is,
 * per warp, N / 8 of mma.sync's m16n8 C fragments); the products are
 * wgmma's. A warpgroup (128 work-items) owns 64 query rows; a work-group
 * is WARPGROUPS of them (1 to 4: 64 to 256 rows) sharing each tile of
 * BLOCK_K keys, so that each K and V tile is read from global memory
 * once for all their rows (two: 128, as the MMA forward's 8 warps); per
 * tile:
 *   - S = Q K^T: m64n(BLOCK_K)k16 per 16 columns of head_dim (BLOCK_K 32
 *     or 64, or 128 at HEAD_DIM_MAX 64), Q's A fragments in
 *     registers (loaded once), K's tile in local memory as B (K-major:
 *     K's rows, [key][d], are B = K^T's columns);
 *   - O += P V: m64n(HEAD_DIM_MAX)k16 per 16 keys, P's fragments packed
 *     in registers into A fragments (mma.cl's MMA_ACCUMULATE does the
 *     same), V's tile as B MN-major (imm-trans-b 1: V's rows are B's rows,
 *     no transpose).
 * Both tiles have one layout (wg_b_offset of K^T is wg_bt_offset of V:
 * core matrices of 8 keys by 8 columns, 16 bytes a key), so one loader
 * fetches both, in the order of local memory (a warp's 32 stores, 8 bytes
 * each, fill 256 contiguous bytes), by cp.async (mma.cl's FETCH_COPY: no
 * register staging; a plain copy elsewhere).
 *
 * Schedules (WGMMA_PIPE: the planner's, host/plan/plan_wgmma.c,
 * fcl__wgmma_pipe; FLASHCL_WGMMA_PIPE overrides it for a comparison):
 *   1  loads in flight under the products: K's next tile fetched once S
 *      is done (under the softmax and P V), V's once P V is done (under
 *      the next S and softmax); each product fenced, committed and waited
 *      for whole (planned with three warpgroups: 2 spills there).
 *   2  (the kernel's default) that, and the products overlapped as
 *      FlashAttention-3 does within a warpgroup: the next tile's S and
 *      this tile's P V are committed as two groups, the softmax of S runs
 *      while P V does (wgmma.wait_group 1), and the accumulator's rescale
 *      waits for P V.
 *   3  2 with two stages of K and V (tiles of at most 64 x 64: 32 KiB;
 *      64 keys at 128 would need 64): K's tile t + 2 is fetched once S
 *      of t is done, V's t + 1 once P V of t - 1 is, so that each load
 *      has over a tile's products to arrive (in 2, V's has only the next
 *      S); planned wherever it fits.
 * Either way the accumulators (S's, O's) are not touched between their
 * fence and their wait (ptxas would serialize the products).
 *
 * WGMMA_REG_STAGE 1 (pipe 1 at up to two warpgroups, whose lanes have
 * the registers: 252 under clang's NVPTX proxy at two; an option no plan
 * sets: on the H100 1.11-1.13x two warpgroups without it, 0.86-0.88x
 * the planner's three, v40): each K and V tile is loaded into registers a tile
 * ahead (16-byte words, where the rows are 16-byte aligned) and stored
 * into local memory once the tile before is done with it, so that a
 * work-group has two tiles of each in flight within one tile of local
 * memory each.
 *
 * WGMMA_ELIDE (a measurement's knob, never planned: the results are
 * wrong) leaves parts out to time the rest: 1, the loads after the first
 * tile's (K and V stay in local memory); 2, the softmax (P = S as it is);
 * 4, the P V products; 8, the S products.
 *
 * Paths (wgmma.cl): FCL_WGMMA 1, the instructions (built by the stage on
 * NVIDIA cc 9.0); WGMMA_EMULATE 1, the same operands emulated (any device:
 * the tests); neither, mma.sync on the same tiles (the stage's fallback
 * build). 16-bit types, HEAD_DIM_MAX 64 or 128 (host/plan/plan_wgmma.c).
 */

#ifndef BLOCK_K
#define BLOCK_K 64          // keys per tile: the S product's N
#endif
#if BLOCK_K != 32 && BLOCK_K != 64 && !(BLOCK_K == 128 && HEAD_DIM_MAX == 64)
#error "BLOCK_K must be 32 or 64, or 128 at HEAD_DIM_MAX 64"
#endif
#if HEAD_DIM_MAX != 64 && HEAD_DIM_MAX != 128
#error "HEAD_DIM_MAX must be 64 or 128"
#endif
#ifndef WGMMA_PIPE
#define WGMMA_PIPE 2
#endif
#if WGMMA_PIPE != 1 && WGMMA_PIPE != 2 && WGMMA_PIPE != 3
#error "WGMMA_PIPE must be 1, 2 or 3"
#endif
#if WGMMA_PIPE == 3 && BLOCK_K * HEAD_DIM_MAX > 64 * 64
#error "WGMMA_PIPE 3 (two stages) needs BLOCK_K x HEAD_DIM_MAX at most 64 x 64"
#endif
#define KV_STAGES (WGMMA_PIPE == 3 ? 2 : 1)
#define STAGE(tile) (KV_STAGES == 2 ? (tile) & 1 : 0)
#define STAGE_ELEMS (BLOCK_K * HEAD_DIM_MAX)  // a stage of a tile
#define STAGE_DESC ((2 * STAGE_ELEMS) >> 4)   // ... in descriptor units
#if WARPGROUPS < 1 || WARPGROUPS > 4
#error "WARPGROUPS must be 1 to 4"
#endif
#ifndef WGMMA_ELIDE
#define WGMMA_ELIDE 0
#endif
#ifndef WGMMA_REG_STAGE
#define WGMMA_REG_STAGE 0
#endif
#define REG_STAGED (WGMMA_REG_STAGE && WGMMA_PIPE == 1 && WARPGROUPS <= 2)
#define WG_SIZE (128 * WARPGROUPS)
#define BLOCK_Q (64 * WARPGROUPS)  // a warpgroup's 64 rows each
#define K_TILES (BLOCK_K / 8)
#define PACK_STEPS (BLOCK_K / 16)        // P V's k-steps
#define KV_GROUP (16 * HEAD_DIM_MAX)     // bytes between 8-key groups of a tile

/* 16 bytes (8 elements) of global memory into local memory, both 16-byte
 * aligned; zeros where !valid: cp.async where FETCH_COPY is (mma.cl),
 * else two of its 8-byte copies. */
#if FETCH_ASYNC
inline void fetch_16(__local ushort *dst, __global const store_t *src, int valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"((uint)(size_t)dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
#else
#define fetch_16(dst, src, valid) \
  (FETCH_COPY((dst), (src), (valid)), FETCH_COPY((dst) + 4, (src) + 4, (valid)))
#endif

/* The key and the column of a tile's byte o (a multiple of 8), in local
 * memory's order: a byte of an 8-key group (KV_GROUP bytes) holds key
 * (o / 16) % 8 of the group and column 8 (o / 128) + (o % 16) / 2. */
#define TILE_KEY_AT(o) (8 * ((o) / KV_GROUP) + ((((o) % KV_GROUP) >> 4) & 7))
#define TILE_COL_AT(o) (8 * (((o) % KV_GROUP) >> 7) + 4 * (((o) >> 3) & 1))
/* The rows at src, `stride` elements apart, allow 16-byte words */
#define ROWS_16B(src, stride) ((((size_t)(src) | (stride) * 2) & 15) == 0)

/* Keys [0, keys) of a tile from `src` (rows `stride` elements apart),
 * columns [0, head_dim), into `tile`, the rest 0 (0 * NaN is NaN), in
 * local memory's order: COPY moves `cb` bytes (8 or 16), chunk c the
 * bytes at cb c. The loop is left rolled: unrolled, its addresses took 30
 * to 60 more registers (ptxas, d 128). */
#define FETCH_KV_BY(cb, COPY, tile, src, stride, keys)                                \
  for (int c_ = tid; c_ < BLOCK_K * HEAD_DIM_MAX * 2 / (cb); c_ += WG_SIZE) {         \
    const int o_ = (cb) * c_;                                                         \
    const int key_ = TILE_KEY_AT(o_), col_ = TILE_COL_AT(o_);                         \
    const int valid_ = key_ < (keys) && col_ < head_dim;                              \
    COPY((tile) + o_ / 2, valid_ ? (src) + (size_t)key_ * (stride) + col_ : (src), valid_); \
  }
/* ... 16 bytes a copy where the rows allow (head_dim is a multiple of 8),
 * else 8; then the group closed */
#define FETCH_KV(tile, src, stride, keys)                                           \
  do {                                                                              \
    __global const kv_t *const src_ = (src);                                        \
    const size_t stride_ = (stride);                                                \
    if (ROWS_16B(src_, stride_))                                                    \
      FETCH_KV_BY(16, fetch_16, tile, src_, stride_, keys)                          \
    else                                                                            \
      FETCH_KV_BY(8, FETCH_COPY, tile, src_, stride_, keys)                         \
    FETCH_COMMIT();                                                                 \
  } while (0)

#if REG_STAGED
#define STAGE_WORDS (BLOCK_K * HEAD_DIM_MAX * 2 / 16)          // 16-byte words a tile
#define STAGE_REGS ((STAGE_WORDS + WG_SIZE - 1) / WG_SIZE)     // ... a work-item holds
/* FETCH_KV_BY's 16-byte words of a tile into a work-item's registers
 * (word tid + WG_SIZE i in r[i], zeros where invalid), `ok` 1; `ok` 0, and
 * nothing loaded, where the rows are not 16-byte aligned (the tile is
 * then fetched as it is without the stage). */
#define LOAD_KV_REGS(ok, r, src, stride, keys)                                          \
  do {                                                                                  \
    __global const kv_t *const s_ = (src);                                              \
    const size_t st_ = (stride);                                                        \
    (ok) = ROWS_16B(s_, st_);                                                           \
    if (ok)                                                                             \
      UNROLL for (int i_ = 0; i_ < STAGE_REGS; ++i_) {                                  \
        const int c_ = tid + WG_SIZE * i_, o_ = 16 * c_;                                \
        const int key_ = TILE_KEY_AT(o_), col_ = TILE_COL_AT(o_);                       \
        (r)[i_] = (uint4)(0);                                                           \
        if (c_ < STAGE_WORDS && key_ < (keys) && col_ < head_dim)                       \
          (r)[i_] = FCL_COUNTED_LOAD(16, *(__global const uint4 *)(s_ + (size_t)key_ * st_ + col_)); \
      }                                                                                 \
  } while (0)
/* ... and out of them into the tile, each word where FETCH_KV_BY puts it */
#define STORE_KV_REGS(tile, r)                                                          \
  UNROLL for (int i_ = 0; i_ < STAGE_REGS; ++i_)                                        \
    if (tid + WG_SIZE * i_ < STAGE_WORDS)                                               \
      *(__local uint4 *)((tile) + 8 * (tid + WG_SIZE * i_)) = (r)[i_]
#endif

MMA_KERNEL(WG_SIZE)
void flash_fwd_wgmma(FCL_ATTENTION_PARAMS) {
  /* 16-byte aligned, what a no-swizzle descriptor needs (address >> 4): at
   * 128, NVIDIA's compiler padded past its own 16 bytes to 16512 at d 64,
   * over the plan's local bytes, and the build was refused (H100) */
  __local ushort k_tile[KV_STAGES * STAGE_ELEMS] __attribute__((aligned(16)));
  __local ushort v_tile[KV_STAGES * STAGE_ELEMS] __attribute__((aligned(16)));
  WG_SCRATCH_DECLARE;  // the emulations' (wgmma.cl)
  const int tid = get_local_id(0);
  const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int q0 = qb.q0, nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim;
  const size_t k_stride = p.k.seq, v_stride = p.v.seq, o_stride = p.o.seq;

  /* This lane's rows g and g + 8 of its warp's 16 (packed, PACK_GQA:
   * slots, the token's row and its head `hoff` past the block's). */
  const int slots = nq * PACK_GQA;
  int row[2], hoff[2], live[2], key_lo[2], key_hi[2];
UNROLL
  for (int r = 0; r < 2; ++r) {
    const int slot = q0 + 16 * warp + g + 8 * r;
    hoff[r] = SLOT_HEAD(slot);
    live[r] = fcl_query_row(p, qb.seq, slot, &row[r], &key_lo[r], &key_hi[r]);
  }

  /* Q's A fragments, every k-step of head_dim, in registers. */
  frag_t qa[HEAD_DIM_MAX / 16][4];
  LOAD_A_ROWS(qa, D_TILES, q_rows, q0 + 16 * warp + g, slots, p.q.seq, p.q.head, 0);

  float acc[D_TILES][4];
  float m[2] = {FCL_MAX_INIT, FCL_MAX_INIT}, l[2] = {0.0f, 0.0f};
UNROLL
  for (int n = 0; n < D_TILES; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  /* The descriptors, made opaque so that the compiler does not recompute
   * them between a fence and its wait. K's: K-major, n = key, k = d; V's:
   * MN-major, k = key, n = d; the same bytes (wgmma.cl). */
  ulong k_desc = wg_descriptor(k_tile, KV_GROUP), v_desc = wg_descriptor_t(v_tile, KV_GROUP);
#if FCL_WGMMA
  asm volatile("" : "+l"(k_desc), "+l"(v_desc));
#endif

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
#define TILE_KEYS(tile) min(BLOCK_K, nk - (tile) * BLOCK_K)
/* (WGMMA_ELIDE 1: past the first tile, an empty group) */
#define FETCH_KV_TILE(tile, dst, rows, base, view, stride)                     \
  do {                                                                         \
    if ((WGMMA_ELIDE & 1) && (tile) != first_tile) FETCH_COMMIT();             \
    else FETCH_KV((dst) + STAGE(tile) * STAGE_ELEMS,                           \
                  TILE_START(rows, base, view, stride, (tile) * BLOCK_K), stride, \
                  TILE_KEYS(tile));                                            \
  } while (0)
#define FETCH_K(tile) FETCH_KV_TILE(tile, k_tile, k_rows, k, p.k, k_stride)
#define FETCH_V(tile) FETCH_KV_TILE(tile, v_tile, v_rows, v, p.v, v_stride)
/* ... or an empty group past the last tile (pipe 3 counts groups) */
#define FETCH_K_OR_NONE(tile) \
  if ((tile) < end_tile) FETCH_K(tile); else FETCH_COMMIT()
#define FETCH_V_OR_NONE(tile) \
  if ((tile) < end_tile) FETCH_V(tile); else FETCH_COMMIT()
  /* All but the latest `n` fetch groups of every work-item in local memory,
   * visible to the products (cp.async writes through the generic proxy). */
#define TILES_ARRIVED(n) \
  do {                   \
    FETCH_WAIT(n);       \
    WG_FENCE_STORES();   \
    barrier(CLK_LOCAL_MEM_FENCE); \
  } while (0)
  /* S = Q K^T of a tile (scores zeroed first), issued */
#define ISSUE_S(tile)                                                          \
  do {                                                                         \
    UNROLL for (int n_ = 0; n_ < K_TILES; ++n_)                                \
      s[n_][0] = s[n_][1] = s[n_][2] = s[n_][3] = 0.0f;                        \
    WG_PIN(&s[0][0], 4 * K_TILES);                                             \
    WG_PIN(&acc[0][0], 4 * D_TILES);                                           \
    WG_PIN_A(&pa[0][0], 4 * PACK_STEPS);                                       \
    WG_BEGIN();                                                                \
    UNROLL for (int kk_ = 0; kk_ < HEAD_DIM_MAX / 16 * !(WGMMA_ELIDE & 8); ++kk_) \
      WG_MMA(BLOCK_K, &s[0][0], qa[kk_], k_desc + STAGE(tile) * STAGE_DESC + kk_ * WG_STEP, \
             k_tile, wg_a_rows);                                               \
  } while (0)
  /* O += P V of a tile, issued */
#define ISSUE_PV(tile)                                                         \
  UNROLL for (int kt_ = 0; kt_ < PACK_STEPS * !(WGMMA_ELIDE & 4); ++kt_)      \
    WG_MMA_T(HEAD_DIM_MAX, &acc[0][0], pa[kt_],                                \
             v_desc + STAGE(tile) * STAGE_DESC + kt_ * WG_STEP_T(KV_GROUP), v_tile, wg_a_rows)
  /* transform, mask, new max, p = 2^(x (s - m)); the accumulator's factor
   * per row into alpha (a one-column accumulator of ones takes it) */
#define SOFTMAX(tile)                                                          \
  do {                                                                         \
    alpha[0] = alpha[1] = 1.0f;                                                \
    if (WGMMA_ELIDE & 2) break;                                                \
    MMA_MASK_SCORES(s, K_TILES, (tile) * BLOCK_K, BLOCK_K, 0);                 \
    float ones_[1][4] = {{1.0f, 1.0f, 1.0f, 1.0f}};                            \
    UNROLL for (int r_ = 0; r_ < 2; ++r_)                                      \
      MMA_ONLINE_SOFTMAX(s, K_TILES, ones_, 1, m, l, r_);                      \
    alpha[0] = ones_[0][0];                                                    \
    alpha[1] = ones_[0][2];                                                    \
  } while (0)
  /* the accumulator rescaled, and P's C fragments become A fragments,
   * rounded */
#define RESCALE_AND_PACK()                                                     \
  do {                                                                         \
    UNROLL for (int n_ = 0; n_ < D_TILES; ++n_) {                              \
      acc[n_][0] *= alpha[0];                                                  \
      acc[n_][1] *= alpha[0];                                                  \
      acc[n_][2] *= alpha[1];                                                  \
      acc[n_][3] *= alpha[1];                                                  \
    }                                                                          \
    UNROLL for (int kt_ = 0; kt_ < PACK_STEPS; ++kt_) {                        \
      pa[kt_][0] = pack2(s[2 * kt_][0], s[2 * kt_][1]);                        \
      pa[kt_][1] = pack2(s[2 * kt_][2], s[2 * kt_][3]);                        \
      pa[kt_][2] = pack2(s[2 * kt_ + 1][0], s[2 * kt_ + 1][1]);                \
      pa[kt_][3] = pack2(s[2 * kt_ + 1][2], s[2 * kt_ + 1][3]);                \
    }                                                                          \
  } while (0)

  float s[K_TILES][4], alpha[2];
  uint pa[PACK_STEPS][4] = {{0}};  // pinned before its first use (pipe 2)
#if WGMMA_PIPE != 3
  if (first_tile < end_tile) {
    FETCH_K(first_tile);
    FETCH_V(first_tile);
  }
#endif
#if WGMMA_PIPE == 1
#if REG_STAGED
  /* the tiles a tile ahead of local memory's, in registers (k_staged:
   * whether they hold it) */
  uint4 k_next[STAGE_REGS], v_next[STAGE_REGS];
  int k_staged = 0, v_staged = 0;
#define LOAD_K_REGS(ok, tile)                                                            \
  LOAD_KV_REGS(ok, k_next, TILE_START(k_rows, k, p.k, k_stride, (tile) * BLOCK_K), k_stride, \
               TILE_KEYS(tile))
#define LOAD_V_REGS(ok, tile)                                                            \
  LOAD_KV_REGS(ok, v_next, TILE_START(v_rows, v, p.v, v_stride, (tile) * BLOCK_K), v_stride, \
               TILE_KEYS(tile))
  if (first_tile + 1 < end_tile) {
    LOAD_K_REGS(k_staged, first_tile + 1);
    LOAD_V_REGS(v_staged, first_tile + 1);
  }
  /* tile t of K or V into local memory: from the registers where they hold
   * it, then t + 1 into them */
#define NEXT_KV(X, x, tile)                                \
  do {                                                     \
    if (x##_staged) {                                      \
      STORE_KV_REGS(x##_tile, x##_next);                   \
      FETCH_COMMIT();                                      \
    } else {                                               \
      FETCH_##X(tile);                                     \
    }                                                      \
    x##_staged = 0;                                        \
    if ((tile) + 1 < end_tile) LOAD_##X##_REGS(x##_staged, (tile) + 1); \
  } while (0)
#define FETCH_K_NEXT(tile) NEXT_KV(K, k, tile)
#define FETCH_V_NEXT(tile) NEXT_KV(V, v, tile)
#else
#define FETCH_K_NEXT(tile) FETCH_K(tile)
#define FETCH_V_NEXT(tile) FETCH_V(tile)
#endif
  for (int tile = first_tile; tile < end_tile; ++tile) {
    TILES_ARRIVED(1);  // K's (V's may be in flight)
    ISSUE_S(tile);
    WG_END();
    WG_PIN(&s[0][0], 4 * K_TILES);
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp done with K's tile
    if (tile + 1 < end_tile) FETCH_K_NEXT(tile + 1);
    else FETCH_COMMIT();  // an empty group: the counts stay the same
    SOFTMAX(tile);
    RESCALE_AND_PACK();
    TILES_ARRIVED(1);  // V's (K's next may be in flight)
    WG_PIN(&acc[0][0], 4 * D_TILES);
    WG_PIN_A(&pa[0][0], 4 * PACK_STEPS);
    WG_BEGIN();
    ISSUE_PV(tile);
    WG_END();
    WG_PIN(&acc[0][0], 4 * D_TILES);
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp done with V's tile
    if (tile + 1 < end_tile) FETCH_V_NEXT(tile + 1);
  }
#undef FETCH_K_NEXT
#undef FETCH_V_NEXT
#if REG_STAGED
#undef LOAD_K_REGS
#undef LOAD_V_REGS
#undef NEXT_KV
#endif
#else
  /* the first tile's S and softmax alone; then per tile, S of this one and
   * P V of the one before */
#if WGMMA_PIPE == 3
  /* groups: at each tile t's start [K t, V t - 1, K t + 1, V t], the two
   * latest in flight */
  if (first_tile < end_tile) {
    FETCH_K(first_tile);
    FETCH_K_OR_NONE(first_tile + 1);
    FETCH_V(first_tile);
    TILES_ARRIVED(2);
#else
  if (first_tile < end_tile) {
    TILES_ARRIVED(1);
#endif
    ISSUE_S(first_tile);
    WG_END();
    WG_PIN(&s[0][0], 4 * K_TILES);
    barrier(CLK_LOCAL_MEM_FENCE);
#if WGMMA_PIPE == 3
    FETCH_K_OR_NONE(first_tile + 2);
    FETCH_V_OR_NONE(first_tile + 1);  // its stage not yet used
#else
    if (first_tile + 1 < end_tile) FETCH_K(first_tile + 1);
#endif
    SOFTMAX(first_tile);
    RESCALE_AND_PACK();
  }
  for (int tile = first_tile + 1; tile < end_tile; ++tile) {
#if WGMMA_PIPE == 3
    TILES_ARRIVED(2);  // K's and V's of the tile before
#else
    /* K's (the latest group: V's of the tile before; at the first, the
     * order is the other) */
    if (tile == first_tile + 1) TILES_ARRIVED(0);
    else TILES_ARRIVED(1);
#endif
    ISSUE_S(tile);
    WG_COMMIT();
#if WGMMA_PIPE != 3
    TILES_ARRIVED(0);  // V's of the tile before, while S runs
#endif
    ISSUE_PV(tile - 1);
    WG_COMMIT();
    WG_WAIT_BUT_ONE();  // S done; P V may run
    WG_PIN(&s[0][0], 4 * K_TILES);
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp done with K's tile
#if WGMMA_PIPE == 3
    FETCH_K_OR_NONE(tile + 2);
#else
    if (tile + 1 < end_tile) FETCH_K(tile + 1);
#endif
    SOFTMAX(tile);
    WG_WAIT_ALL();
    WG_PIN(&acc[0][0], 4 * D_TILES);
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp done with V's tile
#if WGMMA_PIPE == 3
    FETCH_V_OR_NONE(tile + 1);
#else
    FETCH_V(tile);
#endif
    RESCALE_AND_PACK();
  }
  if (first_tile < end_tile) {
    TILES_ARRIVED(0);
    WG_PIN(&acc[0][0], 4 * D_TILES);
    WG_PIN_A(&pa[0][0], 4 * PACK_STEPS);
    WG_BEGIN();
    ISSUE_PV(end_tile - 1);
    WG_END();
    WG_PIN(&acc[0][0], 4 * D_TILES);
  }
#endif
#undef TILE_KEYS
#undef FETCH_KV_TILE
#undef FETCH_K
#undef FETCH_V
#undef FETCH_K_OR_NONE
#undef FETCH_V_OR_NONE
#undef TILES_ARRIVED
#undef ISSUE_S
#undef ISSUE_PV
#undef SOFTMAX
#undef RESCALE_AND_PACK

  /* ---- O = acc / l, LSE = ln(sum exp) ---- */
UNROLL
  for (int r = 0; r < 2; ++r) {
    const float l_row = quad_sum(l[r] MMA_ARGS);
    if (!live[r]) continue;
    const float sink = fcl_row_sink(p, sinks, qb.head + hoff[r], t == 0);
    const float inv = FCL_ROW_OUT(p, m[r], l_row, sink);
    const size_t at = (size_t)row[r] * o_stride + (size_t)hoff[r] * p.o.head + 2 * t;
UNROLL
    for (int n = 0; n < D_TILES; ++n) {
      if (8 * n + 2 * t >= head_dim) continue;
      STORE_PAIR(o_rows + at + 8 * n, acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    }
    if (FCL_STORES_LSE(lse) && t == 0)
      STORE_F32(lse, qb.lse + (size_t)hoff[r] * p.lse_head + row[r],
                fcl_row_lse(m[r], p.lse_factor, l_row, sink));
  }
  FCL_IO_COMMIT();
}
