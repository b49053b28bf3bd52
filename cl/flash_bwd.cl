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
 * taken in two levels (ACCUMULATE, flash_bwd_rows.cl). P is e^(S - LSE)
 * by exp rather than exp2(x * log2 e), which would round the exponent once
 * more; two exps per pair against 7 * head_dim multiply-adds cost nothing. Rows that saw
 * no key (LSE = -inf) and rows past seqlen_q get P = 0 by an explicit test.
 */

/* Parameters, layout and the row helpers: flash_bwd_rows.cl, compiled
 * before this file. */

/* ---- dK, dV --------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_bwd_dkdv(__global const store_t *q,     // [batch][seqlen_q][heads_q][head_dim]
                    __global const store_t *k,     // [batch][seqlen_k][heads_kv][head_dim]
                    __global const store_t *v,     // [batch][seqlen_k][heads_kv][head_dim]
                    __global const store_t *dout,  // [batch][seqlen_q][heads_q][head_dim]
                    __global const float *lse,     // [batch][heads_q][seqlen_q]
                    __global const float *dsum,    // [batch][heads_q][seqlen_q], D
                    __global store_t *dk,          // [batch][seqlen_k][heads_kv][head_dim]
                    __global store_t *dv,          // [batch][seqlen_k][heads_kv][head_dim]
                    const int seqlen_q, const int seqlen_k, const int heads_q,
                    const int heads_kv, const int head_dim,
                    const float scale              // logits are scale * q.k
                    FCL_IO_PARAM) {
  __local tile4_t q_tile[BLOCK * TILE_LD4];  // [query][slice][D_SLICE + skew]
  __local tile4_t do_tile[BLOCK * TILE_LD4];
  __local float lse2_tile[BLOCK], d_tile[BLOCK];
  const float scale_log2 = scale * M_LOG2E_F;  // for fcl_prob
#if ROW_SUM_IN_LOCAL
  __local float part[2 * SUB_ROWS * WG_SIZE]; // [s, dp][row of the sub-tile][work-item]
#endif
  FCL_IO_INIT;

  const int tid = get_local_id(0);
  const int slice = tid % THREADS_PER_ROW;
  const int row_group = tid / THREADS_PER_ROW;
  const fcl_key_block kb = fcl_locate_key_block(BLOCK, BLOCK, CAUSAL, seqlen_q, seqlen_k,
                                                heads_q, heads_kv, head_dim);
  const int k0 = kb.k0, batch = kb.batch, kv_head = kb.kv_head, group = kb.group;
  const size_t q_stride = kb.q_stride, kv_stride = kb.kv_stride, kv_offset = kb.kv_offset;

  for (int i = tid; i < BLOCK * TILE_LD4; i += WG_SIZE) {
    q_tile[i] = TILE_ZERO;
    do_tile[i] = TILE_ZERO;
  }

  int key[ROWS_PER_THREAD];
  float kr[ROWS_PER_THREAD][D_SLICE], vr[ROWS_PER_THREAD][D_SLICE];
  float dkr[ROWS_PER_THREAD][D_SLICE], dvr[ROWS_PER_THREAD][D_SLICE];
  const int col0 = slice * D_SLICE;
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    key[r] = k0 + row_group + r * ROW_GROUPS;
UNROLL
    for (int c = 0; c < D_SLICE; ++c) dkr[r][c] = dvr[r][c] = 0.0f;
  }
  LOAD_ROW_SLICES(kr, k + kv_offset, key, seqlen_k, kv_stride);
  LOAD_ROW_SLICES(vr, v + kv_offset, key, seqlen_k, kv_stride);

  /* Keys past seqlen_k need no mask: their gradients are never stored. */
  const int diag = kb.diag, first_tile = kb.first_tile;
#if CAUSAL
  const int q_full = kb.q_full;
