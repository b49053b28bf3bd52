/*
 * test_mma.c — what the f32 tensor-core kernels assume of the instructions
 * they hand their operands to (cl/mma.cl), checked on one 16 x 8 x 8 product
 * (cl/mma_probe.cl) on the test device:
 *   - a tf32 operand's 13 low bits are ignored, which tf32_operand relies on
 *     to round with one integer addition;
 *   - operands split into big and small tf32 parts (3xTF32) multiply at f32
 *     accuracy, on random inputs against a float64 product;
 *   - NaN and infinite operands give NaN and non-finite products.
 * Without NVIDIA's instructions the emulation runs, which models the same
 * assumptions: there the tests check the model.
 *
 * Also the MMA forward with two 16-row tiles a warp (M_TILES 2: a hint's
 * rows_per_thread 4), which shares each K and V fragment between them and
 * keeps Q in local memory beyond head_dim 64: on shapes of every storage
 * type, head_dim 32 to 128, causal and windowed masks, packed GQA heads,
 * ragged batches and key splits, its error against the float64 reference
 * is held to twice that of one tile a warp (the other suites' kernel) on
 * the same inputs, plus the stored type's rounding.
 */
#include "harness.h"
#include "resources.h"
#include "program.h"
#include "rules.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define M 16
#define N 8
#define K 8

/* c (M x N) = a (M x K) b (K x N) through mma_tf32 (split 0) or split_tf32
 * and mma_3xtf32 (split 1), c poisoned first with `poison`. */
static void run_probe(fcl_context *ctx, int split, const float *a, const float *b, float *c,
                      float poison) {
  fcl__options opts;
  fcl__options_init(&opts);
  fcl__options_define(&opts, "FCL_DTYPE", 0);
  fcl__options_define(&opts, "MMA_EMULATE", !fcl__mma_native(&ctx->info.limits));
  fcl__options_define(&opts, "SPLIT", split);
  cl_kernel kernel = NULL;
  fcl_status status = fcl__kernel(ctx, FCL_SRC_MMA_PROBE, &opts, "mma_probe", &kernel);
  ck_assert_msg(status == FCL_SUCCESS, "building the probe: %s",
                fcl_context_last_error(ctx));

  for (size_t i = 0; i < M * N; ++i) c[i] = poison;
  cl_mem da = fclu_upload(ctx, a, M * K, FCL_DTYPE_F32);
  cl_mem db = fclu_upload(ctx, b, K * N, FCL_DTYPE_F32);
  cl_mem dc = fclu_upload(ctx, c, M * N, FCL_DTYPE_F32);
  ck_assert(da && db && dc);
  const fcl__arg args[] = {FCL_ARG(da), FCL_ARG(db), FCL_ARG(dc)};
  const size_t warp = 32;
  status = fcl__set_args(ctx, kernel, "mma_probe", args, 3);
  if (status == FCL_SUCCESS) status = fcl__launch(ctx, kernel, "mma_probe", 1, &warp, &warp);
  ck_assert_msg(status == FCL_SUCCESS, "running the probe: %s", fcl_context_last_error(ctx));
  ck_assert_int_eq(fclu_download(ctx, dc, c, M * N, FCL_DTYPE_F32), 0);
  clReleaseMemObject(da);
  clReleaseMemObject(db);
  clReleaseMemObject(dc);
  fcl__kernel_return(ctx, &kernel);
}

/* Row r of a times column n of b in float64; *abs_sum (if not NULL) gets
 * the sum of the products' magnitudes. */
static double dot(const float *a, const float *b, size_t r, size_t n, double *abs_sum) {
  double sum = 0, magnitude = 0;
  for (size_t k = 0; k < K; ++k) {
    sum += (double)a[r * K + k] * b[k * N + n];
    magnitude += fabs((double)a[r * K + k] * b[k * N + n]);
  }
  if (abs_sum) *abs_sum = magnitude;
  return sum;
}

static float with_bits(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}
static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* a's elements: an 11-bit significand (a tf32) times 2^[-2, 2] with random
 * low 13 bits under it; b's: 0 or +-2^[-1, 1]. Every product and sum of the
 * truncated operands is then exact in f32, whatever order the instructions
 * add in, so c must equal the float64 product of the truncated a exactly;
 * with the low bits read, it could not (checked below for this draw). */
