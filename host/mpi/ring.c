/*
 * ring.c — the ring's machinery that its forward (ring_forward.c) and
 * backward (ring_backward.c) share: the call's state, buffers, exchanges
 * and each step's blocks.
 * Every block runs in f32 on the rank's device; K/V (and the backward's
 * dK/dV accumulators) travel between ranks through host memory, since an
 * OpenCL buffer cannot be handed to MPI. docs/design.md, "Ring attention
 * over MPI", tells the schedule and where the copies are.
 */
#include "ring_state.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calls.h" /* fcl__convert: the storage types to f32 and back, on the device */


double ring_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int ring_failed(ring *g, fcl_status status, const char *fmt, ...) {
  if (g->status == FCL_SUCCESS) {
    g->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
  }
  return 1;
}

int ring_cl_failed(ring *g, cl_int err, const char *call) {
  return err != CL_SUCCESS && ring_failed(g, FCL_ERROR_OPENCL, "%s failed (%d)", call, (int)err);
}

int ring_fcl_failed(ring *g, fcl_status status, const char *what) {
  return status != FCL_SUCCESS &&
         ring_failed(g, status, "%s: %s", what, fcl_context_last_error(g->ctx));
}

/* Elements of K (or V) in a slice of `tokens`. */
size_t ring_kv_elems(const ring *g, size_t tokens) { return g->b * tokens * g->hkv * g->d; }

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
  g->my_kv = ring_kv_elems(g, g->local);
  g->max_kv = ring_kv_elems(g, g->max_local);
  g->steps = ring_steps(layout, desc->seqlen_q, g->ranks, g->wl, g->wr);
  g->info = info;
  g->info->steps = g->steps;
}

/* Checks and agrees on the arguments, then sets the ring up. */
fcl_status ring_begin(ring *g, MPI_Comm comm, fcl_context *ctx,
                             const fcl_attention_desc *desc, fcl_mpi_layout layout,
                             unsigned flags, const cl_mem *bufs, unsigned n, fcl_mpi_info *info) {
  const double t0 = ring_now_ms();
  if (!info) info = &g->scratch;
  memset(info, 0, sizeof *info);
  const fcl_status status = ring_check(comm, ctx, desc, layout, flags, bufs, n, info);
  if (status == FCL_SUCCESS) ring_init(g, comm, ctx, desc, layout, flags, info);
  g->t0 = t0;
  return status;
}

/* The rank whose K/V this rank holds at step s, and its slice. */
int ring_source(const ring *g, unsigned s) {
  return (int)(((unsigned)g->rank + (unsigned)g->ranks * 2 - s % (unsigned)g->ranks) %
               (unsigned)g->ranks);
}

size_t ring_slice_of(const ring *g, int r, ring_chunk c[2], unsigned *n) {
  size_t len = 0;
  ring_chunks(g->layout, g->whole.seqlen_q, g->ranks, r, c, n, &len);
  return len;
}

cl_mem ring_dev_alloc(ring *g, size_t bytes) {
  if (g->status != FCL_SUCCESS) return NULL;
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(g->cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (ring_cl_failed(g, err, "clCreateBuffer")) return NULL;
  return m;
}

void *ring_host_alloc(ring *g, size_t bytes) {
  if (g->status != FCL_SUCCESS) return NULL;
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) ring_failed(g, FCL_ERROR_OUT_OF_MEMORY, "%zu bytes of host memory", bytes);
  return p;
}

void ring_release(cl_mem *m) {
  if (*m) clReleaseMemObject(*m);
  *m = NULL;
}

/* `n` elements from `from` into `to`, between the storage type and f32
 * (to_f32: widened, else rounded back); f32 storage is copied. */
static void convert(ring *g, cl_mem from, cl_mem to, size_t n, int to_f32) {
  if (g->status != FCL_SUCCESS) return;
  if (g->whole.dtype == FCL_DTYPE_F32)
    ring_cl_failed(g,
                   clEnqueueCopyBuffer(g->queue, from, to, 0, 0, n * sizeof(float), 0, NULL,
                                       NULL),
                   "clEnqueueCopyBuffer");
  else
    ring_fcl_failed(g, fcl__convert(g->ctx, g->whole.dtype, to_f32, from, to, n, 1, NULL),
                    to_f32 ? "widening" : "rounding");
}

