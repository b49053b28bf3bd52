/*
 * test_merge.c — fcl_merge_states against a float64 merge on random
 * states: 1 to 64 parts, empty parts (LSE -inf, their O NaN, which must
 * not leak) and rows whose parts are all empty, every storage type,
 * head_dim from 1 to 256, strided views and parts with gaps between them
 * (elements outside the views stay untouched); the merge of attention over
 * two halves of the keys against attention over all of them; NaN and +inf
 * LSEs; counted bytes against the I/O model; reruns bit for bit; bad
 * descriptors and buffers refused with nothing written; and the layout's
 * rows, which the kernel checks.
 */
#include "harness.h"
#include "program.h"
#include "merge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const fcl_dtype dtypes[3] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};

static float *host_floats(size_t n) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  return x;
}

/* Element (b, t, h, c) of a resolved view. */
static size_t at(const fcl_tensor_layout *l, size_t b, size_t t, size_t h, size_t c) {
  return l->offset + b * l->batch_stride + t * l->seq_stride + h * l->head_stride + c;
}

/* One merge problem: the parts' O in the byte image of their buffer
 * (NaN wherever no view reaches), their LSEs, on the host and the device. */
typedef struct mproblem {
  fcl_merge_desc desc;
  fcl__merge_shape sh;
  size_t o_parts_elems, o_elems;
  float *o_parts, *lse_parts;
  cl_mem d_o_parts, d_lse_parts;
} mproblem;

/* Fills a problem: LSEs uniform in [-lse_range, lse_range], a part empty
 * (-inf, with a NaN O) with probability `empty`, and the rows of token 0,
 * head 0 of batch entry 0 empty in every part. */
static void mproblem_init(mproblem *p, fcl_context *ctx, const fcl_merge_desc *desc,
                          uint64_t seed, double lse_range, double empty) {
  memset(p, 0, sizeof *p);
  p->desc = *desc;
  char why[256];
  ck_assert_msg(fcl__check_merge_why(desc, &p->sh, why, sizeof why) == FCL_SUCCESS, "%s", why);
  const fcl__merge_shape *sh = &p->sh;
  p->o_parts_elems = sh->sizes.o_parts / sh->elem_size;
  p->o_elems = sh->sizes.o / sh->elem_size;
  p->o_parts = host_floats(p->o_parts_elems);
  p->lse_parts = host_floats(sh->sizes.lse_parts / sizeof(float));
  for (size_t i = 0; i < p->o_parts_elems; ++i) p->o_parts[i] = NAN;
  for (size_t i = 0; i < sh->sizes.lse_parts / sizeof(float); ++i) p->lse_parts[i] = NAN;
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed);
  const fcl_merge_desc *d = &sh->desc;
  for (size_t part = 0; part < d->parts; ++part)
    for (size_t b = 0; b < d->batch; ++b)
      for (size_t t = 0; t < d->seqlen; ++t)
        for (size_t h = 0; h < d->heads; ++h) {
          const int blank = (b == 0 && t == 0 && h == 0) || fclu_uniform(&rng) < empty;
          const size_t l = part * sh->lse_part_stride + (b * d->heads + h) * d->seqlen + t;
          p->lse_parts[l] = blank ? -INFINITY
                                  : (float)((2.0 * fclu_uniform(&rng) - 1.0) * lse_range);
          for (size_t c = 0; c < d->head_dim; ++c) {
            float x;
            fclu_fill_normal(&rng, &x, 1, 1.0, d->dtype);
            p->o_parts[part * sh->o_part_stride + at(&sh->o_parts, b, t, h, c)] =
                blank ? NAN : x;
          }
        }
  p->d_o_parts = fclu_upload(ctx, p->o_parts, p->o_parts_elems, d->dtype);
  p->d_lse_parts = fclu_upload(ctx, p->lse_parts, sh->sizes.lse_parts / sizeof(float),
                               FCL_DTYPE_F32);
  ck_assert_ptr_nonnull(p->d_o_parts);
  ck_assert_ptr_nonnull(p->d_lse_parts);
}

