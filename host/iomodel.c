/*
 * iomodel.c — how many bytes each algorithm moves through global memory,
 * computed from the problem and the plan actually used, kernel by kernel.
 * The instrumented kernels (-DFCL_COUNT_IO) must count exactly these
 * numbers; the tests hold them to it.
 */
#include "internal.h"

static uint64_t triangle(uint64_t n) { return n * (n + 1) / 2; }

/* Sum over query rows of the keys each row sees (the causal mask is
 * bottom-right aligned: row i sees min(seqlen_k, max(0, i + diag + 1))). */
static uint64_t seen_pairs(const fcl_attention_desc *desc) {
  uint64_t nq = desc->seqlen_q, nk = desc->seqlen_k;
  if (!desc->causal) return nq * nk;
  /* Row i sees x = i + nk - nq + 1 keys, from x = nk - nq + 1 up to nk. */
  int64_t first = (int64_t)nk - (int64_t)nq + 1;
  uint64_t from = first > 1 ? (uint64_t)first : 1;
  return triangle(nk) - triangle(from - 1);
}

/* Keys the flash kernel loads for the query block starting at row q0:
 * whole tiles up to the last key any of its rows sees. */
static uint64_t flash_keys_loaded(const fcl_attention_desc *desc,
                                  const fcl_plan *plan, uint64_t q0) {
  int64_t nq = (int64_t)desc->seqlen_q, nk = (int64_t)desc->seqlen_k;
  int64_t end = nk;
  if (desc->causal) {
    int64_t last = (int64_t)q0 + plan->block_q < nq ? (int64_t)q0 + plan->block_q : nq;
    end = last - 1 + (nk - nq) + 1;
    if (end < 0) end = 0;
    if (end > nk) end = nk;
  }
  uint64_t tiles = ((uint64_t)end + plan->block_k - 1) / plan->block_k;
  uint64_t keys = tiles * plan->block_k;
  return keys < (uint64_t)nk ? keys : (uint64_t)nk;
}

fcl__io fcl__io_flash_forward(const fcl_attention_desc *desc,
                              const fcl_plan *plan, int with_lse) {
  const uint64_t e = fcl_dtype_size(desc->dtype), d = desc->head_dim;
  const uint64_t slices = (uint64_t)desc->batch * desc->heads_q;
  uint64_t keys = 0;
  for (uint64_t q0 = 0; q0 < desc->seqlen_q; q0 += plan->block_q)
    keys += flash_keys_loaded(desc, plan, q0);
  fcl__io io;
  io.loads = slices * (desc->seqlen_q * d * e + 2 * keys * d * e);
  io.stores = slices * (desc->seqlen_q * d * e + (with_lse ? desc->seqlen_q * 4 : 0));
  return io;
}

fcl__io fcl__io_softmax(const fcl_device_limits *limits,
                        const fcl_attention_desc *desc, int with_lse) {
  unsigned wg, cols;
  fcl__softmax_config(limits, desc->seqlen_k, &wg, &cols);
  const uint64_t se = fcl__naive_s_elem_size(desc);
  const uint64_t slices = (uint64_t)desc->batch * desc->heads_q;
  fcl__io io;
  io.loads = slices * seen_pairs(desc) * se * (cols ? 1 : 2);
  io.stores = slices * ((uint64_t)desc->seqlen_q * desc->seqlen_k * se +
                        (with_lse ? desc->seqlen_q * 4 : 0));
  return io;
}

fcl__io fcl__io_naive_forward(const fcl_device_limits *limits,
                              const fcl_attention_desc *desc, int with_lse,
                              unsigned chunks) {
  const uint64_t e = fcl_dtype_size(desc->dtype), se = fcl__naive_s_elem_size(desc);
  const uint64_t d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const uint64_t slices = (uint64_t)desc->batch * desc->heads_q;
  fcl__io io = fcl__io_softmax(limits, desc, with_lse);
  /* S = Q K^T: reads Q and K, writes S. O = P V: reads P and V, writes O. */
  io.loads += slices * ((nq * d + nk * d) * e + nq * nk * se + nk * d * e);
  io.stores += slices * (nq * nk * se + nq * d * e);
  if (chunks > 1) {  /* staged outputs copied to the caller's buffers */
    uint64_t staged = slices * (nq * d * e + (with_lse ? nq * 4 : 0));
    io.loads += staged;
    io.stores += staged;
  }
  return io;
}
