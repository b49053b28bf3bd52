/*
 * test_backward.c — the backward of both algorithms against the float64
 * reference, on random shapes that break indexing (sizes that are multiples
 * of nothing, seqlen_q != seqlen_k, causal with rows that see no key,
 * GQA and MQA, head_dim 16..256): each of dQ, dK and dV of the flash
 * algorithm within 3x the naive fp32 algorithm's error on the same inputs
 * (+1e-6). Also: rows that see no key give zero gradients and no NaN, runs
 * are bit-identical, counted bytes equal the I/O model, the naive
 * algorithm's chunking, and outputs that a failing call leaves either
 * untouched or whole.
 */
#include "harness.h"
#include "resources.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANDOM_SHAPES 24
#define ERR_FLOOR 1e-6
#define ERR_FACTOR 3.0
#define REPEATS 20

static const char *const grad_names[3] = {"dQ", "dK", "dV"};

/* Sizes that are multiples of nothing, and extremes. */
static size_t pick_seqlen(fclu_rng *rng) {
  static const size_t special[] = {1, 7, 113, 257, 2, 33, 64, 129};
  if (fclu_uniform(rng) < 0.5) return special[fclu_range(rng, 0, 7)];
  return fclu_range(rng, 1, 300);
}

/* A few head_dim buckets, so that the kernels of one run are built a few
 * times rather than once per shape. */
static size_t pick_head_dim(fclu_rng *rng) {
  static const size_t special[] = {16, 64, 128, 256, 8, 40, 96, 13, 3, 64};
  return special[fclu_range(rng, 0, 9)];
}

static fcl_attention_desc random_desc(fclu_rng *rng, int index) {
  fcl_attention_desc d;
  size_t hkv = fclu_range(rng, 1, 2), group = fclu_range(rng, 1, 3);
  size_t head_dim = index == 0 ? 16 : index == 1 ? 256 : pick_head_dim(rng);
  size_t nq = index == 2 ? 1 : pick_seqlen(rng), nk = index == 3 ? 1 : pick_seqlen(rng);
  if (index == 4) {  /* causal with more queries than keys: rows that see nothing */
    nq = 257;
    nk = 113;
  }
  if (index == 5) {  /* multi-query: every query head shares one kv head */
    hkv = 1;
    group = 4;
  }
  /* Keep each problem small enough for a CPU reference. */
  while (nq * nk * head_dim * hkv * group > 3000000) nq = nq / 2 + 1;
  fcl_attention_desc_init(&d, fclu_range(rng, 1, 2), hkv * group, hkv, nq, nk, head_dim);
  d.causal = index == 4 ? 1 : fclu_uniform(rng) < 0.5;
  return d;
}

/* max |x - ref| of each gradient. */
static void grad_errors(const th_problem *p, const th_backward *run,
                        const th_grad_reference *ref, double err[3]) {
  err[0] = fclu_max_abs_err(run->dq, ref->dq, p->q_elems);
  err[1] = fclu_max_abs_err(run->dk, ref->dk, p->kv_elems);
  err[2] = fclu_max_abs_err(run->dv, ref->dv, p->kv_elems);
}

/* Runs both algorithms on one problem and holds flash to the rule; adds the
 * worst ratio flash / (naive + floor) of each gradient to ratio[]. */
static void compare_one(fcl_context *ctx, const fcl_attention_desc *desc, uint64_t seed,
                        double ratio[3]) {
  char what[200];
  th_describe(desc, what, sizeof what);
  th_problem p;
  th_problem_init(&p, ctx, desc, seed, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, seed);
  th_grad_reference ref = th_reference_backward(&p, &g);
  th_backward flash = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_msg(flash.status == FCL_SUCCESS, "%s: flash: %s: %s", what,
                fcl_status_str(flash.status), fcl_context_last_error(ctx));
  th_backward naive = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert_msg(naive.status == FCL_SUCCESS, "%s: naive: %s: %s", what,
                fcl_status_str(naive.status), fcl_context_last_error(ctx));
  double fe[3], ne[3];
  grad_errors(&p, &flash, &ref, fe);
  grad_errors(&p, &naive, &ref, ne);
  /* What flash's reading D from the stored O costs, which the naive
   * algorithm never pays (th_d_floor): with one key the exact dS is 0 and
   * the naive error can be 0, while D's rounding moves flash's dK. */
  th_reference fwd = th_reference_forward(&p);
  double from_d[3];
  th_d_floor(&p, &g, fwd.o, from_d);
  th_reference_free(&fwd);
  for (int i = 0; i < 3; ++i) {
    const double floor = from_d[i] + ERR_FLOOR;
    ck_assert_msg(fe[i] <= ERR_FACTOR * ne[i] + floor,
                  "%s: flash %s error %g > %g x naive error %g + %g", what, grad_names[i],
                  fe[i], ERR_FACTOR, ne[i], floor);
    double r = fe[i] / (ne[i] + floor);
    if (r > ratio[i]) ratio[i] = r;
  }
  th_backward_free(&flash);
  th_backward_free(&naive);
  th_grad_reference_free(&ref);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
}

