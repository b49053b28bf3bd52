/*
 * test_edges.c — numerics at the edges, for both algorithms:
 *   - logits of +-1e4 after scaling (spread both ways, all near +1e4, all
 *     near -1e4): within a worst-case rounding bound of the float64
 *     reference, never NaN or inf;
 *   - NaN and +-inf in q, k and v: exactly the behaviour flashcl.h documents
 *     at fcl_attention_forward (which rows and columns become NaN or inf,
 *     which are bit-identical to a run without the bad values);
 *   - seqlen 1 on either side, causal or not;
 *   - head_dim 256, the planner's limit, on the smallest local memory that
 *     still fits it;
 *   - the largest scale a descriptor may hold (FCL_MAX_SCALE), and the next
 *     float, refused.
 */
#include "harness.h"
#include "common.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U 0x1p-24 /* unit roundoff of float */
#define O_TOL 2e-5
#define LSE_TOL 2e-5

static const fcl_algo algos[] = {FCL_ALGO_FLASH, FCL_ALGO_NAIVE};

static size_t q_at(const fcl_attention_desc *d, size_t b, size_t i, size_t h, size_t c) {
  return ((b * d->seqlen_q + i) * d->heads_q + h) * d->head_dim + c;
}
static size_t kv_at(const fcl_attention_desc *d, size_t b, size_t j, size_t h, size_t c) {
  return ((b * d->seqlen_k + j) * d->heads_kv + h) * d->head_dim + c;
}
static size_t lse_at(const fcl_attention_desc *d, size_t b, size_t h, size_t i) {
  return (b * d->heads_q + h) * d->seqlen_q + i;
}
/* Keys row i sees: [0, seen). */
static size_t seen_keys(const fcl_attention_desc *d, size_t i) {
  if (!d->causal) return d->seqlen_k;
  long long last = (long long)i + (long long)d->seqlen_k - (long long)d->seqlen_q;
  return last < 0 ? 0 : (size_t)last + 1 < d->seqlen_k ? (size_t)last + 1 : d->seqlen_k;
}

/* Uploads new host inputs into an existing problem's device buffers. */
static void reupload(fcl_context *ctx, th_problem *p) {
  th_problem fresh = *p;
  fresh.dq = fclu_upload(ctx, p->q, p->q_elems, p->desc.dtype);
  fresh.dk = fclu_upload(ctx, p->k, p->kv_elems, p->desc.dtype);
  fresh.dv = fclu_upload(ctx, p->v, p->kv_elems, p->desc.dtype);
  ck_assert(fresh.dq && fresh.dk && fresh.dv);
  clReleaseMemObject(p->dq);
  clReleaseMemObject(p->dk);
  clReleaseMemObject(p->dv);
  *p = fresh;
}

/* ---- logits of +-1e4 -------------------------------------------------------- */

/* A worst-case bound on the error of an fp32 row: each logit is off by at
 * most delta = (d + 2) u scale sum_c |q_c k_c| (a dot product of d terms,
 * then the scale), which moves the softmax weights by a factor within
 * e^(+-2 delta), so O by at most (e^(2 delta) - 1) max|v|; plus the
 * rounding of the weighted sum over n keys and of exp and the division. */
static void row_bounds(const th_problem *p, size_t b, size_t h, size_t i, double *o_bound,
                       double *lse_bound) {
  const fcl_attention_desc *d = &p->desc;
  size_t hkv = h / (d->heads_q / d->heads_kv), n = seen_keys(d, i);
  double worst = 0, vmax = 0;
  for (size_t j = 0; j < n; ++j) {
    double s = 0;
    for (size_t c = 0; c < d->head_dim; ++c) {
      s += fabs((double)p->q[q_at(d, b, i, h, c)] * p->k[kv_at(d, b, j, hkv, c)]);
      vmax = fmax(vmax, fabs(p->v[kv_at(d, b, j, hkv, c)]));
    }
    worst = fmax(worst, s * d->scale);
  }
  double delta = ((double)d->head_dim + 2) * U * worst;
  *o_bound = 2 * ((exp(2 * delta) - 1) + ((double)n + d->head_dim + 16) * U) * vmax + 1e-6;
  *lse_bound = 2 * (delta + ((double)n + 16) * U * (1 + worst)) + 1e-6;
}

