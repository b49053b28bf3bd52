/*
 * test_half.c — f16 and bf16 storage.
 *
 * Conversions: every one of the 65536 bit patterns widens to float exactly
 * and narrows back to itself (NaNs stay NaN; their payloads aside), on the
 * host (util/hostdata.c) and on the device through the kernels' LOAD and
 * STORE macros (convert.cl, scalar and vector forms); narrowing rounds to
 * nearest even, checked on the host against the definition and on the
 * device against the host, at ties and on random floats.
 *
 * Attention: flash forward and backward on random shapes against the
 * float64 reference computed from the same rounded inputs. The rule is
 * flash-attn's: an error at most twice that of the naive algorithm in the
 * same storage type, here its host emulation (S and P rounded to the type
 * the naive algorithm stores them in, O and the gradients to the storage
 * type), plus a floor:
 *   - half an ulp of the storage type times the largest reference value:
 *     every output is rounded to the storage type when stored, and no
 *     algorithm can be closer than that rounding;
 *   - for the backward, also what taking D = rowsum(dO * O) from the O the
 *     caller stored costs (d_floor): that O is rounded to the storage type,
 *     and the flash algorithm (here and in FlashAttention) reads it, while
 *     the naive algorithm never reads O, so its error has no such term;
 *   - 1e-6, the f32 suites' floor.
 * Also: rows that see no key, tiles kept in the storage type give the same
 * bits as float tiles, counted bytes equal the I/O model, and the naive
 * algorithm's f16 (cl_khr_fp16 or unsupported with the reason) and bf16
 * (the f32 path on widened copies) runs.
 */
#include "harness.h"
#include "resources.h"
#include "calls.h"
#include "naive.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATTERNS 65536
#define RANDOM_SHAPES 10
#define ERR_FLOOR 1e-6
#define LSE_REL_TOL 1e-4

static const fcl_dtype half_types[2] = {FCL_DTYPE_F16, FCL_DTYPE_BF16};
static const char *const grad_names[3] = {"dQ", "dK", "dV"};

/* ---- the formats, by definition ------------------------------------------ */

static uint16_t to16(float x, fcl_dtype t) {
  return t == FCL_DTYPE_F16 ? fclu_f32_to_f16(x) : fclu_f32_to_bf16(x);
}

static float from16(uint16_t h, fcl_dtype t) {
  return t == FCL_DTYPE_F16 ? fclu_f16_to_f32(h) : fclu_bf16_to_f32(h);
}

static unsigned mant_bits(fcl_dtype t) { return t == FCL_DTYPE_F16 ? 10 : 7; }
static uint16_t inf_bits(fcl_dtype t) { return t == FCL_DTYPE_F16 ? 0x7c00 : 0x7f80; }

static int is_nan16(uint16_t h, fcl_dtype t) {
  return (h & 0x7fff) > inf_bits(t);
}

/* The value of a pattern from the format's definition, in double. The
 * infinity pattern counts as the next step past the largest finite value
 * (2^16, 2^128), where rounding with an unbounded exponent would land. */
static double value16(uint16_t h, fcl_dtype t) {
  const unsigned m_bits = mant_bits(t), e_bits = 15 - m_bits;
  const int bias = (1 << (e_bits - 1)) - 1;
  const unsigned e = (h >> m_bits) & ((1u << e_bits) - 1), m = h & ((1u << m_bits) - 1);
  double v;
  if (e == 0) v = ldexp((double)m, 1 - bias - (int)m_bits);
  else v = ldexp((double)((1u << m_bits) + m), (int)e - bias - (int)m_bits);
  return h & 0x8000 ? -v : v;
}

/* Checks that to16(f) is f rounded to nearest, ties to even. */
static void check_nearest_even(float f, fcl_dtype t) {
  const uint16_t got = to16(f, t), inf = inf_bits(t);
  if (isnan(f)) {
    ck_assert_msg(is_nan16(got, t), "%s: NaN narrowed to 0x%04x", fcl_dtype_name(t), got);
    return;
  }
  const double a = fabs((double)f);
  const uint16_t r = got & 0x7fff;
  ck_assert_msg((got & 0x8000) == (signbit(f) ? 0x8000 : 0), "%s: sign of %a",
                fcl_dtype_name(t), (double)f);
  ck_assert_msg(r <= inf, "%s: %a narrowed to NaN", fcl_dtype_name(t), (double)f);
  const double d0 = fabs(value16(r, t) - a);
  if (r == inf && a > value16(inf, t)) return;  /* beyond: infinity */
  const uint16_t nb[2] = {(uint16_t)(r - 1), (uint16_t)(r + 1)};
  for (int s = 0; s < 2; ++s) {
    if ((s == 0 && r == 0) || (s == 1 && r == inf)) continue;
    const double dn = fabs(value16(nb[s], t) - a);
    ck_assert_msg(d0 < dn || (d0 == dn && (r & 1) == 0),
                  "%s: %a narrowed to 0x%04x, but 0x%04x is nearer or an even tie",
                  fcl_dtype_name(t), (double)f, got, nb[s]);
  }
}

