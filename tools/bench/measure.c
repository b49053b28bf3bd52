/*
 * measure.c — one shape on one device: draw inputs once, run each
 * algorithm (warm-up, then timed repeats), optionally count its I/O and
 * check it against the float64 reference on a sample of rows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "hostdata.h"
#include "reference.h"
#include "views.h"
#include "kvcodec.h"

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

/* The problem's inputs, host (packed, as the reference takes them) and
 * device (in the descriptor's views; packed QKV in one buffer). */
typedef struct inputs {
  fcl_attention_desc desc;
  fcl_buffer_sizes sizes;
  size_t q_elems, kv_elems, lse_elems;  /* packed */
  size_t o_elems, v_elems;  /* packed O (dO) and V (dV): head_dim_v wide */
  float *q, *k, *v, *dout;  /* dout only for backward passes */
  float *slopes;            /* ALiBi */
  cl_mem dq, dk, dv, ddout, dslopes;
  float *sinks;             /* attention sinks, and their gradient's buffer (backward) */
  cl_mem dsinks, ddsinks;
  /* a quantized cache: K and V before quantisation (k and v: what it holds) */
  float *raw_k, *raw_v;
} inputs;

static void inputs_free(inputs *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  free(in->dout);
  free(in->slopes);
  free(in->sinks);
  free(in->raw_k);
  free(in->raw_v);
  cl_mem all[7] = {in->ddout, in->dq, in->dk, in->dv, in->dslopes, in->dsinks, in->ddsinks};
  for (int i = 0; i < 7; ++i)
    if (all[i]) clReleaseMemObject(all[i]);
  memset(in, 0, sizeof *in);
}

/* A buffer of `bytes` holding packed host tensors xs[i] (tensor ts[i]) in
 * their views, NaN elsewhere; NULL on failure. A quantized K's and V's
 * rows repeat every `period` rows (0: they may not; fill_inputs). */
static cl_mem view_buffer(fcl_context *ctx, const fcl_attention_desc *d, size_t bytes,
                          const fclu_tensor *ts, const float *const *xs, int n, size_t period) {
  unsigned char *image = malloc(bytes ? bytes : 4);
  if (!image) return NULL;
  memset(image, 0xff, bytes ? bytes : 4);
  for (int i = 0; i < n; ++i)
    if (xs[i]) fclu_scatter_repeating(d, ts[i], xs[i], image, period);
  cl_int err;
  cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            bytes ? bytes : 4, image, &err);
  free(image);
  return err == CL_SUCCESS ? m : NULL;
}

/* Tensor t out of a buffer of `bytes` holding it in its view. */
static int view_download(fcl_context *ctx, const fcl_attention_desc *d, cl_mem m, size_t bytes,
                         fclu_tensor t, float *x) {
  unsigned char *image = malloc(bytes ? bytes : 4);
  if (!image) return -1;
  int rc = bytes && clEnqueueReadBuffer(fcl_context_cl_queue(ctx), m, CL_TRUE, 0, bytes, image,
                                        0, NULL, NULL) != CL_SUCCESS
               ? -1
               : 0;
  if (rc == 0) fclu_gather(d, t, image, x);
  free(image);
  return rc;
}

static size_t largest3(size_t a, size_t b, size_t c) {
  return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

/* ALiBi's slopes for `heads` (Press et al.): 2^(-8 i / n) for i = 1 .. n,
 * n the largest power of two up to heads, and for the rest every other
 * slope of 2n heads. */
static void alibi_slopes(size_t heads, float *out) {
  size_t n = 1;
  while (2 * n <= heads) n *= 2;
  for (size_t i = 0; i < heads; ++i)
    out[i] = i < n ? (float)pow(2.0, -8.0 * (double)(i + 1) / (double)n)
                   : (float)pow(2.0, -8.0 * (double)(2 * (i - n) + 1) / (double)(2 * n));
}

/* Whether a shape can run at all, judged before anything is allocated: the
 * library validates it and gives its buffers' sizes (overflow-checked),
 * and each device buffer the run needs must fit the device's largest
 * allocation and all of them its memory. FCL_SUCCESS, or the status and
 * why. */
static fcl_status admissible(const fcl_device_info *dev, const fcl_attention_desc *desc,
                             int pass, fcl_buffer_sizes *sz, char *why, size_t why_len) {
  const fcl_status st = fcl_attention_buffer_sizes(desc, sz, why, why_len);
  if (st != FCL_SUCCESS) return st;
  const struct {
    const char *name;
    size_t bytes;
    int needed;
  } bufs[] = {{"q", sz->q, 1},  {"k", sz->k, 1},  {"v", sz->v, 1},
              {"o", sz->o, 1},  {"lse", sz->lse, 1}, {"dout", sz->dout, pass != PASS_FWD},
              {"dq", sz->dq, pass != PASS_FWD}, {"dk", sz->dk, pass != PASS_FWD},
              {"dv", sz->dv, pass != PASS_FWD}};
  const uint64_t max_alloc = dev->limits.max_alloc_bytes, global = dev->limits.global_mem_bytes;
  uint64_t total = 0;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) {
    if (!bufs[i].needed) continue;
    if (max_alloc && bufs[i].bytes > max_alloc) {
      snprintf(why, why_len, "%s needs %zu bytes, over the device's largest allocation of %llu",
               bufs[i].name, bufs[i].bytes, (unsigned long long)max_alloc);
      return FCL_ERROR_OUT_OF_MEMORY;
    }
    total += bufs[i].bytes;  /* each below max_alloc: no overflow */
  }
  if (global && total > global) {
    snprintf(why, why_len, "the run's buffers need %llu bytes, over the device's %llu",
             (unsigned long long)total, (unsigned long long)global);
    return FCL_ERROR_OUT_OF_MEMORY;
  }
  return FCL_SUCCESS;
}

