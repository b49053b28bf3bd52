/*
 * naive.c — the baseline ("algorithm 0"): S = scale * Q K^T with CLBlast,
 * P = softmax(t(S)) in place by softmax.cl (the mask, the transforms,
 * LSE), O = P V with CLBlast. S and P live in global memory, which is the
 * point of comparing. Also what its backward (naive_bwd.c) shares:
 * walking the chunks, operands, conversions between views and packed
 * copies. How it is chunked, and its compute type, are its plan
 * (plan/plan_naive.c), which the I/O model reads too.
 *
 * Storage types. f32 runs SGEMMs with S and P in float. f16 runs CLBlast's
 * HGEMMs with S and P in half, as a half-precision baseline would; CLBlast
 * runs them only on devices with cl_khr_fp16 (and accumulates in half, with
 * alpha = scale rounded to half), so elsewhere (NVIDIA, Debian's PoCL) the
 * naive f16 run is FCL_ERROR_UNSUPPORTED and says so. bf16 has no GEMM in
 * CLBlast or any OpenCL BLAS, and a bfloat16 value widens to float exactly,
 * so a bf16 run converts Q, K and V to packed float copies (convert.cl),
 * runs the f32 path on exactly the same values, and rounds O into the
 * caller's view at the end: S and P stay float. That keeps a bf16 baseline
 * on every device, as fast as the f32 one plus the conversions, which the
 * I/O model counts.
 *
 * Views. The GEMMs read and write the caller's tensors where they lie: a
 * row of a head is seq_stride elements from the next, a head head_stride
 * from the next (cl/params.h), which a strided-batched GEMM takes as its
 * leading dimension and batch stride; copies are packed.
 *
 * Chunking. S needs nq * nk floats per (batch, head) slice, so the slices
 * are processed in chunks that fit the device's largest allocation and the
 * context's scratch limit. A chunk is one batch entry (one sequence of a
 * ragged batch), one member of the query-head group (query head = kv_head *
 * group + member) and a run of consecutive kv heads: in that set Q, K, V, O
 * and S are each evenly strided, so one strided-batched GEMM covers the
 * chunk, for plain multi-head attention (group 1) and for GQA/MQA alike. A
 * sequence without keys has nothing to multiply: its O rows are zeroed and
 * its LSE -inf.
 *
 * When a run takes several chunks, O and LSE are produced in scratch and
 * copied at the end, so that a failure half-way leaves the caller's outputs
 * untouched rather than half written.
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
#include "naive.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Work-items per work-group of the conversion and zeroing kernels. */
#define ELEMENTWISE_WG 256u

void fcl__softmax_options(const fcl_device_limits *limits, const fcl__shape *sh,
                          fcl_dtype type, cl_mem io_counter, fcl__options *opts) {
  unsigned wg, cols;
  fcl__softmax_config(limits, sh->desc.seqlen_k, &wg, &cols);
  fcl__options_init(opts);
  fcl__options_define(opts, "FCL_DTYPE", (long)type);
  fcl__options_define(opts, "WG_SIZE", (long)wg);
  fcl__options_define(opts, "COLS_PER_ITEM", (long)cols);
  fcl__options_define(opts, "SOFTCAP", sh->desc.softcap > 0.0f);
  fcl__options_define(opts, "ALIBI", sh->desc.alibi_slopes != NULL);
  fcl__options_count_io(opts, io_counter);
}

fcl_status fcl__set_row_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                             const cl_mem *buffers, cl_uint n_buffers, const fcl_params *params,
                             const fcl__naive_chunk *c, size_t group, cl_mem io_counter) {
  /* fcl__check_desc bounds every length by INT_MAX */
  const cl_int batch = (cl_int)c->b, nq = (cl_int)c->nq, nk = (cl_int)c->nk;
  const cl_int q_start = (cl_int)c->q_start, group_i = (cl_int)group;
  const cl_int kv_first = (cl_int)c->kv0, member = (cl_int)c->member;
  fcl__arg args[16];
  cl_uint n = 0;
  for (cl_uint i = 0; i < n_buffers; ++i) args[n++] = FCL_ARG(buffers[i]);
  args[n++] = FCL_ARG(*params);
  args[n++] = FCL_ARG(batch);
  args[n++] = FCL_ARG(nq);
  args[n++] = FCL_ARG(nk);
  args[n++] = FCL_ARG(q_start);
  args[n++] = FCL_ARG(group_i);
  args[n++] = FCL_ARG(kv_first);
  args[n++] = FCL_ARG(member);
  if (io_counter) args[n++] = FCL_ARG(io_counter);
  return fcl__set_args(ctx, kernel, name, args, n);
}

