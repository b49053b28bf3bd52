/*
 * views.h — tensors in the layouts a caller may hold (flashcl.h,
 * fcl_tensor_layout), for the tests and flashcl-bench: the layouts by
 * name, and moving a packed host tensor ([tokens][heads][head_dim], as the
 * float64 reference takes it) into and out of the bytes of a buffer that
 * holds it in its view.
 */
#ifndef FLASHCL_VIEWS_H
#define FLASHCL_VIEWS_H

#include "flashcl.h"

/** The eight tensors of a descriptor, in its order. */
typedef enum fclu_tensor {
  FCLU_Q, FCLU_K, FCLU_V, FCLU_O, FCLU_DOUT, FCLU_DQ, FCLU_DK, FCLU_DV, FCLU_TENSORS
} fclu_tensor;

/** Layouts by name: bshd, packed [batch][seqlen][heads][head_dim] (the
 *  default); bhsd, PyTorch's [batch][heads][seqlen][head_dim] (ragged:
 *  [heads][tokens][head_dim]) for q, k, v and their gradients; qkv, q, k
 *  and v as views of one [tokens][heads_q + 2 heads_kv][head_dim] buffer,
 *  and dq, dk, dv of another (o and dout packed). */
typedef enum fclu_layout { FCLU_BSHD, FCLU_BHSD, FCLU_QKV } fclu_layout;

/** "bshd", "bhsd", "qkv" -> *out; -1 for another name. */
int fclu_layout_named(const char *name, fclu_layout *out);
const char *fclu_layout_name(fclu_layout layout);

/** Sets desc's eight layouts to `layout` (its shape, ragged or not, set). */
void fclu_set_layouts(fcl_attention_desc *desc, fclu_layout layout);

/** Whether tensor t lives in the same buffer as others (qkv). */
int fclu_shares_buffer(const fcl_attention_desc *desc, fclu_tensor t);

/** Tokens of tensor t: batch * seqlen, or the ragged total; and the
 *  elements of its packed form. */
size_t fclu_tokens(const fcl_attention_desc *desc, fclu_tensor t);
size_t fclu_packed_elems(const fcl_attention_desc *desc, fclu_tensor t);
/** Columns of V, O, dO and dV: desc.head_dim_v, or head_dim where it is 0. */
size_t fclu_head_dim_v(const fcl_attention_desc *desc);

/** The host copy of a paged cache's block table (fcl_attention_desc.
 *  block_table), which fclu_scatter and fclu_gather follow for K and V;
 *  kept as fclu_remember_host_copy keeps it. */
void fclu_set_pages(cl_mem block_table, const int32_t *host);

/** A block table of batch x pages_per_seq entries naming `num_pages`
 *  pages (num_pages >= batch x pages_per_seq) in a random order, each page
 *  named once: for tests and flashcl-bench. */
void fclu_shuffled_pages(uint64_t seed, size_t batch, size_t pages_per_seq, size_t num_pages,
                         int32_t *table);

/** Writes packed tensor x (floats, converted to desc's storage type) into
 *  `image`, the bytes of a buffer holding tensor t in desc's view; reads it
 *  back. Bytes of the image outside the view are left alone. A paged K or
 *  V is its pool, each token at its page (fclu_set_pages). */
void fclu_scatter(const fcl_attention_desc *desc, fclu_tensor t, const float *x, void *image);
/** fclu_scatter where x's rows (head_dim values of a token's head, in
 *  packed order) repeat every `period` rows (0: they may not): a
 *  quantized K or V encodes the first `period` rows and copies the rest,
 *  which flashcl-bench's caches of 10^9 elements need. */
void fclu_scatter_repeating(const fcl_attention_desc *desc, fclu_tensor t, const float *x,
                            void *image, size_t period);
void fclu_gather(const fcl_attention_desc *desc, fclu_tensor t, const void *image, float *x);

#endif
