/*
 * measure.c — one shape on one device: draw inputs once, run each
 * algorithm (warm-up, then timed repeats), optionally count its I/O and
 * check it against the float64 reference on a sample of rows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "hostdata.h"
#include "reference.h"

/* Rows checked against the float64 reference: enough to catch indexing
 * and masking errors anywhere, few enough for 16k-long rows on the host. */
#define CHECK_ROWS 96

bench_result *bench_results_add(bench_results *all) {
  if (all->count == all->capacity) {
    size_t cap = all->capacity ? 2 * all->capacity : 64;
    bench_result *grown = realloc(all->items, cap * sizeof *grown);
    if (!grown) {
      fprintf(stderr, "flashcl-bench: out of memory\n");
      exit(1);
    }
    all->items = grown;
    all->capacity = cap;
  }
  bench_result *r = &all->items[all->count++];
  memset(r, 0, sizeof *r);
  return r;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The problem's inputs, host and device. */
typedef struct inputs {
  fcl_attention_desc desc;
  size_t q_elems, kv_elems, lse_elems;
  float *q, *k, *v;
  cl_mem dq, dk, dv;
} inputs;

static void inputs_free(inputs *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  if (in->dq) clReleaseMemObject(in->dq);
  if (in->dk) clReleaseMemObject(in->dk);
  if (in->dv) clReleaseMemObject(in->dv);
  memset(in, 0, sizeof *in);
}

static int inputs_init(inputs *in, fcl_context *ctx, const fcl_attention_desc *desc,
                       uint64_t seed) {
  memset(in, 0, sizeof *in);
  in->desc = *desc;
  in->q_elems = desc->batch * desc->seqlen_q * desc->heads_q * desc->head_dim;
  in->kv_elems = desc->batch * desc->seqlen_k * desc->heads_kv * desc->head_dim;
  in->lse_elems = desc->batch * desc->heads_q * desc->seqlen_q;
  in->q = malloc(in->q_elems * sizeof(float));
  in->k = malloc(in->kv_elems * sizeof(float));
  in->v = malloc(in->kv_elems * sizeof(float));
  if (!in->q || !in->k || !in->v) return -1;
  fclu_rng rng;
  fclu_rng_seed(&rng, seed);
  fclu_fill_normal(&rng, in->q, in->q_elems, 1.0, desc->dtype);
  fclu_fill_normal(&rng, in->k, in->kv_elems, 1.0, desc->dtype);
  fclu_fill_normal(&rng, in->v, in->kv_elems, 1.0, desc->dtype);
  in->dq = fclu_upload(ctx, in->q, in->q_elems, desc->dtype);
  in->dk = fclu_upload(ctx, in->k, in->kv_elems, desc->dtype);
  in->dv = fclu_upload(ctx, in->v, in->kv_elems, desc->dtype);
  return in->dq && in->dk && in->dv ? 0 : -1;
}

/* A spread of (b, h, i) rows: the first and last rows of the sequence,
 * the rows around where a causal mask starts to see keys, and the rest
 * evenly through the tensor. */
static size_t sample_rows(const fcl_attention_desc *d, size_t *rows, size_t max) {
  size_t total = d->batch * d->heads_q * d->seqlen_q, n = 0;
  if (total <= max) {
    for (size_t r = 0; r < total; ++r) rows[n++] = r;
    return n;
  }
  for (size_t k = 0; k < max; ++k) {
    size_t bh = (k * 7919) % (d->batch * d->heads_q), i;
    if (k % 4 == 0) i = k / 4 % 2 ? d->seqlen_q - 1 : 0;
    else i = (size_t)((double)(k * 104729 % 1000003) / 1000003.0 * (double)d->seqlen_q);
    rows[n++] = bh * d->seqlen_q + i;
  }
  return n;
}

/* Max abs error of o (layout of Q) against the reference on sampled rows;
 * also the largest |reference| seen. */
static double check_rows(const inputs *in, const float *o, const size_t *rows,
                         size_t n_rows, double *ref_max) {
  const fcl_attention_desc *d = &in->desc;
  double *ref = malloc(d->head_dim * sizeof *ref), lse, worst = 0.0;
  float *got = malloc(d->head_dim * sizeof *got);
  *ref_max = 0.0;
  for (size_t r = 0; r < n_rows && ref && got; ++r) {
    size_t i = rows[r] % d->seqlen_q, bh = rows[r] / d->seqlen_q;
    size_t h = bh % d->heads_q, b = bh / d->heads_q;
    fclref_forward_row(d, in->q, in->k, in->v, b, h, i, ref, &lse);
    memcpy(got, o + ((b * d->seqlen_q + i) * d->heads_q + h) * d->head_dim,
           d->head_dim * sizeof *got);
    double e = fclu_max_abs_err(got, ref, d->head_dim);
    if (!(e <= worst)) worst = e;
    double m = fclu_max_abs(ref, d->head_dim);
    if (m > *ref_max) *ref_max = m;
  }
  free(ref);
  free(got);
  return worst;
}

/* The naive algorithm's error emulated on the host for the sampled rows. */
static double emulated_naive_error(const inputs *in, const size_t *rows, size_t n_rows) {
  const fcl_attention_desc *d = &in->desc;
  float *row = malloc(d->head_dim * sizeof *row), lse_f;
  double *ref = malloc(d->head_dim * sizeof *ref), lse, worst = 0.0;
  for (size_t r = 0; r < n_rows && row && ref; ++r) {
    size_t i = rows[r] % d->seqlen_q, bh = rows[r] / d->seqlen_q;
    size_t h = bh % d->heads_q, b = bh / d->heads_q;
    fclref_forward_row(d, in->q, in->k, in->v, b, h, i, ref, &lse);
    fclref_naive_row(d, in->q, in->k, in->v, b, h, i, row, &lse_f);
    double e = fclu_max_abs_err(row, ref, d->head_dim);
    if (!(e <= worst)) worst = e;
  }
  free(row);
  free(ref);
  return worst;
}

static void set_failure(bench_result *r, fcl_status status, fcl_context *ctx) {
  r->status = status;
  snprintf(r->message, sizeof r->message, "%s", fcl_context_last_error(ctx));
  /* One line: the table and CSV hold it in a cell. */
  for (char *c = r->message; *c; ++c)
    if (*c == '\n' || *c == '\r') *c = ' ';
}

/* Runs one algorithm: warm-up, timed repeats, optional counting; leaves
 * the last output in *o_host when wanted. */
static void run_algo(fcl_context *ctx, const bench_options *opts, int is_gpu,
                     const inputs *in, bench_result *r, float **o_host) {
  const fcl_attention_desc *d = &in->desc;
  size_t es = fcl_dtype_size(d->dtype);
  cl_mem o = fclu_poisoned_buffer(ctx, in->q_elems * es);
  cl_mem lse = fclu_poisoned_buffer(ctx, in->lse_elems * sizeof(float));
  if (!o || !lse) {
    r->status = FCL_ERROR_OUT_OF_MEMORY;
    snprintf(r->message, sizeof r->message, "could not allocate the outputs");
    goto done;
  }
  if (r->pass != PASS_FWD) {
    r->status = FCL_ERROR_UNSUPPORTED;
    snprintf(r->message, sizeof r->message, "the %s pass is not available in this build",
             bench_pass_name(r->pass));
    goto done;
  }
  int warmup = opts->warmup >= 0 ? opts->warmup : is_gpu ? 2 : 1;
  int repeat = opts->repeat > 0 ? opts->repeat : is_gpu ? 10 : 3;
  fcl_run_info info;
  for (int w = 0; w < warmup; ++w) {
    fcl_status st = fcl_attention_forward(ctx, d, r->algo, in->dq, in->dk, in->dv, o, lse, NULL);
    if (st != FCL_SUCCESS) {
      set_failure(r, st, ctx);
      goto done;
    }
  }
  double *ms = malloc((size_t)repeat * sizeof *ms);
  for (int t = 0; t < repeat && ms; ++t) {
    fcl_status st = fcl_attention_forward(ctx, d, r->algo, in->dq, in->dk, in->dv, o, lse, &info);
    if (st != FCL_SUCCESS) {
      set_failure(r, st, ctx);
      free(ms);
      goto done;
    }
    ms[t] = info.ms;
  }
  if (!ms) goto done;
  qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
  r->ms_min = ms[0];
  r->ms_median = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
  free(ms);
  r->bytes_model = info.bytes_model;
  r->plan = info.plan;
  r->chunks = info.chunks;
  r->flops = info.flops;
  r->gbps = (double)r->bytes_model / (r->ms_median * 1e-3) / 1e9;
  r->tflops = r->flops / (r->ms_median * 1e-3) / 1e12;
  r->status = FCL_SUCCESS;

  if (opts->count_io) {
    fcl_status st = fcl_context_set_count_io(ctx, 1);
    if (st == FCL_SUCCESS)
      st = fcl_attention_forward(ctx, d, r->algo, in->dq, in->dk, in->dv, o, lse, &info);
    fcl_context_set_count_io(ctx, 0);
    if (st == FCL_SUCCESS) {
      r->bytes_counted = info.bytes_counted;
      r->have_counted = 1;
    } else {
      set_failure(r, st, ctx);
    }
  }
  if (o_host) {
    *o_host = malloc(in->q_elems * sizeof(float));
    if (*o_host && fclu_download(ctx, o, *o_host, in->q_elems, d->dtype) != 0) {
      free(*o_host);
      *o_host = NULL;
    }
  }
done:
  if (o) clReleaseMemObject(o);
  if (lse) clReleaseMemObject(lse);
}

void bench_measure(fcl_context *ctx, int device_index, const bench_options *opts,
                   const fcl_attention_desc *desc, int pass, bench_results *all) {
  fcl_device_info dev;
  fcl_context_device(ctx, &dev);
  static const fcl_algo order[2] = {FCL_ALGO_NAIVE, FCL_ALGO_FLASH};
  const unsigned bits[2] = {ALGO_NAIVE, ALGO_FLASH};

  inputs in;
  uint64_t seed = 0x5eed ^ (uint64_t)desc->seqlen_q * 31 ^ desc->head_dim;
  int ok = inputs_init(&in, ctx, desc, seed) == 0;

  size_t rows[CHECK_ROWS], n_rows = sample_rows(desc, rows, CHECK_ROWS);
  double naive_err = -1.0, naive_ms = 0.0, ref_max = 0.0;
  size_t first = all->count;
  for (int a = 0; a < 2; ++a) {
    if (!(opts->algos & bits[a])) continue;
    bench_result *r = bench_results_add(all);
    r->device = device_index;
    r->algo = order[a];
    r->pass = pass;
    r->desc = *desc;
    r->flops = fcl_attention_flops(desc, FCL_PASS_FORWARD);
    if (!ok) {
      r->status = FCL_ERROR_OUT_OF_MEMORY;
      snprintf(r->message, sizeof r->message, "could not allocate the inputs");
      continue;
    }
    float *o_host = NULL;
    run_algo(ctx, opts, dev.limits.is_gpu, &in, r, opts->check ? &o_host : NULL);
    if (r->status == FCL_SUCCESS && o_host) {
      r->max_abs_err = check_rows(&in, o_host, rows, n_rows, &ref_max);
      r->have_check = 1;
    }
    free(o_host);
    if (r->algo == FCL_ALGO_NAIVE && r->status == FCL_SUCCESS) {
      naive_ms = r->ms_median;
      if (r->have_check) naive_err = r->max_abs_err;
    }
  }
  /* Speed-ups over naive and error ratios, now that both have run. */
  for (size_t i = first; i < all->count; ++i) {
    bench_result *r = &all->items[i];
    if (r->status != FCL_SUCCESS) continue;
    if (naive_ms > 0) r->speedup = naive_ms / r->ms_median;
    if (r->have_check) {
      if (naive_err < 0) naive_err = emulated_naive_error(&in, rows, n_rows);
      r->naive_max_abs_err = naive_err;
      double floor = 1e-6 * ref_max;
      r->err_ratio = r->max_abs_err / (naive_err > floor ? naive_err : floor > 0 ? floor : 1e-30);
    }
  }
  inputs_free(&in);
}
