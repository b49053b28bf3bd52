/*
 * plan_simt.c — the SIMT kernels' tilings (flash_fwd.cl, flash_bwd.cl): the
 * rules that fit a work-item's private floats to the vendor's registers and
 * the tiles to local memory. docs/design.md ("The SIMT rules") says why.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"
#include "rules.h"

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
/* The forward's extra private floats (register_budget) on AMD's wave64
 * chips (CDNA: MI300X), per key of the tile where a row's lanes sum its
 * scores by shuffles (their partial sums stay live), for 2 waves per
 * SIMD (at most 256 of a lane's 512 VGPRs and AGPRs): clang 15 for gfx940
 * gave d 64 (2 lanes a row), 96 and 128 (4) 256 VGPRs and 40-120 AGPRs at
 * Bc 32, 1 wave, and 170-182 VGPRs at Bc 16 and 8, 2 waves; d 32 (1 lane)
 * 184 at Bc 32, 2 waves. */
#define FWD_SHARED_CDNA 1u
/* The largest key tile of a SIMT forward split over the keys (SPLIT_KV) on
 * AMD's wave64 chips where lanes share a row: clang 15 for gfx940 gave the
 * split forwards at Bc 16 (d 64-256, 2-8 lanes a row) 256 VGPRs and 6-63
 * AGPRs, one wave per SIMD, where the unsplit ones took 2; at Bc 8, 180-232
 * VGPRs and 2 waves (scripts/vendor-check.sh --grid cover). */
#define FWD_SPLIT_BLOCK_K_CDNA 8u
/* The forward's extra private floats on Intel's GPUs per key of the tile
 * and row where a block packs the query heads of a KV head (PACK_GQA) and
 * lanes share a row: IGC 1.0.12504 spilled such tilings within the budget
 * (Arc A770, SIMD8: d 224 at Bc 32; Max 1550, SIMD16: d 96-256 at 80
 * floats) and not at half the tile or twice the lanes (scripts/
 * vendor-check.sh --grid cover; docs/design.md, "Every planned kernel,
 * compiled"). */
#define FWD_PACKED_XE_HPG 2u
#define FWD_PACKED_XE_HPC 1u
/* Intel's extra per key of the tile where lanes share a row (their partial
 * scores summed through local memory), as CDNA's: IGC 1.0.12504 spilled,
 * on the Max 1550 (SIMD16, at 80 floats) d 64 (2 lanes) at Bc 16 with a
 * window (512 bytes) and d 96, 128 and 256 (4, 4, 8) paged at Bc 32, 16,
 * 16 (320-896); on the Arc A770 (SIMD8, at 128) d 64, 128 and 256 (2, 4, 8)
 * paged at Bc 32 (cost 96 without the term; 192-512 bytes), where 1 lane
 * a row took Bc 64 (cost 128) clean; none of them at half the tile
 * (scripts/vendor-check.sh --grid cover, scripts/vendor-compile.sh). A
 * paged plan is the unpaged one (tests/test_plan.c), so the term is the
 * paged kernels' for both. */
#define FWD_SHARED_XE_HPG 2u
#define FWD_SHARED_XE_HPC 1u
/* Intel's compilers and slices of 28 floats (the 224 bucket over 8
 * lanes): IGC spilled such forwards at every tile above 4 keys on the
 * Max 1550 (256-896 bytes, not monotonic in the tile: Bc 8 spilled more
 * than 16) and at 16-32 on the Arc A770, where the 256 bucket (slices of
 * 32) compiled clean at the tile the model gives it; the forward pads 224
 * to 256 there (14% more work; Bc 4 would be 4x the tiles). */
#define FWD_INTEL_NO_BUCKET 224u

/* Private floats a work-item may keep without spilling, per vendor, and
 * the forward's cost model: a work-item's q and accumulator slices, one
 * score per key of the tile, and the extra its vendor's compiler spends.
 * The numbers above are NVIDIA's (255 registers a work-item; no extra);
 * Intel's and AMD's are what their compilers took without spilling
 * (scripts/vendor-check.sh; docs/design.md, "Every planned kernel,
 * compiled", which also says where this model does not reach). */
