/*
 * plan_mma.c — the tilings of the tensor-core kernels: the forward
 * (cl/flash_fwd_mma.cl) here, the backward (cl/flash_bwd_mma.cl) further
 * down. Pure, like plan.c, which calls it.
 *
 * The kernels' shape is fixed by the instructions: a warp owns 16 rows, and
 * a row's four lanes each hold two columns of the score and output tiles.
 * What is left to choose for the forward:
 *   - one 16-row tile per warp. Two per warp would let every fragment
 *     read from local memory feed two instructions, for twice the
 *     registers of Q, the accumulator and the scores: on the H200 that ran
 *     0.6-0.8x as fast in every case measured (docs/performance.md, v3e),
 *     and was dropped;
 *   - warps per work-group: 8 (Br = 128 rows sharing each K/V tile, so K
 *     and V are read from global memory half as often as with 4: on the
 *     H200 that was 6-34% faster in every dtype, d and mask measured,
 *     docs/performance.md v3e), halved down to one while the launch has
 *     fewer than two work-groups per compute unit, as in the SIMT rule;
 *   - Bc, from the registers first: a lane keeps its Q fragments (d/2
 *     floats in f32, d/4 words in 16-bit types), its accumulator (d/2
 *     floats) and Bc/2 scores. 64 keys fit everywhere but f32 beyond
 *     d = 64, where q and the accumulator already take 128 registers: 32;
 *   - then local memory: two tiles of Bc rows of HEAD_DIM_MAX + pad
 *     elements in the storage type (f32: 4 floats of pad, 16-bit: 8),
 *     halved down to 16 keys until they fit. At d = 128 that is 33 KiB (f32,
 *     Bc 32) or 34 KiB (16-bit, Bc 64) of NVIDIA's 47.
 * Without the instructions (emulation) the kernel also needs its scratch:
 * 1.5 KiB per warp and a float per work-item.
 */
#include "internal.h"

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

/* The forward: f32 pays three instructions per product (3xTF32) and the
 * splitting of every operand: on an H200 at N = 4096, 8 warps, it ran
 * 1.08-1.19x the SIMT kernel at d = 64 and 1.16-1.23x at d = 128
 * (docs/performance.md, v3e); below d = 64 it is unmeasured. 16-bit types
 * were 4-6x faster.
 * The backward: 16-bit types only (f32 misses the accuracy rule,
 * fcl__plan_backward_mma). Its fwd+bwd ran 5.2-6.1x the SIMT backward's on
 * an H200 at N = 4096, d = 64 and 128 (docs/performance.md, v4). */
int fcl__mma_suits(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                   fcl_pass pass) {
  if (desc->dtype == FCL_DTYPE_F32 && (pass == FCL_PASS_BACKWARD || desc->head_dim < 64))
    return 0;
  return fcl__mma_native(limits) && mma_takes_head_dim(desc->head_dim);
}

/* What the MMA kernels' fixed layout lets a hint set: one 16-row tile per
 * warp (threads_per_row 4, rows_per_thread 2), tiles in the storage type,
 * warps of 32; block_k is checked by each planner. */
