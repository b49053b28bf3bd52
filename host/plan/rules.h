/*
 * rules.h — what the kernel families' rules (plan_simt.c, plan_mma.c,
 * plan_decode.c, plan_cpu.c) share and declare: their planners, their local
 * bytes, the device's budgets and shuffles, and small facts of plans.
 */
#ifndef FCL_RULES_H
#define FCL_RULES_H

#include "common.h"
#include "problem.h"

/** The largest power of two up to x (1 for x < 2), at most 2^30: the
 *  planners' work-group sizes. */
static inline unsigned fcl__floor_pow2(size_t x) {
  unsigned p = 1;
  while ((size_t)p * 2 <= x && p < (1u << 30)) p *= 2;
  return p;
}
/** Keys a plan's kernel reads through one page lookup of a paged cache,
 *  which page_size must be a multiple of: the forwards look a page up per
 *  key row (SIMT, decode), per run of FCL_PAGE_RUN_KEYS keys (the MMA
 *  forward's tile loads, a warp's step of the decode kernel on matrix
 *  instructions) or per tile of that many (the CPU forward), so that key
 *  tiles may span pages (cl/blocks.cl, "a paged cache") and every family
 *  takes its unpaged tile. */
_Static_assert(FCL_PAGE_SIZE_MULTIPLE % FCL_PAGE_RUN_KEYS == 0,
               "every allowed page size must hold whole runs of a page lookup's keys");
static inline unsigned fcl__page_lookup_keys(const fcl_plan *plan) {
  const unsigned kernel = plan->kernel;
  return kernel == FCL_FLASH_KERNEL_SIMT || kernel == FCL_FLASH_KERNEL_DECODE ? 1
                                                                              : FCL_PAGE_RUN_KEYS;
}
/** The local memory a flash kernel may declare: the device's less the 1 KiB
 *  NVIDIA keeps per work-group (an H200 reports 48 KiB; 47 KiB of __local
 *  arrays work, 48 fail); elsewhere the margin costs nothing. Both
 *  planners (plan.c, plan_mma.c) budget with it. */
static inline uint64_t fcl__local_budget(const fcl_device_limits *limits) {
  const uint64_t reserve = 1024;
  return limits->local_mem_bytes > reserve ? limits->local_mem_bytes - reserve : 0;
}
/** The lanes of a device's sub-group shuffles (fcl_device_limits.shuffle):
 *  its sub-group size, a warp on NVIDIA where the query gave none; 0
 *  without shuffles. */
static inline unsigned fcl__shuffle_width(const fcl_device_limits *limits) {
  if (limits->shuffle == FCL_SHUFFLE_NONE) return 0;
  if (limits->sub_group_size) return limits->sub_group_size;
  return limits->shuffle == FCL_SHUFFLE_NVIDIA_PTX ? 32 : 0;
}
/** Whether `lanes` adjacent work-items of a `wg`-item work-group sum their
 *  partial products by shuffles rather than through local memory: the
 *  device has them and the work-group fills whole sub-groups (a shuffle
 *  over absent lanes is undefined). common.cl's FCL_SUMS_BY_SHUFFLE is
 *  the same test, from the FCL_SHUFFLE options program.c passes. */
static inline int fcl__sums_by_shuffle(const fcl_device_limits *limits, size_t wg,
                                       unsigned lanes) {
  return FCL_SUMS_BY_SHUFFLE_OF((size_t)fcl__shuffle_width(limits), wg, lanes);
}
/** ... and whether they sum through local memory instead (more than one
 *  lane, no shuffle): common.cl's FCL_SUMS_IN_LOCAL. */
static inline int fcl__sums_in_local(const fcl_device_limits *limits, size_t wg,
                                     unsigned lanes) {
  return FCL_SUMS_IN_LOCAL_OF((size_t)fcl__shuffle_width(limits), wg, lanes);
}
/** Local memory of the flash forward kernel (SIMT) for a tiling on a
 *  device (its row sums through local memory without shuffles). */
size_t fcl__flash_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits);
/** A kernel family's planner of one pass (families.c): `sh` the validated
 *  problem, `desc` the problem as the planner sees it (the forward's packed
 *  heads' rows as one head's; arguments already checked by
 *  fcl__plan_flash). Writes `out` on success only; else says why. */
typedef fcl_status fcl__planner(const fcl_device_limits *limits, const fcl__shape *sh,
                                const fcl_attention_desc *desc, const fcl_plan *hint,
                                fcl_plan *out, char *why, size_t why_len);
/** The SIMT forward's register cost model (plan_simt.c): `*cost` gets the
 *  private floats a work-item of `plan` keeps, with the extra its vendor's
 *  compiler spends, `*budget` the most that compiled without spilling (on
 *  MI300X: at 2 waves per SIMD). @return whether it fits. */
