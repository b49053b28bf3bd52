/*
 * reference.c — float64 attention on the host, the textbook formula with a
 * max-subtracted softmax, and its gradient by the chain rule
 * (dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = scale dS K, dK = scale
 * dS^T Q, dV = P^T dO); see reference.h.
 */
#include "reference.h"

#include "hostdata.h"

#include <math.h>
#include <stdlib.h>

/* Keys row i sees: bottom-right aligned, key j is seen iff j <= i + nk - nq. */
static size_t seen_keys(const fcl_attention_desc *desc, size_t i) {
  const size_t nq = desc->seqlen_q, nk = desc->seqlen_k;
  if (!desc->causal) return nk;
  long long last = (long long)i + (long long)nk - (long long)nq;
  return last < 0 ? 0 : (size_t)last + 1 < nk ? (size_t)last + 1 : nk;
}

void fclref_forward_row(const fcl_attention_desc *desc, const float *q,
                        const float *k, const float *v, size_t b, size_t h,
                        size_t i, double *o_row, double *lse) {
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t hkv = h / (desc->heads_q / desc->heads_kv);
  const float *qi = q + ((b * nq + i) * desc->heads_q + h) * d;
  const size_t seen = seen_keys(desc, i);
  for (size_t c = 0; c < d; ++c) o_row[c] = 0.0;
  if (seen == 0) {
    *lse = -INFINITY;
    return;
  }
  double *s = malloc(seen * sizeof *s);
  if (!s) abort();
  double m = -INFINITY;
  for (size_t j = 0; j < seen; ++j) {
    const float *kj = k + ((b * nk + j) * desc->heads_kv + hkv) * d;
    double dot = 0.0;
    for (size_t c = 0; c < d; ++c) dot += (double)qi[c] * (double)kj[c];
    s[j] = dot * (double)desc->scale;
    if (s[j] > m) m = s[j];
  }
  double l = 0.0;
  for (size_t j = 0; j < seen; ++j) {
    const double p = exp(s[j] - m);
    const float *vj = v + ((b * nk + j) * desc->heads_kv + hkv) * d;
    l += p;
    for (size_t c = 0; c < d; ++c) o_row[c] += p * (double)vj[c];
  }
  for (size_t c = 0; c < d; ++c) o_row[c] /= l;
  *lse = m + log(l);
  free(s);
}

void fclref_forward(const fcl_attention_desc *desc, const float *q,
                    const float *k, const float *v, double *o, double *lse) {
  const size_t d = desc->head_dim, nq = desc->seqlen_q;
  for (size_t b = 0; b < desc->batch; ++b)
    for (size_t h = 0; h < desc->heads_q; ++h)
      for (size_t i = 0; i < nq; ++i)
        fclref_forward_row(desc, q, k, v, b, h, i,
                           o + ((b * nq + i) * desc->heads_q + h) * d,
                           lse + (b * desc->heads_q + h) * nq + i);
}

fcl_dtype fclref_naive_s_dtype(fcl_dtype dtype) {
  /* f16 runs half GEMMs; bf16 runs the f32 path on widened copies. */
  return dtype == FCL_DTYPE_F16 ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
}

void fclref_naive_row(const fcl_attention_desc *desc, const float *q, const float *k,
                      const float *v, size_t b, size_t h, size_t i, float *o_row,
                      float *lse) {
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t hkv = h / (desc->heads_q / desc->heads_kv);
  const fcl_dtype s_type = fclref_naive_s_dtype(desc->dtype);
  const float *qi = q + ((b * nq + i) * desc->heads_q + h) * d;
  const size_t seen = seen_keys(desc, i);
  for (size_t c = 0; c < d; ++c) o_row[c] = 0.0f;
  if (seen == 0) {
    *lse = -INFINITY;
    return;
  }
  float *p = malloc(seen * sizeof *p);
  if (!p) abort();
  float m = -INFINITY;
  for (size_t j = 0; j < seen; ++j) {
    const float *kj = k + ((b * nk + j) * desc->heads_kv + hkv) * d;
    float dot = 0.0f;
    for (size_t c = 0; c < d; ++c) dot = fmaf(qi[c], kj[c], dot);
    p[j] = fclu_round(dot * desc->scale, s_type);
    if (p[j] > m) m = p[j];
  }
  float l = 0.0f;
  for (size_t j = 0; j < seen; ++j) l += p[j] = expf(p[j] - m);
  for (size_t j = 0; j < seen; ++j) {
    const float pj = fclu_round(p[j] / l, s_type);
    const float *vj = v + ((b * nk + j) * desc->heads_kv + hkv) * d;
    for (size_t c = 0; c < d; ++c) o_row[c] = fmaf(pj, vj[c], o_row[c]);
  }
  for (size_t c = 0; c < d; ++c) o_row[c] = fclu_round(o_row[c], desc->dtype);
  *lse = m + logf(l);
  free(p);
}

