/*
 * wgmma_probe.h — one 64 x N tile of Hopper's warpgroup MMA on the
 * context's device (cl/wgmma_probe.cl), checked against a float64 product
 * and timed in a loop (wgmma_probe.c): for flashcl-info --wgmma-probe and
 * tests/test_wgmma.c.
 */
#ifndef FCL_WGMMA_PROBE_H
#define FCL_WGMMA_PROBE_H

#include "common.h"
#include "context.h"

/** The kernel's paths (cl/wgmma_probe.cl, WGMMA_PATH). */
enum {
  FCL_WGMMA_PATH_MMA_SYNC = 0,  /**< mma.sync m16n8k16 (emulated off NVIDIA) */
  FCL_WGMMA_PATH_EMULATED = 1,  /**< the wgmma layouts, emulated in local memory */
  FCL_WGMMA_PATH_NATIVE = 2,    /**< wgmma through the sm_90a stage */
};

typedef struct fcl__wgmma_probe_setup {
  fcl_dtype dtype;   /**< FCL_DTYPE_F16 or FCL_DTYPE_BF16 */
  unsigned n;        /**< 8, 16, 32, 64 or 128 */
  unsigned ksteps;   /**< k-steps of 16: 1 to 4 */
  int path;          /**< asked for: an FCL_WGMMA_PATH_* (NATIVE may fall back) */
  unsigned reps;     /**< products summed in the kernel: 1 to check, more to time */
  unsigned groups;   /**< work-groups of 128 (each the same tile): 1 to check */
  /* added for the MN-major B operand */
  int trans_b;       /**< 1: B MN-major (imm-trans-b 1), else K-major */
} fcl__wgmma_probe_setup;

typedef struct fcl__wgmma_probe_result {
  int path;          /**< the path that ran (the kernel says) */
  int checked;       /**< D compared (reps 1): every operand is k/8, |k| <= 32,
                      *   so each product is exact in f32 and must equal the
                      *   float64 one exactly */
  size_t wrong;      /**< elements of D that differ */
  double max_error;  /**< the largest |difference| */
  double ms;         /**< the fastest of the timed runs */
  double tflops;     /**< 2 * 64 * N * 16 ksteps * reps * groups / ms */
} fcl__wgmma_probe_result;

/** Builds the probe for `setup` (through the program cache, so NATIVE goes
 *  through the sm_90a stage or its fallback), runs it on random operands
 *  drawn from `seed`, and fills *out; with more than one rep or group,
 *  also times it (fastest of 5 after a warm-up).
 *  @return FCL_SUCCESS, or the failure of a build, buffer or launch
 *  (FCL_ERROR_INVALID_ARGUMENT for a setup out of range). */
fcl_status fcl__wgmma_probe(fcl_context *ctx, const fcl__wgmma_probe_setup *setup,
                            uint64_t seed, fcl__wgmma_probe_result *out);

#endif
