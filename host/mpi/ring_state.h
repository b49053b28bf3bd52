/*
 * ring_state.h — one ring call's state and the steps its forward
 * (ring_forward.c) and backward (ring_backward.c) share (ring.c): the
 * failure kept for the agreement, device and host buffers, the exchanges,
 * and which blocks a step holds.
 */
#ifndef FLASHCL_MPI_RING_STATE_H
#define FLASHCL_MPI_RING_STATE_H

#include "ring.h"

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
  double t0;                   /* when the call began */
  fcl_status status;           /* the first failure after the agreement */
  char why[256];
} ring;

/* What this rank does with K/V at step s: holds the slice (computes on
 * it), passes it on, gets the next one. */
typedef struct step_moves {
  int holds, passes, gets;
  size_t n_cur, n_next; /* elements of K in the slice held and the next */
} step_moves;

/* A visible block of a step: query chunk `a` of this rank against chunk
 * `e` of the slice it holds. */
typedef struct step_block {
  unsigned a, e;
  ring_block blk;
} step_block;

double ring_now_ms(void);
int ring_failed(ring *g, fcl_status status, const char *fmt, ...);
int ring_cl_failed(ring *g, cl_int err, const char *call);
int ring_fcl_failed(ring *g, fcl_status status, const char *what);
size_t ring_kv_elems(const ring *g, size_t tokens);
fcl_status ring_begin(ring *g, MPI_Comm comm, fcl_context *ctx, const fcl_attention_desc *desc,
                      fcl_mpi_layout layout, unsigned flags, const cl_mem *bufs, unsigned n,
                      fcl_mpi_info *info);
int ring_source(const ring *g, unsigned s);
size_t ring_slice_of(const ring *g, int r, ring_chunk c[2], unsigned *n);
cl_mem ring_dev_alloc(ring *g, size_t bytes);
void *ring_host_alloc(ring *g, size_t bytes);
void ring_release(cl_mem *m);
cl_mem ring_widen(ring *g, cl_mem from, size_t n);
void ring_narrow(ring *g, cl_mem from, cl_mem to, size_t n);
void ring_write_host(ring *g, cl_mem to, const float *from, size_t n);
void ring_read_host(ring *g, cl_mem from, float *to, size_t n);
void ring_kv_start(ring *g, cl_mem *kdev, cl_mem *vdev, float *message);
void ring_copy_lse(ring *g, cl_mem src, size_t src_pitch, size_t src_col, size_t src_slice,
                   cl_mem dst, size_t dst_pitch, size_t dst_col, size_t dst_slice, size_t cols);
fcl_tensor_layout ring_view(const ring *g, size_t tokens, size_t heads, size_t first);
fcl_attention_desc ring_block_desc(const ring *g, const ring_chunk *q, const ring_chunk *k,
                                   size_t src_tokens, const ring_block *blk);
void ring_wait_device(ring *g, MPI_Request *reqs, int n, double t0);
void ring_wait_mpi(ring *g, MPI_Request *reqs, int n);
void ring_post(ring *g, int send, void *buf, size_t n, int peer, int tag, MPI_Request *req);
void ring_exchange(ring *g, void *out, size_t n_out, int to, void *in, size_t n_in, int from,
                   int tag);
unsigned ring_reach(const ring *g, int src);
step_moves ring_moves(const ring *g, unsigned s);
unsigned ring_step_blocks(const ring *g, unsigned s, ring_chunk theirs[2], size_t *src_tokens,
                          step_block out[MAX_BLOCKS], fcl_mpi_info *count);

#endif
