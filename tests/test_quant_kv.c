/*
 * test_quant_kv.c — quantized KV caches (fcl_attention_desc.kv_dtype: int8
 * and int4 blocks of 32 with an f16 scale, fp8 E4M3 and E5M2 with
 * per-tensor scales). The forward is judged against the float64 reference
 * over the DEQUANTISED cache (the host's copy of the format, util/kvcodec.c
 * on cl/kvquant.h), by the flash suites' rule (2x the naive algorithm's
 * error, which dequantises too, plus the storage type's floor), in every
 * family that reads a cache (CPU, SIMT, decode, the decode kernel on
 * emulated matrix instructions), split, packed, paged, with a softcap and
 * a sliding window, with cache lengths that end inside a tile and a page.
 * Separately the format's own error: within half a step of the
 * unquantised input, saturation beyond the range, and NaN and infinity as
 * include/flashcl.h promises. Appends (contiguous and paged, crossing a
 * page; alone and in the one-call decode step) write exactly the host's bytes;
 * counted bytes equal the model; reruns are bit-identical; the backward
 * and a head_dim off the block are refused with nothing written. The
 * host's codec, told that rows repeat, codes them as row by row.
 */
#include "harness.h"
#include "kvcodec.h"
#include "params.h"
#include "kvquant.h"
#include "views.h"
#include "calls.h"
#include "problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const fcl_kv_dtype forms[4] = {FCL_KV_Q8_0, FCL_KV_Q4_0, FCL_KV_FP8_E4M3,
                                      FCL_KV_FP8_E5M2};
#define N_FORMS 4

/* A problem whose K and V are kept in `form`: the device's cache in its
 * bytes (rows of the layouts' bytes, the table's pages when paged), the
 * host's k and v what the cache holds (dequantised). */
typedef struct qproblem {
  th_problem p;         /* desc with kv_dtype; dk, dv the cache's bytes */
  cl_mem plain_k, plain_v;  /* th_problem_init's unquantised uploads */
  float *raw_k, *raw_v;     /* the unquantised host values */
  int32_t *table;
  cl_mem d_table;
} qproblem;

static cl_mem upload_image(fcl_context *ctx, const fcl_attention_desc *d, fclu_tensor t,
                           const float *x, size_t bytes) {
  unsigned char *image = malloc(bytes);
  ck_assert_ptr_nonnull(image);
  memset(image, 0xff, bytes);  /* NaN scales wherever no row is */
  fclu_scatter(d, t, x, image);
  cl_int err;
  cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            bytes, image, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  free(image);
  return m;
}

