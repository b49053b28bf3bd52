/*
 * flash_fwd_cpu.cl — the FlashAttention-2 forward for CPUs (cpu.cl says
 * how the CPU kernels use a core).
 *
 * The work-item owns BLOCK_Q query rows (packed: slots) of one (batch,
 * head), in chunks of 16 kept transposed, and streams K and V in tiles of
 * BLOCK_K keys, loaded and converted to float once per tile and block.
 * Scores come out transposed, s[j] holding key j's score for the chunk's
 * 16 rows across its lanes, so the online softmax works a row per lane:
 * row maxima and sums are vector operations. O accumulates a row at a
 * time across head_dim. A block of few rows (CPU_FEW_ROWS: a decode's
 * packed heads) takes its scores a row at a time instead (cpu.cl).
 *
 * Numerics are flash_fwd.cl's: unscaled dot products, the running max in
 * those units, exp2 of scaled differences, the mask of params.h and the
 * score transforms of common.cl, so that a CPU plan is held to the same
 * accuracy rule as every other.
 */

#ifndef BLOCK_Q
#define BLOCK_Q 64          // query rows (packed: slots) per work-group, a multiple of 16
#endif
#ifndef BLOCK_K
#define BLOCK_K 16          // keys per tile
#endif

#define CHUNKS (BLOCK_Q / LANES)

#if BLOCK_Q % LANES != 0
#error "BLOCK_Q must be a multiple of 16"
#endif
#if BLOCK_K != LANES
#error "BLOCK_K must be 16: the score loop keeps one accumulator a key"
#endif

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void flash_fwd_cpu(FCL_ATTENTION_PARAMS) {
  float k_tile[BLOCK_K * HEAD_DIM_MAX];
  float v_tile[BLOCK_K * HEAD_DIM_V_MAX];

  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim, vec = p.vec4;
  const int head_dim_v = FCL_HEAD_DIM_V(p);
  const int diag = nk - nq;
  const float16 exp_factor16 = (float16)(p.exp_factor);  // EXP2_FROM_MAX's fma: one type

  /* Per chunk: q transposed, the rows' tokens and window bounds, the keys
   * some row of it sees and those all its rows see, and each lane's
   * running max and sum. */
  float16 qt[CHUNKS][HEAD_DIM_MAX];
  int16 token[CHUNKS], key_lo[CHUNKS], key_hi[CHUNKS];
  int chunk_lo[CHUNKS], chunk_hi[CHUNKS], chunk_full_lo[CHUNKS], chunk_full_hi[CHUNKS];
  int chunk_rows[CHUNKS];  // its rows in the block: a decode's packed heads fill few lanes
  float16 m[CHUNKS], l[CHUNKS];
  float16 acc[BLOCK_Q][VECS_V];
  for (int ch = 0; ch < CHUNKS; ++ch) {
    int *tok = (int *)&token[ch], *lo = (int *)&key_lo[ch], *hi = (int *)&key_hi[ch];
    size_t off[LANES];
    const int rows = chunk_rows[ch] = clamp(qb.rows - ch * LANES, 0, LANES);
    for (int r = 0; r < LANES; ++r) {
      const int slot = qb.q0 + ch * LANES + r;
      fcl_query_row(p, qb.seq, slot, &tok[r], &lo[r], &hi[r]);
      off[r] = (size_t)tok[r] * p.q.seq + (size_t)SLOT_HEAD(slot) * p.q.head;
    }
    fcl_cpu_rows_t((float *)qt[ch], q_rows, off, rows, head_dim, HEAD_DIM_MAX, vec IO_LOADS_ARG);
    chunk_lo[ch] = chunk_hi[ch] = chunk_full_lo[ch] = chunk_full_hi[ch] = 0;
    if (rows > 0)
      fcl_block_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), tok[0], tok[rows - 1] - tok[0] + 1,
                     &chunk_lo[ch], &chunk_hi[ch], &chunk_full_lo[ch], &chunk_full_hi[ch]);
    m[ch] = (float16)(FCL_MAX_INIT);
    l[ch] = (float16)(0.0f);
  }
  for (int r = 0; r < BLOCK_Q; ++r)
    for (int c = 0; c < VECS_V; ++c) acc[r][c] = (float16)(0.0f);
#if CPU_FEW_ROWS
  /* A block of few rows (one chunk) takes its scores a row at a time
   * (fcl_cpu_dots_few), from its rows untransposed. */
  const int few = qb.rows <= CPU_FEW_ROWS;
  float q_few[CPU_FEW_ROWS * HEAD_DIM_MAX];
  if (few)
    for (int r = 0; r < qb.rows; ++r)
      for (int c = 0; c < HEAD_DIM_MAX; ++c)
        q_few[r * HEAD_DIM_MAX + c] = ((__private const float *)qt[0])[c * LANES + r];
