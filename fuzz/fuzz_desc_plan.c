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
 *     local_bytes as its kernel's accounting computes it: SIMT or MMA
 *     forward, backward) and honours the hint; on failure the plan is not
 *     written and `why` is a
 *     NUL-terminated reason within why_len;
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
 *   kernel (byte, modulo 4: 3 is no fcl_flash_kernel); nvidia_sm (byte).
 *   Fields were appended in that order, so older corpus entries still read
 *   as they were written.
 */
#include "internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
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
  CHECK(isfinite(desc->scale) && desc->scale > 0);
  CHECK(shape->elem_size == fcl_dtype_size(desc->dtype) && shape->elem_size > 0);
  unsigned __int128 q = (unsigned __int128)desc->batch * desc->seqlen_q * desc->heads_q *
                        desc->head_dim;
  unsigned __int128 kv = (unsigned __int128)desc->batch * desc->seqlen_k * desc->heads_kv *
                         desc->head_dim;
  unsigned __int128 lse = (unsigned __int128)desc->batch * desc->heads_q * desc->seqlen_q;
  CHECK(q == shape->q_elems && kv == shape->kv_elems && lse == shape->lse_elems);
  CHECK(q * shape->elem_size <= SIZE_MAX && kv * shape->elem_size <= SIZE_MAX &&
        lse * sizeof(float) <= SIZE_MAX);
  CHECK(shape->group == desc->heads_q / desc->heads_kv);
}

/* Field by field: the struct's padding carries no meaning. */
static int same_plan(const fcl_plan *a, const fcl_plan *b) {
  return a->block_q == b->block_q && a->block_k == b->block_k && a->wg_size == b->wg_size &&
         a->threads_per_row == b->threads_per_row && a->rows_per_thread == b->rows_per_thread &&
         a->head_dim_padded == b->head_dim_padded && a->local_bytes == b->local_bytes &&
         a->tile_elem_size == b->tile_elem_size && a->kernel == b->kernel;
}

static void check_plan(const fcl_device_limits *lim, const fcl_attention_desc *desc,
                       fcl_pass pass, const fcl_plan *hint, const fcl_plan *plan) {
  const int forward = pass == FCL_PASS_FORWARD;
  CHECK(plan->wg_size >= 1 && plan->wg_size <= lim->max_work_group_size);
  CHECK(plan->local_bytes <= lim->local_mem_bytes);
  /* each kernel's own accounting */
  const int mma = plan->kernel == FCL_FLASH_KERNEL_MMA;
  CHECK(plan->kernel == FCL_FLASH_KERNEL_SIMT || mma);
  const int emulate = !fcl__mma_native(lim);
  CHECK(plan->local_bytes ==
        (mma ? (forward ? fcl__flash_mma_local_bytes(plan, emulate)
                        : fcl__flash_bwd_mma_local_bytes(plan, emulate))
         : forward ? fcl__flash_local_bytes(plan, !lim->nvidia_ptx)
                   : fcl__flash_bwd_local_bytes(plan, !lim->nvidia_ptx)));
  if (mma) {  /* the instructions' layout: 16 rows per warp, or per pair of
               * warps splitting head_dim in the backward */
    CHECK(plan->rows_per_thread == 2);
    CHECK(plan->threads_per_row == 4 ||
          (!forward && plan->threads_per_row == 8 && plan->head_dim_padded % 32 == 0));
    CHECK(plan->wg_size % (8 * plan->threads_per_row) == 0 && plan->block_k % 16 == 0);
    CHECK(desc->head_dim % 8 == 0 && desc->head_dim <= 128);
    CHECK(plan->tile_elem_size == fcl_dtype_size(desc->dtype));
  }
  /* 8 work-items per row exist in the backward only */
  CHECK(plan->threads_per_row == 1 || plan->threads_per_row == 2 ||
        plan->threads_per_row == 4 || (!forward && plan->threads_per_row == 8));
  CHECK(plan->wg_size % plan->threads_per_row == 0);
  CHECK(plan->rows_per_thread >= 1 && plan->rows_per_thread <= 4);
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
    if (hint->rows_per_thread) CHECK(plan->rows_per_thread == hint->rows_per_thread);
  }
}

