/*
 * wgmma_probe.c — cl/wgmma_probe.cl on the context's device: operands whose
 * products are exact in f32, so that the tile must equal the float64
 * product exactly (a wrong fragment or descriptor layout cannot hide in a
 * tolerance), and a loop of the same tile for the instruction's rate.
 */
#include "errors.h"
#include "measure.h"
#include "program.h"
#include "resources.h"
#include "rules.h"
#include "wgmma_probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 64
#define WG 128

/* The 16-bit pattern of v = k/8, |k| <= 32: exact in f16 and bf16. */
static uint16_t exact_bits(double v, fcl_dtype dtype) {
  if (v == 0.0) return 0;
  int e;
  const double f = frexp(fabs(v), &e);  /* |v| = 2f 2^(e-1), 2f in [1, 2) */
  const unsigned frac_bits = dtype == FCL_DTYPE_F16 ? 10 : 7;
  const int bias = dtype == FCL_DTYPE_F16 ? 15 : 127;
  const unsigned frac = (unsigned)((2.0 * f - 1.0) * (double)(1u << frac_bits));
  return (uint16_t)((v < 0 ? 0x8000u : 0u) | ((unsigned)(e - 1 + bias) << frac_bits) | frac);
}

/* k/8 for k uniform in [-32, 32], from a 64-bit LCG. */
static double draw(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return ((int)((*state >> 33) % 65) - 32) / 8.0;
}

static int setup_valid(const fcl__wgmma_probe_setup *s) {
  const unsigned n = s->n;
  return (s->dtype == FCL_DTYPE_F16 || s->dtype == FCL_DTYPE_BF16) &&
         (n == 8 || n == 16 || n == 32 || n == 64 || n == 128) && s->ksteps >= 1 &&
         s->ksteps <= 4 && s->path >= FCL_WGMMA_PATH_MMA_SYNC &&
         s->path <= FCL_WGMMA_PATH_NATIVE && s->reps >= 1 && s->groups >= 1 &&
         (s->trans_b == 0 || s->trans_b == 1);
}

static fcl_status build(fcl_context *ctx, const fcl__wgmma_probe_setup *s, cl_kernel *kernel) {
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", (long)s->dtype);
  fcl__options_define(&opts, "WGMMA_N", (long)s->n);
  fcl__options_define(&opts, "KSTEPS", (long)s->ksteps);
  if (s->trans_b) fcl__options_define(&opts, "TRANS_B", 1);
  const int emulated = s->path == FCL_WGMMA_PATH_EMULATED;
  fcl__options_define(&opts, "MMA_EMULATE", emulated || !fcl__mma_native(&ctx->info.limits));
  if (emulated) fcl__options_define(&opts, "WGMMA_EMULATE", 1);
  if (s->path == FCL_WGMMA_PATH_NATIVE) fcl__options_define(&opts, "FCL_WGMMA", 1);
  return fcl__kernel(ctx, FCL_SRC_WGMMA_PROBE, &opts, "wgmma_probe", kernel);
}

/* D against the float64 product of the operands' values. */
static void compare(const double *a, const double *bt, const float *d, unsigned n, unsigned k,
                    fcl__wgmma_probe_result *out) {
  out->checked = 1;
  for (unsigned r = 0; r < ROWS; ++r)
    for (unsigned c = 0; c < n; ++c) {
      double want = 0.0;
      for (unsigned i = 0; i < k; ++i) want += a[r * k + i] * bt[c * k + i];
      const double error = fabs((double)d[r * n + c] - want);
      if (!(error == 0.0)) {
        out->wrong++;
        if (!(error <= out->max_error)) out->max_error = error;  /* NaN stays */
      }
    }
}