START_TEST(tf32_operands_lose_their_low_13_bits) {
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 1);
  float a[M * K], truncated[M * K], b[K * N], c[M * N];
  for (size_t i = 0; i < M * K; ++i) {
    truncated[i] = (float)((1024 + (double)fclu_range(&rng, 0, 1023)) / 1024 *
                           ldexp(1.0, (int)fclu_range(&rng, 0, 4) - 2) *
                           (fclu_range(&rng, 0, 1) ? -1 : 1));
    a[i] = with_bits(bits_of(truncated[i]) | (uint32_t)fclu_range(&rng, 1, 0x1fff));
  }
  for (size_t i = 0; i < K * N; ++i)
    b[i] = fclu_range(&rng, 0, 4) == 0 ? 0.0f
                                       : (float)(ldexp(1.0, (int)fclu_range(&rng, 0, 2) - 1) *
                                                 (fclu_range(&rng, 0, 1) ? -1 : 1));
  run_probe(ctx, 0, a, b, c, NAN);
  size_t read_differs = 0;
  for (size_t r = 0; r < M; ++r)
    for (size_t n = 0; n < N; ++n) {
      const double want = dot(truncated, b, r, n, NULL), full = dot(a, b, r, n, NULL);
      read_differs += (float)full != (float)want;
      ck_assert_msg(c[r * N + n] == (float)want,
                    "c[%zu][%zu] = %.9g, want %.9g (the operands truncated to tf32); "
                    "with all their bits it would be %.9g",
                    r, n, (double)c[r * N + n], want, full);
    }
  ck_assert_msg(read_differs > M * N / 2, "only %zu of %d products tell the bits apart",
                read_differs, M * N);
  fcl_context_release(ctx);
}
END_TEST

/* Random normal operands, split: each product is within 3 * 2^-22 of exact
 * (two splits' remainders and the dropped small * small), and each of the
 * three instructions may truncate c by an ulp: 2^-19 of sum |a b| leaves
 * a factor of two to spare, where one tf32 product (no split) is off by
 * about 2^-11. */
START_TEST(split_operands_multiply_at_f32_accuracy) {
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 2);
  float a[M * K], b[K * N], c[M * N];
  fclu_fill_normal(&rng, a, M * K, 1.0, FCL_DTYPE_F32);
  fclu_fill_normal(&rng, b, K * N, 1.0, FCL_DTYPE_F32);
  run_probe(ctx, 1, a, b, c, NAN);
  double worst = 0;
  for (size_t r = 0; r < M; ++r)
    for (size_t n = 0; n < N; ++n) {
      double magnitude;
      const double want = dot(a, b, r, n, &magnitude);
      const double error = fabs(c[r * N + n] - want) / magnitude;
      worst = error > worst ? error : worst;
      ck_assert_msg(error <= 0x1p-19, "c[%zu][%zu] = %.9g, want %.9g: %.3g of sum |a b|", r,
                    n, (double)c[r * N + n], want, error);
    }
  printf("mma: split products within %.2f * 2^-22 of sum |a b|\n", worst * 0x1p22);
  fcl_context_release(ctx);
}
END_TEST

/* NaN operands (the quiet NaN of C, and the all-ones one GPUs produce)
 * make their rows NaN; an infinite one makes its row non-finite. */
