/*
 * iomodel.c — how many bytes each algorithm moves through global memory,
 * computed from the problem and the plan actually used, kernel by kernel.
 * The instrumented kernels (-DFCL_COUNT_IO) must count exactly these
 * numbers; the tests hold them to it.
 */
#include "common.h"
#include "context.h"
#include "errors.h"
#include "problem.h"
#include "plan.h"
#include "merge.h"
#include "iomodel.h"
#include "naive_plan.h"
#include "rules.h"

#include <limits.h>
#include <string.h>

uint64_t fcl__io_total(fcl__io io) {
  const fcl__bytes total = io.loads + io.stores;
  return total > UINT64_MAX ? UINT64_MAX : (uint64_t)total;
}

int fcl__io_fits(fcl__io io) {
  return io.loads <= UINT64_MAX && io.stores <= UINT64_MAX && io.loads + io.stores <= UINT64_MAX;
}

/* Bytes each work-item loads to find its block, as fcl_locate_query_block
 * and fcl_locate_key_block do (blocks.cl): with a sequence table (ragged
 * batches, a cache's lengths) the work item and the sequence; and per query head it works on, its ALiBi slope. */
static fcl__bytes ragged_bytes(const fcl__shape *sh) { return sh->tabled ? 8 + 16 : 0; }
static fcl__bytes slope_bytes(const fcl__shape *sh) { return sh->desc.alibi_slopes ? 4 : 0; }

/* Keys a block of query rows [q0, q0 + rows) loads in the split of keys
 * [split_lo, split_hi): whole tiles of block_k from the one holding the
 * first key any row sees to the one holding the last, clipped at the
 * sequence's end (fcl_block_keys, and fcl_locate_query_block's split);
 * *tiles counts the tiles the kernel's loop visits. */
static fcl__bytes block_keys_loaded(const fcl__shape *sh, size_t nq, size_t nk, size_t q0,
                                    size_t rows, unsigned block_k, size_t split_lo,
                                    size_t split_hi, fcl__bytes *tiles) {
  *tiles = 0;
  cl_int lo, hi, full_lo, full_hi;
  fcl_block_keys((cl_int)nq, (cl_int)nk, sh->window_left, sh->window_right, (cl_int)q0,
                 (cl_int)rows, &lo, &hi, &full_lo, &full_hi);
  size_t a = (size_t)lo, b = (size_t)hi;
  if (split_lo > 0 || split_hi < (size_t)-1) {  /* split: clipped, and empty loads nothing */
    if (split_lo > a) a = split_lo;
    if (split_hi < b) b = split_hi;
    if (b <= a) return 0;
  }
  const fcl__bytes first = (fcl__bytes)(a / block_k) * block_k;
  const fcl__bytes end = ((fcl__bytes)b + block_k - 1) / block_k * block_k;
  if (end <= first) return 0;
  *tiles = (end - first) / block_k;
  return (end < nk ? end : nk) - first;
}

/* Query rows a block of keys [k0, k0 + keys) loads per query head, the
 * same way (fcl_block_queries). */
static fcl__bytes block_queries_loaded(const fcl__shape *sh, size_t nq, size_t nk, size_t k0,
                                       size_t keys, unsigned block_q) {
  cl_int lo, hi, full_lo, full_hi;
  fcl_block_queries((cl_int)nq, (cl_int)nk, sh->window_left, sh->window_right, (cl_int)k0,
                    (cl_int)keys, &lo, &hi, &full_lo, &full_hi);
  const fcl__bytes first = (fcl__bytes)(lo / block_q) * block_q;
  const fcl__bytes end = ((fcl__bytes)hi + block_q - 1) / block_q * block_q;
  if (end <= first) return 0;
  return (end < nq ? end : nq) - first;
}

/* Page lookups a block's forward makes for K (of_v: for V) of a paged
 * cache, over `tiles` tiles holding `keys` keys of the sequence (blocks.cl,
 * "a paged cache"): SIMT, one per key row and float4 of it that a
 * work-item loads; the decode kernel, one per key of each work-item's key
 * group; the MMA forward, its tile loads' (traits.h); the CPU forward and
 * a warp's step of the decode kernel on matrix instructions, one per
 * work-item and tile; its wide kernel, one per 16 keys a work-item reads. */
