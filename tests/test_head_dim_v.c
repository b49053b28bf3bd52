/*
 * test_head_dim_v.c — a value head size of its own (fcl_attention_desc.head_dim_v):
 * the naive algorithm's forward and backward against the float64 reference
 * at (192, 128), (80, 48), (128, 64) and a wider V (64, 96); the flash SIMT
 * and CPU families' forward and backward (each forced by a tiling hint)
 * against it too, held to twice the naive algorithm's error, in f32, f16
 * and bf16, causal or not, GQA (packed or not), ragged, with bit-identical
 * reruns and counted bytes equal to the I/O model; the other families'
 * refusal with nothing written; the planner's family by shape and device
 * (a prefill on SIMT or CPU, a decode step on a GPU's decode kernel, on a
 * CPU's CPU kernels, widths past the tiles' on the decode kernel
 * everywhere: tests/test_mla.c tests it); bad widths and buffers sized at
 * head_dim instead of head_dim_v.
 */
#include "harness.h"
#include "views.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (head_dim, head_dim_v) pairs; DeepSeek's latent attention prefills at the first. */
static const size_t widths[][2] = {{192, 128}, {80, 48}, {128, 64}, {64, 96}};
#define N_WIDTHS (sizeof widths / sizeof *widths)

/* A GQA problem with sequences of unequal lengths, causal on odd cases. */
static fcl_attention_desc desc_of(size_t d, size_t dv, int causal) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, 19, 37, d);
  desc.head_dim_v = dv;
  desc.causal = causal;
  return desc;
}

/* Host inputs of a problem and their device copies: q, k at head_dim, v, dO at head_dim_v. */
typedef struct inputs {
  size_t nq, nk, nv, no, nl;  /* elements of Q (dQ), K (dK), V (dV), O (dO), LSE */
  float *q, *k, *v, *dout;
  cl_mem mq, mk, mv, mdout;
} inputs;

static float *draw(fclu_rng *rng, size_t n, double sigma, fcl_dtype t) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fclu_fill_normal(rng, x, n, sigma, t);
  return x;
}

/* Inputs in the descriptor's storage type (the host copies rounded to it),
 * packed, ragged or not. */
static void inputs_init(inputs *in, fcl_context *ctx, const fcl_attention_desc *desc,
                        uint64_t seed) {
  const fcl_dtype t = desc->dtype;
  in->nq = fclu_packed_elems(desc, FCLU_Q);
  in->nk = fclu_packed_elems(desc, FCLU_K);
  in->nv = fclu_packed_elems(desc, FCLU_V);
  in->no = fclu_packed_elems(desc, FCLU_O);
  in->nl = fclu_tokens(desc, FCLU_Q) * desc->heads_q;
  fclu_rng rng;
  fclu_rng_seed(&rng, 0x4d4c41u + seed);
  in->q = draw(&rng, in->nq, 1.0, t);
  in->k = draw(&rng, in->nk, 1.0, t);
  in->v = draw(&rng, in->nv, 1.0, t);
  in->dout = draw(&rng, in->no, 1.0, t);
  in->mq = fclu_upload(ctx, in->q, in->nq, t);
  in->mk = fclu_upload(ctx, in->k, in->nk, t);
  in->mv = fclu_upload(ctx, in->v, in->nv, t);
  in->mdout = fclu_upload(ctx, in->dout, in->no, t);
  ck_assert(in->mq && in->mk && in->mv && in->mdout);
}

static void inputs_free(inputs *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  free(in->dout);
  clReleaseMemObject(in->mq);
  clReleaseMemObject(in->mk);
  clReleaseMemObject(in->mv);
  clReleaseMemObject(in->mdout);
}

static float *download_as(fcl_context *ctx, cl_mem mem, size_t n, fcl_dtype t) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(fclu_download(ctx, mem, x, n, t), 0);
  return x;
}

static float *download(fcl_context *ctx, cl_mem mem, size_t n) {
  return download_as(ctx, mem, n, FCL_DTYPE_F32);
}

