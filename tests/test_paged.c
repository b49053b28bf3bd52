/*
 * test_paged.c — a paged KV cache (fcl_attention_desc.block_table): K and V
 * as pools of pages in a shuffled order, with spare pages, packed and
 * strided pools, pages of 16, 48, 64 and 256 tokens. Against the float64
 * reference on random inputs, both algorithms (the naive one gathers the
 * pages), the four forward kernels (those on matrix instructions emulated
 * off NVIDIA, the decode one's in f16 and bf16), caches of different
 * lengths, splits, packed heads and 16-bit storage, and a 16-bit causal
 * prefill over pages smaller than its tiles; a paged run takes the
 * contiguous problem's plan (its tiles span pages: the kernels look pages
 * up within a tile) and is bit-identical to the same problem with
 * contiguous K and V under that plan. Counted bytes
 * equal the I/O model (its page lookups included); reruns are bit-identical; bad table entries stay
 * inside the pools; every refusal is a documented status with a reason and
 * nothing written; fcl_kv_cache_append writes into the pages.
 */
#include "harness.h"
#include "plan.h"
#include "rules.h"
#include "views.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FAMILY_SIMT, FAMILY_MMA, FAMILY_DECODE, FAMILY_DECODE_MMA, FAMILIES };
static const unsigned family_kernel[FAMILIES] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA,
                                                 FCL_FLASH_KERNEL_DECODE,
                                                 FCL_FLASH_KERNEL_DECODE_MMA};

/* A problem's K and V as pools of pages, and its block table. */
typedef struct paged {
  th_problem run;   /* the problem with the paged descriptor and the pools */
  int32_t *table;   /* host copy */
  cl_mem d_table;
} paged;

/* Pools of `page_size`-token pages for p's K and V, `spare` pages more than
 * the table names, in the pool layout `pool` (zeros: packed), named in a
 * shuffled order. Bytes of the pools outside the table's tokens are NaN. */
static paged make_paged(fcl_context *ctx, const th_problem *p, size_t page_size, size_t spare,
                        fcl_tensor_layout pool, uint64_t seed) {
  paged pg;
  memset(&pg, 0, sizeof pg);
  pg.run = *p;
  fcl_attention_desc *d = &pg.run.desc;
  d->page_size = page_size;
  d->pages_per_seq = (d->seqlen_k + page_size - 1) / page_size;
  d->num_pages = d->batch * d->pages_per_seq + spare;
  d->k = d->v = pool;
  const size_t entries = d->batch * d->pages_per_seq;
  pg.table = malloc(entries * sizeof *pg.table);
  ck_assert_ptr_nonnull(pg.table);
  fclu_shuffled_pages(th_seed() + seed, d->batch, d->pages_per_seq, d->num_pages, pg.table);
  cl_int err;
  pg.d_table = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                              entries * sizeof *pg.table, pg.table, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  d->block_table = pg.d_table;
  fclu_set_pages(pg.d_table, pg.table);
  fcl_buffer_sizes sz;
  char why[256];
  ck_assert_msg(fcl_attention_buffer_sizes(d, &sz, why, sizeof why) == FCL_SUCCESS, "%s", why);
  const float *hosts[2] = {p->k, p->v};
  cl_mem *mems[2] = {&pg.run.dk, &pg.run.dv};
  const fclu_tensor ts[2] = {FCLU_K, FCLU_V};
  for (int i = 0; i < 2; ++i) {
    unsigned char *image = malloc(sz.k);
    ck_assert_ptr_nonnull(image);
    memset(image, 0xff, sz.k);  /* NaN wherever the table names no token */
    fclu_scatter(d, ts[i], hosts[i], image);
    *mems[i] = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              sz.k, image, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    free(image);
  }
  return pg;
}

static void paged_free(paged *pg) {
  clReleaseMemObject(pg->run.dk);
  clReleaseMemObject(pg->run.dv);
  clReleaseMemObject(pg->d_table);
  free(pg->table);
  memset(pg, 0, sizeof *pg);
}

/* The family, split count and packing. */
static void set_hint(fcl_context *ctx, int family, unsigned splits, unsigned packed) {
  const fcl_plan hint = {.kernel = family_kernel[family], .splits = splits,
                         .packed_heads = packed};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
}