fcl_status fcl__naive_begin(fcl_context *ctx, const fcl__shape *sh, fcl_pass pass,
                            fcl__chunking *ch, unsigned *chunks) {
  FCL_FORWARD_IF(fcl__naive_check_dtype(ctx, &ctx->info.limits, &sh->desc));
  FCL_FORWARD_IF(
      fcl__naive_chunking(ctx, &ctx->info.limits, fcl__scratch_limit(ctx), sh, pass, ch));
  *chunks = ch->chunks < UINT_MAX ? (unsigned)ch->chunks : UINT_MAX;  /* saturates */
  return FCL_SUCCESS;
}

fcl_status fcl__naive_each_chunk(const fcl__shape *sh, const fcl__chunking *ch,
                                 fcl__chunk_fn fn, void *state) {
  const fcl_attention_desc *desc = &sh->desc;
  const int32_t *cq = desc->cu_seqlens_q;
  const int32_t *ck = desc->cu_seqlens_k ? desc->cu_seqlens_k : cq;
  /* Members in order within each sequence: the backward's dK/dV GEMMs of a
   * member add (beta = 1) to what the previous member wrote. */
  for (size_t b = 0; b < desc->batch; ++b) {
    fcl__naive_chunk c = {.b = b, .nq = desc->seqlen_q, .nk = desc->seqlen_k};
    if (sh->ragged) {
      c.q_start = (size_t)cq[b];
      c.nq = (size_t)(cq[b + 1] - cq[b]);
      c.k_start = (size_t)ck[b];
      c.nk = (size_t)(ck[b + 1] - ck[b]);
    }
    if (desc->seqlens_k) c.nk = (size_t)desc->seqlens_k[b];  /* a cache's length */
    for (c.member = 0; c.member < sh->group; ++c.member)
      for (c.kv0 = 0; c.kv0 < desc->heads_kv; c.kv0 += ch->per_chunk) {
        c.n = desc->heads_kv - c.kv0 < ch->per_chunk ? desc->heads_kv - c.kv0 : ch->per_chunk;
        FCL_FORWARD_IF(fn(state, &c));
      }
  }
  return FCL_SUCCESS;
}

/* ---- operands ------------------------------------------------------------- */

size_t fcl__operand_at(const fcl__operand *op, size_t b, size_t token, size_t h) {
  return op->view.offset + b * op->view.batch_stride + token * op->view.seq_stride +
         h * op->view.head_stride;
}

/* Tokens per batch entry of tensor t, and its heads. */
static size_t tensor_seqlen(const fcl__shape *sh, int t) {
  const int keyside = t == FCL__K || t == FCL__V || t == FCL__DK || t == FCL__DV;
  return keyside ? sh->desc.seqlen_k : sh->desc.seqlen_q;
}
static size_t tensor_heads(const fcl__shape *sh, int t) {
  const int keyside = t == FCL__K || t == FCL__V || t == FCL__DK || t == FCL__DV;
  return keyside ? sh->desc.heads_kv : sh->desc.heads_q;
}

fcl_tensor_layout fcl__packed_view(const fcl__shape *sh, int t) {
  const fcl_tensor_layout zero = {0, 0, 0, 0};
  return fcl__resolve_layout(&zero, sh->desc.batch, tensor_seqlen(sh, t), tensor_heads(sh, t),
                             fcl__tensor_width(sh, t), sh->ragged);
}

fcl__operand fcl__caller_operand(const fcl__shape *sh, int t, cl_mem mem) {
  return (fcl__operand){mem, sh->views[t]};
}

fcl__operand fcl__scratch_operand(fcl_context *ctx, const fcl__shape *sh, int t, int f32,
                                  const char *what, fcl_status *status) {
  const size_t e = f32 ? sizeof(float) : fcl_dtype_size(fcl__naive_compute_dtype(&sh->desc));
  const size_t elems = fcl__tensor_elems(sh, t);
  /* (at least one element: OpenCL has no empty buffers) */
  fcl__operand op = {fcl__buffer(ctx, CL_MEM_READ_WRITE, (elems ? elems : 1) * e, what, status),
                     fcl__packed_view(sh, t)};
  return op;
}

