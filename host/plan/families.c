/*
 * families.c — the flash kernel families, one row each (families.h).
 */
#include "program.h"
#include "problem.h"
#include "rules.h"
#include "families.h"

#include <stdio.h>

static const fcl__family families[FCL_FLASH_KERNELS] = {
    [FCL_FLASH_KERNEL_SIMT] =
        {.forward = {FCL_SRC_FLASH_FWD,
                     {"flash_fwd", NULL},
                     {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_BLOCK_K, FCL_TUNE_WG_SIZE,
                      FCL_TUNE_THREADS_PER_ROW, FCL_TUNE_ROWS_PER_THREAD, FCL_TUNE_TILE_STORAGE,
                      FCL_TUNE_HEAD_DIM_V_MAX},
                     fcl__plan_forward_simt},
         .backward = {FCL_SRC_FLASH_BWD,
                      {"flash_bwd_dkdv", "flash_bwd_dq"},
                      {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_WG_SIZE, FCL_TUNE_THREADS_PER_ROW,
                       FCL_TUNE_ROWS_PER_THREAD, FCL_TUNE_SUB_ROWS, FCL_TUNE_TILE_STORAGE,
                       FCL_TUNE_HEAD_DIM_V_MAX},
                      fcl__plan_backward_simt}},
    [FCL_FLASH_KERNEL_MMA] =
        {.forward = {FCL_SRC_FLASH_FWD_MMA,
                     {"flash_fwd_mma", NULL},
                     {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_WARPS, FCL_TUNE_MMA_EMULATE,
                      FCL_TUNE_BLOCK_K, FCL_TUNE_M_TILES, FCL_TUNE_V_STAGES},
                     fcl__plan_forward_mma},
         .backward = {FCL_SRC_FLASH_BWD_MMA,
                      {"flash_bwd_dkdv_mma", "flash_bwd_dq_mma"},
                      {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_WARPS, FCL_TUNE_MMA_EMULATE,
                       FCL_TUNE_SUB_TILES, FCL_TUNE_HEAD_SPLIT},
                      fcl__plan_backward_mma}},
    [FCL_FLASH_KERNEL_DECODE] =
        {.forward = {FCL_SRC_FLASH_FWD_DECODE,
                     {"flash_fwd_decode", NULL},
                     {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_BLOCK_K, FCL_TUNE_BLOCK_Q,
                      FCL_TUNE_WG_SIZE, FCL_TUNE_KEY_LANES},
                     fcl__plan_forward_decode}},
    [FCL_FLASH_KERNEL_DECODE_MMA] =
        {.forward = {FCL_SRC_FLASH_FWD_DECODE_MMA,
                     {"flash_fwd_decode_mma", NULL},
                     {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_WARPS, FCL_TUNE_MMA_EMULATE,
                      FCL_TUNE_BLOCK_Q, FCL_TUNE_HEAD_DIM_V_MAX, FCL_TUNE_DECODE_T,
                      FCL_TUNE_K_SCALE_AFTER, FCL_TUNE_REG_CAP, FCL_TUNE_KV_UNIT,
                      FCL_TUNE_FULL_WIDTHS},
                     fcl__plan_forward_decode_mma,
                     FCL_SRC_FLASH_FWD_DECODE_WIDE,
                     FCL_DECODE_MMA_NARROW_MAX}},
    [FCL_FLASH_KERNEL_CPU] =
        {.forward = {FCL_SRC_FLASH_FWD_CPU,
                     {"flash_fwd_cpu", NULL},
                     {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_BLOCK_K, FCL_TUNE_BLOCK_Q,
                      FCL_TUNE_HEAD_DIM_V_MAX, FCL_TUNE_CPU_FEW_ROWS},
                     fcl__plan_forward_cpu},
         .backward = {FCL_SRC_FLASH_BWD_CPU,
                      {"flash_bwd_dkdv_cpu", "flash_bwd_dq_cpu"},
                      {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_BLOCK, FCL_TUNE_HEAD_DIM_V_MAX},
                      fcl__plan_backward_cpu}},
    [FCL_FLASH_KERNEL_WGMMA] =
        {.forward = {FCL_SRC_FLASH_FWD_WGMMA,
                     {"flash_fwd_wgmma", NULL},
                     {FCL_TUNE_HEAD_DIM_MAX, FCL_TUNE_MMA_EMULATE, FCL_TUNE_FCL_WGMMA,
                      FCL_TUNE_WGMMA_EMULATE, FCL_TUNE_WGMMA_PIPE, FCL_TUNE_WARPGROUPS,
                      FCL_TUNE_WGMMA_KEYS},
                     fcl__plan_forward_wgmma}},
};