static fcl__bytes page_lookups(const fcl__shape *sh, const fcl_plan *plan, fcl__bytes tiles,
                               fcl__bytes keys, int of_v) {
  if (fcl__decode_plan_wide(plan))
    /* the wide kernel (flash_fwd_decode_wide.cl): K a warp's keys, V the
     * tile's, 16 keys a lookup */
    return tiles * plan->wg_size *
           (of_v ? FCL_DECODE_WIDE_BLOCK_K / 16 : FCL_DECODE_WIDE_BLOCK_K / (plan->wg_size / 32) / 16);
  switch (plan->kernel) {
    case FCL_FLASH_KERNEL_SIMT: return keys * ((sh->desc.head_dim + 3) / 4);
    case FCL_FLASH_KERNEL_DECODE:
      return tiles * plan->wg_size *
             FCL_DECODE_KEYS_PER_GROUP(plan->block_k, plan->wg_size, plan->threads_per_row);
    case FCL_FLASH_KERNEL_MMA:
      return tiles * FCL_MMA_PAGE_LOOKUPS(plan->head_dim_padded, plan->block_k, plan->wg_size);
    default: return tiles * plan->wg_size;
  }
}

typedef struct flash_model {
  const fcl__shape *sh;
  const fcl_plan *plan;
  int with_lse;
  fcl__io io;
} flash_model;

/* The forward of `count` sequences of nq x nk: every (sequence, head)
 * reads Q, writes O (and LSE) once and reads the K and V tiles its query
 * blocks see; split, each split does so over its keys, writing its
 * partial O and LSE. */
static void forward_sequences(void *state, size_t nq, size_t nk, size_t count) {
  flash_model *m = state;
  const fcl__shape *sh = m->sh;
  const fcl_plan *plan = m->plan;
  const fcl__bytes row = (fcl__bytes)sh->desc.head_dim * sh->elem_size;
  const fcl__bytes row_v = (fcl__bytes)sh->head_dim_v * sh->elem_size;  /* O's */
  const fcl__bytes kv_row = sh->kv_row_bytes;  /* K's, a quantized form's scales included */
  /* V's: K's when quantized (one width then), else head_dim_v elements; none
   * where the decode kernel reads V in K's rows (fcl__shape.v_in_k) */
  const int v_in_k = sh->v_in_k && plan->kernel == FCL_FLASH_KERNEL_DECODE;
  const fcl__bytes v_row = v_in_k ? 0 : sh->kv_quant ? kv_row : row_v;
  /* Packed (fcl_plan.packed_heads), a block's rows are slots of a group's
   * heads: the blocks of each (sequence, KV head) cover its heads' rows. */
  const size_t packed = plan->packed_heads > 1 ? plan->packed_heads : 1, slots = nq * packed;
  const fcl__bytes slices = (fcl__bytes)count * (sh->desc.heads_q / packed);
  const size_t splits = plan->splits > 1 ? plan->splits : 1;
  const size_t split_keys = splits > 1 ? fcl__split_keys(plan, sh->desc.seqlen_k) : (size_t)-1;
  fcl__bytes keys = 0, blocks = 0, tiles = 0;
  for (size_t s = 0; s < splits; ++s)
    for (size_t q0 = 0; q0 < slots; q0 += plan->block_q, ++blocks) {
      const size_t rows = slots - q0 < plan->block_q ? slots - q0 : plan->block_q;
      const size_t t0 = q0 / packed, t1 = (q0 + rows - 1) / packed;  /* the block's tokens */
      fcl__bytes visited;
      keys += block_keys_loaded(sh, nq, nk, t0, t1 - t0 + 1, plan->block_k, s * split_keys,
                                splits > 1 ? (s + 1) * split_keys : (size_t)-1, &visited);
      tiles += visited;
    }
  const int with_lse = m->with_lse || splits > 1;
  /* paged: K's lookups and V's, but none for V read in K's rows */
  const fcl__bytes page_reads =
      sh->paged ? 4 * (page_lookups(sh, plan, tiles, keys, 0) +
                       (v_in_k ? 0 : page_lookups(sh, plan, tiles, keys, 1)))
                : 0;
  m->io.loads += slices * (splits * slots * row + keys * (kv_row + v_row) + page_reads +
                           blocks * plan->wg_size * (ragged_bytes(sh) + slope_bytes(sh)));
  m->io.stores += slices * splits * (slots * row_v + (with_lse ? slots * 4 : 0));
}

