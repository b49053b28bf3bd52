/*
 * views.c — see views.h.
 */
#include "views.h"

#include "hostdata.h"
#include "kvcodec.h"

#include <stdlib.h>
#include <string.h>

int fclu_layout_named(const char *name, fclu_layout *out) {
  static const char *const names[3] = {"bshd", "bhsd", "qkv"};
  for (int i = 0; i < 3; ++i)
    if (name && !strcmp(name, names[i])) {
      *out = (fclu_layout)i;
      return 0;
    }
  return -1;
}

const char *fclu_layout_name(fclu_layout layout) {
  return layout == FCLU_BHSD ? "bhsd" : layout == FCLU_QKV ? "qkv" : "bshd";
}

static int keyside(fclu_tensor t) {
  return t == FCLU_K || t == FCLU_V || t == FCLU_DK || t == FCLU_DV;
}

size_t fclu_tokens(const fcl_attention_desc *d, fclu_tensor t) {
  if (!d->cu_seqlens_q) return d->batch * (keyside(t) ? d->seqlen_k : d->seqlen_q);
  const int32_t *cu = keyside(t) && d->cu_seqlens_k ? d->cu_seqlens_k : d->cu_seqlens_q;
  return (size_t)cu[d->batch];
}

static size_t heads_of(const fcl_attention_desc *d, fclu_tensor t) {
  return keyside(t) ? d->heads_kv : d->heads_q;
}

size_t fclu_head_dim_v(const fcl_attention_desc *d) {
  return d->head_dim_v ? d->head_dim_v : d->head_dim;
}

/* Columns of t: head_dim_v for V, O, dO and dV. */
static size_t width_of(const fcl_attention_desc *d, fclu_tensor t) {
  const int value = t == FCLU_V || t == FCLU_O || t == FCLU_DOUT || t == FCLU_DV;
  return value ? fclu_head_dim_v(d) : d->head_dim;
}

size_t fclu_packed_elems(const fcl_attention_desc *d, fclu_tensor t) {
  return fclu_tokens(d, t) * heads_of(d, t) * width_of(d, t);
}

static fcl_tensor_layout *slot(fcl_attention_desc *d, fclu_tensor t) {
  fcl_tensor_layout *all[FCLU_TENSORS] = {&d->q, &d->k, &d->v, &d->o,
                                          &d->dout, &d->dq, &d->dk, &d->dv};
  return all[t];
}

static const fcl_tensor_layout *slot_c(const fcl_attention_desc *d, fclu_tensor t) {
  return slot((fcl_attention_desc *)d, t);
}

void fclu_set_layouts(fcl_attention_desc *d, fclu_layout layout) {
  const int ragged = d->cu_seqlens_q != NULL;
  for (int i = 0; i < FCLU_TENSORS; ++i) {
    const fclu_tensor t = (fclu_tensor)i;
    fcl_tensor_layout *l = slot(d, t);
    memset(l, 0, sizeof *l);
    if (t == FCLU_O || t == FCLU_DOUT) continue;  /* packed */
    const size_t heads = heads_of(d, t);
    /* a quantized cache's K and V layouts count bytes, a row at a time */
    const int coded = (t == FCLU_K || t == FCLU_V) && d->kv_dtype != FCL_KV_AS_DTYPE;
    const size_t hd = coded ? fcl_kv_row_bytes(d->kv_dtype, d->dtype, width_of(d, t))
                            : width_of(d, t);
    const size_t seqlen = keyside(t) ? d->seqlen_k : d->seqlen_q;
    if (layout == FCLU_BHSD) {
      l->seq_stride = hd;
      l->head_stride = (ragged ? fclu_tokens(d, t) : seqlen) * hd;
      l->batch_stride = ragged ? 0 : heads * seqlen * hd;
    } else if (layout == FCLU_QKV) {
      const size_t width = (d->heads_q + 2 * d->heads_kv) * hd;
      const int part = t == FCLU_Q || t == FCLU_DQ ? 0 : t == FCLU_K || t == FCLU_DK ? 1 : 2;
      l->offset = part == 0 ? 0 : part == 1 ? d->heads_q * hd : (d->heads_q + d->heads_kv) * hd;
      l->seq_stride = width;
      l->head_stride = hd;
      l->batch_stride = ragged ? 0 : seqlen * width;
    }
  }
}

int fclu_shares_buffer(const fcl_attention_desc *d, fclu_tensor t) {
  return t != FCLU_O && t != FCLU_DOUT && slot_c(d, t)->seq_stride &&
         slot_c(d, t)->seq_stride == (d->heads_q + 2 * d->heads_kv) * d->head_dim &&
         slot_c(d, t)->head_stride == d->head_dim;
}

/* Tensor t's strides, the packed default's where all three are 0. */
void fclu_set_pages(cl_mem block_table, const int32_t *host) {
  fclu_remember_host_copy(block_table, host);
}

void fclu_shuffled_pages(uint64_t seed, size_t batch, size_t pages_per_seq, size_t num_pages,
                         int32_t *table) {
  int32_t *all = malloc(num_pages * sizeof *all);
  if (!all) abort();
  for (size_t i = 0; i < num_pages; ++i) all[i] = (int32_t)i;
  fclu_rng rng;
  fclu_rng_seed(&rng, seed);
  for (size_t i = num_pages; i > 1; --i) {  /* Fisher-Yates */
    const size_t j = fclu_range(&rng, 0, i - 1);
    const int32_t x = all[i - 1];
    all[i - 1] = all[j];
    all[j] = x;
  }
  memcpy(table, all, batch * pages_per_seq * sizeof *table);
  free(all);
}

