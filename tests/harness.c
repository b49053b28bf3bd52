/*
 * harness.c — see harness.h.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int th_count_io(fcl_context *ctx) {
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  if (info.limits.has_int64_atomics)
    ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
  return info.limits.has_int64_atomics;
}

uint64_t th_seed(void) {
  static uint64_t seed;
  static int chosen;
  if (!chosen) {
    const char *env = getenv("FLASHCL_TEST_SEED");
    if (env && *env) {
      seed = strtoull(env, NULL, 0);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    chosen = 1;
    printf("random seed %llu (FLASHCL_TEST_SEED=%llu reproduces this run)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
  }
  return seed;
}

double th_half_ulp(fcl_dtype t) {
  return t == FCL_DTYPE_F32 ? 0.0 : t == FCL_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
}

double th_err_floor(fcl_dtype t, const double *ref, size_t n) {
  if (t == FCL_DTYPE_F32) return 1e-6;
  return th_half_ulp(t) * fclu_max_abs(ref, n) + 1e-6;
}

int th_reruns(int fallback) {
  const char *env = getenv("FLASHCL_TEST_RERUNS");
  const long n = env && *env ? strtol(env, NULL, 10) : 0;
  return n > 0 && n < 1000000 ? (int)n : fallback;
}

fcl_context *th_context(void) {
  const char *selector = getenv("FLASHCL_TEST_DEVICE");
  fcl_context *ctx = NULL;
  fcl_status status = fcl_context_create(selector, &ctx);
  ck_assert_msg(status == FCL_SUCCESS, "no test device (%s): %s", fcl_status_str(status),
                fcl_context_last_error(ctx));
  /* the suites test the rules' plans (a shipped database would change them
   * on its device); test_tuning switches tuned plans back on */
  ck_assert_int_eq(fcl_context_use_tuned_plans(ctx, 0), FCL_SUCCESS);
  return ctx;
}

static float *host_alloc(size_t n) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  return x;
}

void th_problem_init(th_problem *p, fcl_context *ctx, const fcl_attention_desc *desc,
                     uint64_t seed, double sigma) {
  memset(p, 0, sizeof *p);
  p->desc = *desc;
  p->q_elems = desc->batch * desc->seqlen_q * desc->heads_q * desc->head_dim;
  p->kv_elems = desc->batch * desc->seqlen_k * desc->heads_kv * desc->head_dim;
  p->lse_elems = desc->batch * desc->heads_q * desc->seqlen_q;
  p->q = host_alloc(p->q_elems);
  p->k = host_alloc(p->kv_elems);
  p->v = host_alloc(p->kv_elems);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed);
  fclu_fill_normal(&rng, p->q, p->q_elems, sigma, desc->dtype);
  fclu_fill_normal(&rng, p->k, p->kv_elems, sigma, desc->dtype);
  fclu_fill_normal(&rng, p->v, p->kv_elems, 1.0, desc->dtype);
  p->dq = fclu_upload(ctx, p->q, p->q_elems, desc->dtype);
  p->dk = fclu_upload(ctx, p->k, p->kv_elems, desc->dtype);
  p->dv = fclu_upload(ctx, p->v, p->kv_elems, desc->dtype);
  ck_assert(p->dq && p->dk && p->dv);
}

void th_problem_upload(th_problem *p, fcl_context *ctx) {
  const size_t es = fcl_dtype_size(p->desc.dtype);
  const struct {
    cl_mem mem;
    const float *host;
    size_t n;
  } parts[] = {{p->dq, p->q, p->q_elems}, {p->dk, p->k, p->kv_elems}, {p->dv, p->v, p->kv_elems}};
  for (int i = 0; i < 3; ++i) {
    cl_mem fresh = fclu_upload(ctx, parts[i].host, parts[i].n, p->desc.dtype);
    ck_assert_ptr_nonnull(fresh);
    cl_int err = clEnqueueCopyBuffer(fcl_context_cl_queue(ctx), fresh, parts[i].mem, 0, 0,
                                     parts[i].n * es, 0, NULL, NULL);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clFinish(fcl_context_cl_queue(ctx)), CL_SUCCESS);
    clReleaseMemObject(fresh);
  }
}

