/*
 * attention.c — the public attention entry points: validate once, then
 * hand the call to an algorithm; time it and account for its bytes when
 * the caller asks for run info.
 */
#include "common.h"
#include "context.h"
#include "tuning.h"
#include "plan.h"
#include "errors.h"
#include "measure.h"
#include "problem.h"
#include "calls.h"
#include "iomodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The context, the descriptor and the algorithm. */
static fcl_status check_problem(fcl_context *ctx, const fcl_attention_desc *desc,
                                fcl_algo algo, fcl__shape *shape) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_FORWARD_IF(fcl__check_desc(ctx, desc, shape));
  FCL_RETURN_IF(ctx, algo != FCL_ALGO_FLASH && algo != FCL_ALGO_NAIVE,
                FCL_ERROR_INVALID_ARGUMENT, "algo = %d is not an fcl_algo", (int)algo);
  return FCL_SUCCESS;
}

/* Tensor t of the shape as an argument. */
static fcl__call_buffer tensor_arg(const fcl__shape *shape, int t, cl_mem mem, const char *name,
                                   size_t bytes) {
  return (fcl__call_buffer){mem, name, bytes, 0, fcl__tensor_view(shape, t)};
}

/* A float buffer of `bytes` as an argument, NULL allowed when optional. */
static fcl__call_buffer plain_arg(cl_mem mem, const char *name, size_t bytes, int optional) {
  return (fcl__call_buffer){mem, name, bytes, optional, fcl__range_view(bytes)};
}

/* Run info of a successful call. `model` is the whole call's traffic by the
 * I/O model, `own` the part of it our instrumented kernels count; the rest
 * (CLBlast's GEMMs, buffer copies) enters bytes_counted by the model. */
static void fill_info(fcl_run_info *info, const fcl__shape *shape,
                      fcl_pass pass, const fcl__measure *m, const fcl_plan *plan,
                      unsigned chunks, fcl__io model, fcl__io own) {
  memset(info, 0, sizeof *info);
  info->ms = m->ms;
  info->flops = fcl__flops(shape, pass);
  info->plan = *plan;
  info->chunks = chunks;
  info->bytes_model = fcl__io_total(model);
  if (m->counting)  /* what the kernels counted, and the model's rest */
    info->bytes_counted = m->counted + fcl__io_total(model) - fcl__io_total(own);
}

/* Whether V is a view of K's first head_dim_v columns: one buffer, one
 * layout (DeepSeek's latent attention), so that a kernel reads each key row
 * once (fcl__shape.v_in_k). */
static int v_in_k(const fcl__shape *sh, cl_mem k, cl_mem v) {
  const fcl_tensor_layout *a = &sh->views[FCL__K], *b = &sh->views[FCL__V];
  return k == v && !sh->kv_quant && sh->head_dim_v <= sh->desc.head_dim &&
         a->offset == b->offset && a->batch_stride == b->batch_stride &&
         a->seq_stride == b->seq_stride && a->head_stride == b->head_stride;
}

unsigned fcl__kv_buffer_unit(uintptr_t k_lent, uintptr_t v_lent) {
  const unsigned k = k_lent ? fcl__alignment_unit(k_lent) : 0;
  const unsigned v = v_lent ? fcl__alignment_unit(v_lent) : 0;
  return !k ? v : !v || k < v ? k : v;
}

/* The forward's checks, all of them, with nothing enqueued: the problem
 * and every buffer. */
static fcl_status forward_prepare(fcl_context *ctx, const fcl_attention_desc *desc,
                                  fcl_algo algo, cl_mem q, cl_mem k, cl_mem v, cl_mem o,
                                  cl_mem lse, fcl__forward_call *call) {
  memset(call, 0, sizeof *call);
  FCL_FORWARD_IF(check_problem(ctx, desc, algo, &call->shape));
  call->ctx = ctx;
  call->settings = fcl__context_settings(ctx);
  call->desc = &call->shape.desc;
  const fcl__shape *sh = &call->shape;
  const fcl_buffer_sizes *sz = &sh->sizes;
  const fcl__call_buffer args[] = {tensor_arg(sh, FCL__Q, q, "q", sz->q),
                                   tensor_arg(sh, FCL__K, k, "k", sz->k),
                                   tensor_arg(sh, FCL__V, v, "v", sz->v),
                                   plain_arg(sh->desc.alibi_slopes, "alibi_slopes",
                                             sz->alibi_slopes, 1),
                                   plain_arg(sh->desc.block_table, "block_table",
                                             sh->table_bytes, 1),
                                   plain_arg(sh->desc.sinks, "sinks", sh->sinks_bytes, 1),
                                   tensor_arg(sh, FCL__O, o, "o", sz->o),
                                   plain_arg(lse, "lse", sz->lse, 1)};
  uintptr_t lent[sizeof args / sizeof args[0]];
  FCL_FORWARD_IF(fcl__check_call_buffers(ctx, args, 6, 8, lent));
  call->shape.v_in_k = v_in_k(sh, k, v);
  if (sh->kv_quant) call->shape.kv_buffer_unit = fcl__kv_buffer_unit(lent[1], lent[2]);
  call->q = q;
  call->k = k;
  call->v = v;
  call->o = o;
  call->lse = lse;
  return FCL_SUCCESS;
}

