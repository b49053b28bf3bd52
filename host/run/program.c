/*
 * program.c — run-time compilation of the embedded .cl sources with -D
 * options, and the context's cache of built programs, keyed by (source,
 * options; a context has one device, so the device is part of the key
 * implicitly), with the kernel objects each program's calls lease.
 */
#include "common.h"
#include "context.h"
#include "file.h"
#include "errors.h"
#include "resources.h"
#include "program.h"
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FCL_EXTRA_KERNEL_OPTIONS
#define FCL_EXTRA_KERNEL_OPTIONS ""
#endif

/* Generated at build time from the files in cl/ (cmake/embed_sources.cmake). */
extern const char fcl__cl_params[];
extern const char fcl__cl_kvquant[];
extern const char fcl__cl_traits[];
extern const char fcl__cl_common[];
extern const char fcl__cl_blocks[];
extern const char fcl__cl_flash_fwd[];
extern const char fcl__cl_flash_fwd_mma[];
extern const char fcl__cl_flash_fwd_decode[];
extern const char fcl__cl_flash_fwd_decode_mma[];
extern const char fcl__cl_flash_fwd_decode_wide[];
extern const char fcl__cl_flash_fwd_cpu[];
extern const char fcl__cl_flash_bwd_cpu[];
extern const char fcl__cl_cpu[];
extern const char fcl__cl_mma[];
extern const char fcl__cl_softmax[];
extern const char fcl__cl_peaks[];
extern const char fcl__cl_flash_bwd[];
extern const char fcl__cl_flash_bwd_rows[];
extern const char fcl__cl_flash_bwd_mma[];
extern const char fcl__cl_flash_bwd_pre[];
extern const char fcl__cl_convert[];
extern const char fcl__cl_mma_probe[];
extern const char fcl__cl_params_probe[];
extern const char fcl__cl_merge[];
extern const char fcl__cl_cache[];
extern const char fcl__cl_wgmma_probe[];
extern const char fcl__cl_wgmma[];
extern const char fcl__cl_decode_quad[];
extern const char fcl__cl_flash_fwd_wgmma[];

/* Each program is these texts, then the source's prelude if it has one,
 * and the source. */
static const char *const shared_texts[] = {fcl__cl_params, fcl__cl_kvquant, fcl__cl_traits, fcl__cl_common,
                                           fcl__cl_blocks};
#define N_SHARED_TEXTS (sizeof shared_texts / sizeof shared_texts[0])

static const struct {
  const char *text;
  const char *file;
  const char *prelude;       /* text */
  const char *prelude_file;
  /* a second prelude, after the first (wgmma.cl or decode_quad.cl after
   * mma.cl), or NULL */
  const char *helpers;
} sources[FCL_SRC_COUNT] = {
    [FCL_SRC_FLASH_FWD] = {fcl__cl_flash_fwd, "flash_fwd.cl", NULL, NULL},
    [FCL_SRC_FLASH_FWD_MMA] = {fcl__cl_flash_fwd_mma, "flash_fwd_mma.cl", fcl__cl_mma, "mma.cl"},
    [FCL_SRC_SOFTMAX] = {fcl__cl_softmax, "softmax.cl", NULL, NULL},
    [FCL_SRC_PEAKS] = {fcl__cl_peaks, "peaks.cl", NULL, NULL},
    [FCL_SRC_FLASH_BWD] = {fcl__cl_flash_bwd, "flash_bwd.cl", fcl__cl_flash_bwd_rows,
                           "flash_bwd_rows.cl"},
    [FCL_SRC_FLASH_BWD_MMA] = {fcl__cl_flash_bwd_mma, "flash_bwd_mma.cl", fcl__cl_mma, "mma.cl"},
    [FCL_SRC_FLASH_BWD_PRE] = {fcl__cl_flash_bwd_pre, "flash_bwd_pre.cl", NULL, NULL},
    [FCL_SRC_CONVERT] = {fcl__cl_convert, "convert.cl", NULL, NULL},
    [FCL_SRC_MMA_PROBE] = {fcl__cl_mma_probe, "mma_probe.cl", fcl__cl_mma, "mma.cl"},
    [FCL_SRC_PARAMS_PROBE] = {fcl__cl_params_probe, "params_probe.cl", NULL, NULL},
    [FCL_SRC_MERGE] = {fcl__cl_merge, "merge.cl", NULL, NULL},
    [FCL_SRC_CACHE] = {fcl__cl_cache, "cache.cl", NULL, NULL},
    [FCL_SRC_FLASH_FWD_DECODE] = {fcl__cl_flash_fwd_decode, "flash_fwd_decode.cl", NULL, NULL},
    [FCL_SRC_FLASH_FWD_DECODE_MMA] = {fcl__cl_flash_fwd_decode_mma, "flash_fwd_decode_mma.cl",
                                      fcl__cl_mma, "mma.cl", fcl__cl_decode_quad},
    [FCL_SRC_FLASH_FWD_DECODE_WIDE] = {fcl__cl_flash_fwd_decode_wide, "flash_fwd_decode_wide.cl",
                                       fcl__cl_mma, "mma.cl"},
    [FCL_SRC_FLASH_FWD_CPU] = {fcl__cl_flash_fwd_cpu, "flash_fwd_cpu.cl", fcl__cl_cpu, "cpu.cl"},
    [FCL_SRC_FLASH_BWD_CPU] = {fcl__cl_flash_bwd_cpu, "flash_bwd_cpu.cl", fcl__cl_cpu, "cpu.cl"},
    [FCL_SRC_WGMMA_PROBE] = {fcl__cl_wgmma_probe, "wgmma_probe.cl", fcl__cl_mma, "mma.cl",
                             fcl__cl_wgmma},
    [FCL_SRC_FLASH_FWD_WGMMA] = {fcl__cl_flash_fwd_wgmma, "flash_fwd_wgmma.cl", fcl__cl_mma,
                                 "mma.cl", fcl__cl_wgmma},
};

