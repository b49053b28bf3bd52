/*
 * wgmma.c — flashcl-info --wgmma-probe: Hopper's warpgroup MMA through the
 * library's sm_90a stage on every device, checked exactly against a
 * float64 product (host/model/wgmma_probe.c) and timed against mma.sync.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "info.h"
#include "program.h"
#include "ptx.h"
#include "wgmma_probe.h"

static const char *path_name(int path) {
  switch (path) {
    case FCL_WGMMA_PATH_NATIVE: return "sm_90a wgmma";
    case FCL_WGMMA_PATH_EMULATED: return "wgmma layouts emulated";
    case FCL_WGMMA_PATH_MMA_SYNC: return "mma.sync";
    default: return "nothing (the kernel did not run)";
  }
}

/* One exact check; prints a line. @return 1 when D matched and, where
 * `must_be` is not -1, that path ran. */
static int check(fcl_context *ctx, fcl_dtype dtype, unsigned n, unsigned ksteps, int trans_b,
                 int path, int must_be) {
  const fcl__wgmma_probe_setup setup = {dtype, n, ksteps, path, 1, 1, trans_b};
  fcl__wgmma_probe_result r;
  const fcl_status st = fcl__wgmma_probe(ctx, &setup, 0x5eed0000u + n * 16 + ksteps, &r);
  printf("    check %s m64n%uk16 x %u k-steps, B %s, asked %s: ", fcl_dtype_name(dtype), n,
         ksteps, trans_b ? "MN-major" : "K-major", path_name(path));
  if (st != FCL_SUCCESS) {
    printf("FAILED: %s: %s\n", fcl_status_str(st), fcl_context_last_error(ctx));
    return 0;
  }
  const int ok = r.checked && r.wrong == 0 && (must_be < 0 || r.path == must_be);
  printf("ran %s, %zu of %u elements differ (max |error| %g): %s\n", path_name(r.path), r.wrong,
         64 * n, r.max_error, ok ? "ok" : "WRONG");
  return ok;
}

/* The loop's rate on `groups_per_cu` work-groups a compute unit. */
static void time_path(fcl_context *ctx, unsigned compute_units, int path, unsigned groups_per_cu,
                      unsigned reps) {
  const fcl__wgmma_probe_setup setup = {FCL_DTYPE_F16, 128, 4, path, reps,
                                        compute_units * groups_per_cu, 0};
  fcl__wgmma_probe_result r;
  const fcl_status st = fcl__wgmma_probe(ctx, &setup, 1, &r);
  printf("    time f16 m64n128k16 x 4 k-steps x %u reps, %u x %u work-groups, asked %s: ", reps,
         compute_units, groups_per_cu, path_name(path));
  if (st != FCL_SUCCESS)
    printf("FAILED: %s: %s\n", fcl_status_str(st), fcl_context_last_error(ctx));
  else
    printf("%.1f TFLOP/s (%.3f ms, ran %s)\n", r.tflops, r.ms, path_name(r.path));
}

int info_wgmma_probe(const info_options *opts) {
  /* ptxas's report (-cl-nv-verbose) of each build, on stderr */
  if (!getenv("FLASHCL_BUILD_LOG")) setenv("FLASHCL_BUILD_LOG", "-", 1);
  fcl_device_info devs[32];
  size_t n = 0;
  if (fcl_devices(devs, 32, &n) != FCL_SUCCESS || n == 0) {
    printf("No OpenCL device found.\n");
    return 1;
  }
  int failures = 0;
  for (size_t i = 0; i < n && i < 32; ++i) {
    const fcl_device_info *d = &devs[i];
    char selector[32], why[256] = "";
    snprintf(selector, sizeof selector, "%u:%u", d->platform_index, d->device_index);
    printf("\n[%s] %s; driver %s\n", selector, d->name, d->driver);
    fcl_context *ctx = NULL;
    if (fcl_context_create(selector, &ctx) != FCL_SUCCESS) {
      printf("    no context: %s\n", fcl_context_last_error(ctx));
      fcl_context_release(ctx);
      ++failures;
      continue;
    }
    const int hopper = fcl__sm90a_device(&d->limits, why, sizeof why);
    printf("    sm_90a stage: %s\n", hopper ? "taken (NVIDIA, compute capability 9.0)" : why);
    /* where the stage runs, each asked-for wgmma must have run as wgmma */
    const int native = hopper ? FCL_WGMMA_PATH_NATIVE : FCL_WGMMA_PATH_MMA_SYNC;
    int ok = 1;
    static const unsigned widths[] = {8, 16, 32, 64, 128};
    /* B K-major, then MN-major (imm-trans-b 1) */
    for (int tb = 0; tb < 2; ++tb) {
      for (int t = 0; t < 2; ++t)
        for (unsigned w = 0; w < 5; ++w)
          ok &= check(ctx, t ? FCL_DTYPE_BF16 : FCL_DTYPE_F16, widths[w], 2, tb,
                      FCL_WGMMA_PATH_NATIVE, native);
      for (unsigned w = 0; w < 5; w += 4) {
        ok &= check(ctx, FCL_DTYPE_F16, widths[w], 2, tb, FCL_WGMMA_PATH_EMULATED,
                    FCL_WGMMA_PATH_EMULATED);
        ok &= check(ctx, FCL_DTYPE_F16, widths[w], 2, tb, FCL_WGMMA_PATH_MMA_SYNC,
                    FCL_WGMMA_PATH_MMA_SYNC);
      }
    }
    if (d->limits.is_gpu && opts->wgmma_reps) {
      const unsigned cus = fcl__compute_units(&d->limits);
      for (unsigned g = 1; g <= 4; g *= 2) {
        time_path(ctx, cus, FCL_WGMMA_PATH_NATIVE, g, opts->wgmma_reps);
        time_path(ctx, cus, FCL_WGMMA_PATH_MMA_SYNC, g, opts->wgmma_reps);
      }
    }
    char log[4096];
    fcl_context_log(ctx, log, sizeof log);
    for (const char *line = log; *line;) {
      const size_t len = strcspn(line, "\n");
      printf("    log: %.*s\n", (int)len, line);
      line += len + (line[len] == '\n');
    }
    printf("    wgmma probe: %s\n", ok ? (hopper ? "PASS (sm_90a wgmma ran, exact)"
                                              : "PASS (no sm_90a here; fallback exact)")
                                       : "FAIL");
    failures += !ok;
    fcl_context_release(ctx);
  }
  return failures ? 1 : 0;
}

int info_ptx_unmark(const char *file) {
  char why[512];
  char *text = fcl__read_file(file, (size_t)64 << 20, why, sizeof why);
  if (!text) {
    fprintf(stderr, "flashcl-info: cannot read %s: %s\n", file, why);
    return 2;
  }
  char *out = NULL;
  size_t out_len = 0;
  const int refused = fcl__ptx_unmark(text, strlen(text), &out, &out_len, why, sizeof why);
  free(text);
  if (refused) {
    fprintf(stderr, "flashcl-info: %s: %s\n", file, refused == -2 ? "out of memory" : why);
    return 1;
  }
  fwrite(out, 1, out_len, stdout);
  free(out);
  return 0;
}