/* Normal values, drawn for the first FILL_POOL elements and repeated
 * beyond: a decode cache of 10^9 elements would otherwise take minutes of
 * Box-Muller per shape, and what a timed kernel reads does not depend on
 * where the values repeat (--check's reference reads the same copy). */
#define FILL_POOL ((size_t)1 << 24)
static void fill_inputs(fclu_rng *rng, float *x, size_t n, fcl_dtype dtype) {
  const size_t drawn = n < FILL_POOL ? n : FILL_POOL;
  fclu_fill_normal(rng, x, drawn, 1.0, dtype);
  for (size_t at = drawn; at < n; at += drawn)
    memcpy(x + at, x, (n - at < drawn ? n - at : drawn) * sizeof *x);
}

/* The rows of `width` values that fill_inputs's n values repeat with
 * (the least count whose values are whole pools), or 0 where they do not:
 * a quantized cache's rows are then quantised once per distinct row. */
static size_t fill_row_period(size_t n, size_t width) {
  if (n <= FILL_POOL || width == 0) return 0;
  size_t a = FILL_POOL, b = width;  /* FILL_POOL / gcd(FILL_POOL, width) */
  while (b) {
    const size_t r = a % b;
    a = b, b = r;
  }
  return FILL_POOL / a;
}

/* The sizes are admissible()'s, so the host's float copies fit size_t. */
static int inputs_init(inputs *in, fcl_context *ctx, const fcl_attention_desc *desc,
                       const fcl_buffer_sizes *sz, int pass, int alibi, int sinks,
                       float sinks_value, uint64_t seed, int v_in_k) {
  memset(in, 0, sizeof *in);
  in->desc = *desc;
  in->sizes = *sz;
  fcl_attention_desc *d = &in->desc;
  in->q_elems = fclu_packed_elems(d, FCLU_Q);
  in->kv_elems = fclu_packed_elems(d, FCLU_K);
  in->o_elems = fclu_packed_elems(d, FCLU_O);
  in->v_elems = fclu_packed_elems(d, FCLU_V);
  in->lse_elems = sz->lse / sizeof(float);
  in->q = malloc((in->q_elems ? in->q_elems : 1) * sizeof(float));
  in->k = malloc((in->kv_elems ? in->kv_elems : 1) * sizeof(float));
  in->v = malloc((in->v_elems ? in->v_elems : 1) * sizeof(float));
  if (!in->q || !in->k || !in->v) return -1;
  fclu_rng rng;
  fclu_rng_seed(&rng, seed);
  fill_inputs(&rng, in->q, in->q_elems, d->dtype);
  fill_inputs(&rng, in->k, in->kv_elems, d->dtype);
  fill_inputs(&rng, in->v, in->v_elems, d->dtype);
  if (v_in_k) {  /* --mla: V is K's rows' first head_dim_v columns */
    const size_t dv = fclu_head_dim_v(d);
    for (size_t r = 0; r < in->v_elems / dv; ++r)
      memcpy(in->v + r * dv, in->k + r * d->head_dim, dv * sizeof(float));
  }
  /* a quantized cache: the reference sees what it holds, and the
   * unquantised values are kept for the error quantisation makes */
  if (fclu_kv_quantized(d)) {
    in->raw_k = malloc((in->kv_elems ? in->kv_elems : 1) * sizeof(float));
    in->raw_v = malloc((in->kv_elems ? in->kv_elems : 1) * sizeof(float));
    if (!in->raw_k || !in->raw_v) return -1;
    memcpy(in->raw_k, in->k, in->kv_elems * sizeof(float));
    memcpy(in->raw_v, in->v, in->kv_elems * sizeof(float));
  }
  /* K's rows repeat with its pool, and V's, filled alike or read from K's
   * rows (--mla), with K's */
  const size_t period = fill_row_period(in->kv_elems, d->head_dim);
  fclu_kv_round_trip(d, 0, in->k, in->kv_elems / d->head_dim, period);
  fclu_kv_round_trip(d, 1, in->v, in->kv_elems / d->head_dim, period);
  if (alibi) {  /* the slopes, as a device buffer the descriptor names */
    const size_t n = (d->alibi_per_batch ? d->batch : 1) * d->heads_q;
    in->slopes = malloc(n * sizeof *in->slopes);
    if (!in->slopes) return -1;
    for (size_t b = 0; b < n / d->heads_q; ++b) alibi_slopes(d->heads_q, in->slopes + b * d->heads_q);
    cl_int err;
    in->dslopes = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                 n * sizeof *in->slopes, in->slopes, &err);
    if (err != CL_SUCCESS) return -1;
    d->alibi_slopes = in->dslopes;
    fclref_set_slopes(in->dslopes, in->slopes);
  }
  if (sinks) {  /* one per query head: drawn, or --sinks-value's */
    in->sinks = malloc(d->heads_q * sizeof *in->sinks);
    if (!in->sinks) return -1;
    fill_inputs(&rng, in->sinks, d->heads_q, FCL_DTYPE_F32);
    if (!isnan(sinks_value))
      for (size_t h = 0; h < d->heads_q; ++h) in->sinks[h] = sinks_value;
    cl_int err;
    in->dsinks = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                d->heads_q * sizeof *in->sinks, in->sinks, &err);
    if (err != CL_SUCCESS) return -1;
    d->sinks = in->dsinks;
    fclref_set_sinks(in->dsinks, in->sinks);
    if (pass != PASS_FWD) {  /* the backward computes dsinks too */
      in->ddsinks = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                   d->heads_q * sizeof(float), NULL, &err);
      if (err != CL_SUCCESS) return -1;
      d->dsinks = in->ddsinks;
    }
  }
  const fclu_tensor qkv[3] = {FCLU_Q, FCLU_K, FCLU_V};
  const float *hosts[3] = {in->q, in->k, in->v};
  if (fclu_shares_buffer(d, FCLU_Q)) {
    in->dq = view_buffer(ctx, d, largest3(sz->q, sz->k, sz->v), qkv, hosts, 3, period);
    if (!in->dq) return -1;
    in->dk = in->dv = in->dq;
    clRetainMemObject(in->dq);
    clRetainMemObject(in->dq);
  } else if (v_in_k) {  /* --mla: one buffer, K's; V reads its rows */
    in->dq = view_buffer(ctx, d, sz->q, qkv, hosts, 1, 0);
    in->dk = view_buffer(ctx, d, sz->k > sz->v ? sz->k : sz->v, &qkv[1], &hosts[1], 1, period);
    if (!in->dq || !in->dk) return -1;
    in->dv = in->dk;
    clRetainMemObject(in->dk);
  } else {
    const size_t bytes[3] = {sz->q, sz->k, sz->v};
    cl_mem *out[3] = {&in->dq, &in->dk, &in->dv};
    for (int i = 0; i < 3; ++i)
      if (!(*out[i] = view_buffer(ctx, d, bytes[i], &qkv[i], &hosts[i], 1, period))) return -1;
  }
  if (pass != PASS_FWD) {
    in->dout = malloc((in->o_elems ? in->o_elems : 1) * sizeof(float));
    if (!in->dout) return -1;
    fill_inputs(&rng, in->dout, in->o_elems, d->dtype);
    const fclu_tensor t = FCLU_DOUT;
    const float *x = in->dout;
    in->ddout = view_buffer(ctx, d, sz->dout, &t, &x, 1, 0);
    if (!in->ddout) return -1;
  }
  return 0;
}

