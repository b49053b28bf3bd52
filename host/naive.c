/*
 * naive.c — the baseline ("algorithm 0"): S = scale * Q K^T with CLBlast,
 * P = softmax(S) in place by softmax.cl (causal mask, LSE), O = P V with
 * CLBlast. S and P live in global memory, which is the point of comparing.
 *
 * Storage types. f32 runs SGEMMs with S and P in float. f16 runs CLBlast's
 * HGEMMs with S and P in half, as a half-precision baseline would; CLBlast
 * runs them only on devices with cl_khr_fp16 (and accumulates in half, with
 * alpha = scale rounded to half), so elsewhere (NVIDIA, Debian's PoCL) the
 * naive f16 run is FCL_ERROR_UNSUPPORTED and says so. bf16 has no GEMM in
 * CLBlast or any OpenCL BLAS, and a bfloat16 value widens to float exactly,
 * so a bf16 run converts Q, K and V to float (convert.cl), runs the f32
 * path on exactly the same values, and rounds O to bf16 at the end: S and P
 * stay float. That keeps a bf16 baseline on every device, as fast as the
 * f32 one plus the conversions, which the I/O model counts; the
 * alternative, no bf16 baseline at all, would leave flash's bf16 numbers
 * with nothing to stand against.
 *
 * Chunking. S needs seqlen_q * seqlen_k floats per (batch, head) slice, so
 * the slices are processed in chunks that fit the device's largest
 * allocation and the context's scratch limit. A chunk is one batch index,
 * one member of the query-head group (query head = kv_head * group + member)
 * and a run of consecutive kv heads: in that set Q, K, V, O and S are each
 * evenly strided, so one strided-batched GEMM covers the chunk, for plain
 * multi-head attention (group 1) and for GQA/MQA alike.
 *
 * When a run takes several chunks, O and LSE are produced in scratch and
 * copied at the end, so that a failure half-way leaves the caller's outputs
 * untouched rather than half written.
 */
#include "internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Half of the allowed scratch goes to S; the rest is left for the padded
 * copies CLBlast's indirect GEMM makes of large operands. */
#define CLBLAST_TEMP_SHARE 2

/* CLBlast 1.5.3 computes element offsets in 32-bit ints (an S chunk past
 * 2^31 elements faults on the device), and pads matrices to multiples of
 * its tile sizes, at most 128. */
#define CLBLAST_MAX_ELEMS ((size_t)INT32_MAX)
#define CLBLAST_PAD 128

/* Rows up to this many elements per work-item stay in registers. */
#define SOFTMAX_MAX_COLS 64u

static unsigned floor_pow2(size_t x) {
  unsigned p = 1;
  while ((size_t)p * 2 <= x && p < (1u << 30)) p *= 2;
  return p;
}

void fcl__softmax_config(const fcl_device_limits *limits, size_t seqlen_k,
                         unsigned *wg_size, unsigned *cols_per_item) {
  size_t max_wg = limits->max_work_group_size ? limits->max_work_group_size : 1;
  unsigned wg = floor_pow2(max_wg < 256 ? max_wg : 256);
  if (seqlen_k > (size_t)wg * 16) wg = floor_pow2(max_wg < 1024 ? max_wg : 1024);
  size_t cols = (seqlen_k + wg - 1) / wg;
  /* Powers of two, so that few variants get compiled. */
  unsigned bucket = 1;
  while (bucket < cols) bucket *= 2;
  *wg_size = wg;
  *cols_per_item = bucket <= SOFTMAX_MAX_COLS ? bucket : 0;
}

fcl_dtype fcl__naive_compute_dtype(const fcl_attention_desc *desc) {
  return desc->dtype == FCL_DTYPE_F16 ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
}