fcl__io fcl__io_flash_forward(const fcl__shape *sh, const fcl_plan *plan, int with_lse) {
  flash_model m = {sh, plan, with_lse, {0, 0}};
  fcl__each_sequence(sh, forward_sequences, &m);
  /* each row's sink, once: by the row's end, or split, by the merge (common.cl) */
  m.io.loads += (fcl__bytes)sh->lse_elems * (sh->desc.sinks ? 4 : 0);
  if (plan->splits > 1 && sh->lse_elems) {  /* the merge of the partial states */
    const fcl__io merge = fcl__io_merge_rows(sh->lse_elems, plan->splits, sh->head_dim_v,
                                             sh->elem_size, with_lse);
    m.io.loads += merge.loads;
    m.io.stores += merge.stores;
  }
  return m.io;
}

/* The backward's dK/dV and dQ kernels of `count` sequences. */
static void backward_sequences(void *state, size_t nq, size_t nk, size_t count) {
  flash_model *m = state;
  const fcl__shape *sh = m->sh;
  const fcl_plan *plan = m->plan;
  const fcl__bytes row = (fcl__bytes)sh->desc.head_dim * sh->elem_size;  /* Q, K, dQ, dK's row */
  const fcl__bytes row_v = (fcl__bytes)sh->head_dim_v * sh->elem_size;  /* V, dO, dV's */
  const fcl__bytes pair = row + row_v;  /* Q and dO, or K and V (dK and dV) */
  const fcl__bytes stats = 2 * 4;  /* LSE and D of one query row */
  const fcl__bytes slices = (fcl__bytes)count * sh->desc.heads_q;
  const fcl__bytes kv_slices = (fcl__bytes)count * sh->desc.heads_kv;
  const fcl__bytes group = sh->group, wg = plan->wg_size;
  /* dK/dV: K and V of the block once; Q, dO, LSE and D of every query tile
   * it sees, for each query head of the group (and, where it sees one, their
   * slopes); dK and dV once. */
  for (size_t k0 = 0; k0 < nk; k0 += plan->block_k) {
    const size_t keys = nk - k0 < plan->block_k ? nk - k0 : plan->block_k;
    const fcl__bytes queries = block_queries_loaded(sh, nq, nk, k0, keys, plan->block_q);
    m->io.loads += kv_slices * (keys * pair + group * queries * (pair + stats) +
                                wg * (ragged_bytes(sh) + (queries ? group * slope_bytes(sh) : 0)));
    m->io.stores += kv_slices * keys * pair;
  }
  /* dQ: Q, dO, LSE and D of the block once; K and V of every key tile it
   * sees; dQ once. */
  for (size_t q0 = 0; q0 < nq; q0 += plan->block_q) {
    const size_t rows = nq - q0 < plan->block_q ? nq - q0 : plan->block_q;
    fcl__bytes tiles;  /* (never paged) */
    m->io.loads += slices * (rows * (pair + stats) +
                             block_keys_loaded(sh, nq, nk, q0, rows, plan->block_k, 0,
                                               (size_t)-1, &tiles) * pair +
                             wg * (ragged_bytes(sh) + slope_bytes(sh)));
    m->io.stores += slices * rows * row;
  }
}

fcl__io fcl__io_flash_backward(const fcl__shape *sh, const fcl_plan *plan) {
  const fcl__bytes row = (fcl__bytes)sh->head_dim_v * sh->elem_size;  /* O and dO's */
  flash_model m = {sh, plan, 0, {0, 0}};
  /* Preprocessing: reads O and dO, writes D. */
  m.io.loads = (fcl__bytes)sh->lse_elems * 2 * row;
  m.io.stores = (fcl__bytes)sh->lse_elems * 4;
  fcl__each_sequence(sh, backward_sequences, &m);
  if (sh->desc.dsinks) {
    /* flash_bwd_sinks: LSE and D of every row, a part's sink, its sum;
     * flash_bwd_sinks_sum: the parts, a head's gradient */
    const fcl__bytes parts = (fcl__bytes)sh->desc.heads_q * fcl__sink_parts(sh->tokens_q);
    m.io.loads += (fcl__bytes)sh->lse_elems * 8 + parts * 4 + parts * 4;
    m.io.stores += parts * 4 + (fcl__bytes)sh->desc.heads_q * 4;
  }
  return m.io;
}