typedef struct register_budget {
  unsigned fwd;         /* q + accumulator slices + Bc scores (+ the extra) */
  unsigned fwd_row;     /* q + accumulator slices */
  unsigned bwd;         /* the backward's four row slices */
  unsigned fwd_shared;  /* extra: per key of the tile where lanes share a row (g > 1) */
  /* extra: per key of the tile and row where a block packs heads (PACK_GQA)
   * and lanes share a row (g > 1) */
  unsigned fwd_packed;
} register_budget;

static register_budget register_budget_of(const fcl_device_limits *limits) {
  if (limits->vendor == FCL_VENDOR_INTEL)
    return limits->sub_group_size <= 8
               ? (register_budget){128, 64, 32, FWD_SHARED_XE_HPG, FWD_PACKED_XE_HPG}
               : (register_budget){80, 64, 32, FWD_SHARED_XE_HPC, FWD_PACKED_XE_HPC};
  if (limits->vendor == FCL_VENDOR_AMD)
    return (register_budget){96, 64, 64, limits->sub_group_size >= 64 ? FWD_SHARED_CDNA : 0, 0};
  return (register_budget){PRIVATE_FLOATS, PRIVATE_ROW_FLOATS, BWD_PRIVATE_FLOATS, 0, 0};
}

/* The forward's private floats by the cost model (register_budget). */
static unsigned fwd_cost(const register_budget *regs, const fcl_plan *plan) {
  const unsigned rows = plan->rows_per_thread;
  const unsigned widths = plan->head_dim_padded + fcl__plan_head_dim_v(plan);  /* q + acc */
  return rows * (widths / plan->threads_per_row + plan->block_k) +
         (plan->threads_per_row > 1 ? plan->block_k * regs->fwd_shared : 0) +
         (plan->packed_heads > 1 && plan->threads_per_row > 1
              ? rows * plan->block_k * regs->fwd_packed
              : 0);
}

int fcl__simt_forward_registers(const fcl_device_limits *limits, const fcl_plan *plan,
                                unsigned *cost, unsigned *budget) {
  const register_budget regs = register_budget_of(limits);
  *cost = fwd_cost(&regs, plan);
  *budget = regs.fwd;
  return *cost <= *budget;
}

unsigned fcl__simt_split_block_k(const fcl_device_limits *limits, const fcl_plan *plan) {
  const int cdna = limits->vendor == FCL_VENDOR_AMD && limits->sub_group_size >= 64;
  return cdna && plan->splits > 1 && plan->threads_per_row > 1 &&
                 plan->block_k > FWD_SPLIT_BLOCK_K_CDNA
             ? FWD_SPLIT_BLOCK_K_CDNA
             : plan->block_k;
}

/* flash-attn's head_dim buckets: one kernel build serves a range of head
 * dims; the real head_dim is a run-time argument. */
static unsigned head_dim_bucket(size_t d) {
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  return (unsigned)((d + 31) / 32 * 32);
}

/* The forward's bucket on Intel's GPUs: the next one where their compiler
 * spilled every good tile of this one (FWD_INTEL_NO_BUCKET). */
static unsigned intel_forward_bucket(size_t d) {
  const unsigned b = head_dim_bucket(d);
  return b == FWD_INTEL_NO_BUCKET ? b + 32 : b;
}

/* Bytes of one tile element: the plan's, floats when unset. */
static size_t tile_elem(const fcl_plan *plan) {
  return plan->tile_elem_size ? plan->tile_elem_size : sizeof(float);
}

