/*
 * test_faults.c — resource failures, as SQLite tests its malloc failures.
 *
 * For every entry point, algorithm and kind of failure (host allocation,
 * device buffer, enqueue; host/core/resources.h says what each simulates), the n-th
 * operation of that kind is made to fail, for n = 1, 2, ... until a call
 * completes without reaching it. At every n:
 *   - the status is exactly the one the kind maps to (out of memory for
 *     allocations; FCL_ERROR_OPENCL for an enqueue, FCL_ERROR_CLBLAST when
 *     the enqueue was a CLBlast call), with a message;
 *   - each output (poisoned before the call) is either still entirely
 *     poisoned or entirely equal, bit for bit, to a clean run's result;
 *   - the context that saw the failure still works: a clean call on it
 *     succeeds with the clean result;
 *   - no OpenCL object is left behind (the OpenCL context's reference
 *     count, which PoCL raises for each buffer, queue and program, is back
 *     to its value before the call), and, under LeakSanitizer or valgrind
 *     (scripts/sanitize.sh), no memory.
 * Allocation failures are injected on a fresh context wrapped around the
 * same OpenCL objects, so its program cache is cold and the compile path
 * is swept too; enqueue failures on one context warmed by a clean call and
 * kept across the sweep (a build enqueues nothing; a compile per step cost
 * most of this suite's time on PoCL).
 * Each entry point runs in three variants: "chunked" (the naive algorithm
 * takes 8 chunks, so its staged outputs and their copies are swept; no run
 * info, no I/O counting), "instrumented" (the same, plus run info, so
 * profiling markers, and I/O counting, so a counter buffer, a fill and a
 * read), both on a causal GQA problem of 2 batches, and "one-chunk" (one
 * batch, as many kv heads as query heads: the naive algorithm runs in one
 * chunk and writes the caller's buffers directly), and "general" (the
 * general problem: a ragged batch with an empty sequence and one without
 * keys, a sliding window, softcap and ALiBi, instrumented and chunked, so
 * that the uploads of its sequence table and work lists are swept too).
 *
 * The entry points are rows of a table (forward, backward, the forward in
 * key splits, the merge of attention states, the append to a KV cache,
 * the append and the forward in one call, and that call on the decode
 * kernel in key splits merged in their own launch, whose arrival counts
 * are a buffer of their own, and the append into a paged cache, which
 * reads back the block-table entries it writes through; with attention
 * sinks, the forward in key splits and the backward with the sinks'
 * gradient):
 * each names its outputs and a function that calls it.
 */
#include "harness.h"
#include "resources.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OUTPUTS 4
#define N_VARIANTS 4 /* chunked, instrumented, one-chunk, general (variants[]) */
#define MAX_SWEEP 10000 /* a safety net: no call performs this many operations */

typedef struct fixture fixture;

/** One entry point under test. */
typedef struct entry {
  const char *name;
  int per_algo; /* swept once per algorithm */
  /* Creates the outputs (and any extra inputs) in f->out. */
  void (*setup)(fixture *f);
  fcl_status (*call)(fcl_context *ctx, fixture *f, fcl_algo algo, int instrumented);
} entry;

struct fixture {
  fcl_context *owner;  /* owns the OpenCL context, device and queue */
  fcl_context *keeper; /* keeps CLBlast's kernel cache alive (naive.c) */
  cl_context cl;
  cl_device_id dev;
  cl_command_queue queue;
  fcl_attention_desc desc;
  th_problem p;
  cl_mem fwd_o, fwd_lse, dout; /* the backward's further inputs */
  cl_mem parts_o, parts_lse;   /* the merge's inputs */
  cl_mem table;                /* the paged append's block table */
  fcl_attention_desc cache;    /* the append's: desc without its ragged batch and ALiBi */
  size_t n_out;
  cl_mem out[MAX_OUTPUTS];
  size_t out_bytes[MAX_OUTPUTS];
  const char *out_name[MAX_OUTPUTS];
  unsigned char *clean[N_VARIANTS][MAX_OUTPUTS]; /* [variant][output] */
};

/* ---- the entry points ---------------------------------------------------- */

