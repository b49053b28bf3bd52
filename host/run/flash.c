/*
 * flash.c — running the flash kernels: plan, build options from the plan,
 * arguments, launch. The tiling itself is chosen in plan.c.
 */
#include "common.h"
#include "context.h"
#include "tuning.h"
#include "errors.h"
#include "resources.h"
#include "args.h"
#include "program.h"
#include "measure.h"
#include "problem.h"
#include "calls.h"
#include "plan.h"
#include "rules.h"
#include "merge.h"
#include "families.h"

#include <stdio.h>
#include <string.h>

/* The -D options every flash program starts from: its storage type, and
 * whether it counts its bytes. */
static void storage_options(const fcl_attention_desc *desc, cl_mem io_counter,
                            fcl__options *opts) {
  fcl__options_init(opts);
  fcl__options_define(opts, "FCL_DTYPE", (long)desc->dtype);
  fcl__options_count_io(opts, io_counter);
}

/* ... and the window and score transforms the main kernels apply
 * (common.cl). */
static void score_options(const fcl_attention_desc *desc, cl_mem io_counter,
                          fcl__options *opts) {
  storage_options(desc, io_counter, opts);
  fcl__options_define(opts, "WINDOW", (long)fcl__window_of(desc));
  fcl__options_define(opts, "SOFTCAP", desc->softcap > 0.0f);
  fcl__options_define(opts, "ALIBI", desc->alibi_slopes != NULL);
  /* a quantized KV cache's form (common.cl's K/V loads); none: as before */
  if (desc->kv_dtype != FCL_KV_AS_DTYPE)
    fcl__options_define(opts, "FCL_KV_DTYPE", (long)desc->kv_dtype);
}

/* Work-groups of a launch, which the kernels number with 32-bit ints. */
static fcl_status checked_groups(fcl_context *ctx, size_t groups, const char *name,
                                 size_t *out) {
  FCL_RETURN_IF(ctx, groups > (size_t)INT32_MAX, FCL_ERROR_INVALID_SHAPE,
                "the %s launch needs %zu work-groups; at most %d fit", name, groups,
                INT32_MAX);
  *out = groups;
  return FCL_SUCCESS;
}

/* Work-groups over blocks of `block` rows of every (sequence, head):
 * ragged, the work list's items; else batch x ceil(seqlen / block). */
static size_t block_groups(const fcl__shape *sh, size_t items, size_t seqlen, size_t heads,
                           size_t block) {
  return (sh->tabled ? items : sh->desc.batch * ((seqlen + block - 1) / block)) * heads;
}

/* The -D options of flash_bwd_pre.cl: nothing of the plan, so that both
 * kernel families, and both masks, share one build per storage type. */
static void preprocess_options(const fcl__pre_shape *shape, const fcl_attention_desc *desc,
                               cl_mem io_counter, fcl__options *opts) {
  storage_options(desc, io_counter, opts);
  fcl__options_define(opts, "WG_SIZE", (long)shape->wg_size);
  fcl__options_define(opts, "PRE_THREADS", (long)shape->threads_per_row);
}

/* A program a flash pass builds: its source, options and kernels, the
 * local memory the plan gives each kernel (0: not checked) and their
 * work-group size. */
typedef struct flash_program {
  fcl__source source;
  const char *kernels[2];
  size_t local_bytes;
  unsigned wg_size;
  fcl__options opts;
} flash_program;

/* The programs of `pass` for `plan`, in build order (the backward: the
 * preprocessing, then dK/dV with dQ): what the passes below build, and
 * what fcl_flash_programs lists. @return how many. */
