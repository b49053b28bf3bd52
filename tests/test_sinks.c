/*
 * test_sinks.c — attention sinks (fcl_attention_desc.sinks): a logit per
 * query head that joins every row's denominator with no value. Against the
 * float64 reference on random inputs, with random, large positive (+30)
 * and large negative (-30) sinks:
 *   - every forward family, forced by a tiling hint (SIMT, MMA, decode,
 *     decode on matrix instructions, CPU; the MMA ones emulated off NVIDIA,
 *     native on it), f32, f16 and bf16, causal with rows that see no key
 *     (zeros, LSE = the sink, exactly), a sliding window, GQA, decode;
 *   - the split-KV forward, splits forced from 1 to FCL_MAX_SPLITS, with
 *     the merge kernel and the merge in the split launch: the sink once;
 *   - ragged batches (an empty sequence too), a KV cache's lengths (0
 *     among them) and a paged cache; the naive algorithm;
 *   - the backward: dQ, dK, dV and dsinks against the reference's
 *     gradients, in the SIMT, MMA and CPU families, bit-identical reruns;
 *     a ragged batch; the naive backward's dQ, dK and dV;
 *   - fcl_merge_states with sinks against a float64 merge;
 *   - counted bytes equal the I/O model; bad input (a sinks buffer too
 *     small, dsinks without sinks, the naive backward's dsinks) refused
 *     with nothing written; a NaN sink makes its head's rows NaN only.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The forward families a test forces in turn (a loop test's _i). */
static const unsigned families[] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA,
                                    FCL_FLASH_KERNEL_DECODE, FCL_FLASH_KERNEL_DECODE_MMA,
                                    FCL_FLASH_KERNEL_CPU};
#define N_FAMILIES (sizeof families / sizeof families[0])

static int decode_family(unsigned kernel) {
  return kernel == FCL_FLASH_KERNEL_DECODE || kernel == FCL_FLASH_KERNEL_DECODE_MMA;
}

/* Sinks of mode 0: random normal(0, 2); 1: +30; 2: -30 (alternating
 * around them by head, so that heads differ). */
static float *sink_values(size_t heads, int mode, uint64_t seed) {
  float *s = malloc(heads * sizeof *s);
  ck_assert_ptr_nonnull(s);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed + 0x51);
  fclu_fill_normal(&rng, s, heads, 2.0, FCL_DTYPE_F32);
  if (mode == 1)
    for (size_t h = 0; h < heads; ++h) s[h] = 30.0f + (float)(h % 3);
  if (mode == 2)
    for (size_t h = 0; h < heads; ++h) s[h] = -30.0f - (float)(h % 3);
  return s;
}

/* Gives desc sinks: uploaded, and told to the reference. */
static cl_mem attach_sinks(fcl_context *ctx, fcl_attention_desc *desc, const float *host) {
  cl_mem mem = fclu_upload(ctx, host, desc->heads_q, FCL_DTYPE_F32);
  ck_assert_ptr_nonnull(mem);
  fclref_set_sinks(mem, host);
  desc->sinks = mem;
  return mem;
}

static void force(fcl_context *ctx, unsigned kernel, unsigned splits, unsigned merge) {
  const fcl_plan hint = {.kernel = kernel, .splits = splits, .merge = merge};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
}

/* O's error allowed: f32's arithmetic, or a few roundings of the 16-bit
 * storage type, relative to O's size. */
static double o_tol(fcl_dtype t, double scale) {
  return (t == FCL_DTYPE_F32 ? 2e-5 : 4.0 * th_half_ulp(t)) * (scale > 1.0 ? scale : 1.0);
}

/* A forward's O and LSE against the reference, row by row (a ragged
 * batch's buffers hold more than its rows): within tolerance, and a row
 * that sees no key exactly zeros with LSE the sink. Returns how many rows
 * saw no key. */
