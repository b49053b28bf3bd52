/*
 * build_log.c — a built program's log, and the line of it that names the
 * problem (program.h): what the program cache and its sm_90a stage report
 * of a build.
 */
#include "common.h"
#include "context.h"
#include "resources.h"
#include "program.h"

#include <stdio.h>
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
