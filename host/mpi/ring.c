/*
 * ring.c — the ring itself: the forward and the backward, step by step.
 * Every block runs in f32 on the rank's device; K/V (and the backward's
 * dK/dV accumulators) travel between ranks through host memory, since an
 * OpenCL buffer cannot be handed to MPI. docs/design.md, "Ring attention
 * over MPI", tells the schedule and where the copies are.
 */
#include "ring.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calls.h" /* fcl__convert: the storage types to f32 and back, on the device */

enum { TAG_KV = 1, TAG_ACC = 2, TAG_HOME = 3 };

/* At most 2 query chunks against 2 key chunks in a step. */
#define MAX_BLOCKS 4

typedef struct ring {
  MPI_Comm comm;
  int ranks, rank;
  fcl_context *ctx;
  cl_context cl;
  cl_command_queue queue;
  fcl_attention_desc whole;
  fcl_mpi_layout layout;
  int overlap;
  size_t b, hq, hkv, d;
  int wl, wr;
  ring_chunk mine[2];
  unsigned nmine;
  size_t local, max_local;
  size_t q_elems, my_kv, max_kv; /* elements of the slice's Q, its K, the largest K */
  unsigned steps;
  fcl_mpi_info *info, scratch; /* the caller's, or scratch when it gave none */
  double t0;                     /* when the call began */
  fcl_status status; /* the first failure after the agreement */
  char why[256];
} ring;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int failed(ring *g, fcl_status status, const char *fmt, ...) {
  if (g->status == FCL_SUCCESS) {
    g->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
  }
  return 1;
}

static int cl_failed(ring *g, cl_int err, const char *call) {
  return err != CL_SUCCESS && failed(g, FCL_ERROR_OPENCL, "%s failed (%d)", call, (int)err);
}

static int fcl_failed(ring *g, fcl_status status, const char *what) {
  return status != FCL_SUCCESS &&
         failed(g, status, "%s: %s", what, fcl_context_last_error(g->ctx));
}

/* Elements of K (or V) in a slice of `tokens`. */
static size_t kv_elems(const ring *g, size_t tokens) { return g->b * tokens * g->hkv * g->d; }

static void ring_init(ring *g, MPI_Comm comm, fcl_context *ctx, const fcl_attention_desc *desc,
                      fcl_mpi_layout layout, unsigned flags, fcl_mpi_info *info) {
  memset(g, 0, sizeof *g);
  g->comm = comm;
  MPI_Comm_size(comm, &g->ranks);
  MPI_Comm_rank(comm, &g->rank);
  g->ctx = ctx;
  g->cl = fcl_context_cl_context(ctx);
  g->queue = fcl_context_cl_queue(ctx);
  g->whole = *desc;
  g->layout = layout;
  g->overlap = !(flags & FCL_MPI_NO_OVERLAP);
  g->b = desc->batch, g->hq = desc->heads_q, g->hkv = desc->heads_kv, g->d = desc->head_dim;
  ring_window(desc, &g->wl, &g->wr);
  ring_chunks(layout, desc->seqlen_q, g->ranks, g->rank, g->mine, &g->nmine, &g->local);
  for (int r = 0; r < g->ranks; r++) {
    ring_chunk c[2];
    unsigned n;
    size_t len;
    ring_chunks(layout, desc->seqlen_q, g->ranks, r, c, &n, &len);
    if (len > g->max_local) g->max_local = len;
  }
  g->q_elems = g->b * g->local * g->hq * g->d;
  g->my_kv = kv_elems(g, g->local);
  g->max_kv = kv_elems(g, g->max_local);
  g->steps = ring_steps(layout, desc->seqlen_q, g->ranks, g->wl, g->wr);
  g->info = info;
  g->info->steps = g->steps;
}

/* Checks and agrees on the arguments, then sets the ring up. */
static fcl_status ring_begin(ring *g, MPI_Comm comm, fcl_context *ctx,
                             const fcl_attention_desc *desc, fcl_mpi_layout layout,
                             unsigned flags, const cl_mem *bufs, unsigned n, fcl_mpi_info *info) {
  const double t0 = now_ms();
  if (!info) info = &g->scratch;
  memset(info, 0, sizeof *info);
  const fcl_status status = ring_check(comm, ctx, desc, layout, flags, bufs, n, info);
  if (status == FCL_SUCCESS) ring_init(g, comm, ctx, desc, layout, flags, info);
  g->t0 = t0;
  return status;
}