fcl_status fcl__view_move(fcl_context *ctx, const fcl__shape *sh, int t, int to_packed,
                          int f32, cl_mem view_mem, cl_mem packed_mem, cl_mem io_counter) {
  const size_t n = fcl__tensor_elems(sh, t);
  if (n == 0) return FCL_SUCCESS;
  const int width = sh->vec4 ? 4 : 1;
  const char *name = to_packed ? "view_to_packed" : "packed_to_view";
  /* a paged pool's K and V are gathered through the block table */
  const int paged = sh->paged && to_packed && (t == FCL__K || t == FCL__V);
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", (long)sh->desc.dtype);
  fcl__options_define(&opts, "CONVERT_WIDTH", width);
  fcl__options_define(&opts, "PACKED_F32", f32);
  fcl__options_define(&opts, "PAGED", paged);
  /* a quantized cache's K and V are dequantised on the way */
  if (sh->kv_quant && to_packed && (t == FCL__K || t == FCL__V))
    fcl__options_define(&opts, "FCL_KV_DTYPE", (long)sh->desc.kv_dtype);
  fcl__options_count_io(&opts, io_counter);
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_CONVERT, &opts, name, &kernel));
  const fcl_tensor_layout *l = &sh->views[t];
  const fcl_view view = {l->offset, l->batch_stride, l->seq_stride, l->head_stride};
  const cl_ulong count = n;
  const cl_int heads = (cl_int)tensor_heads(sh, t), head_dim = (cl_int)fcl__tensor_width(sh, t);
  const cl_int seqlen = (cl_int)tensor_seqlen(sh, t), ragged = sh->ragged;
  const cl_mem from = to_packed ? view_mem : packed_mem, to = to_packed ? packed_mem : view_mem;
  const cl_ulong table_batch = sh->desc.pages_per_seq;
  const cl_int page_size = (cl_int)sh->desc.page_size, num_pages = (cl_int)sh->desc.num_pages;
  fcl__arg args[13] = {FCL_ARG(from),     FCL_ARG(to),     FCL_ARG(view),
                       FCL_ARG(count),    FCL_ARG(heads),  FCL_ARG(head_dim),
                       FCL_ARG(seqlen),   FCL_ARG(ragged)};
  cl_uint n_args = 8;
  if (paged) {
    args[n_args++] = FCL_ARG(sh->desc.block_table);
    args[n_args++] = FCL_ARG(table_batch);
    args[n_args++] = FCL_ARG(page_size);
    args[n_args++] = FCL_ARG(num_pages);
  }
  if (io_counter) args[n_args++] = FCL_ARG(io_counter);
  fcl_status status = fcl__set_args(ctx, kernel, name, args, n_args);
  if (status == FCL_SUCCESS)
    status = fcl__launch_items(ctx, kernel, name, (n + width - 1) / width, ELEMENTWISE_WG);
  fcl__kernel_return(ctx, &kernel);
  return status;
}

fcl_status fcl__zero_rows(fcl_context *ctx, const fcl__shape *sh, fcl_dtype type, int t,
                          const fcl__operand *op, size_t b, size_t token0, size_t tokens,
                          size_t head0, size_t heads, cl_mem io_counter) {
  const size_t n = tokens * heads * fcl__tensor_width(sh, t);
  if (n == 0) return FCL_SUCCESS;
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", (long)type);
  fcl__options_count_io(&opts, io_counter);
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "zero_rows", &kernel));
  const fcl_view view = {op->view.offset, op->view.batch_stride, op->view.seq_stride,
                         op->view.head_stride};
  const cl_int b_i = (cl_int)b, token0_i = (cl_int)token0, tokens_i = (cl_int)tokens;
  const cl_int head0_i = (cl_int)head0, heads_i = (cl_int)heads;
  const cl_int head_dim = (cl_int)fcl__tensor_width(sh, t);
  fcl__arg args[] = {FCL_ARG(op->mem), FCL_ARG(view),    FCL_ARG(b_i),      FCL_ARG(token0_i),
                     FCL_ARG(tokens_i), FCL_ARG(head0_i), FCL_ARG(heads_i), FCL_ARG(head_dim),
                     FCL_ARG(io_counter)};
  fcl_status status = fcl__set_args(ctx, kernel, "zero_rows", args, io_counter ? 9 : 8);
  if (status == FCL_SUCCESS) status = fcl__launch_items(ctx, kernel, "zero_rows", n, ELEMENTWISE_WG);
  fcl__kernel_return(ctx, &kernel);
  return status;
}

/* ---- the forward ------------------------------------------------------------ */

