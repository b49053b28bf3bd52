/*
 * ring.h — what the ring attention's files share (include/flashcl_mpi.h is
 * the public side): the split of the sequence into chunks, each block's
 * mask as the single-device calls express it, and the agreement on status.
 */
#ifndef FLASHCL_MPI_RING_H
#define FLASHCL_MPI_RING_H

#include "flashcl_mpi.h"

/** One chunk of the sequence: global tokens [start, start + len), at
 *  token `local` of its owner's slice. */
typedef struct ring_chunk {
  size_t start, len, local;
} ring_chunk;

/** A rank's chunks (1 or 2) and its slice's length; FCL_SUCCESS or the
 *  statuses of fcl_mpi_slice. */
fcl_status ring_chunks(fcl_mpi_layout layout, size_t seqlen, int ranks, int rank,
                       ring_chunk out[2], unsigned *count, size_t *local);

/** The part of a block (a query chunk against a key chunk) that its mask
 *  shows, and the window that masks it as the single-device call does,
 *  aligned bottom-right: rows [0, q_rows) of the query chunk against keys
 *  [k_first, k_first + k_len) of the key chunk. The rows after q_rows see
 *  none of the chunk's keys, nor do the keys left out any row. */
typedef struct ring_block {
  int visible;   /**< 0: the mask hides the whole block */
  size_t q_rows, k_first, k_len;
  int window_left, window_right;  /**< -1: none */
} ring_block;

/** Plans the block of queries at global [q0, q0 + nq) against keys at
 *  [k0, k0 + nk) under the whole problem's window (-1: unbounded side;
 *  causal is window_right 0). */
ring_block ring_block_plan(size_t q0, size_t nq, size_t k0, size_t nk, int window_left,
                           int window_right);

/** The whole problem's window: causal makes window_right 0. */
void ring_window(const fcl_attention_desc *desc, int *left, int *right);

/** Ring steps needed: 1 + the last step s at which some rank's queries see
 *  some of the keys of rank (rank - s) mod P. */
unsigned ring_steps(fcl_mpi_layout layout, size_t seqlen, int ranks, int window_left,
                    int window_right);

/** MPI_Waitall, but sleeping between tests: Open MPI's own wait spins on a
 *  core, which ranks sharing a CPU (and PoCL's threads) need.
 *  @return MPI_SUCCESS or the failing MPI_Testall's code. */
int ring_wait(MPI_Request *reqs, int n);

/** Every rank learns whether every rank's `local` is FCL_SUCCESS; if not,
 *  each returns the failure of the lowest rank with the highest status,
 *  and info->error gets "rank R: why" from that rank. Collective.
 *  @return the agreed status. */
fcl_status ring_agree(MPI_Comm comm, fcl_status local, const char *why, fcl_mpi_info *info);

/** Checks a ring call's arguments on this rank (desc against rank 0's,
 *  the buffers against the slice's sizes) and agrees on them with the
 *  others. Buffers: q, k, v, o, lse, then for the backward dout, dq, dk,
 *  dv (n is 5 or 9; lse may be NULL in the forward). Collective. */
fcl_status ring_check(MPI_Comm comm, fcl_context *ctx, const fcl_attention_desc *desc,
                      fcl_mpi_layout layout, unsigned flags, const cl_mem *bufs, unsigned n,
                      fcl_mpi_info *info);

#endif
