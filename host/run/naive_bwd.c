/*
 * naive_bwd.c — the baseline's backward: P recomputed and materialised,
 * every product a CLBlast GEMM, and two row kernels from softmax.cl:
 *   S  = scale * Q K^T                        GEMM
 *   P  = e^(t(S) - LSE)                       softmax_recompute, in place
 *                                             (and t'(S) with a softcap)
 *   dV = P^T dO                               GEMM
 *   dP = dO V^T                               GEMM
 *   dS = scale * P (dP - rowsum(P dP)) t'(S)  softmax_bwd, in place over dP
 *   dQ = dS K                                 GEMM
 *   dK = dS^T Q                               GEMM
 *
 * Chunked as the forward is (naive.c): a chunk is one batch index, one
 * member of the query-head group and a run of consecutive kv heads, and
 * holds P and dP of each of its slices. dK and dV of a kv head are sums
 * over the members of its group: the first member's GEMMs write them
 * (beta = 0) and the later ones add to them (beta = 1), in member order on
 * an in-order queue, so the sum is the same run after run.
 *
 * When a run takes several chunks, dQ, dK and dV are produced in packed
 * scratch and copied into the caller's views at the end, so that a failure
 * half-way leaves the caller's outputs untouched. With one chunk, one GEMM
 * writes each output. A sequence without keys gets dQ = 0, one without
 * queries dK = dV = 0, without a product.
 *
 * Storage types as in the forward (naive.c): f16 in HGEMMs with P, dP and
 * dS in half where the device has cl_khr_fp16; bf16 through the f32 path on
 * packed float copies of Q, K, V and dO, with dQ, dK and dV produced in
 * float and rounded to bf16 as they are published.
 */
#include "common.h"
#include "errors.h"
#include "resources.h"
#include "args.h"
#include "program.h"
#include "measure.h"
#include "problem.h"
#include "calls.h"
#include "naive.h"

/* Everything one run allocates, released in one place. */
typedef struct bwd_run {
  fcl__backward_call *call;
  fcl_dtype type;          /* of the GEMMs, P and dP: f32, or f16 for f16 storage */
  int widened;             /* bf16: inputs and gradients are float copies */
  fcl__operand q, k, v, dout;  /* the inputs: the caller's views, or copies */
  fcl__operand dq, dk, dv;     /* where the gradients are produced */
  cl_mem p, dp, t;         /* [per_chunk][nq][nk] each; t: softcap only */
  cl_kernel recompute, softmax_bwd;
  fcl_params params;
} bwd_run;

static void bwd_release(fcl__backward_call *call, bwd_run *run) {
  const cl_mem own[7] = {call->q, call->k, call->v, call->dout, call->dq, call->dk, call->dv};
  fcl__operand *ops[7] = {&run->q, &run->k, &run->v, &run->dout, &run->dq, &run->dk, &run->dv};
  for (int i = 0; i < 7; ++i)
    if (ops[i]->mem != own[i]) fcl__release_mem(&ops[i]->mem);
  fcl__release_mem(&run->p);
  fcl__release_mem(&run->dp);
  fcl__release_mem(&run->t);
  fcl__kernel_return(call->ctx, &run->recompute);
  fcl__kernel_return(call->ctx, &run->softmax_bwd);
}

static fcl_status bwd_prepare(fcl__backward_call *call, const fcl__chunking *ch,
                              bwd_run *run) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  const size_t matrix = ch->slice_bytes / ch->matrices * ch->per_chunk;
  fcl_status status = FCL_SUCCESS;
  run->type = fcl__naive_compute_dtype(call->desc);
  run->widened = call->desc->dtype != run->type;
  run->params = fcl__params_of(sh);
  const cl_mem own[7] = {call->q, call->k, call->v, call->dout, call->dq, call->dk, call->dv};
  fcl__operand *ops[7] = {&run->q, &run->k, &run->v, &run->dout, &run->dq, &run->dk, &run->dv};
  const int tensors[7] = {FCL__Q, FCL__K, FCL__V, FCL__DOUT, FCL__DQ, FCL__DK, FCL__DV};
  for (int i = 0; i < 7; ++i) *ops[i] = fcl__caller_operand(sh, tensors[i], own[i]);
  /* bf16: float copies of every tensor; several chunks: packed staging of
   * the gradients (widened gradients are scratch already) */
  const int first_scratch = run->widened ? 0 : ch->chunks > 1 ? 4 : 7;
  for (int i = first_scratch; i < 7 && status == FCL_SUCCESS; ++i)
    *ops[i] = fcl__scratch_operand(ctx, sh, tensors[i], run->widened,
                                   run->widened ? "the naive backward's float copies"
                                                : "the naive backward's staged gradients",
                                   &status);
  FCL_FORWARD_IF(status);
  run->p = fcl__buffer(ctx, CL_MEM_READ_WRITE, matrix, "the naive backward's P", &status);
  FCL_FORWARD_IF(status);
  run->dp = fcl__buffer(ctx, CL_MEM_READ_WRITE, matrix, "the naive backward's dP", &status);
  FCL_FORWARD_IF(status);
  if (ch->matrices == 3) {
    run->t = fcl__buffer(ctx, CL_MEM_READ_WRITE, matrix, "the naive backward's softcap slopes",
                         &status);
    FCL_FORWARD_IF(status);
  }
  fcl__options opts;
  fcl__softmax_options(&ctx->info.limits, sh, run->type, call->io_counter, &opts);
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "softmax_recompute",
                             &run->recompute));
  return fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "softmax_bwd", &run->softmax_bwd);
}