static unsigned flash_programs(const fcl_device_limits *limits, const fcl_plan *plan,
                               const fcl__shape *sh, fcl_pass pass, cl_mem io_counter,
                               flash_program *out) {
  const fcl_attention_desc *desc = &sh->desc;
  if (pass == FCL_PASS_FORWARD) {
    const fcl__family_pass *fp = fcl__family_pass_of(plan->kernel, FCL_PASS_FORWARD);
    out[0] = (flash_program){.source = fcl__family_source(fp, plan),
                             .kernels = {fp->kernels[0], NULL},
                             .local_bytes = plan->local_bytes,
                             .wg_size = plan->wg_size};
    const int split = plan->splits > 1;  /* partial states, then their merge */
    score_options(desc, io_counter, &out[0].opts);
    fcl__family_options(fp, limits, sh, plan, &out[0].opts);
    if (plan->packed_heads > 1) fcl__options_define(&out[0].opts, "PACK_GQA", plan->packed_heads);
    if (desc->block_table) fcl__options_define(&out[0].opts, "PAGED", 1);
    /* V read in K's rows (fcl__shape.v_in_k): the decode kernel's */
    if (sh->v_in_k && plan->kernel == FCL_FLASH_KERNEL_DECODE)
      fcl__options_define(&out[0].opts, "V_IN_K", 1);
    if (!split) return 1;
    fcl__options_define(&out[0].opts, "SPLIT_KV", 1);
    if (plan->merge == FCL_SPLIT_MERGE_LAST_SPLIT) {
      fcl__options_define(&out[0].opts, "MERGE_LAST_SPLIT", 1);
      return 1;
    }
    const fcl__merge_layout merge =
        fcl__merge_layout_of(limits, fcl__desc_head_dim_v(desc), fcl__merge_layout_parts(plan));
    out[1] = (flash_program){.source = FCL_SRC_MERGE,
                             .kernels = {"merge_states", NULL},
                             .wg_size = merge.wg_size};
    fcl__merge_options(&merge, desc->dtype, io_counter, &out[1].opts);
    return 2;
  }
  const fcl__pre_shape pre = fcl__flash_bwd_pre_shape(limits, fcl__desc_head_dim_v(desc));
  out[0] = (flash_program){.source = FCL_SRC_FLASH_BWD_PRE,
                           .kernels = {"flash_bwd_preprocess", NULL},
                           .wg_size = (unsigned)pre.wg_size};
  preprocess_options(&pre, desc, io_counter, &out[0].opts);
  const fcl__family_pass *fp = fcl__family_pass_of(plan->kernel, FCL_PASS_BACKWARD);
  out[1] = (flash_program){.source = fcl__family_source(fp, plan),
                           .kernels = {fp->kernels[0], fp->kernels[1]},
                           .local_bytes = plan->local_bytes,
                           .wg_size = plan->wg_size};
  score_options(desc, io_counter, &out[1].opts);
  fcl__family_options(fp, limits, sh, plan, &out[1].opts);
  return 2;
}

fcl_status fcl_flash_programs(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                              fcl_pass pass, fcl_program_info out[FCL_MAX_PASS_PROGRAMS],
                              unsigned *count, char *why, size_t why_len) {
  return fcl_flash_programs_hinted(limits, desc, pass, NULL, out, count, why, why_len);
}

