/*
 * layout.c — tensor views (fcl_tensor_layout): a view's strides resolved
 * from the packed default, the check that no two of its elements share an
 * address, the bytes it spans, and whether two views of one memory share
 * a byte. Pure.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"

#include <stdlib.h>
#include <string.h>

/* One dimension of a view: its stride and extent, in elements. */
typedef struct dim {
  size_t stride, extent;
} dim;

static int by_stride(const void *a, const void *b) {
  const dim *x = a, *y = b;
  return (x->stride > y->stride) - (x->stride < y->stride);
}

fcl_tensor_layout fcl__resolve_layout(const fcl_tensor_layout *given, size_t batch,
                                      size_t seqlen, size_t heads, size_t head_dim,
                                      int ragged) {
  if (given->batch_stride || given->seq_stride || given->head_stride) return *given;
  /* the packed layout, [batch][seqlen][heads][head_dim] (ragged: no batch) */
  fcl_tensor_layout l = *given;
  l.head_stride = head_dim;
  l.seq_stride = heads * head_dim;
  l.batch_stride = ragged ? 0 : seqlen * heads * head_dim;
  (void)batch;
  return l;
}

int fcl__layout_vec4(const fcl_tensor_layout *l) {
  return l->offset % 4 == 0 && l->batch_stride % 4 == 0 && l->seq_stride % 4 == 0 &&
         l->head_stride % 4 == 0;
}

unsigned fcl__alignment_unit(uint64_t value) {
  unsigned unit = 16;
  while (unit > 1 && value % unit != 0) unit /= 2;
  return unit;
}

unsigned fcl__layout_unit(const fcl_tensor_layout *l) {
  return fcl__alignment_unit(l->offset | l->batch_stride | l->seq_stride | l->head_stride);
}

