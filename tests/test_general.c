/*
 * test_general.c — attention as applications hold it, against the float64
 * reference: sliding windows (with causal and GQA), softcap (with logits
 * of 1e4), ALiBi slopes per head and per batch entry, ragged batches with
 * empty, one-token and long sequences, and tensors in [B, H, N, d] views
 * and packed QKV buffers; forward and backward, every storage type, each
 * kernel family (SIMT, MMA emulated off NVIDIA, and the CPU kernels) and
 * both algorithms.
 * The rules are the other suites': the flash algorithm within 2x (3x for
 * gradients) the naive algorithm's error (in 16-bit types, its host
 * emulation's, plus the stored result's rounding), and the naive
 * algorithm itself close to the reference. Also: reruns are bit-identical,
 * counted bytes equal the I/O model, bad descriptors and buffers are
 * refused with their status and a message and nothing written, and the
 * host's mask (cl/params.h) and pair counts agree with brute force.
 */
#include "harness.h"
#include "common.h"
#include "problem.h"
#include "plan.h"
#include "views.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAYOUT_BSHD, LAYOUT_BHSD, LAYOUT_QKV };
enum { ALIBI_NONE, ALIBI_HEADS, ALIBI_BATCH };

typedef struct gcase {
  const char *name;
  size_t b, hq, hkv, nq, nk, d;  /* ragged: nq, nk bound the lengths */
  int causal, wl, wr;
  float softcap;
  int alibi;
  const int *lens_q, *lens_k;    /* ragged lengths, b of them; lens_k NULL: as q */
  int layout;
  double logits;                 /* 0: the default scale; else logits of about this size */
} gcase;

static const int ragged_lens[4] = {0, 1, 7, 1000};
static const int ragged_short[5] = {5, 0, 33, 1, 64};
static const int ragged_keys[5] = {9, 12, 0, 40, 70};

static const gcase cases[] = {
    {"window + causal + GQA", 2, 4, 2, 70, 90, 40, 1, 8, -1, 0, ALIBI_NONE, NULL, NULL,
     LAYOUT_BSHD, 0},
    {"window both sides", 1, 2, 2, 61, 61, 16, 0, 5, 3, 0, ALIBI_NONE, NULL, NULL, LAYOUT_BSHD,
     0},
    {"softcap + ALiBi", 2, 3, 1, 33, 47, 32, 1, -1, -1, 5.0f, ALIBI_HEADS, NULL, NULL,
     LAYOUT_BSHD, 0},
    {"softcap at logits of 1e4", 1, 2, 1, 40, 52, 24, 0, -1, -1, 30.0f, ALIBI_NONE, NULL, NULL,
     LAYOUT_BSHD, 1e4},
    {"ragged 0, 1, 7, 1000, causal", 4, 2, 1, 1000, 1000, 16, 1, -1, -1, 0, ALIBI_NONE,
     ragged_lens, NULL, LAYOUT_BSHD, 0},
    {"ragged keys of their own, window, softcap", 5, 2, 2, 64, 70, 32, 0, 6, 2, 8.0f,
     ALIBI_BATCH, ragged_short, ragged_keys, LAYOUT_BSHD, 0},
    {"[B, H, N, d] views, window", 2, 4, 2, 37, 50, 40, 0, 10, 4, 0, ALIBI_NONE, NULL, NULL,
     LAYOUT_BHSD, 0},
    {"packed QKV, GQA, ALiBi per batch", 2, 4, 2, 45, 45, 16, 1, -1, -1, 0, ALIBI_BATCH, NULL,
     NULL, LAYOUT_QKV, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static const fcl_dtype dtypes[3] = {FCL_DTYPE_F32, FCL_DTYPE_F16, FCL_DTYPE_BF16};

/* ---- a problem on the host and the device ------------------------------- */

typedef struct gproblem {
  fcl_attention_desc desc;
  int32_t cu_q[9], cu_k[9];
  size_t tokens_q, tokens_k;
  float *q, *k, *v, *slopes;     /* packed host tensors, rounded to the storage type */
  cl_mem bq, bk, bv, d_slopes;   /* bq == bk == bv for packed QKV */
  fcl_buffer_sizes sizes;
} gproblem;

/* Packed tensor x into, and out of, the byte image of tensor t's buffer
 * (util/views.h). */
static void scatter(const gcase *c, const gproblem *p, int t, const float *x, void *image) {
  (void)c;
  fclu_scatter(&p->desc, (fclu_tensor)t, x, image);
}

static void gather(const gcase *c, const gproblem *p, int t, const void *image, float *x) {
  (void)c;
  fclu_gather(&p->desc, (fclu_tensor)t, image, x);
}

static cl_mem buffer_of(fcl_context *ctx, const void *image, size_t bytes) {
  cl_int err;
  cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            bytes ? bytes : 4, (void *)image, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  return m;
}

static void *read_all(fcl_context *ctx, cl_mem m, size_t bytes) {
  void *image = malloc(bytes ? bytes : 4);
  ck_assert_ptr_nonnull(image);
  if (bytes)
    ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), m, CL_TRUE, 0, bytes, image,
                                         0, NULL, NULL),
                     CL_SUCCESS);
  return image;
}

static void *poison_image(size_t bytes) {
  void *image = malloc(bytes ? bytes : 4);
  ck_assert_ptr_nonnull(image);
  memset(image, 0xff, bytes ? bytes : 4);  /* NaN in every float format */
  return image;
}