fcl__chunk_view fcl__naive_chunk_view(const fcl_attention_desc *desc, size_t b,
                                       size_t member, size_t kv0) {
  const size_t d = desc->head_dim, group = desc->heads_q / desc->heads_kv;
  fcl__chunk_view v;
  v.q_ld = desc->heads_q * d;
  v.q_off = (b * desc->seqlen_q * desc->heads_q + kv0 * group + member) * d;
  v.q_stride = group * d;
  v.kv_ld = desc->heads_kv * d;
  v.kv_off = (b * desc->seqlen_k * desc->heads_kv + kv0) * d;
  v.s_stride = desc->seqlen_q * desc->seqlen_k;
  return v;
}

void fcl__softmax_options(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                          fcl_dtype type, cl_mem io_counter, fcl__options *opts) {
  unsigned wg, cols;
  fcl__softmax_config(limits, desc->seqlen_k, &wg, &cols);
  fcl__options_init(opts);
  fcl__options_define(opts, "FCL_DTYPE", (long)type);
  fcl__options_define(opts, "WG_SIZE", (long)wg);
  fcl__options_define(opts, "COLS_PER_ITEM", (long)cols);
  fcl__options_define(opts, "CAUSAL", desc->causal);
  fcl__options_count_io(opts, io_counter);
}

size_t fcl__naive_s_elem_size(const fcl_attention_desc *desc) {
  return fcl_dtype_size(fcl__naive_compute_dtype(desc));
}

fcl_status fcl__naive_check_dtype(fcl_context *ctx, const fcl_device_limits *limits,
                                  const fcl_attention_desc *desc) {
  if (desc->dtype != FCL_DTYPE_F16) return FCL_SUCCESS;
  FCL_RETURN_IF(ctx, !limits->has_fp16, FCL_ERROR_UNSUPPORTED,
                "the naive algorithm runs f16 through CLBlast's half-precision GEMMs, "
                "which need cl_khr_fp16, and this device does not have it (the flash "
                "algorithm runs f16 without it)");
  const cl_half alpha = fcl__half_bits(desc->scale);
  FCL_RETURN_IF(ctx, (alpha & 0x7fffu) == 0 || (alpha & 0x7fffu) == 0x7c00u,
                FCL_ERROR_UNSUPPORTED,
                "scale = %g is outside the normal range of f16, in which the naive "
                "algorithm's f16 GEMM takes it",
                (double)desc->scale);
  return FCL_SUCCESS;
}

fcl_status fcl__naive_chunking(fcl_context *ctx, const fcl_device_limits *limits,
                               uint64_t scratch, const fcl_attention_desc *desc,
                               fcl_pass pass, fcl__chunking *out) {
  /* The forward needs S (P in place); the backward P and dP (dS in place). */
  const size_t matrices = pass == FCL_PASS_BACKWARD ? 2 : 1;
  const char *what = pass == FCL_PASS_BACKWARD ? "P and dP" : "S";
  size_t one, slice;
  FCL_RETURN_IF(ctx,
                __builtin_mul_overflow(desc->seqlen_q, desc->seqlen_k, &one) ||
                    __builtin_mul_overflow(one, fcl__naive_s_elem_size(desc), &one) ||
                    __builtin_mul_overflow(one, matrices, &slice),
                FCL_ERROR_OUT_OF_MEMORY,
                "the naive algorithm's %s for seqlen_q = %zu, seqlen_k = %zu "
                "overflows size_t",
                what, desc->seqlen_q, desc->seqlen_k);
  uint64_t allowed = limits->max_alloc_bytes;
  if (scratch < allowed) allowed = scratch;
  FCL_RETURN_IF(ctx, slice > allowed, FCL_ERROR_OUT_OF_MEMORY,
                "the naive algorithm needs %zu bytes for %s of one (batch, head) "
                "slice (%zu x %zu); %llu are allowed (the device's largest "
                "allocation is %llu, the scratch limit %llu)",
                slice, what, desc->seqlen_q, desc->seqlen_k, (unsigned long long)allowed,
                (unsigned long long)limits->max_alloc_bytes,
                (unsigned long long)scratch);
  const size_t padded = ((desc->seqlen_q + CLBLAST_PAD - 1) / CLBLAST_PAD * CLBLAST_PAD) *
                        ((desc->seqlen_k + CLBLAST_PAD - 1) / CLBLAST_PAD * CLBLAST_PAD);
  const size_t q_elems = desc->batch * desc->seqlen_q * desc->heads_q * desc->head_dim;
  const size_t kv_elems = desc->batch * desc->seqlen_k * desc->heads_kv * desc->head_dim;
  FCL_RETURN_IF(ctx, padded > CLBLAST_MAX_ELEMS || q_elems > CLBLAST_MAX_ELEMS ||
                         kv_elems > CLBLAST_MAX_ELEMS,
                FCL_ERROR_UNSUPPORTED,
                "the naive algorithm's GEMMs (CLBlast) index at most 2^31 elements per "
                "matrix; seqlen_q %zu x seqlen_k %zu, or Q/K/V of %zu/%zu elements, is more",
                desc->seqlen_q, desc->seqlen_k, q_elems, kv_elems);
  size_t per_chunk = (size_t)(allowed / CLBLAST_TEMP_SHARE / slice);
  if (per_chunk > CLBLAST_MAX_ELEMS / padded) per_chunk = CLBLAST_MAX_ELEMS / padded;
  if (per_chunk == 0) per_chunk = 1;
  if (per_chunk > desc->heads_kv) per_chunk = desc->heads_kv;
  size_t group = desc->heads_q / desc->heads_kv;
  out->slice_bytes = slice;
  out->per_chunk = per_chunk;
  out->chunks = desc->batch * group * ((desc->heads_kv + per_chunk - 1) / per_chunk);
  return FCL_SUCCESS;
}