fcl_status fcl__check_layout(const fcl_tensor_layout *l, const fcl__view_extent *e,
                             const char *name, size_t *span, char *why, size_t why_len) {
  if (e->ragged && l->batch_stride) {
    fcl__say(why, why_len,
             "%s: batch_stride is %zu; with ragged batches (cu_seqlens) tokens are counted "
             "across sequences and batch_stride must be 0",
             name, l->batch_stride);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  /* The dimensions that have more than one index, smallest stride first:
   * each stride must reach past everything the smaller ones span, or two
   * elements would share an address. */
  dim dims[4] = {{1, e->head_dim},
                 {l->head_stride, e->heads},
                 {l->seq_stride, e->tokens},
                 {l->batch_stride, e->ragged ? 1 : e->batch}};
  dim live[4];
  int n = 0;
  for (int i = 0; i < 4; ++i)
    if (dims[i].extent > 1) live[n++] = dims[i];
  qsort(live, (size_t)n, sizeof live[0], by_stride);
  unsigned __int128 reach = 0;  /* the largest offset of the dims so far */
  for (int i = 0; i < n; ++i) {
    if ((unsigned __int128)live[i].stride <= reach) {
      fcl__say(why, why_len,
               "%s: strides (batch %zu, seq %zu, head %zu, with head_dim %zu contiguous) "
               "make elements overlap",
               name, l->batch_stride, l->seq_stride, l->head_stride, e->head_dim);
      return FCL_ERROR_INVALID_ARGUMENT;
    }
    reach += (unsigned __int128)live[i].stride * (live[i].extent - 1);
  }
  /* The last element touched, plus one: every extent is at least 1. */
  unsigned __int128 last = (unsigned __int128)l->offset + reach;
  if (e->tokens == 0 || e->batch == 0) last = 0;  /* an empty ragged tensor touches nothing */
  else last += 1;
  if (last > SIZE_MAX / e->elem_size) {
    fcl__say(why, why_len, "%s: its layout spans more than size_t can count (offset %zu)",
             name, l->offset);
    return FCL_ERROR_INVALID_SHAPE;
  }
  *span = (size_t)last * e->elem_size;
  return FCL_SUCCESS;
}

/* ---- do two views of one memory share a byte? ---------------------------- */

typedef struct interval {
  unsigned __int128 begin, end;
} interval;

static int by_begin(const void *a, const void *b) {
  const interval *x = a, *y = b;
  return (x->begin > y->begin) - (x->begin < y->begin);
}

/* The heads of one token of each view as byte intervals modulo the common
 * token stride, split where they wrap; 1 when two of them overlap (the
 * intervals of one view never overlap each other: fcl__check_layout). */
static int tokens_interleave(const fcl__placed_view *a, const fcl__placed_view *b,
                             size_t period) {
  const size_t n = 2 * (a->heads + b->heads);
  interval *all = malloc(n * sizeof *all);
  if (!all) return 1;  /* cannot tell: take them to overlap */
  size_t m = 0;
  const fcl__placed_view *views[2] = {a, b};
  for (int v = 0; v < 2; ++v)
    for (size_t h = 0; h < views[v]->heads; ++h) {
      const unsigned __int128 at =
          ((unsigned __int128)views[v]->begin + (unsigned __int128)h * views[v]->head_bytes) %
          period;
      const unsigned __int128 end = at + views[v]->row_bytes;
      if (end <= period) {
        all[m++] = (interval){at, end};
      } else {
        all[m++] = (interval){at, period};
        all[m++] = (interval){0, end - period};
      }
    }
  qsort(all, m, sizeof *all, by_begin);
  int overlap = 0;
  for (size_t i = 1; i < m && !overlap; ++i) overlap = all[i].begin < all[i - 1].end;
  free(all);
  return overlap;
}

/* Views with more heads than this are judged by their byte ranges alone. */
#define INTERLEAVE_MAX_HEADS 4096

int fcl__views_share_bytes(const fcl__placed_view *a, const fcl__placed_view *b) {
  if (a->end <= b->begin || b->end <= a->begin) return 0;  /* apart */
  /* Interleaved on one token stride (packed QKV and its gradients): each
   * view's heads lie within one token's stride, tokens and batch entries
   * repeat with that stride, and the heads of the two views fall in
   * different places of it. Anything else that spans common bytes is
   * taken to overlap. */
  const size_t period = a->token_bytes;
  if (!a->strided || !b->strided || period == 0 || b->token_bytes != period ||
      a->batch_bytes != b->batch_bytes || a->batch_bytes % period != 0 ||
      a->heads > INTERLEAVE_MAX_HEADS || b->heads > INTERLEAVE_MAX_HEADS)
    return 1;
  const unsigned __int128 a_token = (unsigned __int128)(a->heads - 1) * a->head_bytes + a->row_bytes;
  const unsigned __int128 b_token = (unsigned __int128)(b->heads - 1) * b->head_bytes + b->row_bytes;
  if (a_token > period || b_token > period) return 1;
  return tokens_interleave(a, b, period);
}

fcl__placed_view fcl__layout_view(const fcl_tensor_layout *l, size_t span, size_t elem_size,
                                  size_t batch, size_t heads, size_t head_dim, int ragged) {
  const size_t e = elem_size;
  fcl__placed_view v = {.begin = (uint64_t)l->offset * e,
                        .end = span,
                        .strided = 1,
                        .token_bytes = l->seq_stride * e,
                        .batch_bytes = ragged || batch == 1 ? 0 : l->batch_stride * e,
                        .head_bytes = l->head_stride * e,
                        .row_bytes = head_dim * e,
                        .heads = heads};
  if (v.end < v.begin) v.end = v.begin;  /* an empty ragged tensor */
  return v;
}

fcl__placed_view fcl__tensor_view(const fcl__shape *shape, int t) {
  const int keyside = t == FCL__K || t == FCL__V || t == FCL__DK || t == FCL__DV;
  const size_t spans[FCL__TENSORS] = {shape->sizes.q,    shape->sizes.k,  shape->sizes.v,
                                      shape->sizes.o,    shape->sizes.dout, shape->sizes.dq,
                                      shape->sizes.dk,   shape->sizes.dv};
  const int pool = shape->paged && (t == FCL__K || t == FCL__V);  /* pages in place of entries */
  const int bytes = shape->kv_quant && (t == FCL__K || t == FCL__V);  /* rows of bytes */
  return fcl__layout_view(&shape->views[t], spans[t], bytes ? 1 : shape->elem_size,
                          pool ? shape->desc.num_pages : shape->desc.batch,
                          keyside ? shape->desc.heads_kv : shape->desc.heads_q,
                          bytes ? shape->kv_row_bytes : fcl__tensor_width(shape, t),
                          shape->ragged);
}

fcl__placed_view fcl__range_view(size_t bytes) {
  return (fcl__placed_view){.begin = 0, .end = bytes};
}