void th_problem_free(th_problem *p) {
  free(p->q);
  free(p->k);
  free(p->v);
  if (p->dq) clReleaseMemObject(p->dq);
  if (p->dk) clReleaseMemObject(p->dk);
  if (p->dv) clReleaseMemObject(p->dv);
  memset(p, 0, sizeof *p);
}

th_forward th_run_forward(fcl_context *ctx, const th_problem *p, fcl_algo algo,
                          int with_lse) {
  th_forward r;
  memset(&r, 0, sizeof r);
  size_t es = fcl_dtype_size(p->desc.dtype);
  cl_mem o = fclu_poisoned_buffer(ctx, p->q_elems * es);
  cl_mem lse = with_lse ? fclu_poisoned_buffer(ctx, p->lse_elems * sizeof(float)) : NULL;
  ck_assert(o && (lse || !with_lse));
  r.status = fcl_attention_forward(ctx, &p->desc, algo, p->dq, p->dk, p->dv, o, lse, &r.info);
  r.o = host_alloc(p->q_elems);
  r.lse = with_lse ? host_alloc(p->lse_elems) : NULL;
  ck_assert_int_eq(fclu_download(ctx, o, r.o, p->q_elems, p->desc.dtype), 0);
  if (with_lse)
    ck_assert_int_eq(fclu_download(ctx, lse, r.lse, p->lse_elems, FCL_DTYPE_F32), 0);
  clReleaseMemObject(o);
  if (lse) clReleaseMemObject(lse);
  return r;
}

float *th_naive_output(fcl_context *ctx, const th_problem *p) {
  th_forward r = th_run_forward(ctx, p, FCL_ALGO_NAIVE, 0);
  if (r.status == FCL_SUCCESS) return r.o;
  ck_assert_msg(r.status == FCL_ERROR_UNSUPPORTED && p->desc.dtype != FCL_DTYPE_F32,
                "naive: %s", fcl_context_last_error(ctx));
  /* unwritten rows of a ragged batch's buffers are 0, as the reference's */
  memset(r.o, 0, (p->q_elems ? p->q_elems : 1) * sizeof *r.o);
  fclref_naive_forward(&p->desc, p->q, p->k, p->v, r.o);
  return r.o;
}

void th_forward_free(th_forward *r) {
  free(r->o);
  free(r->lse);
  r->o = r->lse = NULL;
}

th_reference th_reference_forward(const th_problem *p) {
  th_reference r;
  r.o = malloc((p->q_elems ? p->q_elems : 1) * sizeof *r.o);
  r.lse = malloc((p->lse_elems ? p->lse_elems : 1) * sizeof *r.lse);
  ck_assert(r.o && r.lse);
  fclref_forward(&p->desc, p->q, p->k, p->v, r.o, r.lse);
  return r;
}

void th_reference_free(th_reference *r) {
  free(r->o);
  free(r->lse);
  r->o = r->lse = NULL;
}

void th_grad_inputs_init(th_grad_inputs *g, fcl_context *ctx, const th_problem *p,
                         uint64_t seed) {
  memset(g, 0, sizeof *g);
  const fcl_dtype dtype = p->desc.dtype;
  g->dout = host_alloc(p->q_elems);
  g->o = host_alloc(p->q_elems);
  g->lse = host_alloc(p->lse_elems);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed + 0x5eed);
  fclu_fill_normal(&rng, g->dout, p->q_elems, 1.0, dtype);
  th_reference ref = th_reference_forward(p);
  for (size_t i = 0; i < p->q_elems; ++i) g->o[i] = fclu_round((float)ref.o[i], dtype);
  for (size_t i = 0; i < p->lse_elems; ++i) g->lse[i] = (float)ref.lse[i];
  th_reference_free(&ref);
  g->d_dout = fclu_upload(ctx, g->dout, p->q_elems, dtype);
  g->d_o = fclu_upload(ctx, g->o, p->q_elems, dtype);
  g->d_lse = fclu_upload(ctx, g->lse, p->lse_elems, FCL_DTYPE_F32);
  ck_assert(g->d_dout && g->d_o && g->d_lse);
}