/* ---- the naive algorithm ------------------------------------------------- */

typedef struct naive_model {
  const fcl__shape *sh;
  const fcl_device_limits *limits;
  int with_lse;
  int own_only;   /* count only what the library's kernels count (no GEMMs) */
  fcl__io io;
} naive_model;

/* The naive forward of `count` sequences of nq x nk, chunk by chunk: the
 * GEMMs read each operand once and write their result once (in the compute
 * type, S and P in the S type); softmax_rows reads S where the mask shows
 * it (twice when it streams) and each row's ALiBi slope, and writes all of
 * P and LSE; a sequence without keys has its O rows zeroed instead. */
static void naive_forward_sequences(void *state, size_t nq, size_t nk, size_t count) {
  naive_model *m = state;
  const fcl__shape *sh = m->sh;
  if (nq == 0) return;
  const fcl_attention_desc *desc = &sh->desc;
  const fcl__bytes e = fcl_dtype_size(fcl__naive_compute_dtype(desc));
  const fcl__bytes se = fcl__naive_s_elem_size(desc), d = desc->head_dim;
  const fcl__bytes dv = sh->head_dim_v;
  const fcl__bytes slices = (fcl__bytes)count * desc->heads_q;
  unsigned wg, cols;
  fcl__softmax_config(m->limits, desc->seqlen_k, &wg, &cols);
  const fcl__bytes seen = fcl__visible_pairs(nq, nk, sh->window_left, sh->window_right);
  m->io.loads += slices * (seen * se * (cols ? 1 : 2) + (desc->alibi_slopes ? nq * 4 : 0) +
                           (desc->sinks ? nq * 4 : 0));
  m->io.stores += slices * ((fcl__bytes)nq * nk * se + (m->with_lse ? nq * 4 : 0));
  if (nk == 0) {
    m->io.stores += slices * nq * dv * e;  /* zero_rows */
    return;
  }
  if (m->own_only) return;
  /* S = Q K^T: reads Q and K, writes S. O = P V: reads P and V, writes O. */
  m->io.loads += slices * ((nq * d + nk * d) * e + (fcl__bytes)nq * nk * se + nk * dv * e);
  m->io.stores += slices * ((fcl__bytes)nq * nk * se + nq * dv * e);
}

/* The backward's, likewise: recompute reads LSE, the slopes and S where
 * shown and writes P (and with a softcap t'(S)) everywhere; softmax_bwd
 * reads P and dP (and t') where shown, writes dS; five GEMMs besides S's,
 * dK and dV of later group members adding to what the first wrote. A
 * sequence without keys has its dQ rows zeroed, one without queries its dK
 * and dV rows. */
static void naive_backward_sequences(void *state, size_t nq, size_t nk, size_t count) {
  naive_model *m = state;
  const fcl__shape *sh = m->sh;
  const fcl_attention_desc *desc = &sh->desc;
  const fcl__bytes e = fcl_dtype_size(fcl__naive_compute_dtype(desc));
  const fcl__bytes se = fcl__naive_s_elem_size(desc), d = desc->head_dim;
  const fcl__bytes dv = sh->head_dim_v;
  const fcl__bytes slices = (fcl__bytes)count * desc->heads_q;
  const fcl__bytes kv_slices = (fcl__bytes)count * desc->heads_kv;
  if (nq == 0 || nk == 0) {
    if (nk == 0) m->io.stores += slices * nq * d * e;         /* dQ */
    if (nq == 0) m->io.stores += kv_slices * nk * (d + dv) * e;  /* dK, dV */
    return;
  }
  unsigned wg, cols;
  fcl__softmax_config(m->limits, desc->seqlen_k, &wg, &cols);
  const fcl__bytes seen = fcl__visible_pairs(nq, nk, sh->window_left, sh->window_right);
  const fcl__bytes all = (fcl__bytes)nq * nk;
  const int softcap = desc->softcap > 0.0f;
  /* softmax_recompute */
  m->io.loads += slices * (nq * 4 + seen * se + (desc->alibi_slopes ? nq * 4 : 0));
  m->io.stores += slices * all * se * (softcap ? 2 : 1);
  /* softmax_bwd: P and dP, twice when streaming, and t' */
  m->io.loads += slices * (2 * seen * se * (cols ? 1 : 2) + (softcap ? seen * se : 0));
  m->io.stores += slices * all * se;
  if (m->own_only) return;
  const fcl__bytes q = nq * d * e, kv = nk * d * e, s = all * se;
  const fcl__bytes o = nq * dv * e, v = nk * dv * e;  /* dO's, V's and dV's width */
  /* S = Q K^T, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q */
  m->io.loads += slices * ((q + kv) + (s + o) + (o + v) + (s + kv) + (s + q));
  m->io.stores += slices * (s + v + s + q + kv);
  /* dK and dV of the group's later members add to C (beta = 1): read too */
  m->io.loads += (slices - kv_slices) * (kv + v);
}