static void add_output(fixture *f, const char *name, size_t bytes) {
  cl_int err;
  f->out[f->n_out] = clCreateBuffer(f->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  f->out_bytes[f->n_out] = bytes;
  f->out_name[f->n_out] = name;
  f->n_out++;
}

static void forward_setup(fixture *f) {
  add_output(f, "O", f->p.q_elems * sizeof(float));
  add_output(f, "LSE", f->p.lse_elems * sizeof(float));
}

static fcl_status forward_call(fcl_context *ctx, fixture *f, fcl_algo algo,
                               int instrumented) {
  fcl_run_info info;
  return fcl_attention_forward(ctx, &f->desc, algo, f->p.dq, f->p.dk, f->p.dv,
                               f->out[0], f->out[1], instrumented ? &info : NULL);
}

/* The backward's inputs beyond q, k, v: a clean forward's O and LSE, and a
 * random dO. */
static void backward_setup(fixture *f) {
  cl_int err;
  const size_t q_bytes = f->p.q_elems * sizeof(float), kv_bytes = f->p.kv_elems * sizeof(float);
  f->fwd_o = clCreateBuffer(f->cl, CL_MEM_READ_WRITE, q_bytes, NULL, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  f->fwd_lse = clCreateBuffer(f->cl, CL_MEM_READ_WRITE, f->p.lse_elems * sizeof(float), NULL,
                              &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  ck_assert_int_eq(fcl_attention_forward(f->owner, &f->desc, FCL_ALGO_FLASH, f->p.dq, f->p.dk,
                                         f->p.dv, f->fwd_o, f->fwd_lse, NULL),
                   FCL_SUCCESS);
  float *dout = malloc(q_bytes);
  ck_assert_ptr_nonnull(dout);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 78);
  fclu_fill_normal(&rng, dout, f->p.q_elems, 1.0, FCL_DTYPE_F32);
  f->dout = fclu_upload(f->owner, dout, f->p.q_elems, FCL_DTYPE_F32);
  free(dout);
  ck_assert_ptr_nonnull(f->dout);
  ck_assert_int_eq(clFinish(f->queue), CL_SUCCESS);
  add_output(f, "dQ", q_bytes);
  add_output(f, "dK", kv_bytes);
  add_output(f, "dV", kv_bytes);
}

static fcl_status backward_call(fcl_context *ctx, fixture *f, fcl_algo algo,
                                int instrumented) {
  fcl_run_info info;
  return fcl_attention_backward(ctx, &f->desc, algo, f->p.dq, f->p.dk, f->p.dv, f->fwd_o,
                                f->fwd_lse, f->dout, f->out[0], f->out[1], f->out[2],
                                instrumented ? &info : NULL);
}

/* The forward in three key splits with packed heads: its scratch and the
 * merge that writes the outputs. */
static fcl_status split_forward_call(fcl_context *ctx, fixture *f, fcl_algo algo,
                                     int instrumented) {
  const fcl_plan hint = {.splits = 3};
  fcl_status st = fcl_context_set_flash_tiling(ctx, &hint);
  if (st != FCL_SUCCESS) return st;
  return forward_call(ctx, f, algo, instrumented);
}

/* Three partial states of the forward's rows, one of them partly empty. */
#define MERGE_PARTS 3
static void merge_setup(fixture *f) {
  const size_t o_n = MERGE_PARTS * f->p.q_elems, lse_n = MERGE_PARTS * f->p.lse_elems;
  float *x = malloc(o_n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 79);
  fclu_fill_normal(&rng, x, o_n, 1.0, FCL_DTYPE_F32);
  f->parts_o = fclu_upload(f->owner, x, o_n, FCL_DTYPE_F32);
  for (size_t i = 0; i < lse_n; ++i) x[i] = i % 7 == 0 ? -INFINITY : x[i] * 4.0f;
  f->parts_lse = fclu_upload(f->owner, x, lse_n, FCL_DTYPE_F32);
  free(x);
  ck_assert(f->parts_o && f->parts_lse);
  forward_setup(f);
}

static fcl_status merge_call(fcl_context *ctx, fixture *f, fcl_algo algo, int instrumented) {
  (void)algo;
  fcl_merge_desc m;
  fcl_merge_desc_init(&m, MERGE_PARTS, f->desc.batch, f->desc.seqlen_q, f->desc.heads_q,
                      f->desc.head_dim);
  fcl_run_info info;
  return fcl_merge_states(ctx, &m, f->parts_o, f->parts_lse, f->out[0], f->out[1],
                          instrumented ? &info : NULL);
}

/* Four new rows appended to caches of the fixture's K and V shape, filled
 * to different lengths (the last one to its capacity). */
#define APPEND_ROWS 4
static const int32_t append_lens[3] = {0, 7, 16};
static void cache_setup(fixture *f) {
  f->cache = f->desc;
  f->cache.cu_seqlens_q = f->cache.cu_seqlens_k = NULL;
  f->cache.alibi_slopes = NULL;
  f->cache.seqlens_k = append_lens;
}

static void append_setup(fixture *f) {
  cache_setup(f);
  add_output(f, "K cache", f->p.kv_elems * sizeof(float));
  add_output(f, "V cache", f->p.kv_elems * sizeof(float));
}

/* The same caches as pools of 16-token pages, named in reverse order. */
static void paged_append_setup(fixture *f) {
  cache_setup(f);
  fcl_attention_desc *c = &f->cache;
  c->page_size = 16;
  c->pages_per_seq = (c->seqlen_k + c->page_size - 1) / c->page_size;
  c->num_pages = c->batch * c->pages_per_seq;
  int32_t *table = malloc(c->num_pages * sizeof *table);
  ck_assert_ptr_nonnull(table);
  for (size_t i = 0; i < c->num_pages; ++i) table[i] = (int32_t)(c->num_pages - 1 - i);
  cl_int err;
  f->table = clCreateBuffer(f->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                            c->num_pages * sizeof *table, table, &err);
  free(table);
  ck_assert_int_eq(err, CL_SUCCESS);
  c->block_table = f->table;
  fcl_buffer_sizes sz;
  ck_assert_int_eq(fcl_attention_buffer_sizes(c, &sz, NULL, 0), FCL_SUCCESS);
  add_output(f, "K pool", sz.k);
  add_output(f, "V pool", sz.v);
}

static fcl_status append_call(fcl_context *ctx, fixture *f, fcl_algo algo, int instrumented) {
  (void)algo;
  fcl_run_info info;  /* the new rows: the first of q's and k's buffers, packed */
  return fcl_kv_cache_append(ctx, &f->cache, APPEND_ROWS, NULL, NULL, f->p.dk, f->p.dv,
                             f->out[0], f->out[1], instrumented ? &info : NULL);
}

/* The decode step in one call: the append, then the forward over the
 * raised lengths, of APPEND_ROWS new query rows. */
static void attend_setup(fixture *f) {
  append_setup(f);
  f->cache.seqlen_q = APPEND_ROWS;
  const size_t rows = f->cache.batch * APPEND_ROWS * f->cache.heads_q;
  add_output(f, "O", rows * f->cache.head_dim * sizeof(float));
  add_output(f, "LSE", rows * sizeof(float));
}

static fcl_status attend_call(fcl_context *ctx, fixture *f, fcl_algo algo, int instrumented) {
  fcl_run_info info;  /* q: the first rows of q's buffer; the new K and V rows as the append's */
  return fcl_attention_forward_kvcache(ctx, &f->cache, algo, f->p.dq, APPEND_ROWS, NULL, NULL,
                                       f->p.dk, f->p.dv, f->out[0], f->out[1], f->out[2],
                                       f->out[3], instrumented ? &info : NULL);
}

/* The same on the decode kernel in key splits (32 work-items: tiles of 16
 * keys, so 2 or 3 splits of the fixtures' caches), merged in the split
 * launch. */
static fcl_status attend_in_launch_call(fcl_context *ctx, fixture *f, fcl_algo algo,
                                        int instrumented) {
  const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_DECODE, .wg_size = 32, .splits = 3,
                         .merge = FCL_SPLIT_MERGE_LAST_SPLIT};
  fcl_status st = fcl_context_set_flash_tiling(ctx, &hint);
  if (st != FCL_SUCCESS) return st;
  return attend_call(ctx, f, algo, instrumented);
}

/* Attention sinks, one per query head, some large: the forward's row end
 * and the split merge's sink term, and the backward's dsinks kernel. */
static void sinks_setup(fixture *f) {
  float sinks[8];
  for (size_t h = 0; h < f->desc.heads_q && h < 8; ++h) sinks[h] = (float)h * 2.5f - 4.0f;
  ck_assert_uint_le(f->desc.heads_q, 8);
  f->desc.sinks = fclu_upload(f->owner, sinks, f->desc.heads_q, FCL_DTYPE_F32);
  ck_assert_ptr_nonnull(f->desc.sinks);
}

static void sinks_forward_setup(fixture *f) {
  sinks_setup(f);
  forward_setup(f);
}

static void sinks_backward_setup(fixture *f) {
  sinks_setup(f);
  backward_setup(f);
  add_output(f, "dsinks", f->desc.heads_q * sizeof(float));
  f->desc.dsinks = f->out[3];
}

static const entry entries[] = {
    {"forward", 1, forward_setup, forward_call},
    {"backward", 1, backward_setup, backward_call},
    {"split-forward", 0, forward_setup, split_forward_call},
    {"merge", 0, merge_setup, merge_call},
    {"append", 0, append_setup, append_call},
    {"paged-append", 0, paged_append_setup, append_call},
    {"append-and-attend", 1, attend_setup, attend_call},
    {"append-and-attend-in-launch", 0, attend_setup, attend_in_launch_call},
    {"sinks-split-forward", 0, sinks_forward_setup, split_forward_call},
    {"sinks-backward", 0, sinks_backward_setup, backward_call},
};
#define N_ENTRIES (sizeof entries / sizeof entries[0])

/* ---- helpers ------------------------------------------------------------- */

static const struct {
  const char *name;
  int instrumented; /* run info and I/O counting */
  int chunked;      /* a scratch limit that splits the naive algorithm */
  int shape;        /* index into shapes */
} variants[] = {
    {"chunked", 0, 1, 0},
    {"instrumented", 1, 1, 0},
    {"one-chunk", 0, 0, 1},
    {"general", 1, 1, 2},
};

/* batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal. Causal,
 * sizes that are multiples of nothing; with the scratch limit of
 * fresh_context the naive algorithm takes 2 x 2 x 2 = 8 chunks on the
 * first, and 1 on the second without it. */
static const size_t shapes[][7] = {
    {2, 4, 2, 37, 41, 24, 1},
    {1, 3, 3, 29, 45, 40, 1},
    {3, 4, 2, 27, 20, 24, 0},  /* the general shape: sequences, longest lengths */
};
#define N_SHAPES 3
#define GENERAL_SHAPE 2

/* The general shape's sequences: 13 x 20, 0 x 11 and 27 x 0 (rows that see
 * no key), keys packed, under a window of (9, 2), softcap 5 and ALiBi. */
static const int32_t general_cu_q[4] = {0, 13, 13, 40};
static const int32_t general_cu_k[4] = {0, 20, 31, 31};
static const float general_slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};

