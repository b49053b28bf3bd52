/*
 * validate.c — checking a descriptor and the caller's buffers before
 * anything is enqueued, with a message that names the bad argument.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int mul_overflows(size_t a, size_t b, size_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

/* Product of up to four factors; 0 on overflow (no factor is 0 here). */
static size_t product4(size_t a, size_t b, size_t c, size_t d) {
  size_t ab, abc, abcd;
  if (mul_overflows(a, b, &ab) || mul_overflows(ab, c, &abc) ||
      mul_overflows(abc, d, &abcd))
    return 0;
  return abcd;
}

fcl_status fcl__check_sizes(const char *const names[], const size_t values[], size_t n,
                            char *why, size_t why_len) {
  for (size_t i = 0; i < n; ++i) {
    FCL_WHY_IF(values[i] == 0, FCL_ERROR_INVALID_SHAPE, "%s is 0; every size must be at least 1",
               names[i]);
    FCL_WHY_IF(values[i] > INT_MAX, FCL_ERROR_INVALID_SHAPE, "%s = %zu exceeds %d", names[i],
               values[i], INT_MAX);
  }
  return FCL_SUCCESS;
}

fcl_status fcl__grown_struct(const void *given, size_t given_size, size_t first_version,
                             void *out, size_t known, const char *what, const char *init,
                             char *why, size_t why_len) {
  FCL_WHY_IF(given_size < first_version, FCL_ERROR_INVALID_ARGUMENT,
         "%s->struct_size is %zu; fill it with %s", what, given_size, init);
  memcpy(out, given, given_size < known ? given_size : known);
  if (given_size > known) {
    const unsigned char *tail = (const unsigned char *)given + known;
    for (size_t i = 0; i < given_size - known; ++i)
      FCL_WHY_IF(tail[i] != 0, FCL_ERROR_INVALID_ARGUMENT,
             "%s sets a field this library (%s) does not know, at byte %zu of its %zu", what,
             fcl_version_string(), known + i, given_size);
  }
  return FCL_SUCCESS;
}

/* The caller's descriptor, whole: the fields its struct_size covers, the
 * defaults for those its header did not have. */
static fcl_status normalize(const fcl_attention_desc *desc, fcl_attention_desc *out, char *why,
                            size_t why_len) {
  fcl_attention_desc_init(out, 1, 1, 1, 1, 1, 1);
  FCL_FORWARD_IF(fcl__grown_struct(desc, desc->struct_size,
                                   offsetof(fcl_attention_desc, scale) + sizeof(float), out,
                                   sizeof *out, "desc", "fcl_attention_desc_init", why,
                                   why_len));
  out->struct_size = sizeof *out;
  return FCL_SUCCESS;
}

/* One ragged length table: cu[0] = 0, non-decreasing, each length at most
 * `longest`, the total within INT_MAX; *tokens is the total. */
static fcl_status check_cu_seqlens(const int32_t *cu, size_t batch, size_t longest,
                                   const char *name, const char *bound, size_t *tokens,
                                   char *why, size_t why_len) {
  FCL_WHY_IF(cu[0] != 0, FCL_ERROR_INVALID_ARGUMENT, "%s[0] is %d; it must be 0", name, (int)cu[0]);
  for (size_t b = 0; b < batch; ++b) {
    FCL_WHY_IF(cu[b + 1] < cu[b], FCL_ERROR_INVALID_ARGUMENT,
           "%s[%zu] = %d is below %s[%zu] = %d: the prefix sums must not decrease", name,
           b + 1, (int)cu[b + 1], name, b, (int)cu[b]);
    FCL_WHY_IF((size_t)(cu[b + 1] - cu[b]) > longest, FCL_ERROR_INVALID_SHAPE,
           "sequence %zu has %d tokens (%s[%zu] - %s[%zu]), more than %s = %zu", b,
           (int)(cu[b + 1] - cu[b]), name, b + 1, name, b, bound, longest);
  }
  *tokens = (size_t)cu[batch];
  return FCL_SUCCESS;
}

