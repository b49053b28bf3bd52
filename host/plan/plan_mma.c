/*
 * plan_mma.c — the tilings of the tensor-core kernels: the forward
 * (cl/flash_fwd_mma.cl) here, the backward (cl/flash_bwd_mma.cl) further
 * down. Pure, like plan.c, which calls it.
 *
 * The kernels' shape is fixed by the instructions: a warp owns 16 rows, and
 * a row's four lanes each hold two columns of the score and output tiles.
 * What is left to choose for the forward (docs/design.md, "The rules,
 * measured", says why each is what it is):
 *   - one 16-row tile per warp: two would double the registers of Q, the
 *     accumulator and the scores, and lost wherever they were measured
 *     (v3e, v21). A hint's rows_per_thread 4 takes two (M_TILES 2, each
 *     B fragment read once for both): half the warps, the same rows a
 *     work-group, Q in local memory beyond d = 64 (traits.h);
 *   - warps per work-group: 8 (Br = 128 rows share each K/V tile, read
 *     from global memory half as often as with 4), halved down to one
 *     while the launch has fewer than two work-groups per compute unit, as
 *     in the SIMT rule; 4 over 128-key tiles in 16-bit types at d <= 64
 *     with a causal mask (below);
 *   - Bc, from the registers first: a lane keeps its Q fragments (d/2
 *     floats in f32, d/4 words in 16-bit types), its accumulator (d/2
 *     floats) and Bc/2 scores. 64 keys fit everywhere but f32 beyond
 *     d = 64, where q and the accumulator already take 128 registers: 32;
 *     the 16-bit causal rule's 4 warps take 128 at d <= 64;
 *   - then local memory: two tiles of Bc rows of HEAD_DIM_MAX + pad
 *     elements in the storage type (f32: 4 floats of pad, 16-bit: 8),
 *     halved down to 16 keys until they fit. At d = 128 that is 33 KiB
 *     (f32, Bc 32) or 34 KiB (16-bit, Bc 64) of NVIDIA's 47. A second V
 *     tile (fcl_plan.v_stages 2, a hint's) is a third tile: 16-bit tiles
 *     of at most 64 keys.
 * Without the instructions (emulation) the kernel also needs its scratch:
 * 1.5 KiB per warp and a float per work-item.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"
#include "rules.h"

#define MMA_MAX_HEAD_DIM 128u
#define MMA_WARPS 8u      /* the forward's */
#define MMA_BWD_WARPS 4u  /* the backward's */
#define MMA_MAX_WG 512u
#define MMA_MIN_BLOCK_K 16u

int fcl__mma_native(const fcl_device_limits *limits) {
  return limits->nvidia_ptx && limits->nvidia_sm >= 80;
}

/* The head dims the kernel takes: whole groups of four elements that are
 * all in or all out (LOAD_TILE), fragments up to 128 columns. */
static int mma_takes_head_dim(size_t d) { return d % 8 == 0 && d <= MMA_MAX_HEAD_DIM; }

/* The tensor cores by default where they run natively; in f32 (3xTF32,
 * three instructions a product) from d = 64, where they were faster than
 * SIMT in both passes and within the accuracy rule, which the truncating
 * sums broke at d = 16 (docs/design.md, "The rules, measured"). */
int fcl__mma_suits(const fcl_device_limits *limits, const fcl_attention_desc *desc) {
  if (desc->dtype == FCL_DTYPE_F32 && desc->head_dim < 64) return 0;
  return fcl__mma_native(limits) && mma_takes_head_dim(desc->head_dim);
}

/* head_dim rounded up to whole 16-column k-steps of the 16-bit instructions. */
static unsigned mma_head_dim_padded(const fcl_attention_desc *desc) {
  return (unsigned)(desc->head_dim + 15) / 16 * 16;
}

/* The backward's warp pairs (threads_per_row 8) each take half of the
 * padded head_dim, which must hold whole k-steps. */
static int mma_head_splits(const fcl_attention_desc *desc) {
  return mma_head_dim_padded(desc) % 32 == 0;
}

/* What the MMA kernels' fixed layout lets a hint set: one 16-row tile per
 * warp (rows_per_thread 2; in the forward also two, 4), a row's four lanes of one warp
 * (threads_per_row 4) or, in the backward, of a pair of warps that split
 * head_dim (8), tiles in the storage type, warps of 32; block_k is checked
 * by each planner. */