/* The family's paged run, whose plan must be the contiguous problem's
 * (tiles span pages) and whose counted bytes, where the context counts
 * them, the model's; then the contiguous problem under that plan, which it
 * must match bit for bit. */
static void run_paged_and_flat(fcl_context *ctx, int family, unsigned splits, unsigned packed,
                               const th_problem *p, const paged *pg, th_forward *r,
                               th_forward *flat) {
  set_hint(ctx, family, splits, packed);
  *r = th_run_forward(ctx, &pg->run, FCL_ALGO_FLASH, 1);
  ck_assert_msg(r->status == FCL_SUCCESS, "paged (%s): %s",
                fcl_flash_kernel_name(family_kernel[family]), fcl_context_last_error(ctx));
  const fcl_plan *used = &r->info.plan;
  ck_assert_uint_eq(pg->run.desc.page_size % fcl__page_lookup_keys(used), 0);
  fcl_plan unpaged;
  char why[256] = "";
  ck_assert_msg(fcl_context_plan(ctx, &p->desc, FCL_PASS_FORWARD, &unpaged, why, sizeof why) ==
                    FCL_SUCCESS,
                "%s", why);
  ck_assert_msg(unpaged.kernel == used->kernel && unpaged.block_k == used->block_k &&
                    unpaged.wg_size == used->wg_size && unpaged.splits == used->splits,
                "%s, pages of %zu: block_k %u wg %u, contiguous %u, %u",
                fcl_flash_kernel_name(family_kernel[family]), pg->run.desc.page_size,
                used->block_k, used->wg_size, unpaged.block_k, unpaged.wg_size);
  ck_assert_msg(!r->info.bytes_counted || r->info.bytes_counted == r->info.bytes_model,
                "%s, pages of %zu: counted %llu bytes, the model says %llu",
                fcl_flash_kernel_name(family_kernel[family]), pg->run.desc.page_size,
                (unsigned long long)r->info.bytes_counted,
                (unsigned long long)r->info.bytes_model);
  const fcl_plan same = {.kernel = used->kernel, .block_k = used->block_k,
                         .wg_size = used->wg_size, .splits = used->splits,
                         .packed_heads = used->packed_heads, .merge = used->merge,
                         .tile_elem_size = family == FAMILY_SIMT ? used->tile_elem_size : 0};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &same), FCL_SUCCESS);
  *flat = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(flat->status == FCL_SUCCESS, "contiguous (%s) under the paged plan: %s",
                fcl_flash_kernel_name(family_kernel[family]), fcl_context_last_error(ctx));
}

typedef struct pcase {
  size_t b, hq, hkv, nq, nk, d, page;
  int causal, window_left;
  const int32_t *lens;  /* a cache's lengths, or NULL */
} pcase;

static const int32_t lens3[3] = {0, 1, 300}, lens2[2] = {130, 64};
static const pcase cases[] = {
    {3, 8, 2, 1, 300, 64, 16, 1, -1, lens3},  /* decode over caches of 0, 1 and 300 keys */
    {2, 4, 4, 3, 400, 32, 256, 1, -1, NULL},  /* a few rows, one page and a half */
    {2, 4, 1, 2, 130, 40, 64, 1, 50, lens2},  /* a window, MQA */
    {1, 4, 2, 5, 100, 16, 48, 0, -1, NULL},   /* pages of three 16-key tiles */
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* f32, but f16 (bf16 for odd cases) for the decode kernel on matrix
 * instructions, which takes 16-bit types only. */
static fcl_attention_desc case_desc(const pcase *c, int family) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, c->b, c->hq, c->hkv, c->nq, c->nk,
                          family == FAMILY_MMA ? th_mma_head_dim(c->d) : c->d);
  d.causal = c->causal;
  d.window_left = c->window_left;
  d.seqlens_k = c->lens;
  if (family == FAMILY_DECODE_MMA) d.dtype = (c - cases) % 2 ? FCL_DTYPE_BF16 : FCL_DTYPE_F16;
  return d;
}

/* One problem over pages of `page` tokens in one family, with `max_splits`
 * splits and with one (1 and 3, or 1): within the flash suites' rule of
 * the reference (2x the naive algorithm's error), and bit for bit the run
 * with contiguous K and V under the same plan; LSE alike. */
