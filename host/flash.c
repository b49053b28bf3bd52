/*
 * flash.c — running the flash kernels: plan, build options from the plan,
 * arguments, launch. The tiling itself is chosen in plan.c.
 */
#include "internal.h"

/* The -D options of flash_fwd.cl: one source of truth, the plan. */
static void forward_options(const fcl_plan *plan, const fcl_attention_desc *desc,
                            int with_lse, cl_mem io_counter, fcl__options *opts) {
  fcl__options_init(opts);
  fcl__options_define(opts, "FCL_DTYPE", (long)desc->dtype);
  fcl__options_define(opts, "HEAD_DIM_MAX", (long)plan->head_dim_padded);
  fcl__options_define(opts, "BLOCK_K", (long)plan->block_k);
  fcl__options_define(opts, "WG_SIZE", (long)plan->wg_size);
  fcl__options_define(opts, "THREADS_PER_ROW", (long)plan->threads_per_row);
  fcl__options_define(opts, "ROWS_PER_THREAD", (long)plan->rows_per_thread);
  fcl__options_define(opts, "CAUSAL", desc->causal);
  fcl__options_define(opts, "STORE_LSE", with_lse);
  fcl__options_count_io(opts, io_counter);
}

fcl_status fcl__flash_forward(fcl__forward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  char why[256] = "";
  fcl_status status = fcl__plan_flash(&ctx->info.limits, desc, FCL_PASS_FORWARD,
                                      &call->settings.tiling_hint, &call->plan, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "flash forward on %s: %s",
                ctx->info.name, why);
  const fcl_plan *plan = &call->plan;

  fcl__options opts;
  forward_options(plan, desc, call->lse != NULL, call->io_counter, &opts);
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_FLASH_FWD, &opts, "flash_fwd", &kernel));

  const cl_int seqlen_q = (cl_int)desc->seqlen_q, seqlen_k = (cl_int)desc->seqlen_k;
  const cl_int heads_q = (cl_int)desc->heads_q, heads_kv = (cl_int)desc->heads_kv;
  const cl_int head_dim = (cl_int)desc->head_dim;
  const cl_float scale = desc->scale;
  fcl__arg args[] = {
      FCL_ARG(call->q),    FCL_ARG(call->k),        FCL_ARG(call->v),
      FCL_ARG(call->o),    FCL_ARG(call->lse),      FCL_ARG(seqlen_q),
      FCL_ARG(seqlen_k),   FCL_ARG(heads_q),        FCL_ARG(heads_kv),
      FCL_ARG(head_dim),   FCL_ARG(scale),          FCL_ARG(call->io_counter),
  };
  cl_uint n_args = sizeof args / sizeof args[0] - (call->io_counter ? 0 : 1);
  status = fcl__set_args(ctx, kernel, "flash_fwd", args, n_args);
  if (status == FCL_SUCCESS) {
    size_t q_blocks = (desc->seqlen_q + plan->block_q - 1) / plan->block_q;
    size_t groups = q_blocks * desc->heads_q * desc->batch;
    size_t global = groups * plan->wg_size, local = plan->wg_size;
    if (groups > (size_t)INT32_MAX)
      status = fcl__fail(ctx, FCL_ERROR_INVALID_SHAPE,
                         "the flash launch needs %zu work-groups; at most %d fit",
                         groups, INT32_MAX);
    if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, call->timer);
    if (status == FCL_SUCCESS)
      status = fcl__launch(ctx, kernel, "flash_fwd", 1, &global, &local);
  }
  clReleaseKernel(kernel);
  return status;
}

fcl_status fcl_context_set_flash_tiling(fcl_context *ctx, const fcl_plan *hint) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  fcl_plan kept = {0};
  if (hint) {
    FCL_FORWARD_IF(fcl__check_tiling_hint(ctx, hint));
    kept = (fcl_plan){.block_k = hint->block_k,
                      .wg_size = hint->wg_size,
                      .threads_per_row = hint->threads_per_row,
                      .rows_per_thread = hint->rows_per_thread};
  }
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.tiling_hint = kept;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}
