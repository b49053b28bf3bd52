/*
 * program.h — the kernels' programs: build options and the program cache (program.c).
 */
#ifndef FCL_PROGRAM_H
#define FCL_PROGRAM_H

#include "common.h"
#include "context.h"

/** The embedded kernel sources; each is compiled after common.cl and blocks.cl. */
typedef enum fcl__source {
  FCL_SRC_FLASH_FWD = 0,
  FCL_SRC_SOFTMAX,
  FCL_SRC_PEAKS,
  FCL_SRC_FLASH_BWD,
  FCL_SRC_CONVERT,
  FCL_SRC_FLASH_FWD_MMA,
  FCL_SRC_FLASH_BWD_MMA,
  FCL_SRC_FLASH_BWD_PRE,
  FCL_SRC_MMA_PROBE,      /* tests/test_mma.c */
  FCL_SRC_PARAMS_PROBE,   /* tests/test_args.c */
  FCL_SRC_MERGE,
  FCL_SRC_CACHE,
  FCL_SRC_FLASH_FWD_DECODE,
  FCL_SRC_FLASH_FWD_DECODE_MMA,
  FCL_SRC_FLASH_FWD_CPU,
  FCL_SRC_FLASH_BWD_CPU,
  /* ---- Hopper's sm_90a instructions ---- */
  FCL_SRC_WGMMA_PROBE,    /* host/model/wgmma_probe.c */
  FCL_SRC_FLASH_FWD_WGMMA,
  FCL_SRC_FLASH_FWD_DECODE_WIDE,  /* the decode-mma family beyond 128 columns */
  FCL_SRC_COUNT
} fcl__source;

/** A growing "-D NAME=value" string for one build. */
typedef struct fcl__options {
  char text[1024];
  size_t len;
  int overflow;
} fcl__options;

void fcl__options_init(fcl__options *opts);
void fcl__options_define(fcl__options *opts, const char *name, long value);
void fcl__options_flag(fcl__options *opts, const char *flag);
/** Defines FCL_COUNT_IO when the call counts I/O (`io_counter` not NULL).
 *  Every kernel that takes FCL_IO_PARAM needs it in its options: the call,
 *  not the context, decides, so that a concurrent
 *  fcl_context_set_count_io() cannot build a kernel that disagrees with the
 *  call's arguments. */
void fcl__options_count_io(fcl__options *opts, cl_mem io_counter);

/** The options a program is built with on a device with `limits`: `opts`,
 *  then those every build on the device gets; `verbose` adds the vendor
 *  compiler's resource report (FLASHCL_BUILD_LOG). One function for the
 *  builds and for fcl_flash_programs, so that the two cannot differ.
 *  @return FCL_ERROR_INVALID_ARGUMENT when they do not fit. */
fcl_status fcl__program_options(const fcl_device_limits *limits, const fcl__options *opts,
                                int verbose, fcl__options *all);

/** A source's file name in cl/, and its prelude's (NULL if none). */
const char *fcl__source_file(fcl__source source);
/** The most texts a program is built from: the shared ones, a prelude (and
 *  a second one, the wgmma helpers), the source. */
#define FCL__PROGRAM_TEXTS_MAX 8
/** The texts the program of kernel file `file` (e.g. "flash_fwd.cl") is
 *  built from, in order, as the library builds it: what scripts that
 *  compile the kernels with other compilers concatenate. @return how many,
 *  0 for a file that is no program's. */
size_t fcl__program_texts_of(const char *file, const char *texts[FCL__PROGRAM_TEXTS_MAX]);
const char *fcl__source_prelude_file(fcl__source source);
/** A fingerprint of every kernel source built into the library (FNV-1a,
 *  64 bits, as 16 hex digits): tuned plans are measurements of these
 *  kernels, and a database of other kernels is stale (tuning.c). */
void fcl__kernels_fingerprint(char out[17]);

/** Builds (or takes from the context's cache) the program for `source`
 *  with `opts` plus the context-wide options (I/O counting, vendor
 *  extensions), and leases its kernel `name`: kept with the program
 *  between calls, the caller's alone until fcl__kernel_return (so threads
 *  never race on its arguments). */
fcl_status fcl__kernel(fcl_context *ctx, fcl__source source,
                       const fcl__options *opts, const char *name,
                       cl_kernel *kernel);
/** Gives a kernel of fcl__kernel back, after its last enqueue in the
 *  call, and sets *kernel to NULL; NULL is a no-op. */