static void check_paged_problem(fcl_context *ctx, int family, const fcl_attention_desc *desc,
                                size_t page, unsigned packed, unsigned max_splits,
                                uint64_t seed, const char *name) {
  th_problem p;
  th_problem_init(&p, ctx, desc, 300 + seed, 1.0);
  const fcl_tensor_layout packed_pool = {0};
  paged pg = make_paged(ctx, &p, page, 3, packed_pool, 40 + seed);
  th_reference ref = th_reference_forward(&p);
  float *naive = th_naive_output(ctx, &pg.run);  /* (f16 on PoCL: emulated) */
  const double naive_err = fclu_max_abs_err(naive, ref.o, p.q_elems);
  const double floor = th_err_floor(desc->dtype, ref.o, p.q_elems);
  ck_assert_msg(naive_err < (desc->dtype == FCL_DTYPE_F32 ? 1e-4 : 1e-2),
                "%s: the paged naive algorithm is off by %g", name, naive_err);
  for (unsigned splits = 1; splits <= max_splits; splits += 2) {
    th_forward r, flat;
    run_paged_and_flat(ctx, family, splits, packed, &p, &pg, &r, &flat);
    ck_assert_uint_eq(r.info.plan.kernel, family_kernel[family]);
    const double err = fclu_max_abs_err(r.o, ref.o, p.q_elems);
    ck_assert_msg(err <= 2 * naive_err + floor,
                  "%s (%s), %u splits: error %g > 2 x naive %g + %g", name,
                  fcl_flash_kernel_name(family_kernel[family]), r.info.plan.splits, err,
                  naive_err, floor);
    ck_assert_msg(memcmp(r.o, flat.o, p.q_elems * sizeof *r.o) == 0 &&
                      memcmp(r.lse, flat.lse, p.lse_elems * sizeof *r.lse) == 0,
                  "%s (%s), %u splits: paged and contiguous differ", name,
                  fcl_flash_kernel_name(family_kernel[family]), r.info.plan.splits);
    th_forward_free(&r);
    th_forward_free(&flat);
  }
  free(naive);
  th_reference_free(&ref);
  paged_free(&pg);
  th_problem_free(&p);
}

/* Every family over every case, split and not. */
START_TEST(paged_forward_matches_contiguous_and_reference) {
  const int family = _i;
  fcl_context *ctx = th_context();
  for (size_t i = 0; i < N_CASES; ++i) {
    /* the emulated matrix instructions are slow on a CPU */
    if ((family == FAMILY_MMA || family == FAMILY_DECODE_MMA) && i != 0) continue;
    const pcase *c = &cases[i];
    const size_t group = c->hq / c->hkv;
    const unsigned packed = family == FAMILY_DECODE && c->nq * group > FCL_DECODE_MAX_ROWS ? 1 : 0;
    const fcl_attention_desc desc = case_desc(c, family);
    char name[32];
    snprintf(name, sizeof name, "case %zu", i);
    check_paged_problem(ctx, family, &desc, c->page, packed, 3, i, name);
  }
  fcl_context_release(ctx);
}
END_TEST

/* A 16-bit causal prefill at head_dim 64, whose MMA plan takes 128-key
 * tiles: over pages of 16 and 48 tokens (a partial last page) the tiles
 * span pages, the plan is the contiguous one and the counted bytes the
 * model's (run_paged_and_flat checks), one split. */
START_TEST(mma_prefill_over_small_pages) {
  fcl_context *ctx = th_context();
  th_count_io(ctx);
  const size_t pages[2] = {16, 48};
  for (size_t i = 0; i < 2; ++i) {
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 1, 4, 2, 40, 200, 64);
    desc.causal = 1;
    desc.dtype = FCL_DTYPE_F16;
    char name[32];
    snprintf(name, sizeof name, "prefill, pages of %zu", pages[i]);
    check_paged_problem(ctx, FAMILY_MMA, &desc, pages[i], 0, 1, 10 + i, name);
  }
  fcl_context_release(ctx);
}
END_TEST

/* A strided pool (heads outermost in a page, with padding between pages)
 * and 16-bit storage: still the contiguous run bit for bit. */
