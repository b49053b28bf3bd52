/*
 * problem.h — a validated problem (validate.c), its sequences and mask's pairs (mask.c) and its tensor views (layout.c).
 */
#ifndef FCL_PROBLEM_H
#define FCL_PROBLEM_H

#include "common.h"
#include "context.h"

/** The eight tensors a descriptor lays out, in fcl_attention_desc's order. */
enum { FCL__Q, FCL__K, FCL__V, FCL__O, FCL__DOUT, FCL__DQ, FCL__DK, FCL__DV, FCL__TENSORS };

/** A validated descriptor and what follows from it, computed once
 *  without overflow by fcl__check_desc: every part of the library works
 *  from `desc` here, the caller's descriptor whole (the defaults past its
 *  struct_size), never from the caller's pointer. */
struct fcl__shape {
  fcl_attention_desc desc;
  size_t tokens_q, tokens_k;  /* batch * seqlen, or the ragged totals */
  size_t q_elems;   /* tokens_q * heads_q * head_dim: Q, O, dO, dQ */
  size_t kv_elems;  /* tokens_k * heads_kv * head_dim: K, V, dK, dV */
  size_t head_dim_v;  /* desc.head_dim_v, 0 resolved to head_dim */
  size_t o_elems;   /* tokens_q * heads_q * head_dim_v: O, dO */
  size_t v_elems;   /* tokens_k * heads_kv * head_dim_v: V, dV */
  size_t lse_elems; /* tokens_q * heads_q */
  size_t elem_size; /* bytes of the storage type */
  size_t group;     /* heads_q / heads_kv */
  int window_left, window_right;  /* causal folded in: -1 unbounded */
  int ragged;       /* cu_seqlens given */
  int tabled;       /* per-sequence lengths (cu_seqlens or seqlens_k): the kernels read the
                       sequence table and walk a work list */
  int vec4;         /* head_dim and every view's offset and strides multiples of 4 */
  int paged;        /* block_table given: K and V are pools of pages */
  size_t table_bytes;  /* the block table's, paged */
  size_t sinks_bytes;  /* the sinks' (and dsinks'), heads_q floats; 0 without */
  fcl_tensor_layout views[FCL__TENSORS];  /* strides resolved (packed by default); paged K
                                             and V: batch_stride is between pages */
  fcl_buffer_sizes sizes;                 /* the bytes each buffer must hold */
  /* A quantized KV cache (desc.kv_dtype): K and V's views count bytes,
   * kv_row_bytes a row's (the storage type's head_dim elements otherwise);
   * the fp8 forms' scales, 0 taken as 1. */
  int kv_quant;
  size_t kv_row_bytes;
  float k_scale, v_scale;
  /* V is a view of K's first head_dim_v columns (the same buffer and
   * views): set by a flash forward call from its buffers, never from the
   * descriptor alone; the decode kernel then reads each row once. */
  int v_in_k;
  /* A quantized cache's buffers where the caller lent their memory
   * (CL_MEM_USE_HOST_PTR, which a device may read in place): the widest
   * unit, 16, 8, 4, 2 or 1 bytes, their addresses allow; 0 where the
   * device placed them (aligned beyond 16 bytes). Set by a flash forward call from
   * its buffers, never from the descriptor alone. */
  unsigned kv_buffer_unit;
};

/** A checked descriptor's value width: head_dim_v, 0 read as head_dim. */
static inline size_t fcl__desc_head_dim_v(const fcl_attention_desc *desc) {
  return desc->head_dim_v ? desc->head_dim_v : desc->head_dim;
}
/** Whether tensor t (FCL__Q ..) has head_dim_v columns: V, O, dO, dV. */
static inline int fcl__value_side(int t) {
  return t == FCL__V || t == FCL__O || t == FCL__DOUT || t == FCL__DV;
}
/** Whether tensor t is indexed by keys (K, V, dK, dV), else by queries. */
static inline int fcl__key_side(int t) {
  return t == FCL__K || t == FCL__V || t == FCL__DK || t == FCL__DV;
}
/** Columns of tensor t of a checked shape. */
static inline size_t fcl__tensor_width(const fcl__shape *shape, int t) {
  return fcl__value_side(t) ? shape->head_dim_v : shape->desc.head_dim;
}
/** Elements of tensor t of a checked shape, packed. */
static inline size_t fcl__tensor_elems(const fcl__shape *shape, int t) {
  return fcl__key_side(t) ? (fcl__value_side(t) ? shape->v_elems : shape->kv_elems)
                          : (fcl__value_side(t) ? shape->o_elems : shape->q_elems);
}

/* ---- sequences and the mask's pair counts (mask.c) ------------------------ */

/** Called for each distinct sequence shape: `count` batch entries of nq
 *  queries against nk keys (all of them at once without ragged batches). */
typedef void (*fcl__sequence_fn)(void *state, size_t nq, size_t nk, size_t count);
void fcl__each_sequence(const fcl__shape *shape, fcl__sequence_fn fn, void *state);

/** Pairs (query, key) a sequence of nq queries and nk keys shows through
 *  the window (params.h, fcl_row_keys), in closed form. */
fcl__bytes fcl__visible_pairs(size_t nq, size_t nk, int window_left, int window_right);
/** Pairs (query, key) all sequences show, per head: what FLOP counts and
 *  the asymptotic figures count. */
double fcl__shown_pairs(const fcl__shape *shape);
/** FLOPs of a pass by flash-attn's convention (fcl_attention_flops). */
double fcl__flops(const fcl__shape *shape, fcl_pass pass);

/* ---- tensor views (layout.c) ---------------------------------------------- */

/** The extents a view's strides are checked against. */
typedef struct fcl__view_extent {
  size_t batch, tokens, heads, head_dim, elem_size;  /* tokens: per entry, or in all (ragged) */
  int ragged;
} fcl__view_extent;