/* A prepared forward run, timed and accounted for as `info` asks. */
static fcl_status forward_run(fcl__forward_call *call, fcl_algo algo, fcl_run_info *info) {
  fcl_context *ctx = call->ctx;
  fcl__measure m;
  fcl_status status = fcl__measure_begin(ctx, &m, info, &call->timer, &call->io_counter);
  if (status == FCL_SUCCESS)
    status = algo == FCL_ALGO_FLASH ? fcl__flash_forward(call) : fcl__naive_forward(call);
  status = fcl__measure_end(ctx, &m, status);
  if (status != FCL_SUCCESS || !info) return status;

  const int with_lse = call->lse != NULL;
  fcl__io model, own;
  if (algo == FCL_ALGO_FLASH) {
    model = own = fcl__io_flash_forward(&call->shape, &call->plan, with_lse);
  } else {
    model = fcl__io_naive(&ctx->info.limits, &call->shape, FCL_PASS_FORWARD, with_lse,
                          call->chunks, 0);
    own = fcl__io_naive(&ctx->info.limits, &call->shape, FCL_PASS_FORWARD, with_lse,
                        call->chunks, 1);
  }
  fill_info(info, &call->shape, FCL_PASS_FORWARD, &m, &call->plan, call->chunks, model, own);
  return FCL_SUCCESS;
}

fcl_status fcl_attention_forward(fcl_context *ctx, const fcl_attention_desc *desc,
                                 fcl_algo algo, cl_mem q, cl_mem k, cl_mem v,
                                 cl_mem o, cl_mem lse, fcl_run_info *info) {
  fcl__forward_call call;
  FCL_FORWARD_IF(forward_prepare(ctx, desc, algo, q, k, v, o, lse, &call));
  return forward_run(&call, algo, info);
}

fcl_status fcl_attention_forward_kvcache(fcl_context *ctx, const fcl_attention_desc *desc,
                                         fcl_algo algo, cl_mem q, size_t new_tokens,
                                         const fcl_tensor_layout *k_new_layout,
                                         const fcl_tensor_layout *v_new_layout, cl_mem k_new,
                                         cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                                         cl_mem o, cl_mem lse, fcl_run_info *info) {
  /* Every check of both steps before anything is enqueued: the append's,
   * then the forward's over the raised lengths (its plan too). */
  fcl__append_call append;
  FCL_FORWARD_IF(fcl__append_prepare(ctx, desc, new_tokens, k_new_layout, v_new_layout, k_new,
                                     v_new, k_cache, v_cache, &append));
  const fcl_attention_desc *before = &append.shape.desc;
  int32_t *raised = malloc(before->batch * sizeof *raised);
  FCL_RETURN_IF(ctx, !raised, FCL_ERROR_OUT_OF_MEMORY, "the raised lengths: out of host memory");
  for (size_t b = 0; b < before->batch; ++b)
    raised[b] = before->seqlens_k[b] + (int32_t)new_tokens;  /* within seqlen_k: checked */
  fcl_attention_desc after = *before;
  after.seqlens_k = raised;
  fcl__forward_call call;
  fcl_status status = forward_prepare(ctx, &after, algo, q, k_cache, v_cache, o, lse, &call);
  if (status == FCL_SUCCESS && algo == FCL_ALGO_FLASH) {
    char why[256] = "";
    status = fcl__plan_call(ctx, &call.settings.tiling_hint, &call.shape, FCL_PASS_FORWARD,
                            &call.plan, why, sizeof why);
    if (status != FCL_SUCCESS)
      status = fcl__fail(ctx, status, "flash forward on %s: %s", ctx->info.name, why);
    call.planned = status == FCL_SUCCESS;  /* the forward runs this plan */
  }
  fcl_run_info appended, attended;
  if (status == FCL_SUCCESS) status = fcl__append_run(ctx, &append, info ? &appended : NULL);
  if (status == FCL_SUCCESS) status = forward_run(&call, algo, info ? &attended : NULL);
  free(raised);
  if (status != FCL_SUCCESS || !info) return status;
  *info = attended;  /* its plan and FLOPs; the two steps' time and bytes */
  info->ms += appended.ms;
  info->bytes_model += appended.bytes_model;
  info->bytes_counted += appended.bytes_counted;
  return FCL_SUCCESS;
}