/* The gradients of a chunk whose sequence has no key (dQ = 0) or no query
 * (dK = dV = 0, written by the group's first member). */
static fcl_status bwd_empty(bwd_run *run, const fcl__naive_chunk *c) {
  fcl__backward_call *call = run->call;
  const fcl__shape *sh = &call->shape;
  const size_t group = sh->group;
  if (c->nk == 0) {
    for (size_t z = 0; z < c->n; ++z)
      FCL_FORWARD_IF(fcl__zero_rows(call->ctx, sh, run->type, FCL__DQ, &run->dq, c->b, c->q_start, c->nq,
                                    (c->kv0 + z) * group + c->member, 1, call->io_counter));
  }
  if (c->nq == 0 && c->member == 0) {
    FCL_FORWARD_IF(fcl__zero_rows(call->ctx, sh, run->type, FCL__DK, &run->dk, c->b, c->k_start, c->nk,
                                  c->kv0, c->n, call->io_counter));
    FCL_FORWARD_IF(fcl__zero_rows(call->ctx, sh, run->type, FCL__DV, &run->dv, c->b, c->k_start, c->nk,
                                  c->kv0, c->n, call->io_counter));
  }
  return FCL_SUCCESS;
}

/* One chunk (an fcl__chunk_fn over a bwd_run). */
static fcl_status bwd_chunk(void *state, const fcl__naive_chunk *c) {
  bwd_run *run = state;
  fcl__backward_call *call = run->call;
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  if (c->nq == 0 || c->nk == 0) return bwd_empty(run, c);
  const size_t d = sh->desc.head_dim, nq = c->nq, nk = c->nk, group = sh->group;
  const size_t s_stride = nq * nk;
  const size_t q_head = c->kv0 * group + c->member;
  /* Where the chunk's first slice is, and the slices' strides. */
  const size_t q_off = fcl__operand_at(&run->q, c->b, c->q_start, q_head);
  const size_t do_off = fcl__operand_at(&run->dout, c->b, c->q_start, q_head);
  const size_t dq_off = fcl__operand_at(&run->dq, c->b, c->q_start, q_head);
  const size_t k_off = fcl__operand_at(&run->k, c->b, c->k_start, c->kv0);
  const size_t v_off = fcl__operand_at(&run->v, c->b, c->k_start, c->kv0);
  const size_t dk_off = fcl__operand_at(&run->dk, c->b, c->k_start, c->kv0);
  const size_t dv_off = fcl__operand_at(&run->dv, c->b, c->k_start, c->kv0);
  /* dK and dV: the group's first member writes, the others add. */
  const float beta = c->member > 0 ? 1.0f : 0.0f;

  const fcl_dtype t = run->type;
  const fcl__gemm qk = {.type = t, .trans_b = 1, .m = nq, .n = nk, .k = d,
                        .alpha = sh->desc.scale,
                        .a = run->q.mem, .a_off = q_off, .a_ld = run->q.view.seq_stride,
                        .a_stride = group * run->q.view.head_stride,
                        .b = run->k.mem, .b_off = k_off, .b_ld = run->k.view.seq_stride,
                        .b_stride = run->k.view.head_stride,
                        .c = run->p, .c_ld = nk, .c_stride = s_stride, .batch = c->n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &qk, "S = Q K^T"));

  unsigned wg, cols;
  fcl__softmax_config(&ctx->info.limits, sh->desc.seqlen_k, &wg, &cols);
  const size_t global[2] = {nq * wg, c->n}, local[2] = {wg, 1};
  const cl_mem rec_buffers[4] = {run->p, run->t, call->lse, sh->desc.alibi_slopes};
  FCL_FORWARD_IF(fcl__set_row_args(ctx, run->recompute, "softmax_recompute", rec_buffers, 4,
                                   &run->params, c, group, call->io_counter));
  FCL_FORWARD_IF(fcl__launch(ctx, run->recompute, "softmax_recompute", 2, global, local));

  const fcl__gemm pdo = {.type = t, .trans_a = 1, .m = nk, .n = sh->head_dim_v, .k = nq, .alpha = 1.0f,
                         .a = run->p, .a_ld = nk, .a_stride = s_stride,
                         .b = run->dout.mem, .b_off = do_off, .b_ld = run->dout.view.seq_stride,
                         .b_stride = group * run->dout.view.head_stride,
                         .beta = beta,
                         .c = run->dv.mem, .c_off = dv_off, .c_ld = run->dv.view.seq_stride,
                         .c_stride = run->dv.view.head_stride, .batch = c->n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &pdo, "dV = P^T dO"));
  const fcl__gemm dov = {.type = t, .trans_b = 1, .m = nq, .n = nk, .k = sh->head_dim_v, .alpha = 1.0f,
                         .a = run->dout.mem, .a_off = do_off, .a_ld = run->dout.view.seq_stride,
                         .a_stride = group * run->dout.view.head_stride,
                         .b = run->v.mem, .b_off = v_off, .b_ld = run->v.view.seq_stride,
                         .b_stride = run->v.view.head_stride,
                         .c = run->dp, .c_ld = nk, .c_stride = s_stride, .batch = c->n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &dov, "dP = dO V^T"));

  const cl_mem bwd_buffers[3] = {run->p, run->dp, run->t};
  FCL_FORWARD_IF(fcl__set_row_args(ctx, run->softmax_bwd, "softmax_bwd", bwd_buffers, 3,
                                   &run->params, c, group, call->io_counter));
  FCL_FORWARD_IF(fcl__launch(ctx, run->softmax_bwd, "softmax_bwd", 2, global, local));

  const fcl__gemm dsk = {.type = t, .m = nq, .n = d, .k = nk, .alpha = 1.0f,
                         .a = run->dp, .a_ld = nk, .a_stride = s_stride,
                         .b = run->k.mem, .b_off = k_off, .b_ld = run->k.view.seq_stride,
                         .b_stride = run->k.view.head_stride,
                         .c = run->dq.mem, .c_off = dq_off, .c_ld = run->dq.view.seq_stride,
                         .c_stride = group * run->dq.view.head_stride, .batch = c->n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &dsk, "dQ = dS K"));
  const fcl__gemm dsq = {.type = t, .trans_a = 1, .m = nk, .n = d, .k = nq, .alpha = 1.0f,
                         .a = run->dp, .a_ld = nk, .a_stride = s_stride,
                         .b = run->q.mem, .b_off = q_off, .b_ld = run->q.view.seq_stride,
                         .b_stride = group * run->q.view.head_stride,
                         .beta = beta,
                         .c = run->dk.mem, .c_off = dk_off, .c_ld = run->dk.view.seq_stride,
                         .c_stride = run->dk.view.head_stride, .batch = c->n};
  return fcl__gemm_run(ctx, &dsq, "dK = dS^T Q");
}