/* Random floats that probe rounding: any bits at all, exact ties between
 * neighbouring patterns, one float ulp either side of them, and values
 * spread over the 16-bit type's range. */
static float *probe_floats(fclu_rng *rng, fcl_dtype t, size_t n) {
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = (uint16_t)(fclu_next(rng) & 0x7fff);
    const uint16_t lo = h < inf_bits(t) ? h : (uint16_t)(inf_bits(t) - 1);
    const float tie = (float)((value16(lo, t) + value16((uint16_t)(lo + 1), t)) / 2);
    const float sign = fclu_next(rng) & 1 ? -1.0f : 1.0f;
    uint32_t bits;
    switch (i % 5) {
      case 0:
        bits = (uint32_t)fclu_next(rng);
        memcpy(&x[i], &bits, 4);
        break;
      case 1: x[i] = sign * tie; break;
      case 2: x[i] = sign * nextafterf(tie, 0.0f); break;
      case 3: x[i] = sign * nextafterf(tie, INFINITY); break;
      default: {
        const int lo_exp = t == FCL_DTYPE_F16 ? -26 : -134, hi_exp = t == FCL_DTYPE_F16 ? 17 : 127;
        x[i] = sign * (float)ldexp(1.0 + fclu_uniform(rng),
                                   lo_exp + (int)fclu_range(rng, 0, (size_t)(hi_exp - lo_exp)));
      }
    }
  }
  return x;
}

START_TEST(host_conversions_round_trip_every_pattern) {
  for (int ti = 0; ti < 2; ++ti) {
    const fcl_dtype t = half_types[ti];
    for (uint32_t p = 0; p < PATTERNS; ++p) {
      const uint16_t h = (uint16_t)p;
      const float f = from16(h, t);
      if (is_nan16(h, t)) {
        ck_assert_msg(isnan(f), "%s 0x%04x widened to %g", fcl_dtype_name(t), h, (double)f);
        ck_assert_msg(is_nan16(to16(f, t), t), "%s NaN 0x%04x", fcl_dtype_name(t), h);
        continue;
      }
      if ((h & 0x7fff) == inf_bits(t))
        ck_assert(isinf(f) && !!signbit(f) == !!(h & 0x8000));
      else
        ck_assert_msg((double)f == value16(h, t) && !!signbit(f) == !!(h & 0x8000),
                      "%s 0x%04x widened to %a, not %a", fcl_dtype_name(t), h, (double)f,
                      value16(h, t));
      ck_assert_msg(to16(f, t) == h, "%s 0x%04x came back as 0x%04x", fcl_dtype_name(t), h,
                    to16(f, t));
    }
  }
}
END_TEST

START_TEST(host_narrowing_rounds_to_nearest_even) {
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 1);
  for (int ti = 0; ti < 2; ++ti) {
    const fcl_dtype t = half_types[ti];
    /* Every tie between neighbouring finite patterns, and its neighbours. */
    for (uint16_t h = 0; h < inf_bits(t); ++h) {
      const float tie = (float)((value16(h, t) + value16((uint16_t)(h + 1), t)) / 2);
      ck_assert_msg((double)tie * 2 == value16(h, t) + value16((uint16_t)(h + 1), t),
                    "tie not exact");
      const uint16_t even = h & 1 ? (uint16_t)(h + 1) : h;
      ck_assert_msg(to16(tie, t) == even, "%s: tie %a gave 0x%04x, not 0x%04x",
                    fcl_dtype_name(t), (double)tie, to16(tie, t), even);
      ck_assert_uint_eq(to16(-tie, t), even | 0x8000);
      ck_assert_uint_eq(to16(nextafterf(tie, 0.0f), t), h);
      ck_assert_uint_eq(to16(nextafterf(tie, INFINITY), t), h + 1);
    }
    float *x = probe_floats(&rng, t, 200000);
    for (size_t i = 0; i < 200000; ++i) check_nearest_even(x[i], t);
    free(x);
  }
}
END_TEST

/* The host-side f16 conversion the naive algorithm gives CLBlast's HGEMM
 * its alpha and beta with: the host helpers' rounding, zero below f16's
 * normal range. */
START_TEST(hgemm_scalars_round_as_the_host_does) {
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 3);
  float *x = probe_floats(&rng, FCL_DTYPE_F16, 100000);
  for (size_t i = 0; i < 100000; ++i) {
    if (isnan(x[i])) continue;
    const uint16_t want = fabsf(x[i]) < 0x1p-14f ? (signbit(x[i]) ? 0x8000 : 0)
                                                 : fclu_f32_to_f16(x[i]);
    ck_assert_msg(fcl__half_bits(x[i]) == want, "%a: 0x%04x, want 0x%04x", (double)x[i],
                  fcl__half_bits(x[i]), want);
  }
  free(x);
  ck_assert_uint_eq(fcl__half_bits(1.0f), 0x3c00);
  ck_assert_uint_eq(fcl__half_bits(0.0f), 0);
}
END_TEST