START_TEST(nonfinite_operands_stay_nonfinite) {
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 3);
  float a[M * K], b[K * N], c[M * N];
  fclu_fill_normal(&rng, a, M * K, 1.0, FCL_DTYPE_F32);
  for (size_t i = 0; i < K * N; ++i) b[i] = (float)(0.5 + fclu_uniform(&rng));
  const float bad[] = {NAN, with_bits(0x7fffffffu), with_bits(0xffffffffu), INFINITY,
                       -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) a[(2 * i + 1) * K + i] = bad[i];
  run_probe(ctx, 1, a, b, c, -7.0f);
  for (size_t r = 0; r < M; ++r) {
    const size_t i = (r - 1) / 2;
    const int planted = r % 2 == 1 && i < sizeof bad / sizeof *bad;
    for (size_t n = 0; n < N; ++n) {
      const float x = c[r * N + n];
      if (!planted)
        ck_assert_msg(isfinite(x) && x != -7.0f, "c[%zu][%zu] = %g: want a product", r, n,
                      (double)x);
      else if (isnan(bad[i]))
        ck_assert_msg(isnan(x), "row %zu holds NaN 0x%08x: c[%zu] = %g, want NaN", r,
                      bits_of(bad[i]), n, (double)x);
      else
        ck_assert_msg(!isfinite(x), "row %zu holds %g: c[%zu] = %g, want NaN or inf", r,
                      (double)bad[i], n, (double)x);
    }
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- two row tiles a warp ------------------------------------------------ */

typedef struct tiles_case {
  fcl_dtype dtype;
  size_t b, hq, hkv, nq, nk, d;
  int causal, wl, wr;
  unsigned splits, packed;             /* the hint's; 0: the planner's */
  const int32_t *cu_q, *cu_k;          /* ragged: b + 1 offsets each, or NULL */
} tiles_case;

/* Ragged batches (nq, nk: their longest sequences), with a sequence of
 * one token and one of none. */
static const int32_t ragged_q[4] = {0, 1, 50, 120}, ragged_k[4] = {0, 60, 60, 180};
static const int32_t ragged_q2[3] = {0, 31, 64}, ragged_k2[3] = {0, 100, 200};

static const tiles_case tiles_cases[] = {
    {FCL_DTYPE_F16, 2, 4, 2, 70, 90, 64, 1, -1, -1, 0, 0, NULL, NULL},
    {FCL_DTYPE_BF16, 1, 2, 2, 100, 80, 128, 0, -1, -1, 0, 0, NULL, NULL},
    {FCL_DTYPE_F32, 1, 2, 1, 65, 130, 64, 1, -1, -1, 0, 0, NULL, NULL},
    {FCL_DTYPE_F32, 1, 2, 2, 40, 70, 128, 0, 8, 3, 0, 0, NULL, NULL},
    {FCL_DTYPE_F16, 2, 8, 2, 12, 150, 32, 1, -1, -1, 3, 4, NULL, NULL},
    {FCL_DTYPE_BF16, 1, 4, 1, 5, 300, 96, 0, 50, -1, 2, 4, NULL, NULL},
    {FCL_DTYPE_F16, 3, 2, 1, 70, 120, 128, 1, -1, -1, 0, 0, ragged_q, ragged_k},
    {FCL_DTYPE_BF16, 1, 1, 1, 33, 47, 48, 0, 5, 5, 0, 0, NULL, NULL},
    {FCL_DTYPE_F32, 2, 3, 3, 33, 100, 32, 1, -1, -1, 2, 0, ragged_q2, ragged_k2},
    {FCL_DTYPE_F16, 1, 2, 2, 96, 96, 80, 1, -1, -1, 2, 0, NULL, NULL},
};
#define TILES_CASES (int)(sizeof tiles_cases / sizeof *tiles_cases)

/* The forward of p under `hint` (the MMA kernel), which must run. */
static th_forward hinted_forward(fcl_context *ctx, const th_problem *p, const fcl_plan *hint) {
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, hint), FCL_SUCCESS);
  th_forward r = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(r.status == FCL_SUCCESS, "MMA forward (rows_per_thread %u, v_stages %u): %s",
                hint->rows_per_thread, hint->v_stages, fcl_context_last_error(ctx));
  ck_assert_uint_eq(r.info.plan.kernel, FCL_FLASH_KERNEL_MMA);
  if (hint->packed_heads) ck_assert_uint_eq(r.info.plan.packed_heads, hint->packed_heads);
  return r;
}

/* The forward of p with the MMA kernel, `m_tiles` row tiles a warp. */
static th_forward mma_forward(fcl_context *ctx, const th_problem *p, const tiles_case *c,
                              unsigned m_tiles) {
  const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_MMA,
                         .rows_per_thread = 2 * m_tiles,
                         .splits = c->splits,
                         .packed_heads = c->packed};
  th_forward r = hinted_forward(ctx, p, &hint);
  const fcl_plan *plan = &r.info.plan;
  ck_assert_uint_eq(plan->rows_per_thread, 2 * m_tiles);
  ck_assert_uint_eq(plan->block_q, 16 * m_tiles * (plan->wg_size / 32));
  return r;
}

