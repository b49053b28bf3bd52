/*
 * reference.c — float64 attention on the host, the textbook formula with a
 * max-subtracted softmax, and its gradient by the chain rule
 * (dP = dO V^T, dS = P (dP - rowsum(P dP)) t'(logit), dQ = scale dS K,
 * dK = scale dS^T Q, dV = P^T dO); and the naive algorithm emulated in
 * float; see reference.h.
 */
#include "reference.h"

#include "hostdata.h"
#include "views.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the problem, from flashcl.h's definitions --------------------------- */

void fclref_sequence(const fcl_attention_desc *d, size_t b, size_t *q0, size_t *nq,
                     size_t *k0, size_t *nk) {
  if (d->cu_seqlens_q) {
    const int32_t *cq = d->cu_seqlens_q, *ck = d->cu_seqlens_k ? d->cu_seqlens_k : cq;
    *q0 = (size_t)cq[b];
    *nq = (size_t)(cq[b + 1] - cq[b]);
    *k0 = (size_t)ck[b];
    *nk = (size_t)(ck[b + 1] - ck[b]);
  } else {
    *q0 = b * d->seqlen_q;
    *nq = d->seqlen_q;
    *k0 = b * d->seqlen_k;
    *nk = d->seqlens_k ? (size_t)d->seqlens_k[b] : d->seqlen_k;  /* a cache's length */
  }
}

size_t fclref_lse_at(const fcl_attention_desc *d, size_t b, size_t h, size_t i) {
  if (!d->cu_seqlens_q) return (b * d->heads_q + h) * d->seqlen_q + i;
  return h * (size_t)d->cu_seqlens_q[d->batch] + (size_t)d->cu_seqlens_q[b] + i;
}

/* Query i of nq against nk keys sees j iff i + nk - nq - wl <= j <=
 * i + nk - nq + wr, a bound of -1 being none and causal meaning wr = 0:
 * keys [*lo, *hi). */
static void visible(const fcl_attention_desc *d, size_t nq, size_t nk, size_t i, size_t *lo,
                    size_t *hi) {
  const long long at = (long long)i + (long long)nk - (long long)nq;
  const int wr = d->causal ? 0 : d->window_right, wl = d->window_left;
  long long a = wl < 0 ? 0 : at - wl, e = wr < 0 ? (long long)nk : at + wr + 1;
  if (a < 0) a = 0;
  if (e > (long long)nk) e = (long long)nk;
  if (e < a) e = a;
  *lo = (size_t)a;
  *hi = (size_t)e;
}

void fclref_set_slopes(cl_mem slopes, const float *host) { fclu_remember_host_copy(slopes, host); }

/* The ALiBi slope of (batch b, query head h), 0 without ALiBi. */
static double slope_of(const fcl_attention_desc *d, size_t b, size_t h) {
  if (!d->alibi_slopes) return 0.0;
  const float *host = fclu_host_copy(d->alibi_slopes);
  if (!host) abort();  /* fclref_set_slopes was not told */
  return host[(d->alibi_per_batch ? b * d->heads_q : 0) + h];
}

void fclref_set_sinks(cl_mem sinks, const float *host) { fclu_remember_host_copy(sinks, host); }

/* The attention sink of query head h, -inf (none) without sinks. */
static double sink_of(const fcl_attention_desc *d, size_t h) {
  if (!d->sinks) return -INFINITY;
  const float *host = fclu_host_copy(d->sinks);
  if (!host) abort();  /* fclref_set_sinks was not told */
  return host[h];
}

/* The logit of a dot product of query i and key j, and in *dlogit its
 * derivative by scale * dot (the softcap's 1 - tanh^2). */
static double logit(const fcl_attention_desc *d, double slope, size_t nq, size_t nk, size_t i,
                    size_t j, double dot, double *dlogit) {
  double x = dot * (double)d->scale;
  *dlogit = 1.0;
  if (d->softcap > 0.0f) {
    const double th = tanh(x / (double)d->softcap);
    x = (double)d->softcap * th;
    *dlogit = 1.0 - th * th;
  }
  const double rel = (double)i + (double)nk - (double)nq - (double)j;
  return x - slope * fabs(rel);
}

/* As float, on an S already scaled (and rounded), as softmax.cl does. */
static float logit_f(const fcl_attention_desc *d, float slope, size_t nq, size_t nk, size_t i,
                     size_t j, float x) {
  if (d->softcap > 0.0f) x = d->softcap * tanhf(x / d->softcap);
  const float rel = (float)((long long)i + (long long)nk - (long long)nq - (long long)j);
  return x - slope * fabsf(rel);
}