static const struct {
  unsigned mask;
  const char *name;
} kinds[] = {
    {FCL_INJECT_HOST_ALLOC, "host-alloc"},
    {FCL_INJECT_DEVICE_ALLOC, "device-alloc"},
    {FCL_INJECT_ENQUEUE, "enqueue"},
};
#define N_KINDS 3

static cl_uint refs_now(cl_context cl) {
  cl_uint n = 0;
  ck_assert_int_eq(clGetContextInfo(cl, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL),
                   CL_SUCCESS);
  return n;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* References to the OpenCL context once the queue is idle. Commands in
 * flight hold some, and PoCL drops them on its own threads a moment after
 * clFinish returns: wait until the count has not moved for 50 ms. */
static cl_uint context_refs(cl_context cl, cl_command_queue queue) {
  ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
  cl_uint n = refs_now(cl);
  for (int still = 0; still < 25;) {
    sleep_ms(2);
    cl_uint m = refs_now(cl);
    still = m == n ? still + 1 : 0;
    n = m;
  }
  return n;
}

/* 1 when the references come back to `want` within a few seconds. */
static int refs_return_to(cl_context cl, cl_command_queue queue, cl_uint want) {
  ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
  for (int i = 0; i < 2500; ++i) {
    if (refs_now(cl) == want) return 1;
    sleep_ms(2);
  }
  return 0;
}

/* A fresh flashcl context on the fixture's OpenCL objects, configured for
 * a variant: with `chunked` the naive backward has room for one slice of
 * its matrices at a time (P and dP, and with a softcap its slopes). */
static fcl_context *fresh_context(fixture *f, int variant) {
  fcl_context *ctx = NULL;
  ck_assert_int_eq(fcl_context_wrap(f->cl, f->dev, f->queue, &ctx), FCL_SUCCESS);
  size_t slice = f->desc.seqlen_q * f->desc.seqlen_k * sizeof(float);
  if (variants[variant].chunked)
    ck_assert_int_eq(
        fcl_context_set_scratch_limit(ctx, (f->desc.softcap > 0 ? 3 : 2) * slice + 16),
        FCL_SUCCESS);
  ck_assert_int_eq(fcl_context_set_count_io(ctx, variants[variant].instrumented),
                   FCL_SUCCESS);
  return ctx;
}

static void poison_outputs(fixture *f) {
  for (size_t i = 0; i < f->n_out; ++i)
    ck_assert_int_eq(fclu_poison(f->owner, f->out[i], f->out_bytes[i]), 0);
}

static unsigned char *read_output(fixture *f, size_t i) {
  unsigned char *host = malloc(f->out_bytes[i]);
  ck_assert_ptr_nonnull(host);
  ck_assert_int_eq(clEnqueueReadBuffer(f->queue, f->out[i], CL_TRUE, 0, f->out_bytes[i],
                                       host, 0, NULL, NULL),
                   CL_SUCCESS);
  return host;
}

static int all_poisoned(const unsigned char *x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (x[i] != 0xff) return 0;
  return 1;
}

static void fixture_init(fixture *f, const entry *e, int shape) {
  memset(f, 0, sizeof *f);
  f->owner = th_context();
  f->cl = fcl_context_cl_context(f->owner);
  f->dev = fcl_context_cl_device(f->owner);
  f->queue = fcl_context_cl_queue(f->owner);
  const size_t *s = shapes[shape];
  fcl_attention_desc_init(&f->desc, s[0], s[1], s[2], s[3], s[4], s[5]);
  f->desc.causal = (int)s[6];
  if (shape == GENERAL_SHAPE) {
    f->desc.cu_seqlens_q = general_cu_q;
    f->desc.cu_seqlens_k = general_cu_k;
    f->desc.window_left = 9;
    f->desc.window_right = 2;
    f->desc.softcap = 5.0f;
    f->desc.alibi_slopes = fclu_upload(f->owner, general_slopes, 4, FCL_DTYPE_F32);
    ck_assert_ptr_nonnull(f->desc.alibi_slopes);
  }
  /* Packed buffers of batch x the longest lengths hold a ragged batch too. */
  th_problem_init(&f->p, f->owner, &f->desc, 77, 1.0);
  e->setup(f);
  ck_assert_int_eq(fcl_context_wrap(f->cl, f->dev, f->queue, &f->keeper), FCL_SUCCESS);
}

static void fixture_free(fixture *f) {
  for (int v = 0; v < N_VARIANTS; ++v)
    for (size_t i = 0; i < f->n_out; ++i) free(f->clean[v][i]);
  for (size_t i = 0; i < f->n_out; ++i) clReleaseMemObject(f->out[i]);
  cl_mem extra[] = {f->fwd_o,     f->fwd_lse,   f->dout,  f->desc.alibi_slopes,
                    f->parts_o,   f->parts_lse, f->table, f->desc.sinks};
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; ++i)
    if (extra[i]) clReleaseMemObject(extra[i]);
  th_problem_free(&f->p);
  fcl_context_release(f->keeper);
  fcl_context_release(f->owner);
}