void fclref_backward_slice(const fcl_attention_desc *desc, const float *q,
                           const float *k, const float *v, const float *dout,
                           size_t b, size_t hkv, double *dq, double *dk, double *dv) {
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t group = desc->heads_q / desc->heads_kv;
  const double scale = (double)desc->scale;
  const size_t kv_ld = desc->heads_kv * d;
  const float *kb = k + (b * nk * desc->heads_kv + hkv) * d;
  const float *vb = v + (b * nk * desc->heads_kv + hkv) * d;
  double *dkb = dk + (b * nk * desc->heads_kv + hkv) * d;
  double *dvb = dv + (b * nk * desc->heads_kv + hkv) * d;
  for (size_t j = 0; j < nk; ++j)
    for (size_t c = 0; c < d; ++c) dkb[j * kv_ld + c] = dvb[j * kv_ld + c] = 0.0;
  double *p = malloc((nk ? nk : 1) * sizeof *p);
  double *dp = malloc((nk ? nk : 1) * sizeof *dp);
  if (!p || !dp) abort();
  for (size_t h = hkv * group; h < (hkv + 1) * group; ++h)
    for (size_t i = 0; i < nq; ++i) {
      const size_t at = ((b * nq + i) * desc->heads_q + h) * d;
      const float *qi = q + at, *doi = dout + at;
      double *dqi = dq + at;
      for (size_t c = 0; c < d; ++c) dqi[c] = 0.0;
      const size_t seen = seen_keys(desc, i);
      if (seen == 0) continue;
      double m = -INFINITY;
      for (size_t j = 0; j < seen; ++j) {
        double dot = 0.0, dot_v = 0.0;
        for (size_t c = 0; c < d; ++c) {
          dot += (double)qi[c] * (double)kb[j * kv_ld + c];
          dot_v += (double)doi[c] * (double)vb[j * kv_ld + c];
        }
        p[j] = dot * scale;
        dp[j] = dot_v;
        if (p[j] > m) m = p[j];
      }
      double l = 0.0;
      for (size_t j = 0; j < seen; ++j) l += (p[j] = exp(p[j] - m));
      double rowsum = 0.0;
      for (size_t j = 0; j < seen; ++j) rowsum += (p[j] /= l) * dp[j];
      for (size_t j = 0; j < seen; ++j) {
        const double ds = p[j] * (dp[j] - rowsum) * scale;
        for (size_t c = 0; c < d; ++c) {
          dqi[c] += ds * (double)kb[j * kv_ld + c];
          dkb[j * kv_ld + c] += ds * (double)qi[c];
          dvb[j * kv_ld + c] += p[j] * (double)doi[c];
        }
      }
    }
  free(p);
  free(dp);
}

void fclref_backward_dq_row(const fcl_attention_desc *desc, const float *q,
                            const float *k, const float *v, const float *dout,
                            size_t b, size_t h, size_t i, double *dq_row) {
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t hkv = h / (desc->heads_q / desc->heads_kv);
  const size_t at = ((b * nq + i) * desc->heads_q + h) * d, kv_ld = desc->heads_kv * d;
  const float *qi = q + at, *doi = dout + at;
  const float *kb = k + (b * nk * desc->heads_kv + hkv) * d;
  const float *vb = v + (b * nk * desc->heads_kv + hkv) * d;
  const size_t seen = seen_keys(desc, i);
  for (size_t c = 0; c < d; ++c) dq_row[c] = 0.0;
  if (seen == 0) return;
  double *p = malloc(seen * sizeof *p), *dp = malloc(seen * sizeof *dp);
  if (!p || !dp) abort();
  double m = -INFINITY;
  for (size_t j = 0; j < seen; ++j) {
    double dot = 0.0, dot_v = 0.0;
    for (size_t c = 0; c < d; ++c) {
      dot += (double)qi[c] * (double)kb[j * kv_ld + c];
      dot_v += (double)doi[c] * (double)vb[j * kv_ld + c];
    }
    p[j] = dot * (double)desc->scale;
    dp[j] = dot_v;
    if (p[j] > m) m = p[j];
  }
  double l = 0.0, rowsum = 0.0;
  for (size_t j = 0; j < seen; ++j) l += (p[j] = exp(p[j] - m));
  for (size_t j = 0; j < seen; ++j) rowsum += (p[j] /= l) * dp[j];
  for (size_t j = 0; j < seen; ++j) {
    const double ds = p[j] * (dp[j] - rowsum) * (double)desc->scale;
    for (size_t c = 0; c < d; ++c) dq_row[c] += ds * (double)kb[j * kv_ld + c];
  }
  free(p);
  free(dp);
}

void fclref_backward(const fcl_attention_desc *desc, const float *q,
                     const float *k, const float *v, const float *dout,
                     double *dq, double *dk, double *dv) {
  for (size_t b = 0; b < desc->batch; ++b)
    for (size_t h = 0; h < desc->heads_kv; ++h)
      fclref_backward_slice(desc, q, k, v, dout, b, h, dq, dk, dv);
}

/* ---- the naive backward, emulated ---------------------------------------- */