static void mproblem_free(mproblem *p) {
  free(p->o_parts);
  free(p->lse_parts);
  clReleaseMemObject(p->d_o_parts);
  clReleaseMemObject(p->d_lse_parts);
}

/* The float64 merge, O in the output view's image (NaN elsewhere) and LSE
 * packed. */
static void reference_merge(const mproblem *p, double *o, double *lse) {
  const fcl__merge_shape *sh = &p->sh;
  const fcl_merge_desc *d = &sh->desc;
  for (size_t i = 0; i < p->o_elems; ++i) o[i] = NAN;
  for (size_t b = 0; b < d->batch; ++b)
    for (size_t t = 0; t < d->seqlen; ++t)
      for (size_t h = 0; h < d->heads; ++h) {
        const size_t row_lse = (b * d->heads + h) * d->seqlen + t;
        double m = -INFINITY;
        int bad = 0;
        for (size_t part = 0; part < d->parts; ++part) {
          const double l = p->lse_parts[part * sh->lse_part_stride + row_lse];
          bad |= isnan(l) || l == INFINITY;
          if (l > m) m = l;
        }
        double sum = 0.0;
        for (size_t c = 0; c < d->head_dim; ++c) o[at(&sh->o, b, t, h, c)] = 0.0;
        for (size_t part = 0; part < d->parts && !bad; ++part) {
          const double l = p->lse_parts[part * sh->lse_part_stride + row_lse];
          if (l == -INFINITY) continue;
          const double w = exp(l - m);
          sum += w;
          for (size_t c = 0; c < d->head_dim; ++c)
            o[at(&sh->o, b, t, h, c)] +=
                w * p->o_parts[part * sh->o_part_stride + at(&sh->o_parts, b, t, h, c)];
        }
        for (size_t c = 0; c < d->head_dim; ++c) {
          double *x = &o[at(&sh->o, b, t, h, c)];
          *x = bad ? NAN : sum > 0.0 ? *x / sum : 0.0;
        }
        lse[row_lse] = bad ? NAN : sum > 0.0 ? m + log(sum) : -INFINITY;
      }
}

/* A merge run with poisoned outputs, downloaded. */
typedef struct mrun {
  fcl_status status;
  fcl_run_info info;
  float *o, *lse;
} mrun;

static mrun run_merge(fcl_context *ctx, const mproblem *p, int with_lse) {
  const fcl__merge_shape *sh = &p->sh;
  mrun r = {.o = host_floats(p->o_elems), .lse = host_floats(sh->lse_per_part)};
  cl_mem o = fclu_poisoned_buffer(ctx, sh->sizes.o);
  cl_mem lse = with_lse ? fclu_poisoned_buffer(ctx, sh->sizes.lse) : NULL;
  ck_assert_ptr_nonnull(o);
  r.status = fcl_merge_states(ctx, &p->desc, p->d_o_parts, p->d_lse_parts, o, lse, &r.info);
  ck_assert_int_eq(fclu_download(ctx, o, r.o, p->o_elems, sh->desc.dtype), 0);
  if (lse) ck_assert_int_eq(fclu_download(ctx, lse, r.lse, sh->lse_per_part, FCL_DTYPE_F32), 0);
  clReleaseMemObject(o);
  if (lse) clReleaseMemObject(lse);
  return r;
}

static void mrun_free(mrun *r) {
  free(r->o);
  free(r->lse);
}

/* Compares a run with the float64 merge: O within `parts + 8` float
 * roundings of its largest part value plus the storage type's rounding of
 * the result, LSE within as many of its size; NaN where (and only where)
 * the reference has it, so elements outside the view are untouched. */