/* A spread of (token, head) rows, as token * heads_q + head: the first and
 * last tokens, and the rest evenly through the tensor. */
static size_t sample_rows(const inputs *in, size_t *rows, size_t max) {
  const size_t heads = in->desc.heads_q, total = in->lse_elems, n_tokens = total / heads;
  size_t n = 0;
  if (total <= max) {
    for (size_t r = 0; r < total; ++r) rows[n++] = r;
    return n;
  }
  for (size_t k = 0; k < max; ++k) {
    size_t g;
    if (k % 4 == 0) g = k / 4 % 2 ? n_tokens - 1 : 0;
    else g = (size_t)((double)(k * 104729 % 1000003) / 1000003.0 * (double)n_tokens);
    rows[n++] = g * heads + (k * 7919) % heads;
  }
  return n;
}

/* The (batch entry, query) of a token. */
static void token_row(const fcl_attention_desc *d, size_t g, size_t *b, size_t *i) {
  if (!d->cu_seqlens_q) {
    *b = g / d->seqlen_q;
    *i = g % d->seqlen_q;
    return;
  }
  size_t lo = 0, hi = d->batch;  /* the last b with cu[b] <= g and a query */
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if ((size_t)d->cu_seqlens_q[mid] <= g) lo = mid;
    else hi = mid;
  }
  while (lo + 1 < d->batch && (size_t)d->cu_seqlens_q[lo + 1] <= g) ++lo;
  *b = lo;
  *i = g - (size_t)d->cu_seqlens_q[lo];
}

