/*
 * fuzz_desc_plan.c — libFuzzer target over everything that judges a
 * problem before any device is touched: descriptor validation
 * (fcl__check_desc), tiling-hint validation, the tile planner (public and
 * with hints), the naive algorithm's chunking, the softmax launch shape and
 * the I/O model. Arbitrary bytes become an fcl_attention_desc, device
 * limits, a pass, a hint, a scratch limit and a message buffer length; the
 * target checks invariants and aborts when one breaks:
 *   - every status is a value of fcl_status, and the same input gives the
 *     same answer twice;
 *   - a descriptor accepted by validation has sizes in range and tensor
 *     byte counts that do not overflow (recomputed in 128 bits);
 *   - the planner succeeds only for a descriptor validation accepts (and a
 *     hint the hint check accepts); a plan it returns fits the limits
 *     (local_bytes within local_mem_bytes, wg_size within
 *     max_work_group_size), is self-consistent (block_q = wg_size /
 *     threads_per_row * rows_per_thread, head_dim_padded covers head_dim,
 *     local_bytes as its kernel's accounting computes it: SIMT, MMA or
 *     decode forward, backward), splits the forward's keys into whole tiles (and
 *     packs a group's heads, or none; the backward neither) and honours
 *     the hint; on failure the plan is not
 *     written and `why` is a
 *     NUL-terminated reason within why_len;
 *   - the merge descriptor over the same sizes answers alike twice, and a
 *     merge it accepts spans what its sizes say;
 *   - chunking puts 1..heads_kv kv heads in a chunk whose S fits the
 *     allowance, and the softmax launch shape is a power of two within the
 *     device's work-group limit.
 * Built with clang -fsanitize=fuzzer,address,undefined (FLASHCL_BUILD_FUZZERS,
 * scripts/fuzz.sh); tests/test_fuzz_replay.c replays the corpus in ctest.
 *
 * Input format (little-endian; bytes past the end read as 0):
 *   6 sizes (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim), each
 *   a tag byte and its payload (see take_size); dtype (int32); causal
 *   (int8); scale (tag byte, see take_scale); pass (int32); limits:
 *   local_mem_bytes, max_work_group_size, compute_units, global_mem_bytes,
 *   max_alloc_bytes (sizes), flags byte (is_gpu, has_fp16, has_fp64,
 *   has_int64_atomics, nvidia_ptx); hint: a byte (bit 0: use it) and
 *   block_k, wg_size, threads_per_row, rows_per_thread (uint16 each); the
 *   scratch limit (size); why_len (uint16, taken modulo 300); the hint's
 *   kernel (byte, modulo 5: 4 is no fcl_flash_kernel); nvidia_sm (byte);
 *   window_left, window_right (int8 each); a byte of extras (bit 0: a
 *   softcap follows, as a scale tag; bit 1: a ragged batch follows, a
 *   count byte and per sequence a query length (int8) and a key length
 *   (byte), with bit 2 ragged keys of their own and bit 4 a first prefix
 *   sum (int8) before them; bit 3: q's layout follows, four sizes); and a
 *   byte picking the descriptor's struct_size (1: 0, 2: the first
 *   version's, 3: a newer header's with a zero tail, 4: with a nonzero
 *   unknown field; else this header's); the hint's splits (uint16, modulo
 *   FCL_MAX_SPLITS + 2: one past the largest) and packed_heads (byte,
 *   modulo 10); a merge's part count (byte) and part stride (size), for
 *   the merge descriptor's checks over the same sizes and q's layout; a
 *   paged cache's flags byte and sizes (see there); the hint's merge (byte,
 *   modulo 4: 3 is no fcl_split_merge); batch_invariant (byte, modulo 3: 2
 *   is refused); a features byte (bit 0: sinks, bit 1: dsinks, as handles
 *   never read here; bits 2-4: kv_dtype, 5 to 7 not a form; bits 5-7: the
 *   fp8 scales, see take_scales); head_dim_v (uint16, modulo
 *   FCL_MAX_HEAD_DIM + 2: one past the largest; 0: head_dim). Fields were
 *   appended in that
 *   order, so older corpus entries still read as they were written (all
 *   zero past their end: no window, no extras, this header).
 */
#include "common.h"
#include "context.h"
#include "problem.h"
#include "plan.h"
#include "rules.h"
#include "merge.h"
#include "iomodel.h"
#include "naive.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "fuzz_desc_plan: invariant broken: %s (%s:%d)\n", #cond,   \
              __FILE__, __LINE__);                                               \
      abort();                                                                   \
    }                                                                            \
  } while (0)

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint64_t take(reader *r, size_t bytes) {
  uint64_t x = 0;
  for (size_t i = 0; i < bytes; ++i) {
    uint64_t b = 0;
    if (r->n) {
      b = *r->p++;
      r->n--;
    }
    x |= b << (8 * i);
  }
  return x;
}

/* A size: small values, powers of two and the edges of int and size_t are
 * all one tag away, so the fuzzer reaches them quickly. */