fcl_status fcl_flash_programs_hinted(const fcl_device_limits *limits,
                                     const fcl_attention_desc *desc, fcl_pass pass,
                                     const fcl_plan *hint,
                                     fcl_program_info out[FCL_MAX_PASS_PROGRAMS],
                                     unsigned *count, char *why, size_t why_len) {
  fcl__say(why, why_len, "%s", "");
  if (!out || !count) {
    fcl__say(why, why_len, "%s is NULL", out ? "count" : "out");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  fcl_plan plan;
  fcl__shape shape;
  FCL_FORWARD_IF(fcl__plan_flash_shape(limits, desc, pass, hint, &plan, &shape, why, why_len));
  flash_program programs[FCL_MAX_PASS_PROGRAMS];
  const unsigned n = flash_programs(limits, &plan, &shape, pass, NULL, programs);
  /* Listed here first, so that a failure leaves `out` untouched. */
  fcl_program_info listed[FCL_MAX_PASS_PROGRAMS];
  memset(listed, 0, sizeof listed);
  for (unsigned i = 0; i < n; ++i) {
    fcl__options all;
    if (fcl__program_options(limits, &programs[i].opts, 0, &all) != FCL_SUCCESS) {
      fcl__say(why, why_len, "the build options of %s are too long",
               fcl__source_file(programs[i].source));
      return FCL_ERROR_INVALID_ARGUMENT;
    }
    listed[i] = (fcl_program_info){.file = fcl__source_file(programs[i].source),
                                   .prelude = fcl__source_prelude_file(programs[i].source),
                                   .kernels = {programs[i].kernels[0], programs[i].kernels[1]},
                                   .local_bytes = programs[i].local_bytes,
                                   .wg_size = programs[i].wg_size};
    memcpy(listed[i].options, all.text, all.len + 1);
  }
  memcpy(out, listed, n * sizeof listed[0]);
  *count = n;
  return FCL_SUCCESS;
}

/* The split forward's scratch: every split's partial O (storage type,
 * packed) and LSE, leased from the context (scratch.c), and the merge that
 * combines them into the caller's O and LSE: the merge kernel, prepared
 * before the timer starts so that the call's time holds its launch only,
 * or the arrival counts of the merge in the split launch. */
typedef struct split_run {
  cl_mem o, lse, arrivals;
  fcl__merge_shape merge;
  fcl__merge_run merge_run;
} split_run;

static fcl_status split_prepare(fcl_context *ctx, const fcl__shape *sh, const fcl_plan *plan,
                                size_t blocks, fcl_params *params, fcl__attention_buffers *bufs,
                                split_run *run) {
  const fcl_attention_desc *desc = &sh->desc;
  const size_t splits = plan->splits;
  fcl_merge_desc m;
  fcl_merge_desc_init(&m, splits, sh->ragged ? 1 : desc->batch,
                      sh->ragged ? sh->tokens_q : desc->seqlen_q, desc->heads_q, sh->head_dim_v);
  m.dtype = desc->dtype;
  m.o = sh->views[FCL__O];
  m.sinks = desc->sinks;  /* the partial states have none: the merge adds them once */
  char why[256];
  fcl_status status = fcl__check_merge_why(&m, &run->merge, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "the split forward's merge: %s", why);
  run->merge.layout_parts = fcl__merge_layout_parts(plan);
  size_t o_bytes, lse_bytes;
  FCL_RETURN_IF(ctx,
                __builtin_mul_overflow(sh->o_elems * sh->elem_size, splits, &o_bytes) ||
                    __builtin_mul_overflow(sh->lse_elems * sizeof(float), splits, &lse_bytes),
                FCL_ERROR_OUT_OF_MEMORY, "%zu splits' partial outputs overflow size_t", splits);
  status = fcl__scratch_lease(ctx, o_bytes, "the split forward's partial O", &run->o);
  if (status == FCL_SUCCESS)
    status = fcl__scratch_lease(ctx, lse_bytes, "the split forward's partial LSE", &run->lse);
  if (status != FCL_SUCCESS) return status;
  /* Split s writes [tokens][heads][head_dim] (and LSE as the caller's) s
   * parts in. */
  const fcl_tensor_layout packed = {0};
  const fcl_tensor_layout scratch = fcl__resolve_layout(&packed, desc->batch, desc->seqlen_q,
                                                        desc->heads_q, sh->head_dim_v, sh->ragged);
  params->o_merged = params->o;
  params->o = fcl__view_of(&scratch);
  params->o_split = sh->o_elems;
  params->lse_split = sh->lse_elems;
  params->splits = (cl_int)splits;
  params->split_keys = (cl_int)fcl__split_keys(plan, desc->seqlen_k);
  if (plan->merge == FCL_SPLIT_MERGE_LAST_SPLIT) {
    /* a count per block: the launch's work-groups of one split */
    FCL_FORWARD_IF(fcl__arrivals_lease(ctx, blocks, &run->arrivals));
    bufs->o_merged = bufs->o;
    bufs->lse_merged = bufs->lse;
    bufs->arrivals = run->arrivals;
  }
  bufs->o = run->o;
  bufs->lse = run->lse;
  return FCL_SUCCESS;
}

fcl_status fcl__flash_forward(fcl__forward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  const fcl_attention_desc *desc = call->desc;
  char why[256] = "";
  fcl_status status = call->planned ? FCL_SUCCESS
                                     : fcl__plan_call(ctx, &call->settings.tiling_hint, sh,
                                                      FCL_PASS_FORWARD, &call->plan, why,
                                                      sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "flash forward on %s: %s",
                ctx->info.name, why);
  if (sh->lse_elems == 0) {  /* a ragged batch without queries */
    call->plan.splits = 1;
    call->plan.merge = FCL_SPLIT_MERGE_AUTO;
  }
  const fcl_plan *plan = &call->plan;
  const int split = plan->splits > 1, merge_kernel = plan->merge == FCL_SPLIT_MERGE_KERNEL;

  flash_program programs[2];
  flash_programs(&ctx->info.limits, plan, sh, FCL_PASS_FORWARD, call->io_counter, programs);
  const flash_program *program = &programs[0];
  const char *name = program->kernels[0];
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, program->source, &program->opts, name, &kernel));
  fcl__ragged ragged;
  split_run parts = {0};
  status = fcl__ragged_upload(ctx, sh, plan->block_q, plan->packed_heads, 0, 0, &ragged);
  fcl_params params = fcl__params_of(sh);
  params.work_items = (cl_int)ragged.items_q;
  fcl__attention_buffers bufs = {.q = call->q, .k = call->k, .v = call->v, .o = call->o,
                                 .lse = call->lse, .alibi = desc->alibi_slopes,
                                 .seqs = ragged.seqs, .work = ragged.work_q,
                                 .pages = desc->block_table, .sinks = desc->sinks};
  const size_t blocks = block_groups(sh, ragged.items_q, desc->seqlen_q * plan->packed_heads,
                                     desc->heads_q / plan->packed_heads, plan->block_q);
  if (status == FCL_SUCCESS && split)
    status = split_prepare(ctx, sh, plan, blocks, &params, &bufs, &parts);
  if (status == FCL_SUCCESS && merge_kernel)
    status = fcl__merge_prepare(ctx, &parts.merge, parts.o, parts.lse, call->o, call->lse,
                                call->io_counter, &parts.merge_run);
  size_t groups = 0;
  if (status == FCL_SUCCESS)
    status = fcl__check_local_bytes(ctx, kernel, name, program->local_bytes);
  if (status == FCL_SUCCESS)
    status = fcl__set_attention_args(ctx, kernel, name, &bufs, &params, call->io_counter);
  if (status == FCL_SUCCESS)
    status = checked_groups(ctx, blocks * plan->splits, "flash forward", &groups);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, call->timer);
  if (status == FCL_SUCCESS && groups) {
    size_t global = groups * plan->wg_size, local = plan->wg_size;
    status = fcl__launch(ctx, kernel, name, 1, &global, &local);
  }
  /* Split, the caller's O and LSE are written by the merge alone. */
  if (status == FCL_SUCCESS && merge_kernel) status = fcl__merge_launch(ctx, &parts.merge_run);
  fcl__merge_release(ctx, &parts.merge_run);
  fcl__scratch_return(ctx, &parts.o);
  fcl__scratch_return(ctx, &parts.lse);
  fcl__release_mem(&parts.arrivals);
  fcl__ragged_release(&ragged);
  fcl__kernel_return(ctx, &kernel);
  return status;
}

