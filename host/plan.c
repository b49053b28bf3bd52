/*
 * plan.c — the tile planner: device limits + problem -> the flash kernel's
 * tiling. Pure: no OpenCL calls, so tests can feed it made-up devices.
 *
 * The rule, starting from FlashAttention's. With M the local memory in
 * floats, FlashAttention takes Bc = ceil(M / 4d) and Br = min(ceil(M / 4d), d)
 * because its Q, K, V and O tiles share M. flash_fwd.cl keeps q and the
 * output accumulator in private registers instead, so:
 *   - K and V tiles may take all of M: Bc = floor(M / (2 * row floats)),
 *     rounded down to a power of two and capped at 64 because each
 *     work-item holds one score per key of the tile in registers;
 *   - Br is not bounded by local memory but by the work-group: Br =
 *     wg_size / threads_per_row * rows_per_thread.
 *   - threads_per_row splits a row's head_dim so that q and the accumulator
 *     take at most 128 private floats per work-item (d <= 64: 1, <= 128: 2,
 *     <= 256: 4); registers are the scarce resource on GPUs.
 *   - wg_size is 128 (four 32-wide warps: enough rows per K/V tile to
 *     amortise its load, few enough registers for two groups per compute
 *     unit), lowered to the device's limit, and halved (down to 32) while
 *     the launch has fewer than two work-groups per compute unit, so small
 *     problems still fill the device.
 * M excludes 1 KiB that NVIDIA reserves per work-group (DEVICE.md: 48 KiB
 * reported, 47 KiB usable); elsewhere the margin costs nothing.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

#define LOCAL_RESERVE_BYTES 1024u
#define MAX_BLOCK_K 64u
#define MIN_BLOCK_K 4u
#define DEFAULT_WG 128u
#define MIN_WG 32u
#define PRIVATE_ROW_FLOATS 128u  /* q slice + accumulator slice */

/* flash-attn's head_dim buckets: one kernel build serves a range of head
 * dims; the real head_dim is a run-time argument. */
static unsigned head_dim_bucket(size_t d) {
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  return (unsigned)((d + 31) / 32 * 32);
}

static unsigned floor_pow2(size_t x) {
  unsigned p = 1;
  while ((size_t)p * 2 <= x && p < (1u << 30)) p *= 2;
  return p;
}

/* Local bytes of flash_fwd.cl for a tiling; mirrors its __local arrays. */
size_t fcl__flash_local_bytes(const fcl_plan *plan, int row_sum_in_local) {
  unsigned g = plan->threads_per_row;
  unsigned slice = (plan->head_dim_padded / g + 3) / 4 * 4;
  unsigned tile_ld = (slice + (g > 1 ? 4 : 0)) * g;
  size_t bytes = 2 * (size_t)plan->block_k * tile_ld * sizeof(float);
  if (g > 1 && row_sum_in_local)
    bytes += (size_t)plan->block_k * plan->wg_size * sizeof(float);
  return bytes;
}

