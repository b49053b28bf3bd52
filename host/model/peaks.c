/*
 * peaks.c — measuring a device's copy bandwidth and fp32 FMA rate, the two
 * ceilings the bench places each run under (a roofline).
 */
#include "errors.h"
#include "resources.h"
#include "program.h"
#include "measure.h"
#include "problem.h"

#define PEAK_RUNS 5
#define FMA_ITERATIONS 4096

/* The FMA kernel's chains per work-item and lanes per chain: on GPUs 4
 * float8s (32 independent scalar chains a work-item); on CPUs 8 float16s,
 * an AVX-512 register each, enough in flight to cover the latency of both
 * FMA ports (the widths measured: docs/design.md, "The rules, measured"). */
#define GPU_FMA_CHAINS 4
#define GPU_FMA_WIDTH 8
#define CPU_FMA_CHAINS 8
#define CPU_FMA_WIDTH 16

fcl_status fcl__fastest_launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                               size_t global, size_t local, double *best_ms) {
  *best_ms = 0.0;
  for (int run = 0; run <= PEAK_RUNS; ++run) {  /* run 0 warms up */
    fcl__timer timer = {0};
    double ms;
    FCL_FORWARD_IF(fcl__timer_start(ctx, &timer));
    fcl_status status = fcl__launch(ctx, kernel, name, 1, &global, local ? &local : NULL);
    fcl_status stopped = fcl__timer_stop(ctx, &timer, &ms);
    FCL_FORWARD_IF(status);
    FCL_FORWARD_IF(stopped);
    if (run > 0 && (*best_ms == 0.0 || ms < *best_ms)) *best_ms = ms;
  }
  return FCL_SUCCESS;
}

static fcl_status measure_copy(fcl_context *ctx, double *gbps) {
  const fcl_device_limits *lim = &ctx->info.limits;
  /* Large enough to dwarf caches (the H200 has 60 MB of L2), small enough
   * for any device. */
  uint64_t bytes = lim->is_gpu ? 512ull << 20 : 128ull << 20;
  if (bytes > lim->max_alloc_bytes / 2) bytes = lim->max_alloc_bytes / 2 / 16 * 16;
  fcl_status status;
  cl_mem src = fcl__buffer(ctx, CL_MEM_READ_WRITE, bytes, "the copy source", &status);
  if (!src) return status;
  cl_mem dst = fcl__buffer(ctx, CL_MEM_READ_WRITE, bytes, "the copy target", &status);
  cl_kernel kernel = NULL;
  if (dst) {
    const cl_uchar one = 1;
    cl_int err = clEnqueueFillBuffer(ctx->queue, src, &one, 1, 0, bytes, 0, NULL, NULL);
    status = err == CL_SUCCESS ? FCL_SUCCESS : fcl__cl_fail(ctx, err, "filling the copy source");
  }
  fcl__options opts;
  fcl__options_init(&opts);
  if (status == FCL_SUCCESS) status = fcl__kernel(ctx, FCL_SRC_PEAKS, &opts, "peak_copy", &kernel);
  const cl_ulong n4 = bytes / 16;
  fcl__arg args[] = {FCL_ARG(src), FCL_ARG(dst), FCL_ARG(n4)};
  if (status == FCL_SUCCESS) status = fcl__set_args(ctx, kernel, "peak_copy", args, 3);
  double ms = 0.0;
  size_t local = lim->max_work_group_size < 256 ? 0 : 256;
  /* GPUs: a grid-stride loop over enough work-items to fill the device.
   * CPUs: one float4 per work-item, since their compilers vectorise across
   * work-items only in kernels without loops. */
  size_t global = lim->is_gpu ? (size_t)fcl__compute_units(lim) * 2048
                              : (size_t)(bytes / 16);
  if (local) global = (global + local - 1) / local * local;
  if (status == FCL_SUCCESS)
    status = fcl__fastest_launch(ctx, kernel, "peak_copy", global, local, &ms);
  fcl__kernel_return(ctx, &kernel);
  fcl__release_mem(&dst);
  fcl__release_mem(&src);
  if (status == FCL_SUCCESS) *gbps = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
  return status;
}

static fcl_status measure_fma(fcl_context *ctx, double *tflops) {
  const fcl_device_limits *lim = &ctx->info.limits;
  size_t local = lim->max_work_group_size < 256 ? 0 : 256;
  /* Enough work-items to fill every lane of every compute unit many times. */
  size_t global = (size_t)fcl__compute_units(lim) *
                  (lim->is_gpu ? 8192 : 256);
  if (local) global = (global + local - 1) / local * local;
  fcl_status status;
  cl_mem out = fcl__buffer(ctx, CL_MEM_WRITE_ONLY, global * sizeof(float),
                           "the FMA kernel's output", &status);
  if (!out) return status;
  cl_kernel kernel = NULL;
  fcl__options opts;
  fcl__options_init(&opts);
  const unsigned chains = lim->is_gpu ? GPU_FMA_CHAINS : CPU_FMA_CHAINS;
  const unsigned width = lim->is_gpu ? GPU_FMA_WIDTH : CPU_FMA_WIDTH;
  fcl__options_define(&opts, "FMA_CHAINS", chains);
  fcl__options_define(&opts, "FMA_WIDTH", width);
  status = fcl__kernel(ctx, FCL_SRC_PEAKS, &opts, "peak_fma", &kernel);
  const cl_int iterations = lim->is_gpu ? FMA_ITERATIONS : FMA_ITERATIONS / 8;
  const cl_float a = 0.999999f, b = 1e-7f;
  fcl__arg args[] = {FCL_ARG(out), FCL_ARG(iterations), FCL_ARG(a), FCL_ARG(b)};
  if (status == FCL_SUCCESS) status = fcl__set_args(ctx, kernel, "peak_fma", args, 4);
  double ms = 0.0;
  if (status == FCL_SUCCESS)
    status = fcl__fastest_launch(ctx, kernel, "peak_fma", global, local, &ms);
  fcl__kernel_return(ctx, &kernel);
  fcl__release_mem(&out);
  if (status == FCL_SUCCESS)
    *tflops = 2.0 * chains * width * (double)iterations * (double)global / (ms * 1e-3) / 1e12;
  return status;
}

fcl_status fcl_measure_peaks(fcl_context *ctx, fcl_peaks *out) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, !out, FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
  fcl_peaks peaks = {0, 0};
  FCL_FORWARD_IF(measure_copy(ctx, &peaks.copy_gbps));
  FCL_FORWARD_IF(measure_fma(ctx, &peaks.fma_tflops));
  *out = peaks;
  return FCL_SUCCESS;
}