static void release(const cl_mem *mems, size_t n) {
  for (size_t i = 0; i < n; ++i) clReleaseMemObject(mems[i]);
}

/* Whether every byte of a buffer still holds fclu_poison's 0xFF. */
static int still_poisoned(fcl_context *ctx, cl_mem mem, size_t bytes) {
  unsigned char *x = malloc(bytes);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), mem, CL_TRUE, 0, bytes, x, 0,
                                       NULL, NULL),
                   CL_SUCCESS);
  int all = 1;
  for (size_t i = 0; i < bytes; ++i) all = all && x[i] == 0xFF;
  free(x);
  return all;
}

/* max |x - ref| within rel of the reference's largest magnitude. */
static void assert_close(const char *what, const float *x, const double *ref, size_t n,
                         double rel) {
  const double err = fclu_max_abs_err(x, ref, n), scale = fclu_max_abs(ref, n);
  ck_assert_msg(err <= rel * (scale > 1.0 ? scale : 1.0), "%s: max error %g (reference max %g)",
                what, err, scale);
}

START_TEST(buffer_sizes_count_v_and_o_at_their_width) {
  const size_t d = widths[_i][0], dv = widths[_i][1];
  fcl_attention_desc desc = desc_of(d, dv, 0);
  fcl_buffer_sizes s;
  char why[256];
  ck_assert_int_eq(fcl_attention_buffer_sizes(&desc, &s, why, sizeof why), FCL_SUCCESS);
  const size_t tq = 2 * 19 * 4, tk = 2 * 37 * 2;
  ck_assert_uint_eq(s.q, tq * d * 4);
  ck_assert_uint_eq(s.dq, tq * d * 4);
  ck_assert_uint_eq(s.k, tk * d * 4);
  ck_assert_uint_eq(s.dk, tk * d * 4);
  ck_assert_uint_eq(s.v, tk * dv * 4);
  ck_assert_uint_eq(s.dv, tk * dv * 4);
  ck_assert_uint_eq(s.o, tq * dv * 4);
  ck_assert_uint_eq(s.dout, tq * dv * 4);
}
END_TEST

