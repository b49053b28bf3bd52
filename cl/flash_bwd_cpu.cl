/*
 * flash_bwd_cpu.cl — the FlashAttention-2 backward for CPUs: flash_bwd.cl's
 * algorithm (recomputation, no atomics, dK/dV and dQ in two kernels after
 * flash_bwd_pre.cl's D) in cpu.cl's form: one work-item a work-group,
 * 16 rows a vector.
 *
 *   flash_bwd_dkdv_cpu  keeps BLOCK keys of one (batch, KV head), K and V
 *                       transposed, 16 keys a vector; streams tiles of
 *                       BLOCK queries of every query head of the group
 *                       16 at a time: S and dP come
 *                       out with the keys across the lanes, P and dS too,
 *                       and dV += P^T dO, dK += dS^T Q accumulate a key at
 *                       a time across head_dim.
 *   flash_bwd_dq_cpu    keeps BLOCK queries, Q and dO transposed, 16 rows a
 *                       vector; streams tiles of BLOCK keys, and dQ += dS K
 *                       accumulates a row at a time.
 * Every gradient element is summed in one place in a fixed order, the GQA
 * sum included: runs are bit-identical. Numerics are flash_bwd.cl's: P from
 * fcl_prob16 (common.cl), the transforms' slope in dS, rows that saw no key
 * and pairs outside the mask (params.h) P = 0, the gradients' long sums in
 * two levels (cpu.cl, fcl_cpu_rows_axpy).
 */

#ifndef BLOCK
#define BLOCK 64            // keys (dK/dV) or queries (dQ) a work-group keeps, and tile rows
#endif

#define CHUNKS (BLOCK / LANES)

#if BLOCK % LANES != 0
#error "BLOCK must be a multiple of 16"
#endif

/* LSE in log2 units and D of query rows [q0, q0 + n) of a (batch, head)
 * whose row 0 is at `stat`; rows from nq on get LSE -inf (P = 0) and D 0. */
inline void fcl_cpu_row_stats(__private float *lse2, __private float *d, __global const float *lse,
                              __global const float *dsum, const size_t stat, const int q0,
                              const int n, const int nq IO_LOADS) {
  IO_HELPER_INIT;
  for (int i = 0; i < n; ++i) {
    const int row = q0 + i, live = row < nq;
    lse2[i] = live ? LOAD_F32(lse, stat + row) * M_LOG2E_F : -INFINITY;
    d[i] = live ? LOAD_F32(dsum, stat + row) : 0.0f;
  }
  IO_HELPER_LOADS_DONE();
}

