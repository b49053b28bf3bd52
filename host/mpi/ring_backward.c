/*
 * ring_backward.c — the ring's backward: K/V round the ring again, the
 * dK/dV sums home one step behind, dQ summed here (docs/design.md, "Ring
 * attention over MPI").
 */
#include "ring_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h" /* fcl__convert: the storage types to f32 and back, on the device */

/* ---- backward ----------------------------------------------------------- */

/* One computed block's gradients, on the device and then on the host. */
typedef struct grad_slot {
  cl_mem dq, dk, dv;
  float *hdq, *hdk, *hdv;
  const ring_chunk *q, *k;
  ring_block blk;
} grad_slot;

/* rows [0, rows) of a packed [b][rows][heads][d] block added into rows
 * [first, first + rows) of a [b][tokens][heads][d] slice */
static void add_rows(const ring *g, float *into, size_t tokens, size_t first, const float *from,
                     size_t rows, size_t heads) {
  const size_t row = heads * g->d;
  for (size_t b = 0; b < g->b; b++) {
    float *dst = into + (b * tokens + first) * row;
    const float *src = from + b * rows * row;
    for (size_t i = 0; i < rows * row; i++) dst[i] += src[i];
  }
}

/* Enqueues this step's blocks' backward; returns the slots used. */
static unsigned backward_step(ring *g, unsigned s, cl_mem const in[4], cl_mem lse, cl_mem lse_blk,
                              cl_mem kdev, cl_mem vdev, grad_slot *slots,
                              ring_chunk theirs[2]) {
  step_block blocks[MAX_BLOCKS];
  size_t src_tokens;
  const unsigned n = ring_step_blocks(g, s, theirs, &src_tokens, blocks, g->info);
  for (unsigned i = 0; i < n && g->status == FCL_SUCCESS; i++) {
    grad_slot *sl = &slots[i];
    sl->q = &g->mine[blocks[i].a], sl->k = &theirs[blocks[i].e], sl->blk = blocks[i].blk;
    const fcl_attention_desc d = ring_block_desc(g, sl->q, sl->k, src_tokens, &sl->blk);
    ring_copy_lse(g, lse, g->local, sl->q->local, 0, lse_blk, sl->blk.q_rows, 0, 0, sl->blk.q_rows);
    ring_fcl_failed(g,
               fcl_attention_backward(g->ctx, &d, FCL_ALGO_FLASH, in[0], kdev, vdev, in[1],
                                      lse_blk, in[2], sl->dq, sl->dk, sl->dv, NULL),
               "a block's backward");
  }
  return n;
}

/* Each block's gradients: device buffers as large as the largest block,
 * and their host copies. */
static void slots_alloc(ring *g, grad_slot slots[MAX_BLOCKS], size_t max_len) {
  memset(slots, 0, MAX_BLOCKS * sizeof *slots);
  for (unsigned j = 0; j < MAX_BLOCKS; j++) {
    const size_t qn = g->b * max_len * g->hq * g->d, kn = ring_kv_elems(g, max_len);
    slots[j].dq = ring_dev_alloc(g, qn * 4);
    slots[j].dk = ring_dev_alloc(g, kn * 4);
    slots[j].dv = ring_dev_alloc(g, kn * 4);
    slots[j].hdq = ring_host_alloc(g, qn * 4);
    slots[j].hdk = ring_host_alloc(g, kn * 4);
    slots[j].hdv = ring_host_alloc(g, kn * 4);
  }
}

static void slots_free(grad_slot slots[MAX_BLOCKS]) {
  for (unsigned j = 0; j < MAX_BLOCKS; j++) {
    ring_release(&slots[j].dq);
    ring_release(&slots[j].dk);
    ring_release(&slots[j].dv);
    free(slots[j].hdq);
    free(slots[j].hdk);
    free(slots[j].hdv);
  }
}

/* The step's blocks' gradients read back and added in a fixed order (the
 * same bits every run): dQ into this rank's sum, dK and dV into the sums
 * of the slice held (acc_cur: K's n_cur elements, then V's). */