static uint64_t take_size(reader *r) {
  unsigned tag = (unsigned)take(r, 1);
  switch (tag % 8) {
    case 0: return take(r, 1);
    case 1: return take(r, 2);
    case 2: return take(r, 4);
    case 3: return take(r, 8);
    case 4: return (uint64_t)1 << (take(r, 1) % 64);
    case 5: return (uint64_t)INT_MAX + (uint64_t)(int64_t)(int8_t)take(r, 1);
    case 6: return UINT64_MAX - take(r, 1);
    default: return (uint64_t)(FCL_MAX_HEAD_DIM + (int8_t)take(r, 1));
  }
}

static float take_scale(reader *r, size_t head_dim) {
  unsigned tag = (unsigned)take(r, 1);
  uint32_t bits;
  float f;
  switch (tag % 9) {
    case 0: return head_dim ? (float)(1.0 / sqrt((double)head_dim)) : 1.0f;
    case 1:
      bits = (uint32_t)take(r, 4);
      memcpy(&f, &bits, sizeof f);
      return f;
    case 2: return NAN;
    case 3: return INFINITY;
    case 4: return -INFINITY;
    case 5: return 0.0f;
    case 6: return -0.0f;
    case 7: return FLT_MIN / 2;
    default: return FLT_MAX;
  }
}

static int valid_status(fcl_status s) {
  return s >= FCL_SUCCESS && s <= FCL_ERROR_CLBLAST &&
         strcmp(fcl_status_str(s), "FCL_STATUS_UNKNOWN") != 0;
}

static void check_why(const char *why, size_t why_len) {
  if (!why_len) return;
  CHECK(memchr(why, '\0', why_len) != NULL);
}

/* The fp8 scales of a features byte's top bits: defaults, ordinary, and
 * the values the header refuses (negative, NaN, infinite). */
static void take_scales(unsigned pick, float *k_scale, float *v_scale) {
  static const float k[8] = {0.0f, 1.0f, 0.25f, -1.0f, NAN, INFINITY, 0.0f, 3.0f};
  static const float v[8] = {0.0f, 2.0f, 0.0f, 1.0f, 1.0f, 1.0f, NAN, 1e-30f};
  *k_scale = k[pick & 7];
  *v_scale = v[pick & 7];
}

static void check_desc(const fcl_attention_desc *desc, fcl_status st,
                       const fcl__shape *shape) {
  CHECK(valid_status(st));
  CHECK(st == FCL_SUCCESS || st == FCL_ERROR_INVALID_ARGUMENT ||
        st == FCL_ERROR_INVALID_SHAPE || st == FCL_ERROR_UNSUPPORTED);
  if (st != FCL_SUCCESS) return;
  const size_t sizes[] = {desc->batch,    desc->heads_q,  desc->heads_kv,
                          desc->seqlen_q, desc->seqlen_k, desc->head_dim};
  for (size_t i = 0; i < 6; ++i) CHECK(sizes[i] >= 1 && sizes[i] <= INT_MAX);
  CHECK(desc->head_dim <= FCL_MAX_HEAD_DIM);
  CHECK(desc->heads_q % desc->heads_kv == 0);
  CHECK(desc->causal == 0 || desc->causal == 1);
  /* a paged cache: sizes in range, the table's rows reaching seqlen_k, no ragged batch */
  CHECK(shape->paged == (desc->block_table != NULL));
  if (shape->paged) {
    CHECK(desc->page_size % FCL_PAGE_SIZE_MULTIPLE == 0 && desc->page_size <= INT_MAX);
    CHECK(desc->num_pages >= 1 && desc->num_pages <= INT_MAX && !desc->cu_seqlens_q);
    CHECK(desc->pages_per_seq * desc->page_size >= desc->seqlen_k);
    CHECK(shape->table_bytes == desc->batch * desc->pages_per_seq * 4);
  } else {
    CHECK(!desc->page_size && !desc->pages_per_seq && !desc->num_pages);
  }
  CHECK(isfinite(desc->scale) && desc->scale > 0);
  /* sinks: heads_q floats, and their gradient only with them */
  CHECK(shape->sinks_bytes == (desc->sinks ? desc->heads_q * sizeof(float) : 0));
  CHECK(!desc->dsinks || desc->sinks);
  /* a quantized cache: a form the header names, whole blocks, usable scales */
  CHECK(shape->kv_quant == (desc->kv_dtype != FCL_KV_AS_DTYPE));
  CHECK(shape->kv_row_bytes > 0);
  CHECK(isfinite(shape->k_scale) && shape->k_scale > 0 && isfinite(shape->v_scale) &&
        shape->v_scale > 0);
  CHECK(shape->elem_size == fcl_dtype_size(desc->dtype) && shape->elem_size > 0);
  const unsigned __int128 tq = shape->ragged ? shape->tokens_q
                                             : (unsigned __int128)desc->batch * desc->seqlen_q;
  const unsigned __int128 tk = shape->ragged ? shape->tokens_k
                                             : (unsigned __int128)desc->batch * desc->seqlen_k;
  unsigned __int128 q = tq * desc->heads_q * desc->head_dim;
  unsigned __int128 kv = tk * desc->heads_kv * desc->head_dim;
  unsigned __int128 lse = tq * desc->heads_q;
  CHECK(q == shape->q_elems && kv == shape->kv_elems && lse == shape->lse_elems);
  /* V, O, dO and dV at head_dim_v (0: head_dim) */
  const size_t dv = desc->head_dim_v ? desc->head_dim_v : desc->head_dim;
  CHECK(shape->head_dim_v == dv && dv <= FCL_MAX_HEAD_DIM);
  CHECK(tq * desc->heads_q * dv == shape->o_elems && tk * desc->heads_kv * dv == shape->v_elems);
  CHECK(shape->sizes.o >= (size_t)(shape->o_elems * shape->elem_size) || shape->o_elems == 0);
  CHECK(q * shape->elem_size <= SIZE_MAX && kv * shape->elem_size <= SIZE_MAX &&
        lse * sizeof(float) <= SIZE_MAX);
  CHECK(shape->window_left >= -1 && shape->window_right >= -1);
  CHECK(isfinite(desc->softcap) && desc->softcap >= 0);
  /* a packed q spans exactly its elements; any accepted layout at least them */
  CHECK(shape->sizes.q >= (size_t)(q * shape->elem_size) || q == 0);
  CHECK(shape->group == desc->heads_q / desc->heads_kv);
}

