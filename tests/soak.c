/*
 * soak.c — one context, many decode steps (fcl_attention_forward_kvcache)
 * from several threads, each over its own paged KV cache: every step
 * appends one to three tokens (appends cross pages every few steps), runs
 * the new rows' queries over the cache, and when a sequence fills its
 * pages, a new one starts on the pages in another order. Every
 * `check_every` steps of a thread (and at its last) the step's O and LSE
 * are checked against the float64 reference. Host memory (resident pages,
 * /proc/self/statm), the library's live device buffers and the context's
 * program-cache entries are sampled while the threads run; after warm-up
 * (a tenth of the steps) they must stay flat. Prints the samples.
 *
 * Usage: soak [--steps N] [--threads T] [--check-every N]
 *   (defaults: FLASHCL_SOAK_STEPS or 20000 steps in all, 4 threads, 1000).
 * Exit status 0 when every check held, 1 otherwise, 2 for a bad command line.
 */
#include <flashcl.h>

#include "cli.h"
#include "hostdata.h"
#include "context.h"
#include "resources.h"
#include "reference.h"
#include "views.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A small problem, so that 100,000 steps take minutes on a CPU device. */
#define HEADS_Q 4
#define HEADS_KV 2
#define HEAD_DIM 16
#define PAGE 16
#define PAGES_PER_SEQ 8       /* a sequence of up to 128 tokens */
#define SPARE_PAGES 3         /* pages no sequence names at a time */
#define MAX_NEW 3             /* tokens a step appends, at most */
#define O_TOL 1e-4            /* f32: a few hundred roundings of values of size 1 */
#define SAMPLES 4096

static const size_t capacity = (size_t)PAGE * PAGES_PER_SEQ;

/* Under AddressSanitizer freed memory waits in its quarantine (256 MiB)
 * and resident memory grows by design: LeakSanitizer judges leaks there,
 * and the bound on resident memory is not applied. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_BOUNDED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_BOUNDED 0
#endif
#endif
#ifndef RSS_BOUNDED
#define RSS_BOUNDED 1
#endif

/* Every thread stops here after its warm-up steps while the main thread
 * measures the resources at rest, then goes on (two waits). */
static pthread_barrier_t warmed_up;

static void wait_warm_up(void) {
  pthread_barrier_wait(&warmed_up);
  pthread_barrier_wait(&warmed_up);
}

typedef struct worker {
  fcl_context *ctx;
  unsigned id;
  long steps, warm_up, check_every;
  atomic_long done;
  int failed;
  long checks;
  double worst;  /* largest |O - reference| seen */
} worker;

static long resident_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Writes `n` floats to a buffer, waiting for the write. */
static int write_floats(fcl_context *ctx, cl_mem mem, const void *x, size_t bytes) {
  return clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), mem, CL_TRUE, 0, bytes, x, 0, NULL,
                              NULL) == CL_SUCCESS ? 0 : -1;
}

/* The float64 reference of the step's rows over the sequence's tokens
 * [0, len): `n` queries, the last n positions (causal). */
static double check_step(const float *q, const float *k, const float *v, size_t len, size_t n,
                         const float *o, const float *lse) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 1, HEADS_Q, HEADS_KV, n, len, HEAD_DIM);
  d.causal = 1;
  double worst = 0, row[HEAD_DIM], want_lse;
  for (size_t h = 0; h < HEADS_Q; ++h)
    for (size_t i = 0; i < n; ++i) {
      fclref_forward_row(&d, q, k, v, 0, h, i, row, &want_lse);
      for (size_t c = 0; c < HEAD_DIM; ++c) {
        const double e = fabs(o[(i * HEADS_Q + h) * HEAD_DIM + c] - row[c]);
        worst = isnan(e) || e > worst ? (isnan(e) ? INFINITY : e) : worst;
      }
      const double e = fabs(lse[h * n + i] - want_lse);
      worst = isnan(e) || e > worst ? (isnan(e) ? INFINITY : e) : worst;
    }
  return worst;
}