/* A case's problem (seeded by `seed`) and its description. */
static void case_problem(fcl_context *ctx, const tiles_case *c, uint64_t seed, th_problem *p,
                         char *what, size_t what_len) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->nq, c->nk, c->d);
  desc.dtype = c->dtype;
  desc.causal = c->causal;
  desc.window_left = c->wl;
  desc.window_right = c->wr;
  desc.cu_seqlens_q = c->cu_q;
  desc.cu_seqlens_k = c->cu_k;
  th_describe(&desc, what, what_len);
  th_problem_init(p, ctx, &desc, seed, 1.0);
}

/* A case's outputs: the elements of O and LSE of its batch's tokens (the
 * first of the buffers'). */
typedef struct case_outputs {
  size_t o, lse;
} case_outputs;

static case_outputs outputs_of(const tiles_case *c) {
  const size_t tokens = c->cu_q ? (size_t)c->cu_q[c->b] : c->b * c->nq;
  return (case_outputs){tokens * c->hq * c->d, tokens * c->hq};
}

/* A forward's largest error against the reference over O and LSE. */
static double error_of(const th_forward *r, const th_reference *ref, case_outputs n) {
  return fmax(fclu_max_abs_err(r->o, ref->o, n.o), fclu_max_abs_err(r->lse, ref->lse, n.lse));
}

/* What the rule (twice another tiling's error) allows beyond it: half an
 * ulp of the output's size in 16-bit types, and 1e-6. */
static double floor_of(const tiles_case *c, const th_reference *ref, case_outputs n) {
  const double ref_max = fclu_max_abs(ref->o, n.o);
  return th_half_ulp(c->dtype) * ref_max + 1e-6 * fmax(1.0, ref_max);
}

static int same_bits(const th_forward *a, const th_forward *b, case_outputs n) {
  return !memcmp(a->o, b->o, n.o * sizeof *a->o) && !memcmp(a->lse, b->lse, n.lse * sizeof *a->lse);
}

/* Frees a case's two forwards, its reference, its problem and its context. */
static void case_done(fcl_context *ctx, th_problem *p, th_reference *ref, th_forward *a,
                      th_forward *b) {
  th_forward_free(a);
  th_forward_free(b);
  th_reference_free(ref);
  th_problem_free(p);
  fcl_context_release(ctx);
}

START_TEST(two_row_tiles_a_warp_match_the_reference) {
  const tiles_case *c = &tiles_cases[_i];
  fcl_context *ctx = th_context();
  char what[200];
  th_problem p;
  case_problem(ctx, c, 700 + (uint64_t)_i, &p, what, sizeof what);
  th_reference ref = th_reference_forward(&p);
  th_forward one = mma_forward(ctx, &p, c, 1), two = mma_forward(ctx, &p, c, 2);
  const case_outputs n = outputs_of(c);
  const double err_one = error_of(&one, &ref, n), err_two = error_of(&two, &ref, n);
  const double floor = floor_of(c, &ref, n);
  ck_assert_msg(err_two <= 2 * err_one + floor,
                "%s, splits %u: two row tiles a warp off by %g, one by %g (floor %g)", what,
                two.info.plan.splits, err_two, err_one, floor);
  const int same = same_bits(&one, &two, n);
  printf("mma: %s, splits %u, packed %u: two row tiles a warp (Br %u, Bc %u) off by %.3g, "
         "one by %.3g%s\n",
         what, two.info.plan.splits, two.info.plan.packed_heads, two.info.plan.block_q,
         two.info.plan.block_k, err_two, err_one, same ? " (bit-identical)" : "");
  case_done(ctx, &p, &ref, &one, &two);
}
END_TEST

/* ---- a second V tile ------------------------------------------------------ */

/* With two V tiles (fcl_plan.v_stages 2) the next tile's V arrives a tile
 * ahead; the products, their order and every rounding are one V tile's,
 * so the bits are too (the same tiles, block_k and warps). f32, whose
 * tiles take four barriers, refuses it. */
