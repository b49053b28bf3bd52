/*
 * test_batch_invariance.c — the batch-invariant mode
 * (fcl_attention_desc.batch_invariant): one sequence (random, f32 and f16)
 * placed in batches of 1, 3 and 17 among random neighbours — padded, ragged
 * (cu_seqlens), a KV cache (seqlens_k) contiguous and paged in pages of 16
 * and 48 — whose planner would choose other splits, tiles and work-groups
 * for it, in the planner's kernel family and the SIMT, SIMT decode (f32)
 * and matrix decode (f16) kernels forced: its O rows and LSE are the same bits (memcmp) in
 * every batch as alone, in the mode's tile, paged or not, and close to the float64
 * reference. Without the mode, a batch's plan differs (here or on a GPU's rules) and so do
 * the bits: the test can fail. The mode's tile is the family's unpaged one: paged plans
 * are the contiguous ones, on an H100's rules the usual 64-key MMA tile.
 * A decode step's row against the same row of a prefill chunk: close, and
 * on a CPU the same bits for a chunk the mode splits.
 */
#include "harness.h"
#include "problem.h"
#include "views.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sequence every batch holds: its shape and contents. */
typedef struct target {
  size_t hq, hkv, nq, nk, d;
  int causal;
  fcl_dtype dtype;
  float *q, *k, *v;  /* [nq][hq][d], [nk][hkv][d] x 2, rounded to dtype */
} target;

/* How a batch holds its sequences. */
typedef enum placing { PADDED, RAGGED, CACHE, PAGED } placing;
static const char *const placing_name[] = {"padded", "ragged", "cache", "paged"};

/* One batch: the descriptor, its host tensors and what the target's rows
 * came out as. */
typedef struct batch {
  fcl_attention_desc desc;
  int32_t *cu_q, *cu_k, *lens, *table;
  float *q, *k, *v;
  size_t slot;  /* the target's entry */
} batch;

static target make_target(size_t hq, size_t hkv, size_t nq, size_t nk, size_t d, int causal,
                          fcl_dtype dtype, uint64_t seed) {
  target t = {hq, hkv, nq, nk, d, causal, dtype, NULL, NULL, NULL};
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed);
  t.q = malloc(nq * hq * d * sizeof *t.q);
  t.k = malloc(nk * hkv * d * sizeof *t.k);
  t.v = malloc(nk * hkv * d * sizeof *t.v);
  ck_assert(t.q && t.k && t.v);
  fclu_fill_normal(&rng, t.q, nq * hq * d, 1.0, dtype);
  fclu_fill_normal(&rng, t.k, nk * hkv * d, 1.0, dtype);
  fclu_fill_normal(&rng, t.v, nk * hkv * d, 1.0, dtype);
  return t;
}

static void target_free(target *t) {
  free(t->q);
  free(t->k);
  free(t->v);
}

/* A target's O rows and LSE from two runs: [0] the sequence alone, [1] in
 * a batch. */
typedef struct row_pair {
  float *o[2], *lse[2];
  size_t o_n, lse_n;
} row_pair;

static row_pair rows_alloc(const target *t) {
  row_pair r = {.o_n = t->nq * t->hq * t->d, .lse_n = t->nq * t->hq};
  for (int i = 0; i < 2; ++i) {
    r.o[i] = malloc(r.o_n * sizeof *r.o[i]);
    r.lse[i] = malloc(r.lse_n * sizeof *r.lse[i]);
    ck_assert(r.o[i] && r.lse[i]);
  }
  return r;
}

/* Whether the two runs' O and LSE are the same bits. */
static int rows_same(const row_pair *r) {
  return memcmp(r->o[0], r->o[1], r->o_n * sizeof *r->o[0]) == 0 &&
         memcmp(r->lse[0], r->lse[1], r->lse_n * sizeof *r->lse[0]) == 0;
}

static void rows_free(row_pair *r) {
  for (int i = 0; i < 2; ++i) {
    free(r->o[i]);
    free(r->lse[i]);
  }
}

/* A batch of `n` entries with the target at `slot`: neighbours of up to
 * max_nq queries (the target's where padded or cached: one query shape)
 * and min_nk to max_nk keys, random; page_size for PAGED. */