/* Local bytes of flash_fwd.cl for a tiling; mirrors its __local arrays. */
size_t fcl__flash_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits) {
  const size_t g = plan->threads_per_row, wg = plan->wg_size;
  const int sums_in_local = fcl__sums_in_local(limits, wg, (unsigned)g);
  return FCL_SIMT_FWD_LOCAL_BYTES((size_t)plan->head_dim_padded,
                                  (size_t)fcl__plan_head_dim_v(plan), g, (size_t)plan->block_k, wg,
                                  (size_t)tile_elem(plan), sums_in_local);
}

/* A work-item's slice of the wider of a backward plan's two buckets. */
static unsigned bwd_widest_slice(const fcl_plan *plan) {
  const unsigned hdv = fcl__plan_head_dim_v(plan);
  const unsigned widest = hdv > plan->head_dim_padded ? hdv : plan->head_dim_padded;
  return widest / plan->threads_per_row;
}

/* Mirrors flash_bwd.cl: SUB_ROWS is the largest of 8, 4, 2, 1 dividing the
 * tile, and at most 4 where eight work-items share a row: ocloc spilled
 * the d = 128 dK/dV kernel on a Max 1550 with 8 (192 bytes a thread) and
 * not with 4. On AMD and Intel, slices of 24 floats take at most 2 and of
 * 32 one: with 4, the Max 1550 spilled both kernels at d = 192 and 256
 * (256-448 bytes) and RDNA the d = 256 dK/dV (180-528 bytes a lane), with
 * 2, RDNA still 44 (scripts/vendor-check.sh). On AMD a work-item that
 * holds whole rows (one a row: bucket 16) takes at most 4: with 8, with no
 * sum over lanes between them, clang-15 kept all 8 rows' loads live, and
 * spilled 364-524 bytes a lane for gfx1030 (both kernels) and took 1 wave
 * and 65-98 AGPRs for gfx940; with 4, at most 222 VGPRs for gfx1030 and
 * 228 (2-3 waves) for gfx940. On Intel, 2 from slices of 16: with 4, the
 * dK/dV kernel with the window in the parameter block spilled at d = 128
 * on the Arc A770 and 160 on both (256-448 bytes). */
unsigned fcl__flash_bwd_sub_rows(const fcl_plan *plan, const fcl_device_limits *limits) {
  unsigned rows = plan->block_k;
  const unsigned slice = bwd_widest_slice(plan);
  const int narrow = limits->vendor == FCL_VENDOR_AMD || limits->vendor == FCL_VENDOR_INTEL;
  const int whole_rows_amd = plan->threads_per_row == 1 && limits->vendor == FCL_VENDOR_AMD;
  const unsigned two_from = limits->vendor == FCL_VENDOR_INTEL ? 16 : 24;
  const unsigned most = plan->threads_per_row < 8 && !whole_rows_amd ? 8
                        : !narrow || slice < two_from                ? 4
                        : slice < 32                                 ? 2
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

size_t fcl__sink_parts(size_t tokens_q) {
  const size_t parts = (tokens_q + 511) / 512;
  return parts < 1 ? 1 : parts > 256 ? 256 : parts;
}

/* Local bytes of flash_bwd.cl's dK/dV and dQ kernels, which declare the
 * same arrays: two streamed tiles, per-row statistics (LSE, D; no visible
 * keys' bounds, whatever the window: flash_bwd_rows.cl's BWD_KEY_SEEN_BY),
 * and, without sub-group shuffles (fcl__sums_by_shuffle), the partial dot
 * products of SUB_ROWS rows. */
size_t fcl__flash_bwd_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits) {
  const size_t g = plan->threads_per_row, wg = plan->wg_size;
  const int sums_in_local = fcl__sums_in_local(limits, wg, (unsigned)g);
  return FCL_SIMT_BWD_LOCAL_BYTES((size_t)plan->head_dim_padded,
                                  (size_t)fcl__plan_head_dim_v(plan), g, (size_t)plan->block_k, wg,
                                  (size_t)tile_elem(plan), sums_in_local,
                                  (size_t)fcl__flash_bwd_sub_rows(plan, limits));
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
  if (desc->kv_dtype != FCL_KV_AS_DTYPE) {  /* K and V converted as they load: float tiles */
    if (want == 2)
      fcl__say(why, why_len, "tiles of 2-byte elements hold the storage type; a %s KV cache "
               "is converted to floats as it loads", fcl_kv_dtype_name(desc->kv_dtype));
    out[0] = sizeof(float);
    return want == 2 ? 0 : 1;
  }
  if (want) {
    out[0] = want;
    return 1;
  }
  out[0] = sizeof(float);
  out[1] = 2;
  return store == 2 ? 2 : 1;
}