const fcl__family_pass *fcl__family_pass_of(unsigned kernel, fcl_pass pass) {
  if (kernel == FCL_FLASH_KERNEL_AUTO || kernel >= FCL_FLASH_KERNELS) return NULL;
  const fcl__family *f = &families[kernel];
  const fcl__family_pass *fp = pass == FCL_PASS_FORWARD ? &f->forward : &f->backward;
  return fp->plan ? fp : NULL;
}

fcl__source fcl__family_source(const fcl__family_pass *fp, const fcl_plan *plan) {
  const unsigned v = fcl__plan_head_dim_v(plan);
  const unsigned width = v > plan->head_dim_padded ? v : plan->head_dim_padded;
  return fp->wide_from && width > fp->wide_from ? fp->wide_source : fp->source;
}

/* A tunable's -D name and its value from the plan. */
static const char *tunable_name(fcl__tunable t) {
  static const char *const names[] = {
      [FCL_TUNE_HEAD_DIM_MAX] = "HEAD_DIM_MAX",
      [FCL_TUNE_BLOCK_K] = "BLOCK_K",
      [FCL_TUNE_BLOCK_Q] = "BLOCK_Q",
      [FCL_TUNE_BLOCK] = "BLOCK",
      [FCL_TUNE_WG_SIZE] = "WG_SIZE",
      [FCL_TUNE_WARPS] = "WARPS",
      [FCL_TUNE_MMA_EMULATE] = "MMA_EMULATE",
      [FCL_TUNE_THREADS_PER_ROW] = "THREADS_PER_ROW",
      [FCL_TUNE_KEY_LANES] = "KEY_LANES",
      [FCL_TUNE_ROWS_PER_THREAD] = "ROWS_PER_THREAD",
      [FCL_TUNE_SUB_ROWS] = "SUB_ROWS",
      [FCL_TUNE_SUB_TILES] = "SUB_TILES",
      [FCL_TUNE_HEAD_SPLIT] = "HEAD_SPLIT",
      [FCL_TUNE_TILE_STORAGE] = "TILE_STORAGE",
      [FCL_TUNE_M_TILES] = "M_TILES",
      [FCL_TUNE_HEAD_DIM_V_MAX] = "HEAD_DIM_V_MAX",
      [FCL_TUNE_FCL_WGMMA] = "FCL_WGMMA",
      [FCL_TUNE_WGMMA_EMULATE] = "WGMMA_EMULATE",
      [FCL_TUNE_WGMMA_PIPE] = "WGMMA_PIPE",
      [FCL_TUNE_WARPGROUPS] = "WARPGROUPS",
      [FCL_TUNE_WGMMA_KEYS] = "BLOCK_K",
      [FCL_TUNE_DECODE_T] = "DECODE_T",
      [FCL_TUNE_K_SCALE_AFTER] = "DECODE_K_SCALE_AFTER",
      [FCL_TUNE_REG_CAP] = "MMA_REG_CAP",
      [FCL_TUNE_KV_UNIT] = "KV_UNIT",
      [FCL_TUNE_FULL_WIDTHS] = "FULL_WIDTHS",
      [FCL_TUNE_CPU_FEW_ROWS] = "CPU_FEW_ROWS",
      [FCL_TUNE_V_STAGES] = "V_STAGES",
  };
  return names[t];
}

/* Whether a plan runs the decode kernel on matrix instructions of at
 * most 128 columns (not its wide kernel), whose options KV_UNIT and
 * FULL_WIDTHS are. */
static int narrow_decode_mma(const fcl_plan *plan) {
  return plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA && !fcl__decode_plan_wide(plan);
}

/* The widest unit both K's and V's rows may be read in (bytes): their
 * views' and, where the caller lent their memory, its address's. Q8_0
 * with both facts read each V row's word through a row-end test and
 * waited at the load (1.27x slower, H100, v36); cl/decode_quad.cl's
 * QUAD_WHOLE drops the test, and the pair is now 1.10x faster than its
 * widths alone (B 8 x 8k, v37). */
static long kv_unit(const fcl__shape *sh) {
  unsigned unit = fcl__layout_unit(&sh->views[FCL__K]);
  const unsigned v = fcl__layout_unit(&sh->views[FCL__V]);
  if (v < unit) unit = v;
  if (sh->kv_buffer_unit && sh->kv_buffer_unit < unit) unit = sh->kv_buffer_unit;
  return unit;
}