static batch make_batch(const target *t, placing how, size_t n, size_t slot, size_t max_nq,
                        size_t min_nk, size_t max_nk, size_t page_size, int invariant,
                        uint64_t seed) {
  batch bt;
  memset(&bt, 0, sizeof bt);
  bt.slot = slot;
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed);
  size_t nqs[32], nks[32];
  ck_assert(n <= 32);
  size_t most_q = t->nq, most_k = t->nk;
  for (size_t b = 0; b < n; ++b) {
    nqs[b] = b == slot || how != RAGGED ? t->nq : fclu_range(&rng, 1, max_nq);
    nks[b] = b == slot ? t->nk : fclu_range(&rng, min_nk > nqs[b] ? min_nk : nqs[b], max_nk);
    if (how == PADDED) nks[b] = t->nk;
    if (nqs[b] > most_q) most_q = nqs[b];
    if (nks[b] > most_k) most_k = nks[b];
  }
  fcl_attention_desc *d = &bt.desc;
  fcl_attention_desc_init(d, n, t->hq, t->hkv, most_q, most_k, t->d);
  d->dtype = t->dtype;
  d->causal = t->causal;
  d->batch_invariant = invariant;
  if (how == RAGGED) {
    bt.cu_q = malloc((n + 1) * sizeof *bt.cu_q);
    bt.cu_k = malloc((n + 1) * sizeof *bt.cu_k);
    ck_assert(bt.cu_q && bt.cu_k);
    bt.cu_q[0] = bt.cu_k[0] = 0;
    for (size_t b = 0; b < n; ++b) {
      bt.cu_q[b + 1] = bt.cu_q[b] + (int32_t)nqs[b];
      bt.cu_k[b + 1] = bt.cu_k[b] + (int32_t)nks[b];
    }
    d->cu_seqlens_q = bt.cu_q;
    d->cu_seqlens_k = bt.cu_k;
  } else if (how != PADDED) {
    bt.lens = malloc(n * sizeof *bt.lens);
    ck_assert(bt.lens);
    for (size_t b = 0; b < n; ++b) bt.lens[b] = (int32_t)nks[b];
    d->seqlens_k = bt.lens;
  }
  const size_t nq_all = fclu_tokens(d, FCLU_Q), nk_all = fclu_tokens(d, FCLU_K);
  const size_t q_row = t->hq * t->d, k_row = t->hkv * t->d;
  bt.q = malloc(nq_all * q_row * sizeof *bt.q);
  bt.k = malloc(nk_all * k_row * sizeof *bt.k);
  bt.v = malloc(nk_all * k_row * sizeof *bt.v);
  ck_assert(bt.q && bt.k && bt.v);
  fclu_fill_normal(&rng, bt.q, nq_all * q_row, 1.0, t->dtype);
  fclu_fill_normal(&rng, bt.k, nk_all * k_row, 1.0, t->dtype);
  fclu_fill_normal(&rng, bt.v, nk_all * k_row, 1.0, t->dtype);
  size_t q0, nq, k0, nk;
  fclref_sequence(d, slot, &q0, &nq, &k0, &nk);
  memcpy(bt.q + q0 * q_row, t->q, t->nq * q_row * sizeof *bt.q);
  memcpy(bt.k + k0 * k_row, t->k, t->nk * k_row * sizeof *bt.k);
  memcpy(bt.v + k0 * k_row, t->v, t->nk * k_row * sizeof *bt.v);
  if (how == PAGED) {
    d->page_size = page_size;
    d->pages_per_seq = (d->seqlen_k + page_size - 1) / page_size;
    d->num_pages = n * d->pages_per_seq + 3;  /* spare pages */
    bt.table = malloc(n * d->pages_per_seq * sizeof *bt.table);
    ck_assert(bt.table);
    fclu_shuffled_pages(th_seed() + seed, n, d->pages_per_seq, d->num_pages, bt.table);
  }
  return bt;
}

static void batch_free(batch *bt) {
  free(bt->cu_q);
  free(bt->cu_k);
  free(bt->lens);
  free(bt->table);
  free(bt->q);
  free(bt->k);
  free(bt->v);
}

/* A K or V tensor on the device: packed, or scattered into a pool of
 * pages (NaN outside the table's tokens). */
