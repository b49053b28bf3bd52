/*
 * naive_bwd.c — the baseline's backward: P recomputed and materialised,
 * every product a CLBlast GEMM, and two row kernels from softmax.cl:
 *   S  = scale * Q K^T                  GEMM
 *   P  = e^(S - LSE)                    softmax_recompute, in place
 *   dV = P^T dO                         GEMM
 *   dP = dO V^T                         GEMM
 *   dS = scale * P (dP - rowsum(P dP))  softmax_bwd, in place over dP
 *   dQ = dS K                           GEMM
 *   dK = dS^T Q                         GEMM
 *
 * Chunked as the forward is (naive.c): a chunk is one batch index, one
 * member of the query-head group and a run of consecutive kv heads, and
 * holds P and dP of each of its slices. dK and dV of a kv head are sums
 * over the members of its group: the first member's GEMMs write them
 * (beta = 0) and the later ones add to them (beta = 1), in member order on
 * an in-order queue, so the sum is the same run after run.
 *
 * When a run takes several chunks, dQ, dK and dV are produced in scratch
 * and copied at the end, so that a failure half-way leaves the caller's
 * outputs untouched. With one chunk, one GEMM writes each output.
 *
 * Storage types as in the forward (naive.c): f16 in HGEMMs with P, dP and
 * dS in half where the device has cl_khr_fp16; bf16 through the f32 path on
 * float copies of Q, K, V and dO, with dQ, dK and dV produced in float and
 * rounded to bf16 as they are published.
 */
#include "internal.h"


/* Everything one run allocates, released in one place. */
typedef struct bwd_run {
  fcl__backward_call *call;
  fcl_dtype type;          /* of the GEMMs, P and dP: f32, or f16 for f16 storage */
  int widened;             /* bf16: inputs and gradients are float copies */
  cl_mem q, k, v, dout;    /* the inputs in `type`: the caller's, or float copies */
  cl_mem p, dp;            /* [per_chunk][seqlen_q][seqlen_k] each */
  cl_mem dq, dk, dv;       /* where the gradients are produced: the caller's or scratch */
  cl_kernel recompute, softmax_bwd;
} bwd_run;

static void bwd_release(fcl__backward_call *call, bwd_run *run) {
  if (run->q != call->q) fcl__release_mem(&run->q);
  if (run->k != call->k) fcl__release_mem(&run->k);
  if (run->v != call->v) fcl__release_mem(&run->v);
  if (run->dout != call->dout) fcl__release_mem(&run->dout);
  fcl__release_mem(&run->p);
  fcl__release_mem(&run->dp);
  if (run->dq != call->dq) fcl__release_mem(&run->dq);
  if (run->dk != call->dk) fcl__release_mem(&run->dk);
  if (run->dv != call->dv) fcl__release_mem(&run->dv);
  if (run->recompute) clReleaseKernel(run->recompute);
  if (run->softmax_bwd) clReleaseKernel(run->softmax_bwd);
}

static fcl_status bwd_prepare(fcl__backward_call *call, const fcl__chunking *ch,
                              bwd_run *run) {
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  const size_t matrix = ch->slice_bytes / 2 * ch->per_chunk;
  const size_t q_bytes = call->shape.q_elems * call->shape.elem_size;
  const size_t kv_bytes = call->shape.kv_elems * call->shape.elem_size;
  fcl_status status;
  run->type = fcl__naive_compute_dtype(desc);
  run->widened = desc->dtype != run->type;
  run->q = call->q;
  run->k = call->k;
  run->v = call->v;
  run->dout = call->dout;
  run->dq = call->dq;
  run->dk = call->dk;
  run->dv = call->dv;
  if (run->widened) {  /* bf16: float copies of the inputs and the gradients */
    const size_t q = call->shape.q_elems, kv = call->shape.kv_elems;
    const size_t elems[7] = {q, kv, kv, q, q, kv, kv};
    cl_mem copies[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    status = fcl__f32_copies(ctx, elems, copies, 7, "the naive backward's float copies");
    cl_mem *slots[7] = {&run->q, &run->k, &run->v, &run->dout, &run->dq, &run->dk, &run->dv};
    for (int i = 0; i < 7; ++i)
      if (copies[i]) *slots[i] = copies[i];
    FCL_FORWARD_IF(status);
  }
  run->p = fcl__buffer(ctx, CL_MEM_READ_WRITE, matrix, "the naive backward's P", &status);
  FCL_FORWARD_IF(status);
  run->dp = fcl__buffer(ctx, CL_MEM_READ_WRITE, matrix, "the naive backward's dP", &status);
  FCL_FORWARD_IF(status);
  if (ch->chunks > 1 && !run->widened) {  /* widened gradients are scratch already */
    run->dq = fcl__buffer(ctx, CL_MEM_READ_WRITE, q_bytes, "the naive backward's staged dQ",
                          &status);
    FCL_FORWARD_IF(status);
    run->dk = fcl__buffer(ctx, CL_MEM_READ_WRITE, kv_bytes, "the naive backward's staged dK",
                          &status);
    FCL_FORWARD_IF(status);
    run->dv = fcl__buffer(ctx, CL_MEM_READ_WRITE, kv_bytes, "the naive backward's staged dV",
                          &status);
    FCL_FORWARD_IF(status);
  }
  fcl__options opts;
  fcl__softmax_options(&ctx->info.limits, desc, run->type, call->io_counter, &opts);
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "softmax_recompute",
                             &run->recompute));
  return fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "softmax_bwd", &run->softmax_bwd);
}

