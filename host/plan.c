/*
 * plan.c — the tile planner: device limits + problem -> the flash kernel's
 * tiling. Pure: no OpenCL calls, so tests can feed it made-up devices.
 *
 * The rule, starting from FlashAttention's. With M the local memory in
 * floats, FlashAttention takes Bc = ceil(M / 4d) and Br = min(ceil(M / 4d), d)
 * because its Q, K, V and O tiles share M. flash_fwd.cl keeps q and the
 * output accumulator in private registers instead, so:
 *   - K and V tiles may take all of M: Bc = floor(M / (2 * row floats)),
 *     rounded down to a power of two, and capped so that a work-item's
 *     private floats (its q and accumulator slices plus one score per key
 *     of the tile) stay within 160: on an H200, d = 64 ran at 24 TFLOP/s
 *     with Bc = 32 and at 14 with Bc = 64, whose 192 floats spill;
 *   - Br is not bounded by local memory but by the work-group: Br =
 *     wg_size / threads_per_row * rows_per_thread, aimed at 128 rows (the
 *     work-group grows to 256 work-items where a row takes two) so that
 *     each K/V tile is loaded for many rows.
 *   - threads_per_row splits a row's head_dim so that q and the accumulator
 *     take at most the vendor's private floats per work-item
 *     (register_budget_of: 128 on NVIDIA, so d <= 64: 1, <= 128: 2,
 *     <= 256: 4; 64 on AMD and Intel, up to 8); registers are the scarce
 *     resource on GPUs.
 *   - rows_per_thread is 2, with rows of half the width, where warp
 *     shuffles sum the slices (NVIDIA) and at most two work-items then
 *     share a row: each float4 read from local memory feeds 8 multiply-adds
 *     instead of 4. On an H200 at N = 4096, d = 64 went from 23.8 to 27.2
 *     TFLOP/s (causal 18.7 to 26.4); with four work-items per row (d = 128)
 *     the extra shuffles and repeated softmax lost (20.1 against 21.8).
 *   - the work-group is lowered to the device's limit, and halved (down to
 *     32) while the launch has fewer than two work-groups per compute unit,
 *     so small problems still fill the device.
 *   - CPUs (PoCL) take none of the register reasoning up to head_dim 128:
 *     a work-group's work-items are SIMD lanes there and private floats
 *     live in cache, so whole rows, two a work-item, Bc 32, 64 work-items
 *     (1.2-1.8x the rule above at d = 128 on 2 cores; docs/performance.md,
 *     "CPU forward"); the backward likewise takes whole rows ("CPU
 *     backward").
 * M excludes 1 KiB that NVIDIA reserves per work-group (fcl__local_budget
 * in internal.h: an H200 reports 48 KiB; 47 KiB of __local arguments work,
 * 48 fail); elsewhere the margin costs nothing.
 *
 * Tile elements (both passes). The local tiles hold floats, converted once
 * as they arrive from global memory, or, for f16 and bf16 storage, the
 * storage type itself (TILE_STORAGE in common.cl), converted at every read
 * from the tile: twice the rows in the same local memory, for a conversion
 * per local read that a GPU pays in ALU instructions on every row that
 * shares the read. So floats stay the rule, and 2-byte tiles are used only
 * where they let a larger tile fit than floats do: where local memory, not
 * registers, caps Bc (forward) or the work-group (backward). On the H200
 * the forward's Bc is capped by registers and the backward's 128-work-item
 * tiles fit 47 KiB as floats, so its plans do not change with the dtype;
 * devices with 16-32 KiB of local memory get the larger tiles.
 *
 * The backward (flash_bwd.cl) has two kernels that mirror each other: the
 * dK/dV kernel keeps keys in registers and streams query tiles, the dQ
 * kernel keeps queries and streams key tiles. They share one tiling:
 *   - each work-item holds four row slices in registers (k, v, dk, dv; or
 *     q, dO, dq), so threads_per_row is the smallest power of two (up to
 *     8) that keeps 4 * rows_per_thread * slice <= 128 private floats,
 *     i.e. slices of at most 32 floats for one row per work-item;
 *   - rows_per_thread is 2 where warp shuffles sum the slices (NVIDIA) and
 *     head_dim <= 128, else 1. Every float4 a work-item reads from local
 *     memory feeds 4 * rows_per_thread multiply-adds: at 4 the shared-memory
 *     pipe, not the FMA units, would bound the kernels; two rows of half
 *     the width double the reuse in the same registers, for one more
 *     shuffle round per dot product;
 *   - the rows a work-group keeps, wg_size / threads_per_row *
 *     rows_per_thread, are also the rows of each tile it streams, so
 *     block_q = block_k. A tile pair is then 2 * wg_size * 32 floats plus
 *     the skew: 36 KiB at 128 work-items (40 KiB with 16-float slices),
 *     which fits NVIDIA's 47 KiB with room for the row statistics (and
 *     for the partial dot products where there are no sub-group shuffles);
 *   - wg_size starts at 128 and is halved, down to 32, while the dK/dV
 *     kernel (the one with fewer work-groups under GQA) has fewer than two
 *     work-groups per compute unit, then further (down to one row group)
 *     while the tiles do not fit local memory.
 */