/* A row of the problem: its sequence, its key range, where q (o) and k start. */
typedef struct row_ctx {
  size_t nq, nk, lo, hi, hkv, q_at, o_at, k0;
  double slope;
} row_ctx;

static row_ctx row_of(const fcl_attention_desc *d, size_t b, size_t h, size_t i) {
  row_ctx r;
  size_t q0;
  fclref_sequence(d, b, &q0, &r.nq, &r.k0, &r.nk);
  visible(d, r.nq, r.nk, i, &r.lo, &r.hi);
  r.hkv = h / (d->heads_q / d->heads_kv);
  r.q_at = ((q0 + i) * d->heads_q + h) * d->head_dim;
  r.o_at = ((q0 + i) * d->heads_q + h) * fclu_head_dim_v(d);
  r.slope = slope_of(d, b, h);
  return r;
}

static const float *key_row(const fcl_attention_desc *d, const float *k, const row_ctx *r,
                            size_t j) {
  return k + ((r->k0 + j) * d->heads_kv + r->hkv) * d->head_dim;
}

/* Row j of V (dV), head_dim_v wide. */
static const float *value_row(const fcl_attention_desc *d, const float *v, const row_ctx *r,
                              size_t j) {
  return v + ((r->k0 + j) * d->heads_kv + r->hkv) * fclu_head_dim_v(d);
}

/* ---- the forward -------------------------------------------------------- */

void fclref_forward_row(const fcl_attention_desc *desc, const float *q, const float *k,
                        const float *v, size_t b, size_t h, size_t i, double *o_row,
                        double *lse) {
  const size_t d = desc->head_dim, dv = fclu_head_dim_v(desc);
  const row_ctx r = row_of(desc, b, h, i);
  const float *qi = q + r.q_at;
  const double sink = sink_of(desc, h);  /* joins the denominator, no value */
  for (size_t c = 0; c < dv; ++c) o_row[c] = 0.0;
  if (r.lo >= r.hi) {
    *lse = sink;
    return;
  }
  double *s = malloc((r.hi - r.lo) * sizeof *s), unused;
  if (!s) abort();
  double m = sink;
  for (size_t j = r.lo; j < r.hi; ++j) {
    const float *kj = key_row(desc, k, &r, j);
    double dot = 0.0;
    for (size_t c = 0; c < d; ++c) dot += (double)qi[c] * (double)kj[c];
    s[j - r.lo] = logit(desc, r.slope, r.nq, r.nk, i, j, dot, &unused);
    if (s[j - r.lo] > m) m = s[j - r.lo];
  }
  double l = sink == -INFINITY ? 0.0 : exp(sink - m);
  for (size_t j = r.lo; j < r.hi; ++j) {
    const double p = exp(s[j - r.lo] - m);
    const float *vj = value_row(desc, v, &r, j);
    l += p;
    for (size_t c = 0; c < dv; ++c) o_row[c] += p * (double)vj[c];
  }
  for (size_t c = 0; c < dv; ++c) o_row[c] /= l;
  *lse = m + log(l);
  free(s);
}

/* Calls row(b, h, i) for every query row of the problem. */
#define EACH_ROW(desc, body)                                                    \
  for (size_t b_ = 0; b_ < (desc)->batch; ++b_) {                               \
    size_t q0_, nq_, k0_, nk_;                                                  \
    fclref_sequence((desc), b_, &q0_, &nq_, &k0_, &nk_);                        \
    for (size_t h_ = 0; h_ < (desc)->heads_q; ++h_)                             \
      for (size_t i_ = 0; i_ < nq_; ++i_) {                                     \
        const size_t b = b_, h = h_, i = i_;                                    \
        const size_t at = ((q0_ + i) * (desc)->heads_q + h) * (desc)->head_dim; \
        const size_t at_v = ((q0_ + i) * (desc)->heads_q + h) * fclu_head_dim_v(desc);    \
        (void)at;                                                               \
        (void)at_v;                                                             \
        body;                                                                   \
      }                                                                         \
  }

void fclref_forward(const fcl_attention_desc *desc, const float *q, const float *k,
                    const float *v, double *o, double *lse) {
  EACH_ROW(desc, fclref_forward_row(desc, q, k, v, b, h, i, o + at_v,
                                    lse + fclref_lse_at(desc, b, h, i)));
}