/* One chunk (an fcl__chunk_fn over a bwd_run): batch b, group member
 * `member`, kv heads [kv0, kv0 + n). */
static fcl_status bwd_chunk(void *state, size_t b, size_t member, size_t kv0, size_t n) {
  bwd_run *run = state;
  fcl__backward_call *call = run->call;
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t group = call->shape.group;
  const fcl__chunk_view cv = fcl__naive_chunk_view(desc, b, member, kv0);
  /* dK and dV: the group's first member writes, the others add. */
  const float beta = member > 0 ? 1.0f : 0.0f;

  const fcl_dtype t = run->type;
  const fcl__gemm qk = {.type = t, .trans_b = 1, .m = nq, .n = nk, .k = d,
                        .alpha = desc->scale,
                        .a = run->q, .a_off = cv.q_off, .a_ld = cv.q_ld, .a_stride = cv.q_stride,
                        .b = run->k, .b_off = cv.kv_off, .b_ld = cv.kv_ld, .b_stride = d,
                        .c = run->p, .c_ld = nk, .c_stride = cv.s_stride, .batch = n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &qk, "S = Q K^T"));

  unsigned wg, cols;
  fcl__softmax_config(&ctx->info.limits, nk, &wg, &cols);
  const size_t global[2] = {nq * wg, n}, local[2] = {wg, 1};
  const cl_int seqlen_q = (cl_int)nq, seqlen_k = (cl_int)nk;
  const cl_int heads_q = (cl_int)desc->heads_q, batch = (cl_int)b;
  const cl_int group_i = (cl_int)group, kv_first = (cl_int)kv0, member_i = (cl_int)member;
  const cl_uint counting = call->io_counter ? 0 : 1;  /* arguments to leave off */
  fcl__arg rec_args[] = {FCL_ARG(run->p),    FCL_ARG(call->lse), FCL_ARG(seqlen_q),
                         FCL_ARG(seqlen_k),  FCL_ARG(heads_q),   FCL_ARG(batch),
                         FCL_ARG(group_i),   FCL_ARG(kv_first),  FCL_ARG(member_i),
                         FCL_ARG(call->io_counter)};
  FCL_FORWARD_IF(fcl__set_args(ctx, run->recompute, "softmax_recompute", rec_args,
                               sizeof rec_args / sizeof rec_args[0] - counting));
  FCL_FORWARD_IF(fcl__launch(ctx, run->recompute, "softmax_recompute", 2, global, local));

  const fcl__gemm pdo = {.type = t, .trans_a = 1, .m = nk, .n = d, .k = nq, .alpha = 1.0f,
                         .a = run->p, .a_ld = nk, .a_stride = cv.s_stride,
                         .b = run->dout, .b_off = cv.q_off, .b_ld = cv.q_ld,
                         .b_stride = cv.q_stride,
                         .beta = beta,
                         .c = run->dv, .c_off = cv.kv_off, .c_ld = cv.kv_ld, .c_stride = d,
                         .batch = n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &pdo, "dV = P^T dO"));
  const fcl__gemm dov = {.type = t, .trans_b = 1, .m = nq, .n = nk, .k = d, .alpha = 1.0f,
                         .a = run->dout, .a_off = cv.q_off, .a_ld = cv.q_ld,
                         .a_stride = cv.q_stride,
                         .b = run->v, .b_off = cv.kv_off, .b_ld = cv.kv_ld, .b_stride = d,
                         .c = run->dp, .c_ld = nk, .c_stride = cv.s_stride, .batch = n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &dov, "dP = dO V^T"));

  const cl_float scale = desc->scale;
  fcl__arg bwd_args[] = {FCL_ARG(run->p),   FCL_ARG(run->dp), FCL_ARG(seqlen_q),
                         FCL_ARG(seqlen_k), FCL_ARG(scale),   FCL_ARG(call->io_counter)};
  FCL_FORWARD_IF(fcl__set_args(ctx, run->softmax_bwd, "softmax_bwd", bwd_args,
                               sizeof bwd_args / sizeof bwd_args[0] - counting));
  FCL_FORWARD_IF(fcl__launch(ctx, run->softmax_bwd, "softmax_bwd", 2, global, local));

  const fcl__gemm dsk = {.type = t, .m = nq, .n = d, .k = nk, .alpha = 1.0f,
                         .a = run->dp, .a_ld = nk, .a_stride = cv.s_stride,
                         .b = run->k, .b_off = cv.kv_off, .b_ld = cv.kv_ld, .b_stride = d,
                         .c = run->dq, .c_off = cv.q_off, .c_ld = cv.q_ld, .c_stride = cv.q_stride,
                         .batch = n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &dsk, "dQ = dS K"));
  const fcl__gemm dsq = {.type = t, .trans_a = 1, .m = nk, .n = d, .k = nq, .alpha = 1.0f,
                         .a = run->dp, .a_ld = nk, .a_stride = cv.s_stride,
                         .b = run->q, .b_off = cv.q_off, .b_ld = cv.q_ld, .b_stride = cv.q_stride,
                         .beta = beta,
                         .c = run->dk, .c_off = cv.kv_off, .c_ld = cv.kv_ld, .c_stride = d,
                         .batch = n};
  return fcl__gemm_run(ctx, &dsq, "dK = dS^T Q");
}