#include "internal.h"

#include <limits.h>

#include <stdio.h>

#define MAX_BLOCK_K 64u
#define PRIVATE_FLOATS 160u      /* q + accumulator slices + Bc scores */
#define MIN_BLOCK_K 4u
#define DEFAULT_WG 128u           /* the backward's starting work-group */
#define TARGET_ROWS 128u          /* Br the forward's work-group aims at */
#define MAX_WG 256u               /* registers: 256 x ~170 fit an SM's 64K */
#define MIN_WG 32u
#define CPU_MIN_WG 8u             /* a CPU forward's smallest, for a few query rows */
#define CPU_BLOCK_K 32u           /* the CPU forward's key tile (plan_flash, cpu_rule) */
#define CPU_RULE_MAX_HEAD_DIM 128u  /* the widest bucket the CPU rule was measured on */
#define PRIVATE_ROW_FLOATS 128u  /* q slice + accumulator slice */
#define BWD_PRIVATE_FLOATS 128u  /* four row slices: k, v, dk, dv */
#define BWD_MAX_THREADS_PER_ROW 8u
#define FWD_MAX_THREADS_PER_ROW 8u
#define SPLIT_MIN_KEYS 256u       /* a split's fewest keys, where the planner splits */
/* The decode kernels' split target (plan_decode.c): one wave, the 2
 * work-groups of 128 an H200 multiprocessor holds at their 184 (matrix
 * instructions) and 202 (SIMT) registers a lane, at most 64 splits.
 * Measured on the H200 (docs/performance.md): on matrix instructions, v9
 * (at B 1, 32 splits 1.09-1.22x of 64; at B 8, 4 faster than 8 and 16);
 * the SIMT kernel in f32, v13 (B 8 x 8k: 4 splits 0.172 ms, the 16 of 8 a
 * compute unit 0.186; B 1 x 32k: 32 splits 0.104 ms, 64 0.121). */
#define DECODE_WGS_PER_CU 2u
#define DECODE_MAX_SPLITS 64u

/* Private floats a work-item may keep without spilling, per vendor. The
 * numbers above are an H200's (255 registers a work-item). Intel's GPUs
 * run at their narrowest sub-group with 256 registers a thread
 * (fcl__program_options), 256 floats a lane on Xe-HPG (SIMD8) and Xe-HPC
 * (SIMD16); the budgets are what ocloc compiled without spilling over
 * head_dim 64 and 128 (scripts/vendor-check.sh; docs/performance.md,
 * vendors). */
typedef struct register_budget {
  unsigned fwd;      /* q + accumulator slices + Bc scores */
  unsigned fwd_row;  /* q + accumulator slices */
  unsigned bwd;      /* the backward's four row slices */
} register_budget;

static register_budget register_budget_of(const fcl_device_limits *limits) {
  if (limits->vendor == FCL_VENDOR_INTEL)
    return limits->sub_group_size <= 8 ? (register_budget){128, 64, 32}
                                       : (register_budget){80, 64, 32};
  if (limits->vendor == FCL_VENDOR_AMD) return (register_budget){96, 64, 64};
  return (register_budget){PRIVATE_FLOATS, PRIVATE_ROW_FLOATS, BWD_PRIVATE_FLOATS};
}

/* flash-attn's head_dim buckets: one kernel build serves a range of head
 * dims; the real head_dim is a run-time argument. */
static unsigned head_dim_bucket(size_t d) {
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  return (unsigned)((d + 31) / 32 * 32);
}

/* Bytes of one tile element: the plan's, floats when unset. */
static size_t tile_elem(const fcl_plan *plan) {
  return plan->tile_elem_size ? plan->tile_elem_size : sizeof(float);
}

/* Local bytes of flash_fwd.cl for a tiling; mirrors its __local arrays. */
size_t fcl__flash_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits) {
  unsigned g = plan->threads_per_row;
  const int row_sum_in_local = !fcl__sums_by_shuffle(limits, plan->wg_size, g);
  unsigned slice = (plan->head_dim_padded / g + 3) / 4 * 4;
  unsigned tile_ld = (slice + (g > 1 ? 4 : 0)) * g;
  size_t bytes = 2 * (size_t)plan->block_k * tile_ld * tile_elem(plan);
  if (g > 1 && row_sum_in_local)
    bytes += (size_t)plan->block_k * plan->wg_size * sizeof(float);
  return bytes;
}

/* Mirrors flash_bwd.cl: SUB_ROWS is the largest of 8, 4, 2, 1 dividing the
 * tile, and at most 4 where eight work-items share a row: ocloc spilled
 * the d = 128 dK/dV kernel on a Max 1550 with 8 (192 bytes a thread) and
 * not with 4. On AMD and Intel, slices of 24 floats take at most 2 and of
 * 32 one: with 4, the Max 1550 spilled both kernels at d = 192 and 256
 * (256-448 bytes) and RDNA the d = 256 dK/dV (180-528 bytes a lane), with
 * 2, RDNA still 44 (scripts/vendor-check.sh). */