static void say(char *why, size_t len, const char *fmt, ...) {
  if (!why || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
}

fcl_status fcl__check_tiling_hint_why(const fcl_plan *hint, char *why, size_t why_len) {
  if (!hint) {
    say(why, why_len, "the tiling hint is NULL");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  unsigned g = hint->threads_per_row, wg = hint->wg_size;
  if (g != 0 && g != 1 && g != 2 && g != 4) {
    say(why, why_len, "threads_per_row = %u; it must be 1, 2 or 4", g);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->rows_per_thread > 4) {
    say(why, why_len, "rows_per_thread = %u; at most 4", hint->rows_per_thread);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (wg != 0 && (wg > 1024 || (wg & (wg - 1)) != 0 || (g && wg % g))) {
    say(why, why_len,
        "wg_size = %u; it must be a power of two up to 1024 and a multiple of "
        "threads_per_row",
        wg);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->block_k > 128) {
    say(why, why_len, "block_k = %u; at most 128", hint->block_k);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  return FCL_SUCCESS;
}

fcl_status fcl__check_tiling_hint(fcl_context *ctx, const fcl_plan *hint) {
  char why[160];
  fcl_status status = fcl__check_tiling_hint_why(hint, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "%s", why);
  return FCL_SUCCESS;
}

fcl_status fcl__plan_flash(const fcl_device_limits *limits,
                           const fcl_attention_desc *desc, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why,
                           size_t why_len) {
  if (why && why_len) why[0] = '\0';
  if (!limits || !desc || !out) {
    say(why, why_len, "%s is NULL", !limits ? "limits" : !desc ? "desc" : "plan");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (pass != FCL_PASS_FORWARD && pass != FCL_PASS_BACKWARD) {
    say(why, why_len, "pass = %d is not an fcl_pass", (int)pass);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  /* The same checks, and so the same status, as a call with this desc. */
  fcl_status status = fcl__check_desc_why(desc, NULL, why, why_len);
  if (status != FCL_SUCCESS) return status;
  if (hint && (status = fcl__check_tiling_hint_why(hint, why, why_len)) != FCL_SUCCESS)
    return status;
  if (pass != FCL_PASS_FORWARD) {
    say(why, why_len, "only the forward pass is planned so far");
    return FCL_ERROR_UNSUPPORTED;
  }
  if (limits->max_work_group_size == 0) {
    say(why, why_len, "the device reports a work-group limit of 0");
    return FCL_ERROR_UNSUPPORTED;
  }
  const int row_sum_in_local = !limits->nvidia_ptx;

  fcl_plan plan = {0};
  plan.head_dim_padded = head_dim_bucket(desc->head_dim);
  plan.rows_per_thread = hint && hint->rows_per_thread ? hint->rows_per_thread : 1;

  unsigned g = 1;
  while (2 * plan.head_dim_padded / g > PRIVATE_ROW_FLOATS) g *= 2;
  if (hint && hint->threads_per_row) g = hint->threads_per_row;

  unsigned wg = hint && hint->wg_size ? hint->wg_size : DEFAULT_WG;
  if (!(hint && hint->wg_size) && wg > limits->max_work_group_size)
    wg = floor_pow2(limits->max_work_group_size);
  if (g > wg) g = wg;  /* tiny work-group limits: fewer, wider slices */
  if (!(hint && hint->wg_size)) {
    /* Fill the device: at least two work-groups per compute unit. */
    size_t want = 2 * (size_t)(limits->compute_units ? limits->compute_units : 1);
    for (;;) {
      size_t rows = (size_t)wg / g * plan.rows_per_thread;
      size_t groups = desc->batch * desc->heads_q * ((desc->seqlen_q + rows - 1) / rows);
      if (groups >= want || wg / 2 < MIN_WG || wg / 2 < g) break;
      wg /= 2;
    }
  }
  if (wg > limits->max_work_group_size) {
    say(why, why_len,
        "a work-group of %zu work-items exceeds the device's limit of %zu",
        (size_t)wg, limits->max_work_group_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.wg_size = wg;
  plan.threads_per_row = g;
  plan.block_q = wg / g * plan.rows_per_thread;

  uint64_t budget = limits->local_mem_bytes > LOCAL_RESERVE_BYTES
                        ? limits->local_mem_bytes - LOCAL_RESERVE_BYTES
                        : 0;
  unsigned bk = hint && hint->block_k ? hint->block_k : MAX_BLOCK_K;
  for (; bk >= MIN_BLOCK_K; bk /= 2) {
    plan.block_k = bk;
    if (fcl__flash_local_bytes(&plan, row_sum_in_local) <= budget) break;
    if (hint && hint->block_k) bk = 0;  /* a requested size either fits or not */
  }
  if (bk < MIN_BLOCK_K) {
    plan.block_k = hint && hint->block_k ? hint->block_k : MIN_BLOCK_K;
    say(why, why_len,
        "head_dim %zu needs %zu bytes of local memory per work-group; the "
        "device allows %zu",
        desc->head_dim, fcl__flash_local_bytes(&plan, row_sum_in_local),
        (size_t)budget);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.local_bytes = fcl__flash_local_bytes(&plan, row_sum_in_local);
  *out = plan;
  return FCL_SUCCESS;
}

fcl_status fcl_plan_flash(const fcl_device_limits *limits,
                          const fcl_attention_desc *desc, fcl_pass pass,
                          fcl_plan *plan, char *why, size_t why_len) {
  return fcl__plan_flash(limits, desc, pass, NULL, plan, why, why_len);
}