static void sum_blocks(ring *g, grad_slot *slots, unsigned used, float *dq_acc, float *acc_cur,
                       size_t n_cur) {
  for (unsigned j = 0; j < used; j++) {
    grad_slot *sl = &slots[j];
    const size_t rows = sl->blk.q_rows, keys = sl->blk.k_len;
    const size_t src_tokens = n_cur / ring_kv_elems(g, 1);
    ring_read_host(g, sl->dq, sl->hdq, g->b * rows * g->hq * g->d);
    ring_read_host(g, sl->dk, sl->hdk, ring_kv_elems(g, keys));
    ring_read_host(g, sl->dv, sl->hdv, ring_kv_elems(g, keys));
    if (g->status != FCL_SUCCESS) break;
    add_rows(g, dq_acc, g->local, sl->q->local, sl->hdq, rows, g->hq);
    const size_t first = sl->k->local + sl->blk.k_first;
    add_rows(g, acc_cur, src_tokens, first, sl->hdk, keys, g->hkv);
    add_rows(g, acc_cur + n_cur, src_tokens, first, sl->hdv, keys, g->hkv);
  }
}

/* dQ and this rank's dK/dV sums (home: K's, then V's) rounded into the
 * caller's buffers, through one f32 device buffer. */
static void store_gradients(ring *g, const float *dq_acc, const float *home, cl_mem dq,
                            cl_mem dk, cl_mem dv) {
  const size_t q_elems = g->q_elems, my_kv = g->my_kv;
  cl_mem f32 = ring_dev_alloc(g, (q_elems > my_kv ? q_elems : my_kv) * 4);
  ring_write_host(g, f32, dq_acc, q_elems);
  ring_narrow(g, f32, dq, q_elems);
  ring_write_host(g, f32, home, my_kv);
  ring_narrow(g, f32, dk, my_kv);
  ring_write_host(g, f32, home + my_kv, my_kv);
  ring_narrow(g, f32, dv, my_kv);
  if (g->status == FCL_SUCCESS) ring_cl_failed(g, clFinish(g->queue), "clFinish");
  ring_release(&f32);
}

