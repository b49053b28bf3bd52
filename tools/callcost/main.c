/*
 * flashcl-call-cost — what one decode call costs, on the device and on the
 * host: the run info's time (profiling markers, as flashcl-bench reports),
 * the host's wall time of a call that waits for its result, the host time
 * of a call that does not wait, and the time per call of a run of calls
 * with one wait at the end (what an engine calling layer after layer sees).
 *
 *   flashcl-call-cost [--device SEL] [--dtype f32|f16|bf16] [--splits S]
 *                     B CACHE [B CACHE ...]
 *
 * Each pair is a decode shape: batch B, one new query row, Hq/Hkv 32/8,
 * d 128, CACHE keys, causal. Medians of 40 calls; the run is 200 calls.
 * Exit status: 0, 1 when a call fails (the library's message on stderr),
 * 2 for a command line it refuses.
 */
#include <flashcl.h>

#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPEATS 40
#define RUN 200

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void usage(FILE *f) {
  fputs("usage: flashcl-call-cost [--device SEL] [--dtype f32|f16|bf16] [--splits S] "
        "B CACHE [B CACHE ...]\n"
        "Times decode calls (batch B, one query row, Hq/Hkv 32/8, d 128, CACHE keys,\n"
        "causal): the run info's time, a waiting call's host wall time, a call's\n"
        "enqueue time on the host, and the time per call of 200 calls in a row,\n"
        "in ms (medians of 40). --splits forces the key splits (0: the planner's).\n",
        f);
}

/* One shape: its four figures on one line. */
static int measure(fcl_context *ctx, fcl_dtype dtype, size_t batch, size_t cache) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, batch, 32, 8, 1, cache, 128);
  d.dtype = dtype;
  d.causal = 1;
  fcl_buffer_sizes sz;
  char why[256];
  if (fcl_attention_buffer_sizes(&d, &sz, why, sizeof why) != FCL_SUCCESS) {
    fprintf(stderr, "flashcl-call-cost: %s\n", why);
    return 1;
  }
  cl_context cl = fcl_context_cl_context(ctx);
  cl_command_queue queue = fcl_context_cl_queue(ctx);
  const size_t bytes[5] = {sz.q, sz.k, sz.v, sz.o, sz.lse};
  cl_mem m[5] = {NULL};
  const cl_ushort pattern = 0x2e66;  /* small values in any storage type */
  int failed = 0;
  for (int i = 0; i < 5 && !failed; ++i) {
    cl_int err;
    m[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes[i], NULL, &err);
    failed = !m[i] || clEnqueueFillBuffer(queue, m[i], &pattern, 2, 0, bytes[i] & ~(size_t)1,
                                          0, NULL, NULL) != CL_SUCCESS;
  }
  fcl_run_info info;
  memset(&info, 0, sizeof info);
  double marker[REPEATS], wall[REPEATS], enqueue[REPEATS], run = 0.0;
  for (int w = 0; w < 5 && !failed; ++w)  /* builds, then warm */
    failed = fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, m[0], m[1], m[2], m[3], m[4],
                                   &info) != FCL_SUCCESS;
  for (int r = 0; r < REPEATS && !failed; ++r) {
    const double t0 = fclu_now_ms();
    failed = fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, m[0], m[1], m[2], m[3], m[4],
                                   &info) != FCL_SUCCESS;
    wall[r] = fclu_now_ms() - t0;
    marker[r] = info.ms;
  }
  for (int r = 0; r < REPEATS && !failed; ++r) {
    clFinish(queue);
    const double t0 = fclu_now_ms();
    failed = fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, m[0], m[1], m[2], m[3], m[4],
                                   NULL) != FCL_SUCCESS;
    enqueue[r] = fclu_now_ms() - t0;
  }
  if (!failed) {
    clFinish(queue);
    const double t0 = fclu_now_ms();
    for (int r = 0; r < RUN && !failed; ++r)
      failed = fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, m[0], m[1], m[2], m[3], m[4],
                                     NULL) != FCL_SUCCESS;
    clFinish(queue);
    run = (fclu_now_ms() - t0) / RUN;
  }
  clFinish(queue);
  for (int i = 0; i < 5; ++i)
    if (m[i]) clReleaseMemObject(m[i]);
  if (failed) {
    fprintf(stderr, "flashcl-call-cost: B %zu x %zu: %s\n", batch, cache,
            fcl_context_last_error(ctx));
    return 1;
  }
  const double moved = (double)(sz.q + sz.k + sz.v + sz.o);
  printf("%-5s %3zu x %-7zu %-10s %6u %9.4f %9.4f %9.4f %9.4f %8.0f\n", fcl_dtype_name(dtype),
         batch, cache, fcl_flash_kernel_name(info.plan.kernel), info.plan.splits,
         median(marker, REPEATS), median(wall, REPEATS), median(enqueue, REPEATS), run,
         moved / run / 1e6);
  return 0;
}