/* Whether the backward takes 2-byte tiles whatever fits (f16 and bf16
 * storage): on the Max 1550 (SIMD16), where a work-item holds slices of 32
 * floats (d 256 over 8 lanes, one streamed row at a time) and the window is
 * in the parameter block, IGC 1.0.12504 spilled the dK/dV kernel with float
 * tiles (128 bytes, work-groups of 32-128, every type) and not with 2-byte
 * ones, whose reads take half the registers, when the rows' key bounds were
 * in local memory. */
static int bwd_half_tiles(const fcl_device_limits *limits, unsigned slice, int general_window) {
  return limits->vendor == FCL_VENDOR_INTEL && limits->is_gpu && limits->sub_group_size >= 16 &&
         slice >= 32 && general_window;
}

/* The work-group halved (down to `floor` and g) while a launch over `seqs`
 * sequences of `seqlen` rows, wg / g * rows a work-group, has fewer than
 * two work-groups per compute unit: small problems still fill the device. */
static unsigned fill_device(const fcl_device_limits *limits, unsigned wg, unsigned g,
                            unsigned rows, size_t seqs, size_t seqlen, unsigned floor) {
  const size_t want = 2 * (size_t)fcl__compute_units(limits);
  for (;;) {
    const size_t block = (size_t)wg / g * rows;
    const size_t groups = seqs * ((seqlen + block - 1) / block);
    if (groups >= want || wg / 2 < floor || wg / 2 < g) return wg;
    wg /= 2;
  }
}