static void problem_init(gproblem *p, fcl_context *ctx, const gcase *c, fcl_dtype dtype,
                         uint64_t seed) {
  memset(p, 0, sizeof *p);
  fcl_attention_desc *d = &p->desc;
  fcl_attention_desc_init(d, c->b, c->hq, c->hkv, c->nq, c->nk, c->d);
  d->dtype = dtype;
  d->causal = c->causal;
  d->window_left = c->wl;
  d->window_right = c->causal ? -1 : c->wr;
  d->softcap = c->softcap;
  p->tokens_q = c->b * c->nq;
  p->tokens_k = c->b * c->nk;
  if (c->lens_q) {
    p->cu_q[0] = p->cu_k[0] = 0;
    for (size_t b = 0; b < c->b; ++b) {
      p->cu_q[b + 1] = p->cu_q[b] + c->lens_q[b];
      p->cu_k[b + 1] = p->cu_k[b] + (c->lens_k ? c->lens_k : c->lens_q)[b];
    }
    d->cu_seqlens_q = p->cu_q;
    d->cu_seqlens_k = c->lens_k ? p->cu_k : NULL;
    p->tokens_q = (size_t)p->cu_q[c->b];
    p->tokens_k = (size_t)p->cu_k[c->b];
  }
  const size_t qn = p->tokens_q * c->hq * c->d, kn = p->tokens_k * c->hkv * c->d;
  p->q = malloc((qn ? qn : 1) * sizeof *p->q);
  p->k = malloc((kn ? kn : 1) * sizeof *p->k);
  p->v = malloc((kn ? kn : 1) * sizeof *p->v);
  ck_assert(p->q && p->k && p->v);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed);
  /* q.k of about `logits` after the scale: each of q and k of
   * sqrt(logits / (scale sqrt(d))) */
  const double sigma = c->logits > 0 ? sqrt(c->logits / (d->scale * sqrt((double)c->d))) : 1.0;
  fclu_fill_normal(&rng, p->q, qn, sigma, dtype);
  fclu_fill_normal(&rng, p->k, kn, sigma, dtype);
  fclu_fill_normal(&rng, p->v, kn, 1.0, dtype);
  if (c->alibi) {
    const size_t n = (c->alibi == ALIBI_BATCH ? c->b : 1) * c->hq;
    p->slopes = malloc(n * sizeof *p->slopes);
    ck_assert_ptr_nonnull(p->slopes);
    for (size_t i = 0; i < n; ++i) p->slopes[i] = (float)(0.05 + 0.5 * fclu_uniform(&rng));
    p->d_slopes = buffer_of(ctx, p->slopes, n * sizeof *p->slopes);
    d->alibi_slopes = p->d_slopes;
    d->alibi_per_batch = c->alibi == ALIBI_BATCH;
    fclref_set_slopes(p->d_slopes, p->slopes);
  }
  fclu_set_layouts(d, c->layout == LAYOUT_BHSD ? FCLU_BHSD
                     : c->layout == LAYOUT_QKV ? FCLU_QKV
                                               : FCLU_BSHD);
  char why[256];
  ck_assert_msg(fcl_attention_buffer_sizes(d, &p->sizes, why, sizeof why) == FCL_SUCCESS, "%s: %s",
                c->name, why);
  if (c->layout == LAYOUT_QKV) {
    const size_t bytes = p->sizes.q > p->sizes.k ? (p->sizes.q > p->sizes.v ? p->sizes.q : p->sizes.v)
                                                 : (p->sizes.k > p->sizes.v ? p->sizes.k : p->sizes.v);
    void *image = poison_image(bytes);
    scatter(c, p, FCL__Q, p->q, image);
    scatter(c, p, FCL__K, p->k, image);
    scatter(c, p, FCL__V, p->v, image);
    p->bq = p->bk = p->bv = buffer_of(ctx, image, bytes);
    clRetainMemObject(p->bq);
    clRetainMemObject(p->bq);
    free(image);
  } else {
    const int ts[3] = {FCL__Q, FCL__K, FCL__V};
    const float *xs[3] = {p->q, p->k, p->v};
    const size_t spans[3] = {p->sizes.q, p->sizes.k, p->sizes.v};
    cl_mem *out[3] = {&p->bq, &p->bk, &p->bv};
    for (int i = 0; i < 3; ++i) {
      void *image = poison_image(spans[i]);
      scatter(c, p, ts[i], xs[i], image);
      *out[i] = buffer_of(ctx, image, spans[i]);
      free(image);
    }
  }
}

static void problem_free(gproblem *p) {
  free(p->q);
  free(p->k);
  free(p->v);
  free(p->slopes);
  cl_mem all[4] = {p->bq, p->bk, p->bv, p->d_slopes};
  for (int i = 0; i < 4; ++i)
    if (all[i]) clReleaseMemObject(all[i]);
  memset(p, 0, sizeof *p);
}

static size_t q_count(const gproblem *p) { return p->tokens_q * p->desc.heads_q * p->desc.head_dim; }
static size_t kv_count(const gproblem *p) { return p->tokens_k * p->desc.heads_kv * p->desc.head_dim; }
static size_t lse_count(const gproblem *p) { return p->tokens_q * p->desc.heads_q; }

/* ---- runs ---------------------------------------------------------------- */

typedef struct fwd_out {
  fcl_status status;
  fcl_run_info info;
  float *o, *lse;
} fwd_out;

