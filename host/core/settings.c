/*
 * settings.c — what a caller sets on a context and reads back: the scratch
 * cap, the block table's checks, I/O counting, the tuned plans' folder and
 * use, and the context's log. Each setter takes the context's lock; a call
 * reads them all at once (fcl__context_settings).
 */
#include "context.h"
#include "errors.h"
#include "problem.h"
#include "tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Default scratch cap as a share of global memory: leaves room for the
 * caller's tensors and for CLBlast's own temporaries. */
#define FCL_DEFAULT_SCRATCH_SHARE 0.4

fcl_status fcl_context_set_scratch_limit(fcl_context *ctx, uint64_t bytes) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.scratch_limit = bytes;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}

uint64_t fcl__default_scratch_limit(const fcl_device_limits *limits) {
  return (uint64_t)((double)limits->global_mem_bytes * FCL_DEFAULT_SCRATCH_SHARE);
}

fcl__settings fcl__context_settings(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  fcl__settings settings = ctx->settings;
  pthread_mutex_unlock(&ctx->lock);
  return settings;
}

uint64_t fcl__scratch_limit(const fcl_context *ctx) {
  fcl__settings settings = fcl__context_settings((fcl_context *)ctx);
  if (settings.scratch_limit) return settings.scratch_limit;
  return fcl__default_scratch_limit(&ctx->info.limits);
}

fcl_status fcl_context_set_block_table_checks(fcl_context *ctx, int enable) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, enable != 0 && enable != 1, FCL_ERROR_INVALID_ARGUMENT,
                "block table checks must be 0 or 1, got %d", enable);
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.table_unchecked = !enable;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}

fcl_status fcl_context_set_count_io(fcl_context *ctx, int enable) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, enable != 0 && enable != 1, FCL_ERROR_INVALID_ARGUMENT,
                "count_io must be 0 or 1, got %d", enable);
  FCL_RETURN_IF(ctx, enable && !ctx->info.limits.has_int64_atomics,
                FCL_ERROR_UNSUPPORTED,
                "I/O counting needs cl_khr_int64_base_atomics, which %s lacks",
                ctx->info.name);
  pthread_mutex_lock(&ctx->lock);
  ctx->settings.count_io = enable;
  pthread_mutex_unlock(&ctx->lock);
  return FCL_SUCCESS;
}

fcl_status fcl_context_set_tuning_dir(fcl_context *ctx, const char *dir) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, dir && !*dir, FCL_ERROR_INVALID_ARGUMENT,
                "the tuning folder is an empty string (NULL means the default)");
  fcl__tuning_load(ctx, dir);
  return FCL_SUCCESS;
}

fcl_status fcl_context_use_tuned_plans(fcl_context *ctx, int enable) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, enable != 0 && enable != 1, FCL_ERROR_INVALID_ARGUMENT,
                "enable must be 0 or 1, got %d", enable);
  fcl__tuning *fresh = NULL;
  pthread_mutex_lock(&ctx->lock);
  if (!ctx->tuning) ctx->tuning = fresh = calloc(1, sizeof *fresh);
  if (ctx->tuning) ctx->tuning->enabled = enable;
  const int ok = ctx->tuning != NULL;
  pthread_mutex_unlock(&ctx->lock);
  FCL_RETURN_IF(ctx, !ok, FCL_ERROR_OUT_OF_MEMORY, "the tuning state: out of host memory");
  return FCL_SUCCESS;
}

fcl_status fcl_context_tuning(fcl_context *ctx, fcl_tuning_info *out) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, !out, FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&ctx->lock);
  out->enabled = !ctx->tuning || ctx->tuning->enabled;
  if (ctx->tuning) {
    out->plans = ctx->tuning->count;
    snprintf(out->source, sizeof out->source, "%s", ctx->tuning->source);
  }
  pthread_mutex_unlock(&ctx->lock);
  fcl__tuning_file_name(&ctx->info, out->file_name, sizeof out->file_name);
  return FCL_SUCCESS;
}