void th_grad_inputs_free(th_grad_inputs *g) {
  free(g->dout);
  free(g->o);
  free(g->lse);
  if (g->d_dout) clReleaseMemObject(g->d_dout);
  if (g->d_o) clReleaseMemObject(g->d_o);
  if (g->d_lse) clReleaseMemObject(g->d_lse);
  memset(g, 0, sizeof *g);
}

th_backward th_run_backward(fcl_context *ctx, const th_problem *p, const th_grad_inputs *g,
                            fcl_algo algo) {
  th_backward r;
  memset(&r, 0, sizeof r);
  const fcl_dtype dtype = p->desc.dtype;
  const size_t es = fcl_dtype_size(dtype);
  cl_mem dq = fclu_poisoned_buffer(ctx, p->q_elems * es);
  cl_mem dk = fclu_poisoned_buffer(ctx, p->kv_elems * es);
  cl_mem dv = fclu_poisoned_buffer(ctx, p->kv_elems * es);
  ck_assert(dq && dk && dv);
  r.status = fcl_attention_backward(ctx, &p->desc, algo, p->dq, p->dk, p->dv, g->d_o,
                                    g->d_lse, g->d_dout, dq, dk, dv, &r.info);
  r.dq = host_alloc(p->q_elems);
  r.dk = host_alloc(p->kv_elems);
  r.dv = host_alloc(p->kv_elems);
  ck_assert_int_eq(fclu_download(ctx, dq, r.dq, p->q_elems, dtype), 0);
  ck_assert_int_eq(fclu_download(ctx, dk, r.dk, p->kv_elems, dtype), 0);
  ck_assert_int_eq(fclu_download(ctx, dv, r.dv, p->kv_elems, dtype), 0);
  clReleaseMemObject(dq);
  clReleaseMemObject(dk);
  clReleaseMemObject(dv);
  return r;
}

void th_backward_free(th_backward *r) {
  free(r->dq);
  free(r->dk);
  free(r->dv);
  r->dq = r->dk = r->dv = NULL;
}

th_grad_reference th_reference_backward(const th_problem *p, const th_grad_inputs *g) {
  th_grad_reference r;
  r.dq = malloc((p->q_elems ? p->q_elems : 1) * sizeof *r.dq);
  r.dk = malloc((p->kv_elems ? p->kv_elems : 1) * sizeof *r.dk);
  r.dv = malloc((p->kv_elems ? p->kv_elems : 1) * sizeof *r.dv);
  ck_assert(r.dq && r.dk && r.dv);
  fclref_backward(&p->desc, p->q, p->k, p->v, g->dout, r.dq, r.dk, r.dv);
  return r;
}

void th_grad_reference_free(th_grad_reference *r) {
  free(r->dq);
  free(r->dk);
  free(r->dv);
  r->dq = r->dk = r->dv = NULL;
}

void th_assert_blind_rows(const fcl_attention_desc *d, const float *rows, const float *lse,
                          const char *what) {
  const size_t blind_rows = d->seqlen_q > d->seqlen_k && d->causal ? d->seqlen_q - d->seqlen_k : 0;
  for (size_t b = 0; b < d->batch; ++b)
    for (size_t i = 0; i < d->seqlen_q; ++i)
      for (size_t h = 0; h < d->heads_q; ++h) {
        const int blind = i < blind_rows;
        if (lse) {
          const float l = lse[(b * d->heads_q + h) * d->seqlen_q + i];
          ck_assert_msg(blind ? (isinf(l) && l < 0) : isfinite(l), "row %zu: LSE %g", i,
                        (double)l);
        }
        const float *x = rows + ((b * d->seqlen_q + i) * d->heads_q + h) * d->head_dim;
        for (size_t c = 0; c < d->head_dim; ++c)
          ck_assert_msg(blind ? x[c] == 0.0f : isfinite(x[c]), "%s row %zu col %zu: %g", what, i,
                        c, (double)x[c]);
      }
}

