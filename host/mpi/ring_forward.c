/*
 * ring_forward.c — the ring's forward: each step's visible blocks, their
 * partial states merged per query chunk (docs/design.md, "Ring attention
 * over MPI").
 */
#include "ring_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h" /* fcl__convert: the storage types to f32 and back, on the device */

/* ---- forward ------------------------------------------------------------ */

typedef struct chunk_parts {
  cl_mem o, lse; /* [parts][b][len][hq][d], [parts][b][hq][len] */
  size_t count;
} chunk_parts;

/* Visible blocks of each of this rank's query chunks over the whole ring. */
static void count_parts(const ring *g, size_t counts[2]) {
  counts[0] = counts[1] = 0;
  for (unsigned s = 0; s < g->steps; s++) {
    ring_chunk theirs[2];
    step_block blocks[MAX_BLOCKS];
    size_t tokens;
    const unsigned n = ring_step_blocks(g, s, theirs, &tokens, blocks, NULL);
    for (unsigned i = 0; i < n; i++) counts[blocks[i].a]++;
  }
}

/* Enqueues this step's blocks: each visible one's O and LSE become the
 * next part of its query chunk. */
static void forward_step(ring *g, unsigned s, cl_mem qf, cl_mem kdev, cl_mem vdev,
                         chunk_parts parts[2], cl_mem lse_tmp) {
  ring_chunk theirs[2];
  step_block blocks[MAX_BLOCKS];
  size_t src_tokens;
  const unsigned n = ring_step_blocks(g, s, theirs, &src_tokens, blocks, g->info);
  for (unsigned i = 0; i < n && g->status == FCL_SUCCESS; i++) {
    const ring_chunk *q = &g->mine[blocks[i].a], *k = &theirs[blocks[i].e];
    const ring_block *blk = &blocks[i].blk;
    chunk_parts *cp = &parts[blocks[i].a];
    const size_t part = cp->count++;
    fcl_attention_desc d = ring_block_desc(g, q, k, src_tokens, blk);
    d.o = ring_view(g, q->len, g->hq, 0);
    d.o.offset += part * g->b * q->len * g->hq * g->d;
    if (blk->q_rows < q->len) { /* rows below see none of these keys */
      const float minus_inf = -INFINITY;
      ring_cl_failed(g,
                clEnqueueFillBuffer(g->queue, cp->lse, &minus_inf, 4,
                                    part * g->b * g->hq * q->len * 4, g->b * g->hq * q->len * 4,
                                    0, NULL, NULL),
                "clEnqueueFillBuffer");
    }
    ring_fcl_failed(g,
               fcl_attention_forward(g->ctx, &d, FCL_ALGO_FLASH, qf, kdev, vdev, cp->o, lse_tmp,
                                     NULL),
               "a block's forward");
    ring_copy_lse(g, lse_tmp, blk->q_rows, 0, 0, cp->lse, q->len, 0, part, blk->q_rows);
  }
}