/* ---- the device's conversions --------------------------------------------- */

static cl_mem upload_bytes(fcl_context *ctx, const void *data, size_t bytes) {
  cl_int err;
  cl_mem mem = clCreateBuffer(fcl_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)data,
                              &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  return mem;
}

static void download_bytes(fcl_context *ctx, cl_mem mem, void *data, size_t bytes) {
  ck_assert_int_eq(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), mem, CL_TRUE, 0, bytes,
                                       data, 0, NULL, NULL),
                   CL_SUCCESS);
}

START_TEST(device_conversions_round_trip_every_pattern) {
  fcl_context *ctx = th_context();
  uint16_t *bits = malloc(PATTERNS * sizeof *bits), *back = malloc(PATTERNS * sizeof *back);
  float *wide = malloc(PATTERNS * sizeof *wide);
  ck_assert(bits && back && wide);
  for (uint32_t p = 0; p < PATTERNS; ++p) bits[p] = (uint16_t)p;
  for (int ti = 0; ti < 2; ++ti)
    for (unsigned width = 1; width <= 4; width += 3) {
      const fcl_dtype t = half_types[ti];
      /* Width 4 over all but one pattern: whole quads and a scalar tail. */
      const size_t n = width == 4 ? PATTERNS - 1 : PATTERNS;
      cl_mem narrow = upload_bytes(ctx, bits, PATTERNS * 2);
      cl_mem f32 = fclu_poisoned_buffer(ctx, PATTERNS * 4);
      cl_mem out = fclu_poisoned_buffer(ctx, PATTERNS * 2);
      ck_assert_int_eq(fcl__convert(ctx, t, 1, narrow, f32, n, width, NULL), FCL_SUCCESS);
      ck_assert_int_eq(fcl__convert(ctx, t, 0, f32, out, n, width, NULL), FCL_SUCCESS);
      download_bytes(ctx, f32, wide, PATTERNS * 4);
      download_bytes(ctx, out, back, PATTERNS * 2);
      for (size_t p = 0; p < n; ++p) {
        const float want = from16(bits[p], t);
        if (is_nan16(bits[p], t)) {
          ck_assert_msg(isnan(wide[p]) && is_nan16(back[p], t),
                        "%s width %u: NaN 0x%04zx -> %g -> 0x%04x", fcl_dtype_name(t), width,
                        p, (double)wide[p], back[p]);
          continue;
        }
        ck_assert_msg(!memcmp(&wide[p], &want, 4),
                      "%s width %u: 0x%04zx widened to %a, not %a", fcl_dtype_name(t), width,
                      p, (double)wide[p], (double)want);
        ck_assert_msg(back[p] == bits[p], "%s width %u: 0x%04zx came back as 0x%04x",
                      fcl_dtype_name(t), width, p, back[p]);
      }
      if (n < PATTERNS) ck_assert_uint_eq(back[n], 0xffff);  /* poison, untouched */
      clReleaseMemObject(narrow);
      clReleaseMemObject(f32);
      clReleaseMemObject(out);
    }
  free(bits);
  free(back);
  free(wide);
  fcl_context_release(ctx);
}
END_TEST

START_TEST(device_narrowing_matches_the_host) {
  fcl_context *ctx = th_context();
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 2);
  const size_t n = 1 << 18;
  uint16_t *got = malloc(n * sizeof *got);
  ck_assert_ptr_nonnull(got);
  for (int ti = 0; ti < 2; ++ti)
    for (unsigned width = 1; width <= 4; width += 3) {
      const fcl_dtype t = half_types[ti];
      float *x = probe_floats(&rng, t, n);
      cl_mem in = upload_bytes(ctx, x, n * 4);
      cl_mem out = fclu_poisoned_buffer(ctx, n * 2);
      ck_assert_int_eq(fcl__convert(ctx, t, 0, in, out, n, width, NULL), FCL_SUCCESS);
      download_bytes(ctx, out, got, n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = to16(x[i], t);
        ck_assert_msg(got[i] == want || (is_nan16(want, t) && is_nan16(got[i], t)),
                      "%s width %u: %a narrowed to 0x%04x on the device, 0x%04x on the host",
                      fcl_dtype_name(t), width, (double)x[i], got[i], want);
      }
      clReleaseMemObject(in);
      clReleaseMemObject(out);
      free(x);
    }
  free(got);
  fcl_context_release(ctx);
}
END_TEST

/* ---- attention in half storage -------------------------------------------- */


static size_t pick_seqlen(fclu_rng *rng) {
  static const size_t special[] = {1, 2, 7, 33, 64, 113, 129, 257};
  if (fclu_uniform(rng) < 0.5) return special[fclu_range(rng, 0, 7)];
  return fclu_range(rng, 1, 300);
}

/* Few head_dim buckets (16, 64, 128, 256), so few kernel variants. */
static size_t pick_head_dim(fclu_rng *rng) {
  static const size_t dims[] = {16, 13, 64, 40, 128, 256, 3, 64};
  return dims[fclu_range(rng, 0, 7)];
}