const char *fcl__source_file(fcl__source source) { return sources[source].file; }
const char *fcl__source_prelude_file(fcl__source source) { return sources[source].prelude_file; }

static uint64_t fnv1a(uint64_t h, const char *text) {
  for (const unsigned char *s = (const unsigned char *)text; s && *s; ++s)
    h = (h ^ *s) * 0x100000001b3ull;
  return h;
}

/* Hashed once: the texts are constant, and every database read needs it. */
static char fingerprint[17];
static pthread_once_t fingerprint_once = PTHREAD_ONCE_INIT;

static void hash_kernels(void) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < N_SHARED_TEXTS; ++i) h = fnv1a(h, shared_texts[i]);
  for (int i = 0; i < FCL_SRC_COUNT; ++i)
    h = fnv1a(fnv1a(fnv1a(h, sources[i].prelude), sources[i].helpers), sources[i].text);
  snprintf(fingerprint, sizeof fingerprint, "%016llx", (unsigned long long)h);
}

void fcl__kernels_fingerprint(char out[17]) {
  pthread_once(&fingerprint_once, hash_kernels);
  memcpy(out, fingerprint, sizeof fingerprint);
}

/* A kernel object kept with its program between calls: creating one
 * costs microseconds on NVIDIA's driver and over a hundred on PoCL's, a
 * decode call's whole budget. A call leases it exclusively (its arguments
 * are the call's from setting them to enqueueing), and gives it back. */
typedef struct kernel_slot {
  char name[48];
  cl_kernel kernel;
  int leased;
} kernel_slot;
/* Kernels kept per program: its kernels (up to 2) for two threads' calls. */
#define KERNEL_SLOTS 4

/* One variant: compiled (program set) or being compiled by one thread
 * (program NULL), which others needing it wait for. */
