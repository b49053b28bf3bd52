/*
 * softmax.cl — the naive algorithm's row kernels, one work-group per row of
 * a seqlen_q x seqlen_k matrix, with the causal mask:
 *   softmax_rows       forward: P = softmax(S) in place, and LSE;
 *   softmax_recompute  backward: P = e^(S - LSE) in place, from the
 *                      forward's LSE (as the flash backward recomputes it);
 *   softmax_bwd        backward: dS = scale * P (dP - rowsum(P dP)), in
 *                      place over dP.
 *
 * S holds a chunk of (batch, head) slices, already scaled by the GEMM's
 * alpha. The slices of one chunk share a batch index and a position within
 * their query-head group, and cover consecutive kv heads (naive.c explains
 * the chunking), so slice z is query head (kv_first + z) * group + member.
 *
 * Each work-item keeps COLS_PER_ITEM elements of its row in registers, so
 * S is read once and P written once; COLS_PER_ITEM = 0 selects a streaming
 * variant for rows too long for that, which reads S twice (softmax_bwd: P
 * and dP twice). Masked elements are written as 0 and never read.
 */

#ifndef WG_SIZE
#define WG_SIZE 256        // work-items per row (a power of two)
#endif
#ifndef COLS_PER_ITEM
#define COLS_PER_ITEM 4    // row elements per work-item; 0: stream the row
#endif
#ifndef CAUSAL
#define CAUSAL 0           // bottom-right aligned causal mask
#endif
#ifndef STORE_LSE
#define STORE_LSE 1        // 0 when the caller passed no LSE buffer
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

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_rows(__global store_t *s,   // [slices][seqlen_q][seqlen_k], P on return
                  __global float *lse,   // [batch][heads_q][seqlen_q]
                  const int seqlen_q, const int seqlen_k, const int heads_q,
                  const int batch, const int group, const int kv_first,
                  const int member
                  FCL_IO_PARAM) {
  __local float scratch[WG_SIZE];
  FCL_IO_INIT;
  const int tid = get_local_id(0);
  const int i = get_group_id(0);       // query row
  const int slice = get_group_id(1);
  __global store_t *srow = s + ((size_t)slice * seqlen_q + i) * seqlen_k;
  /* Keys this row sees; the rest of the row becomes 0 and is not read. */
  const int seen = CAUSAL ? clamp(i + seqlen_k - seqlen_q + 1, 0, seqlen_k) : seqlen_k;

#if COLS_PER_ITEM > 0
  float x[COLS_PER_ITEM];
  float m = FCL_MAX_INIT;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    x[c] = j < seen ? LOAD1(srow, j) : -INFINITY;
    m = fmax(m, x[c]);
  }
  m = group_reduce(m, scratch, 1);
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    x[c] = exp(x[c] - m);  // masked: exp(-inf) = 0
    sum += x[c];
  }
  sum = group_reduce(sum, scratch, 0);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    if (j < seqlen_k) STORE1(srow, j, x[c] * inv);
  }
#else
  /* Online max and sum in one read, then a second read to write P. */
  float m = FCL_MAX_INIT, sum = 0.0f;
  for (int j = tid; j < seen; j += WG_SIZE) {
    const float xj = LOAD1(srow, j);
    const float m_new = fmax(m, xj);
    sum = sum * exp(m - m_new) + exp(xj - m_new);
    m = m_new;
  }
  const float m_row = group_reduce(m, scratch, 1);
  sum = group_reduce(sum * exp(m - m_row), scratch, 0);
  m = m_row;
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int j = tid; j < seqlen_k; j += WG_SIZE)
    STORE1(srow, j, j < seen ? exp(LOAD1(srow, j) - m) * inv : 0.0f);
#endif

#if STORE_LSE
  if (tid == 0) {
    const int head = (kv_first + slice) * group + member;
    STORE_F32(lse, ((size_t)batch * heads_q + head) * seqlen_q + i,
              sum == 0.0f ? -INFINITY : m + log(sum));  // NaN stays NaN
  }
#endif
  FCL_IO_COMMIT();
}

/* ---- backward -------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_recompute(__global store_t *s,        // [slices][seqlen_q][seqlen_k], P on return
                       __global const float *lse,  // [batch][heads_q][seqlen_q]
                       const int seqlen_q, const int seqlen_k, const int heads_q,
                       const int batch, const int group, const int kv_first,
                       const int member
                       FCL_IO_PARAM) {
  __local float row_lse;
  FCL_IO_INIT;
  const int tid = get_local_id(0);
  const int i = get_group_id(0);       // query row
  const int slice = get_group_id(1);
  __global store_t *srow = s + ((size_t)slice * seqlen_q + i) * seqlen_k;
  const int seen = CAUSAL ? clamp(i + seqlen_k - seqlen_q + 1, 0, seqlen_k) : seqlen_k;
  if (tid == 0) {
    const int head = (kv_first + slice) * group + member;
    row_lse = LOAD_F32(lse, ((size_t)batch * heads_q + head) * seqlen_q + i);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float m = row_lse;
  /* A row that saw no key has LSE = -inf: P = 0 by test, not by e^(x + inf). */
  const int live = m != -INFINITY;
  for (int j = tid; j < seqlen_k; j += WG_SIZE) {
    const float x = j < seen ? LOAD1(srow, j) : 0.0f;
    STORE1(srow, j, j < seen && live ? exp(x - m) : 0.0f);
  }
  FCL_IO_COMMIT();
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_bwd(__global const store_t *p,  // [slices][seqlen_q][seqlen_k]
                 __global store_t *dp,       // [slices][seqlen_q][seqlen_k], dS on return
                 const int seqlen_q, const int seqlen_k,
                 const float scale           // logits were scale * q.k
                 FCL_IO_PARAM) {
  __local float scratch[WG_SIZE];
  FCL_IO_INIT;
  const int tid = get_local_id(0);
  const int i = get_group_id(0);
  const size_t offset = ((size_t)get_group_id(1) * seqlen_q + i) * seqlen_k;
  __global const store_t *prow = p + offset;
  __global store_t *dprow = dp + offset;
  const int seen = CAUSAL ? clamp(i + seqlen_k - seqlen_q + 1, 0, seqlen_k) : seqlen_k;

#if COLS_PER_ITEM > 0
  float x[COLS_PER_ITEM], y[COLS_PER_ITEM];
  float d = 0.0f;
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    x[c] = j < seen ? LOAD1(prow, j) : 0.0f;
    y[c] = j < seen ? LOAD1(dprow, j) : 0.0f;
    d = fma(x[c], y[c], d);
  }
  d = group_reduce(d, scratch, 0);
#pragma unroll
  for (int c = 0; c < COLS_PER_ITEM; ++c) {
    const int j = tid + c * WG_SIZE;
    if (j < seqlen_k) STORE1(dprow, j, j < seen ? scale * (x[c] * (y[c] - d)) : 0.0f);
  }
#else
  float d = 0.0f;
  /* One counted load per statement: two in one expression would modify the
   * I/O tally unsequenced. */
  for (int j = tid; j < seen; j += WG_SIZE) {
    const float p = LOAD1(prow, j);
    d = fma(p, LOAD1(dprow, j), d);
  }
  d = group_reduce(d, scratch, 0);
  for (int j = tid; j < seqlen_k; j += WG_SIZE) {
    float ds = 0.0f;
    if (j < seen) {
      const float p = LOAD1(prow, j);
      ds = scale * (p * (LOAD1(dprow, j) - d));
    }
    STORE1(dprow, j, ds);
  }
#endif
  FCL_IO_COMMIT();
}
