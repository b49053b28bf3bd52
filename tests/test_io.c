/*
 * test_io.c — the forward kernels count every byte they move (built with
 * FCL_COUNT_IO) and the count must equal the I/O model exactly, for the
 * plan actually used: causal, GQA, seqlen_q != seqlen_k, sizes that are
 * multiples of no tile, with and without LSE, a chunked naive run, and
 * rows long enough for the softmax's streaming variant. The public
 * fcl_io_model must agree with what a run reports.
 */
#include "harness.h"

#include <stdio.h>

/* Two head_dim buckets (64, and 16 for d <= 16), causal and not, so few
 * instrumented variants get built. */
static const th_shape shapes[] = {
    {1, 2, 2, 113, 257, 64, 1}, {2, 6, 2, 257, 113, 40, 1}, {1, 4, 1, 7, 300, 13, 0},
    {2, 3, 3, 129, 129, 16, 1}, {1, 2, 1, 1, 1, 16, 1},     {1, 3, 1, 300, 33, 61, 0},
    {1, 1, 1, 2, 70000, 16, 0}, /* a row past 65536 keys: the streaming softmax */
};

/* planned: the context runs the planner's tiling, which fcl_io_model
 * assumes. */
static void check_counts(fcl_context *ctx, const fcl_attention_desc *desc, uint64_t seed,
                         int with_lse, int planned) {
  char what[200];
  th_describe(desc, what, sizeof what);
  th_problem p;
  th_problem_init(&p, ctx, desc, seed, 1.0);
  for (int algo = FCL_ALGO_FLASH; algo <= FCL_ALGO_NAIVE; ++algo) {
    th_forward run = th_run_forward(ctx, &p, (fcl_algo)algo, with_lse);
    ck_assert_msg(run.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
    ck_assert_msg(run.info.bytes_counted == run.info.bytes_model,
                  "%s, %s%s: counted %llu bytes, the model says %llu", what,
                  fcl_algo_name((fcl_algo)algo), with_lse ? "" : " without LSE",
                  (unsigned long long)run.info.bytes_counted,
                  (unsigned long long)run.info.bytes_model);
    /* The public model agrees, unless the flash tiling was forced or the
     * naive run was chunked by a scratch limit the model does not know. */
    fcl_device_info dev;
    ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
    fcl_io_estimate est;
    ck_assert_int_eq(fcl_io_model(&dev.limits, desc, (fcl_algo)algo, FCL_PASS_FORWARD,
                                  with_lse, &est),
                     FCL_SUCCESS);
    if (algo == FCL_ALGO_FLASH ? planned : est.chunks == run.info.chunks)
      ck_assert_uint_eq(est.bytes_loaded + est.bytes_stored, run.info.bytes_model);
    th_forward_free(&run);
  }
  th_problem_free(&p);
}

/* _i = 0: the planner's kernel; 1: the MMA kernel forced, with head_dim
 * rounded up to the multiple of 8 it takes. */
START_TEST(forward_counted_bytes_equal_the_model) {
  fcl_context *ctx = th_context();
  ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
  if (_i) {
    const fcl_plan mma = {.kernel = FCL_FLASH_KERNEL_MMA};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &mma), FCL_SUCCESS);
  }
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    th_shape shape = shapes[i];
    if (_i) shape.d = th_mma_head_dim(shape.d);
    fcl_attention_desc desc = th_shape_desc(&shape, FCL_DTYPE_F32);
    check_counts(ctx, &desc, 40 + i, 1, !_i);
    if (i < 2) check_counts(ctx, &desc, 50 + i, 0, !_i);
  }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(chunked_naive_counts_its_copies_too) {
  fcl_context *ctx = th_context();
  ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, 50, 70, 40);
  desc.causal = 1;
  ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 2 * 50 * 70 * sizeof(float)),
                   FCL_SUCCESS);
  check_counts(ctx, &desc, 60, 1, 1);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(flash_moves_fewer_bytes_than_naive) {
  /* Not a timing: the model's own claim, on a device of this run. */
  fcl_context *ctx = th_context();
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  fcl_context_release(ctx);
  for (size_t n = 512; n <= 8192; n *= 2) {
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 16384 / n, 16, 16, n, n, 64);
    fcl_io_estimate flash, naive;
    ck_assert_int_eq(fcl_io_model(&dev.limits, &desc, FCL_ALGO_FLASH, FCL_PASS_FORWARD, 1,
                                  &flash),
                     FCL_SUCCESS);
    ck_assert_int_eq(fcl_io_model(&dev.limits, &desc, FCL_ALGO_NAIVE, FCL_PASS_FORWARD, 1,
                                  &naive),
                     FCL_SUCCESS);
    ck_assert_uint_lt(flash.bytes_loaded + flash.bytes_stored,
                      naive.bytes_loaded + naive.bytes_stored);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("io");
  TCase *tc = th_tcase("counting");
  tcase_add_loop_test(tc, forward_counted_bytes_equal_the_model, 0, 2);
  tcase_add_test(tc, chunked_naive_counts_its_copies_too);
  tcase_add_test(tc, flash_moves_fewer_bytes_than_naive);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