/* sign: 0 random, +1 every logit positive, -1 every logit negative. */
static void check_large_logits(fcl_context *ctx, fcl_algo algo, int sign, uint64_t seed,
                               double *worst_ratio) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, 45, 70, 32);
  desc.causal = 1;
  /* q.k of unit normals spreads about sqrt(d); with |q|, |k| it is about d
   * times 2/pi. Either way logits reach about 1e4. */
  desc.scale = (float)(sign ? 1e4 / (0.64 * desc.head_dim) : 1e4 / (3 * sqrt(32.0)));
  th_problem p;
  th_problem_init(&p, ctx, &desc, seed, 1.0);
  if (sign) {
    for (size_t i = 0; i < p.q_elems; ++i) p.q[i] = fabsf(p.q[i]);
    for (size_t i = 0; i < p.kv_elems; ++i) p.k[i] = (float)sign * fabsf(p.k[i]);
    reupload(ctx, &p);
  }
  th_reference ref = th_reference_forward(&p);
  th_forward run = th_run_forward(ctx, &p, algo, 1);
  ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  double max_logit = 0;
  for (size_t b = 0; b < desc.batch; ++b)
    for (size_t h = 0; h < desc.heads_q; ++h)
      for (size_t i = 0; i < desc.seqlen_q; ++i) {
        double ob, lb;
        row_bounds(&p, b, h, i, &ob, &lb);
        const double *ro = ref.o + q_at(&desc, b, i, h, 0);
        const float *o = run.o + q_at(&desc, b, i, h, 0);
        double lse_ref = ref.lse[lse_at(&desc, b, h, i)];
        float lse = run.lse[lse_at(&desc, b, h, i)];
        if (isfinite(lse_ref)) max_logit = fmax(max_logit, fabs(lse_ref));
        ck_assert_msg(isinf(lse_ref) ? lse == lse_ref : fabs(lse - lse_ref) <= lb,
                      "%s sign %d: LSE[%zu,%zu,%zu] = %.9g, want %.9g +- %g",
                      fcl_algo_name(algo), sign, b, h, i, (double)lse, lse_ref, lb);
        for (size_t c = 0; c < desc.head_dim; ++c) {
          double err = fabs(o[c] - ro[c]);
          ck_assert_msg(isfinite(o[c]) && err <= ob,
                        "%s sign %d: O[%zu,%zu,%zu,%zu] = %.9g, want %.9g +- %g",
                        fcl_algo_name(algo), sign, b, i, h, c, (double)o[c], ro[c], ob);
          if (err / ob > *worst_ratio) *worst_ratio = err / ob;
        }
      }
  ck_assert_msg(max_logit > 3e3, "logits only reached %g", max_logit);
  th_forward_free(&run);
  th_reference_free(&ref);
  th_problem_free(&p);
}

