/*
 * test_wgmma_fwd.c — the forward on Hopper's warpgroup MMA
 * (FCL_FLASH_KERNEL_WGMMA, cl/flash_fwd_wgmma.cl), forced by a hint: its O
 * within the flash suites' rule (twice the naive algorithm's error, plus
 * the 16-bit floor) of the float64 reference, its LSE within twice the
 * MMA forward's error of the same problem, on random inputs and poisoned
 * outputs; the bytes it counts equal the model's; what it refuses.
 *
 * Off NVIDIA cc 9.0 the kernel runs its emulation of the instructions (the
 * same fragments and descriptors, decoded in local memory); on an H100
 * (FLASHCL_TEST_DEVICE=gpu) the instructions, through the sm_90a stage:
 * where the stage refuses, the kernel runs mma.sync on the same tiles and
 * the test fails with the stage's log line.
 */
#include "harness.h"
#include "hostdata.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wg_case {
  fcl_dtype dtype;
  size_t b, hq, hkv, nq, nk, d;
  int causal, wl, wr;
  float softcap;
  const int32_t *cu_q, *cu_k;  /* ragged: b + 1 offsets each, or NULL */
} wg_case;

/* A ragged batch (nq, nk: its longest sequences), one sequence empty. */
static const int32_t ragged_q[4] = {0, 70, 70, 200}, ragged_k[4] = {0, 90, 150, 280};

static const wg_case cases[] = {
    {FCL_DTYPE_F16, 1, 2, 2, 130, 130, 128, 0, -1, -1, 0.0f, NULL, NULL},
    {FCL_DTYPE_F16, 1, 2, 2, 130, 130, 128, 1, -1, -1, 0.0f, NULL, NULL},
    {FCL_DTYPE_BF16, 2, 2, 1, 100, 200, 64, 0, -1, -1, 0.0f, NULL, NULL},
    {FCL_DTYPE_BF16, 1, 4, 2, 193, 150, 64, 1, -1, -1, 0.0f, NULL, NULL},
    {FCL_DTYPE_F16, 1, 2, 2, 64, 64, 64, 1, -1, -1, 0.0f, NULL, NULL},
    {FCL_DTYPE_BF16, 1, 2, 2, 150, 150, 128, 0, -1, -1, 0.0f, NULL, NULL},
    /* head_dim padded (40 to 64, 96 to 128) */
    {FCL_DTYPE_F16, 1, 2, 2, 90, 70, 40, 1, -1, -1, 0.0f, NULL, NULL},
    {FCL_DTYPE_BF16, 1, 1, 1, 80, 120, 96, 0, -1, -1, 0.0f, NULL, NULL},
    /* the hooks: a sliding window and softcap, a ragged batch */
    {FCL_DTYPE_F16, 1, 2, 1, 160, 160, 64, 0, 40, 10, 30.0f, NULL, NULL},
    {FCL_DTYPE_BF16, 3, 2, 2, 130, 130, 128, 1, -1, -1, 0.0f, ragged_q, ragged_k},
};
#define CASES (int)(sizeof cases / sizeof *cases)

static fcl_attention_desc case_desc(const wg_case *c) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->nq, c->nk, c->d);
  desc.dtype = c->dtype;
  desc.causal = c->causal;
  desc.window_left = c->wl;
  desc.window_right = c->wr;
  desc.softcap = c->softcap;
  desc.cu_seqlens_q = c->cu_q;
  desc.cu_seqlens_k = c->cu_k;
  return desc;
}

/* On NVIDIA cc 9.0 the instructions must have run: the sm_90a stage's
 * refusal (its line in the context's log) fails the test, with the line. */
static void assert_sm90a_built(fcl_context *ctx) {
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  if (!(dev.limits.vendor == FCL_VENDOR_NVIDIA && dev.limits.nvidia_ptx &&
        dev.limits.nvidia_sm == 90))
    return;
  char log[4096];
  fcl_context_log(ctx, log, sizeof log);
  ck_assert_msg(!strstr(log, "flash_fwd_wgmma.cl: no sm_90a build"),
                "the wgmma forward fell back to mma.sync on an sm_90 device: %s", log);
}

/* The forward of p on `kernel`, forced (wg_size, block_k: the hint's, 0
 * for the planner's). */
static th_forward forced_forward(fcl_context *ctx, const th_problem *p, unsigned kernel,
                                 unsigned wg_size, unsigned block_k, const char *what) {
  const fcl_plan hint = {.kernel = kernel, .wg_size = wg_size, .block_k = block_k};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  th_forward r = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(r.status == FCL_SUCCESS, "%s on %s: %s", what, fcl_flash_kernel_name(kernel),
                fcl_context_last_error(ctx));
  ck_assert_uint_eq(r.info.plan.kernel, kernel);
  return r;
}

/* cases[i] against the reference, on the schedule the environment names
 * (FLASHCL_WGMMA_PIPE; the kernel's default where unset), in work-groups
 * of wg_size work-items (128: one warpgroup, 256: two) and tiles of
 * block_k keys (0: the planner's). */