fcl_attention_desc th_shape_desc(const th_shape *shape, fcl_dtype dtype) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, shape->b, shape->hq, shape->hkv, shape->nq, shape->nk, shape->d);
  d.causal = shape->causal;
  d.dtype = dtype;
  return d;
}

size_t th_mma_head_dim(size_t d) {
  d = (d + 7) / 8 * 8;
  return d > 128 ? 128 : d;
}

const char *th_describe(const fcl_attention_desc *d, char *buf, size_t len) {
  snprintf(buf, len, "B%zu Hq%zu Hkv%zu Nq%zu Nk%zu d%zu %s%s scale %g", d->batch,
           d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
           fcl_dtype_name(d->dtype), d->causal ? " causal" : "", (double)d->scale);
  return buf;
}

int th_untouched_or_whole(const float *x, const float *want, size_t n) {
  size_t poisoned = 0;
  for (size_t i = 0; i < n; ++i) poisoned += isnan(x[i]) != 0;
  if (poisoned == n) return 1;
  if (poisoned == 0 && !memcmp(x, want, n * sizeof *x)) return 0;
  return -1;
}

TCase *th_tcase(const char *name) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, TH_TIMEOUT_S);
  return tc;
}

int th_run_suite(Suite *suite) {
  th_seed();  /* chosen in the parent, so every forked test shares it */
  SRunner *runner = srunner_create(suite);
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void th_d_floor(const th_problem *p, const th_grad_inputs *g, const double *o_exact,
                double out[3]) {
  const fcl_attention_desc *desc = &p->desc;
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t kv_ld = desc->heads_kv * d, group = desc->heads_q / desc->heads_kv;
  double *fq = calloc(p->q_elems ? p->q_elems : 1, sizeof *fq);
  double *fk = calloc(p->kv_elems ? p->kv_elems : 1, sizeof *fk);
  double *pr = malloc((nk ? nk : 1) * sizeof *pr);
  ck_assert(fq && fk && pr);
  for (size_t b = 0; b < desc->batch; ++b)
    for (size_t h = 0; h < desc->heads_q; ++h)
      for (size_t i = 0; i < nq; ++i) {
        const size_t at = ((b * nq + i) * desc->heads_q + h) * d;
        const size_t kv0 = (b * nk * desc->heads_kv + h / group) * d;
        const long long last = desc->causal ? (long long)i + (long long)nk - (long long)nq
                                            : (long long)nk - 1;
        const size_t seen = last < 0 ? 0 : (size_t)last + 1 < nk ? (size_t)last + 1 : nk;
        if (!seen) continue;
        double moved = 0.0, mass = 0.0;
        for (size_t c = 0; c < d; ++c) {
          moved += (double)g->dout[at + c] * ((double)g->o[at + c] - o_exact[at + c]);
          mass += fabs((double)g->dout[at + c] * (double)g->o[at + c]);
        }
        const double dd = (fabs(moved) + (double)d * 0x1p-24 * mass) * (double)desc->scale;
        double m = -INFINITY, l = 0.0;
        for (size_t j = 0; j < seen; ++j) {
          double dot = 0.0;
          for (size_t c = 0; c < d; ++c)
            dot += (double)p->q[at + c] * (double)p->k[kv0 + j * kv_ld + c];
          pr[j] = dot * (double)desc->scale;
          m = fmax(m, pr[j]);
        }
        for (size_t j = 0; j < seen; ++j) l += (pr[j] = exp(pr[j] - m));
        for (size_t j = 0; j < seen; ++j) {
          const double w = pr[j] / l * dd;
          for (size_t c = 0; c < d; ++c) {
            fq[at + c] += w * fabs((double)p->k[kv0 + j * kv_ld + c]);
            fk[kv0 + j * kv_ld + c] += w * fabs((double)p->q[at + c]);
          }
        }
      }
  out[0] = fclu_max_abs(fq, p->q_elems);
  out[1] = fclu_max_abs(fk, p->kv_elems);
  out[2] = 0.0;
  free(fq);
  free(fk);
  free(pr);
}