START_TEST(naive_forward_matches_reference) {
  const size_t d = widths[_i][0], dv = widths[_i][1];
  fcl_context *ctx = th_context();
  fcl_attention_desc desc = desc_of(d, dv, (int)(_i & 1));
  inputs in;
  inputs_init(&in, ctx, &desc, (uint64_t)_i);
  cl_mem o = fclu_poisoned_buffer(ctx, in.no * 4), lse = fclu_poisoned_buffer(ctx, in.nl * 4);
  ck_assert(o && lse);
  fcl_status st = fcl_attention_forward(ctx, &desc, FCL_ALGO_NAIVE, in.mq, in.mk, in.mv, o, lse,
                                        NULL);
  ck_assert_msg(st == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  double *ro = malloc(in.no * sizeof *ro), *rl = malloc(in.nl * sizeof *rl);
  ck_assert(ro && rl);
  fclref_forward(&desc, in.q, in.k, in.v, ro, rl);
  float *go = download(ctx, o, in.no), *gl = download(ctx, lse, in.nl);
  assert_close("O", go, ro, in.no, 1e-4);
  assert_close("LSE", gl, rl, in.nl, 1e-5);
  free(go);
  free(gl);
  free(ro);
  free(rl);
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  inputs_free(&in);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_backward_matches_reference) {
  const size_t d = widths[_i][0], dv = widths[_i][1];
  fcl_context *ctx = th_context();
  fcl_attention_desc desc = desc_of(d, dv, (int)(~_i & 1));
  inputs in;
  inputs_init(&in, ctx, &desc, 100 + (uint64_t)_i);
  /* O and LSE of the reference, rounded to float: only the backward is judged */
  double *ro = malloc(in.no * sizeof *ro), *rl = malloc(in.nl * sizeof *rl);
  float *fo = malloc(in.no * sizeof *fo), *fl = malloc(in.nl * sizeof *fl);
  ck_assert(ro && rl && fo && fl);
  fclref_forward(&desc, in.q, in.k, in.v, ro, rl);
  for (size_t i = 0; i < in.no; ++i) fo[i] = (float)ro[i];
  for (size_t i = 0; i < in.nl; ++i) fl[i] = (float)rl[i];
  cl_mem o = fclu_upload(ctx, fo, in.no, FCL_DTYPE_F32), lse = fclu_upload(ctx, fl, in.nl, FCL_DTYPE_F32);
  cl_mem dq = fclu_poisoned_buffer(ctx, in.nq * 4), dk = fclu_poisoned_buffer(ctx, in.nk * 4),
         dvm = fclu_poisoned_buffer(ctx, in.nv * 4);
  ck_assert(o && lse && dq && dk && dvm);
  fcl_status st = fcl_attention_backward(ctx, &desc, FCL_ALGO_NAIVE, in.mq, in.mk, in.mv, o, lse,
                                         in.mdout, dq, dk, dvm, NULL);
  ck_assert_msg(st == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  double *rq = malloc(in.nq * sizeof *rq), *rk = malloc(in.nk * sizeof *rk),
         *rv = malloc(in.nv * sizeof *rv);
  ck_assert(rq && rk && rv);
  fclref_backward(&desc, in.q, in.k, in.v, in.dout, rq, rk, rv);
  float *gq = download(ctx, dq, in.nq), *gk = download(ctx, dk, in.nk), *gv = download(ctx, dvm, in.nv);
  assert_close("dQ", gq, rq, in.nq, 1e-3);
  assert_close("dK", gk, rk, in.nk, 1e-3);
  assert_close("dV", gv, rv, in.nv, 1e-3);
  free(gq);
  free(gk);
  free(gv);
  free(rq);
  free(rk);
  free(rv);
  free(ro);
  free(rl);
  free(fo);
  free(fl);
  release((cl_mem[]){o, lse, dq, dk, dvm}, 5);
  inputs_free(&in);
  fcl_context_release(ctx);
}
END_TEST

/* ---- the flash families ---------------------------------------------------- */

/* The families that take a value width of their own, each forced by a
 * tiling hint. */
static const unsigned families[] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_CPU};
#define N_FAMILIES (sizeof families / sizeof *families)

/* A flash problem: widths, storage type, mask, query rows (up to 64 with
 * GQA: packed heads in the forward), ragged or not. */
typedef struct flash_case {
  size_t d, dv;
  fcl_dtype dtype;
  int causal, ragged;
  size_t nq;
} flash_case;

static const flash_case flash_cases[] = {
    {192, 128, FCL_DTYPE_F32, 1, 0, 37},  {192, 128, FCL_DTYPE_F32, 0, 1, 70},
    {192, 128, FCL_DTYPE_F16, 1, 0, 70},  {192, 128, FCL_DTYPE_BF16, 0, 1, 37},
    {64, 128, FCL_DTYPE_F32, 1, 0, 70},   {128, 64, FCL_DTYPE_F32, 0, 1, 37},
    {37, 19, FCL_DTYPE_F32, 1, 1, 70},    {80, 48, FCL_DTYPE_F16, 0, 0, 37},
};
#define N_FLASH_CASES (sizeof flash_cases / sizeof *flash_cases)

/* Sequence lengths of the ragged problems (two sequences, one shorter). */
static const int32_t cu_q[] = {0, 37, 37 + 20}, cu_k[] = {0, 45, 45 + 31};
static const int32_t cu_q70[] = {0, 70, 70 + 33};

static fcl_attention_desc flash_desc(const flash_case *c) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, c->nq, c->nq + 8, c->d);
  desc.head_dim_v = c->dv;
  desc.dtype = c->dtype;
  desc.causal = c->causal;
  if (c->ragged) {
    desc.cu_seqlens_q = c->nq == 70 ? cu_q70 : cu_q;
    desc.cu_seqlens_k = cu_k;
    desc.seqlen_k = 45;
  }
  return desc;
}