int fcl__simt_forward_registers(const fcl_device_limits *limits, const fcl_plan *plan,
                                unsigned *cost, unsigned *budget);
/** The key tile a SIMT forward `plan` takes once its splits are known
 *  (plan.c): at most 8 where it is split over the keys on AMD's wave64
 *  chips and lanes share a row (2 waves per SIMD on MI300X rather than 1;
 *  docs/design.md, "MI300X: two waves per SIMD"), else its own. */
unsigned fcl__simt_split_block_k(const fcl_device_limits *limits, const fcl_plan *plan);
/** The SIMT kernels' rules (plan_simt.c). */
fcl__planner fcl__plan_forward_simt, fcl__plan_backward_simt;

/* The tensor-core forward's planner (plan_mma.c). */
/** The device runs mma.sync natively (NVIDIA, sm_80 and later); the MMA
 *  kernel emulates it elsewhere. */
int fcl__mma_native(const fcl_device_limits *limits);
/** The planner's default, the same for both passes: the MMA kernels where
 *  they run natively, take the head_dim and dtype, and were measured faster
 *  than SIMT (plan_mma.c). */
int fcl__mma_suits(const fcl_device_limits *limits, const fcl_attention_desc *desc);
/** The MMA forward's tiling. */
fcl__planner fcl__plan_forward_mma;
/** Local memory of flash_fwd_mma.cl for a tiling, with its emulation
 *  scratch when `emulate`. */
size_t fcl__flash_mma_local_bytes(const fcl_plan *plan, int emulate);
/** The MMA forward's 16-row tiles a warp (its M_TILES option):
 *  rows_per_thread / 2, 1 or 2. */
unsigned fcl__flash_mma_m_tiles(const fcl_plan *plan);
/* The wgmma forward's planner (plan_wgmma.c). */
/** Whether Hopper's wgmma builds: NVIDIA's driver, compute capability 9.0
 *  (the sm_90a stage's condition, host/run/sm90a.c). */
int fcl__wgmma_native(const fcl_device_limits *limits);
/** The wgmma forward's tiling (a hint's only). */
fcl__planner fcl__plan_forward_wgmma;
/** Local memory of flash_fwd_wgmma.cl for a plan on a device. */
size_t fcl__flash_wgmma_local_bytes(const fcl_device_limits *limits, const fcl_plan *plan);
/** The wgmma forward's schedule for a plan (flash_fwd_wgmma.cl's
 *  WGMMA_PIPE, 1 to 3): the environment's FLASHCL_WGMMA_PIPE where it
 *  names one (a developer's knob for comparing them; the program cache
 *  keys on the option; 3, two stages, only where a tile is at most
 *  64 x 64 and the device's local memory takes them); else 3 where two
 *  stages fit, 1 with three warpgroups, FCL_WGMMA_PIPE_DEFAULT
 *  otherwise. */
int fcl__wgmma_pipe(const fcl_device_limits *limits, const fcl_plan *plan);
#define FCL_WGMMA_PIPE_DEFAULT 2
/** The wgmma forward's warpgroups a work-group (flash_fwd_wgmma.cl's
 *  WARPGROUPS, 1 to 4: its wg_size / 128). */
int fcl__wgmma_groups(const fcl_plan *plan);
/** Its work-group where the hint names none: three warpgroups, 192 rows
 *  sharing each K and V tile (the fastest of 1-4 on the H100, v29), or
 *  the most below it that the device's work-group size and local memory
 *  take. */
#define FCL_WGMMA_DEFAULT_WG 384u
/* The CPU kernels' planners (plan_cpu.c). */
/** Whether the rules take the CPU kernels, forward and backward: a CPU
 *  device, whatever the rows (decode and packed heads too). */
int fcl__cpu_kernels_suit(const fcl_device_limits *limits);
/** The CPU forward's tiling for the packed problem `desc`. */
fcl__planner fcl__plan_forward_cpu;
/** The CPU backward's tiling (both kernels). */
fcl__planner fcl__plan_backward_cpu;
/** The most rows a block of the CPU forward may have for its scores a row
 *  at a time (CPU_FEW_ROWS). */
#define FCL_CPU_FEW_ROWS 8u
/** CPU_FEW_ROWS for a CPU forward plan of the user's `desc`: FCL_CPU_FEW_ROWS
 *  where the call's blocks have at most that many rows and the
 *  batch-invariant mode is off, else 0 (the kernel's 16-row path only). */
unsigned fcl__cpu_few_rows(const fcl_attention_desc *desc, const fcl_plan *plan);
/** Whether two plans are the same, field by field (fcl_plan has padding,
 *  which memcmp would compare too). */
