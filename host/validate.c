/*
 * validate.c — checking a descriptor and the caller's buffers before
 * anything is enqueued, with a message that names the bad argument.
 */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

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

#define WHY_IF(cond, status, ...)           \
  do {                                      \
    if (cond) {                             \
      fcl__say(why, why_len, __VA_ARGS__);  \
      return (status);                      \
    }                                       \
  } while (0)

fcl_status fcl__check_desc_why(const fcl_attention_desc *desc, fcl__shape *shape,
                               char *why, size_t why_len) {
  if (why && why_len) why[0] = '\0';
  WHY_IF(!desc, FCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
  const struct {
    const char *name;
    size_t value;
  } sizes[] = {{"batch", desc->batch},       {"heads_q", desc->heads_q},
               {"heads_kv", desc->heads_kv}, {"seqlen_q", desc->seqlen_q},
               {"seqlen_k", desc->seqlen_k}, {"head_dim", desc->head_dim}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    WHY_IF(sizes[i].value == 0, FCL_ERROR_INVALID_SHAPE,
           "%s is 0; every size must be at least 1", sizes[i].name);
    /* Kernels index rows and heads with 32-bit ints. */
    WHY_IF(sizes[i].value > INT_MAX, FCL_ERROR_INVALID_SHAPE, "%s = %zu exceeds %d",
           sizes[i].name, sizes[i].value, INT_MAX);
  }
  WHY_IF(desc->heads_q % desc->heads_kv != 0, FCL_ERROR_INVALID_SHAPE,
         "heads_q = %zu is not a multiple of heads_kv = %zu", desc->heads_q,
         desc->heads_kv);
  WHY_IF(desc->head_dim > FCL_MAX_HEAD_DIM, FCL_ERROR_UNSUPPORTED,
         "head_dim = %zu exceeds FCL_MAX_HEAD_DIM = %d", desc->head_dim,
         FCL_MAX_HEAD_DIM);
  size_t elem = fcl_dtype_size(desc->dtype);
  WHY_IF(elem == 0, FCL_ERROR_INVALID_ARGUMENT, "dtype = %d is not an fcl_dtype",
         (int)desc->dtype);
  WHY_IF(desc->causal != 0 && desc->causal != 1, FCL_ERROR_INVALID_ARGUMENT,
         "causal = %d; it must be 0 or 1", desc->causal);
  WHY_IF(!(isfinite(desc->scale) && desc->scale > 0.0f), FCL_ERROR_INVALID_ARGUMENT,
         "scale = %g; it must be finite and > 0 (1/sqrt(head_dim) is the usual "
         "choice)",
         (double)desc->scale);
  WHY_IF(desc->scale > FCL_MAX_SCALE, FCL_ERROR_INVALID_ARGUMENT,
         "scale = %g exceeds FCL_MAX_SCALE = %g (FLT_MAX / log2(e)): the flash kernels "
         "take exponentials as exp2(scale * log2(e) * x), and that factor must be a "
         "finite float",
         (double)desc->scale, (double)FCL_MAX_SCALE);

  size_t q = product4(desc->batch, desc->seqlen_q, desc->heads_q, desc->head_dim);
  size_t kv = product4(desc->batch, desc->seqlen_k, desc->heads_kv, desc->head_dim);
  size_t lse = product4(desc->batch, desc->heads_q, desc->seqlen_q, 1);
  size_t q_bytes, kv_bytes, lse_bytes;
  WHY_IF(!q || !kv || !lse || mul_overflows(q, elem, &q_bytes) ||
             mul_overflows(kv, elem, &kv_bytes) ||
             mul_overflows(lse, sizeof(float), &lse_bytes),
         FCL_ERROR_INVALID_SHAPE,
         "the tensors' sizes overflow size_t (batch %zu, seqlen_q %zu, seqlen_k "
         "%zu, heads_q %zu, heads_kv %zu, head_dim %zu)",
         desc->batch, desc->seqlen_q, desc->seqlen_k, desc->heads_q, desc->heads_kv,
         desc->head_dim);
  if (shape) {
    shape->q_elems = q;
    shape->kv_elems = kv;
    shape->lse_elems = lse;
    shape->elem_size = elem;
    shape->group = desc->heads_q / desc->heads_kv;
  }
  return FCL_SUCCESS;
}

fcl_status fcl_attention_buffer_sizes(const fcl_attention_desc *desc, fcl_buffer_sizes *out,
                                      char *why, size_t why_len) {
  fcl__shape shape;
  if (why && why_len) why[0] = '\0';
  WHY_IF(!out, FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
  FCL_FORWARD_IF(fcl__check_desc_why(desc, &shape, why, why_len));
  *out = fcl__buffer_sizes(&shape);
  return FCL_SUCCESS;
}

fcl_buffer_sizes fcl__buffer_sizes(const fcl__shape *shape) {
  /* fcl__check_desc_why checked that these products fit */
  const size_t q = shape->q_elems * shape->elem_size, kv = shape->kv_elems * shape->elem_size;
  return (fcl_buffer_sizes){.q = q, .k = kv, .v = kv, .o = q,
                            .lse = shape->lse_elems * sizeof(float),
                            .dout = q, .dq = q, .dk = kv, .dv = kv};
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

static int ranges_overlap(const mem_range *a, const mem_range *b) {
  if (a->root == b->root && a->begin < b->end && b->begin < a->end) return 1;
  return a->host_begin && b->host_begin && a->host_begin < b->host_end &&
         b->host_begin < a->host_end;
}

fcl_status fcl__check_call_buffers(fcl_context *ctx, const cl_mem *mems,
                                   const char *const *names, size_t n_inputs,
                                   size_t n) {
  mem_range ranges[16];
  FCL_RETURN_IF(ctx, n > sizeof ranges / sizeof ranges[0], FCL_ERROR_INVALID_ARGUMENT,
                "too many buffers (%zu)", n);
  for (size_t i = 0; i < n; ++i) {
    if (!mems[i]) continue;
    cl_int err = range_of(mems[i], &ranges[i]);
    const cl_mem_flags flags = ranges[i].flags;
    FCL_RETURN_IF(ctx, err != CL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is not a valid cl_mem (%s)", names[i],
                  fcl__cl_error_name(err));
    const int output = i >= n_inputs;
    FCL_RETURN_IF(ctx, output && (flags & CL_MEM_READ_ONLY), FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is an output but was created CL_MEM_READ_ONLY", names[i]);
    FCL_RETURN_IF(ctx, !output && (flags & CL_MEM_WRITE_ONLY),
                  FCL_ERROR_INVALID_ARGUMENT,
                  "buffer %s is an input but was created CL_MEM_WRITE_ONLY", names[i]);
  }
  /* An output that shares bytes with another buffer would be read after it
   * was overwritten, or written twice. */
  for (size_t i = n_inputs; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (j == i || !mems[i] || !mems[j]) continue;
      const mem_range *a = &ranges[i], *b = &ranges[j];
      FCL_RETURN_IF(ctx, ranges_overlap(a, b), FCL_ERROR_INVALID_ARGUMENT,
                    mems[i] == mems[j]   ? "output %s is the same buffer as %s"
                    : a->root == b->root ? "output %s overlaps buffer %s"
                                         : "output %s shares host memory (CL_MEM_USE_HOST_PTR) "
                                           "with buffer %s",
                    names[i], names[j]);
    }
  return FCL_SUCCESS;
}