START_TEST(strided_pools_and_half_types) {
  fcl_context *ctx = th_context();
  const fcl_dtype types[3] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};
  for (int t = 0; t < 3; ++t) {
    fcl_attention_desc desc = case_desc(&cases[0], FAMILY_SIMT);
    desc.dtype = types[t];
    th_problem p;
    th_problem_init(&p, ctx, &desc, 500 + t, 1.0);
    const size_t ps = cases[0].page, d = desc.head_dim, h = desc.heads_kv;
    const fcl_tensor_layout heads_major = {.offset = 8, .batch_stride = h * ps * d + 4,
                                           .seq_stride = d, .head_stride = ps * d};
    paged pg = make_paged(ctx, &p, ps, 1, heads_major, 60 + t);
    for (int family = 0; family < FAMILIES; ++family) {
      /* SIMT and the decode kernels (the one on matrix instructions: 16-bit) */
      if (family == FAMILY_MMA || (family == FAMILY_DECODE_MMA && t == 0)) continue;
      th_forward r, flat;
      run_paged_and_flat(ctx, family, 2, 0, &p, &pg, &r, &flat);
      ck_assert_msg(memcmp(r.o, flat.o, p.q_elems * sizeof *r.o) == 0, "%s (%s): differ",
                    fcl_dtype_name(types[t]), fcl_flash_kernel_name(family_kernel[family]));
      th_forward_free(&r);
      th_forward_free(&flat);
    }
    paged_free(&pg);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

/* Counted bytes equal the model's, both algorithms and the three kernels;
 * reruns are bit-identical. */
START_TEST(paged_forward_counts_its_bytes_and_reruns_bit_for_bit) {
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  for (size_t i = 0; i < 2; ++i)
    for (int family = -1; family < FAMILIES; ++family) {  /* -1: the naive algorithm */
      if (family == FAMILY_MMA) continue;                  /* (slow emulated; test_decode) */
      const fcl_attention_desc desc = case_desc(&cases[i], family < 0 ? FAMILY_SIMT : family);
      th_problem p;
      th_problem_init(&p, ctx, &desc, 700 + i, 1.0);
      const fcl_tensor_layout packed_pool = {0};
      paged pg = make_paged(ctx, &p, cases[i].page, 2, packed_pool, 80 + i);
      if (family >= 0) set_hint(ctx, family, 3, cases[i].nq * desc.heads_q / desc.heads_kv > 8);
      const fcl_algo algo = family < 0 ? FCL_ALGO_NAIVE : FCL_ALGO_FLASH;
      th_forward a = th_run_forward(ctx, &pg.run, algo, 1);
      th_forward b = th_run_forward(ctx, &pg.run, algo, 1);
      ck_assert_msg(a.status == FCL_SUCCESS && b.status == FCL_SUCCESS, "%s",
                    fcl_context_last_error(ctx));
      if (count)
        ck_assert_msg(a.info.bytes_counted == a.info.bytes_model,
                      "case %zu, %s: counted %llu bytes, the model says %llu", i,
                      family < 0 ? "naive" : fcl_flash_kernel_name(family_kernel[family]),
                      (unsigned long long)a.info.bytes_counted,
                      (unsigned long long)a.info.bytes_model);
      ck_assert(memcmp(a.o, b.o, p.q_elems * sizeof *a.o) == 0);
      ck_assert(memcmp(a.lse, b.lse, p.lse_elems * sizeof *a.lse) == 0);
      th_forward_free(&a);
      th_forward_free(&b);
      paged_free(&pg);
      th_problem_free(&p);
    }
  fcl_context_release(ctx);
}
END_TEST

/* Entries outside [0, num_pages) read a clamped page: the same output as
 * the table with those entries clamped, and no access outside the pools
 * (tests/test_oclgrind.c's checker would see one). */
START_TEST(bad_table_entries_stay_in_the_pools) {
  fcl_context *ctx = th_context();
  const fcl_attention_desc desc = case_desc(&cases[1], FAMILY_SIMT);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 900, 1.0);
  const fcl_tensor_layout packed_pool = {0};
  paged pg = make_paged(ctx, &p, cases[1].page, 0, packed_pool, 90);
  const size_t entries = desc.batch * pg.run.desc.pages_per_seq;
  int32_t *bad = malloc(entries * sizeof *bad), *clamped = malloc(entries * sizeof *clamped);
  ck_assert(bad && clamped);
  const int32_t last = (int32_t)pg.run.desc.num_pages - 1;
  for (size_t e = 0; e < entries; ++e) {
    bad[e] = e % 2 ? -5 - (int32_t)e : last + 1000 + (int32_t)e;
    clamped[e] = bad[e] < 0 ? 0 : last;
  }
  cl_command_queue queue = fcl_context_cl_queue(ctx);
  th_forward runs[2];
  set_hint(ctx, FAMILY_SIMT, 1, 0);
  for (int k = 0; k < 2; ++k) {
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, pg.d_table, CL_TRUE, 0, entries * sizeof *bad,
                                          k ? clamped : bad, 0, NULL, NULL),
                     CL_SUCCESS);
    runs[k] = th_run_forward(ctx, &pg.run, FCL_ALGO_FLASH, 1);
    ck_assert_int_eq(runs[k].status, FCL_SUCCESS);
  }
  ck_assert(memcmp(runs[0].o, runs[1].o, p.q_elems * sizeof *runs[0].o) == 0);
  for (int k = 0; k < 2; ++k) th_forward_free(&runs[k]);
  free(bad);
  free(clamped);
  paged_free(&pg);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* Bad descriptors and buffers: the documented status, a reason naming the
 * field, and the output untouched. */