/* mma: for the MMA kernel, which takes head_dim <= 128, a multiple of 8. */
static fcl_attention_desc random_desc(fclu_rng *rng, int index, fcl_dtype dtype, int mma) {
  size_t hkv = fclu_range(rng, 1, 2), group = fclu_range(rng, 1, 3);
  size_t d = index == 0 ? 16 : index == 1 ? 256 : pick_head_dim(rng);
  if (mma) d = th_mma_head_dim(d);
  size_t nq = index == 2 ? 1 : pick_seqlen(rng), nk = index == 3 ? 1 : pick_seqlen(rng);
  if (index == 4) {  /* causal with more queries than keys: rows that see nothing */
    nq = 257;
    nk = 113;
  }
  if (index == 5) hkv = 1, group = 4;  /* multi-query */
  while (nq * nk * d * hkv * group > 2000000) nq = nq / 2 + 1;
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, fclu_range(rng, 1, 2), hkv * group, hkv, nq, nk, d);
  desc.causal = index == 4 ? 1 : fclu_uniform(rng) < 0.5;
  desc.dtype = dtype;
  return desc;
}

/* The naive forward emulated on the host, every row. */
static float *emulated_naive_forward(const th_problem *p) {
  const fcl_attention_desc *d = &p->desc;
  float *o = malloc((p->q_elems ? p->q_elems : 1) * sizeof *o), lse;
  ck_assert_ptr_nonnull(o);
  for (size_t b = 0; b < d->batch; ++b)
    for (size_t h = 0; h < d->heads_q; ++h)
      for (size_t i = 0; i < d->seqlen_q; ++i)
        fclref_naive_row(d, p->q, p->k, p->v, b, h, i,
                         o + ((b * d->seqlen_q + i) * d->heads_q + h) * d->head_dim, &lse);
  return o;
}

typedef struct half_errors {
  double fwd, fwd_naive, grad[3], grad_naive[3];
  double fwd_bound, grad_bound[3];  /* 2 x naive + floor: what the rule allows */
} half_errors;

