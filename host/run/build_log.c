/*
 * build_log.c — a built program's log, the line of it that names the
 * problem, and its binary (program.h): what the program cache and its
 * sm_90a stage read back of a build.
 */
#include "common.h"
#include "context.h"
#include "file.h"
#include "errors.h"
#include "resources.h"
#include "program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *fcl__program_build_log(fcl_context *ctx, cl_program program) {
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
  return log;
}

void fcl__build_log_line(const char *log, char *out, size_t size) {
  const char *p = log ? strstr(log, "error") : NULL;
  if (!p && log) p = strstr(log, "serialized");
  if (!p) p = log ? log : "";
  while (p > log && p[-1] != '\n') --p;
  const size_t n = strcspn(p, "\n");
  snprintf(out, size, "%.*s", (int)(n < 200 ? n : 200), p);
}

char *fcl__program_binary(fcl_context *ctx, cl_program program, size_t *size, char *why,
                          size_t why_len) {
  cl_uint devices = 0;
  cl_int err = clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof devices, &devices, NULL);
  if (err == CL_SUCCESS && devices != 1) err = CL_INVALID_PROGRAM;
  if (err == CL_SUCCESS)
    err = clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof *size, size, NULL);
  if (err != CL_SUCCESS || *size == 0) {
    snprintf(why, why_len, "no binary to read back (%s)", fcl__cl_error_name(err));
    return NULL;
  }
  char *binary = fcl__malloc(ctx, *size + 1);
  unsigned char *binaries[1] = {(unsigned char *)binary};
  if (!binary) {
    snprintf(why, why_len, "out of host memory reading the binary");
    return NULL;
  }
  err = clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binaries, binaries, NULL);
  if (err != CL_SUCCESS) {
    snprintf(why, why_len, "reading the binary: %s", fcl__cl_error_name(err));
    fcl__free(binary);
    return NULL;
  }
  binary[*size] = '\0';
  return binary;
}

const char *fcl__knob_file(const char *knob) {
  const char *target = getenv(knob);
  return target && target[0] ? target : NULL;
}

void fcl__append_binary(fcl_context *ctx, const char *knob, const char *header,
                        const char *binary, size_t size) {
  const char *target = fcl__knob_file(knob);
  if (!target) return;
  char why[600];
  FILE *f = fcl__append_file(target, why, sizeof why);
  if (!f) {
    fcl__log(ctx, "%s: %s", knob, why);
    return;
  }
  if (header) fprintf(f, "%s\n", header);
  fwrite(binary, 1, strnlen(binary, size), f);
  fputc('\n', f);
  fclose(f);
}