START_TEST(backward_matches_reference_on_random_shapes) {
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 50);
  double ratio[3] = {0, 0, 0};
  for (int i = 0; i < RANDOM_SHAPES; ++i) {
    fcl_attention_desc desc = random_desc(&rng, i);
    compare_one(ctx, &desc, 200 + (uint64_t)i, ratio);
  }
  printf("backward: %d random shapes, worst flash/(naive + floor) error ratio "
         "dQ %.3f dK %.3f dV %.3f\n",
         RANDOM_SHAPES, ratio[0], ratio[1], ratio[2]);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(backward_survives_logits_of_1e4) {
  /* At logits of 1e4 one ulp of a logit moves P by 1e-3 relative, and the
   * naive algorithm's error can be 0 by luck (one key whose logit its GEMM
   * rounds exactly as the reference does), so the rule gets a floor of a
   * few ulps of the logits, plus what flash's reading D from the stored O
   * costs (th_d_floor): with P one-hot the exact dS is 0, and the scale of
   * 1e4 / |q.k| multiplies the rounding of D. What matters here is that
   * nothing overflows. */
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 51);
  const double logit_ulp = 0x1p-10;  /* of numbers in [8192, 16384) */
  for (int i = 0; i < 4; ++i) {
    fcl_attention_desc desc = random_desc(&rng, 6 + i);
    desc.scale = (float)(1e4 / (3.0 * sqrt((double)desc.head_dim)));
    char what[200];
    th_describe(&desc, what, sizeof what);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 400 + (uint64_t)i, 1.0);
    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 400 + (uint64_t)i);
    th_grad_reference ref = th_reference_backward(&p, &g);
    th_backward flash = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
    th_backward naive = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
    ck_assert_int_eq(flash.status, FCL_SUCCESS);
    ck_assert_int_eq(naive.status, FCL_SUCCESS);
    double fe[3], ne[3];
    grad_errors(&p, &flash, &ref, fe);
    grad_errors(&p, &naive, &ref, ne);
    const double *refs[3] = {ref.dq, ref.dk, ref.dv};
    const size_t len[3] = {p.q_elems, p.kv_elems, p.kv_elems};
    th_reference fwd = th_reference_forward(&p);
    double from_d[3];
    th_d_floor(&p, &g, fwd.o, from_d);
    th_reference_free(&fwd);
    for (int j = 0; j < 3; ++j) {
      const double floor =
          8 * logit_ulp * fclu_max_abs(refs[j], len[j]) + from_d[j] + ERR_FLOOR;
      ck_assert_msg(fe[j] <= ERR_FACTOR * ne[j] + floor, "%s: %s flash %g naive %g floor %g",
                    what, grad_names[j], fe[j], ne[j], floor);
    }
    th_backward_free(&flash);
    th_backward_free(&naive);
    th_grad_reference_free(&ref);
    th_grad_inputs_free(&g);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(backward_after_the_flash_forward) {
  /* The pipeline as training runs it: O and LSE from the flash forward. */
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, 150, 97, 64);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 21, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 21);
  ck_assert_int_eq(fcl_attention_forward(ctx, &desc, FCL_ALGO_FLASH, p.dq, p.dk, p.dv,
                                         g.d_o, g.d_lse, NULL),
                   FCL_SUCCESS);
  th_grad_reference ref = th_reference_backward(&p, &g);
  th_backward flash = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  th_backward naive = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert_int_eq(flash.status, FCL_SUCCESS);
  ck_assert_int_eq(naive.status, FCL_SUCCESS);
  double fe[3], ne[3];
  grad_errors(&p, &flash, &ref, fe);
  grad_errors(&p, &naive, &ref, ne);
  for (int i = 0; i < 3; ++i)
    ck_assert_msg(fe[i] <= ERR_FACTOR * ne[i] + ERR_FLOOR, "%s: flash %g naive %g",
                  grad_names[i], fe[i], ne[i]);
  th_backward_free(&flash);
  th_backward_free(&naive);
  th_grad_reference_free(&ref);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(backward_rows_that_see_no_key_give_zero_gradients) {
  fcl_context *ctx = th_context();
  const fcl_algo algo = (fcl_algo)_i;
  fcl_attention_desc desc;
  /* 200 queries, 30 keys: causal rows 0..169 see nothing, including whole
   * work-groups and tiles of them. */
  fcl_attention_desc_init(&desc, 1, 4, 2, 200, 30, 64);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 22, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 22);
  th_backward run = th_run_backward(ctx, &p, &g, algo);
  ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  th_assert_blind_rows(&desc, run.dq, NULL, algo == FCL_ALGO_FLASH ? "flash dQ" : "naive dQ");
  for (size_t i = 0; i < p.kv_elems; ++i)
    ck_assert_msg(isfinite(run.dk[i]) && isfinite(run.dv[i]), "%s dK/dV[%zu]",
                  fcl_algo_name(algo), i);
  th_grad_reference ref = th_reference_backward(&p, &g);
  double err[3];
  grad_errors(&p, &run, &ref, err);
  for (int i = 0; i < 3; ++i) ck_assert_msg(err[i] < 1e-4, "%s %g", grad_names[i], err[i]);
  th_grad_reference_free(&ref);
  th_backward_free(&run);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* REPEATS - 1 more flash backwards of p give `first`'s gradients bit for
 * bit (the harness reads them back as floats). */
