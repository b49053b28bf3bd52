/*
 * params_probe.cl — the parameter block as a kernel reads it, field by
 * field, for tests/test_args.c: host and device must lay fcl_params out
 * alike (params.h), and the buffer list must arrive in its order. Writes
 * every field of p, in declaration order, as 64-bit words to `o`, and
 * the first word of each buffer it was given after them.
 */

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void params_probe(FCL_ATTENTION_PARAMS) {
  __global ulong *out = (__global ulong *)o;
  int n = 0;
  const fcl_view views[9] = {p.q, p.k, p.v, p.o, p.dout, p.dq, p.dk, p.dv, p.o_merged};
  for (int i = 0; i < 9; ++i) {
    out[n++] = views[i].offset;
    out[n++] = views[i].batch;
    out[n++] = views[i].seq;
    out[n++] = views[i].head;
  }
  out[n++] = p.lse_batch;
  out[n++] = p.lse_head;
  out[n++] = p.tokens_q;
  out[n++] = p.tokens_k;
  out[n++] = p.o_split;
  out[n++] = p.lse_split;
  out[n++] = p.table_batch;
  const int ints[14] = {p.batch,        p.heads_q,     p.heads_kv, p.head_dim,
                        p.seqlen_q,     p.seqlen_k,    p.window_left, p.window_right,
                        p.ragged,       p.work_items,  p.vec4,     p.alibi_batch,
                        p.splits,       p.split_keys};
  for (int i = 0; i < 14; ++i) out[n++] = (ulong)(long)ints[i];
  const float floats[4] = {p.scale, p.exp_factor, p.lse_factor, p.softcap};
  for (int i = 0; i < 4; ++i) out[n++] = as_uint(floats[i]);
  out[n++] = (ulong)(long)p.page_size;
  out[n++] = (ulong)(long)p.num_pages;
  out[n++] = (ulong)(long)p.kv_dtype;
  out[n++] = as_uint(p.v_scale);
  out[n++] = (ulong)(long)p.head_dim_v;
  /* the buffers: each holds its index in the list, as a float */
  out[n++] = as_uint(q[0]);
  out[n++] = as_uint(k[0]);
  out[n++] = as_uint(v[0]);
  out[n++] = as_uint(lse[0]);
  out[n++] = as_uint(dout[0]);
  out[n++] = as_uint(dsum[0]);
  out[n++] = as_uint(dq[0]);
  out[n++] = as_uint(dk[0]);
  out[n++] = as_uint(dv[0]);
  out[n++] = as_uint(alibi[0]);
  out[n++] = (ulong)seqs[0];
  out[n++] = (ulong)work[0];
  out[n++] = (ulong)pages[0];
  out[n++] = as_uint(o_merged[0]);
  out[n++] = as_uint(lse_merged[0]);
  out[n++] = (ulong)arrivals[0];
  out[n++] = as_uint(sinks[0]);
  out[n++] = as_uint(dsinks[0]);
  out[n++] = as_uint(dsink_parts[0]);
}