/* The backward's kernels and scratch, released in one place. */
typedef struct backward_run {
  cl_kernel pre, dkdv, dq;
  cl_kernel sinks, sinks_sum;  /* the sinks' gradient (flash_bwd_pre.cl), when wanted */
  size_t sink_parts;            /* ... summed in this many parts a head first */
  const char *dkdv_name, *dq_name;
  fcl__pre_shape pre_shape;
  cl_mem dsum;  /* D = rowsum(dO * O), laid out as LSE (leased scratch) */
  cl_mem dsink_parts;  /* [heads_q][sink_parts] (leased scratch) */
  fcl__ragged ragged;
} backward_run;

static void backward_release(fcl_context *ctx, backward_run *run) {
  fcl__kernel_return(ctx, &run->pre);
  fcl__kernel_return(ctx, &run->dkdv);
  fcl__kernel_return(ctx, &run->dq);
  fcl__kernel_return(ctx, &run->sinks);
  fcl__kernel_return(ctx, &run->sinks_sum);
  fcl__scratch_return(ctx, &run->dsum);
  fcl__scratch_return(ctx, &run->dsink_parts);
  fcl__ragged_release(&run->ragged);
}

static fcl_status backward_enqueue(fcl__backward_call *call, backward_run *run) {
  fcl_context *ctx = call->ctx;
  const fcl__shape *sh = &call->shape;
  const fcl_attention_desc *desc = call->desc;
  const fcl_plan *plan = &call->plan;
  const fcl__ragged *ragged = &run->ragged;
  fcl_params params = fcl__params_of(sh);
  const size_t rows = sh->tokens_q * desc->heads_q;
  const size_t pre_rows = run->pre_shape.wg_size / run->pre_shape.threads_per_row;
  const size_t block = plan->block_k;
  size_t pre_groups = 0, dkdv_groups = 0, dq_groups = 0;
  FCL_FORWARD_IF(checked_groups(ctx, (rows + pre_rows - 1) / pre_rows,
                                "flash backward's preprocessing", &pre_groups));
  FCL_FORWARD_IF(checked_groups(
      ctx, block_groups(sh, ragged->items_k, desc->seqlen_k, desc->heads_kv, block),
      "flash backward's dK/dV", &dkdv_groups));
  FCL_FORWARD_IF(checked_groups(
      ctx, block_groups(sh, ragged->items_q, desc->seqlen_q, desc->heads_q, block),
      "flash backward's dQ", &dq_groups));

  const fcl__attention_buffers pre = {.o = call->o, .dout = call->dout, .dsum = run->dsum};
  const fcl__attention_buffers sinks = {.lse = call->lse, .dsum = run->dsum,
                                        .sinks = desc->sinks, .dsinks = desc->dsinks,
                                        .dsink_parts = run->dsink_parts};
  fcl__attention_buffers main = {.q = call->q, .k = call->k, .v = call->v, .lse = call->lse,
                                 .dout = call->dout, .dsum = run->dsum, .dq = call->dq,
                                 .dk = call->dk, .dv = call->dv, .alibi = desc->alibi_slopes,
                                 .seqs = ragged->seqs};
  FCL_FORWARD_IF(fcl__set_attention_args(ctx, run->pre, "flash_bwd_preprocess", &pre, &params,
                                         call->io_counter));
  if (run->sinks) {
    fcl_params sink_params = params;
    sink_params.work_items = (cl_int)run->sink_parts;
    FCL_FORWARD_IF(fcl__set_attention_args(ctx, run->sinks, "flash_bwd_sinks", &sinks,
                                           &sink_params, call->io_counter));
    FCL_FORWARD_IF(fcl__set_attention_args(ctx, run->sinks_sum, "flash_bwd_sinks_sum", &sinks,
                                           &sink_params, call->io_counter));
  }
  FCL_FORWARD_IF(fcl__check_local_bytes(ctx, run->dkdv, run->dkdv_name, plan->local_bytes));
  FCL_FORWARD_IF(fcl__check_local_bytes(ctx, run->dq, run->dq_name, plan->local_bytes));
  main.work = ragged->work_k;
  params.work_items = (cl_int)ragged->items_k;
  FCL_FORWARD_IF(fcl__set_attention_args(ctx, run->dkdv, run->dkdv_name, &main, &params,
                                         call->io_counter));
  main.work = ragged->work_q;
  params.work_items = (cl_int)ragged->items_q;
  FCL_FORWARD_IF(fcl__set_attention_args(ctx, run->dq, run->dq_name, &main, &params,
                                         call->io_counter));

  /* Each output is written by exactly one kernel: a launch that fails
   * leaves its outputs untouched and the others complete. An empty launch
   * (a ragged batch without queries, or keys) is skipped. */
  const struct {
    cl_kernel kernel;
    const char *name;
    size_t groups, wg;
  } launches[5] = {{run->pre, "flash_bwd_preprocess", pre_groups, run->pre_shape.wg_size},
                   {run->sinks, "flash_bwd_sinks", run->sinks ? desc->heads_q * run->sink_parts : 0,
                    run->pre_shape.wg_size},
                   {run->sinks_sum, "flash_bwd_sinks_sum", run->sinks ? desc->heads_q : 0,
                    run->pre_shape.wg_size},
                   {run->dkdv, run->dkdv_name, dkdv_groups, plan->wg_size},
                   {run->dq, run->dq_name, dq_groups, plan->wg_size}};
  FCL_FORWARD_IF(fcl__timer_start(ctx, call->timer));
  for (int i = 0; i < 5; ++i) {
    if (!launches[i].groups) continue;
    size_t global = launches[i].groups * launches[i].wg, local = launches[i].wg;
    FCL_FORWARD_IF(fcl__launch(ctx, launches[i].kernel, launches[i].name, 1, &global, &local));
  }
  return FCL_SUCCESS;
}