#endif

  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK_K, keys = min(BLOCK_K, nk - k0);
    fcl_cpu_kv_tile(k_tile, BLOCK_K, TILE_START(k_rows, k, p.k, p.k.seq, k0), p.k.seq, keys,
                    head_dim, HEAD_DIM_MAX, vec IO_LOADS_ARG);
    fcl_cpu_kv_tile(v_tile, BLOCK_K, TILE_START(v_rows, v, p.v, p.v.seq, k0), p.v.seq, keys,
                    head_dim_v, HEAD_DIM_V_MAX, vec IO_LOADS_ARG);
    if (tile + 1 < end_tile)  // the next tile on its way into the cache (cpu.cl)
      FCL_CPU_PREFETCH_TILES(TILE_START(k_rows, k, p.k, p.k.seq, k0 + BLOCK_K), p.k.seq,
                             TILE_START(v_rows, v, p.v, p.v.seq, k0 + BLOCK_K), p.v.seq,
                             min(BLOCK_K, nk - k0 - BLOCK_K), head_dim, head_dim_v);

    for (int ch = 0; ch < CHUNKS; ++ch) {
      /* A chunk none of whose rows sees a key of the tile keeps its state. */
      if (k0 >= chunk_hi[ch] || k0 + BLOCK_K <= chunk_lo[ch]) continue;
      float16 s[BLOCK_K];
#if CPU_FEW_ROWS
      if (few)
        fcl_cpu_dots_few(s, k_tile, q_few, qb.rows, HEAD_DIM_MAX);
      else
#endif
        FCL_CPU_DOTS(s, k_tile, qt[ch], BLOCK_K, HEAD_DIM_MAX);

      /* ---- online softmax, a row a lane ---- */
      const int masked = k0 < chunk_full_lo[ch] || k0 + BLOCK_K > chunk_full_hi[ch];
      float16 m_new = m[ch];
      CPU_ROLLED
      for (int j = 0; j < BLOCK_K; ++j) {
#if SCORES_TRANSFORMED
        s[j] = fcl_score16(s[j], p, qb.slope, token[ch] + diag - (k0 + j));
#endif
        if (masked)
          s[j] = select((float16)(-INFINITY), s[j],
                        FCL_KEY_IN((int16)(k0 + j), key_lo[ch], key_hi[ch]));
        m_new = fmax(m_new, s[j]);
      }
      const float16 alpha = EXP2_FROM_MAX(m[ch], m_new, exp_factor16);
      m[ch] = m_new;
      float16 sum = (float16)(0.0f);
      float pt[BLOCK_K * LANES];  // P^T: pt[j * 16 + r], row r's weight of key j
      CPU_ROLLED
      for (int j = 0; j < BLOCK_K; ++j) {
        const float16 pj = EXP2_FROM_MAX(s[j], m_new, exp_factor16);  // masked: exp2(-inf) = 0
        sum += pj;
        vstore16(pj, j, pt);
      }
      l[ch] = l[ch] * alpha + sum;

      /* ---- acc = alpha acc + P V, the chunk's rows only ---- */
      float af[LANES];
      vstore16(alpha, 0, af);
      fcl_cpu_rows_axpy_v(acc + ch * LANES, af, 0, pt, v_tile, BLOCK_K, chunk_rows[ch]);
    }
  }

  /* ---- O = acc / l, LSE = ln(sum exp) ---- */
  for (int ch = 0; ch < CHUNKS; ++ch) {
    float mf[LANES], lf[LANES];
    vstore16(m[ch], 0, mf);
    vstore16(l[ch], 0, lf);
    for (int r = 0; r < LANES; ++r) {
      const int slot = qb.q0 + ch * LANES + r;
      if (slot - qb.q0 >= qb.rows) break;
      const int tok = SLOT_TOKEN(slot), hoff = SLOT_HEAD(slot);
      const float sink = fcl_row_sink(p, sinks, qb.head + hoff, 1);
      const float inv = FCL_ROW_OUT(p, mf[r], lf[r], sink);
      fcl_cpu_store_row_v(o_rows + (size_t)tok * p.o.seq + (size_t)hoff * p.o.head,
                          acc[ch * LANES + r], inv, head_dim_v, vec IO_STORES_ARG);
      if (FCL_STORES_LSE(lse))
        STORE_F32(lse, qb.lse + (size_t)hoff * p.lse_head + tok, fcl_row_lse(mf[r], p.lse_factor, lf[r], sink));
    }
  }
  FCL_IO_COMMIT();
}
