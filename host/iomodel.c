/*
 * iomodel.c — how many bytes each algorithm moves through global memory,
 * computed from the problem and the plan actually used, kernel by kernel.
 * The instrumented kernels (-DFCL_COUNT_IO) must count exactly these
 * numbers; the tests hold them to it.
 */
#include "internal.h"

#include <string.h>

static fcl__bytes triangle(fcl__bytes n) { return n * (n + 1) / 2; }

uint64_t fcl__io_total(fcl__io io) {
  const fcl__bytes total = io.loads + io.stores;
  return total > UINT64_MAX ? UINT64_MAX : (uint64_t)total;
}

int fcl__io_fits(fcl__io io) {
  return io.loads <= UINT64_MAX && io.stores <= UINT64_MAX && io.loads + io.stores <= UINT64_MAX;
}

/* Sum over query rows of the keys each row sees (the causal mask is
 * bottom-right aligned: row i sees min(seqlen_k, max(0, i + diag + 1))). */
static fcl__bytes seen_pairs(const fcl_attention_desc *desc) {
  fcl__bytes nq = desc->seqlen_q, nk = desc->seqlen_k;
  if (!desc->causal) return nq * nk;
  /* Row i sees x = i + nk - nq + 1 keys, from x = nk - nq + 1 up to nk. */
  int64_t first = (int64_t)nk - (int64_t)nq + 1;
  fcl__bytes from = first > 1 ? (fcl__bytes)first : 1;
  return triangle(nk) - triangle(from - 1);
}

/* Keys the flash kernel loads for the query block starting at row q0:
 * whole tiles up to the last key any of its rows sees. */
static fcl__bytes flash_keys_loaded(const fcl_attention_desc *desc,
                                  const fcl_plan *plan, fcl__bytes q0) {
  int64_t nq = (int64_t)desc->seqlen_q, nk = (int64_t)desc->seqlen_k;
  int64_t end = nk;
  if (desc->causal) {
    int64_t last = (int64_t)q0 + plan->block_q < nq ? (int64_t)q0 + plan->block_q : nq;
    end = last - 1 + (nk - nq) + 1;
    if (end < 0) end = 0;
    if (end > nk) end = nk;
  }
  fcl__bytes tiles = ((fcl__bytes)end + plan->block_k - 1) / plan->block_k;
  fcl__bytes keys = tiles * plan->block_k;
  return keys < (fcl__bytes)nk ? keys : (fcl__bytes)nk;
}

fcl__io fcl__io_flash_forward(const fcl_attention_desc *desc,
                              const fcl_plan *plan, int with_lse) {
  const fcl__bytes e = fcl_dtype_size(desc->dtype), d = desc->head_dim;
  const fcl__bytes slices = (fcl__bytes)desc->batch * desc->heads_q;
  fcl__bytes keys = 0;
  for (fcl__bytes q0 = 0; q0 < desc->seqlen_q; q0 += plan->block_q)
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
  const fcl__bytes se = fcl__naive_s_elem_size(desc);
  const fcl__bytes slices = (fcl__bytes)desc->batch * desc->heads_q;
  fcl__io io;
  io.loads = slices * seen_pairs(desc) * se * (cols ? 1 : 2);
  io.stores = slices * ((fcl__bytes)desc->seqlen_q * desc->seqlen_k * se +
                        (with_lse ? desc->seqlen_q * 4 : 0));
  return io;
}

/* Elements of the query-shaped and key-shaped tensors. */
static fcl__bytes q_elems(const fcl_attention_desc *desc) {
  return (fcl__bytes)desc->batch * desc->seqlen_q * desc->heads_q * desc->head_dim;
}
static fcl__bytes kv_elems(const fcl_attention_desc *desc) {
  return (fcl__bytes)desc->batch * desc->seqlen_k * desc->heads_kv * desc->head_dim;
}

fcl__io fcl__io_naive_conversions(const fcl_attention_desc *desc, fcl_pass pass) {
  fcl__io io = {0, 0};
  if (fcl__naive_compute_dtype(desc) == desc->dtype) return io;
  const fcl__bytes e = fcl_dtype_size(desc->dtype), q = q_elems(desc), kv = kv_elems(desc);
  /* Forward: Q, K, V widened, O narrowed; backward: Q, K, V, dO widened,
   * dQ, dK, dV narrowed. */
  const fcl__bytes in = pass == FCL_PASS_FORWARD ? q + 2 * kv : 2 * q + 2 * kv;
  const fcl__bytes out = pass == FCL_PASS_FORWARD ? q : q + 2 * kv;
  io.loads = in * e + out * 4;
  io.stores = in * 4 + out * e;
  return io;
}

