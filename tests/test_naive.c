/*
 * test_naive.c — the naive baseline against the float64 reference, on
 * shapes chosen to break indexing: seqlen_q != seqlen_k, causal with more
 * queries than keys (rows that see nothing), GQA and MQA, sizes that are
 * multiples of nothing; and its chunking when S does not fit at once.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>

/* fp32 against float64 on O(1) data: a few hundred ulps is generous for
 * dot products of length <= 257 and a softmax over <= 257 keys. */
#define O_TOL 2e-5
#define LSE_TOL 2e-5

static const th_shape edge_shapes[] = {
    {1, 1, 1, 1, 1, 16, 0},     {1, 1, 1, 1, 1, 16, 1},    {2, 3, 3, 7, 7, 8, 1},
    {1, 2, 2, 113, 257, 64, 0}, {1, 2, 2, 257, 113, 64, 1}, {2, 4, 2, 113, 113, 32, 1},
    {1, 8, 1, 7, 257, 40, 0},   {1, 6, 3, 257, 7, 24, 1},  {3, 1, 1, 1, 113, 128, 1},
    {1, 4, 4, 64, 64, 256, 0},  {1, 2, 1, 33, 20, 7, 1},
};

static void check_against_reference(fcl_context *ctx, const fcl_attention_desc *desc,
                                    uint64_t seed) {
  char what[160];
  th_describe(desc, what, sizeof what);
  th_problem p;
  th_problem_init(&p, ctx, desc, seed, 1.0);
  th_reference ref = th_reference_forward(&p);
  th_forward run = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  ck_assert_msg(run.status == FCL_SUCCESS, "%s: %s: %s", what, fcl_status_str(run.status),
                fcl_context_last_error(ctx));
  double o_err = fclu_max_abs_err(run.o, ref.o, p.q_elems);
  double lse_err = fclu_max_abs_err(run.lse, ref.lse, p.lse_elems);
  ck_assert_msg(o_err <= O_TOL, "%s: O error %g", what, o_err);
  ck_assert_msg(lse_err <= LSE_TOL * (1 + fclu_max_abs(ref.lse, p.lse_elems)),
                "%s: LSE error %g", what, lse_err);
  th_forward_free(&run);
  th_reference_free(&ref);
  th_problem_free(&p);
}

START_TEST(naive_matches_reference_on_edge_shapes) {
  fcl_context *ctx = th_context();
  for (size_t i = 0; i < sizeof edge_shapes / sizeof edge_shapes[0]; ++i) {
    const fcl_attention_desc desc = th_shape_desc(&edge_shapes[i], FCL_DTYPE_F32);
    check_against_reference(ctx, &desc, 1000 + i);
  }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_fully_masked_rows_are_zero_with_lse_minus_inf) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 2, 1, 50, 20, 16);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 7, 1.0);
  th_forward run = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  ck_assert_int_eq(run.status, FCL_SUCCESS);
  /* Rows i < seqlen_q - seqlen_k see no key. */
  th_assert_blind_rows(&desc, run.o, run.lse, "O");
  th_forward_free(&run);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_chunks_when_s_does_not_fit) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 6, 3, 37, 41, 16);
  desc.causal = 1;
  /* Room for one slice of S at a time (plus CLBlast's share). */
  size_t slice = desc.seqlen_q * desc.seqlen_k * sizeof(float);
  ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 2 * slice + 16), FCL_SUCCESS);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 11, 1.0);
  th_reference ref = th_reference_forward(&p);
  th_forward run = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  ck_assert_msg(run.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  ck_assert_uint_eq(run.info.chunks, desc.batch * desc.heads_q);
  ck_assert(fclu_max_abs_err(run.o, ref.o, p.q_elems) <= O_TOL);
  ck_assert(fclu_max_abs_err(run.lse, ref.lse, p.lse_elems) <= LSE_TOL * 10);
  th_forward_free(&run);
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_reports_out_of_memory_when_one_slice_does_not_fit) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 2, 300, 300, 16);
  ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 1000), FCL_SUCCESS);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 3, 1.0);
  th_forward run = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  ck_assert_int_eq(run.status, FCL_ERROR_OUT_OF_MEMORY);
  /* The message names the bytes needed and allowed. */
  const char *msg = fcl_context_last_error(ctx);
  ck_assert_msg(strstr(msg, "360000") && strstr(msg, "1000"), "message: %s", msg);
  /* Nothing was written: the poison is still there. */
  for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(run.o[i]));
  th_forward_free(&run);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(naive_without_lse_buffer) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 3, 1, 19, 23, 24);
  desc.causal = 1;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 5, 1.0);
  th_reference ref = th_reference_forward(&p);
  th_forward run = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 0);
  ck_assert_int_eq(run.status, FCL_SUCCESS);
  ck_assert(fclu_max_abs_err(run.o, ref.o, p.q_elems) <= O_TOL);
  th_forward_free(&run);
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("naive");
  TCase *tc = th_tcase("forward");
  tcase_add_test(tc, naive_matches_reference_on_edge_shapes);
  tcase_add_test(tc, naive_fully_masked_rows_are_zero_with_lse_minus_inf);
  tcase_add_test(tc, naive_chunks_when_s_does_not_fit);
  tcase_add_test(tc, naive_reports_out_of_memory_when_one_slice_does_not_fit);
  tcase_add_test(tc, naive_without_lse_buffer);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