fcl_dtype fclref_naive_s_dtype(fcl_dtype dtype) {
  /* f16 runs half GEMMs; bf16 runs the f32 path on widened copies. */
  return dtype == FCL_DTYPE_F16 ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
}

void fclref_naive_row(const fcl_attention_desc *desc, const float *q, const float *k,
                      const float *v, size_t b, size_t h, size_t i, float *o_row, float *lse) {
  const size_t d = desc->head_dim, dv = fclu_head_dim_v(desc);
  const row_ctx r = row_of(desc, b, h, i);
  const fcl_dtype s_type = fclref_naive_s_dtype(desc->dtype);
  const float *qi = q + r.q_at;
  const float sink = (float)sink_of(desc, h);
  for (size_t c = 0; c < dv; ++c) o_row[c] = 0.0f;
  if (r.lo >= r.hi) {
    *lse = sink;
    return;
  }
  const size_t n = r.hi - r.lo;
  float *p = malloc(n * sizeof *p);
  if (!p) abort();
  float m = sink;
  for (size_t j = r.lo; j < r.hi; ++j) {
    const float *kj = key_row(desc, k, &r, j);
    float dot = 0.0f;
    for (size_t c = 0; c < d; ++c) dot = fmaf(qi[c], kj[c], dot);
    float *pj = &p[j - r.lo];
    *pj = logit_f(desc, (float)r.slope, r.nq, r.nk, i, j, fclu_round(dot * desc->scale, s_type));
    if (*pj > m) m = *pj;
  }
  float l = sink == -INFINITY ? 0.0f : expf(sink - m);
  for (size_t x = 0; x < n; ++x) l += p[x] = expf(p[x] - m);
  for (size_t j = r.lo; j < r.hi; ++j) {
    const float pj = fclu_round(p[j - r.lo] / l, s_type);
    const float *vj = value_row(desc, v, &r, j);
    for (size_t c = 0; c < dv; ++c) o_row[c] = fmaf(pj, vj[c], o_row[c]);
  }
  for (size_t c = 0; c < dv; ++c) o_row[c] = fclu_round(o_row[c], desc->dtype);
  *lse = m + logf(l);
  free(p);
}

void fclref_naive_forward(const fcl_attention_desc *desc, const float *q, const float *k,
                          const float *v, float *o) {
  for (size_t b = 0; b < desc->batch; ++b) {
    size_t q0, nq, k0, nk;
    fclref_sequence(desc, b, &q0, &nq, &k0, &nk);
    for (size_t i = 0; i < nq; ++i)
      for (size_t h = 0; h < desc->heads_q; ++h) {
        float lse;
        fclref_naive_row(desc, q, k, v, b, h, i,
                         o + ((q0 + i) * desc->heads_q + h) * fclu_head_dim_v(desc),
                         &lse);
      }
  }
}

/* ---- the backward --------------------------------------------------------- */

/* One query row's gradient terms: dq_row (set), and when dk and dv are not
 * NULL its terms added to them (K's layout). */
