/*
 * program.c — run-time compilation of the embedded .cl sources with -D
 * options, and the context's cache of built programs, keyed by (source,
 * options); a context has one device, so the device is part of the key
 * implicitly.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FCL_EXTRA_KERNEL_OPTIONS
#define FCL_EXTRA_KERNEL_OPTIONS ""
#endif

/* Generated at build time from the files in cl/ (cmake/embed_sources.cmake). */
extern const char fcl__cl_common[];
extern const char fcl__cl_flash_fwd[];
extern const char fcl__cl_flash_fwd_mma[];
extern const char fcl__cl_mma[];
extern const char fcl__cl_softmax[];
extern const char fcl__cl_peaks[];
extern const char fcl__cl_flash_bwd[];
extern const char fcl__cl_flash_bwd_rows[];
extern const char fcl__cl_flash_bwd_mma[];
extern const char fcl__cl_flash_bwd_pre[];
extern const char fcl__cl_convert[];
extern const char fcl__cl_mma_probe[];

/* Each program is common.cl, the source's prelude if it has one, and the
 * source. */
static const struct {
  const char *text;
  const char *file;
  const char *prelude;
} sources[FCL_SRC_COUNT] = {
    [FCL_SRC_FLASH_FWD] = {fcl__cl_flash_fwd, "flash_fwd.cl", NULL},
    [FCL_SRC_FLASH_FWD_MMA] = {fcl__cl_flash_fwd_mma, "flash_fwd_mma.cl", fcl__cl_mma},
    [FCL_SRC_SOFTMAX] = {fcl__cl_softmax, "softmax.cl", NULL},
    [FCL_SRC_PEAKS] = {fcl__cl_peaks, "peaks.cl", NULL},
    [FCL_SRC_FLASH_BWD] = {fcl__cl_flash_bwd, "flash_bwd.cl", fcl__cl_flash_bwd_rows},
    [FCL_SRC_FLASH_BWD_MMA] = {fcl__cl_flash_bwd_mma, "flash_bwd_mma.cl", fcl__cl_mma},
    [FCL_SRC_FLASH_BWD_PRE] = {fcl__cl_flash_bwd_pre, "flash_bwd_pre.cl", NULL},
    [FCL_SRC_CONVERT] = {fcl__cl_convert, "convert.cl", NULL},
    [FCL_SRC_MMA_PROBE] = {fcl__cl_mma_probe, "mma_probe.cl", fcl__cl_mma},
};

struct fcl__program_entry {
  fcl__source source;
  char *options;
  cl_program program;
};

void fcl__options_init(fcl__options *opts) {
  opts->text[0] = '\0';
  opts->len = 0;
  opts->overflow = 0;
}

static void options_append(fcl__options *opts, const char *text) {
  size_t n = strlen(text);
  if (opts->len + n + 2 > sizeof opts->text) {
    opts->overflow = 1;
    return;
  }
  if (opts->len) opts->text[opts->len++] = ' ';
  memcpy(opts->text + opts->len, text, n + 1);
  opts->len += n;
}

void fcl__options_define(fcl__options *opts, const char *name, long value) {
  char item[128];
  snprintf(item, sizeof item, "-D%s=%ld", name, value);
  options_append(opts, item);
}

void fcl__options_flag(fcl__options *opts, const char *flag) {
  options_append(opts, flag);
}

void fcl__options_count_io(fcl__options *opts, cl_mem io_counter) {
  if (io_counter) fcl__options_define(opts, "FCL_COUNT_IO", 1);
}

/* Options every build on this context's device gets. */
static void context_options(const fcl_context *ctx, fcl__options *opts) {
  fcl__options_flag(opts, "-cl-std=CL1.2");
  if (ctx->info.limits.nvidia_ptx) fcl__options_define(opts, "FCL_NVIDIA_PTX", 1);
  if (!ctx->info.limits.is_gpu) fcl__options_define(opts, "FCL_UNROLL", 0);
  /* Build-time knob for tuning experiments (cmake -DFLASHCL_KERNEL_DEFINES). */
  if (FCL_EXTRA_KERNEL_OPTIONS[0]) fcl__options_flag(opts, FCL_EXTRA_KERNEL_OPTIONS);
}