/* Copies staged gradients to the caller's buffers (widened ones rounded to
 * bf16 on the way): each copy writes one output completely or, failing to
 * enqueue, not at all. */
static fcl_status bwd_publish(fcl__backward_call *call, bwd_run *run) {
  fcl_context *ctx = call->ctx;
  const size_t q_bytes = call->shape.q_elems * call->shape.elem_size;
  const size_t kv_bytes = call->shape.kv_elems * call->shape.elem_size;
  if (run->widened) {
    const fcl_dtype t = call->desc->dtype;
    FCL_FORWARD_IF(fcl__convert(ctx, t, 0, run->dq, call->dq, call->shape.q_elems, 4,
                                call->io_counter));
    FCL_FORWARD_IF(fcl__convert(ctx, t, 0, run->dk, call->dk, call->shape.kv_elems, 4,
                                call->io_counter));
    return fcl__convert(ctx, t, 0, run->dv, call->dv, call->shape.kv_elems, 4,
                        call->io_counter);
  }
  if (run->dq != call->dq)
    FCL_FORWARD_IF(fcl__copy(ctx, run->dq, call->dq, q_bytes, "copying the staged dQ"));
  if (run->dk != call->dk)
    FCL_FORWARD_IF(fcl__copy(ctx, run->dk, call->dk, kv_bytes, "copying the staged dK"));
  if (run->dv != call->dv)
    FCL_FORWARD_IF(fcl__copy(ctx, run->dv, call->dv, kv_bytes, "copying the staged dV"));
  return FCL_SUCCESS;
}

fcl_status fcl__naive_backward(fcl__backward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  fcl__chunking ch;
  FCL_FORWARD_IF(fcl__naive_begin(ctx, desc, FCL_PASS_BACKWARD, &ch, &call->chunks));

  bwd_run run = {.call = call};
  fcl_status status = bwd_prepare(call, &ch, &run);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, call->timer);
  if (status == FCL_SUCCESS && run.widened) {
    const cl_mem from[4] = {call->q, call->k, call->v, call->dout};
    const cl_mem to[4] = {run.q, run.k, run.v, run.dout};
    const size_t q = call->shape.q_elems, kv = call->shape.kv_elems;
    const size_t elems[4] = {q, kv, kv, q};
    status = fcl__naive_widen(ctx, desc, call->io_counter, from, to, elems, 4);
  }
  if (status == FCL_SUCCESS) status = fcl__naive_each_chunk(desc, &ch, bwd_chunk, &run);
  if (status == FCL_SUCCESS) status = bwd_publish(call, &run);
  bwd_release(call, &run);
  return status;
}