/* The backward's rule (docs/design.md, "The SIMT rules"). */
fcl_status fcl__plan_backward_simt(const fcl_device_limits *limits, const fcl__shape *sh,
                                   const fcl_attention_desc *desc, const fcl_plan *hint,
                                   fcl_plan *out, char *why, size_t why_len) {
  const int general_window = fcl__window_of(desc) == FCL__WINDOW_GENERAL;
  const int fixed_wg = hint && hint->wg_size;
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_SIMT};
  const unsigned widest = fcl__set_head_dims(&plan, sh, head_dim_bucket);
  /* a row's q (or k) and accumulator (or v) slices together */
  const unsigned widths = plan.head_dim_padded + fcl__plan_head_dim_v(&plan);
  plan.rows_per_thread = limits->nvidia_ptx && widest <= 128 ? 2 : 1;
  if (hint && hint->rows_per_thread) plan.rows_per_thread = hint->rows_per_thread;

  const unsigned bwd_floats = register_budget_of(limits).bwd;
  /* CPUs up to head_dim 128: whole rows, as the forward (no registers to
   * budget; docs/design.md, "The rules, measured"). */
  const int cpu_rule = !limits->is_gpu && widest <= CPU_RULE_MAX_HEAD_DIM;
  unsigned g = 1;
  while (!cpu_rule && 2 * plan.rows_per_thread * widths / g > bwd_floats &&
         g < BWD_MAX_THREADS_PER_ROW)
    g *= 2;
  if (hint && hint->threads_per_row) g = hint->threads_per_row;

  unsigned wg = fixed_wg ? hint->wg_size : DEFAULT_WG;
  if (!fixed_wg && wg > limits->max_work_group_size)
    wg = fcl__floor_pow2(limits->max_work_group_size);
  if (g > wg) g = wg;  /* tiny work-group limits: fewer, wider slices */
  plan.threads_per_row = g;
  if (!fixed_wg) {
    /* Fill the device with dK/dV work-groups. */
    wg = fill_device(limits, wg, g, plan.rows_per_thread, desc->batch * desc->heads_kv,
                     desc->seqlen_k, MIN_WG);
  }
  const uint64_t budget = fcl__local_budget(limits);
  unsigned elems[2];
  int n_elems = tile_elem_choices(desc, hint, elems, why, why_len);
  if (!n_elems) return FCL_ERROR_UNSUPPORTED;
  if (n_elems == 2 && bwd_half_tiles(limits, bwd_widest_slice(&plan), general_window))
    elems[0] = 2, n_elems = 1;
  /* The largest work-group from wg down whose tiles fit, for each element
   * size; 2-byte tiles only where they fit a larger one. */
  unsigned best_wg = 0, best_elem = elems[0], smallest_wg = wg;
  for (int e = 0; e < n_elems; ++e) {
    plan.tile_elem_size = elems[e];
    for (unsigned w = wg;; w /= 2) {
      plan.wg_size = w;
      plan.block_q = plan.block_k = w / g * plan.rows_per_thread;
      smallest_wg = w;
      if (fcl__flash_bwd_local_bytes(&plan, limits) <= budget) {
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
  plan.local_bytes = fcl__flash_bwd_local_bytes(&plan, limits);
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

/* The forward's rule (docs/design.md, "The SIMT rules"); `desc` as the
 * planner sees it, packed heads' rows as one head's. */
fcl_status fcl__plan_forward_simt(const fcl_device_limits *limits, const fcl__shape *sh,
                                  const fcl_attention_desc *desc, const fcl_plan *hint,
                                  fcl_plan *out, char *why, size_t why_len) {
  fcl_plan plan = {.kernel = FCL_FLASH_KERNEL_SIMT};
  /* packed (plan.c): a group's heads as one head's rows; fwd_cost counts them */
  plan.packed_heads = desc->heads_q ? (unsigned)(sh->desc.heads_q / desc->heads_q) : 1;
  const unsigned widest = fcl__set_head_dims(
      &plan, sh,
      limits->vendor == FCL_VENDOR_INTEL && limits->is_gpu ? intel_forward_bucket : head_dim_bucket);
  const unsigned bucket = plan.head_dim_padded, bucket_v = fcl__plan_head_dim_v(&plan);
  const unsigned widths = bucket + bucket_v;  /* a row's q and accumulator slices */
  const unsigned both = bucket | bucket_v;  /* divisible by 2^n iff both are */

  const register_budget regs = register_budget_of(limits);
  /* CPUs: PoCL runs a work-group's work-items as SIMD lanes, and private
   * floats live in cache-resident memory, not registers: whole rows, two a
   * work-item, 32 keys a tile, up to the widest head_dim measured
   * (docs/design.md, "The rules, measured"). */
  const int cpu_rule = !limits->is_gpu && widest <= CPU_RULE_MAX_HEAD_DIM;
  unsigned g = 1, rows = cpu_rule ? 2 : 1;
  while (!cpu_rule && widths / g > regs.fwd_row && g < FWD_MAX_THREADS_PER_ROW) g *= 2;
  if (limits->nvidia_ptx) {
    unsigned g2 = 1;
    while (2 * widths / g2 > regs.fwd_row) g2 *= 2;
    if (g2 <= 2) g = g2, rows = 2;
  }
  if (hint && hint->threads_per_row) g = hint->threads_per_row;
  if (hint && hint->rows_per_thread) rows = hint->rows_per_thread;
  plan.rows_per_thread = rows;
  /* Narrower slices where even the smallest tile's cost is over the
   * budget (the vendor's extra), while float4 slices remain. */
  plan.block_k = MIN_BLOCK_K;
  plan.tile_elem_size = sizeof(float);
  for (plan.threads_per_row = g; !cpu_rule && !(hint && hint->threads_per_row) &&
                                 g < FWD_MAX_THREADS_PER_ROW && both % (8 * g) == 0 &&
                                 fwd_cost(&regs, &plan) > regs.fwd;)
    plan.threads_per_row = g *= 2;
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
  if (both % (4 * g) != 0) {  /* flash_fwd.cl's slices are whole float4s */
    fcl__say(why, why_len,
             "the forward cannot split head_dim %zu (bucket %u; V's %u) over %u work-items in "
             "float4 slices",
             desc->head_dim, bucket, bucket_v, g);
    return FCL_ERROR_UNSUPPORTED;
  }
  /* batch-invariant: the tile is chosen for this work-group, which the
   * rows below may shrink (local memory only shrinks with it) */
  const unsigned tile_wg = wg;
  if (!(hint && hint->wg_size)) {
    /* No larger a block than the rows there are (decode: a few rows),
     * down to a GPU's sub-group (a work-group narrower than an AMD
     * wavefront leaves lanes idle), or CPU_MIN_WG (PoCL vectorises across
     * work-items: idle rows cost it as much as live ones). */
    const unsigned gpu_floor = limits->sub_group_size > MIN_WG ? limits->sub_group_size : MIN_WG;
    unsigned floor_wg = limits->is_gpu ? gpu_floor : CPU_MIN_WG;
    unsigned fill_floor = limits->is_gpu ? gpu_floor : MIN_WG;
    /* batch-invariant: sums by shuffle or in local memory as at tile_wg */
    const unsigned width = fcl__shuffle_width(limits);
    const unsigned sums_floor = !desc->batch_invariant ? 0 : width < tile_wg ? width : tile_wg;
    if (floor_wg < sums_floor) floor_wg = sums_floor;
    if (fill_floor < sums_floor) fill_floor = sums_floor;
    while (wg / 2 >= floor_wg && wg / 2 >= g &&
           (size_t)wg / 2 / g * plan.rows_per_thread >= desc->seqlen_q)
      wg /= 2;
    wg = fill_device(limits, wg, g, plan.rows_per_thread, desc->batch * desc->heads_q,
                     desc->seqlen_q, fill_floor);
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
  /* Registers first: the largest Bc whose cost (fwd_cost: 2 * slice +
   * rows * Bc private floats and the vendor's extra) fits the budget. */
  unsigned most_bk = cpu_rule ? CPU_BLOCK_K : MAX_BLOCK_K;
  const int fixed_bk = hint && hint->block_k;
  if (fixed_bk && hint->block_k < MIN_BLOCK_K) {
    fcl__say(why, why_len, "block_k = %u is below the SIMT forward's minimum of %u keys per tile",
             hint->block_k, MIN_BLOCK_K);
    return FCL_ERROR_UNSUPPORTED;
  }
  /* Then local memory: the largest power-of-two tile up to the cap that
   * fits, for each element size; 2-byte tiles only where they fit a larger
   * one. A requested size either fits or not. */
  unsigned bk = 0, best_elem = elems[0];
  if (desc->batch_invariant) plan.wg_size = tile_wg;
  for (int e = 0; e < n_elems; ++e) {
    plan.tile_elem_size = elems[e];
    unsigned bk_cap = most_bk;
    plan.block_k = bk_cap;
    while (!cpu_rule && bk_cap > MIN_BLOCK_K && fwd_cost(&regs, &plan) > regs.fwd)
      plan.block_k = bk_cap /= 2;
    if (fixed_bk) bk_cap = hint->block_k;
    for (unsigned b = bk_cap; b >= MIN_BLOCK_K; b /= 2) {
      plan.block_k = b;
      if (fcl__flash_local_bytes(&plan, limits) <= budget) {
        if (b > bk) bk = b, best_elem = elems[e];
        break;
      }
      if (fixed_bk) break;
    }
  }
  plan.wg_size = wg;
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
  *out = plan;
  return FCL_SUCCESS;
}