static void check_run(const mproblem *p, const mrun *r, int with_lse, const char *what) {
  const fcl__merge_shape *sh = &p->sh;
  double *o = malloc(p->o_elems * sizeof *o), *lse = malloc(sh->lse_per_part * sizeof *lse);
  ck_assert_ptr_nonnull(o);
  ck_assert_ptr_nonnull(lse);
  reference_merge(p, o, lse);
  const double eps = ldexp(1.0, -23) * (double)(sh->desc.parts + 8);
  const double store = sh->desc.dtype == FCL_DTYPE_F32   ? 0.0
                       : sh->desc.dtype == FCL_DTYPE_F16 ? ldexp(1.0, -11)
                                                         : ldexp(1.0, -8);
  double o_max = 0.0;
  for (size_t i = 0; i < p->o_parts_elems; ++i)
    if (isfinite(p->o_parts[i]) && fabs(p->o_parts[i]) > o_max) o_max = fabs(p->o_parts[i]);
  for (size_t i = 0; i < p->o_elems; ++i) {
    if (isnan(o[i])) {
      ck_assert_msg(isnan(r->o[i]), "%s: O element %zu is %g; the reference is NaN", what, i,
                    (double)r->o[i]);
      continue;
    }
    const double tol = eps * o_max + store * fabs(o[i]);
    ck_assert_msg(fabs(r->o[i] - o[i]) <= tol, "%s: O element %zu is %.9g, reference %.9g (tol %g)",
                  what, i, (double)r->o[i], o[i], tol);
  }
  for (size_t i = 0; with_lse && i < sh->lse_per_part; ++i) {
    if (isnan(lse[i]) || isinf(lse[i])) {
      ck_assert_msg(isnan(lse[i]) ? isnan(r->lse[i]) : r->lse[i] == (float)lse[i],
                    "%s: LSE %zu is %g, reference %g", what, i, (double)r->lse[i], lse[i]);
      continue;
    }
    ck_assert_msg(fabs(r->lse[i] - lse[i]) <= eps * (fabs(lse[i]) + 1.0),
                  "%s: LSE %zu is %.9g, reference %.9g", what, i, (double)r->lse[i], lse[i]);
  }
  free(o);
  free(lse);
}

/* ---- results ---------------------------------------------------------------- */

typedef struct mcase {
  size_t parts, batch, seqlen, heads, head_dim;
  double empty;
} mcase;

static const mcase cases[] = {
    {1, 2, 3, 2, 64, 0.2},  {2, 1, 5, 3, 128, 0.3}, {7, 2, 4, 2, 1, 0.3},
    {64, 1, 3, 2, 96, 0.5}, {33, 1, 2, 1, 256, 0.1}, {5, 3, 7, 1, 5, 0.0},
    {3, 1, 1, 4, 16, 0.9},  {150, 1, 2, 2, 8, 0.4},  // lane groups over two chunks of parts
    {9, 1, 2, 3, 512, 0.2}, {4, 2, 1, 2, 500, 0.1},  // DeepSeek's value width: a work-group a row
};
#define N_CASES (sizeof cases / sizeof cases[0])

START_TEST(merge_matches_reference) {
  fcl_context *ctx = th_context();
  for (size_t di = 0; di < 3; ++di)
    for (size_t i = 0; i < N_CASES; ++i) {
      const mcase *c = &cases[i];
      fcl_merge_desc desc;
      fcl_merge_desc_init(&desc, c->parts, c->batch, c->seqlen, c->heads, c->head_dim);
      desc.dtype = dtypes[di];
      mproblem p;
      mproblem_init(&p, ctx, &desc, 100 * i + di, 20.0, c->empty);
      char what[128];
      snprintf(what, sizeof what, "%s, %zu parts, B %zu N %zu H %zu d %zu",
               fcl_dtype_name(desc.dtype), c->parts, c->batch, c->seqlen, c->heads, c->head_dim);
      for (int with_lse = 0; with_lse < 2; ++with_lse) {
        mrun r = run_merge(ctx, &p, with_lse);
        ck_assert_msg(r.status == FCL_SUCCESS, "%s: %s (%s)", what, fcl_status_str(r.status),
                      fcl_context_last_error(ctx));
        check_run(&p, &r, with_lse, what);
        mrun_free(&r);
      }
      mproblem_free(&p);
    }
  fcl_context_release(ctx);
}
END_TEST

