/*
 * plan_wgmma.c — the tiling of the forward on Hopper's warpgroup MMA
 * (cl/flash_fwd_wgmma.cl), which only a hint asks for. Pure, like plan.c.
 *
 * A warpgroup (128 work-items) owns 64 query rows; a work-group is one
 * to four of them (wg_size 128 to 512: the hint's, else
 * FCL_WGMMA_DEFAULT_WG), sharing tiles of 64 keys (the S product's
 * m64n64; by a hint 32, or 128 at head_dim up to 64); head_dim is padded
 * to the O product's width, 64 or 128; local memory holds K's tile and
 * V's, 2 x keys x width elements (32 KiB at 64 x 128; two stages of each
 * where the tiles are at most 64 x 64, the schedule fcl__wgmma_pipe
 * picks), and the emulations' scratch where they run.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"
#include "rules.h"

#include <stdlib.h>
#include <string.h>

#define WGMMA_ROWS 64u
#define WGMMA_KEYS 64u
#define WGMMA_WG 128u  /* a warpgroup */
#define WGMMA_MAX_HEAD_DIM 128u

int fcl__wgmma_native(const fcl_device_limits *limits) {
  return limits->vendor == FCL_VENDOR_NVIDIA && limits->nvidia_ptx && limits->nvidia_sm == 90;
}

int fcl__wgmma_groups(const fcl_plan *plan) { return (int)(plan->wg_size / WGMMA_WG); }

/* Local memory of a plan with `stages` of K and V. */
static size_t local_bytes(const fcl_device_limits *limits, const fcl_plan *plan, size_t stages) {
  return FCL_WGMMA_FWD_LOCAL_BYTES((size_t)plan->head_dim_padded, (size_t)plan->block_k, stages,
                                   (size_t)fcl__wgmma_groups(plan), !fcl__mma_native(limits),
                                   !limits->nvidia_ptx);
}

int fcl__wgmma_pipe(const fcl_device_limits *limits, const fcl_plan *plan) {
  const int two_stages = plan->head_dim_padded * plan->block_k <= 64 * 64 &&
                         local_bytes(limits, plan, 2) <= fcl__local_budget(limits);
  /* measured on the H100 (v29): two stages where they fit; three
   * warpgroups in 168 registers spill or serialize with pipe 2's overlap */
  const int planned =
      two_stages ? 3 : fcl__wgmma_groups(plan) == 3 ? 1 : FCL_WGMMA_PIPE_DEFAULT;
  const char *env = getenv("FLASHCL_WGMMA_PIPE");
  if (env && (!strcmp(env, "1") || !strcmp(env, "2") || (!strcmp(env, "3") && two_stages)))
    return env[0] - '0';
  return planned;
}

size_t fcl__flash_wgmma_local_bytes(const fcl_device_limits *limits, const fcl_plan *plan) {
  return local_bytes(limits, plan, fcl__wgmma_pipe(limits, plan) == 3 ? 2 : 1);
}

fcl_status fcl__plan_forward_wgmma(const fcl_device_limits *limits, const fcl__shape *sh,
                                   const fcl_attention_desc *desc, const fcl_plan *hint,
                                   fcl_plan *out, char *why, size_t why_len) {
  FCL_WHY_IF(desc->dtype == FCL_DTYPE_F32, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward takes f16 and bf16, not f32");
  FCL_WHY_IF(desc->head_dim > WGMMA_MAX_HEAD_DIM || desc->head_dim % 8, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward takes head_dim up to %u that is a multiple of 8, not %zu",
             WGMMA_MAX_HEAD_DIM, desc->head_dim);
  FCL_WHY_IF(!sh->vec4, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward loads groups of four elements: head_dim and every tensor's "
             "offset and strides must be multiples of 4 elements");
  FCL_WHY_IF(sh->kv_quant, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward takes K and V in the storage type, not a %s KV cache",
             fcl_kv_dtype_name(desc->kv_dtype));

  const unsigned width = desc->head_dim <= 64 ? 64 : WGMMA_MAX_HEAD_DIM;
  FCL_WHY_IF(hint && hint->block_k == 2 * WGMMA_KEYS && width != 64, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward's tiles of %u keys are for head_dim up to 64, not %zu",
             2 * WGMMA_KEYS, desc->head_dim);
  FCL_WHY_IF(hint && ((hint->block_k && hint->block_k != WGMMA_KEYS / 2 &&
                       hint->block_k != WGMMA_KEYS && hint->block_k != 2 * WGMMA_KEYS) ||
                      (hint->wg_size &&
                       (hint->wg_size % WGMMA_WG || hint->wg_size > 4 * WGMMA_WG)) ||
                      (hint->threads_per_row && hint->threads_per_row != 4) ||
                      (hint->rows_per_thread && hint->rows_per_thread != 2) ||
                      (hint->tile_elem_size && hint->tile_elem_size != 2)),
             FCL_ERROR_UNSUPPORTED,
             "the wgmma forward's layout is fixed: block_k %u or %u (or %u at head_dim up to "
             "64), wg_size a multiple of %u up to %u (one to four warpgroups of %u rows), "
             "threads_per_row 4, rows_per_thread 2, tile_elem_size 2",
             WGMMA_KEYS / 2, WGMMA_KEYS, 2 * WGMMA_KEYS, WGMMA_WG, 4 * WGMMA_WG, WGMMA_ROWS);
  const int asked = hint && hint->wg_size;
  unsigned wg = asked ? hint->wg_size : FCL_WGMMA_DEFAULT_WG;
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_WGMMA,
                   .head_dim_padded = width,
                   .threads_per_row = 4,
                   .rows_per_thread = 2,
                   .tile_elem_size = 2,
                   .block_k = hint && hint->block_k ? hint->block_k : WGMMA_KEYS};
  /* its tile is read from one page lookup (TILE_START) */
  FCL_WHY_IF(desc->block_table && desc->page_size % plan.block_k, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward's tiles are %u keys, read from one page: a paged cache's "
             "page_size must be a multiple of %u, not %zu",
             plan.block_k, plan.block_k, desc->page_size);
  /* Unasked, the most warpgroups up to the default that the device takes
   * (the emulations' scratch grows with them). */
  const uint64_t budget = fcl__local_budget(limits);
  for (;; wg -= WGMMA_WG) {
    plan.wg_size = wg;
    plan.block_q = WGMMA_ROWS * (wg / WGMMA_WG);
    plan.local_bytes = fcl__flash_wgmma_local_bytes(limits, &plan);
    if (asked || wg == WGMMA_WG ||
        (wg <= limits->max_work_group_size && plan.local_bytes <= budget))
      break;
  }
  FCL_WHY_IF(limits->max_work_group_size < wg, FCL_ERROR_UNSUPPORTED,
             "the wgmma forward's work-group of %u work-items exceeds the device's limit of %zu",
             wg, limits->max_work_group_size);
  FCL_WHY_IF(plan.local_bytes > budget, FCL_ERROR_UNSUPPORTED,
             "head_dim %zu needs %zu bytes of local memory per work-group in the wgmma "
             "forward; the device allows %zu",
             desc->head_dim, plan.local_bytes, (size_t)budget);
  *out = plan;
  return FCL_SUCCESS;
}