/* Clean results of every variant, computed on fresh contexts. */
static void clean_runs(fixture *f, const entry *e, fcl_algo algo, int shape,
                       int can_count) {
  for (int v = 0; v < N_VARIANTS; ++v) {
    if (variants[v].shape != shape || (variants[v].instrumented && !can_count)) continue;
    for (size_t i = 0; i < f->n_out; ++i) free(f->clean[v][i]);
    fcl_context *ctx = fresh_context(f, v);
    poison_outputs(f);
    fcl_status st = e->call(ctx, f, algo, variants[v].instrumented);
    ck_assert_msg(st == FCL_SUCCESS, "%s/%s clean run: %s: %s", e->name,
                  fcl_algo_name(algo), fcl_status_str(st), fcl_context_last_error(ctx));
    for (size_t i = 0; i < f->n_out; ++i) {
      f->clean[v][i] = read_output(f, i);
      ck_assert_msg(!all_poisoned(f->clean[v][i], f->out_bytes[i]), "%s not written",
                    f->out_name[i]);
    }
    fcl_context_release(ctx);
  }
  /* The keeper runs too, so that CLBlast's cache stays filled (naive.c). */
  poison_outputs(f);
  ck_assert_int_eq(e->call(f->keeper, f, algo, 0), FCL_SUCCESS);
}