fcl__io fcl__io_naive_forward(const fcl_device_limits *limits,
                              const fcl_attention_desc *desc, int with_lse,
                              unsigned chunks) {
  /* The GEMMs read and write tensors in the compute type (float copies for
   * bf16), S and P in the S type. */
  const fcl__bytes e = fcl_dtype_size(fcl__naive_compute_dtype(desc));
  const fcl__bytes se = fcl__naive_s_elem_size(desc);
  const fcl__bytes d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const fcl__bytes slices = (fcl__bytes)desc->batch * desc->heads_q;
  const int widened = fcl__naive_compute_dtype(desc) != desc->dtype;
  fcl__io io = fcl__io_softmax(limits, desc, with_lse);
  /* S = Q K^T: reads Q and K, writes S. O = P V: reads P and V, writes O. */
  io.loads += slices * ((nq * d + nk * d) * e + nq * nk * se + nk * d * e);
  io.stores += slices * (nq * nk * se + nq * d * e);
  /* Staged outputs copied to the caller's buffers; a widened O is scratch
   * anyway, and its conversion is the copy. */
  if (chunks > 1) {
    fcl__bytes staged = slices * ((widened ? 0 : nq * d * e) + (with_lse ? nq * 4 : 0));
    io.loads += staged;
    io.stores += staged;
  }
  const fcl__io conv = fcl__io_naive_conversions(desc, FCL_PASS_FORWARD);
  io.loads += conv.loads;
  io.stores += conv.stores;
  return io;
}

/* ---- backward ---------------------------------------------------------- */

/* Query rows the dK/dV kernel loads for the key block starting at k0, per
 * query head: whole tiles from the first that holds a row seeing key k0
 * (causal) to the end, clipped at seqlen_q. */
static fcl__bytes flash_bwd_queries_loaded(const fcl_attention_desc *desc,
                                         const fcl_plan *plan, fcl__bytes k0) {
  int64_t nq = (int64_t)desc->seqlen_q, nk = (int64_t)desc->seqlen_k;
  int64_t begin = 0;
  if (desc->causal) {
    begin = (int64_t)k0 - (nk - nq);
    if (begin < 0) begin = 0;
    if (begin > nq) begin = nq;
  }
  fcl__bytes first = (fcl__bytes)begin / plan->block_q * plan->block_q;
  return (fcl__bytes)nq - first;
}

fcl__io fcl__io_flash_backward(const fcl_attention_desc *desc, const fcl_plan *plan) {
  const fcl__bytes e = fcl_dtype_size(desc->dtype), d = desc->head_dim;
  const fcl__bytes nq = desc->seqlen_q, nk = desc->seqlen_k;
  const fcl__bytes slices = (fcl__bytes)desc->batch * desc->heads_q;
  const fcl__bytes kv_slices = (fcl__bytes)desc->batch * desc->heads_kv;
  const fcl__bytes group = desc->heads_q / desc->heads_kv;
  const fcl__bytes row = d * e;        /* one row of Q, K, V, O, dO or a gradient */
  const fcl__bytes stats = 2 * 4;      /* LSE and D of one query row */
  fcl__io io;
  /* Preprocessing: reads O and dO, writes D. */
  io.loads = slices * nq * 2 * row;
  io.stores = slices * nq * 4;
  /* dK/dV: K and V of the block once; Q, dO, LSE and D of every query tile
   * it does not skip, for each query head of the group; dK and dV once. */
  for (fcl__bytes k0 = 0; k0 < nk; k0 += plan->block_k) {
    const fcl__bytes keys = nk - k0 < plan->block_k ? nk - k0 : plan->block_k;
    const fcl__bytes queries = flash_bwd_queries_loaded(desc, plan, k0);
    io.loads += kv_slices * (keys * 2 * row + group * queries * (2 * row + stats));
    io.stores += kv_slices * keys * 2 * row;
  }
  /* dQ: Q, dO, LSE and D of the block once; K and V of every key tile it
   * does not skip; dQ once. */
  for (fcl__bytes q0 = 0; q0 < nq; q0 += plan->block_q) {
    const fcl__bytes rows = nq - q0 < plan->block_q ? nq - q0 : plan->block_q;
    io.loads += slices * (rows * (2 * row + stats) +
                          flash_keys_loaded(desc, plan, q0) * 2 * row);
    io.stores += slices * rows * row;
  }
  return io;
}

fcl__io fcl__io_softmax_backward(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc) {
  unsigned wg, cols;
  fcl__softmax_config(limits, desc->seqlen_k, &wg, &cols);
  const fcl__bytes se = fcl__naive_s_elem_size(desc);
  const fcl__bytes slices = (fcl__bytes)desc->batch * desc->heads_q;
  const fcl__bytes seen = seen_pairs(desc), all = (fcl__bytes)desc->seqlen_q * desc->seqlen_k;
  fcl__io io;
  /* softmax_recompute: LSE once per row, S where seen; P everywhere. */
  io.loads = slices * (desc->seqlen_q * 4 + seen * se);
  io.stores = slices * all * se;
  /* softmax_bwd: P and dP where seen (twice when streaming); dS everywhere. */
  io.loads += slices * 2 * seen * se * (cols ? 1 : 2);
  io.stores += slices * all * se;
  return io;
}