/* The forward of one problem by flash against the rule; LSE as in f32. */
static void check_forward(fcl_context *ctx, const th_problem *p, half_errors *e) {
  char what[200];
  th_describe(&p->desc, what, sizeof what);
  th_reference ref = th_reference_forward(p);
  float *naive = emulated_naive_forward(p);
  th_forward flash = th_run_forward(ctx, p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(flash.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  e->fwd = fclu_max_abs_err(flash.o, ref.o, p->q_elems);
  e->fwd_naive = fclu_max_abs_err(naive, ref.o, p->q_elems);
  const double floor = th_err_floor(p->desc.dtype, ref.o, p->q_elems);
  e->fwd_bound = 2 * e->fwd_naive + floor;
  ck_assert_msg(e->fwd <= e->fwd_bound,
                "%s: flash error %g > 2 x emulated naive error %g + %g", what, e->fwd,
                e->fwd_naive, floor);
  for (size_t i = 0; i < p->lse_elems; ++i) {
    const double want = ref.lse[i], got = flash.lse[i];
    if (isinf(want)) {
      ck_assert_msg(got == want, "%s: LSE[%zu] = %g, want %g", what, i, got, want);
      continue;
    }
    ck_assert_msg(fabs(got - want) <= LSE_REL_TOL * fmax(1.0, fabs(want)),
                  "%s: LSE[%zu] = %.9g, want %.9g", what, i, got, want);
  }
  th_forward_free(&flash);
  free(naive);
  th_reference_free(&ref);
}

static void grad_errors(const th_problem *p, const float *dq, const float *dk,
                        const float *dv, const th_grad_reference *ref, double err[3]) {
  err[0] = fclu_max_abs_err(dq, ref->dq, p->q_elems);
  err[1] = fclu_max_abs_err(dk, ref->dk, p->kv_elems);
  err[2] = fclu_max_abs_err(dv, ref->dv, p->kv_elems);
}

/* The backward's floor per gradient (see the top of the file). */
static void backward_floor(const th_problem *p, const th_grad_inputs *g,
                           const th_grad_reference *ref, double floor[3]) {
  th_reference fwd = th_reference_forward(p);
  double from_d[3];
  th_d_floor(p, g, fwd.o, from_d);
  th_reference_free(&fwd);
  const double *r[3] = {ref->dq, ref->dk, ref->dv};
  const size_t n[3] = {p->q_elems, p->kv_elems, p->kv_elems};
  for (int i = 0; i < 3; ++i)
    floor[i] = th_half_ulp(p->desc.dtype) * fclu_max_abs(r[i], n[i]) + from_d[i] + ERR_FLOOR;
}

static void check_backward(fcl_context *ctx, const th_problem *p, uint64_t seed,
                           half_errors *e) {
  char what[200];
  th_describe(&p->desc, what, sizeof what);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, p, seed);
  th_grad_reference ref = th_reference_backward(p, &g);
  float *nq = malloc((p->q_elems ? p->q_elems : 1) * sizeof *nq);
  float *nk = malloc((p->kv_elems ? p->kv_elems : 1) * sizeof *nk);
  float *nv = malloc((p->kv_elems ? p->kv_elems : 1) * sizeof *nv);
  ck_assert(nq && nk && nv);
  fclref_naive_backward(&p->desc, p->q, p->k, p->v, g.dout, nq, nk, nv);
  th_backward flash = th_run_backward(ctx, p, &g, FCL_ALGO_FLASH);
  ck_assert_msg(flash.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  double floor[3];
  backward_floor(p, &g, &ref, floor);
  grad_errors(p, flash.dq, flash.dk, flash.dv, &ref, e->grad);
  grad_errors(p, nq, nk, nv, &ref, e->grad_naive);
  if (getenv("FLASHCL_TEST_VERBOSE"))
    printf("  %s: flash/naive/floor dQ %.3g %.3g %.3g  dK %.3g %.3g %.3g  dV %.3g %.3g %.3g\n",
           what, e->grad[0], e->grad_naive[0], floor[0], e->grad[1], e->grad_naive[1],
           floor[1], e->grad[2], e->grad_naive[2], floor[2]);
  for (int i = 0; i < 3; ++i) e->grad_bound[i] = 2 * e->grad_naive[i] + floor[i];
  for (int i = 0; i < 3; ++i)
    ck_assert_msg(e->grad[i] <= e->grad_bound[i],
                  "%s: flash %s error %g > 2 x emulated naive error %g + %g", what,
                  grad_names[i], e->grad[i], e->grad_naive[i], floor[i]);
  th_backward_free(&flash);
  free(nq);
  free(nk);
  free(nv);
  th_grad_reference_free(&ref);
  th_grad_inputs_free(&g);
}

/* _i: the type (_i % 2) and the kernels, forward and backward: the
 * planner's (_i < 2) or MMA (emulated where the device has no matrix
 * instructions). */
START_TEST(flash_in_half_storage_on_random_shapes) {
  fcl_context *ctx = th_context();
  const fcl_dtype t = half_types[_i % 2];
  const int mma = _i >= 2;
  if (mma) {
    const fcl_plan hint = {.kernel = FCL_FLASH_KERNEL_MMA};
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  }
  fclu_rng rng;
  fclu_rng_seed(&rng, th_seed() + 10 + (uint64_t)_i);
  /* flash / (naive + 1e-6), and flash / what the rule allows: O, dQ, dK, dV */
  double worst[4] = {0, 0, 0, 0}, used[4] = {0, 0, 0, 0};
  for (int i = 0; i < RANDOM_SHAPES; ++i) {
    fcl_attention_desc desc = random_desc(&rng, i, t, mma);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 700 + (uint64_t)i, 1.0);
    half_errors e;
    check_forward(ctx, &p, &e);
    check_backward(ctx, &p, 700 + (uint64_t)i, &e);
    worst[0] = fmax(worst[0], e.fwd / (e.fwd_naive + ERR_FLOOR));
    used[0] = fmax(used[0], e.fwd / e.fwd_bound);
    for (int g = 0; g < 3; ++g)
      worst[g + 1] = fmax(worst[g + 1], e.grad[g] / (e.grad_naive[g] + ERR_FLOOR)),
      used[g + 1] = fmax(used[g + 1], e.grad[g] / e.grad_bound[g]);
    th_problem_free(&p);
  }
  printf("%s%s: %d random shapes, worst flash/(emulated naive + 1e-6) error ratio O %.3f, "
         "dQ %.3f dK %.3f dV %.3f; worst share of the allowed error O %.2f dQ %.2f dK %.2f "
         "dV %.2f\n",
         fcl_dtype_name(t),
         mma ? " (MMA kernels)" : "",
         RANDOM_SHAPES, worst[0], worst[1], worst[2], worst[3], used[0],
         used[1], used[2], used[3]);
  fcl_context_release(ctx);
}
END_TEST

/* Tiles in the storage type hold the same values as float tiles (the
 * conversion is exact either way) and are summed in the same order: the
 * same bits out, for every layout and for head dims that take the scalar
 * load path. */
START_TEST(storage_type_tiles_give_the_same_bits) {
  fcl_context *ctx = th_context();
  const fcl_dtype t = half_types[_i];
  /* The planner's layout, vector loads; and four work-items per row, two
   * rows each, scalar loads (head_dim 13). */
  static const th_shape shapes[] = {{1, 4, 2, 70, 90, 64, 1}, {2, 3, 1, 33, 129, 13, 0}};
  static const fcl_plan layouts[] = {
      {.wg_size = 0},
      {.block_k = 8, .wg_size = 32, .threads_per_row = 4, .rows_per_thread = 2}};
  for (size_t s = 0; s < 2; ++s) {
    fcl_attention_desc desc = th_shape_desc(&shapes[s], t);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 800 + s, 1.0);
    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 800 + s);
    {
      fcl_plan hint = layouts[s];
      th_forward fwd[2];
      th_backward bwd[2];
      for (int k = 0; k < 2; ++k) {
        hint.tile_elem_size = k ? 2 : 4;
        ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
        fwd[k] = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
        bwd[k] = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
        ck_assert_msg(fwd[k].status == FCL_SUCCESS && bwd[k].status == FCL_SUCCESS, "%s",
                      fcl_context_last_error(ctx));
        ck_assert_uint_eq(fwd[k].info.plan.tile_elem_size, hint.tile_elem_size);
        ck_assert_uint_eq(bwd[k].info.plan.tile_elem_size, hint.tile_elem_size);
      }
      ck_assert_msg(!memcmp(fwd[0].o, fwd[1].o, p.q_elems * sizeof(float)), "O, shape %zu", s);
      ck_assert(!memcmp(fwd[0].lse, fwd[1].lse, p.lse_elems * sizeof(float)));
      ck_assert_msg(!memcmp(bwd[0].dq, bwd[1].dq, p.q_elems * sizeof(float)), "dQ, shape %zu", s);
      ck_assert_msg(!memcmp(bwd[0].dk, bwd[1].dk, p.kv_elems * sizeof(float)), "dK, shape %zu", s);
      ck_assert_msg(!memcmp(bwd[0].dv, bwd[1].dv, p.kv_elems * sizeof(float)), "dV, shape %zu", s);
      for (int k = 0; k < 2; ++k) {
        th_forward_free(&fwd[k]);
        th_backward_free(&bwd[k]);
      }
    }
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, NULL), FCL_SUCCESS);
    th_grad_inputs_free(&g);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