START_TEST(logits_of_1e4_stay_within_the_rounding_bound) {
  fcl_context *ctx = th_context();
  for (size_t a = 0; a < 2; ++a) {
    double worst = 0;
    for (int sign = -1; sign <= 1; ++sign)
      check_large_logits(ctx, algos[a], sign, 300 + (uint64_t)(sign + 1), &worst);
    printf("edges: %s, logits of +-1e4: worst error %.3g of the rounding bound\n",
           fcl_algo_name(algos[a]), worst);
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- non-finite inputs ------------------------------------------------------ */

typedef enum { IN_Q, IN_K, IN_V } input;

typedef struct bad_value {
  input where;
  size_t b, row, head, col; /* row: query row for q, key for k and v */
  float value;
} bad_value;

/* IEEE class of s = q.k (the order of the sum does not change it). */
typedef enum { S_FINITE, S_NEG_INF, S_POS_INF, S_NAN } logit_class;

static logit_class classify(const th_problem *p, size_t b, size_t h, size_t i, size_t j) {
  const fcl_attention_desc *d = &p->desc;
  size_t hkv = h / (d->heads_q / d->heads_kv);
  double s = 0;
  for (size_t c = 0; c < d->head_dim; ++c)
    s += (double)p->q[q_at(d, b, i, h, c)] * (double)p->k[kv_at(d, b, j, hkv, c)];
  return isnan(s) ? S_NAN : isinf(s) ? (s > 0 ? S_POS_INF : S_NEG_INF) : S_FINITE;
}

/* The float64 forward of one row leaving out keys whose logit is -inf. */
static void reference_without(const th_problem *p, size_t b, size_t h, size_t i,
                              double *o, double *lse) {
  const fcl_attention_desc *d = &p->desc;
  size_t hkv = h / (d->heads_q / d->heads_kv), n = seen_keys(d, i);
  double *s = malloc((n ? n : 1) * sizeof *s), m = -INFINITY, l = 0;
  for (size_t j = 0; j < n; ++j) {
    double dot = 0;
    for (size_t c = 0; c < d->head_dim; ++c)
      dot += (double)p->q[q_at(d, b, i, h, c)] * (double)p->k[kv_at(d, b, j, hkv, c)];
    s[j] = dot * d->scale;
    if (s[j] > m) m = s[j];
  }
  for (size_t c = 0; c < d->head_dim; ++c) o[c] = 0;
  for (size_t j = 0; j < n; ++j) {
    if (isinf(s[j])) continue;
    double w = exp(s[j] - m);
    l += w;
    for (size_t c = 0; c < d->head_dim; ++c) o[c] += w * p->v[kv_at(d, b, j, hkv, c)];
  }
  for (size_t c = 0; c < d->head_dim; ++c) o[c] /= l;
  *lse = m + log(l);
  free(s);
}

typedef struct nonfinite_counts {
  long nan_rows, masked_rows, partial_rows, clean_rows, bad_columns, loose_columns;
} nonfinite_counts;

/* Runs `algo` on p (holding the bad values) and on `clean` (the same inputs
 * without them) and checks every element against the documented rules. */
static void check_nonfinite(fcl_context *ctx, fcl_algo algo, const th_problem *p,
                            const th_problem *clean, nonfinite_counts *n) {
  const fcl_attention_desc *d = &p->desc;
  const size_t group = d->heads_q / d->heads_kv;
  th_forward run = th_run_forward(ctx, p, algo, 1);
  ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  th_forward base = th_run_forward(ctx, clean, algo, 1);
  ck_assert_int_eq(base.status, FCL_SUCCESS);
  const char *name = fcl_algo_name(algo);
  double *ro = malloc(d->head_dim * sizeof *ro);
  for (size_t b = 0; b < d->batch; ++b)
    for (size_t h = 0; h < d->heads_q; ++h)
      for (size_t i = 0; i < d->seqlen_q; ++i) {
        const size_t hkv = h / group, seen = seen_keys(d, i);
        const float *o = run.o + q_at(d, b, i, h, 0);
        const float *o0 = base.o + q_at(d, b, i, h, 0);
        const float lse = run.lse[lse_at(d, b, h, i)], lse0 = base.lse[lse_at(d, b, h, i)];
        int any_nan = 0, any_neg_inf = 0, all_neg_inf = seen > 0;
        for (size_t j = 0; j < seen; ++j) {
          logit_class k = classify(p, b, h, i, j);
          any_nan |= k == S_NAN || k == S_POS_INF;
          any_neg_inf |= k == S_NEG_INF;
          all_neg_inf &= k == S_NEG_INF;
        }
        /* Columns where v is not finite: at a key this row sees (must
         * spread), or only at keys it does not see (may spread). */
        for (size_t c = 0; c < d->head_dim; ++c) {
          int seen_bad = 0, unseen_bad = 0;
          for (size_t j = 0; j < d->seqlen_k; ++j)
            if (!isfinite(p->v[kv_at(d, b, j, hkv, c)])) {
              if (j < seen) seen_bad = 1;
              else unseen_bad = 1;
            }
          const int col_free = !seen_bad && !unseen_bad;
          if (any_nan) {
            ck_assert_msg(isnan(o[c]), "%s: row (%zu,%zu,%zu) with a NaN/+inf logit: "
                          "O[%zu] = %g, want NaN", name, b, h, i, c, (double)o[c]);
          } else if (seen_bad) {
            ck_assert_msg(!isfinite(o[c]), "%s: O(%zu,%zu,%zu)[%zu] = %g, want NaN or inf",
                          name, b, h, i, c, (double)o[c]);
            n->bad_columns++;
          } else if (!col_free) {
            n->loose_columns++;  /* documented as unspecified */
          } else if (seen == 0 || all_neg_inf) {
            ck_assert_msg(o[c] == 0.0f, "%s: row (%zu,%zu,%zu) that sees no finite key: "
                          "O[%zu] = %g", name, b, h, i, c, (double)o[c]);
          } else if (any_neg_inf) {
            if (c == 0) reference_without(p, b, h, i, ro, &(double){0});
            ck_assert_msg(fabs(o[c] - ro[c]) <= O_TOL, "%s: row (%zu,%zu,%zu) with a -inf "
                          "logit: O[%zu] = %.9g, want %.9g", name, b, h, i, c,
                          (double)o[c], ro[c]);
          } else {
            ck_assert_msg(!memcmp(&o[c], &o0[c], sizeof(float)),
                          "%s: unaffected O(%zu,%zu,%zu)[%zu] = %.9g, clean run %.9g", name,
                          b, h, i, c, (double)o[c], (double)o0[c]);
          }
        }
        if (any_nan) {
          ck_assert_msg(isnan(lse), "%s: LSE(%zu,%zu,%zu) = %g, want NaN", name, b, h, i,
                        (double)lse);
          n->nan_rows++;
        } else if (seen == 0 || all_neg_inf) {
          ck_assert_msg(isinf(lse) && lse < 0, "%s: LSE(%zu,%zu,%zu) = %g, want -inf", name,
                        b, h, i, (double)lse);
          n->masked_rows++;
        } else if (any_neg_inf) {
          double want;
          reference_without(p, b, h, i, ro, &want);
          ck_assert_msg(fabs(lse - want) <= LSE_TOL * (1 + fabs(want)),
                        "%s: LSE(%zu,%zu,%zu) = %.9g, want %.9g", name, b, h, i,
                        (double)lse, want);
          n->partial_rows++;
        } else {
          ck_assert_msg(!memcmp(&lse, &lse0, sizeof lse), "%s: LSE(%zu,%zu,%zu) = %.9g, "
                        "clean run %.9g", name, b, h, i, (double)lse, (double)lse0);
          n->clean_rows++;
        }
      }
  free(ro);
  th_forward_free(&run);
  th_forward_free(&base);
}

static void plant(th_problem *p, const bad_value *bad, size_t n_bad) {
  const fcl_attention_desc *d = &p->desc;
  for (size_t i = 0; i < n_bad; ++i) {
    const bad_value *x = &bad[i];
    if (x->where == IN_Q) p->q[q_at(d, x->b, x->row, x->head, x->col)] = x->value;
    else if (x->where == IN_K) p->k[kv_at(d, x->b, x->row, x->head, x->col)] = x->value;
    else p->v[kv_at(d, x->b, x->row, x->head, x->col)] = x->value;
  }
}

START_TEST(nonfinite_inputs_behave_as_documented) {
  fcl_context *ctx = th_context();
  /* 2 batches x 2 kv heads x 2 query heads each; causal with 4 more
   * queries than keys, so rows 0..3 see no key. Each bad value sits in a
   * (batch, kv head) slice of its own where they would interact. */
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, 24, 20, 16);
  desc.causal = 1;
  const bad_value bad[] = {
      {IN_Q, 0, 10, 0, 3, NAN},       /* one NaN row */
      {IN_Q, 0, 12, 1, 5, INFINITY},  /* +inf and -inf logits: NaN row */
      {IN_Q, 1, 6, 0, 7, -INFINITY},  /* sees 3 keys: maybe all -inf */
      {IN_Q, 1, 1, 1, 0, NAN},        /* sees no key: zeros, -inf */
      {IN_K, 0, 5, 1, 2, NAN},        /* rows that see key 5: NaN */
      {IN_K, 1, 8, 1, 4, -INFINITY},  /* -inf where q > 0, +inf where q < 0 */
      {IN_V, 1, 3, 0, 6, INFINITY},   /* column 6 of rows that see key 3 */
      {IN_V, 0, 15, 0, 9, NAN},       /* column 9 of rows that see key 15 */
  };
  /* naive, flash as planned, flash on the MMA kernel (emulated where the
   * device has no matrix instructions) */
  for (size_t a = 0; a < 3; ++a) {
    if (a == 2) {
      const fcl_plan mma = {.kernel = FCL_FLASH_KERNEL_MMA};
      ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &mma), FCL_SUCCESS);
    }
    const fcl_algo algo = a < 2 ? algos[a] : FCL_ALGO_FLASH;
    th_problem clean, p;
    th_problem_init(&clean, ctx, &desc, 21, 1.0);
    th_problem_init(&p, ctx, &desc, 21, 1.0);
    plant(&p, bad, sizeof bad / sizeof bad[0]);
    reupload(ctx, &p);
    nonfinite_counts n = {0};
    check_nonfinite(ctx, algo, &p, &clean, &n);
    ck_assert_int_gt(n.nan_rows, 10);
    ck_assert_int_gt(n.partial_rows + n.masked_rows, 4);
    ck_assert_int_gt(n.bad_columns, 10);
    printf("edges: %s%s, planted NaN/inf: %ld NaN rows, %ld rows with -inf logits left "
           "out, %ld rows that see nothing, %ld non-finite columns, %ld columns left "
           "unspecified, %ld rows bit-identical to the clean run\n",
           fcl_algo_name(algo), a == 2 ? " (MMA)" : "", n.nan_rows, n.partial_rows, n.masked_rows,
           n.bad_columns, n.loose_columns, n.clean_rows);

    /* Everything NaN: no crash, no hang; only rows that see no key escape. */
    th_problem all;
    th_problem_init(&all, ctx, &desc, 22, 1.0);
    for (size_t i = 0; i < all.q_elems; ++i) all.q[i] = NAN;
    for (size_t i = 0; i < all.kv_elems; ++i) all.k[i] = INFINITY;
    reupload(ctx, &all);
    nonfinite_counts m = {0};
    check_nonfinite(ctx, algo, &all, &clean, &m);
    ck_assert_int_eq(m.clean_rows + m.partial_rows, 0);
    th_problem_free(&all);
    th_problem_free(&p);
    th_problem_free(&clean);
  }
  fcl_context_release(ctx);
}
END_TEST