static void check_chunking(const fcl_attention_desc *desc, const fcl_device_limits *lim,
                           uint64_t scratch) {
  const uint64_t limit = scratch ? scratch : fcl__default_scratch_limit(lim);
  for (int pass = FCL_PASS_FORWARD; pass <= FCL_PASS_BACKWARD; ++pass) {
    fcl__chunking ch;
    memset(&ch, 0, sizeof ch);
    fcl_status st = fcl__naive_chunking(NULL, lim, limit, desc, (fcl_pass)pass, &ch);
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
    fcl__io io = pass == FCL_PASS_FORWARD
                     ? fcl__io_naive_forward(lim, desc, 1, (unsigned)ch.chunks)
                     : fcl__io_naive_backward(lim, desc, (unsigned)ch.chunks);
    (void)io;
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
  fcl_attention_desc desc;
  memset(&desc, 0, sizeof desc);
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

  fcl_plan hint;
  memset(&hint, 0, sizeof hint);
  const int use_hint = (int)(take(&r, 1) & 1);
  hint.block_k = (unsigned)take(&r, 2);
  hint.wg_size = (unsigned)take(&r, 2);
  hint.threads_per_row = (unsigned)take(&r, 2);
  hint.rows_per_thread = (unsigned)take(&r, 2);
  const uint64_t scratch = take_size(&r);
  const size_t why_len = (size_t)(take(&r, 2) % 300);
  hint.kernel = (unsigned)(take(&r, 1) % 4);
  lim.nvidia_sm = (unsigned)take(&r, 1);

  /* Validation. */
  fcl__shape shape;
  memset(&shape, 0, sizeof shape);
  const fcl_status desc_st = fcl__check_desc(NULL, &desc, &shape);
  check_desc(&desc, desc_st, &shape);
  char why[300];
  memset(why, 'x', sizeof why);
  CHECK(fcl__check_desc_why(&desc, NULL, why, why_len) == desc_st);
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
  fcl_status st = use_hint ? fcl__plan_flash(&lim, &desc, pass, h, &plan, why, why_len)
                           : fcl_plan_flash(&lim, &desc, pass, &plan, why, why_len);
  CHECK(valid_status(st));
  CHECK(st == FCL_SUCCESS || st == FCL_ERROR_INVALID_ARGUMENT ||
        st == FCL_ERROR_INVALID_SHAPE || st == FCL_ERROR_UNSUPPORTED);
  check_why(why, why_len);
  fcl_status st2 = fcl__plan_flash(&lim, &desc, pass, h, &again, NULL, 0);
  CHECK(st2 == st);
  if (st == FCL_SUCCESS) {
    CHECK(desc_st == FCL_SUCCESS);
    CHECK(pass == FCL_PASS_FORWARD || pass == FCL_PASS_BACKWARD);
    if (use_hint) CHECK(hint_st == FCL_SUCCESS);
    CHECK(same_plan(&plan, &again));
    check_plan(&lim, &desc, pass, h, &plan);
    /* The model walks the query blocks: keep the fuzzer's units quick. */
    if (desc.seqlen_q / plan.block_q < 100000) {
      fcl__io io = fcl__io_flash_forward(&desc, &plan, 1);
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
  /* NULL arguments. */
  CHECK(fcl_plan_flash(NULL, &desc, pass, &plan, NULL, 0) == FCL_ERROR_INVALID_ARGUMENT);
  CHECK(fcl_plan_flash(&lim, NULL, pass, &plan, why, why_len) == FCL_ERROR_INVALID_ARGUMENT);
  CHECK(fcl_plan_flash(&lim, &desc, pass, NULL, why, why_len) == FCL_ERROR_INVALID_ARGUMENT);

  /* What the naive algorithm and the run info derive from a valid desc. */
  if (desc_st == FCL_SUCCESS) {
    check_chunking(&desc, &lim, scratch);
    double flops = fcl_attention_flops(&desc, FCL_PASS_FORWARD);
    CHECK(flops > 0 && isfinite(flops));
  }
  return 0;
}