START_TEST(paged_refusals_write_nothing) {
  fcl_context *ctx = th_context();
  const fcl_attention_desc desc = case_desc(&cases[0], FAMILY_SIMT);
  th_problem p;
  th_problem_init(&p, ctx, &desc, 950, 1.0);
  const fcl_tensor_layout packed_pool = {0};
  paged pg = make_paged(ctx, &p, 64, 0, packed_pool, 95);
  const int32_t cu[4] = {0, 1, 2, 3};
  struct {
    fcl_attention_desc d;
    fcl_status want;
    const char *says;
  } bad[7];
  for (int i = 0; i < 7; ++i) bad[i].d = pg.run.desc;
  bad[0].d.page_size = 40, bad[0].want = FCL_ERROR_INVALID_SHAPE, bad[0].says = "FCL_PAGE_SIZE_MULTIPLE";
  bad[1].d.pages_per_seq = 4, bad[1].want = FCL_ERROR_INVALID_SHAPE, bad[1].says = "pages_per_seq";
  bad[2].d.num_pages = 0, bad[2].want = FCL_ERROR_INVALID_SHAPE, bad[2].says = "num_pages";
  bad[3].d = desc, bad[3].d.page_size = 64, bad[3].want = FCL_ERROR_INVALID_ARGUMENT,
  bad[3].says = "without a block_table";
  bad[4].d.seqlens_k = NULL, bad[4].d.cu_seqlens_q = cu, bad[4].want = FCL_ERROR_INVALID_ARGUMENT,
  bad[4].says = "cu_seqlens";
  bad[5].d.num_pages = pg.run.desc.num_pages + 1, bad[5].want = FCL_ERROR_BUFFER_TOO_SMALL,
  bad[5].says = "buffer k";  /* the pools hold one page fewer than it says */
  bad[6].d.pages_per_seq = pg.run.desc.pages_per_seq + 1, bad[6].want = FCL_ERROR_BUFFER_TOO_SMALL,
  bad[6].says = "buffer block_table";  /* the table is shorter than it says */
  for (int i = 0; i < 7; ++i)
    for (int algo = 0; algo < 2; ++algo) {
      th_problem run = pg.run;
      run.desc = bad[i].d;
      th_forward r = th_run_forward(ctx, &run, (fcl_algo)algo, 1);
      ck_assert_msg(r.status == bad[i].want, "refusal %d (%s): %s, want %s: %s", i,
                    fcl_algo_name((fcl_algo)algo), fcl_status_str(r.status),
                    fcl_status_str(bad[i].want), fcl_context_last_error(ctx));
      ck_assert_msg(strstr(fcl_context_last_error(ctx), bad[i].says), "refusal %d: %s", i,
                    fcl_context_last_error(ctx));
      for (size_t j = 0; j < p.q_elems; ++j)  /* th_run_forward poisons O with NaN */
        ck_assert_msg(isnan(r.o[j]), "refusal %d wrote O[%zu]", i, j);
      th_forward_free(&r);
    }
  /* The backward refuses a paged cache; a hint's block_k of 96 keys, whose
   * tiles span pages of 64, plans (the kernels look pages up within a
   * tile). */
  fcl_device_info info;
  ck_assert_int_eq(fcl_context_device(ctx, &info), FCL_SUCCESS);
  fcl_plan plan;
  char why[256];
  fcl_attention_desc whole = pg.run.desc;
  whole.seqlens_k = NULL;
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &whole, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert(strstr(why, "paged"));
  const fcl_plan spanning = {.kernel = FCL_FLASH_KERNEL_DECODE, .block_k = 96, .wg_size = 128};
  ck_assert_msg(fcl__plan_flash(&info.limits, &whole, FCL_PASS_FORWARD, &spanning, &plan, why,
                                sizeof why) == FCL_SUCCESS,
                "%s", why);
  ck_assert_uint_eq(plan.block_k, 96);
  paged_free(&pg);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* Appending to a paged cache writes each row at its token's page: the
 * pools, read back through the table, equal the contiguous cache after the
 * same append, bit for bit, in pages of 16, 64 and 256 tokens: appends
 * that fill a page exactly (13 to 16 in pages of 16, 253 to 256 in all)
 * and that cross into the next (62 to 65 in pages of 16 and 64); the
 * counted bytes are the model's; attention after it matches too. */
static const size_t append_pages[] = {16, 64, 256};

/* An append's new rows, [batch][n_new][heads_kv][head_dim], drawn from
 * rng, on the device. */
static cl_mem new_rows(fcl_context *ctx, const fcl_attention_desc *d, size_t n_new,
                       fclu_rng *rng) {
  const size_t n = d->batch * n_new * d->heads_kv * d->head_dim;
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fclu_fill_normal(rng, x, n, 1.0, d->dtype);
  cl_mem mem = fclu_upload(ctx, x, n, d->dtype);
  free(x);
  ck_assert_ptr_nonnull(mem);
  return mem;
}

START_TEST(append_into_pages) {
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  const int32_t before[3] = {13, 62, 253}, after[3] = {16, 65, 256};
  const size_t n_new = 3;
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 3, 8, 2, n_new, 300, 32);
  desc.causal = 1;
  desc.seqlens_k = before;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 990, 1.0);
  const fcl_tensor_layout packed_pool = {0};
  paged pg = make_paged(ctx, &p, append_pages[_i], 2, packed_pool, 99);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 991);
  cl_mem dkn = new_rows(ctx, &desc, n_new, &rng), dvn = new_rows(ctx, &desc, n_new, &rng);
  fcl_run_info ri;
  ck_assert_int_eq(fcl_kv_cache_append(ctx, &p.desc, n_new, NULL, NULL, dkn, dvn, p.dk, p.dv, NULL),
                   FCL_SUCCESS);
  ck_assert_msg(fcl_kv_cache_append(ctx, &pg.run.desc, n_new, NULL, NULL, dkn, dvn, pg.run.dk,
                                    pg.run.dv, &ri) == FCL_SUCCESS,
                "%s", fcl_context_last_error(ctx));
  if (count) ck_assert_uint_eq(ri.bytes_counted, ri.bytes_model);
  /* the caches read back: contiguous as it is, the pools through the table */
  fcl_buffer_sizes sz;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&pg.run.desc, &sz, NULL, 0), FCL_SUCCESS);
  const cl_mem flat[2] = {p.dk, p.dv}, pools[2] = {pg.run.dk, pg.run.dv};
  const fclu_tensor ts[2] = {FCLU_K, FCLU_V};
  float *want = malloc(p.kv_elems * sizeof *want), *got = malloc(p.kv_elems * sizeof *got);
  unsigned char *image = malloc(sz.k);
  ck_assert(want && got && image);
  for (int i = 0; i < 2; ++i) {
    ck_assert_int_eq(fclu_download(ctx, flat[i], want, p.kv_elems, desc.dtype), 0);
    ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), pools[i], CL_TRUE, 0, sz.k,
                                         image, 0, NULL, NULL),
                     CL_SUCCESS);
    fclu_gather(&pg.run.desc, ts[i], image, got);
    for (size_t b = 0; b < desc.batch; ++b)  /* the rows the table names, up to the new lengths */
      for (size_t e = 0; e < (size_t)after[b] * desc.heads_kv * desc.head_dim; ++e) {
        const size_t at = b * desc.seqlen_k * desc.heads_kv * desc.head_dim + e;
        ck_assert_msg(memcmp(&got[at], &want[at], sizeof *got) == 0,
                      "%s, entry %zu, element %zu: %g in the pools, %g contiguous",
                      i ? "v" : "k", b, e, (double)got[at], (double)want[at]);
      }
  }
  /* attention after the append, paged against contiguous */
  p.desc.seqlens_k = pg.run.desc.seqlens_k = after;
  th_forward a, r;
  run_paged_and_flat(ctx, FAMILY_SIMT, 1, 0, &p, &pg, &r, &a);
  ck_assert(memcmp(a.o, r.o, p.q_elems * sizeof *a.o) == 0);
  th_forward_free(&a);
  th_forward_free(&r);
  free(want);
  free(got);
  free(image);
  clReleaseMemObject(dkn);
  clReleaseMemObject(dvn);
  paged_free(&pg);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* Both pools' bytes as the device holds them. */