/* ---- infinite logits under a softcap ----------------------------------------- */

/* One family against the float64 reference (which caps ±inf to ±softcap
 * as it caps any logit): rows the reference makes NaN are NaN, the others
 * within the tolerance. Counts the finite rows that saw a +inf and a -inf
 * logit. Returns 0 where the device cannot run the family. */
static int check_softcap_family(fcl_context *ctx, const th_problem *p, fcl_algo algo,
                                unsigned kernel, long *capped_rows) {
  const fcl_attention_desc *d = &p->desc;
  const fcl_plan hint = {.kernel = kernel};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, kernel ? &hint : NULL), FCL_SUCCESS);
  th_forward run = th_run_forward(ctx, p, algo, 1);
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
  const char *name = kernel ? fcl_flash_kernel_name(kernel) : fcl_algo_name(algo);
  if (run.status == FCL_ERROR_UNSUPPORTED) {
    printf("edges: softcap: %s does not run this problem here (%s)\n", name,
           fcl_context_last_error(ctx));
    th_forward_free(&run);
    return 0;
  }
  ck_assert_msg(run.status == FCL_SUCCESS, "%s: %s", name, fcl_context_last_error(ctx));
  th_reference ref = th_reference_forward(p);
  /* f16 storage: P and O rounded to half on the matrix-instruction paths */
  const double tol = d->dtype == FCL_DTYPE_F32 ? O_TOL : 8 * th_half_ulp(d->dtype);
  long nan_rows = 0, capped = 0;
  for (size_t b = 0; b < d->batch; ++b)
    for (size_t h = 0; h < d->heads_q; ++h)
      for (size_t i = 0; i < d->seqlen_q; ++i) {
        const size_t at = lse_at(d, b, h, i);
        const double want = ref.lse[at];
        const float lse = run.lse[at];
        const float *o = run.o + q_at(d, b, i, h, 0);
        const double *ro = ref.o + q_at(d, b, i, h, 0);
        if (isnan(want)) {
          ck_assert_msg(isnan(lse), "%s: LSE(%zu,%zu,%zu) = %g, want NaN", name, b, h, i,
                        (double)lse);
          for (size_t c = 0; c < d->head_dim; ++c) ck_assert(isnan(o[c]));
          ++nan_rows;
          continue;
        }
        ck_assert_msg(isinf(want) ? lse == (float)want
                                  : fabs(lse - want) <= tol * (1 + fabs(want)),
                      "%s: LSE(%zu,%zu,%zu) = %.9g, want %.9g", name, b, h, i, (double)lse,
                      want);
        for (size_t c = 0; c < d->head_dim; ++c)
          ck_assert_msg(fabs(o[c] - ro[c]) <= tol, "%s: O(%zu,%zu,%zu)[%zu] = %.9g, want "
                        "%.9g", name, b, h, i, c, (double)o[c], ro[c]);
        /* kv head 0 of batch 0 holds the +inf and the -inf key */
        const size_t hkv = h / (d->heads_q / d->heads_kv);
        capped += b == 0 && hkv == 0 && seen_keys(d, i) > 7;
      }
  ck_assert_int_gt(nan_rows, 0);
  *capped_rows += capped;
  printf("edges: softcap: %s %s: %ld rows with a +inf and a -inf logit finite as the "
         "reference's, %ld NaN rows\n", name, d->dtype == FCL_DTYPE_F32 ? "f32" : "f16",
         capped, nan_rows);
  th_reference_free(&ref);
  th_forward_free(&run);
  return 1;
}