/* An f32 copy of a slice of `n` elements in the storage type. */
cl_mem ring_widen(ring *g, cl_mem from, size_t n) {
  cl_mem to = ring_dev_alloc(g, n * sizeof(float));
  if (to) convert(g, from, to, n, 1);
  return to;
}

/* Stores an f32 slice of `n` elements into `to` in the storage type. */
void ring_narrow(ring *g, cl_mem from, cl_mem to, size_t n) { convert(g, from, to, n, 0); }

void ring_write_host(ring *g, cl_mem to, const float *from, size_t n) {
  if (g->status == FCL_SUCCESS && n)
    ring_cl_failed(g, clEnqueueWriteBuffer(g->queue, to, CL_TRUE, 0, n * 4, from, 0, NULL, NULL),
              "clEnqueueWriteBuffer");
}

void ring_read_host(ring *g, cl_mem from, float *to, size_t n) {
  if (g->status == FCL_SUCCESS && n)
    ring_cl_failed(g, clEnqueueReadBuffer(g->queue, from, CL_TRUE, 0, n * 4, to, 0, NULL, NULL),
              "clEnqueueReadBuffer");
}

/* The ring's K/V: this rank's slice read into the first message (K then
 * V, f32), and device buffers as large as the largest slice in their
 * place. */
void ring_kv_start(ring *g, cl_mem *kdev, cl_mem *vdev, float *message) {
  ring_read_host(g, *kdev, message, g->my_kv);
  ring_read_host(g, *vdev, message ? message + g->my_kv : NULL, g->my_kv);
  ring_release(kdev);
  ring_release(vdev);
  *kdev = ring_dev_alloc(g, g->max_kv * 4);
  *vdev = ring_dev_alloc(g, g->max_kv * 4);
}

/* Copies LSE columns: rows (batch, head) of `cols` floats from column
 * src_col of src (rows src_pitch floats long, slice src_slice) to dst. */
void ring_copy_lse(ring *g, cl_mem src, size_t src_pitch, size_t src_col, size_t src_slice,
                     cl_mem dst, size_t dst_pitch, size_t dst_col, size_t dst_slice,
                     size_t cols) {
  if (g->status != FCL_SUCCESS) return;
  const size_t so[3] = {src_col * 4, 0, src_slice}, dO[3] = {dst_col * 4, 0, dst_slice};
  const size_t region[3] = {cols * 4, g->b * g->hq, 1};
  ring_cl_failed(g,
            clEnqueueCopyBufferRect(g->queue, src, dst, so, dO, region, src_pitch * 4,
                                    src_pitch * 4 * g->b * g->hq, dst_pitch * 4,
                                    dst_pitch * 4 * g->b * g->hq, 0, NULL, NULL),
            "clEnqueueCopyBufferRect");
}

/* A view of rows [first, ...) of a slice of `tokens` tokens and `heads`. */
fcl_tensor_layout ring_view(const ring *g, size_t tokens, size_t heads, size_t first) {
  fcl_tensor_layout l = {first * heads * g->d, tokens * heads * g->d, heads * g->d, g->d};
  return l;
}

/* The single-device descriptor of one block: query chunk q (of this
 * rank's slice) against key chunk k of a slice of src_tokens tokens. */
fcl_attention_desc ring_block_desc(const ring *g, const ring_chunk *q, const ring_chunk *k,
                                     size_t src_tokens, const ring_block *blk) {
  fcl_attention_desc d = g->whole;
  d.dtype = FCL_DTYPE_F32;
  d.seqlen_q = blk->q_rows;
  d.seqlen_k = blk->k_len;
  d.causal = 0;
  d.window_left = blk->window_left;
  d.window_right = blk->window_right;
  d.q = d.dout = ring_view(g, g->local, g->hq, q->local);
  d.o = d.dout;
  d.k = d.v = ring_view(g, src_tokens, g->hkv, k->local + blk->k_first);
  return d;
}