fcl_status fcl_mpi_attention_forward(MPI_Comm comm, fcl_context *ctx,
                                     const fcl_attention_desc *desc, fcl_mpi_layout layout,
                                     unsigned flags, cl_mem q, cl_mem k, cl_mem v, cl_mem o,
                                     cl_mem lse, fcl_mpi_info *info) {
  const cl_mem bufs[] = {q, k, v, o, lse};
  ring g;
  fcl_status status = ring_begin(&g, comm, ctx, desc, layout, flags, bufs, 5, info);
  if (status != FCL_SUCCESS) return status;
  info = g.info;
  const size_t q_elems = g.q_elems, my_kv = g.my_kv, max_kv = g.max_kv;
  double ts = ring_now_ms();
  cl_mem qf = ring_widen(&g, q, q_elems), kdev = ring_widen(&g, k, my_kv),
         vdev = ring_widen(&g, v, my_kv);
  cl_mem of = ring_dev_alloc(&g, q_elems * 4);
  /* the message: K then V of the slice, f32 */
  float *host[2] = {ring_host_alloc(&g, 2 * max_kv * 4), ring_host_alloc(&g, 2 * max_kv * 4)};
  ring_kv_start(&g, &kdev, &vdev, host[0]);
  size_t counts[2];
  count_parts(&g, counts);
  chunk_parts parts[2] = {{NULL, NULL, 0}, {NULL, NULL, 0}};
  size_t max_len = 0;
  for (unsigned a = 0; a < g.nmine; a++) {
    const size_t len = g.mine[a].len;
    parts[a].o = ring_dev_alloc(&g, counts[a] * g.b * len * g.hq * g.d * 4);
    parts[a].lse = ring_dev_alloc(&g, counts[a] * g.b * g.hq * len * 4);
    if (len > max_len) max_len = len;
  }
  cl_mem lse_tmp = ring_dev_alloc(&g, g.b * g.hq * max_len * 4);
  if (g.status == FCL_SUCCESS) ring_cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_staging += ring_now_ms() - ts;
  /* every rank has its buffers before the first message */
  status = ring_agree(comm, g.status, g.why, info);
  if (status != FCL_SUCCESS) goto done;
  /* A failure from here on keeps the messages going, so that no rank
   * waits for one that never comes; the status is agreed at the end. */
  const int to = (g.rank + 1) % g.ranks, from = (g.rank + g.ranks - 1) % g.ranks;
  for (unsigned s = 0; s < g.steps; s++) {
    const step_moves mv = ring_moves(&g, s);
    MPI_Request reqs[2];
    int nreq = 0;
    if (g.overlap && mv.gets) ring_post(&g, 0, host[1], 2 * mv.n_next, from, TAG_KV, &reqs[nreq++]);
    if (g.overlap && mv.passes) ring_post(&g, 1, host[0], 2 * mv.n_cur, to, TAG_KV, &reqs[nreq++]);
    double tc = ring_now_ms();
    if (mv.holds) {
      ring_write_host(&g, kdev, host[0], mv.n_cur);
      ring_write_host(&g, vdev, host[0] + mv.n_cur, mv.n_cur);
      ts = ring_now_ms();
      info->ms_staging += ts - tc;
      tc = ts;
      forward_step(&g, s, qf, kdev, vdev, parts, lse_tmp);
    }
    ring_wait_device(&g, reqs, nreq, tc);
    ring_wait_mpi(&g, reqs, nreq);
    if (!g.overlap)
      ring_exchange(&g, mv.passes ? host[0] : NULL, 2 * mv.n_cur, to, mv.gets ? host[1] : NULL,
               2 * mv.n_next, from, TAG_KV);
    float *t = host[0];
    host[0] = host[1];
    host[1] = t;
  }
  ts = ring_now_ms(); /* the merge is compute; storing O in its type, staging */
  for (unsigned a = 0; a < g.nmine && g.status == FCL_SUCCESS; a++) {
    const ring_chunk *qc = &g.mine[a];
    fcl_merge_desc md;
    fcl_merge_desc_init(&md, parts[a].count, g.b, qc->len, g.hq, g.d);
    md.o = ring_view(&g, g.local, g.hq, qc->local);
    ring_fcl_failed(&g, fcl_merge_states(ctx, &md, parts[a].o, parts[a].lse, of, lse_tmp, NULL),
               "merging the blocks");
    if (lse) ring_copy_lse(&g, lse_tmp, qc->len, 0, 0, lse, g.local, qc->local, 0, qc->len);
  }
  if (g.status == FCL_SUCCESS) ring_cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_compute += ring_now_ms() - ts;
  ts = ring_now_ms();
  ring_narrow(&g, of, o, q_elems);
  if (g.status == FCL_SUCCESS) ring_cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_staging += ring_now_ms() - ts;
  status = ring_agree(comm, g.status, g.why, info);
done:
  ring_release(&qf);
  ring_release(&kdev);
  ring_release(&vdev);
  ring_release(&of);
  ring_release(&lse_tmp);
  for (unsigned a = 0; a < 2; a++) {
    ring_release(&parts[a].o);
    ring_release(&parts[a].lse);
  }
  free(host[0]);
  free(host[1]);
  info->ms_total = ring_now_ms() - g.t0;
  return status;
}
