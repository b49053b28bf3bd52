/*
 * test_mla.c — DeepSeek's latent attention decode: head_dim 576, head_dim_v
 * 512, one KV head, 16 and 128 query heads packed into the decode kernel's
 * blocks, V a view of K's first 512 columns (one buffer, K's layout). Against
 * the float64 reference on random inputs, outputs poisoned first: contiguous
 * and paged (16-token pages, a shuffled table) caches of lengths ending
 * mid-tile, unsplit and split, f32, f16 and bf16, O and LSE; the decode
 * kernel on matrix instructions (emulated off NVIDIA) at two widths up to
 * 128 and, on its wide kernel, at 576 and 512, 256, 192 and 128, and 288
 * and 256; a V
 * wider than K on the decode kernel; the counted bytes equal the I/O model's (with V a
 * view of K, each key row once); reruns bit-identical; V
 * in a buffer of its own gives the same values; a prefill family, the
 * matrix decode in f32 and the backward refuse head_dim 576 and write
 * nothing.
 */
#include "harness.h"
#include "rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 2
#define CAPACITY 300
#define PAGE 16

static const int32_t lens[BATCH] = {277, 131};  /* mid-tile ends */

typedef struct mla_case {
  fcl_dtype dtype;
  size_t heads;
  int paged;
  unsigned splits;  /* 0: the planner's */
  size_t d, dv;     /* V: K's first dv columns where dv <= d, else a buffer of its own */
  unsigned kernel;  /* 0: the planner's (the decode kernel) */
  unsigned merge;   /* 0: the planner's */
} mla_case;

static const mla_case cases[] = {
    {FCL_DTYPE_F16, 16, 0, 0, 576, 512, 0, 0},  {FCL_DTYPE_BF16, 16, 1, 0, 576, 512, 0, 0},
    {FCL_DTYPE_F32, 16, 0, 3, 576, 512, 0, 0},  {FCL_DTYPE_F16, 128, 1, 4, 576, 512, 0, 0},
    {FCL_DTYPE_BF16, 128, 0, 1, 576, 512, 0, 0}, {FCL_DTYPE_F32, 128, 1, 0, 576, 512, 0, 0},
    /* the merge in the split launch, and the merge kernel, asked for */
    {FCL_DTYPE_F16, 16, 1, 5, 576, 512, 0, FCL_SPLIT_MERGE_LAST_SPLIT},
    {FCL_DTYPE_F32, 128, 0, 6, 576, 512, 0, FCL_SPLIT_MERGE_KERNEL},
    /* one width of 576, V all of K: an O the merge kernel does not take merges in the launch */
    {FCL_DTYPE_F16, 16, 0, 3, 576, 576, 0, 0},
    /* the decode kernel on matrix instructions (emulated off NVIDIA): two widths up to 128 */
    {FCL_DTYPE_F16, 8, 1, 2, 128, 64, FCL_FLASH_KERNEL_DECODE_MMA, 0},
    {FCL_DTYPE_BF16, 16, 0, 0, 64, 128, FCL_FLASH_KERNEL_DECODE_MMA, 0},
    /* its wide kernel (beyond 128 columns): blocks of 16 and of 32 rows,
     * paged, split (the merge kernel and the merge in the launch), one
     * width of 256, DeepSeek's prefill widths */
    {FCL_DTYPE_F16, 16, 0, 0, 576, 512, FCL_FLASH_KERNEL_DECODE_MMA, 0},
    {FCL_DTYPE_BF16, 128, 1, 2, 576, 512, FCL_FLASH_KERNEL_DECODE_MMA, FCL_SPLIT_MERGE_KERNEL},
    {FCL_DTYPE_F16, 128, 0, 3, 576, 512, FCL_FLASH_KERNEL_DECODE_MMA, FCL_SPLIT_MERGE_LAST_SPLIT},
    {FCL_DTYPE_F16, 32, 1, 0, 256, 256, FCL_FLASH_KERNEL_DECODE_MMA, 0},
    {FCL_DTYPE_BF16, 16, 0, 2, 192, 128, FCL_FLASH_KERNEL_DECODE_MMA, 0},
    {FCL_DTYPE_F16, 16, 1, 0, 288, 256, FCL_FLASH_KERNEL_DECODE_MMA, 0},  /* K in 2-step chunks */
    /* and the decode kernel at a wider V than K */
    {FCL_DTYPE_F32, 4, 0, 2, 64, 96, FCL_FLASH_KERNEL_DECODE, 0},
};
#define N_CASES (sizeof cases / sizeof *cases)