fcl_status fcl__wgmma_probe(fcl_context *ctx, const fcl__wgmma_probe_setup *setup,
                            uint64_t seed, fcl__wgmma_probe_result *out) {
  memset(out, 0, sizeof *out);
  out->path = -1;
  FCL_RETURN_IF(ctx, !setup_valid(setup), FCL_ERROR_INVALID_ARGUMENT,
                "wgmma probe: dtype f16 or bf16, n 8-128, ksteps 1-4, reps and groups >= 1, "
                "trans_b 0 or 1");
  const unsigned n = setup->n, k = 16 * setup->ksteps;
  cl_kernel kernel = NULL;
  FCL_FORWARD_IF(build(ctx, setup, &kernel));

  const size_t a_count = (size_t)ROWS * k, b_count = (size_t)n * k, d_count = (size_t)ROWS * n;
  double *values = fcl__malloc(ctx, (a_count + b_count) * sizeof *values);
  uint16_t *bits = fcl__malloc(ctx, (a_count + b_count) * sizeof *bits);
  float *d = fcl__malloc(ctx, d_count * sizeof *d);
  fcl_status status = values && bits && d ? FCL_SUCCESS : FCL_ERROR_OUT_OF_MEMORY;
  if (status != FCL_SUCCESS) fcl__fail(ctx, status, "out of host memory for the wgmma probe");
  cl_mem da = NULL, db = NULL, dd = NULL, dpath = NULL;
  if (status == FCL_SUCCESS) {
    uint64_t state = seed;
    for (size_t i = 0; i < a_count + b_count; ++i) {
      values[i] = draw(&state);
      bits[i] = exact_bits(values[i], setup->dtype);
    }
    da = fcl__upload(ctx, bits, a_count * 2, "the probe's A", &status);
    if (da) db = fcl__upload(ctx, bits + a_count, b_count * 2, "the probe's B", &status);
    if (db) dd = fcl__buffer(ctx, CL_MEM_READ_WRITE, d_count * sizeof *d, "the probe's D", &status);
    if (dd)
      dpath = fcl__buffer(ctx, CL_MEM_READ_WRITE, sizeof(cl_int), "the probe's path", &status);
  }
  /* poisoned: a tile or path the kernel leaves unwritten shows */
  const float nan = NAN;
  const cl_int no_path = -1;
  if (status == FCL_SUCCESS)
    status = fcl__fill(ctx, dd, &nan, sizeof nan, d_count * sizeof *d, "the probe's D");
  if (status == FCL_SUCCESS)
    status = fcl__fill(ctx, dpath, &no_path, sizeof no_path, sizeof no_path, "the probe's path");
  const cl_uint reps = setup->reps;
  const fcl__arg args[] = {FCL_ARG(da), FCL_ARG(db), FCL_ARG(dd), FCL_ARG(dpath), FCL_ARG(reps)};
  if (status == FCL_SUCCESS) status = fcl__set_args(ctx, kernel, "wgmma_probe", args, 5);
  const size_t global = (size_t)setup->groups * WG, local = WG;
  if (status == FCL_SUCCESS) status = fcl__launch(ctx, kernel, "wgmma_probe", 1, &global, &local);
  cl_int path = -1;
  if (status == FCL_SUCCESS) status = fcl__read(ctx, dpath, &path, sizeof path, "the probe's path");
  if (status == FCL_SUCCESS) status = fcl__read(ctx, dd, d, d_count * sizeof *d, "the probe's D");
  if (status == FCL_SUCCESS) {
    out->path = path;
    if (setup->reps == 1) compare(values, values + a_count, d, n, k, out);
  }
  if (status == FCL_SUCCESS && (setup->reps > 1 || setup->groups > 1)) {
    status = fcl__fastest_launch(ctx, kernel, "wgmma_probe", global, local, &out->ms);
    if (status == FCL_SUCCESS && out->ms > 0)
      out->tflops = 2.0 * ROWS * n * k * (double)setup->reps * (double)setup->groups /
                    (out->ms * 1e-3) / 1e12;
  }
  fcl__release_mem(&dpath);
  fcl__release_mem(&dd);
  fcl__release_mem(&db);
  fcl__release_mem(&da);
  fcl__free(d);
  fcl__free(bits);
  fcl__free(values);
  fcl__kernel_return(ctx, &kernel);
  return status;
}