/* Everything one run allocates, released in one place. */
typedef struct naive_run {
  fcl__forward_call *call;
  fcl_dtype type;            /* of the GEMMs, S and P: f32, or f16 for f16 storage */
  int widened;               /* bf16: q, k, v, o are packed float copies */
  fcl__operand q, k, v, o;   /* the caller's tensors in their views, or copies */
  cl_mem s;                  /* [per_chunk][nq][nk] */
  cl_mem lse;                /* where LSE is produced: the caller's or scratch */
  cl_kernel softmax;
  fcl_params params;         /* the mask and transforms, for softmax.cl */
} naive_run;

static void naive_release(fcl__forward_call *call, naive_run *run) {
  if (run->q.mem != call->q) fcl__release_mem(&run->q.mem);
  if (run->k.mem != call->k) fcl__release_mem(&run->k.mem);
  if (run->v.mem != call->v) fcl__release_mem(&run->v.mem);
  fcl__release_mem(&run->s);
  if (run->o.mem != call->o) fcl__release_mem(&run->o.mem);
  if (run->lse != call->lse) fcl__release_mem(&run->lse);
  fcl__kernel_return(call->ctx, &run->softmax);
}

static fcl_status naive_prepare(fcl__forward_call *call, const fcl__chunking *ch,
                                naive_run *run) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  fcl_status status = FCL_SUCCESS;
  run->type = fcl__naive_compute_dtype(call->desc);
  run->widened = call->desc->dtype != run->type;
  run->q = fcl__caller_operand(sh, FCL__Q, call->q);
  run->k = fcl__caller_operand(sh, FCL__K, call->k);
  run->v = fcl__caller_operand(sh, FCL__V, call->v);
  run->o = fcl__caller_operand(sh, FCL__O, call->o);
  run->lse = call->lse;
  run->params = fcl__params_of(sh);
  if (run->widened) {  /* bf16: float copies of the inputs and of O */
    fcl__operand *ops[4] = {&run->q, &run->k, &run->v, &run->o};
    const int tensors[4] = {FCL__Q, FCL__K, FCL__V, FCL__O};
    for (int i = 0; i < 4 && status == FCL_SUCCESS; ++i)
      *ops[i] = fcl__scratch_operand(ctx, sh, tensors[i], 1, "the naive algorithm's float copies",
                                     &status);
    FCL_FORWARD_IF(status);
  } else if (sh->paged || sh->kv_quant) {  /* packed copies of a paged or quantized cache's
                                             * K and V, for the GEMMs */
    run->k = fcl__scratch_operand(ctx, sh, FCL__K, 0, "the naive algorithm's gathered K", &status);
    if (status == FCL_SUCCESS)
      run->v = fcl__scratch_operand(ctx, sh, FCL__V, 0, "the naive algorithm's gathered V",
                                    &status);
    FCL_FORWARD_IF(status);
  }
  run->s = fcl__buffer(ctx, CL_MEM_READ_WRITE, ch->slice_bytes * ch->per_chunk,
                       "the naive algorithm's S/P", &status);
  FCL_FORWARD_IF(status);
  if (ch->chunks > 1) {
    if (!run->widened) {  /* a widened O is scratch already */
      run->o = fcl__scratch_operand(ctx, sh, FCL__O, 0, "the naive algorithm's staged O",
                                    &status);
      FCL_FORWARD_IF(status);
    }
    if (call->lse) {
      run->lse = fcl__buffer(ctx, CL_MEM_READ_WRITE, sh->sizes.lse ? sh->sizes.lse : 4,
                             "the naive algorithm's staged LSE", &status);
      FCL_FORWARD_IF(status);
    }
  }
  fcl__options opts;
  fcl__softmax_options(&ctx->info.limits, sh, run->type, call->io_counter, &opts);
  return fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "softmax_rows", &run->softmax);
}