static fwd_out run_forward(fcl_context *ctx, const gcase *c, const gproblem *p, fcl_algo algo) {
  fwd_out r;
  memset(&r, 0, sizeof r);
  void *o_image = poison_image(p->sizes.o), *lse_image = poison_image(p->sizes.lse);
  cl_mem o = buffer_of(ctx, o_image, p->sizes.o), lse = buffer_of(ctx, lse_image, p->sizes.lse);
  r.status = fcl_attention_forward(ctx, &p->desc, algo, p->bq, p->bk, p->bv, o, lse, &r.info);
  free(o_image);
  free(lse_image);
  o_image = read_all(ctx, o, p->sizes.o);
  lse_image = read_all(ctx, lse, p->sizes.lse);
  r.o = malloc((q_count(p) ? q_count(p) : 1) * sizeof *r.o);
  r.lse = malloc((lse_count(p) ? lse_count(p) : 1) * sizeof *r.lse);
  ck_assert(r.o && r.lse);
  gather(c, p, FCL__O, o_image, r.o);
  memcpy(r.lse, lse_image, lse_count(p) * sizeof *r.lse);
  free(o_image);
  free(lse_image);
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  return r;
}

static void fwd_free(fwd_out *r) {
  free(r->o);
  free(r->lse);
}

/* What the backward takes besides q, k, v: dO, and O and LSE from the
 * reference forward, O rounded to the storage type. */
typedef struct grads_in {
  float *dout, *o, *lse;
  cl_mem bdout, bo, blse;
} grads_in;

static void grads_in_init(grads_in *g, fcl_context *ctx, const gcase *c, const gproblem *p,
                          uint64_t seed) {
  const size_t qn = q_count(p), ln = lse_count(p);
  g->dout = malloc((qn ? qn : 1) * sizeof *g->dout);
  g->o = malloc((qn ? qn : 1) * sizeof *g->o);
  g->lse = malloc((ln ? ln : 1) * sizeof *g->lse);
  double *o = malloc((qn ? qn : 1) * sizeof *o), *lse = malloc((ln ? ln : 1) * sizeof *lse);
  ck_assert(g->dout && g->o && g->lse && o && lse);
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + seed + 0x9e37);
  fclu_fill_normal(&rng, g->dout, qn, 1.0, p->desc.dtype);
  fclref_forward(&p->desc, p->q, p->k, p->v, o, lse);
  for (size_t i = 0; i < qn; ++i) g->o[i] = fclu_round((float)o[i], p->desc.dtype);
  for (size_t i = 0; i < ln; ++i) g->lse[i] = (float)lse[i];
  free(o);
  free(lse);
  void *image = poison_image(p->sizes.dout);
  scatter(c, p, FCL__DOUT, g->dout, image);
  g->bdout = buffer_of(ctx, image, p->sizes.dout);
  free(image);
  image = poison_image(p->sizes.o);
  scatter(c, p, FCL__O, g->o, image);
  g->bo = buffer_of(ctx, image, p->sizes.o);
  free(image);
  g->blse = buffer_of(ctx, g->lse, p->sizes.lse);
}

static void grads_in_free(grads_in *g) {
  free(g->dout);
  free(g->o);
  free(g->lse);
  clReleaseMemObject(g->bdout);
  clReleaseMemObject(g->bo);
  clReleaseMemObject(g->blse);
}

typedef struct bwd_out {
  fcl_status status;
  fcl_run_info info;
  float *dq, *dk, *dv;
} bwd_out;

static bwd_out run_backward(fcl_context *ctx, const gcase *c, const gproblem *p,
                            const grads_in *g, fcl_algo algo) {
  bwd_out r;
  memset(&r, 0, sizeof r);
  cl_mem bufs[3];
  const int ts[3] = {FCL__DQ, FCL__DK, FCL__DV};
  const size_t spans[3] = {p->sizes.dq, p->sizes.dk, p->sizes.dv};
  size_t packed_bytes = 0;
  if (c->layout == LAYOUT_QKV) {
    for (int i = 0; i < 3; ++i) packed_bytes = spans[i] > packed_bytes ? spans[i] : packed_bytes;
    void *image = poison_image(packed_bytes);
    bufs[0] = bufs[1] = bufs[2] = buffer_of(ctx, image, packed_bytes);
    free(image);
  } else {
    for (int i = 0; i < 3; ++i) {
      void *image = poison_image(spans[i]);
      bufs[i] = buffer_of(ctx, image, spans[i]);
      free(image);
    }
  }
  r.status = fcl_attention_backward(ctx, &p->desc, algo, p->bq, p->bk, p->bv, g->bo, g->blse,
                                    g->bdout, bufs[0], bufs[1], bufs[2], &r.info);
  float **outs[3] = {&r.dq, &r.dk, &r.dv};
  const size_t counts[3] = {q_count(p), kv_count(p), kv_count(p)};
  for (int i = 0; i < 3; ++i) {
    *outs[i] = malloc((counts[i] ? counts[i] : 1) * sizeof(float));
    ck_assert_ptr_nonnull(*outs[i]);
    void *image = read_all(ctx, bufs[i], c->layout == LAYOUT_QKV ? packed_bytes : spans[i]);
    gather(c, p, ts[i], image, *outs[i]);
    free(image);
  }
  for (int i = 0; i < (c->layout == LAYOUT_QKV ? 1 : 3); ++i) clReleaseMemObject(bufs[i]);
  return r;
}

static void bwd_free(bwd_out *r) {
  free(r->dq);
  free(r->dk);
  free(r->dv);
}

