/*
 * flash_fwd_wgmma.cl — FlashAttention forward on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a, through the library's post-compile stage:
 * docs/design.md, "Hopper's sm_90a instructions").
 *
 * The algorithm and the softmax are flash_fwd_mma.cl's (mma.cl's
 * MMA_MASK_SCORES and MMA_ONLINE_SOFTMAX: a wgmma m64nN accumulator is,
 * per warp, N / 8 of mma.sync's m16n8 C fragments); the products are
 * wgmma's. One warpgroup (the work-group, 128 work-items) owns 64 query
 * rows; per tile of BLOCK_K keys:
 *   - S = Q K^T: m64n64k16 per 16 columns of head_dim, Q's A fragments in
 *     registers (loaded once), K's tile in local memory as B (K-major:
 *     K's rows, [key][d], are B = K^T's columns);
 *   - O += P V: m64n(HEAD_DIM_MAX)k16 per 16 keys, P's fragments packed
 *     in registers into A fragments (mma.cl's MMA_ACCUMULATE does the
 *     same), V stored transposed in local memory ([d][key], K-major for
 *     B = V) as it is loaded.
 * Each product is fenced, committed and waited for whole (no overlap of
 * the two, nor of a tile's loads: the first version); the accumulators
 * are not touched between a fence and its wait (ptxas would serialize).
 *
 * Paths (wgmma.cl): FCL_WGMMA 1, the instructions (built by the stage on
 * NVIDIA cc 9.0); WGMMA_EMULATE 1, the same operands emulated (any device:
 * the tests); neither, mma.sync on the same tiles (the stage's fallback
 * build). 16-bit types, HEAD_DIM_MAX 64 or 128 (host/plan/plan_wgmma.c).
 */

#ifndef BLOCK_K
#define BLOCK_K 64          // keys per tile: the S product's N
#endif
#if BLOCK_K != 64
#error "BLOCK_K must be 64"
#endif
#if HEAD_DIM_MAX != 64 && HEAD_DIM_MAX != 128
#error "HEAD_DIM_MAX must be 64 or 128"
#endif
#define WG_SIZE 128         // one warpgroup
#define BLOCK_Q 64          // its rows
#define K_TILES (BLOCK_K / 8)
#define PACK_STEPS (BLOCK_K / 16)        // P V's k-steps
#define K_SBO (16 * HEAD_DIM_MAX)        // K's tile: k = d
#define V_SBO (16 * BLOCK_K)             // V's: k = key

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_fwd_wgmma(FCL_ATTENTION_PARAMS) {
  /* 16-byte aligned, what a no-swizzle descriptor needs (address >> 4): at
   * 128, NVIDIA's compiler padded past its own 16 bytes to 16512 at d 64,
   * over the plan's local bytes, and the build was refused (H100) */
  __local ushort k_tile[BLOCK_K * HEAD_DIM_MAX] __attribute__((aligned(16)));
  __local ushort v_tile[HEAD_DIM_MAX * BLOCK_K] __attribute__((aligned(16)));
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
   * them between a fence and its wait. */
  ulong k_desc = wg_descriptor(k_tile, K_SBO), v_desc = wg_descriptor(v_tile, V_SBO);
#if FCL_WGMMA
  asm volatile("" : "+l"(k_desc), "+l"(v_desc));
#endif

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK_K;
    const int keys = min(BLOCK_K, nk - k0);
    /* K and V, 4 elements of a row at a time (the views are vec4): K's
     * rows to B's K-major columns, V's transposed; 0 past the keys and
     * head_dim (0 * NaN is NaN). Every warp is done with the last tile. */
    __global const kv_t *k_at = TILE_START(k_rows, k, p.k, k_stride, k0);
    __global const kv_t *v_at = TILE_START(v_rows, v, p.v, v_stride, k0);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* not unrolled: at d 128 its 32 loads in flight a work-item spilled */
    for (int c = tid; c < BLOCK_K * HEAD_DIM_MAX / 4; c += WG_SIZE) {
      const int key = c / (HEAD_DIM_MAX / 4), d = 4 * (c % (HEAD_DIM_MAX / 4));
      const int valid = key < keys && d < head_dim;
      const ushort4 kx = valid ? LOAD_CHUNK(k_at + (size_t)key * k_stride + d, 0) : CHUNK_ZERO;
      const ushort4 vx = valid ? LOAD_CHUNK(v_at + (size_t)key * v_stride + d, 0) : CHUNK_ZERO;
      *(__local ushort4 *)(k_tile + wg_b_offset(d, key, K_SBO) / 2) = kx;
      v_tile[wg_b_offset(key, d, V_SBO) / 2] = vx.x;
      v_tile[wg_b_offset(key, d + 1, V_SBO) / 2] = vx.y;
      v_tile[wg_b_offset(key, d + 2, V_SBO) / 2] = vx.z;
      v_tile[wg_b_offset(key, d + 3, V_SBO) / 2] = vx.w;
    }
    WG_FENCE_STORES();
    barrier(CLK_LOCAL_MEM_FENCE);

    /* ---- S = Q K^T ---- */
    float s[K_TILES][4];
UNROLL
    for (int n = 0; n < K_TILES; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    WG_BEGIN();
UNROLL
    for (int kk = 0; kk < HEAD_DIM_MAX / 16; ++kk)
      WG_MMA(64, &s[0][0], qa[kk], k_desc + kk * WG_STEP, k_tile, wg_a_rows);
    WG_END();

    /* ---- transform, mask, new max, rescale, p = 2^(x (s - m)) ---- */
    MMA_MASK_SCORES(s, K_TILES, k0, BLOCK_K, 0);
UNROLL
    for (int r = 0; r < 2; ++r) MMA_ONLINE_SOFTMAX(s, K_TILES, acc, D_TILES, m, l, r);

    /* ---- O += P V: P's C fragments become A fragments, rounded ---- */
    uint pa[PACK_STEPS][4];
UNROLL
    for (int kt = 0; kt < PACK_STEPS; ++kt) {
      pa[kt][0] = pack2(s[2 * kt][0], s[2 * kt][1]);
      pa[kt][1] = pack2(s[2 * kt][2], s[2 * kt][3]);
      pa[kt][2] = pack2(s[2 * kt + 1][0], s[2 * kt + 1][1]);
      pa[kt][3] = pack2(s[2 * kt + 1][2], s[2 * kt + 1][3]);
    }
    WG_BEGIN();
UNROLL
    for (int kt = 0; kt < PACK_STEPS; ++kt)
      WG_MMA(HEAD_DIM_MAX, &acc[0][0], pa[kt], v_desc + kt * WG_STEP, v_tile, wg_a_rows);
    WG_END();
  }

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
