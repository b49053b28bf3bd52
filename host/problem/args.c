/*
 * args.c — what every attention kernel is handed: the parameter block of
 * cl/params.h, filled from the call's descriptor, and the buffer list of
 * FCL_ATTENTION_BUFFERS, set by position from the one macro both sides
 * expand. The kernel's own count of arguments is checked against it
 * (fcl__set_args), so a kernel and the host cannot drift apart silently.
 */
#include "common.h"
#include "resources.h"
#include "args.h"
#include "problem.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(fcl_params) % 8 == 0, "fcl_params must end on an 8-byte boundary");

fcl_view fcl__view_of(const fcl_tensor_layout *l) {
  return (fcl_view){l->offset, l->batch_stride, l->seq_stride, l->head_stride};
}

fcl_params fcl__params_of(const fcl__shape *sh) {
  const fcl_attention_desc *desc = &sh->desc;
  fcl_params p;
  memset(&p, 0, sizeof p);
  fcl_view *views[FCL__TENSORS] = {&p.q, &p.k, &p.v, &p.o, &p.dout, &p.dq, &p.dk, &p.dv};
  for (int t = 0; t < FCL__TENSORS; ++t) *views[t] = fcl__view_of(&sh->views[t]);
  /* LSE and D: [batch][heads_q][seqlen_q], or ragged [heads_q][tokens_q] */
  p.lse_batch = sh->ragged ? 0 : (cl_ulong)desc->heads_q * desc->seqlen_q;
  p.lse_head = sh->ragged ? sh->tokens_q : desc->seqlen_q;
  p.tokens_q = sh->tokens_q;
  p.tokens_k = sh->tokens_k;
  /* fcl__check_desc bounds every size by INT_MAX */
  p.batch = (cl_int)desc->batch;
  p.heads_q = (cl_int)desc->heads_q;
  p.heads_kv = (cl_int)desc->heads_kv;
  p.head_dim = (cl_int)desc->head_dim;
  p.head_dim_v = (cl_int)sh->head_dim_v;
  p.seqlen_q = (cl_int)desc->seqlen_q;
  p.seqlen_k = (cl_int)desc->seqlen_k;
  p.window_left = sh->window_left;
  p.window_right = sh->window_right;
  p.ragged = sh->tabled;  /* the kernels read the sequence table */
  p.vec4 = sh->vec4;
  p.alibi_batch = desc->alibi_per_batch ? (cl_int)desc->heads_q : 0;
  p.splits = 1;  /* the split forward sets its own (flash.c) */
  p.split_keys = INT32_MAX;
  p.scale = desc->scale;
  p.softcap = desc->softcap;
  if (sh->paged) {  /* fcl__check_desc bounds these by INT_MAX */
    p.table_batch = desc->pages_per_seq;
    p.page_size = (cl_int)desc->page_size;
    p.num_pages = (cl_int)desc->num_pages;
  }
  /* fp8 K and V: the codes' values are loaded; K's scale joins the
   * logits', V's multiplies each row's output (common.cl, FCL_ROW_OUT) */
  p.kv_dtype = (cl_int)desc->kv_dtype;
  p.v_scale = 1.0f;
  if (desc->kv_dtype == FCL_KV_FP8_E4M3 || desc->kv_dtype == FCL_KV_FP8_E5M2) {
    p.scale = desc->scale * sh->k_scale;
    p.v_scale = sh->v_scale;
  }
  if (fcl__scores_transformed(sh)) {
    /* scores are logit log2(e): exponentials of their differences as they
     * are, and LSE = m ln(2) + log(l) */
    p.exp_factor = 1.0f;
    p.lse_factor = (cl_float)M_LN2;
  } else {
    /* FCL_MAX_SCALE keeps scale log2(e) a finite float */
    p.exp_factor = (cl_float)((double)p.scale * M_LOG2E);
    p.lse_factor = p.scale;
  }
  return p;
}

int fcl__scores_transformed(const fcl__shape *shape) {
  return shape->desc.softcap > 0.0f || shape->desc.alibi_slopes != NULL;
}

fcl_status fcl__set_attention_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                                   const fcl__attention_buffers *bufs, const fcl_params *params,
                                   cl_mem io_counter) {
#define FCL_BUFFER_ARG(buffer, type) FCL_ARG(bufs->buffer),
  const fcl__arg args[] = {FCL_ATTENTION_BUFFERS(FCL_BUFFER_ARG) FCL_ARG(*params),
                           FCL_ARG(io_counter)};
#undef FCL_BUFFER_ARG
  const cl_uint n = sizeof args / sizeof args[0] - (io_counter ? 0 : 1);
  return fcl__set_args(ctx, kernel, name, args, n);
}