/* ---- the rules ----------------------------------------------------------- */


/* The floor of a case's rule beyond the storage type's: at logits of 1e4
 * an ulp of a logit (2^-10 in [8192, 16384)) moves P by 1e-3 relative,
 * and an algorithm that rounds a dot product differently from the naive
 * one pays up to a few of them (test_backward.c: logits of 1e4). */
static double logit_floor(const gcase *c, double ref_max) {
  return c->logits >= 1e4 ? 8 * 0x1p-10 * ref_max : 0.0;
}

/* Contexts whose tiling hint forces the kernel family (an fcl_flash_kernel). */
static fcl_context *family_context(unsigned kernel) {
  fcl_context *ctx = th_context();
  const fcl_plan hint = {.kernel = kernel};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  return ctx;
}

static int mma_takes(const gcase *c) { return c->d % 8 == 0 && c->d <= 128; }

/* The families with both passes of any problem: SIMT, MMA (where it
 * takes the head_dim) and the CPU kernels. */
static const unsigned families[] = {FCL_FLASH_KERNEL_SIMT, FCL_FLASH_KERNEL_MMA,
                                    FCL_FLASH_KERNEL_CPU};
static int family_takes(const gcase *c, unsigned kernel) {
  return kernel != FCL_FLASH_KERNEL_MMA || mma_takes(c);
}

/* Against the reference, the CPU kernels take each case in one storage
 * type, another from case to case, and the SIMT and MMA kernels in f32 and
 * one 16-bit type, f16 and bf16 by turns: the storage paths are
 * test_half's and every other suite's, what this suite adds (masks,
 * transforms, sequences, views) does not depend on the type, and every
 * case in a third type was more kernel builds in CI's longest suite. */
static int family_takes_type(const gcase *c, unsigned kernel, int t) {
  const int index = (int)(c - cases);
  if (!family_takes(c, kernel)) return 0;
  if (kernel == FCL_FLASH_KERNEL_CPU) return t == index % 3;
  return t == 0 || t == 1 + index % 2;
}

/* The naive algorithm's forward error: on the device in f32 (its result
 * also held close to the reference), emulated on the host in 16-bit types
 * (and the bf16 device run held to the emulation's rule too). */
static double naive_forward_error(fcl_context *ctx, const gcase *c, const gproblem *p,
                                  const double *ref_o, const double *ref_lse, double ref_max) {
  const size_t qn = q_count(p), ln = lse_count(p);
  double emulated = 0.0;
  if (p->desc.dtype != FCL_DTYPE_F32) {
    float *o = malloc((qn ? qn : 1) * sizeof *o), *lse = malloc((ln ? ln : 1) * sizeof *lse);
    ck_assert(o && lse);
    for (size_t b = 0; b < p->desc.batch; ++b) {
      size_t q0, nq, k0, nk;
      fclref_sequence(&p->desc, b, &q0, &nq, &k0, &nk);
      for (size_t h = 0; h < p->desc.heads_q; ++h)
        for (size_t i = 0; i < nq; ++i)
          fclref_naive_row(&p->desc, p->q, p->k, p->v, b, h, i,
                           o + ((q0 + i) * p->desc.heads_q + h) * p->desc.head_dim,
                           lse + fclref_lse_at(&p->desc, b, h, i));
    }
    emulated = fmax(fclu_max_abs_err(o, ref_o, qn), fclu_max_abs_err(lse, ref_lse, ln));
    free(o);
    free(lse);
  }
  if (p->desc.dtype == FCL_DTYPE_F16) return emulated;  /* no device naive f16 without fp16 */
  fwd_out naive = run_forward(ctx, c, p, FCL_ALGO_NAIVE);
  ck_assert_msg(naive.status == FCL_SUCCESS, "%s naive: %s", c->name, fcl_context_last_error(ctx));
  const double err = fmax(fclu_max_abs_err(naive.o, ref_o, qn),
                          fclu_max_abs_err(naive.lse, ref_lse, ln));
  fwd_free(&naive);
  const double bound = p->desc.dtype == FCL_DTYPE_F32
                           ? 1e-3 * (1.0 + ref_max)
                           : 2.0 * emulated + th_half_ulp(p->desc.dtype) * ref_max + 1e-6;
  ck_assert_msg(err <= bound, "%s %s: the naive forward is off by %g (bound %g)", c->name,
                fcl_dtype_name(p->desc.dtype), err, bound);
  return p->desc.dtype == FCL_DTYPE_F32 ? err : emulated;
}

static void check_forward(const gcase *c, fcl_dtype dtype, unsigned kernel, double *worst) {
  fcl_context *ctx = family_context(kernel);
  const char *family = fcl_flash_kernel_name(kernel);
  gproblem p;
  problem_init(&p, ctx, c, dtype, 17 + (uint64_t)(c - cases));
  const size_t qn = q_count(&p), ln = lse_count(&p);
  double *ref_o = malloc((qn ? qn : 1) * sizeof *ref_o);
  double *ref_lse = malloc((ln ? ln : 1) * sizeof *ref_lse);
  ck_assert(ref_o && ref_lse);
  fclref_forward(&p.desc, p.q, p.k, p.v, ref_o, ref_lse);
  const double ref_max = fclu_max_abs(ref_o, qn);
  fwd_out flash = run_forward(ctx, c, &p, FCL_ALGO_FLASH);
  ck_assert_msg(flash.status == FCL_SUCCESS, "%s %s %s: %s", c->name, fcl_dtype_name(dtype),
                family, fcl_context_last_error(ctx));
  ck_assert_uint_eq(flash.info.plan.kernel, kernel);
  const double err = fmax(fclu_max_abs_err(flash.o, ref_o, qn),
                          fclu_max_abs_err(flash.lse, ref_lse, ln));
  const double naive = naive_forward_error(ctx, c, &p, ref_o, ref_lse, ref_max);
  const double floor =
      th_half_ulp(dtype) * ref_max + 1e-6 * fmax(1.0, ref_max) + logit_floor(c, ref_max);
  ck_assert_msg(err <= 2.0 * naive + floor,
                "%s %s %s forward: flash error %g > 2 x naive %g + %g", c->name,
                fcl_dtype_name(dtype), family, err, naive, floor);
  const double ratio = err / (naive + floor);
  if (ratio > *worst) *worst = ratio;
  fwd_free(&flash);
  free(ref_o);
  free(ref_lse);
  problem_free(&p);
  fcl_context_release(ctx);
}