#endif
  const int n_tiles = (seqlen_q + BLOCK - 1) / BLOCK;
  const int slice_base4 = slice * (SLICE_STRIDE / 4);
  barrier(CLK_LOCAL_MEM_FENCE);

  for (int member = 0; member < group; ++member) {
    const int head = kv_head * group + member;
    const size_t q_offset = ((size_t)batch * seqlen_q * heads_q + head) * head_dim;
    const size_t stat_offset = ((size_t)batch * heads_q + head) * seqlen_q;
    for (int tile = first_tile; tile < n_tiles; ++tile) {
      const int q0 = tile * BLOCK;
      const int rows = min(BLOCK, seqlen_q - q0);

      /* ---- Q, dO, LSE and D of this query tile into local memory ---- */
      load_tile_pair(q_tile, do_tile, q + q_offset + (size_t)q0 * q_stride,
                     dout + q_offset + (size_t)q0 * q_stride, q_stride, rows, head_dim
                     IO_LOADS_ARG);
      LOAD_ROW_STATS(lse2_tile, d_tile, lse, dsum, stat_offset, q0, BLOCK);
      barrier(CLK_LOCAL_MEM_FENCE);
#if CAUSAL
      const int masked = q0 < q_full;  // uniform over the group
#endif

      for (int sb = 0; sb < BLOCK; sb += SUB_ROWS) {
        float s[ROWS_PER_THREAD][SUB_ROWS], dp[ROWS_PER_THREAD][SUB_ROWS];
        SLICE_DOTS(s, dp, kr, vr, q_tile, do_tile, sb);
        ROW_SUMS(s, dp);

        /* ---- P = e^(S - LSE) (0 where masked), dS = P (dP - D) ---- */
UNROLL
        for (int i = 0; i < SUB_ROWS; ++i) {
          const float lse2_i = lse2_tile[sb + i], d_i = d_tile[sb + i];
UNROLL
          for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            int seen = lse2_i != -INFINITY;  // past seqlen_q, or saw no key
#if CAUSAL
            if (masked) seen = seen && key[r] <= q0 + sb + i + diag;
#endif
            const float p = seen ? fcl_prob(s[r][i], scale_log2, lse2_i) : 0.0f;
            s[r][i] = p;
            dp[r][i] = p * (dp[r][i] - d_i);
          }
        }

        /* ---- dV += P^T dO, dK += dS^T Q ---- */
UNROLL
        for (int c4 = 0; c4 < D_SLICE4; ++c4) {
          float4 tv[ROWS_PER_THREAD], tk[ROWS_PER_THREAD];
UNROLL
          for (int r = 0; r < ROWS_PER_THREAD; ++r) tv[r] = tk[r] = (float4)(0.0f);
UNROLL
          for (int i = 0; i < SUB_ROWS; ++i) {
            const int at = (sb + i) * TILE_LD4 + slice_base4 + c4;
            const float4 qq = TILE_READ4(q_tile, at), oo = TILE_READ4(do_tile, at);
UNROLL
            for (int r = 0; r < ROWS_PER_THREAD; ++r) {
              tv[r] = fma((float4)(s[r][i]), oo, tv[r]);
              tk[r] = fma((float4)(dp[r][i]), qq, tk[r]);
            }
          }
          ACCUMULATE(dvr, tv, c4);
          ACCUMULATE(dkr, tk, c4);
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites Q and dO
    }
  }

  STORE_ROW_SLICES(dkr, dk + kv_offset, key, seqlen_k, kv_stride, scale);
  STORE_ROW_SLICES(dvr, dv + kv_offset, key, seqlen_k, kv_stride, 1.0f);
  FCL_IO_COMMIT();
}