static fcl_status check_mma_hint(const fcl_attention_desc *desc, fcl_pass pass,
                                 const fcl_plan *hint, char *why, size_t why_len) {
  const unsigned elem = (unsigned)fcl_dtype_size(desc->dtype);
  if (!mma_takes_head_dim(desc->head_dim)) {
    fcl__say(why, why_len,
             "the MMA kernels take head_dim up to %u that is a multiple of 8, not %zu",
             MMA_MAX_HEAD_DIM, desc->head_dim);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (!hint) return FCL_SUCCESS;
  const unsigned tpr = hint->threads_per_row;
  const int pairs = pass == FCL_PASS_BACKWARD && tpr == 8;
  const unsigned rpt = hint->rows_per_thread;
  if ((tpr && tpr != 4 && !pairs) ||
      (rpt && rpt != 2 && !(pass == FCL_PASS_FORWARD && rpt == 4)) ||
      (hint->tile_elem_size && hint->tile_elem_size != elem)) {
    fcl__say(why, why_len,
             "the MMA kernels' layout is fixed: threads_per_row 4 (8 in the backward: warp "
             "pairs that split head_dim), rows_per_thread 2 (one 16-row tile per warp; 4 in "
             "the forward: two), tile_elem_size %u for %s",
             elem, fcl_dtype_name(desc->dtype));
    return FCL_ERROR_UNSUPPORTED;
  }
  if (pairs && !mma_head_splits(desc)) {
    fcl__say(why, why_len,
             "the MMA backward's warp pairs (threads_per_row 8) split head_dim into halves "
             "of whole 16-column steps: head_dim %zu pads to %u",
             desc->head_dim, mma_head_dim_padded(desc));
    return FCL_ERROR_UNSUPPORTED;
  }
  if (hint->wg_size && (hint->wg_size % 32 || hint->wg_size > MMA_MAX_WG)) {
    fcl__say(why, why_len, "the MMA kernels need wg_size a multiple of 32 up to %u, not %u",
             MMA_MAX_WG, hint->wg_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  return FCL_SUCCESS;
}

unsigned fcl__flash_mma_m_tiles(const fcl_plan *plan) { return plan->rows_per_thread / 2; }

size_t fcl__flash_mma_local_bytes(const fcl_plan *plan, int emulate) {
  return FCL_MMA_FWD_LOCAL_BYTES((size_t)plan->head_dim_padded, (size_t)plan->block_k,
                                 (size_t)plan->wg_size / 32, (size_t)plan->tile_elem_size,
                                 emulate, (size_t)fcl__flash_mma_m_tiles(plan),
                                 (size_t)(plan->v_stages == 2 ? 2 : 1));
}

/* The planner's work-group: `warps` warps, `per_row` of them to each 16
 * rows (1, or a warp pair), halved while the device's limit is smaller,
 * and while a launch of `groups(block)` work-groups, for the rows it owns,
 * leaves the device with fewer than two per compute unit (groups NULL: not
 * for that). */
static unsigned mma_wg(const fcl_device_limits *limits, unsigned warps, unsigned per_row,
                       size_t (*groups)(const fcl_attention_desc *, size_t),
                       const fcl_attention_desc *desc) {
  unsigned wg = 32 * warps;
  while (wg > 32 * per_row && wg > limits->max_work_group_size) wg /= 2;
  const size_t want = 2 * (size_t)fcl__compute_units(limits);
  while (groups && wg > 32 * per_row && groups(desc, wg / 2 / per_row) < want) wg /= 2;
  return wg;
}

static size_t query_blocks(const fcl_attention_desc *desc, size_t block) {
  return desc->batch * desc->heads_q * ((desc->seqlen_q + block - 1) / block);
}

static size_t key_blocks(const fcl_attention_desc *desc, size_t block) {
  return desc->batch * desc->heads_kv * ((desc->seqlen_k + block - 1) / block);
}

/* Rows a work-group of `wg` work-items owns: 16 per warp, or per pair. */
static unsigned mma_block(unsigned wg, unsigned threads_per_row) {
  return wg * 2 / threads_per_row;
}

/* The plan's layout fields and work-group, shared by both passes. */
static fcl_status mma_layout(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                             unsigned wg, unsigned threads_per_row, fcl_plan *plan, char *why,
                             size_t why_len) {
  if (wg > limits->max_work_group_size) {
    fcl__say(why, why_len, "a work-group of %u work-items exceeds the device's limit of %zu",
             wg, limits->max_work_group_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (wg % (8 * threads_per_row)) {
    fcl__say(why, why_len, "the MMA backward's warp pairs need an even number of warps, "
             "not a work-group of %u work-items", wg);
    return FCL_ERROR_UNSUPPORTED;
  }
  *plan = (fcl_plan){.kernel = FCL_FLASH_KERNEL_MMA,
                     .head_dim_padded = mma_head_dim_padded(desc),
                     .threads_per_row = threads_per_row,
                     .rows_per_thread = 2,
                     .tile_elem_size = (unsigned)fcl_dtype_size(desc->dtype),
                     .wg_size = wg,
                     .block_q = mma_block(wg, threads_per_row)};
  return FCL_SUCCESS;
}

static fcl_status too_big(const fcl_attention_desc *desc, const fcl_plan *plan,
                          uint64_t budget, const char *pass, char *why, size_t why_len) {
  fcl__say(why, why_len,
           "head_dim %zu needs %zu bytes of local memory per work-group in the MMA %s; "
           "the device allows %zu",
           desc->head_dim, plan->local_bytes, pass, (size_t)budget);
  return FCL_ERROR_UNSUPPORTED;
}

fcl_status fcl__plan_forward_mma(const fcl_device_limits *limits, const fcl__shape *sh,
                                 const fcl_attention_desc *desc, const fcl_plan *hint,
                                 fcl_plan *out, char *why, size_t why_len) {
  (void)sh;
  FCL_FORWARD_IF(check_mma_hint(desc, FCL_PASS_FORWARD, hint, why, why_len));
  if (hint && hint->block_k % 16) {
    fcl__say(why, why_len, "the MMA forward needs block_k a multiple of 16, not %u",
             hint->block_k);
    return FCL_ERROR_UNSUPPORTED;
  }
  const int fixed_wg = hint && hint->wg_size, fixed_bk = hint && hint->block_k;
  /* 16-bit, causal, d <= 64: 4 warps over 128-key tiles (half the rows
   * past the diagonal, twice the keys between barriers), which measured
   * faster than 8 warps over 64 (docs/design.md, "The rules, measured"). */
  const int causal_short = desc->dtype != FCL_DTYPE_F32 && desc->causal &&
                           mma_head_dim_padded(desc) <= 64;
  /* Two row tiles a warp (a hint's rows_per_thread 4) in half the warps:
   * the rules' rows a work-group. */
  const unsigned m_tiles = hint && hint->rows_per_thread == 4 ? 2 : 1;
  unsigned wg = fixed_wg ? hint->wg_size
                         : mma_wg(limits, causal_short ? MMA_WARPS / 2 : MMA_WARPS, 1,
                                  /* batch-invariant: not shrunk to fill the device,
                                     which may change the tile */
                                  desc->batch_invariant ? NULL : query_blocks, desc);
  if (!fixed_wg && m_tiles == 2 && wg > 32) wg /= 2;
  fcl_plan plan;
  FCL_FORWARD_IF(mma_layout(limits, desc, wg, 4, &plan, why, why_len));
  plan.rows_per_thread = 2 * m_tiles;
  const uint64_t budget = fcl__local_budget(limits);
  const int emulate = !fcl__mma_native(limits);
  const int q_in_local = FCL_MMA_FWD_Q_IN_LOCAL(plan.head_dim_padded, m_tiles);
  /* Two row tiles hold two tiles of scores: Bc / 2 registers each, so
   * 64 keys in 16-bit types and 32 in f32 (v21: 128 spilled at d = 64,
   * 32 was the faster f32 tile). */
  const unsigned two_tiles_bk = plan.tile_elem_size == 4 ? 32 : 64;
  plan.block_k = fixed_bk                                               ? hint->block_k
                 : m_tiles == 2                                          ? two_tiles_bk
                 : causal_short                                          ? 128
                 : plan.tile_elem_size == 4 && plan.head_dim_padded > 64 ? 32
                                                                         : 64;
  /* V's tiles: a hint's, else one (docs/design.md, "The rules, measured");
   * two take tiles of at most 64 keys */
  plan.v_stages = hint && hint->v_stages ? hint->v_stages : 1;
  if (plan.v_stages == 2 && !fixed_bk && plan.block_k > 64) plan.block_k = 64;
  /* Smaller key tiles, then (for the emulation's scratch, or Q's
   * fragments) fewer warps, while local memory does not fit. */
  while (fcl__flash_mma_local_bytes(&plan, emulate) > budget) {
    if (!fixed_bk && plan.block_k > MMA_MIN_BLOCK_K)
      plan.block_k /= 2;
    else if (!fixed_wg && (emulate || q_in_local) && plan.wg_size > 32)
      plan.wg_size /= 2;
    else
      break;
  }
  if (plan.v_stages == 2 && !FCL_MMA_FWD_TWO_BARRIERS(plan.tile_elem_size, plan.block_k)) {
    fcl__say(why, why_len,
             "the MMA forward keeps a second V tile (v_stages 2) with 16-bit tiles of at most "
             "64 keys, not %s tiles of %u",
             fcl_dtype_name(desc->dtype), plan.block_k);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.block_q = FCL_MMA_FWD_BLOCK_Q(plan.wg_size / 32, m_tiles);  /* 16 rows per tile */
  plan.local_bytes = fcl__flash_mma_local_bytes(&plan, emulate);
  if (plan.local_bytes > budget) return too_big(desc, &plan, budget, "forward", why, why_len);
  *out = plan;
  return FCL_SUCCESS;
}

/* The backward's two kernels (flash_bwd_mma.cl) share one block: a
 * work-group owns 16 rows per warp, or per warp pair (keys in dK/dV,
 * queries in dQ), and streams tiles of as many rows of the other side.
 * Its local memory is two such tiles in the storage type, LSE and D of a
 * query tile, and where warps pair, what they exchange. Blocks of 64 rows
 * (4 warps), halved while the launch does not fill the device or the
 * tiles do not fit.
 *
 * Warp pairs in f32 beyond head_dim 64, where a lane's K and V fragments
 * and dK and dV accumulators would take 2 d floats (256 at d = 128); one
 * warp per 16 rows elsewhere (docs/design.md, "The rules, measured"). */
size_t fcl__flash_bwd_mma_local_bytes(const fcl_plan *plan, int emulate, int row_keys) {
  return FCL_MMA_BWD_LOCAL_BYTES((size_t)plan->head_dim_padded, (size_t)plan->wg_size / 32,
                                 (size_t)plan->threads_per_row / 4,
                                 (size_t)FCL__MMA_BWD_SUB_TILES, (size_t)plan->tile_elem_size,
                                 emulate, row_keys);
}

static unsigned mma_bwd_threads_per_row(const fcl_attention_desc *desc) {
  return desc->dtype == FCL_DTYPE_F32 && mma_head_dim_padded(desc) > 64 &&
                 mma_head_splits(desc)
             ? 8
             : 4;
}

fcl_status fcl__plan_backward_mma(const fcl_device_limits *limits, const fcl__shape *sh,
                                  const fcl_attention_desc *desc, const fcl_plan *hint,
                                  fcl_plan *out, char *why, size_t why_len) {
  (void)sh;
  FCL_FORWARD_IF(check_mma_hint(desc, FCL_PASS_BACKWARD, hint, why, why_len));
  const unsigned tpr = hint && hint->threads_per_row ? hint->threads_per_row
                                                     : mma_bwd_threads_per_row(desc);
  /* A hint's block_k sets the work-group as wg_size does: tpr / 2
   * work-items per row of the block. */
  const unsigned hint_wg = hint ? hint->wg_size : 0, hint_bk = hint ? hint->block_k : 0;
  const unsigned bk_wg = hint_bk * tpr / 2;
  if (hint_bk && (hint_bk % 16 || bk_wg > MMA_MAX_WG || (hint_wg && hint_wg != bk_wg))) {
    fcl__say(why, why_len,
             "the MMA backward's tiles are as long as its blocks, 16 rows per %s of 32 "
             "work-items: block_k %u does not fit wg_size %u (at most %u)",
             tpr == 8 ? "warp pair" : "warp", hint_bk, hint_wg ? hint_wg : bk_wg, MMA_MAX_WG);
    return FCL_ERROR_UNSUPPORTED;
  }
  const int fixed_wg = hint_wg || hint_bk;
  const unsigned per_row = tpr / 4;
  const unsigned wg = hint_wg   ? hint_wg
                      : hint_bk ? bk_wg
                                : mma_wg(limits, MMA_BWD_WARPS * per_row, per_row, key_blocks,
                                         desc);
  fcl_plan plan;
  FCL_FORWARD_IF(mma_layout(limits, desc, wg, tpr, &plan, why, why_len));
  const uint64_t budget = fcl__local_budget(limits);
  const int emulate = !fcl__mma_native(limits), row_keys = fcl__row_keys_in_local(desc);
  plan.block_k = plan.block_q;
  while (!fixed_wg && plan.wg_size > 32 * per_row &&
         fcl__flash_bwd_mma_local_bytes(&plan, emulate, row_keys) > budget) {
    plan.wg_size /= 2;
    plan.block_q = plan.block_k = mma_block(plan.wg_size, tpr);
  }
  plan.local_bytes = fcl__flash_bwd_mma_local_bytes(&plan, emulate, row_keys);
  if (plan.local_bytes > budget) return too_big(desc, &plan, budget, "backward", why, why_len);
  plan.splits = plan.packed_heads = 1;
  *out = plan;
  return FCL_SUCCESS;
}