fcl_status fcl__naive_widen(fcl_context *ctx, const fcl_attention_desc *desc,
                            cl_mem io_counter, const cl_mem *from, const cl_mem *to,
                            const size_t *elems, size_t n) {
  for (size_t i = 0; i < n; ++i)
    FCL_FORWARD_IF(fcl__convert(ctx, desc->dtype, 1, from[i], to[i], elems[i], 4, io_counter));
  return FCL_SUCCESS;
}

fcl_status fcl__f32_copies(fcl_context *ctx, const size_t *elems, cl_mem *out, size_t n,
                           const char *what) {
  fcl_status status = FCL_SUCCESS;
  for (size_t i = 0; i < n && status == FCL_SUCCESS; ++i)
    out[i] = fcl__buffer(ctx, CL_MEM_READ_WRITE, elems[i] * sizeof(float), what, &status);
  return status;
}

/* Everything one run allocates, released in one place. */
typedef struct naive_run {
  fcl__forward_call *call;
  fcl_dtype type;      /* of the GEMMs, S and P: f32, or f16 for f16 storage */
  int widened;         /* bf16: q, k, v, o are float copies */
  cl_mem q, k, v;      /* the inputs in `type`: the caller's, or float copies */
  cl_mem s;            /* [per_chunk][seqlen_q][seqlen_k] */
  cl_mem o, lse;       /* where O and LSE are produced: the caller's or scratch */
  cl_kernel softmax;
} naive_run;

static void naive_release(fcl__forward_call *call, naive_run *run) {
  if (run->q != call->q) fcl__release_mem(&run->q);
  if (run->k != call->k) fcl__release_mem(&run->k);
  if (run->v != call->v) fcl__release_mem(&run->v);
  fcl__release_mem(&run->s);
  if (run->o != call->o) fcl__release_mem(&run->o);
  if (run->lse != call->lse) fcl__release_mem(&run->lse);
  if (run->softmax) clReleaseKernel(run->softmax);
}

