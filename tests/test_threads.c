/*
 * test_threads.c — the library under several threads.
 *
 *   - Threads sharing one context, each running a mix of shapes, storage
 *     types, passes and both algorithms on its own buffers, get exactly the bits a
 *     serial run gets (split decodes too, whose partial outputs are leased
 *     from the context's kept scratch, and every call's kernels are leased
 *     from the shared cache); the shared program cache compiles each variant once;
 *     each thread's last error is its own and stays put while the other
 *     threads fail.
 *   - A thread switching I/O counting on and off while the others run never
 *     breaks a call: each runs wholly with counting or wholly without.
 *   - Threads with a context each, in parallel, match the serial bits too;
 *     the naive algorithm's CLBlast calls, whose cache is not thread-safe,
 *     run from all of them at once.
 *   - Threads creating contexts and listing devices at the same moment all
 *     succeed and see the same devices.
 *   - A call whose kernel is built never waits for another variant's
 *     compile; a call needing the variant being compiled waits for it.
 *
 * Worker threads never call ck_assert (a failure there would not unwind the
 * test cleanly): they record their first failure, and the test thread
 * reports it after joining them.
 */
#include "harness.h"
#include "context.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_THREADS 4
#define ROUNDS 2

typedef struct job {
  fcl_algo algo;
  fcl_dtype dtype;
  th_shape shape;
  int with_lse;
  int backward;  /* the forward, then the backward with dO = q: dQ is compared */
  int split;     /* a decode whose forward must split (checked in the serial run) */
} job;

static const job jobs[] = {
    {FCL_ALGO_FLASH, FCL_DTYPE_F32, {1, 2, 1, 33, 47, 64, 1}, 1, 0, 0},
    {FCL_ALGO_FLASH, FCL_DTYPE_F16, {2, 4, 2, 20, 20, 32, 0}, 0, 0, 0},
    {FCL_ALGO_FLASH, FCL_DTYPE_BF16, {1, 3, 3, 9, 70, 40, 1}, 1, 0, 0},
    {FCL_ALGO_FLASH, FCL_DTYPE_F32, {1, 1, 1, 17, 5, 256, 0}, 1, 0, 0},
    {FCL_ALGO_NAIVE, FCL_DTYPE_F32, {1, 2, 2, 40, 30, 16, 1}, 1, 0, 0},
    {FCL_ALGO_NAIVE, FCL_DTYPE_F32, {2, 3, 1, 17, 64, 24, 0}, 0, 0, 0},
    {FCL_ALGO_FLASH, FCL_DTYPE_F32, {1, 4, 2, 29, 41, 64, 1}, 0, 1, 0},
    {FCL_ALGO_NAIVE, FCL_DTYPE_F32, {1, 2, 1, 23, 31, 32, 0}, 0, 1, 0},
    /* decode: split forwards, whose partial outputs are leased from the
     * context's kept scratch (host/run/scratch.c) */
    {FCL_ALGO_FLASH, FCL_DTYPE_F32, {1, 4, 1, 1, 1100, 64, 1}, 1, 0, 1},
    {FCL_ALGO_FLASH, FCL_DTYPE_BF16, {1, 8, 1, 2, 700, 32, 0}, 0, 0, 1},
};
#define N_JOBS (sizeof jobs / sizeof jobs[0])

/* A job's inputs (host and, for the shared context, device) and the serial
 * run's outputs: [0] without I/O counting, [1] with it. */
typedef struct job_data {
  fcl_attention_desc desc;
  th_problem p;
  float *o[2], *lse[2];
} job_data;

typedef struct worker {
  int id;
  fcl_context *ctx;      /* shared, or NULL: the worker makes its own */
  job_data *data;
  pthread_barrier_t *start;
  int check_errors;      /* also make failing calls and check the messages */
  char failure[512];     /* the first thing that went wrong, or "" */
  long runs;
} worker;