/* Host copies of what a run produced, for --check. */
typedef struct results_host {
  float *o, *dq, *dk, *dv;
} results_host;

static void results_free(results_host *h) {
  free(h->o);
  free(h->dq);
  free(h->dk);
  free(h->dv);
  memset(h, 0, sizeof *h);
}

static double worst(double a, double b) { return !(a <= b) ? a : b; }

/* Whether the reference of one (batch, kv head) slice of the backward is
 * cheap enough for --check. */
static int slice_affordable(const fcl_attention_desc *d) {
  size_t q0, nq, k0, nk;
  fclref_sequence(d, 0, &q0, &nq, &k0, &nk);
  const double work = (double)(d->heads_q / d->heads_kv) * (double)nq * (double)nk *
                      (double)d->head_dim;
  return work <= 2147483648.0;
}

/* Max abs error of a run against the float64 reference on the sampled
 * rows: O for the forward; for the backward the worst of dQ (sampled rows)
 * and of dK and dV over the first (batch, kv head) slice when that slice's
 * reference is affordable. Also the largest |reference| seen. */
static double check_run(const inputs *in, int pass, const results_host *got,
                        const size_t *rows, size_t n_rows, double *ref_max) {
  const fcl_attention_desc *d = &in->desc;
  const size_t dv = fclu_head_dim_v(d);
  /* the sampled rows: O's (head_dim_v wide) or dQ's */
  const size_t hd = pass == PASS_FWD ? dv : d->head_dim;
  double *ref = malloc(hd * sizeof *ref), lse, err = 0.0;
  float *row = malloc(hd * sizeof *row);
  *ref_max = 0.0;
  for (size_t r = 0; r < n_rows && ref && row; ++r) {
    const size_t h = rows[r] % d->heads_q, at = rows[r] * hd;
    size_t b, i;
    token_row(d, rows[r] / d->heads_q, &b, &i);
    if (pass == PASS_FWD) {
      fclref_forward_row(d, in->q, in->k, in->v, b, h, i, ref, &lse);
      memcpy(row, got->o + at, hd * sizeof *row);
    } else {
      fclref_backward_dq_row(d, in->q, in->k, in->v, in->dout, b, h, i, ref);
      memcpy(row, got->dq + at, hd * sizeof *row);
    }
    err = worst(err, fclu_max_abs_err(row, ref, hd));
    double m = fclu_max_abs(ref, hd);
    if (m > *ref_max) *ref_max = m;
  }
  free(ref);
  free(row);
  if (pass != PASS_FWD && slice_affordable(d)) {
    double *rq = calloc(in->q_elems, sizeof *rq), *rk = calloc(in->kv_elems, sizeof *rk),
           *rv = calloc(in->v_elems, sizeof *rv);
    if (rq && rk && rv) {
      fclref_backward_slice(d, in->q, in->k, in->v, in->dout, 0, 0, rq, rk, rv);
      const size_t kv_ld = d->heads_kv * hd, v_ld = d->heads_kv * dv;
      size_t q0, nq, k0, nk;
      fclref_sequence(d, 0, &q0, &nq, &k0, &nk);
      for (size_t j = 0; j < nk; ++j) {
        err = worst(err, fclu_max_abs_err(got->dk + j * kv_ld, rk + j * kv_ld, hd));
        err = worst(err, fclu_max_abs_err(got->dv + j * v_ld, rv + j * v_ld, dv));
        double m = fclu_max_abs(rk + j * kv_ld, hd);
        if (m > *ref_max) *ref_max = m;
      }
    }
    free(rq);
    free(rk);
    free(rv);
  }
  return err;
}