/* Looks up a built program; the caller holds ctx->build_lock. */
static cl_program cache_find(fcl_context *ctx, fcl__source source,
                             const char *options) {
  for (size_t i = 0; i < ctx->n_programs; ++i)
    if (ctx->programs[i].source == source &&
        !strcmp(ctx->programs[i].options, options))
      return ctx->programs[i].program;
  return NULL;
}

/* Adds a program to the cache; the caller holds ctx->build_lock. */
static int cache_add(fcl_context *ctx, fcl__source source, const char *options,
                     cl_program program) {
  if (ctx->n_programs == ctx->cap_programs) {
    size_t cap = ctx->cap_programs ? 2 * ctx->cap_programs : 8;
    fcl__program_entry *grown = fcl__realloc(ctx, ctx->programs, cap * sizeof *grown);
    if (!grown) return 0;
    ctx->programs = grown;
    ctx->cap_programs = cap;
  }
  size_t n = strlen(options) + 1;
  char *copy = fcl__malloc(ctx, n);
  if (!copy) return 0;
  memcpy(copy, options, n);
  ctx->programs[ctx->n_programs++] = (fcl__program_entry){source, copy, program};
  return 1;
}

/* Compiles one program; records the build log as the error on failure. */
static fcl_status build(fcl_context *ctx, fcl__source source,
                        const char *options, cl_program *out) {
  const char *texts[3] = {fcl__cl_common, sources[source].text};
  cl_uint n_texts = 2;
  if (sources[source].prelude) {
    texts[1] = sources[source].prelude;
    texts[2] = sources[source].text;
    n_texts = 3;
  }
  cl_program program;
  FCL_FORWARD_IF(fcl__create_program(ctx, n_texts, texts, &program));
  ctx->program_builds++;
  cl_int err = fcl__build_program(ctx, program, options);
  if (err == CL_SUCCESS) {
    *out = program;
    return FCL_SUCCESS;
  }
  size_t log_size = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL,
                            &log_size) == CL_SUCCESS &&
      (log = fcl__malloc(ctx, log_size + 1)) != NULL &&
      clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, log_size,
                            log, NULL) == CL_SUCCESS)
    log[log_size] = '\0';
  else if (log)
    log[0] = '\0';
  clReleaseProgram(program);
  fcl_status status = fcl__fail(
      ctx, err == CL_OUT_OF_HOST_MEMORY ? FCL_ERROR_OUT_OF_MEMORY : FCL_ERROR_BUILD_FAILED,
      "building %s with \"%s\" failed: %s (%d)\n%s", sources[source].file,
      options, fcl__cl_error_name(err), (int)err, log ? log : "");
  fcl__free(log);
  return status;
}

long fcl__program_builds(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->build_lock);
  long n = ctx->program_builds;
  pthread_mutex_unlock(&ctx->build_lock);
  return n;
}

fcl_status fcl__kernel(fcl_context *ctx, fcl__source source,
                       const fcl__options *opts, const char *name,
                       cl_kernel *kernel) {
  *kernel = NULL;
  fcl__options all;
  fcl__options_init(&all);
  fcl__options_flag(&all, opts->text);
  context_options(ctx, &all);
  FCL_RETURN_IF(ctx, opts->overflow || all.overflow, FCL_ERROR_INVALID_ARGUMENT,
                "build options for %s are too long", sources[source].file);

  /* Builds run under the cache's lock: a second thread wanting the same
   * program waits for it instead of compiling it again. */
  fcl_status status = FCL_SUCCESS;
  pthread_mutex_lock(&ctx->build_lock);
  cl_program program = cache_find(ctx, source, all.text);
  if (!program) {
    status = build(ctx, source, all.text, &program);
    if (status == FCL_SUCCESS && !cache_add(ctx, source, all.text, program)) {
      clReleaseProgram(program);
      status = fcl__fail(ctx, FCL_ERROR_OUT_OF_MEMORY,
                         "out of host memory caching a program");
    }
  }
  pthread_mutex_unlock(&ctx->build_lock);
  FCL_FORWARD_IF(status);

  return fcl__create_kernel(ctx, program, name, kernel);
}

void fcl__programs_release(fcl_context *ctx) {
  for (size_t i = 0; i < ctx->n_programs; ++i) {
    clReleaseProgram(ctx->programs[i].program);
    fcl__free(ctx->programs[i].options);
  }
  fcl__free(ctx->programs);
  ctx->programs = NULL;
  ctx->n_programs = ctx->cap_programs = 0;
}