static size_t check_rows(const th_problem *p, const th_forward *r, const float *sinks,
                       const char *what) {
  const fcl_attention_desc *d = &p->desc;
  const size_t dv = d->head_dim_v ? d->head_dim_v : d->head_dim;  /* O's width */
  th_reference ref = th_reference_forward(p);
  const double tol = o_tol(d->dtype, fclu_max_abs(ref.o, p->q_elems / d->head_dim * dv));
  char desc_buf[256];
  size_t blind = 0;
  for (size_t b = 0; b < d->batch; ++b) {
    size_t q0, nq, k0, nk;
    fclref_sequence(d, b, &q0, &nq, &k0, &nk);
    for (size_t i = 0; i < nq; ++i)
      for (size_t h = 0; h < d->heads_q; ++h) {
        const size_t at = ((q0 + i) * d->heads_q + h) * dv;
        const size_t l = fclref_lse_at(d, b, h, i);
        const double want = ref.lse[l];
        int zeros = 1;
        for (size_t c = 0; c < dv; ++c) zeros &= ref.o[at + c] == 0.0;
        if (zeros && want == (double)sinks[h]) {  /* sees no key */
          ++blind;
          ck_assert_msg(r->lse[l] == sinks[h], "%s: row (%zu, %zu, %zu) sees no key: LSE %g, sink %g",
                        what, b, h, i, (double)r->lse[l], (double)sinks[h]);
          for (size_t c = 0; c < dv; ++c)
            ck_assert_msg(r->o[at + c] == 0.0f, "%s: blind row (%zu, %zu, %zu) O[%zu] = %g", what,
                          b, h, i, c, (double)r->o[at + c]);
          continue;
        }
        const double lse_err = fabs((double)r->lse[l] - want);
        ck_assert_msg(lse_err <= 1e-4 * (fabs(want) > 1.0 ? fabs(want) : 1.0),
                      "%s (%s): LSE (%zu, %zu, %zu) %.7g, reference %.7g", what,
                      th_describe(d, desc_buf, sizeof desc_buf), b, h, i, (double)r->lse[l],
                      want);
        const double err = fclu_max_abs_err(r->o + at, ref.o + at, dv);
        ck_assert_msg(err <= tol, "%s (%s): O row (%zu, %zu, %zu) error %g > %g", what,
                      th_describe(d, desc_buf, sizeof desc_buf), b, h, i, err, tol);
      }
  }
  th_reference_free(&ref);
  return blind;
}

/* Runs the forward of p (with LSE) as the context's hint plans it and
 * checks its rows (check_rows); returns the rows that saw no key. */
static size_t run_and_check(fcl_context *ctx, const th_problem *p, fcl_algo algo,
                            const float *sinks, const char *what) {
  th_forward r = th_run_forward(ctx, p, algo, 1);
  ck_assert_msg(r.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  const size_t blind = check_rows(p, &r, sinks, what);
  th_forward_free(&r);
  return blind;
}

/* ---- every family ---------------------------------------------------------- */

typedef struct scase {
  size_t b, hq, hkv, nq, nk, d;
  int causal, window_left;
} scase;

/* prefill with blind rows (nq > nk, causal), a window, GQA; decode rows */
static const scase prefill_cases[] = {{2, 4, 2, 40, 33, 32, 1, -1}, {1, 2, 1, 48, 48, 64, 1, 8}};
static const scase decode_cases[] = {{2, 8, 2, 1, 300, 64, 0, -1}, {1, 4, 2, 4, 77, 32, 1, -1}};

static fcl_attention_desc case_desc(const scase *c, unsigned kernel, fcl_dtype dtype) {
  fcl_attention_desc d;
  const int mma = kernel == FCL_FLASH_KERNEL_MMA;
  fcl_attention_desc_init(&d, c->b, c->hq, c->hkv, c->nq, c->nk, mma ? th_mma_head_dim(c->d) : c->d);
  d.causal = c->causal;
  d.window_left = c->window_left;
  d.dtype = dtype;
  return d;
}

/* The storage types a family runs here: the matrix ones 16-bit. */
static fcl_dtype family_dtype(unsigned kernel, int which) {
  static const fcl_dtype any[3] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};
  if (kernel == FCL_FLASH_KERNEL_MMA || kernel == FCL_FLASH_KERNEL_DECODE_MMA)
    return which % 2 ? FCL_DTYPE_BF16 : FCL_DTYPE_F16;
  return any[which % 3];
}