fcl_status fcl_mpi_attention_backward(MPI_Comm comm, fcl_context *ctx,
                                      const fcl_attention_desc *desc, fcl_mpi_layout layout,
                                      unsigned flags, cl_mem q, cl_mem k, cl_mem v, cl_mem o,
                                      cl_mem lse, cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv,
                                      fcl_mpi_info *info) {
  const cl_mem bufs[] = {q, k, v, o, lse, dout, dq, dk, dv};
  ring g;
  fcl_status status = ring_begin(&g, comm, ctx, desc, layout, flags, bufs, 9, info);
  if (status != FCL_SUCCESS) return status;
  info = g.info;
  const size_t q_elems = g.q_elems, my_kv = g.my_kv, max_kv = g.max_kv;
  size_t max_len = 0;
  for (int r = 0; r < g.ranks; r++) {
    ring_chunk c[2];
    unsigned n;
    ring_slice_of(&g, r, c, &n);
    for (unsigned i = 0; i < n; i++)
      if (c[i].len > max_len) max_len = c[i].len;
  }
  double ts = ring_now_ms();
  /* qf, of, dof: f32 copies of q, o, dout */
  cl_mem in[4] = {ring_widen(&g, q, q_elems), ring_widen(&g, o, q_elems),
                  ring_widen(&g, dout, q_elems), NULL};
  cl_mem kdev = ring_widen(&g, k, my_kv), vdev = ring_widen(&g, v, my_kv);
  cl_mem lse_blk = ring_dev_alloc(&g, g.b * g.hq * max_len * 4);
  float *kv[2] = {ring_host_alloc(&g, 2 * max_kv * 4), ring_host_alloc(&g, 2 * max_kv * 4)};
  float *acc[2] = {ring_host_alloc(&g, 2 * max_kv * 4), ring_host_alloc(&g, 2 * max_kv * 4)};
  float *dq_acc = ring_host_alloc(&g, q_elems * 4), *home = ring_host_alloc(&g, 2 * my_kv * 4);
  ring_kv_start(&g, &kdev, &vdev, kv[0]);
  grad_slot slots[MAX_BLOCKS];
  slots_alloc(&g, slots, max_len);
  if (g.status == FCL_SUCCESS) ring_cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_staging += ring_now_ms() - ts;
  status = ring_agree(comm, g.status, g.why, info);
  if (status != FCL_SUCCESS) goto done;
  const int to = (g.rank + 1) % g.ranks, from = (g.rank + g.ranks - 1) % g.ranks;
  MPI_Request acc_sent = MPI_REQUEST_NULL;
  /* this rank's own sums come home from the last rank its slice reaches */
  const unsigned my_reach = ring_reach(&g, g.rank);
  MPI_Request home_req = MPI_REQUEST_NULL;
  if (my_reach > 0)
    ring_post(&g, 0, home, 2 * my_kv, (g.rank + (int)my_reach) % g.ranks, TAG_HOME, &home_req);
  for (unsigned s = 0; s < g.steps; s++) {
    ring_chunk theirs[2];
    const step_moves mv = ring_moves(&g, s);
    const size_t n_cur = mv.n_cur;
    float *acc_cur = acc[s % 2];
    MPI_Request reqs[3];
    int nreq = 0;
    if (g.overlap && mv.gets) ring_post(&g, 0, kv[1], 2 * mv.n_next, from, TAG_KV, &reqs[nreq++]);
    if (g.overlap && mv.passes) ring_post(&g, 1, kv[0], 2 * n_cur, to, TAG_KV, &reqs[nreq++]);
    if (s == 0)
      memset(acc_cur, 0, 2 * n_cur * sizeof(float));
    else if (g.overlap && mv.holds) /* the sum of the ranks before this one */
      ring_post(&g, 0, acc_cur, 2 * n_cur, from, TAG_ACC, &reqs[nreq++]);
    double tc = ring_now_ms();
    unsigned used = 0;
    if (mv.holds) {
      ring_write_host(&g, kdev, kv[0], n_cur);
      ring_write_host(&g, vdev, kv[0] + n_cur, n_cur);
      ts = ring_now_ms();
      info->ms_staging += ts - tc;
      tc = ts;
      used = backward_step(&g, s, in, lse, lse_blk, kdev, vdev, slots, theirs);
    }
    ring_wait_device(&g, reqs, nreq, tc);
    ring_wait_mpi(&g, reqs, nreq);
    ts = ring_now_ms();
    sum_blocks(&g, slots, used, dq_acc, acc_cur, n_cur);
    info->ms_staging += ring_now_ms() - ts;
    ring_wait_mpi(&g, &acc_sent, 1); /* its buffer is the next step's */
    if (mv.holds && !mv.passes) { /* the slice's last stop: its sums go to its owner */
      if (s == 0)
        memcpy(home, acc_cur, 2 * my_kv * sizeof(float));
      else
        ring_exchange(&g, acc_cur, 2 * n_cur, ring_source(&g, s), NULL, 0, 0, TAG_HOME);
    }
    if (g.overlap && mv.passes)
      ring_post(&g, 1, acc_cur, 2 * n_cur, to, TAG_ACC, &acc_sent);
    if (!g.overlap) {
      ring_exchange(&g, mv.passes ? kv[0] : NULL, 2 * n_cur, to, mv.gets ? kv[1] : NULL,
                    2 * mv.n_next, from, TAG_KV);
      ring_exchange(&g, mv.passes ? acc_cur : NULL, 2 * n_cur, to,
                    mv.gets ? acc[(s + 1) % 2] : NULL, 2 * mv.n_next, from, TAG_ACC);
    }
    float *t = kv[0];
    kv[0] = kv[1];
    kv[1] = t;
  }
  ring_wait_mpi(&g, &acc_sent, 1);
  ring_wait_mpi(&g, &home_req, 1);
  ts = ring_now_ms();
  store_gradients(&g, dq_acc, home, dq, dk, dv);
  info->ms_staging += ring_now_ms() - ts;
  status = ring_agree(comm, g.status, g.why, info);
done:
  for (unsigned j = 0; j < 3; j++) ring_release(&in[j]);
  ring_release(&kdev);
  ring_release(&vdev);
  ring_release(&lse_blk);
  slots_free(slots);
  for (unsigned j = 0; j < 2; j++) {
    free(kv[j]);
    free(acc[j]);
  }
  free(dq_acc);
  free(home);
  info->ms_total = ring_now_ms() - g.t0;
  return status;
}