static fcl_status check_mma_hint(const fcl_attention_desc *desc, const fcl_plan *hint,
                                 char *why, size_t why_len) {
  const unsigned elem = (unsigned)fcl_dtype_size(desc->dtype);
  if (!mma_takes_head_dim(desc->head_dim)) {
    fcl__say(why, why_len,
             "the MMA kernels take head_dim up to %u that is a multiple of 8, not %zu",
             MMA_MAX_HEAD_DIM, desc->head_dim);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (!hint) return FCL_SUCCESS;
  if ((hint->threads_per_row && hint->threads_per_row != 4) ||
      (hint->rows_per_thread && hint->rows_per_thread != 2) ||
      (hint->tile_elem_size && hint->tile_elem_size != elem)) {
    fcl__say(why, why_len,
             "the MMA kernels' layout is fixed: threads_per_row 4, rows_per_thread 2 (one "
             "16-row tile per warp), tile_elem_size %u for %s",
             elem, fcl_dtype_name(desc->dtype));
    return FCL_ERROR_UNSUPPORTED;
  }
  if (hint->wg_size && (hint->wg_size % 32 || hint->wg_size > MMA_MAX_WG)) {
    fcl__say(why, why_len, "the MMA kernels need wg_size a multiple of 32 up to %u, not %u",
             MMA_MAX_WG, hint->wg_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  return FCL_SUCCESS;
}

size_t fcl__flash_mma_local_bytes(const fcl_plan *plan, int emulate) {
  const size_t pad = plan->tile_elem_size == 4 ? 4 : 8;
  size_t bytes = 2 * (size_t)plan->block_k * (plan->head_dim_padded + pad) *
                 plan->tile_elem_size;
  if (emulate) bytes += (size_t)plan->wg_size / 32 * (16 * 16 + 16 * 8) * 4 +
                        (size_t)plan->wg_size * 4;
  return bytes;
}

/* The planner's work-group: `warps` warps, halved while the device's limit
 * is smaller, and while a launch of `groups(wg / 2)` work-groups leaves the
 * device with fewer than two per compute unit. */
static unsigned mma_wg(const fcl_device_limits *limits, unsigned warps,
                       size_t (*groups)(const fcl_attention_desc *, size_t),
                       const fcl_attention_desc *desc) {
  unsigned wg = 32 * warps;
  while (wg > 32 && wg > limits->max_work_group_size) wg /= 2;
  const size_t want = 2 * (size_t)(limits->compute_units ? limits->compute_units : 1);
  while (wg > 32 && groups(desc, wg / 2) < want) wg /= 2;
  return wg;
}

static size_t query_blocks(const fcl_attention_desc *desc, size_t block) {
  return desc->batch * desc->heads_q * ((desc->seqlen_q + block - 1) / block);
}

static size_t key_blocks(const fcl_attention_desc *desc, size_t block) {
  return desc->batch * desc->heads_kv * ((desc->seqlen_k + block - 1) / block);
}

/* The plan's layout fields and work-group, shared by both passes. */
static fcl_status mma_layout(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                             unsigned wg, fcl_plan *plan, char *why, size_t why_len) {
  if (wg > limits->max_work_group_size) {
    fcl__say(why, why_len, "a work-group of %u work-items exceeds the device's limit of %zu",
             wg, limits->max_work_group_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  *plan = (fcl_plan){.kernel = FCL_FLASH_KERNEL_MMA,
                     .head_dim_padded = (unsigned)(desc->head_dim + 15) / 16 * 16,
                     .threads_per_row = 4,
                     .rows_per_thread = 2,
                     .tile_elem_size = (unsigned)fcl_dtype_size(desc->dtype),
                     .wg_size = wg,
                     .block_q = wg / 2};
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

fcl_status fcl__plan_forward_mma(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc, const fcl_plan *hint,
                                 fcl_plan *out, char *why, size_t why_len) {
  FCL_FORWARD_IF(check_mma_hint(desc, hint, why, why_len));
  if (hint && hint->block_k % 16) {
    fcl__say(why, why_len, "the MMA forward needs block_k a multiple of 16, not %u",
             hint->block_k);
    return FCL_ERROR_UNSUPPORTED;
  }
  const int fixed_wg = hint && hint->wg_size, fixed_bk = hint && hint->block_k;
  fcl_plan plan;
  FCL_FORWARD_IF(mma_layout(limits, desc,
                            fixed_wg ? hint->wg_size
                                     : mma_wg(limits, MMA_WARPS, query_blocks, desc),
                            &plan, why, why_len));
  const uint64_t budget = fcl__local_budget(limits);
  const int emulate = !fcl__mma_native(limits);
  plan.block_k = fixed_bk                                               ? hint->block_k
                 : plan.tile_elem_size == 4 && plan.head_dim_padded > 64 ? 32
                                                                         : 64;
  /* Smaller key tiles, then (for the emulation's scratch) fewer warps. */
  while (fcl__flash_mma_local_bytes(&plan, emulate) > budget) {
    if (!fixed_bk && plan.block_k > MMA_MIN_BLOCK_K)
      plan.block_k /= 2;
    else if (!fixed_wg && emulate && plan.wg_size > 32)
      plan.wg_size /= 2;
    else
      break;
  }
  plan.block_q = plan.wg_size / 2;  /* 16 rows per warp */
  plan.local_bytes = fcl__flash_mma_local_bytes(&plan, emulate);
  if (plan.local_bytes > budget) return too_big(desc, &plan, budget, "forward", why, why_len);
  *out = plan;
  return FCL_SUCCESS;
}

/* The backward's two kernels (flash_bwd_mma.cl) share one block: a
 * work-group owns 16 rows per warp (keys in dK/dV, queries in dQ) and
 * streams tiles of as many rows of the other side. Its local memory is two
 * such tiles in the storage type plus LSE and D of a query tile. 4 warps
 * (blocks of 64; on the H200 faster than 2 or 8, and than 4 with twice the
 * scores per step: docs/performance.md, v4) halved while the launch does
 * not fill the device or the tiles do not fit. f16 and bf16 only. */
size_t fcl__flash_bwd_mma_local_bytes(const fcl_plan *plan, int emulate) {
  /* the forward's two tiles (and scratch), and LSE and D of a query tile */
  return fcl__flash_mma_local_bytes(plan, emulate) + 2 * (size_t)plan->block_k * sizeof(float);
}

fcl_status fcl__plan_backward_mma(const fcl_device_limits *limits,
                                  const fcl_attention_desc *desc, const fcl_plan *hint,
                                  fcl_plan *out, char *why, size_t why_len) {
  /* Tensor cores truncate the products of an instruction (most likely
   * each, aligned to the largest: mma.cl's MMA_EMULATE_ALIGN): dK = dS^T Q
   * sums products that cancel, and on an H200 its error reached 7x the
   * naive algorithm's at head_dim 16 (the rule is 3x; PoCL's default
   * emulation, which truncates only the exact sum, stayed at 1.3x).
   * 16-bit types, whose P and dS are rounded to 11 or 8 bits anyway, are
   * within their rule. */
  if (desc->dtype == FCL_DTYPE_F32) {
    fcl__say(why, why_len,
             "the MMA backward takes f16 and bf16: in f32 the tensor cores' truncating "
             "sums exceed the accuracy rule");
    return FCL_ERROR_UNSUPPORTED;
  }
  FCL_FORWARD_IF(check_mma_hint(desc, hint, why, why_len));
  /* A hint's block_k sets the work-group as wg_size does: 2 work-items per
   * row of the block. */
  const unsigned hint_wg = hint ? hint->wg_size : 0, hint_bk = hint ? hint->block_k : 0;
  if (hint_bk &&
      (hint_bk % 16 || 2 * hint_bk > MMA_MAX_WG || (hint_wg && hint_wg != 2 * hint_bk))) {
    fcl__say(why, why_len,
             "the MMA backward's tiles are as long as its blocks, 16 rows per warp of 32 "
             "work-items: block_k %u does not fit wg_size %u (at most %u)",
             hint_bk, hint_wg ? hint_wg : 2 * hint_bk, MMA_MAX_WG);
    return FCL_ERROR_UNSUPPORTED;
  }
  const int fixed_wg = hint_wg || hint_bk;
  const unsigned wg = hint_wg   ? hint_wg
                      : hint_bk ? 2 * hint_bk
                                : mma_wg(limits, MMA_BWD_WARPS, key_blocks, desc);
  fcl_plan plan;
  FCL_FORWARD_IF(mma_layout(limits, desc, wg, &plan, why, why_len));
  const uint64_t budget = fcl__local_budget(limits);
  const int emulate = !fcl__mma_native(limits);
  plan.block_k = plan.block_q;
  while (!fixed_wg && plan.wg_size > 32 &&
         fcl__flash_bwd_mma_local_bytes(&plan, emulate) > budget) {
    plan.wg_size /= 2;
    plan.block_q = plan.block_k = plan.wg_size / 2;
  }
  plan.local_bytes = fcl__flash_bwd_mma_local_bytes(&plan, emulate);
  if (plan.local_bytes > budget) return too_big(desc, &plan, budget, "backward", why, why_len);
  *out = plan;
  return FCL_SUCCESS;
}
