/*
 * sm90a.c — the post-compile stage that gives a program on an NVIDIA
 * sm_90 device Hopper's sm_90a instructions (wgmma), which NVIDIA's OpenCL
 * compiler cannot emit: the program, built from source with each such
 * instruction as a marked PTX comment, is read back as PTX, unmarked and
 * retargeted (ptx.c), and built again from that text. program.c takes it
 * for programs built with -DFCL_WGMMA=1, and falls back to FCL_WGMMA=0
 * (the mma.sync kernels) whenever it refuses (docs/design.md, "Hopper's
 * sm_90a instructions").
 */
#include "errors.h"
#include "program.h"
#include "ptx.h"
#include "resources.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASK "-DFCL_WGMMA=1"

/* Where `options` holds ASK as a whole option, or NULL. */
static const char *asked_at(const char *options) {
  const size_t n = strlen(ASK);
  for (const char *p = options; p && (p = strstr(p, ASK)) != NULL; p += n)
    if ((p == options || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return p;
  return NULL;
}

int fcl__sm90a_asked(const char *options) { return asked_at(options) != NULL; }

int fcl__sm90a_fallback_options(const char *options, char *out, size_t size) {
  const size_t n = strlen(options);
  const char *at = asked_at(options);
  if (!at || n + 1 > size) return -1;
  memcpy(out, options, n + 1);
  out[at - options + strlen(ASK) - 1] = '0';
  return 0;
}

int fcl__sm90a_device(const fcl_device_limits *limits, char *why, size_t why_len) {
  if (limits->vendor == FCL_VENDOR_NVIDIA && limits->nvidia_ptx && limits->nvidia_sm == 90)
    return 1;
  if (limits->vendor != FCL_VENDOR_NVIDIA || !limits->nvidia_ptx)
    snprintf(why, why_len, "not NVIDIA's OpenCL driver");
  else
    snprintf(why, why_len, "compute capability %u.%u, not 9.0", limits->nvidia_sm / 10,
             limits->nvidia_sm % 10);
  return 0;
}


int fcl__sm90a_rebuild_options(const char *options, char *out, size_t size) {
  static const char verbose[] = "-cl-nv-verbose", cap[] = "-cl-nv-maxrregcount=";
  if (size < sizeof verbose) return -1;
  memcpy(out, verbose, sizeof verbose);
  size_t len = sizeof verbose - 1;
  for (const char *p = options; p && (p = strstr(p, cap)) != NULL; p += sizeof cap - 1) {
    if (p != options && p[-1] != ' ') continue;
    const size_t n = strcspn(p, " ");
    if (len + 1 + n + 1 > size) return -1;
    out[len++] = ' ';
    memcpy(out + len, p, n);
    out[len += n] = '\0';
  }
  return 0;
}

/* Whether two built programs have the same kernels, by name: a patched
 * program that lost one would fail the call at its kernel's creation,
 * where a refusal falls back. */
static int same_kernels(cl_program a, cl_program b) {
  char names[2][1024];
  cl_program programs[2] = {a, b};
  for (int i = 0; i < 2; ++i)
    if (clGetProgramInfo(programs[i], CL_PROGRAM_KERNEL_NAMES, sizeof names[i], names[i], NULL) !=
        CL_SUCCESS)
      return 0;
  return !strcmp(names[0], names[1]);
}

fcl_status fcl__sm90a_rebuild(fcl_context *ctx, cl_program built, const char *options,
                              cl_program *out, char *why, size_t why_len) {
  *out = NULL;
  char detail[400] = "", rebuild_options[256];
  if (fcl__sm90a_rebuild_options(options, rebuild_options, sizeof rebuild_options)) {
    snprintf(why, why_len, "its options hold more register caps than fit");
    return FCL_ERROR_BUILD_FAILED;
  }
  size_t size = 0;
  char *binary = fcl__program_binary(ctx, built, &size, detail, sizeof detail);
  /* FLASHCL_SM90A_PTX=FILE: each attempt's PTX as the driver wrote it, to
   * see why a form was refused */
  if (binary) fcl__append_binary(ctx, "FLASHCL_SM90A_PTX", NULL, binary, size);
  char *ptx = NULL;
  size_t ptx_len = 0;
  const int unmarked =
      binary ? fcl__ptx_unmark(binary, size, &ptx, &ptx_len, detail, sizeof detail) : -1;
  fcl__free(binary);
  if (unmarked) {
    snprintf(why, why_len, "its PTX: %s", unmarked == -2 ? "out of host memory" : detail);
    return unmarked == -2 ? FCL_ERROR_OUT_OF_MEMORY : FCL_ERROR_BUILD_FAILED;
  }
  const size_t lengths[1] = {ptx_len + 1};
  const unsigned char *texts[1] = {(const unsigned char *)ptx};
  cl_int err = CL_OUT_OF_HOST_MEMORY, loaded = CL_SUCCESS;
  cl_program program = NULL;
  if (!fcl__injected(ctx, FCL_INJECT_HOST_ALLOC))
    program = clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, lengths, texts, &loaded, &err);
  free(ptx);
  if (!program || loaded != CL_SUCCESS) {
    snprintf(why, why_len, "loading the sm_90a PTX: %s",
             fcl__cl_error_name(program ? loaded : err));
    if (program) clReleaseProgram(program);
    return FCL_ERROR_BUILD_FAILED;
  }
  /* The PTX holds what the source's options decided but a register cap,
   * which is ptxas's; ptxas says what it did to the wgmma pipeline only
   * when verbose. */
  err = fcl__build_program(ctx, program, rebuild_options);
  char *log = fcl__program_build_log(ctx, program);
  fcl__build_log_line(log, detail, sizeof detail);
  /* ptxas serializes the wgmmas where other instructions define their
   * accumulators inside the pipeline, or registers run short: correct,
   * but slower than the mma.sync kernels. Waits it injects cost less: a
   * line in the log. */
  const int serialized = log && strstr(log, "serialized");
  const char *injected = log ? strstr(log, "is injected") : NULL;
  if (err == CL_SUCCESS && !serialized && injected) {
    const char *line = injected;
    while (line > log && line[-1] != '\n') --line;
    const size_t n = strcspn(line, "\n");
    fcl__log(ctx, "sm_90a build: ptxas: %.*s", (int)(n < 200 ? n : 200), line);
  }
  fcl__free(log);
  if (err != CL_SUCCESS || serialized) {
    snprintf(why, why_len, "building the sm_90a PTX: %s: %s",
             err != CL_SUCCESS ? fcl__cl_error_name(err) : "wgmma serialized", detail);
    clReleaseProgram(program);
    return FCL_ERROR_BUILD_FAILED;
  }
  if (!same_kernels(built, program)) {
    snprintf(why, why_len, "the sm_90a program's kernels are not the source's");
    clReleaseProgram(program);
    return FCL_ERROR_BUILD_FAILED;
  }
  *out = program;
  return FCL_SUCCESS;
}