static void failed(worker *w, const char *fmt, ...) {
  if (w->failure[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->failure, sizeof w->failure, fmt, ap);
  va_end(ap);
}

static fcl_attention_desc job_desc(const job *j) { return th_shape_desc(&j->shape, j->dtype); }

/* The backward part of a backward job: dQ of dO = q into dq_host. */
static fcl_status run_backward(fcl_context *ctx, const job *j, const job_data *jd, cl_mem q,
                               cl_mem k, cl_mem v, cl_mem o, cl_mem lse, float *dq_host,
                               fcl_run_info *info) {
  size_t es = fcl_dtype_size(j->dtype);
  cl_mem dq = fclu_poisoned_buffer(ctx, jd->p.q_elems * es);
  cl_mem dk = fclu_poisoned_buffer(ctx, jd->p.kv_elems * es);
  cl_mem dv = fclu_poisoned_buffer(ctx, jd->p.kv_elems * es);
  fcl_status st = dq && dk && dv ? FCL_SUCCESS : FCL_ERROR_OUT_OF_MEMORY;
  if (st == FCL_SUCCESS)
    st = fcl_attention_backward(ctx, &jd->desc, j->algo, q, k, v, o, lse, q, dq, dk, dv, info);
  if (st == FCL_SUCCESS && fclu_download(ctx, dq, dq_host, jd->p.q_elems, j->dtype) != 0)
    st = FCL_ERROR_OPENCL;
  cl_mem all[] = {dq, dk, dv};
  for (int i = 0; i < 3; ++i)
    if (all[i]) clReleaseMemObject(all[i]);
  return st;
}

/* Runs job `j` on ctx with inputs q, k, v; downloads O (and LSE) into
 * o, lse (caller-allocated), or for a backward job dQ into o.
 * @return the status. */
static fcl_status run_job(fcl_context *ctx, const job *j, const job_data *jd, cl_mem q,
                          cl_mem k, cl_mem v, float *o, float *lse, fcl_run_info *info) {
  size_t es = fcl_dtype_size(j->dtype);
  const int want_lse = j->with_lse || j->backward;
  cl_mem dout = fclu_poisoned_buffer(ctx, jd->p.q_elems * es);
  cl_mem dlse = want_lse ? fclu_poisoned_buffer(ctx, jd->p.lse_elems * sizeof(float)) : NULL;
  if (!dout || (want_lse && !dlse)) return FCL_ERROR_OUT_OF_MEMORY;
  fcl_status st = fcl_attention_forward(ctx, &jd->desc, j->algo, q, k, v, dout, dlse,
                                        j->backward ? NULL : info);
  if (st == FCL_SUCCESS && j->backward) {
    st = run_backward(ctx, j, jd, q, k, v, dout, dlse, o, info);
  } else if (st == FCL_SUCCESS &&
             (fclu_download(ctx, dout, o, jd->p.q_elems, j->dtype) != 0 ||
              (j->with_lse && fclu_download(ctx, dlse, lse, jd->p.lse_elems, FCL_DTYPE_F32) != 0)))
    st = FCL_ERROR_OPENCL;
  clReleaseMemObject(dout);
  if (dlse) clReleaseMemObject(dlse);
  return st;
}

static void prepare_jobs(fcl_context *ctx, job_data *data) {
  for (size_t i = 0; i < N_JOBS; ++i) {
    data[i].desc = job_desc(&jobs[i]);
    th_problem_init(&data[i].p, ctx, &data[i].desc, 40 + i, 1.0);
  }
}

/* The serial reference: every job once, in order, on a context of its own
 * (wrapping the same OpenCL objects), without and with I/O counting. */
static long serial_runs(fcl_context *owner, job_data *data, int variants) {
  fcl_context *serial = NULL;
  ck_assert_int_eq(fcl_context_wrap(fcl_context_cl_context(owner), fcl_context_cl_device(owner),
                                    fcl_context_cl_queue(owner), &serial),
                   FCL_SUCCESS);
  long builds = 0;
  for (int v = 0; v < variants; ++v) {
    ck_assert_int_eq(fcl_context_set_count_io(serial, v), FCL_SUCCESS);
    for (size_t i = 0; i < N_JOBS; ++i) {
      job_data *jd = &data[i];
      jd->o[v] = malloc(jd->p.q_elems * sizeof(float));
      jd->lse[v] = malloc(jd->p.lse_elems * sizeof(float));
      ck_assert(jd->o[v] && jd->lse[v]);
      fcl_run_info info;
      memset(&info, 0, sizeof info);
      fcl_status st = run_job(serial, &jobs[i], jd, jd->p.dq, jd->p.dk, jd->p.dv, jd->o[v],
                              jd->lse[v], jobs[i].split ? &info : NULL);
      ck_assert_msg(st == FCL_SUCCESS, "serial job %zu: %s: %s", i, fcl_status_str(st),
                    fcl_context_last_error(serial));
      ck_assert_msg(!jobs[i].split || info.plan.splits > 1,
                    "serial job %zu: the decode did not split (%u), so it leased no scratch", i,
                    info.plan.splits);
    }
    if (v == 0) builds = fcl__program_builds(serial);
  }
  fcl_context_release(serial);
  return builds;
}

static void free_jobs(job_data *data) {
  for (size_t i = 0; i < N_JOBS; ++i) {
    for (int v = 0; v < 2; ++v) {
      free(data[i].o[v]);
      free(data[i].lse[v]);
    }
    th_problem_free(&data[i].p);
  }
}

/* Makes a call that must fail with this worker's own bad head_dim and
 * checks the message names it. */
static void fail_on_purpose(worker *w, fcl_context *ctx, const job_data *jd,
                            const char **kept, char *expect, size_t expect_len) {
  fcl_attention_desc bad = jd->desc;
  bad.head_dim = FCL_MAX_HEAD_DIM + 1 + (size_t)w->id;
  fcl_status st = fcl_attention_forward(ctx, &bad, FCL_ALGO_FLASH, jd->p.dq, jd->p.dk,
                                        jd->p.dv, jd->p.dq, NULL, NULL);
  if (st != FCL_ERROR_UNSUPPORTED) failed(w, "worker %d: bad head_dim gave %s", w->id,
                                          fcl_status_str(st));
  snprintf(expect, expect_len, "head_dim = %zu", bad.head_dim);
  *kept = fcl_context_last_error(ctx);
  if (!strstr(*kept, expect))
    failed(w, "worker %d: last error \"%s\" lacks \"%s\"", w->id, *kept, expect);
}

static void *work(void *arg) {
  worker *w = arg;
  fcl_context *ctx = w->ctx;
  cl_mem q[N_JOBS] = {0}, k[N_JOBS] = {0}, v[N_JOBS] = {0};
  int own = ctx == NULL;
  if (own) {
    /* A context of its own, with its own copies of the inputs. */
    fcl_status st = fcl_context_create(getenv("FLASHCL_TEST_DEVICE"), &ctx);
    if (st != FCL_SUCCESS) {
      failed(w, "worker %d: context: %s", w->id, fcl_status_str(st));
      fcl_context_release(ctx);
      pthread_barrier_wait(w->start);
      return NULL;
    }
    for (size_t i = 0; i < N_JOBS; ++i) {
      const th_problem *p = &w->data[i].p;
      q[i] = fclu_upload(ctx, p->q, p->q_elems, jobs[i].dtype);
      k[i] = fclu_upload(ctx, p->k, p->kv_elems, jobs[i].dtype);
      v[i] = fclu_upload(ctx, p->v, p->kv_elems, jobs[i].dtype);
      if (!q[i] || !k[i] || !v[i]) failed(w, "worker %d: upload failed", w->id);
    }
  }
  pthread_barrier_wait(w->start);

  const char *kept = NULL;
  char expect[64] = "";
  for (int round = 0; round < ROUNDS && !w->failure[0]; ++round)
    for (size_t n = 0; n < N_JOBS && !w->failure[0]; ++n) {
      /* Each worker walks the jobs from a different place. */
      size_t i = (n + (size_t)w->id + (size_t)round) % N_JOBS;
      const job *j = &jobs[i];
      job_data *jd = &w->data[i];
      if (w->check_errors && !own) {
        /* The message of this worker's last failure has survived the
         * failures the others made meanwhile, at the same address. */
        if (kept && (kept != fcl_context_last_error(ctx) || !strstr(kept, expect)))
          failed(w, "worker %d: last error changed to \"%s\"", w->id,
                 fcl_context_last_error(ctx));
        fail_on_purpose(w, ctx, jd, &kept, expect, sizeof expect);
      }
      float *o = malloc(jd->p.q_elems * sizeof(float));
      float *lse = malloc(jd->p.lse_elems * sizeof(float));
      fcl_run_info info;
      memset(&info, 0, sizeof info);
      fcl_status st = run_job(ctx, j, jd, own ? q[i] : jd->p.dq, own ? k[i] : jd->p.dk,
                              own ? v[i] : jd->p.dv, o, lse, &info);
      if (st != FCL_SUCCESS) {
        failed(w, "worker %d job %zu: %s: %s", w->id, i, fcl_status_str(st),
               fcl_context_last_error(ctx));
      } else {
        /* With counting (switched by another thread) or without: the bits
         * of the serial run of the same kind. */
        int counted = info.bytes_counted != 0;
        if (memcmp(o, jd->o[counted], jd->p.q_elems * sizeof(float)) != 0 ||
            (j->with_lse && memcmp(lse, jd->lse[counted], jd->p.lse_elems * sizeof(float))))
          failed(w, "worker %d job %zu round %d: result differs from the serial run%s",
                 w->id, i, round, counted ? " (counting I/O)" : "");
      }
      free(o);
      free(lse);
      w->runs++;
    }
  if (own) {
    for (size_t i = 0; i < N_JOBS; ++i) {
      if (q[i]) clReleaseMemObject(q[i]);
      if (k[i]) clReleaseMemObject(k[i]);
      if (v[i]) clReleaseMemObject(v[i]);
    }
    fcl_context_release(ctx);
  }
  return NULL;
}

/* Switches I/O counting on and off until told to stop. */
typedef struct toggler {
  fcl_context *ctx;
  volatile int stop;
  long switches;
} toggler;

static void *toggle(void *arg) {
  toggler *t = arg;
  while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
    fcl_context_set_count_io(t->ctx, (int)(t->switches++ & 1));
    struct timespec ts = {0, 3000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* Runs N_THREADS workers (with a shared context, or NULL for one each),
 * optionally with a toggler; reports the first failure. */
static void run_workers(fcl_context *shared, job_data *data, int check_errors,
                        int with_toggler) {
  pthread_barrier_t start;
  ck_assert_int_eq(pthread_barrier_init(&start, NULL, N_THREADS + 1), 0);
  worker workers[N_THREADS];
  pthread_t threads[N_THREADS];
  for (int i = 0; i < N_THREADS; ++i) {
    memset(&workers[i], 0, sizeof workers[i]);
    workers[i].id = i;
    workers[i].ctx = shared;
    workers[i].data = data;
    workers[i].start = &start;
    workers[i].check_errors = check_errors;
    ck_assert_int_eq(pthread_create(&threads[i], NULL, work, &workers[i]), 0);
  }
  toggler t = {shared, 0, 0};
  pthread_t toggler_thread;
  if (with_toggler) ck_assert_int_eq(pthread_create(&toggler_thread, NULL, toggle, &t), 0);
  pthread_barrier_wait(&start);
  for (int i = 0; i < N_THREADS; ++i) pthread_join(threads[i], NULL);
  if (with_toggler) {
    __atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
    pthread_join(toggler_thread, NULL);
    printf("threads: count_io switched %ld times during the run\n", t.switches);
  }
  pthread_barrier_destroy(&start);
  long runs = 0;
  for (int i = 0; i < N_THREADS; ++i) {
    ck_assert_msg(!workers[i].failure[0], "%s", workers[i].failure);
    runs += workers[i].runs;
  }
  ck_assert_int_eq(runs, N_THREADS * ROUNDS * (long)N_JOBS);
}

static fcl_context *wrap_owner(fcl_context *owner) {
  fcl_context *ctx = NULL;
  ck_assert_int_eq(fcl_context_wrap(fcl_context_cl_context(owner), fcl_context_cl_device(owner),
                                    fcl_context_cl_queue(owner), &ctx),
                   FCL_SUCCESS);
  return ctx;
}

START_TEST(threads_sharing_a_context_match_the_serial_run) {
  fcl_context *owner = th_context();
  job_data data[N_JOBS];
  memset(data, 0, sizeof data);
  prepare_jobs(owner, data);
  long serial_builds = serial_runs(owner, data, 1);
  /* A fresh context, so that the threads race to compile every variant. */
  fcl_context *shared = wrap_owner(owner);
  run_workers(shared, data, 1, 0);
  long builds = fcl__program_builds(shared);
  printf("threads: %d threads x %d rounds x %zu jobs on one context: bit-identical; "
         "%ld programs built (serial run: %ld)\n",
         N_THREADS, ROUNDS, N_JOBS, builds, serial_builds);
  ck_assert_int_eq(builds, serial_builds);  /* each variant compiled once */
  fcl_context_release(shared);
  free_jobs(data);
  fcl_context_release(owner);
}
END_TEST

START_TEST(switching_io_counting_during_calls_breaks_none) {
  fcl_context *owner = th_context();
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(owner, &info), FCL_SUCCESS);
  if (!info.limits.has_int64_atomics) {
    printf("threads: %s cannot count I/O; skipped\n", info.name);
    fcl_context_release(owner);
    return;
  }
  job_data data[N_JOBS];
  memset(data, 0, sizeof data);
  prepare_jobs(owner, data);
  serial_runs(owner, data, 2);
  fcl_context *shared = wrap_owner(owner);
  run_workers(shared, data, 0, 1);
  fcl_context_release(shared);
  free_jobs(data);
  fcl_context_release(owner);
}
END_TEST

START_TEST(contexts_in_parallel_match_the_serial_run) {
  fcl_context *owner = th_context();
  job_data data[N_JOBS];
  memset(data, 0, sizeof data);
  prepare_jobs(owner, data);
  serial_runs(owner, data, 1);
  run_workers(NULL, data, 0, 0);
  printf("threads: %d contexts in parallel x %d rounds x %zu jobs: bit-identical\n",
         N_THREADS, ROUNDS, N_JOBS);
  free_jobs(data);
  fcl_context_release(owner);
}
END_TEST

/* ---- device listing and context creation from several threads --------- */

#define CREATORS 4
#define CREATE_ROUNDS 6

typedef struct creator {
  pthread_barrier_t *start;
  size_t devices_seen;   /* fcl_devices' count in each round, the first kept */
  char failure[512];
} creator;

static void *create_and_list(void *arg) {
  creator *c = arg;
  for (int round = 0; round < CREATE_ROUNDS; ++round) {
    pthread_barrier_wait(c->start);  /* every thread starts each round at once */
    fcl_context *ctx = NULL;
    fcl_status st = fcl_context_create(getenv("FLASHCL_TEST_DEVICE"), &ctx);
    if (st != FCL_SUCCESS && !c->failure[0])
      snprintf(c->failure, sizeof c->failure, "round %d: fcl_context_create: %s: %s", round,
               fcl_status_str(st), fcl_context_last_error(ctx));
    fcl_context_release(ctx);
    size_t n = 0;
    st = fcl_devices(NULL, 0, &n);
    if ((st != FCL_SUCCESS || n == 0 || (c->devices_seen && n != c->devices_seen)) &&
        !c->failure[0])
      snprintf(c->failure, sizeof c->failure, "round %d: fcl_devices: %s, %zu devices", round,
               fcl_status_str(st), n);
    if (!c->devices_seen) c->devices_seen = n;
  }
  return NULL;
}

/* Contexts created and devices listed by several threads at the same
 * moment, in a fresh process (the test's fork), where the driver
 * initialises itself: every call succeeds and sees every device. PoCL
 * 3.1 crashed or reported no device here before enumeration and creation
 * were serialised. */
START_TEST(creating_contexts_from_several_threads_at_once) {
  pthread_barrier_t start;
  ck_assert_int_eq(pthread_barrier_init(&start, NULL, CREATORS), 0);
  creator creators[CREATORS];
  pthread_t threads[CREATORS];
  memset(creators, 0, sizeof creators);
  for (int i = 0; i < CREATORS; ++i) {
    creators[i].start = &start;
    ck_assert_int_eq(pthread_create(&threads[i], NULL, create_and_list, &creators[i]), 0);
  }
  for (int i = 0; i < CREATORS; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < CREATORS; ++i) {
    ck_assert_msg(!creators[i].failure[0], "thread %d: %s", i, creators[i].failure);
    ck_assert_uint_eq(creators[i].devices_seen, creators[0].devices_seen);
  }
  printf("threads: %d threads x %d rounds created contexts and listed %zu device(s) at once\n",
         CREATORS, CREATE_ROUNDS, creators[0].devices_seen);
}
END_TEST

/* ---- the program cache never makes a lookup wait for a compile --------- */

/* One flash forward of head_dim d (a variant of its own per d) on ctx. */
typedef struct caller {
  fcl_context *ctx;
  const th_problem *p;
  fcl_status status;
  int done;              /* set, under `lock`, when the call returned */
  pthread_mutex_t *lock;
  pthread_cond_t *changed;
} caller;

static void *call_forward(void *arg) {
  caller *c = arg;
  cl_mem o = fclu_poisoned_buffer(c->ctx, c->p->q_elems * sizeof(float));
  c->status = o ? fcl_attention_forward(c->ctx, &c->p->desc, FCL_ALGO_FLASH, c->p->dq,
                                        c->p->dk, c->p->dv, o, NULL, NULL)
                : FCL_ERROR_OUT_OF_MEMORY;
  if (c->status == FCL_SUCCESS && clFinish(fcl_context_cl_queue(c->ctx)) != CL_SUCCESS)
    c->status = FCL_ERROR_OPENCL;
  if (o) clReleaseMemObject(o);
  pthread_mutex_lock(c->lock);
  c->done = 1;
  pthread_cond_broadcast(c->changed);
  pthread_mutex_unlock(c->lock);
  return NULL;
}

/* Waits up to `ms` for c to finish. @return whether it did. */
static int finished_within(caller *c, long ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(c->lock);
  while (!c->done && pthread_cond_timedwait(c->changed, c->lock, &until) == 0) {
  }
  const int done = c->done;
  pthread_mutex_unlock(c->lock);
  return done;
}

/* A thread compiling one variant is held inside its build (a test hook
 * stops it just before clBuildProgram). Meanwhile a call whose variant is
 * already built must return, within 60 s (it needs milliseconds); a call
 * needing the variant being built must wait for it, and not compile it a
 * second time. Before the cache's lock stopped covering compiles, the
 * first call waited for the build and this failed on the timeout. */
START_TEST(a_lookup_never_waits_for_another_variants_compile) {
  fcl_context *ctx = th_context();
  th_problem built, compiling;
  fcl_attention_desc d_built, d_compiling;
  fcl_attention_desc_init(&d_built, 1, 2, 1, 24, 40, 16);
  fcl_attention_desc_init(&d_compiling, 1, 2, 1, 24, 40, 48);
  th_problem_init(&built, ctx, &d_built, 1, 1.0);
  th_problem_init(&compiling, ctx, &d_compiling, 2, 1.0);
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
  caller warm = {ctx, &built, FCL_SUCCESS, 0, &lock, &changed};
  call_forward(&warm);  /* the first variant, built */
  ck_assert_int_eq(warm.status, FCL_SUCCESS);
  const long builds_before = fcl__program_builds(ctx);

  fcl__hold_builds(ctx, 1);
  caller builder = {ctx, &compiling, FCL_SUCCESS, 0, &lock, &changed};
  caller waiter = builder, lookup = {ctx, &built, FCL_SUCCESS, 0, &lock, &changed};
  pthread_t t_builder, t_waiter, t_lookup;
  ck_assert_int_eq(pthread_create(&t_builder, NULL, call_forward, &builder), 0);
  const int held = fcl__await_held_builds(ctx, 1, 60000);
  int lookup_done = 0, waiter_done = 1;
  if (held) {
    ck_assert_int_eq(pthread_create(&t_waiter, NULL, call_forward, &waiter), 0);
    ck_assert_int_eq(pthread_create(&t_lookup, NULL, call_forward, &lookup), 0);
    lookup_done = finished_within(&lookup, 60000);
    waiter_done = finished_within(&waiter, 200);  /* must still be waiting */
  }
  fcl__hold_builds(ctx, 0);
  pthread_join(t_builder, NULL);
  if (held) {
    pthread_join(t_waiter, NULL);
    pthread_join(t_lookup, NULL);
  }
  ck_assert_msg(held, "the build never reached the hold");
  ck_assert_msg(lookup_done, "a call whose kernel was built waited for another's compile");
  ck_assert_msg(!waiter_done, "a call needing the variant being compiled did not wait for it");
  ck_assert_int_eq(lookup.status, FCL_SUCCESS);
  ck_assert_int_eq(builder.status, FCL_SUCCESS);
  ck_assert_int_eq(waiter.status, FCL_SUCCESS);
  ck_assert_int_eq(fcl__program_builds(ctx), builds_before + 1);  /* compiled once */
  printf("threads: a built variant ran while another was held in its compile; a second "
         "caller of that one waited, and it was compiled once\n");
  th_problem_free(&built);
  th_problem_free(&compiling);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("threads");
  TCase *tc = th_tcase("threads");
  tcase_add_test(tc, threads_sharing_a_context_match_the_serial_run);
  tcase_add_test(tc, switching_io_counting_during_calls_breaks_none);
  tcase_add_test(tc, contexts_in_parallel_match_the_serial_run);
  tcase_add_test(tc, creating_contexts_from_several_threads_at_once);
  tcase_add_test(tc, a_lookup_never_waits_for_another_variants_compile);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
