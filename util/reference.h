/*
 * reference.h — attention in float64 on the host: the yardstick that the
 * tests and flashcl-bench --check measure the device results against.
 * Inputs are float arrays, already rounded to the storage type, so only
 * the device's arithmetic is being judged, in the packed layouts whatever
 * the descriptor's views: Q, O, dO, dQ [tokens_q][heads_q][head_dim], K,
 * V, dK, dV [tokens_k][heads_kv][head_dim] (tokens: batch * seqlen, or
 * the ragged totals) and LSE as the library lays it out (fclref_lse_at).
 * The mask, softcap, ALiBi and ragged batches follow the descriptor,
 * written here from flashcl.h's definitions, independently of the
 * library's own (cl/params.h). The float64 forms (fclref_forward*,
 * fclref_backward*) take desc.head_dim_v: V, O, dO and dV then have rows
 * of that width; the naive emulations and fclref_dsinks take head_dim only.
 */
#ifndef FLASHCL_REFERENCE_H
#define FLASHCL_REFERENCE_H

#include "flashcl.h"

/** Where row i of (batch b, query head h) is in the LSE array. */
size_t fclref_lse_at(const fcl_attention_desc *desc, size_t b, size_t h, size_t i);

/** The queries and keys of batch entry b: their first token and count. */
void fclref_sequence(const fcl_attention_desc *desc, size_t b, size_t *q0, size_t *nq,
                     size_t *k0, size_t *nk);

/** Tells the reference what a descriptor's ALiBi slopes buffer holds (the
 *  reference runs on the host and cannot read it): `host` floats, as the
 *  buffer's layout. Up to 16 buffers are remembered, the newest replacing
 *  the oldest. */
void fclref_set_slopes(cl_mem slopes, const float *host);

/** Tells the reference what a descriptor's sinks buffer holds
 *  (fcl_attention_desc.sinks), heads_q floats, as fclref_set_slopes. With
 *  sinks every row's denominator takes exp(s_h), so a row that sees no key
 *  has LSE s_h. */
void fclref_set_sinks(cl_mem sinks, const float *host);

/** One query row (batch b, query head h, row i) of the forward:
 *  o_row[head_dim] and *lse (-INFINITY and zeros for a row that sees no
 *  key). Costs O(seqlen_k * head_dim), so callers can check a sample of
 *  rows of a large problem. */
void fclref_forward_row(const fcl_attention_desc *desc, const float *q,
                        const float *k, const float *v, size_t b, size_t h,
                        size_t i, double *o_row, double *lse);

/** The whole forward: o in Q's layout, lse at fclref_lse_at. */
void fclref_forward(const fcl_attention_desc *desc, const float *q,
                    const float *k, const float *v, double *o, double *lse);

/** The type the naive algorithm stores S and P in (and dP, dS) for a
 *  storage type, as the library runs it: half for f16 (half GEMMs), float
 *  for f32 and for bf16 (its f32 path on widened copies). */
fcl_dtype fclref_naive_s_dtype(fcl_dtype dtype);

/** The naive algorithm emulated on the host for one row: float arithmetic
 *  (products accumulated in float), with S and P rounded to
 *  fclref_naive_s_dtype() and O to the storage type, as the device stores
 *  them. The yardstick for a naive run's error where the device cannot run
 *  one (flashcl-bench --check) and for the tests of half storage. o_row has
 *  head_dim_v columns. */
void fclref_naive_row(const fcl_attention_desc *desc, const float *q, const float *k,
                      const float *v, size_t b, size_t h, size_t i, float *o_row,
                      float *lse);
/** fclref_naive_row over every row of every sequence: o in O's packed
 *  layout (head_dim_v wide), rows past a ragged sequence left as they are. */
void fclref_naive_forward(const fcl_attention_desc *desc, const float *q, const float *k,
                          const float *v, float *o);

/** The backward of one (batch b, kv head hkv) slice, from the inputs alone
 *  (P recomputed exactly, not from a device LSE): dq rows of the query
 *  heads that read kv head hkv, and dk, dv of that head (summed over those
 *  query heads), each written at its place in a full array of its tensor's
 *  layout; the rest of the arrays is left alone. dout is dL/dO in Q's
 *  layout. A row that sees no key contributes nothing and gets dq = 0.
 *  Costs O(group * seqlen_q * seqlen_k * head_dim), so callers can check a
 *  sample of slices of a large problem. */
void fclref_backward_slice(const fcl_attention_desc *desc, const float *q,
                           const float *k, const float *v, const float *dout,
                           size_t b, size_t hkv, double *dq, double *dk, double *dv);

/** One row of dQ (batch b, query head h, row i), in O(seqlen_k * head_dim):
 *  the check a large problem can afford for every row it samples (dK and
 *  dV rows need every query row's softmax, a whole slice's work). */
void fclref_backward_dq_row(const fcl_attention_desc *desc, const float *q,
                            const float *k, const float *v, const float *dout,
                            size_t b, size_t h, size_t i, double *dq_row);

/** The whole backward: dq in Q's layout, dk and dv in K's. */
void fclref_backward(const fcl_attention_desc *desc, const float *q,
                     const float *k, const float *v, const float *dout,
                     double *dq, double *dk, double *dv);

/** The backward with D = rowsum(dO * O) taken from a given o (Q's layout)
 *  instead of the exact one: what the flash backward computes exactly when
 *  it reads that O, so that O's rounding to the storage type is not
 *  counted as its error. o NULL: fclref_backward. */
void fclref_backward_given_o(const fcl_attention_desc *desc, const float *q, const float *k,
                             const float *v, const float *dout, const float *o, double *dq,
                             double *dk, double *dv);

/** The sinks' gradient, dsinks[heads_q]: -sum over the rows of head h of
 *  exp(s_h - LSE) D, D = dO . O with O the exact forward's, or the given o
 *  (Q's layout; NULL: exact), as the flash backward reads it. */
void fclref_dsinks(const fcl_attention_desc *desc, const float *q, const float *k,
                   const float *v, const float *dout, const float *o, double *dsinks);

/** The naive backward emulated on the host, as naive_bwd.c computes it:
 *  float arithmetic, S, P, dP and dS rounded to fclref_naive_s_dtype(), LSE
 *  from that S, each group member's dK and dV sum rounded to the S type
 *  (the GEMMs' output) and the gradients to the storage type. The slice
 *  and row forms write what fclref_backward_slice and _dq_row would. */
void fclref_naive_backward_slice(const fcl_attention_desc *desc, const float *q,
                                 const float *k, const float *v, const float *dout,
                                 size_t b, size_t hkv, float *dq, float *dk, float *dv);
void fclref_naive_backward_dq_row(const fcl_attention_desc *desc, const float *q,
                                  const float *k, const float *v, const float *dout,
                                  size_t b, size_t h, size_t i, float *dq_row);
void fclref_naive_backward(const fcl_attention_desc *desc, const float *q, const float *k,
                           const float *v, const float *dout, float *dq, float *dk,
                           float *dv);

#endif