/* A paged cache's sizes (fcl_attention_desc.block_table), or none of them. */
static fcl_status check_pages(const fcl_attention_desc *desc, fcl__shape *sh, char *why,
                              size_t why_len) {
  if (!desc->block_table) {
    FCL_WHY_IF(desc->page_size || desc->pages_per_seq || desc->num_pages,
               FCL_ERROR_INVALID_ARGUMENT,
               "page_size, pages_per_seq and num_pages describe a paged cache; without a "
               "block_table they must be 0");
    return FCL_SUCCESS;
  }
  FCL_WHY_IF(sh->ragged, FCL_ERROR_INVALID_ARGUMENT,
             "a paged cache (block_table) with cu_seqlens: give the sequences' lengths as "
             "seqlens_k");
  FCL_WHY_IF(desc->page_size == 0 || desc->page_size % FCL_PAGE_SIZE_MULTIPLE != 0 ||
                 desc->page_size > INT_MAX,
             FCL_ERROR_INVALID_SHAPE,
             "page_size = %zu: it must be a positive multiple of FCL_PAGE_SIZE_MULTIPLE = %d "
             "(within INT_MAX)",
             desc->page_size, FCL_PAGE_SIZE_MULTIPLE);
  FCL_WHY_IF(desc->num_pages == 0 || desc->num_pages > INT_MAX, FCL_ERROR_INVALID_SHAPE,
             "num_pages = %zu: the pools hold 1 to INT_MAX pages", desc->num_pages);
  FCL_WHY_IF(desc->pages_per_seq == 0 || desc->pages_per_seq > INT_MAX / desc->batch,
             FCL_ERROR_INVALID_SHAPE,
             "pages_per_seq = %zu: the table's batch x pages_per_seq entries must be 1 to "
             "INT_MAX",
             desc->pages_per_seq);
  FCL_WHY_IF(desc->seqlen_k > desc->pages_per_seq * desc->page_size, FCL_ERROR_INVALID_SHAPE,
             "seqlen_k = %zu exceeds what a row of the table reaches: pages_per_seq %zu x "
             "page_size %zu",
             desc->seqlen_k, desc->pages_per_seq, desc->page_size);
  sh->paged = 1;
  sh->table_bytes = desc->batch * desc->pages_per_seq * sizeof(int32_t);
  return FCL_SUCCESS;
}

static const char *const tensor_names[FCL__TENSORS] = {"q", "k", "v", "o",
                                                       "dout", "dq", "dk", "dv"};