struct fcl__program_entry {
  fcl__source source;
  char *options;
  cl_program program;
  kernel_slot kernels[KERNEL_SLOTS];
  fcl__program_entry *next;
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

/* Where FLASHCL_BUILD_LOG asks each build's log to go: NULL when unset,
 * "-" for stderr, else a file appended to. */
static const char *build_log_target(void) { return fcl__knob_file("FLASHCL_BUILD_LOG"); }

fcl_status fcl__program_options(const fcl_device_limits *limits, const fcl__options *opts,
                                int verbose, fcl__options *all) {
  fcl__options_init(all);
  fcl__options_flag(all, opts->text);
  fcl__options_flag(all, "-cl-std=CL1.2");
  if (limits->nvidia_ptx) fcl__options_define(all, "FCL_NVIDIA_PTX", 1);
  /* the compute capability, x 10: the instructions a kernel may issue */
  if (limits->nvidia_ptx && limits->nvidia_sm)
    fcl__options_define(all, "FCL_NVIDIA_SM", (long)limits->nvidia_sm);
  /* The shuffles the row sums may use, and their width (plan.h's
   * fcl__sums_by_shuffle, which the plans' local bytes follow). */
  if (fcl__shuffle_width(limits)) {
    fcl__options_define(all, "FCL_SHUFFLE", (long)limits->shuffle);
    fcl__options_define(all, "FCL_SHUFFLE_WIDTH", (long)fcl__shuffle_width(limits));
  }
  /* ptxas's registers, spills and shared memory, into the build log. */
  if (limits->nvidia_ptx && verbose) fcl__options_flag(all, "-cl-nv-verbose");
  if (!limits->is_gpu) fcl__options_define(all, "FCL_UNROLL", 0);
  /* Intel: the planned sub-group and the large register file, which the
   * planner's register budget assumes (plan.c). */
  if (limits->vendor == FCL_VENDOR_INTEL && limits->sub_group_size) {
    fcl__options_define(all, "FCL_SUB_GROUP_SIZE", (long)limits->sub_group_size);
    fcl__options_flag(all, "-cl-intel-256-GRF-per-thread");
  }
  /* Build-time knob for tuning experiments (cmake -DFLASHCL_KERNEL_DEFINES). */
  if (FCL_EXTRA_KERNEL_OPTIONS[0]) fcl__options_flag(all, FCL_EXTRA_KERNEL_OPTIONS);
  return opts->overflow || all->overflow ? FCL_ERROR_INVALID_ARGUMENT : FCL_SUCCESS;
}

/* The entry of a variant, built or being built; the caller holds
 * ctx->cache_lock. */
static fcl__program_entry *cache_find(fcl_context *ctx, fcl__source source,
                                      const char *options) {
  for (fcl__program_entry *e = ctx->programs; e; e = e->next)
    if (e->source == source && !strcmp(e->options, options)) return e;
  return NULL;
}

/* A new entry for a variant this thread is about to build; the caller
 * holds ctx->cache_lock. NULL when host memory ran out. */
static fcl__program_entry *cache_claim(fcl_context *ctx, fcl__source source,
                                       const char *options) {
  fcl__program_entry *e = fcl__calloc(ctx, 1, sizeof *e);
  const size_t n = strlen(options) + 1;
  char *copy = e ? fcl__malloc(ctx, n) : NULL;
  if (!copy) {
    fcl__free(e);
    return NULL;
  }
  memcpy(copy, options, n);
  e->source = source;
  e->options = copy;
  e->next = ctx->programs;
  ctx->programs = e;
  return e;
}

/* Forgets an entry whose build failed, so that the next call builds it
 * again; the caller holds ctx->cache_lock. */
static void cache_drop(fcl_context *ctx, fcl__program_entry *gone) {
  for (fcl__program_entry **at = &ctx->programs; *at; at = &(*at)->next)
    if (*at == gone) {
      *at = gone->next;
      break;
    }
  fcl__free(gone->options);
  fcl__free(gone);
}

/* One record per successful build where FLASHCL_BUILD_LOG asks for it:
 * "== file options" and the log. */
static void write_build_log(fcl_context *ctx, fcl__source source, const char *options,
                            cl_program program) {
  const char *target = build_log_target();
  if (!target) return;
  char why[600];
  FILE *f = strcmp(target, "-") ? fcl__append_file(target, why, sizeof why) : stderr;
  if (!f) {
    fcl__log(ctx, "FLASHCL_BUILD_LOG: %s", why);
    return;
  }
  char *log = fcl__program_build_log(ctx, program);
  fprintf(f, "== %s %s\n%s\n", sources[source].file, options, log ? log : "");
  fcl__free(log);
  if (f != stderr) fclose(f);
  else fflush(f);
}

/* FLASHCL_BUILD_PTX=FILE: each successful build's binary (on NVIDIA's
 * driver, the PTX its compiler wrote), after "== file options", appended
 * there, to assemble and read offline (scripts/driver-ptx.sh). Read per
 * build; the binary only where it is set. */
static void write_build_binary(fcl_context *ctx, fcl__source source, const char *options,
                               cl_program program) {
  if (!fcl__knob_file("FLASHCL_BUILD_PTX")) return;  /* spares reading the binary */
  char why[600], header[1200];
  size_t size = 0;
  char *binary = fcl__program_binary(ctx, program, &size, why, sizeof why);
  if (!binary) {
    fcl__log(ctx, "FLASHCL_BUILD_PTX: %s", why);
    return;
  }
  snprintf(header, sizeof header, "== %s %s", sources[source].file, options);
  fcl__append_binary(ctx, "FLASHCL_BUILD_PTX", header, binary, size);
  fcl__free(binary);
}

/* The texts of `source`'s program, in order. @return how many. */
static cl_uint program_texts(fcl__source source, const char *texts[FCL__PROGRAM_TEXTS_MAX]) {
  cl_uint n = 0;
  for (size_t i = 0; i < N_SHARED_TEXTS; ++i) texts[n++] = shared_texts[i];
  if (sources[source].prelude) texts[n++] = sources[source].prelude;
  if (sources[source].helpers) texts[n++] = sources[source].helpers;
  texts[n++] = sources[source].text;
  return n;
}

size_t fcl__program_texts_of(const char *file, const char *texts[FCL__PROGRAM_TEXTS_MAX]) {
  for (int i = 0; i < FCL_SRC_COUNT; ++i)
    if (file && !strcmp(file, sources[i].file)) return program_texts((fcl__source)i, texts);
  return 0;
}

/* Compiles one program from its source; records the build log as the
 * error on failure. */
static fcl_status compile(fcl_context *ctx, fcl__source source, const char *options,
                          cl_program *out) {
  const char *texts[FCL__PROGRAM_TEXTS_MAX];
  const cl_uint n_texts = program_texts(source, texts);
  cl_program program;
  FCL_FORWARD_IF(fcl__create_program(ctx, n_texts, texts, &program));
  cl_int err = fcl__build_program(ctx, program, options);
  if (err == CL_SUCCESS) {
    *out = program;
    return FCL_SUCCESS;
  }
  char *log = fcl__program_build_log(ctx, program);
  clReleaseProgram(program);
  fcl_status status = fcl__fail(
      ctx, err == CL_OUT_OF_HOST_MEMORY ? FCL_ERROR_OUT_OF_MEMORY : FCL_ERROR_BUILD_FAILED,
      "building %s with \"%s\" failed: %s (%d)\n%s", sources[source].file,
      options, fcl__cl_error_name(err), (int)err, log ? log : "");
  fcl__free(log);
  return status;
}

void fcl__sm90a_force(fcl_context *ctx, int force) {
  pthread_mutex_lock(&ctx->lock);
  ctx->sm90a_forced = force;
  pthread_mutex_unlock(&ctx->lock);
}

/* A program that asks for the sm_90a stage (program.h): built with it
 * where the device allows and the stage succeeds, else with FCL_WGMMA=0
 * and a line in the context's log; fails only as that build does. */
static fcl_status build_sm90a(fcl_context *ctx, fcl__source source, const char *options,
                              cl_program *out) {
  char why[600] = "";
  pthread_mutex_lock(&ctx->lock);
  const int forced = ctx->sm90a_forced;
  pthread_mutex_unlock(&ctx->lock);
  if (fcl__sm90a_device(&ctx->info.limits, why, sizeof why) || forced) {
    cl_program marked = NULL;
    if (compile(ctx, source, options, &marked) == FCL_SUCCESS) {
      const fcl_status status = fcl__sm90a_rebuild(ctx, marked, options, out, why, sizeof why);
      clReleaseProgram(marked);
      if (status == FCL_SUCCESS) return FCL_SUCCESS;
    } else {
      char line[256];
      fcl__build_log_line(fcl_context_last_error(ctx), line, sizeof line);
      snprintf(why, sizeof why, "building the marked source: %s", line);
    }
  }
  char fallback[sizeof ((fcl__options *)0)->text];
  if (fcl__sm90a_fallback_options(options, fallback, sizeof fallback))
    return fcl__fail(ctx, FCL_ERROR_INVALID_ARGUMENT, "build options too long: %s", options);
  fcl__log(ctx, "%s: no sm_90a build (%s); built with FCL_WGMMA=0 (mma.sync) instead",
           sources[source].file, why);
  return compile(ctx, source, fallback, out);
}

/* Builds one program, through the sm_90a stage where its options ask for
 * it, and writes its log where FLASHCL_BUILD_LOG asks (and its binary
 * where FLASHCL_BUILD_PTX does). */
static fcl_status build(fcl_context *ctx, fcl__source source, const char *options,
                        cl_program *out) {
  FCL_FORWARD_IF(fcl__sm90a_asked(options) ? build_sm90a(ctx, source, options, out)
                                           : compile(ctx, source, options, out));
  write_build_log(ctx, source, options, *out);
  write_build_binary(ctx, source, options, *out);
  return FCL_SUCCESS;
}

long fcl__program_builds(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->cache_lock);
  long n = ctx->program_builds;
  pthread_mutex_unlock(&ctx->cache_lock);
  return n;
}