fcl__io fcl__io_naive_backward(const fcl_device_limits *limits,
                               const fcl_attention_desc *desc, unsigned chunks) {
  const fcl__bytes e = fcl_dtype_size(fcl__naive_compute_dtype(desc));
  const fcl__bytes se = fcl__naive_s_elem_size(desc);
  const int widened = fcl__naive_compute_dtype(desc) != desc->dtype;
  const fcl__bytes d = desc->head_dim, nq = desc->seqlen_q, nk = desc->seqlen_k;
  const fcl__bytes slices = (fcl__bytes)desc->batch * desc->heads_q;
  const fcl__bytes q = nq * d * e, kv = nk * d * e, s = nq * nk * se;
  fcl__io io = fcl__io_softmax_backward(limits, desc);
  /* Each GEMM reads its operands once and writes its result once:
   * S = Q K^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q. */
  io.loads += slices * ((q + kv) + (s + q) + (q + kv) + (s + kv) + (s + q));
  io.stores += slices * (s + kv + s + q + kv);
  /* dK and dV of the group's later members add to C (beta = 1): read too. */
  const fcl__bytes adding = (fcl__bytes)desc->batch * (desc->heads_q - desc->heads_kv);
  io.loads += adding * 2 * kv;
  if (chunks > 1 && !widened) {  /* staged gradients copied to the caller's buffers */
    fcl__bytes staged = (fcl__bytes)desc->batch * (desc->heads_q * q + 2 * desc->heads_kv * kv);
    io.loads += staged;
    io.stores += staged;
  }
  const fcl__io conv = fcl__io_naive_conversions(desc, FCL_PASS_BACKWARD);
  io.loads += conv.loads;
  io.stores += conv.stores;
  return io;
}

fcl_status fcl_io_model(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                        fcl_algo algo, fcl_pass pass, int with_lse,
                        fcl_io_estimate *out) {
  if (!limits || !out) return FCL_ERROR_INVALID_ARGUMENT;
  FCL_FORWARD_IF(fcl__check_desc(NULL, desc, NULL));
  if (algo != FCL_ALGO_FLASH && algo != FCL_ALGO_NAIVE) return FCL_ERROR_INVALID_ARGUMENT;
  if (pass != FCL_PASS_FORWARD && pass != FCL_PASS_BACKWARD) return FCL_ERROR_INVALID_ARGUMENT;
  fcl_io_estimate est;
  memset(&est, 0, sizeof est);
  fcl__io io;
  if (algo == FCL_ALGO_FLASH) {
    FCL_FORWARD_IF(fcl__plan_flash(limits, desc, pass, NULL, &est.plan, NULL, 0));
    io = pass == FCL_PASS_FORWARD ? fcl__io_flash_forward(desc, &est.plan, with_lse)
                                  : fcl__io_flash_backward(desc, &est.plan);
    est.chunks = 1;
  } else {
    FCL_FORWARD_IF(fcl__naive_check_dtype(NULL, limits, desc));
    fcl__chunking ch;
    FCL_FORWARD_IF(fcl__naive_chunking(NULL, limits, fcl__default_scratch_limit(limits),
                                       desc, pass, &ch));
    est.chunks = (unsigned)ch.chunks;
    io = pass == FCL_PASS_FORWARD ? fcl__io_naive_forward(limits, desc, with_lse, est.chunks)
                                  : fcl__io_naive_backward(limits, desc, est.chunks);
  }
  if (!fcl__io_fits(io)) return FCL_ERROR_INVALID_SHAPE;  /* 2^64 bytes and more */
  est.bytes_loaded = (uint64_t)io.loads;
  est.bytes_stored = (uint64_t)io.stores;
  /* The paper's orders: standard Theta(N d + N^2) and flash Theta(N^2 d^2 / M)
   * elements per head, M the local memory in elements. */
  const double e = (double)fcl_dtype_size(desc->dtype), d = (double)desc->head_dim;
  const double nq = (double)desc->seqlen_q, nk = (double)desc->seqlen_k;
  const double heads = (double)desc->batch * (double)desc->heads_q;
  if (algo == FCL_ALGO_NAIVE) {
    est.bytes_asymptotic = heads * ((nq + nk) * d + nq * nk) * e;
  } else {
    double m = (double)limits->local_mem_bytes / e;
    est.bytes_asymptotic = m > 0 ? heads * nq * nk * d * d / m * e : 0.0;
  }
  *out = est;
  return FCL_SUCCESS;
}