unsigned fcl__flash_bwd_sub_rows(const fcl_plan *plan, const fcl_device_limits *limits) {
  unsigned rows = plan->block_k;
  const unsigned slice = plan->head_dim_padded / plan->threads_per_row;
  const int narrow = limits->vendor == FCL_VENDOR_AMD || limits->vendor == FCL_VENDOR_INTEL;
  const unsigned most = plan->threads_per_row < 8 ? 8
                        : !narrow || slice < 24   ? 4
                        : slice < 32              ? 2
                                                  : 1;
  return rows % most == 0 ? most : rows % 4 == 0 ? 4 : rows % 2 == 0 ? 2 : 1;
}

fcl__pre_shape fcl__flash_bwd_pre_shape(const fcl_device_limits *limits, size_t head_dim) {
  fcl__pre_shape shape = {.wg_size = 1, .threads_per_row = 1};
  while (2 * shape.wg_size <= 128 && 2 * shape.wg_size <= limits->max_work_group_size)
    shape.wg_size *= 2;
  while (shape.threads_per_row < 32 && 4 * shape.threads_per_row < head_dim &&
         2 * shape.threads_per_row <= shape.wg_size)
    shape.threads_per_row *= 2;
  return shape;
}

/* Local bytes of flash_bwd.cl's dK/dV and dQ kernels, which declare the
 * same arrays: two streamed tiles, per-row statistics (LSE, D, and with
 * row_keys the visible keys' bounds), and, without sub-group shuffles
 * (fcl__sums_by_shuffle), the partial dot products of SUB_ROWS rows. */
size_t fcl__flash_bwd_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits,
                                  int row_keys) {
  unsigned g = plan->threads_per_row;
  const int row_sum_in_local = !fcl__sums_by_shuffle(limits, plan->wg_size, g);
  unsigned slice = (plan->head_dim_padded / g + 3) / 4 * 4;
  unsigned tile_ld = (slice + (g > 1 ? 4 : 0)) * g;
  size_t rows = plan->block_k;
  size_t bytes = 2 * rows * tile_ld * tile_elem(plan) + 2 * rows * sizeof(float) +
                 (row_keys ? 2 * rows * sizeof(cl_int) : 0);
  if (g > 1 && row_sum_in_local)
    bytes += 2 * (size_t)fcl__flash_bwd_sub_rows(plan, limits) * plan->wg_size * sizeof(float);
  return bytes;
}

/* The tile element sizes to try, floats first (see the top of the file):
 * also the storage type's 2 bytes for f16 and bf16; only the hint's size
 * when it names one. @return how many, or 0 (and why) for a hint of 2-byte
 * tiles with f32 storage. */
static int tile_elem_choices(const fcl_attention_desc *desc, const fcl_plan *hint,
                             unsigned out[2], char *why, size_t why_len) {
  const unsigned store = (unsigned)fcl_dtype_size(desc->dtype);
  const unsigned want = hint ? hint->tile_elem_size : 0;
  if (want == 2 && store != 2) {
    fcl__say(why, why_len, "tiles of 2-byte elements need f16 or bf16 storage, not %s",
        fcl_dtype_name(desc->dtype));
    return 0;
  }
  if (want) {
    out[0] = want;
    return 1;
  }
  out[0] = sizeof(float);
  out[1] = 2;
  return store == 2 ? 2 : 1;
}