static inline int fcl__same_plan(const fcl_plan *a, const fcl_plan *b) {
  return a->block_q == b->block_q && a->block_k == b->block_k && a->wg_size == b->wg_size &&
         a->threads_per_row == b->threads_per_row && a->rows_per_thread == b->rows_per_thread &&
         a->head_dim_padded == b->head_dim_padded && a->local_bytes == b->local_bytes &&
         a->tile_elem_size == b->tile_elem_size && a->kernel == b->kernel &&
         a->splits == b->splits && a->packed_heads == b->packed_heads && a->tuned == b->tuned &&
         a->merge == b->merge && a->split_keys == b->split_keys &&
         a->head_dim_v_padded == b->head_dim_v_padded;
}
/** The padded width of a plan's V and O rows (fcl_plan.head_dim_v_padded). */
static inline unsigned fcl__plan_head_dim_v(const fcl_plan *plan) {
  return plan->head_dim_v_padded ? plan->head_dim_v_padded : plan->head_dim_padded;
}
/** Sets a plan's padded widths for `sh`, each rounded up by its family's
 *  `round`: head_dim_padded, and head_dim_v_padded where V and O have a
 *  width of their own (0 otherwise: the kernels fold head_dim's in).
 *  @return the wider of the two. */
static inline unsigned fcl__set_head_dims(fcl_plan *plan, const fcl__shape *sh,
                                          unsigned (*round)(size_t)) {
  plan->head_dim_padded = round(sh->desc.head_dim);
  plan->head_dim_v_padded = sh->head_dim_v != sh->desc.head_dim ? round(sh->head_dim_v) : 0;
  const unsigned v = fcl__plan_head_dim_v(plan);
  return v > plan->head_dim_padded ? v : plan->head_dim_padded;
}
/** Whether a kernel family is one of the two decode kernels. */
static inline int fcl__decode_kernel_family(unsigned kernel) {
  return kernel == FCL_FLASH_KERNEL_DECODE || kernel == FCL_FLASH_KERNEL_DECODE_MMA;
}
/** Whether a kernel family has a forward only: the decode kernels, wgmma. */
static inline int fcl__kernel_forward_only(unsigned kernel) {
  return fcl__decode_kernel_family(kernel) || kernel == FCL_FLASH_KERNEL_WGMMA;
}
/* The decode forward's planner (plan_decode.c). */
/** The planner's default decode kernel for a forward of `packed_rows` rows
 *  a block (seqlen_q times the packed heads): FCL_FLASH_KERNEL_DECODE_MMA
 *  where the matrix instructions run natively (16-bit types, head_dim up
 *  to 128 and at most FCL_DECODE_MMA_MAX_ROWS rows; or, on its wide
 *  kernel, widths past FCL_MAX_TILED_HEAD_DIM from a cache in the storage
 *  type, any rows), else FCL_FLASH_KERNEL_DECODE on GPUs for vec4 shapes of
 *  at most FCL_DECODE_MAX_ROWS rows, else FCL_FLASH_KERNEL_AUTO (none). */
unsigned fcl__decode_kernel(const fcl_device_limits *limits, const fcl__shape *sh,
                            size_t packed_rows);
/** Whether only the decode kernels take the shape's widths: head_dim or
 *  head_dim_v beyond FCL_MAX_TILED_HEAD_DIM. The decode kernel on matrix
 *  instructions (its wide kernel: 16-bit types, a cache in the storage
 *  type) then takes it where they run natively, in blocks of 32 rows; the
 *  decode kernel (FCL_FLASH_KERNEL_DECODE) elsewhere (a CPU too, whose
 *  kernels keep the tiled widths), at any rows, in blocks of at most
 *  FCL_DECODE_MAX_ROWS (4 beyond a bucket of 256). Two widths within the
 *  tiles' run as one width does on the decode kernels (both; the one on
 *  matrix instructions up to 128, beyond by a hint), else SIMT or CPU,
 *  unsplit. */
int fcl__decode_only(const fcl__shape *sh);
/** The decode forward's tiling for the packed problem `desc` of shape
 *  `sh`, and the same for the decode kernel on matrix instructions. */
fcl__planner fcl__plan_forward_decode, fcl__plan_forward_decode_mma;
/** Local memory of either decode kernel (plan->kernel) for a tiling on a
 *  device (whose partial sums may go through local memory, and whose
 *  matrix instructions may be emulated). */
size_t fcl__flash_decode_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits);
/** Floats per block row of either decode kernel's local state (key groups
 *  or warps x (HEAD_DIM_MAX + 2)): how many splits' LSEs a row of the
 *  merge in the split launch stages there (cl/blocks.cl). */
