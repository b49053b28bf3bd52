/*
 * test_head_dim_v.c — a value head size of its own (fcl_attention_desc.head_dim_v):
 * the naive algorithm's forward and backward against the float64 reference
 * at (192, 128), (80, 48), (128, 64) and a wider V (64, 96); the flash
 * forward planned on the decode kernel, the other families' and the
 * backward's refusal with nothing written; bad widths and buffers sized
 * at head_dim instead of head_dim_v.
 */
#include "harness.h"

#include <math.h>
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

static float *draw(fclu_rng *rng, size_t n, double sigma) {
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fclu_fill_normal(rng, x, n, sigma, FCL_DTYPE_F32);
  return x;
}

static void inputs_init(inputs *in, fcl_context *ctx, const fcl_attention_desc *desc,
                        uint64_t seed) {
  const size_t dv = desc->head_dim_v ? desc->head_dim_v : desc->head_dim;
  const size_t tq = desc->batch * desc->seqlen_q, tk = desc->batch * desc->seqlen_k;
  in->nq = tq * desc->heads_q * desc->head_dim;
  in->nk = tk * desc->heads_kv * desc->head_dim;
  in->nv = tk * desc->heads_kv * dv;
  in->no = tq * desc->heads_q * dv;
  in->nl = tq * desc->heads_q;
  fclu_rng rng;
  fclu_rng_seed(&rng, 0x4d4c41u + seed);
  in->q = draw(&rng, in->nq, 1.0);
  in->k = draw(&rng, in->nk, 1.0);
  in->v = draw(&rng, in->nv, 1.0);
  in->dout = draw(&rng, in->no, 1.0);
  in->mq = fclu_upload(ctx, in->q, in->nq, FCL_DTYPE_F32);
  in->mk = fclu_upload(ctx, in->k, in->nk, FCL_DTYPE_F32);
  in->mv = fclu_upload(ctx, in->v, in->nv, FCL_DTYPE_F32);
  in->mdout = fclu_upload(ctx, in->dout, in->no, FCL_DTYPE_F32);
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

static float *download(fcl_context *ctx, cl_mem mem, size_t n) {
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(fclu_download(ctx, mem, x, n, FCL_DTYPE_F32), 0);
  return x;
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

/* The flash forward runs on the decode kernel (the one family of two
 * widths: tests/test_mla.c tests it), on this device and on every profile;
 * the backward and a forward asked of another family refuse, and write
 * nothing. */
START_TEST(flash_refuses_and_writes_nothing) {
  fcl_attention_desc desc = desc_of(192, 128, 1);
  char why[320];
  size_t n = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  for (size_t p = 0; p < n; ++p)
    for (int pass = 0; pass < 2; ++pass) {
      fcl_plan plan;
      memset(&plan, 0x5a, sizeof plan);
      const fcl_plan before = plan;
      fcl_status st = fcl_plan_flash(&profiles[p].info.limits, &desc,
                                     pass ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD, &plan, why,
                                     sizeof why);
      if (!pass) {
        ck_assert_msg(st == FCL_SUCCESS, "%s: %s", profiles[p].key, why);
        ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_DECODE);
        continue;
      }
      ck_assert_msg(st == FCL_ERROR_UNSUPPORTED, "%s: %s", profiles[p].key, fcl_status_str(st));
      ck_assert_msg(strstr(why, "head_dim_v") != NULL, "the reason: %s", why);
      ck_assert(memcmp(&plan, &before, sizeof plan) == 0);
    }
  fcl_context *ctx = th_context();
  inputs in;
  inputs_init(&in, ctx, &desc, 7);
  cl_mem o = fclu_poisoned_buffer(ctx, in.no * 4), lse = fclu_poisoned_buffer(ctx, in.nl * 4);
  cl_mem dq = fclu_poisoned_buffer(ctx, in.nq * 4), dk = fclu_poisoned_buffer(ctx, in.nk * 4),
         dvm = fclu_poisoned_buffer(ctx, in.nv * 4);
  ck_assert(o && lse && dq && dk && dvm);
  const fcl_plan simt = {.kernel = FCL_FLASH_KERNEL_SIMT};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &simt), FCL_SUCCESS);
  fcl_status st = fcl_attention_forward(ctx, &desc, FCL_ALGO_FLASH, in.mq, in.mk, in.mv, o, lse,
                                        NULL);
  ck_assert_int_eq(st, FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(fcl_context_last_error(ctx), "head_dim_v") != NULL, "%s",
                fcl_context_last_error(ctx));
  ck_assert(still_poisoned(ctx, o, in.no * 4) && still_poisoned(ctx, lse, in.nl * 4));
  const fcl_plan planner = {0};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &planner), FCL_SUCCESS);
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
  tcase_add_test(tc, flash_refuses_and_writes_nothing);
  tcase_add_test(tc, bad_widths_and_small_buffers_are_refused);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