static unsigned char *pool_bytes(fcl_context *ctx, const paged *pg, size_t *bytes) {
  fcl_buffer_sizes sz;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&pg->run.desc, &sz, NULL, 0), FCL_SUCCESS);
  unsigned char *x = malloc(2 * sz.k);
  ck_assert_ptr_nonnull(x);
  const cl_mem pools[2] = {pg->run.dk, pg->run.dv};
  for (int i = 0; i < 2; ++i)
    ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), pools[i], CL_TRUE, 0, sz.k,
                                         x + i * sz.k, 0, NULL, NULL),
                     CL_SUCCESS);
  *bytes = 2 * sz.k;
  return x;
}

/* The device's block table, from `table` (the host copy stays). */
static void write_table(fcl_context *ctx, const paged *pg, const int32_t *table) {
  const size_t bytes = pg->run.desc.batch * pg->run.desc.pages_per_seq * sizeof *table;
  ck_assert_int_eq(clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), pg->d_table, CL_TRUE, 0, bytes,
                                        table, 0, NULL, NULL),
                   CL_SUCCESS);
}

/* An append through a block-table entry outside the pool: refused with
 * FCL_ERROR_INVALID_ARGUMENT naming the entry, alone and in the one-call
 * decode step, the pools and O untouched; an entry the append does not
 * write through is not its business. With the checks off, the kernel
 * writes nothing through such entries and touches no other page. */