/* One chunk (an fcl__chunk_fn over a naive_run). */
static fcl_status naive_chunk(void *state, const fcl__naive_chunk *c) {
  naive_run *run = state;
  fcl__forward_call *call = run->call;
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  const size_t d = sh->desc.head_dim, nq = c->nq, nk = c->nk, group = sh->group;
  const size_t q_head = c->kv0 * group + c->member;
  if (nq == 0) return FCL_SUCCESS;
  const fcl_dtype t = run->type;
  const size_t s_stride = nq * nk;
  if (nk > 0) {
    const fcl__gemm qk = {.type = t, .trans_b = 1, .m = nq, .n = nk, .k = d,
                          .alpha = run->params.scale,  /* with an fp8 cache's k_scale */
                          .a = run->q.mem, .a_off = fcl__operand_at(&run->q, c->b, c->q_start, q_head),
                          .a_ld = run->q.view.seq_stride, .a_stride = group * run->q.view.head_stride,
                          .b = run->k.mem, .b_off = fcl__operand_at(&run->k, c->b, c->k_start, c->kv0),
                          .b_ld = run->k.view.seq_stride, .b_stride = run->k.view.head_stride,
                          .c = run->s, .c_ld = nk, .c_stride = s_stride, .batch = c->n};
    FCL_FORWARD_IF(fcl__gemm_run(ctx, &qk, "S = Q K^T"));
  }

  unsigned wg, cols;
  fcl__softmax_config(&ctx->info.limits, sh->desc.seqlen_k, &wg, &cols);
  const cl_mem buffers[4] = {run->s, run->lse, sh->desc.alibi_slopes, sh->desc.sinks};
  FCL_FORWARD_IF(fcl__set_row_args(ctx, run->softmax, "softmax_rows", buffers, 4, &run->params,
                                   c, group, call->io_counter));
  size_t global[2] = {nq * wg, c->n}, local[2] = {wg, 1};
  FCL_FORWARD_IF(fcl__launch(ctx, run->softmax, "softmax_rows", 2, global, local));

  /* A sequence without keys: its O rows are 0, without a product. */
  if (nk == 0) {
    for (size_t z = 0; z < c->n; ++z)
      FCL_FORWARD_IF(fcl__zero_rows(ctx, sh, t, FCL__O, &run->o, c->b, c->q_start, nq,
                                    (c->kv0 + z) * group + c->member, 1, call->io_counter));
    return FCL_SUCCESS;
  }
  const fcl__gemm pv = {.type = t, .m = nq, .n = sh->head_dim_v, .k = nk,
                        .alpha = run->params.v_scale,  /* an fp8 cache's, else 1 */
                        .a = run->s, .a_ld = nk, .a_stride = s_stride,
                        .b = run->v.mem, .b_off = fcl__operand_at(&run->v, c->b, c->k_start, c->kv0),
                        .b_ld = run->v.view.seq_stride, .b_stride = run->v.view.head_stride,
                        .c = run->o.mem, .c_off = fcl__operand_at(&run->o, c->b, c->q_start, q_head),
                        .c_ld = run->o.view.seq_stride, .c_stride = group * run->o.view.head_stride,
                        .batch = c->n};
  return fcl__gemm_run(ctx, &pv, "O = P V");
}

/* Copies staged outputs into the caller's (a widened O rounded to bf16 on
 * the way): each copy writes one output completely or, failing to enqueue,
 * not at all. */
static fcl_status naive_publish(fcl__forward_call *call, naive_run *run) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  if (run->o.mem != call->o)
    FCL_FORWARD_IF(fcl__view_move(ctx, sh, FCL__O, 0, run->widened, call->o, run->o.mem,
                                  call->io_counter));
  if (run->lse != call->lse && sh->sizes.lse)
    FCL_FORWARD_IF(fcl__copy(ctx, run->lse, call->lse, sh->sizes.lse, "copying the staged LSE"));
  return FCL_SUCCESS;
}

fcl_status fcl__naive_forward(fcl__forward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  fcl__chunking ch;
  FCL_FORWARD_IF(fcl__naive_begin(ctx, sh, FCL_PASS_FORWARD, &ch, &call->chunks));

  naive_run run = {.call = call};
  fcl_status status = naive_prepare(call, &ch, &run);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, call->timer);
  if (run.widened || sh->paged || sh->kv_quant) {  /* widened: all three; paged or
                                                    * quantized: K and V gathered */
    const cl_mem from[3] = {call->q, call->k, call->v}, to[3] = {run.q.mem, run.k.mem, run.v.mem};
    const int tensors[3] = {FCL__Q, FCL__K, FCL__V};
    for (int i = run.widened ? 0 : 1; i < 3 && status == FCL_SUCCESS; ++i)
      status = fcl__view_move(ctx, sh, tensors[i], 1, run.widened, from[i], to[i],
                              call->io_counter);
  }
  if (status == FCL_SUCCESS) status = fcl__naive_each_chunk(sh, &ch, naive_chunk, &run);
  if (status == FCL_SUCCESS) status = naive_publish(call, &run);
  naive_release(call, &run);
  return status;
}