long fcl__program_entries(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->cache_lock);
  long n = 0;
  for (const fcl__program_entry *e = ctx->programs; e; e = e->next) ++n;
  pthread_mutex_unlock(&ctx->cache_lock);
  return n;
}

/* The variant's program: from the cache, after waiting for the thread
 * that builds it, or built here. The cache's lock is never held across a
 * compile, so that a thread whose variant is built, or which builds
 * another, never waits for this one. */
static fcl_status cached_program(fcl_context *ctx, fcl__source source, const char *options,
                                 fcl__program_entry **out) {
  pthread_mutex_lock(&ctx->cache_lock);
  fcl__program_entry *e;
  while ((e = cache_find(ctx, source, options)) != NULL && !e->program)
    pthread_cond_wait(&ctx->cache_built, &ctx->cache_lock);
  if (e) {
    *out = e;
    pthread_mutex_unlock(&ctx->cache_lock);
    return FCL_SUCCESS;
  }
  e = cache_claim(ctx, source, options);
  pthread_mutex_unlock(&ctx->cache_lock);
  FCL_RETURN_IF(ctx, !e, FCL_ERROR_OUT_OF_MEMORY, "out of host memory caching a program");

  cl_program program = NULL;
  const fcl_status status = build(ctx, source, options, &program);
  pthread_mutex_lock(&ctx->cache_lock);
  if (status == FCL_SUCCESS) {
    e->program = program;
    ctx->program_builds++;
  } else {
    cache_drop(ctx, e);  /* a waiting thread builds it again, and fails on its own */
    e = NULL;
  }
  pthread_cond_broadcast(&ctx->cache_built);
  pthread_mutex_unlock(&ctx->cache_lock);
  *out = e;
  return status;
}