/* A strict value or exit 2 with the parser's reason. */
static int parse_or_say(const char *what, const char *text, uint64_t min, uint64_t max,
                        uint64_t *out) {
  char why[FCLU_WHY_LEN];
  if (fclu_parse_u64(text, min, max, out, why, sizeof why) == 0) return 0;
  fprintf(stderr, "flashcl-call-cost: %s: %s\n", what, why);
  return -1;
}

int main(int argc, char **argv) {
  const char *device = NULL;
  fcl_dtype dtype = FCL_DTYPE_F16;
  uint64_t splits = 0;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    char why[FCLU_WHY_LEN];
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!strcmp(argv[i], "--splits") && i + 1 < argc) {
      if (parse_or_say("--splits", argv[++i], 0, FCL_MAX_SPLITS, &splits) != 0) return 2;
    } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      if (fclu_parse_dtype(argv[++i], &dtype, why, sizeof why) != 0) {
        fprintf(stderr, "flashcl-call-cost: --dtype: %s\n", why);
        return 2;
      }
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (i >= argc || (argc - i) % 2) {
    usage(stderr);
    return 2;
  }
  uint64_t shapes[2 * 64];
  const int n_shapes = (argc - i) / 2;
  if (n_shapes > 64) {
    fprintf(stderr, "flashcl-call-cost: at most 64 shapes\n");
    return 2;
  }
  for (int s = 0; s < 2 * n_shapes; ++s)
    if (parse_or_say(s % 2 ? "CACHE" : "B", argv[i + s], 1, INT32_MAX, &shapes[s]) != 0)
      return 2;
  fcl_context *ctx = NULL;
  if (fcl_context_create(device, &ctx) != FCL_SUCCESS) {
    fprintf(stderr, "flashcl-call-cost: %s\n", ctx ? fcl_context_last_error(ctx) : "no memory");
    fcl_context_release(ctx);
    return 1;
  }
  if (splits) {
    fcl_plan hint;
    memset(&hint, 0, sizeof hint);
    hint.splits = (unsigned)splits;
    if (fcl_context_set_flash_tiling(ctx, &hint) != FCL_SUCCESS) {
      fprintf(stderr, "flashcl-call-cost: %s\n", fcl_context_last_error(ctx));
      fcl_context_release(ctx);
      return 2;
    }
  }
  fcl_device_info dev;
  fcl_context_device(ctx, &dev);
  printf("%s\n%-5s %-13s %-10s %6s %9s %9s %9s %9s %8s\n", dev.name, "type", "B x cache",
         "kernel", "splits", "markers", "wall", "enqueue", "in a run", "GB/s run");
  int status = 0;
  for (int s = 0; s < n_shapes && !status; ++s)
    status = measure(ctx, dtype, (size_t)shapes[2 * s], (size_t)shapes[2 * s + 1]);
  fcl_context_release(ctx);
  return status;
}