void fcl__kernel_return(fcl_context *ctx, cl_kernel *kernel);

/** Releases every cached program of the context. */
void fcl__programs_release(fcl_context *ctx);

/* ---- build logs (build_log.c) ---- */
/** The program's build log on the context's device, NUL-terminated, to be
 *  freed with fcl__free; NULL when it cannot be read. */
char *fcl__program_build_log(fcl_context *ctx, cl_program program);
/** The program's one binary (on NVIDIA's driver, its PTX), NUL-terminated,
 *  for fcl__free(), its size in *size; NULL with the reason in why. */
char *fcl__program_binary(fcl_context *ctx, cl_program program, size_t *size, char *why,
                          size_t why_len);
/** Where a developer's knob (an environment variable: FLASHCL_BUILD_LOG,
 *  FLASHCL_BUILD_PTX, FLASHCL_SM90A_PTX) asks its output to go: the file
 *  it names, or NULL where it is unset or empty. Read per build, so that a
 *  test can set it. */
const char *fcl__knob_file(const char *knob);
/** A developer's knob that dumps binaries (FLASHCL_BUILD_PTX,
 *  FLASHCL_SM90A_PTX): where the environment variable `knob` names a file,
 *  appends `header` and a newline (none where NULL), then `binary` up to
 *  its NUL or `size` bytes and a newline; a file that does not open goes
 *  to the context's log. Nothing where the variable is unset or empty. */
void fcl__append_binary(fcl_context *ctx, const char *knob, const char *header,
                        const char *binary, size_t size);
/** The line of a build log (or a build's error) that names the problem:
 *  the first with "error", else with "serialized", else the first; at most
 *  200 characters, into out[size]. */
void fcl__build_log_line(const char *log, char *out, size_t size);

/* ---- the sm_90a stage (sm90a.c) ----
 * A program built with -DFCL_WGMMA=1 asks for Hopper's sm_90a instructions:
 * on an NVIDIA sm_90 device the cache builds it with the stage below; where
 * the stage refuses, or on any other device, it builds the same options
 * with FCL_WGMMA=0 (the mma.sync kernels), logs why in the context's log,
 * and keeps that program under the asked-for options. */

/** Whether `options` hold -DFCL_WGMMA=1. */
int fcl__sm90a_asked(const char *options);
/** `options` with -DFCL_WGMMA=1 made -DFCL_WGMMA=0, into out[size].
 *  @return 0, or -1 when they do not ask or do not fit. */
int fcl__sm90a_fallback_options(const char *options, char *out, size_t size);
/** Whether the stage may run on a device of `limits`: NVIDIA's driver
 *  (inline PTX), compute capability 9.0. If not, why[why_len] says why. */
int fcl__sm90a_device(const fcl_device_limits *limits, char *why, size_t why_len);
/** The options the sm_90a stage builds its PTX with, from the source's
 *  `options`: -cl-nv-verbose (the log says what ptxas did to the wgmma
 *  pipeline) and each -cl-nv-maxrregcount=N of `options` (a register cap
 *  is ptxas's, not in the PTX), into out[size].
 *  @return 0, or -1 when they do not fit. */
int fcl__sm90a_rebuild_options(const char *options, char *out, size_t size);
/** The sm_90a program of `built`, a program built from source with
 *  `options`, whose sm_90a instructions are marked (ptx.h): its PTX read
 *  back, unmarked and retargeted, loaded with clCreateProgramWithBinary
 *  and built with fcl__sm90a_rebuild_options (the PTX holds the rest of
 *  what the source's options decided). Refused when the
 *  binary is not PTX of the expected form, when it does not build, when
 *  ptxas reports serialized wgmmas, or when its kernels are not those of
 *  `built`; waits ptxas injected into the
 *  pipeline leave a line in the context's log. `built` is left to the
 *  caller.
 *  @return FCL_SUCCESS and *out; else a status, *out NULL, the reason in
 *  why[why_len] and nothing recorded as the context's error. */
fcl_status fcl__sm90a_rebuild(fcl_context *ctx, cl_program built, const char *options,
                              cl_program *out, char *why, size_t why_len);
/** Test hook: while `force` is 1, programs that ask for the stage attempt
 *  it on any device (where it must refuse cleanly); 0 restores the check. */
void fcl__sm90a_force(fcl_context *ctx, int force);

#endif