START_TEST(rows_that_see_no_key_in_half_storage) {
  fcl_context *ctx = th_context();
  const fcl_dtype t = half_types[_i / 2];
  const fcl_plan hint = {.tile_elem_size = _i % 2 ? 2 : 4};
  ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hint), FCL_SUCCESS);
  fcl_attention_desc desc;
  /* 200 queries, 30 keys: causal rows 0..169 see nothing, including whole
   * work-groups and tiles of them. */
  fcl_attention_desc_init(&desc, 1, 4, 2, 200, 30, 64);
  desc.causal = 1;
  desc.dtype = t;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 900, 1.0);
  th_forward fwd = th_run_forward(ctx, &p, FCL_ALGO_FLASH, 1);
  ck_assert_msg(fwd.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 900);
  th_backward bwd = th_run_backward(ctx, &p, &g, FCL_ALGO_FLASH);
  ck_assert_msg(bwd.status == FCL_SUCCESS, "%s", fcl_context_last_error(ctx));
  th_assert_blind_rows(&desc, fwd.o, fwd.lse, "O");
  th_assert_blind_rows(&desc, bwd.dq, NULL, "dQ");
  for (size_t i = 0; i < p.kv_elems; ++i)
    ck_assert_msg(isfinite(bwd.dk[i]) && isfinite(bwd.dv[i]), "dK/dV[%zu]", i);
  th_backward_free(&bwd);
  th_grad_inputs_free(&g);
  th_forward_free(&fwd);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* ---- bytes ------------------------------------------------------------------ */

static int naive_runs(fcl_context *ctx, fcl_dtype t) {
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  return t != FCL_DTYPE_F16 || dev.limits.has_fp16;
}

static void check_counted(fcl_context *ctx, const th_problem *p, const th_grad_inputs *g,
                          fcl_algo algo, const char *what) {
  th_forward fwd = th_run_forward(ctx, p, algo, 1);
  ck_assert_msg(fwd.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  ck_assert_msg(fwd.info.bytes_counted == fwd.info.bytes_model,
                "%s %s forward: counted %llu bytes, the model says %llu", what,
                fcl_algo_name(algo), (unsigned long long)fwd.info.bytes_counted,
                (unsigned long long)fwd.info.bytes_model);
  th_forward_free(&fwd);
  th_backward bwd = th_run_backward(ctx, p, g, algo);
  ck_assert_msg(bwd.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
  ck_assert_msg(bwd.info.bytes_counted == bwd.info.bytes_model,
                "%s %s backward: counted %llu bytes, the model says %llu", what,
                fcl_algo_name(algo), (unsigned long long)bwd.info.bytes_counted,
                (unsigned long long)bwd.info.bytes_model);
  th_backward_free(&bwd);
}

START_TEST(counted_bytes_equal_the_model_in_half_storage) {
  fcl_context *ctx = th_context();
  const fcl_dtype t = half_types[_i];
  ck_assert_int_eq(fcl_context_set_count_io(ctx, 1), FCL_SUCCESS);
  static const th_shape shapes[] = {{1, 4, 2, 113, 70, 64, 1}, {2, 3, 1, 33, 129, 13, 0}, {2, 4, 2, 77, 90, 40, 1}};
  /* float tiles, storage-type tiles, the MMA kernels (forward and backward) */
  const fcl_plan hints[] = {{.tile_elem_size = 4}, {.tile_elem_size = 2},
                            {.kernel = FCL_FLASH_KERNEL_MMA}};
  for (size_t s = 0; s < 3; ++s) {
    fcl_attention_desc desc = th_shape_desc(&shapes[s], t);
    char what[200];
    th_describe(&desc, what, sizeof what);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 1000 + s, 1.0);
    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 1000 + s);
    ck_assert_int_eq(fcl_context_set_flash_tiling(ctx, &hints[s]), FCL_SUCCESS);
    check_counted(ctx, &p, &g, FCL_ALGO_FLASH, what);
    if (naive_runs(ctx, t)) {
      check_counted(ctx, &p, &g, FCL_ALGO_NAIVE, what);
      /* chunked: one slice's S (or P and dP) at a time */
      const uint64_t s_bytes = 2 * desc.seqlen_q * desc.seqlen_k *
                               fcl_dtype_size(fclref_naive_s_dtype(t));
      ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 2 * s_bytes + 16), FCL_SUCCESS);
      check_counted(ctx, &p, &g, FCL_ALGO_NAIVE, what);
      ck_assert_int_eq(fcl_context_set_scratch_limit(ctx, 0), FCL_SUCCESS);
    }
    th_grad_inputs_free(&g);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