/* The call's problem: K (and V within it) as a packed cache or a pool of pages. */
typedef struct mla {
  fcl_attention_desc desc;  /* the call's */
  fcl_attention_desc ref;   /* the reference's: packed, V of its own */
  float *q, *k, *v;         /* host, packed [b][t][h][d]; v = k's first dv columns (view) */
  size_t d, dv;
  int view;                 /* V a view of K */
  cl_mem mv;                /* V's own buffer (not a view) */
  cl_mem mq, mk, table;
  size_t nq, nk, nv, no, nl, k_elems;
  int32_t *host_table;
} mla;

static void mla_init(mla *m, fcl_context *ctx, const mla_case *c, uint64_t seed) {
  memset(m, 0, sizeof *m);
  fcl_attention_desc *d = &m->desc;
  const size_t D = c->d, DV = c->dv;
  m->d = D;
  m->dv = DV;
  m->view = DV <= D;
  fcl_attention_desc_init(d, BATCH, c->heads, 1, 1, CAPACITY, D);
  d->head_dim_v = DV;
  d->causal = 1;
  d->dtype = c->dtype;
  d->seqlens_k = lens;
  m->ref = *d;
  m->nq = BATCH * c->heads * D;
  m->nk = BATCH * CAPACITY * D;
  m->nv = BATCH * CAPACITY * DV;
  m->no = BATCH * c->heads * DV;
  m->nl = BATCH * c->heads;
  fclu_rng rng;
  fclu_rng_seed(&rng, 0x6d6c61u + seed);
  m->q = malloc(m->nq * sizeof *m->q);
  m->k = malloc(m->nk * sizeof *m->k);
  m->v = malloc(m->nv * sizeof *m->v);
  ck_assert(m->q && m->k && m->v);
  fclu_fill_normal(&rng, m->q, m->nq, 1.0, c->dtype);
  fclu_fill_normal(&rng, m->k, m->nk, 1.0, c->dtype);
  if (m->view)
    for (size_t t = 0; t < BATCH * CAPACITY; ++t) memcpy(m->v + t * DV, m->k + t * D, DV * 4);
  else
    fclu_fill_normal(&rng, m->v, m->nv, 1.0, c->dtype);
  m->mq = fclu_upload(ctx, m->q, m->nq, c->dtype);
  ck_assert(m->mq);
  if (!m->view) {  /* packed, contiguous */
    ck_assert(!c->paged);
    m->k_elems = m->nk;
    m->mk = fclu_upload(ctx, m->k, m->nk, c->dtype);
    m->mv = fclu_upload(ctx, m->v, m->nv, c->dtype);
    ck_assert(m->mk && m->mv);
    return;
  }
  /* V: K's rows, its first DV columns */
  m->mv = m->mk;
  d->v = (fcl_tensor_layout){0, CAPACITY * D, D, D};
  if (!c->paged) {
    m->k_elems = m->nk;
    m->mk = m->mv = fclu_upload(ctx, m->k, m->nk, c->dtype);
    ck_assert(m->mk);
    return;
  }
  /* Pages of a shuffled pool, one spare, each sequence's pages in turn. */
  const size_t per_seq = CAPACITY / PAGE + 1, pages = BATCH * per_seq + 1;
  m->host_table = malloc(BATCH * per_seq * sizeof *m->host_table);
  float *pool = malloc(pages * PAGE * D * sizeof *pool);
  ck_assert(m->host_table && pool);
  for (size_t i = 0; i < pages * PAGE * D; ++i) pool[i] = NAN;
  for (size_t i = 0; i < BATCH * per_seq; ++i)
    m->host_table[i] = (int32_t)((i * 7 + 3) % pages);  /* 7 is prime to pages */
  for (size_t b = 0; b < BATCH; ++b)
    for (size_t t = 0; t < CAPACITY; ++t)
      memcpy(pool + ((size_t)m->host_table[b * per_seq + t / PAGE] * PAGE + t % PAGE) * D,
             m->k + (b * CAPACITY + t) * D, D * 4);
  m->k_elems = pages * PAGE * D;
  m->mk = m->mv = fclu_upload(ctx, pool, m->k_elems, c->dtype);
  free(pool);
  cl_int err;
  m->table = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                            BATCH * per_seq * sizeof *m->host_table, m->host_table, &err);
  ck_assert(m->mk && err == CL_SUCCESS);
  d->block_table = m->table;
  d->page_size = PAGE;
  d->pages_per_seq = per_seq;
  d->num_pages = pages;
  d->v = (fcl_tensor_layout){0, PAGE * D, D, D};
}