static void assert_repeatable(fcl_context *ctx, const th_problem *p, const th_grad_inputs *g,
                              const th_backward *first, const char *what) {
  for (int i = 1; i < REPEATS; ++i) {
    th_backward again = th_run_backward(ctx, p, g, FCL_ALGO_FLASH);
    ck_assert_int_eq(again.status, FCL_SUCCESS);
    ck_assert_msg(!memcmp(first->dq, again.dq, p->q_elems * sizeof(float)), "%s dQ, run %d",
                  what, i);
    ck_assert_msg(!memcmp(first->dk, again.dk, p->kv_elems * sizeof(float)), "%s dK, run %d",
                  what, i);
    ck_assert_msg(!memcmp(first->dv, again.dv, p->kv_elems * sizeof(float)), "%s dV, run %d",
                  what, i);
    th_backward_free(&again);
  }
}

START_TEST(flash_backward_is_bit_identical_run_to_run) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 6, 2, 77, 150, 96);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 23, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 23);
  th_backward first = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_int_eq(first.status, FCL_SUCCESS);
  assert_repeatable(ctx, &p, &g, &first, "f32");
  th_backward_free(&first);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(backward_counted_bytes_equal_the_model) {
  fcl_context *ctx = th_context();
  ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
  static const th_shape shapes[] = {
      /* two head_dim buckets (16 and 64), each causal and not, so that
       * few instrumented variants get built */
      {1, 2, 2, 113, 257, 64, 1}, {2, 6, 2, 257, 113, 40, 1}, {1, 4, 1, 7, 300, 13, 0},
      {2, 3, 3, 129, 129, 16, 1}, {1, 2, 1, 1, 1, 16, 1},     {1, 3, 1, 300, 33, 61, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    fcl_attention_desc desc = th_shape_desc(&shapes[i], FCL_DTYPE_F32);
    char what[200];
    th_describe(&desc, what, sizeof what);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 300 + i, 1.0);
    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 300 + i);
    for (int algo = FCL_ALGO_FLASH; algo <= FCL_ALGO_NAIVE; ++algo) {
      th_backward run = th_run_backward(ctx, &p, &g, (fcl_algo)algo);
      ck_assert_msg(run.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
      ck_assert_msg(run.info.bytes_counted == run.info.bytes_model,
                    "%s, %s: counted %llu bytes, the model says %llu", what,
                    fcl_algo_name((fcl_algo)algo),
                    (unsigned long long)run.info.bytes_counted,
                    (unsigned long long)run.info.bytes_model);
      ck_assert(run.info.flops == fcl_attention_flops(&desc, FCL_PASS_BACKWARD));
      th_backward_free(&run);
    }
    th_grad_inputs_free(&g);
    th_problem_free(&p);
  }
  /* the MMA kernels (emulated where the device has no matrix
   * instructions): one warp per 16 rows, and warp pairs */
  const th_shape gqa = {1, 2, 1, 50, 70, 64, 1};
  fcl_attention_desc desc = th_shape_desc(&gqa, FCL_DTYPE_F32);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 310, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 310);
  for (unsigned tpr = 4; tpr <= 8; tpr += 4) {
    const fcl_plan mma = {.kernel = FCL_FLASH_KERNEL_MMA, .threads_per_row = tpr};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &mma), FCL_SUCCESS);
    th_backward run = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    ck_assert_msg(run.info.bytes_counted == run.info.bytes_model,
                  "MMA, threads_per_row %u: counted %llu bytes, the model says %llu", tpr,
                  (unsigned long long)run.info.bytes_counted,
                  (unsigned long long)run.info.bytes_model);
    th_backward_free(&run);
  }
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_backward_chunks_when_p_does_not_fit) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 6, 2, 37, 41, 16);
  desc.causal = 1;
  /* Room for P and dP of one slice at a time (plus CLBlast's share). */
  const size_t slice = 2 * desc.seqlen_q * desc.seqlen_k * sizeof(float);
  ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 2 * slice + 16), FCL_SUCCESS);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 24, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 24);
  th_grad_reference ref = th_reference_backward(&p, &g);
  th_backward run = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  ck_assert_uint_eq(run.info.chunks, desc.batch * desc.heads_q);
  double err[3];
  grad_errors(&p, &run, &ref, err);
  for (int i = 0; i < 3; ++i) ck_assert_msg(err[i] < 1e-4, "%s %g", grad_names[i], err[i]);
  /* The same gradients as in one chunk: the GQA sums run in the same order. */
  ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 0), FCL_SUCCESS);
  th_backward whole = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert_int_eq(whole.status, FCL_SUCCESS);
  ck_assert_uint_eq(whole.info.chunks, desc.batch * (desc.heads_q / desc.heads_kv));
  double werr[3];
  grad_errors(&p, &whole, &ref, werr);
  for (int i = 0; i < 3; ++i) ck_assert_msg(werr[i] < 1e-4, "%s %g", grad_names[i], werr[i]);

  /* One slice's P and dP exceed the limit: out of memory, nothing written. */
  ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, slice - 1), FCL_SUCCESS);
  th_backward none = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert_int_eq(none.status, FCL_ERROR_OUT_OF_MEMORY);
  ck_assert_msg(strstr(fcl_context_last_error(ctx), "P and dP"), "%s",
                fcl_context_last_error(ctx));
  for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(none.dq[i]));
  th_backward_free(&none);
  th_backward_free(&whole);
  th_backward_free(&run);
  th_grad_reference_free(&ref);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(backward_outputs_are_untouched_or_whole_when_an_enqueue_fails) {
  fcl_context *ctx = th_context();
  const fcl_algo algo = (fcl_algo)_i;
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 4, 2, 33, 40, 24);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 25, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 25);
  th_backward good = th_run_backward(ctx, &p, &g, algo);
  ck_assert_int_eq(good.status, FCL_SUCCESS);
  /* Fail the 1st, 2nd, ... enqueue until a run gets through. */
  int failures = 0;
  for (long n = 1; n < 200; ++n) {
    fcl__inject_failures(ctx, FCL_INJECT_ENQUEUE, n);
    th_backward run = th_run_backward(ctx, &p, &g, algo);
    fcl__inject_failures(ctx, 0, 0);
    const int whole = run.status == FCL_SUCCESS;
    const float *got[3] = {run.dq, run.dk, run.dv}, *want[3] = {good.dq, good.dk, good.dv};
    const size_t len[3] = {p.q_elems, p.kv_elems, p.kv_elems};
    for (int i = 0; i < 3; ++i) {
      int state = th_untouched_or_whole(got[i], want[i], len[i]);
      ck_assert_msg(state >= 0, "%s, enqueue %ld failing: %s half written",
                    fcl_algo_name(algo), n, grad_names[i]);
      ck_assert(!whole || state == 0);
    }
    th_backward_free(&run);
    if (whole) break;
    ++failures;
  }
  ck_assert_int_gt(failures, 1);
  th_backward_free(&good);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* _i = 0: the planner's kernels; 1: the MMA kernels forced (emulated where
 * the device has no matrix instructions); 2: their warp pairs, which
 * split head_dim (64 here). Forced kernels must also be bit-identical run
 * to run. */