/* The naive algorithm's error emulated on the host (reference.h), at the
 * places check_run looks: the sampled rows of O or dQ, and for the
 * backward dK and dV of the first (batch, kv head) slice when affordable.
 * The yardstick where the device cannot run the naive algorithm (f16
 * without cl_khr_fp16). */
static double emulated_naive_error(const inputs *in, int pass, const size_t *rows,
                                   size_t n_rows) {
  const fcl_attention_desc *d = &in->desc;
  results_host emu = {0};
  double err = INFINITY, ref_max;
  float lse;
  if (pass == PASS_FWD) {
    emu.o = malloc(in->o_elems * sizeof(float));
  } else {
    emu.dq = malloc(in->q_elems * sizeof(float));
    emu.dk = malloc(in->kv_elems * sizeof(float));
    emu.dv = malloc(in->v_elems * sizeof(float));
  }
  if (pass == PASS_FWD ? !emu.o : !emu.dq || !emu.dk || !emu.dv) goto done;
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t h = rows[r] % d->heads_q;
    const size_t dv = fclu_head_dim_v(d);
    size_t b, i;
    token_row(d, rows[r] / d->heads_q, &b, &i);
    if (pass == PASS_FWD)
      fclref_naive_row(d, in->q, in->k, in->v, b, h, i, emu.o + rows[r] * dv, &lse);
    else
      fclref_naive_backward_dq_row(d, in->q, in->k, in->v, in->dout, b, h, i,
                                   emu.dq + rows[r] * d->head_dim);
  }
  if (pass != PASS_FWD && slice_affordable(d))
    fclref_naive_backward_slice(d, in->q, in->k, in->v, in->dout, 0, 0, emu.dq, emu.dk,
                                emu.dv);
  err = check_run(in, pass, &emu, rows, n_rows, &ref_max);
done:
  results_free(&emu);
  return err;
}

static void set_failure(bench_result *r, fcl_status status, fcl_context *ctx) {
  r->status = status;
  snprintf(r->message, sizeof r->message, "%s", fcl_context_last_error(ctx));
  /* One line: the table and CSV hold it in a cell. */
  for (char *c = r->message; *c; ++c)
    if (*c == '\n' || *c == '\r') *c = ' ';
}

/* Device buffers one algorithm runs with. */
typedef struct outputs {
  cl_mem o, lse, dq, dk, dv;
} outputs;

static void outputs_free(outputs *out) {
  cl_mem *all[] = {&out->o, &out->lse, &out->dq, &out->dk, &out->dv};
  for (size_t i = 0; i < 5; ++i) {
    if (*all[i]) clReleaseMemObject(*all[i]);
    *all[i] = NULL;
  }
}

static int outputs_init(outputs *out, fcl_context *ctx, const inputs *in, int pass) {
  memset(out, 0, sizeof *out);
  const fcl_buffer_sizes *sz = &in->sizes;
  out->o = fclu_poisoned_buffer(ctx, sz->o ? sz->o : 4);
  out->lse = fclu_poisoned_buffer(ctx, sz->lse ? sz->lse : 4);
  if (!out->o || !out->lse) return -1;
  if (pass == PASS_FWD) return 0;
  if (fclu_shares_buffer(&in->desc, FCLU_DQ)) {  /* dq, dk, dv packed in one */
    out->dq = fclu_poisoned_buffer(ctx, largest3(sz->dq, sz->dk, sz->dv));
    if (!out->dq) return -1;
    out->dk = out->dv = out->dq;
    clRetainMemObject(out->dq);
    clRetainMemObject(out->dq);
    return 0;
  }
  out->dq = fclu_poisoned_buffer(ctx, sz->dq ? sz->dq : 4);
  out->dk = fclu_poisoned_buffer(ctx, sz->dk ? sz->dk : 4);
  out->dv = fclu_poisoned_buffer(ctx, sz->dv ? sz->dv : 4);
  return out->dq && out->dk && out->dv ? 0 : -1;
}