/* Parts in [B, H, N, d] views with gaps between them, the output in a
 * strided view of its own; head_dim not a multiple of 4 takes the scalar
 * path. Elements of the output buffer outside its view stay NaN. */
START_TEST(merge_takes_views) {
  fcl_context *ctx = th_context();
  const size_t dims[2] = {12, 7};
  for (size_t di = 0; di < 3; ++di)
    for (int k = 0; k < 2; ++k) {
      const size_t parts = 5, batch = 2, seqlen = 6, heads = 3, d = dims[k];
      fcl_merge_desc desc;
      fcl_merge_desc_init(&desc, parts, batch, seqlen, heads, d);
      desc.dtype = dtypes[di];
      desc.o_parts = (fcl_tensor_layout){.offset = 4, .batch_stride = heads * seqlen * d,
                                         .seq_stride = d, .head_stride = seqlen * d};
      desc.o_part_stride = batch * heads * seqlen * d + 8;
      desc.lse_part_stride = batch * heads * seqlen + 3;
      desc.o = (fcl_tensor_layout){.offset = 8, .batch_stride = seqlen * heads * (d + 4),
                                   .seq_stride = heads * (d + 4), .head_stride = d + 4};
      mproblem p;
      mproblem_init(&p, ctx, &desc, 7 + di, 5.0, 0.25);
      mrun r = run_merge(ctx, &p, 1);
      ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
      check_run(&p, &r, 1, k ? "views, head_dim 7" : "views, head_dim 12");
      mrun_free(&r);
      mproblem_free(&p);
    }
  fcl_context_release(ctx);
}
END_TEST

/* Attention over the keys [0, split) and [split, nk), merged, is attention
 * over all of them: the first half as a view of K and V that stops early,
 * the second one that starts at `split`, both writing one buffer of parts. */