/** A layout with the packed default's strides filled in where all three
 *  are 0. */
fcl_tensor_layout fcl__resolve_layout(const fcl_tensor_layout *given, size_t batch,
                                      size_t seqlen, size_t heads, size_t head_dim,
                                      int ragged);
/** Whether a view's offset and strides are multiples of 4 elements (with
 *  head_dim one too, the kernels' aligned 4-element loads). */
int fcl__layout_vec4(const fcl_tensor_layout *layout);
/** The widest of 16, 8, 4, 2 and 1 that divides `value` (an address, or
 *  offsets and strides or'ed together). */
unsigned fcl__alignment_unit(uint64_t value);
/** The widest unit, 16, 8, 4 or 2 (or 1), that a view's offset and
 *  strides are all multiples of: counted in its elements (a quantized
 *  cache's, bytes), in a buffer the device aligns further. */
unsigned fcl__layout_unit(const fcl_tensor_layout *layout);
/** Checks that no two elements of a view share an address (and that a
 *  ragged view has no batch stride), and gives the bytes from the
 *  buffer's start to its last element. */
fcl_status fcl__check_layout(const fcl_tensor_layout *layout, const fcl__view_extent *extent,
                             const char *name, size_t *span, char *why, size_t why_len);

/** A view, or a plain range (LSE, slopes), placed in the memory it lives
 *  in: [begin, end) in bytes, and for a view its byte strides. */
typedef struct fcl__placed_view {
  uint64_t begin, end;
  int strided;
  size_t token_bytes, batch_bytes, head_bytes, row_bytes, heads;
} fcl__placed_view;

/** Whether two views in one memory may share a byte: their ranges meet,
 *  and they are not interleaved on a common token stride with their heads
 *  apart (packed QKV). Conservative: 1 when it cannot tell. */
int fcl__views_share_bytes(const fcl__placed_view *a, const fcl__placed_view *b);

/** A caller's growing struct (struct_size first) made whole in `out`,
 *  which holds the defaults: the `given_size` bytes it has (up to the
 *  `known` this library has) copied over them. Refuses a size below
 *  `first_version` and nonzero bytes in fields this library does not know;
 *  `what` names the argument and `init` its init function in messages. */
fcl_status fcl__grown_struct(const void *given, size_t given_size, size_t first_version,
                             void *out, size_t known, const char *what, const char *init,
                             char *why, size_t why_len);
/** Validates a descriptor's fields and computes its shape (when `shape` is
 *  not NULL). Pure apart from the error message, which goes to the context
 *  (ctx may be NULL). */
fcl_status fcl__check_desc(fcl_context *ctx, const fcl_attention_desc *desc,
                           fcl__shape *shape);
/** The same, writing the message to why[why_len] (may be NULL / 0). */
fcl_status fcl__check_desc_why(const fcl_attention_desc *desc, fcl__shape *shape,
                               char *why, size_t why_len);

/** Keys of one split of a forward plan (fcl_plan.splits): whole tiles,
 *  as many as ceil(seqlen_k / splits) needs. */
unsigned fcl__split_keys(const fcl_plan *plan, size_t seqlen_k);
/** Validates a tiling override as fcl_context_set_flash_tiling documents.
 *  Pure apart from the message (ctx may be NULL). */
fcl_status fcl__check_tiling_hint(fcl_context *ctx, const fcl_plan *hint);
fcl_status fcl__check_tiling_hint_why(const fcl_plan *hint, char *why, size_t why_len);

/** Checks that `mem` is non-NULL (unless optional), belongs to the context's
 *  OpenCL context and holds at least `bytes`. */
fcl_status fcl__check_buffer(fcl_context *ctx, cl_mem mem, size_t bytes,
                             const char *name, int optional);

/** One buffer argument of a call: the buffer, its name for messages, the
 *  bytes it must hold, whether NULL is allowed, and the bytes of it the
 *  call touches (a tensor's view, or a plain range). */
typedef struct fcl__call_buffer {
  cl_mem mem;
  const char *name;
  size_t bytes;
  int optional;
  fcl__placed_view view;
} fcl__call_buffer;

/** Checks the buffer arguments of one call, args[0..n): the first n_inputs
 *  are read, the rest written (NULL entries are absent optional buffers).
 *  Each is a buffer (fcl__check_buffer); an output must be writable by
 *  kernels (not CL_MEM_READ_ONLY) and share no byte with any other
 *  argument: through one root buffer or through host memory lent with
 *  CL_MEM_USE_HOST_PTR, with views interleaved on one token stride (packed
 *  QKV) told apart; an input must be readable (not CL_MEM_WRITE_ONLY).
 *  `lent`, when not NULL, receives each argument's host address where the
 *  caller lent its memory (CL_MEM_USE_HOST_PTR; a sub-buffer's is its
 *  parent's plus its origin), else 0. */
fcl_status fcl__check_call_buffers(fcl_context *ctx, const fcl__call_buffer *args,
                                   size_t n_inputs, size_t n, uintptr_t *lent);

/** The placed view of tensor `t` of a checked shape, relative to its
 *  buffer's start; and of a plain range of `bytes`. */
fcl__placed_view fcl__tensor_view(const fcl__shape *shape, int t);
/** The placed view of a layout of `heads` heads that spans `span` bytes. */
fcl__placed_view fcl__layout_view(const fcl_tensor_layout *layout, size_t span, size_t elem_size,
                                  size_t batch, size_t heads, size_t head_dim, int ragged);
fcl__placed_view fcl__range_view(size_t bytes);

/** Validates the context handle (non-NULL, created successfully). */
fcl_status fcl__check_context(fcl_context *ctx);

#endif
