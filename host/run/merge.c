/*
 * merge.c — fcl_merge_states: attention states over disjoint key sets
 * merged exactly (cl/merge.cl). The descriptor is checked as the attention
 * calls check theirs: sizes, views that do not overlap, buffers large
 * enough and outputs that share no byte with an input.
 */
#include "errors.h"
#include "resources.h"
#include "args.h"
#include "program.h"
#include "measure.h"
#include "problem.h"
#include "merge.h"
#include "iomodel.h"

#include <stddef.h>
#include <string.h>

void fcl_merge_desc_init(fcl_merge_desc *desc, size_t parts, size_t batch, size_t seqlen,
                         size_t heads, size_t head_dim) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->parts = parts;
  desc->batch = batch;
  desc->seqlen = seqlen;
  desc->heads = heads;
  desc->head_dim = head_dim;
  desc->dtype = FCL_DTYPE_F32;
}

/* a * b + c without overflow, into *out; 1 on overflow. */
static int mul_add_overflows(size_t a, size_t b, size_t c, size_t *out) {
  size_t ab;
  return __builtin_mul_overflow(a, b, &ab) || __builtin_add_overflow(ab, c, out);
}

fcl_status fcl__check_merge_why(const fcl_merge_desc *given, fcl__merge_shape *shape,
                                char *why, size_t why_len) {
  if (why && why_len) why[0] = '\0';
  FCL_WHY_IF(!given, FCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
  fcl__merge_shape sh;
  memset(&sh, 0, sizeof sh);
  fcl_merge_desc_init(&sh.desc, 1, 1, 1, 1, 1);
  FCL_FORWARD_IF(fcl__grown_struct(given, given->struct_size, offsetof(fcl_merge_desc, sinks), &sh.desc,
                                   sizeof sh.desc, "desc", "fcl_merge_desc_init", why,
                                   why_len));
  sh.desc.struct_size = sizeof sh.desc;
  const fcl_merge_desc *d = &sh.desc;
  const char *const names[] = {"parts", "batch", "seqlen", "heads", "head_dim"};
  const size_t values[] = {d->parts, d->batch, d->seqlen, d->heads, d->head_dim};
  FCL_FORWARD_IF(fcl__check_sizes(names, values, 5, why, why_len));
  FCL_WHY_IF(d->head_dim > FCL_MAX_HEAD_DIM, FCL_ERROR_UNSUPPORTED,
         "head_dim = %zu exceeds FCL_MAX_HEAD_DIM = %d", d->head_dim, FCL_MAX_HEAD_DIM);
  sh.elem_size = fcl_dtype_size(d->dtype);
  FCL_WHY_IF(sh.elem_size == 0, FCL_ERROR_INVALID_ARGUMENT, "dtype = %d is not an fcl_dtype",
         (int)d->dtype);
  size_t scratch;
  FCL_WHY_IF(mul_add_overflows(d->batch, d->seqlen, 0, &sh.rows) ||
             mul_add_overflows(sh.rows, d->heads, 0, &sh.rows) ||
             mul_add_overflows(sh.rows, d->parts, 0, &scratch) ||
             mul_add_overflows(scratch, d->head_dim, 0, &scratch),
         FCL_ERROR_INVALID_SHAPE, "batch %zu x seqlen %zu x heads %zu x parts %zu overflows",
         d->batch, d->seqlen, d->heads, d->parts);
  sh.lse_per_part = sh.rows;
  sh.sinks_bytes = d->sinks ? d->heads * sizeof(float) : 0;

  /* The views: one part's, then the parts one stride apart. */
  const fcl__view_extent e = {.batch = d->batch, .tokens = d->seqlen, .heads = d->heads,
                              .head_dim = d->head_dim, .elem_size = sh.elem_size};
  size_t part_span, o_span;
  sh.o_parts = fcl__resolve_layout(&d->o_parts, d->batch, d->seqlen, d->heads, d->head_dim, 0);
  sh.o = fcl__resolve_layout(&d->o, d->batch, d->seqlen, d->heads, d->head_dim, 0);
  FCL_FORWARD_IF(fcl__check_layout(&sh.o_parts, &e, "o_parts", &part_span, why, why_len));
  FCL_FORWARD_IF(fcl__check_layout(&sh.o, &e, "o", &o_span, why, why_len));
  const size_t part_elems = part_span / sh.elem_size - sh.o_parts.offset;  /* one part's extent */
  sh.o_part_stride = d->o_part_stride ? d->o_part_stride : part_elems;
  FCL_WHY_IF(d->parts > 1 && sh.o_part_stride < part_elems, FCL_ERROR_INVALID_ARGUMENT,
         "o_part_stride = %zu elements: parts would overlap (each spans %zu)",
         sh.o_part_stride, part_elems);
  sh.lse_part_stride = d->lse_part_stride ? d->lse_part_stride : sh.lse_per_part;
  FCL_WHY_IF(d->parts > 1 && sh.lse_part_stride < sh.lse_per_part, FCL_ERROR_INVALID_SHAPE,
         "lse_part_stride = %zu floats is below one part's LSE, batch x heads x seqlen = %zu",
         sh.lse_part_stride, sh.lse_per_part);
  size_t o_parts_elems, lse_parts_floats;
  FCL_WHY_IF(mul_add_overflows(d->parts - 1, sh.o_part_stride, part_span / sh.elem_size,
                           &o_parts_elems) ||
             o_parts_elems > SIZE_MAX / sh.elem_size ||
             mul_add_overflows(d->parts - 1, sh.lse_part_stride, sh.lse_per_part,
                               &lse_parts_floats) ||
             lse_parts_floats > SIZE_MAX / sizeof(float),
         FCL_ERROR_INVALID_SHAPE, "the parts span more than size_t can count");
  sh.sizes = (fcl_merge_sizes){.o_parts = o_parts_elems * sh.elem_size,
                               .lse_parts = lse_parts_floats * sizeof(float),
                               .o = o_span,
                               .lse = sh.lse_per_part * sizeof(float)};
  sh.vec4 = d->head_dim % 4 == 0 && sh.o_part_stride % 4 == 0 &&
            fcl__layout_vec4(&sh.o_parts) && fcl__layout_vec4(&sh.o);
  sh.layout_parts = d->parts;
  if (shape) *shape = sh;
  return FCL_SUCCESS;
}

fcl_status fcl_merge_buffer_sizes(const fcl_merge_desc *desc, fcl_merge_sizes *out, char *why,
                                  size_t why_len) {
  fcl__merge_shape sh;
  if (why && why_len) why[0] = '\0';
  FCL_WHY_IF(!out, FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
  FCL_FORWARD_IF(fcl__check_merge_why(desc, &sh, why, why_len));
  *out = sh.sizes;
  return FCL_SUCCESS;
}

void fcl__merge_options(const fcl__merge_layout *layout, fcl_dtype dtype, cl_mem io_counter,
                        fcl__options *opts) {
  fcl__options_init(opts);
  fcl__options_define(opts, "FCL_DTYPE", (long)dtype);
  fcl__options_define(opts, "HEAD_DIM_MAX", (long)layout->head_dim_max);
  fcl__options_define(opts, "WG_SIZE", (long)layout->wg_size);
  fcl__options_define(opts, "PART_LOADS", (long)layout->part_loads);
  fcl__options_define(opts, "PART_GROUPS", (long)layout->part_groups);
  fcl__options_define(opts, "ROWS", (long)layout->rows);
  fcl__options_count_io(opts, io_counter);
}

fcl_status fcl__merge_prepare(fcl_context *ctx, const fcl__merge_shape *sh, cl_mem o_parts,
                              cl_mem lse_parts, cl_mem o, cl_mem lse, cl_mem io_counter,
                              fcl__merge_run *run) {
  run->kernel = NULL;
  const fcl__merge_layout layout =
      fcl__merge_layout_of(&ctx->info.limits, sh->desc.head_dim, sh->layout_parts);
  /* a row's lanes of four columns are within one work-group */
  FCL_RETURN_IF(ctx, !fcl__merge_takes(&ctx->info.limits, sh->desc.head_dim), FCL_ERROR_UNSUPPORTED,
                "the merge takes head_dim up to %u on %s (four columns a work-item of a "
                "work-group of %u), not %zu",
                4 * layout.wg_size, ctx->info.name, layout.wg_size, sh->desc.head_dim);
  FCL_RETURN_IF(ctx, ctx->info.limits.max_work_group_size < layout.wg_size,
                FCL_ERROR_UNSUPPORTED, "the merge needs work-groups of %u; %s allows %zu",
                layout.wg_size, ctx->info.name, ctx->info.limits.max_work_group_size);
  const size_t groups = (sh->rows + layout.rows - 1) / layout.rows;
  FCL_RETURN_IF(ctx, groups > (size_t)INT32_MAX, FCL_ERROR_INVALID_SHAPE,
                "the merge needs %zu work-groups; at most %d fit", groups, INT32_MAX);
  fcl__options opts;
  fcl__merge_options(&layout, sh->desc.dtype, io_counter, &opts);
  cl_kernel kernel;
  FCL_FORWARD_IF(fcl__kernel(ctx, FCL_SRC_MERGE, &opts, "merge_states", &kernel));
  const fcl_merge_params p = {.o_parts = fcl__view_of(&sh->o_parts),
                              .o = fcl__view_of(&sh->o),
                              .o_part_stride = sh->o_part_stride,
                              .lse_part_stride = sh->lse_part_stride,
                              .rows = sh->rows,
                              .parts = sh->desc.parts,
                              .seqlen = sh->desc.seqlen,
                              .heads = sh->desc.heads,
                              .head_dim = sh->desc.head_dim,
                              .vec4 = (cl_ulong)sh->vec4};
  const fcl__arg args[] = {FCL_ARG(o_parts), FCL_ARG(lse_parts),    FCL_ARG(o), FCL_ARG(lse),
                           FCL_ARG(sh->desc.sinks), FCL_ARG(p), FCL_ARG(io_counter)};
  const fcl_status status = fcl__set_args(ctx, kernel, "merge_states", args, io_counter ? 7 : 6);
  if (status != FCL_SUCCESS) {
    fcl__kernel_return(ctx, &kernel);
    return status;
  }
  run->kernel = kernel;
  run->global = groups * layout.wg_size;
  run->local = layout.wg_size;
  return FCL_SUCCESS;
}

fcl_status fcl__merge_launch(fcl_context *ctx, const fcl__merge_run *run) {
  return fcl__launch(ctx, run->kernel, "merge_states", 1, &run->global, &run->local);
}

void fcl__merge_release(fcl_context *ctx, fcl__merge_run *run) {
  fcl__kernel_return(ctx, &run->kernel);
}

fcl_status fcl_merge_states(fcl_context *ctx, const fcl_merge_desc *desc, cl_mem o_parts,
                            cl_mem lse_parts, cl_mem o, cl_mem lse, fcl_run_info *info) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  fcl__merge_shape sh;
  char why[256];
  fcl_status status = fcl__check_merge_why(desc, &sh, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "%s", why);
  const fcl__call_buffer args[] = {
      {o_parts, "o_parts", sh.sizes.o_parts, 0, fcl__range_view(sh.sizes.o_parts)},
      {lse_parts, "lse_parts", sh.sizes.lse_parts, 0, fcl__range_view(sh.sizes.lse_parts)},
      {sh.desc.sinks, "sinks", sh.sinks_bytes, 1, fcl__range_view(sh.sinks_bytes)},
      {o, "o", sh.sizes.o, 0,
       fcl__layout_view(&sh.o, sh.sizes.o, sh.elem_size, sh.desc.batch, sh.desc.heads,
                        sh.desc.head_dim, 0)},
      {lse, "lse", sh.sizes.lse, 1, fcl__range_view(sh.sizes.lse)}};
  FCL_FORWARD_IF(fcl__check_call_buffers(ctx, args, 3, 5, NULL));

  fcl__measure m;
  fcl__timer *timer;
  cl_mem io_counter;
  status = fcl__measure_begin(ctx, &m, info, &timer, &io_counter);
  fcl__merge_run run = {0};
  if (status == FCL_SUCCESS)
    status = fcl__merge_prepare(ctx, &sh, o_parts, lse_parts, o, lse, io_counter, &run);
  if (status == FCL_SUCCESS) status = fcl__timer_start(ctx, timer);
  if (status == FCL_SUCCESS) status = fcl__merge_launch(ctx, &run);
  fcl__merge_release(ctx, &run);
  status = fcl__measure_end(ctx, &m, status);
  if (status != FCL_SUCCESS || !info) return status;
  const fcl__io model = fcl__io_merge(&sh, lse != NULL);
  memset(info, 0, sizeof *info);
  info->ms = m.ms;
  info->flops = 3.0 * (double)sh.rows * (double)sh.desc.parts * (double)sh.desc.head_dim;
  info->bytes_model = fcl__io_total(model);
  if (m.counting) info->bytes_counted = m.counted;
  return FCL_SUCCESS;
}