/* The naive forward emulated on the host (reference.h), O of every row. */
static float *emulated_naive_o(const fcl_attention_desc *d, const inputs *in) {
  float *o = malloc(in->no * sizeof *o);
  ck_assert_ptr_nonnull(o);
  fclref_naive_forward(d, in->q, in->k, in->v, o);
  return o;
}

/* flash's error within 2 x the naive algorithm's (both against the float64
 * reference) plus the storage type's floor: the flash suites' rule. */
static void assert_rule(const char *what, const char *problem, const float *flash,
                        const double *ref_flash, const float *naive, const double *ref, size_t n,
                        fcl_dtype t) {
  const double err = fclu_max_abs_err(flash, ref_flash, n);
  const double naive_err = fclu_max_abs_err(naive, ref, n);
  const double bound = 2.0 * naive_err + th_err_floor(t, ref, n);
  ck_assert_msg(err <= bound, "%s, %s: flash error %g > 2 x naive error %g + floor = %g", problem,
                what, err, naive_err, bound);
}

/* Runs the forward (o, lse poisoned first), the bits downloaded. */
static fcl_status flash_forward(fcl_context *ctx, const fcl_attention_desc *desc, const inputs *in,
                                float **o, float **lse, fcl_run_info *info) {
  cl_mem mo = fclu_poisoned_buffer(ctx, in->no * fcl_dtype_size(desc->dtype));
  cl_mem ml = fclu_poisoned_buffer(ctx, in->nl * 4);
  ck_assert(mo && ml);
  const fcl_status st = fcl_attention_forward(ctx, desc, FCL_ALGO_FLASH, in->mq, in->mk, in->mv,
                                              mo, ml, info);
  *o = download_as(ctx, mo, in->no, desc->dtype);
  *lse = download(ctx, ml, in->nl);
  release((cl_mem[]){mo, ml}, 2);
  return st;
}

/* Runs the backward from O and LSE (host copies, uploaded), gradients
 * poisoned first and downloaded. */
static fcl_status flash_backward(fcl_context *ctx, const fcl_attention_desc *desc,
                                 const inputs *in, const float *o, const float *lse, float **dq,
                                 float **dk, float **dv, fcl_run_info *info) {
  const fcl_dtype t = desc->dtype;
  const size_t e = fcl_dtype_size(t);
  cl_mem mo = fclu_upload(ctx, o, in->no, t), ml = fclu_upload(ctx, lse, in->nl, FCL_DTYPE_F32);
  cl_mem mdq = fclu_poisoned_buffer(ctx, in->nq * e), mdk = fclu_poisoned_buffer(ctx, in->nk * e),
         mdv = fclu_poisoned_buffer(ctx, in->nv * e);
  ck_assert(mo && ml && mdq && mdk && mdv);
  const fcl_status st = fcl_attention_backward(ctx, desc, FCL_ALGO_FLASH, in->mq, in->mk, in->mv,
                                               mo, ml, in->mdout, mdq, mdk, mdv, info);
  *dq = download_as(ctx, mdq, in->nq, t);
  *dk = download_as(ctx, mdk, in->nk, t);
  *dv = download_as(ctx, mdv, in->nv, t);
  release((cl_mem[]){mo, ml, mdq, mdk, mdv}, 5);
  return st;
}

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof *a) == 0;
}

/* A family's run of a problem, for failure messages. */
static void describe(unsigned family, const fcl_attention_desc *desc, char *what, size_t len) {
  char shape[160];
  snprintf(what, len, "%s kernels, %s", fcl_flash_kernel_name(family),
           th_describe(desc, shape, sizeof shape));
}

/* Forward and backward of one case in one family against the float64
 * reference, by the flash rule; reruns bit-identical. */