/* ---- the sweep ------------------------------------------------------------ */

typedef struct sweep_counts {
  long ops;             /* operations of the kind in a complete call */
  long injected;        /* calls that failed at an injected operation */
  long status[FCL_ERROR_CLBLAST + 1];
  long untouched[MAX_OUTPUTS], written[MAX_OUTPUTS];
} sweep_counts;

static fcl_status expected_status(unsigned kind, fcl_algo algo, const char *message) {
  if (kind != FCL_INJECT_ENQUEUE) return FCL_ERROR_OUT_OF_MEMORY;
  if (algo == FCL_ALGO_NAIVE && strstr(message, "CLBlast")) return FCL_ERROR_CLBLAST;
  return FCL_ERROR_OPENCL;
}

static void check_outputs(fixture *f, int variant, int must_be_clean, const char *what,
                          sweep_counts *c) {
  for (size_t i = 0; i < f->n_out; ++i) {
    unsigned char *got = read_output(f, i);
    int same = memcmp(got, f->clean[variant][i], f->out_bytes[i]) == 0;
    int poisoned = all_poisoned(got, f->out_bytes[i]);
    if (must_be_clean) {
      ck_assert_msg(same, "%s: %s differs from the clean run", what, f->out_name[i]);
    } else {
      ck_assert_msg(same || poisoned, "%s: %s is half written", what, f->out_name[i]);
      if (c) {
        if (same) c->written[i]++;
        else c->untouched[i]++;
      }
    }
    free(got);
  }
}