START_TEST(append_refuses_a_page_outside_the_pool) {
  fcl_context *ctx = th_context();
  const int32_t lens[2] = {30, 47};  /* pages of 16: rows 30-31 and 32 of entry 0, 47-49 of 1 */
  const size_t n_new = 3;
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 2, 4, 2, n_new, 100, 32);
  desc.causal = 1;
  desc.seqlens_k = lens;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 1100, 1.0);
  const fcl_tensor_layout packed_pool = {0};
  paged pg = make_paged(ctx, &p, 16, 2, packed_pool, 110);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 1101);
  cl_mem dkn = new_rows(ctx, &desc, n_new, &rng), dvn = new_rows(ctx, &desc, n_new, &rng);
  const size_t per_seq = pg.run.desc.pages_per_seq;
  const int32_t outside[2] = {-1, (int32_t)pg.run.desc.num_pages};
  size_t bytes;
  unsigned char *before = pool_bytes(ctx, &pg, &bytes);
  for (int k = 0; k < 2; ++k) {
    /* entry 1's second page (its rows 48 and 49), outside the pool */
    int32_t *table = malloc(desc.batch * per_seq * sizeof *table);
    ck_assert_ptr_nonnull(table);
    memcpy(table, pg.table, desc.batch * per_seq * sizeof *table);
    table[1 * per_seq + 3] = outside[k];
    write_table(ctx, &pg, table);
    ck_assert_int_eq(fcl_kv_cache_append(ctx, &pg.run.desc, n_new, NULL, NULL, dkn, dvn,
                                         pg.run.dk, pg.run.dv, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof want, "block_table[1][3] = %d", (int)outside[k]);
    ck_assert_msg(strstr(fcl_context_last_error(ctx), want), "%s",
                  fcl_context_last_error(ctx));
    cl_mem o = fclu_poisoned_buffer(ctx, p.q_elems * sizeof(float));
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(fcl_attention_forward_kvcache(ctx, &pg.run.desc, FCL_ALGO_FLASH, p.dq, n_new,
                                                   NULL, NULL, dkn, dvn, pg.run.dk, pg.run.dv, o,
                                                   NULL, NULL),
                     FCL_ERROR_INVALID_ARGUMENT);
    float *o_back = malloc(p.q_elems * sizeof *o_back);
    ck_assert_ptr_nonnull(o_back);
    ck_assert_int_eq(fclu_download(ctx, o, o_back, p.q_elems, FCL_DTYPE_F32), 0);
    for (size_t j = 0; j < p.q_elems; ++j) ck_assert_msg(isnan(o_back[j]), "O[%zu] written", j);
    free(o_back);
    clReleaseMemObject(o);
    size_t n;
    unsigned char *after = pool_bytes(ctx, &pg, &n);
    ck_assert(n == bytes && memcmp(before, after, bytes) == 0);
    free(after);
    free(table);
  }
  /* a bad entry past the rows the append writes: not refused */
  int32_t *table = malloc(desc.batch * per_seq * sizeof *table);
  ck_assert_ptr_nonnull(table);
  memcpy(table, pg.table, desc.batch * per_seq * sizeof *table);
  table[0 * per_seq + 5] = -7;
  write_table(ctx, &pg, table);
  ck_assert_msg(fcl_kv_cache_append(ctx, &pg.run.desc, n_new, NULL, NULL, dkn, dvn, pg.run.dk,
                                    pg.run.dv, NULL) == FCL_SUCCESS,
                "%s", fcl_context_last_error(ctx));
  /* unchecked: every entry the append writes through outside the pool, so
   * that nothing may change */
  ck_assert_int_eq(fcl_context_set_block_table_checks(ctx, 2), FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(fcl_context_set_block_table_checks(ctx, 0), FCL_SUCCESS);
  write_table(ctx, &pg, pg.table);
  unsigned char *good = pool_bytes(ctx, &pg, &bytes);
  for (size_t b = 0; b < desc.batch; ++b)
    for (size_t i = (size_t)lens[b] / 16; i <= ((size_t)lens[b] + n_new - 1) / 16; ++i)
      table[b * per_seq + i] = b ? (int32_t)pg.run.desc.num_pages + 3 : -1;
  write_table(ctx, &pg, table);
  ck_assert_int_eq(fcl_kv_cache_append(ctx, &pg.run.desc, n_new, NULL, NULL, dkn, dvn, pg.run.dk,
                                       pg.run.dv, NULL),
                   FCL_SUCCESS);
  size_t n;
  unsigned char *after = pool_bytes(ctx, &pg, &n);
  ck_assert(n == bytes && memcmp(good, after, bytes) == 0);
  free(after);
  free(good);
  free(before);
  free(table);
  clReleaseMemObject(dkn);
  clReleaseMemObject(dvn);
  paged_free(&pg);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("paged");
  TCase *tc = th_tcase("paged");
  tcase_add_loop_test(tc, paged_forward_matches_contiguous_and_reference, 0, FAMILIES);
  tcase_add_test(tc, strided_pools_and_half_types);
  tcase_add_test(tc, mma_prefill_over_small_pages);
  tcase_add_test(tc, paged_forward_counts_its_bytes_and_reruns_bit_for_bit);
  tcase_add_test(tc, bad_table_entries_stay_in_the_pools);
  tcase_add_test(tc, paged_refusals_write_nothing);
  tcase_add_test(tc, append_refuses_a_page_outside_the_pool);
  tcase_add_loop_test(tc, append_into_pages, 0,
                      (int)(sizeof append_pages / sizeof append_pages[0]));
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