START_TEST(flash_matches_reference) {
  const unsigned family = families[(size_t)_i % N_FAMILIES];
  const flash_case *c = &flash_cases[(size_t)_i / N_FAMILIES];
  fcl_context *ctx = th_context();
  const fcl_plan hint = {.kernel = family};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  fcl_attention_desc desc = flash_desc(c);
  char what[200];
  describe(family, &desc, what, sizeof what);
  inputs in;
  inputs_init(&in, ctx, &desc, th_seed() + (uint64_t)_i);

  /* ---- forward ---- */
  float *o, *lse;
  fcl_run_info info;
  fcl_status st = flash_forward(ctx, &desc, &in, &o, &lse, &info);
  ck_assert_msg(st == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  ck_assert_uint_eq(info.plan.kernel, family);
  ck_assert_uint_eq(info.plan.splits, 1);
  double *ro = malloc(in.no * sizeof *ro), *rl = malloc(in.nl * sizeof *rl);
  ck_assert(ro && rl);
  fclref_forward(&desc, in.q, in.k, in.v, ro, rl);
  float *naive_o = emulated_naive_o(&desc, &in);
  assert_rule("O", what, o, ro, naive_o, ro, in.no, desc.dtype);
  assert_close("LSE", lse, rl, in.nl, 1e-5);
  for (int rerun = 0; rerun < th_reruns(1); ++rerun) {
    float *o2, *lse2;
    ck_assert_int_eq(flash_forward(ctx, &desc, &in, &o2, &lse2, NULL), FCL_SUCCESS);
    ck_assert_msg(same_bits(o, o2, in.no) && same_bits(lse, lse2, in.nl), "%s: rerun differs",
                  what);
    free(o2);
    free(lse2);
  }

  /* ---- backward, from the reference's O (in the storage type) and LSE ---- */
  float *fo = malloc(in.no * sizeof *fo), *fl = malloc(in.nl * sizeof *fl);
  ck_assert(fo && fl);
  for (size_t i = 0; i < in.no; ++i) fo[i] = fclu_round((float)ro[i], desc.dtype);
  for (size_t i = 0; i < in.nl; ++i) fl[i] = (float)rl[i];
  float *dq, *dk, *dv;
  st = flash_backward(ctx, &desc, &in, fo, fl, &dq, &dk, &dv, &info);
  ck_assert_msg(st == FCL_SUCCESS, "%s, backward: %s", what, fcl_context_last_error(ctx));
  ck_assert_uint_eq(info.plan.kernel, family);
  double *rq = malloc(in.nq * sizeof *rq), *rk = malloc(in.nk * sizeof *rk),
         *rv = malloc(in.nv * sizeof *rv);
  double *gq = malloc(in.nq * sizeof *gq), *gk = malloc(in.nk * sizeof *gk),
         *gv = malloc(in.nv * sizeof *gv);
  float *nq = malloc(in.nq * sizeof *nq), *nk = malloc(in.nk * sizeof *nk),
        *nv = malloc(in.nv * sizeof *nv);
  ck_assert(rq && rk && rv && gq && gk && gv && nq && nk && nv);
  /* exact, and with D from the O the backward reads (its error not the kernel's) */
  fclref_backward(&desc, in.q, in.k, in.v, in.dout, rq, rk, rv);
  fclref_backward_given_o(&desc, in.q, in.k, in.v, in.dout, fo, gq, gk, gv);
  fclref_naive_backward(&desc, in.q, in.k, in.v, in.dout, nq, nk, nv);
  assert_rule("dQ", what, dq, gq, nq, rq, in.nq, desc.dtype);
  assert_rule("dK", what, dk, gk, nk, rk, in.nk, desc.dtype);
  assert_rule("dV", what, dv, gv, nv, rv, in.nv, desc.dtype);
  for (int rerun = 0; rerun < th_reruns(1); ++rerun) {
    float *dq2, *dk2, *dv2;
    ck_assert_int_eq(flash_backward(ctx, &desc, &in, fo, fl, &dq2, &dk2, &dv2, NULL),
                     FCL_SUCCESS);
    ck_assert_msg(same_bits(dq, dq2, in.nq) && same_bits(dk, dk2, in.nk) &&
                      same_bits(dv, dv2, in.nv),
                  "%s: backward rerun differs", what);
    free(dq2);
    free(dk2);
    free(dv2);
  }
  void *all[] = {o, lse, ro, rl, naive_o, fo, fl, dq, dk, dv, rq, rk, rv, gq, gk, gv, nq, nk, nv};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) free(all[i]);
  inputs_free(&in);
  fcl_context_release(ctx);
}
END_TEST

