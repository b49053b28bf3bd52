/*
 * attention.c — the public attention entry points: validate once, then
 * hand the call to an algorithm; time it and account for its bytes when
 * the caller asks for run info. Also the small descriptive helpers.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

unsigned fcl_version_number(void) { return FCL_VERSION_NUMBER; }

const char *fcl_version_string(void) {
  return STR(FCL_VERSION_MAJOR) "." STR(FCL_VERSION_MINOR) "." STR(FCL_VERSION_PATCH);
}

size_t fcl_dtype_size(fcl_dtype dtype) {
  switch (dtype) {
    case FCL_DTYPE_F32: return 4;
    case FCL_DTYPE_F16: return 2;
    case FCL_DTYPE_BF16: return 2;
  }
  return 0;
}

const char *fcl_dtype_name(fcl_dtype dtype) {
  switch (dtype) {
    case FCL_DTYPE_F32: return "f32";
    case FCL_DTYPE_F16: return "f16";
    case FCL_DTYPE_BF16: return "bf16";
  }
  return "?";
}

const char *fcl_algo_name(fcl_algo algo) {
  switch (algo) {
    case FCL_ALGO_FLASH: return "flash";
    case FCL_ALGO_NAIVE: return "naive";
  }
  return "?";
}

void fcl_attention_desc_init(fcl_attention_desc *desc, size_t batch,
                             size_t heads_q, size_t heads_kv, size_t seqlen_q,
                             size_t seqlen_k, size_t head_dim) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->batch = batch;
  desc->heads_q = heads_q;
  desc->heads_kv = heads_kv;
  desc->seqlen_q = seqlen_q;
  desc->seqlen_k = seqlen_k;
  desc->head_dim = head_dim;
  desc->dtype = FCL_DTYPE_F32;
  desc->causal = 0;
  desc->scale = head_dim ? (float)(1.0 / sqrt((double)head_dim)) : 0.0f;
}

double fcl_attention_flops(const fcl_attention_desc *desc, fcl_pass pass) {
  if (!desc) return 0.0;
  double f = 4.0 * (double)desc->batch * (double)desc->seqlen_q *
             (double)desc->seqlen_k * (double)desc->heads_q * (double)desc->head_dim;
  if (desc->causal && desc->seqlen_q == desc->seqlen_k) f *= 0.5;
  return pass == FCL_PASS_BACKWARD ? 2.5 * f : f;
}

fcl_status fcl_attention_forward(fcl_context *ctx, const fcl_attention_desc *desc,
                                 fcl_algo algo, cl_mem q, cl_mem k, cl_mem v,
                                 cl_mem o, cl_mem lse, fcl_run_info *info) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  fcl__forward_call call;
  memset(&call, 0, sizeof call);
  call.ctx = ctx;
  call.settings = fcl__context_settings(ctx);
  call.desc = desc;
  FCL_FORWARD_IF(fcl__check_desc(ctx, desc, &call.shape));
  FCL_RETURN_IF(ctx, algo != FCL_ALGO_FLASH && algo != FCL_ALGO_NAIVE,
                FCL_ERROR_INVALID_ARGUMENT, "algo = %d is not an fcl_algo", (int)algo);
  const size_t q_bytes = call.shape.q_elems * call.shape.elem_size;
  const size_t kv_bytes = call.shape.kv_elems * call.shape.elem_size;
  FCL_FORWARD_IF(fcl__check_buffer(ctx, q, q_bytes, "q", 0));
  FCL_FORWARD_IF(fcl__check_buffer(ctx, k, kv_bytes, "k", 0));
  FCL_FORWARD_IF(fcl__check_buffer(ctx, v, kv_bytes, "v", 0));
  FCL_FORWARD_IF(fcl__check_buffer(ctx, o, q_bytes, "o", 0));
  FCL_FORWARD_IF(fcl__check_buffer(ctx, lse, call.shape.lse_elems * sizeof(float), "lse", 1));
  const cl_mem mems[] = {q, k, v, o, lse};
  const char *const names[] = {"q", "k", "v", "o", "lse"};
  FCL_FORWARD_IF(fcl__check_call_buffers(ctx, mems, names, 3, 5));
  call.q = q;
  call.k = k;
  call.v = v;
  call.o = o;
  call.lse = lse;

  fcl__timer timer = {0};
  fcl__io_counter counter = {0};
  call.timer = info ? &timer : NULL;
  fcl_status status = fcl__io_counter_begin(ctx, &counter);
  call.io_counter = counter.buffer;
  if (status == FCL_SUCCESS)
    status = algo == FCL_ALGO_FLASH ? fcl__flash_forward(&call) : fcl__naive_forward(&call);
  uint64_t loaded = 0, stored = 0;
  double ms = 0.0;
  if (status == FCL_SUCCESS) status = fcl__io_counter_end(ctx, &counter, &loaded, &stored);
  else fcl__release_mem(&counter.buffer);
  /* Stop the timer even after a failure, to release its marker. */
  fcl_status timed = fcl__timer_stop(ctx, &timer, &ms);
  if (status == FCL_SUCCESS) status = timed;
  if (status != FCL_SUCCESS) {
    /* Let what was enqueued before the failure finish, so that on return
     * each output is final: untouched or completely written. */
    clFinish(ctx->queue);
    return status;
  }
  if (!info) return FCL_SUCCESS;

  memset(info, 0, sizeof *info);
  info->ms = ms;
  info->flops = fcl_attention_flops(desc, FCL_PASS_FORWARD);
  info->plan = call.plan;
  info->chunks = call.chunks;
  const int with_lse = lse != NULL;
  fcl__io model = algo == FCL_ALGO_FLASH
                      ? fcl__io_flash_forward(desc, &call.plan, with_lse)
                      : fcl__io_naive_forward(&ctx->info.limits, desc, with_lse, call.chunks);
  info->bytes_model = model.loads + model.stores;
  if (call.io_counter) {
    info->bytes_counted = loaded + stored;
    if (algo == FCL_ALGO_NAIVE) {
      /* CLBlast cannot count: add the model's figure for everything but
       * the softmax kernel. */
      fcl__io softmax = fcl__io_softmax(&ctx->info.limits, desc, with_lse);
      info->bytes_counted += info->bytes_model - (softmax.loads + softmax.stores);
    }
  }
  return FCL_SUCCESS;
}
