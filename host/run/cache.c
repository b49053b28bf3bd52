/*
 * cache.c — fcl_kv_cache_append: new K and V rows copied into a KV cache
 * at each entry's current length (cl/cache.cl), checked as the attention
 * calls check theirs: the cache as the descriptor lays it out, the new
 * rows' views, every append within the capacity, no output sharing bytes
 * with an input, and (paged, unless turned off) every block-table entry
 * the append writes through naming a page of the pool.
 */
#include "common.h"
#include "context.h"
#include "errors.h"
#include "resources.h"
#include "args.h"
#include "program.h"
#include "measure.h"
#include "problem.h"
#include "calls.h"
#include "iomodel.h"

#include <limits.h>
#include <string.h>

#define APPEND_WG 64

/* The columns of a row one work-item appends (cl/cache.cl): four, or a
 * quantized form's block (APPEND_CHUNK). */
static size_t append_chunk(const fcl__shape *sh) {
  const fcl_kv_dtype f = sh->desc.kv_dtype;
  return f == FCL_KV_Q8_0 || f == FCL_KV_Q4_0 ? FCL_KV_BLOCK : 4;
}

/* The launch, after every check: the lengths uploaded, the kernel built. */
static fcl_status append_enqueue(fcl_context *ctx, const fcl__shape *sh, const fcl_append_params *p,
                                 cl_mem k_new, cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                                 cl_mem io_counter, fcl__timer *timer) {
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", (long)sh->desc.dtype);
  fcl__options_define(&opts, "PAGED", sh->paged);
  if (sh->kv_quant) fcl__options_define(&opts, "FCL_KV_DTYPE", (long)sh->desc.kv_dtype);
  fcl__options_count_io(&opts, io_counter);
  const char *name = sh->kv_quant ? "kv_append_quant" : "kv_append";
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_CACHE, &opts, name, &kernel));
  fcl_status status = FCL_SUCCESS;
  cl_mem lens = fcl__upload(ctx, sh->desc.seqlens_k, sh->desc.batch * sizeof(int32_t),
                            "the cache's lengths", &status);
  fcl__arg args[8] = {FCL_ARG(k_new), FCL_ARG(v_new), FCL_ARG(k_cache), FCL_ARG(v_cache),
                      FCL_ARG(lens)};
  cl_uint n = 5;
  if (sh->paged) args[n++] = FCL_ARG(sh->desc.block_table);
  args[n++] = FCL_ARG(*p);
  if (io_counter) args[n++] = FCL_ARG(io_counter);
  if (status == FCL_SUCCESS) status = fcl__set_args(ctx, kernel, name, args, n);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, timer);
  const size_t chunk = append_chunk(sh);
  const size_t items = p->batch * p->new_tokens * p->heads * ((p->head_dim + chunk - 1) / chunk);
  if (status == FCL_SUCCESS) status = fcl__launch_items(ctx, kernel, name, items, APPEND_WG);
  fcl__release_mem(&lens);
  fcl__kernel_return(ctx, &kernel);
  return status;
}

/* The table columns entry b's new rows go through: [*first, *last]. */
static void append_pages_of(const fcl_attention_desc *d, size_t b, size_t new_tokens,
                            size_t *first, size_t *last) {
  *first = (size_t)d->seqlens_k[b] / d->page_size;
  *last = ((size_t)d->seqlens_k[b] + new_tokens - 1) / d->page_size;
}

/* The block-table entries an append writes through, read back in one
 * rectangle (the columns every entry's new rows span) and checked: a row
 * written through an entry outside the pool would land in another
 * sequence's page (the kernel would skip it; this says so, before anything
 * is written). */