/* The sizes, the storage type, the mask flag and the scale. */
static fcl_status check_scalars(const fcl_attention_desc *desc, char *why, size_t why_len) {
  const char *const names[] = {"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k",
                               "head_dim"};
  const size_t values[] = {desc->batch,    desc->heads_q,  desc->heads_kv,
                           desc->seqlen_q, desc->seqlen_k, desc->head_dim};
  FCL_FORWARD_IF(fcl__check_sizes(names, values, 6, why, why_len));
  FCL_WHY_IF(desc->heads_q % desc->heads_kv != 0, FCL_ERROR_INVALID_SHAPE,
         "heads_q = %zu is not a multiple of heads_kv = %zu", desc->heads_q,
         desc->heads_kv);
  FCL_WHY_IF(desc->head_dim > FCL_MAX_HEAD_DIM, FCL_ERROR_UNSUPPORTED,
         "head_dim = %zu exceeds FCL_MAX_HEAD_DIM = %d", desc->head_dim,
         FCL_MAX_HEAD_DIM);
  FCL_WHY_IF(desc->head_dim_v > FCL_MAX_HEAD_DIM, FCL_ERROR_UNSUPPORTED,
         "head_dim_v = %zu exceeds FCL_MAX_HEAD_DIM = %d", desc->head_dim_v,
         FCL_MAX_HEAD_DIM);
  FCL_WHY_IF(desc->head_dim_v && desc->head_dim_v != desc->head_dim &&
                 desc->kv_dtype != FCL_KV_AS_DTYPE,
             FCL_ERROR_UNSUPPORTED,
             "kv_dtype %s with head_dim_v = %zu: a quantized cache keeps K and V rows of "
             "head_dim = %zu elements; give head_dim_v 0 or head_dim",
             fcl_kv_dtype_name(desc->kv_dtype), desc->head_dim_v, desc->head_dim);
  FCL_WHY_IF(fcl_dtype_size(desc->dtype) == 0, FCL_ERROR_INVALID_ARGUMENT, "dtype = %d is not an fcl_dtype",
         (int)desc->dtype);
  FCL_WHY_IF(!fcl_kv_row_bytes(desc->kv_dtype, FCL_DTYPE_F32, FCL_KV_BLOCK),
             FCL_ERROR_INVALID_ARGUMENT, "kv_dtype = %d is not an fcl_kv_dtype",
             (int)desc->kv_dtype);
  FCL_WHY_IF(!fcl_kv_row_bytes(desc->kv_dtype, desc->dtype, desc->head_dim), FCL_ERROR_UNSUPPORTED,
             "kv_dtype %s keeps blocks of %d elements of a row: head_dim = %zu is not a "
             "multiple of %d",
             fcl_kv_dtype_name(desc->kv_dtype), FCL_KV_BLOCK, desc->head_dim, FCL_KV_BLOCK);
  FCL_WHY_IF(!(isfinite(desc->k_scale) && desc->k_scale >= 0.0f && isfinite(desc->v_scale) &&
               desc->v_scale >= 0.0f),
             FCL_ERROR_INVALID_ARGUMENT,
             "k_scale = %g, v_scale = %g: each must be finite and > 0 (0: 1)",
             (double)desc->k_scale, (double)desc->v_scale);
  FCL_WHY_IF(desc->causal != 0 && desc->causal != 1, FCL_ERROR_INVALID_ARGUMENT,
         "causal = %d; it must be 0 or 1", desc->causal);
  FCL_WHY_IF(desc->batch_invariant != 0 && desc->batch_invariant != 1, FCL_ERROR_INVALID_ARGUMENT,
         "batch_invariant = %d; it must be 0 or 1", desc->batch_invariant);
  FCL_WHY_IF(!(isfinite(desc->scale) && desc->scale > 0.0f), FCL_ERROR_INVALID_ARGUMENT,
         "scale = %g; it must be finite and > 0 (1/sqrt(head_dim) is the usual "
         "choice)",
         (double)desc->scale);
  FCL_WHY_IF(desc->scale > FCL_MAX_SCALE, FCL_ERROR_INVALID_ARGUMENT,
         "scale = %g exceeds FCL_MAX_SCALE = %g (FLT_MAX / log2(e)): the flash kernels "
         "take exponentials as exp2(scale * log2(e) * x), and that factor must be a "
         "finite float",
         (double)desc->scale, (double)FCL_MAX_SCALE);
  return FCL_SUCCESS;
}

/* The mask and the transforms. */
static fcl_status check_mask(const fcl_attention_desc *desc, fcl__shape *sh, char *why,
                             size_t why_len) {
  FCL_WHY_IF(desc->window_left < -1 || desc->window_right < -1, FCL_ERROR_INVALID_ARGUMENT,
         "window (%d, %d): each side must be -1 (unbounded) or at least 0",
         desc->window_left, desc->window_right);
  FCL_WHY_IF(desc->causal && desc->window_right > 0, FCL_ERROR_INVALID_ARGUMENT,
         "causal with window_right = %d: a causal query sees no key right of the "
         "diagonal; window_right must be -1 or 0",
         desc->window_right);
  FCL_WHY_IF(!(isfinite(desc->softcap) && desc->softcap >= 0.0f), FCL_ERROR_INVALID_ARGUMENT,
         "softcap = %g; it must be finite and >= 0 (0: off)", (double)desc->softcap);
  FCL_WHY_IF(desc->alibi_per_batch != 0 && desc->alibi_per_batch != 1, FCL_ERROR_INVALID_ARGUMENT,
         "alibi_per_batch = %d; it must be 0 or 1", desc->alibi_per_batch);
  FCL_WHY_IF(desc->dsinks && !desc->sinks, FCL_ERROR_INVALID_ARGUMENT,
             "dsinks is set but sinks is NULL: the sinks' gradient needs the sinks");
  sh->sinks_bytes = desc->sinks ? desc->heads_q * sizeof(float) : 0;
  sh->window_left = desc->window_left;
  sh->window_right = desc->causal ? 0 : desc->window_right;
  return FCL_SUCCESS;
}

/* Sequences: every batch entry seqlen_q x seqlen_k, or ragged; a KV cache's
 * lengths; pages. */