size_t fcl__decode_state_row_floats(const fcl_plan *plan);
/** Whether a plan is of the decode-mma family's wide kernel (a padded
 *  width past 128: cl/flash_fwd_decode_wide.cl, as fcl__family_source
 *  takes it). */
int fcl__decode_plan_wide(const fcl_plan *plan);
/** How a decode-mma plan's kernel reads an int4 cache's K
 *  (DECODE_K_SCALE_AFTER, cl/flash_fwd_decode_mma.cl): 2, its codes
 *  biased into the products and their scales applied after, for f16
 *  queries on the transposed kernel of at most 128 columns; 0 (each
 *  element scaled as loaded) otherwise. */
unsigned fcl__decode_k_scale_after(const fcl_attention_desc *desc, const fcl_plan *plan);
/** The registers a lane of a decode-mma plan's kernel may take under
 *  NVIDIA's compiler (-cl-nv-maxrregcount, the kernels' MMA_REG_CAP), or 0
 *  (the compiler's choice): 128 for the wide kernel's 8 warps, two
 *  work-groups a multiprocessor; 168 for K scaled after the products,
 *  three (docs/design.md, "Register caps"). */
unsigned fcl__decode_reg_cap(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                             const fcl_plan *plan);
/** The MMA backward's tiling. */
fcl__planner fcl__plan_backward_mma;
/** How the flash kernels are built for a problem's window (common.cl's
 *  WINDOW): without one, with causal's (no left bound, right bound 0), so
 *  that the compiler folds the mask, or from the parameter block. */
typedef enum fcl__window_kind {
  FCL__WINDOW_NONE = 0,
  FCL__WINDOW_CAUSAL = 1,
  FCL__WINDOW_GENERAL = 2,
} fcl__window_kind;

static inline fcl__window_kind fcl__window_of(const fcl_attention_desc *desc) {
  const int right = desc->causal ? 0 : desc->window_right;
  if (desc->window_left >= 0 || right > 0) return FCL__WINDOW_GENERAL;
  return right == 0 ? FCL__WINDOW_CAUSAL : FCL__WINDOW_NONE;
}

/** Whether the backward kernels keep each query row's visible keys in
 *  local memory (common.cl's ROW_KEYS_IN_LOCAL): for a general window
 *  only; a pinned one gives them from the row. */
static inline int fcl__row_keys_in_local(const fcl_attention_desc *desc) {
  return fcl__window_of(desc) == FCL__WINDOW_GENERAL;
}

/** 8-row groups of a streamed tile the MMA backward takes per step
 *  (flash_bwd_mma.cl's SUB_TILES, which the host passes): its scores'
 *  registers, and the size of what warp pairs exchange. */
#define FCL__MMA_BWD_SUB_TILES 2
/** Local memory of flash_bwd_mma.cl's kernels (both alike) for a tiling,
 *  with the emulation scratch when `emulate`, and each query row's key
 *  bounds when `row_keys` (fcl__row_keys_in_local). */
size_t fcl__flash_bwd_mma_local_bytes(const fcl_plan *plan, int emulate, int row_keys);
/** Local memory of the flash backward kernels (dK/dV and dQ alike) for a
 *  backward tiling on a device (row sums through local memory without
 *  shuffles); they keep no row bounds, whatever the window. */
size_t fcl__flash_bwd_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits);
/** Rows of a streamed tile the backward kernels take into registers at a
 *  time: the largest of 8, 4, 2, 1 that divides the tile, at most 4 where
 *  eight work-items share a row or (on AMD) one holds whole rows, and on
 *  AMD and Intel then 2 for slices of 24 floats, 1 for 32 (plan_simt.c says
 *  what spilled). */
unsigned fcl__flash_bwd_sub_rows(const fcl_plan *plan, const fcl_device_limits *limits);
/** Launch shape of the backward's preprocessing kernel (flash_bwd_pre.cl,
 *  D = rowsum(dO * O)), the same for both kernel families. */
typedef struct fcl__pre_shape {
  unsigned wg_size;          /**< 128, or the device's largest power of two below */
  unsigned threads_per_row;  /**< enough for a float4 each: at most 32 and wg_size */
} fcl__pre_shape;
fcl__pre_shape fcl__flash_bwd_pre_shape(const fcl_device_limits *limits, size_t head_dim);
/** The parts each head's rows are summed in by the sinks' gradient
 *  (flash_bwd_sinks, then flash_bwd_sinks_sum): one a 512 rows (a load of
 *  4 rows for each of 128 work-items), at most 256; a function of the
 *  problem only, so the I/O model counts the same. */
size_t fcl__sink_parts(size_t tokens_q);

#endif
