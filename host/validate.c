/*
 * validate.c — checking a descriptor and the caller's buffers before
 * anything is enqueued, with a message that names the bad argument.
 */
#include "internal.h"

#include <limits.h>
#include <math.h>

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

fcl_status fcl__check_desc(fcl_context *ctx, const fcl_attention_desc *desc,
                           fcl__shape *shape) {
  FCL_RETURN_IF(ctx, !desc, FCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
  const struct {
    const char *name;
    size_t value;
  } sizes[] = {{"batch", desc->batch},       {"heads_q", desc->heads_q},
               {"heads_kv", desc->heads_kv}, {"seqlen_q", desc->seqlen_q},
               {"seqlen_k", desc->seqlen_k}, {"head_dim", desc->head_dim}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    FCL_RETURN_IF(ctx, sizes[i].value == 0, FCL_ERROR_INVALID_SHAPE,
                  "%s is 0; every size must be at least 1", sizes[i].name);
    /* Kernels index rows and heads with 32-bit ints. */
    FCL_RETURN_IF(ctx, sizes[i].value > INT_MAX, FCL_ERROR_INVALID_SHAPE,
                  "%s = %zu exceeds %d", sizes[i].name, sizes[i].value, INT_MAX);
  }
  FCL_RETURN_IF(ctx, desc->heads_q % desc->heads_kv != 0, FCL_ERROR_INVALID_SHAPE,
                "heads_q = %zu is not a multiple of heads_kv = %zu",
                desc->heads_q, desc->heads_kv);
  FCL_RETURN_IF(ctx, desc->head_dim > FCL_MAX_HEAD_DIM, FCL_ERROR_UNSUPPORTED,
                "head_dim = %zu exceeds FCL_MAX_HEAD_DIM = %d", desc->head_dim,
                FCL_MAX_HEAD_DIM);
  size_t elem = fcl_dtype_size(desc->dtype);
  FCL_RETURN_IF(ctx, elem == 0, FCL_ERROR_INVALID_ARGUMENT,
                "dtype = %d is not an fcl_dtype", (int)desc->dtype);
  FCL_RETURN_IF(ctx, desc->causal != 0 && desc->causal != 1,
                FCL_ERROR_INVALID_ARGUMENT, "causal = %d; it must be 0 or 1",
                desc->causal);
  FCL_RETURN_IF(ctx, !(isfinite(desc->scale) && desc->scale > 0.0f),
                FCL_ERROR_INVALID_ARGUMENT,
                "scale = %g; it must be finite and > 0 (1/sqrt(head_dim) is "
                "the usual choice)",
                (double)desc->scale);

  size_t q = product4(desc->batch, desc->seqlen_q, desc->heads_q, desc->head_dim);
  size_t kv = product4(desc->batch, desc->seqlen_k, desc->heads_kv, desc->head_dim);
  size_t lse = product4(desc->batch, desc->heads_q, desc->seqlen_q, 1);
  size_t q_bytes, kv_bytes;
  FCL_RETURN_IF(ctx,
                !q || !kv || !lse || mul_overflows(q, elem, &q_bytes) ||
                    mul_overflows(kv, elem, &kv_bytes) ||
                    mul_overflows(lse, sizeof(float), &(size_t){0}),
                FCL_ERROR_INVALID_SHAPE,
                "the tensors' sizes overflow size_t (batch %zu, seqlen_q %zu, "
                "seqlen_k %zu, heads_q %zu, heads_kv %zu, head_dim %zu)",
                desc->batch, desc->seqlen_q, desc->seqlen_k, desc->heads_q,
                desc->heads_kv, desc->head_dim);
  if (shape) {
    shape->q_elems = q;
    shape->kv_elems = kv;
    shape->lse_elems = lse;
    shape->elem_size = elem;
    shape->group = desc->heads_q / desc->heads_kv;
  }
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
  cl_int err = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
  FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                "buffer %s is not a valid cl_mem (%s)", name,
                fcl__cl_error_name(err));
  FCL_RETURN_IF(ctx, owner != ctx->cl, FCL_ERROR_INVALID_ARGUMENT,
                "buffer %s belongs to another OpenCL context than the one "
                "this fcl_context runs on",
                name);
  FCL_RETURN_IF(ctx, size < bytes, FCL_ERROR_BUFFER_TOO_SMALL,
                "buffer %s holds %zu bytes; the shape needs %zu", name, size,
                bytes);
  return FCL_SUCCESS;
}