/* The backward's rule (see the top of the file). Arguments are checked. */
static fcl_status plan_backward(const fcl_device_limits *limits,
                                const fcl_attention_desc *desc, const fcl_plan *hint,
                                fcl_plan *out, char *why, size_t why_len) {
  const int row_keys = fcl__row_keys_in_local(desc);
  const int fixed_wg = hint && hint->wg_size;
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_SIMT};
  plan.head_dim_padded = head_dim_bucket(desc->head_dim);
  plan.rows_per_thread = limits->nvidia_ptx && plan.head_dim_padded <= 128 ? 2 : 1;
  if (hint && hint->rows_per_thread) plan.rows_per_thread = hint->rows_per_thread;

  const unsigned bwd_floats = register_budget_of(limits).bwd;
  /* CPUs up to head_dim 128: whole rows, as the forward (no registers to
   * budget): on 2 cores 1.4-1.9x the register rule's split rows
   * (docs/performance.md, "CPU backward"). */
  const int cpu_rule = !limits->is_gpu && plan.head_dim_padded <= CPU_RULE_MAX_HEAD_DIM;
  unsigned g = 1;
  while (!cpu_rule && 4 * plan.rows_per_thread * plan.head_dim_padded / g > bwd_floats &&
         g < BWD_MAX_THREADS_PER_ROW)
    g *= 2;
  if (hint && hint->threads_per_row) g = hint->threads_per_row;

  unsigned wg = fixed_wg ? hint->wg_size : DEFAULT_WG;
  if (!fixed_wg && wg > limits->max_work_group_size)
    wg = fcl__floor_pow2(limits->max_work_group_size);
  if (g > wg) g = wg;  /* tiny work-group limits: fewer, wider slices */
  plan.threads_per_row = g;
  if (!fixed_wg) {
    /* Fill the device: at least two dK/dV work-groups per compute unit. */
    size_t want = 2 * (size_t)(limits->compute_units ? limits->compute_units : 1);
    for (;;) {
      size_t rows = (size_t)wg / g * plan.rows_per_thread;
      size_t groups = desc->batch * desc->heads_kv * ((desc->seqlen_k + rows - 1) / rows);
      if (groups >= want || wg / 2 < MIN_WG || wg / 2 < g) break;
      wg /= 2;
    }
  }
  const uint64_t budget = fcl__local_budget(limits);
  unsigned elems[2];
  const int n_elems = tile_elem_choices(desc, hint, elems, why, why_len);
  if (!n_elems) return FCL_ERROR_UNSUPPORTED;
  /* The largest work-group from wg down whose tiles fit, for each element
   * size; 2-byte tiles only where they fit a larger one. */
  unsigned best_wg = 0, best_elem = elems[0], smallest_wg = wg;
  for (int e = 0; e < n_elems; ++e) {
    plan.tile_elem_size = elems[e];
    for (unsigned w = wg;; w /= 2) {
      plan.wg_size = w;
      plan.block_q = plan.block_k = w / g * plan.rows_per_thread;
      smallest_wg = w;
      if (fcl__flash_bwd_local_bytes(&plan, limits, row_keys) <= budget) {
        if (w > best_wg) best_wg = w, best_elem = elems[e];
        break;
      }
      if (fixed_wg || w / 2 < g) break;
    }
  }
  /* Without a fit, the smallest tiles tried, for the message. */
  wg = best_wg ? best_wg : smallest_wg;
  plan.tile_elem_size = best_wg ? best_elem : elems[n_elems - 1];
  plan.wg_size = wg;
  plan.block_q = plan.block_k = wg / g * plan.rows_per_thread;
  plan.local_bytes = fcl__flash_bwd_local_bytes(&plan, limits, row_keys);
  if (wg > limits->max_work_group_size) {
    fcl__say(why, why_len,
        "a work-group of %zu work-items exceeds the device's limit of %zu",
        (size_t)wg, limits->max_work_group_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (plan.local_bytes > budget) {
    fcl__say(why, why_len,
        "head_dim %zu needs %zu bytes of local memory per work-group in the "
        "backward; the device allows %zu",
        desc->head_dim, plan.local_bytes, (size_t)budget);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.splits = 1;
  plan.packed_heads = 1;
  *out = plan;
  return FCL_SUCCESS;
}

fcl_status fcl__check_tiling_hint_why(const fcl_plan *hint, char *why, size_t why_len) {
  if (!hint) {
    fcl__say(why, why_len, "the tiling hint is NULL");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  unsigned g = hint->threads_per_row, wg = hint->wg_size;
  if (g != 0 && g != 1 && g != 2 && g != 4 && g != 8) {
    fcl__say(why, why_len, "threads_per_row = %u; it must be 1, 2, 4 or 8 (8: backward only)", g);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->rows_per_thread > 4) {
    fcl__say(why, why_len, "rows_per_thread = %u; at most 4", hint->rows_per_thread);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (wg != 0 && (wg > 1024 || (wg & (wg - 1)) != 0 || (g && wg % g))) {
    fcl__say(why, why_len,
        "wg_size = %u; it must be a power of two up to 1024 and a multiple of "
        "threads_per_row",
        wg);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->block_k > 128) {
    fcl__say(why, why_len, "block_k = %u; at most 128", hint->block_k);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->tile_elem_size != 0 && hint->tile_elem_size != 2 && hint->tile_elem_size != 4) {
    fcl__say(why, why_len, "tile_elem_size = %u; it must be 0, 2 or 4", hint->tile_elem_size);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->kernel >= FCL_FLASH_KERNELS) {
    fcl__say(why, why_len, "kernel = %u is not an fcl_flash_kernel", hint->kernel);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->splits > FCL_MAX_SPLITS) {
    fcl__say(why, why_len, "splits = %u; at most FCL_MAX_SPLITS = %d", hint->splits,
             FCL_MAX_SPLITS);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->merge > FCL_SPLIT_MERGE_LAST_SPLIT) {
    fcl__say(why, why_len, "merge = %u is not an fcl_split_merge", hint->merge);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  return FCL_SUCCESS;
}

const char *fcl_flash_kernel_name(unsigned kernel) {
  static const char *const names[] = {"auto", "simt", "mma", "decode", "decode-mma", "cpu"};
  return kernel < sizeof names / sizeof names[0] ? names[kernel] : "unknown";
}

const char *fcl_split_merge_name(unsigned merge) {
  static const char *const names[] = {"auto", "kernel", "last-split"};
  return merge < sizeof names / sizeof names[0] ? names[merge] : "unknown";
}

unsigned fcl__split_keys(const fcl_plan *plan, size_t seqlen_k) {
  const size_t splits = plan->splits ? plan->splits : 1;
  const size_t tiles = (seqlen_k + plan->block_k - 1) / plan->block_k;
  const size_t tiles_per_split = (tiles + splits - 1) / splits;
  return (unsigned)(tiles_per_split * plan->block_k);
}

/* Whether the forward packs the query heads of a KV head into its blocks
 * (fcl_plan.packed_heads says the rule): *packed is the group or 1. */
static fcl_status choose_packing(const fcl__shape *sh, const fcl_plan *hint, unsigned *packed,
                                 char *why, size_t why_len) {
  const fcl_attention_desc *desc = &sh->desc;
  const size_t group = sh->group;
  const int can = group > 1 && !desc->alibi_slopes && desc->seqlen_q <= (size_t)INT_MAX / group;
  *packed = 1;
  if (hint && hint->packed_heads == 1) return FCL_SUCCESS;
  if (hint && hint->packed_heads > 1) {
    FCL_WHY_IF(hint->packed_heads != group, FCL_ERROR_UNSUPPORTED,
               "packed_heads = %u: a block packs the %zu query heads of a KV head, or 1",
               hint->packed_heads, group);
    FCL_WHY_IF(!can, FCL_ERROR_UNSUPPORTED,
               "packed_heads = %u: packing takes no ALiBi (a slope per block)",
               hint->packed_heads);
    *packed = (unsigned)group;
    return FCL_SUCCESS;
  }
  if (can && desc->seqlen_q <= FCL_PACK_GQA_MAX_SEQLEN) *packed = (unsigned)group;
  return FCL_SUCCESS;
}

/* The forward's key splits (fcl_plan.splits says the rule): the hint's
 * count or the planner's, then as many as the tiles of split_keys need. The
 * decode kernels' target is their own (DECODE_WGS_PER_CU), a power of two
 * that reproduces the counts measured best. */
static void choose_splits(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                          const fcl_plan *hint, fcl_plan *plan) {
  const int decode = fcl__decode_kernel_family(plan->kernel);
  const size_t cus = limits->compute_units ? limits->compute_units : 1;
  const size_t groups =
      desc->batch * desc->heads_q * ((desc->seqlen_q + plan->block_q - 1) / plan->block_q);
  size_t splits = 1;
  if (hint && hint->splits) {
    splits = hint->splits;
  } else if (groups < cus) {
    splits = decode ? fcl__floor_pow2(DECODE_WGS_PER_CU * cus / groups)
                    : (2 * cus + groups - 1) / groups;
    const size_t by_keys = (desc->seqlen_k + SPLIT_MIN_KEYS - 1) / SPLIT_MIN_KEYS;
    const size_t most = decode ? DECODE_MAX_SPLITS : FCL_MAX_SPLITS;
    if (splits > by_keys) splits = by_keys;
    if (splits > most) splits = most;
  }
  plan->splits = (unsigned)splits;
  const size_t keys = fcl__split_keys(plan, desc->seqlen_k);
  plan->splits = (unsigned)((desc->seqlen_k + keys - 1) / keys);
}

/* How a split forward merges (fcl_plan.merge says the rule). The merge in
 * the split launch saves the host a second launch (5-7 us on NVIDIA's
 * driver, v10) but ends each work-group on a device-wide fence and its
 * block on one work-group's merge: on an H100, back to back, B 1 calls
 * that read 4-32 MiB of K and V (bound by the host's launches) ran 15-20
 * us where two launches ran 19-31, and those that read 64-128 MiB ran
 * 0.92-0.99x the merge kernel's speed (docs/performance.md, v20). So
 * it is taken where the call reads at most MERGE_IN_LAUNCH_BYTES_PER_CU of
 * K and V per compute unit, and only where its fence and count were proven:
 * NVIDIA's driver and CPUs (PoCL; their decode kernels are asked for, never
 * planned). */
#define MERGE_IN_LAUNCH_BYTES_PER_CU ((size_t)256 << 10)
static fcl_status choose_merge(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                               const fcl_plan *hint, fcl_plan *plan, char *why,
                               size_t why_len) {
  plan->merge = FCL_SPLIT_MERGE_AUTO;
  if (plan->splits <= 1) return FCL_SUCCESS;
  const int decode = fcl__decode_kernel_family(plan->kernel);
  const size_t row_floats = decode ? fcl__decode_state_row_floats(plan) : 0;
  const int fits = decode && plan->splits <= row_floats;
  const unsigned wanted = hint ? hint->merge : FCL_SPLIT_MERGE_AUTO;
  if (wanted == FCL_SPLIT_MERGE_LAST_SPLIT) {
    FCL_WHY_IF(!decode, FCL_ERROR_UNSUPPORTED,
               "merge = last split: only the decode kernels merge in their own launch, not "
               "the %s kernel",
               fcl_flash_kernel_name(plan->kernel));
    FCL_WHY_IF(!fits, FCL_ERROR_UNSUPPORTED,
               "merge = last split: a row's %u split LSEs do not fit the %zu floats of the "
               "kernel's local state",
               plan->splits, row_floats);
  }
  /* K and V's bytes, in doubles: no overflow */
  const double kv_bytes = 2.0 * (double)desc->batch * (double)desc->seqlen_k *
                          (double)desc->heads_kv * (double)desc->head_dim *
                          (double)fcl_dtype_size(desc->dtype);
  const size_t cus = limits->compute_units ? limits->compute_units : 1;
  const int short_call = kv_bytes <= (double)cus * (double)MERGE_IN_LAUNCH_BYTES_PER_CU;
  const int proven = limits->nvidia_ptx || !limits->is_gpu;
  plan->merge = wanted ? wanted
                : fits && proven && short_call ? FCL_SPLIT_MERGE_LAST_SPLIT
                                               : FCL_SPLIT_MERGE_KERNEL;
  return FCL_SUCCESS;
}

/* A paged forward reads each page lookup's keys from one page (cl/blocks.cl,
 * PAGED; fcl__page_lookup_keys). The planners keep tiles within
 * fcl__page_tile_cap; a hint's may not be. */
static fcl_status check_pages_fit(const fcl__shape *sh, const fcl_plan *plan, char *why,
                                  size_t why_len) {
  const unsigned keys = fcl__page_lookup_keys(plan);
  FCL_WHY_IF(sh->paged && sh->desc.page_size % keys != 0, FCL_ERROR_UNSUPPORTED,
             "block_k = %u keys a tile do not divide page_size = %zu: a tile would straddle "
             "two pages",
             keys, sh->desc.page_size);
  return FCL_SUCCESS;
}

fcl_status fcl__check_tiling_hint(fcl_context *ctx, const fcl_plan *hint) {
  char why[160];
  fcl_status status = fcl__check_tiling_hint_why(hint, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "%s", why);
  return FCL_SUCCESS;
}

fcl_status fcl__plan_flash(const fcl_device_limits *limits,
                           const fcl_attention_desc *given, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why,
                           size_t why_len) {
  if (why && why_len) why[0] = '\0';
  if (!limits || !given || !out) {
    fcl__say(why, why_len, "%s is NULL", !limits ? "limits" : !given ? "desc" : "plan");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (pass != FCL_PASS_FORWARD && pass != FCL_PASS_BACKWARD) {
    fcl__say(why, why_len, "pass = %d is not an fcl_pass", (int)pass);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  /* The same checks, and so the same status, as a call with this desc;
   * from here on its whole copy. */
  fcl__shape shape;
  fcl_status status = fcl__check_desc_why(given, &shape, why, why_len);
  if (status == FCL_SUCCESS && hint) status = fcl__check_tiling_hint_why(hint, why, why_len);
  if (status != FCL_SUCCESS) {
    return status;
  }
  const fcl_attention_desc *desc = &shape.desc;
  if (limits->max_work_group_size == 0) {
    fcl__say(why, why_len, "the device reports a work-group limit of 0");
    return FCL_ERROR_UNSUPPORTED;
  }
  /* A hint naming a SIMT layout field asks for that kernel. */
  const int simt_hint =
      hint && (hint->threads_per_row || hint->rows_per_thread || hint->tile_elem_size);
  const int backward = pass == FCL_PASS_BACKWARD;
  FCL_WHY_IF(backward && hint && fcl__kernel_forward_only(hint->kernel), FCL_ERROR_UNSUPPORTED,
             "the decode kernels are forwards; the backward runs SIMT, MMA or CPU");
  const int mma = hint && hint->kernel ? hint->kernel == FCL_FLASH_KERNEL_MMA
                                       : !simt_hint && shape.vec4 && fcl__mma_suits(limits, desc);
  if (mma && !shape.vec4 && desc->head_dim % 4 == 0) {  /* else the MMA planner says why */
    fcl__say(why, why_len,
             "the MMA kernels load groups of four elements: they need head_dim (%zu) and "
             "every tensor's offset and strides to be multiples of 4 elements",
             desc->head_dim);
    return FCL_ERROR_UNSUPPORTED;
  }
  FCL_WHY_IF(backward && shape.paged, FCL_ERROR_UNSUPPORTED,
             "a paged KV cache (block_table) is for the forward; the backward takes "
             "contiguous K and V");
  FCL_WHY_IF(backward && desc->seqlens_k, FCL_ERROR_UNSUPPORTED,
             "a KV cache's lengths (seqlens_k) are for the forward; the backward takes "
             "whole sequences (or cu_seqlens)");
  if (backward) {
    /* The CPU backward: asked for, or the rule's on CPU devices (plan_cpu.c). */
    const int cpu = hint && hint->kernel ? hint->kernel == FCL_FLASH_KERNEL_CPU
                                         : !simt_hint && !mma &&
                                               fcl__cpu_backward_suits(limits);
    return mma   ? fcl__plan_backward_mma(limits, desc, hint, out, why, why_len)
           : cpu ? fcl__plan_backward_cpu(limits, desc, hint, out, why, why_len)
                 : plan_backward(limits, desc, hint, out, why, why_len);
  }
  /* Packed, the planner sees a group's rows as one head's. */
  unsigned packed = 1;
  FCL_FORWARD_IF(choose_packing(&shape, hint, &packed, why, why_len));
  fcl_attention_desc packed_desc = *desc;
  packed_desc.seqlen_q *= packed;
  packed_desc.heads_q /= packed;
  desc = &packed_desc;
  /* 0, or which decode kernel */
  const unsigned decode =
      hint && hint->kernel
          ? (fcl__decode_kernel_family(hint->kernel) ? hint->kernel : FCL_FLASH_KERNEL_AUTO)
      : simt_hint ? FCL_FLASH_KERNEL_AUTO
                  : fcl__decode_kernel(limits, &shape, desc->seqlen_q);
  /* The CPU forward: asked for, or the rule's on CPU devices (plan_cpu.c). */
  const int cpu = hint && hint->kernel
                      ? hint->kernel == FCL_FLASH_KERNEL_CPU
                      : !simt_hint && !decode && !mma &&
                            fcl__cpu_forward_suits(limits, desc->seqlen_q, packed);
  if (decode || mma || cpu) {
    fcl_plan planned;  /* `out` is written on success only */
    FCL_FORWARD_IF(
        decode == FCL_FLASH_KERNEL_DECODE_MMA
            ? fcl__plan_forward_decode_mma(limits, &shape, desc, hint, &planned, why, why_len)
        : decode ? fcl__plan_forward_decode(limits, &shape, desc, hint, &planned, why, why_len)
        : cpu    ? fcl__plan_forward_cpu(limits, desc, hint, &planned, why, why_len)
                 : fcl__plan_forward_mma(limits, desc, hint, &planned, why, why_len));
    FCL_FORWARD_IF(check_pages_fit(&shape, &planned, why, why_len));
    choose_splits(limits, desc, hint, &planned);
    FCL_FORWARD_IF(choose_merge(limits, desc, hint, &planned, why, why_len));
    planned.packed_heads = packed;
    *out = planned;
    return FCL_SUCCESS;
  }

  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_SIMT};
  const unsigned bucket = head_dim_bucket(desc->head_dim);
  plan.head_dim_padded = bucket;

  const register_budget regs = register_budget_of(limits);
  /* CPUs: PoCL runs a work-group's work-items as SIMD lanes, and private
   * floats live in cache-resident memory, not registers: whole rows, two a
   * work-item, 32 keys a tile (docs/performance.md, "CPU forward": 1.4-2x
   * the register rule's tiling at d = 128 on 2 cores, as fast at d = 64;
   * wider head dims unmeasured, so they keep it). */
  const int cpu_rule = !limits->is_gpu && bucket <= CPU_RULE_MAX_HEAD_DIM;
  unsigned g = 1, rows = cpu_rule ? 2 : 1;
  while (!cpu_rule && 2 * bucket / g > regs.fwd_row && g < FWD_MAX_THREADS_PER_ROW) g *= 2;
  if (limits->nvidia_ptx) {
    unsigned g2 = 1;
    while (2 * 2 * bucket / g2 > regs.fwd_row) g2 *= 2;
    if (g2 <= 2) g = g2, rows = 2;
  }
  if (hint && hint->threads_per_row) g = hint->threads_per_row;
  if (hint && hint->rows_per_thread) rows = hint->rows_per_thread;
  plan.rows_per_thread = rows;
  if (g > FWD_MAX_THREADS_PER_ROW) {
    fcl__say(why, why_len, "the forward splits a row over at most %u work-items, not %u",
        FWD_MAX_THREADS_PER_ROW, g);
    return FCL_ERROR_UNSUPPORTED;
  }

  /* a power of two (rows_per_thread = 3 from a hint would give 85) */
  unsigned wg = fcl__floor_pow2(TARGET_ROWS * g / rows);
  if (wg > MAX_WG) wg = MAX_WG;
  if (hint && hint->wg_size) wg = hint->wg_size;
  if (!(hint && hint->wg_size) && wg > limits->max_work_group_size)
    wg = fcl__floor_pow2(limits->max_work_group_size);
  if (g > wg) g = wg;  /* tiny work-group limits: fewer, wider slices */
  if (bucket % (4 * g) != 0) {  /* flash_fwd.cl's slices are whole float4s */
    fcl__say(why, why_len,
             "the forward cannot split head_dim %zu (bucket %u) over %u work-items in "
             "float4 slices",
             desc->head_dim, bucket, g);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (!(hint && hint->wg_size)) {
    /* No larger a block than the rows there are (decode: a few rows),
     * down to a GPU's sub-group (a work-group narrower than an AMD
     * wavefront leaves lanes idle), or CPU_MIN_WG (PoCL vectorises across
     * work-items: idle rows cost it as much as live ones). */
    const unsigned gpu_floor = limits->sub_group_size > MIN_WG ? limits->sub_group_size : MIN_WG;
    const unsigned floor_wg = limits->is_gpu ? gpu_floor : CPU_MIN_WG;
    while (wg / 2 >= floor_wg && wg / 2 >= g &&
           (size_t)wg / 2 / g * plan.rows_per_thread >= desc->seqlen_q)
      wg /= 2;
    /* Fill the device: at least two work-groups per compute unit. */
    const unsigned fill_floor = limits->is_gpu ? gpu_floor : MIN_WG;
    size_t want = 2 * (size_t)(limits->compute_units ? limits->compute_units : 1);
    for (;;) {
      size_t block = (size_t)wg / g * plan.rows_per_thread;
      size_t groups = desc->batch * desc->heads_q * ((desc->seqlen_q + block - 1) / block);
      if (groups >= want || wg / 2 < fill_floor || wg / 2 < g) break;
      wg /= 2;
    }
  }
  if (wg > limits->max_work_group_size) {
    fcl__say(why, why_len,
        "a work-group of %zu work-items exceeds the device's limit of %zu",
        (size_t)wg, limits->max_work_group_size);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.wg_size = wg;
  plan.threads_per_row = g;
  plan.block_q = wg / g * plan.rows_per_thread;

  const uint64_t budget = fcl__local_budget(limits);
  unsigned elems[2];
  const int n_elems = tile_elem_choices(desc, hint, elems, why, why_len);
  if (!n_elems) return FCL_ERROR_UNSUPPORTED;
  /* Registers first: 2 * slice + rows * Bc private floats. */
  unsigned bk_cap = cpu_rule ? CPU_BLOCK_K : MAX_BLOCK_K;
  if (bk_cap > fcl__page_tile_cap(desc)) bk_cap = fcl__page_tile_cap(desc);
  const unsigned row_floats = 2 * plan.head_dim_padded / g * plan.rows_per_thread;
  while (!cpu_rule && bk_cap > MIN_BLOCK_K && row_floats + plan.rows_per_thread * bk_cap > regs.fwd)
    bk_cap /= 2;
  const int fixed_bk = hint && hint->block_k;
  if (fixed_bk && hint->block_k < MIN_BLOCK_K) {
    fcl__say(why, why_len, "block_k = %u is below the SIMT forward's minimum of %u keys per tile",
             hint->block_k, MIN_BLOCK_K);
    return FCL_ERROR_UNSUPPORTED;
  }
  if (fixed_bk) bk_cap = hint->block_k;
  /* Then local memory: the largest power-of-two tile up to the cap that
   * fits, for each element size; 2-byte tiles only where they fit a larger
   * one. A requested size either fits or not. */
  unsigned bk = 0, best_elem = elems[0];
  for (int e = 0; e < n_elems; ++e) {
    plan.tile_elem_size = elems[e];
    for (unsigned b = bk_cap; b >= MIN_BLOCK_K; b /= 2) {
      plan.block_k = b;
      if (fcl__flash_local_bytes(&plan, limits) <= budget) {
        if (b > bk) bk = b, best_elem = elems[e];
        break;
      }
      if (fixed_bk) break;
    }
  }
  plan.tile_elem_size = best_elem;
  plan.block_k = bk;
  if (bk < MIN_BLOCK_K) {
    plan.block_k = fixed_bk ? hint->block_k : MIN_BLOCK_K;
    plan.tile_elem_size = elems[n_elems - 1];
    fcl__say(why, why_len,
        "head_dim %zu needs %zu bytes of local memory per work-group; the "
        "device allows %zu",
        desc->head_dim, fcl__flash_local_bytes(&plan, limits),
        (size_t)budget);
    return FCL_ERROR_UNSUPPORTED;
  }
  plan.local_bytes = fcl__flash_local_bytes(&plan, limits);
  FCL_FORWARD_IF(check_pages_fit(&shape, &plan, why, why_len));
  choose_splits(limits, desc, hint, &plan);
  FCL_FORWARD_IF(choose_merge(limits, desc, hint, &plan, why, why_len));
  plan.packed_heads = packed;
  *out = plan;
  return FCL_SUCCESS;
}

fcl_status fcl_plan_flash(const fcl_device_limits *limits,
                          const fcl_attention_desc *desc, fcl_pass pass,
                          fcl_plan *plan, char *why, size_t why_len) {
  return fcl__plan_flash(limits, desc, pass, NULL, plan, why, why_len);
}

fcl_status fcl_plan_flash_hinted(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc, fcl_pass pass,
                                 const fcl_plan *hint, fcl_plan *plan, char *why,
                                 size_t why_len) {
  return fcl__plan_flash(limits, desc, pass, hint, plan, why, why_len);
}