static void backward_row(const fcl_attention_desc *desc, const float *q, const float *k,
                         const float *v, const float *dout, const float *o, size_t b, size_t h,
                         size_t i, double *dq_row, double *dk, double *dv) {
  const size_t d = desc->head_dim, dv_cols = fclu_head_dim_v(desc);
  const row_ctx r = row_of(desc, b, h, i);
  const float *qi = q + r.q_at, *doi = dout + r.o_at;
  for (size_t c = 0; c < d; ++c) dq_row[c] = 0.0;
  if (r.lo >= r.hi) return;
  const size_t n = r.hi - r.lo;
  double *p = malloc(n * sizeof *p), *dp = malloc(n * sizeof *dp), *dl = malloc(n * sizeof *dl);
  if (!p || !dp || !dl) abort();
  const double sink = sink_of(desc, h);
  double m = sink;
  for (size_t j = r.lo; j < r.hi; ++j) {
    const float *kj = key_row(desc, k, &r, j), *vj = value_row(desc, v, &r, j);
    double dot = 0.0, dot_v = 0.0;
    for (size_t c = 0; c < d; ++c) dot += (double)qi[c] * (double)kj[c];
    for (size_t c = 0; c < dv_cols; ++c) dot_v += (double)doi[c] * (double)vj[c];
    p[j - r.lo] = logit(desc, r.slope, r.nq, r.nk, i, j, dot, &dl[j - r.lo]);
    dp[j - r.lo] = dot_v;
    if (p[j - r.lo] > m) m = p[j - r.lo];
  }
  double l = sink == -INFINITY ? 0.0 : exp(sink - m), rowsum = 0.0;
  for (size_t x = 0; x < n; ++x) l += (p[x] = exp(p[x] - m));
  for (size_t x = 0; x < n; ++x) rowsum += (p[x] /= l) * dp[x];
  if (o) {  /* D = dO . O of the O given, as the flash backward reads it */
    rowsum = 0.0;
    for (size_t c = 0; c < dv_cols; ++c) rowsum += (double)doi[c] * (double)o[r.o_at + c];
  }
  for (size_t j = r.lo; j < r.hi; ++j) {
    const size_t x = j - r.lo;
    const double ds = p[x] * (dp[x] - rowsum) * dl[x] * (double)desc->scale;
    const float *kj = key_row(desc, k, &r, j);
    const size_t kv_at = (size_t)(kj - k), v_at = (size_t)(value_row(desc, v, &r, j) - v);
    for (size_t c = 0; c < d; ++c) {
      dq_row[c] += ds * (double)kj[c];
      if (dk) dk[kv_at + c] += ds * (double)qi[c];
    }
    if (dv)
      for (size_t c = 0; c < dv_cols; ++c) dv[v_at + c] += p[x] * (double)doi[c];
  }
  free(p);
  free(dp);
  free(dl);
}

/* Keys of batch entry b's kv head hkv in K's layout: their first element
 * and count, the row stride heads_kv * head_dim. */
static void kv_slice(const fcl_attention_desc *d, size_t b, size_t hkv, size_t *first,
                     size_t *nk) {
  size_t q0, nq, k0;
  fclref_sequence(d, b, &q0, &nq, &k0, nk);
  *first = (k0 * d->heads_kv + hkv) * d->head_dim;
}

static void backward_slice(const fcl_attention_desc *desc, const float *q, const float *k,
                           const float *v, const float *dout, const float *o, size_t b,
                           size_t hkv, double *dq, double *dk, double *dv) {
  const size_t d = desc->head_dim, group = desc->heads_q / desc->heads_kv;
  const size_t kv_ld = desc->heads_kv * d, dv_cols = fclu_head_dim_v(desc);
  const size_t v_ld = desc->heads_kv * dv_cols;
  size_t first, nk, q0, nq, k0;
  kv_slice(desc, b, hkv, &first, &nk);
  fclref_sequence(desc, b, &q0, &nq, &k0, &nk);
  const size_t first_v = first / d * dv_cols;
  for (size_t j = 0; j < nk; ++j) {
    for (size_t c = 0; c < d; ++c) dk[first + j * kv_ld + c] = 0.0;
    for (size_t c = 0; c < dv_cols; ++c) dv[first_v + j * v_ld + c] = 0.0;
  }
  for (size_t h = hkv * group; h < (hkv + 1) * group; ++h)
    for (size_t i = 0; i < nq; ++i)
      backward_row(desc, q, k, v, dout, o, b, h, i, dq + ((q0 + i) * desc->heads_q + h) * d,
                   dk, dv);
}

void fclref_backward_slice(const fcl_attention_desc *desc, const float *q, const float *k,
                           const float *v, const float *dout, size_t b, size_t hkv, double *dq,
                           double *dk, double *dv) {
  backward_slice(desc, q, k, v, dout, NULL, b, hkv, dq, dk, dv);
}

void fclref_backward_dq_row(const fcl_attention_desc *desc, const float *q, const float *k,
                            const float *v, const float *dout, size_t b, size_t h, size_t i,
                            double *dq_row) {
  backward_row(desc, q, k, v, dout, NULL, b, h, i, dq_row, NULL, NULL);
}

void fclref_backward(const fcl_attention_desc *desc, const float *q, const float *k,
                     const float *v, const float *dout, double *dq, double *dk, double *dv) {
  fclref_backward_given_o(desc, q, k, v, dout, NULL, dq, dk, dv);
}

void fclref_backward_given_o(const fcl_attention_desc *desc, const float *q, const float *k,
                             const float *v, const float *dout, const float *o, double *dq,
                             double *dk, double *dv) {
  for (size_t b = 0; b < desc->batch; ++b)
    for (size_t h = 0; h < desc->heads_kv; ++h)
      backward_slice(desc, q, k, v, dout, o, b, h, dq, dk, dv);
}