/* Copies staged gradients into the caller's views (widened ones rounded to
 * bf16 on the way): each copy writes one output completely or, failing to
 * enqueue, not at all. */
static fcl_status bwd_publish(fcl__backward_call *call, bwd_run *run) {
  const cl_mem own[3] = {call->dq, call->dk, call->dv};
  const fcl__operand *ops[3] = {&run->dq, &run->dk, &run->dv};
  const int tensors[3] = {FCL__DQ, FCL__DK, FCL__DV};
  for (int i = 0; i < 3; ++i)
    if (ops[i]->mem != own[i])
      FCL_FORWARD_IF(fcl__view_move(call->ctx, &call->shape, tensors[i], 0, run->widened,
                                    own[i], ops[i]->mem, call->io_counter));
  return FCL_SUCCESS;
}

fcl_status fcl__naive_backward(fcl__backward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  fcl__chunking ch;
  FCL_FORWARD_IF(fcl__naive_begin(ctx, sh, FCL_PASS_BACKWARD, &ch, &call->chunks));

  bwd_run run = {.call = call};
  fcl_status status = bwd_prepare(call, &ch, &run);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, call->timer);
  if (run.widened) {
    const cl_mem from[4] = {call->q, call->k, call->v, call->dout};
    const cl_mem to[4] = {run.q.mem, run.k.mem, run.v.mem, run.dout.mem};
    const int tensors[4] = {FCL__Q, FCL__K, FCL__V, FCL__DOUT};
    for (int i = 0; i < 4 && status == FCL_SUCCESS; ++i)
      status = fcl__view_move(ctx, sh, tensors[i], 1, 1, from[i], to[i], call->io_counter);
  }
  if (status == FCL_SUCCESS) status = fcl__naive_each_chunk(sh, &ch, bwd_chunk, &run);
  if (status == FCL_SUCCESS) status = bwd_publish(call, &run);
  bwd_release(call, &run);
  return status;
}
