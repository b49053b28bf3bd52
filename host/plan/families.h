/*
 * families.h — the flash kernel families, one row each (families.c): the
 * kernel files and kernels of each pass, the tunables that become their -D
 * options, and the planner that chooses them. Adding a family, or a
 * tunable, is one row there; cl/traits.h holds the sizes the tunables
 * imply, for the planners and the kernels alike.
 */
#ifndef FCL_FAMILIES_H
#define FCL_FAMILIES_H

#include "program.h"
#include "rules.h"

/** A tunable: a -D option a family's kernels take, named as they name it,
 *  and its value from the plan (families.c, tunable_value). */
typedef enum fcl__tunable {
  FCL_TUNE_END = 0,  /* ends a list */
  FCL_TUNE_HEAD_DIM_MAX,
  FCL_TUNE_BLOCK_K,
  FCL_TUNE_BLOCK_Q,
  FCL_TUNE_BLOCK,
  FCL_TUNE_WG_SIZE,
  FCL_TUNE_WARPS,
  FCL_TUNE_MMA_EMULATE,
  FCL_TUNE_THREADS_PER_ROW,
  FCL_TUNE_KEY_LANES,
  FCL_TUNE_ROWS_PER_THREAD,
  FCL_TUNE_SUB_ROWS,
  FCL_TUNE_SUB_TILES,
  FCL_TUNE_HEAD_SPLIT,
  FCL_TUNE_TILE_STORAGE,
  /* the MMA forward's 16-row tiles a warp; left out at 1 (families.c) */
  FCL_TUNE_M_TILES,
  /* V and O's padded width where it is not head_dim's; left out otherwise */
  FCL_TUNE_HEAD_DIM_V_MAX,
  /* the wgmma forward's path (wgmma.cl): FCL_WGMMA on NVIDIA cc 9.0,
   * WGMMA_EMULATE off NVIDIA; each left out at 0 */
  FCL_TUNE_FCL_WGMMA,
  FCL_TUNE_WGMMA_EMULATE,
  /* the wgmma forward's schedule (flash_fwd_wgmma.cl, WGMMA_PIPE): the
   * kernel's default left out */
  FCL_TUNE_WGMMA_PIPE,
  /* its warpgroups a work-group (WARPGROUPS): left out at 1 */
  FCL_TUNE_WARPGROUPS,
  /* its keys a tile (BLOCK_K): left out at the kernel's 64 */
  FCL_TUNE_WGMMA_KEYS,
  /* the decode kernel's order of products (DECODE_T): 0 where the plan
   * asks for the untransposed ones, else left out (the kernel's own) */
  FCL_TUNE_DECODE_T,
  /* the block forms' K scaled after the products (DECODE_K_SCALE_AFTER):
   * left out at 0 */
  FCL_TUNE_K_SCALE_AFTER,
  /* the registers a lane NVIDIA's compiler is held to (MMA_REG_CAP, and
   * -cl-nv-maxrregcount beside it): left out at 0, the compiler's choice */
  FCL_TUNE_REG_CAP,
  /* a quantized cache's widest load unit over K's and V's views and
   * buffers (KV_UNIT), and whether head_dim and head_dim_v are the padded
   * widths (FULL_WIDTHS): the decode kernel's (cl/flash_fwd_decode_mma.cl);
   * left out at 0, the kernel then finding both */
  FCL_TUNE_KV_UNIT,
  FCL_TUNE_FULL_WIDTHS,
  /* the CPU forward's blocks of few rows that take their scores a row at a
   * time (CPU_FEW_ROWS, cl/cpu.cl): left out at 0 */
  FCL_TUNE_CPU_FEW_ROWS,
  /* the MMA forward's V tiles (V_STAGES, fcl_plan.v_stages): left out at 1 */
  FCL_TUNE_V_STAGES,
} fcl__tunable;

/** The most tunables a pass of a family takes. */
#define FCL__MAX_TUNABLES 10

/** One pass of a family: its program and kernels (the backward's dK/dV,
 *  then dQ), its tunables in option order, its planner; and where its
 *  kernels for wide rows are another text (the same kernel names and
 *  tunables), that text and the padded width beyond which plans take it
 *  (wide_from 0: none). */
typedef struct fcl__family_pass {
  fcl__source source;
  const char *kernels[2];
  fcl__tunable tunables[FCL__MAX_TUNABLES];
  fcl__planner *plan;
  fcl__source wide_source;
  unsigned wide_from;
} fcl__family_pass;

/** The program text of a plan of pass `fp`: its wide text for a plan whose
 *  padded width (the wider of K's and V's) passes wide_from. */
fcl__source fcl__family_source(const fcl__family_pass *fp, const fcl_plan *plan);

typedef struct fcl__family {
  fcl__family_pass forward;
  fcl__family_pass backward;  /* plan NULL: the family has no backward */
} fcl__family;

/** The pass `pass` of `kernel`'s family, or NULL where it has none. */
const fcl__family_pass *fcl__family_pass_of(unsigned kernel, fcl_pass pass);

/** Appends a pass's tunables, in its order, as -D options from `plan` for
 *  the checked problem `sh` (and a register cap's compiler option with
 *  its). */
void fcl__family_options(const fcl__family_pass *fp, const fcl_device_limits *limits,
                         const fcl__shape *sh, const fcl_plan *plan, fcl__options *opts);

#endif