/* The context an enqueue sweep reuses: fresh, then warmed by a clean call
 * (programs built, scratch kept). Builds and allocations enqueue nothing,
 * so a warm context meets the same enqueues as a cold one (the ops counts
 * say so) without a compile per step; *refs becomes the count with it. */
static fcl_context *warm_context(fixture *f, const entry *e, fcl_algo algo, int variant,
                                 cl_uint *refs) {
  fcl_context *ctx = fresh_context(f, variant);
  poison_outputs(f);
  ck_assert_int_eq(e->call(ctx, f, algo, variants[variant].instrumented), FCL_SUCCESS);
  check_outputs(f, variant, 1, "warm-up", NULL);
  *refs = context_refs(f->cl, f->queue);
  return ctx;
}

static void sweep(fixture *f, const entry *e, fcl_algo algo, unsigned kind,
                  const char *kind_name, int variant, cl_uint refs, sweep_counts *c) {
  const int instrumented = variants[variant].instrumented;
  memset(c, 0, sizeof *c);
  char what[160];
  /* Host and device allocations are swept on a fresh context each step,
   * so that the compile path and the scratch's creation are reached. */
  const cl_uint refs_without = refs;
  fcl_context *reused =
      kind == FCL_INJECT_ENQUEUE ? warm_context(f, e, algo, variant, &refs) : NULL;
  for (long n = 1; n <= MAX_SWEEP; ++n) {
    snprintf(what, sizeof what, "%s/%s/%s/%s n=%ld", e->name, fcl_algo_name(algo),
             kind_name, variants[variant].name, n);
    fcl_context *ctx = reused ? reused : fresh_context(f, variant);
    poison_outputs(f);
    fcl__inject_failures(ctx, kind, n);
    fcl_status st = e->call(ctx, f, algo, instrumented);
    long ran = fcl__inject_failures(ctx, 0, 0);
    if (ran < n) {  /* the call completed without reaching the n-th */
      ck_assert_msg(st == FCL_SUCCESS, "%s: %s: %s", what, fcl_status_str(st),
                    fcl_context_last_error(ctx));
      check_outputs(f, variant, 1, what, NULL);
      fcl_context_release(ctx);
      c->ops = ran;
      ck_assert_msg(refs_return_to(f->cl, f->queue, refs_without),
                    "%s: OpenCL context references %u, want %u", what,
                    refs_now(f->cl), refs_without);
      return;
    }
    const char *msg = fcl_context_last_error(ctx);
    fcl_status want = expected_status(kind, algo, msg);
    ck_assert_msg(st == want, "%s: want %s, got %s (%s)", what, fcl_status_str(want),
                  fcl_status_str(st), msg);
    ck_assert_msg(strlen(msg) > 0, "%s: no message", what);
    c->injected++;
    c->status[st]++;
    check_outputs(f, variant, 0, what, c);

    /* The context that failed still works. */
    poison_outputs(f);
    st = e->call(ctx, f, algo, instrumented);
    ck_assert_msg(st == FCL_SUCCESS, "%s: retry: %s: %s", what, fcl_status_str(st),
                  fcl_context_last_error(ctx));
    check_outputs(f, variant, 1, what, NULL);
    if (!reused) fcl_context_release(ctx);
    /* Every buffer, program and queue of the call was released. */
    ck_assert_msg(refs_return_to(f->cl, f->queue, refs),
                  "%s: OpenCL context references %u, want %u", what, refs_now(f->cl),
                  refs);
  }
  ck_abort_msg("%s: no end after %d operations", what, MAX_SWEEP);
}

