/*
 * test_flash.c — the flash forward against the float64 reference and the
 * naive baseline, on many random shapes: its error may be at most twice the
 * naive fp32 algorithm's on the same inputs (+1e-6), its LSE within 1e-4
 * relative, also with logits of +-1e4; rows that see no key give zeros and
 * -inf; runs are bit-identical.
 *
 * The main tests loop over the forward kernels: _i = 0 takes the
 * planner's choice (SIMT on CPUs, MMA on tensor-core GPUs), _i = 1 forces
 * the MMA kernel (emulated where the device has no matrix instructions),
 * with head_dims it takes; those of large logits, masked rows and reruns
 * also _i = 2, the MMA kernel with two 16-row tiles per warp (test_mma
 * takes it over more shapes).
 */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANDOM_SHAPES 60
#define ERR_FLOOR 1e-6
#define LSE_REL_TOL 1e-4

/* Sizes that are multiples of nothing, and extremes. */
static size_t pick_seqlen(fclu_rng *rng) {
  static const size_t special[] = {1, 2, 7, 31, 33, 113, 129, 257};
  if (fclu_uniform(rng) < 0.5) return special[fclu_range(rng, 0, 7)];
  return fclu_range(rng, 1, 300);
}

static size_t pick_head_dim(fclu_rng *rng) {
  static const size_t special[] = {16, 256, 64, 128, 8, 24, 40, 96, 160, 200, 3, 13};
  if (fclu_uniform(rng) < 0.5) return special[fclu_range(rng, 0, 11)];
  return 8 * fclu_range(rng, 2, 32);  /* a multiple of 8 in 16..256 */
}

/* A context for loop iteration `kernel` (see the top of the file). */
static fcl_context *kernel_context(int kernel) {
  fcl_context *ctx = th_context();
  if (kernel) {
    const fcl_plan mma = {.kernel = FCL_FLASH_KERNEL_MMA,
                          .rows_per_thread = kernel == 2 ? 4 : 0};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &mma), FCL_SUCCESS);
  }
  return ctx;
}

static const char *kernel_name(int kernel) {
  return kernel == 0 ? "planned" : kernel == 1 ? "MMA" : "MMA, two row tiles a warp";
}

static fcl_attention_desc random_desc(fclu_rng *rng, int index, int kernel) {
  fcl_attention_desc d;
  size_t hkv = fclu_range(rng, 1, 3), group = fclu_range(rng, 1, 3);
  size_t head_dim = index == 0 ? 16 : index == 1 ? 256 : pick_head_dim(rng);
  if (kernel) head_dim = th_mma_head_dim(head_dim);
  size_t nq = index == 2 ? 1 : pick_seqlen(rng), nk = index == 3 ? 1 : pick_seqlen(rng);
  /* Keep each problem small enough for a CPU reference. */
  while (nq * nk * head_dim * hkv * group > 6000000) nq = nq / 2 + 1;
  fcl_attention_desc_init(&d, fclu_range(rng, 1, 2), hkv * group, hkv, nq, nk, head_dim);
  d.causal = fclu_uniform(rng) < 0.5;
  return d;
}

typedef struct compare_result {
  double flash_err, naive_err, lse_err;
} compare_result;

/* Runs both algorithms on a problem and checks flash against the rule:
 * error <= 2 x naive error + floor, LSE within LSE_REL_TOL (+ floor). */
static compare_result compare_problem(fcl_context *ctx, const th_problem *p, double floor) {
  char what[200];
  th_describe(&p->desc, what, sizeof what);
  th_reference ref = th_reference_forward(p);
  th_forward flash = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(flash.status == FCL_SUCCESS, "%s: flash: %s: %s", what,
                fcl_status_str(flash.status), fcl_context_last_error(ctx));
  th_forward naive = th_run_forward(ctx, p, FCL_ALGO_NAIVE, 1);
  ck_assert_msg(naive.status == FCL_SUCCESS, "%s: naive: %s: %s", what,
                fcl_status_str(naive.status), fcl_context_last_error(ctx));
  compare_result r;
  r.flash_err = fclu_max_abs_err(flash.o, ref.o, p->q_elems);
  r.naive_err = fclu_max_abs_err(naive.o, ref.o, p->q_elems);
  ck_assert_msg(r.flash_err <= 2 * r.naive_err + floor,
                "%s: flash error %g > 2 x naive error %g + %g", what, r.flash_err,
                r.naive_err, floor);
  r.lse_err = 0;
  for (size_t i = 0; i < p->lse_elems; ++i) {
    double want = ref.lse[i], got = flash.lse[i];
    if (isinf(want)) {
      ck_assert_msg(got == want, "%s: LSE[%zu] = %g, want %g", what, i, got, want);
      continue;
    }
    double rel = fabs(got - want) / fmax(1.0, fabs(want));
    ck_assert_msg(fabs(got - want) <= LSE_REL_TOL * fmax(1.0, fabs(want)) + floor,
                  "%s: LSE[%zu] = %.9g, want %.9g", what, i, got, want);
    if (rel > r.lse_err) r.lse_err = rel;
  }
  th_forward_free(&flash);
  th_forward_free(&naive);
  th_reference_free(&ref);
  return r;
}