/* The rank whose K/V this rank holds at step s, and its slice. */
static int source(const ring *g, unsigned s) {
  return (int)(((unsigned)g->rank + (unsigned)g->ranks * 2 - s % (unsigned)g->ranks) %
               (unsigned)g->ranks);
}

static size_t slice_of(const ring *g, int r, ring_chunk c[2], unsigned *n) {
  size_t len = 0;
  ring_chunks(g->layout, g->whole.seqlen_q, g->ranks, r, c, n, &len);
  return len;
}

static cl_mem dev_alloc(ring *g, size_t bytes) {
  if (g->status != FCL_SUCCESS) return NULL;
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(g->cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (cl_failed(g, err, "clCreateBuffer")) return NULL;
  return m;
}

static void *host_alloc(ring *g, size_t bytes) {
  if (g->status != FCL_SUCCESS) return NULL;
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) failed(g, FCL_ERROR_OUT_OF_MEMORY, "%zu bytes of host memory", bytes);
  return p;
}

static void release(cl_mem *m) {
  if (*m) clReleaseMemObject(*m);
  *m = NULL;
}

/* An f32 copy of a slice of `n` elements in the storage type. */
static cl_mem widen(ring *g, cl_mem from, size_t n) {
  cl_mem to = dev_alloc(g, n * sizeof(float));
  if (!to) return NULL;
  if (g->whole.dtype == FCL_DTYPE_F32)
    cl_failed(g, clEnqueueCopyBuffer(g->queue, from, to, 0, 0, n * sizeof(float), 0, NULL, NULL),
              "clEnqueueCopyBuffer");
  else
    fcl_failed(g, fcl__convert(g->ctx, g->whole.dtype, 1, from, to, n, 1, NULL), "widening");
  return to;
}

/* Stores an f32 slice of `n` elements into `to` in the storage type. */
static void narrow(ring *g, cl_mem from, cl_mem to, size_t n) {
  if (g->status != FCL_SUCCESS) return;
  if (g->whole.dtype == FCL_DTYPE_F32)
    cl_failed(g, clEnqueueCopyBuffer(g->queue, from, to, 0, 0, n * sizeof(float), 0, NULL, NULL),
              "clEnqueueCopyBuffer");
  else
    fcl_failed(g, fcl__convert(g->ctx, g->whole.dtype, 0, from, to, n, 1, NULL), "rounding");
}

static void write_host(ring *g, cl_mem to, const float *from, size_t n) {
  if (g->status == FCL_SUCCESS && n)
    cl_failed(g, clEnqueueWriteBuffer(g->queue, to, CL_TRUE, 0, n * 4, from, 0, NULL, NULL),
              "clEnqueueWriteBuffer");
}

static void read_host(ring *g, cl_mem from, float *to, size_t n) {
  if (g->status == FCL_SUCCESS && n)
    cl_failed(g, clEnqueueReadBuffer(g->queue, from, CL_TRUE, 0, n * 4, to, 0, NULL, NULL),
              "clEnqueueReadBuffer");
}

/* The ring's K/V: this rank's slice read into the first message (K then
 * V, f32), and device buffers as large as the largest slice in their
 * place. */
static void kv_start(ring *g, cl_mem *kdev, cl_mem *vdev, float *message) {
  read_host(g, *kdev, message, g->my_kv);
  read_host(g, *vdev, message ? message + g->my_kv : NULL, g->my_kv);
  release(kdev);
  release(vdev);
  *kdev = dev_alloc(g, g->max_kv * 4);
  *vdev = dev_alloc(g, g->max_kv * 4);
}

/* Copies LSE columns: rows (batch, head) of `cols` floats from column
 * src_col of src (rows src_pitch floats long, slice src_slice) to dst. */