/* With softcap > 0, flash-attn's rule: the cap applies to every logit
 * before the mask, so +inf and -inf logits become +softcap and -softcap
 * (the row stays finite; a -inf key weighs exp(-softcap - max)), a NaN
 * logit stays NaN, and masked keys weigh 0. Every family follows it: the
 * naive algorithm, the SIMT, MMA (emulated where there are no matrix
 * instructions), CPU and decode kernels. */
START_TEST(softcap_caps_infinite_logits_in_every_family) {
  fcl_context *ctx = th_context();
  static const struct {
    size_t seqlen_q;
    int causal;
    fcl_dtype dtype;
    unsigned kernels[4];
  } cases[] = {
      {24, 1, FCL_DTYPE_F32, {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA, FCL_FLASH_KERNEL_CPU}},
      {1, 0, FCL_DTYPE_F32, {FCL_FLASH_KERNEL_DECODE}},
      {24, 1, FCL_DTYPE_F16, {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA, FCL_FLASH_KERNEL_CPU}},
      {1, 0, FCL_DTYPE_F16, {FCL_FLASH_KERNEL_DECODE, FCL_FLASH_KERNEL_DECODE_MMA}},
  };
  long capped = 0;
  int families = 0;
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 2, 4, 2, cases[t].seqlen_q, 20, 16);
    desc.causal = cases[t].causal;
    desc.dtype = cases[t].dtype;
    desc.softcap = 5.0f;
    th_problem p;
    th_problem_init(&p, ctx, &desc, 23, 1.0);
    /* q's column 0 positive, so that +inf and -inf at a key's column 0
     * give every query row of its kv head a +inf and a -inf logit */
    for (size_t i = 0; i < p.q_elems; i += desc.head_dim) p.q[i] = 0.5f + fabsf(p.q[i]);
    p.k[kv_at(&desc, 0, 3, 0, 0)] = INFINITY;
    p.k[kv_at(&desc, 0, 7, 0, 0)] = -INFINITY;
    p.k[kv_at(&desc, 1, 2, 1, 0)] = -INFINITY; /* a -inf logit alone */
    p.k[kv_at(&desc, 1, 9, 0, 2)] = NAN;       /* NaN rows stay NaN */
    reupload(ctx, &p);
    families += check_softcap_family(ctx, &p, FCL_ALGO_NAIVE, 0, &capped);
    for (size_t k = 0; k < 4 && cases[t].kernels[k]; ++k)
      families += check_softcap_family(ctx, &p, FCL_ALGO_FLASH, cases[t].kernels[k], &capped);
    th_problem_free(&p);
  }
  ck_assert_int_ge(families, 9);
  ck_assert_int_gt(capped, 0);
  fcl_context_release(ctx);
}
END_TEST