/* One query row (batch b, query head h, row i) of the naive backward as
 * naive_bwd.c computes it, in float with S, P, dP and dS rounded to s_type:
 * dq_row (before the gradients' final rounding), and, when dk and dv are
 * not NULL, this row's terms added to them ([seqlen_k][head_dim] each). */
static void naive_bwd_row(const fcl_attention_desc *desc, const float *q, const float *k,
                          const float *v, const float *dout, size_t b, size_t h, size_t i,
                          fcl_dtype s_type, float *dq_row, float *dk, float *dv) {
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t hkv = h / (desc->heads_q / desc->heads_kv), kv_ld = desc->heads_kv * d;
  const size_t at = ((b * nq + i) * desc->heads_q + h) * d;
  const float *qi = q + at, *doi = dout + at;
  const float *kb = k + (b * nk * desc->heads_kv + hkv) * d;
  const float *vb = v + (b * nk * desc->heads_kv + hkv) * d;
  const size_t seen = seen_keys(desc, i);
  for (size_t c = 0; c < d; ++c) dq_row[c] = 0.0f;
  if (seen == 0) return;
  float *p = malloc(seen * sizeof *p), *ds = malloc(seen * sizeof *ds);
  if (!p || !ds) abort();
  /* S = scale Q K^T (the GEMM), and the forward's LSE of that S. */
  float m = -INFINITY;
  for (size_t j = 0; j < seen; ++j) {
    float dot = 0.0f;
    for (size_t c = 0; c < d; ++c) dot = fmaf(qi[c], kb[j * kv_ld + c], dot);
    p[j] = fclu_round(dot * desc->scale, s_type);
    if (p[j] > m) m = p[j];
  }
  float l = 0.0f;
  for (size_t j = 0; j < seen; ++j) l += expf(p[j] - m);
  const float lse = m + logf(l);
  /* P = e^(S - LSE); dP = dO V^T; dS = scale P (dP - rowsum(P dP)). */
  float rowsum = 0.0f;
  for (size_t j = 0; j < seen; ++j) {
    p[j] = fclu_round(expf(p[j] - lse), s_type);
    float dot = 0.0f;
    for (size_t c = 0; c < d; ++c) dot = fmaf(doi[c], vb[j * kv_ld + c], dot);
    ds[j] = fclu_round(dot, s_type);
    rowsum = fmaf(p[j], ds[j], rowsum);
  }
  for (size_t j = 0; j < seen; ++j)
    ds[j] = fclu_round(desc->scale * (p[j] * (ds[j] - rowsum)), s_type);
  /* dQ = dS K; dK += dS^T Q and dV += P^T dO for this row. */
  for (size_t j = 0; j < seen; ++j)
    for (size_t c = 0; c < d; ++c) {
      dq_row[c] = fmaf(ds[j], kb[j * kv_ld + c], dq_row[c]);
      if (dk) {
        dk[j * d + c] = fmaf(ds[j], qi[c], dk[j * d + c]);
        dv[j * d + c] = fmaf(p[j], doi[c], dv[j * d + c]);
      }
    }
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
  const size_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const size_t group = desc->heads_q / desc->heads_kv, kv_ld = desc->heads_kv * d;
  const fcl_dtype s_type = fclref_naive_s_dtype(desc->dtype);
  const size_t n = (nk ? nk : 1) * d;
  float *dk_m = malloc(n * sizeof *dk_m), *dv_m = malloc(n * sizeof *dv_m);
  float *dk_sum = calloc(n, sizeof *dk_sum), *dv_sum = calloc(n, sizeof *dv_sum);
  if (!dk_m || !dv_m || !dk_sum || !dv_sum) abort();
  /* One GEMM per group member writes (the first) or adds to (the others)
   * dK and dV, each result rounded to the type the GEMMs compute in. */
  for (size_t h = hkv * group; h < (hkv + 1) * group; ++h) {
    for (size_t x = 0; x < n; ++x) dk_m[x] = dv_m[x] = 0.0f;
    for (size_t i = 0; i < nq; ++i) {
      float *dqi = dq + ((b * nq + i) * desc->heads_q + h) * d;
      naive_bwd_row(desc, q, k, v, dout, b, h, i, s_type, dqi, dk_m, dv_m);
      for (size_t c = 0; c < d; ++c)
        dqi[c] = fclu_round(fclu_round(dqi[c], s_type), desc->dtype);
    }
    for (size_t x = 0; x < nk * d; ++x) {
      dk_sum[x] = fclu_round(dk_sum[x] + dk_m[x], s_type);
      dv_sum[x] = fclu_round(dv_sum[x] + dv_m[x], s_type);
    }
  }
  float *dkb = dk + (b * nk * desc->heads_kv + hkv) * d;
  float *dvb = dv + (b * nk * desc->heads_kv + hkv) * d;
  for (size_t j = 0; j < nk; ++j)
    for (size_t c = 0; c < d; ++c) {
      dkb[j * kv_ld + c] = fclu_round(dk_sum[j * d + c], desc->dtype);
      dvb[j * kv_ld + c] = fclu_round(dv_sum[j * d + c], desc->dtype);
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