START_TEST(two_v_tiles_give_one_v_tiles_bits) {
  const tiles_case *c = &tiles_cases[_i];
  fcl_context *ctx = th_context();
  char what[200];
  th_problem p;
  case_problem(ctx, c, 900 + (uint64_t)_i, &p, what, sizeof what);
  const fcl_plan three_hint = {.kernel = FCL_FLASH_KERNEL_MMA, .v_stages = 3};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &three_hint), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(fcl_context_last_error(ctx), "v_stages"), "%s",
                fcl_context_last_error(ctx));
  const fcl_plan two_hint = {.kernel = FCL_FLASH_KERNEL_MMA, .v_stages = 2,
                             .splits = c->splits, .packed_heads = c->packed};
  if (c->dtype == FCL_DTYPE_F32) {
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &two_hint), FCL_SUCCESS);
    th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
    ck_assert_msg(r.status == FCL_ERROR_UNSUPPORTED &&
                      strstr(fcl_context_last_error(ctx), "v_stages"),
                  "%s: f32 with two V tiles gave %s (%s)", what, fcl_status_str(r.status),
                  fcl_context_last_error(ctx));
    th_forward_free(&r);
    th_problem_free(&p);
    fcl_context_release(ctx);
    return;
  }
  th_reference ref = th_reference_forward(&p);
  th_forward two = hinted_forward(ctx, &p, &two_hint);
  ck_assert_uint_eq(two.info.plan.v_stages, 2);
  ck_assert_uint_le(two.info.plan.block_k, 64);
  const fcl_plan one_hint = {.kernel = FCL_FLASH_KERNEL_MMA, .v_stages = 1,
                             .block_k = two.info.plan.block_k,
                             .wg_size = two.info.plan.wg_size,
                             .splits = two.info.plan.splits, .packed_heads = c->packed};
  th_forward one = hinted_forward(ctx, &p, &one_hint);
  ck_assert_uint_eq(one.info.plan.v_stages, 1);
  ck_assert_uint_eq(one.info.plan.local_bytes + two.info.plan.block_k *
                        (two.info.plan.head_dim_padded + 8) * 2,
                    two.info.plan.local_bytes);
  const case_outputs n = outputs_of(c);
  const double err = error_of(&two, &ref, n), floor = floor_of(c, &ref, n);
  /* and within the rule of the planner's own tiles (the two row tiles' test) */
  const fcl_plan rules_hint = {.kernel = FCL_FLASH_KERNEL_MMA, .splits = c->splits,
                               .packed_heads = c->packed};
  th_forward rules = hinted_forward(ctx, &p, &rules_hint);
  const double err_rules = error_of(&rules, &ref, n);
  ck_assert_msg(err <= 2 * err_rules + floor,
                "%s: two V tiles off by %g, the planner's tiles by %g (floor %g)", what, err,
                err_rules, floor);
  ck_assert_msg(same_bits(&one, &two, n),
                "%s: two V tiles (Bc %u, %u work-items) change the bits of one", what,
                two.info.plan.block_k, two.info.plan.wg_size);
  printf("mma: %s: two V tiles (Br %u, Bc %u, %zu B local) off by %.3g, the bits of one\n", what,
         two.info.plan.block_q, two.info.plan.block_k, two.info.plan.local_bytes, err);
  th_forward_free(&rules);
  case_done(ctx, &p, &ref, &one, &two);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mma");
  TCase *tc = th_tcase("tensor-core operands");
  tcase_add_test(tc, tf32_operands_lose_their_low_13_bits);
  tcase_add_test(tc, split_operands_multiply_at_f32_accuracy);
  tcase_add_test(tc, nonfinite_operands_stay_nonfinite);
  suite_add_tcase(s, tc);
  TCase *tiles = th_tcase("two row tiles a warp");
  tcase_add_loop_test(tiles, two_row_tiles_a_warp_match_the_reference, 0, TILES_CASES);
  suite_add_tcase(s, tiles);
  TCase *stages = th_tcase("two V tiles");
  tcase_add_loop_test(stages, two_v_tiles_give_one_v_tiles_bits, 0, TILES_CASES);
  suite_add_tcase(s, stages);
  return th_run_suite(s);
}