static void mla_free(mla *m) {
  free(m->q);
  free(m->k);
  free(m->v);
  free(m->host_table);
  clReleaseMemObject(m->mq);
  clReleaseMemObject(m->mk);
  if (m->mv != m->mk) clReleaseMemObject(m->mv);
  if (m->table) clReleaseMemObject(m->table);
}

/* The call's O and LSE as floats, and its run info; poisoned first. */
static fcl_status mla_run(fcl_context *ctx, const mla *m, cl_mem v, float *o, float *lse,
                          fcl_run_info *info) {
  const size_t e = fcl_dtype_size(m->desc.dtype);
  cl_mem mo = fclu_poisoned_buffer(ctx, m->no * e), ml = fclu_poisoned_buffer(ctx, m->nl * 4);
  ck_assert(mo && ml);
  fcl_status st = fcl_attention_forward(ctx, &m->desc, FCL_ALGO_FLASH, m->mq, m->mk, v, mo, ml,
                                        info);
  if (st == FCL_SUCCESS) {
    ck_assert_int_eq(fclu_download(ctx, mo, o, m->no, m->desc.dtype), 0);
    ck_assert_int_eq(fclu_download(ctx, ml, lse, m->nl, FCL_DTYPE_F32), 0);
  }
  clReleaseMemObject(mo);
  clReleaseMemObject(ml);
  return st;
}

/* A run's O and LSE on the host. */
typedef struct outs {
  float *o, *lse;
} outs;

static outs outs_new(const mla *m) {
  outs x = {malloc(m->no * 4), malloc(m->nl * 4)};
  ck_assert(x.o && x.lse);
  return x;
}

static void outs_free(outs *x) {
  free(x->o);
  free(x->lse);
}

static int outs_equal(const mla *m, const outs *a, const outs *b) {
  return memcmp(a->o, b->o, m->no * 4) == 0 && memcmp(a->lse, b->lse, m->nl * 4) == 0;
}