static void qproblem_init(qproblem *qp, fcl_context *ctx, const fcl_attention_desc *desc,
                          size_t page_size, size_t kv_offset, uint64_t seed) {
  memset(qp, 0, sizeof *qp);
  fcl_attention_desc plain = *desc;
  plain.kv_dtype = FCL_KV_AS_DTYPE;
  plain.block_table = NULL;
  th_problem_init(&qp->p, ctx, &plain, seed, 1.0);
  qp->p.desc = *desc;
  fcl_attention_desc *d = &qp->p.desc;
  d->k.offset = d->v.offset = kv_offset;  /* bytes of the cache's buffers before it */
  qp->plain_k = qp->p.dk;
  qp->plain_v = qp->p.dv;
  const size_t n = qp->p.kv_elems;
  qp->raw_k = malloc(n * sizeof(float));
  qp->raw_v = malloc(n * sizeof(float));
  ck_assert(qp->raw_k && qp->raw_v);
  memcpy(qp->raw_k, qp->p.k, n * sizeof(float));
  memcpy(qp->raw_v, qp->p.v, n * sizeof(float));
  if (page_size) {  /* pools of pages named in a shuffled order, two spare */
    d->page_size = page_size;
    d->pages_per_seq = (d->seqlen_k + page_size - 1) / page_size;
    d->num_pages = d->batch * d->pages_per_seq + 2;
    qp->table = malloc(d->batch * d->pages_per_seq * sizeof *qp->table);
    ck_assert_ptr_nonnull(qp->table);
    fclu_shuffled_pages(th_seed() + seed, d->batch, d->pages_per_seq, d->num_pages, qp->table);
    cl_int err;
    qp->d_table = clCreateBuffer(fcl_context_cl_context(ctx),
                                 CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                 d->batch * d->pages_per_seq * sizeof *qp->table, qp->table, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    d->block_table = qp->d_table;
    fclu_set_pages(qp->d_table, qp->table);
  }
  fcl_buffer_sizes sz;
  char why[256];
  ck_assert_msg(fcl_attention_buffer_sizes(d, &sz, why, sizeof why) == FCL_SUCCESS, "%s", why);
  ck_assert_uint_eq(sz.k, kv_offset + fcl_kv_row_bytes(d->kv_dtype, d->dtype, d->head_dim) *
                                          d->heads_kv *
                                          (page_size ? d->num_pages * page_size
                                                     : d->batch * d->seqlen_k));
  qp->p.dk = upload_image(ctx, d, FCLU_K, qp->raw_k, sz.k);
  qp->p.dv = upload_image(ctx, d, FCLU_V, qp->raw_v, sz.v);
  const size_t rows = n / d->head_dim;
  fclu_kv_round_trip(d, 0, qp->p.k, rows, 0);
  fclu_kv_round_trip(d, 1, qp->p.v, rows, 0);
}

static void qproblem_free(qproblem *qp) {
  th_problem_free(&qp->p);  /* the cache's buffers */
  clReleaseMemObject(qp->plain_k);
  clReleaseMemObject(qp->plain_v);
  if (qp->d_table) clReleaseMemObject(qp->d_table);
  free(qp->table);
  free(qp->raw_k);
  free(qp->raw_v);
}

static void set_hint(fcl_context *ctx, unsigned kernel, unsigned splits) {
  const fcl_plan hint = {.kernel = kernel, .splits = splits};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
}

typedef struct qcase {
  size_t b, hq, hkv, nq, nk, d, page;
  int causal;
  const int32_t *lens;
  fcl_dtype dtype;
  unsigned kernel;  /* 0: the planner's */
  float softcap;
  int window_left;  /* -1: none */
  size_t kv_offset; /* bytes before the cache in its buffers */
} qcase;

/* Lengths that end inside a 16-key tile and a page, and an empty cache. */
static const int32_t lens3[3] = {37, 0, 250}, lens2[2] = {1, 100};
static const qcase cases[] = {
    {3, 8, 2, 1, 256, 64, 0, 1, lens3, FCL_DTYPE_F32, 0, 0, -1, 0},                     /* CPU, GQA */
    {2, 4, 4, 3, 160, 32, 48, 1, lens2, FCL_DTYPE_F32, 0, 0, -1, 0},                    /* paged */
    {2, 8, 2, 1, 200, 64, 0, 1, lens2, FCL_DTYPE_F32, FCL_FLASH_KERNEL_SIMT, 0, -1, 0}, /* SIMT */
    {3, 8, 2, 1, 256, 128, 16, 1, lens3, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE, 0, -1, 0},
    {2, 4, 1, 2, 128, 64, 0, 1, lens2, FCL_DTYPE_BF16, FCL_FLASH_KERNEL_SIMT, 0, -1, 0},
    {1, 4, 2, 1, 80, 64, 0, 1, NULL, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE_MMA, 0, -1, 0},
    /* bf16 operands; int8 rows of 102 bytes: codes at addresses 2 mod 4 */
    {1, 4, 2, 1, 48, 96, 0, 1, NULL, FCL_DTYPE_BF16, FCL_FLASH_KERNEL_DECODE_MMA, 0, -1, 0},
    /* every form at d 128 (fp8's spans in 16-byte words; int8 rows of 136
     * bytes, int4 72), paged, a length inside a block of keys; and d 32,
     * fp8's spans of 8 and 4 columns */
    {2, 8, 2, 1, 200, 128, 16, 1, lens2, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE_MMA, 0, -1, 0},
    {1, 4, 2, 1, 48, 32, 0, 1, NULL, FCL_DTYPE_BF16, FCL_FLASH_KERNEL_DECODE_MMA, 0, -1, 0},
    /* bf16 operands at d 128: V a step behind for the block forms */
    {1, 8, 2, 1, 72, 128, 0, 1, NULL, FCL_DTYPE_BF16, FCL_FLASH_KERNEL_DECODE_MMA, 0, -1, 0},
    /* a cache 2 bytes into its buffers: fp8's spans a group at a time */
    {1, 4, 2, 1, 40, 128, 0, 1, NULL, FCL_DTYPE_F16, FCL_FLASH_KERNEL_DECODE_MMA, 0, -1, 2},
    /* a softcap and a sliding window, on the CPU and the decode kernels */
    {2, 8, 2, 2, 200, 64, 0, 1, lens2, FCL_DTYPE_F32, 0, 5.0f, 40, 0},
    {2, 8, 2, 1, 200, 64, 16, 1, lens2, FCL_DTYPE_F32, FCL_FLASH_KERNEL_DECODE, 5.0f, 40, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static fcl_attention_desc case_desc(const qcase *c, fcl_kv_dtype form) {
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, c->b, c->hq, c->hkv, c->nq, c->nk, c->d);
  d.causal = c->causal;
  d.seqlens_k = c->lens;
  d.dtype = c->dtype;
  d.softcap = c->softcap;
  d.window_left = c->window_left;
  d.kv_dtype = form;
  if (form == FCL_KV_FP8_E4M3) d.k_scale = 0.0078125f, d.v_scale = 0.01f;  /* the values / 448 */
  if (form == FCL_KV_FP8_E5M2) d.k_scale = 2.0f;
  return d;
}

/* Every case in `form`, split 1 and 3: within 2x the naive algorithm's
 * error (dequantising too) plus the floor of the reference over the
 * dequantised cache; reruns bit for bit; counted bytes the model's. */
START_TEST(forward_matches_reference_over_the_dequantised_cache) {
  const fcl_kv_dtype form = forms[_i];
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  for (size_t i = 0; i < N_CASES; ++i) {
    const qcase *c = &cases[i];
    /* the emulated matrix instructions are slow on a CPU: two forms, but
     * every form where the spans load in words (d 128) */
    if (c->kernel == FCL_FLASH_KERNEL_DECODE_MMA && c->d != 128 && form != FCL_KV_Q8_0 &&
        form != FCL_KV_FP8_E4M3)
      continue;
    const fcl_attention_desc desc = case_desc(c, form);
    qproblem qp;
    qproblem_init(&qp, ctx, &desc, c->page, c->kv_offset, 100 + i);
    th_reference ref = th_reference_forward(&qp.p);
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
    float *naive = th_naive_output(ctx, &qp.p);
    const double naive_err = fclu_max_abs_err(naive, ref.o, qp.p.q_elems);
    const double floor = th_err_floor(desc.dtype, ref.o, qp.p.q_elems);
    ck_assert_msg(naive_err < (desc.dtype == FCL_DTYPE_F32 ? 1e-4 : 2e-2),
                  "%s case %zu: the naive algorithm is off by %g", fcl_kv_dtype_name(form), i,
                  naive_err);
    for (unsigned splits = 1; splits <= 3; splits += 2) {
      set_hint(ctx, c->kernel, splits);
      th_forward r = th_run_forward(ctx, &qp.p, FCL_ALGO_FLASH, 1);
      ck_assert_msg(r.status == FCL_SUCCESS, "%s case %zu: %s", fcl_kv_dtype_name(form), i,
                    fcl_context_last_error(ctx));
      if (c->kernel) ck_assert_uint_eq(r.info.plan.kernel, c->kernel);
      const double err = fclu_max_abs_err(r.o, ref.o, qp.p.q_elems);
      ck_assert_msg(err <= 2 * naive_err + floor,
                    "%s case %zu (%s), %u splits: error %g > 2 x naive %g + %g",
                    fcl_kv_dtype_name(form), i, fcl_flash_kernel_name(r.info.plan.kernel),
                    r.info.plan.splits, err, naive_err, floor);
      if (count) ck_assert_uint_eq(r.info.bytes_counted, r.info.bytes_model);
      th_forward again = th_run_forward(ctx, &qp.p, FCL_ALGO_FLASH, 1);
      ck_assert(again.status == FCL_SUCCESS);
      ck_assert_msg(memcmp(r.o, again.o, qp.p.q_elems * sizeof *r.o) == 0 &&
                        memcmp(r.lse, again.lse, qp.p.lse_elems * sizeof *r.lse) == 0,
                    "%s case %zu: a rerun differs", fcl_kv_dtype_name(form), i);
      th_forward_free(&again);
      th_forward_free(&r);
    }
    free(naive);
    th_reference_free(&ref);
    qproblem_free(&qp);
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- the format itself, on the host --------------------------------------- */

/* The largest error a form's rounding may make of x, given the block's
 * scale d (block forms) or the tensor's scale s (fp8): half a step. */
static double half_step(fcl_kv_dtype f, double x, double d, double s) {
  if (f == FCL_KV_Q8_0 || f == FCL_KV_Q4_0) return d / 2;
  const double a = fabs(x) / s;
  const int mant = f == FCL_KV_FP8_E4M3 ? 3 : 2, emin = f == FCL_KV_FP8_E4M3 ? -6 : -14;
  const int e = a > 0 ? (int)floor(log2(a)) : emin;
  return ldexp(1.0, (e < emin ? emin : e) - mant - 1) * s;
}

static float block_scale(fcl_kv_dtype f, const uint8_t *row, size_t c) {
  const size_t bytes = f == FCL_KV_Q8_0 ? FCL_KV_Q8_BYTES : FCL_KV_Q4_BYTES;
  const uint8_t *b = row + c / FCL_KV_BLOCK * bytes;
  return fcl_f16_to_float((uint32_t)b[0] | ((uint32_t)b[1] << 8));
}

/* Random rows of widely spread magnitudes: every element within half a
 * step of its input; values past the range saturate; a block (int) or an
 * element (fp8) holding NaN reads NaN, an infinity NaN (int) or the
 * largest value (fp8); the scales are what the header says. */
START_TEST(format_error_within_half_a_step) {
  const fcl_kv_dtype f = forms[_i];
  const size_t hd = 128;
  const float s = f == FCL_KV_FP8_E4M3 ? 0.5f : 1.0f;
  const size_t bytes = fcl_kv_row_bytes(f, FCL_DTYPE_F32, hd);
  ck_assert_uint_eq(bytes, f == FCL_KV_Q8_0 ? 136 : f == FCL_KV_Q4_0 ? 72 : 128);
  uint8_t *row = malloc(bytes);
  float x[128], y[128];
  ck_assert_ptr_nonnull(row);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 7);
  double worst = 0.0;
  for (int trial = 0; trial < 200; ++trial) {
    const double spread = ldexp(1.0, (int)fclu_range(&rng, 0, 24) - 12);
    fclu_fill_normal(&rng, x, hd, spread, FCL_DTYPE_F32);
    if (trial % 7 == 0) x[trial % hd] = 0.0f;
    fclu_kv_encode_row(f, x, hd, s, row);
    fclu_kv_decode_row(f, row, hd, s, y);
    const int block = f == FCL_KV_Q8_0 || f == FCL_KV_Q4_0;
    for (size_t c = 0; c < hd; ++c) {
      const double d = block ? block_scale(f, row, c) : 0.0;
      const double bound = half_step(f, x[c], d, s);
      const double err = fabs((double)x[c] - (double)y[c]);
      const double fp8_top = f == FCL_KV_FP8_E4M3 ? 448.0 : 57344.0;
      if (!block && fabs(x[c]) / s >= fp8_top) {  /* past the range: saturated */
        ck_assert_msg(fabs(y[c]) == fp8_top * s && (y[c] < 0) == (x[c] < 0),
                      "%s: %g saturated to %g", fcl_kv_dtype_name(f), (double)x[c], (double)y[c]);
        continue;
      }
      ck_assert_msg(err <= bound, "%s: %.9g read back as %.9g (error %g > half a step %g)",
                    fcl_kv_dtype_name(f), (double)x[c], (double)y[c], err, bound);
      if (block && bound > 0) worst = fmax(worst, err / bound);
      if (block) {  /* d is amax / qmax rounded to f16, never below it */
        double amax = 0;
        for (size_t j = c / 32 * 32; j < c / 32 * 32 + 32; ++j) amax = fmax(amax, fabs(x[j]));
        const double want = amax / (f == FCL_KV_Q8_0 ? 127.0 : 7.0);
        ck_assert_msg(d >= want && d - want <= want * 0x1p-10 + 0x1p-24, "scale %g for amax %g",
                      d, amax);
      }
    }
  }
  /* saturation: far past the range */
  for (size_t c = 0; c < hd; ++c) x[c] = (c % 2 ? -1.0f : 1.0f) * 1e30f;
  x[0] = 0.0f;
  fclu_kv_encode_row(f, x, hd, s, row);
  fclu_kv_decode_row(f, row, hd, s, y);
  const double top = f == FCL_KV_Q8_0   ? 127.0 * 65504.0
                     : f == FCL_KV_Q4_0 ? 7.0 * 65504.0
                     : f == FCL_KV_FP8_E4M3 ? 448.0 * s
                                            : 57344.0 * s;
  ck_assert_msg(y[0] == 0.0f, "0 read back as %g", (double)y[0]);
  for (size_t c = 1; c < hd; ++c)
    ck_assert_msg(fabs(y[c]) == top && (y[c] < 0) == (x[c] < 0), "%s: %g saturated to %g",
                  fcl_kv_dtype_name(f), (double)x[c], (double)y[c]);
  /* NaN and infinity */
  fclu_fill_normal(&rng, x, hd, 1.0, FCL_DTYPE_F32);
  x[3] = NAN;
  x[40] = INFINITY;
  x[100] = -INFINITY;
  fclu_kv_encode_row(f, x, hd, s, row);
  fclu_kv_decode_row(f, row, hd, s, y);
  if (f == FCL_KV_Q8_0 || f == FCL_KV_Q4_0) {
    for (size_t c = 0; c < hd; ++c) {
      const int poisoned = c / 32 == 0 || c / 32 == 1 || c / 32 == 3;
      ck_assert_msg(poisoned ? isnan(y[c]) : isfinite(y[c]), "element %zu reads %g", c,
                    (double)y[c]);
    }
  } else {
    ck_assert(isnan(y[3]));
    ck_assert_msg(y[40] == (float)top && y[100] == -(float)top, "inf read back as %g, %g",
                  (double)y[40], (double)y[100]);
    ck_assert(isfinite(y[4]));
  }
  if (f == FCL_KV_Q8_0 || f == FCL_KV_Q4_0)
    fprintf(stderr, "%s: largest error %.3f of half a step\n", fcl_kv_dtype_name(f), worst);
  free(row);
}
END_TEST

/* ---- appends ------------------------------------------------------------- */

static cl_mem new_rows(fcl_context *ctx, const fcl_attention_desc *d, size_t n_new,
                       fclu_rng *rng, float **host) {
  const size_t n = d->batch * n_new * d->heads_kv * d->head_dim;
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fclu_fill_normal(rng, x, n, 1.0, d->dtype);
  cl_mem mem = fclu_upload(ctx, x, n, d->dtype);
  ck_assert_ptr_nonnull(mem);
  *host = x;
  return mem;
}

/* The cache's bytes as the device holds them. */
static unsigned char *cache_bytes(fcl_context *ctx, cl_mem m, size_t bytes) {
  unsigned char *x = malloc(bytes);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), m, CL_TRUE, 0, bytes, x, 0,
                                       NULL, NULL),
                   CL_SUCCESS);
  return x;
}

