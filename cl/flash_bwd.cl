/*
 * flash_bwd.cl — FlashAttention-2 backward with recomputation: nothing of
 * size seqlen_q x seqlen_k is stored, and nothing is summed with atomics.
 *
 * Two kernels, enqueued after flash_bwd_pre.cl's D_i = sum_c dO_ic * O_ic:
 *   flash_bwd_dkdv        a work-group keeps BLOCK keys of one (batch, kv
 *                         head) in registers and streams tiles of BLOCK
 *                         queries of every query head of its group through
 *                         local memory. It recomputes S = scale * q.k,
 *                         P = e^(S - LSE), dP = dO.v and dS = P (dP - D),
 *                         accumulates dV += P^T dO and dK += dS^T Q, and
 *                         writes dK (times scale) and dV once.
 *   flash_bwd_dq          a work-group keeps BLOCK queries and streams tiles
 *                         of BLOCK keys; it recomputes the same and writes
 *                         dQ = scale * dS K once.
 * Every gradient element is summed by one work-item in a fixed order, the
 * GQA sum over the query heads of a group included, so runs are
 * bit-identical. The price of doing without atomics is recomputing S, P
 * and dP in both kernels: 7 products of head_dim per (query, key) pair
 * instead of 5.
 *
 * Work-item layout as in flash_fwd.cl: THREADS_PER_ROW adjacent work-items
 * share a row, each holding a D_SLICE-wide slice of it, and each owns
 * ROWS_PER_THREAD rows ROW_GROUPS apart. Streamed rows are read from local
 * memory as float4s that all rows of a warp read at once (broadcasts); the
 * tiles hold floats, or with TILE_STORAGE the storage type (common.cl). A
 * tile is consumed SUB_ROWS rows at a time: their dot products are summed
 * over the slices together, so that the shuffles or barriers of the sum
 * are shared, and only 2 * SUB_ROWS scores per row sit in registers.
 *
 * Accuracy as in flash_fwd.cl: the scale multiplies finished dot products
 * and the dot products run in four chains; the gradients' long sums are
 * taken in two levels (ACCUMULATE, flash_bwd_rows.cl). P comes from
 * fcl_prob (common.cl), with the transforms' derivative in dS. Rows that
 * saw no key (LSE = -inf) and rows past the sequence get P = 0 by an
 * explicit test; pairs outside the mask (params.h) likewise, tested only
 * in the tiles that not every row or key of the block sees whole.
 */

/* Parameters, layout and the row helpers: flash_bwd_rows.cl, compiled
 * before this file. */

