/*
 * softmax.cl — the naive algorithm's row kernels, one work-group per row of
 * a chunk's nq x nk score matrices (S, P, dP), with the mask and the score
 * transforms of params.h and common.cl:
 *   softmax_rows       forward: P = softmax(t(S)) in place, and LSE;
 *   softmax_recompute  backward: P = e^(t(S) - LSE) in place, from the
 *                      forward's LSE (as the flash backward recomputes it),
 *                      and with a softcap the slope t'(S) into T;
 *   softmax_bwd        backward: dS = scale * P (dP - rowsum(P dP)) t'(S),
 *                      in place over dP;
 *   zero_rows          rows of a tensor view set to 0: outputs of sequences
 *                      whose GEMMs have nothing to multiply (no key, or no
 *                      query).
 *
 * S holds a chunk of (batch, head) slices of one sequence, already scaled
 * by the GEMM's alpha: t(S) soft-caps it and subtracts the ALiBi bias.
 * The slices of one chunk share a batch index and a position within their
 * query-head group, and cover consecutive kv heads (naive.c explains the
 * chunking), so slice z is query head (kv_first + z) * group + member.
 *
 * Each work-item keeps COLS_PER_ITEM elements of its row in registers, so
 * S is read once and P written once; COLS_PER_ITEM = 0 selects a streaming
 * variant for rows too long for that, which reads S twice (softmax_bwd: P
 * and dP twice). Elements a row does not see are written as 0 and, but for
 * the softmax's max, never read.
 */

#ifndef WG_SIZE
#define WG_SIZE 256        // work-items per row (a power of two)
#endif
#ifndef COLS_PER_ITEM
#define COLS_PER_ITEM 4    // row elements per work-item; 0: stream the row
#endif

#if (WG_SIZE & (WG_SIZE - 1)) != 0
#error "WG_SIZE must be a power of two"
#endif

/* Tree reduction over the work-group; every work-item gets the result. */
inline float group_reduce(float x, __local float *scratch, int is_max) {
  const int tid = get_local_id(0);
  scratch[tid] = x;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int width = WG_SIZE / 2; width > 0; width /= 2) {
    if (tid < width) {
      const float other = scratch[tid + width];
      scratch[tid] = is_max ? fmax(scratch[tid], other) : scratch[tid] + other;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float result = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);  // scratch is reused by the next reduction
  return result;
}

/* The logit of a scaled score x of query i and key j: soft-capped, minus
 * the ALiBi bias (common.cl's transforms, in natural units). */
inline float naive_logit(float x, const fcl_params p, float slope, int rel) {
  FCL_TRANSFORM_LOGIT(x, p, slope, rel, (float));
  (void)p, (void)slope, (void)rel;
  return x;
}

/* What every row kernel works out first: its row and slice, the head, the
 * keys it sees, its LSE's index and its ALiBi slope (read once, by the
 * first work-item, into local memory). */
#define LOCATE_ROW()                                                            \
  const int tid = get_local_id(0);                                              \
  const int i = get_group_id(0);                                                \
  const int slice = get_group_id(1);                                            \
  const int head = (kv_first + slice) * group + member;                         \
  const size_t s_row = ((size_t)slice * nq + i) * nk;                           \
  const size_t lse_at = (size_t)batch * p.lse_batch + (size_t)head * p.lse_head + q_start + i; \
  int lo, hi;                                                                   \
  fcl_row_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), i, &lo, &hi);           \
  const int rel0 = i + nk - nq;  /* rel of key j: rel0 - j */                   \
  (void)lse_at, (void)rel0

#if ALIBI
#define LOAD_SLOPE(slope)                                                       \
  __local float slope_;                                                         \
  if (tid == 0) slope_ = LOAD_F32(alibi, batch * p.alibi_batch + head);         \
  barrier(CLK_LOCAL_MEM_FENCE);                                                 \
  const float slope = slope_
#else
#define LOAD_SLOPE(slope) const float slope = 0.0f
#endif

/* The chunk's arguments after the buffers: the problem, then where the
 * chunk is. */
#define CHUNK_PARAMS                                                            \
  const fcl_params p, const int batch, const int nq, const int nk, const int q_start, \
      const int group, const int kv_first, const int member

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_rows(__global store_t *s,         // [slices][nq][nk], P on return
                  __global float *lse,         // by p.lse_batch, p.lse_head
                  __global const float *alibi, // ALiBi slopes
                  __global const float *sinks, // attention sinks [heads_q] (NULL: none)
                  CHUNK_PARAMS FCL_IO_PARAM) {
  __local float scratch[WG_SIZE];
  FCL_IO_INIT;
  LOCATE_ROW();
  LOAD_SLOPE(slope);
  __global store_t *srow = s + s_row;

#if COLS_PER_ITEM > 0
  float x[COLS_PER_ITEM];
  float m = FCL_MAX_INIT;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    x[c] = j >= lo && j < hi ? naive_logit(LOAD1(srow, j), p, slope, rel0 - j) : -INFINITY;
    m = fmax(m, x[c]);
  }
  m = group_reduce(m, scratch, 1);
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    x[c] = exp(x[c] - m);  // unseen: exp(-inf) = 0
    sum += x[c];
  }
  sum = group_reduce(sum, scratch, 0);
  const float sink = fcl_row_sink(p, sinks, head, tid == 0);  // common.cl's row end
  const float inv = fcl_row_inv(m, 1.0f, sum, sink);
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    if (j < nk) STORE1(srow, j, x[c] * inv);
  }