/* ---- the naive backward, emulated ---------------------------------------- */

/* One query row (batch b, query head h, row i) of the naive backward as
 * naive_bwd.c computes it, in float with S, P, dP, t' and dS rounded to
 * s_type: dq_row (before the gradients' final rounding), and, when dk and
 * dv are not NULL, this row's terms added to them ([nk][head_dim] each). */
static void naive_bwd_row(const fcl_attention_desc *desc, const float *q, const float *k,
                          const float *v, const float *dout, size_t b, size_t h, size_t i,
                          fcl_dtype s_type, float *dq_row, float *dk, float *dv) {
  const size_t d = desc->head_dim, dvw = fclu_head_dim_v(desc);
  const row_ctx r = row_of(desc, b, h, i);
  const float *qi = q + r.q_at, *doi = dout + r.o_at;
  for (size_t c = 0; c < d; ++c) dq_row[c] = 0.0f;
  if (r.lo >= r.hi) return;
  const size_t n = r.hi - r.lo;
  float *s = malloc(n * sizeof *s), *p = malloc(n * sizeof *p), *ds = malloc(n * sizeof *ds);
  if (!s || !p || !ds) abort();
  /* S = scale Q K^T (the GEMM), and the forward's LSE of that S (and the sink). */
  const float sink = (float)sink_of(desc, h);
  float m = sink;
  for (size_t j = r.lo; j < r.hi; ++j) {
    const float *kj = key_row(desc, k, &r, j);
    float dot = 0.0f;
    for (size_t c = 0; c < d; ++c) dot = fmaf(qi[c], kj[c], dot);
    s[j - r.lo] = fclu_round(dot * desc->scale, s_type);
    const float x = logit_f(desc, (float)r.slope, r.nq, r.nk, i, j, s[j - r.lo]);
    if (x > m) m = x;
  }
  float l = sink == -INFINITY ? 0.0f : expf(sink - m);
  for (size_t j = r.lo; j < r.hi; ++j)
    l += expf(logit_f(desc, (float)r.slope, r.nq, r.nk, i, j, s[j - r.lo]) - m);
  const float lse = m + logf(l);
  /* P = e^(t(S) - LSE); dP = dO V^T; dS = scale P (dP - rowsum(P dP)) t'(S). */
  float rowsum = 0.0f;
  for (size_t j = r.lo; j < r.hi; ++j) {
    const size_t x = j - r.lo;
    p[x] = fclu_round(expf(logit_f(desc, (float)r.slope, r.nq, r.nk, i, j, s[x]) - lse), s_type);
    const float *vj = value_row(desc, v, &r, j);
    float dot = 0.0f;
    for (size_t c = 0; c < dvw; ++c) dot = fmaf(doi[c], vj[c], dot);
    ds[x] = fclu_round(dot, s_type);
    rowsum = fmaf(p[x], ds[x], rowsum);
  }
  for (size_t x = 0; x < n; ++x) {
    float slope = 1.0f;
    if (desc->softcap > 0.0f) {
      const float th = tanhf(s[x] / desc->softcap);
      slope = fclu_round(1.0f - th * th, s_type);
    }
    ds[x] = fclu_round(desc->scale * (p[x] * (ds[x] - rowsum)) * slope, s_type);
  }
  /* dQ = dS K; dK += dS^T Q and dV += P^T dO for this row. */
  for (size_t j = r.lo; j < r.hi; ++j) {
    const size_t x = j - r.lo;
    const float *kj = key_row(desc, k, &r, j);
    for (size_t c = 0; c < d; ++c) {
      dq_row[c] = fmaf(ds[x], kj[c], dq_row[c]);
      if (dk) dk[j * d + c] = fmaf(ds[x], qi[c], dk[j * d + c]);
    }
    for (size_t c = 0; c < dvw && dv; ++c) dv[j * dvw + c] = fmaf(p[x], doi[c], dv[j * dvw + c]);
  }
  free(s);
  free(p);
  free(ds);
}

void fclref_naive_backward_dq_row(const fcl_attention_desc *desc, const float *q,
                                  const float *k, const float *v, const float *dout,
                                  size_t b, size_t h, size_t i, float *dq_row) {
  const fcl_dtype s_type = fclref_naive_s_dtype(desc->dtype);
  naive_bwd_row(desc, q, k, v, dout, b, h, i, s_type, dq_row, NULL, NULL);
  for (size_t c = 0; c < desc->head_dim; ++c)
    dq_row[c] = fclu_round(fclu_round(dq_row[c], s_type), desc->dtype);
}