static void check_plan(const fcl_device_limits *lim, const fcl_attention_desc *desc,
                       fcl_pass pass, const fcl_plan *hint, const fcl_plan *plan) {
  const int forward = pass == FCL_PASS_FORWARD;
  CHECK(plan->wg_size >= 1 && plan->wg_size <= lim->max_work_group_size);
  CHECK(plan->local_bytes <= lim->local_mem_bytes);
  /* Key splits cover the keys in whole tiles, none empty; packing is a
   * group's heads or none; the backward does neither. */
  CHECK(plan->splits >= 1 && plan->splits <= FCL_MAX_SPLITS && (forward || plan->splits == 1));
  /* A split one merges one way, in its launch with a decode kernel only,
   * as the hint asks where it asks; an unsplit one not at all. */
  CHECK(plan->splits > 1 ? plan->merge == FCL_SPLIT_MERGE_KERNEL ||
                               (plan->merge == FCL_SPLIT_MERGE_LAST_SPLIT &&
                                fcl__decode_kernel_family(plan->kernel) &&
                                plan->splits <= fcl__decode_state_row_floats(plan))
                         : plan->merge == FCL_SPLIT_MERGE_AUTO);
  if (hint && hint->merge && plan->splits > 1) CHECK(plan->merge == hint->merge);
  CHECK(strcmp(fcl_split_merge_name(plan->merge), "unknown") != 0);
  if (forward) {
    const size_t keys = fcl__split_keys(plan, desc->seqlen_k);
    CHECK(keys % plan->block_k == 0 && (plan->splits - 1) * keys < desc->seqlen_k &&
          plan->splits * keys >= desc->seqlen_k);
  }
  /* batch-invariant: splits of a fixed size merged by the merge kernel,
   * where no hint names them; otherwise none of it */
  if (forward && desc->batch_invariant && !(hint && hint->splits) && plan->splits > 1) {
    CHECK(plan->split_keys >= FCL_BATCH_INVARIANT_SPLIT_KEYS &&
          plan->split_keys % plan->block_k == 0);
    if (!(hint && hint->merge)) CHECK(plan->merge == FCL_SPLIT_MERGE_KERNEL);
  }
  if (!desc->batch_invariant || (hint && hint->splits)) CHECK(plan->split_keys == 0);
  /* the untransposed decode products: asked for an unsplit decode on
   * matrix instructions of at most 8 rows a block, of a 16-bit cache */
  if (plan->decode_untransposed)
    CHECK(plan->decode_untransposed == 1 && plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA &&
          plan->block_q <= 8 && plan->splits == 1 && desc->kv_dtype == FCL_KV_AS_DTYPE);
  /* paged: every page lookup's keys within one page */
  if (forward && desc->block_table) CHECK(desc->page_size % fcl__page_lookup_keys(plan) == 0);
  CHECK(plan->packed_heads == 1 ||
        (forward && plan->packed_heads == desc->heads_q / desc->heads_kv && !desc->alibi_slopes));
  /* each kernel's own accounting */
  const int mma = plan->kernel == FCL_FLASH_KERNEL_MMA;
  const int decode = plan->kernel == FCL_FLASH_KERNEL_DECODE;
  const int decode_mma = plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA;
  const int cpu = plan->kernel == FCL_FLASH_KERNEL_CPU;
  CHECK(plan->kernel == FCL_FLASH_KERNEL_SIMT || mma || cpu || ((decode || decode_mma) && forward));
  const int emulate = !fcl__mma_native(lim), row_keys = fcl__row_keys_in_local(desc);
  CHECK(plan->local_bytes ==
        (decode || decode_mma ? fcl__flash_decode_local_bytes(plan, lim)
         : cpu  ? 0
         : mma  ? (forward ? fcl__flash_mma_local_bytes(plan, emulate)
                           : fcl__flash_bwd_mma_local_bytes(plan, emulate, row_keys))
         : forward ? fcl__flash_local_bytes(plan, lim)
                   : fcl__flash_bwd_local_bytes(plan, lim)));
  if (cpu) {  /* one work-item: 16-row vectors; the forward's tiles 16 keys, the backward's its block */
    CHECK(plan->wg_size == 1 && plan->threads_per_row == 1);
    CHECK(plan->rows_per_thread >= 1 && plan->rows_per_thread <= 4 &&
          plan->block_q == 16 * plan->rows_per_thread);
    CHECK(plan->block_k == (forward ? 16 : plan->block_q));
    CHECK(plan->head_dim_padded % 16 == 0 && plan->head_dim_padded >= desc->head_dim &&
          plan->head_dim_padded < desc->head_dim + 16);
    if (hint && hint->kernel) CHECK(plan->kernel == hint->kernel);
  }
  if (decode) {  /* every work-item holds the block's rows; lanes share a key */
    const unsigned lanes = plan->threads_per_row, rows = plan->block_q;
    CHECK(rows >= 1 && rows <= FCL_DECODE_MAX_ROWS && (rows & (rows - 1)) == 0);
    CHECK(plan->rows_per_thread == rows);
    CHECK(lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0);
    CHECK(plan->wg_size % lanes == 0 && plan->block_k % (plan->wg_size / lanes) == 0);
    CHECK(plan->block_k >= 1 && plan->block_k <= 128);
    CHECK(plan->head_dim_padded % (4 * lanes) == 0 && plan->head_dim_padded >= desc->head_dim);
    CHECK(desc->head_dim % 4 == 0);
    if (hint && hint->kernel) CHECK(plan->kernel == hint->kernel);
    if (hint && hint->wg_size) CHECK(plan->wg_size == hint->wg_size);
    if (hint && hint->block_k) CHECK(plan->block_k == hint->block_k);
    return;
  }
  if (decode_mma && plan->head_dim_v_padded) {
    /* the wide kernel (a width past 128): blocks of 16 or 32 rows, 4 or 8
     * warps sharing 128-key tiles, each owning whole 32-column groups of O */
    const unsigned warps = plan->wg_size / 32;
    CHECK(plan->block_q == 16 || plan->block_q == 32);
    CHECK(plan->rows_per_thread == 2 && plan->threads_per_row == 4);
    CHECK((warps == 4 || warps == 8) && plan->wg_size % 32 == 0 && plan->block_k == 128);
    CHECK(desc->head_dim > 128 || (desc->head_dim_v ? desc->head_dim_v : desc->head_dim) > 128);
    CHECK(plan->head_dim_v_padded % (32 * warps) == 0 &&
          plan->head_dim_v_padded >= (desc->head_dim_v ? desc->head_dim_v : desc->head_dim));
    CHECK(plan->head_dim_padded % 32 == 0 && plan->head_dim_padded >= desc->head_dim &&
          plan->head_dim_padded >= plan->head_dim_v_padded);
    CHECK(desc->head_dim % 4 == 0 && desc->dtype != FCL_DTYPE_F32 &&
          desc->kv_dtype == FCL_KV_AS_DTYPE);
    if (hint && hint->kernel) CHECK(plan->kernel == hint->kernel);
    if (hint && hint->wg_size) CHECK(plan->wg_size == hint->wg_size);
    return;
  }
  if (decode_mma) {  /* every warp holds the block's rows, 16 keys a warp a step */
    const unsigned rows = plan->block_q;
    CHECK(rows >= 1 && rows <= FCL_DECODE_MMA_MAX_ROWS && (rows & (rows - 1)) == 0);
    CHECK(plan->rows_per_thread == 2 && plan->threads_per_row == 4);
    CHECK(plan->wg_size % 32 == 0 && plan->block_k == plan->wg_size / 2);
    CHECK(plan->head_dim_padded % 32 == 0 && plan->head_dim_padded >= desc->head_dim);
    CHECK(desc->head_dim % 4 == 0 && desc->head_dim <= 128 && desc->dtype != FCL_DTYPE_F32);
    if (hint && hint->kernel) CHECK(plan->kernel == hint->kernel);
    if (hint && hint->wg_size) CHECK(plan->wg_size == hint->wg_size);
    if (hint && hint->block_k) CHECK(plan->block_k == hint->block_k);
    return;
  }
  if (mma) {  /* the instructions' layout: 16 rows per warp (two such tiles
               * in a forward asked so), or per pair of warps splitting
               * head_dim in the backward */
    CHECK(plan->rows_per_thread == 2 || (forward && plan->rows_per_thread == 4));
    CHECK(plan->threads_per_row == 4 ||
          (!forward && plan->threads_per_row == 8 && plan->head_dim_padded % 32 == 0));
    CHECK(plan->wg_size % (8 * plan->threads_per_row) == 0 && plan->block_k % 16 == 0);
    CHECK(desc->head_dim % 8 == 0 && desc->head_dim <= 128);
    CHECK(plan->tile_elem_size == fcl_dtype_size(desc->dtype));
  }
  CHECK(plan->threads_per_row == 1 || plan->threads_per_row == 2 ||
        plan->threads_per_row == 4 || plan->threads_per_row == 8);
  CHECK(plan->wg_size % plan->threads_per_row == 0);
  CHECK(plan->rows_per_thread >= 1 && plan->rows_per_thread <= 4);
  if (!cpu)  /* (a CPU plan's one work-item holds 16 rows a vector: checked above) */
    CHECK(plan->block_q == plan->wg_size / plan->threads_per_row * plan->rows_per_thread);
  CHECK(plan->block_q >= 1);
  /* forward: the key tile; backward: one tiling for both kernels */
  CHECK(forward ? plan->block_k >= 1 && plan->block_k <= 128 : plan->block_k == plan->block_q);
  CHECK(plan->head_dim_padded >= desc->head_dim);
  /* the forward kernel needs whole float4 slices; the backward pads them */
  if (forward) CHECK(plan->head_dim_padded % (4 * plan->threads_per_row) == 0);
  if (hint) {
    if (hint->kernel) CHECK(plan->kernel == hint->kernel);
    /* the SIMT backward derives block_k from the rest and ignores the
     * hint's; the MMA backward refuses one that differs */
    if (hint->block_k && (forward || mma)) CHECK(plan->block_k == hint->block_k);
    if (hint->wg_size) CHECK(plan->wg_size == hint->wg_size);
    if (hint->splits && forward) CHECK(plan->splits <= hint->splits);
    if (hint->packed_heads && forward) CHECK(plan->packed_heads == hint->packed_heads);
    if (hint->rows_per_thread) CHECK(plan->rows_per_thread == hint->rows_per_thread);
  }
}

