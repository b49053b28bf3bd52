/*
 * merge.cl — attention states over disjoint key sets merged exactly
 * (fcl_merge_states): LSE = log sum_p exp(LSE_p), O = sum_p exp(LSE_p -
 * LSE) O_p.
 *
 * A work-group holds ROWS rows of LANES work-items; each lane owns four
 * columns. The parts go by LANES at a time: every lane brings one part's
 * LSE into local memory, then each lane raises its running max to the
 * chunk's, rescales its sum and accumulator (the flash forward's online
 * softmax, over parts instead of keys) and adds the chunk's weighted O_p
 * columns. Each LSE and each element of O_p is loaded once.
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // a power of two from 16 to 256; head_dim <= it
#endif
#ifndef WG_SIZE
#define WG_SIZE 64
#endif
#define LANES (HEAD_DIM_MAX / 4)
#define ROWS (WG_SIZE / LANES)

#if WG_SIZE % LANES != 0
#error "WG_SIZE must be a multiple of HEAD_DIM_MAX / 4"
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void merge_states(__global const store_t *o_parts, __global const float *lse_parts,
                  __global store_t *o, __global float *lse, const fcl_merge_params p
                  FCL_IO_PARAM) {
  __local float lse_tile[ROWS][LANES];
  FCL_IO_INIT;
  const int tid = get_local_id(0), lane = tid % LANES, r = tid / LANES;
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
  for (int p0 = 0; p0 < parts; p0 += LANES) {
    const int n = min(LANES, parts - p0);
    if (lane < n)
      lse_tile[r][lane] = live ? LOAD_F32(lse_parts, (ulong)(p0 + lane) * p.lse_part_stride +
                                                         lse_at)
                               : -INFINITY;
    barrier(CLK_LOCAL_MEM_FENCE);
    float chunk_max = -INFINITY;
    for (int i = 0; i < n; ++i) {
      const float x = lse_tile[r][i];
      bad |= isnan(x) || x == INFINITY;
      chunk_max = fmax(chunk_max, x);
    }
    if (chunk_max > m) {  // exp(-inf) = 0 for the first finite max
      const float alpha = exp(m - chunk_max);
      sum *= alpha;
      acc *= alpha;
      m = chunk_max;
    }
    if (mine) {
      for (int i = 0; i < n; ++i) {
        const ulong at = in_at + (ulong)(p0 + i) * p.o_part_stride;
        float4 x;
        if (p.vec4) {
          x = LOAD4(o_parts, at);
        } else {
          x = (float4)(0.0f);
          x.x = LOAD1(o_parts, at);
          if (c + 1 < head_dim) x.y = LOAD1(o_parts, at + 1);
          if (c + 2 < head_dim) x.z = LOAD1(o_parts, at + 2);
          if (c + 3 < head_dim) x.w = LOAD1(o_parts, at + 3);
        }
        const float l = lse_tile[r][i];
        if (l != -INFINITY) {  // an empty part weighs nothing, whatever its O
          const float w = exp(l - m);
          sum += w;
          acc += w * x;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next chunk overwrites lse_tile
  }

  if (mine) {
    const float4 out = bad ? (float4)(NAN) : sum > 0.0f ? acc / sum : (float4)(0.0f);
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
      STORE_F32(lse, lse_at, bad ? NAN : sum > 0.0f ? m + log(sum) : -INFINITY);
  }
  FCL_IO_COMMIT();
}