START_TEST(merge_of_split_attention_is_whole) {
  fcl_context *ctx = th_context();
  for (size_t di = 0; di < 3; ++di) {
    const size_t b = 2, hq = 4, hkv = 2, nq = 9, nk = 70, d = 32, split = 23;
    fcl_attention_desc full;
    fcl_attention_desc_init(&full, b, hq, hkv, nq, nk, d);
    full.dtype = dtypes[di];
    th_problem prob;
    th_problem_init(&prob, ctx, &full, 31 + di, 1.0);
    const size_t q_elems = b * nq * hq * d, lse_elems = b * hq * nq;
    cl_mem o_parts = fclu_poisoned_buffer(ctx, 2 * q_elems * fcl_dtype_size(full.dtype));
    cl_mem lse_parts = fclu_poisoned_buffer(ctx, 2 * lse_elems * sizeof(float));
    cl_mem lse_tmp = fclu_poisoned_buffer(ctx, lse_elems * sizeof(float));
    ck_assert_ptr_nonnull(o_parts);
    for (int half = 0; half < 2; ++half) {
      fcl_attention_desc desc = full;
      desc.seqlen_k = half ? nk - split : split;
      const fcl_tensor_layout kv = {.offset = half ? split * hkv * d : 0,
                                    .batch_stride = nk * hkv * d,
                                    .seq_stride = hkv * d,
                                    .head_stride = d};
      desc.k = desc.v = kv;
      desc.o.offset = half * q_elems;
      ck_assert_int_eq(fcl_attention_forward(ctx, &desc, FCL_ALGO_FLASH, prob.dq, prob.dk,
                                             prob.dv, o_parts, lse_tmp, NULL),
                       FCL_SUCCESS);
      ck_assert_int_eq(clEnqueueCopyBuffer(fcl_context_cl_queue(ctx), lse_tmp, lse_parts, 0,
                                           half * lse_elems * sizeof(float),
                                           lse_elems * sizeof(float), 0, NULL, NULL),
                       CL_SUCCESS);
    }
    fcl_merge_desc m;
    fcl_merge_desc_init(&m, 2, b, nq, hq, d);
    m.dtype = full.dtype;
    cl_mem o = fclu_poisoned_buffer(ctx, q_elems * fcl_dtype_size(full.dtype));
    cl_mem lse = fclu_poisoned_buffer(ctx, lse_elems * sizeof(float));
    ck_assert_int_eq(fcl_merge_states(ctx, &m, o_parts, lse_parts, o, lse, NULL), FCL_SUCCESS);
    float *got = host_floats(q_elems), *got_lse = host_floats(lse_elems);
    ck_assert_int_eq(fclu_download(ctx, o, got, q_elems, full.dtype), 0);
    ck_assert_int_eq(fclu_download(ctx, lse, got_lse, lse_elems, FCL_DTYPE_F32), 0);
    th_reference ref = th_reference_forward(&prob);
    /* Two attentions' roundings, a merge's, and the stored result's. */
    const double tol = full.dtype == FCL_DTYPE_F32 ? 2e-5 : full.dtype == FCL_DTYPE_F16 ? 4e-3 : 3e-2;
    const double err = fclu_max_abs_err(got, ref.o, q_elems);
    ck_assert_msg(err <= tol, "%s: merged halves differ from attention over all keys by %g",
                  fcl_dtype_name(full.dtype), err);
    ck_assert_msg(fclu_max_abs_err(got_lse, ref.lse, lse_elems) <= 2e-5 * (1 + nk),
                  "%s: merged LSE off by %g", fcl_dtype_name(full.dtype),
                  fclu_max_abs_err(got_lse, ref.lse, lse_elems));
    th_reference_free(&ref);
    free(got);
    free(got_lse);
    clReleaseMemObject(o);
    clReleaseMemObject(lse);
    clReleaseMemObject(o_parts);
    clReleaseMemObject(lse_parts);
    clReleaseMemObject(lse_tmp);
    th_problem_free(&prob);
  }
  fcl_context_release(ctx);
}
END_TEST