static long tunable_value(fcl__tunable t, const fcl_device_limits *limits,
                          const fcl__shape *sh, const fcl_plan *plan) {
  const fcl_attention_desc *desc = &sh->desc;
  switch (t) {
    case FCL_TUNE_HEAD_DIM_MAX: return plan->head_dim_padded;
    case FCL_TUNE_BLOCK_K: return plan->block_k;
    case FCL_TUNE_BLOCK_Q: return plan->block_q;
    case FCL_TUNE_BLOCK: return plan->block_k;  /* the CPU backward's rows, both ways */
    case FCL_TUNE_WG_SIZE: return plan->wg_size;
    case FCL_TUNE_WARPS: return plan->wg_size / 32;
    case FCL_TUNE_MMA_EMULATE: return !fcl__mma_native(limits);
    case FCL_TUNE_THREADS_PER_ROW: return plan->threads_per_row;
    case FCL_TUNE_KEY_LANES: return plan->threads_per_row;  /* the decode kernel's lanes a key */
    case FCL_TUNE_ROWS_PER_THREAD: return plan->rows_per_thread;
    case FCL_TUNE_SUB_ROWS: return fcl__flash_bwd_sub_rows(plan, limits);
    case FCL_TUNE_SUB_TILES: return FCL__MMA_BWD_SUB_TILES;
    case FCL_TUNE_HEAD_SPLIT: return plan->threads_per_row / 4;  /* 8: warp pairs */
    case FCL_TUNE_TILE_STORAGE: return plan->tile_elem_size == 2;
    case FCL_TUNE_M_TILES: return fcl__flash_mma_m_tiles(plan);
    case FCL_TUNE_HEAD_DIM_V_MAX: return plan->head_dim_v_padded;  /* 0: HEAD_DIM_MAX */
    case FCL_TUNE_FCL_WGMMA: return fcl__wgmma_native(limits);
    case FCL_TUNE_WGMMA_EMULATE: return !limits->nvidia_ptx;
    case FCL_TUNE_WGMMA_PIPE: return fcl__wgmma_pipe(limits, plan);
    case FCL_TUNE_WARPGROUPS: return fcl__wgmma_groups(plan);
    case FCL_TUNE_WGMMA_KEYS: return plan->block_k;
    case FCL_TUNE_DECODE_T: return !plan->decode_untransposed;  /* 1: the kernel's own */
    case FCL_TUNE_K_SCALE_AFTER: return fcl__decode_k_scale_after(desc, plan);
    case FCL_TUNE_REG_CAP: return fcl__decode_reg_cap(limits, desc, plan);
    case FCL_TUNE_KV_UNIT: return narrow_decode_mma(plan) && sh->kv_quant ? kv_unit(sh) : 0;
    case FCL_TUNE_FULL_WIDTHS:
      return narrow_decode_mma(plan) && desc->head_dim == plan->head_dim_padded &&
             sh->head_dim_v == (plan->head_dim_v_padded ? plan->head_dim_v_padded
                                                        : plan->head_dim_padded);
    case FCL_TUNE_CPU_FEW_ROWS: return fcl__cpu_few_rows(desc, plan);
    case FCL_TUNE_V_STAGES: return plan->v_stages == 2 ? 2 : 1;
    case FCL_TUNE_END: break;
  }
  return 0;
}

/* Whether a tunable's value is the kernel's own default, which the options
 * leave out: a tunable added to a family so changes no earlier program. */
static int tunable_is_default(fcl__tunable t, long value) {
  return ((t == FCL_TUNE_M_TILES || t == FCL_TUNE_V_STAGES) && value == 1) ||
         (t == FCL_TUNE_HEAD_DIM_V_MAX && value == 0) ||
         ((t == FCL_TUNE_FCL_WGMMA || t == FCL_TUNE_WGMMA_EMULATE) && value == 0) ||
         (t == FCL_TUNE_WGMMA_PIPE && value == FCL_WGMMA_PIPE_DEFAULT) ||
         (t == FCL_TUNE_WARPGROUPS && value == 1) || (t == FCL_TUNE_WGMMA_KEYS && value == 64) ||
         (t == FCL_TUNE_DECODE_T && value == 1) ||
         ((t == FCL_TUNE_K_SCALE_AFTER || t == FCL_TUNE_REG_CAP || t == FCL_TUNE_KV_UNIT ||
           t == FCL_TUNE_FULL_WIDTHS || t == FCL_TUNE_CPU_FEW_ROWS) &&
          value == 0);
}

void fcl__family_options(const fcl__family_pass *fp, const fcl_device_limits *limits,
                         const fcl__shape *sh, const fcl_plan *plan, fcl__options *opts) {
  for (int i = 0; i < FCL__MAX_TUNABLES && fp->tunables[i] != FCL_TUNE_END; ++i) {
    const fcl__tunable t = fp->tunables[i];
    const long value = tunable_value(t, limits, sh, plan);
    if (tunable_is_default(t, value)) continue;
    fcl__options_define(opts, tunable_name(t), value);
    /* the kernel's MMA_REG_CAP leaves its size unstated (cl/mma.cl), so
     * that ptxas takes the cap */
    if (t == FCL_TUNE_REG_CAP) {
      char flag[40];
      snprintf(flag, sizeof flag, "-cl-nv-maxrregcount=%ld", value);
      fcl__options_flag(opts, flag);
    }
  }
}