static void print_counts(const fixture *f, const char *name, const char *algo,
                         const char *kind, const char *variant, const sweep_counts *c) {
  char statuses[256] = "", outputs[256] = "";
  size_t len = 0;
  for (int s = 0; s <= FCL_ERROR_CLBLAST; ++s)
    if (c->status[s])
      len += (size_t)snprintf(statuses + len, sizeof statuses - len, "%s%s x%ld",
                              len ? ", " : "", fcl_status_str((fcl_status)s), c->status[s]);
  len = 0;
  for (size_t i = 0; i < f->n_out; ++i)
    len += (size_t)snprintf(outputs + len, sizeof outputs - len, "%s%s %ld/%ld",
                            len ? ", " : "", f->out_name[i], c->untouched[i],
                            c->written[i]);
  printf("faults: %-8s %-6s %-12s %-12s ops %3ld  injected %3ld  %s  "
         "untouched/written: %s  leaks 0\n",
         name, algo, kind, variant, c->ops, c->injected,
         c->injected ? statuses : "(none)", outputs);
  fflush(stdout);
}

/* One entry point and algorithm: every kind, every variant. */
static void sweep_entry(const entry *e, fcl_algo algo) {
  long total = 0;
  for (int shape = 0; shape < N_SHAPES; ++shape) {
    fixture f;
    fixture_init(&f, e, shape);
    fcl_device_info info;
    ck_assert_int_eq(fcl_context_device(f.owner, &info), FCL_SUCCESS);
    const int can_count = info.limits.has_int64_atomics;
    clean_runs(&f, e, algo, shape, can_count);
    const cl_uint refs = context_refs(f.cl, f.queue);
    for (int v = 0; v < N_VARIANTS; ++v)
      for (int k = 0; k < N_KINDS; ++k) {
        if (variants[v].shape != shape || (variants[v].instrumented && !can_count)) continue;
        sweep_counts c;
        sweep(&f, e, algo, kinds[k].mask, kinds[k].name, v, refs, &c);
        ck_assert_int_eq(c.injected, c.ops);  /* every operation was tried */
        print_counts(&f, e->name, fcl_algo_name(algo), kinds[k].name, variants[v].name, &c);
        total += c.injected;
      }
    fixture_free(&f);
  }
  ck_assert_int_gt(total, 0);
}