START_TEST(flash_backward_in_half_storage) {
  fcl_context *ctx = th_context();
  if (_i) {
    const fcl_plan mma = {.kernel = FCL_FLASH_KERNEL_MMA, .threads_per_row = _i == 2 ? 8 : 0};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &mma), FCL_SUCCESS);
  }
  const fcl_dtype dtypes[] = {FCL_DTYPE_F16, FCL_DTYPE_BF16};
  for (size_t t = 0; t < 2; ++t) {
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 1, 4, 2, 70, 90, _i == 2 ? 64 : 40);
    desc.causal = 1;
    desc.dtype = dtypes[t];
    th_problem p;
    th_problem_init(&p, ctx, &desc, 26, 1.0);
    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 26);
    th_grad_reference ref = th_reference_backward(&p, &g);
    th_backward run = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    if (_i == 2) ck_assert_uint_eq(run.info.plan.threads_per_row, 8);
    /* Storing rounds each gradient by half an ulp of the type; O and LSE
     * rounded to it move the result by about as much again. */
    const double ulp = desc.dtype == FCL_DTYPE_F16 ? 0x1p-10 : 0x1p-7;
    double err[3];
    grad_errors(&p, &run, &ref, err);
    const double *refs[3] = {ref.dq, ref.dk, ref.dv};
    const size_t len[3] = {p.q_elems, p.kv_elems, p.kv_elems};
    for (int i = 0; i < 3; ++i) {
      double tol = 2 * ulp * fclu_max_abs(refs[i], len[i]) + 1e-5;
      ck_assert_msg(err[i] <= tol, "%s %s: error %g > %g", fcl_dtype_name(desc.dtype),
                    grad_names[i], err[i], tol);
    }
    if (_i) assert_repeatable(ctx, &p, &g, &run, fcl_dtype_name(desc.dtype));
    th_backward_free(&run);
    th_grad_reference_free(&ref);
    th_grad_inputs_free(&g);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(flash_backward_tiling_override_gives_the_same_answer) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 3, 1, 70, 90, 64);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 27, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 27);
  th_grad_reference ref = th_reference_backward(&p, &g);
  const fcl_plan hints[] = {
      {.wg_size = 64, .threads_per_row = 8, .rows_per_thread = 1},
      {.wg_size = 32, .threads_per_row = 1, .rows_per_thread = 2},
      {.wg_size = 16, .threads_per_row = 4, .rows_per_thread = 3},
      /* the MMA kernels (emulated where the device has no matrix
       * instructions): one warp per 16 rows, and warp pairs that split
       * head_dim */
      {.wg_size = 64, .threads_per_row = 4, .rows_per_thread = 2,
       .kernel = FCL_FLASH_KERNEL_MMA},
      {.wg_size = 128, .threads_per_row = 8, .rows_per_thread = 2,
       .kernel = FCL_FLASH_KERNEL_MMA},
  };
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; ++i) {
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hints[i]), FCL_SUCCESS);
    th_backward run = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    ck_assert_uint_eq(run.info.plan.threads_per_row, hints[i].threads_per_row);
    ck_assert_uint_eq(run.info.plan.block_q, hints[i].wg_size / hints[i].threads_per_row *
                                                 hints[i].rows_per_thread);
    double err[3];
    grad_errors(&p, &run, &ref, err);
    for (int j = 0; j < 3; ++j)
      ck_assert_msg(err[j] < 1e-4, "hint %zu: %s error %g", i, grad_names[j], err[j]);
    th_backward_free(&run);
  }
  th_grad_reference_free(&ref);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("backward");
  TCase *tc = th_tcase("backward");
  tcase_add_test(tc, backward_matches_reference_on_random_shapes);
  tcase_add_test(tc, backward_survives_logits_of_1e4);
  tcase_add_test(tc, backward_after_the_flash_forward);
  tcase_add_loop_test(tc, backward_rows_that_see_no_key_give_zero_gradients, FCL_ALGO_FLASH,
                      FCL_ALGO_NAIVE + 1);
  tcase_add_test(tc, flash_backward_is_bit_identical_run_to_run);
  tcase_add_test(tc, backward_counted_bytes_equal_the_model);
  tcase_add_test(tc, naive_backward_chunks_when_p_does_not_fit);
  tcase_add_loop_test(tc, backward_outputs_are_untouched_or_whole_when_an_enqueue_fails,
                      FCL_ALGO_FLASH, FCL_ALGO_NAIVE + 1);
  tcase_add_loop_test(tc, flash_backward_in_half_storage, 0, 3);
  tcase_add_test(tc, flash_backward_tiling_override_gives_the_same_answer);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