#else
  /* Online max and sum in one read, then a second read to write P. */
  float m = FCL_MAX_INIT, sum = 0.0f;
  for (int j = lo + tid; j < hi; j += WG_SIZE) {
    const float xj = naive_logit(LOAD1(srow, j), p, slope, rel0 - j);
    const float m_new = fmax(m, xj);
    sum = sum * exp(m - m_new) + exp(xj - m_new);
    m = m_new;
  }
  const float m_row = group_reduce(m, scratch, 1);
  sum = group_reduce(sum * exp(m - m_row), scratch, 0);
  m = m_row;
  const float sink = fcl_row_sink(p, sinks, head, tid == 0);
  const float inv = fcl_row_inv(m, 1.0f, sum, sink);
  for (int j = tid; j < nk; j += WG_SIZE) {
    float pj = 0.0f;
    if (j >= lo && j < hi) {
      const float xj = naive_logit(LOAD1(srow, j), p, slope, rel0 - j);
      pj = exp(xj - m) * inv;
    }
    STORE1(srow, j, pj);
  }
#endif

  if (FCL_STORES_LSE(lse) && tid == 0)  // NaN stays NaN
    STORE_F32(lse, lse_at, fcl_row_lse(m, 1.0f, sum, sink));
  FCL_IO_COMMIT();
}

/* ---- backward -------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_recompute(__global store_t *s,         // [slices][nq][nk], P on return
                       __global store_t *slopes,    // softcap: t'(S), [slices][nq][nk]
                       __global const float *lse,   // by p.lse_batch, p.lse_head
                       __global const float *alibi, // ALiBi slopes
                       CHUNK_PARAMS FCL_IO_PARAM) {
  __local float row_lse;
  FCL_IO_INIT;
  LOCATE_ROW();
  LOAD_SLOPE(slope);
  __global store_t *srow = s + s_row;
  if (tid == 0) row_lse = LOAD_F32(lse, lse_at);
  barrier(CLK_LOCAL_MEM_FENCE);
  const float m = row_lse;
  /* A row that saw no key has LSE = -inf: P = 0 by test, not by e^(x + inf). */
  const int live = m != -INFINITY;
  for (int j = tid; j < nk; j += WG_SIZE) {
    float pj = 0.0f, dj = 0.0f;
    (void)dj;
    if (j >= lo && j < hi) {
      const float x = LOAD1(srow, j);
#if SOFTCAP
      const float th = tanh(x / p.softcap);
      dj = 1.0f - th * th;
#endif
      if (live) pj = exp(naive_logit(x, p, slope, rel0 - j) - m);
    }
    STORE1(srow, j, pj);
#if SOFTCAP
    STORE1(slopes + s_row, j, dj);
#endif
  }
  (void)slopes;
  FCL_IO_COMMIT();
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_bwd(__global const store_t *pm,     // P, [slices][nq][nk]
                 __global store_t *dp,           // [slices][nq][nk], dS on return
                 __global const store_t *slopes, // softcap: t'(S)
                 CHUNK_PARAMS FCL_IO_PARAM) {
  __local float scratch[WG_SIZE];
  FCL_IO_INIT;
  LOCATE_ROW();
  __global const store_t *prow = pm + s_row;
  __global store_t *dprow = dp + s_row;
  (void)slopes;

#if COLS_PER_ITEM > 0
  float x[COLS_PER_ITEM], y[COLS_PER_ITEM];
  float d = 0.0f;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    const int seen = j >= lo && j < hi;
    x[c] = seen ? LOAD1(prow, j) : 0.0f;
    y[c] = seen ? LOAD1(dprow, j) : 0.0f;
    d = fma(x[c], y[c], d);
  }
  d = group_reduce(d, scratch, 0);
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    if (j >= nk) continue;
    float ds = 0.0f;
    if (j >= lo && j < hi) {
      ds = p.scale * (x[c] * (y[c] - d));
#if SOFTCAP
      ds *= LOAD1(slopes + s_row, j);
#endif
    }
    STORE1(dprow, j, ds);
  }
#else
  float d = 0.0f;
  /* One counted load per statement: two in one expression would modify the
   * I/O tally unsequenced. */
  for (int j = lo + tid; j < hi; j += WG_SIZE) {
    const float pj = LOAD1(prow, j);
    d = fma(pj, LOAD1(dprow, j), d);
  }
  d = group_reduce(d, scratch, 0);
  for (int j = tid; j < nk; j += WG_SIZE) {
    float ds = 0.0f;
    if (j >= lo && j < hi) {
      const float pj = LOAD1(prow, j);
      ds = p.scale * (pj * (LOAD1(dprow, j) - d));
#if SOFTCAP
      ds *= LOAD1(slopes + s_row, j);
#endif
    }
    STORE1(dprow, j, ds);
  }
#endif
  FCL_IO_COMMIT();
}

/* ---- outputs without a product ------------------------------------------------ */

/* Tokens [token0, token0 + tokens) of batch entry b, heads [head0, head0 +
 * heads) of a view: 0. One work-item per element. */
__kernel void zero_rows(__global store_t *x, const fcl_view view, const int b,
                        const int token0, const int tokens, const int head0, const int heads,
                        const int head_dim FCL_IO_PARAM) {
  FCL_IO_INIT;
  const size_t e = get_global_id(0);
  const size_t per_token = (size_t)heads * head_dim;
  if (e < (size_t)tokens * per_token) {
    const int token = (int)(e / per_token), h = (int)(e % per_token / head_dim);
    const int c = (int)(e % head_dim);
    STORE1(x, fcl_at(view, b, token0 + token, head0 + h) + c, 0.0f);
  }
  FCL_IO_COMMIT();
}