static void copy_lse(ring *g, cl_mem src, size_t src_pitch, size_t src_col, size_t src_slice,
                     cl_mem dst, size_t dst_pitch, size_t dst_col, size_t dst_slice,
                     size_t cols) {
  if (g->status != FCL_SUCCESS) return;
  const size_t so[3] = {src_col * 4, 0, src_slice}, dO[3] = {dst_col * 4, 0, dst_slice};
  const size_t region[3] = {cols * 4, g->b * g->hq, 1};
  cl_failed(g,
            clEnqueueCopyBufferRect(g->queue, src, dst, so, dO, region, src_pitch * 4,
                                    src_pitch * 4 * g->b * g->hq, dst_pitch * 4,
                                    dst_pitch * 4 * g->b * g->hq, 0, NULL, NULL),
            "clEnqueueCopyBufferRect");
}

/* A view of rows [first, ...) of a slice of `tokens` tokens and `heads`. */
static fcl_tensor_layout view(const ring *g, size_t tokens, size_t heads, size_t first) {
  fcl_tensor_layout l = {first * heads * g->d, tokens * heads * g->d, heads * g->d, g->d};
  return l;
}

/* The single-device descriptor of one block: query chunk q (of this
 * rank's slice) against key chunk k of a slice of src_tokens tokens. */
static fcl_attention_desc block_desc(const ring *g, const ring_chunk *q, const ring_chunk *k,
                                     size_t src_tokens, const ring_block *blk) {
  fcl_attention_desc d = g->whole;
  d.dtype = FCL_DTYPE_F32;
  d.seqlen_q = blk->q_rows;
  d.seqlen_k = blk->k_len;
  d.causal = 0;
  d.window_left = blk->window_left;
  d.window_right = blk->window_right;
  d.q = d.dout = view(g, g->local, g->hq, q->local);
  d.o = d.dout;
  d.k = d.v = view(g, src_tokens, g->hkv, k->local + blk->k_first);
  return d;
}

/* Waits for the device, testing the step's MPI requests meanwhile so that
 * MPI moves the messages while the device computes (Open MPI progresses
 * only inside MPI calls). */
static void wait_device(ring *g, MPI_Request *reqs, int n, double t0) {
  cl_event done = NULL;
  if (!cl_failed(g, clEnqueueMarkerWithWaitList(g->queue, 0, NULL, &done), "clEnqueueMarker")) {
    clFlush(g->queue);
    for (;;) {
      cl_int state = CL_COMPLETE;
      if (cl_failed(g, clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state,
                                      &state, NULL),
                    "clGetEventInfo") ||
          state <= CL_COMPLETE) {
        if (state < 0) failed(g, FCL_ERROR_OPENCL, "a block's command failed (%d)", (int)state);
        break;
      }
      int flag = 1;
      if (n) MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
      if (flag) { /* nothing left to move: the driver's own wait */
        cl_failed(g, clWaitForEvents(1, &done), "clWaitForEvents");
        break;
      }
      const struct timespec pause = {0, 100000};
      nanosleep(&pause, NULL);
    }
    clReleaseEvent(done);
  }
  g->info->ms_compute += now_ms() - t0;
}

static void wait_mpi(ring *g, MPI_Request *reqs, int n) {
  const double t0 = now_ms();
  if (ring_wait(reqs, n) != MPI_SUCCESS)
    failed(g, FCL_ERROR_INVALID_ARGUMENT, "MPI_Testall failed");
  g->info->ms_wait += now_ms() - t0;
}

static void post(ring *g, int send, void *buf, size_t n, int peer, int tag, MPI_Request *req) {
  /* counts above INT_MAX floats would need derived types; slices that large
   * do not fit one device's buffer */
  const int count = (int)n;
  const uint64_t bytes = peer == g->rank ? 0 : n * sizeof(float); /* to itself: a copy */
  if (send) {
    MPI_Isend(buf, count, MPI_FLOAT, peer, tag, g->comm, req);
    g->info->bytes_sent += bytes;
  } else {
    MPI_Irecv(buf, count, MPI_FLOAT, peer, tag, g->comm, req);
    g->info->bytes_received += bytes;
  }
}

/* Sends `out` and receives `in` (either NULL: not), blocking. */
static void exchange(ring *g, void *out, size_t n_out, int to, void *in, size_t n_in, int from,
                     int tag) {
  MPI_Request reqs[2];
  int n = 0;
  if (in) post(g, 0, in, n_in, from, tag, &reqs[n++]);
  if (out) post(g, 1, out, n_out, to, tag, &reqs[n++]);
  wait_mpi(g, reqs, n);
}