static double tolerance(fcl_dtype t) {
  return t == FCL_DTYPE_F32 ? 2e-5 : t == FCL_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

START_TEST(decode_matches_reference) {
  const mla_case *c = &cases[_i];
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  mla m;
  mla_init(&m, ctx, c, (uint64_t)_i);
  if (c->splits || c->kernel) {
    const fcl_plan hint = {.kernel = c->kernel ? c->kernel : FCL_FLASH_KERNEL_DECODE,
                           .splits = c->splits,
                           .merge = c->merge};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  }
  outs a = outs_new(&m), b = outs_new(&m);
  double *ro = malloc(m.no * 8), *rl = malloc(m.nl * 8);
  ck_assert(ro && rl);
  fcl_run_info info;
  fcl_status st = mla_run(ctx, &m, m.mv, a.o, a.lse, &info);
  ck_assert_msg(st == FCL_SUCCESS, "case %d: %s", _i, fcl_context_last_error(ctx));
  /* the planner's: on matrix instructions where they run natively, for
   * the 16-bit types (its wide kernel), else the decode kernel */
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  const unsigned planned = fcl__mma_native(&dev.limits) && c->dtype != FCL_DTYPE_F32
                               ? FCL_FLASH_KERNEL_DECODE_MMA
                               : FCL_FLASH_KERNEL_DECODE;
  ck_assert_uint_eq(info.plan.kernel, c->kernel ? c->kernel : c->splits ? FCL_FLASH_KERNEL_DECODE : planned);
  ck_assert_uint_eq(info.plan.packed_heads, c->heads);
  if (c->splits) ck_assert_uint_eq(info.plan.splits, c->splits);
  if (c->merge) ck_assert_uint_eq(info.plan.merge, c->merge);
  if (count)
    ck_assert_msg(info.bytes_counted == info.bytes_model, "case %d: counted %llu, model %llu",
                  _i, (unsigned long long)info.bytes_counted,
                  (unsigned long long)info.bytes_model);
  fclref_forward(&m.ref, m.q, m.k, m.v, ro, rl);
  const double tol = tolerance(c->dtype), scale = fclu_max_abs(ro, m.no);
  const double err_o = fclu_max_abs_err(a.o, ro, m.no), err_l = fclu_max_abs_err(a.lse, rl, m.nl);
  ck_assert_msg(err_o <= tol * (scale > 1 ? scale : 1), "case %d: O off by %g", _i, err_o);
  ck_assert_msg(err_l <= tol * 8, "case %d: LSE off by %g", _i, err_l);
  /* a rerun: the same bits */
  ck_assert_int_eq(mla_run(ctx, &m, m.mv, b.o, b.lse, NULL), FCL_SUCCESS);
  ck_assert(outs_equal(&m, &a, &b));
  outs_free(&a);
  outs_free(&b);
  free(ro);
  free(rl);
  mla_free(&m);
  fcl_context_release(ctx);
}
END_TEST

/* V in a buffer of its own (the same values in K's layout): the kernel
 * loads it, the model counts it, the values are those of V read in K. */
START_TEST(v_of_its_own_gives_the_same_values) {
  const mla_case c = {FCL_DTYPE_F16, 16, 0, 2, 576, 512, 0, 0};
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_DECODE, .splits = c.splits};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  mla m;
  mla_init(&m, ctx, &c, 40);
  cl_mem v = fclu_upload(ctx, m.k, m.nk, c.dtype);  /* a copy of K: V is its first columns */
  ck_assert(v);
  outs a = outs_new(&m), b = outs_new(&m);
  fcl_run_info shared, own;
  ck_assert_int_eq(mla_run(ctx, &m, m.mk, a.o, a.lse, &shared), FCL_SUCCESS);
  ck_assert_int_eq(mla_run(ctx, &m, v, b.o, b.lse, &own), FCL_SUCCESS);
  ck_assert(outs_equal(&m, &a, &b));
  /* V's rows: 512 columns of each key row a block reads */
  ck_assert_uint_gt(own.bytes_model, shared.bytes_model);
  if (count) {
    ck_assert_uint_eq(own.bytes_counted, own.bytes_model);
    ck_assert_uint_eq(shared.bytes_counted, shared.bytes_model);
  }
  outs_free(&a);
  outs_free(&b);
  clReleaseMemObject(v);
  mla_free(&m);
  fcl_context_release(ctx);
}
END_TEST

/* head_dim 576 on a prefill family, or the backward: refused with the
 * reason, nothing written. */