static fcl_status check_append_pages(fcl_context *ctx, const fcl_attention_desc *d,
                                     size_t new_tokens) {
  size_t lo = SIZE_MAX, hi = 0, first, last;
  for (size_t b = 0; b < d->batch; ++b) {
    append_pages_of(d, b, new_tokens, &first, &last);
    if (first < lo) lo = first;
    if (last > hi) hi = last;
  }
  const size_t cols = hi - lo + 1;  /* within pages_per_seq: the capacity was checked */
  int32_t *entries = fcl__malloc(ctx, d->batch * cols * sizeof *entries);
  FCL_RETURN_IF(ctx, !entries, FCL_ERROR_OUT_OF_MEMORY,
                "allocating %zu bytes for the block table's entries failed",
                d->batch * cols * sizeof *entries);
  fcl_status status =
      fcl__read_rect(ctx, d->block_table, d->pages_per_seq * sizeof *entries, lo * sizeof *entries,
                     cols * sizeof *entries, d->batch, entries, "reading the block table");
  for (size_t b = 0; b < d->batch && status == FCL_SUCCESS; ++b) {
    append_pages_of(d, b, new_tokens, &first, &last);
    for (size_t i = first; i <= last && status == FCL_SUCCESS; ++i) {
      const int32_t entry = entries[b * cols + (i - lo)];
      if (entry < 0 || (size_t)entry >= d->num_pages)
        status = fcl__fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                           "block_table[%zu][%zu] = %d is outside the pool of num_pages = %zu: "
                           "entry %zu's new rows would be written there; nothing was written",
                           b, i, (int)entry, d->num_pages, b);
    }
  }
  fcl__free(entries);
  return status;
}

fcl_status fcl__append_prepare(fcl_context *ctx, const fcl_attention_desc *desc,
                               size_t new_tokens, const fcl_tensor_layout *k_new_layout,
                               const fcl_tensor_layout *v_new_layout, cl_mem k_new,
                               cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                               fcl__append_call *call) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  memset(call, 0, sizeof *call);
  fcl__shape *shape = &call->shape;
  FCL_FORWARD_IF(fcl__check_desc(ctx, desc, shape));
  const fcl__shape sh = *shape;
  const fcl_attention_desc *d = &sh.desc;
  FCL_RETURN_IF(ctx, !d->seqlens_k, FCL_ERROR_INVALID_ARGUMENT,
                "desc->seqlens_k is NULL: an append needs the cache's current lengths");
  FCL_RETURN_IF(ctx, sh.head_dim_v != d->head_dim, FCL_ERROR_UNSUPPORTED,
                "head_dim_v = %zu with head_dim = %zu: an append writes K and V rows of one "
                "width", sh.head_dim_v, d->head_dim);
  FCL_RETURN_IF(ctx, new_tokens == 0, FCL_ERROR_INVALID_ARGUMENT, "new_tokens is 0");
  FCL_RETURN_IF(ctx, new_tokens > (size_t)INT_MAX, FCL_ERROR_INVALID_SHAPE,
                "new_tokens = %zu exceeds %d", new_tokens, INT_MAX);
  for (size_t b = 0; b < d->batch; ++b)
    FCL_RETURN_IF(ctx, (size_t)d->seqlens_k[b] + new_tokens > d->seqlen_k,
                  FCL_ERROR_INVALID_SHAPE,
                  "appending %zu rows to entry %zu, which holds %d, passes the capacity "
                  "seqlen_k = %zu",
                  new_tokens, b, (int)d->seqlens_k[b], d->seqlen_k);
  /* The new rows' views: [batch][new_tokens][heads_kv][head_dim] by default. */
  const fcl_tensor_layout zero = {0};
  const fcl__view_extent e = {.batch = d->batch, .tokens = new_tokens, .heads = d->heads_kv,
                              .head_dim = d->head_dim, .elem_size = sh.elem_size};
  const fcl_tensor_layout k_l = fcl__resolve_layout(k_new_layout ? k_new_layout : &zero,
                                                    d->batch, new_tokens, d->heads_kv,
                                                    d->head_dim, 0);
  const fcl_tensor_layout v_l = fcl__resolve_layout(v_new_layout ? v_new_layout : &zero,
                                                    d->batch, new_tokens, d->heads_kv,
                                                    d->head_dim, 0);
  size_t k_span, v_span;
  char why[256];
  fcl_status status = fcl__check_layout(&k_l, &e, "k_new", &k_span, why, sizeof why);
  if (status == FCL_SUCCESS) status = fcl__check_layout(&v_l, &e, "v_new", &v_span, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "%s", why);
  const fcl__call_buffer args[] = {
      {k_new, "k_new", k_span, 0,
       fcl__layout_view(&k_l, k_span, sh.elem_size, d->batch, d->heads_kv, d->head_dim, 0)},
      {v_new, "v_new", v_span, 0,
       fcl__layout_view(&v_l, v_span, sh.elem_size, d->batch, d->heads_kv, d->head_dim, 0)},
      {d->block_table, "block_table", sh.table_bytes, 1, fcl__range_view(sh.table_bytes)},
      {k_cache, "k_cache", sh.sizes.k, 0, fcl__tensor_view(&sh, FCL__K)},
      {v_cache, "v_cache", sh.sizes.v, 0, fcl__tensor_view(&sh, FCL__V)}};
  FCL_FORWARD_IF(fcl__check_call_buffers(ctx, args, 3, 5, NULL));
  if (sh.paged && !fcl__context_settings(ctx).table_unchecked)
    FCL_FORWARD_IF(check_append_pages(ctx, d, new_tokens));

  call->params = (fcl_append_params){
      .k_new = fcl__view_of(&k_l),
      .v_new = fcl__view_of(&v_l),
      .k_cache = fcl__view_of(&sh.views[FCL__K]),
      .v_cache = fcl__view_of(&sh.views[FCL__V]),
      .batch = d->batch,
      .new_tokens = new_tokens,
      .heads = d->heads_kv,
      .head_dim = d->head_dim,
      .vec4 = d->head_dim % 4 == 0 && fcl__layout_vec4(&k_l) && fcl__layout_vec4(&v_l) &&
              (sh.kv_quant ||  /* a quantized cache's rows are bytes, written bytewise */
               (fcl__layout_vec4(&sh.views[FCL__K]) && fcl__layout_vec4(&sh.views[FCL__V]))),
      .table_batch = d->pages_per_seq,
      .page_size = d->page_size,
      .num_pages = d->num_pages,
      .k_inv = 1.0f / sh.k_scale,
      .v_inv = 1.0f / sh.v_scale};
  call->k_new = k_new;
  call->v_new = v_new;
  call->k_cache = k_cache;
  call->v_cache = v_cache;
  return FCL_SUCCESS;
}

