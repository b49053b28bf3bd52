/*
 * merge.cl — attention states over disjoint key sets merged exactly
 * (fcl_merge_states): LSE = log sum_p exp(LSE_p), O = sum_p exp(LSE_p -
 * LSE) O_p; a head's sink, when given, joins as one more part of O zero.
 *
 * A row is merged by PART_GROUPS groups of LANES work-items; each lane
 * owns four columns, and each group a share of the parts. The parts go by
 * LANES * PART_GROUPS at a time: every work-item of the row brings one
 * part's LSE into local memory, then each lane raises its running max to
 * its share's, rescales its sum and accumulator (the flash forward's
 * online softmax, over parts instead of keys) and adds the share's
 * weighted O_p columns. The groups' states are then merged in group order
 * by the first group (same inputs, same bits). Each LSE and each element
 * of O_p is loaded once; a lane's loads of PART_LOADS parts are issued
 * together, then added in order. (A split decode merges 32-64 parts a row
 * over few rows: one group loading one part at a time left each lane
 * waiting on 32-64 round trips, eight at a time on 4-8; the groups divide
 * those by PART_GROUPS.)
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // a power of two from 16 to 512; head_dim <= it
#endif
#ifndef WG_SIZE
#define WG_SIZE 64
#endif
#ifndef PART_LOADS
#define PART_LOADS 8        // parts whose O columns a lane loads before adding them (host: merge.c)
#endif
#ifndef PART_GROUPS
#define PART_GROUPS 1       // lane groups sharing one row's parts (host: merge.c)
#endif
#define LANES (HEAD_DIM_MAX / 4)
#define ROW_LANES (LANES * PART_GROUPS)
#ifndef ROWS
#define ROWS (WG_SIZE / ROW_LANES)  // rows a work-group merges (host: merge.c, its grid)
#endif

#if ROWS * ROW_LANES != WG_SIZE
#error "WG_SIZE must be ROWS rows of HEAD_DIM_MAX / 4 * PART_GROUPS lanes"
#endif

/* A lane's four columns of one part's O (those past head_dim 0). */
inline float4 fcl_merge_load_part(__global const store_t *o_parts, ulong at, int c,
                                  int head_dim, int vec4 IO_LOADS) {
  IO_HELPER_INIT;
  float4 x = (float4)(0.0f);
  if (vec4) {
    x = LOAD4(o_parts, at);
  } else {
    x.x = LOAD1(o_parts, at);
    if (c + 1 < head_dim) x.y = LOAD1(o_parts, at + 1);
    if (c + 2 < head_dim) x.z = LOAD1(o_parts, at + 2);
    if (c + 3 < head_dim) x.w = LOAD1(o_parts, at + 3);
  }
  IO_HELPER_LOADS_DONE();
  return x;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void merge_states(__global const store_t *o_parts, __global const float *lse_parts,
                  __global store_t *o, __global float *lse,
                  __global const float *sinks,  // [heads] (NULL: none): blocks.cl's fcl_merge_sink
                  const fcl_merge_params p FCL_IO_PARAM) {
  __local float lse_tile[ROWS][ROW_LANES];
#if PART_GROUPS > 1
  __local float4 group_acc[ROWS][PART_GROUPS][LANES];
  __local float group_m[ROWS][PART_GROUPS], group_sum[ROWS][PART_GROUPS];
  __local int group_bad[ROWS][PART_GROUPS];
#endif
  FCL_IO_INIT;
  const int tid = get_local_id(0), r = tid / ROW_LANES, within = tid % ROW_LANES;
  const int group = within / LANES, lane = within % LANES;
  const ulong row = (ulong)get_group_id(0) * ROWS + r;
  const int live = row < p.rows;
  const int head_dim = (int)p.head_dim, parts = (int)p.parts, c = 4 * lane;
  const int mine = live && c < head_dim;  // this lane owns columns of a row
  const ulong h = live ? row % p.heads : 0, bt = live ? row / p.heads : 0;
  const ulong t = bt % p.seqlen, b = bt / p.seqlen;
  const ulong lse_at = (b * p.heads + h) * p.seqlen + t;
  const ulong in_at = p.o_parts.offset + b * p.o_parts.batch + t * p.o_parts.seq +
                      h * p.o_parts.head + c;

  float m = -INFINITY, sum = 0.0f;
  float4 acc = (float4)(0.0f);
  int bad = 0;  // a NaN or +inf LSE
  for (int p0 = 0; p0 < parts; p0 += ROW_LANES) {
    const int n = min(ROW_LANES, parts - p0);
    /* this group's share of the chunk: its parts [lo, hi) */
    const int share = (n + PART_GROUPS - 1) / PART_GROUPS;
    const int lo = min(n, group * share), hi = min(n, lo + share);
    if (within < n)
      lse_tile[r][within] = live ? LOAD_F32(lse_parts, (ulong)(p0 + within) * p.lse_part_stride +
                                                           lse_at)
                                 : -INFINITY;
    barrier(CLK_LOCAL_MEM_FENCE);
    float chunk_max = -INFINITY;
    for (int i = lo; i < hi; ++i) {
      const float x = lse_tile[r][i];
      bad |= fcl_merge_bad(x);
      chunk_max = fmax(chunk_max, x);
    }
    if (chunk_max > m) {  // exp(-inf) = 0 for the first finite max
      const float alpha = exp(m - chunk_max);
      sum *= alpha;
      acc *= alpha;
      m = chunk_max;
    }
    if (mine) {
      for (int i0 = lo; i0 < hi; i0 += PART_LOADS) {
        /* a whole batch's loads unconditional; a last, short one's each
         * under its condition */
        const int batch = min(PART_LOADS, hi - i0);
        float4 x[PART_LOADS];
        if (batch == PART_LOADS) {
UNROLL
          for (int j = 0; j < PART_LOADS; ++j)
            x[j] = fcl_merge_load_part(o_parts, in_at + (ulong)(p0 + i0 + j) * p.o_part_stride,
                                       c, head_dim, p.vec4 IO_LOADS_ARG);
        } else {
UNROLL
          for (int j = 0; j < PART_LOADS; ++j)
            if (j < batch)
              x[j] = fcl_merge_load_part(o_parts, in_at + (ulong)(p0 + i0 + j) * p.o_part_stride,
                                         c, head_dim, p.vec4 IO_LOADS_ARG);
        }
UNROLL
        for (int j = 0; j < PART_LOADS; ++j)
          fcl_merge_add(j < batch ? lse_tile[r][i0 + j] : -INFINITY, x[j], m, &sum, &acc);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next chunk overwrites lse_tile
  }

#if PART_GROUPS > 1
  /* the groups' states, merged by the first group in group order */
  if (lane == 0) {
    group_m[r][group] = m;
    group_sum[r][group] = sum;
    group_bad[r][group] = bad;
  }
  group_acc[r][group][lane] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (group == 0) {
    m = -INFINITY;
    for (int j = 0; j < PART_GROUPS; ++j) {
      m = fmax(m, group_m[r][j]);
      bad |= group_bad[r][j];
    }
    sum = 0.0f;
    acc = (float4)(0.0f);
    for (int j = 0; j < PART_GROUPS; ++j)
      if (group_sum[r][j] > 0.0f) {  // a group of empty parts (or none) weighs nothing
        const float w = exp(group_m[r][j] - m);
        sum += w * group_sum[r][j];
        acc += w * group_acc[r][j][lane];
      }
  }
#endif

  if (mine && group == 0) {
    fcl_merge_sink(fcl_merge_sink_of(sinks, h, lane == 0), &m, &sum, &acc, &bad);
    const float4 out = fcl_merged_o(acc, sum, bad);
    const ulong at = p.o.offset + b * p.o.batch + t * p.o.seq + h * p.o.head + c;
    if (p.vec4) {
      STORE4(o, at, out);
    } else {
      STORE1(o, at, out.x);
      if (c + 1 < head_dim) STORE1(o, at + 1, out.y);
      if (c + 2 < head_dim) STORE1(o, at + 2, out.z);
      if (c + 3 < head_dim) STORE1(o, at + 3, out.w);
    }
    if (FCL_STORES_LSE(lse) && lane == 0)
      STORE_F32(lse, lse_at, fcl_merged_lse(m, sum, bad));
  }
  FCL_IO_COMMIT();
}
