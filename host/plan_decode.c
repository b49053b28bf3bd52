/*
 * plan_decode.c — the tiling of the decode forward (cl/flash_fwd_decode.cl).
 * Pure, like plan.c, which calls it with the packed problem (a block's
 * rows are slots of a group's heads).
 *
 * Where: GPUs (fcl__decode_suits says why). What there is to choose:
 *   - rows: the block's, the packed rows rounded up to a power of two, at
 *     most FCL_DECODE_MAX_ROWS; every work-item keeps q and an accumulator
 *     slice for each;
 *   - a work-item's slice of head_dim, ELEMS: 8 elements up to 4 rows,
 *     else 4, so that q and the accumulator stay within 64 floats; the
 *     work-items sharing a key are head_dim / ELEMS rounded up to a power
 *     of two, at most 32 (a warp, whose shuffles sum the dot products);
 *   - the work-group: 128 work-items (key groups of 8 at d = 128), halved
 *     while its local memory does not fit; each key group loads
 *     DECODE_KEYS_PER_GROUP keys before using any, so block_k = groups x 4;
 *   - the splits (plan.c's choose_splits), aimed at DECODE_WGS_PER_CU
 *     work-groups per compute unit, at most DECODE_MAX_SPLITS: a decode
 *     launch has few blocks, and only many work-groups in flight keep the
 *     memory busy; the merge walks a row's splits one after another.
 */
#include "internal.h"

#define DECODE_WG 128u
#define DECODE_KEYS_PER_GROUP 4u
#define DECODE_MAX_LANES 32u
#define DECODE_MAX_GROUPS 32u   /* block_k = groups x 4 within the tiles' 128 keys */

static unsigned pow2_at_least(size_t x) {
  unsigned p = 1;
  while (p < x) p *= 2;
  return p;
}

/* GPUs only. On NVIDIA it was measured (docs/performance.md, v8: 2.5-3.3x
 * the MMA kernel at caches of 32k and more); on AMD and Intel it is chosen
 * by their compilers' figures (scripts/vendor-check.sh: no spill, 26 KiB of
 * local memory and occupancy 2 on MI300X, 5 on RX 7900 XTX, where the SIMT
 * split forward has 43 and 39 KiB and occupancy 1), not timed. On PoCL its
 * local-memory sums made it 3-4x slower than the SIMT kernel. */
int fcl__decode_suits(const fcl_device_limits *limits, const fcl__shape *sh,
                      size_t packed_rows) {
  return limits->is_gpu && sh->vec4 && packed_rows <= FCL_DECODE_MAX_ROWS;
}

size_t fcl__flash_decode_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits) {
  const int sum_by_shuffle = fcl__sums_by_shuffle(limits, plan->wg_size, plan->threads_per_row);
  const size_t groups = plan->wg_size / plan->threads_per_row, rows = plan->block_q;
  const size_t hd = plan->head_dim_padded, per_group = plan->block_k / groups;
  size_t floats = rows * hd + groups * rows * (hd + 2);
  if (!sum_by_shuffle) floats += (size_t)plan->wg_size * per_group * rows;
  return floats * sizeof(float);
}

fcl_status fcl__plan_forward_decode(const fcl_device_limits *limits, const fcl__shape *sh,
                                    const fcl_attention_desc *desc, const fcl_plan *hint,
                                    fcl_plan *out, char *why, size_t why_len) {
  FCL_WHY_IF(!sh->vec4, FCL_ERROR_UNSUPPORTED,
             "the decode kernel loads groups of four elements: it needs head_dim (%zu) and "
             "every tensor's offset and strides to be multiples of 4 elements",
             desc->head_dim);
  FCL_WHY_IF(desc->seqlen_q > FCL_DECODE_MAX_ROWS, FCL_ERROR_UNSUPPORTED,
             "the decode kernel holds at most FCL_DECODE_MAX_ROWS = %d rows a block; this "
             "forward has %zu (seqlen_q times the packed heads)",
             FCL_DECODE_MAX_ROWS, desc->seqlen_q);
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_DECODE};
  plan.block_q = pow2_at_least(desc->seqlen_q ? desc->seqlen_q : 1);
  plan.rows_per_thread = plan.block_q;
  const size_t elems = plan.block_q <= 4 ? 8 : 4;
  unsigned lanes = pow2_at_least((desc->head_dim + elems - 1) / elems);
  if (lanes > DECODE_MAX_LANES) lanes = DECODE_MAX_LANES;
  const size_t slice = ((desc->head_dim + lanes - 1) / lanes + 3) / 4 * 4;
  plan.threads_per_row = lanes;
  plan.head_dim_padded = (unsigned)(slice * lanes);
  unsigned wg = hint && hint->wg_size ? hint->wg_size : DECODE_WG;
  if (!(hint && hint->wg_size) && wg > limits->max_work_group_size)
    wg = fcl__floor_pow2(limits->max_work_group_size);
  /* paged: block_k = groups x 4 within a page's 64-key multiple */
  const unsigned max_groups = sh->paged ? DECODE_MAX_GROUPS / 2 : DECODE_MAX_GROUPS;
  if (!(hint && hint->wg_size) && wg > max_groups * lanes) wg = max_groups * lanes;
  if (!(hint && hint->wg_size) && wg < lanes) wg = lanes;
  FCL_WHY_IF(wg % lanes != 0 || wg / lanes > DECODE_MAX_GROUPS, FCL_ERROR_UNSUPPORTED,
             "wg_size = %u: the decode kernel's work-group is 1 to %u key groups of %u "
             "work-items at head_dim %zu",
             wg, DECODE_MAX_GROUPS, lanes, desc->head_dim);
  FCL_WHY_IF(wg > limits->max_work_group_size, FCL_ERROR_UNSUPPORTED,
             "a work-group of %u work-items exceeds the device's limit of %zu", wg,
             limits->max_work_group_size);
  FCL_WHY_IF(hint && hint->threads_per_row && hint->threads_per_row != lanes,
             FCL_ERROR_UNSUPPORTED,
             "the decode kernel at head_dim %zu and %u rows shares each key among %u "
             "work-items, not %u",
             desc->head_dim, plan.block_q, lanes, hint->threads_per_row);
  FCL_WHY_IF(hint && hint->rows_per_thread && hint->rows_per_thread != plan.block_q,
             FCL_ERROR_UNSUPPORTED,
             "the decode kernel's work-items each hold all %u rows of a block, not %u",
             plan.block_q, hint->rows_per_thread);
  const uint64_t budget = fcl__local_budget(limits);
  for (;;) {
    plan.wg_size = wg;
    const unsigned groups = wg / lanes;
    plan.block_k = hint && hint->block_k ? hint->block_k : groups * DECODE_KEYS_PER_GROUP;
    FCL_WHY_IF(plan.block_k % groups != 0 || plan.block_k > 128, FCL_ERROR_UNSUPPORTED,
               "block_k = %u: the decode kernel's %u key groups take equal shares of a "
               "step's keys, at most 128",
               plan.block_k, groups);
    plan.local_bytes = fcl__flash_decode_local_bytes(&plan, limits);
    if (plan.local_bytes <= budget) break;
    FCL_WHY_IF((hint && hint->wg_size) || wg / 2 < lanes, FCL_ERROR_UNSUPPORTED,
               "the decode kernel needs %zu bytes of local memory per work-group at "
               "head_dim %zu; the device allows %llu",
               plan.local_bytes, desc->head_dim, (unsigned long long)budget);
    wg /= 2;
  }
  *out = plan;
  return FCL_SUCCESS;
}