/* ---- dQ ------------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_bwd_dq(__global const store_t *q,     // [batch][seqlen_q][heads_q][head_dim]
                  __global const store_t *k,     // [batch][seqlen_k][heads_kv][head_dim]
                  __global const store_t *v,     // [batch][seqlen_k][heads_kv][head_dim]
                  __global const store_t *dout,  // [batch][seqlen_q][heads_q][head_dim]
                  __global const float *lse,     // [batch][heads_q][seqlen_q]
                  __global const float *dsum,    // [batch][heads_q][seqlen_q], D
                  __global store_t *dq,          // [batch][seqlen_q][heads_q][head_dim]
                  const int seqlen_q, const int seqlen_k, const int heads_q,
                  const int heads_kv, const int head_dim,
                  const float scale              // logits are scale * q.k
                  FCL_IO_PARAM) {
  __local tile4_t k_tile[BLOCK * TILE_LD4];  // [key][slice][D_SLICE + skew]
  __local tile4_t v_tile[BLOCK * TILE_LD4];
  __local float lse2_rows[BLOCK], d_rows[BLOCK];
  const float scale_log2 = scale * M_LOG2E_F;  // for fcl_prob
#if ROW_SUM_IN_LOCAL
  __local float part[2 * SUB_ROWS * WG_SIZE]; // [s, dp][key of the sub-tile][work-item]
#endif
  FCL_IO_INIT;

  const int tid = get_local_id(0);
  const int slice = tid % THREADS_PER_ROW;
  const int row_group = tid / THREADS_PER_ROW;
  const fcl_query_block qb = fcl_locate_query_block(BLOCK, CAUSAL, seqlen_q, seqlen_k,
                                                    heads_q, heads_kv, head_dim);
  const int q0 = qb.q0, batch = qb.batch, head = qb.head;
  const size_t q_stride = qb.q_stride, kv_stride = qb.kv_stride;
  const size_t q_offset = qb.q_offset, kv_offset = qb.kv_offset;
  const size_t stat_offset = ((size_t)batch * heads_q + head) * seqlen_q;

  for (int i = tid; i < BLOCK * TILE_LD4; i += WG_SIZE) {
    k_tile[i] = TILE_ZERO;
    v_tile[i] = TILE_ZERO;
  }
  LOAD_ROW_STATS(lse2_rows, d_rows, lse, dsum, stat_offset, q0, BLOCK);

  int row[ROWS_PER_THREAD];
  float qr[ROWS_PER_THREAD][D_SLICE], dor[ROWS_PER_THREAD][D_SLICE];
  float dqr[ROWS_PER_THREAD][D_SLICE];
  const int col0 = slice * D_SLICE;
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    row[r] = q0 + row_group + r * ROW_GROUPS;
UNROLL
    for (int c = 0; c < D_SLICE; ++c) dqr[r][c] = 0.0f;
  }
  LOAD_ROW_SLICES(qr, q + q_offset, row, seqlen_q, q_stride);
  LOAD_ROW_SLICES(dor, dout + q_offset, row, seqlen_q, q_stride);
  barrier(CLK_LOCAL_MEM_FENCE);
  float lse2_r[ROWS_PER_THREAD], d_r[ROWS_PER_THREAD];
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    lse2_r[r] = lse2_rows[row_group + r * ROW_GROUPS];
    d_r[r] = d_rows[row_group + r * ROW_GROUPS];
  }

  const int diag = qb.diag, kv_full = qb.kv_full;  // the keys the rows see
  const int n_tiles = (qb.kv_end + BLOCK - 1) / BLOCK;
  const int slice_base4 = slice * (SLICE_STRIDE / 4);

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int k0 = tile * BLOCK;
    load_tile_pair(k_tile, v_tile, k + kv_offset + (size_t)k0 * kv_stride,
                   v + kv_offset + (size_t)k0 * kv_stride, kv_stride,
                   min(BLOCK, seqlen_k - k0), head_dim IO_LOADS_ARG);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int masked = k0 + BLOCK > kv_full;  // uniform over the group

    for (int sb = 0; sb < BLOCK; sb += SUB_ROWS) {
      float s[ROWS_PER_THREAD][SUB_ROWS], dp[ROWS_PER_THREAD][SUB_ROWS];
      SLICE_DOTS(s, dp, qr, dor, k_tile, v_tile, sb);
      ROW_SUMS(s, dp);

      /* ---- P = e^(S - LSE) (0 where masked), dS = P (dP - D) ---- */
UNROLL
      for (int r = 0; r < ROWS_PER_THREAD; ++r) {
        const int live = lse2_r[r] != -INFINITY;  // past seqlen_q, or sees no key
UNROLL
        for (int j = 0; j < SUB_ROWS; ++j) {
          int seen = live;
          if (masked) {
            const int key = k0 + sb + j;
#if CAUSAL
            seen = seen && key < seqlen_k && key <= row[r] + diag;
#else
            seen = seen && key < seqlen_k;
#endif
          }
          const float p = seen ? fcl_prob(s[r][j], scale_log2, lse2_r[r]) : 0.0f;
          dp[r][j] = p * (dp[r][j] - d_r[r]);
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

  STORE_ROW_SLICES(dqr, dq + q_offset, row, seqlen_q, q_stride, scale);
  FCL_IO_COMMIT();
}