/* One run of a pass; fwdbwd adds up the two calls' figures. */
static fcl_status run_pass(fcl_context *ctx, fcl_algo algo, int pass, const inputs *in,
                           outputs *out, fcl_run_info *info) {
  const fcl_attention_desc *d = &in->desc;
  fcl_run_info fwd, bwd;
  memset(&fwd, 0, sizeof fwd);
  memset(&bwd, 0, sizeof bwd);
  fcl_status st;
  if (pass != PASS_BWD) {
    st = fcl_attention_forward(ctx, d, algo, in->dq, in->dk, in->dv, out->o, out->lse,
                               info ? &fwd : NULL);
    if (st != FCL_SUCCESS) return st;
  }
  if (pass != PASS_FWD) {
    fcl_attention_desc bwd_desc = *d;
    if (algo == FCL_ALGO_NAIVE) bwd_desc.dsinks = NULL;  /* dsinks are the flash backward's */
    st = fcl_attention_backward(ctx, &bwd_desc, algo, in->dq, in->dk, in->dv, out->o, out->lse,
                                in->ddout, out->dq, out->dk, out->dv, info ? &bwd : NULL);
    if (st != FCL_SUCCESS) return st;
  }
  if (info) {
    *info = pass == PASS_BWD ? bwd : fwd;
    if (pass == PASS_FWDBWD) {
      info->ms += bwd.ms;
      info->bytes_model += bwd.bytes_model;
      info->bytes_counted += bwd.bytes_counted;
      info->flops += bwd.flops;
    }
  }
  return FCL_SUCCESS;
}

static int download_results(fcl_context *ctx, const inputs *in, int pass,
                            const outputs *out, results_host *h) {
  const fcl_attention_desc *d = &in->desc;
  const fcl_buffer_sizes *sz = &in->sizes;
  memset(h, 0, sizeof *h);
  if (pass == PASS_FWD) {
    h->o = malloc((in->o_elems ? in->o_elems : 1) * sizeof(float));
    return h->o && view_download(ctx, d, out->o, sz->o, FCLU_O, h->o) == 0 ? 0 : -1;
  }
  h->dq = malloc((in->q_elems ? in->q_elems : 1) * sizeof(float));
  h->dk = malloc((in->kv_elems ? in->kv_elems : 1) * sizeof(float));
  h->dv = malloc((in->v_elems ? in->v_elems : 1) * sizeof(float));
  if (!h->dq || !h->dk || !h->dv) return -1;
  const int shared = fclu_shares_buffer(d, FCLU_DQ);
  const size_t all = largest3(sz->dq, sz->dk, sz->dv);
  return view_download(ctx, d, out->dq, shared ? all : sz->dq, FCLU_DQ, h->dq) == 0 &&
                 view_download(ctx, d, out->dk, shared ? all : sz->dk, FCLU_DK, h->dk) == 0 &&
                 view_download(ctx, d, out->dv, shared ? all : sz->dv, FCLU_DV, h->dv) == 0
             ? 0
             : -1;
}

/* One --back-to-back sample: n calls between two markers, none waited
 * for, so that each call's host-side enqueueing overlaps the device's work
 * on the one before; the time per call, by the device's clock where the
 * queue profiles, else the host's. */