static void check_backward(const gcase *c, fcl_dtype dtype, unsigned kernel, double *worst) {
  fcl_context *ctx = family_context(kernel);
  const char *family = fcl_flash_kernel_name(kernel);
  gproblem p;
  problem_init(&p, ctx, c, dtype, 29 + (uint64_t)(c - cases));
  grads_in g;
  grads_in_init(&g, ctx, c, &p, 31 + (uint64_t)(c - cases));
  const size_t qn = q_count(&p), kn = kv_count(&p);
  const size_t counts[3] = {qn, kn, kn};
  double *ref[3];
  for (int i = 0; i < 3; ++i) {
    ref[i] = malloc((counts[i] ? counts[i] : 1) * sizeof(double));
    ck_assert_ptr_nonnull(ref[i]);
  }
  fclref_backward_given_o(&p.desc, p.q, p.k, p.v, g.dout, g.o, ref[0], ref[1], ref[2]);
  bwd_out flash = run_backward(ctx, c, &p, &g, FCL_ALGO_FLASH);
  ck_assert_msg(flash.status == FCL_SUCCESS, "%s %s %s backward: %s", c->name,
                fcl_dtype_name(dtype), family, fcl_context_last_error(ctx));
  /* the yardstick: the naive backward, on the device in f32, emulated in
   * 16-bit types */
  float *naive[3] = {NULL, NULL, NULL};
  bwd_out device_naive;
  memset(&device_naive, 0, sizeof device_naive);
  if (dtype == FCL_DTYPE_F32) {
    device_naive = run_backward(ctx, c, &p, &g, FCL_ALGO_NAIVE);
    ck_assert_msg(device_naive.status == FCL_SUCCESS, "%s naive backward: %s", c->name,
                  fcl_context_last_error(ctx));
    naive[0] = device_naive.dq;
    naive[1] = device_naive.dk;
    naive[2] = device_naive.dv;
  } else {
    for (int i = 0; i < 3; ++i) {
      naive[i] = malloc((counts[i] ? counts[i] : 1) * sizeof(float));
      ck_assert_ptr_nonnull(naive[i]);
    }
    fclref_naive_backward(&p.desc, p.q, p.k, p.v, g.dout, naive[0], naive[1], naive[2]);
  }
  static const char *const names[3] = {"dQ", "dK", "dV"};
  const float *got[3] = {flash.dq, flash.dk, flash.dv};
  for (int i = 0; i < 3; ++i) {
    const double ref_max = fclu_max_abs(ref[i], counts[i]);
    const double fe = fclu_max_abs_err(got[i], ref[i], counts[i]);
    const double ne = fclu_max_abs_err(naive[i], ref[i], counts[i]);
    const double floor =
        th_half_ulp(dtype) * ref_max + 1e-6 * fmax(1.0, ref_max) + logit_floor(c, ref_max);
    if (dtype == FCL_DTYPE_F32)
      ck_assert_msg(ne <= 1e-3 * (1.0 + ref_max), "%s: the naive %s is off by %g", c->name,
                    names[i], ne);
    ck_assert_msg(fe <= 3.0 * ne + floor, "%s %s %s backward: flash %s error %g > 3 x naive %g + %g",
                  c->name, fcl_dtype_name(dtype), family, names[i], fe, ne, floor);
    const double ratio = fe / (ne + floor);
    if (ratio > *worst) *worst = ratio;
  }
  if (dtype == FCL_DTYPE_F32) {
    bwd_free(&device_naive);
  } else {
    for (int i = 0; i < 3; ++i) free(naive[i]);
  }
  bwd_free(&flash);
  for (int i = 0; i < 3; ++i) free(ref[i]);
  grads_in_free(&g);
  problem_free(&p);
  fcl_context_release(ctx);
}

/* _i: the case; every storage type and kernel family the case takes. */
START_TEST(forward_matches_the_reference) {
  const gcase *c = &cases[_i];
  double worst = 0.0;
  for (int t = 0; t < 3; ++t)
    for (size_t f = 0; f < sizeof families / sizeof families[0]; ++f)
      if (family_takes_type(c, families[f], t)) check_forward(c, dtypes[t], families[f], &worst);
  printf("general: forward, %s: worst flash / (naive + floor) %.3f\n", c->name, worst);
}
END_TEST

