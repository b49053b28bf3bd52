/*
 * naive.h — what the naive algorithm's files (naive.c, naive_bwd.c, gemm.c)
 * share: walking its chunks, the operands of its GEMMs, the row kernels'
 * options and arguments, and CLBlast. Its plan (chunks, launch shape,
 * compute type), which the I/O model reads too: naive_plan.h.
 */
#ifndef FLASHCL_NAIVE_H
#define FLASHCL_NAIVE_H

#include "common.h"
#include "program.h"
#include "problem.h"
#include "naive_plan.h"

/** What both passes do first: refuse a storage type the device cannot run,
 *  chunk the slices, and report the chunk count (saturated). */
fcl_status fcl__naive_begin(fcl_context *ctx, const fcl__shape *shape, fcl_pass pass,
                            fcl__chunking *ch, unsigned *chunks);

/** One chunk: batch entry b (one sequence), group member `member`, kv heads
 *  [kv0, kv0 + n); its sequence's nq x nk and where its tokens start. */
typedef struct fcl__naive_chunk {
  size_t b, member, kv0, n;
  size_t nq, nk, q_start, k_start;
} fcl__naive_chunk;

typedef fcl_status (*fcl__chunk_fn)(void *state, const fcl__naive_chunk *chunk);

/** Calls `fn` for every chunk, sequence by sequence and members in order
 *  within each; stops at the first failure. */
fcl_status fcl__naive_each_chunk(const fcl__shape *shape, const fcl__chunking *ch,
                                 fcl__chunk_fn fn, void *state);

/** A tensor the GEMMs read or write: the caller's buffer in its view, or a
 *  packed scratch copy. */
typedef struct fcl__operand {
  cl_mem mem;
  fcl_tensor_layout view;
} fcl__operand;

/** Element offset of token `token` of batch entry b, head h. */
size_t fcl__operand_at(const fcl__operand *op, size_t b, size_t token, size_t h);

/** A packed [tokens][heads][head_dim] view of tensor t (its scratch copy). */
fcl_tensor_layout fcl__packed_view(const fcl__shape *shape, int t);

/** Tensor t of the caller: `mem` in its view. */
fcl__operand fcl__caller_operand(const fcl__shape *shape, int t, cl_mem mem);

/** A packed scratch copy of tensor t, in float (`f32`) or the storage type,
 *  allocated; its mem NULL and *status set on failure. */
fcl__operand fcl__scratch_operand(fcl_context *ctx, const fcl__shape *shape, int t, int f32,
                                  const char *what, fcl_status *status);

/** Moves tensor t between the caller's view and a packed copy (convert.cl:
 *  view_to_packed, packed_to_view), widening to or rounding from float when
 *  `f32`, else copying. */
fcl_status fcl__view_move(fcl_context *ctx, const fcl__shape *shape, int t, int to_packed,
                          int f32, cl_mem view_mem, cl_mem packed_mem, cl_mem io_counter);

/** Zeroes tokens [token0, token0 + tokens) of entry b, heads [head0, head0 +
 *  heads) of an operand of tensor t's width (softmax.cl: zero_rows), in `type`. */
fcl_status fcl__zero_rows(fcl_context *ctx, const fcl__shape *shape, fcl_dtype type, int t,
                          const fcl__operand *op, size_t b, size_t token0, size_t tokens,
                          size_t head0, size_t heads, cl_mem io_counter);

/** The -D options of softmax.cl's row kernels (storage type, launch shape
 *  for rows of up to seqlen_k, transforms, I/O counting), into `opts`. */
void fcl__softmax_options(const fcl_device_limits *limits, const fcl__shape *shape,
                          fcl_dtype type, cl_mem io_counter, fcl__options *opts);

/** Sets a row kernel's arguments: its buffers, then the problem and where
 *  the chunk is (softmax.cl, CHUNK_PARAMS), then the I/O counter. */
fcl_status fcl__set_row_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                             const cl_mem *buffers, cl_uint n_buffers, const fcl_params *params,
                             const fcl__naive_chunk *chunk, size_t group, cl_mem io_counter);

/** One strided-batched GEMM, row-major: C = alpha * op(A) op(B) + beta * C
 *  for `batch` matrices `*_stride` elements apart, in f32 (SGEMM) or f16
 *  (HGEMM, alpha and beta rounded to half). */
typedef struct fcl__gemm {
  fcl_dtype type;  /* FCL_DTYPE_F32 (0, the default) or FCL_DTYPE_F16 */
  int trans_a, trans_b;
  size_t m, n, k;
  float alpha, beta;
  cl_mem a, b, c;
  size_t a_off, a_ld, a_stride;
  size_t b_off, b_ld, b_stride;
  size_t c_off, c_ld, c_stride;
  size_t batch;
} fcl__gemm;

/* CLBlast (gemm.c). */
/** Runs a GEMM through CLBlast, one call at a time across the process
 *  (CLBlast 1.5.3's caches are not thread-safe); `what` names it in errors.
 *  Counts as an enqueue for failure injection. */
fcl_status fcl__gemm_run(fcl_context *ctx, const fcl__gemm *gemm, const char *what);

#endif