static fcl_status time_back_to_back(fcl_context *ctx, fcl_algo algo, int pass,
                                    const inputs *in, outputs *out, int n, double *ms) {
  cl_command_queue queue = fcl_context_cl_queue(ctx);
  cl_command_queue_properties props = 0;
  clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  const int device_clock = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
  cl_event marks[2] = {NULL, NULL};
  fcl_status st = clFinish(queue) == CL_SUCCESS ? FCL_SUCCESS : FCL_ERROR_OPENCL;
  const double host_start = fclu_now_ms();
  if (st == FCL_SUCCESS && device_clock &&
      clEnqueueMarkerWithWaitList(queue, 0, NULL, &marks[0]) != CL_SUCCESS)
    st = FCL_ERROR_OPENCL;
  for (int i = 0; i < n && st == FCL_SUCCESS; ++i) st = run_pass(ctx, algo, pass, in, out, NULL);
  if (st == FCL_SUCCESS && device_clock &&
      clEnqueueMarkerWithWaitList(queue, 0, NULL, &marks[1]) != CL_SUCCESS)
    st = FCL_ERROR_OPENCL;
  if (clFinish(queue) != CL_SUCCESS && st == FCL_SUCCESS) st = FCL_ERROR_OPENCL;
  *ms = (fclu_now_ms() - host_start) / n;
  cl_ulong t0 = 0, t1 = 0;
  if (st == FCL_SUCCESS && device_clock &&
      clGetEventProfilingInfo(marks[0], CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL) ==
          CL_SUCCESS &&
      clGetEventProfilingInfo(marks[1], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
          CL_SUCCESS &&
      t1 > t0)
    *ms = (double)(t1 - t0) * 1e-6 / n;
  for (int i = 0; i < 2; ++i)
    if (marks[i]) clReleaseEvent(marks[i]);
  return st;
}

/* Runs one algorithm: warm-up, timed repeats, optional counting; leaves
 * what it produced in *host when wanted. */
static void run_algo(fcl_context *ctx, const bench_options *opts, int is_gpu,
                     const inputs *in, bench_result *r, results_host *host) {
  outputs out;
  fcl_run_info info;
  memset(&info, 0, sizeof info);
  fcl_status st = FCL_SUCCESS;
  double *ms = NULL;
  const int warmup = opts->warmup >= 0 ? opts->warmup : is_gpu ? 2 : 1;
  const int repeat = opts->repeat > 0 ? opts->repeat : is_gpu ? 10 : 3;
  if (outputs_init(&out, ctx, in, r->pass) != 0 ||
      !(ms = malloc((size_t)repeat * sizeof *ms))) {
    r->status = FCL_ERROR_OUT_OF_MEMORY;
    snprintf(r->message, sizeof r->message, "could not allocate the outputs");
    goto done;
  }
  /* The backward alone needs the forward's O and LSE first, with the same
   * tiling where the forward takes it (its O's rounding is part of what
   * --check measures), else with the planner's for the same kernel family:
   * a backward tiling need not suit the forward (SIMT rows split over 8
   * work-items). */
  if (r->pass == PASS_BWD) {
    st = run_pass(ctx, r->algo, PASS_FWD, in, &out, NULL);
    if (st == FCL_ERROR_UNSUPPORTED && fcl_tiling_hint_given(&opts->tiling)) {
      const fcl_plan family = {.kernel = opts->tiling.kernel};
      st = fcl_context_set_flash_tiling(ctx, &family);
      if (st == FCL_SUCCESS) st = run_pass(ctx, r->algo, PASS_FWD, in, &out, NULL);
      const fcl_status restored = fcl_context_set_flash_tiling(ctx, &opts->tiling);
      if (st == FCL_SUCCESS) st = restored;
    }
  }
  for (int w = 0; w < warmup && st == FCL_SUCCESS; ++w)
    st = run_pass(ctx, r->algo, r->pass, in, &out, NULL);
  /* Back to back, one call with run info first: the plan, bytes and flops. */
  const int per_sample = opts->back_to_back > 0 ? opts->back_to_back : 1;
  if (per_sample > 1 && st == FCL_SUCCESS) st = run_pass(ctx, r->algo, r->pass, in, &out, &info);
  for (int t = 0; t < repeat && st == FCL_SUCCESS; ++t) {
    if (per_sample > 1) {
      st = time_back_to_back(ctx, r->algo, r->pass, in, &out, per_sample, &ms[t]);
    } else {
      st = run_pass(ctx, r->algo, r->pass, in, &out, &info);
      ms[t] = info.ms;
    }
  }
  r->calls_per_sample = per_sample;
  if (st != FCL_SUCCESS) {
    set_failure(r, st, ctx);
    goto done;
  }
  qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
  r->ms_min = ms[0];
  r->ms_median = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
  r->bytes_model = info.bytes_model;
  r->plan = info.plan;
  r->chunks = info.chunks;
  r->flops = info.flops;
  r->gbps = (double)r->bytes_model / (r->ms_median * 1e-3) / 1e9;
  r->tflops = r->flops / (r->ms_median * 1e-3) / 1e12;
  r->status = FCL_SUCCESS;

  if (opts->count_io) {
    st = fcl_context_set_count_io(ctx, 1);
    if (st == FCL_SUCCESS) st = run_pass(ctx, r->algo, r->pass, in, &out, &info);
    fcl_context_set_count_io(ctx, 0);
    if (st == FCL_SUCCESS) {
      r->bytes_counted = info.bytes_counted;
      r->have_counted = 1;
    } else {
      set_failure(r, st, ctx);
    }
  }
  if (host && r->status == FCL_SUCCESS && download_results(ctx, in, r->pass, &out, host) != 0)
    results_free(host);
done:
  free(ms);
  outputs_free(&out);
}

void bench_mla_views(fcl_attention_desc *d) {
  const size_t row = d->heads_kv * d->head_dim;
  const size_t tokens = d->block_table ? d->page_size : d->seqlen_k;
  d->k = (fcl_tensor_layout){0, d->cu_seqlens_k ? 0 : tokens * row, row, d->head_dim};
  d->v = d->k;
}

/* --paged: `desc` with K and V as pools of opts->page_size-token pages,
 * named in a shuffled order by a block table on the device (*table, its
 * host copy *host, told to fclu_set_pages). NULL *table: no memory. */
static fcl_attention_desc paged_desc(fcl_context *ctx, const bench_options *opts,
                                     const fcl_attention_desc *desc, uint64_t seed,
                                     cl_mem *table, int32_t **host) {
  fcl_attention_desc d = *desc;
  d.page_size = opts->page_size;
  d.pages_per_seq = (d.seqlen_k + d.page_size - 1) / d.page_size;
  d.num_pages = d.batch * d.pages_per_seq;
  *table = NULL;
  *host = malloc(d.num_pages * sizeof **host);
  if (!*host) return d;
  fclu_shuffled_pages(seed, d.batch, d.pages_per_seq, d.num_pages, *host);
  cl_int err;
  *table = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                          d.num_pages * sizeof **host, *host, &err);
  if (err != CL_SUCCESS) *table = NULL;
  d.block_table = *table;
  if (*table) fclu_set_pages(*table, *host);
  if (opts->mla) bench_mla_views(&d);  /* the pool's pages */
  return d;
}