/* NaN and +inf LSEs make their rows NaN, and only those. */
START_TEST(merge_propagates_nan_and_inf) {
  fcl_context *ctx = th_context();
  fcl_merge_desc desc;
  fcl_merge_desc_init(&desc, 3, 1, 4, 2, 8);
  mproblem p;
  mproblem_init(&p, ctx, &desc, 5, 3.0, 0.0);
  p.lse_parts[1 * p.sh.lse_part_stride + 3] = NAN;  /* head 0, token 3 */
  p.lse_parts[2 * p.sh.lse_part_stride + 4 + 1] = INFINITY;  /* head 1, token 1 */
  ck_assert_int_eq(clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), p.d_lse_parts, CL_TRUE, 0,
                                        p.sh.sizes.lse_parts, p.lse_parts, 0, NULL, NULL),
                   CL_SUCCESS);
  mrun r = run_merge(ctx, &p, 1);
  ck_assert_int_eq(r.status, FCL_SUCCESS);
  check_run(&p, &r, 1, "NaN and +inf LSEs");
  ck_assert(isnan(r.lse[3]) && isnan(r.lse[5]) && isfinite(r.lse[2]));
  mrun_free(&r);
  mproblem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(merge_counts_its_bytes_and_reruns_bit_for_bit) {
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  const size_t dims[2] = {64, 5};
  for (size_t di = 0; di < 3; ++di)
    for (int k = 0; k < 2; ++k) {
      fcl_merge_desc desc;
      fcl_merge_desc_init(&desc, 9, 2, 3, 2, dims[k]);
      desc.dtype = dtypes[di];
      mproblem p;
      mproblem_init(&p, ctx, &desc, 77, 8.0, 0.2);
      for (int with_lse = 0; with_lse < 2; ++with_lse) {
        mrun a = run_merge(ctx, &p, with_lse), b = run_merge(ctx, &p, with_lse);
        ck_assert_int_eq(a.status, FCL_SUCCESS);
        ck_assert_int_eq(b.status, FCL_SUCCESS);
        if (count)
          ck_assert_msg(a.info.bytes_counted == a.info.bytes_model,
                        "%s d %zu: counted %llu bytes, the model says %llu",
                        fcl_dtype_name(desc.dtype), dims[k],
                        (unsigned long long)a.info.bytes_counted,
                        (unsigned long long)a.info.bytes_model);
        ck_assert(memcmp(a.o, b.o, p.o_elems * sizeof *a.o) == 0);
        if (with_lse) ck_assert(memcmp(a.lse, b.lse, p.sh.lse_per_part * sizeof *a.lse) == 0);
        mrun_free(&a);
        mrun_free(&b);
      }
      mproblem_free(&p);
    }
  fcl_context_release(ctx);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------ */

/* A refused merge: its status, a message containing `needle`, and outputs
 * that stay poisoned. */
static void expect_refused(fcl_context *ctx, const fcl_merge_desc *desc, cl_mem o_parts,
                           cl_mem lse_parts, cl_mem o, cl_mem lse, fcl_status want,
                           const char *needle) {
  const fcl_status got = fcl_merge_states(ctx, desc, o_parts, lse_parts, o, lse, NULL);
  ck_assert_msg(got == want, "wanted %s (%s), got %s: %s", fcl_status_str(want), needle,
                fcl_status_str(got), fcl_context_last_error(ctx));
  ck_assert_msg(strstr(fcl_context_last_error(ctx), needle), "message '%s' lacks '%s'",
                fcl_context_last_error(ctx), needle);
  float x[16];
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), o, CL_TRUE, 0, sizeof x, x, 0,
                                       NULL, NULL),
                   CL_SUCCESS);
  for (int i = 0; i < 16; ++i) ck_assert_msg(isnan(x[i]), "output written by a refused merge");
}