static void run_case(fcl_context *ctx, const scase *c, unsigned kernel, int which, int mode) {
  const fcl_dtype t = family_dtype(kernel, which);
  fcl_attention_desc d = case_desc(c, kernel, t);
  float *sinks = sink_values(d.heads_q, mode, (uint64_t)which);
  cl_mem mem = attach_sinks(ctx, &d, sinks);
  th_problem p;
  th_problem_init(&p, ctx, &d, 17 + (uint64_t)which, 1.0);
  force(ctx, kernel, 1, 0);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  char what[96];
  snprintf(what, sizeof what, "%s, %s, sinks mode %d", fcl_flash_kernel_name(kernel),
           fcl_dtype_name(t), mode);
  ck_assert_msg(r.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  ck_assert_uint_eq(r.info.plan.kernel, kernel);
  const size_t blind = check_rows(&p, &r, sinks, what);
  if (c->causal && c->nq > c->nk)  /* the first nq - nk rows of each head */
    ck_assert_uint_eq(blind, c->b * c->hq * (c->nq - c->nk));
  th_forward_free(&r);
  th_problem_free(&p);
  clReleaseMemObject(mem);
  free(sinks);
}

START_TEST(every_family_matches_reference) {
  fcl_context *ctx = th_context();
  const unsigned kernel = families[_i];
  int which = 0;
  if (!decode_family(kernel))
    for (size_t c = 0; c < sizeof prefill_cases / sizeof *prefill_cases; ++c, ++which)
      run_case(ctx, &prefill_cases[c], kernel, which, which % 3);
  for (size_t c = 0; c < sizeof decode_cases / sizeof *decode_cases; ++c, ++which)
    run_case(ctx, &decode_cases[c], kernel, which, which % 3);
  fcl_context_release(ctx);
}
END_TEST

/* The decode kernel on matrix instructions past 128 columns (its wide
 * kernel: DeepSeek's 576 and 512, 32 heads of one KV head in a block),
 * each sink mode, unsplit and split (the sink in the merge). */
START_TEST(wide_decode_matches_reference) {
  fcl_context *ctx = th_context();
  const scase c = {2, 32, 1, 1, 300, 576, 0, -1};
  for (int mode = 0; mode < 3; ++mode) {
    fcl_attention_desc d = case_desc(&c, FCL_FLASH_KERNEL_DECODE_MMA, family_dtype(FCL_FLASH_KERNEL_DECODE_MMA, mode));
    d.head_dim_v = 512;
    float *sinks = sink_values(d.heads_q, mode, 71 + (uint64_t)mode);
    cl_mem mem = attach_sinks(ctx, &d, sinks);
    th_problem p;
    th_problem_init(&p, ctx, &d, 73 + (uint64_t)mode, 1.0);
    force(ctx, FCL_FLASH_KERNEL_DECODE_MMA, mode == 1 ? 3 : 1, 0);
    char what[64];
    snprintf(what, sizeof what, "wide decode-mma, sinks mode %d", mode);
    ck_assert_uint_eq(run_and_check(ctx, &p, FCL_ALGO_FLASH, sinks, what), 0);
    th_problem_free(&p);
    clReleaseMemObject(mem);
    free(sinks);
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- split-KV: the sink enters once ----------------------------------------- */

START_TEST(split_forward_adds_the_sink_once) {
  fcl_context *ctx = th_context();
  static const unsigned split_counts[] = {1, 2, 3, 7, FCL_MAX_SPLITS};
  static const unsigned merges[] = {FCL_SPLIT_MERGE_KERNEL, FCL_SPLIT_MERGE_LAST_SPLIT};
  const unsigned kernel = _i == 0 ? FCL_FLASH_KERNEL_DECODE : FCL_FLASH_KERNEL_SIMT;
  const scase c = {2, 8, 4, 4, 333, 32, 1, -1};
  fcl_attention_desc d = case_desc(&c, kernel, FCL_DTYPE_F32);
  float *sinks = sink_values(d.heads_q, 0, 5);
  sinks[1] = 30.0f;
  sinks[2] = -30.0f;
  cl_mem mem = attach_sinks(ctx, &d, sinks);
  th_problem p;
  th_problem_init(&p, ctx, &d, 23, 1.0);
  th_forward first = {0};
  for (size_t m = 0; m < (kernel == FCL_FLASH_KERNEL_DECODE ? 2u : 1u); ++m)
    for (size_t s = 0; s < sizeof split_counts / sizeof *split_counts; ++s) {
      force(ctx, kernel, split_counts[s], split_counts[s] > 1 ? merges[m] : 0);
      th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      char what[96];
      snprintf(what, sizeof what, "%s, %u splits, merge %s", fcl_flash_kernel_name(kernel),
               split_counts[s], fcl_split_merge_name(merges[m]));
      ck_assert_msg(r.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
      check_rows(&p, &r, sinks, what);
      /* the same call again: the same bits */
      th_forward again = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      ck_assert_int_eq(again.status, FCL_SUCCESS);
      ck_assert_msg(!memcmp(r.o, again.o, p.q_elems * sizeof *r.o) &&
                        !memcmp(r.lse, again.lse, p.lse_elems * sizeof *r.lse),
                    "%s: a rerun differs", what);
      th_forward_free(&again);
      if (!first.o) first = r; else th_forward_free(&r);
    }
  th_forward_free(&first);
  th_problem_free(&p);
  clReleaseMemObject(mem);
  free(sinks);
  fcl_context_release(ctx);
}
END_TEST

/* ---- ragged batches, KV caches, pages, the naive algorithm ------------------ */

START_TEST(ragged_batch_matches_reference) {
  fcl_context *ctx = th_context();
  static const int32_t cu[] = {0, 5, 5, 37};
  static const unsigned kernels[] = {FCL_FLASH_KERNEL_AUTO, FCL_FLASH_KERNEL_SIMT,
                                     FCL_FLASH_KERNEL_CPU};
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 3, 4, 2, 32, 32, 32);
  d.causal = 1;
  d.cu_seqlens_q = cu;
  float *sinks = sink_values(d.heads_q, 0, 7);
  cl_mem mem = attach_sinks(ctx, &d, sinks);
  th_problem p;
  th_problem_init(&p, ctx, &d, 29, 1.0);
  for (size_t k = 0; k < sizeof kernels / sizeof *kernels; ++k) {
    force(ctx, kernels[k], 0, 0);
    run_and_check(ctx, &p, FCL_ALGO_FLASH, sinks, fcl_flash_kernel_name(kernels[k]));
  }
  run_and_check(ctx, &p, FCL_ALGO_NAIVE, sinks, "ragged, naive");
  th_problem_free(&p);
  clReleaseMemObject(mem);
  free(sinks);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_matches_reference) {
  fcl_context *ctx = th_context();
  for (int mode = 0; mode < 3; ++mode) {
    const scase c = mode == 0 ? prefill_cases[0] : decode_cases[mode - 1];
    fcl_attention_desc d = case_desc(&c, FCL_FLASH_KERNEL_SIMT, FCL_DTYPE_F32);
    float *sinks = sink_values(d.heads_q, mode, 11);
    cl_mem mem = attach_sinks(ctx, &d, sinks);
    th_problem p;
    th_problem_init(&p, ctx, &d, 31, 1.0);
    run_and_check(ctx, &p, FCL_ALGO_NAIVE, sinks, "naive");
    th_problem_free(&p);
    clReleaseMemObject(mem);
    free(sinks);
  }
  fcl_context_release(ctx);
}
END_TEST

/* A KV cache's lengths (0 among them: zeros, LSE the sink), contiguous and
 * paged: the pools are the same buffers, page b pages_per_seq + j holding
 * sequence b's tokens [16 j, 16 j + 16), so one reference serves both. */
START_TEST(kv_cache_and_pages_match_reference) {
  fcl_context *ctx = th_context();
  static const int32_t lens[] = {0, 17, 64};
  static const unsigned kernels[] = {FCL_FLASH_KERNEL_AUTO, FCL_FLASH_KERNEL_SIMT,
                                     FCL_FLASH_KERNEL_DECODE, FCL_FLASH_KERNEL_DECODE_MMA};
  const size_t batch = 3, page = 16, per_seq = 4;
  int32_t table[3 * 4];
  for (size_t e = 0; e < batch * per_seq; ++e) table[e] = (int32_t)e;
  cl_mem d_table = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                  sizeof table, table, NULL);
  ck_assert_ptr_nonnull(d_table);
  for (size_t k = 0; k < sizeof kernels / sizeof *kernels; ++k) {
    const int mma = kernels[k] == FCL_FLASH_KERNEL_DECODE_MMA;
    fcl_attention_desc d;
    fcl_attention_desc_init(&d, batch, 4, 1, 2, page * per_seq, 32);
    d.causal = 1;
    d.seqlens_k = lens;
    d.dtype = mma ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
    float *sinks = sink_values(d.heads_q, (int)k % 3, 13);
    cl_mem mem = attach_sinks(ctx, &d, sinks);
    th_problem p;
    th_problem_init(&p, ctx, &d, 37, 1.0);
    for (int paged = 0; paged < 2; ++paged) {
      th_problem run = p;
      if (paged) {
        run.desc.block_table = d_table;
        run.desc.page_size = page;
        run.desc.pages_per_seq = per_seq;
        run.desc.num_pages = batch * per_seq;
      }
      force(ctx, kernels[k], 0, 0);
      char what[64];
      snprintf(what, sizeof what, "%s KV cache, %s", paged ? "paged" : "contiguous",
               fcl_flash_kernel_name(kernels[k]));
      /* entry 0's cache is empty: its rows see no key */
      ck_assert_uint_eq(run_and_check(ctx, &run, FCL_ALGO_FLASH, sinks, what),
                        d.seqlen_q * d.heads_q);
    }
    th_problem_free(&p);
    clReleaseMemObject(mem);
    free(sinks);
  }
  clReleaseMemObject(d_table);
  fcl_context_release(ctx);
}
END_TEST

/* ---- the backward -------------------------------------------------------------- */

static const unsigned backward_families[] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA,
                                             FCL_FLASH_KERNEL_CPU};

static double grad_err(const float *x, const double *ref, size_t n) {
  const double scale = fclu_max_abs(ref, n);
  return fclu_max_abs_err(x, ref, n) / (scale > 1.0 ? scale : 1.0);
}

START_TEST(backward_and_dsinks_match_reference) {
  fcl_context *ctx = th_context();
  const unsigned kernel = backward_families[_i];
  const int mma = kernel == FCL_FLASH_KERNEL_MMA;
  static const int32_t cu[] = {0, 5, 5, 37};
  for (int mode = 0; mode < 4; ++mode) {
    /* mode 2: a window, and more rows a head than flash_bwd_sinks's work-group
     * takes at once; 3: a ragged batch with an empty sequence */
    const scase c = mode == 2   ? (scase){3, 2, 1, 300, 300, 64, 1, 8}
                    : mode == 3 ? (scase){3, 4, 2, 32, 32, 32, 1, -1}
                                : prefill_cases[0];
    const fcl_dtype t = mma ? (mode % 2 ? FCL_DTYPE_BF16 : FCL_DTYPE_F16)
                            : (mode == 1 ? FCL_DTYPE_F16 : FCL_DTYPE_F32);
    fcl_attention_desc d = case_desc(&c, kernel, t);
    if (mode == 3) d.cu_seqlens_q = cu;
    float *sinks = sink_values(d.heads_q, mode, 41);
    if (mode == 0) sinks[1] = 4.0f;  /* a sink that weighs as much as the keys */
    cl_mem mem = attach_sinks(ctx, &d, sinks);
    cl_mem dsinks = fclu_poisoned_buffer(ctx, d.heads_q * sizeof(float));
    ck_assert_ptr_nonnull(dsinks);
    d.dsinks = dsinks;
    th_problem p;
    th_problem_init(&p, ctx, &d, 43, 1.0);
    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 47);
    force(ctx, kernel, 0, 0);
    th_backward r = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
    char what[96];
    snprintf(what, sizeof what, "backward, %s, %s, sinks mode %d", fcl_flash_kernel_name(kernel),
             fcl_dtype_name(t), mode);
    ck_assert_msg(r.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
    ck_assert_uint_eq(r.info.plan.kernel, kernel);
    float got[64];
    ck_assert_int_eq(fclu_download(ctx, dsinks, got, d.heads_q, FCL_DTYPE_F32), 0);

    /* the gradients of the O and LSE the backward was given */
    double *dq = calloc(p.q_elems, sizeof *dq), *dk = calloc(p.kv_elems, sizeof *dk);
    double *dv = calloc(p.kv_elems, sizeof *dv), want[64];
    ck_assert(dq && dk && dv);
    fclref_backward_given_o(&p.desc, p.q, p.k, p.v, g.dout, g.o, dq, dk, dv);
    fclref_dsinks(&p.desc, p.q, p.k, p.v, g.dout, g.o, want);
    const double tol = t == FCL_DTYPE_F32 ? 1e-4 : 8.0 * th_half_ulp(t);
    /* the tensors' rows (a ragged batch's buffers hold more) */
    const size_t tokens_q = mode == 3 ? (size_t)cu[d.batch] : d.batch * d.seqlen_q;
    const size_t tokens_k = mode == 3 ? (size_t)cu[d.batch] : d.batch * d.seqlen_k;
    const size_t nq = tokens_q * d.heads_q * d.head_dim, nkv = tokens_k * d.heads_kv * d.head_dim;
    ck_assert_msg(grad_err(r.dq, dq, nq) <= tol, "%s: dQ error %g", what, grad_err(r.dq, dq, nq));
    ck_assert_msg(grad_err(r.dk, dk, nkv) <= tol, "%s: dK error %g", what,
                  grad_err(r.dk, dk, nkv));
    ck_assert_msg(grad_err(r.dv, dv, nkv) <= tol, "%s: dV error %g", what,
                  grad_err(r.dv, dv, nkv));
    /* dsinks sums O(rows) terms in float: relative to the terms' sum of sizes */
    for (size_t h = 0; h < d.heads_q; ++h)
      ck_assert_msg(fabs((double)got[h] - want[h]) <= 1e-4 * (1.0 + fabs(want[h])) + 1e-6 * p.lse_elems,
                    "%s: dsinks[%zu] %.7g, reference %.7g", what, h, (double)got[h], want[h]);
    /* a rerun: the same bits, dsinks too */
    th_backward again = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
    float got2[64];
    ck_assert_int_eq(again.status, FCL_SUCCESS);
    ck_assert_int_eq(fclu_download(ctx, dsinks, got2, d.heads_q, FCL_DTYPE_F32), 0);
    ck_assert_msg(!memcmp(got, got2, d.heads_q * sizeof *got) &&
                      !memcmp(r.dq, again.dq, nq * sizeof *r.dq) &&
                      !memcmp(r.dk, again.dk, nkv * sizeof *r.dk),
                  "%s: a rerun differs", what);
    th_backward_free(&again);
    if (kernel == FCL_FLASH_KERNEL_SIMT && t == FCL_DTYPE_F32) {
      /* the naive backward: dQ, dK and dV from the same LSE (dsinks are the flash one's) */
      p.desc.dsinks = NULL;
      th_backward naive = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
      ck_assert_msg(naive.status == FCL_SUCCESS, "naive: %s", fcl_context_last_error(ctx));
      ck_assert_msg(grad_err(naive.dq, dq, nq) <= tol && grad_err(naive.dk, dk, nkv) <= tol &&
                        grad_err(naive.dv, dv, nkv) <= tol,
                    "%s, naive: errors %g %g %g", what, grad_err(naive.dq, dq, nq),
                    grad_err(naive.dk, dk, nkv), grad_err(naive.dv, dv, nkv));
      th_backward_free(&naive);
    }
    free(dq);
    free(dk);
    free(dv);
    th_backward_free(&r);
    th_grad_inputs_free(&g);
    th_problem_free(&p);
    clReleaseMemObject(dsinks);
    clReleaseMemObject(mem);
    free(sinks);
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- fcl_merge_states with sinks --------------------------------------------- */

START_TEST(merge_states_adds_the_sink) {
  fcl_context *ctx = th_context();
  const size_t parts = 3, batch = 2, seqlen = 5, heads = 4, dim = 24;
  const size_t rows = batch * seqlen * heads, o_elems = rows * dim;
  float *o_parts = malloc(parts * o_elems * sizeof *o_parts);
  float *lse_parts = malloc(parts * rows * sizeof *lse_parts);
  float sinks[4] = {0.5f, 30.0f, -30.0f, 2.0f};
  ck_assert(o_parts && lse_parts);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 53);
  fclu_fill_normal(&rng, o_parts, parts * o_elems, 1.0, FCL_DTYPE_F32);
  fclu_fill_normal(&rng, lse_parts, parts * rows, 2.0, FCL_DTYPE_F32);
  for (size_t r = 0; r < rows; r += 7) lse_parts[r] = -INFINITY;  /* empty parts */
  for (size_t p = 0; p < parts; ++p) lse_parts[p * rows + 3] = -INFINITY;  /* a row of none */
  fcl_merge_desc m;
  fcl_merge_desc_init(&m, parts, batch, seqlen, heads, dim);
  cl_mem d_o_parts = fclu_upload(ctx, o_parts, parts * o_elems, FCL_DTYPE_F32);
  cl_mem d_lse_parts = fclu_upload(ctx, lse_parts, parts * rows, FCL_DTYPE_F32);
  cl_mem d_sinks = fclu_upload(ctx, sinks, heads, FCL_DTYPE_F32);
  cl_mem d_o = fclu_poisoned_buffer(ctx, o_elems * sizeof(float));
  cl_mem d_lse = fclu_poisoned_buffer(ctx, rows * sizeof(float));
  m.sinks = d_sinks;
  const int count = th_count_io(ctx);
  fcl_run_info info;
  ck_assert_msg(fcl_merge_states(ctx, &m, d_o_parts, d_lse_parts, d_o, d_lse, &info) ==
                    FCL_SUCCESS,
                "%s", fcl_context_last_error(ctx));
  if (count) ck_assert_uint_eq(info.bytes_counted, info.bytes_model);
  float *o = malloc(o_elems * sizeof *o), lse[40];
  ck_assert(o && rows <= 40);
  ck_assert_int_eq(fclu_download(ctx, d_o, o, o_elems, FCL_DTYPE_F32), 0);
  ck_assert_int_eq(fclu_download(ctx, d_lse, lse, rows, FCL_DTYPE_F32), 0);
  /* rows are (b, t, h); LSE [b][h][t], as the attention calls lay it */
  for (size_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < seqlen; ++t)
      for (size_t h = 0; h < heads; ++h) {
        const size_t row = (b * seqlen + t) * heads + h, l = (b * heads + h) * seqlen + t;
        double top = sinks[h], sum = 0.0;
        for (size_t p = 0; p < parts; ++p) top = fmax(top, lse_parts[p * rows + l]);
        sum = exp(sinks[h] - top);
        for (size_t p = 0; p < parts; ++p) sum += exp(lse_parts[p * rows + l] - top);
        const double want_lse = top + log(sum);
        ck_assert_msg(fabs(lse[l] - want_lse) <= 1e-5 * (1.0 + fabs(want_lse)),
                      "merge: LSE of row %zu %g, want %g", row, (double)lse[l], want_lse);
        for (size_t c = 0; c < dim; ++c) {
          double want = 0.0;
          for (size_t p = 0; p < parts; ++p)
            want += exp(lse_parts[p * rows + l] - want_lse) * o_parts[p * o_elems + row * dim + c];
          ck_assert_msg(fabs(o[row * dim + c] - want) <= 1e-5 * (1.0 + fabs(want)),
                        "merge: O[%zu][%zu] %g, want %g", row, c, (double)o[row * dim + c], want);
        }
      }
  /* a sinks buffer of fewer than heads floats: refused, nothing written */
  cl_mem small = fclu_upload(ctx, sinks, heads - 1, FCL_DTYPE_F32);
  m.sinks = small;
  ck_assert_int_eq(fclu_poison(ctx, d_o, o_elems * sizeof(float)), 0);
  ck_assert_int_eq(fcl_merge_states(ctx, &m, d_o_parts, d_lse_parts, d_o, d_lse, NULL),
                   FCL_ERROR_BUFFER_TOO_SMALL);
  ck_assert_int_eq(fclu_download(ctx, d_o, o, o_elems, FCL_DTYPE_F32), 0);
  for (size_t i = 0; i < o_elems; ++i) ck_assert(isnan(o[i]));
  clReleaseMemObject(small);
  clReleaseMemObject(d_o_parts);
  clReleaseMemObject(d_lse_parts);
  clReleaseMemObject(d_sinks);
  clReleaseMemObject(d_o);
  clReleaseMemObject(d_lse);
  free(o);
  free(o_parts);
  free(lse_parts);
  fcl_context_release(ctx);
}
END_TEST

/* ---- bytes ------------------------------------------------------------------------- */

START_TEST(counted_bytes_equal_the_model) {
  fcl_context *ctx = th_context();
  if (!th_count_io(ctx)) {
    fcl_context_release(ctx);
    return;
  }
  static const struct {
    unsigned kernel, splits, merge;
    fcl_dtype dtype;
  } plans[] = {{FCL_FLASH_KERNEL_SIMT, 1, 0, FCL_DTYPE_F32},
               {FCL_FLASH_KERNEL_CPU, 1, 0, FCL_DTYPE_BF16},
               {FCL_FLASH_KERNEL_MMA, 1, 0, FCL_DTYPE_F16},
               {FCL_FLASH_KERNEL_DECODE, 1, 0, FCL_DTYPE_F32},
               {FCL_FLASH_KERNEL_DECODE, 4, FCL_SPLIT_MERGE_KERNEL, FCL_DTYPE_F32},
               {FCL_FLASH_KERNEL_DECODE, 4, FCL_SPLIT_MERGE_LAST_SPLIT, FCL_DTYPE_F32},
               {FCL_FLASH_KERNEL_DECODE_MMA, 1, 0, FCL_DTYPE_BF16},
               {FCL_FLASH_KERNEL_DECODE_MMA, 3, FCL_SPLIT_MERGE_LAST_SPLIT, FCL_DTYPE_F16},
               {FCL_FLASH_KERNEL_SIMT, 3, FCL_SPLIT_MERGE_KERNEL, FCL_DTYPE_F32}};
  const scase c = decode_cases[1];
  for (size_t i = 0; i < sizeof plans / sizeof *plans; ++i) {
    fcl_attention_desc d = case_desc(&c, plans[i].kernel, plans[i].dtype);
    float *sinks = sink_values(d.heads_q, 0, 59);
    cl_mem mem = attach_sinks(ctx, &d, sinks);
    th_problem p;
    th_problem_init(&p, ctx, &d, 61, 1.0);
    force(ctx, plans[i].kernel, plans[i].splits, plans[i].merge);
    th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, i % 2 == 0);
    ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    ck_assert_msg(r.info.bytes_counted == r.info.bytes_model,
                  "%s, %u splits: counted %llu, model %llu", fcl_flash_kernel_name(plans[i].kernel),
                  plans[i].splits, (unsigned long long)r.info.bytes_counted,
                  (unsigned long long)r.info.bytes_model);
    th_forward_free(&r);
    th_problem_free(&p);
    clReleaseMemObject(mem);
    free(sinks);
  }
  /* the naive forward, and the backward with dsinks */
  fcl_attention_desc d = case_desc(&c, FCL_FLASH_KERNEL_SIMT, FCL_DTYPE_F32);
  float *sinks = sink_values(d.heads_q, 0, 59);
  cl_mem mem = attach_sinks(ctx, &d, sinks);
  th_problem p;
  th_problem_init(&p, ctx, &d, 61, 1.0);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  ck_assert_int_eq(r.status, FCL_SUCCESS);
  ck_assert_uint_eq(r.info.bytes_counted, r.info.bytes_model);
  th_forward_free(&r);
  cl_mem dsinks = fclu_poisoned_buffer(ctx, d.heads_q * sizeof(float));
  p.desc.dsinks = dsinks;
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 67);
  force(ctx, FCL_FLASH_KERNEL_SIMT, 0, 0);
  th_backward b = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_msg(b.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  ck_assert_msg(b.info.bytes_counted == b.info.bytes_model, "backward: counted %llu, model %llu",
                (unsigned long long)b.info.bytes_counted, (unsigned long long)b.info.bytes_model);
  th_backward_free(&b);
  th_grad_inputs_free(&g);
  clReleaseMemObject(dsinks);
  th_problem_free(&p);
  clReleaseMemObject(mem);
  free(sinks);
  fcl_context_release(ctx);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------ */

START_TEST(bad_sinks_are_refused_and_nan_stays_in_its_head) {
  fcl_context *ctx = th_context();
  const scase c = prefill_cases[0];
  fcl_attention_desc d = case_desc(&c, FCL_FLASH_KERNEL_SIMT, FCL_DTYPE_F32);
  float *sinks = sink_values(d.heads_q, 0, 71);
  th_problem p;
  th_problem_init(&p, ctx, &d, 73, 1.0);
  /* too small: FCL_ERROR_BUFFER_TOO_SMALL, O and LSE untouched */
  cl_mem small = fclu_upload(ctx, sinks, d.heads_q - 1, FCL_DTYPE_F32);
  p.desc.sinks = small;
  for (int algo = 0; algo < 2; ++algo) {
    th_forward r = th_run_forward(ctx, &p, algo ? FCL_ALGO_NAIVE : FCL_ALGO_FLASH, 1);
    ck_assert_int_eq(r.status, FCL_ERROR_BUFFER_TOO_SMALL);
    ck_assert_msg(strstr(fcl_context_last_error(ctx), "sinks"), "%s", fcl_context_last_error(ctx));
    for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(r.o[i]));
    for (size_t i = 0; i < p.lse_elems; ++i) ck_assert(isnan(r.lse[i]));
    th_forward_free(&r);
  }
  clReleaseMemObject(small);
  /* dsinks without sinks; the naive backward's dsinks */
  cl_mem mem = attach_sinks(ctx, &p.desc, sinks);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 79);
  cl_mem dsinks = fclu_poisoned_buffer(ctx, d.heads_q * sizeof(float));
  p.desc.dsinks = dsinks;
  th_backward b = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert_int_eq(b.status, FCL_ERROR_UNSUPPORTED);
  th_backward_free(&b);
  p.desc.sinks = NULL;
  b = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_int_eq(b.status, FCL_ERROR_INVALID_ARGUMENT);
  th_backward_free(&b);
  clReleaseMemObject(dsinks);
  /* a dsinks buffer too small */
  p.desc.sinks = mem;
  cl_mem small_d = fclu_poisoned_buffer(ctx, (d.heads_q - 1) * sizeof(float));
  p.desc.dsinks = small_d;
  b = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_int_eq(b.status, FCL_ERROR_BUFFER_TOO_SMALL);
  for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(b.dq[i]));
  th_backward_free(&b);
  clReleaseMemObject(small_d);
  p.desc.dsinks = NULL;
  th_grad_inputs_free(&g);
  clReleaseMemObject(mem);
  /* a NaN sink: its head's rows NaN, the others as without it */
  sinks[1] = NAN;
  mem = fclu_upload(ctx, sinks, d.heads_q, FCL_DTYPE_F32);
  p.desc.sinks = mem;
  sinks[1] = 0.0f;  /* the reference's, for the other heads */
  fclref_set_sinks(mem, sinks);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(r.status, FCL_SUCCESS);
  th_reference ref = th_reference_forward(&p);
  for (size_t b2 = 0; b2 < d.batch; ++b2)
    for (size_t i = 0; i < d.seqlen_q; ++i)
      for (size_t h = 0; h < d.heads_q; ++h) {
        const size_t at = ((b2 * d.seqlen_q + i) * d.heads_q + h) * d.head_dim;
        const float lse = r.lse[fclref_lse_at(&d, b2, h, i)];
        if (h == 1) {
          ck_assert_msg(isnan(lse), "NaN sink: LSE (%zu, %zu) %g", b2, i, (double)lse);
          for (size_t c2 = 0; c2 < d.head_dim; ++c2) ck_assert(isnan(r.o[at + c2]));
        } else {
          ck_assert(!isnan(lse));
          ck_assert(fclu_max_abs_err(r.o + at, ref.o + at, d.head_dim) <= 1e-4);
        }
      }
  th_reference_free(&ref);
  th_forward_free(&r);
  clReleaseMemObject(mem);
  th_problem_free(&p);
  free(sinks);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sinks");
  TCase *tc = th_tcase("sinks");
  tcase_add_loop_test(tc, every_family_matches_reference, 0, (int)N_FAMILIES);
  tcase_add_loop_test(tc, split_forward_adds_the_sink_once, 0, 2);
  tcase_add_test(tc, wide_decode_matches_reference);
  tcase_add_test(tc, ragged_batch_matches_reference);
  tcase_add_test(tc, naive_matches_reference);
  tcase_add_test(tc, kv_cache_and_pages_match_reference);
  tcase_add_loop_test(tc, backward_and_dsinks_match_reference, 0,
                      (int)(sizeof backward_families / sizeof *backward_families));
  tcase_add_test(tc, merge_states_adds_the_sink);
  tcase_add_test(tc, counted_bytes_equal_the_model);
  tcase_add_test(tc, bad_sinks_are_refused_and_nan_stays_in_its_head);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
