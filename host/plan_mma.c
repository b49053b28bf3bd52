/*
 * plan_mma.c — the tiling of the tensor-core forward (cl/flash_fwd_mma.cl).
 * Pure, like plan.c, which calls it.
 *
 * The kernel's shape is fixed by the instructions: a warp owns tiles of 16
 * query rows, and inside one a row's four lanes each hold two columns of
 * the score and output tiles. What is left to choose:
 *   - tiles per warp: one (rows_per_thread 2). Two (rows_per_thread 4,
 *     by a hint only) let every fragment read from local memory feed two
 *     instructions, for twice the registers of Q, the accumulator and the
 *     scores; on the H200 that was slower in every case measured (f32
 *     0.6-0.8x, f16 0.7-0.8x at N = 4096: registers spill), so it is not
 *     the default;
 *   - warps per work-group: 8 (Br = 128 rows sharing each K/V tile, so K
 *     and V are read from global memory half as often as with 4: on the
 *     H200 that was 6-33% faster in every dtype, d and mask measured,
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
#define MMA_WARPS 8u
#define MMA_MAX_WG 512u
#define MMA_MIN_BLOCK_K 16u

int fcl__mma_native(const fcl_device_limits *limits) {
  return limits->nvidia_ptx && limits->nvidia_sm >= 80;
}

/* The head dims the kernel takes: whole groups of four elements that are
 * all in or all out (LOAD_TILE), fragments up to 128 columns. */
static int mma_takes_head_dim(size_t d) { return d % 8 == 0 && d <= MMA_MAX_HEAD_DIM; }

/* f32 pays three instructions per product (3xTF32) and the splitting of
 * every operand: on an H200 at N = 4096, 8 warps, it ran 1.08-1.19x the
 * SIMT kernel at d = 64 and 1.16-1.22x at d = 128 (docs/performance.md,
 * v3e); below d = 64 it is unmeasured. 16-bit types were 4-6x faster. */
int fcl__mma_suits(const fcl_device_limits *limits, const fcl_attention_desc *desc) {
  if (desc->dtype == FCL_DTYPE_F32 && desc->head_dim < 64) return 0;
  return fcl__mma_native(limits) && mma_takes_head_dim(desc->head_dim);
}

size_t fcl__flash_mma_local_bytes(const fcl_plan *plan, int emulate) {
  const size_t pad = plan->tile_elem_size == 4 ? 4 : 8;
  size_t bytes = 2 * (size_t)plan->block_k * (plan->head_dim_padded + pad) *
                 plan->tile_elem_size;
  if (emulate) bytes += (size_t)plan->wg_size / 32 * (16 * 16 + 16 * 8) * 4 +
                        (size_t)plan->wg_size * 4;
  return bytes;
}

fcl_status fcl__plan_forward_mma(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc, const fcl_plan *hint,
                                 fcl_plan *out, char *why, size_t why_len) {
  const unsigned elem = (unsigned)fcl_dtype_size(desc->dtype);
  if (!mma_takes_head_dim(desc->head_dim)) {
    fcl__say(why, why_len,
             "the MMA kernel takes head_dim up to %u that is a multiple of 8, not %zu",
             MMA_MAX_HEAD_DIM, desc->head_dim);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (hint && ((hint->threads_per_row && hint->threads_per_row != 4) ||
               (hint->rows_per_thread && hint->rows_per_thread != 2 &&
                hint->rows_per_thread != 4) ||
               (hint->tile_elem_size && hint->tile_elem_size != elem))) {
    fcl__say(why, why_len,
             "the MMA kernel's layout is fixed: threads_per_row 4, rows_per_thread 2 or 4 "
             "(one or two 16-row tiles per warp), tile_elem_size %u for %s",
             elem, fcl_dtype_name(desc->dtype));
    return FCL_ERROR_UNSUPPORTED;
  }
  const int fixed_wg = hint && hint->wg_size, fixed_bk = hint && hint->block_k;
  if ((fixed_wg && (hint->wg_size % 32 || hint->wg_size > MMA_MAX_WG)) ||
      (fixed_bk && hint->block_k % 16)) {
    fcl__say(why, why_len,
             "the MMA kernel needs wg_size a multiple of 32 up to %u and block_k a "
             "multiple of 16 (got %u and %u)",
             MMA_MAX_WG, fixed_wg ? hint->wg_size : 0, fixed_bk ? hint->block_k : 0);
    return FCL_ERROR_UNSUPPORTED;
  }

  fcl_plan plan = {0};
  plan.kernel = FCL_FLASH_KERNEL_MMA;
  plan.head_dim_padded = (unsigned)(desc->head_dim + 15) / 16 * 16;
  plan.threads_per_row = 4;
  plan.rows_per_thread = hint && hint->rows_per_thread ? hint->rows_per_thread : 2;
  plan.tile_elem_size = elem;

  unsigned wg = fixed_wg ? hint->wg_size : 32 * MMA_WARPS;
  if (!fixed_wg) {
    while (wg > 32 && wg > limits->max_work_group_size) wg /= 2;
    const size_t want = 2 * (size_t)(limits->compute_units ? limits->compute_units : 1);
    for (;;) {
      const size_t block = (size_t)wg / 4 * plan.rows_per_thread;
      const size_t groups = desc->batch * desc->heads_q * ((desc->seqlen_q + block - 1) / block);
      if (groups >= want || wg <= 32) break;
      wg /= 2;
    }
  }
  if (wg > limits->max_work_group_size) {
    fcl__say(why, why_len, "a work-group of %u work-items exceeds the device's limit of %zu",
             wg, limits->max_work_group_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.wg_size = wg;

  const uint64_t budget = fcl__local_budget(limits);
  const int emulate = !fcl__mma_native(limits);
  plan.block_k = fixed_bk ? hint->block_k : elem == 4 && plan.head_dim_padded > 64 ? 32 : 64;
  /* Smaller key tiles, then (for the emulation's scratch) fewer warps. */
  while (fcl__flash_mma_local_bytes(&plan, emulate) > budget) {
    if (!fixed_bk && plan.block_k > MMA_MIN_BLOCK_K)
      plan.block_k /= 2;
    else if (!fixed_wg && emulate && plan.wg_size > 32)
      plan.wg_size /= 2;
    else
      break;
  }
  plan.block_q = plan.wg_size / 4 * plan.rows_per_thread;  /* 16 rows per warp and tile */
  plan.local_bytes = fcl__flash_mma_local_bytes(&plan, emulate);
  if (plan.local_bytes > budget) {
    fcl__say(why, why_len,
             "head_dim %zu needs %zu bytes of local memory per work-group in the MMA "
             "kernel; the device allows %zu",
             desc->head_dim, plan.local_bytes, (size_t)budget);
    return FCL_ERROR_UNSUPPORTED;
  }
  *out = plan;
  return FCL_SUCCESS;
}