/* The whole tensors a run moves besides its chunks, through view_move
 * (convert.cl): bf16's conversions of the inputs to float and of the
 * outputs back, or the staged outputs' copies into the caller's views
 * when it takes several chunks. */
static fcl__io naive_view_moves(const fcl__shape *sh, fcl_pass pass, unsigned chunks) {
  fcl__io io = {0, 0};
  const fcl_attention_desc *desc = &sh->desc;
  const fcl__bytes e = sh->elem_size, q = sh->q_elems, kv = sh->kv_elems;
  const fcl__bytes o = sh->o_elems, v = sh->v_elems;  /* at head_dim_v */
  /* K's and V's bytes as stored: a quantized cache's rows, scales included */
  const fcl__bytes kv_bytes = sh->kv_quant ? kv / desc->head_dim * sh->kv_row_bytes : kv * e;
  const fcl__bytes v_bytes = sh->kv_quant ? kv_bytes : v * e;
  const int forward = pass == FCL_PASS_FORWARD;
  if (fcl__naive_compute_dtype(desc) != desc->dtype) {
    /* Forward: Q, K, V widened, O narrowed; backward: Q, K, V, dO widened,
     * dQ, dK, dV narrowed. */
    const fcl__bytes in = forward ? q + kv + v : q + kv + v + o;
    const fcl__bytes out = forward ? o : q + kv + v;
    io.loads = in * e + out * 4 - (forward ? (kv * e - kv_bytes) + (v * e - v_bytes) : 0);
    io.stores = in * 4 + out * e;
  } else if (chunks > 1) {
    io.loads = io.stores = (forward ? o : q + kv + v) * e;
  }
  if ((sh->paged || sh->kv_quant) && forward) {  /* K and V gathered (and dequantised) */
    const fcl__bytes w = sh->vec4 ? 4 : 1;
    const fcl__bytes items = (kv + w - 1) / w + (v + w - 1) / w;
    if (sh->paged) io.loads += items * 4;  /* a table entry per work-item */
    if (fcl__naive_compute_dtype(desc) == desc->dtype) {  /* widened, the moves are counted above */
      io.loads += kv_bytes + v_bytes;
      io.stores += (kv + v) * e;
    }
  }
  return io;
}

static fcl__io io_plus(fcl__io a, fcl__io b) {
  a.loads += b.loads;
  a.stores += b.stores;
  return a;
}

fcl__io fcl__io_naive(const fcl_device_limits *limits, const fcl__shape *sh, fcl_pass pass,
                      int with_lse, unsigned chunks, int own_only) {
  naive_model m = {sh, limits, with_lse, own_only, {0, 0}};
  fcl__each_sequence(sh, pass == FCL_PASS_FORWARD ? naive_forward_sequences
                                                  : naive_backward_sequences,
                     &m);
  fcl__io io = io_plus(m.io, naive_view_moves(sh, pass, chunks));
  /* A staged LSE is copied by the queue, which counts nothing. */
  if (!own_only && pass == FCL_PASS_FORWARD && chunks > 1 && with_lse) {
    io.loads += (fcl__bytes)sh->lse_elems * 4;
    io.stores += (fcl__bytes)sh->lse_elems * 4;
  }
  return io;
}