static void *work(void *arg) {
  worker *w = arg;
  fcl_context *ctx = w->ctx;
  fclu_rng rng;
  fclu_rng_seed(&rng, 4300 + w->id);
  const size_t row = (size_t)HEADS_KV * HEAD_DIM, qrow = (size_t)HEADS_Q * HEAD_DIM;
  const size_t pool = (size_t)(PAGES_PER_SEQ + SPARE_PAGES) * PAGE * row;
  /* the sequence's tokens on the host, in order, for the reference */
  float *k = calloc(capacity * row, sizeof *k), *v = calloc(capacity * row, sizeof *v);
  float q[MAX_NEW * HEADS_Q * HEAD_DIM], o[MAX_NEW * HEADS_Q * HEAD_DIM], lse[HEADS_Q * MAX_NEW];
  int32_t table[PAGES_PER_SEQ];
  cl_int err = CL_SUCCESS;
  cl_context cl = fcl_context_cl_context(ctx);
  cl_mem dk = clCreateBuffer(cl, CL_MEM_READ_WRITE, pool * sizeof(float), NULL, &err);
  cl_mem dv = clCreateBuffer(cl, CL_MEM_READ_WRITE, pool * sizeof(float), NULL, &err);
  cl_mem dtable = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof table, NULL, &err);
  cl_mem dq = clCreateBuffer(cl, CL_MEM_READ_ONLY, sizeof q, NULL, &err);
  cl_mem dkn = clCreateBuffer(cl, CL_MEM_READ_ONLY, MAX_NEW * row * sizeof(float), NULL, &err);
  cl_mem dvn = clCreateBuffer(cl, CL_MEM_READ_ONLY, MAX_NEW * row * sizeof(float), NULL, &err);
  cl_mem dout = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof o, NULL, &err);
  cl_mem dlse = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof lse, NULL, &err);
  if (!k || !v || !dk || !dv || !dtable || !dq || !dkn || !dvn || !dout || !dlse) {
    fprintf(stderr, "soak: thread %u: cannot allocate its buffers\n", w->id);
    w->failed = 1;
  }
  int32_t len = 0;
  long sequences = 0;
  int warm = 0;
  for (long step = 1; step <= w->steps && !w->failed; ++step) {
    if (step == w->warm_up + 1) {
      wait_warm_up();
      warm = 1;
    }
    const size_t n = step % 5 == 0 ? fclu_range(&rng, 2, MAX_NEW) : 1;
    if ((size_t)len + n > capacity) len = 0;
    if (len == 0) {  /* a new sequence, on the pool's pages in another order */
      fclu_shuffled_pages(fclu_next(&rng), 1, PAGES_PER_SEQ, PAGES_PER_SEQ + SPARE_PAGES, table);
      if (write_floats(ctx, dtable, table, sizeof table) != 0) w->failed = 1;
      ++sequences;
    }
    fclu_fill_normal(&rng, q, n * qrow, 0.5, FCL_DTYPE_F32);
    fclu_fill_normal(&rng, k + (size_t)len * row, n * row, 0.5, FCL_DTYPE_F32);
    fclu_fill_normal(&rng, v + (size_t)len * row, n * row, 1.0, FCL_DTYPE_F32);
    if (write_floats(ctx, dq, q, n * qrow * sizeof(float)) != 0 ||
        write_floats(ctx, dkn, k + (size_t)len * row, n * row * sizeof(float)) != 0 ||
        write_floats(ctx, dvn, v + (size_t)len * row, n * row * sizeof(float)) != 0)
      w->failed = 1;
    fcl_attention_desc d;
    fcl_attention_desc_init(&d, 1, HEADS_Q, HEADS_KV, n, capacity, HEAD_DIM);
    d.causal = 1;
    d.seqlens_k = &len;
    d.block_table = dtable;
    d.page_size = PAGE;
    d.pages_per_seq = PAGES_PER_SEQ;
    d.num_pages = PAGES_PER_SEQ + SPARE_PAGES;
    const fcl_status st = fcl_attention_forward_kvcache(ctx, &d, FCL_ALGO_FLASH, dq, n, NULL,
                                                        NULL, dkn, dvn, dk, dv, dout, dlse, NULL);
    if (st != FCL_SUCCESS) {
      fprintf(stderr, "soak: thread %u, step %ld: %s: %s\n", w->id, step, fcl_status_str(st),
              fcl_context_last_error(ctx));
      w->failed = 1;
      break;
    }
    len += (int32_t)n;
    if (step % w->check_every == 0 || step == w->steps) {
      if (fclu_download(ctx, dout, o, n * qrow, FCL_DTYPE_F32) != 0 ||
          fclu_download(ctx, dlse, lse, HEADS_Q * n, FCL_DTYPE_F32) != 0) {
        w->failed = 1;
        break;
      }
      const double e = check_step(q, k, v, (size_t)len, n, o, lse);
      if (e > w->worst) w->worst = e;
      ++w->checks;
      if (!(e <= O_TOL)) {
        fprintf(stderr, "soak: thread %u, step %ld (%ld tokens, %zu new): |O - reference| "
                "= %g over %g\n", w->id, step, (long)len, n, e, O_TOL);
        w->failed = 1;
      }
    }
    atomic_store(&w->done, step);
  }
  if (!warm) wait_warm_up();
  printf("soak: thread %u: %ld steps, %ld sequences, %ld checks, worst |error| %.3g\n", w->id,
         (long)atomic_load(&w->done), sequences, w->checks, w->worst);
  free(k);
  free(v);
  cl_mem all[] = {dk, dv, dtable, dq, dkn, dvn, dout, dlse};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    if (all[i]) clReleaseMemObject(all[i]);
  return NULL;
}