/* ---- the naive algorithm ---------------------------------------------------- */

START_TEST(naive_f16_needs_cl_khr_fp16) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 2, 1, 40, 50, 64);
  desc.dtype = FCL_DTYPE_F16;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 1100, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 1100);
  th_forward fwd = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  th_backward bwd = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  fcl_device_info dev;
  ck_assert_int_eq(fcl_context_device(ctx, &dev), FCL_SUCCESS);
  fcl_io_estimate est;
  const fcl_status modelled =
      fcl_io_model(&dev.limits, &desc, FCL_ALGO_NAIVE, FCL_PASS_FORWARD, 1, &est);
  if (!dev.limits.has_fp16) {
    ck_assert_int_eq(fwd.status, FCL_ERROR_UNSUPPORTED);
    ck_assert_int_eq(bwd.status, FCL_ERROR_UNSUPPORTED);
    ck_assert_int_eq(modelled, FCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(fcl_context_last_error(ctx), "cl_khr_fp16"), "%s",
                  fcl_context_last_error(ctx));
    /* nothing written */
    for (size_t i = 0; i < p.q_elems; ++i) ck_assert(isnan(fwd.o[i]) && isnan(bwd.dq[i]));
  } else {
    /* A sanity check only: CLBlast's HGEMM sums in half, which the host
     * emulation does not model. */
    ck_assert_msg(fwd.status == FCL_SUCCESS && bwd.status == FCL_SUCCESS, "%s",
                  fcl_context_last_error(ctx));
    ck_assert_int_eq(modelled, FCL_SUCCESS);
    th_reference ref = th_reference_forward(&p);
    ck_assert(fclu_max_abs_err(fwd.o, ref.o, p.q_elems) < 0.05);
    th_reference_free(&ref);
  }
  th_backward_free(&bwd);
  th_forward_free(&fwd);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

/* bf16 runs the f32 path on exactly the same values and rounds at the
 * end, which is what the host emulation does: the errors agree. */