START_TEST(other_families_refuse_and_write_nothing) {
  const mla_case c = {FCL_DTYPE_F32, 16, 0, 0, 576, 512, 0, 0};
  fcl_context *ctx = th_context();
  mla m;
  mla_init(&m, ctx, &c, 41);
  const unsigned kernels[] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA,
                              FCL_FLASH_KERNEL_DECODE_MMA, FCL_FLASH_KERNEL_CPU};
  for (size_t i = 0; i < 4; ++i) {
    const fcl_plan hint = {.kernel = kernels[i]};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
    cl_mem mo = fclu_poisoned_buffer(ctx, m.no * 4), ml = fclu_poisoned_buffer(ctx, m.nl * 4);
    ck_assert(mo && ml);
    fcl_status st =
        fcl_attention_forward(ctx, &m.desc, FCL_ALGO_FLASH, m.mq, m.mk, m.mk, mo, ml, NULL);
    ck_assert_int_eq(st, FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(fcl_context_last_error(ctx),
                         kernels[i] == FCL_FLASH_KERNEL_DECODE_MMA ? "matrix instructions"
                                                                   : "FCL_MAX_TILED_HEAD_DIM"),
                  "%s", fcl_context_last_error(ctx));
    float *x = malloc(m.no * 4);
    ck_assert(x);
    ck_assert_int_eq(fclu_download(ctx, mo, x, m.no, FCL_DTYPE_F32), 0);
    for (size_t j = 0; j < m.no; ++j) ck_assert(isnan(x[j]));  /* 0xFF bytes: NaN */
    free(x);
    clReleaseMemObject(mo);
    clReleaseMemObject(ml);
  }
  /* the backward of any family, planned alone */
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  fcl_attention_desc flat = m.ref;
  flat.seqlens_k = NULL;
  fcl_plan plan;
  char why[320];
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &flat, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(why, "backward") != NULL, "%s", why);
  /* one width of 576: also the decode kernel's alone */
  flat.head_dim_v = 0;
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &flat, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.kernel, FCL_FLASH_KERNEL_DECODE);
  mla_free(&m);
  fcl_context_release(ctx);
}
END_TEST

/* fcl_merge_states beyond four columns a work-item of its work-group (576
 * here: 512 at 128): refused with the reason, nothing written. */
START_TEST(merge_wider_than_its_work_group_is_refused) {
  fcl_context *ctx = th_context();
  fcl_merge_desc d;
  fcl_merge_desc_init(&d, 3, 1, 1, 2, 576);
  fcl_merge_sizes sz;
  char why[256];
  ck_assert_int_eq(fcl_merge_buffer_sizes(&d, &sz, why, sizeof why), FCL_SUCCESS);
  cl_mem parts = fclu_poisoned_buffer(ctx, sz.o_parts), lse_parts = fclu_poisoned_buffer(ctx, sz.lse_parts),
         o = fclu_poisoned_buffer(ctx, sz.o), lse = fclu_poisoned_buffer(ctx, sz.lse);
  ck_assert(parts && lse_parts && o && lse);
  ck_assert_int_eq(fcl_merge_states(ctx, &d, parts, lse_parts, o, lse, NULL),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_msg(strstr(fcl_context_last_error(ctx), "head_dim up to") != NULL, "%s",
                fcl_context_last_error(ctx));
  float *x = malloc(sz.o);
  ck_assert(x);
  ck_assert_int_eq(fclu_download(ctx, o, x, sz.o / 4, FCL_DTYPE_F32), 0);
  for (size_t i = 0; i < sz.o / 4; ++i) ck_assert(isnan(x[i]));
  free(x);
  clReleaseMemObject(parts);
  clReleaseMemObject(lse_parts);
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mla");
  TCase *tc = th_tcase("mla");
  tcase_add_loop_test(tc, decode_matches_reference, 0, (int)N_CASES);
  tcase_add_test(tc, v_of_its_own_gives_the_same_values);
  tcase_add_test(tc, other_families_refuse_and_write_nothing);
  tcase_add_test(tc, merge_wider_than_its_work_group_is_refused);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