/* ---- seqlen 1 --------------------------------------------------------------- */

START_TEST(seqlen_one_on_either_side) {
  fcl_context *ctx = th_context();
  const size_t shapes[][3] = {{1, 1, 16}, {1, 37, 64}, {37, 1, 64}, {1, 1, 256}, {1, 300, 8}};
  size_t checked = 0;
  /* naive, flash as planned, flash on the MMA kernel where it takes the
   * head_dim (emulated where the device has no matrix instructions) */
  const fcl_plan planned = {0}, mma = {.kernel = FCL_FLASH_KERNEL_MMA};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
    for (int causal = 0; causal < 2; ++causal)
      for (size_t k = 0; k < 3; ++k) {
        const size_t a = k < 2 ? k : 0;  /* algos[0] is flash */
        if (k == 2 && (shapes[s][2] % 8 || shapes[s][2] > 128)) continue;
        ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, k == 2 ? &mma : &planned),
                         FCL_SUCCESS);
        fcl_attention_desc desc;
        fcl_attention_desc_init(&desc, 2, 2, 1, shapes[s][0], shapes[s][1], shapes[s][2]);
        desc.causal = causal;
        th_problem p;
        th_problem_init(&p, ctx, &desc, 60 + s, 1.0);
        th_reference ref = th_reference_forward(&p);
        th_forward run = th_run_forward(ctx, &p, algos[a], 1);
        char what[160];
        th_describe(&desc, what, sizeof what);
        ck_assert_msg(run.status == FCL_SUCCESS, "%s %s: %s", fcl_algo_name(algos[a]), what,
                      fcl_context_last_error(ctx));
        if (k == 2) ck_assert_uint_eq(run.info.plan.kernel, FCL_FLASH_KERNEL_MMA);
        ck_assert_msg(fclu_max_abs_err(run.o, ref.o, p.q_elems) <= O_TOL, "%s %s: O error %g",
                      fcl_algo_name(algos[a]), what, fclu_max_abs_err(run.o, ref.o, p.q_elems));
        ck_assert_msg(fclu_max_abs_err(run.lse, ref.lse, p.lse_elems) <=
                          LSE_TOL * (1 + fclu_max_abs(ref.lse, p.lse_elems)),
                      "%s %s: LSE error", fcl_algo_name(algos[a]), what);
        if (desc.seqlen_k == 1) {
          /* One key: its weight is exactly 1, so a row that sees it
           * returns v exactly (the MMA kernel within its 3xTF32 split of
           * v, 2^-21 relative); the others (causal) zeros. */
          for (size_t b = 0; b < desc.batch; ++b)
            for (size_t i = 0; i < desc.seqlen_q; ++i)
              for (size_t h = 0; h < desc.heads_q; ++h)
                for (size_t c = 0; c < desc.head_dim; ++c) {
                  float want = seen_keys(&desc, i) ? p.v[kv_at(&desc, b, 0, 0, c)] : 0.0f;
                  const double tol = run.info.plan.kernel == FCL_FLASH_KERNEL_MMA
                                         ? 0x1p-21 * fabs((double)want)
                                         : 0.0;
                  ck_assert_msg(fabs((double)run.o[q_at(&desc, b, i, h, c)] - want) <= tol,
                                "%s %s: O(%zu,%zu,%zu)[%zu] = %.9g, want v = %.9g",
                                fcl_algo_name(algos[a]), what, b, i, h, c,
                                (double)run.o[q_at(&desc, b, i, h, c)], (double)want);
                }
        }
        ++checked;
        th_forward_free(&run);
        th_reference_free(&ref);
        th_problem_free(&p);
      }
  printf("edges: seqlen 1: %zu runs match the reference\n", checked);
  fcl_context_release(ctx);
}
END_TEST