/* A kept kernel `name` of the entry, leased; or a new one, kept in a free
 * slot when there is one (entries are never freed before the context). */
static fcl_status lease_kernel(fcl_context *ctx, fcl__program_entry *e, const char *name,
                               cl_kernel *kernel) {
  pthread_mutex_lock(&ctx->cache_lock);
  kernel_slot *empty = NULL;
  for (unsigned i = 0; i < KERNEL_SLOTS; ++i) {
    kernel_slot *k = &e->kernels[i];
    if (!k->kernel) {
      if (!empty && !k->leased) empty = k;  /* a leased one is being created */
    } else if (!k->leased && !strcmp(k->name, name)) {
      k->leased = 1;
      *kernel = k->kernel;
      pthread_mutex_unlock(&ctx->cache_lock);
      return FCL_SUCCESS;
    }
  }
  if (strlen(name) >= sizeof empty->name) empty = NULL;  /* not kept */
  if (empty) empty->leased = 1;  /* reserved while the kernel is created */
  pthread_mutex_unlock(&ctx->cache_lock);
  const fcl_status status = fcl__create_kernel(ctx, e->program, name, kernel);
  if (!empty) return status;
  pthread_mutex_lock(&ctx->cache_lock);
  if (status == FCL_SUCCESS) {
    memcpy(empty->name, name, strlen(name) + 1);
    empty->kernel = *kernel;
  } else {
    empty->leased = 0;
  }
  pthread_mutex_unlock(&ctx->cache_lock);
  return status;
}

fcl_status fcl__kernel(fcl_context *ctx, fcl__source source,
                       const fcl__options *opts, const char *name,
                       cl_kernel *kernel) {
  *kernel = NULL;
  fcl__options all;
  FCL_RETURN_IF(ctx,
                fcl__program_options(&ctx->info.limits, opts, build_log_target() != NULL,
                                     &all) != FCL_SUCCESS,
                FCL_ERROR_INVALID_ARGUMENT, "build options for %s are too long",
                sources[source].file);
  fcl__program_entry *e = NULL;
  FCL_FORWARD_IF(cached_program(ctx, source, all.text, &e));
  return lease_kernel(ctx, e, name, kernel);
}

void fcl__kernel_return(fcl_context *ctx, cl_kernel *kernel) {
  if (!*kernel) return;
  pthread_mutex_lock(&ctx->cache_lock);
  for (fcl__program_entry *e = ctx->programs; e && *kernel; e = e->next)
    for (unsigned i = 0; i < KERNEL_SLOTS; ++i)
      if (e->kernels[i].kernel == *kernel && e->kernels[i].leased) {
        e->kernels[i].leased = 0;
        *kernel = NULL;
        break;
      }
  pthread_mutex_unlock(&ctx->cache_lock);
  if (*kernel) clReleaseKernel(*kernel);  /* one made when every slot was taken */
  *kernel = NULL;
}

void fcl__programs_release(fcl_context *ctx) {
  while (ctx->programs) {
    fcl__program_entry *e = ctx->programs;
    ctx->programs = e->next;
    for (unsigned i = 0; i < KERNEL_SLOTS; ++i)
      if (e->kernels[i].kernel) clReleaseKernel(e->kernels[i].kernel);
    if (e->program) clReleaseProgram(e->program);
    fcl__free(e->options);
    fcl__free(e);
  }
}
