/*
 * mask.c — the host's side of the mask (cl/params.h has the mask itself,
 * shared with the kernels): the sequences of a problem, and how many
 * (query, key) pairs a sequence shows, in closed form, which the FLOP
 * counts (fcl_attention_flops) and the naive algorithm's I/O model use. Pure.
 */
#include "common.h"
#include "problem.h"

void fcl__each_sequence(const fcl__shape *sh, fcl__sequence_fn fn, void *state) {
  const fcl_attention_desc *d = &sh->desc;
  if (d->seqlens_k) {  /* a cache's lengths */
    for (size_t b = 0; b < d->batch; ++b) fn(state, d->seqlen_q, (size_t)d->seqlens_k[b], 1);
    return;
  }
  if (!sh->ragged) {
    fn(state, d->seqlen_q, d->seqlen_k, d->batch);
    return;
  }
  const int32_t *cq = d->cu_seqlens_q, *ck = d->cu_seqlens_k ? d->cu_seqlens_k : cq;
  for (size_t b = 0; b < d->batch; ++b)
    fn(state, (size_t)(cq[b + 1] - cq[b]), (size_t)(ck[b + 1] - ck[b]), 1);
}

/* sum over x in [c, c + n) of clamp(x, 0, top) */
static fcl__bytes clamped_sum(int64_t c, int64_t n, int64_t top) {
  fcl__bytes sum = 0;
  /* x < 0 adds nothing; 0 <= x <= top adds x; x > top adds top */
  const int64_t lo = c < 0 ? 0 : c, hi = c + n - 1;  /* the x range, from 0 on */
  if (hi < lo) return 0;
  const int64_t mid_hi = hi < top ? hi : top;       /* the linear part: [lo, mid_hi] */
  if (mid_hi >= lo) sum += (fcl__bytes)(mid_hi - lo + 1) * (fcl__bytes)(lo + mid_hi) / 2;
  const int64_t flat_lo = lo > top + 1 ? lo : top + 1;  /* the flat part: [flat_lo, hi] */
  if (hi >= flat_lo) sum += (fcl__bytes)(hi - flat_lo + 1) * (fcl__bytes)top;
  return sum;
}

fcl__bytes fcl__visible_pairs(size_t nq, size_t nk, int window_left, int window_right) {
  if (nq == 0 || nk == 0) return 0;
  /* Row i sees [lo_i, hi_i) with lo_i = clamp(i + diag - wl, 0, nk) and
   * hi_i = clamp(i + diag + wr + 1, 0, nk) (fcl_row_keys), and hi_i >= lo_i. */
  const int64_t diag = (int64_t)nk - (int64_t)nq, n = (int64_t)nq, top = (int64_t)nk;
  const fcl__bytes his = window_right < 0 ? (fcl__bytes)nq * nk
                                          : clamped_sum(diag + window_right + 1, n, top);
  const fcl__bytes los = window_left < 0 ? 0 : clamped_sum(diag - window_left, n, top);
  return his - los;
}

static void add_pairs(void *state, size_t nq, size_t nk, size_t count) {
  const fcl__shape *sh = ((const fcl__shape **)state)[0];
  double *sum = ((double **)state)[1];
  *sum += (double)count *
          (double)fcl__visible_pairs(nq, nk, sh->window_left, sh->window_right);
}

double fcl__shown_pairs(const fcl__shape *sh) {
  double sum = 0.0;
  void *state[2] = {(void *)sh, &sum};
  fcl__each_sequence(sh, add_pairs, state);
  return sum;
}

double fcl__flops(const fcl__shape *sh, fcl_pass pass) {
  const fcl_attention_desc *d = &sh->desc;
  double f;
  if (!sh->tabled && sh->window_left < 0 && sh->window_right <= 0) {
    /* flash-attn's convention: the square, halved when causal and square */
    f = 4.0 * (double)d->batch * (double)d->seqlen_q * (double)d->seqlen_k;
    if (sh->window_right == 0 && d->seqlen_q == d->seqlen_k) f *= 0.5;
  } else {
    f = 4.0 * fcl__shown_pairs(sh);  /* windows, ragged batches, caches: the pairs shown */
  }
  /* QK^T over head_dim, PV over head_dim_v: 2 + 2 flops a pair and column */
  f *= (double)d->heads_q * 0.5 * ((double)d->head_dim + (double)sh->head_dim_v);
  return pass == FCL_PASS_BACKWARD ? 2.5 * f : f;
}

double fcl_attention_flops(const fcl_attention_desc *desc, fcl_pass pass) {
  fcl__shape shape;
  if (fcl__check_desc(NULL, desc, &shape) != FCL_SUCCESS) return 0.0;
  return fcl__flops(&shape, pass);
}