/* ---- dK, dV --------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_bwd_dkdv(FCL_ATTENTION_PARAMS) {
  __local tile4_t q_tile[BLOCK * TILE_LD4];  // [query][slice][D_SLICE + skew]
  __local tile4_t do_tile[BLOCK * TILE_LD_V4];
  __local float lse2_tile[BLOCK], d_tile[BLOCK];
#if ROW_SUM_IN_LOCAL
  __local float part[2 * SUB_ROWS * WG_SIZE]; // [s, dp][row of the sub-tile][work-item]
#endif
  FCL_IO_INIT;

  const int tid = get_local_id(0);
  const int slice = tid % THREADS_PER_ROW;
  const int row_group = tid / THREADS_PER_ROW;
  const fcl_key_block kb = fcl_locate_key_block(p, seqs, work, BLOCK IO_LOADS_ARG);
  const int k0 = kb.k0, batch = kb.batch, kv_head = kb.kv_head;
  const int nq = kb.seq.nq, nk = kb.seq.nk, head_dim = p.head_dim, head_dim_v = FCL_HEAD_DIM_V(p);
  const size_t k_off = fcl_at(p.k, batch, kb.seq.k_start, kv_head);
  const size_t v_off = fcl_at(p.v, batch, kb.seq.k_start, kv_head);

  for (int i = tid; i < BLOCK * TILE_LD4; i += WG_SIZE) q_tile[i] = TILE_ZERO;
  for (int i = tid; i < BLOCK * TILE_LD_V4; i += WG_SIZE) do_tile[i] = TILE_ZERO;

  int key[ROWS_PER_THREAD];
  float kr[ROWS_PER_THREAD][D_SLICE], vr[ROWS_PER_THREAD][DV_SLICE];
  float dkr[ROWS_PER_THREAD][D_SLICE], dvr[ROWS_PER_THREAD][DV_SLICE];
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    key[r] = k0 + row_group + r * ROW_GROUPS;
UNROLL
    for (int c = 0; c < D_SLICE; ++c) dkr[r][c] = 0.0f;
UNROLL
    for (int c = 0; c < DV_SLICE; ++c) dvr[r][c] = 0.0f;
  }
  LOAD_ROW_SLICES(kr, k + k_off, key, nk, p.k.seq, D_SLICE, head_dim);
  LOAD_ROW_SLICES(vr, v + v_off, key, nk, p.v.seq, DV_SLICE, head_dim_v);

  /* Keys past the sequence need no mask: their gradients are never stored. */
  const int diag = nk - nq;
  const int slice_base4 = slice * (SLICE_STRIDE / 4), slice_base_v4 = slice * (SLICE_STRIDE_V / 4);
  barrier(CLK_LOCAL_MEM_FENCE);

  for (int member = 0; member < kb.heads; ++member) {
    const fcl_group_head gh = fcl_group_head_of(p, kb, member);
    const float slope = ALIBI_SLOPE(batch, gh.head);
    for (int tile = kb.first_tile; tile < kb.end_tile; ++tile) {
      const int q0 = tile * BLOCK;
      const int rows = min(BLOCK, nq - q0);

      /* ---- Q, dO, LSE, D and the rows' keys of this query tile ---- */
      load_tile_pair(q_tile, do_tile, q + gh.q + (size_t)q0 * p.q.seq,
                     dout + gh.dout + (size_t)q0 * p.dout.seq, p.q.seq, p.dout.seq, rows,
                     head_dim, head_dim_v, p.vec4 IO_LOADS_ARG);
      LOAD_ROW_STATS(lse2_tile, d_tile, lse, dsum, gh.stats, q0, BLOCK, nq, NO_ROW_EXTRA);
      barrier(CLK_LOCAL_MEM_FENCE);
      const int masked = q0 < kb.full_lo || q0 + BLOCK > kb.full_hi;  // uniform over the group

      for (int sb = 0; sb < BLOCK; sb += SUB_ROWS) {
        float s[ROWS_PER_THREAD][SUB_ROWS], dp[ROWS_PER_THREAD][SUB_ROWS];
        SLICE_DOTS(s, dp, kr, vr, q_tile, do_tile, sb);
        ROW_SUMS(s, dp);

        /* ---- P (0 where masked), dS = P (dP - D) times the transform's slope ---- */
UNROLL
        for (int i = 0; i < SUB_ROWS; ++i) {
          const int qi = sb + i;
          const float lse2_i = lse2_tile[qi], d_i = d_tile[qi];
UNROLL
          for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            int seen = lse2_i != -INFINITY;  // past the sequence, or saw no key
            if (masked)
              seen = seen && BWD_KEY_SEEN_BY(key[r], q0 + qi, q0 + qi + diag - key[r], nq, nk);
            float dscale;
            const float pr = fcl_prob(s[r][i], p, lse2_i, slope, q0 + qi + diag - key[r], &dscale);
            s[r][i] = seen ? pr : 0.0f;
            dp[r][i] = s[r][i] * (dp[r][i] - d_i) * dscale;
          }
        }

        /* ---- dV += P^T dO, dK += dS^T Q ---- */
UNROLL
        for (int c4 = 0; c4 < WIDE_SLICE4; ++c4) {
          float4 tv[ROWS_PER_THREAD], tk[ROWS_PER_THREAD];
UNROLL
          for (int r = 0; r < ROWS_PER_THREAD; ++r) tv[r] = tk[r] = (float4)(0.0f);
UNROLL
          for (int i = 0; i < SUB_ROWS; ++i) {
            if (c4 < DV_SLICE4) {
              const float4 oo = TILE_READ4(do_tile, (sb + i) * TILE_LD_V4 + slice_base_v4 + c4);
UNROLL
              for (int r = 0; r < ROWS_PER_THREAD; ++r) tv[r] = fma((float4)(s[r][i]), oo, tv[r]);
            }
            if (c4 < D_SLICE4) {
              const float4 qq = TILE_READ4(q_tile, (sb + i) * TILE_LD4 + slice_base4 + c4);
UNROLL
              for (int r = 0; r < ROWS_PER_THREAD; ++r) tk[r] = fma((float4)(dp[r][i]), qq, tk[r]);
            }
          }
          if (c4 < DV_SLICE4) ACCUMULATE(dvr, tv, c4);
          if (c4 < D_SLICE4) ACCUMULATE(dkr, tk, c4);
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites Q and dO
    }
  }

  STORE_ROW_SLICES(dkr, dk + fcl_at(p.dk, batch, kb.seq.k_start, kv_head), key, nk, p.dk.seq,
                   p.scale, D_SLICE, head_dim);
  STORE_ROW_SLICES(dvr, dv + fcl_at(p.dv, batch, kb.seq.k_start, kv_head), key, nk, p.dv.seq,
                   1.0f, DV_SLICE, head_dim_v);
  FCL_IO_COMMIT();
}