void bench_measure(fcl_context *ctx, int device_index, const bench_options *opts,
                   const fcl_attention_desc *desc, int pass, bench_results *all) {
  fcl_device_info dev;
  fcl_context_device(ctx, &dev);
  cl_mem table = NULL;
  int32_t *table_host = NULL;
  fcl_attention_desc paged;
  if (opts->page_size) {
    paged = paged_desc(ctx, opts, desc, 0x9a6e ^ desc->seqlen_k, &table, &table_host);
    desc = &paged;
  }
  static const fcl_algo order[2] = {FCL_ALGO_NAIVE, FCL_ALGO_FLASH};
  const unsigned bits[2] = {ALGO_NAIVE, ALGO_FLASH};

  inputs in;
  memset(&in, 0, sizeof in);
  uint64_t seed = 0x5eed ^ (uint64_t)desc->seqlen_q * 31 ^ desc->head_dim;
  fcl_buffer_sizes sz;
  char why[sizeof all->items[0].message];
  const fcl_status admitted = opts->page_size && !table
                                  ? FCL_ERROR_OUT_OF_MEMORY
                                  : admissible(&dev, desc, pass, &sz, why, sizeof why);
  if (opts->page_size && !table) snprintf(why, sizeof why, "could not make the block table");
  int ok = admitted == FCL_SUCCESS && inputs_init(&in, ctx, desc, &sz, pass, opts->alibi,
                                                         opts->sinks, opts->sinks_value, seed,
                                                         opts->mla) == 0;

  size_t rows[CHECK_ROWS], n_rows = ok ? sample_rows(&in, rows, CHECK_ROWS) : 0;
  double naive_err = -1.0, naive_ms = 0.0, ref_max = 0.0;
  size_t first = all->count;
  for (int a = 0; a < 2; ++a) {
    if (!(opts->algos & bits[a])) continue;
    bench_result *r = bench_results_add(all);
    r->device = device_index;
    r->algo = order[a];
    r->pass = pass;
    r->desc = *desc;
    r->alibi = opts->alibi;
    r->layout = opts->layout;
    r->flops = (pass != PASS_BWD ? fcl_attention_flops(desc, FCL_PASS_FORWARD) : 0.0) +
               (pass != PASS_FWD ? fcl_attention_flops(desc, FCL_PASS_BACKWARD) : 0.0);
    if (admitted != FCL_SUCCESS) {
      r->status = admitted;
      snprintf(r->message, sizeof r->message, "%s", why);
      continue;
    }
    if (!ok) {
      r->status = FCL_ERROR_OUT_OF_MEMORY;
      snprintf(r->message, sizeof r->message, "could not allocate the inputs (host or device)");
      continue;
    }
    results_host host = {0};
    run_algo(ctx, opts, dev.limits.is_gpu, &in, r, opts->check ? &host : NULL);
    if (r->status == FCL_SUCCESS && (host.o || host.dq)) {
      r->max_abs_err = check_run(&in, pass, &host, rows, n_rows, &ref_max);
      r->have_check = 1;
      if (in.raw_k) {  /* against attention over the unquantised K and V */
        inputs raw = in;
        raw.k = in.raw_k;
        raw.v = in.raw_v;
        r->max_abs_err_unquantised = check_run(&raw, pass, &host, rows, n_rows, &ref_max);
        r->have_unquantised = 1;
      }
    }
    results_free(&host);
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
      if (naive_err < 0) naive_err = emulated_naive_error(&in, pass, rows, n_rows);
      r->naive_max_abs_err = naive_err;
      double floor = 1e-6 * ref_max;
      r->err_ratio = r->max_abs_err / (naive_err > floor ? naive_err : floor > 0 ? floor : 1e-30);
    }
  }
  inputs_free(&in);
  for (size_t i = first; i < all->count; ++i) all->items[i].desc.block_table = NULL;
  if (table) clReleaseMemObject(table);
  free(table_host);
}