static void check_case(int i, unsigned wg_size, unsigned block_k) {
  const wg_case *c = &cases[i];
  fcl_context *ctx = th_context();
  const fcl_attention_desc desc = case_desc(c);
  char what[200];
  th_describe(&desc, what, sizeof what);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 900 + (uint64_t)i, 1.0);
  th_reference ref = th_reference_forward(&p);
  float *naive = th_naive_output(ctx, &p);
  th_forward wg = forced_forward(ctx, &p, FCL_FLASH_KERNEL_WGMMA, wg_size, block_k, what);
  assert_sm90a_built(ctx);
  th_forward mma = forced_forward(ctx, &p, FCL_FLASH_KERNEL_MMA, 0, 0, what);
  if (wg_size) ck_assert_uint_eq(wg.info.plan.wg_size, wg_size);
  ck_assert_msg(wg.info.plan.wg_size % 128 == 0 && wg.info.plan.wg_size <= 512, "wg_size %u",
                wg.info.plan.wg_size);
  ck_assert_uint_eq(wg.info.plan.block_q, wg.info.plan.wg_size / 2);  /* 64 rows a warpgroup */
  ck_assert_uint_eq(wg.info.plan.block_k, block_k ? block_k : 64);
  /* the elements of the batch's tokens, the first of the buffers' */
  const size_t tokens = c->cu_q ? (size_t)c->cu_q[c->b] : c->b * c->nq;
  const size_t on = tokens * c->hq * c->d, ln = tokens * c->hq;
  const double err = fclu_max_abs_err(wg.o, ref.o, on);
  const double err_naive = fclu_max_abs_err(naive, ref.o, on);
  const double floor = th_err_floor(c->dtype, ref.o, on);
  ck_assert_msg(err <= 2 * err_naive + floor,
                "%s: the wgmma forward's O off by %g, the naive algorithm's by %g (floor %g)",
                what, err, err_naive, floor);
  const double lse_err = fclu_max_abs_err(wg.lse, ref.lse, ln);
  const double lse_err_mma = fclu_max_abs_err(mma.lse, ref.lse, ln);
  ck_assert_msg(lse_err <= 2 * lse_err_mma + 1e-5,
                "%s: the wgmma forward's LSE off by %g, the MMA forward's by %g", what, lse_err,
                lse_err_mma);
  printf("wgmma (%u work-items, %u keys): %s: O off by %.3g (naive %.3g, MMA %.3g), "
         "LSE by %.3g (MMA %.3g)\n",
         wg.info.plan.wg_size, wg.info.plan.block_k, what, err, err_naive,
         fclu_max_abs_err(mma.o, ref.o, on), lse_err, lse_err_mma);
  th_forward_free(&wg);
  th_forward_free(&mma);
  free(naive);
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}

START_TEST(wgmma_forward_matches_the_reference) { check_case(_i, 0, 0); }
END_TEST

/* One warpgroup a work-group (64 rows), two to four asked for by name,
 * and tiles of 32 keys, or 128 (head_dim up to 64), on the cases of
 * several tiles: causal, packed GQA, odd lengths, both widths, padded,
 * ragged, a window with softcap. */
static const struct {
  unsigned wg_size, block_k;
  int c;
} other_forms[] = {{128, 0, 1},   {128, 0, 3},   {128, 0, 6},   {128, 0, 7},   {128, 0, 8},
                   {128, 0, 9},   {256, 0, 0},   {256, 0, 3},   {256, 0, 9},   {0, 128, 2},
                   {0, 128, 3},   {0, 128, 4},   {0, 128, 6},   {0, 128, 8},   {128, 128, 3},
                   {384, 0, 1},   {384, 0, 9},   {384, 128, 3},  {512, 0, 3},   {512, 0, 8},
                   {0, 32, 1},    {0, 32, 3},    {384, 32, 9},   {128, 32, 7}};
START_TEST(wgmma_forward_other_forms_match_the_reference) {
  check_case(other_forms[_i].c, other_forms[_i].wg_size, other_forms[_i].block_k);
}
END_TEST

/* The other schedules (WGMMA_PIPE 1: products waited whole, loads in
 * flight; 3: two stages of K and V, head_dim 64, else 2) on the cases of
 * several tiles: causal, packed GQA, odd lengths, both widths and types,
 * padded, ragged, a window with softcap. */
static const struct {
  const char *pipe;
  int c;
} other_schedules[] = {{"1", 1}, {"1", 2}, {"1", 3}, {"1", 6}, {"1", 7}, {"1", 9},
                       {"3", 2}, {"3", 3}, {"3", 4}, {"3", 6}, {"3", 8}, {"3", 9}};
START_TEST(wgmma_forward_other_schedules_match_the_reference) {
  setenv("FLASHCL_WGMMA_PIPE", other_schedules[_i].pipe, 1);
  check_case(other_schedules[_i].c, 0, 0);
  unsetenv("FLASHCL_WGMMA_PIPE");
}
END_TEST