static fcl_status naive_prepare(fcl__forward_call *call, const fcl__chunking *ch,
                                naive_run *run) {
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  fcl_status status;
  run->type = fcl__naive_compute_dtype(desc);
  run->widened = desc->dtype != run->type;
  run->q = call->q;
  run->k = call->k;
  run->v = call->v;
  run->o = call->o;
  run->lse = call->lse;
  if (run->widened) {  /* bf16: float copies of the inputs and of O */
    const size_t elems[4] = {call->shape.q_elems, call->shape.kv_elems,
                             call->shape.kv_elems, call->shape.q_elems};
    cl_mem copies[4] = {NULL, NULL, NULL, NULL};
    status = fcl__f32_copies(ctx, elems, copies, 4, "the naive algorithm's float copies");
    run->q = copies[0] ? copies[0] : call->q;
    run->k = copies[1] ? copies[1] : call->k;
    run->v = copies[2] ? copies[2] : call->v;
    run->o = copies[3] ? copies[3] : call->o;
    FCL_FORWARD_IF(status);
  }
  run->s = fcl__buffer(ctx, CL_MEM_READ_WRITE, ch->slice_bytes * ch->per_chunk,
                       "the naive algorithm's S/P", &status);
  FCL_FORWARD_IF(status);
  if (ch->chunks > 1) {
    if (!run->widened) {  /* a widened O is scratch already */
      run->o = fcl__buffer(ctx, CL_MEM_READ_WRITE,
                           call->shape.q_elems * call->shape.elem_size,
                           "the naive algorithm's staged O", &status);
      FCL_FORWARD_IF(status);
    }
    if (call->lse) {
      run->lse = fcl__buffer(ctx, CL_MEM_READ_WRITE, call->shape.lse_elems * sizeof(float),
                             "the naive algorithm's staged LSE", &status);
      FCL_FORWARD_IF(status);
    }
  }
  fcl__options opts;
  fcl__softmax_options(&ctx->info.limits, desc, run->type, call->io_counter, &opts);
  fcl__options_define(&opts, "STORE_LSE", call->lse != NULL);
  return fcl__kernel(ctx, FCL_SRC_SOFTMAX, &opts, "softmax_rows", &run->softmax);
}

/* One chunk (an fcl__chunk_fn over a naive_run): batch b, group member
 * `member`, kv heads [kv0, kv0 + n). */
static fcl_status naive_chunk(void *state, size_t b, size_t member, size_t kv0, size_t n) {
  naive_run *run = state;
  fcl__forward_call *call = run->call;
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t group = call->shape.group;
  const fcl__chunk_view cv = fcl__naive_chunk_view(desc, b, member, kv0);

  const fcl__gemm qk = {.type = run->type, .trans_b = 1, .m = nq, .n = nk, .k = d,
                        .alpha = desc->scale,
                        .a = run->q, .a_off = cv.q_off, .a_ld = cv.q_ld, .a_stride = cv.q_stride,
                        .b = run->k, .b_off = cv.kv_off, .b_ld = cv.kv_ld, .b_stride = d,
                        .c = run->s, .c_ld = nk, .c_stride = cv.s_stride, .batch = n};
  FCL_FORWARD_IF(fcl__gemm_run(ctx, &qk, "S = Q K^T"));

  unsigned wg, cols;
  fcl__softmax_config(&ctx->info.limits, nk, &wg, &cols);
  const cl_int seqlen_q = (cl_int)nq, seqlen_k = (cl_int)nk;
  const cl_int heads_q = (cl_int)desc->heads_q, batch = (cl_int)b;
  const cl_int group_i = (cl_int)group, kv_first = (cl_int)kv0, member_i = (cl_int)member;
  fcl__arg args[] = {FCL_ARG(run->s),    FCL_ARG(run->lse),  FCL_ARG(seqlen_q),
                     FCL_ARG(seqlen_k),  FCL_ARG(heads_q),   FCL_ARG(batch),
                     FCL_ARG(group_i),   FCL_ARG(kv_first),  FCL_ARG(member_i),
                     FCL_ARG(call->io_counter)};
  cl_uint n_args = sizeof args / sizeof args[0] - (call->io_counter ? 0 : 1);
  FCL_FORWARD_IF(fcl__set_args(ctx, run->softmax, "softmax_rows", args, n_args));
  size_t global[2] = {nq * wg, n}, local[2] = {wg, 1};
  FCL_FORWARD_IF(fcl__launch(ctx, run->softmax, "softmax_rows", 2, global, local));

  const fcl__gemm pv = {.type = run->type, .m = nq, .n = d, .k = nk, .alpha = 1.0f,
                        .a = run->s, .a_ld = nk, .a_stride = cv.s_stride,
                        .b = run->v, .b_off = cv.kv_off, .b_ld = cv.kv_ld, .b_stride = d,
                        .c = run->o, .c_off = cv.q_off, .c_ld = cv.q_ld, .c_stride = cv.q_stride,
                        .batch = n};
  return fcl__gemm_run(ctx, &pv, "O = P V");
}