static void check_chunking(const fcl__shape *shape, const fcl_device_limits *lim,
                           uint64_t scratch) {
  const fcl_attention_desc *desc = &shape->desc;
  const uint64_t limit = scratch ? scratch : fcl__default_scratch_limit(lim);
  for (int pass = FCL_PASS_FORWARD; pass <= FCL_PASS_BACKWARD; ++pass) {
    fcl__chunking ch;
    memset(&ch, 0, sizeof ch);
    fcl_status st = fcl__naive_chunking(NULL, lim, limit, shape, (fcl_pass)pass, &ch);
    /* UNSUPPORTED: a matrix past CLBlast's 32-bit indexing. */
    CHECK(st == FCL_SUCCESS || st == FCL_ERROR_OUT_OF_MEMORY || st == FCL_ERROR_UNSUPPORTED);
    if (st != FCL_SUCCESS) continue;
    uint64_t allowed = lim->max_alloc_bytes < limit ? lim->max_alloc_bytes : limit;
    CHECK(ch.per_chunk >= 1 && ch.per_chunk <= desc->heads_kv);
    CHECK(ch.slice_bytes <= allowed);
    CHECK(ch.per_chunk == 1 || (unsigned __int128)ch.slice_bytes * ch.per_chunk <= allowed);
    unsigned __int128 want = (unsigned __int128)desc->batch * (desc->heads_q / desc->heads_kv) *
                             ((desc->heads_kv + ch.per_chunk - 1) / ch.per_chunk);
    CHECK(ch.chunks == want && ch.chunks >= 1);
    if (shape->tokens_q < 100000 * (uint64_t)desc->batch || shape->ragged) {
      fcl__io all = fcl__io_naive(lim, shape, (fcl_pass)pass, 1, (unsigned)ch.chunks, 0);
      fcl__io own = fcl__io_naive(lim, shape, (fcl_pass)pass, 1, (unsigned)ch.chunks, 1);
      CHECK(own.loads <= all.loads && own.stores <= all.stores);
    }
  }
  unsigned wg = 0, cols = 0;
  fcl__softmax_config(lim, desc->seqlen_k, &wg, &cols);
  CHECK(wg >= 1 && (wg & (wg - 1)) == 0);
  CHECK(wg <= (lim->max_work_group_size ? lim->max_work_group_size : 1));
  CHECK(cols == 0 || ((cols & (cols - 1)) == 0 && (uint64_t)cols * wg >= desc->seqlen_k));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  /* room for a descriptor of a newer header, with fields unknown here */
  union {
    fcl_attention_desc desc;
    unsigned char bytes[sizeof(fcl_attention_desc) + 16];
  } given;
  memset(&given, 0, sizeof given);
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, 0, 0, 0, 0, 0, 0);
  desc.batch = (size_t)take_size(&r);
  desc.heads_q = (size_t)take_size(&r);
  desc.heads_kv = (size_t)take_size(&r);
  desc.seqlen_q = (size_t)take_size(&r);
  desc.seqlen_k = (size_t)take_size(&r);
  desc.head_dim = (size_t)take_size(&r);
  desc.dtype = (fcl_dtype)(int32_t)take(&r, 4);
  desc.causal = (int8_t)take(&r, 1);
  desc.scale = take_scale(&r, desc.head_dim);
  fcl_pass pass = (fcl_pass)(int32_t)take(&r, 4);

  fcl_device_limits lim;
  memset(&lim, 0, sizeof lim);
  lim.local_mem_bytes = take_size(&r);
  lim.max_work_group_size = (size_t)take_size(&r);
  lim.compute_units = (unsigned)take_size(&r);
  lim.global_mem_bytes = take_size(&r);
  lim.max_alloc_bytes = take_size(&r);
  unsigned flags = (unsigned)take(&r, 1);
  lim.is_gpu = flags & 1;
  lim.has_fp16 = (flags >> 1) & 1;
  lim.has_fp64 = (flags >> 2) & 1;
  lim.has_int64_atomics = (flags >> 3) & 1;
  lim.nvidia_ptx = (flags >> 4) & 1;
  /* The sub-group shuffles and their width (flags bits 5-7). */
  lim.shuffle = lim.nvidia_ptx ? FCL_SHUFFLE_NVIDIA_PTX : (flags >> 5) & 3;
  lim.sub_group_size = (flags >> 7) & 1 ? 64 : lim.shuffle >= FCL_SHUFFLE_INTEL ? 16 : 0;

  fcl_plan hint;
  memset(&hint, 0, sizeof hint);
  const int use_hint = (int)(take(&r, 1) & 1);
  hint.block_k = (unsigned)take(&r, 2);
  hint.wg_size = (unsigned)take(&r, 2);
  hint.threads_per_row = (unsigned)take(&r, 2);
  hint.rows_per_thread = (unsigned)take(&r, 2);
  const uint64_t scratch = take_size(&r);
  const size_t why_len = (size_t)(take(&r, 2) % 300);
  hint.kernel = (unsigned)(take(&r, 1) % 5);
  lim.nvidia_sm = (unsigned)take(&r, 1);
  /* Since 0.3: the mask, the transforms, a ragged batch, q's layout, and
   * which header's descriptor this is. */
  desc.window_left = (int8_t)take(&r, 1);
  desc.window_right = (int8_t)take(&r, 1);
  const unsigned extras = (unsigned)take(&r, 1);
  desc.softcap = extras & 1 ? take_scale(&r, 16) : 0.0f;
  int32_t cu_q[9], cu_k[9];
  if (extras & 2) {  /* up to 8 sequences of up to 255 tokens, maybe nonsense */
    desc.batch = 1 + take(&r, 1) % 8;
    cu_q[0] = extras & 16 ? (int32_t)(int8_t)take(&r, 1) : 0;
    cu_k[0] = 0;
    for (size_t b = 0; b < desc.batch; ++b) {
      cu_q[b + 1] = cu_q[b] + (int32_t)(int8_t)take(&r, 1);
      cu_k[b + 1] = cu_k[b] + (int32_t)take(&r, 1);
    }
    desc.cu_seqlens_q = cu_q;
    desc.cu_seqlens_k = extras & 4 ? cu_k : NULL;
  }
  if (extras & 8) {
    desc.q.offset = (size_t)take_size(&r);
    desc.q.batch_stride = (size_t)take_size(&r);
    desc.q.seq_stride = (size_t)take_size(&r);
    desc.q.head_stride = (size_t)take_size(&r);
  }
  memcpy(&given.desc, &desc, sizeof desc);
  switch (take(&r, 1) % 8) {
    case 1: given.desc.struct_size = 0; break;                    /* not from init */
    case 2: given.desc.struct_size = offsetof(fcl_attention_desc, window_left); break;
    case 3:                                                        /* newer, zero tail */
      given.desc.struct_size = sizeof given;
      break;
    case 4:                                                        /* newer, unknown field */
      given.desc.struct_size = sizeof given;
      given.bytes[sizeof(fcl_attention_desc) + 3] = 1;
      break;
    default: break;
  }
  /* The hint's key splits and packed heads (appended last: zero in older
   * inputs). */
  hint.splits = (unsigned)take(&r, 2) % (FCL_MAX_SPLITS + 2);
  hint.packed_heads = (unsigned)take(&r, 1) % 10;
  /* A merge of the problem's query rows: its part count and part stride. */
  const size_t merge_parts = (size_t)take(&r, 1);
  const size_t merge_stride = (size_t)take_size(&r);
  /* A paged cache: a flags byte (bit 0: a block table, never read here;
   * bit 1: the sizes below even without one), then page_size,
   * pages_per_seq and num_pages (uint16 each). */
  const unsigned pages = (unsigned)take(&r, 1);
  if (pages & 3) {
    given.desc.block_table = pages & 1 ? (cl_mem)(uintptr_t)0x10 : NULL;
    given.desc.page_size = (size_t)take(&r, 2);
    given.desc.pages_per_seq = (size_t)take(&r, 2);
    given.desc.num_pages = (size_t)take(&r, 2);
  }
  hint.merge = (unsigned)take(&r, 1) % 4;
  given.desc.batch_invariant = (int)(take(&r, 1) % 3);  /* 2: not a flag */
  const unsigned features = (unsigned)take(&r, 1);
  given.desc.sinks = features & 1 ? (cl_mem)(uintptr_t)0x20 : NULL;
  given.desc.dsinks = features & 2 ? (cl_mem)(uintptr_t)0x30 : NULL;
  given.desc.kv_dtype = (fcl_kv_dtype)((features >> 2) & 7);
  take_scales(features >> 5, &given.desc.k_scale, &given.desc.v_scale);
  given.desc.head_dim_v = (size_t)take(&r, 2) % (FCL_MAX_HEAD_DIM + 2);
  memcpy(&desc, &given.desc, sizeof desc);

  /* Validation. */
  fcl__shape shape;
  memset(&shape, 0, sizeof shape);
  const fcl_status desc_st = fcl__check_desc(NULL, &given.desc, &shape);
  check_desc(&shape.desc, desc_st, &shape);
  char why[300];
  memset(why, 'x', sizeof why);
  CHECK(fcl__check_desc_why(&given.desc, NULL, why, why_len) == desc_st);
  check_why(why, why_len);
  if (desc_st != FCL_SUCCESS && why_len > 1) CHECK(why[0] != '\0');
  const fcl_status hint_st = fcl__check_tiling_hint(NULL, &hint);
  CHECK(hint_st == FCL_SUCCESS || hint_st == FCL_ERROR_INVALID_ARGUMENT);
  CHECK(fcl__check_tiling_hint(NULL, NULL) == FCL_ERROR_INVALID_ARGUMENT);

  /* The planner, twice: the same answer. */
  fcl_plan plan, again;
  memset(&plan, 0xa5, sizeof plan);
  memset(&again, 0x5a, sizeof again);
  memset(why, 'x', sizeof why);
  const fcl_plan *h = use_hint ? &hint : NULL;
  fcl_status st = use_hint ? fcl__plan_flash(&lim, &given.desc, pass, h, &plan, why, why_len)
                           : fcl_plan_flash(&lim, &given.desc, pass, &plan, why, why_len);
  CHECK(valid_status(st));
  CHECK(st == FCL_SUCCESS || st == FCL_ERROR_INVALID_ARGUMENT ||
        st == FCL_ERROR_INVALID_SHAPE || st == FCL_ERROR_UNSUPPORTED);
  check_why(why, why_len);
  fcl_status st2 = fcl__plan_flash(&lim, &given.desc, pass, h, &again, NULL, 0);
  CHECK(st2 == st);
  if (st == FCL_SUCCESS) {
    CHECK(desc_st == FCL_SUCCESS);
    /* a value width of its own: the SIMT and CPU kernels, unsplit and
     * unpaged, V's bucket their HEAD_DIM_V_MAX (a prefill, or any call on
     * a CPU), or a decode kernel's forward; widths past the tiles' the
     * decode kernels' forward alone (the matrix one's wide kernel in the
     * 16-bit types, from a cache in the storage type) */
    if (shape.desc.head_dim > FCL_MAX_TILED_HEAD_DIM || shape.head_dim_v > FCL_MAX_TILED_HEAD_DIM) {
      CHECK(fcl__decode_kernel_family(plan.kernel) && pass == FCL_PASS_FORWARD);
      if (plan.kernel == FCL_FLASH_KERNEL_DECODE_MMA)
        CHECK(plan.head_dim_v_padded != 0 && shape.desc.dtype != FCL_DTYPE_F32 && !shape.kv_quant);
    }
    if (fcl__decode_kernel_family(plan.kernel)) {
      CHECK(pass == FCL_PASS_FORWARD && plan.head_dim_padded >= shape.head_dim_v);
    } else if (shape.head_dim_v != shape.desc.head_dim) {
      CHECK(plan.kernel == FCL_FLASH_KERNEL_SIMT || plan.kernel == FCL_FLASH_KERNEL_CPU);
      CHECK(plan.splits == 1 && !shape.paged);
      CHECK(fcl__plan_head_dim_v(&plan) >= shape.head_dim_v);
    } else {
      CHECK(plan.head_dim_v_padded == 0);
    }
    CHECK(pass == FCL_PASS_FORWARD || pass == FCL_PASS_BACKWARD);
    if (use_hint) CHECK(hint_st == FCL_SUCCESS);
    CHECK(fcl__same_plan(&plan, &again));
    check_plan(&lim, &shape.desc, pass, h, &plan);
    /* a quantized cache's tiles are converted as they load: never by the
     * MMA forward's cp.async */
    if (shape.kv_quant) CHECK(plan.kernel != FCL_FLASH_KERNEL_MMA);
    /* The model walks the query blocks: keep the fuzzer's units quick. */
    if (shape.desc.seqlen_q * plan.packed_heads / plan.block_q * plan.splits < 100000 &&
        shape.desc.seqlen_k / plan.block_k < 100000) {
      fcl__io io = pass == FCL_PASS_FORWARD ? fcl__io_flash_forward(&shape, &plan, 1)
                                            : fcl__io_flash_backward(&shape, &plan);
      (void)io;
    }
    if (why_len) CHECK(why[0] == '\0');
  } else {
    const unsigned char *bytes = (const unsigned char *)&plan;
    for (size_t i = 0; i < sizeof plan; ++i) CHECK(bytes[i] == 0xa5);  /* untouched */
    if (why_len > 1) CHECK(why[0] != '\0');
    /* Validation failures keep validation's status. */
    if (desc_st != FCL_SUCCESS && pass >= FCL_PASS_FORWARD && pass <= FCL_PASS_BACKWARD)
      CHECK(st == desc_st);
  }
  /* The program list: the planner's answer, the plan's local bytes and
   * work-group for the main program, whole options; untouched on failure. */
  if (!use_hint) {
    fcl_program_info programs[FCL_MAX_PASS_PROGRAMS];
    memset(programs, 0xa5, sizeof programs);
    unsigned count = 99;
    CHECK(fcl_flash_programs(&lim, &given.desc, pass, programs, &count, why, why_len) == st);
    check_why(why, why_len);
    if (st == FCL_SUCCESS) {
      /* forward: the attention, and a split one's merge; backward: D, then dK/dV and dQ */
      CHECK(count == (pass == FCL_PASS_FORWARD
                          ? (plan.merge == FCL_SPLIT_MERGE_KERNEL ? 2u : 1u)
                          : 2u));
      const fcl_program_info *main = &programs[pass == FCL_PASS_FORWARD ? 0 : 1];
      CHECK(main->local_bytes == plan.local_bytes && main->wg_size == plan.wg_size);
      for (unsigned i = 0; i < count; ++i) {
        CHECK(programs[i].file && programs[i].kernels[0]);
        CHECK(memchr(programs[i].options, '\0', sizeof programs[i].options) != NULL);
      }
    } else {
      CHECK(count == 99);
      const unsigned char *bytes = (const unsigned char *)programs;
      for (size_t i = 0; i < sizeof programs; ++i) CHECK(bytes[i] == 0xa5);
    }
  }
  /* The merge's descriptor, from the same sizes and q's layout: its
   * validation answers alike twice, and what it accepts fits size_t. */
  {
    fcl_merge_desc m;
    fcl_merge_desc_init(&m, merge_parts, desc.batch, desc.seqlen_q, desc.heads_q, desc.head_dim);
    m.dtype = desc.dtype;
    m.o_parts = desc.q;
    m.o_part_stride = merge_stride;
    fcl__merge_shape ms;
    memset(why, 'x', sizeof why);
    const fcl_status mst = fcl__check_merge_why(&m, &ms, why, why_len);
    CHECK(mst == FCL_SUCCESS || mst == FCL_ERROR_INVALID_ARGUMENT ||
          mst == FCL_ERROR_INVALID_SHAPE || mst == FCL_ERROR_UNSUPPORTED);
    check_why(why, why_len);
    fcl_merge_sizes sizes;
    CHECK(fcl_merge_buffer_sizes(&m, &sizes, NULL, 0) == mst);
    if (mst == FCL_SUCCESS) {
      CHECK(ms.rows == desc.batch * desc.seqlen_q * desc.heads_q && ms.desc.parts >= 1);
      CHECK(sizes.o_parts == ms.sizes.o_parts && sizes.lse == ms.rows * sizeof(float));
      CHECK(sizes.o_parts / ms.elem_size >= (ms.desc.parts - 1) * ms.o_part_stride);
    } else if (why_len > 1) {
      CHECK(why[0] != '\0');
    }
  }
  /* NULL arguments. */
  CHECK(fcl_plan_flash(NULL, &given.desc, pass, &plan, NULL, 0) == FCL_ERROR_INVALID_ARGUMENT);
  CHECK(fcl_plan_flash(&lim, NULL, pass, &plan, why, why_len) == FCL_ERROR_INVALID_ARGUMENT);
  CHECK(fcl_plan_flash(&lim, &given.desc, pass, NULL, why, why_len) == FCL_ERROR_INVALID_ARGUMENT);

  /* What the naive algorithm and the run info derive from a valid desc. */
  if (desc_st == FCL_SUCCESS) {
    check_chunking(&shape, &lim, scratch);
    double flops = fcl_attention_flops(&given.desc, FCL_PASS_FORWARD);
    CHECK(flops >= 0 && isfinite(flops));
    CHECK(flops > 0 || fcl__shown_pairs(&shape) == 0);
  }
  return 0;
}