/* The bytes the instrumented kernel counts are the model's (the MMA
 * forward's: the same Q, K, V and O traffic at its block sizes). */
START_TEST(wgmma_forward_counts_the_modelled_bytes) {
  const wg_case *c = &cases[_i == 0 ? 1 : CASES - 1];
  fcl_context *ctx = th_context();
  if (!th_count_io(ctx)) {
    fcl_context_release(ctx);
    return;
  }
  const fcl_attention_desc desc = case_desc(c);
  char what[200];
  th_describe(&desc, what, sizeof what);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 950 + (uint64_t)_i, 1.0);
  th_forward wg = forced_forward(ctx, &p, FCL_FLASH_KERNEL_WGMMA, _i == 0 ? 128 : 0, 0, what);
  ck_assert_msg(wg.info.bytes_counted == wg.info.bytes_model,
                "%s: counted %llu bytes, the model says %llu", what,
                (unsigned long long)wg.info.bytes_counted,
                (unsigned long long)wg.info.bytes_model);
  th_forward_free(&wg);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* What the family does not take: refused with a reason, before anything
 * runs. */
START_TEST(wgmma_forward_refuses_what_it_does_not_take) {
  fcl_context *ctx = th_context();
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_WGMMA};
  fcl_attention_desc desc;
  fcl_plan plan;
  char why[256];
  struct {
    fcl_dtype dtype;
    size_t d;
    fcl_pass pass;
    unsigned block_k, wg_size;
    const char *says;
  } refused[] = {
      {FCL_DTYPE_F32, 64, FCL_PASS_FORWARD, 0, 0, "f16 and bf16"},
      {FCL_DTYPE_F16, 256, FCL_PASS_FORWARD, 0, 0, "head_dim up to 128"},
      {FCL_DTYPE_F16, 64, FCL_PASS_BACKWARD, 0, 0, "forwards"},
      {FCL_DTYPE_BF16, 64, FCL_PASS_FORWARD, 48, 0, "layout is fixed"},
      {FCL_DTYPE_F16, 128, FCL_PASS_FORWARD, 0, 640, "one to four warpgroups"},
      {FCL_DTYPE_F16, 128, FCL_PASS_FORWARD, 128, 0, "head_dim up to 64"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; ++i) {
    fcl_attention_desc_init(&desc, 1, 2, 2, 100, 100, refused[i].d);
    desc.dtype = refused[i].dtype;
    fcl_plan h = hint;
    h.block_k = refused[i].block_k;
    h.wg_size = refused[i].wg_size;
    why[0] = '\0';
    const fcl_status st =
        fcl_plan_flash_hinted(&dev.limits, &desc, refused[i].pass, &h, &plan, why, sizeof why);
    ck_assert_msg(st == FCL_ERROR_UNSUPPORTED, "refusal %zu: status %d", i, (int)st);
    ck_assert_msg(strstr(why, refused[i].says), "refusal %zu says '%s'", i, why);
  }
  /* unasked, as many warpgroups and stages as the device's local memory
   * takes (at 32 KiB one stage of K and V; at 16 KiB not one: refused) */
  fcl_device_limits small = dev.limits;
  small.local_mem_bytes = 32 * 1024;
  fcl_attention_desc_init(&desc, 1, 2, 2, 100, 100, 64);
  desc.dtype = FCL_DTYPE_F16;
  ck_assert_int_eq(
      fcl_plan_flash_hinted(&small, &desc, FCL_PASS_FORWARD, &hint, &plan, why, sizeof why),
      FCL_SUCCESS);
  ck_assert_uint_le(plan.local_bytes, small.local_mem_bytes);
  ck_assert_uint_eq(plan.block_q, plan.wg_size / 2);
  small.local_mem_bytes = 16 * 1024;
  ck_assert_int_eq(
      fcl_plan_flash_hinted(&small, &desc, FCL_PASS_FORWARD, &hint, &plan, why, sizeof why),
      FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "local memory"), "%s", why);
  /* the planner never takes it */
  fcl_attention_desc_init(&desc, 1, 2, 2, 1000, 1000, 128);
  desc.dtype = FCL_DTYPE_F16;
  ck_assert_int_eq(fcl_plan_flash(&dev.limits, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_ne(plan.kernel, FCL_FLASH_KERNEL_WGMMA);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wgmma_fwd");
  TCase *tc = th_tcase("wgmma forward");
  tcase_add_test(tc, wgmma_forward_refuses_what_it_does_not_take);
  tcase_add_loop_test(tc, wgmma_forward_matches_the_reference, 0, CASES);
  tcase_add_loop_test(tc, wgmma_forward_other_forms_match_the_reference, 0,
                      (int)(sizeof other_forms / sizeof *other_forms));
  tcase_add_loop_test(tc, wgmma_forward_other_schedules_match_the_reference, 0,
                      (int)(sizeof other_schedules / sizeof *other_schedules));
  tcase_add_loop_test(tc, wgmma_forward_counts_the_modelled_bytes, 0, 2);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