/* Copies staged outputs to the caller's buffers (a widened O is rounded
 * to bf16 on the way): each copy writes one output completely or, failing
 * to enqueue, not at all. */
static fcl_status naive_publish(fcl__forward_call *call, naive_run *run) {
  fcl_context *ctx = call->ctx;
  if (run->widened)
    FCL_FORWARD_IF(fcl__convert(ctx, call->desc->dtype, 0, run->o, call->o,
                                call->shape.q_elems, 4, call->io_counter));
  else if (run->o != call->o)
    FCL_FORWARD_IF(fcl__copy(ctx, run->o, call->o,
                             call->shape.q_elems * call->shape.elem_size,
                             "copying the staged O"));
  if (run->lse != call->lse)
    FCL_FORWARD_IF(fcl__copy(ctx, run->lse, call->lse,
                             call->shape.lse_elems * sizeof(float),
                             "copying the staged LSE"));
  return FCL_SUCCESS;
}

fcl_status fcl__naive_begin(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                            fcl__chunking *ch, unsigned *chunks) {
  FCL_FORWARD_IF(fcl__naive_check_dtype(ctx, &ctx->info.limits, desc));
  FCL_FORWARD_IF(
      fcl__naive_chunking(ctx, &ctx->info.limits, fcl__scratch_limit(ctx), desc, pass, ch));
  *chunks = ch->chunks < UINT_MAX ? (unsigned)ch->chunks : UINT_MAX;  /* saturates */
  return FCL_SUCCESS;
}

fcl_status fcl__naive_each_chunk(const fcl_attention_desc *desc, const fcl__chunking *ch,
                                 fcl__chunk_fn fn, void *state) {
  const size_t group = desc->heads_q / desc->heads_kv;
  /* Members in order within each batch: the backward's dK/dV GEMMs of a
   * member add (beta = 1) to what the previous member wrote. */
  for (size_t b = 0; b < desc->batch; ++b)
    for (size_t member = 0; member < group; ++member)
      for (size_t kv0 = 0; kv0 < desc->heads_kv; kv0 += ch->per_chunk) {
        size_t n = desc->heads_kv - kv0 < ch->per_chunk ? desc->heads_kv - kv0 : ch->per_chunk;
        FCL_FORWARD_IF(fn(state, b, member, kv0, n));
      }
  return FCL_SUCCESS;
}

fcl_status fcl__naive_forward(fcl__forward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  fcl__chunking ch;
  FCL_FORWARD_IF(fcl__naive_begin(ctx, desc, FCL_PASS_FORWARD, &ch, &call->chunks));

  naive_run run = {.call = call};
  fcl_status status = naive_prepare(call, &ch, &run);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, call->timer);
  if (status == FCL_SUCCESS && run.widened) {
    const cl_mem from[3] = {call->q, call->k, call->v}, to[3] = {run.q, run.k, run.v};
    const size_t elems[3] = {call->shape.q_elems, call->shape.kv_elems, call->shape.kv_elems};
    status = fcl__naive_widen(ctx, desc, call->io_counter, from, to, elems, 3);
  }
  if (status == FCL_SUCCESS) status = fcl__naive_each_chunk(desc, &ch, naive_chunk, &run);
  if (status == FCL_SUCCESS) status = naive_publish(call, &run);
  naive_release(call, &run);
  return status;
}