/* How far round the ring rank src's slice goes: the last step at which
 * some rank sees some of its keys (0: its owner only). Further on, it is
 * neither sent nor computed. */
static unsigned reach(const ring *g, int src) {
  ring_chunk theirs[2];
  unsigned nt = 0, last = 0;
  slice_of(g, src, theirs, &nt);
  for (unsigned j = 1; j < g->steps; j++) {
    ring_chunk mine[2];
    unsigned nm = 0;
    slice_of(g, (int)(((unsigned)src + j) % (unsigned)g->ranks), mine, &nm);
    for (unsigned a = 0; a < nm; a++)
      for (unsigned e = 0; e < nt; e++)
        if (ring_block_plan(mine[a].start, mine[a].len, theirs[e].start, theirs[e].len, g->wl,
                            g->wr)
                .visible)
          last = j;
  }
  return last;
}

/* What this rank does with K/V at step s: holds the slice (computes on
 * it), passes it on, gets the next one. */
typedef struct step_moves {
  int holds, passes, gets;
  size_t n_cur, n_next; /* elements of K in the slice held and the next */
} step_moves;

static step_moves moves(const ring *g, unsigned s) {
  ring_chunk c[2];
  unsigned nc;
  const int cur = source(g, s), next = source(g, s + 1);
  step_moves m;
  const unsigned reach_cur = reach(g, cur);
  m.holds = s <= reach_cur;
  m.passes = s + 1 <= reach_cur;
  m.gets = s + 1 < g->steps && s + 1 <= reach(g, next);
  m.n_cur = kv_elems(g, slice_of(g, cur, c, &nc));
  m.n_next = kv_elems(g, slice_of(g, next, c, &nc));
  return m;
}

/* A visible block of a step: query chunk `a` of this rank against chunk
 * `e` of the slice it holds. */
typedef struct step_block {
  unsigned a, e;
  ring_block blk;
} step_block;

/* The visible blocks of step s, in a fixed order, counted in `count`
 * (with the hidden ones) unless NULL; the chunks of the slice held and its
 * tokens come back too. */