static compare_result compare_one(fcl_context *ctx, const fcl_attention_desc *desc,
                                  uint64_t seed) {
  th_problem p;
  th_problem_init(&p, ctx, desc, seed, 1.0);
  compare_result r = compare_problem(ctx, &p, ERR_FLOOR);
  th_problem_free(&p);
  return r;
}

START_TEST(flash_matches_reference_on_random_shapes) {
  fcl_context *ctx = kernel_context(_i);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed());
  double worst_ratio = 0;
  for (int i = 0; i < RANDOM_SHAPES; ++i) {
    fcl_attention_desc desc = random_desc(&rng, i, _i);
    compare_result r = compare_one(ctx, &desc, 100 + (uint64_t)i);
    double ratio = r.flash_err / (r.naive_err + ERR_FLOOR);
    if (ratio > worst_ratio) worst_ratio = ratio;
  }
  printf("flash (%s): %d random shapes, worst flash/(naive + 1e-6) error ratio %.3f\n",
         kernel_name(_i), RANDOM_SHAPES, worst_ratio);
  fcl_context_release(ctx);
}
END_TEST

/* Every logit of a row near +1e4 or -1e4: the softmax must subtract a max
 * of that magnitude without losing the O(1) differences that matter. One
 * coordinate per (batch, kv head) carries the offset (keys hold OFFSET_KEY
 * there, queries +-1e4 / (OFFSET_KEY * scale)). Where that coordinate falls
 * decides how often a summation adds small terms to the huge partial sum,
 * and every fixed order has placements it handles well and badly; drawing
 * it anew for each of several (batch, kv head) slices makes the maxima
 * compare the two algorithms' worst cases rather than one lucky draw. */
#define OFFSET_KEY 4.0f
START_TEST(flash_matches_at_logits_of_1e4) {
  fcl_context *ctx = kernel_context(_i);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 4);
  double worst_ratio = 0;
  for (int i = 0; i < 8; ++i) {
    fcl_attention_desc desc = random_desc(&rng, 4 + i, _i);
    /* At least 8 slices of at least 64 rows: stable maxima. */
    if (desc.batch * desc.heads_kv < 8) {
      size_t group = desc.heads_q / desc.heads_kv;
      desc.heads_kv = (8 + desc.batch - 1) / desc.batch;
      desc.heads_q = desc.heads_kv * group;
    }
    if (desc.seqlen_q < 64) desc.seqlen_q += 64;
    if (desc.seqlen_k < 32) desc.seqlen_k += 32;
    th_problem p;
    th_problem_init(&p, ctx, &desc, 500 + (uint64_t)i, 1.0);
    const size_t d = desc.head_dim, group = desc.heads_q / desc.heads_kv;
    const float q_offset = 1e4f / (OFFSET_KEY * desc.scale);
    for (size_t b = 0; b < desc.batch; ++b)
      for (size_t hkv = 0; hkv < desc.heads_kv; ++hkv) {
        const size_t c = fclu_range(&rng, 0, d - 1);
        for (size_t j = 0; j < desc.seqlen_k; ++j)
          p.k[((b * desc.seqlen_k + j) * desc.heads_kv + hkv) * d + c] = OFFSET_KEY;
        for (size_t row = 0; row < desc.seqlen_q; ++row)
          for (size_t h = hkv * group; h < (hkv + 1) * group; ++h)
            p.q[((b * desc.seqlen_q + row) * desc.heads_q + h) * d + c] =
                fclu_uniform(&rng) < 0.5 ? q_offset : -q_offset;
      }
    th_problem_upload(&p, ctx);
    compare_result r = compare_problem(ctx, &p, ERR_FLOOR);
    if (getenv("FLASHCL_TEST_VERBOSE")) {
      char what[200];
      printf("  %s: flash %.3g naive %.3g\n", th_describe(&desc, what, sizeof what),
             r.flash_err, r.naive_err);
    }
    double ratio = r.flash_err / (r.naive_err + ERR_FLOOR);
    if (ratio > worst_ratio) worst_ratio = ratio;
    th_problem_free(&p);
  }
  printf("flash (%s): logits at +-1e4, worst flash/(naive + 1e-6) error ratio %.3f\n",
         kernel_name(_i), worst_ratio);
  fcl_context_release(ctx);
}
END_TEST