/* The instrumented kernels count what the I/O model says, forward and
 * backward, in each family (where the device counts). */
START_TEST(flash_counted_bytes_equal_the_model) {
  const unsigned family = families[_i];
  fcl_context *ctx = th_context();
  if (!th_count_io(ctx)) {
    fcl_context_release(ctx);
    return;
  }
  const fcl_plan hint = {.kernel = family};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  const flash_case counted[] = {flash_cases[0], flash_cases[4], flash_cases[6]};
  for (size_t i = 0; i < sizeof counted / sizeof *counted; ++i) {
    fcl_attention_desc desc = flash_desc(&counted[i]);
    char what[200];
    describe(family, &desc, what, sizeof what);
    inputs in;
    inputs_init(&in, ctx, &desc, 40 + i);
    float *o, *lse, *dq, *dk, *dv;
    fcl_run_info info;
    ck_assert_msg(flash_forward(ctx, &desc, &in, &o, &lse, &info) == FCL_SUCCESS, "%s: %s",
                  what, fcl_context_last_error(ctx));
    ck_assert_msg(info.bytes_counted == info.bytes_model, "%s: counted %llu bytes, model %llu",
                  what, (unsigned long long)info.bytes_counted,
                  (unsigned long long)info.bytes_model);
    ck_assert_msg(flash_backward(ctx, &desc, &in, o, lse, &dq, &dk, &dv, &info) == FCL_SUCCESS,
                  "%s: %s", what, fcl_context_last_error(ctx));
    ck_assert_msg(info.bytes_counted == info.bytes_model,
                  "%s, backward: counted %llu bytes, model %llu", what,
                  (unsigned long long)info.bytes_counted, (unsigned long long)info.bytes_model);
    void *all[] = {o, lse, dq, dk, dv};
    for (size_t j = 0; j < 5; ++j) free(all[j]);
    inputs_free(&in);
  }
  fcl_context_release(ctx);
}
END_TEST

/* On every profile the rules plan (192, 128) with the SIMT or CPU kernels,
 * unsplit, V's bucket of its own; the other families, a paged cache and a
 * split refuse naming head_dim_v and write no plan; on the device a
 * refused call writes nothing. */