/* ---- dK, dV --------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void flash_bwd_dkdv_cpu(FCL_ATTENTION_PARAMS) {
  float q_tile[BLOCK * HEAD_DIM_MAX];
  float do_tile[BLOCK * HEAD_DIM_V_MAX];
  FCL_IO_INIT;

  const fcl_key_block kb = fcl_locate_key_block(p, seqs, work, BLOCK IO_LOADS_ARG);
  const int batch = kb.batch, kv_head = kb.kv_head;
  const int nq = kb.seq.nq, nk = kb.seq.nk, head_dim = p.head_dim, vec = p.vec4;
  const int head_dim_v = FCL_HEAD_DIM_V(p);
  const int diag = nk - nq;
  __global const store_t *k_base = k + fcl_at(p.k, batch, kb.seq.k_start, kv_head);
  __global const store_t *v_base = v + fcl_at(p.v, batch, kb.seq.k_start, kv_head);
  const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

  /* The block's keys, transposed a chunk of 16 at a time, the queries each
   * chunk's keys are seen by, and the gradients' accumulators. */
  float16 kt[CHUNKS][HEAD_DIM_MAX], vt[CHUNKS][HEAD_DIM_V_MAX];
  int16 key[CHUNKS];
  int chunk_lo[CHUNKS], chunk_hi[CHUNKS];
  float16 dk_acc[BLOCK][VECS], dv_acc[BLOCK][VECS_V];
  for (int ch = 0; ch < CHUNKS; ++ch) {
    const int c0 = kb.k0 + ch * LANES, keys = clamp(kb.keys - ch * LANES, 0, LANES);
    size_t k_off[LANES], v_off[LANES];
    for (int r = 0; r < LANES; ++r) {
      k_off[r] = (size_t)(c0 + r) * p.k.seq;
      v_off[r] = (size_t)(c0 + r) * p.v.seq;
    }
    fcl_cpu_rows_t((float *)kt[ch], k_base, k_off, keys, head_dim, HEAD_DIM_MAX, vec IO_LOADS_ARG);
    fcl_cpu_rows_t((float *)vt[ch], v_base, v_off, keys, head_dim_v, HEAD_DIM_V_MAX,
                   vec IO_LOADS_ARG);
    key[ch] = (int16)(c0) + lane;
    chunk_lo[ch] = chunk_hi[ch] = 0;
    if (keys > 0) {
      int full_lo, full_hi;
      fcl_block_queries(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), c0, keys, &chunk_lo[ch],
                        &chunk_hi[ch], &full_lo, &full_hi);
    }
  }
  for (int r = 0; r < BLOCK; ++r) {
    for (int c = 0; c < VECS; ++c) dk_acc[r][c] = (float16)(0.0f);
    for (int c = 0; c < VECS_V; ++c) dv_acc[r][c] = (float16)(0.0f);
  }

  for (int member = 0; member < kb.heads; ++member) {
    const fcl_group_head gh = fcl_group_head_of(p, kb, member);
    __global const store_t *q_base = q + gh.q, *do_base = dout + gh.dout;
    const float slope = ALIBI_SLOPE(batch, gh.head);
    for (int tile = kb.first_tile; tile < kb.end_tile; ++tile) {
      const int q0 = tile * BLOCK, rows = min(BLOCK, nq - q0);
      fcl_cpu_tile(q_tile, BLOCK, q_base + (size_t)q0 * p.q.seq, p.q.seq, rows, head_dim,
                   HEAD_DIM_MAX, vec IO_LOADS_ARG);
      fcl_cpu_tile(do_tile, BLOCK, do_base + (size_t)q0 * p.dout.seq, p.dout.seq, rows,
                   head_dim_v, HEAD_DIM_V_MAX, vec IO_LOADS_ARG);
      if (tile + 1 < kb.end_tile)  // the next tile on its way into the cache (cpu.cl)
        FCL_CPU_PREFETCH_TILES(q_base + (size_t)(q0 + BLOCK) * p.q.seq, p.q.seq,
                               do_base + (size_t)(q0 + BLOCK) * p.dout.seq, p.dout.seq,
                               min(BLOCK, nq - q0 - BLOCK), head_dim, head_dim_v);
      float lse2[BLOCK], d[BLOCK];
      fcl_cpu_row_stats(lse2, d, lse, dsum, gh.stats, q0, BLOCK, nq IO_LOADS_ARG);
      const int masked = q0 < kb.full_lo || q0 + BLOCK > kb.full_hi;

      for (int ch = 0; ch < CHUNKS; ++ch)
        for (int sb = 0; sb < BLOCK; sb += LANES) {
          /* Sixteen queries none of which sees a key of the chunk: nothing. */
          if (q0 + sb >= chunk_hi[ch] || q0 + sb + LANES <= chunk_lo[ch]) continue;
          float16 s[LANES], dp[LANES];
          FCL_CPU_DOTS(s, q_tile + sb * HEAD_DIM_MAX, kt[ch], LANES, HEAD_DIM_MAX);
          FCL_CPU_DOTS(dp, do_tile + sb * HEAD_DIM_V_MAX, vt[ch], LANES, HEAD_DIM_V_MAX);
          float pw[LANES * LANES], dsw[LANES * LANES];  // [query][key]: P and dS
          CPU_ROLLED
          for (int i = 0; i < LANES; ++i) {
            const int qi = sb + i, row = q0 + qi;
            float16 dscale;
            const float16 pr = fcl_prob16(s[i], p, (float16)(lse2[qi]), slope,
                                          (int16)(row + diag) - key[ch], &dscale);
            int16 seen = (int16)(lse2[qi] != -INFINITY ? -1 : 0);  // past nq, or saw no key
            if (masked) {
              int lo = 0, hi = 0;
              fcl_row_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), row, &lo, &hi);
              seen &= FCL_KEY_IN(key[ch], (int16)(lo), (int16)(hi));
            }
            const float16 pv = select((float16)(0.0f), pr, seen);
            vstore16(pv, i, pw);
            vstore16(pv * (dp[i] - d[qi]) * dscale, i, dsw);
          }
          fcl_cpu_rows_axpy_v(dv_acc + ch * LANES, NULL, 1, pw, do_tile + sb * HEAD_DIM_V_MAX,
                              LANES, LANES);
          fcl_cpu_rows_axpy(dk_acc + ch * LANES, NULL, 1, dsw, q_tile + sb * HEAD_DIM_MAX, LANES,
                            LANES);
        }
    }
  }

  __global store_t *dk_base = dk + fcl_at(p.dk, batch, kb.seq.k_start, kv_head);
  __global store_t *dv_base = dv + fcl_at(p.dv, batch, kb.seq.k_start, kv_head);
  for (int r = 0; r < kb.keys; ++r) {
    const size_t at = (size_t)(kb.k0 + r);
    fcl_cpu_store_row(dk_base + at * p.dk.seq, dk_acc[r], p.scale, head_dim, vec IO_STORES_ARG);
    fcl_cpu_store_row_v(dv_base + at * p.dv.seq, dv_acc[r], 1.0f, head_dim_v, vec IO_STORES_ARG);
  }
  FCL_IO_COMMIT();
}

