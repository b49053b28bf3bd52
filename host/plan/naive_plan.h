/*
 * naive_plan.h — how the naive algorithm (run/naive.c, naive_bwd.c, gemm.c)
 * is planned, which its I/O model reckons alike (plan_naive.c): the chunks
 * of (batch, head) slices, the softmax kernels' launch shape, the type it
 * computes in, and which storage types a device runs.
 */
#ifndef FLASHCL_NAIVE_PLAN_H
#define FLASHCL_NAIVE_PLAN_H

#include "common.h"
#include "problem.h"

/** Chunking: (batch, head) slices per chunk given the device and scratch
 *  limits. The forward keeps one seqlen_q x seqlen_k matrix per slice (S,
 *  then P in place), the backward two (P, and dP then dS in place) and a
 *  third with a softcap (its slope t'(S)). Ragged batches size the
 *  matrices by the longest sequences (seqlen_q, seqlen_k). */
typedef struct fcl__chunking {
  size_t slice_bytes;  /* one slice's matrices */
  size_t matrices;     /* per slice: 1, 2 or 3 */
  size_t per_chunk;    /* kv heads per chunk */
  size_t chunks;       /* total chunks over batch * group * kv heads */
} fcl__chunking;

/** ctx only receives the error message and may be NULL. */
fcl_status fcl__naive_chunking(fcl_context *ctx, const fcl_device_limits *limits,
                               uint64_t scratch_limit, const fcl__shape *shape,
                               fcl_pass pass, fcl__chunking *out);

/** Launch shape of softmax.cl for rows of seqlen_k: work-items per row and
 *  row elements per work-item (0: the streaming variant that reads twice). */
void fcl__softmax_config(const fcl_device_limits *limits, size_t seqlen_k,
                         unsigned *wg_size, unsigned *cols_per_item);

/** The type the naive algorithm computes in, for its GEMMs and S/P: f16
 *  for f16 storage, else f32 (bf16 runs the f32 path on widened copies). */
fcl_dtype fcl__naive_compute_dtype(const fcl_attention_desc *desc);
/** Bytes per element of the naive algorithm's S/P. */
size_t fcl__naive_s_elem_size(const fcl_attention_desc *desc);
/** Whether the naive algorithm runs desc's storage type on a device with
 *  `limits` (f16 needs cl_khr_fp16 and a scale that is a normal half);
 *  FCL_ERROR_UNSUPPORTED and why if not. ctx may be NULL. */
fcl_status fcl__naive_check_dtype(fcl_context *ctx, const fcl_device_limits *limits,
                                  const fcl_attention_desc *desc);

/** float -> IEEE binary16 bits, rounded to nearest even (NaN stays NaN),
 *  for HGEMM's alpha and beta (the kernels convert on the device);
 *  magnitudes below the normal range (2^-14) become 0. */
cl_half fcl__half_bits(float f);

#endif
