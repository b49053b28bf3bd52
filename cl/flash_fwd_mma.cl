/*
 * flash_fwd_mma.cl — FlashAttention-2 forward on warp-level matrix units.
 *
 * The algorithm is flash_fwd.cl's (running max, running sum, unnormalised
 * accumulator, one division at the end, unscaled scores with the scale
 * applied to s - m); the arithmetic is different. Each warp of 32
 * work-items owns 16 query rows (M_TILES 2: two such row tiles, which
 * share each K and V fragment the warp reads) and computes its S = Q K^T
 * and O += P V tiles with the m16n8 matrix multiply-accumulate instructions of NVIDIA's
 * tensor cores (PTX mma.sync, sm_80 and later), which the SIMT kernel's
 * fused multiply-adds cannot approach: they are where PyTorch's attention
 * kernels get their speed on NVIDIA, in fp32 as well (CUTLASS's 3xTF32).
 *
 * Storage types: f32 multiplies in 3xTF32 at f32 accuracy; f16 and bf16
 * go to the instructions as stored, with P rounded to the storage type
 * (round to nearest even) for P V, which the naive algorithm in that type
 * does as well; accumulation is f32 (cl/mma.cl, with the instructions,
 * their fragments and their emulation).
 *
 * S's fragments: s[n][i] of a lane (4 g + t) is row g + 8 (i >> 1) of the
 * warp's 16, key 8 n + 2 t + (i & 1) of the tile; a row's 4 lanes form a
 * quad. P V takes them as A fragments without moving data (mma.cl's
 * MMA_ACCUMULATE). K and V stream through local memory, BLOCK_K keys per
 * tile, laid out as mma.cl's operand tiles, each tile fetched while the
 * warps compute on the one before (FETCH_TILE).
 *
 * Without inline PTX (MMA_EMULATE) the instructions are emulated, at a
 * fraction of the speed: the tests check the layouts and the masking on
 * any device, and a forced plan runs anywhere.
 */

#ifndef BLOCK_K
#define BLOCK_K 64          // keys per local-memory tile, a multiple of 16
#endif
#ifndef WARPS
#define WARPS 4             // warps per work-group
#endif
#ifndef M_TILES
#define M_TILES 1           // 16-row tiles a warp: 1 or 2 (traits.h)
#endif
#if M_TILES != 1 && M_TILES != 2
#error "M_TILES must be 1 or 2"
#endif
#ifndef Q_IN_LOCAL
#define Q_IN_LOCAL FCL_MMA_FWD_Q_IN_LOCAL(HEAD_DIM_MAX, M_TILES)  // Q's fragments (traits.h)
#endif
#ifndef TILE_LOADS_UNROLL
/* Loads in flight a work-item: 8 in f32 and at d = 128, 2 for 16-bit
 * d <= 64, the fastest measured (docs/design.md, "The rules, measured"). */
#if FCL_DTYPE != 0 && HEAD_DIM_MAX <= 64
#define TILE_LOADS_UNROLL 2
#else
#define TILE_LOADS_UNROLL 8
#endif
#endif
#ifndef TILE_BARRIERS
/* Barriers a key tile. 4: one before and one after each product. 2
 * (FlashAttention-2's order): the barrier that makes K whole also frees
 * V's buffer, V's fetch starting after it, and the one that makes V whole
 * (waited for before the softmax) frees K's: taken in 16-bit with tiles of
 * up to 64 keys, where it measured faster; f32 is unmeasured
 * (docs/design.md, "The rules, measured"). */
#if FCL_MMA_FWD_TWO_BARRIERS(FCL_MMA_TILE_ELEM, BLOCK_K)
#define TILE_BARRIERS 2
#else
#define TILE_BARRIERS 4
#endif
#endif
#if TILE_BARRIERS != 2 && TILE_BARRIERS != 4
#error "TILE_BARRIERS must be 2 or 4"
#endif
#ifndef V_STAGES
/* V tiles in local memory (fcl_plan.v_stages). 2: the next tile's V is
 * fetched as this tile starts, a whole tile ahead of its use, where with one
 * it must land during this tile's S = Q K^T (32 products a warp at d 64 and
 * 64 keys); with TILE_BARRIERS 2 only. */
#define V_STAGES 1
#endif
#if V_STAGES != 1 && !(V_STAGES == 2 && TILE_BARRIERS == 2)
#error "V_STAGES must be 1, or 2 with TILE_BARRIERS 2"
#endif
#define WG_SIZE (32 * WARPS)
#define BLOCK_Q FCL_MMA_FWD_BLOCK_Q(WARPS, M_TILES)  // Br
#define WARP_ROWS (16 * M_TILES)
#define K_TILES (BLOCK_K / 8)