/* ---- dQ ------------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void flash_bwd_dq_cpu(FCL_ATTENTION_PARAMS) {
  float k_tile[BLOCK * HEAD_DIM_MAX];
  float v_tile[BLOCK * HEAD_DIM_V_MAX];
  FCL_IO_INIT;

  const fcl_query_block qb = fcl_locate_query_block(p, seqs, work, alibi, BLOCK IO_LOADS_ARG);
  const int nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim, vec = p.vec4;
  const int head_dim_v = FCL_HEAD_DIM_V(p);
  const int diag = nk - nq;
  __global const store_t *q_base = q + fcl_at(p.q, qb.batch, qb.seq.q_start, qb.head);
  __global const store_t *do_base = dout + fcl_at(p.dout, qb.batch, qb.seq.q_start, qb.head);
  __global const store_t *k_rows = k + fcl_at(p.k, qb.batch, qb.seq.k_start, qb.kv_head);
  __global const store_t *v_rows = v + fcl_at(p.v, qb.batch, qb.seq.k_start, qb.kv_head);
  const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

  /* Per chunk of 16 rows: Q and dO transposed, LSE (log2 units), D, the
   * rows and their window bounds, the keys some row of it sees. */
  float16 qt[CHUNKS][HEAD_DIM_MAX], dot_t[CHUNKS][HEAD_DIM_V_MAX];
  float16 lse2[CHUNKS], d[CHUNKS];
  int16 row[CHUNKS], key_lo[CHUNKS], key_hi[CHUNKS];
  int chunk_lo[CHUNKS], chunk_hi[CHUNKS];
  float16 dq_acc[BLOCK][VECS];
  for (int ch = 0; ch < CHUNKS; ++ch) {
    const int r0 = qb.q0 + ch * LANES, rows = clamp(qb.rows - ch * LANES, 0, LANES);
    size_t q_off[LANES], do_off[LANES];
    int *lo = (int *)&key_lo[ch], *hi = (int *)&key_hi[ch];
    for (int r = 0; r < LANES; ++r) {
      q_off[r] = (size_t)(r0 + r) * p.q.seq;
      do_off[r] = (size_t)(r0 + r) * p.dout.seq;
      fcl_row_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), r0 + r, &lo[r], &hi[r]);
    }
    fcl_cpu_rows_t((float *)qt[ch], q_base, q_off, rows, head_dim, HEAD_DIM_MAX, vec IO_LOADS_ARG);
    fcl_cpu_rows_t((float *)dot_t[ch], do_base, do_off, rows, head_dim_v, HEAD_DIM_V_MAX,
                   vec IO_LOADS_ARG);
    fcl_cpu_row_stats((float *)&lse2[ch], (float *)&d[ch], lse, dsum, qb.lse, r0, LANES,
                      nq IO_LOADS_ARG);
    row[ch] = (int16)(r0) + lane;
    chunk_lo[ch] = chunk_hi[ch] = 0;
    if (rows > 0) {
      int full_lo, full_hi;
      fcl_block_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), r0, rows, &chunk_lo[ch],
                     &chunk_hi[ch], &full_lo, &full_hi);
    }
  }
  for (int r = 0; r < BLOCK; ++r)
    for (int c = 0; c < VECS; ++c) dq_acc[r][c] = (float16)(0.0f);

  const int first_tile = qb.k_lo / BLOCK, end_tile = (qb.k_hi + BLOCK - 1) / BLOCK;
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK, keys = min(BLOCK, nk - k0);
    fcl_cpu_kv_tile(k_tile, BLOCK, k_rows + (size_t)k0 * p.k.seq, p.k.seq, keys, head_dim,
                    HEAD_DIM_MAX, vec IO_LOADS_ARG);
    fcl_cpu_kv_tile(v_tile, BLOCK, v_rows + (size_t)k0 * p.v.seq, p.v.seq, keys, head_dim_v,
                    HEAD_DIM_V_MAX, vec IO_LOADS_ARG);
    if (tile + 1 < end_tile)  // the next tile on its way into the cache (cpu.cl)
      FCL_CPU_PREFETCH_TILES(k_rows + (size_t)(k0 + BLOCK) * p.k.seq, p.k.seq,
                             v_rows + (size_t)(k0 + BLOCK) * p.v.seq, p.v.seq,
                             min(BLOCK, nk - k0 - BLOCK), head_dim, head_dim_v);
    const int masked = k0 < qb.full_lo || k0 + BLOCK > qb.full_hi;

    for (int ch = 0; ch < CHUNKS; ++ch) {
      /* -1 for the rows that see a key (not past nq) */
      float lse2_rows[LANES];
      int live_rows[LANES];
      vstore16(lse2[ch], 0, lse2_rows);
      for (int r = 0; r < LANES; ++r) live_rows[r] = lse2_rows[r] != -INFINITY ? -1 : 0;
      const int16 live = vload16(0, live_rows);
      for (int sb = 0; sb < BLOCK; sb += LANES) {
        const int j0 = k0 + sb;
        if (j0 >= chunk_hi[ch] || j0 + LANES <= chunk_lo[ch]) continue;
        float16 s[LANES], dp[LANES];
        FCL_CPU_DOTS(s, k_tile + sb * HEAD_DIM_MAX, qt[ch], LANES, HEAD_DIM_MAX);
        FCL_CPU_DOTS(dp, v_tile + sb * HEAD_DIM_V_MAX, dot_t[ch], LANES, HEAD_DIM_V_MAX);
        float dsw[LANES * LANES];  // [key][row]: dS
        CPU_ROLLED
        for (int j = 0; j < LANES; ++j) {
          float16 dscale;
          const float16 pr = fcl_prob16(s[j], p, lse2[ch], qb.slope,
                                        row[ch] + (diag - (j0 + j)), &dscale);
          int16 seen = live;
          if (masked)
            seen &= FCL_KEY_IN((int16)(j0 + j), key_lo[ch], key_hi[ch]);
          vstore16(select((float16)(0.0f), pr, seen) * (dp[j] - d[ch]) * dscale, j, dsw);
        }
        fcl_cpu_rows_axpy(dq_acc + ch * LANES, NULL, 1, dsw, k_tile + sb * HEAD_DIM_MAX, LANES,
                          LANES);
      }
    }
  }

  __global store_t *dq_rows = dq + fcl_at(p.dq, qb.batch, qb.seq.q_start, qb.head);
  for (int r = 0; r < qb.rows; ++r)
    fcl_cpu_store_row(dq_rows + (size_t)(qb.q0 + r) * p.dq.seq, dq_acc[r], p.scale, head_dim,
                      vec IO_STORES_ARG);
  FCL_IO_COMMIT();
}