void fclref_naive_backward_slice(const fcl_attention_desc *desc, const float *q,
                                 const float *k, const float *v, const float *dout,
                                 size_t b, size_t hkv, float *dq, float *dk, float *dv) {
  const size_t d = desc->head_dim, dvw = fclu_head_dim_v(desc);
  const size_t group = desc->heads_q / desc->heads_kv;
  const size_t kv_ld = desc->heads_kv * d, v_ld = desc->heads_kv * dvw;
  const fcl_dtype s_type = fclref_naive_s_dtype(desc->dtype);
  size_t first, nk, q0, nq, k0;
  kv_slice(desc, b, hkv, &first, &nk);
  fclref_sequence(desc, b, &q0, &nq, &k0, &nk);
  const size_t n = (nk ? nk : 1) * d, nv = (nk ? nk : 1) * dvw;
  const size_t first_v = first / d * dvw;  /* (token, head) of the slice's first V row */
  float *dk_m = malloc(n * sizeof *dk_m), *dv_m = malloc(nv * sizeof *dv_m);
  float *dk_sum = calloc(n, sizeof *dk_sum), *dv_sum = calloc(nv, sizeof *dv_sum);
  if (!dk_m || !dv_m || !dk_sum || !dv_sum) abort();
  /* One GEMM per group member writes (the first) or adds to (the others)
   * dK and dV, each result rounded to the type the GEMMs compute in. */
  for (size_t h = hkv * group; h < (hkv + 1) * group; ++h) {
    for (size_t x = 0; x < n; ++x) dk_m[x] = 0.0f;
    for (size_t x = 0; x < nv; ++x) dv_m[x] = 0.0f;
    for (size_t i = 0; i < nq; ++i) {
      float *dqi = dq + ((q0 + i) * desc->heads_q + h) * d;
      naive_bwd_row(desc, q, k, v, dout, b, h, i, s_type, dqi, dk_m, dv_m);
      for (size_t c = 0; c < d; ++c)
        dqi[c] = fclu_round(fclu_round(dqi[c], s_type), desc->dtype);
    }
    for (size_t x = 0; x < nk * d; ++x) dk_sum[x] = fclu_round(dk_sum[x] + dk_m[x], s_type);
    for (size_t x = 0; x < nk * dvw; ++x) dv_sum[x] = fclu_round(dv_sum[x] + dv_m[x], s_type);
  }
  for (size_t j = 0; j < nk; ++j) {
    for (size_t c = 0; c < d; ++c)
      dk[first + j * kv_ld + c] = fclu_round(dk_sum[j * d + c], desc->dtype);
    for (size_t c = 0; c < dvw; ++c)
      dv[first_v + j * v_ld + c] = fclu_round(dv_sum[j * dvw + c], desc->dtype);
  }
  free(dk_m);
  free(dv_m);
  free(dk_sum);
  free(dv_sum);
}

void fclref_naive_backward(const fcl_attention_desc *desc, const float *q, const float *k,
                           const float *v, const float *dout, float *dq, float *dk,
                           float *dv) {
  for (size_t b = 0; b < desc->batch; ++b)
    for (size_t h = 0; h < desc->heads_kv; ++h)
      fclref_naive_backward_slice(desc, q, k, v, dout, b, h, dq, dk, dv);
}

void fclref_dsinks(const fcl_attention_desc *desc, const float *q, const float *k,
                   const float *v, const float *dout, const float *o, double *dsinks) {
  const size_t d = desc->head_dim;
  double *o_row = malloc(d * sizeof *o_row);
  if (!o_row) abort();
  for (size_t h = 0; h < desc->heads_q; ++h) dsinks[h] = 0.0;
  EACH_ROW(desc, {
    double lse;
    double dsum = 0.0;
    fclref_forward_row(desc, q, k, v, b, h, i, o_row, &lse);
    for (size_t c = 0; c < d; ++c)
      dsum += (double)dout[at + c] * (o ? (double)o[at + c] : o_row[c]);
    const double sink = sink_of(desc, h);
    if (sink != -INFINITY) dsinks[h] -= exp(sink - lse) * dsum;
  });
  free(o_row);
}
