/*
 * plan.c — the tile planner: device limits + problem -> a flash kernel
 * family and its tiling, through that family's rules (families.c; the
 * rules in plan_simt.c, plan_mma.c, plan_decode.c, plan_cpu.c), then what
 * every forward shares: packed heads, key splits and their merge. Pure: no
 * OpenCL calls, so tests can feed it made-up devices.
 */
#include "common.h"
#include "tuning.h"
#include "errors.h"
#include "problem.h"
#include "plan.h"
#include "rules.h"
#include "families.h"
#include "merge_layout.h"

#include <limits.h>

#include <stdio.h>

#define SPLIT_MIN_KEYS 256u       /* a split's fewest keys, where the planner splits */
/* The decode kernels' split target (plan_decode.c): one wave, the
 * work-groups of 128 a multiprocessor holds at the kernels' registers, at
 * most 64 splits (docs/design.md, "The rules, measured"): 3 for a
 * quantized cache on matrix instructions with at most 8 rows a block (its
 * transposed products: 152-168 registers on the H100's and H200's driver),
 * else 2 (the f16 cache's kernel holds 3 too but streams at the copy peak
 * with 4 splits where 6 were 3-4% slower; 178-253 registers otherwise,
 * and the SIMT kernel's). */
#define DECODE_MAX_SPLITS 64u
static size_t decode_wgs_per_cu(const fcl_plan *plan, const fcl_attention_desc *desc) {
  return plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA && plan->block_q <= 8 &&
                 desc->kv_dtype != FCL_KV_AS_DTYPE
             ? 3
             : 2;
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
  /* the wgmma forward's warpgroups: 3 of them are 384 work-items */
  const int warpgroups = hint->kernel == FCL_FLASH_KERNEL_WGMMA && wg % 128 == 0;
  if (wg != 0 && (wg > 1024 || ((wg & (wg - 1)) != 0 && !warpgroups) || (g && wg % g))) {
    fcl__say(why, why_len,
        "wg_size = %u; it must be a power of two up to 1024 (for the wgmma forward, or "
        "a multiple of 128) and a multiple of threads_per_row",
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
  if (hint->v_stages > 2) {
    fcl__say(why, why_len, "v_stages = %u; it must be 0, 1 or 2", hint->v_stages);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (hint->split_keys) {
    fcl__say(why, why_len,
             "split_keys = %u: the planner sets it (the batch-invariant mode); a hint gives "
             "splits",
             hint->split_keys);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  return FCL_SUCCESS;
}

const char *fcl_flash_kernel_name(unsigned kernel) {
  static const char *const names[] = {"auto", "simt", "mma", "decode", "decode-mma", "cpu",
                                       "wgmma"};
  return kernel < sizeof names / sizeof names[0] ? names[kernel] : "unknown";
}

const char *fcl_split_merge_name(unsigned merge) {
  static const char *const names[] = {"auto", "kernel", "last-split"};
  return merge < sizeof names / sizeof names[0] ? names[merge] : "unknown";
}

unsigned fcl__split_keys(const fcl_plan *plan, size_t seqlen_k) {
  if (plan->split_keys) return plan->split_keys;
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

/* The forward's blocks unsplit: work-groups of block_q rows of each head
 * (packed: of each KV head's slots) of each sequence. */
static size_t forward_blocks(const fcl_attention_desc *desc, const fcl_plan *plan) {
  return desc->batch * desc->heads_q * ((desc->seqlen_q + plan->block_q - 1) / plan->block_q);
}

/* The time of `groups` blocks split `splits` times in waves of `slots`
 * work-groups: whole waves, each of a block's 1 / splits. */
static double waves_time(size_t groups, size_t slots, size_t splits) {
  return (double)((groups * splits + slots - 1) / slots) / (double)splits;
}

/* The split count in [1, most] whose waves of `slots` work-groups (a
 * device's, `groups` blocks each split that many times) take the least
 * time, counting a wave as a whole one and a block's work as 1 / splits;
 * the fewest splits within 5% of the least. A quantized cache at B 32 and
 * 64 x 8k on the H100 (256 and 512 blocks, 396 slots): 3 splits against
 * the unsplit call, int8 0.222 against 0.239 ms and 0.436 against 0.514
 * (docs/performance.md, v38). */
static size_t fullest_waves_splits(size_t groups, size_t slots, size_t most) {
  double least = waves_time(groups, slots, 1);
  for (size_t s = 2; s <= most; ++s) {
    const double t = waves_time(groups, slots, s);
    if (t < least) least = t;
  }
  for (size_t s = 1; s <= most; ++s)
    if (waves_time(groups, slots, s) <= least * 1.05) return s;
  return 1;
}

/* The forward's key splits (fcl_plan.splits says the rule): the hint's
 * count or the planner's, then as many as the tiles of split_keys need. The
 * decode kernels' target is their own (decode_wgs_per_cu): as many splits
 * as fill one wave; with 2 a compute unit, the power of two below, which
 * reproduces the counts measured best; with 3, all of them (B 8 x 8k on
 * the H100: 6, where 4 and 8 were slower for an int8 or fp8 cache), and
 * where the blocks fill a wave unsplit, the count whose waves are fullest
 * (fullest_waves_splits). */
static void choose_splits(const fcl_device_limits *limits, const fcl__shape *sh,
                          const fcl_attention_desc *desc, const fcl_plan *hint, fcl_plan *plan) {
  plan->split_keys = 0;
  /* an O wider than the merge kernel takes (beyond 512: head_dim_v) is not
   * split unless asked (choose_merge says why a kernel merge cannot) */
  if (!fcl__merge_takes(limits, sh->head_dim_v) && !(hint && hint->splits)) {
    plan->splits = 1;
    return;
  }
  if (desc->batch_invariant && !(hint && hint->splits)) {
    /* Batch-invariant: splits of a fixed size, whole tiles (block_k is a
     * power of two up to 128), doubled only past FCL_MAX_SPLITS of them;
     * for calls of few query rows (desc: packed) only, whose blocks are
     * too few to fill a device unsplit. */
    plan->splits = 1;
    const size_t most_rows = fcl__decode_plan_wide(plan) ? FCL_BATCH_INVARIANT_SPLIT_ROWS_WIDE
                                                         : FCL_BATCH_INVARIANT_SPLIT_ROWS;
    if (desc->seqlen_q > most_rows) return;
    size_t keys = (FCL_BATCH_INVARIANT_SPLIT_KEYS + plan->block_k - 1) / plan->block_k *
                  plan->block_k;
    while ((desc->seqlen_k + keys - 1) / keys > FCL_MAX_SPLITS) keys *= 2;
    plan->split_keys = (unsigned)keys;
    plan->splits = (unsigned)((desc->seqlen_k + keys - 1) / keys);
    if (plan->splits <= 1) plan->splits = 1, plan->split_keys = 0;
    return;
  }
  const int decode = fcl__decode_kernel_family(plan->kernel);
  const size_t cus = fcl__compute_units(limits);
  const size_t groups = forward_blocks(desc, plan);
  size_t splits = 1;
  if (hint && hint->splits) {
    splits = hint->splits;
  } else {
    const size_t per_cu = decode_wgs_per_cu(plan, desc);
    const size_t by_keys = (desc->seqlen_k + SPLIT_MIN_KEYS - 1) / SPLIT_MIN_KEYS;
    size_t most = decode ? DECODE_MAX_SPLITS : FCL_MAX_SPLITS;
    if (most > by_keys) most = by_keys;
    if (groups < cus) {
      const size_t wave = per_cu * cus / groups;
      splits = !decode ? (2 * cus + groups - 1) / groups
               : per_cu == 2 ? fcl__floor_pow2(wave)
                             : wave;
    } else if (decode && per_cu == 3) {
      splits = fullest_waves_splits(groups, per_cu * cus, most);
    }
    if (splits > most) splits = most;
  }
  plan->splits = (unsigned)splits;
  const size_t keys = fcl__split_keys(plan, desc->seqlen_k);
  plan->splits = (unsigned)((desc->seqlen_k + keys - 1) / keys);
}

/* The decode kernel's order of products (fcl_plan.decode_untransposed).
 * Transposed, a 16-bit cache's kernel holds three work-groups a
 * multiprocessor (164-168 registers on NVIDIA's driver), untransposed two
 * (214). An unsplit call runs its blocks in waves of those: where the
 * transposed kernel's last wave would be under half full, the untransposed
 * one (docs/design.md, "The decode kernel's order of products: waves"). A
 * quantized cache keeps the transposed kernel (unmeasured otherwise). */
#define DECODE_T_WGS_PER_CU 3u
static void choose_decode_order(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                                fcl_plan *plan) {
  plan->decode_untransposed = 0;
  if (plan->kernel != FCL_FLASH_KERNEL_DECODE_MMA || plan->block_q > 8 || plan->splits > 1 ||
      desc->kv_dtype != FCL_KV_AS_DTYPE || !fcl__mma_native(limits) ||
      fcl__decode_plan_wide(plan))
    return;
  const size_t wave = DECODE_T_WGS_PER_CU * fcl__compute_units(limits);
  const size_t blocks = forward_blocks(desc, plan), last = blocks % wave;
  plan->decode_untransposed = blocks > wave && last != 0 && 2 * last < wave;
}

/* How a split forward merges (fcl_plan.merge says the rule). The merge in
 * the split launch saves the host a second launch but ends each
 * work-group on a device-wide fence and its block on one work-group's
 * merge: it wins where the host's launches bound the call, and loses a
 * little where the device does (docs/design.md, "The rules, measured"). So
 * it is taken where the call reads at most MERGE_IN_LAUNCH_BYTES_PER_CU of
 * K and V per compute unit, and only where its fence and count were proven:
 * NVIDIA's driver and CPUs (PoCL; their decode kernels are asked for, never
 * planned). */
#define MERGE_IN_LAUNCH_BYTES_PER_CU ((size_t)256 << 10)
static fcl_status choose_merge(const fcl_device_limits *limits, const fcl__shape *sh,
                               const fcl_attention_desc *desc, const fcl_plan *hint,
                               fcl_plan *plan, char *why, size_t why_len) {
  plan->merge = FCL_SPLIT_MERGE_AUTO;
  if (plan->splits <= 1) return FCL_SUCCESS;
  const int decode = fcl__decode_kernel_family(plan->kernel);
  const size_t row_floats = decode ? fcl__decode_state_row_floats(plan) : 0;
  const int fits = decode && plan->splits <= row_floats;
  /* batch-invariant: the merge kernel, whose order is each row's own
   * (fcl__merge_layout_parts) */
  const unsigned wanted = hint && hint->merge      ? hint->merge
                          : desc->batch_invariant ? FCL_SPLIT_MERGE_KERNEL
                                                  : FCL_SPLIT_MERGE_AUTO;
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
  const size_t cus = fcl__compute_units(limits);
  const int short_call = kv_bytes <= (double)cus * (double)MERGE_IN_LAUNCH_BYTES_PER_CU;
  const int kernel_takes = fcl__merge_takes(limits, sh->head_dim_v);
  FCL_WHY_IF(!kernel_takes && (wanted == FCL_SPLIT_MERGE_KERNEL || !fits),
             FCL_ERROR_UNSUPPORTED,
             "%u splits of head_dim_v %zu: the merge kernel takes up to %u on this device; "
             "the merge in the split launch (decode kernels, as many splits as a row's "
             "local state holds) takes wider",
             plan->splits, sh->head_dim_v,
             4 * fcl__merge_layout_of(limits, sh->head_dim_v, 1).wg_size);
  const int proven = limits->nvidia_ptx || !limits->is_gpu;
  /* The wide decode's block is 32 rows of 512 columns: its last split
   * merging them alone took longer than a launch of the merge kernel (H200,
   * MLA B 1 x 8k: 0.120 ms in the launch, B 2 with the merge kernel 0.063) */
  const int short_merge = short_call && !fcl__decode_plan_wide(plan);
  plan->merge = wanted ? wanted
                : fits && ((proven && short_merge) || !kernel_takes) ? FCL_SPLIT_MERGE_LAST_SPLIT
                                                                     : FCL_SPLIT_MERGE_KERNEL;
  return FCL_SUCCESS;
}

/* A paged forward reads each page lookup's keys from one page (cl/blocks.cl,
 * PAGED; fcl__page_lookup_keys): at most 16, which every page size is a
 * multiple of, so this holds for every family's tiles. */
static fcl_status check_pages_fit(const fcl__shape *sh, const fcl_plan *plan, char *why,
                                  size_t why_len) {
  const unsigned keys = fcl__page_lookup_keys(plan);
  FCL_WHY_IF(sh->paged && sh->desc.page_size % keys != 0, FCL_ERROR_UNSUPPORTED,
             "%u keys a page lookup do not divide page_size = %zu: a lookup's keys would "
             "straddle two pages",
             keys, sh->desc.page_size);
  return FCL_SUCCESS;
}

fcl_status fcl__check_tiling_hint(fcl_context *ctx, const fcl_plan *hint) {
  char why[160];
  fcl_status status = fcl__check_tiling_hint_why(hint, why, sizeof why);
  FCL_RETURN_IF(ctx, status != FCL_SUCCESS, status, "%s", why);
  return FCL_SUCCESS;
}

/* A value head size of its own (head_dim_v), once the family is chosen:
 * the decode kernels take it (paged and split too); the SIMT and CPU
 * kernels take it, unsplit, from contiguous K and V; the others keep one
 * width (docs/design.md, "A value head size of its own"). */
static fcl_status check_value_width(const fcl__shape *sh, unsigned kernel, const fcl_plan *hint,
                                    char *why, size_t why_len) {
  const fcl_attention_desc *desc = &sh->desc;
  if (sh->head_dim_v == desc->head_dim || fcl__decode_kernel_family(kernel)) return FCL_SUCCESS;
  FCL_WHY_IF(kernel != FCL_FLASH_KERNEL_SIMT && kernel != FCL_FLASH_KERNEL_CPU,
             FCL_ERROR_UNSUPPORTED,
             "head_dim_v = %zu with head_dim = %zu: the %s kernels keep one width for Q, K, "
             "V and O; the SIMT and CPU kernels, the decode kernels' forward (or "
             "FCL_ALGO_NAIVE) take a value width of its own",
             sh->head_dim_v, desc->head_dim, fcl_flash_kernel_name(kernel));
  FCL_WHY_IF(sh->paged, FCL_ERROR_UNSUPPORTED,
             "head_dim_v = %zu with head_dim = %zu: a paged KV cache keeps one width for K "
             "and V but on the decode kernels", sh->head_dim_v, desc->head_dim);
  FCL_WHY_IF(hint && hint->splits > 1, FCL_ERROR_UNSUPPORTED,
             "splits = %u with head_dim_v = %zu: the %s kernels' split merges keep O at "
             "head_dim = %zu; a value width of its own runs unsplit there",
             hint->splits, sh->head_dim_v, fcl_flash_kernel_name(kernel), desc->head_dim);
  return FCL_SUCCESS;
}

/* A hint naming a SIMT layout field asks for the SIMT kernels. */
static int simt_hinted(const fcl_plan *hint) {
  return hint && (hint->threads_per_row || hint->rows_per_thread || hint->tile_elem_size);
}

/* Whether the tensor-core kernels run: the hint's, else the rules'. */
static int mma_chosen(const fcl_device_limits *limits, const fcl__shape *sh,
                      const fcl_plan *hint) {
  if (hint && hint->kernel) return hint->kernel == FCL_FLASH_KERNEL_MMA;
  /* the MMA forward's tiles arrive by cp.async as storage bytes: a
   * quantized KV cache is read by the other families */
  return !simt_hinted(hint) && sh->vec4 && !sh->kv_quant && sh->head_dim_v == sh->desc.head_dim &&
         fcl__mma_suits(limits, &sh->desc);
}

/* The family that plans a pass: the hint's kernel, else the rules' (the
 * forward's `desc` as the planner sees it, packed; `mma` mma_chosen's
 * answer): on a CPU the CPU kernels, else a decode kernel, the tensor
 * cores, else SIMT. */
static unsigned choose_family(const fcl_device_limits *limits, const fcl__shape *sh,
                              const fcl_attention_desc *desc, const fcl_plan *hint,
                              fcl_pass pass, int mma) {
  if (hint && hint->kernel) return hint->kernel;
  if (simt_hinted(hint)) return FCL_FLASH_KERNEL_SIMT;
  if (pass == FCL_PASS_BACKWARD)
    return mma                             ? FCL_FLASH_KERNEL_MMA
           : fcl__cpu_kernels_suit(limits) ? FCL_FLASH_KERNEL_CPU
                                           : FCL_FLASH_KERNEL_SIMT;
  /* Widths past the tiles' (fcl__decode_only): the decode kernel's alone,
   * on a CPU too, whose kernels keep FCL_MAX_TILED_HEAD_DIM. */
  if (fcl__decode_only(sh)) return fcl__decode_kernel(limits, sh, desc->seqlen_q);
  /* On a CPU, the CPU kernels whatever the query rows: PoCL vectorises
   * the SIMT kernels' work-items only partly, and a decode row in a
   * 16-row vector still ran 3-7x faster (docs/design.md, "The CPU
   * kernels' rows"); one family also makes a decode step's row a prefill
   * chunk's in the batch-invariant mode. */
  if (fcl__cpu_kernels_suit(limits)) return FCL_FLASH_KERNEL_CPU;
  /* two widths: a decode-shaped call on the decode kernels (as one width),
   * else SIMT (check_value_width) */
  const unsigned decode = fcl__decode_kernel(limits, sh, desc->seqlen_q);
  return decode ? decode : mma ? FCL_FLASH_KERNEL_MMA : FCL_FLASH_KERNEL_SIMT;
}

fcl_status fcl__plan_flash(const fcl_device_limits *limits,
                           const fcl_attention_desc *given, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why,
                           size_t why_len) {
  fcl__shape shape;
  return fcl__plan_flash_shape(limits, given, pass, hint, out, &shape, why, why_len);
}

fcl_status fcl__plan_flash_shape(const fcl_device_limits *limits,
                                 const fcl_attention_desc *given, fcl_pass pass,
                                 const fcl_plan *hint, fcl_plan *out, fcl__shape *shape_out,
                                 char *why, size_t why_len) {
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
  FCL_FORWARD_IF(fcl__check_desc_why(given, &shape, why, why_len));
  FCL_FORWARD_IF(fcl__plan_shape(limits, &shape, pass, hint, out, why, why_len));
  *shape_out = shape;
  return FCL_SUCCESS;
}

fcl_status fcl__plan_shape(const fcl_device_limits *limits, const fcl__shape *sh, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why, size_t why_len) {
  if (hint) FCL_FORWARD_IF(fcl__check_tiling_hint_why(hint, why, why_len));
  const fcl_attention_desc *desc = &sh->desc;
  FCL_WHY_IF(limits->max_work_group_size == 0, FCL_ERROR_UNSUPPORTED,
             "the device reports a work-group limit of 0");
  const int backward = pass == FCL_PASS_BACKWARD;
  /* Widths past the tiles': the decode forward's alone. */
  const int decode_only = fcl__decode_only(sh);
  FCL_WHY_IF(backward && hint && fcl__kernel_forward_only(hint->kernel), FCL_ERROR_UNSUPPORTED,
             "the decode and wgmma kernels are forwards; the backward runs SIMT, MMA or CPU");
  const int mma = !decode_only && mma_chosen(limits, sh, hint);
  FCL_WHY_IF(mma && !sh->vec4 && desc->head_dim % 4 == 0,
             FCL_ERROR_UNSUPPORTED,
             "the MMA kernels load groups of four elements: they need head_dim (%zu) and "
             "every tensor's offset and strides to be multiples of 4 elements",
             desc->head_dim);  /* (else the MMA planner says why) */
  FCL_WHY_IF(backward && sh->kv_quant, FCL_ERROR_UNSUPPORTED,
             "a quantized KV cache (kv_dtype %s) is for the forward; the backward takes K and "
             "V in the storage type (kv_dtype FCL_KV_AS_DTYPE)",
             fcl_kv_dtype_name(desc->kv_dtype));
  FCL_WHY_IF(mma && sh->kv_quant, FCL_ERROR_UNSUPPORTED,
             "the MMA forward copies K and V tiles as storage bytes; a %s KV cache runs on "
             "the other kernels", fcl_kv_dtype_name(desc->kv_dtype));
  FCL_WHY_IF(backward && sh->paged, FCL_ERROR_UNSUPPORTED,
             "a paged KV cache (block_table) is for the forward; the backward takes "
             "contiguous K and V");
  FCL_WHY_IF(backward && desc->seqlens_k, FCL_ERROR_UNSUPPORTED,
             "a KV cache's lengths (seqlens_k) are for the forward; the backward takes "
             "whole sequences (or cu_seqlens)");
  /* Packed, the forward's planner sees a group's rows as one head's. */
  unsigned packed = 1;
  if (!backward) FCL_FORWARD_IF(choose_packing(sh, hint, &packed, why, why_len));
  fcl_attention_desc packed_desc = *desc;
  packed_desc.seqlen_q *= packed;
  packed_desc.heads_q /= packed;
  const unsigned kernel = choose_family(limits, sh, &packed_desc, hint, pass, mma);
  FCL_WHY_IF(decode_only && (backward || !fcl__decode_kernel_family(kernel)),
             FCL_ERROR_UNSUPPORTED,
             "head_dim = %zu, head_dim_v = %zu: the %s %s keeps widths of at most "
             "FCL_MAX_TILED_HEAD_DIM = %d; the decode kernels' forward (vec4 shapes) and "
             "FCL_ALGO_NAIVE take these",
             desc->head_dim, sh->head_dim_v, fcl_flash_kernel_name(kernel),
             backward ? "backward" : "forward", FCL_MAX_TILED_HEAD_DIM);
  FCL_FORWARD_IF(check_value_width(sh, kernel, hint, why, why_len));
  const fcl__family_pass *family = fcl__family_pass_of(kernel, pass);
  fcl_plan plan;  /* `out` is written on success only */
  if (backward) {
    FCL_FORWARD_IF(family->plan(limits, sh, desc, hint, &plan, why, why_len));
    *out = plan;
    return FCL_SUCCESS;
  }
  FCL_FORWARD_IF(family->plan(limits, sh, &packed_desc, hint, &plan, why, why_len));
  FCL_FORWARD_IF(check_pages_fit(sh, &plan, why, why_len));
  if (sh->head_dim_v == desc->head_dim || fcl__decode_kernel_family(kernel)) {
    choose_splits(limits, sh, &packed_desc, hint, &plan);
    /* a split SIMT forward's smaller key tile, where its vendor needs one
     * (fcl__simt_split_block_k): planned again with it, then split again */
    const unsigned split_bk = kernel == FCL_FLASH_KERNEL_SIMT && !(hint && hint->block_k) &&
                                      !desc->batch_invariant
                                  ? fcl__simt_split_block_k(limits, &plan)
                                  : plan.block_k;
    if (split_bk < plan.block_k) {
      fcl_plan split_hint = hint ? *hint : (fcl_plan){0};
      split_hint.block_k = split_bk;
      FCL_FORWARD_IF(family->plan(limits, sh, &packed_desc, &split_hint, &plan, why, why_len));
      choose_splits(limits, sh, &packed_desc, hint, &plan);
    }
    FCL_FORWARD_IF(choose_merge(limits, sh, &packed_desc, hint, &plan, why, why_len));
    choose_decode_order(limits, &packed_desc, &plan);
  } else {  /* unsplit (check_value_width) */
    plan.splits = 1;
    plan.split_keys = 0;
    plan.merge = FCL_SPLIT_MERGE_AUTO;
  }
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