static fcl_status check_sequences(const fcl_attention_desc *desc, fcl__shape *sh, char *why,
                                  size_t why_len) {
  sh->ragged = desc->cu_seqlens_q != NULL;
  FCL_WHY_IF(!sh->ragged && desc->cu_seqlens_k, FCL_ERROR_INVALID_ARGUMENT,
         "cu_seqlens_k is set but cu_seqlens_q is NULL: give both, or cu_seqlens_q alone");
  size_t per_entry;
  FCL_WHY_IF(__builtin_mul_overflow(desc->batch, desc->seqlen_q, &per_entry) ||
             __builtin_mul_overflow(desc->batch, desc->seqlen_k, &per_entry),
         FCL_ERROR_INVALID_SHAPE, "batch %zu x seqlen %zu overflows size_t", desc->batch,
         desc->seqlen_q > desc->seqlen_k ? desc->seqlen_q : desc->seqlen_k);
  if (sh->ragged) {
    FCL_FORWARD_IF(check_cu_seqlens(desc->cu_seqlens_q, desc->batch, desc->seqlen_q,
                                    "cu_seqlens_q", "seqlen_q", &sh->tokens_q, why, why_len));
    FCL_FORWARD_IF(check_cu_seqlens(desc->cu_seqlens_k ? desc->cu_seqlens_k
                                                       : desc->cu_seqlens_q,
                                    desc->batch, desc->seqlen_k,
                                    desc->cu_seqlens_k ? "cu_seqlens_k" : "cu_seqlens_q",
                                    "seqlen_k", &sh->tokens_k, why, why_len));
  } else {
    sh->tokens_q = desc->batch * desc->seqlen_q;
    sh->tokens_k = desc->batch * desc->seqlen_k;
  }
  if (desc->seqlens_k) {  /* a KV cache's lengths, within its capacity */
    FCL_WHY_IF(sh->ragged, FCL_ERROR_INVALID_ARGUMENT,
               "seqlens_k with cu_seqlens_q: a cache's lengths take a batch of uniform "
               "query sequences");
    for (size_t b = 0; b < desc->batch; ++b) {
      FCL_WHY_IF(desc->seqlens_k[b] < 0, FCL_ERROR_INVALID_ARGUMENT, "seqlens_k[%zu] = %d is negative",
                 b, (int)desc->seqlens_k[b]);
      FCL_WHY_IF((size_t)desc->seqlens_k[b] > desc->seqlen_k, FCL_ERROR_INVALID_SHAPE,
                 "seqlens_k[%zu] = %d exceeds seqlen_k = %zu, the cache's capacity", b,
                 (int)desc->seqlens_k[b], desc->seqlen_k);
    }
  }
  sh->tabled = sh->ragged || desc->seqlens_k != NULL;
  FCL_FORWARD_IF(check_pages(desc, sh, why, why_len));
  return FCL_SUCCESS;
}