/* Appends of three rows (crossing a page of 16 where paged) from f32 and
 * f16 rows: the cache then holds, byte for byte, what the host's copy of
 * the format writes for those rows, every other byte untouched; counted
 * bytes are the model's; the one-call decode step then attends over the
 * appended rows as the reference does. Rows holding NaN and infinities
 * are written as the header says: the rows that see them output NaN. */
START_TEST(append_quantises_as_the_host_does) {
  const fcl_kv_dtype form = forms[_i / 2];
  const size_t page = _i % 2 ? 16 : 0;
  fcl_context *ctx = th_context();
  const int count = th_count_io(ctx);
  const int32_t before[3] = {14, 31, 0}, after[3] = {17, 34, 3};
  const size_t n_new = 3;
  for (int t = 0; t < 2; ++t) {
    fcl_attention_desc desc;
    fcl_attention_desc_init(&desc, 3, 4, 2, n_new, 64, 64);
    desc.dtype = t ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
    desc.causal = 1;
    desc.kv_dtype = form;
    desc.k_scale = form == FCL_KV_FP8_E4M3 ? 0.02f : 0.0f;
    desc.seqlens_k = before;
    qproblem qp;
    qproblem_init(&qp, ctx, &desc, page, 0, 200 + (uint64_t)_i);
    fcl_attention_desc *d = &qp.p.desc;
    fclu_rng rng;
    fclu_rng_seed(&rng, th_seed() + 201 + (uint64_t)_i);
    float *hk, *hv;
    cl_mem kn = new_rows(ctx, d, n_new, &rng, &hk), vn = new_rows(ctx, d, n_new, &rng, &hv);
    if (t) {  /* non-finite inputs in entry 2's first row: block 0 of K, element 5 of V */
      hk[(2 * n_new) * d->heads_kv * d->head_dim + 1] = NAN;
      hv[(2 * n_new) * d->heads_kv * d->head_dim + 5] = INFINITY;
      clReleaseMemObject(kn);
      clReleaseMemObject(vn);
      const size_t n = d->batch * n_new * d->heads_kv * d->head_dim;
      kn = fclu_upload(ctx, hk, n, d->dtype);
      vn = fclu_upload(ctx, hv, n, d->dtype);
    }
    fcl_buffer_sizes sz;
    ck_assert_int_eq(fcl_attention_buffer_sizes(d, &sz, NULL, 0), FCL_SUCCESS);
    /* f32: the append, then the forward; f16: the one-call decode step */
    fcl_run_info ri;
    th_forward r;
    memset(&r, 0, sizeof r);
    if (!t) {
      ck_assert_msg(fcl_kv_cache_append(ctx, d, n_new, NULL, NULL, kn, vn, qp.p.dk, qp.p.dv,
                                        &ri) == FCL_SUCCESS,
                    "%s", fcl_context_last_error(ctx));
      if (count) ck_assert_uint_eq(ri.bytes_counted, ri.bytes_model);
    } else {
      const size_t es = fcl_dtype_size(d->dtype);
      cl_mem o = fclu_poisoned_buffer(ctx, qp.p.q_elems * es);
      ck_assert_ptr_nonnull(o);
      ck_assert_msg(fcl_attention_forward_kvcache(ctx, d, FCL_ALGO_FLASH, qp.p.dq, n_new, NULL,
                                                  NULL, kn, vn, qp.p.dk, qp.p.dv, o, NULL,
                                                  &ri) == FCL_SUCCESS,
                    "%s", fcl_context_last_error(ctx));
      if (count) ck_assert_uint_eq(ri.bytes_counted, ri.bytes_model);
      r.o = malloc(qp.p.q_elems * sizeof *r.o);
      ck_assert_ptr_nonnull(r.o);
      ck_assert_int_eq(fclu_download(ctx, o, r.o, qp.p.q_elems, d->dtype), 0);
      clReleaseMemObject(o);
    }
    /* the host's cache: its rows, the new ones in place */
    const size_t hd = d->head_dim, row = d->heads_kv * hd;
    float *host[2] = {qp.raw_k, qp.raw_v}, *fresh[2] = {hk, hv};
    for (int i = 0; i < 2; ++i)
      for (size_t b = 0; b < d->batch; ++b)
        for (size_t j = 0; j < n_new; ++j)
          memcpy(host[i] + (b * d->seqlen_k + (size_t)before[b] + j) * row,
                 fresh[i] + (b * n_new + j) * row, row * sizeof(float));
    const cl_mem caches[2] = {qp.p.dk, qp.p.dv};
    const fclu_tensor ts[2] = {FCLU_K, FCLU_V};
    for (int i = 0; i < 2; ++i) {
      unsigned char *got = cache_bytes(ctx, caches[i], sz.k), *want = malloc(sz.k);
      ck_assert_ptr_nonnull(want);
      memset(want, 0xff, sz.k);
      fclu_scatter(d, ts[i], host[i], want);
      for (size_t at = 0; at < sz.k; ++at)
        ck_assert_msg(got[at] == want[at], "%s %s (%s), byte %zu: %#x, the host's %#x",
                      fcl_kv_dtype_name(form), i ? "v" : "k", page ? "paged" : "contiguous", at,
                      got[at], want[at]);
      free(got);
      free(want);
    }
    /* attention over the appended cache: the one-call step from the old
     * lengths gives what the reference gives from the new ones */
    memcpy(qp.p.k, qp.raw_k, qp.p.kv_elems * sizeof(float));
    memcpy(qp.p.v, qp.raw_v, qp.p.kv_elems * sizeof(float));
    fclu_kv_round_trip(d, 0, qp.p.k, qp.p.kv_elems / hd, 0);
    fclu_kv_round_trip(d, 1, qp.p.v, qp.p.kv_elems / hd, 0);
    d->seqlens_k = after;
    th_reference ref = th_reference_forward(&qp.p);
    if (!t) {
      r = th_run_forward(ctx, &qp.p, FCL_ALGO_FLASH, 1);
      ck_assert_msg(r.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
    }
    const size_t q_row = d->heads_q * hd;
    for (size_t b = 0; b < d->batch; ++b)
      for (size_t e = 0; e < n_new * q_row; ++e) {
        const size_t at = b * n_new * q_row + e;
        /* entry 2's KV head 0 (query heads 0 and 1) holds the NaN key,
         * which every new row sees (a NaN score): those rows are NaN */
        const size_t h = e % q_row / hd;
        if (t && b == 2 && h < d->heads_q / d->heads_kv) {
          ck_assert_msg(isnan(r.o[at]), "entry 2 output %zu: %g, not NaN", e, (double)r.o[at]);
          continue;
        }
        ck_assert_msg(fabs(r.o[at] - ref.o[at]) <= 2e-2 * (t ? 1 : 0.01) + 1e-5,
                      "%s, entry %zu, output %zu: %g, the reference %g", fcl_kv_dtype_name(form),
                      b, e, (double)r.o[at], ref.o[at]);
      }
    th_forward_free(&r);
    th_reference_free(&ref);
    d->seqlens_k = before;
    free(hk);
    free(hv);
    clReleaseMemObject(kn);
    clReleaseMemObject(vn);
    qproblem_free(&qp);
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- refusals ----------------------------------------------------------- */

/* The backward with a quantized cache, a head_dim off the block of the
 * block forms, odd byte strides and a kv_dtype outside the enum: each a
 * documented status with a reason, the outputs (poisoned) untouched. */
/* Rows that repeat (flashcl-bench's caches of 10^9 elements, drawn from a
 * pool): the host's codec told their period encodes, and reads back, the
 * same bytes and values as row by row, in a view whose order is not the
 * packed one (bhsd), K and V. */
START_TEST(repeating_rows_code_as_each_row_alone) {
  const fcl_kv_dtype f = forms[_i];
  fcl_attention_desc d;
  fcl_attention_desc_init(&d, 2, 6, 3, 1, 37, 64);
  d.dtype = FCL_DTYPE_F16;
  d.kv_dtype = f;
  d.k_scale = 0.5f, d.v_scale = 2.0f;
  const size_t row_bytes = fcl_kv_row_bytes(f, d.dtype, d.head_dim);
  const fcl_tensor_layout bhsd = {.seq_stride = row_bytes,
                                  .head_stride = d.seqlen_k * row_bytes,
                                  .batch_stride = d.heads_kv * d.seqlen_k * row_bytes};
  d.k = d.v = bhsd;  /* in bytes: heads outside tokens, not the packed order */
  const size_t rows = fclu_tokens(&d, FCLU_K) * d.heads_kv, hd = d.head_dim, period = 5;
  fcl_buffer_sizes sz;
  char why[256];
  const fcl_status st = fcl_attention_buffer_sizes(&d, &sz, why, sizeof why);
  ck_assert_msg(st == FCL_SUCCESS, "%s", why);
  float *x = malloc(rows * hd * sizeof *x), *a = malloc(rows * hd * sizeof *a),
        *b = malloc(rows * hd * sizeof *b);
  uint8_t *one = malloc(sz.k), *each = malloc(sz.k);
  ck_assert(x && a && b && one && each);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 11);
  fclu_fill_normal(&rng, x, period * hd, 3.0, FCL_DTYPE_F32);
  for (size_t r = period; r < rows; ++r) memcpy(x + r * hd, x + (r % period) * hd, hd * sizeof *x);
  for (int is_v = 0; is_v < 2; ++is_v) {
    const fclu_tensor t = is_v ? FCLU_V : FCLU_K;
    memset(one, 0xff, sz.k), memset(each, 0xff, sz.k);
    fclu_scatter(&d, t, x, each);
    fclu_scatter_repeating(&d, t, x, one, period);
    ck_assert_msg(!memcmp(one, each, sz.k), "%s %s: the repeated rows' bytes differ",
                  fcl_kv_dtype_name(f), is_v ? "V" : "K");
    memcpy(a, x, rows * hd * sizeof *x), memcpy(b, x, rows * hd * sizeof *x);
    fclu_kv_round_trip(&d, is_v, a, rows, 0);
    fclu_kv_round_trip(&d, is_v, b, rows, period);
    ck_assert_msg(!memcmp(a, b, rows * hd * sizeof *a), "%s %s: the repeated rows read back apart",
                  fcl_kv_dtype_name(f), is_v ? "V" : "K");
  }
  free(x), free(a), free(b), free(one), free(each);
}
END_TEST

START_TEST(refusals_write_nothing) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 2, 4, 32, 64);
  desc.kv_dtype = FCL_KV_Q8_0;
  qproblem qp;
  qproblem_init(&qp, ctx, &desc, 0, 0, 300);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &qp.p, 301);
  for (int algo = 0; algo < 2; ++algo) {
    th_backward r = th_run_backward(ctx, &qp.p, &g, algo ? FCL_ALGO_NAIVE : FCL_ALGO_FLASH);
    ck_assert_int_eq(r.status, FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(fcl_context_last_error(ctx), "quantized KV cache"), "%s",
                  fcl_context_last_error(ctx));
    for (size_t i = 0; i < qp.p.q_elems; ++i) ck_assert(isnan(r.dq[i]));
    for (size_t i = 0; i < qp.p.kv_elems; ++i) ck_assert(isnan(r.dk[i]) && isnan(r.dv[i]));
    th_backward_free(&r);
  }
  fcl_plan plan;
  char why[256];
  ck_assert_int_eq(fcl_plan_flash(&(fcl_device_limits){.max_work_group_size = 256,
                                                       .local_mem_bytes = 65536,
                                                       .compute_units = 4},
                                  &desc, FCL_PASS_BACKWARD, &plan, why, sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  /* head_dim 48 in the block forms; fp8 takes it */
  for (int f = 0; f < N_FORMS; ++f) {
    fcl_attention_desc d48 = desc;
    d48.head_dim = 48;
    d48.kv_dtype = forms[f];
    fcl_buffer_sizes sz;
    const fcl_status want = f < 2 ? FCL_ERROR_UNSUPPORTED : FCL_SUCCESS;
    ck_assert_int_eq(fcl_attention_buffer_sizes(&d48, &sz, why, sizeof why), want);
    if (f < 2) ck_assert_msg(strstr(why, "multiple of 32"), "%s", why);
    if (f < 2) {
      th_forward r = th_run_forward(ctx, &(th_problem){.desc = d48, .q_elems = qp.p.q_elems,
                                                       .lse_elems = qp.p.lse_elems,
                                                       .dq = qp.p.dq, .dk = qp.p.dk, .dv = qp.p.dv},
                                    FCL_ALGO_FLASH, 1);
      ck_assert_int_eq(r.status, FCL_ERROR_UNSUPPORTED);
      for (size_t i = 0; i < qp.p.q_elems; ++i) ck_assert(isnan(r.o[i]));
      th_forward_free(&r);
    }
  }
  /* odd byte offsets; a kv_dtype outside the enum; a negative scale */
  fcl_attention_desc bad = desc;
  bad.k.offset = 1;
  fcl_buffer_sizes sz;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&bad, &sz, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(why, "even"), "%s", why);
  bad = desc;
  bad.kv_dtype = (fcl_kv_dtype)9;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&bad, &sz, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  bad = desc;
  bad.v_scale = -1.0f;
  ck_assert_int_eq(fcl_attention_buffer_sizes(&bad, &sz, why, sizeof why),
                   FCL_ERROR_INVALID_ARGUMENT);
  /* an append to a head_dim 48 int8 cache: refused, the cache untouched */
  {
    fcl_attention_desc d48 = desc;
    const int32_t lens[1] = {3};
    d48.head_dim = 48;
    d48.seqlens_k = lens;
    d48.seqlen_q = 1;
    fcl_buffer_sizes s32;
    ck_assert_int_eq(fcl_attention_buffer_sizes(&desc, &s32, NULL, 0), FCL_SUCCESS);
    unsigned char *before = cache_bytes(ctx, qp.p.dk, s32.k);
    ck_assert_int_eq(fcl_kv_cache_append(ctx, &d48, 1, NULL, NULL, qp.plain_k, qp.plain_v, qp.p.dk,
                                         qp.p.dv, NULL),
                     FCL_ERROR_UNSUPPORTED);
    unsigned char *after = cache_bytes(ctx, qp.p.dk, s32.k);
    ck_assert(memcmp(before, after, s32.k) == 0);
    free(before);
    free(after);
  }
  th_grad_inputs_free(&g);
  qproblem_free(&qp);
  fcl_context_release(ctx);
}
END_TEST