/* The host table of a paged K or V, NULL for any other tensor. */
static const int32_t *pages_of(const fcl_attention_desc *d, fclu_tensor t) {
  if (!d->block_table || (t != FCLU_K && t != FCLU_V)) return NULL;
  const int32_t *host = fclu_host_copy(d->block_table);
  if (!host) abort();  /* fclu_set_pages was not told */
  return host;
}

/* Whether tensor t is a quantized cache's K or V: rows of bytes. */
static int quantized(const fcl_attention_desc *d, fclu_tensor t) {
  return fclu_kv_quantized(d) && (t == FCLU_K || t == FCLU_V);
}

/* The units of t's row: head_dim elements, or a quantized row's bytes. */
static size_t row_units(const fcl_attention_desc *d, fclu_tensor t) {
  return quantized(d, t) ? fcl_kv_row_bytes(d->kv_dtype, d->dtype, d->head_dim) : width_of(d, t);
}

static fcl_tensor_layout resolved(const fcl_attention_desc *d, fclu_tensor t) {
  fcl_tensor_layout l = *slot_c(d, t);
  if (l.batch_stride || l.seq_stride || l.head_stride) return l;
  const int pool = pages_of(d, t) != NULL;  /* packed pages */
  const size_t heads = heads_of(d, t), row = row_units(d, t);
  const size_t seqlen = pool ? d->page_size : keyside(t) ? d->seqlen_k : d->seqlen_q;
  l.head_stride = row;
  l.seq_stride = heads * row;
  l.batch_stride = d->cu_seqlens_q ? 0 : seqlen * heads * row;
  return l;
}

/* The element of token g (over all batch entries), head h, column c. */
static size_t element(const fcl_attention_desc *d, fclu_tensor t, const fcl_tensor_layout *l,
                      size_t g, size_t h, size_t c) {
  const size_t seqlen = keyside(t) ? d->seqlen_k : d->seqlen_q;
  size_t b = d->cu_seqlens_q ? 0 : g / seqlen, tok = d->cu_seqlens_q ? g : g % seqlen;
  const int32_t *pages = pages_of(d, t);
  if (pages) {  /* the token's page, and its place in it */
    b = (size_t)pages[b * d->pages_per_seq + tok / d->page_size];
    tok %= d->page_size;
  }
  return l->offset + b * l->batch_stride + tok * l->seq_stride + h * l->head_stride + c;
}

void fclu_scatter(const fcl_attention_desc *d, fclu_tensor t, const float *x, void *image) {
  fclu_scatter_repeating(d, t, x, image, 0);
}

void fclu_scatter_repeating(const fcl_attention_desc *d, fclu_tensor t, const float *x,
                            void *image, size_t period) {
  const fcl_tensor_layout l = resolved(d, t);
  const size_t tokens = fclu_tokens(d, t), heads = heads_of(d, t), hd = width_of(d, t);
  if (quantized(d, t)) {  /* row by row, quantised (kvcodec.h) */
    const size_t bytes = row_units(d, t);
    for (size_t g = 0; g < tokens; ++g)
      for (size_t h = 0; h < heads; ++h) {
        const size_t r = g * heads + h;
        uint8_t *to = (uint8_t *)image + element(d, t, &l, g, h, 0);
        if (period && r >= period) {  /* the row period rows back, already encoded */
          const size_t e = r - period;
          memcpy(to, (const uint8_t *)image + element(d, t, &l, e / heads, e % heads, 0), bytes);
        } else {
          fclu_kv_encode_row(d->kv_dtype, x + r * hd, hd, fclu_kv_scale(d, t == FCLU_V), to);
        }
      }
    return;
  }
  for (size_t g = 0; g < tokens; ++g)
    for (size_t h = 0; h < heads; ++h)
      for (size_t c = 0; c < hd; ++c) {
        const float v = x[(g * heads + h) * hd + c];
        const size_t at = element(d, t, &l, g, h, c);
        if (d->dtype == FCL_DTYPE_F32)
          ((float *)image)[at] = v;
        else
          ((uint16_t *)image)[at] =
              d->dtype == FCL_DTYPE_F16 ? fclu_f32_to_f16(v) : fclu_f32_to_bf16(v);
      }
}

void fclu_gather(const fcl_attention_desc *d, fclu_tensor t, const void *image, float *x) {
  const fcl_tensor_layout l = resolved(d, t);
  const size_t tokens = fclu_tokens(d, t), heads = heads_of(d, t), hd = width_of(d, t);
  if (quantized(d, t)) {  /* row by row, dequantised (kvcodec.h) */
    for (size_t g = 0; g < tokens; ++g)
      for (size_t h = 0; h < heads; ++h)
        fclu_kv_decode_row(d->kv_dtype, (const uint8_t *)image + element(d, t, &l, g, h, 0), hd,
                           fclu_kv_scale(d, t == FCLU_V), x + (g * heads + h) * hd);
    return;
  }
  for (size_t g = 0; g < tokens; ++g)
    for (size_t h = 0; h < heads; ++h)
      for (size_t c = 0; c < hd; ++c) {
        const size_t at = element(d, t, &l, g, h, c);
        float v;
        if (d->dtype == FCL_DTYPE_F32) {
          v = ((const float *)image)[at];
        } else {
          const uint16_t bits = ((const uint16_t *)image)[at];
          v = d->dtype == FCL_DTYPE_F16 ? fclu_f16_to_f32(bits) : fclu_bf16_to_f32(bits);
        }
        x[(g * heads + h) * hd + c] = v;
      }
}