START_TEST(backward_matches_the_reference) {
  const gcase *c = &cases[_i];
  double worst = 0.0;
  for (int t = 0; t < 3; ++t)
    for (size_t f = 0; f < sizeof families / sizeof families[0]; ++f)
      if (family_takes_type(c, families[f], t)) check_backward(c, dtypes[t], families[f], &worst);
  printf("general: backward, %s: worst flash / (naive + floor) %.3f\n", c->name, worst);
}
END_TEST

/* Rows that see no key (an empty key sequence, or a window beyond every
 * key) give zeros, LSE -inf and zero gradients. */
START_TEST(rows_that_see_no_key) {
  fcl_context *ctx = th_context();
  const gcase *c = &cases[5];  /* the third sequence has no keys */
  gproblem p;
  problem_init(&p, ctx, c, FCL_DTYPE_F32, 71);
  fwd_out f = run_forward(ctx, c, &p, FCL_ALGO_FLASH);
  ck_assert_int_eq(f.status, FCL_SUCCESS);
  grads_in g;
  grads_in_init(&g, ctx, c, &p, 72);
  bwd_out bw = run_backward(ctx, c, &p, &g, FCL_ALGO_FLASH);
  ck_assert_int_eq(bw.status, FCL_SUCCESS);
  size_t blind = 0;
  for (size_t b = 0; b < p.desc.batch; ++b) {
    size_t q0, nq, k0, nk;
    fclref_sequence(&p.desc, b, &q0, &nq, &k0, &nk);
    if (nk) continue;
    for (size_t h = 0; h < p.desc.heads_q; ++h)
      for (size_t i = 0; i < nq; ++i, ++blind) {
        const float l = f.lse[fclref_lse_at(&p.desc, b, h, i)];
        ck_assert_msg(isinf(l) && l < 0, "LSE %g", (double)l);
        const size_t at = ((q0 + i) * p.desc.heads_q + h) * p.desc.head_dim;
        for (size_t e = 0; e < p.desc.head_dim; ++e) {
          ck_assert(f.o[at + e] == 0.0f);
          ck_assert(bw.dq[at + e] == 0.0f);
        }
      }
  }
  ck_assert_uint_gt(blind, 0);
  printf("general: %zu rows without a key give zeros, LSE -inf and dQ = 0\n", blind);
  bwd_free(&bw);
  grads_in_free(&g);
  fwd_free(&f);
  problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* The same inputs give the same bits, forward and backward, run after run. */
START_TEST(reruns_are_bit_identical) {
  const int picks[3] = {4, 5, 7};
  for (int k = 0; k < 3; ++k) {
    const gcase *c = &cases[picks[k]];
    for (size_t fam = 0; fam < sizeof families / sizeof families[0]; ++fam) {
      if (!family_takes(c, families[fam])) continue;
      fcl_context *ctx = family_context(families[fam]);
      gproblem p;
      problem_init(&p, ctx, c, FCL_DTYPE_BF16, 80);
      grads_in g;
      grads_in_init(&g, ctx, c, &p, 81);
      fwd_out f1 = run_forward(ctx, c, &p, FCL_ALGO_FLASH), f2 = run_forward(ctx, c, &p, FCL_ALGO_FLASH);
      bwd_out b1 = run_backward(ctx, c, &p, &g, FCL_ALGO_FLASH);
      bwd_out b2 = run_backward(ctx, c, &p, &g, FCL_ALGO_FLASH);
      ck_assert(f1.status == FCL_SUCCESS && b1.status == FCL_SUCCESS);
      ck_assert_mem_eq(f1.o, f2.o, q_count(&p) * sizeof(float));
      ck_assert_mem_eq(f1.lse, f2.lse, lse_count(&p) * sizeof(float));
      ck_assert_mem_eq(b1.dq, b2.dq, q_count(&p) * sizeof(float));
      ck_assert_mem_eq(b1.dk, b2.dk, kv_count(&p) * sizeof(float));
      ck_assert_mem_eq(b1.dv, b2.dv, kv_count(&p) * sizeof(float));
      fwd_free(&f1);
      fwd_free(&f2);
      bwd_free(&b1);
      bwd_free(&b2);
      grads_in_free(&g);
      problem_free(&p);
      fcl_context_release(ctx);
    }
  }
}
END_TEST

/* Counted bytes equal the model, flash and naive, both passes, with
 * windows, ragged batches, ALiBi and views. */
START_TEST(counted_bytes_equal_the_model) {
  const int picks[4] = {0, 2, 5, 6};
  for (int k = 0; k < 4; ++k) {
    const gcase *c = &cases[picks[k]];
    for (size_t fam = 0; fam < sizeof families / sizeof families[0]; ++fam) {
      if (!family_takes(c, families[fam])) continue;
      fcl_context *ctx = family_context(families[fam]);
      fcl_device_info info;
      fcl_context_device(ctx, &info);
      if (!info.limits.has_int64_atomics) {
        fcl_context_release(ctx);
        return;
      }
      ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
      gproblem p;
      problem_init(&p, ctx, c, k % 2 ? FCL_DTYPE_BF16 : FCL_DTYPE_F32, 90);
      grads_in g;
      grads_in_init(&g, ctx, c, &p, 91);
      for (int a = 0; a < 2; ++a) {
        if (a == FCL_ALGO_NAIVE && families[fam] != FCL_FLASH_KERNEL_SIMT) continue;
        fwd_out f = run_forward(ctx, c, &p, (fcl_algo)a);
        bwd_out bw = run_backward(ctx, c, &p, &g, (fcl_algo)a);
        ck_assert_msg(f.status == FCL_SUCCESS && bw.status == FCL_SUCCESS, "%s: %s", c->name,
                      fcl_context_last_error(ctx));
        ck_assert_msg(f.info.bytes_counted == f.info.bytes_model,
                      "%s %s forward: counted %llu, model %llu", c->name,
                      fcl_algo_name((fcl_algo)a), (unsigned long long)f.info.bytes_counted,
                      (unsigned long long)f.info.bytes_model);
        ck_assert_msg(bw.info.bytes_counted == bw.info.bytes_model,
                      "%s %s backward: counted %llu, model %llu", c->name,
                      fcl_algo_name((fcl_algo)a), (unsigned long long)bw.info.bytes_counted,
                      (unsigned long long)bw.info.bytes_model);
        fwd_free(&f);
        bwd_free(&bw);
      }
      grads_in_free(&g);
      problem_free(&p);
      fcl_context_release(ctx);
    }
  }
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

/* The forward of both algorithms fails with `want` and a message holding
 * `needle`, and leaves o poisoned. */
static void expect_refused(fcl_context *ctx, const gcase *c, gproblem *p, cl_mem o, cl_mem lse,
                           fcl_status want, const char *needle) {
  fcl_status st = fcl_attention_forward(ctx, &p->desc, FCL_ALGO_FLASH, p->bq, p->bk, p->bv, o,
                                        lse, NULL);
  const char *msg = fcl_context_last_error(ctx);
  ck_assert_msg(st == want, "%s: want %s, got %s (%s)", needle, fcl_status_str(want),
                fcl_status_str(st), msg);
  ck_assert_msg(strstr(msg, needle), "\"%s\" lacks \"%s\"", msg, needle);
  st = fcl_attention_forward(ctx, &p->desc, FCL_ALGO_NAIVE, p->bq, p->bk, p->bv, o, lse, NULL);
  ck_assert_int_eq(st, want);
  if (o != p->bq) {  /* (o as q's own buffer holds q) */
    void *image = read_all(ctx, o, p->sizes.o);
    for (size_t i = 0; i < p->sizes.o; ++i)
      ck_assert_msg(((unsigned char *)image)[i] == 0xff, "%s: o written", needle);
    free(image);
  }
  (void)c;
}

START_TEST(bad_descriptors_are_refused) {
  fcl_context *ctx = th_context();
  const gcase *c = &cases[5];
  gproblem p;
  problem_init(&p, ctx, c, FCL_DTYPE_F32, 100);
  void *o_image = poison_image(p.sizes.o), *lse_image = poison_image(p.sizes.lse);
  cl_mem o = buffer_of(ctx, o_image, p.sizes.o), lse = buffer_of(ctx, lse_image, p.sizes.lse);
  const fcl_attention_desc good = p.desc;

  p.desc.window_left = -2;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "window (-2");
  p.desc = good;
  p.desc.causal = 1;
  p.desc.window_right = 3;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "window_right must be -1 or 0");
  p.desc = good;
  p.desc.softcap = -1.0f;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "softcap = -1");
  p.desc.softcap = NAN;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "softcap");
  p.desc = good;
  int32_t bad_cu[6];
  memcpy(bad_cu, p.cu_q, sizeof bad_cu);
  bad_cu[0] = 2;
  p.desc.cu_seqlens_q = bad_cu;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[0] is 2");
  memcpy(bad_cu, p.cu_q, sizeof bad_cu);
  bad_cu[3] = bad_cu[2] - 1;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[3]");
  memcpy(bad_cu, p.cu_q, sizeof bad_cu);
  bad_cu[5] = bad_cu[4] + (int32_t)c->nq + 1;  /* longer than seqlen_q */
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_SHAPE, "more than seqlen_q");
  p.desc = good;
  p.desc.struct_size = 0;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "struct_size is 0");
  p.desc = good;
  p.desc.k.batch_stride = 4;
  p.desc.k.seq_stride = c->hkv * c->d;
  p.desc.k.head_stride = c->d;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "batch_stride must be 0");
  /* a stride that makes elements overlap; one that is "negative" (wraps) */
  fcl_attention_desc dense = good;
  dense.cu_seqlens_q = dense.cu_seqlens_k = NULL;
  dense.batch = 2;
  p.desc = dense;
  p.desc.q.seq_stride = c->d / 2;
  p.desc.q.head_stride = c->d;
  p.desc.q.batch_stride = c->nq * c->hq * c->d;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_ARGUMENT, "make elements overlap");
  p.desc.q.seq_stride = (size_t)-8;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_INVALID_SHAPE, "q: its layout spans");
  /* slopes one float short */
  p.desc = good;
  cl_int err;
  cl_mem short_slopes = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                       p.sizes.alibi_slopes - 4, NULL, &err);
  p.desc.alibi_slopes = short_slopes;
  expect_refused(ctx, c, &p, o, lse, FCL_ERROR_BUFFER_TOO_SMALL, "buffer alibi_slopes");
  clReleaseMemObject(short_slopes);
  /* an output whose view is an input's: o over q's bytes */
  p.desc = good;
  p.desc.o = p.desc.q;
  expect_refused(ctx, c, &p, p.bq, lse, FCL_ERROR_INVALID_ARGUMENT, "output o is the same buffer as q");
  p.desc = good;
  printf("general: windows, softcaps, cu_seqlens, strides, slopes and views refused\n");
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  free(o_image);
  free(lse_image);
  problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* An output view over a packed input view is refused (its gradients in
 * one packed buffer run in backward_matches_the_reference); a tensor
 * misaligned for the MMA kernels takes SIMT (a CPU's kernels on a CPU)
 * under the planner, and a
 * forced MMA plan says why. */
START_TEST(packed_views_and_alignment) {
  fcl_context *ctx = th_context();
  const gcase *c = &cases[7];
  gproblem p;
  problem_init(&p, ctx, c, FCL_DTYPE_F32, 110);
  void *lse_image = poison_image(p.sizes.lse);
  cl_mem lse = buffer_of(ctx, lse_image, p.sizes.lse);
  fcl_attention_desc d = p.desc;
  d.o = d.q;
  ck_assert_int_eq(fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, p.bq, p.bk, p.bv, p.bq, lse, NULL),
                   FCL_ERROR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(fcl_context_last_error(ctx), "output o is the same buffer as q"));
  fcl_device_info info;
  fcl_context_device(ctx, &info);
  fcl_attention_desc shifted = p.desc;
  shifted.q.offset += 1;  /* rows no longer on 4-element boundaries */
  fcl_plan plan;
  char why[256];
  ck_assert_int_eq(fcl_plan_flash(&info.limits, &shifted, FCL_PASS_FORWARD, &plan, why, sizeof why),
                   FCL_SUCCESS);
  /* (on a CPU the CPU kernels, which take any alignment) */
  ck_assert_uint_eq(plan.kernel, info.limits.is_gpu ? FCL_FLASH_KERNEL_SIMT : FCL_FLASH_KERNEL_CPU);
  fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_MMA};
  ck_assert_int_eq(fcl__plan_flash(&info.limits, &shifted, FCL_PASS_FORWARD, &hint, &plan, why,
                                   sizeof why),
                   FCL_ERROR_UNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(why, "multiples of 4 elements"));
  clReleaseMemObject(lse);
  free(lse_image);
  problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* ---- the host's mask, against brute force ---------------------------------- */