/* The tensors: element counts, layouts and the bytes they span. */
static fcl_status check_tensors(const fcl_attention_desc *desc, fcl__shape *sh, char *why,
                                size_t why_len) {
  const size_t elem = fcl_dtype_size(desc->dtype);
  size_t q = product4(sh->tokens_q ? sh->tokens_q : 1, desc->heads_q, desc->head_dim, 1);
  size_t kv = product4(sh->tokens_k ? sh->tokens_k : 1, desc->heads_kv, desc->head_dim, 1);
  size_t lse = product4(sh->tokens_q ? sh->tokens_q : 1, desc->heads_q, 1, 1);
  const size_t dv = fcl__desc_head_dim_v(desc);
  size_t o = product4(sh->tokens_q ? sh->tokens_q : 1, desc->heads_q, dv, 1);
  size_t v = product4(sh->tokens_k ? sh->tokens_k : 1, desc->heads_kv, dv, 1);
  size_t bytes;
  FCL_WHY_IF(!q || !kv || !lse || !o || !v || mul_overflows(q, elem, &bytes) ||
                 mul_overflows(kv, elem, &bytes) || mul_overflows(o, elem, &bytes) ||
                 mul_overflows(v, elem, &bytes) ||
             mul_overflows(lse, sizeof(float), &bytes),
         FCL_ERROR_INVALID_SHAPE,
         "the tensors' sizes overflow size_t (batch %zu, seqlen_q %zu, seqlen_k "
         "%zu, heads_q %zu, heads_kv %zu, head_dim %zu)",
         desc->batch, desc->seqlen_q, desc->seqlen_k, desc->heads_q, desc->heads_kv,
         desc->head_dim);
  sh->q_elems = sh->tokens_q * desc->heads_q * desc->head_dim;
  sh->kv_elems = sh->tokens_k * desc->heads_kv * desc->head_dim;
  sh->lse_elems = sh->tokens_q * desc->heads_q;
  sh->head_dim_v = dv;
  sh->o_elems = sh->tokens_q * desc->heads_q * dv;
  sh->v_elems = sh->tokens_k * desc->heads_kv * dv;
  sh->elem_size = elem;
  sh->group = desc->heads_q / desc->heads_kv;
  sh->kv_quant = desc->kv_dtype != FCL_KV_AS_DTYPE;
  sh->kv_row_bytes = fcl_kv_row_bytes(desc->kv_dtype, desc->dtype, desc->head_dim);
  sh->k_scale = desc->k_scale > 0.0f ? desc->k_scale : 1.0f;
  sh->v_scale = desc->v_scale > 0.0f ? desc->v_scale : 1.0f;
  const fcl_tensor_layout *given_views[FCL__TENSORS] = {&desc->q,    &desc->k,  &desc->v,
                                                        &desc->o,    &desc->dout, &desc->dq,
                                                        &desc->dk,   &desc->dv};
  size_t spans[FCL__TENSORS];
  sh->vec4 = desc->head_dim % 4 == 0 && dv % 4 == 0;
  for (int t = 0; t < FCL__TENSORS; ++t) {
    const int keyside = t == 1 || t == 2 || t == 6 || t == 7;
    const int pool = sh->paged && (t == 1 || t == 2);  /* K and V: pages of tokens */
    /* a quantized cache's K and V: rows of bytes (include/flashcl.h, fcl_kv_dtype) */
    const int kv_bytes = sh->kv_quant && (t == 1 || t == 2);
    const fcl__view_extent e = {.batch = pool ? desc->num_pages : desc->batch,
                                .tokens = pool        ? desc->page_size
                                          : sh->ragged ? (keyside ? sh->tokens_k : sh->tokens_q)
                                                      : (keyside ? desc->seqlen_k : desc->seqlen_q),
                                .heads = keyside ? desc->heads_kv : desc->heads_q,
                                .head_dim = kv_bytes ? sh->kv_row_bytes
                                                     : fcl__value_side(t) ? dv : desc->head_dim,
                                .elem_size = kv_bytes ? 1 : elem,
                                .ragged = sh->ragged};
    sh->views[t] = fcl__resolve_layout(given_views[t], e.batch,
                                      pool ? e.tokens : keyside ? desc->seqlen_k : desc->seqlen_q,
                                      e.heads, e.head_dim, sh->ragged);
    FCL_FORWARD_IF(fcl__check_layout(&sh->views[t], &e, tensor_names[t], &spans[t], why,
                                     why_len));
    if (kv_bytes) {  /* the block forms' f16 scales are 2-byte aligned */
      const fcl_tensor_layout *l = &sh->views[t];
      FCL_WHY_IF((l->offset | l->batch_stride | l->seq_stride | l->head_stride) % 2 != 0,
                 FCL_ERROR_INVALID_ARGUMENT,
                 "%s: a quantized cache's offset and strides count bytes and must be even "
                 "(offset %zu, batch %zu, seq %zu, head %zu)",
                 tensor_names[t], l->offset, l->batch_stride, l->seq_stride, l->head_stride);
    } else {
      sh->vec4 = sh->vec4 && fcl__layout_vec4(&sh->views[t]);
    }
  }
  sh->sizes = (fcl_buffer_sizes){.q = spans[0], .k = spans[1], .v = spans[2], .o = spans[3],
                                .lse = lse * sizeof(float), .dout = spans[4],
                                .dq = spans[5], .dk = spans[6], .dv = spans[7],
                                .alibi_slopes = desc->alibi_slopes
                                                    ? (desc->alibi_per_batch ? desc->batch : 1) *
                                                          desc->heads_q * sizeof(float)
                                                    : 0};
  return FCL_SUCCESS;
}