#if BLOCK_K % 16 != 0
#error "BLOCK_K must be a multiple of 16"
#endif

MMA_KERNEL(WG_SIZE)
void flash_fwd_mma(FCL_ATTENTION_PARAMS) {
  __local tile_t k_tile[BLOCK_K * TILE_LD] __attribute__((aligned(16)));
  __local tile_t v_tiles[V_STAGES * BLOCK_K * TILE_LD] __attribute__((aligned(16)));
#if Q_IN_LOCAL
  __local frag_t q_local[BLOCK_Q * HEAD_DIM_MAX * FCL_MMA_TILE_ELEM / 4]
      __attribute__((aligned(16)));
#endif
  MMA_DECLARE_SCRATCH(WARPS);
  const int tid = get_local_id(0);
  const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int q0 = qb.q0, nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim;
  const size_t k_stride = p.k.seq, v_stride = p.v.seq, o_stride = p.o.seq;

  /* This lane's rows: g and g + 8 of each of the warp's row tiles (r:
   * 2 tile + 0 or 1). */
  /* row: a query token; packed (PACK_GQA), the token of a slot, whose head
   * is `hoff` past the block's. */
  const int slots = nq * PACK_GQA;
  int row[2 * M_TILES], hoff[2 * M_TILES], live[2 * M_TILES], key_lo[2 * M_TILES],
      key_hi[2 * M_TILES];
UNROLL
  for (int r = 0; r < 2 * M_TILES; ++r) {
    const int slot = q0 + WARP_ROWS * warp + 16 * (r >> 1) + g + 8 * (r & 1);
    hoff[r] = SLOT_HEAD(slot);
    live[r] = fcl_query_row(p, qb.seq, slot, &row[r], &key_lo[r], &key_hi[r]);
  }

  /* Q as A fragments, for every k-step over head_dim, of each row tile: in
   * registers, or (Q_IN_LOCAL) in local memory where each lane reads back
   * only the words it wrote (no barrier): a fragment's four words
   * together, 16 bytes a lane, the warp's lanes one after another (one
   * vector access a fragment without bank conflicts). */
#if Q_IN_LOCAL
#define Q_AT(a, mt, kk, i) (a)[((mt) * FRAG_STEPS(D_TILES) + (kk)) * 32 * 4 + (i)]
  __local frag_t *const qa =
      q_local + warp * (M_TILES * FRAG_STEPS(D_TILES) * 32 * 4) + (tid & 31) * 4;
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt) {
    DECLARE_FRAG_A(q_tile, D_TILES);
    LOAD_A_ROWS(q_tile, D_TILES, q_rows, q0 + WARP_ROWS * warp + 16 * mt + g, slots, p.q.seq,
                p.q.head, 0);
UNROLL
    for (int kk = 0; kk < FRAG_STEPS(D_TILES); ++kk)
UNROLL
      for (int i = 0; i < 4; ++i) Q_AT(qa, mt, kk, i) = q_tile[kk][i];
  }
#else
#define Q_AT FRAG_OF_TILES
  frag_t qa[M_TILES][FRAG_STEPS(D_TILES)][4];
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt)
    LOAD_A_ROWS(qa[mt], D_TILES, q_rows, q0 + WARP_ROWS * warp + 16 * mt + g, slots, p.q.seq,
                p.q.head, 0);
#endif

  float acc[M_TILES][D_TILES][4];
  float m[M_TILES][2], l[M_TILES][2];  // l: this lane's columns; the quad sums at the end
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt) {
    m[mt][0] = m[mt][1] = FCL_MAX_INIT;
    l[mt][0] = l[mt][1] = 0.0f;
UNROLL
    for (int n = 0; n < D_TILES; ++n)
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
  }

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;

  /* K and V arrive while the warps compute (FETCH_TILE, mma.cl), one tile
   * of each in local memory: V of this tile during S = Q K^T (V_STAGES 2:
   * of the next, during this whole tile), K of the next during the softmax
   * and O += P V. TILE_BARRIERS (above) says how the work-group knows a
   * tile whole and a buffer free. */