fcl_status fcl__flash_backward(fcl__backward_call *call) {
  fcl_context *ctx = call->ctx;
  const fcl_attention_desc *desc = call->desc;
  char why[256] = "";
  fcl_status status = fcl__plan_call(ctx, &call->settings.tiling_hint, &call->shape,
                                     FCL_PASS_BACKWARD, &call->plan, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "flash backward on %s: %s",
                ctx->info.name, why);

  flash_program programs[2];
  flash_programs(&ctx->info.limits, &call->plan, &call->shape, FCL_PASS_BACKWARD,
                 call->io_counter, programs);
  const flash_program *pre = &programs[0], *main = &programs[1];
  backward_run run = {.pre_shape = fcl__flash_bwd_pre_shape(&ctx->info.limits,
                                                           fcl__desc_head_dim_v(desc)),
                      .dkdv_name = main->kernels[0],
                      .dq_name = main->kernels[1]};
  status = fcl__kernel(ctx, pre->source, &pre->opts, pre->kernels[0], &run.pre);
  if (status == FCL_SUCCESS && desc->dsinks) {
    run.sink_parts = fcl__sink_parts(call->shape.tokens_q);
    status = fcl__kernel(ctx, pre->source, &pre->opts, "flash_bwd_sinks", &run.sinks);
    if (status == FCL_SUCCESS)
      status = fcl__kernel(ctx, pre->source, &pre->opts, "flash_bwd_sinks_sum", &run.sinks_sum);
    if (status == FCL_SUCCESS)
      status = fcl__scratch_lease(ctx, desc->heads_q * run.sink_parts * sizeof(float),
                                  "the sinks' gradient's partial sums", &run.dsink_parts);
  }
  if (status == FCL_SUCCESS)
    status = fcl__kernel(ctx, main->source, &main->opts, run.dkdv_name, &run.dkdv);
  if (status == FCL_SUCCESS)
    status = fcl__kernel(ctx, main->source, &main->opts, run.dq_name, &run.dq);
  /* leased (scratch.c: a buffer allocated on its first use would be in
   * the call's time), at least a float: a ragged batch may have no query */
  if (status == FCL_SUCCESS)
    status = fcl__scratch_lease(ctx,
                                (call->shape.lse_elems ? call->shape.lse_elems : 1) * sizeof(float),
                                "the flash backward's D = rowsum(dO * O)", &run.dsum);
  if (status == FCL_SUCCESS)
    status = fcl__ragged_upload(ctx, &call->shape, call->plan.block_q, 1, call->plan.block_k, 1,
                                &run.ragged);
  if (status == FCL_SUCCESS) status = backward_enqueue(call, &run);
  backward_release(ctx, &run);
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
                      .rows_per_thread = hint->rows_per_thread,
                      .tile_elem_size = hint->tile_elem_size,
                      .kernel = hint->kernel,
                      .splits = hint->splits,
                      .packed_heads = hint->packed_heads,
                      .merge = hint->merge,
                      .v_stages = hint->v_stages};
  }
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.tiling_hint = kept;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}