/* Waits for the device, testing the step's MPI requests meanwhile so that
 * MPI moves the messages while the device computes (Open MPI progresses
 * only inside MPI calls). */
void ring_wait_device(ring *g, MPI_Request *reqs, int n, double t0) {
  cl_event done = NULL;
  if (!ring_cl_failed(g, clEnqueueMarkerWithWaitList(g->queue, 0, NULL, &done),
                      "clEnqueueMarker")) {
    clFlush(g->queue);
    for (;;) {
      cl_int state = CL_COMPLETE;
      if (ring_cl_failed(g, clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state,
                                      &state, NULL),
                    "clGetEventInfo") ||
          state <= CL_COMPLETE) {
        if (state < 0)
          ring_failed(g, FCL_ERROR_OPENCL, "a block's command failed (%d)", (int)state);
        break;
      }
      int flag = 1;
      if (n) MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
      if (flag) { /* nothing left to move: the driver's own wait */
        ring_cl_failed(g, clWaitForEvents(1, &done), "clWaitForEvents");
        break;
      }
      const struct timespec pause = {0, 100000};
      nanosleep(&pause, NULL);
    }
    clReleaseEvent(done);
  }
  g->info->ms_compute += ring_now_ms() - t0;
}

void ring_wait_mpi(ring *g, MPI_Request *reqs, int n) {
  const double t0 = ring_now_ms();
  if (ring_wait(reqs, n) != MPI_SUCCESS)
    ring_failed(g, FCL_ERROR_INVALID_ARGUMENT, "MPI_Testall failed");
  g->info->ms_wait += ring_now_ms() - t0;
}

void ring_post(ring *g, int send, void *buf, size_t n, int peer, int tag, MPI_Request *req) {
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
void ring_exchange(ring *g, void *out, size_t n_out, int to, void *in, size_t n_in, int from,
                     int tag) {
  MPI_Request reqs[2];
  int n = 0;
  if (in) ring_post(g, 0, in, n_in, from, tag, &reqs[n++]);
  if (out) ring_post(g, 1, out, n_out, to, tag, &reqs[n++]);
  ring_wait_mpi(g, reqs, n);
}

/* How far round the ring rank src's slice goes: the last step at which
 * some rank sees some of its keys (0: its owner only). Further on, it is
 * neither sent nor computed. */
unsigned ring_reach(const ring *g, int src) {
  ring_chunk theirs[2];
  unsigned nt = 0, last = 0;
  ring_slice_of(g, src, theirs, &nt);
  for (unsigned j = 1; j < g->steps; j++) {
    ring_chunk mine[2];
    unsigned nm = 0;
    ring_slice_of(g, (int)(((unsigned)src + j) % (unsigned)g->ranks), mine, &nm);
    for (unsigned a = 0; a < nm; a++)
      for (unsigned e = 0; e < nt; e++)
        if (ring_block_plan(mine[a].start, mine[a].len, theirs[e].start, theirs[e].len, g->wl,
                            g->wr)
                .visible)
          last = j;
  }
  return last;
}


step_moves ring_moves(const ring *g, unsigned s) {
  ring_chunk c[2];
  unsigned nc;
  const int cur = ring_source(g, s), next = ring_source(g, s + 1);
  step_moves m;
  const unsigned reach_cur = ring_reach(g, cur);
  m.holds = s <= reach_cur;
  m.passes = s + 1 <= reach_cur;
  m.gets = s + 1 < g->steps && s + 1 <= ring_reach(g, next);
  m.n_cur = ring_kv_elems(g, ring_slice_of(g, cur, c, &nc));
  m.n_next = ring_kv_elems(g, ring_slice_of(g, next, c, &nc));
  return m;
}


/* The visible blocks of step s, in a fixed order, counted in `count`
 * (with the hidden ones) unless NULL; the chunks of the slice held and its
 * tokens come back too. */
unsigned ring_step_blocks(const ring *g, unsigned s, ring_chunk theirs[2], size_t *src_tokens,
                            step_block out[MAX_BLOCKS], fcl_mpi_info *count) {
  unsigned nt = 0, n = 0, hidden = 0;
  *src_tokens = ring_slice_of(g, ring_source(g, s), theirs, &nt);
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