fcl_status fcl_attention_backward(fcl_context *ctx, const fcl_attention_desc *desc,
                                  fcl_algo algo, cl_mem q, cl_mem k, cl_mem v,
                                  cl_mem o, cl_mem lse, cl_mem dout, cl_mem dq,
                                  cl_mem dk, cl_mem dv, fcl_run_info *info) {
  fcl__backward_call call;
  memset(&call, 0, sizeof call);
  FCL_FORWARD_IF(check_problem(ctx, desc, algo, &call.shape));
  FCL_RETURN_IF(ctx, call.shape.desc.seqlens_k, FCL_ERROR_UNSUPPORTED,
                "a KV cache's lengths (seqlens_k) are for the forward; the backward takes "
                "whole sequences (or cu_seqlens)");
  FCL_RETURN_IF(ctx, call.shape.paged, FCL_ERROR_UNSUPPORTED,
                "a paged KV cache (block_table) is for the forward; the backward takes "
                "contiguous K and V");
  FCL_RETURN_IF(ctx, algo == FCL_ALGO_NAIVE && call.shape.desc.dsinks, FCL_ERROR_UNSUPPORTED,
                "the sinks' gradient (dsinks) is the flash backward's; the naive backward "
                "computes dQ, dK and dV with sinks, not dsinks");
  FCL_RETURN_IF(ctx, call.shape.kv_quant, FCL_ERROR_UNSUPPORTED,
                "a quantized KV cache (kv_dtype %s) is for the forward; the backward takes K "
                "and V in the storage type", fcl_kv_dtype_name(call.shape.desc.kv_dtype));
  call.ctx = ctx;
  call.settings = fcl__context_settings(ctx);
  call.desc = &call.shape.desc;
  const fcl__shape *sh = &call.shape;
  const fcl_buffer_sizes *sz = &sh->sizes;
  const fcl__call_buffer args[] = {tensor_arg(sh, FCL__Q, q, "q", sz->q),
                                   tensor_arg(sh, FCL__K, k, "k", sz->k),
                                   tensor_arg(sh, FCL__V, v, "v", sz->v),
                                   tensor_arg(sh, FCL__O, o, "o", sz->o),
                                   plain_arg(lse, "lse", sz->lse, 0),
                                   tensor_arg(sh, FCL__DOUT, dout, "dout", sz->dout),
                                   plain_arg(sh->desc.alibi_slopes, "alibi_slopes",
                                             sz->alibi_slopes, 1),
                                   plain_arg(sh->desc.sinks, "sinks", sh->sinks_bytes, 1),
                                   tensor_arg(sh, FCL__DQ, dq, "dq", sz->dq),
                                   tensor_arg(sh, FCL__DK, dk, "dk", sz->dk),
                                   tensor_arg(sh, FCL__DV, dv, "dv", sz->dv),
                                   plain_arg(sh->desc.dsinks, "dsinks", sh->sinks_bytes, 1)};
  FCL_FORWARD_IF(fcl__check_call_buffers(ctx, args, 8, 12, NULL));
  call.q = q;
  call.k = k;
  call.v = v;
  call.o = o;
  call.lse = lse;
  call.dout = dout;
  call.dq = dq;
  call.dk = dk;
  call.dv = dv;

  fcl__measure m;
  fcl_status status = fcl__measure_begin(ctx, &m, info, &call.timer, &call.io_counter);
  if (status == FCL_SUCCESS)
    status = algo == FCL_ALGO_FLASH ? fcl__flash_backward(&call) : fcl__naive_backward(&call);
  status = fcl__measure_end(ctx, &m, status);
  if (status != FCL_SUCCESS || !info) return status;

  fcl__io model, own;
  if (algo == FCL_ALGO_FLASH) {
    model = own = fcl__io_flash_backward(&call.shape, &call.plan);
  } else {
    model = fcl__io_naive(&ctx->info.limits, &call.shape, FCL_PASS_BACKWARD, 0, call.chunks, 0);
    own = fcl__io_naive(&ctx->info.limits, &call.shape, FCL_PASS_BACKWARD, 0, call.chunks, 1);
  }
  fill_info(info, &call.shape, FCL_PASS_BACKWARD, &m, &call.plan, call.chunks, model, own);
  return FCL_SUCCESS;
}