START_TEST(merge_refuses_bad_input) {
  fcl_context *ctx = th_context();
  fcl_merge_desc good;
  fcl_merge_desc_init(&good, 3, 1, 4, 2, 8);
  mproblem p;
  mproblem_init(&p, ctx, &good, 1, 2.0, 0.0);
  const fcl_merge_sizes *sz = &p.sh.sizes;
  cl_mem o = fclu_poisoned_buffer(ctx, sz->o), lse = fclu_poisoned_buffer(ctx, sz->lse);
  cl_mem small = fclu_poisoned_buffer(ctx, sz->o - 4);
  fcl_merge_desc d = good;

  ck_assert_int_eq(fcl_merge_states(NULL, &good, p.d_o_parts, p.d_lse_parts, o, lse, NULL),
                   FCL_ERROR_INVALID_ARGUMENT);
  expect_refused(ctx, NULL, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_ARGUMENT,
                 "desc is NULL");
  d.struct_size = 0;
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_ARGUMENT,
                 "fcl_merge_desc_init");
  d = good;
  d.parts = 0;
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_SHAPE,
                 "parts is 0");
  d = good;
  d.head_dim = FCL_MAX_HEAD_DIM + 1;
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_UNSUPPORTED,
                 "FCL_MAX_HEAD_DIM");
  d = good;
  d.dtype = (fcl_dtype)7;
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_ARGUMENT,
                 "dtype");
  d = good;
  d.o_part_stride = 8;
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_ARGUMENT,
                 "overlap");
  d = good;
  d.lse_part_stride = 2;
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_SHAPE,
                 "lse_part_stride");
  d = good;
  d.o = (fcl_tensor_layout){.batch_stride = 1, .seq_stride = 1, .head_stride = 1};
  expect_refused(ctx, &d, p.d_o_parts, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_ARGUMENT,
                 "overlap");
  expect_refused(ctx, &good, p.d_o_parts, p.d_lse_parts, small, lse,
                 FCL_ERROR_BUFFER_TOO_SMALL, "buffer o holds");
  expect_refused(ctx, &good, NULL, p.d_lse_parts, o, lse, FCL_ERROR_INVALID_ARGUMENT,
                 "o_parts is NULL");
  expect_refused(ctx, &good, p.d_o_parts, p.d_lse_parts, o, p.d_lse_parts,
                 FCL_ERROR_INVALID_ARGUMENT, "output lse is the same buffer as lse_parts");
  fcl_merge_sizes sizes;
  char why[256];
  ck_assert_int_eq(fcl_merge_buffer_sizes(&good, &sizes, why, sizeof why), FCL_SUCCESS);
  ck_assert_int_eq(sizes.o_parts, 3 * 4 * 2 * 8 * sizeof(float));
  ck_assert_int_eq(sizes.lse_parts, 3 * 8 * sizeof(float));
  ck_assert_int_eq(fcl_merge_buffer_sizes(&good, NULL, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  clReleaseMemObject(small);
  mproblem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* The merge's layout on every profile and on the test device: whole rows
 * of whole lane groups fill the work-group; and the kernel itself refuses
 * a row count that does not (the host gives ROWS, the kernel checks it). */
static void check_layouts(const fcl_device_limits *limits, const char *name) {
  const size_t head_dims[] = {1, 16, 17, 64, 100, 128, 256};
  const size_t parts[] = {1, 2, 8, 9, 33, 64, 65, 512};
  for (size_t i = 0; i < sizeof head_dims / sizeof *head_dims; ++i)
    for (size_t j = 0; j < sizeof parts / sizeof *parts; ++j) {
      const fcl__merge_layout l = fcl__merge_layout_of(limits, head_dims[i], parts[j]);
      ck_assert_msg(l.rows >= 1 && l.head_dim_max >= head_dims[i] && l.part_groups >= 1 &&
                        (l.part_groups & (l.part_groups - 1)) == 0 &&
                        l.rows * (l.head_dim_max / 4) * l.part_groups == l.wg_size &&
                        l.wg_size <= limits->max_work_group_size,
                    "%s, head_dim %zu, %zu parts: %u rows of %u lanes x %u groups in %u",
                    name, head_dims[i], parts[j], l.rows, l.head_dim_max / 4, l.part_groups,
                    l.wg_size);
    }
}

START_TEST(merge_layout_fills_its_work_group) {
  size_t n = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  for (size_t i = 0; i < n; ++i) check_layouts(&profiles[i].info.limits, profiles[i].key);
  fcl_context *ctx = th_context();
  check_layouts(&ctx->info.limits, ctx->info.name);
  fcl__merge_layout l = fcl__merge_layout_of(&ctx->info.limits, 64, 33);
  l.rows += 1;
  fcl__options opts;
  fcl__merge_options(&l, FCL_DTYPE_F32, NULL, &opts);
  cl_kernel kernel = NULL;
  ck_assert_int_eq(fcl__kernel(ctx, FCL_SRC_MERGE, &opts, "merge_states", &kernel),
                   FCL_ERROR_BUILD_FAILED);
  ck_assert_ptr_null(kernel);
  ck_assert_ptr_nonnull(strstr(fcl_context_last_error(ctx), "ROWS rows"));
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("merge");
  TCase *tc = th_tcase("merge");
  tcase_add_test(tc, merge_matches_reference);
  tcase_add_test(tc, merge_takes_views);
  tcase_add_test(tc, merge_of_split_attention_is_whole);
  tcase_add_test(tc, merge_propagates_nan_and_inf);
  tcase_add_test(tc, merge_counts_its_bytes_and_reruns_bit_for_bit);
  tcase_add_test(tc, merge_refuses_bad_input);
  tcase_add_test(tc, merge_layout_fills_its_work_group);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
