/*
 * test_decode.c — decode: a few query rows against many keys. Against the
 * float64 reference on random inputs, in the four forward kernels (SIMT,
 * MMA emulated off NVIDIA, the decode kernel, whose work-items divide the
 * keys, and the decode kernel on matrix instructions, emulated off NVIDIA,
 * in f16 and bf16), causal and not, a sliding window, GQA and MQA:
 *   - the split-KV forward (fcl_plan.splits): key counts 1, 15, 16, 17,
 *     333 and 4097, split counts forced from 1 to more than the keys have
 *     tiles, within the flash suites' rule (2x the naive algorithm's
 *     error); in f16 and bf16 within one more rounding of the unsplit one;
 *   - the query heads of a KV head packed into one block
 *     (fcl_plan.packed_heads), forced on and off, in a ragged batch too;
 *   - a KV cache's lengths (seqlens_k): 0, 1, 15, 16, 17, 4097 and 128k in
 *     one batch, and their refusals;
 *   - appending new rows to a cache (fcl_kv_cache_append) bit for bit, its
 *     refusals, and attention after it, also in one call
 *     (fcl_attention_forward_kvcache).
 * Also: counted bytes equal the I/O model, reruns are bit-identical (on a
 * context whose kept scratch and kernels earlier calls used, too), and
 * the planner's rules for splits, packing and the decode kernel.
 */
#include "harness.h"
#include "resources.h"
#include "problem.h"
#include "plan.h"
#include "rules.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_FLOOR 1e-6
#define LSE_REL_TOL 1e-4

typedef struct dcase {
  size_t b, hq, hkv, nq, nk, d;
  int causal, window_left;
} dcase;

static const dcase cases[] = {
    {1, 4, 1, 1, 4097, 64, 0, -1}, {2, 8, 2, 4, 333, 32, 1, -1}, {1, 8, 1, 16, 1, 16, 1, -1},
    {3, 2, 2, 1, 17, 128, 0, -1},  {1, 4, 4, 7, 16, 40, 1, -1},  {2, 8, 8, 2, 15, 64, 0, -1},
    {1, 4, 2, 3, 333, 32, 1, 40},  /* a window: the early splits hold none of its keys */
};
#define N_CASES (sizeof cases / sizeof cases[0])

static const unsigned forced[] = {1, 2, 3, 7, FCL_MAX_SPLITS};
#define N_FORCED (sizeof forced / sizeof forced[0])

/* The forward kernels a test runs in turn (a loop test's _i). */
enum { FAMILY_SIMT, FAMILY_MMA, FAMILY_DECODE, FAMILY_DECODE_MMA, FAMILIES };
static const unsigned family_kernel[FAMILIES] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA,
                                                 FCL_FLASH_KERNEL_DECODE,
                                                 FCL_FLASH_KERNEL_DECODE_MMA};

/* The families on matrix instructions, emulated off NVIDIA: slow on a CPU,
 * so they take fewer cases. */
static int matrix_family(int family) {
  return family == FAMILY_MMA || family == FAMILY_DECODE_MMA;
}

/* The storage type a family runs in: the decode kernel on matrix
 * instructions takes 16-bit types only (f16, and bf16 for odd seeds). */
static fcl_dtype family_dtype(int family, size_t seed) {
  if (family != FAMILY_DECODE_MMA) return FCL_DTYPE_F32;
  return seed % 2 ? FCL_DTYPE_BF16 : FCL_DTYPE_F16;
}

static fcl_attention_desc case_desc(const dcase *c, int family) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, c->b, c->hq, c->hkv, c->nq, c->nk,
                          family == FAMILY_MMA ? th_mma_head_dim(c->d) : c->d);
  d.causal = c->causal;
  d.window_left = c->window_left;
  d.dtype = family_dtype(family, (size_t)(c - cases));
  return d;
}

/* Whether the family's kernel takes nq rows of `packed` heads a block
 * (the decode kernels: at most FCL_DECODE_MAX_ROWS, FCL_DECODE_MMA_MAX_ROWS). */
static int family_takes(int family, size_t nq, size_t packed) {
  if (family == FAMILY_DECODE) return nq * packed <= FCL_DECODE_MAX_ROWS;
  if (family == FAMILY_DECODE_MMA) return nq * packed <= FCL_DECODE_MMA_MAX_ROWS;
  return 1;
}

/* The hint of a family, split count and packing (0: the planner's; for the
 * decode kernels, packed where the rows fit them). */
static fcl_plan family_hint(int family, unsigned splits, unsigned packed,
                            const fcl_attention_desc *d) {
  if ((family == FAMILY_DECODE || family == FAMILY_DECODE_MMA) && packed == 0)
    packed = family_takes(family, d->seqlen_q, d->heads_q / d->heads_kv) ? 0 : 1;
  return (fcl_plan){.kernel = family_kernel[family], .splits = splits, .packed_heads = packed};
}

/* Forces the kernel family and the split count. */
static void force(fcl_context *ctx, int family, unsigned splits, const fcl_attention_desc *d) {
  const fcl_plan hint = family_hint(family, splits, 0, d);
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
}

static const char *family_name(int family) {
  return fcl_flash_kernel_name(family_kernel[family]);
}

/* The split count a forced one gives: at most one split per key tile. */
static unsigned expected_splits(const fcl_run_info *info, size_t nk, unsigned wanted) {
  const size_t tiles = (nk + info->plan.block_k - 1) / info->plan.block_k;
  const size_t per = (tiles + wanted - 1) / wanted;
  return (unsigned)((tiles + per - 1) / per);
}

/* LSE within LSE_REL_TOL of the reference (relative, or absolute below
 * 1), and -inf exactly where it is -inf. */
static void assert_lse(const th_forward *r, const double *want, size_t n, const char *what) {
  for (size_t j = 0; r->lse && j < n; ++j)
    ck_assert_msg(isinf(want[j]) ? r->lse[j] == want[j]
                                 : fabs(r->lse[j] - want[j]) <= LSE_REL_TOL * fmax(1.0, fabs(want[j])),
                  "%s, %u splits, %u heads a block: LSE[%zu] = %.9g, want %.9g", what,
                  r->info.plan.splits, r->info.plan.packed_heads, j, (double)r->lse[j], want[j]);
}

/* A case of one family against the reference: its problem on the device,
 * the float64 reference, and the flash rule's terms (the naive algorithm's
 * error and the floor: flash within 2 x naive + floor). */
typedef struct reference_case {
  fcl_attention_desc desc;
  th_problem p;
  th_reference ref;
  double naive_err, floor;
  char what[200];
} reference_case;

static void reference_case_init(reference_case *rc, fcl_context *ctx, size_t i, int family,
                                uint64_t seed) {
  rc->desc = case_desc(&cases[i], family);
  th_problem_init(&rc->p, ctx, &rc->desc, seed, 1.0);
  rc->ref = th_reference_forward(&rc->p);
  float *naive = th_naive_output(ctx, &rc->p);
  rc->naive_err = fclu_max_abs_err(naive, rc->ref.o, rc->p.q_elems);
  free(naive);
  rc->floor = th_err_floor(rc->desc.dtype, rc->ref.o, rc->p.q_elems);
  th_describe(&rc->desc, rc->what, sizeof rc->what);
}

static void reference_case_free(reference_case *rc) {
  th_reference_free(&rc->ref);
  th_problem_free(&rc->p);
}

START_TEST(split_forward_matches_reference) {
  const int family = _i;
  fcl_context *ctx = th_context();
  double worst = 0.0;
  for (size_t i = 0; i < N_CASES; ++i) {
    if (matrix_family(family) && i % 2) continue;  /* emulated, slow on a CPU */
    if (!family_takes(family, cases[i].nq, 1)) continue;
    reference_case rc;
    reference_case_init(&rc, ctx, i, family, 10 + i);
    const char *what = rc.what;
    for (size_t f = 0; f < N_FORCED; ++f) {
      force(ctx, family, forced[f], &rc.desc);
      th_forward r = th_run_forward(ctx, &rc.p, FCL_ALGO_FLASH, f % 2 == 0);
      ck_assert_msg(r.status == FCL_SUCCESS, "%s, %u splits: %s", what, forced[f],
                    fcl_context_last_error(ctx));
      const unsigned want = expected_splits(&r.info, rc.desc.seqlen_k, forced[f]);
      ck_assert_msg(r.info.plan.splits == want, "%s: %u splits asked, %u run, %u expected", what,
                    forced[f], r.info.plan.splits, want);
      const double err = fclu_max_abs_err(r.o, rc.ref.o, rc.p.q_elems);
      ck_assert_msg(err <= 2 * rc.naive_err + rc.floor,
                    "%s, %u splits: flash error %g > 2 x naive error %g + %g", what,
                    r.info.plan.splits, err, rc.naive_err, rc.floor);
      if (err / (rc.naive_err + rc.floor) > worst) worst = err / (rc.naive_err + rc.floor);
      assert_lse(&r, rc.ref.lse, rc.p.lse_elems, what);
      th_forward_free(&r);
    }
    reference_case_free(&rc);
  }
  printf("decode (%s): split forwards, worst flash/(naive + floor) error ratio %.3f\n",
         family_name(family), worst);
  fcl_context_release(ctx);
}
END_TEST