/* Logits spread over +-1e4 (a huge scale): rows are nearly one-hot, and
 * where two keys come within a few units the output hangs on the rounding
 * of their logits, which no fp32 algorithm computes to better than about
 * FLT_EPSILON * |logit|. The floor (for O and LSE alike) is that intrinsic
 * noise, so the test measures flash against naive rather than two coin
 * flips. */
START_TEST(flash_survives_a_scale_that_spreads_logits_to_1e4) {
  fcl_context *ctx = kernel_context(_i);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 5);
  for (int i = 0; i < 8; ++i) {
    fcl_attention_desc desc = random_desc(&rng, 4 + i, _i);
    /* q.k of unit normals has spread sqrt(d): logits reach about +-1e4. */
    desc.scale = (float)(1e4 / (3.0 * sqrt((double)desc.head_dim)));
    th_problem p;
    th_problem_init(&p, ctx, &desc, 600 + (uint64_t)i, 1.0);
    th_reference ref = th_reference_forward(&p);
    /* A logit L carries a rounding error of a few ulps of L (more in the
     * MMA kernels' 3xTF32 products, which drop the low halves' product:
     * about 2^-22 relative), which changes its weight by as much
     * relatively; O moves by up to that times |v|. */
    double v_max = 0.0;
    for (size_t j = 0; j < p.kv_elems; ++j) v_max = fmax(v_max, fabs((double)p.v[j]));
    double floor = 4 * FLT_EPSILON * fclu_max_abs(ref.lse, p.lse_elems) * v_max;
    th_reference_free(&ref);
    compare_result r = compare_problem(ctx, &p, ERR_FLOOR + floor);
    ck_assert(isfinite(r.flash_err));
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(flash_fully_masked_rows_are_zero_with_lse_minus_inf) {
  fcl_context *ctx = kernel_context(_i);
  fcl_attention_desc desc;
  /* 200 queries, 30 keys: causal rows 0..169 see nothing, including whole
   * work-groups of them. */
  fcl_attention_desc_init(&desc, 1, 2, 2, 200, 30, 64);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 8, 1.0);
  th_forward run = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(run.status, FCL_SUCCESS);
  th_assert_blind_rows(&desc, run.o, run.lse, "O");
  th_forward_free(&run);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(flash_is_bit_identical_run_to_run) {
  fcl_context *ctx = kernel_context(_i);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, 77, 150, 96);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 9, 1.0);
  th_forward first = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(first.status, FCL_SUCCESS);
  for (int i = 0; i < 3; ++i) {
    th_forward again = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
    ck_assert_int_eq(again.status, FCL_SUCCESS);
    ck_assert(!memcmp(first.o, again.o, p.q_elems * sizeof(float)));
    ck_assert(!memcmp(first.lse, again.lse, p.lse_elems * sizeof(float)));
    th_forward_free(&again);
  }
  th_forward_free(&first);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(flash_tiling_override_gives_the_same_answer) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 3, 1, 70, 90, 64);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 10, 1.0);
  th_reference ref = th_reference_forward(&p);
  const fcl_plan hints[] = {
      {.block_k = 16, .wg_size = 64, .threads_per_row = 2, .rows_per_thread = 1},
      {.block_k = 8, .wg_size = 32, .threads_per_row = 4, .rows_per_thread = 2},
      {.block_k = 16, .wg_size = 64, .threads_per_row = 8, .rows_per_thread = 1},
      {.block_k = 32, .wg_size = 64, .threads_per_row = 1, .rows_per_thread = 2},
      /* the H200 plans for head_dim 64 and 128 */
      {.block_k = 16, .wg_size = 128, .threads_per_row = 2, .rows_per_thread = 2},
      {.block_k = 32, .wg_size = 256, .threads_per_row = 2, .rows_per_thread = 1},
  };
  for (size_t i = 0; i < sizeof hints / sizeof hints[0]; ++i) {
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hints[i]), FCL_SUCCESS);
    th_forward run = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    ck_assert_uint_eq(run.info.plan.block_k, hints[i].block_k);
    ck_assert_uint_eq(run.info.plan.threads_per_row, hints[i].threads_per_row);
    ck_assert_msg(fclu_max_abs_err(run.o, ref.o, p.q_elems) < 1e-5, "hint %zu", i);
    th_forward_free(&run);
  }
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("flash");
  TCase *tc = th_tcase("forward");
  tcase_add_loop_test(tc, flash_matches_reference_on_random_shapes, 0, 2);
  tcase_add_loop_test(tc, flash_matches_at_logits_of_1e4, 0, 3);
  tcase_add_loop_test(tc, flash_survives_a_scale_that_spreads_logits_to_1e4, 0, 2);
  tcase_add_loop_test(tc, flash_fully_masked_rows_are_zero_with_lse_minus_inf, 0, 3);
  tcase_add_loop_test(tc, flash_is_bit_identical_run_to_run, 0, 3);
  tcase_add_test(tc, flash_tiling_override_gives_the_same_answer);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