fcl_status fcl_io_model(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                        fcl_algo algo, fcl_pass pass, int with_lse,
                        fcl_io_estimate *out) {
  if (!limits || !out) return FCL_ERROR_INVALID_ARGUMENT;
  fcl__shape sh;
  FCL_FORWARD_IF(fcl__check_desc(NULL, desc, &sh));
  if (algo != FCL_ALGO_FLASH && algo != FCL_ALGO_NAIVE) return FCL_ERROR_INVALID_ARGUMENT;
  if (pass != FCL_PASS_FORWARD && pass != FCL_PASS_BACKWARD) return FCL_ERROR_INVALID_ARGUMENT;
  if (pass == FCL_PASS_BACKWARD && sh.desc.seqlens_k) return FCL_ERROR_UNSUPPORTED;
  fcl_io_estimate est;
  memset(&est, 0, sizeof est);
  fcl__io io;
  if (algo == FCL_ALGO_FLASH) {
    FCL_FORWARD_IF(fcl__plan_flash(limits, &sh.desc, pass, NULL, &est.plan, NULL, 0));
    io = pass == FCL_PASS_FORWARD ? fcl__io_flash_forward(&sh, &est.plan, with_lse)
                                  : fcl__io_flash_backward(&sh, &est.plan);
    est.chunks = 1;
  } else {
    FCL_FORWARD_IF(fcl__naive_check_dtype(NULL, limits, &sh.desc));
    fcl__chunking ch;
    FCL_FORWARD_IF(fcl__naive_chunking(NULL, limits, fcl__default_scratch_limit(limits), &sh,
                                       pass, &ch));
    est.chunks = ch.chunks < UINT_MAX ? (unsigned)ch.chunks : UINT_MAX;
    io = fcl__io_naive(limits, &sh, pass, with_lse, est.chunks, 0);
  }
  if (!fcl__io_fits(io)) return FCL_ERROR_INVALID_SHAPE;  /* 2^64 bytes and more */
  est.bytes_loaded = (uint64_t)io.loads;
  est.bytes_stored = (uint64_t)io.stores;
  /* The paper's orders: standard Theta(N d + N^2) and flash Theta(N^2 d^2 / M)
   * elements per head, M the local memory in elements; on the pairs the
   * mask shows. */
  const double e = (double)fcl_dtype_size(sh.desc.dtype), d = (double)sh.desc.head_dim;
  const double pairs = fcl__shown_pairs(&sh);
  const double tokens = (double)sh.tokens_q + (double)sh.tokens_k;
  const double heads = (double)sh.desc.heads_q;
  if (algo == FCL_ALGO_NAIVE) {
    est.bytes_asymptotic = heads * (tokens * d + pairs) * e;
  } else {
    double m = (double)limits->local_mem_bytes / e;
    est.bytes_asymptotic = m > 0 ? heads * pairs * d * d / m * e : 0.0;
  }
  *out = est;
  return FCL_SUCCESS;
}

fcl__io fcl__io_merge_rows(size_t rows, size_t parts, size_t head_dim, size_t elem_size,
                           int with_lse) {
  const fcl__bytes row = (fcl__bytes)head_dim * elem_size;
  return (fcl__io){.loads = (fcl__bytes)rows * parts * (row + sizeof(float)),
                   .stores = (fcl__bytes)rows * (row + (with_lse ? sizeof(float) : 0))};
}

fcl__io fcl__io_merge(const fcl__merge_shape *sh, int with_lse) {
  fcl__io io = fcl__io_merge_rows(sh->rows, sh->desc.parts, sh->desc.head_dim, sh->elem_size,
                                  with_lse);
  io.loads += (fcl__bytes)sh->rows * (sh->desc.sinks ? 4 : 0);  /* a row's sink, once */
  return io;
}

fcl__io fcl__io_kv_append(size_t rows, size_t head_dim, size_t elem_size, size_t chunk,
                          size_t row_bytes, int paged) {
  const fcl__bytes chunks = (head_dim + chunk - 1) / chunk;
  const fcl__bytes loaded = (fcl__bytes)2 * rows * head_dim * elem_size;
  /* per work-item: the entry's length, and paged its page's table entry */
  const fcl__bytes per_item = sizeof(cl_int) * (paged ? 2 : 1);
  return (fcl__io){.loads = (fcl__bytes)rows * chunks * per_item + loaded,
                   .stores = (fcl__bytes)2 * rows * row_bytes};
}
