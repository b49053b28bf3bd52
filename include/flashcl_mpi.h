/*
 * flashcl_mpi.h — ring attention over MPI: one sequence sharded across
 * ranks, each with its own flashcl context (its own device, or PoCL).
 *
 * Every rank holds a slice of the sequence's Q, K and V; K/V slices travel
 * around a ring of the communicator's ranks while each rank computes its
 * queries against them, and the partial states are merged exactly with the
 * library's merge (fcl_merge_states). The result on every rank is its slice
 * of single-device attention over the whole sequence. docs/design.md, "Ring
 * attention over MPI", tells the schedule, the overlap and the backward.
 *
 * Built as the library flashcl_mpi when CMake finds MPI; link it and
 * flashcl. Every function is collective over `comm`: each rank calls it
 * with the same descriptor, layout and flags.
 */
#ifndef FLASHCL_MPI_H
#define FLASHCL_MPI_H

#include <mpi.h>

#include "flashcl.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How the whole sequence of N tokens is divided among the P ranks. The
 *  sequence is cut into chunks, chunk c of n being tokens
 *  [floor(c N / n), floor((c + 1) N / n)) (lengths differ by at most one,
 *  so N need not divide by n). A rank's slice is its chunks back to back,
 *  in order: Q, K, V, O, dO and the gradients [batch][local][heads]
 *  [head_dim], LSE float [batch][heads_q][local], with local the sum of its
 *  chunks' lengths (fcl_mpi_slice). */
typedef enum fcl_mpi_layout {
  /** n = P: rank r holds chunk r. For non-causal problems and windows. */
  FCL_MPI_LAYOUT_CONTIGUOUS = 0,
  /** n = 2P: rank r holds chunks r and 2P - 1 - r, so that under a causal
   *  mask every rank has the same number of visible (query, key) pairs. */
  FCL_MPI_LAYOUT_ZIGZAG = 1,
} fcl_mpi_layout;

/** Flags of the ring calls. */
enum {
  /** Exchange each step's K/V only after its compute, blocking: the
   *  baseline that measures what the overlap saves. */
  FCL_MPI_NO_OVERLAP = 1,
};

/** What one rank did in a ring call, and why it failed. */
typedef struct fcl_mpi_info {
  double ms_total;     /**< the call, wall clock */
  double ms_compute;   /**< enqueueing and waiting for the device's blocks */
  double ms_staging;   /**< host<->device copies, widening and host sums */
  double ms_wait;      /**< waiting for MPI after the step's compute was done */
  uint64_t bytes_sent, bytes_received;  /**< counted, every message */
  unsigned steps;            /**< ring steps run (fewer than P with a window) */
  unsigned blocks_computed;  /**< (query chunk, key chunk) pairs computed */
  /** pairs of the slices this rank held that the mask hides: not computed
   *  (the slices no rank further on needs are not sent at all) */
  unsigned blocks_skipped;
  /** "" on success; else "rank R: reason", the same text on every rank. */
  char error[320];
} fcl_mpi_info;

/** A rank's slice: `*local` tokens, made of `*chunks` (1 or 2) chunks,
 *  chunk i being the whole sequence's tokens [start[i], start[i] + len[i]).
 *  Any output pointer but local may be NULL.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT (a bad layout, rank
 *          outside [0, ranks), local NULL), FCL_ERROR_INVALID_SHAPE (a
 *          chunk of no token: N below P, or 2P for zig-zag). */
fcl_status fcl_mpi_slice(fcl_mpi_layout layout, size_t seqlen, int ranks, int rank,
                         size_t *local, unsigned *chunks, size_t start[2], size_t len[2]);

/** The forward of the whole problem `desc` (seqlen_q = seqlen_k = N, the
 *  whole sequence; causal, window_left/right and softcap as for
 *  fcl_attention_forward; packed layouts; no ALiBi, ragged batch, KV cache,
 *  paging or sinks), each rank giving its slice (fcl_mpi_layout) of q, k, v in
 *  buffers of its `ctx`, and getting its slice of o and, when lse is not
 *  NULL, of LSE. The flash algorithm computes each (query chunk, key chunk)
 *  block in f32 (16-bit inputs widened exactly), the blocks a query chunk
 *  sees are merged in f32 and stored once in the storage type.
 *  Blocks the mask hides are not computed, and K/V no later rank needs
 *  are not sent. Blocks the host: waits for its device and for MPI.
 *  Failure: every rank first checks its arguments and the ranks agree
 *  (one MPI_Allreduce): if any rank's are bad, every rank returns that
 *  rank's status, with "rank R: reason" in info->error, nothing sent and
 *  nothing written. A failure after the agreement (a device error) is
 *  agreed at the end alike; o and lse may then be partly written.
 *  @return FCL_SUCCESS or an fcl_status of fcl_attention_forward;
 *          FCL_ERROR_INVALID_ARGUMENT also for a bad layout or flags, a
 *          descriptor that differs from rank 0's, or an MPI error. */
fcl_status fcl_mpi_attention_forward(MPI_Comm comm, fcl_context *ctx,
                                     const fcl_attention_desc *desc, fcl_mpi_layout layout,
                                     unsigned flags, cl_mem q, cl_mem k, cl_mem v, cl_mem o,
                                     cl_mem lse, fcl_mpi_info *info);

/** The backward of fcl_mpi_attention_forward: given the slices of q, k, v,
 *  the forward's o and lse (required: the global LSE) and dout, writes the
 *  slices of dq, dk and dv. K/V travel the ring again, dK/dV accumulators
 *  travel with them back to their owners; each rank sums dQ locally. Sums
 *  are f32 in a fixed order (no atomics): the same inputs on the same
 *  ranks give the same bits. Failure as for the forward.
 *  @return as fcl_mpi_attention_forward. */
fcl_status fcl_mpi_attention_backward(MPI_Comm comm, fcl_context *ctx,
                                      const fcl_attention_desc *desc, fcl_mpi_layout layout,
                                      unsigned flags, cl_mem q, cl_mem k, cl_mem v, cl_mem o,
                                      cl_mem lse, cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv,
                                      fcl_mpi_info *info);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCL_MPI_H */