/* ---- head_dim at the planner's limit ---------------------------------------- */

START_TEST(head_dim_256_on_the_smallest_local_memory_that_fits) {
  fcl_context *ctx = th_context();
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 1, 70, 90, FCL_MAX_TILED_HEAD_DIM);
  desc.causal = 1;
  /* The planner on this device, with less and less local memory; its SIMT
   * kernels (a CPU's own take no local memory). */
  fcl_device_limits lim = info.limits;
  const fcl_plan simt = {.kernel = FCL_FLASH_KERNEL_SIMT};
  uint64_t lo = 0, hi = 1u << 20;  /* fits at hi, not at lo */
  fcl_plan plan;
  lim.local_mem_bytes = hi;
  ck_assert_int_eq(fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_FORWARD, &simt, &plan, NULL, 0),
                   FCL_SUCCESS);
  while (hi - lo > 1) {
    lim.local_mem_bytes = (lo + hi) / 2;
    if (fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_FORWARD, &simt, &plan, NULL, 0) == FCL_SUCCESS)
      hi = lim.local_mem_bytes;
    else
      lo = lim.local_mem_bytes;
  }
  char why[256];
  lim.local_mem_bytes = lo;
  ck_assert_int_eq(fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_FORWARD, &simt, &plan, why,
                                         sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "local memory"), "%s", why);
  lim.local_mem_bytes = hi;
  ck_assert_int_eq(fcl_plan_flash_hinted(&lim, &desc, FCL_PASS_FORWARD, &simt, &plan, why,
                                         sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_le(plan.local_bytes, hi);
  ck_assert_uint_eq(plan.block_k, 4);  /* the smallest tile */
  printf("edges: head_dim 256 needs %llu bytes of local memory at least (block_k %u, "
         "wg %u, %u threads per row, %zu bytes of tiles)\n",
         (unsigned long long)hi, plan.block_k, plan.wg_size, plan.threads_per_row,
         plan.local_bytes);

  /* That tiling, run on the device, is exact; and so is the naive one. */
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &plan), FCL_SUCCESS);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 70, 1.0);
  th_reference ref = th_reference_forward(&p);
  for (size_t a = 0; a < 2; ++a) {
    th_forward run = th_run_forward(ctx, &p, algos[a], 1);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    if (algos[a] == FCL_ALGO_FLASH) {
      ck_assert_uint_eq(run.info.plan.block_k, plan.block_k);
      ck_assert_uint_eq(run.info.plan.local_bytes, plan.local_bytes);
    }
    ck_assert_msg(fclu_max_abs_err(run.o, ref.o, p.q_elems) <= O_TOL, "%s: O error %g",
                  fcl_algo_name(algos[a]), fclu_max_abs_err(run.o, ref.o, p.q_elems));
    ck_assert(fclu_max_abs_err(run.lse, ref.lse, p.lse_elems) <=
              LSE_TOL * (1 + fclu_max_abs(ref.lse, p.lse_elems)));
    th_forward_free(&run);
  }
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* The largest scale a descriptor may hold, FCL_MAX_SCALE, with q and k
 * small enough for logits of tens: forward and backward of both
 * algorithms within the suites' rules of the float64 reference (2x the
 * naive algorithm's error forward, 3x backward, + 1e-6 of the largest
 * reference value). dO is small, so that the naive algorithm's dS =
 * scale P (dP - D) stays finite. The next float up is refused by every
 * function that takes a descriptor, and nothing is written. Before the
 * limit, scale = 2.4e38 made scale * log2(e) overflow and the flash O
 * and LSE NaN with FCL_SUCCESS. */