/* ---- dQ ------------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_bwd_dq(FCL_ATTENTION_PARAMS) {
  __local tile4_t k_tile[BLOCK * TILE_LD4];  // [key][slice][D_SLICE + skew]
  __local tile4_t v_tile[BLOCK * TILE_LD_V4];
  __local float lse2_rows[BLOCK], d_rows[BLOCK];
#if ROW_SUM_IN_LOCAL
  __local float part[2 * SUB_ROWS * WG_SIZE]; // [s, dp][key of the sub-tile][work-item]
#endif
  FCL_IO_INIT;

  const int tid = get_local_id(0);
  const int slice = tid % THREADS_PER_ROW;
  const int row_group = tid / THREADS_PER_ROW;
  const fcl_query_block qb = fcl_locate_query_block(p, seqs, work, alibi, BLOCK IO_LOADS_ARG);
  const int q0 = qb.q0, batch = qb.batch, head = qb.head;
  const int nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim, head_dim_v = FCL_HEAD_DIM_V(p);

  for (int i = tid; i < BLOCK * TILE_LD4; i += WG_SIZE) k_tile[i] = TILE_ZERO;
  for (int i = tid; i < BLOCK * TILE_LD_V4; i += WG_SIZE) v_tile[i] = TILE_ZERO;
  LOAD_ROW_STATS(lse2_rows, d_rows, lse, dsum, qb.lse, q0, BLOCK, nq, NO_ROW_EXTRA);

  int row[ROWS_PER_THREAD];
  float qr[ROWS_PER_THREAD][D_SLICE], dor[ROWS_PER_THREAD][DV_SLICE];
  float dqr[ROWS_PER_THREAD][D_SLICE];
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    row[r] = q0 + row_group + r * ROW_GROUPS;
UNROLL
    for (int c = 0; c < D_SLICE; ++c) dqr[r][c] = 0.0f;
  }
  LOAD_ROW_SLICES(qr, q + fcl_at(p.q, batch, qb.seq.q_start, head), row, nq, p.q.seq, D_SLICE,
                  head_dim);
  LOAD_ROW_SLICES(dor, dout + fcl_at(p.dout, batch, qb.seq.q_start, head), row, nq, p.dout.seq,
                  DV_SLICE, head_dim_v);
  barrier(CLK_LOCAL_MEM_FENCE);
  float lse2_r[ROWS_PER_THREAD], d_r[ROWS_PER_THREAD];
#if WINDOW == 2
  int lo_r[ROWS_PER_THREAD], hi_r[ROWS_PER_THREAD];  // the keys each row sees
#endif
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    lse2_r[r] = lse2_rows[row_group + r * ROW_GROUPS];
    d_r[r] = d_rows[row_group + r * ROW_GROUPS];
#if WINDOW == 2
    lo_r[r] = hi_r[r] = 0;
    if (row[r] < nq)
      fcl_row_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), row[r], &lo_r[r], &hi_r[r]);
#endif
  }

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK, end_tile = (qb.k_hi + BLOCK - 1) / BLOCK;
  const int slice_base4 = slice * (SLICE_STRIDE / 4), slice_base_v4 = slice * (SLICE_STRIDE_V / 4);
  __global const store_t *k_rows = k + fcl_at(p.k, batch, qb.seq.k_start, qb.kv_head);
  __global const store_t *v_rows = v + fcl_at(p.v, batch, qb.seq.k_start, qb.kv_head);

  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK;
    load_tile_pair(k_tile, v_tile, k_rows + (size_t)k0 * p.k.seq, v_rows + (size_t)k0 * p.v.seq,
                   p.k.seq, p.v.seq, min(BLOCK, nk - k0), head_dim, head_dim_v, p.vec4 IO_LOADS_ARG);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int masked = k0 < qb.full_lo || k0 + BLOCK > qb.full_hi;  // uniform over the group

    for (int sb = 0; sb < BLOCK; sb += SUB_ROWS) {
      float s[ROWS_PER_THREAD][SUB_ROWS], dp[ROWS_PER_THREAD][SUB_ROWS];
      SLICE_DOTS(s, dp, qr, dor, k_tile, v_tile, sb);
      ROW_SUMS(s, dp);

      /* ---- P (0 where masked), dS = P (dP - D) times the transform's slope ---- */
UNROLL
      for (int r = 0; r < ROWS_PER_THREAD; ++r) {
        const int live = lse2_r[r] != -INFINITY;  // past the sequence, or sees no key
UNROLL
        for (int j = 0; j < SUB_ROWS; ++j) {
          const int key = k0 + sb + j;
          const int seen =
              live && (!masked || ROW_SEES(key, row[r], nq, nk, lo_r[r], hi_r[r]));
          float dscale;
          const float pr = fcl_prob(s[r][j], p, lse2_r[r], qb.slope, row[r] + diag - key, &dscale);
          dp[r][j] = (seen ? pr : 0.0f) * (dp[r][j] - d_r[r]) * dscale;
        }
      }

      /* ---- dQ += dS K ---- */
UNROLL
      for (int c4 = 0; c4 < D_SLICE4; ++c4) {
        float4 t[ROWS_PER_THREAD];
UNROLL
        for (int r = 0; r < ROWS_PER_THREAD; ++r) t[r] = (float4)(0.0f);
UNROLL
        for (int j = 0; j < SUB_ROWS; ++j) {
          const float4 kk = TILE_READ4(k_tile, (sb + j) * TILE_LD4 + slice_base4 + c4);
UNROLL
          for (int r = 0; r < ROWS_PER_THREAD; ++r) t[r] = fma((float4)(dp[r][j]), kk, t[r]);
        }
        ACCUMULATE(dqr, t, c4);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites K and V
  }

  STORE_ROW_SLICES(dqr, dq + fcl_at(p.dq, batch, qb.seq.q_start, head), row, nq, p.dq.seq,
                   p.scale, D_SLICE, head_dim);
  FCL_IO_COMMIT();
}