static cl_mem upload_kv(fcl_context *ctx, const fcl_attention_desc *d, fclu_tensor which,
                        const float *x) {
  if (!d->block_table) return fclu_upload(ctx, x, fclu_packed_elems(d, which), d->dtype);
  fcl_buffer_sizes sz;
  char why[256];
  ck_assert_msg(fcl_attention_buffer_sizes(d, &sz, why, sizeof why) == FCL_SUCCESS, "%s", why);
  unsigned char *image = malloc(sz.k);
  ck_assert_ptr_nonnull(image);
  memset(image, 0xff, sz.k);
  fclu_scatter(d, which, x, image);
  cl_int err;
  cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            sz.k, image, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  free(image);
  return m;
}

/* The target's rows of one run of the batch: O [nq][hq][d] and LSE
 * [hq][nq] (outputs poisoned first); `plan` the plan it ran. */
static void run_batch(fcl_context *ctx, batch *bt, const target *t, float *o_rows,
                      float *lse_rows, fcl_plan *plan) {
  fcl_attention_desc *d = &bt->desc;
  cl_mem table = NULL;
  if (bt->table) {
    cl_int err;
    table = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                           d->batch * d->pages_per_seq * sizeof *bt->table, bt->table, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    d->block_table = table;
    fclu_set_pages(table, bt->table);
  }
  const size_t nq_all = fclu_tokens(d, FCLU_Q);
  const size_t q_elems = nq_all * t->hq * t->d, lse_elems = nq_all * t->hq;
  cl_mem q = fclu_upload(ctx, bt->q, q_elems, d->dtype);
  cl_mem k = upload_kv(ctx, d, FCLU_K, bt->k), v = upload_kv(ctx, d, FCLU_V, bt->v);
  const size_t es = fcl_dtype_size(d->dtype);
  cl_mem o = fclu_poisoned_buffer(ctx, q_elems * es);
  cl_mem lse = fclu_poisoned_buffer(ctx, lse_elems * sizeof(float));
  ck_assert(q && k && v && o && lse);
  fcl_run_info info;
  const fcl_status st = fcl_attention_forward(ctx, d, FCL_ALGO_FLASH, q, k, v, o, lse, &info);
  ck_assert_msg(st == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  *plan = info.plan;
  float *o_all = malloc(q_elems * sizeof *o_all), *lse_all = malloc(lse_elems * sizeof *lse_all);
  ck_assert(o_all && lse_all);
  ck_assert_int_eq(fclu_download(ctx, o, o_all, q_elems, d->dtype), 0);
  ck_assert_int_eq(fclu_download(ctx, lse, lse_all, lse_elems, FCL_DTYPE_F32), 0);
  size_t q0, nq, k0, nk;
  fclref_sequence(d, bt->slot, &q0, &nq, &k0, &nk);
  memcpy(o_rows, o_all + q0 * t->hq * t->d, t->nq * t->hq * t->d * sizeof *o_rows);
  for (size_t h = 0; h < t->hq; ++h)
    for (size_t i = 0; i < t->nq; ++i)
      lse_rows[h * t->nq + i] = lse_all[fclref_lse_at(d, bt->slot, h, i)];
  free(o_all);
  free(lse_all);
  clReleaseMemObject(q);
  clReleaseMemObject(k);
  clReleaseMemObject(v);
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  if (table) clReleaseMemObject(table);
  d->block_table = NULL;
}

/* The target alone (batch 1, padded): its rows, checked against the
 * float64 reference. */
static void run_alone(fcl_context *ctx, const target *t, int invariant, float *o_rows,
                      float *lse_rows, fcl_plan *plan) {
  batch bt = make_batch(t, PADDED, 1, 0, t->nq, 0, t->nk, 0, invariant, 0);
  run_batch(ctx, &bt, t, o_rows, lse_rows, plan);
  double o_ref[256], lse_ref;
  double worst = 0.0;
  for (size_t i = 0; i < t->nq; ++i)
    for (size_t h = 0; h < t->hq; ++h) {
      fclref_forward_row(&bt.desc, bt.q, bt.k, bt.v, 0, h, i, o_ref, &lse_ref);
      const float *row = o_rows + (i * t->hq + h) * t->d;
      for (size_t c = 0; c < t->d; ++c) worst = fmax(worst, fabs(row[c] - o_ref[c]));
      worst = fmax(worst, fabs(lse_rows[h * t->nq + i] - lse_ref));
    }
  const double tol = t->dtype == FCL_DTYPE_F32 ? 1e-4 : 4e-3;
  ck_assert_msg(worst < tol, "alone: error %g against the float64 reference (tolerance %g)",
                worst, tol);
  batch_free(&bt);
}

/* The batches a target is placed in: placing, size, slot, the page size. */
typedef struct placement {
  placing how;
  size_t n, slot, page;
} placement;

static const placement placements[] = {
    {PADDED, 3, 1, 0},  {PADDED, 17, 16, 0}, {RAGGED, 3, 2, 0},  {RAGGED, 17, 5, 0},
    {CACHE, 1, 0, 0},   {CACHE, 3, 0, 0},    {CACHE, 17, 9, 0},  {PAGED, 1, 0, 16},
    {PAGED, 3, 1, 48},  {PAGED, 17, 3, 16},
};
#define PLACEMENTS (sizeof placements / sizeof placements[0])
/* A block table for descriptors that are only planned: the planner asks
 * whether there is one, never reads it. */
#define PLANNED_TABLE ((cl_mem)1)

/* The target's shapes: decode rows with GQA over a cache split in two or
 * (alone) not split at all; a causal chunk of a prefill; decode rows over
 * 7 splits among neighbours of 9 or 10, whose merge without the mode's
 * layout would take the 7 in two lane groups of 5 (merge.c, head_dim 64 on
 * a CPU) and alone in one; 96 packed rows of a wide decode, split in the
 * mode (FCL_BATCH_INVARIANT_SPLIT_ROWS_WIDE). */
static const struct {
  size_t hq, hkv, nq, nk, d;
  int causal;
  size_t max_nq, min_nk, max_nk;  /* the neighbours' */
} shapes[] = {
    {4, 2, 1, 700, 64, 0, 4, 0, 2000},
    {4, 2, 2, 300, 64, 0, 4, 0, 1500},
    {2, 2, 20, 600, 32, 1, 40, 0, 1200},
    {4, 4, 1, 3400, 64, 0, 1, 4200, 5100},
    /* a decode step of 96 heads of one KV head at a width past 128 (the
     * matrix decode's wide kernel, forced: DeepSeek's shape, narrower) */
    {96, 1, 1, 700, 256, 0, 1, 0, 1500},
};
#define SHAPES (sizeof shapes / sizeof shapes[0])

static const fcl_dtype dtypes[] = {FCL_DTYPE_F32, FCL_DTYPE_F16};

/* The kernel families the placements run: the planner's, and on any device
 * the SIMT, SIMT decode (f32) and matrix decode (f16; emulated off NVIDIA)
 * kernels forced (a hint naming the kernel alone: the mode still chooses
 * the rest), which a GPU plans and a CPU in the mode does not. */
static const unsigned families[] = {FCL_FLASH_KERNEL_AUTO, FCL_FLASH_KERNEL_SIMT,
                                    FCL_FLASH_KERNEL_DECODE, FCL_FLASH_KERNEL_DECODE_MMA};
#define FAMILIES (sizeof families / sizeof families[0])

/* An H100 as the planner sees it (NVIDIA's OpenCL: 48 KiB of local
 * memory), for plans made without the device. */
static fcl_device_limits h100_rules(void) {
  fcl_device_limits l;
  memset(&l, 0, sizeof l);
  l.local_mem_bytes = 48 << 10;
  l.max_work_group_size = 1024;
  l.compute_units = 132;
  l.global_mem_bytes = 80ull << 30;
  l.max_alloc_bytes = 20ull << 30;
  l.is_gpu = 1;
  l.nvidia_ptx = 1;
  l.nvidia_sm = 90;
  l.shuffle = FCL_SHUFFLE_NVIDIA_PTX;
  l.vendor = FCL_VENDOR_NVIDIA;
  l.sub_group_size = 32;
  return l;
}

/* Whether two plans order a row's operations differently. */
static int plans_differ_in_order(const fcl_plan *a, const fcl_plan *b) {
  return a->splits != b->splits || a->block_k != b->block_k || a->block_q != b->block_q ||
         a->wg_size != b->wg_size || a->merge != b->merge;
}

/* _i: shape x family x dtype. In the mode, every placement's rows equal the rows
 * alone, bit for bit, though the plans the planner makes without the mode
 * differ among them. */
START_TEST(test_same_bits_in_every_batch) {
  const size_t si = (size_t)_i / (2 * FAMILIES);
  const unsigned family = families[(size_t)_i / 2 % FAMILIES];
  const fcl_dtype dtype = dtypes[_i % 2];
  /* forced families in one type each; the decode kernels for decode rows */
  const int mma = family == FCL_FLASH_KERNEL_DECODE_MMA;
  if (family != FCL_FLASH_KERNEL_AUTO && (dtype == FCL_DTYPE_F16) != mma) return;
  if ((family == FCL_FLASH_KERNEL_DECODE || mma) && shapes[si].max_nq > FCL_DECODE_MAX_ROWS)
    return;
  /* the wide shape on the wide kernel alone (its rows are past the others') */
  if ((shapes[si].d > 128) != mma) return;
  fcl_context *ctx = th_context();
  const fcl_plan hint = {.kernel = family};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  target t = make_target(shapes[si].hq, shapes[si].hkv, shapes[si].nq, shapes[si].nk,
                         shapes[si].d, shapes[si].causal, dtype, 100 + (uint64_t)_i);
  row_pair rows = rows_alloc(&t);
  fcl_plan alone, plain_alone, gpu_alone;
  run_alone(ctx, &t, 1, rows.o[0], rows.lse[0], &alone);
  if (shapes[si].d > 128) ck_assert_uint_gt(alone.splits, 1);  /* split in the mode */
  char why[256];
  unsigned plans_differ = 0;
  const fcl_device_limits gpu = h100_rules();
  {
    batch bt = make_batch(&t, PADDED, 1, 0, t.nq, 0, t.nk, 0, 0, 0);
    ck_assert_int_eq(fcl_context_plan(ctx, &bt.desc, FCL_PASS_FORWARD, &plain_alone, why,
                                      sizeof why), FCL_SUCCESS);
    ck_assert_int_eq(fcl_plan_flash(&gpu, &bt.desc, FCL_PASS_FORWARD, &gpu_alone, why,
                                    sizeof why), FCL_SUCCESS);
    batch_free(&bt);
  }
  for (size_t c = 0; c < PLACEMENTS; ++c) {
    const placement *pl = &placements[c];
    batch bt = make_batch(&t, pl->how, pl->n, pl->slot, shapes[si].max_nq, shapes[si].min_nk,
                          shapes[si].max_nk, pl->page, 1, 1000 + c);
    /* what the planner would run without the mode */
    batch plain = bt;
    plain.desc.batch_invariant = 0;
    if (pl->how == PAGED) plain.desc.block_table = PLANNED_TABLE;
    fcl_plan p, g;
    ck_assert_int_eq(fcl_context_plan(ctx, &plain.desc, FCL_PASS_FORWARD, &p, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_int_eq(fcl_plan_flash(&gpu, &plain.desc, FCL_PASS_FORWARD, &g, why, sizeof why),
                     FCL_SUCCESS);
    plans_differ +=
        plans_differ_in_order(&p, &plain_alone) || plans_differ_in_order(&g, &gpu_alone);
    fcl_plan used;
    run_batch(ctx, &bt, &t, rows.o[1], rows.lse[1], &used);
    /* the mode's tile, paged or not (tiles span pages) */
    ck_assert_uint_eq(used.kernel, alone.kernel);
    ck_assert_uint_eq(used.block_k, alone.block_k);
    ck_assert_msg(rows_same(&rows),
                  "%s %s, %s batch of %zu (slot %zu, pages %zu): O or LSE bits differ from "
                  "the sequence alone (plans: %u splits of %u keys, block_k %u, wg %u alone; "
                  "%u splits of %u keys, block_k %u, wg %u here)",
                  fcl_flash_kernel_name(used.kernel), fcl_dtype_name(dtype),
                  placing_name[pl->how], pl->n, pl->slot, pl->page,
                  alone.splits, alone.split_keys, alone.block_k, alone.wg_size, used.splits,
                  used.split_keys, used.block_k, used.wg_size);
    batch_free(&bt);
  }
  /* the placements exercise what the mode fixes (in the planner's family;
   * a forced one may plan them all alike without the mode), here or on a
   * GPU's rules (a CPU's few compute units may split them all alike) */
  if (family == FCL_FLASH_KERNEL_AUTO) ck_assert_uint_gt(plans_differ, 0);
  rows_free(&rows);
  target_free(&t);
  fcl_context_release(ctx);
}
END_TEST

/* Where a plan made for keys_planned keys ends the first split of a row
 * of row_keys (tiles of block_k): with the tile, what orders the row's sums. */
static size_t first_split_end(const fcl_plan *p, size_t keys_planned, size_t row_keys) {
  const size_t keys = p->splits > 1 ? fcl__split_keys(p, keys_planned) : keys_planned;
  return keys < row_keys ? keys : row_keys;
}

/* The batches tried below: sequences, and the longest of the others. */
static const struct {
  size_t n, longest;
} other_batches[] = {{3, 6000}, {3, 20000}, {8, 20000}, {32, 20000}};
#define OTHER_BATCHES (sizeof other_batches / sizeof other_batches[0])

/* Whether a plan of the batch splits the row (slot 1, 1500 keys) otherwise
 * than the plan of the row alone. */
static int splits_otherwise(const fcl_plan *alone, const fcl_plan *in_batch,
                            const batch *bt, size_t row_keys) {
  return alone->block_k != in_batch->block_k ||
         first_split_end(alone, row_keys, row_keys) !=
             first_split_end(in_batch, bt->desc.seqlen_k, row_keys);
}

/* _i: dtype. Without the mode, a batch paged in 16-token pages, its other
 * sequences longer, splits the row's keys otherwise than the row alone
 * (the first of other_batches that does on this device): the rows' bits
 * differ, which the mode's test would catch. Some batch does on an H100's
 * rules too, so a CPU run sees what a GPU's would (an H100 splits 1500
 * keys alone, and a batch whose others are 4x longer at as many tiles a
 * split). */
START_TEST(test_bits_differ_without_the_mode) {
  const fcl_dtype dtype = dtypes[_i];
  fcl_context *ctx = th_context();
  target t = make_target(2, 1, 1, 1500, 64, 0, dtype, 200 + (uint64_t)_i);
  row_pair rows = rows_alloc(&t);
  fcl_plan alone, used;
  run_alone(ctx, &t, 0, rows.o[0], rows.lse[0], &alone);
  char why[256];
  const fcl_device_limits gpu = h100_rules();
  fcl_plan gpu_alone;
  {
    batch one = make_batch(&t, PAGED, 1, 0, 1, 0, t.nk, 16, 0, 7);
    one.desc.block_table = PLANNED_TABLE;
    ck_assert_int_eq(fcl_plan_flash(&gpu, &one.desc, FCL_PASS_FORWARD, &gpu_alone, why,
                                    sizeof why), FCL_SUCCESS);
    one.desc.block_table = NULL;
    batch_free(&one);
  }
  batch bt;
  int here = 0, on_gpu = 0;
  for (size_t i = 0; i < OTHER_BATCHES && !(here && on_gpu); ++i) {
    batch b = make_batch(&t, PAGED, other_batches[i].n, 1, 1, 1500, other_batches[i].longest, 16,
                         0, 7);
    fcl_attention_desc paged = b.desc;
    paged.block_table = PLANNED_TABLE;  /* run_batch makes the real one */
    fcl_plan p, g;
    ck_assert_int_eq(fcl_context_plan(ctx, &paged, FCL_PASS_FORWARD, &p, why, sizeof why),
                     FCL_SUCCESS);
    ck_assert_int_eq(fcl_plan_flash(&gpu, &paged, FCL_PASS_FORWARD, &g, why, sizeof why),
                     FCL_SUCCESS);
    on_gpu |= splits_otherwise(&gpu_alone, &g, &b, t.nk);
    if (!here && splits_otherwise(&alone, &p, &b, t.nk)) {
      here = 1, bt = b;
    } else {
      batch_free(&b);
    }
  }
  ck_assert_msg(here, "every batch splits the row as it is split alone (block_k %u, splits %u)",
                alone.block_k, alone.splits);
  ck_assert_msg(on_gpu, "on an H100's rules, every batch splits the row as alone (splits %u)",
                gpu_alone.splits);
  run_batch(ctx, &bt, &t, rows.o[1], rows.lse[1], &used);
  ck_assert(splits_otherwise(&alone, &used, &bt, t.nk));
  ck_assert_msg(!rows_same(&rows),
                "without the mode, block_k %u / %u and splits %u / %u gave the same bits",
                alone.block_k, used.block_k, alone.splits, used.splits);
  batch_free(&bt);
  rows_free(&rows);
  target_free(&t);
  fcl_context_release(ctx);
}
END_TEST

/* _i: dtype x prefill rows (20: split as a decode step's keys; 100: not).
 * In the mode, the last row of a causal prefill chunk over a cache and the
 * decode step of that row over the same keys: both close to the float64
 * reference (run_alone) and to each other, and on a CPU, where the mode
 * runs one kernel family, the same bits for a chunk the mode splits as it
 * splits the decode step. What differs is printed (docs/design.md, "Batch
 * invariance", records it). */
START_TEST(test_decode_row_against_prefill) {
  const fcl_dtype dtype = dtypes[_i % 2];
  const size_t rows = _i < 2 ? 20 : 100, nk = 700, hq = 2, d = 64;
  fcl_context *ctx = th_context();
  target pre = make_target(hq, hq, rows, nk, d, 1, dtype, 300 + (uint64_t)_i);
  target dec = pre;
  dec.nq = 1;
  dec.q = pre.q + (rows - 1) * hq * d;  /* the chunk's last row */
  float *o_pre = malloc(rows * hq * d * sizeof *o_pre), *lse_pre = malloc(rows * hq * sizeof *lse_pre);
  float o_dec[2 * 64], lse_dec[2];
  ck_assert(o_pre && lse_pre);
  fcl_plan plan_pre, plan_dec;
  run_alone(ctx, &pre, 1, o_pre, lse_pre, &plan_pre);
  run_alone(ctx, &dec, 1, o_dec, lse_dec, &plan_dec);
  const float *last = o_pre + (rows - 1) * hq * d;
  size_t differ = 0;
  double worst = 0.0;
  for (size_t c = 0; c < hq * d; ++c) {
    differ += memcmp(&last[c], &o_dec[c], sizeof *o_dec) != 0;
    worst = fmax(worst, fabs((double)last[c] - o_dec[c]));
  }
  size_t lse_differ = 0;
  for (size_t h = 0; h < hq; ++h)
    lse_differ += memcmp(&lse_pre[h * rows + rows - 1], &lse_dec[h], sizeof *lse_dec) != 0;
  printf("decode row vs prefill row (%s, %zu-row chunk over %zu keys; %s %u splits, block_k "
         "%u against %s %u splits, block_k %u): %zu of %zu O elements and %zu of %zu LSEs "
         "differ, largest difference %.3g\n",
         fcl_dtype_name(dtype), rows, nk, fcl_flash_kernel_name(plan_pre.kernel),
         plan_pre.splits, plan_pre.block_k, fcl_flash_kernel_name(plan_dec.kernel),
         plan_dec.splits, plan_dec.block_k, differ, hq * d, lse_differ, hq, worst);
  ck_assert_msg(worst < (dtype == FCL_DTYPE_F32 ? 1e-5 : 2e-3),
                "the decode row is %g from the prefill's", worst);
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  if (!dev.limits.is_gpu && rows <= FCL_BATCH_INVARIANT_SPLIT_ROWS)
    ck_assert_msg(differ == 0 && lse_differ == 0,
                  "on a CPU the decode row must be the %zu-row chunk's, bit for bit", rows);
  free(o_pre);
  free(lse_pre);
  dec.q = NULL;
  target_free(&pre);
  fcl_context_release(ctx);
}
END_TEST

/* The flag is 0 or 1; a split_keys hint is refused. */
START_TEST(test_bad_flag) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 1, 1, 1, 1, 64, 64);
  d.batch_invariant = 2;
  fcl_device_limits limits;
  memset(&limits, 0, sizeof limits);
  limits.max_work_group_size = 256;
  limits.local_mem_bytes = 64 << 10;
  limits.compute_units = 8;
  fcl_plan plan;
  char why[256];
  ck_assert_int_eq(fcl_plan_flash(&limits, &d, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(why, "batch_invariant"));
  d.batch_invariant = 1;
  const fcl_plan hint = {.split_keys = 512};
  ck_assert_int_eq(
      fcl_plan_flash_hinted(&limits, &d, FCL_PASS_FORWARD, &hint, &plan, why, sizeof why),
      FCL_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(why, "split_keys"));
  /* the mode's splits: a fixed size, as many as the keys need */
  ck_assert_int_eq(fcl_plan_flash(&limits, &d, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.splits, 1);
  d.seqlen_k = 3 * FCL_BATCH_INVARIANT_SPLIT_KEYS + 1;
  ck_assert_int_eq(fcl_plan_flash(&limits, &d, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  ck_assert_uint_eq(plan.splits, 4);
  ck_assert_uint_eq(plan.split_keys, FCL_BATCH_INVARIANT_SPLIT_KEYS);
  ck_assert_uint_eq(plan.merge, FCL_SPLIT_MERGE_KERNEL);
}
END_TEST

/* The mode's plan of a problem `desc` on `lim`, paged in pages of `page`
 * tokens (0: contiguous) or not in the mode (`invariant` 0). */
static fcl_plan plan_of(const fcl_device_limits *lim, fcl_attention_desc desc, int invariant,
                        size_t page, const char *name) {
  desc.batch_invariant = invariant;
  if (page) {
    desc.block_table = (cl_mem)&desc;  /* planned, never read */
    desc.page_size = page;
    desc.pages_per_seq = (desc.seqlen_k + page - 1) / page;
    desc.num_pages = desc.batch * desc.pages_per_seq;
  }
  fcl_plan plan;
  char why[256] = "";
  ck_assert_msg(fcl_plan_flash(lim, &desc, FCL_PASS_FORWARD, &plan, why, sizeof why) ==
                    FCL_SUCCESS,
                "%s: %s", name, why);
  return plan;
}

/* The mode's key tile is the unpaged one: a paged cache's plan in the mode
 * (pages of 16 and 48) is the contiguous one, and on an H100's rules its
 * tile that of the planner's usual plan (64 keys for the f16 prefill of
 * head_dim 128, whose 16-key tiles once cost 1.8x), on every profile and
 * made-up device, prefill and decode rows. */
START_TEST(test_mode_takes_the_unpaged_tile) {
  fcl_device_limits devices[16];
  const char *names[16];
  size_t n = 0;
  devices[0] = h100_rules();
  names[n++] = "H100 rules";
  size_t count = 0;
  const fcl_device_profile *profiles = fcl_device_profiles(&count);
  for (size_t i = 0; i < count && n < 16; ++i, ++n) {
    devices[n] = profiles[i].info.limits;
    names[n] = profiles[i].key;
  }
  const size_t rows[3] = {4096, 40, 1};
  for (size_t dv = 0; dv < n; ++dv)
    for (size_t r = 0; r < 3; ++r)
      for (int causal = 0; causal < 2; ++causal) {
        fcl_attention_desc desc;
        fcl_attention_desc_init(&desc, 4, 16, r == 0 ? 16 : 4, rows[r], 4096, 128);
        desc.dtype = FCL_DTYPE_F16;
        desc.causal = causal;
        char name[96];
        snprintf(name, sizeof name, "%s, %zu rows, causal %d", names[dv], rows[r], causal);
        const fcl_plan flat = plan_of(&devices[dv], desc, 1, 0, name);
        for (int pi = 0; pi < 2; ++pi) {
          const fcl_plan paged = plan_of(&devices[dv], desc, 1, pi ? 48 : 16, name);
          ck_assert_msg(paged.kernel == flat.kernel && paged.block_k == flat.block_k &&
                            paged.wg_size == flat.wg_size && paged.splits == flat.splits,
                        "%s, pages of %d: block_k %u wg %u, contiguous %u, %u", name,
                        pi ? 48 : 16, paged.block_k, paged.wg_size, flat.block_k,
                        flat.wg_size);
        }
        if (dv == 0 && r == 0) {
          const fcl_plan usual = plan_of(&devices[dv], desc, 0, 0, name);
          ck_assert_uint_eq(usual.kernel, FCL_FLASH_KERNEL_MMA);
          ck_assert_msg(flat.kernel == usual.kernel && flat.block_k == usual.block_k,
                        "%s: the mode's block_k %u, the usual %u", name, flat.block_k,
                        usual.block_k);
          ck_assert_uint_gt(flat.block_k, FCL_PAGE_SIZE_MULTIPLE);
        }
      }
}
END_TEST

int main(void) {
  Suite *s = suite_create("batch_invariance");
  TCase *tc = th_tcase("batch_invariance");
  tcase_add_loop_test(tc, test_same_bits_in_every_batch, 0, (int)(SHAPES * FAMILIES * 2));
  tcase_add_loop_test(tc, test_bits_differ_without_the_mode, 0, 2);
  tcase_add_loop_test(tc, test_decode_row_against_prefill, 0, 4);
  tcase_add_test(tc, test_bad_flag);
  tcase_add_test(tc, test_mode_takes_the_unpaged_tile);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