fcl_status fcl__check_desc_why(const fcl_attention_desc *given, fcl__shape *shape, char *why,
                               size_t why_len) {
  if (why && why_len) why[0] = '\0';
  FCL_WHY_IF(!given, FCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
  fcl__shape sh;
  memset(&sh, 0, sizeof sh);
  FCL_FORWARD_IF(normalize(given, &sh.desc, why, why_len));
  const fcl_attention_desc *desc = &sh.desc;
  FCL_FORWARD_IF(check_scalars(desc, why, why_len));
  FCL_FORWARD_IF(check_mask(desc, &sh, why, why_len));
  FCL_FORWARD_IF(check_sequences(desc, &sh, why, why_len));
  FCL_FORWARD_IF(check_tensors(desc, &sh, why, why_len));
  if (shape) *shape = sh;
  return FCL_SUCCESS;
}

fcl_status fcl_attention_buffer_sizes(const fcl_attention_desc *desc, fcl_buffer_sizes *out,
                                      char *why, size_t why_len) {
  fcl__shape shape;
  if (why && why_len) why[0] = '\0';
  FCL_WHY_IF(!out, FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
  FCL_FORWARD_IF(fcl__check_desc_why(desc, &shape, why, why_len));
  *out = shape.sizes;
  return FCL_SUCCESS;
}

fcl_status fcl__check_desc(fcl_context *ctx, const fcl_attention_desc *desc,
                           fcl__shape *shape) {
  char why[256];
  fcl_status status = fcl__check_desc_why(desc, shape, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "%s", why);
  return FCL_SUCCESS;
}

fcl_status fcl__check_buffer(fcl_context *ctx, cl_mem mem, size_t bytes,
                             const char *name, int optional) {
  if (!mem) {
    FCL_RETURN_IF(ctx, !optional, FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is NULL", name);
    return FCL_SUCCESS;
  }
  size_t size = 0;
  cl_context owner = NULL;
  cl_mem_object_type type = 0;
  /* The type first: on a handle that is no memory object at all (a queue,
   * say) some drivers answer the other queries with whatever they find. */
  cl_int err = clGetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                "buffer %s is not a valid cl_mem (%s)", name,
                fcl__cl_error_name(err));
  FCL_RETURN_IF(ctx, type >= CL_MEM_OBJECT_IMAGE2D && type <= CL_MEM_OBJECT_IMAGE1D_BUFFER,
                FCL_ERROR_INVALID_ARGUMENT, "argument %s is an image, not a buffer", name);
  FCL_RETURN_IF(ctx, type != CL_MEM_OBJECT_BUFFER, FCL_ERROR_INVALID_ARGUMENT,
                "argument %s is not a buffer (CL_MEM_TYPE 0x%x)", name, (unsigned)type);
  FCL_RETURN_IF(ctx, owner != ctx->cl, FCL_ERROR_INVALID_ARGUMENT,
                "buffer %s belongs to another OpenCL context than the one "
                "this fcl_context runs on",
                name);
  FCL_RETURN_IF(ctx, size < bytes, FCL_ERROR_BUFFER_TOO_SMALL,
                "buffer %s holds %zu bytes; the shape needs %zu", name, size,
                bytes);
  return FCL_SUCCESS;
}

/* Where a buffer's bytes live: its root buffer and the byte range in it,
 * and, for memory the caller lent (CL_MEM_USE_HOST_PTR; a sub-buffer
 * inherits it), the host addresses, which two roots may share. */
typedef struct mem_range {
  cl_mem root;
  size_t begin, end;
  uintptr_t host_begin, host_end;  /* 0, 0: not the caller's host memory */
  cl_mem_flags flags;
} mem_range;

static cl_int range_of(cl_mem mem, mem_range *r) {
  cl_mem parent = NULL;
  size_t offset = 0, size = 0;
  cl_mem_flags flags = 0;
  void *host = NULL;
  cl_int err = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent,
                             &parent, NULL);
  if (err == CL_SUCCESS && parent)
    err = clGetMemObjectInfo(mem, CL_MEM_OFFSET, sizeof offset, &offset, NULL);
  if (err == CL_SUCCESS) err = clGetMemObjectInfo(mem, CL_MEM_FLAGS, sizeof flags, &flags, NULL);
  /* For a sub-buffer, CL_MEM_HOST_PTR is its parent's plus its origin. */
  if (err == CL_SUCCESS && (flags & CL_MEM_USE_HOST_PTR))
    err = clGetMemObjectInfo(mem, CL_MEM_HOST_PTR, sizeof host, &host, NULL);
  /* OpenCL 1.2 has no sub-buffers of sub-buffers: the parent is the root. */
  r->root = parent ? parent : mem;
  r->begin = offset;
  r->end = offset + size;
  r->host_begin = host ? (uintptr_t)host : 0;
  r->host_end = host ? (uintptr_t)host + size : 0;
  r->flags = flags;
  return err;
}

/* A view of an argument placed at `base` of the memory it lives in. */
static fcl__placed_view placed(const fcl__placed_view *view, uint64_t base) {
  fcl__placed_view v = *view;
  v.begin += base;
  v.end += base;
  return v;
}

/* Whether two arguments may share a byte: in the same root buffer, or in
 * the same host memory lent to two roots. */
static int arguments_overlap(const mem_range *ra, const fcl__placed_view *va,
                             const mem_range *rb, const fcl__placed_view *vb) {
  if (ra->root == rb->root) {
    const fcl__placed_view a = placed(va, ra->begin), b = placed(vb, rb->begin);
    if (fcl__views_share_bytes(&a, &b)) return 1;
  }
  if (ra->host_begin && rb->host_begin) {
    const fcl__placed_view a = placed(va, ra->host_begin), b = placed(vb, rb->host_begin);
    if (fcl__views_share_bytes(&a, &b)) return 1;
  }
  return 0;
}

fcl_status fcl__check_call_buffers(fcl_context *ctx, const fcl__call_buffer *args,
                                   size_t n_inputs, size_t n, uintptr_t *lent) {
  mem_range ranges[16];
  FCL_RETURN_IF(ctx, n > sizeof ranges / sizeof ranges[0], FCL_ERROR_INVALID_ARGUMENT,
                "too many buffers (%zu)", n);
  for (size_t i = 0; i < n; ++i)
    FCL_FORWARD_IF(fcl__check_buffer(ctx, args[i].mem, args[i].bytes, args[i].name,
                                     args[i].optional));
  for (size_t i = 0; i < n; ++i) {
    if (lent) lent[i] = 0;
    if (!args[i].mem) continue;
    cl_int err = range_of(args[i].mem, &ranges[i]);
    const cl_mem_flags flags = ranges[i].flags;
    FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is not a valid cl_mem (%s)", args[i].name,
                  fcl__cl_error_name(err));
    const int output = i >= n_inputs;
    FCL_RETURN_IF(ctx, output && (flags & CL_MEM_READ_ONLY), FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is an output but was created CL_MEM_READ_ONLY", args[i].name);
    FCL_RETURN_IF(ctx, !output && (flags & CL_MEM_WRITE_ONLY),
                  FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is an input but was created CL_MEM_WRITE_ONLY", args[i].name);
    if (lent) lent[i] = ranges[i].host_begin;
  }
  /* An output that shares bytes with another argument would be read after
   * it was overwritten, or written twice. A buffer and its own sub-buffer
   * are refused even apart: OpenCL 1.2 leaves writing one while the other
   * is used undefined (5.2.1; sub-buffers of one parent that do not
   * overlap are defined, and taken). */
  for (size_t i = n_inputs; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (j == i || !args[i].mem || !args[j].mem) continue;
      const cl_mem root = ranges[i].root;
      if (args[i].mem != args[j].mem && root == ranges[j].root &&
          (args[i].mem == root || args[j].mem == root))
        return fcl__fail(ctx, FCL_ERROR_INVALID_ARGUMENT,
                         "output %s is %s %s (%s): OpenCL leaves their concurrent use "
                         "undefined",
                         args[i].name,
                         args[i].mem == root ? "the parent buffer of" : "a sub-buffer of",
                         args[j].name,
                         args[i].mem == root ? "a sub-buffer of it" : "its parent buffer");
      if (!arguments_overlap(&ranges[i], &args[i].view, &ranges[j], &args[j].view)) continue;
      const char *how = args[i].mem == args[j].mem       ? "is the same buffer as"
                        : ranges[i].root == ranges[j].root ? "overlaps buffer"
                                                           : "shares host memory "
                                                             "(CL_MEM_USE_HOST_PTR) with buffer";
      return fcl__fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "output %s %s %s (their views share bytes)",
                       args[i].name, how, args[j].name);
    }
  return FCL_SUCCESS;
}
