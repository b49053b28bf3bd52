/*
 * flash_bwd_pre.cl — the flash backward's first kernel, for both kernel
 * families (flash_bwd.cl, flash_bwd_mma.cl): D_i = sum_c dO_ic * O_ic for
 * every query row, which turns dP into dS = P (dP - D) without a pass over
 * the keys. A program of its own, so that its build depends on the storage
 * type and launch shape only: every backward of a dtype shares it.
 *
 * PRE_THREADS work-items per row, each summing strided groups of four
 * columns in one fma chain; a fixed tree sums their parts, so D is the same
 * run after run. Rows are taken in the order (token, head) of the packed
 * layout, so that a work-group of the default layout reads one contiguous
 * range of O and dO; every layout goes through the views of params.h.
 *
 * With attention sinks, flash_bwd_sinks and flash_bwd_sinks_sum then sum
 * each head's gradient from D and LSE (no atomics, a fixed order).
 */

#ifndef WG_SIZE
#define WG_SIZE 128         // work-items per work-group
#endif
#ifndef PRE_THREADS
#define PRE_THREADS 16      // work-items per row
#endif
#define PRE_ROWS (WG_SIZE / PRE_THREADS)

#if WG_SIZE % PRE_THREADS != 0 || (PRE_THREADS & (PRE_THREADS - 1)) != 0
#error "PRE_THREADS must be a power of two dividing WG_SIZE"
#endif

DEFINE_QUAD_LOADER(load_quad, float4, LOAD4, LOAD1)  // common.cl

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_bwd_preprocess(FCL_ATTENTION_PARAMS) {
  __local float part[WG_SIZE];
  FCL_IO_INIT;
  const int tid = get_local_id(0);
  const int lane = tid % PRE_THREADS;
  /* Rows are (token, head): every query token of the tensors, ragged or
   * not; a token of a batch of equal sequences is (batch, query). */
  const size_t row = (size_t)get_group_id(0) * PRE_ROWS + tid / PRE_THREADS;
  const size_t rows = p.tokens_q * p.heads_q;
  const int head = (int)(row % p.heads_q);
  const size_t token = row / p.heads_q;
  /* ragged: tokens are below INT_MAX (validate.c) and batch strides 0 */
  const int batch = p.ragged ? 0 : (int)(token / p.seqlen_q);
  const int query = (int)(p.ragged ? token : token % p.seqlen_q);  // token within its entry
  float4 acc = (float4)(0.0f);
  if (row < rows) {
    __global const store_t *o_row = o + fcl_at(p.o, batch, query, head);
    __global const store_t *do_row = dout + fcl_at(p.dout, batch, query, head);
    for (int c = 4 * lane; c < p.head_dim_v; c += 4 * PRE_THREADS)  // O and dO: V's width
      acc = fma(load_quad(o_row, c, p.head_dim_v, p.vec4 IO_LOADS_ARG),
                load_quad(do_row, c, p.head_dim_v, p.vec4 IO_LOADS_ARG), acc);
  }
  part[tid] = (acc.x + acc.y) + (acc.z + acc.w);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int width = PRE_THREADS / 2; width > 0; width /= 2) {
    if (lane < width) part[tid] += part[tid + width];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lane == 0 && row < rows)
    STORE_F32(dsum, (size_t)batch * p.lse_batch + (size_t)head * p.lse_head + query, part[tid]);
  FCL_IO_COMMIT();
}

#define SINK_ROWS 4  // rows a work-item of flash_bwd_sinks loads at once

/* The sinks' gradient (fcl_attention_desc.dsinks): with P_sink = e^(s_h -
 * LSE) a row's probability of its sink, dsinks[h] = -sum over the rows of
 * head h of P_sink D, in two launches and no atomics. flash_bwd_sinks:
 * work-group h * parts + c (parts = p.work_items, the host's choice) sums
 * the c-th of `parts` equal slices of head h's rows into dsink_parts;
 * flash_bwd_sinks_sum: work-group h sums head h's parts. Each sum runs in
 * a fixed order (work-item i its rows i, i + WG_SIZE, ..., then a fixed
 * tree), so the bits are the same run after run. A sink of -inf (none)
 * has gradient 0. */

/* part[0] = the sum of the work-group's part[] (a fixed tree). */
inline void sum_parts(__local float *part, const int tid) {
  for (int width = WG_SIZE / 2; width > 0; width /= 2) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid < width) part[tid] += part[tid + width];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_bwd_sinks(FCL_ATTENTION_PARAMS) {
  __local float part[WG_SIZE];
  FCL_IO_INIT;
  const int tid = get_local_id(0), parts = p.work_items;
  const int head = get_group_id(0) / parts, slice = get_group_id(0) % parts;
  const ulong slice_rows = (p.tokens_q + parts - 1) / parts;
  const ulong end = min(p.tokens_q, (ulong)(slice + 1) * slice_rows);
  const float s = tid == 0 ? LOAD_F32(sinks, head) : sinks[head];
  float acc = 0.0f;
  /* SINK_ROWS rows loaded before they are added, so that the loads overlap */
  for (ulong t0 = slice * slice_rows + tid; t0 < end; t0 += SINK_ROWS * WG_SIZE) {
    float w[SINK_ROWS], d[SINK_ROWS];
UNROLL
    for (int u = 0; u < SINK_ROWS; ++u) {
      const ulong token = t0 + (ulong)u * WG_SIZE;
      w[u] = d[u] = 0.0f;
      if (token < end) {
        /* as flash_bwd_preprocess: a token of equal sequences is (batch, query) */
        const int batch = p.ragged ? 0 : (int)(token / p.seqlen_q);
        const int query = (int)(p.ragged ? token : token % p.seqlen_q);
        const size_t at = (size_t)batch * p.lse_batch + (size_t)head * p.lse_head + query;
        const float lse_row = LOAD_F32(lse, at);
        d[u] = LOAD_F32(dsum, at);
        w[u] = s == -INFINITY ? 0.0f : exp(s - lse_row);
      }
    }
UNROLL
    for (int u = 0; u < SINK_ROWS; ++u) acc = fma(w[u], d[u], acc);
  }
  part[tid] = acc;
  sum_parts(part, tid);
  if (tid == 0) STORE_F32(dsink_parts, get_group_id(0), part[0]);
  FCL_IO_COMMIT();
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_bwd_sinks_sum(FCL_ATTENTION_PARAMS) {
  __local float part[WG_SIZE];
  FCL_IO_INIT;
  const int tid = get_local_id(0), parts = p.work_items, head = get_group_id(0);
  float acc = 0.0f;
  for (int c = tid; c < parts; c += WG_SIZE) acc += LOAD_F32(dsink_parts, (size_t)head * parts + c);
  part[tid] = acc;
  sum_parts(part, tid);
  if (tid == 0) STORE_F32(dsinks, head, -part[0]);
  FCL_IO_COMMIT();
}