START_TEST(entry_points_survive_every_injected_failure) {
  /* _i enumerates (entry, algorithm). */
  size_t index = (size_t)_i;
  const entry *e = &entries[index / 2];
  fcl_algo algo = (fcl_algo)(index % 2);
  if (!e->per_algo && algo != FCL_ALGO_FLASH) return;
  sweep_entry(e, algo);
}
END_TEST

/* ---- functions that run before a context exists ------------------------- */

typedef struct fixed_call {
  const char *name;
  /* Returns the status; *made receives a context to release, if any. */
  fcl_status (*call)(fixture *f, fcl_context **made);
} fixed_call;

static fcl_status call_create(fixture *f, fcl_context **made) {
  (void)f;
  return fcl_context_create(getenv("FLASHCL_TEST_DEVICE"), made);
}

static fcl_status call_wrap(fixture *f, fcl_context **made) {
  return fcl_context_wrap(f->cl, f->dev, f->queue, made);
}

static fcl_status call_devices(fixture *f, fcl_context **made) {
  (void)f;
  *made = NULL;
  fcl_device_info list[8];
  size_t count = 99;
  fcl_status st = fcl_devices(list, 8, &count);
  ck_assert(st == FCL_SUCCESS ? count > 0 : count == 0);
  return st;
}

static const fixed_call context_calls[] = {
    {"create", call_create},
    {"wrap", call_wrap},
    {"devices", call_devices},
};

START_TEST(context_functions_survive_every_injected_failure) {
  const fixed_call *fc = &context_calls[_i];
  fixture f;
  memset(&f, 0, sizeof f);
  f.owner = th_context();
  f.cl = fcl_context_cl_context(f.owner);
  f.dev = fcl_context_cl_device(f.owner);
  f.queue = fcl_context_cl_queue(f.owner);
  const cl_uint refs = context_refs(f.cl, f.queue);
  for (int k = 0; k < N_KINDS; ++k) {
    sweep_counts c;
    memset(&c, 0, sizeof c);
    for (long n = 1;; ++n) {
      ck_assert_int_le(n, MAX_SWEEP);
      fcl_context *made = NULL;
      /* No context to arm yet: arm the calling thread. */
      fcl__inject_failures(NULL, kinds[k].mask, n);
      fcl_status st = fc->call(&f, &made);
      long ran = fcl__inject_failures(NULL, 0, 0);
      if (ran < n) {
        ck_assert_msg(st == FCL_SUCCESS, "%s n=%ld: %s: %s", fc->name, n,
                      fcl_status_str(st), fcl_context_last_error(made));
        fcl_context_release(made);
        c.ops = ran;
        break;
      }
      ck_assert_msg(st == FCL_ERROR_OUT_OF_MEMORY, "%s/%s n=%ld: got %s", fc->name,
                    kinds[k].name, n, fcl_status_str(st));
      c.injected++;
      c.status[st]++;
      /* A context, when one could be allocated, says why. */
      if (made) ck_assert(strlen(fcl_context_last_error(made)) > 0);
      fcl_context_release(made);
      ck_assert_msg(refs_return_to(f.cl, f.queue, refs), "%s n=%ld: references %u, want %u",
                    fc->name, n, refs_now(f.cl), refs);
    }
    ck_assert_int_eq(c.injected, c.ops);
    print_counts(&f, fc->name, "-", kinds[k].name, "-", &c);
  }
  fcl_context_release(f.owner);
}
END_TEST

int main(void) {
  Suite *s = suite_create("faults");
  TCase *tc = th_tcase("injected");
  tcase_add_loop_test(tc, entry_points_survive_every_injected_failure, 0,
                      (int)(2 * N_ENTRIES));
  tcase_add_loop_test(tc, context_functions_survive_every_injected_failure, 0,
                      (int)(sizeof context_calls / sizeof context_calls[0]));
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