/* The load unit of a forward over K and V buffers of `bytes`: their lent
 * addresses as the call's buffer checks read them. */
static unsigned call_unit(fcl_context *ctx, cl_mem k, cl_mem v, size_t bytes) {
  const fcl__call_buffer args[] = {{k, "k", bytes, 0, fcl__range_view(bytes)},
                                   {v, "v", bytes, 0, fcl__range_view(bytes)}};
  uintptr_t lent[2];
  ck_assert_int_eq(fcl__check_call_buffers(ctx, args, 2, 2, lent), FCL_SUCCESS);
  return fcl__kv_buffer_unit(lent[0], lent[1]);
}

/* The load unit a call tells the decode kernel (KV_UNIT) follows lent
 * memory's addresses: a buffer the device placed counts as aligned, one
 * on the caller's memory (CL_MEM_USE_HOST_PTR) by its address, and its
 * sub-buffer by the parent's plus its origin. */
START_TEST(lent_cache_memory_sets_the_load_unit) {
  fcl_context *ctx = th_context();
  const cl_context cl = fcl_context_cl_context(ctx);
  enum { BYTES = 4096 };
  unsigned char *host = aligned_alloc(64, 2 * BYTES);
  ck_assert_ptr_nonnull(host);
  cl_int err = CL_SUCCESS;
  cl_mem placed = clCreateBuffer(cl, CL_MEM_READ_WRITE, BYTES, NULL, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  ck_assert_uint_eq(call_unit(ctx, placed, placed, BYTES), 0);
  const size_t offsets[] = {0, 16, 8, 4, 2, 1};
  const unsigned units[] = {16, 16, 8, 4, 2, 1};
  for (size_t i = 0; i < 6; ++i) {
    cl_mem lent = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, BYTES,
                                 host + offsets[i], &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_uint_eq(call_unit(ctx, lent, placed, BYTES), units[i]);
    ck_assert_uint_eq(call_unit(ctx, placed, lent, BYTES), units[i]);
    clReleaseMemObject(lent);
  }
  cl_mem parent =
      clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, 2 * BYTES, host, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  cl_uint align_bits = 0;
  ck_assert_int_eq(clGetDeviceInfo(fcl_context_cl_device(ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                                   sizeof align_bits, &align_bits, NULL),
                   CL_SUCCESS);
  const cl_buffer_region region = {align_bits / 8 > 16 ? align_bits / 8 : 16, BYTES};
  cl_mem sub = clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                 &region, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  ck_assert_uint_eq(call_unit(ctx, sub, sub, BYTES), 16);
  clReleaseMemObject(sub);
  clReleaseMemObject(parent);
  clReleaseMemObject(placed);
  free(host);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("quant_kv");
  TCase *tc = th_tcase("quant_kv");
  tcase_add_loop_test(tc, format_error_within_half_a_step, 0, N_FORMS);
  tcase_add_test(tc, refusals_write_nothing);
  tcase_add_test(tc, lent_cache_memory_sets_the_load_unit);
  tcase_add_loop_test(tc, repeating_rows_code_as_each_row_alone, 0, N_FORMS);
  tcase_add_loop_test(tc, append_quantises_as_the_host_does, 0, 2 * N_FORMS);
  tcase_add_loop_test(tc, forward_matches_reference_over_the_dequantised_cache, 0, N_FORMS);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