/* The context's arrival counts are all 0, as every launch must leave them. */
static void assert_arrivals_zero(fcl_context *ctx, const char *what) {
  const size_t n = ctx->arrival_counts;
  cl_int *counts = malloc(n * sizeof *counts);
  ck_assert_ptr_nonnull(counts);
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), ctx->arrivals, CL_TRUE, 0,
                                       n * sizeof *counts, counts, 0, NULL, NULL),
                   CL_SUCCESS);
  for (size_t j = 0; j < n; ++j)
    ck_assert_msg(counts[j] == 0, "%s: arrival count %zu is %d after the launch", what, j,
                  counts[j]);
  free(counts);
}

/* The merge in the split launch (fcl_plan.merge = LAST_SPLIT: the block's
 * last split to finish merges it) against the merge kernel, in both decode
 * kernels: within the flash rule of the reference, each a plan that says
 * which ran; the in-launch one bit for bit on reruns, its bytes the
 * model's, and the arrival counts all 0 after it, as the next launch needs
 * them (FLASHCL_TEST_RERUNS reruns, to catch a race between work-groups).
 * A hint for it is refused with the other kernels and with more splits
 * than a row's local state stages. */
START_TEST(merge_in_the_split_launch_matches_the_merge_kernel) {
  const int family = _i ? FAMILY_DECODE_MMA : FAMILY_DECODE;
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  const unsigned merges[2] = {FCL_SPLIT_MERGE_KERNEL, FCL_SPLIT_MERGE_LAST_SPLIT};
  const unsigned splits[3] = {2, 7, 64};
  const int reruns = th_reruns(1);
  for (size_t i = 0; i < N_CASES; ++i) {
    if (family == FAMILY_DECODE_MMA && i % 2) continue;  /* emulated, slow on a CPU */
    if (!family_takes(family, cases[i].nq, 1)) continue;
    reference_case rc;
    reference_case_init(&rc, ctx, i, family, 40 + i);
    const th_problem *p = &rc.p;
    const char *what = rc.what;
    for (size_t f = 0; f < 3; ++f)
      for (int m = 0; m < 2; ++m) {
        fcl_plan hint = family_hint(family, splits[f], 0, &rc.desc);
        hint.merge = merges[m];
        ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
        th_forward a = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
        const char *merge = fcl_split_merge_name(merges[m]);
        ck_assert_msg(a.status == FCL_SUCCESS, "%s, %u splits, merge %s: %s", what, splits[f],
                      merge, fcl_context_last_error(ctx));
        const unsigned ran = a.info.plan.splits;
        const int in_launch = merges[m] == FCL_SPLIT_MERGE_LAST_SPLIT && ran > 1;
        ck_assert_uint_eq(a.info.plan.merge, ran > 1 ? merges[m] : FCL_SPLIT_MERGE_AUTO);
        const double err = fclu_max_abs_err(a.o, rc.ref.o, p->q_elems);
        ck_assert_msg(err <= 2 * rc.naive_err + rc.floor, "%s, %u splits, merge %s: error %g > %g",
                      what, ran, merge, err, 2 * rc.naive_err + rc.floor);
        assert_lse(&a, rc.ref.lse, p->lse_elems, what);
        for (int rerun = 0; in_launch && rerun < reruns; ++rerun) {
          th_forward b = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
          ck_assert_int_eq(b.status, FCL_SUCCESS);
          ck_assert_msg(memcmp(a.o, b.o, p->q_elems * sizeof *a.o) == 0 &&
                            memcmp(a.lse, b.lse, p->lse_elems * sizeof *a.lse) == 0,
                        "%s, %u splits: rerun %d of the merge in the launch differs", what, ran,
                        rerun);
          th_forward_free(&b);
        }
        if (in_launch && count)
          ck_assert_msg(a.info.bytes_counted == a.info.bytes_model,
                        "%s, %u splits: counted %llu bytes, the model says %llu", what, ran,
                        (unsigned long long)a.info.bytes_counted,
                        (unsigned long long)a.info.bytes_model);
        if (in_launch) assert_arrivals_zero(ctx, what);
        th_forward_free(&a);
      }
    reference_case_free(&rc);
  }
  /* refused: another kernel, and more splits than a row stages */
  const fcl_attention_desc desc = case_desc(&cases[0], family);
  fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_SIMT, .splits = 4,
                   .merge = FCL_SPLIT_MERGE_LAST_SPLIT};
  fcl_plan plan;
  char why[256];
  const fcl_device_limits *limits = &ctx->info.limits;
  ck_assert_int_eq(fcl_plan_flash_hinted(limits, &desc, FCL_PASS_FORWARD, &hint, &plan, why,
                                         sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "decode kernels") != NULL, "%s", why);
  hint = family_hint(family, FCL_MAX_SPLITS, 0, &desc);
  ck_assert_int_eq(fcl_plan_flash_hinted(limits, &desc, FCL_PASS_FORWARD, &hint, &plan, why,
                                         sizeof why),
                   FCL_SUCCESS);
  const size_t row_floats = fcl__decode_state_row_floats(&plan);
  if (plan.splits > row_floats) {
    ck_assert_uint_eq(plan.merge, FCL_SPLIT_MERGE_KERNEL);
    hint.merge = FCL_SPLIT_MERGE_LAST_SPLIT;
    ck_assert_int_eq(fcl_plan_flash_hinted(limits, &desc, FCL_PASS_FORWARD, &hint, &plan, why,
                                           sizeof why),
                     FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(why, "do not fit") != NULL, "%s", why);
  }
  printf("decode (%s): the merge in the split launch and the merge kernel within the rule; "
         "reruns same bits, counts 0 after\n",
         family_name(family));
  fcl_context_release(ctx);
}
END_TEST

/* What a context keeps between calls (scratch.c, program.c): a split
 * forward after others of smaller and larger shapes on the same context
 * (its partial outputs in reused and grown buffers, its kernels reused
 * with the last call's arguments) gives the bits a fresh context gives,
 * and a repeated call allocates nothing, on the device or the host (no
 * kernel object either). */
START_TEST(kept_scratch_and_kernels_change_no_bit) {
  const dcase small = {1, 4, 1, 1, 333, 64, 1, -1}, large = {2, 8, 2, 4, 4097, 64, 0, -1};
  const unsigned splits[2] = {3, FCL_MAX_SPLITS};
  fcl_context *kept = th_context();
  th_problem p[2];
  float *fresh[2];
  for (int i = 0; i < 2; ++i) {
    const fcl_attention_desc desc = case_desc(i ? &large : &small, FAMILY_DECODE);
    th_problem_init(&p[i], kept, &desc, 700 + i, 1.0);
    fcl_context *ctx = NULL;  /* fresh, on the same OpenCL objects */
    ck_assert_int_eq(fcl_context_wrap(fcl_context_cl_context(kept), fcl_context_cl_device(kept),
                                      fcl_context_cl_queue(kept), &ctx),
                     FCL_SUCCESS);
    force(ctx, FAMILY_DECODE, splits[i], &desc);
    th_forward r = th_run_forward(ctx, &p[i], FCL_ALGO_FLASH, 1);
    ck_assert_msg(r.status == FCL_SUCCESS, "fresh context: %s", fcl_context_last_error(ctx));
    ck_assert_uint_gt(r.info.plan.splits, 1);
    fresh[i] = r.o;
    r.o = NULL;
    th_forward_free(&r);
    fcl_context_release(ctx);
  }
  /* small, large (the scratch grows), small again (stale partials in it) */
  const int order[3] = {0, 1, 0};
  long ops[3][2];
  for (int n = 0; n < 3; ++n) {
    const int i = order[n];
    force(kept, FAMILY_DECODE, splits[i], &p[i].desc);
    fcl__inject_failures(kept, FCL_INJECT_DEVICE_ALLOC, LONG_MAX);
    th_forward r = th_run_forward(kept, &p[i], FCL_ALGO_FLASH, 1);
    ops[n][0] = fcl__inject_failures(kept, 0, 0);
    ck_assert_msg(r.status == FCL_SUCCESS, "call %d: %s", n, fcl_context_last_error(kept));
    ck_assert_msg(memcmp(r.o, fresh[i], p[i].q_elems * sizeof *r.o) == 0,
                  "call %d on a kept context differs from a fresh context's", n);
    th_forward_free(&r);
    fcl__inject_failures(kept, FCL_INJECT_HOST_ALLOC, LONG_MAX);
    r = th_run_forward(kept, &p[i], FCL_ALGO_FLASH, 1);
    ops[n][1] = fcl__inject_failures(kept, 0, 0);
    ck_assert_int_eq(r.status, FCL_SUCCESS);
    th_forward_free(&r);
  }
  /* the first call made its two buffers and the arrival counts (CPUs merge
   * in the split launch), the second grew one (its partial O; its LSE fits
   * in the first's 64 KiB), the third fits in what is kept */
  ck_assert_msg(ops[0][0] == 3 && ops[1][0] == 1 && ops[2][0] == 0,
                "device allocations of the three calls: %ld, %ld, %ld", ops[0][0], ops[1][0],
                ops[2][0]);
  ck_assert_msg(ops[0][1] == 0 && ops[1][1] == 0 && ops[2][1] == 0,
                "host allocations (kernels included) of the repeated calls: %ld, %ld, %ld",
                ops[0][1], ops[1][1], ops[2][1]);
  printf("decode: kept scratch and kernels: same bits as fresh contexts; device allocations "
         "%ld, %ld, %ld; host allocations of the repeats %ld, %ld, %ld\n",
         ops[0][0], ops[1][0], ops[2][0], ops[0][1], ops[1][1], ops[2][1]);
  for (int i = 0; i < 2; ++i) {
    free(fresh[i]);
    th_problem_free(&p[i]);
  }
  fcl_context_release(kept);
}
END_TEST