fcl_status fcl__append_run(fcl_context *ctx, const fcl__append_call *call, fcl_run_info *info) {
  const fcl__shape *sh = &call->shape;
  const fcl_append_params *p = &call->params;
  fcl__measure m;
  fcl__timer *timer;
  cl_mem io_counter;
  fcl_status status = fcl__measure_begin(ctx, &m, info, &timer, &io_counter);
  if (status == FCL_SUCCESS)
    status = append_enqueue(ctx, sh, p, call->k_new, call->v_new, call->k_cache, call->v_cache,
                            io_counter, timer);
  status = fcl__measure_end(ctx, &m, status);
  if (status != FCL_SUCCESS || !info) return status;
  memset(info, 0, sizeof *info);
  info->ms = m.ms;
  info->bytes_model = fcl__io_total(fcl__io_kv_append(p->batch * p->new_tokens * p->heads,
                                                     p->head_dim, sh->elem_size,
                                                     append_chunk(sh), sh->kv_row_bytes,
                                                     sh->paged));
  if (m.counting) info->bytes_counted = m.counted;
  return FCL_SUCCESS;
}

fcl_status fcl_kv_cache_append(fcl_context *ctx, const fcl_attention_desc *desc,
                               size_t new_tokens, const fcl_tensor_layout *k_new_layout,
                               const fcl_tensor_layout *v_new_layout, cl_mem k_new,
                               cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                               fcl_run_info *info) {
  fcl__append_call call;
  FCL_FORWARD_IF(fcl__append_prepare(ctx, desc, new_tokens, k_new_layout, v_new_layout, k_new,
                                     v_new, k_cache, v_cache, &call));
  return fcl__append_run(ctx, &call, info);
}