static int sees(int nq, int nk, int wl, int wr, int i, int j) {
  const int at = i + nk - nq;
  return j >= 0 && j < nk && (wl < 0 || j >= at - wl) && (wr < 0 || j <= at + wr);
}

START_TEST(the_mask_agrees_with_its_definition) {
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 120);
  long checked = 0;
  for (int n = 0; n < 400; ++n) {
    const int nq = (int)fclu_range(&rng, 1, 60), nk = (int)fclu_range(&rng, 1, 60);
    const int wl = (int)fclu_range(&rng, 0, 70) - 1, wr = (int)fclu_range(&rng, 0, 70) - 1;
    fcl__bytes pairs = 0;
    for (int i = 0; i < nq; ++i) {
      int lo, hi;
      fcl_row_keys(nq, nk, wl, wr, i, &lo, &hi);
      for (int j = -2; j < nk + 2; ++j)
        ck_assert_int_eq(j >= lo && j < hi, sees(nq, nk, wl, wr, i, j));
      pairs += (fcl__bytes)(hi > lo ? hi - lo : 0);
    }
    ck_assert((unsigned long long)fcl__visible_pairs((size_t)nq, (size_t)nk, wl, wr) ==
              (unsigned long long)pairs);
    /* blocks of rows and of keys */
    const int block = (int)fclu_range(&rng, 1, 16);
    for (int x0 = 0; x0 < nq; x0 += block) {
      const int rows = nq - x0 < block ? nq - x0 : block;
      int lo, hi, flo, fhi;
      fcl_block_keys(nq, nk, wl, wr, x0, rows, &lo, &hi, &flo, &fhi);
      for (int j = 0; j < nk; ++j) {
        int any = 0, all = 1;
        for (int i = x0; i < x0 + rows; ++i) {
          any |= sees(nq, nk, wl, wr, i, j);
          all &= sees(nq, nk, wl, wr, i, j);
        }
        if (any) ck_assert(j >= lo && j < hi);
        ck_assert_int_eq(j >= flo && j < fhi, all);
        ++checked;
      }
    }
    for (int k0 = 0; k0 < nk; k0 += block) {
      const int keys = nk - k0 < block ? nk - k0 : block;
      int lo, hi, flo, fhi;
      fcl_block_queries(nq, nk, wl, wr, k0, keys, &lo, &hi, &flo, &fhi);
      for (int i = 0; i < nq; ++i) {
        int any = 0, all = 1;
        for (int j = k0; j < k0 + keys; ++j) {
          any |= sees(nq, nk, wl, wr, i, j);
          all &= sees(nq, nk, wl, wr, i, j);
        }
        if (any) ck_assert(i >= lo && i < hi);
        ck_assert_int_eq(i >= flo && i < fhi, all);
        ++checked;
      }
    }
  }
  printf("general: the mask, its blocks and its pair counts agree with brute force (%ld)\n",
         checked);
}
END_TEST

int main(void) {
  Suite *s = suite_create("general");
  TCase *tc = th_tcase("general");
  tcase_add_loop_test(tc, forward_matches_the_reference, 0, (int)N_CASES);
  tcase_add_loop_test(tc, backward_matches_the_reference, 0, (int)N_CASES);
  tcase_add_test(tc, rows_that_see_no_key);
  tcase_add_test(tc, reruns_are_bit_identical);
  tcase_add_test(tc, counted_bytes_equal_the_model);
  tcase_add_test(tc, bad_descriptors_are_refused);
  tcase_add_test(tc, packed_views_and_alignment);
  tcase_add_test(tc, the_mask_agrees_with_its_definition);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