/* The query heads of a KV head packed into one block (fcl_plan.packed_heads)
 * against the float64 reference and against blocks of one head, forced
 * either way, split and not, in both kernel families. */
START_TEST(packed_heads_match_reference) {
  const int family = _i;
  fcl_context *ctx = th_context();
  for (size_t i = 0; i < N_CASES; ++i) {
    const dcase *c = &cases[i];
    if (c->hq == c->hkv || (matrix_family(family) && i > 2)) continue;
    if (!family_takes(family, c->nq, 1)) continue;
    const fcl_attention_desc desc = case_desc(c, family);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 90 + i, 1.0);
    th_reference ref = th_reference_forward(&p);
    float *naive = th_naive_output(ctx, &p);
    const double naive_err = fclu_max_abs_err(naive, ref.o, p.q_elems);
    const double floor = th_err_floor(desc.dtype, ref.o, p.q_elems);
    char what[200];
    th_describe(&desc, what, sizeof what);
    const unsigned group = (unsigned)(c->hq / c->hkv), packs[2] = {1, group};
    for (int k = 0; k < 2; ++k)
      for (unsigned splits = 1; splits <= 3; splits += 2) {
        if (!family_takes(family, c->nq, packs[k])) continue;
        const fcl_plan hint = family_hint(family, splits, packs[k], &desc);
        ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
        th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
        ck_assert_msg(r.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
        ck_assert_uint_eq(r.info.plan.packed_heads, packs[k]);
        const double err = fclu_max_abs_err(r.o, ref.o, p.q_elems);
        ck_assert_msg(err <= 2 * naive_err + floor,
                      "%s, %u heads a block, %u splits: error %g > 2 x naive %g + %g", what,
                      packs[k], r.info.plan.splits, err, naive_err, floor);
        assert_lse(&r, ref.lse, p.lse_elems, what);
        th_forward_free(&r);
      }
    free(naive);
    th_reference_free(&ref);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

/* A ragged batch (cu_seqlens) of a few query rows each against keys of
 * their own, packed and not, split and not: continuous batching's decode.
 * Only the first tokens of the buffers hold the batch: only they are
 * compared; in f32 within 1e-5, in 16-bit types within the flash suites'
 * rule. */
START_TEST(packed_heads_in_a_ragged_batch) {
  const int family = _i;
  fcl_context *ctx = th_context();
  const int32_t cu_q[5] = {0, 1, 3, 3, 7}, cu_k[5] = {0, 100, 117, 117, 417};
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 4, 8, 2, 4, 300, 32);
  desc.causal = 1;
  desc.cu_seqlens_q = cu_q;
  desc.cu_seqlens_k = cu_k;
  desc.dtype = family_dtype(family, 0);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 800, 1.0);
  th_reference ref = th_reference_forward(&p);
  const size_t o_n = (size_t)cu_q[4] * desc.heads_q * desc.head_dim;
  const size_t lse_n = (size_t)cu_q[4] * desc.heads_q;
  double bound = 1e-5;
  if (desc.dtype != FCL_DTYPE_F32) {
    float *naive = th_naive_output(ctx, &p);
    bound = 2 * fclu_max_abs_err(naive, ref.o, o_n) + th_err_floor(desc.dtype, ref.o, o_n);
    free(naive);
  }
  for (int k = 0; k < 4; ++k) {
    if (!family_takes(family, desc.seqlen_q, k & 2 ? 4 : 1)) continue;
    const fcl_plan hint = family_hint(family, k & 1 ? 3 : 1, k & 2 ? 4 : 1, &desc);
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
    th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
    ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    ck_assert_uint_eq(r.info.plan.packed_heads, hint.packed_heads);
    const double err = fclu_max_abs_err(r.o, ref.o, o_n);
    ck_assert_msg(err <= bound, "ragged, %u heads a block, %u splits (%s): error %g > %g",
                  r.info.plan.packed_heads, r.info.plan.splits, family_name(family), err,
                  bound);
    assert_lse(&r, ref.lse, lse_n, "ragged");
    th_forward_free(&r);
  }
  th_reference_free(&ref);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* Packing asked for where it cannot be: refused, with the reason. */
START_TEST(packing_refused_where_it_cannot_be) {
  size_t n;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  const fcl_device_limits *limits = &profiles[0].info.limits;
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 1, 8, 2, 1, 100, 64);
  fcl_plan plan;
  char why[256];
  const fcl_plan wrong = {.packed_heads = 3};
  ck_assert_int_eq(fcl__plan_flash(limits, &d, FCL_PASS_FORWARD, &wrong, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert(strstr(why, "packed_heads = 3"));
  const fcl_plan pack = {.packed_heads = 4};
  ck_assert_int_eq(fcl__plan_flash(limits, &d, FCL_PASS_FORWARD, &pack, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.packed_heads, 4);
  d.alibi_slopes = (cl_mem)&plan;  /* any non-NULL handle: the planner only asks whether */
  ck_assert_int_eq(fcl__plan_flash(limits, &d, FCL_PASS_FORWARD, &pack, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert(strstr(why, "ALiBi"));
  ck_assert_int_eq(fcl__plan_flash(limits, &d, FCL_PASS_FORWARD, NULL, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.packed_heads, 1);
  d.alibi_slopes = NULL;
  d.seqlen_q = FCL_PACK_GQA_MAX_SEQLEN + 1;
  ck_assert_int_eq(fcl__plan_flash(limits, &d, FCL_PASS_FORWARD, NULL, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.packed_heads, 1);
}
END_TEST

/* ---- a KV cache's lengths (seqlens_k) ------------------------------------ */

typedef struct ccase {
  size_t b, hq, hkv, nq, capacity, d;
  int causal, window_left;
  int32_t lens[6];
} ccase;

static const ccase cache_cases[] = {
    {6, 8, 2, 1, 4100, 64, 1, -1, {0, 1, 15, 16, 17, 4097}},
    {6, 8, 2, 5, 4100, 32, 1, 40, {17, 4097, 0, 16, 1, 15}},
    {6, 4, 4, 16, 4100, 16, 0, -1, {16, 0, 4097, 1, 17, 15}},
    {2, 4, 1, 2, 131072, 16, 1, -1, {131072, 3}},  /* a 128k cache beside a short one */
};

/* The flash forward over caches of different lengths, against float64
 * and the naive algorithm, split and not, packed and not, in both
 * kernel families; the rows of an empty cache are zeros with LSE -inf. */
START_TEST(cache_lengths_match_reference) {
  const int family = _i;
  fcl_context *ctx = th_context();
  for (size_t i = 0; i < sizeof cache_cases / sizeof cache_cases[0]; ++i) {
    const ccase *c = &cache_cases[i];
    if (matrix_family(family) && i != 0) continue;  /* emulated, slow on a CPU */
    if (!family_takes(family, c->nq, 1)) continue;
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->nq, c->capacity,
                            family == FAMILY_MMA ? th_mma_head_dim(c->d) : c->d);
    desc.causal = c->causal;
    desc.window_left = c->window_left;
    desc.seqlens_k = c->lens;
    desc.dtype = family_dtype(family, i);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 200 + i, 1.0);
    th_reference ref = th_reference_forward(&p);  /* (util/reference.c reads seqlens_k) */
    const double *o = ref.o, *lse = ref.lse;
    float *naive = th_naive_output(ctx, &p);
    const double naive_err = fclu_max_abs_err(naive, o, p.q_elems);
    const double floor = th_err_floor(desc.dtype, o, p.q_elems);
    ck_assert_msg(naive_err < (desc.dtype == FCL_DTYPE_F32 ? 1e-4 : 1e-2),
                  "case %zu: the naive algorithm is off by %g", i, naive_err);
    const unsigned group = (unsigned)(c->hq / c->hkv);
    for (int k = 0; k < 4; ++k) {
      if (!family_takes(family, c->nq, k & 2 ? group : 1)) continue;
      const fcl_plan hint = family_hint(family, k & 1 ? 5 : 1, k & 2 ? group : 1, &desc);
      ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
      th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      ck_assert_msg(r.status == FCL_SUCCESS, "case %zu: %s", i, fcl_context_last_error(ctx));
      const double err = fclu_max_abs_err(r.o, o, p.q_elems);
      ck_assert_msg(err <= 2 * naive_err + floor,
                    "case %zu, %u splits, %u heads a block: error %g > 2 x naive %g + %g", i,
                    r.info.plan.splits, r.info.plan.packed_heads, err, naive_err, floor);
      char what[64];
      snprintf(what, sizeof what, "cache case %zu", i);
      assert_lse(&r, lse, p.lse_elems, what);
      th_forward_free(&r);
    }
    free(naive);
    th_reference_free(&ref);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

/* Counted bytes against the model with a cache's lengths; the lengths'
 * refusals; the backward refuses them. */
START_TEST(cache_lengths_count_bytes_and_refuse_bad_ones) {
  fcl_context *ctx = th_context();
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  const ccase *c = &cache_cases[1];
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->nq, c->capacity, c->d);
  desc.causal = c->causal;
  desc.seqlens_k = c->lens;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 300, 1.0);
  if (info.limits.has_int64_atomics) {
    ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
    for (unsigned splits = 1; splits <= 4; splits += 3) {
      const fcl_plan hint = {.splits = splits};
      ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
      th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      ck_assert_int_eq(r.status, FCL_SUCCESS);
      ck_assert_msg(r.info.bytes_counted == r.info.bytes_model,
                    "%u splits: counted %llu bytes, the model says %llu", r.info.plan.splits,
                    (unsigned long long)r.info.bytes_counted,
                    (unsigned long long)r.info.bytes_model);
      th_forward_free(&r);
    }
    ck_assert_int_eq(fcl_context_set_count_io(ctx, 0), FCL_SUCCESS);
  }
  int32_t bad[6];
  memcpy(bad, c->lens, sizeof bad);
  bad[3] = (int32_t)c->capacity + 1;
  fcl_attention_desc d = desc;
  d.seqlens_k = bad;
  fcl_buffer_sizes sizes;
  char why[256];
  ck_assert_int_eq(fcl_attention_buffer_sizes(&d, &sizes, why, sizeof why), FCL_ERROR_INVALID_SHAPE);
  ck_assert(strstr(why, "seqlens_k[3]"));
  bad[3] = -1;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&d, &sizes, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  const int32_t cu[7] = {0, 1, 2, 3, 4, 5, 6};
  d = desc;
  d.cu_seqlens_q = cu;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&d, &sizes, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(why, "cu_seqlens_q"));
  fcl_plan plan;
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &desc, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_int_eq(fcl_attention_backward(ctx, &desc, FCL_ALGO_NAIVE, p.dq, p.dk, p.dv, p.dq, p.dq,
                                          p.dq, p.dq, p.dk, p.dv, NULL),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert(strstr(fcl_context_last_error(ctx), "seqlens_k"));
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* ---- appending to a KV cache ---------------------------------------------- */

/* Element (b, t, h, c) of a packed [B][N][H][d] array. */
static size_t packed_at(size_t n, size_t heads, size_t d, size_t b, size_t t, size_t h,
                        size_t c) {
  return ((b * n + t) * heads + h) * d + c;
}

/* New rows land at each entry's length, bit for bit, and nothing else of
 * the cache changes: every storage type, head_dim 5 (scalar) and 64, the
 * new rows packed or as K and V views of one [B][N][2][Hkv][d] buffer, an
 * entry filled to its capacity exactly. Counted bytes equal the model. */
START_TEST(append_writes_only_the_new_rows) {
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  const fcl_dtype types[3] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};
  const size_t dims[2] = {5, 64};
  const size_t batch = 3, hkv = 2, cap = 20, n_new = 5;
  const int32_t lens[3] = {0, 15, 4};
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 600);
  for (int t = 0; t < 3; ++t)
    for (int k = 0; k < 2; ++k)
      for (int interleaved = 0; interleaved < 2; ++interleaved) {
        const size_t d = dims[k], cache_n = batch * cap * hkv * d, new_n = batch * n_new * hkv * d;
        fcl_attention_desc desc;
        fcl_attention_desc_init(&desc, batch, hkv, hkv, 1, cap, d);
        desc.dtype = types[t];
        desc.seqlens_k = lens;
        float *kc = malloc(cache_n * sizeof *kc), *vc = malloc(cache_n * sizeof *vc);
        float *kv = malloc(2 * new_n * sizeof *kv), *got = malloc(cache_n * sizeof *got);
        ck_assert(kc && vc && kv && got);
        fclu_fill_normal(&rng, kc, cache_n, 1.0, types[t]);
        fclu_fill_normal(&rng, vc, cache_n, 1.0, types[t]);
        fclu_fill_normal(&rng, kv, 2 * new_n, 1.0, types[t]);
        /* the new rows: K then V packed, or interleaved [B][N][2][Hkv][d] */
        fcl_tensor_layout kl = {0}, vl = {0};
        if (interleaved) {
          kl = (fcl_tensor_layout){0, n_new * 2 * hkv * d, 2 * hkv * d, d};
          vl = (fcl_tensor_layout){hkv * d, n_new * 2 * hkv * d, 2 * hkv * d, d};
        } else {  /* both packed in one buffer, V after K */
          kl = (fcl_tensor_layout){0, n_new * hkv * d, hkv * d, d};
          vl = (fcl_tensor_layout){new_n, n_new * hkv * d, hkv * d, d};
        }
        const fcl_tensor_layout *kls = &kl, *vls = &vl;
        cl_mem dkc = fclu_upload(ctx, kc, cache_n, types[t]), dvc = fclu_upload(ctx, vc, cache_n, types[t]);
        cl_mem dnew = fclu_upload(ctx, kv, 2 * new_n, types[t]);
        ck_assert(dkc && dvc && dnew);
        fcl_run_info run;
        const fcl_status st = fcl_kv_cache_append(ctx, &desc, n_new, kls, vls, dnew, dnew, dkc, dvc,
                                                  &run);
        ck_assert_msg(st == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
        if (count)
          ck_assert_msg(run.bytes_counted == run.bytes_model, "append: counted %llu, model %llu",
                        (unsigned long long)run.bytes_counted, (unsigned long long)run.bytes_model);
        for (int which = 0; which < 2; ++which) {
          const float *old = which ? vc : kc;
          const fcl_tensor_layout *l = which ? vls : kls;
          ck_assert_int_eq(fclu_download(ctx, which ? dvc : dkc, got, cache_n, types[t]), 0);
          for (size_t b = 0; b < batch; ++b)
            for (size_t tok = 0; tok < cap; ++tok)
              for (size_t h = 0; h < hkv; ++h)
                for (size_t c = 0; c < d; ++c) {
                  const size_t at = packed_at(cap, hkv, d, b, tok, h, c);
                  const int fresh = tok >= (size_t)lens[b] && tok < (size_t)lens[b] + n_new;
                  const size_t src = l->offset + b * l->batch_stride +
                                     (tok - (size_t)lens[b]) * l->seq_stride + h * l->head_stride +
                                     c;
                  const float want = fresh ? kv[src] : old[at];
                  ck_assert_msg(memcmp(&got[at], &want, sizeof want) == 0,
                                "%s d %zu %s: %c cache (%zu, %zu, %zu, %zu) is %g, want %g",
                                fcl_dtype_name(types[t]), d, interleaved ? "interleaved" : "packed",
                                which ? 'V' : 'K', b, tok, h, c, (double)got[at], (double)want);
                }
        }
        clReleaseMemObject(dkc);
        clReleaseMemObject(dvc);
        clReleaseMemObject(dnew);
        free(kc);
        free(vc);
        free(kv);
        free(got);
      }
  fcl_context_release(ctx);
}
END_TEST

/* Refused appends leave the cache as it was. */
START_TEST(append_refusals_leave_the_cache) {
  fcl_context *ctx = th_context();
  const size_t batch = 3, hkv = 2, cap = 20, d = 8, n_new = 5;
  const size_t cache_n = batch * cap * hkv * d, new_n = batch * n_new * hkv * d;
  int32_t lens[3] = {0, 16, 4};
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, batch, hkv, hkv, 1, cap, d);
  desc.seqlens_k = lens;
  float *kc = malloc(cache_n * sizeof *kc), *got = malloc(cache_n * sizeof *got);
  ck_assert(kc && got);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 601);
  fclu_fill_normal(&rng, kc, cache_n, 1.0, FCL_DTYPE_F32);
  cl_mem dk = fclu_upload(ctx, kc, cache_n, FCL_DTYPE_F32), dv = fclu_upload(ctx, kc, cache_n, FCL_DTYPE_F32);
  cl_mem knew = fclu_upload(ctx, kc, new_n, FCL_DTYPE_F32), vnew = fclu_upload(ctx, kc, new_n, FCL_DTYPE_F32);
  const struct {
    int32_t len1;
    size_t n;
    int null_lens, alias;
    fcl_status want;
    const char *needle;
  } refusals[] = {{16, n_new, 0, 0, FCL_ERROR_INVALID_SHAPE, "entry 1, which holds 16"},
                  {0, n_new, 1, 0, FCL_ERROR_INVALID_ARGUMENT, "seqlens_k is NULL"},
                  {0, 0, 0, 0, FCL_ERROR_INVALID_ARGUMENT, "new_tokens is 0"},
                  {0, n_new, 0, 1, FCL_ERROR_INVALID_ARGUMENT, "k_cache"}};
  for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; ++i) {
    lens[1] = refusals[i].len1;
    fcl_attention_desc dd = desc;
    if (refusals[i].null_lens) dd.seqlens_k = NULL;
    const fcl_status st = fcl_kv_cache_append(ctx, &dd, refusals[i].n, NULL, NULL,
                                              refusals[i].alias ? dk : knew, vnew, dk, dv, NULL);
    ck_assert_msg(st == refusals[i].want, "case %zu: %s (%s)", i, fcl_status_str(st),
                  fcl_context_last_error(ctx));
    ck_assert_msg(strstr(fcl_context_last_error(ctx), refusals[i].needle), "case %zu: '%s'", i,
                  fcl_context_last_error(ctx));
    ck_assert_int_eq(fclu_download(ctx, dk, got, cache_n, FCL_DTYPE_F32), 0);
    ck_assert_msg(memcmp(got, kc, cache_n * sizeof *got) == 0, "case %zu wrote the cache", i);
  }
  clReleaseMemObject(dk);
  clReleaseMemObject(dv);
  clReleaseMemObject(knew);
  clReleaseMemObject(vnew);
  free(kc);
  free(got);
  fcl_context_release(ctx);
}
END_TEST

/* Append, then attend: the new queries see the cache and themselves.
 * The cache's new rows start out NaN; after the append and with the
 * lengths raised, the forward equals the reference over the whole keys. */
START_TEST(append_then_attend) {
  fcl_context *ctx = th_context();
  const size_t batch = 3, hq = 8, hkv = 2, n_new = 4, cap = 300, d = 32;
  const int32_t before[3] = {0, 17, 290};
  int32_t after[3];
  for (int b = 0; b < 3; ++b) after[b] = before[b] + (int32_t)n_new;
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, batch, hq, hkv, n_new, cap, d);
  desc.causal = 1;
  desc.seqlens_k = after;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 700, 1.0);
  const size_t new_n = batch * n_new * hkv * d;
  float *knew = malloc(new_n * sizeof *knew), *vnew = malloc(new_n * sizeof *vnew);
  float *kc = malloc(p.kv_elems * sizeof *kc), *vc = malloc(p.kv_elems * sizeof *vc);
  ck_assert(knew && vnew && kc && vc);
  memcpy(kc, p.k, p.kv_elems * sizeof *kc);
  memcpy(vc, p.v, p.kv_elems * sizeof *vc);
  for (size_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < n_new; ++t)
      for (size_t h = 0; h < hkv; ++h)
        for (size_t c = 0; c < d; ++c) {
          const size_t from = packed_at(cap, hkv, d, b, (size_t)before[b] + t, h, c);
          knew[packed_at(n_new, hkv, d, b, t, h, c)] = p.k[from];
          vnew[packed_at(n_new, hkv, d, b, t, h, c)] = p.v[from];
          kc[from] = vc[from] = NAN;
        }
  cl_mem dkc = fclu_upload(ctx, kc, p.kv_elems, desc.dtype), dvc = fclu_upload(ctx, vc, p.kv_elems, desc.dtype);
  cl_mem dkn = fclu_upload(ctx, knew, new_n, desc.dtype), dvn = fclu_upload(ctx, vnew, new_n, desc.dtype);
  fcl_attention_desc at_append = desc;
  at_append.seqlens_k = before;
  ck_assert_int_eq(fcl_kv_cache_append(ctx, &at_append, n_new, NULL, NULL, dkn, dvn, dkc, dvc, NULL),
                   FCL_SUCCESS);
  clReleaseMemObject(p.dk);
  clReleaseMemObject(p.dv);
  p.dk = dkc;  /* the forward reads the cache */
  p.dv = dvc;
  th_reference ref = th_reference_forward(&p);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  const double err = fclu_max_abs_err(r.o, ref.o, p.q_elems);
  ck_assert_msg(err < 1e-5, "after the append: error %g", err);
  assert_lse(&r, ref.lse, p.lse_elems, "after the append");

  /* The same step in one call (fcl_attention_forward_kvcache) on a fresh
   * copy of the holed cache: the same O and LSE bit for bit, counted bytes
   * the model's; refused by the forward's checks (an LSE buffer too
   * small), it writes nothing, the cache included. */
  const int count = th_count_io(ctx);
  cl_mem k2 = fclu_upload(ctx, kc, p.kv_elems, desc.dtype), v2 = fclu_upload(ctx, vc, p.kv_elems, desc.dtype);
  cl_mem o2 = fclu_poisoned_buffer(ctx, p.q_elems * sizeof(float));
  cl_mem lse2 = fclu_poisoned_buffer(ctx, p.lse_elems * sizeof(float));
  cl_mem short_lse = fclu_poisoned_buffer(ctx, (p.lse_elems - 1) * sizeof(float));
  ck_assert(k2 && v2 && o2 && lse2 && short_lse);
  ck_assert_int_eq(fcl_attention_forward_kvcache(ctx, &at_append, FCL_ALGO_FLASH, p.dq, n_new, NULL,
                                                 NULL, dkn, dvn, k2, v2, o2, short_lse, NULL),
                   FCL_ERROR_BUFFER_TOO_SMALL);
  float *back = malloc(p.kv_elems * sizeof *back);
  ck_assert_ptr_nonnull(back);
  ck_assert_int_eq(fclu_download(ctx, k2, back, p.kv_elems, desc.dtype), 0);
  ck_assert(memcmp(back, kc, p.kv_elems * sizeof *back) == 0);  /* the holes are still NaN */
  fcl_run_info ri;
  ck_assert_msg(fcl_attention_forward_kvcache(ctx, &at_append, FCL_ALGO_FLASH, p.dq, n_new, NULL,
                                              NULL, dkn, dvn, k2, v2, o2, lse2, &ri) == FCL_SUCCESS,
                "%s", fcl_context_last_error(ctx));
  if (count) ck_assert_uint_eq(ri.bytes_counted, ri.bytes_model);
  ck_assert_uint_gt(ri.flops, 0);
  float *o_one = malloc(p.q_elems * sizeof *o_one), *lse_one = malloc(p.lse_elems * sizeof *lse_one);
  ck_assert(o_one && lse_one);
  ck_assert_int_eq(fclu_download(ctx, o2, o_one, p.q_elems, desc.dtype), 0);
  ck_assert_int_eq(fclu_download(ctx, lse2, lse_one, p.lse_elems, FCL_DTYPE_F32), 0);
  ck_assert(memcmp(o_one, r.o, p.q_elems * sizeof *o_one) == 0);
  ck_assert(memcmp(lse_one, r.lse, p.lse_elems * sizeof *lse_one) == 0);
  if (count) ck_assert_int_eq(fcl_context_set_count_io(ctx, 0), FCL_SUCCESS);
  free(back);
  free(o_one);
  free(lse_one);
  const cl_mem made[5] = {k2, v2, o2, lse2, short_lse};
  for (int i = 0; i < 5; ++i) clReleaseMemObject(made[i]);
  th_forward_free(&r);
  th_reference_free(&ref);
  clReleaseMemObject(dkn);
  clReleaseMemObject(dvn);
  free(knew);
  free(vnew);
  free(kc);
  free(vc);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* 16-bit storage: each split's partial O is stored in the storage type,
 * one rounding more than the unsplit forward's. */
START_TEST(split_forward_in_half_types) {
  fcl_context *ctx = th_context();
  const fcl_dtype types[2] = {FCL_DTYPE_F16, FCL_DTYPE_BF16};
  for (int t = 0; t < 2; ++t)
    for (size_t i = 0; i < 2; ++i) {
      fcl_attention_desc desc = case_desc(&cases[i], 0);
      desc.dtype = types[t];
      th_problem p;
      th_problem_init(&p, ctx, &desc, 40 + i, 1.0);
      th_reference ref = th_reference_forward(&p);
      force(ctx, FAMILY_SIMT, 1, &desc);
      th_forward whole = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      force(ctx, FAMILY_SIMT, 5, &desc);
      th_forward split = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      ck_assert_int_eq(whole.status, FCL_SUCCESS);
      ck_assert_int_eq(split.status, FCL_SUCCESS);
      ck_assert_uint_gt(split.info.plan.splits, 1);
      const double ulp = th_half_ulp(types[t]);
      const double bound = fclu_max_abs_err(whole.o, ref.o, p.q_elems) +
                           2 * ulp * fclu_max_abs(ref.o, p.q_elems) + ERR_FLOOR;
      const double err = fclu_max_abs_err(split.o, ref.o, p.q_elems);
      ck_assert_msg(err <= bound, "%s, %u splits: error %g, bound %g", fcl_dtype_name(types[t]),
                    split.info.plan.splits, err, bound);
      th_forward_free(&whole);
      th_forward_free(&split);
      th_reference_free(&ref);
      th_problem_free(&p);
    }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(split_forward_counts_its_bytes_and_reruns_bit_for_bit) {
  const int family = _i;
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  for (size_t i = 0; i < 3; ++i) {
    if (!family_takes(family, cases[i].nq, 1)) continue;
    const fcl_attention_desc desc = case_desc(&cases[i], family);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 70 + i, 1.0);
    for (int with_lse = 0; with_lse < 2; ++with_lse) {
      force(ctx, family, 3, &desc);
      th_forward a = th_run_forward(ctx, &p, FCL_ALGO_FLASH, with_lse);
      th_forward b = th_run_forward(ctx, &p, FCL_ALGO_FLASH, with_lse);
      ck_assert_int_eq(a.status, FCL_SUCCESS);
      ck_assert_int_eq(b.status, FCL_SUCCESS);
      if (count)
        ck_assert_msg(a.info.bytes_counted == a.info.bytes_model,
                      "%zu: %u splits counted %llu bytes, the model says %llu", i,
                      a.info.plan.splits, (unsigned long long)a.info.bytes_counted,
                      (unsigned long long)a.info.bytes_model);
      ck_assert(memcmp(a.o, b.o, p.q_elems * sizeof *a.o) == 0);
      if (with_lse) ck_assert(memcmp(a.lse, b.lse, p.lse_elems * sizeof *a.lse) == 0);
      th_forward_free(&a);
      th_forward_free(&b);
    }
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

/* The planner splits the SIMT and MMA forwards where the grid would not
 * fill the device, by the rule fcl_plan.splits documents; never the
 * backward; a hint wins. */
START_TEST(planner_splits_by_its_rule) {
  size_t n;
  const fcl_device_profile *profiles = fcl_device_profiles(&n);
  ck_assert_uint_gt(n, 0);
  fcl_device_limits limits = profiles[0].info.limits;
  limits.compute_units = 132;
  const struct {
    size_t b, nk;
    int split;
  } rows[] = {{1, 32768, 1}, {1, 1024, 1}, {1, 100, 0}, {8, 8192, 1}, {64, 1024, 0}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    fcl_attention_desc d;
    fcl_attention_desc_init(&d, rows[i].b, 32, 8, 1, rows[i].nk, 128);
    d.dtype = FCL_DTYPE_F16;
    fcl_plan plan;
    char why[256];
    const fcl_plan simt = {.kernel = FCL_FLASH_KERNEL_SIMT};  /* (the decode kernel's: below) */
    ck_assert_msg(fcl_plan_flash_hinted(&limits, &d, FCL_PASS_FORWARD, &simt, &plan, why,
                                        sizeof why) == FCL_SUCCESS,
                  "%s", why);
    ck_assert_uint_eq(plan.packed_heads, 4);  /* one token of 4 query heads per KV head */
    /* batch x 8 KV heads' work-groups, each one block, against 132 compute units */
    const size_t groups = rows[i].b * 8 * ((4 + plan.block_q - 1) / plan.block_q);
    unsigned want = 1;
    if (groups < 132) {
      size_t s = (2 * 132 + groups - 1) / groups, by_keys = (rows[i].nk + 255) / 256;
      if (s > by_keys) s = by_keys;
      const size_t tiles = (rows[i].nk + plan.block_k - 1) / plan.block_k;
      const size_t per = (tiles + s - 1) / s;
      want = (unsigned)((tiles + per - 1) / per);
    }
    ck_assert_int_eq(want > 1, rows[i].split);
    ck_assert_msg(plan.splits == want, "B %zu, %zu keys: %u splits, want %u", rows[i].b,
                  rows[i].nk, plan.splits, want);
    ck_assert_int_eq(fcl_plan_flash(&limits, &d, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_eq(plan.splits, 1);
    ck_assert_uint_eq(plan.packed_heads, 1);
  }
  /* The programs such a forward builds: the split, packed kernel and the merge. */
  fcl_attention_desc dec;
  fcl_attention_desc_init(&dec, 1, 32, 8, 1, 32768, 128);
  fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
  unsigned count = 0;
  char pwhy[256];
  ck_assert_int_eq(fcl_flash_programs(&limits, &dec, FCL_PASS_FORWARD, programs, &count, pwhy,
                                      sizeof pwhy),
                   FCL_SUCCESS);
  ck_assert_uint_eq(count, 2);
  ck_assert(strstr(programs[0].options, "-DSPLIT_KV=1") && strstr(programs[0].options, "-DPACK_GQA=4"));
  ck_assert_str_eq(programs[1].file, "merge.cl");
  ck_assert_str_eq(programs[1].kernels[0], "merge_states");
  fcl_plan bad = {.splits = FCL_MAX_SPLITS + 1};
  char why[256];
  ck_assert_int_eq(fcl__check_tiling_hint_why(&bad, why, sizeof why), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(why, "FCL_MAX_SPLITS"));
}
END_TEST

/* An H200 as the planner sees it (../shared/DEVICE.md's limits). */
static fcl_device_limits h200_limits(void) {
  size_t n;
  fcl_device_limits limits = fcl_device_profiles(&n)[0].info.limits;
  limits.local_mem_bytes = 49152;
  limits.max_work_group_size = 1024;
  limits.compute_units = 132;
  limits.nvidia_ptx = 1;
  limits.shuffle = FCL_SHUFFLE_NVIDIA_PTX;
  limits.nvidia_sm = 90;
  limits.vendor = FCL_VENDOR_NVIDIA;
  limits.sub_group_size = 32;
  return limits;
}

/* The forward's plan of a one-row decode step, f16 queries over a cache of
 * kv's form (B x 32 query heads over hkv, cache 8k, d 128), on the
 * decode-mma kernel. */
static fcl_plan quantized_decode_plan(const fcl_device_limits *limits, size_t b, size_t hkv,
                                      fcl_kv_dtype kv) {
  fcl_attention_desc q;
  fcl_attention_desc_init(&q, b, 32, hkv, 1, 8192, 128);
  q.dtype = FCL_DTYPE_F16;
  q.kv_dtype = kv;
  fcl_plan plan;
  char why[256];
  ck_assert_msg(fcl_plan_flash(limits, &q, FCL_PASS_FORWARD, &plan, why, sizeof why) ==
                    FCL_SUCCESS, "%s", why);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_DECODE_MMA);
  return plan;
}

/* On GPUs the forward of at most FCL_DECODE_MAX_ROWS packed rows runs the
 * decode kernel, and on NVIDIA the 16-bit forward of at most
 * FCL_DECODE_MMA_MAX_ROWS up to head_dim 128 the one on matrix
 * instructions, both split for one wave of work-groups: 2 a compute unit
 * and a power of two (3 for a quantized cache at up to 8 rows a block, not
 * rounded: below); at most 64; more rows, the backward and CPUs keep their
 * kernels. */
START_TEST(planner_takes_the_decode_kernel_by_its_rule) {
  const fcl_device_limits limits = h200_limits();
  const struct {
    size_t b, hq, nq, nk, d;
    fcl_dtype dtype;
    unsigned kernel, rows, lanes;
  } rows[] = {{1, 32, 1, 32768, 128, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE_MMA, 4, 4},
              {8, 32, 1, 8192, 128, FCL_DTYPE_BF16, FCL_FLASH_KERNEL_DECODE_MMA, 4, 4},
              {4, 32, 4, 4096, 64, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE_MMA, 16, 4},
              {1, 32, 1, 32768, 128, FCL_DTYPE_F32, FCL_FLASH_KERNEL_DECODE, 4, 16},
              {4, 32, 2, 4096, 64, FCL_DTYPE_F32, FCL_FLASH_KERNEL_DECODE, 8, 16},
              {1, 8, 1, 1000, 256, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE, 1, 32},
              {1, 32, 16, 32768, 128, FCL_DTYPE_F16, FCL_FLASH_KERNEL_MMA, 0, 0}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    fcl_attention_desc d;
    fcl_attention_desc_init(&d, rows[i].b, rows[i].hq, 8, rows[i].nq, rows[i].nk, rows[i].d);
    d.dtype = rows[i].dtype;
    fcl_plan plan;
    char why[256];
    ck_assert_msg(fcl_plan_flash(&limits, &d, FCL_PASS_FORWARD, &plan, why, sizeof why) ==
                      FCL_SUCCESS, "%s", why);
    ck_assert_msg(plan.kernel == rows[i].kernel, "row %zu: %s kernel", i,
                  fcl_flash_kernel_name(plan.kernel));
    if (plan.kernel == FCL_FLASH_KERNEL_MMA) continue;
    ck_assert_uint_eq(plan.block_q, rows[i].rows);
    ck_assert_uint_eq(plan.threads_per_row, rows[i].lanes);
    ck_assert_uint_eq(plan.wg_size, 128);
    ck_assert_uint_eq(plan.block_k, plan.kernel == FCL_FLASH_KERNEL_DECODE_MMA
                                        ? plan.wg_size / 32 * 16
                                        : plan.wg_size / plan.threads_per_row * 4);
    ck_assert_uint_eq(plan.local_bytes, fcl__flash_decode_local_bytes(&plan, &limits));
    ck_assert_uint_le(plan.local_bytes, limits.local_mem_bytes - 1024);
    const size_t groups = rows[i].b * (rows[i].hq / plan.packed_heads) *
                          ((rows[i].nq * plan.packed_heads + plan.block_q - 1) / plan.block_q);
    unsigned want = 1;
    if (groups < 132) {  /* 2 work-groups a compute unit */
      const size_t per_cu = 2;
      size_t s = 1, by_keys = (rows[i].nk + 255) / 256;
      while (2 * s <= per_cu * 132 / groups) s *= 2;
      if (s > by_keys) s = by_keys;
      if (s > 64) s = 64;
      const size_t tiles = (rows[i].nk + plan.block_k - 1) / plan.block_k;
      const size_t per = (tiles + s - 1) / s;
      want = (unsigned)((tiles + per - 1) / per);
    }
    ck_assert_msg(plan.splits == want, "row %zu: %u splits, want %u", i, plan.splits, want);
    /* on NVIDIA, merged in the split launch where the call reads at most
     * 256 KiB of K and V a compute unit */
    const double kv = 2.0 * rows[i].b * rows[i].nk * 8 * rows[i].d * fcl_dtype_size(d.dtype);
    ck_assert_uint_eq(plan.merge, want == 1            ? FCL_SPLIT_MERGE_AUTO
                                  : kv <= 132.0 * 262144 ? FCL_SPLIT_MERGE_LAST_SPLIT
                                                         : FCL_SPLIT_MERGE_KERNEL);
    ck_assert_int_eq(fcl_plan_flash(&limits, &d, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_uint_lt(plan.kernel, FCL_FLASH_KERNEL_DECODE);
  }
  /* A quantized cache at up to 8 rows a block: one wave of 3 work-groups a
   * compute unit, not rounded to a power of two; at 16 rows, 2. */
  for (size_t hkv = 8; hkv >= 2; hkv /= 4) {
    const fcl_plan plan = quantized_decode_plan(&limits, 8, hkv, FCL_KV_Q8_0);
    ck_assert_uint_eq(plan.block_q, 32 / hkv);
    const size_t groups = 8 * hkv, tiles = 8192 / plan.block_k;
    const size_t wave = (plan.block_q <= 8 ? 3 : 2) * 132 / groups;
    size_t s = wave;
    if (plan.block_q > 8)  /* 2 a compute unit: the power of two below */
      for (s = 1; 2 * s <= wave;) s *= 2;
    const size_t per = (tiles + s - 1) / s;
    ck_assert_msg(plan.splits == (tiles + per - 1) / per, "Hkv %zu: %u splits, want %zu", hkv,
                  plan.splits, (tiles + per - 1) / per);
  }
  /* ... and where its blocks fill a wave unsplit, the count whose waves of
   * 396 are fullest (3 at 256, 512 and 1024 blocks: 1.94, 3.88 and 7.76
   * waves against 0.65, 1.29 and 2.59 unsplit); an f16 cache stays unsplit. */
  static const struct {
    size_t b;
    fcl_kv_dtype kv;
    unsigned splits;
  } full[] = {{32, FCL_KV_Q8_0, 3},  {64, FCL_KV_Q4_0, 3}, {128, FCL_KV_FP8_E4M3, 3},
              {64, FCL_KV_AS_DTYPE, 1}};
  for (size_t i = 0; i < sizeof full / sizeof full[0]; ++i) {
    const fcl_plan plan = quantized_decode_plan(&limits, full[i].b, 8, full[i].kv);
    ck_assert_msg(plan.splits == full[i].splits, "B %zu: %u splits, want %u", full[i].b,
                  plan.splits, full[i].splits);
  }
  /* The programs: the decode kernel, split, then the merge kernel; for a
   * short call, merged in the split launch, one program. */
  fcl_attention_desc dec, short_dec;
  fcl_attention_desc_init(&dec, 1, 32, 8, 1, 32768, 128);
  fcl_attention_desc_init(&short_dec, 1, 32, 8, 1, 1024, 128);
  fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
  unsigned count = 0;
  char why[256];
  ck_assert_int_eq(fcl_flash_programs(&limits, &dec, FCL_PASS_FORWARD, programs, &count, why,
                                      sizeof why), FCL_SUCCESS);
  ck_assert_uint_eq(count, 2);
  ck_assert_str_eq(programs[0].file, "flash_fwd_decode.cl");
  /* the compute capability, which an fp8 cache's conversions take from sm_89 (cl/mma.cl) */
  ck_assert_msg(strstr(programs[0].options, "-DFCL_NVIDIA_SM=90"), "%s", programs[0].options);
  ck_assert_str_eq(programs[0].kernels[0], "flash_fwd_decode");
  ck_assert(strstr(programs[0].options, "-DKEY_LANES=16") &&
            strstr(programs[0].options, "-DSPLIT_KV=1") &&
            !strstr(programs[0].options, "MERGE_LAST_SPLIT"));
  ck_assert_str_eq(programs[1].file, "merge.cl");
  ck_assert_int_eq(fcl_flash_programs(&limits, &short_dec, FCL_PASS_FORWARD, programs, &count,
                                      why, sizeof why), FCL_SUCCESS);
  ck_assert_uint_eq(count, 1);
  ck_assert(strstr(programs[0].options, "-DSPLIT_KV=1") &&
            strstr(programs[0].options, "-DMERGE_LAST_SPLIT=1"));
  const fcl_plan by_kernel = {.merge = FCL_SPLIT_MERGE_KERNEL};
  ck_assert_int_eq(fcl_flash_programs_hinted(&limits, &short_dec, FCL_PASS_FORWARD, &by_kernel,
                                             programs, &count, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(count, 2);
  /* Every GPU profile takes it too, with its sums through local memory,
   * and merges a short call in the launch on NVIDIA only; a CPU does not
   * take it. */
  size_t n_profiles;
  const fcl_device_profile *profiles = fcl_device_profiles(&n_profiles);
  fcl_plan plan;
  for (size_t i = 0; i < n_profiles; ++i) {
    ck_assert_int_eq(fcl_plan_flash(&profiles[i].info.limits, &dec, FCL_PASS_FORWARD, &plan, why,
                                    sizeof why),
                     FCL_SUCCESS);
    ck_assert_msg(plan.kernel == FCL_FLASH_KERNEL_DECODE, "%s: %s", profiles[i].key,
                  fcl_flash_kernel_name(plan.kernel));
    ck_assert_uint_eq(plan.merge, FCL_SPLIT_MERGE_KERNEL);
    fcl_plan short_plan;
    ck_assert_int_eq(fcl_plan_flash(&profiles[i].info.limits, &short_dec, FCL_PASS_FORWARD,
                                    &short_plan, why, sizeof why),
                     FCL_SUCCESS);
    if (short_plan.splits > 1)
      ck_assert_msg(short_plan.merge == (profiles[i].info.limits.nvidia_ptx
                                             ? FCL_SPLIT_MERGE_LAST_SPLIT
                                             : FCL_SPLIT_MERGE_KERNEL),
                    "%s: merge %s", profiles[i].key, fcl_split_merge_name(short_plan.merge));
    ck_assert_uint_eq(plan.local_bytes,
                      fcl__flash_decode_local_bytes(&plan, &profiles[i].info.limits));
  }
  fcl_device_limits cpu = limits;
  cpu.nvidia_ptx = 0;
  cpu.shuffle = FCL_SHUFFLE_NONE;
  cpu.nvidia_sm = 0;
  cpu.vendor = FCL_VENDOR_OTHER;
  cpu.is_gpu = 0;
  ck_assert_int_eq(fcl_plan_flash(&cpu, &dec, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_ne(plan.kernel, FCL_FLASH_KERNEL_DECODE);
  /* ... unless a hint asks for it: the plan and the programs a forced
   * context would build, local-memory sums and all */
  const fcl_plan asked = {.kernel = FCL_FLASH_KERNEL_DECODE, .splits = 7};
  ck_assert_int_eq(fcl_plan_flash_hinted(&cpu, &dec, FCL_PASS_FORWARD, &asked, &plan, why,
                                         sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_DECODE);
  ck_assert_uint_le(plan.splits, 7);
  ck_assert_uint_eq(plan.local_bytes, fcl__flash_decode_local_bytes(&plan, &cpu));
  ck_assert_int_eq(fcl_flash_programs_hinted(&cpu, &dec, FCL_PASS_FORWARD, &asked, programs,
                                             &count, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_str_eq(programs[0].file, "flash_fwd_decode.cl");
  ck_assert_uint_eq(programs[0].local_bytes, plan.local_bytes);
  const fcl_plan bad_hint = {.kernel = FCL_FLASH_KERNELS};
  ck_assert_int_eq(fcl_plan_flash_hinted(&cpu, &dec, FCL_PASS_FORWARD, &bad_hint, &plan, why,
                                         sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(fcl_flash_kernel_name(FCL_FLASH_KERNEL_DECODE), "decode");
  ck_assert_str_eq(fcl_flash_kernel_name(FCL_FLASH_KERNEL_DECODE_MMA), "decode-mma");
  ck_assert_str_eq(fcl_flash_kernel_name(99), "unknown");
  ck_assert_str_eq(fcl_split_merge_name(FCL_SPLIT_MERGE_LAST_SPLIT), "last-split");
  ck_assert_str_eq(fcl_split_merge_name(3), "unknown");
  const fcl_plan bad_merge = {.merge = 3};
  ck_assert_int_eq(fcl_plan_flash_hinted(&cpu, &dec, FCL_PASS_FORWARD, &bad_merge, &plan, why,
                                         sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

/* The decode kernel asked for where it cannot run: refused with the
 * reason, nothing written. */
START_TEST(decode_kernel_refusals) {
  const fcl_device_limits limits = h200_limits();
  const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_DECODE};
  const struct {
    size_t nq, d;
    fcl_pass pass;
    const char *says;
  } rows[] = {{1, 30, FCL_PASS_FORWARD, "multiples of 4"},
              {3, 64, FCL_PASS_FORWARD, "FCL_DECODE_MAX_ROWS"},
              {1, 64, FCL_PASS_BACKWARD, "are forwards"}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    fcl_attention_desc d;
    fcl_attention_desc_init(&d, 1, 32, 8, rows[i].nq, 500, rows[i].d);
    fcl_plan plan = {.block_q = 12345};
    char why[256] = "";
    ck_assert_int_eq(fcl__plan_flash(&limits, &d, rows[i].pass, &hint, &plan, why, sizeof why),
                     FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(why, rows[i].says), "row %zu: %s", i, why);
    ck_assert_uint_eq(plan.block_q, 12345);
  }
  /* Through a context: the call fails with the reason and writes nothing. */
  fcl_context *ctx = th_context();
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 1, 8, 2, 3, 100, 32);  /* 12 packed rows */
  th_problem p;
  th_problem_init(&p, ctx, &d, 5, 1.0);
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_int_eq(r.status, FCL_ERROR_UNSUPPORTED);
  ck_assert(strstr(fcl_context_last_error(ctx), "FCL_DECODE_MAX_ROWS"));
  th_forward_free(&r);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* 16-bit storage in the decode kernel: within two roundings of the
 * output's size of the SIMT kernel's error, split and not. */
START_TEST(decode_kernel_in_half_types) {
  fcl_context *ctx = th_context();
  const fcl_dtype types[2] = {FCL_DTYPE_F16, FCL_DTYPE_BF16};
  for (int t = 0; t < 2; ++t)
    for (size_t i = 0; i < 2; ++i) {
      fcl_attention_desc desc = case_desc(&cases[i], FAMILY_DECODE);
      desc.dtype = types[t];
      th_problem p;
      th_problem_init(&p, ctx, &desc, 60 + i, 1.0);
      th_reference ref = th_reference_forward(&p);
      force(ctx, FAMILY_SIMT, 1, &desc);
      th_forward simt = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
      ck_assert_int_eq(simt.status, FCL_SUCCESS);
      const double ulp = th_half_ulp(types[t]);
      const double bound = fclu_max_abs_err(simt.o, ref.o, p.q_elems) +
                           2 * ulp * fclu_max_abs(ref.o, p.q_elems) + ERR_FLOOR;
      for (unsigned splits = 1; splits <= 4; splits += 3) {
        force(ctx, FAMILY_DECODE, splits, &desc);
        th_forward r = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
        ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
        ck_assert_uint_eq(r.info.plan.kernel, FCL_FLASH_KERNEL_DECODE);
        const double err = fclu_max_abs_err(r.o, ref.o, p.q_elems);
        ck_assert_msg(err <= bound, "%s, %u splits: error %g, bound %g",
                      fcl_dtype_name(types[t]), r.info.plan.splits, err, bound);
        th_forward_free(&r);
      }
      th_forward_free(&simt);
      th_reference_free(&ref);
      th_problem_free(&p);
    }
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("decode");
  TCase *tc = th_tcase("decode");
  tcase_add_loop_test(tc, split_forward_matches_reference, 0, FAMILIES);
  tcase_add_loop_test(tc, packed_heads_match_reference, 0, FAMILIES);
  tcase_add_loop_test(tc, packed_heads_in_a_ragged_batch, 0, FAMILIES);
  tcase_add_test(tc, packing_refused_where_it_cannot_be);
  tcase_add_test(tc, kept_scratch_and_kernels_change_no_bit);
  tcase_add_loop_test(tc, merge_in_the_split_launch_matches_the_merge_kernel, 0, 2);
  tcase_add_loop_test(tc, cache_lengths_match_reference, 0, FAMILIES);
  tcase_add_test(tc, cache_lengths_count_bytes_and_refuse_bad_ones);
  tcase_add_test(tc, append_writes_only_the_new_rows);
  tcase_add_test(tc, append_refusals_leave_the_cache);
  tcase_add_test(tc, append_then_attend);
  tcase_add_test(tc, split_forward_in_half_types);
  tcase_add_loop_test(tc, split_forward_counts_its_bytes_and_reruns_bit_for_bit, 0, FAMILIES);
  tcase_add_test(tc, planner_splits_by_its_rule);
  tcase_add_test(tc, planner_takes_the_decode_kernel_by_its_rule);
  tcase_add_test(tc, decode_kernel_refusals);
  tcase_add_test(tc, decode_kernel_in_half_types);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