static unsigned step_blocks(const ring *g, unsigned s, ring_chunk theirs[2], size_t *src_tokens,
                            step_block out[MAX_BLOCKS], fcl_mpi_info *count) {
  unsigned nt = 0, n = 0, hidden = 0;
  *src_tokens = slice_of(g, source(g, s), theirs, &nt);
  for (unsigned a = 0; a < g->nmine; a++)
    for (unsigned e = 0; e < nt; e++) {
      const ring_chunk *q = &g->mine[a], *k = &theirs[e];
      const ring_block blk = ring_block_plan(q->start, q->len, k->start, k->len, g->wl, g->wr);
      if (blk.visible)
        out[n++] = (step_block){a, e, blk};
      else
        hidden++;
    }
  if (count) {
    count->blocks_computed += n;
    count->blocks_skipped += hidden;
  }
  return n;
}

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
    const unsigned n = step_blocks(g, s, theirs, &tokens, blocks, NULL);
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
  const unsigned n = step_blocks(g, s, theirs, &src_tokens, blocks, g->info);
  for (unsigned i = 0; i < n && g->status == FCL_SUCCESS; i++) {
    const ring_chunk *q = &g->mine[blocks[i].a], *k = &theirs[blocks[i].e];
    const ring_block *blk = &blocks[i].blk;
    chunk_parts *cp = &parts[blocks[i].a];
    const size_t part = cp->count++;
    fcl_attention_desc d = block_desc(g, q, k, src_tokens, blk);
    d.o = view(g, q->len, g->hq, 0);
    d.o.offset += part * g->b * q->len * g->hq * g->d;
    if (blk->q_rows < q->len) { /* rows below see none of these keys */
      const float minus_inf = -INFINITY;
      cl_failed(g,
                clEnqueueFillBuffer(g->queue, cp->lse, &minus_inf, 4,
                                    part * g->b * g->hq * q->len * 4, g->b * g->hq * q->len * 4,
                                    0, NULL, NULL),
                "clEnqueueFillBuffer");
    }
    fcl_failed(g,
               fcl_attention_forward(g->ctx, &d, FCL_ALGO_FLASH, qf, kdev, vdev, cp->o, lse_tmp,
                                     NULL),
               "a block's forward");
    copy_lse(g, lse_tmp, blk->q_rows, 0, 0, cp->lse, q->len, 0, part, blk->q_rows);
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
  double ts = now_ms();
  cl_mem qf = widen(&g, q, q_elems), kdev = widen(&g, k, my_kv), vdev = widen(&g, v, my_kv);
  cl_mem of = dev_alloc(&g, q_elems * 4);
  /* the message: K then V of the slice, f32 */
  float *host[2] = {host_alloc(&g, 2 * max_kv * 4), host_alloc(&g, 2 * max_kv * 4)};
  kv_start(&g, &kdev, &vdev, host[0]);
  size_t counts[2];
  count_parts(&g, counts);
  chunk_parts parts[2] = {{NULL, NULL, 0}, {NULL, NULL, 0}};
  size_t max_len = 0;
  for (unsigned a = 0; a < g.nmine; a++) {
    const size_t len = g.mine[a].len;
    parts[a].o = dev_alloc(&g, counts[a] * g.b * len * g.hq * g.d * 4);
    parts[a].lse = dev_alloc(&g, counts[a] * g.b * g.hq * len * 4);
    if (len > max_len) max_len = len;
  }
  cl_mem lse_tmp = dev_alloc(&g, g.b * g.hq * max_len * 4);
  if (g.status == FCL_SUCCESS) cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_staging += now_ms() - ts;
  /* every rank has its buffers before the first message */
  status = ring_agree(comm, g.status, g.why, info);
  if (status != FCL_SUCCESS) goto done;
  /* A failure from here on keeps the messages going, so that no rank
   * waits for one that never comes; the status is agreed at the end. */
  const int to = (g.rank + 1) % g.ranks, from = (g.rank + g.ranks - 1) % g.ranks;
  for (unsigned s = 0; s < g.steps; s++) {
    const step_moves mv = moves(&g, s);
    MPI_Request reqs[2];
    int nreq = 0;
    if (g.overlap && mv.gets) post(&g, 0, host[1], 2 * mv.n_next, from, TAG_KV, &reqs[nreq++]);
    if (g.overlap && mv.passes) post(&g, 1, host[0], 2 * mv.n_cur, to, TAG_KV, &reqs[nreq++]);
    double tc = now_ms();
    if (mv.holds) {
      write_host(&g, kdev, host[0], mv.n_cur);
      write_host(&g, vdev, host[0] + mv.n_cur, mv.n_cur);
      ts = now_ms();
      info->ms_staging += ts - tc;
      tc = ts;
      forward_step(&g, s, qf, kdev, vdev, parts, lse_tmp);
    }
    wait_device(&g, reqs, nreq, tc);
    wait_mpi(&g, reqs, nreq);
    if (!g.overlap)
      exchange(&g, mv.passes ? host[0] : NULL, 2 * mv.n_cur, to, mv.gets ? host[1] : NULL,
               2 * mv.n_next, from, TAG_KV);
    float *t = host[0];
    host[0] = host[1];
    host[1] = t;
  }
  ts = now_ms(); /* the merge is compute; storing O in its type, staging */
  for (unsigned a = 0; a < g.nmine && g.status == FCL_SUCCESS; a++) {
    const ring_chunk *qc = &g.mine[a];
    fcl_merge_desc md;
    fcl_merge_desc_init(&md, parts[a].count, g.b, qc->len, g.hq, g.d);
    md.o = view(&g, g.local, g.hq, qc->local);
    fcl_failed(&g, fcl_merge_states(ctx, &md, parts[a].o, parts[a].lse, of, lse_tmp, NULL),
               "merging the blocks");
    if (lse) copy_lse(&g, lse_tmp, qc->len, 0, 0, lse, g.local, qc->local, 0, qc->len);
  }
  if (g.status == FCL_SUCCESS) cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_compute += now_ms() - ts;
  ts = now_ms();
  narrow(&g, of, o, q_elems);
  if (g.status == FCL_SUCCESS) cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_staging += now_ms() - ts;
  status = ring_agree(comm, g.status, g.why, info);
done:
  release(&qf);
  release(&kdev);
  release(&vdev);
  release(&of);
  release(&lse_tmp);
  for (unsigned a = 0; a < 2; a++) {
    release(&parts[a].o);
    release(&parts[a].lse);
  }
  free(host[0]);
  free(host[1]);
  info->ms_total = now_ms() - g.t0;
  return status;
}

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
  const unsigned n = step_blocks(g, s, theirs, &src_tokens, blocks, g->info);
  for (unsigned i = 0; i < n && g->status == FCL_SUCCESS; i++) {
    grad_slot *sl = &slots[i];
    sl->q = &g->mine[blocks[i].a], sl->k = &theirs[blocks[i].e], sl->blk = blocks[i].blk;
    const fcl_attention_desc d = block_desc(g, sl->q, sl->k, src_tokens, &sl->blk);
    copy_lse(g, lse, g->local, sl->q->local, 0, lse_blk, sl->blk.q_rows, 0, 0, sl->blk.q_rows);
    fcl_failed(g,
               fcl_attention_backward(g->ctx, &d, FCL_ALGO_FLASH, in[0], kdev, vdev, in[1],
                                      lse_blk, in[2], sl->dq, sl->dk, sl->dv, NULL),
               "a block's backward");
  }
  return n;
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
    slice_of(&g, r, c, &n);
    for (unsigned i = 0; i < n; i++)
      if (c[i].len > max_len) max_len = c[i].len;
  }
  double ts = now_ms();
  /* qf, of, dof: f32 copies of q, o, dout */
  cl_mem in[4] = {widen(&g, q, q_elems), widen(&g, o, q_elems), widen(&g, dout, q_elems), NULL};
  cl_mem kdev = widen(&g, k, my_kv), vdev = widen(&g, v, my_kv);
  cl_mem lse_blk = dev_alloc(&g, g.b * g.hq * max_len * 4);
  float *kv[2] = {host_alloc(&g, 2 * max_kv * 4), host_alloc(&g, 2 * max_kv * 4)};
  float *acc[2] = {host_alloc(&g, 2 * max_kv * 4), host_alloc(&g, 2 * max_kv * 4)};
  float *dq_acc = host_alloc(&g, q_elems * 4), *home = host_alloc(&g, 2 * my_kv * 4);
  kv_start(&g, &kdev, &vdev, kv[0]);
  grad_slot slots[MAX_BLOCKS];
  memset(slots, 0, sizeof slots);
  for (unsigned j = 0; j < MAX_BLOCKS; j++) {
    const size_t qn = g.b * max_len * g.hq * g.d, kn = kv_elems(&g, max_len);
    slots[j].dq = dev_alloc(&g, qn * 4);
    slots[j].dk = dev_alloc(&g, kn * 4);
    slots[j].dv = dev_alloc(&g, kn * 4);
    slots[j].hdq = host_alloc(&g, qn * 4);
    slots[j].hdk = host_alloc(&g, kn * 4);
    slots[j].hdv = host_alloc(&g, kn * 4);
  }
  if (g.status == FCL_SUCCESS) cl_failed(&g, clFinish(g.queue), "clFinish");
  info->ms_staging += now_ms() - ts;
  status = ring_agree(comm, g.status, g.why, info);
  if (status != FCL_SUCCESS) goto done;
  const int to = (g.rank + 1) % g.ranks, from = (g.rank + g.ranks - 1) % g.ranks;
  MPI_Request acc_sent = MPI_REQUEST_NULL;
  /* this rank's own sums come home from the last rank its slice reaches */
  const unsigned my_reach = reach(&g, g.rank);
  MPI_Request home_req = MPI_REQUEST_NULL;
  if (my_reach > 0)
    post(&g, 0, home, 2 * my_kv, (g.rank + (int)my_reach) % g.ranks, TAG_HOME, &home_req);
  for (unsigned s = 0; s < g.steps; s++) {
    ring_chunk theirs[2];
    const step_moves mv = moves(&g, s);
    const size_t n_cur = mv.n_cur;
    float *acc_cur = acc[s % 2];
    MPI_Request reqs[3];
    int nreq = 0;
    if (g.overlap && mv.gets) post(&g, 0, kv[1], 2 * mv.n_next, from, TAG_KV, &reqs[nreq++]);
    if (g.overlap && mv.passes) post(&g, 1, kv[0], 2 * n_cur, to, TAG_KV, &reqs[nreq++]);
    if (s == 0)
      memset(acc_cur, 0, 2 * n_cur * sizeof(float));
    else if (g.overlap && mv.holds) /* the sum of the ranks before this one */
      post(&g, 0, acc_cur, 2 * n_cur, from, TAG_ACC, &reqs[nreq++]);
    double tc = now_ms();
    unsigned used = 0;
    if (mv.holds) {
      write_host(&g, kdev, kv[0], n_cur);
      write_host(&g, vdev, kv[0] + n_cur, n_cur);
      ts = now_ms();
      info->ms_staging += ts - tc;
      tc = ts;
      used = backward_step(&g, s, in, lse, lse_blk, kdev, vdev, slots, theirs);
    }
    wait_device(&g, reqs, nreq, tc);
    wait_mpi(&g, reqs, nreq);
    ts = now_ms();
    for (unsigned j = 0; j < used; j++) { /* fixed order: the same bits every run */
      grad_slot *sl = &slots[j];
      const size_t rows = sl->blk.q_rows, keys = sl->blk.k_len;
      const size_t src_tokens = n_cur / kv_elems(&g, 1);
      read_host(&g, sl->dq, sl->hdq, g.b * rows * g.hq * g.d);
      read_host(&g, sl->dk, sl->hdk, kv_elems(&g, keys));
      read_host(&g, sl->dv, sl->hdv, kv_elems(&g, keys));
      if (g.status != FCL_SUCCESS) break;
      add_rows(&g, dq_acc, g.local, sl->q->local, sl->hdq, rows, g.hq);
      const size_t first = sl->k->local + sl->blk.k_first;
      add_rows(&g, acc_cur, src_tokens, first, sl->hdk, keys, g.hkv);
      add_rows(&g, acc_cur + n_cur, src_tokens, first, sl->hdv, keys, g.hkv);
    }
    info->ms_staging += now_ms() - ts;
    wait_mpi(&g, &acc_sent, 1); /* its buffer is the next step's */
    if (mv.holds && !mv.passes) { /* the slice's last stop: its sums go to its owner */
      if (s == 0)
        memcpy(home, acc_cur, 2 * my_kv * sizeof(float));
      else
        exchange(&g, acc_cur, 2 * n_cur, source(&g, s), NULL, 0, 0, TAG_HOME);
    }
    if (g.overlap && mv.passes)
      post(&g, 1, acc_cur, 2 * n_cur, to, TAG_ACC, &acc_sent);
    if (!g.overlap) {
      exchange(&g, mv.passes ? kv[0] : NULL, 2 * n_cur, to, mv.gets ? kv[1] : NULL,
               2 * mv.n_next, from, TAG_KV);
      exchange(&g, mv.passes ? acc_cur : NULL, 2 * n_cur, to,
               mv.gets ? acc[(s + 1) % 2] : NULL, 2 * mv.n_next, from, TAG_ACC);
    }
    float *t = kv[0];
    kv[0] = kv[1];
    kv[1] = t;
  }
  wait_mpi(&g, &acc_sent, 1);
  wait_mpi(&g, &home_req, 1);
  ts = now_ms();
  cl_mem f32 = dev_alloc(&g, (q_elems > my_kv ? q_elems : my_kv) * 4);
  write_host(&g, f32, dq_acc, q_elems);
  narrow(&g, f32, dq, q_elems);
  write_host(&g, f32, home, my_kv);
  narrow(&g, f32, dk, my_kv);
  write_host(&g, f32, home + my_kv, my_kv);
  narrow(&g, f32, dv, my_kv);
  if (g.status == FCL_SUCCESS) cl_failed(&g, clFinish(g.queue), "clFinish");
  release(&f32);
  info->ms_staging += now_ms() - ts;
  status = ring_agree(comm, g.status, g.why, info);
done:
  for (unsigned j = 0; j < 3; j++) release(&in[j]);
  release(&kdev);
  release(&vdev);
  release(&lse_blk);
  for (unsigned j = 0; j < MAX_BLOCKS; j++) {
    release(&slots[j].dq);
    release(&slots[j].dk);
    release(&slots[j].dv);
    free(slots[j].hdq);
    free(slots[j].hdk);
    free(slots[j].hdv);
  }
  for (unsigned j = 0; j < 2; j++) {
    free(kv[j]);
    free(acc[j]);
  }
  free(dq_acc);
  free(home);
  info->ms_total = now_ms() - g.t0;
  return status;
}