#define K_ROW(key) KEY_ROW(k_rows, k, p.k, k_stride, key)
#define V_ROW(key) KEY_ROW(v_rows, v, p.v, v_stride, key)
#define FETCH_K(k0, keys) FETCH_KEYS(k_tile, K_ROW, k, k_rows, k0, keys, BLOCK_K, k_stride)
/* V's stage of a tile: with two, alternate tiles' */
#define V_TILE(tile) (v_tiles + ((tile) & (V_STAGES - 1)) * (BLOCK_K * TILE_LD))
#define FETCH_V(into, k0, keys) FETCH_KEYS(into, V_ROW, v, v_rows, k0, keys, BLOCK_K, v_stride)
  if (first_tile < end_tile) {
    const int k0 = first_tile * BLOCK_K;
    FETCH_K(k0, min(BLOCK_K, nk - k0));
#if V_STAGES == 2
    __local tile_t *const v_first = V_TILE(first_tile);
    FETCH_V(v_first, k0, min(BLOCK_K, nk - k0));
#endif
  }
  FETCH_COMMIT();
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK_K;
    const int keys = min(BLOCK_K, nk - k0);
    __local tile_t *const v_tile = V_TILE(tile);
#if TILE_BARRIERS == 2
    FETCH_WAIT(0);  // this tile's K (and with two stages, its V)
    barrier(CLK_LOCAL_MEM_FENCE);  // K whole, and every warp done with the last V
#endif
#if V_STAGES == 2
    if (tile + 1 < end_tile) {  // into the stage the last tile's V left
      __local tile_t *const v_next = V_TILE(tile + 1);
      const int k1 = k0 + BLOCK_K;
      FETCH_V(v_next, k1, min(BLOCK_K, nk - k1));
    }
#else
    FETCH_V(v_tile, k0, keys);
#endif
    FETCH_COMMIT();
#if TILE_BARRIERS == 4
    FETCH_WAIT(1);  // this tile's K
    barrier(CLK_LOCAL_MEM_FENCE);
#endif

    /* ---- S = Q K^T ---- */
    float s[M_TILES][K_TILES][4];
    MMA_SCORES_TILES(s, ROW_TILE, M_TILES, K_TILES, qa, Q_AT, D_TILES, k_tile,
                     split_tf32_signed);
#if TILE_BARRIERS == 2
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt) MMA_MASK_SCORES(s[mt], K_TILES, k0, BLOCK_K, 2 * mt);
#if V_STAGES == 1
    FETCH_WAIT(0);  // this tile's V
#endif
#endif
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with K: the next may come
    if (tile + 1 < end_tile) {
      const int k1 = k0 + BLOCK_K;
      FETCH_K(k1, min(BLOCK_K, nk - k1));
    }
    FETCH_COMMIT();

    /* ---- transform, mask, new max, rescale, p = 2^(x (s - m)) ---- */
#if TILE_BARRIERS == 4
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt) MMA_MASK_SCORES(s[mt], K_TILES, k0, BLOCK_K, 2 * mt);
#endif
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
      for (int r = 0; r < 2; ++r)
        MMA_ONLINE_SOFTMAX(s[mt], K_TILES, acc[mt], D_TILES, m[mt], l[mt], r);

    /* ---- O += P V ---- */
#if TILE_BARRIERS == 4
    FETCH_WAIT(1);  // this tile's V
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    MMA_ACCUMULATE_TILES(acc, ROW_TILE, M_TILES, D_TILES, s, K_TILES, v_tile);
#if TILE_BARRIERS == 4
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile's V overwrites this one
#endif
  }
#undef K_ROW
#undef V_ROW
#undef FETCH_K
#undef FETCH_V
#undef V_TILE
#undef Q_AT

  /* ---- O = acc / l, LSE = ln(sum exp) ---- */
UNROLL
  for (int r = 0; r < 2 * M_TILES; ++r) {
    const int mt = r >> 1, h = r & 1;  // row tile, fragment row
    const float l_row = quad_sum(l[mt][h] MMA_ARGS);
    if (!live[r]) continue;
    const float sink = fcl_row_sink(p, sinks, qb.head + hoff[r], t == 0);
    const float inv = FCL_ROW_OUT(p, m[mt][h], l_row, sink);
    const size_t at = (size_t)row[r] * o_stride + (size_t)hoff[r] * p.o.head + 2 * t;
UNROLL
    for (int n = 0; n < D_TILES; ++n) {
      if (8 * n + 2 * t >= head_dim) continue;
      STORE_PAIR(o_rows + at + 8 * n, acc[mt][n][2 * h] * inv, acc[mt][n][2 * h + 1] * inv);
    }
    if (FCL_STORES_LSE(lse) && t == 0)
      STORE_F32(lse, qb.lse + (size_t)hoff[r] * p.lse_head + row[r],
                fcl_row_lse(m[mt][h], p.lse_factor, l_row, sink));
  }
  FCL_IO_COMMIT();
}