START_TEST(naive_bf16_agrees_with_its_emulation) {
  fcl_context *ctx = th_context();
  static const th_shape shapes[] = {{1, 4, 2, 113, 70, 64, 1}, {2, 3, 1, 33, 129, 13, 0}, {1, 2, 2, 1, 1, 16, 1}};
  for (size_t s = 0; s < 3; ++s) {
    fcl_attention_desc desc = th_shape_desc(&shapes[s], FCL_DTYPE_BF16);
    char what[200];
    th_describe(&desc, what, sizeof what);
    th_problem p;
    th_problem_init(&p, ctx, &desc, 1200 + s, 1.0);
    th_reference ref = th_reference_forward(&p);
    float *emu = emulated_naive_forward(&p);
    th_forward fwd = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
    ck_assert_msg(fwd.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
    const double floor = th_err_floor(desc.dtype, ref.o, p.q_elems);
    const double dev_err = fclu_max_abs_err(fwd.o, ref.o, p.q_elems);
    const double emu_err = fclu_max_abs_err(emu, ref.o, p.q_elems);
    ck_assert_msg(dev_err <= 2 * emu_err + floor && emu_err <= 2 * dev_err + floor,
                  "%s: naive O error %g, emulated %g", what, dev_err, emu_err);
    ck_assert(fclu_max_abs_err(fwd.lse, ref.lse, p.lse_elems) <=
              LSE_REL_TOL * fmax(1.0, fclu_max_abs(ref.lse, p.lse_elems)));

    th_grad_inputs g;
    th_grad_inputs_init(&g, ctx, &p, 1200 + s);
    th_grad_reference gref = th_reference_backward(&p, &g);
    float *nq = malloc(p.q_elems * sizeof *nq), *nk = malloc(p.kv_elems * sizeof *nk),
          *nv = malloc(p.kv_elems * sizeof *nv);
    ck_assert(nq && nk && nv);
    fclref_naive_backward(&desc, p.q, p.k, p.v, g.dout, nq, nk, nv);
    th_backward bwd = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
    ck_assert_msg(bwd.status == FCL_SUCCESS, "%s: %s", what, fcl_context_last_error(ctx));
    double de[3], ee[3];
    grad_errors(&p, bwd.dq, bwd.dk, bwd.dv, &gref, de);
    grad_errors(&p, nq, nk, nv, &gref, ee);
    const double *r[3] = {gref.dq, gref.dk, gref.dv};
    const size_t n[3] = {p.q_elems, p.kv_elems, p.kv_elems};
    for (int i = 0; i < 3; ++i) {
      const double f = th_half_ulp(desc.dtype) * fclu_max_abs(r[i], n[i]) + ERR_FLOOR;
      ck_assert_msg(de[i] <= 2 * ee[i] + f && ee[i] <= 2 * de[i] + f,
                    "%s: naive %s error %g, emulated %g", what, grad_names[i], de[i], ee[i]);
    }
    th_backward_free(&bwd);
    free(nq);
    free(nk);
    free(nv);
    th_grad_reference_free(&gref);
    th_grad_inputs_free(&g);
    th_forward_free(&fwd);
    free(emu);
    th_reference_free(&ref);
    th_problem_free(&p);
  }
  fcl_context_release(ctx);
}
END_TEST

/* The widened naive run's conversions publish its outputs: a failure at
 * any enqueue leaves each output untouched or whole. */
START_TEST(naive_bf16_outputs_are_untouched_or_whole_when_an_enqueue_fails) {
  fcl_context *ctx = th_context();
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 1, 4, 2, 33, 40, 24);
  desc.causal = 1;
  desc.dtype = FCL_DTYPE_BF16;
  th_problem p;
  th_problem_init(&p, ctx, &desc, 1300, 1.0);
  th_grad_inputs g;
  th_grad_inputs_init(&g, ctx, &p, 1300);
  th_forward good_fwd = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
  th_backward good = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
  ck_assert(good_fwd.status == FCL_SUCCESS && good.status == FCL_SUCCESS);
  int fwd_done = 0, bwd_done = 0;
  for (long n = 1; n < 200 && !(fwd_done && bwd_done); ++n) {
    if (!fwd_done) {
      fcl__inject_failures(ctx, FCL_INJECT_ENQUEUE, n);
      th_forward run = th_run_forward(ctx, &p, FCL_ALGO_NAIVE, 1);
      fcl__inject_failures(ctx, 0, 0);
      const int state = th_untouched_or_whole(run.o, good_fwd.o, p.q_elems);
      ck_assert_msg(state >= 0, "forward, enqueue %ld failing: O half written", n);
      fwd_done = run.status == FCL_SUCCESS;
      ck_assert(!fwd_done || state == 0);
      th_forward_free(&run);
    }
    if (!bwd_done) {
      fcl__inject_failures(ctx, FCL_INJECT_ENQUEUE, n);
      th_backward run = th_run_backward(ctx, &p, &g, FCL_ALGO_NAIVE);
      fcl__inject_failures(ctx, 0, 0);
      bwd_done = run.status == FCL_SUCCESS;
      const float *got[3] = {run.dq, run.dk, run.dv}, *want[3] = {good.dq, good.dk, good.dv};
      const size_t len[3] = {p.q_elems, p.kv_elems, p.kv_elems};
      for (int i = 0; i < 3; ++i) {
        const int state = th_untouched_or_whole(got[i], want[i], len[i]);
        ck_assert_msg(state >= 0, "backward, enqueue %ld failing: %s half written", n,
                      grad_names[i]);
        ck_assert(!bwd_done || state == 0);
      }
      th_backward_free(&run);
    }
  }
  ck_assert(fwd_done && bwd_done);
  th_backward_free(&good);
  th_forward_free(&good_fwd);
  th_grad_inputs_free(&g);
  th_problem_free(&p);
  fcl_context_release(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("half");
  TCase *tc = th_tcase("conversions");
  tcase_add_test(tc, host_conversions_round_trip_every_pattern);
  tcase_add_test(tc, host_narrowing_rounds_to_nearest_even);
  tcase_add_test(tc, hgemm_scalars_round_as_the_host_does);
  tcase_add_test(tc, device_conversions_round_trip_every_pattern);
  tcase_add_test(tc, device_narrowing_matches_the_host);
  suite_add_tcase(s, tc);
  tc = th_tcase("attention");
  tcase_add_loop_test(tc, flash_in_half_storage_on_random_shapes, 0, 4);
  tcase_add_loop_test(tc, storage_type_tiles_give_the_same_bits, 0, 2);
  tcase_add_loop_test(tc, rows_that_see_no_key_in_half_storage, 0, 4);
  tcase_add_loop_test(tc, counted_bytes_equal_the_model_in_half_storage, 0, 2);
  tcase_add_test(tc, naive_f16_needs_cl_khr_fp16);
  tcase_add_test(tc, naive_bf16_agrees_with_its_emulation);
  tcase_add_test(tc, naive_bf16_outputs_are_untouched_or_whole_when_an_enqueue_fails);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