START_TEST(flash_plans_and_refusals) {
  fcl_attention_desc desc = desc_of(192, 128, 1);
  char why[320];
  size_t n = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  static const unsigned one_width[] = {FCL_FLASH_KERNEL_MMA};
  fcl_attention_desc step = desc;
  step.seqlen_q = 1;
  for (size_t p = 0; p < n; ++p)
    for (int pass = 0; pass < 2; ++pass) {
      const fcl_device_limits *lim = &profiles[p].info.limits;
      const fcl_pass fp = pass ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
      fcl_plan plan;
      fcl_status st = fcl_plan_flash(lim, &desc, fp, &plan, why, sizeof why);
      ck_assert_msg(st == FCL_SUCCESS, "%s: %s", profiles[p].key, why);
      ck_assert_msg(plan.kernel == FCL_FLASH_KERNEL_SIMT || plan.kernel == FCL_FLASH_KERNEL_CPU,
                    "%s: %s", profiles[p].key, fcl_flash_kernel_name(plan.kernel));
      ck_assert_uint_eq(plan.splits, 1);
      ck_assert_uint_eq(plan.head_dim_v_padded, 128);
      for (size_t k = 0; k < sizeof one_width / sizeof *one_width; ++k) {
        const fcl_plan hint = {.kernel = one_width[k]};
        memset(&plan, 0x5a, sizeof plan);
        const fcl_plan before = plan;
        st = fcl_plan_flash_hinted(lim, &desc, fp, &hint, &plan, why, sizeof why);
        ck_assert_msg(st == FCL_ERROR_UNSUPPORTED, "%s, %s: %s", profiles[p].key,
                      fcl_flash_kernel_name(one_width[k]), fcl_status_str(st));
        ck_assert_msg(strstr(why, "head_dim_v") != NULL, "the reason: %s", why);
        ck_assert(memcmp(&plan, &before, sizeof plan) == 0);
      }
      if (pass) continue;
      /* a decode step (2 packed rows): the decode kernel, as at one width
       * (the one on matrix instructions keeps head_dim up to 128) */
      st = fcl_plan_flash(lim, &step, fp, &plan, why, sizeof why);
      ck_assert_msg(st == FCL_SUCCESS, "%s, decode step: %s", profiles[p].key, why);
      ck_assert_msg(plan.kernel == FCL_FLASH_KERNEL_DECODE, "%s, decode step: %s",
                    profiles[p].key, fcl_flash_kernel_name(plan.kernel));
      ck_assert_uint_ge(plan.head_dim_padded, 192);
    }
  const fcl_device_limits *lim = &profiles[0].info.limits;
  const fcl_plan split = {.kernel = FCL_FLASH_KERNEL_SIMT, .splits = 2};
  fcl_plan plan;
  ck_assert_int_eq(fcl_plan_flash_hinted(lim, &desc, FCL_PASS_FORWARD, &split, &plan, why,
                                         sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "head_dim_v") != NULL, "the reason: %s", why);
  fcl_attention_desc paged = desc;
  paged.page_size = 16;
  paged.pages_per_seq = 3;
  paged.num_pages = 6;
  paged.block_table = (cl_mem)(uintptr_t)1;  /* never read: the plan refuses first */
  if (fcl_plan_flash(lim, &paged, FCL_PASS_FORWARD, &plan, why, sizeof why) !=
      FCL_ERROR_INVALID_ARGUMENT)  /* (a descriptor check may come first) */
    ck_assert_msg(strstr(why, "head_dim_v") != NULL, "the reason: %s", why);

  fcl_context *ctx = th_context();
  /* on this device: a decode step on the CPU kernels on a CPU (every
   * forward there), the decode kernel on a GPU; widths past the tiles' on
   * the decode kernel everywhere (the CPU kernels keep at most 256) */
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &step, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel,
                    info.limits.is_gpu ? FCL_FLASH_KERNEL_DECODE : FCL_FLASH_KERNEL_CPU);
  fcl_attention_desc wide = step;
  wide.head_dim = 576;
  wide.head_dim_v = 512;
  ck_assert_msg(fcl_plan_flash(&info.limits, &wide, FCL_PASS_FORWARD, &plan, why, sizeof why) ==
                    FCL_SUCCESS, "%s", why);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_DECODE);
  const fcl_plan mma = {.kernel = FCL_FLASH_KERNEL_MMA};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &mma), FCL_SUCCESS);
  inputs in;
  inputs_init(&in, ctx, &desc, 7);
  cl_mem o = fclu_poisoned_buffer(ctx, in.no * 4), lse = fclu_poisoned_buffer(ctx, in.nl * 4);
  cl_mem dq = fclu_poisoned_buffer(ctx, in.nq * 4), dk = fclu_poisoned_buffer(ctx, in.nk * 4),
         dvm = fclu_poisoned_buffer(ctx, in.nv * 4);
  ck_assert(o && lse && dq && dk && dvm);
  fcl_status st = fcl_attention_forward(ctx, &desc, FCL_ALGO_FLASH, in.mq, in.mk, in.mv, o, lse,
                                        NULL);
  ck_assert_int_eq(st, FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(fcl_context_last_error(ctx), "head_dim_v") != NULL, "%s",
                fcl_context_last_error(ctx));
  ck_assert(still_poisoned(ctx, o, in.no * 4) && still_poisoned(ctx, lse, in.nl * 4));
  /* the backward's inputs O and LSE: any values, the call must refuse first */
  st = fcl_attention_backward(ctx, &desc, FCL_ALGO_FLASH, in.mq, in.mk, in.mv, o, lse, in.mdout,
                              dq, dk, dvm, NULL);
  ck_assert_int_eq(st, FCL_ERROR_UNSUPPORTED);
  ck_assert(still_poisoned(ctx, dq, in.nq * 4) && still_poisoned(ctx, dk, in.nk * 4) &&
            still_poisoned(ctx, dvm, in.nv * 4));
  release((cl_mem[]){o, lse, dq, dk, dvm}, 5);
  inputs_free(&in);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(bad_widths_and_small_buffers_are_refused) {
  char why[256];
  fcl_buffer_sizes s;
  fcl_attention_desc desc = desc_of(64, FCL_MAX_HEAD_DIM + 1, 0);
  ck_assert_int_eq(fcl_attention_buffer_sizes(&desc, &s, why, sizeof why), FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "head_dim_v") != NULL, "%s", why);
  /* V and O at head_dim (64) where head_dim_v is 96: too small, nothing written */
  fcl_context *ctx = th_context();
  desc = desc_of(64, 96, 0);
  inputs in;
  inputs_init(&in, ctx, &desc, 9);
  const size_t v_at_d = in.nk, o_at_d = in.nq;  /* elements at head_dim */
  cl_mem small_v = fclu_poisoned_buffer(ctx, v_at_d * 4), small_o = fclu_poisoned_buffer(ctx, o_at_d * 4);
  cl_mem o = fclu_poisoned_buffer(ctx, in.no * 4), lse = fclu_poisoned_buffer(ctx, in.nl * 4);
  ck_assert(small_v && small_o && o && lse);
  fcl_status st = fcl_attention_forward(ctx, &desc, FCL_ALGO_NAIVE, in.mq, in.mk, small_v, o, lse,
                                        NULL);
  ck_assert_int_eq(st, FCL_ERROR_BUFFER_TOO_SMALL);
  ck_assert(still_poisoned(ctx, o, in.no * 4) && still_poisoned(ctx, lse, in.nl * 4));
  st = fcl_attention_forward(ctx, &desc, FCL_ALGO_NAIVE, in.mq, in.mk, in.mv, small_o, lse, NULL);
  ck_assert_int_eq(st, FCL_ERROR_BUFFER_TOO_SMALL);
  ck_assert(still_poisoned(ctx, small_o, o_at_d * 4) && still_poisoned(ctx, lse, in.nl * 4));
  /* a V view whose rows are head_dim_v wide but whose seq_stride is too short to hold them */
  desc.v.head_stride = 96;
  desc.v.seq_stride = 2 * 64;
  desc.v.batch_stride = 37 * 2 * 64;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&desc, &s, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  /* a quantized cache keeps one row width */
  desc = desc_of(64, 96, 0);
  desc.kv_dtype = FCL_KV_Q8_0;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&desc, &s, why, sizeof why), FCL_ERROR_UNSUPPORTED);
  release((cl_mem[]){small_v, small_o, o, lse}, 4);
  inputs_free(&in);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("head_dim_v");
  TCase *tc = th_tcase("head_dim_v");
  tcase_add_loop_test(tc, buffer_sizes_count_v_and_o_at_their_width, 0, (int)N_WIDTHS);
  tcase_add_loop_test(tc, naive_forward_matches_reference, 0, (int)N_WIDTHS);
  tcase_add_loop_test(tc, naive_backward_matches_reference, 0, (int)N_WIDTHS);
  tcase_add_loop_test(tc, flash_matches_reference, 0, (int)(N_FAMILIES * N_FLASH_CASES));
  tcase_add_loop_test(tc, flash_counted_bytes_equal_the_model, 0, (int)N_FAMILIES);
  tcase_add_test(tc, flash_plans_and_refusals);
  tcase_add_test(tc, bad_widths_and_small_buffers_are_refused);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