START_TEST(the_largest_scale_is_exact_and_the_next_is_refused) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 1, 19, 23, 16);
  desc.causal = 1;
  desc.scale = FCL_MAX_SCALE;
  /* logits scale * q.k with std about 30 */
  const double sigma = sqrt(30.0 / ((double)FCL_MAX_SCALE * sqrt((double)desc.head_dim)));
  th_problem p;
  th_problem_init(&p, ctx, &desc, 90, sigma);
  th_reference ref = th_reference_forward(&p);
  double err[2], ref_max = fclu_max_abs(ref.o, p.q_elems);
  for (int a = 0; a < 2; ++a) {
    th_forward run = th_run_forward(ctx, &p, algos[a], 1);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s: %s", fcl_algo_name(algos[a]),
                  fcl_context_last_error(ctx));
    err[a] = fmax(fclu_max_abs_err(run.o, ref.o, p.q_elems),
                  fclu_max_abs_err(run.lse, ref.lse, p.lse_elems));
    th_forward_free(&run);
  }
  ck_assert_msg(err[0] <= 2 * err[1] + 1e-6 * ref_max, "forward at FCL_MAX_SCALE: flash %g, naive %g",
                err[0], err[1]);

  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 91);
  for (size_t i = 0; i < p.q_elems; ++i) g.dout[i] *= 1e-3f;
  ck_assert_int_eq(clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), g.d_dout, CL_TRUE, 0,
                                        p.q_elems * sizeof(float), g.dout, 0, NULL, NULL),
                   CL_SUCCESS);
  th_grad_reference gref = th_reference_backward(&p, &g);
  double gerr[2][3];
  for (int a = 0; a < 2; ++a) {
    th_backward run = th_run_backward(ctx, &p, &g, algos[a]);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s backward: %s", fcl_algo_name(algos[a]),
                  fcl_context_last_error(ctx));
    gerr[a][0] = fclu_max_abs_err(run.dq, gref.dq, p.q_elems);
    gerr[a][1] = fclu_max_abs_err(run.dk, gref.dk, p.kv_elems);
    gerr[a][2] = fclu_max_abs_err(run.dv, gref.dv, p.kv_elems);
    th_backward_free(&run);
  }
  const double *grefs[3] = {gref.dq, gref.dk, gref.dv};
  const size_t lens[3] = {p.q_elems, p.kv_elems, p.kv_elems};
  for (int i = 0; i < 3; ++i)
    ck_assert_msg(gerr[0][i] <= 3 * gerr[1][i] + 1e-6 * fclu_max_abs(grefs[i], lens[i]),
                  "gradient %d at FCL_MAX_SCALE: flash %g, naive %g", i, gerr[0][i], gerr[1][i]);

  /* The next float up: refused everywhere, outputs untouched. */
  fcl_attention_desc over = desc;
  over.scale = nextafterf(FCL_MAX_SCALE, INFINITY);
  fcl_buffer_sizes sizes;
  char why[256];
  ck_assert_int_eq(fcl_attention_buffer_sizes(&over, &sizes, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(why, "FCL_MAX_SCALE"));
  fcl_device_info info;
  fcl_context_device(ctx, &info);
  fcl_plan plan;
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &over, FCL_PASS_FORWARD, &plan, NULL, 0),
                   FCL_ERROR_INVALID_ARGUMENT);
  th_problem p_over = p;
  p_over.desc = over;
  for (int a = 0; a < 2; ++a) {
    th_forward run = th_run_forward(ctx, &p_over, algos[a], 1);
    ck_assert_int_eq(run.status, FCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(fcl_context_last_error(ctx), "FCL_MAX_SCALE"));
    for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(run.o[i]));
    th_forward_free(&run);
    th_backward bwd = th_run_backward(ctx, &p_over, &g, algos[a]);
    ck_assert_int_eq(bwd.status, FCL_ERROR_INVALID_ARGUMENT);
    for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(bwd.dq[i]));
    th_backward_free(&bwd);
  }
  printf("edges: scale = FCL_MAX_SCALE: forward error flash %.3g, naive %.3g; dQ %.3g / %.3g, "
         "dK %.3g / %.3g, dV %.3g / %.3g; the next float refused\n",
         err[0], err[1], gerr[0][0], gerr[1][0], gerr[0][1], gerr[1][1], gerr[0][2], gerr[1][2]);
  th_grad_reference_free(&gref);
  th_grad_inputs_free(&g);
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("edges");
  TCase *tc = th_tcase("numerics");
  tcase_add_test(tc, logits_of_1e4_stay_within_the_rounding_bound);
  tcase_add_test(tc, nonfinite_inputs_behave_as_documented);
  tcase_add_test(tc, seqlen_one_on_either_side);
  tcase_add_test(tc, head_dim_256_on_the_smallest_local_memory_that_fits);
  tcase_add_test(tc, the_largest_scale_is_exact_and_the_next_is_refused);
  TCase *capped = th_tcase("softcap");
  tcase_add_test(capped, softcap_caps_infinite_logits_in_every_family);
  suite_add_tcase(s, capped);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