typedef struct sample {
  double s;
  long steps, rss_kib, buffers, programs;
} sample;

static long parse_count(const char *text, const char *name, uint64_t max) {
  uint64_t v;
  char why[FCLU_WHY_LEN];
  if (fclu_parse_u64(text, 1, max, &v, why, sizeof why) != 0) {
    fprintf(stderr, "soak: %s: %s\n", name, why);
    exit(2);
  }
  return (long)v;
}

int main(int argc, char **argv) {
  const char *env = getenv("FLASHCL_SOAK_STEPS");
  long steps = env && *env ? parse_count(env, "FLASHCL_SOAK_STEPS", 100000000) : 20000;
  long threads = 4, check_every = 1000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help")) {
      printf("usage: soak [--steps N] [--threads T] [--check-every N]\n"
             "N decode steps in all (default FLASHCL_SOAK_STEPS or 20000) from T threads "
             "(default 4)\non one context, each checked against the float64 reference "
             "every N of its steps\n(default 1000); host memory, device buffers and "
             "program-cache entries must\nstay flat after a tenth of the steps. Exit "
             "status 0, 1 on a failed check, 2 for\na bad command line.\n");
      return 0;
    }
    if (i + 1 < argc && !strcmp(argv[i], "--steps"))
      steps = parse_count(argv[++i], "--steps", 100000000);
    else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
      threads = parse_count(argv[++i], "--threads", 64);
    else if (i + 1 < argc && !strcmp(argv[i], "--check-every"))
      check_every = parse_count(argv[++i], "--check-every", 100000000);
    else {
      fprintf(stderr, "soak: unknown argument '%s' (--help)\n", argv[i]);
      return 2;
    }
  }
  fcl_context *ctx = NULL;
  if (fcl_context_create(getenv("FLASHCL_TEST_DEVICE"), &ctx) != FCL_SUCCESS) {
    fprintf(stderr, "soak: no device: %s\n", fcl_context_last_error(ctx));
    return 1;
  }
  fcl_context_use_tuned_plans(ctx, 0);
  worker *w = calloc((size_t)threads, sizeof *w);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  static sample samples[SAMPLES];
  size_t n_samples = 0;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_barrier_init(&warmed_up, NULL, (unsigned)threads + 1);
  for (long t = 0; t < threads; ++t) {
    w[t].ctx = ctx;
    w[t].id = (unsigned)t;
    w[t].steps = steps / threads + (t < steps % threads);
    w[t].warm_up = w[t].steps / 10;
    w[t].check_every = check_every;
    pthread_create(&tid[t], NULL, work, &w[t]);
  }
  /* at rest after warm-up: what must be the same at the end */
  pthread_barrier_wait(&warmed_up);
  clock_gettime(CLOCK_MONOTONIC, &now);
  long warm_steps = 0;
  for (long t = 0; t < threads; ++t) warm_steps += atomic_load(&w[t].done);
  const sample base = {(double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9,
                       warm_steps, resident_kib(), fcl__live_buffers(),
                       fcl__program_entries(ctx)};
  pthread_barrier_wait(&warmed_up);
  /* a sample every 100 ms (fewer when there are many: every other one is
   * dropped when the table fills, and the period doubles) */
  long every_ms = 100;
  for (int running = 1; running;) {
    struct timespec nap = {every_ms / 1000, (every_ms % 1000) * 1000000L};
    long total = 0;
    running = 0;
    for (long t = 0; t < threads; ++t) {
      const long done = atomic_load(&w[t].done);
      total += done;
      running |= done < w[t].steps && !w[t].failed;
    }
    if (running) nanosleep(&nap, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (n_samples == SAMPLES) {
      for (size_t i = 0; i < SAMPLES / 2; ++i) samples[i] = samples[2 * i];
      n_samples = SAMPLES / 2;
      every_ms *= 2;
    }
    samples[n_samples++] = (sample){(double)(now.tv_sec - t0.tv_sec) +
                                        (double)(now.tv_nsec - t0.tv_nsec) * 1e-9,
                                    total, resident_kib(), fcl__live_buffers(),
                                    fcl__program_entries(ctx)};
  }
  int failed = 0;
  for (long t = 0; t < threads; ++t) {
    pthread_join(tid[t], NULL);
    failed |= w[t].failed;
  }
  clock_gettime(CLOCK_MONOTONIC, &now);
  const double seconds =
      (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
  const sample last = {seconds, steps, resident_kib(), fcl__live_buffers(),
                       fcl__program_entries(ctx)};
  /* Samples while the threads run (device buffers then include those
   * calls in flight hold: the split forward's arrival counts, leased) */
  printf("soak: %8s %8s %10s %8s %9s\n", "s", "steps", "RSS KiB", "buffers", "programs");
  printf("soak: %8.1f %8ld %10ld %8ld %9ld  <- at rest after warm-up\n", base.s, base.steps,
         base.rss_kib, base.buffers, base.programs);
  const size_t shown = n_samples > 12 ? n_samples / 12 : 1;
  long rss_peak = base.rss_kib, buffers_peak = base.buffers, programs_peak = base.programs;
  for (size_t i = 0; i < n_samples; ++i) {
    if (i % shown == 0)
      printf("soak: %8.1f %8ld %10ld %8ld %9ld\n", samples[i].s, samples[i].steps,
             samples[i].rss_kib, samples[i].buffers, samples[i].programs);
    if (samples[i].steps <= base.steps) continue;
    if (samples[i].rss_kib > rss_peak) rss_peak = samples[i].rss_kib;
    if (samples[i].buffers > buffers_peak) buffers_peak = samples[i].buffers;
    if (samples[i].programs > programs_peak) programs_peak = samples[i].programs;
  }
  printf("soak: %8.1f %8ld %10ld %8ld %9ld  <- at rest at the end\n", last.s, last.steps,
         last.rss_kib, last.buffers, last.programs);
  printf("soak: %ld steps on %ld threads in %.1f s (%.0f steps/s); from rest after warm-up "
         "to rest at the end: RSS %+ld KiB (peak %+ld while running), device buffers %+ld "
         "(peak %+ld), program-cache entries %+ld (peak %+ld)\n",
         steps, threads, seconds, (double)steps / seconds, last.rss_kib - base.rss_kib,
         rss_peak - base.rss_kib, last.buffers - base.buffers, buffers_peak - base.buffers,
         last.programs - base.programs, programs_peak - base.programs);
  /* flat: the same buffers and programs at rest, none built after warm-up,
   * no more buffers in flight than calls (a thread's call holds at most
   * two); resident memory within 4 MiB (allocator and driver noise: a leak
   * of 40 bytes a step over 100,000 steps exceeds it) */
  if (!RSS_BOUNDED) printf("soak: AddressSanitizer's quarantine: resident memory not bounded\n");
  if ((RSS_BOUNDED && last.rss_kib - base.rss_kib > 4096) || last.buffers != base.buffers ||
      programs_peak != base.programs || last.programs != base.programs ||
      buffers_peak > base.buffers + 2 * threads) {
    fprintf(stderr, "soak: resources grew after warm-up\n");
    failed = 1;
  }
  pthread_barrier_destroy(&warmed_up);
  fcl_context_release(ctx);
  free(w);
  free(tid);
  printf("soak: %s\n", failed ? "FAILED" : "passed");
  return failed ? 1 : 0;
}
