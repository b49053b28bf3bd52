/*
 * plan_cpu.c — the tilings of the CPU kernels (cl/cpu.cl, flash_fwd_cpu.cl,
 * flash_bwd_cpu.cl).
 *
 * One work-item a work-group, which a CPU runs as one thread, with its
 * vectors written out in the kernel: 16 query rows a vector (a chunk), 16
 * keys a tile, head_dim padded to 16. What is left to choose is how many
 * chunks a work-group owns, block_q = 16 x chunks:
 *   - each K and V tile is loaded (into cache) once per block and
 *     converted to float there, so more chunks amortise the load; but
 *     q and the accumulators of all the block's rows live in private
 *     memory, 2 x block_q x head_dim floats, which must stay in the core's
 *     caches: 64 rows up to head_dim 128 (64 KiB at 128), 32 beyond;
 *   - no more rows than the sequence has, and halved (down to one chunk)
 *     while the launch has fewer than two work-groups per compute unit.
 * (docs/design.md, "The rules, measured").
 *
 * The backward's two kernels keep BLOCK keys (dK/dV) or queries (dQ) and
 * stream tiles of as many of the others, so block_q = block_k = 16 x
 * chunks: its K, V and gradient accumulators (or Q, dO and dQ) take twice
 * the forward's private memory, so 32 rows up to head_dim 128 and 16
 * beyond, halved likewise while the dK/dV launch (the one with fewer
 * work-groups under GQA) has fewer than two work-groups per compute unit.
 *
 * The kernels keep their tiles in private arrays: a plan takes no local
 * memory (local_bytes 0).
 *
 * The rules take both on every CPU device (PoCL), whatever the rows:
 * prefill, decode, packed GQA heads, split keys; a decode row fills one
 * lane of a chunk's vectors and still ran 3-10x faster than the SIMT
 * kernel there. A tiling hint (kernel FCL_FLASH_KERNEL_CPU) runs them
 * anywhere.
 */
#include "common.h"
#include "errors.h"
#include "problem.h"
#include "rules.h"

#include <string.h>

#define CPU_LANES 16u          /* rows of a chunk, keys of a tile, head_dim's unit */
#define CPU_MAX_CHUNKS 4u      /* 64 rows */
#define CPU_WIDE_HEAD_DIM 128u /* beyond it, half the chunks */
#define CPU_BWD_MAX_CHUNKS 2u  /* 32 rows */

static unsigned padded_head_dim(size_t head_dim) {
  return (unsigned)((head_dim + CPU_LANES - 1) / CPU_LANES * CPU_LANES);
}

int fcl__cpu_kernels_suit(const fcl_device_limits *limits) { return !limits->is_gpu; }

/* What both CPU plans share; every byte set, padding too, so that plans
 * compare equal with memcmp (tests, the tuner's deduplication). */
static fcl_plan cpu_plan(void) {
  fcl_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.kernel = FCL_FLASH_KERNEL_CPU;
  plan.wg_size = plan.threads_per_row = 1;
  plan.tile_elem_size = sizeof(float);
  return plan;
}

/* What a hint may set for either CPU kernel. */
static fcl_status check_cpu_hint(const fcl_plan *hint, unsigned block_k, char *why,
                                 size_t why_len) {
  FCL_WHY_IF(hint && hint->wg_size > 1, FCL_ERROR_UNSUPPORTED,
             "wg_size = %u: the CPU kernels' work-group is one work-item", hint->wg_size);
  FCL_WHY_IF(hint && hint->threads_per_row > 1, FCL_ERROR_UNSUPPORTED,
             "threads_per_row = %u: the CPU kernels keep whole rows", hint->threads_per_row);
  FCL_WHY_IF(hint && hint->block_k && hint->block_k != block_k, FCL_ERROR_UNSUPPORTED,
             "block_k = %u: the CPU kernel's tile is %u rows here (rows_per_thread sets the "
             "backward's)",
             hint->block_k, block_k);
  FCL_WHY_IF(hint && hint->tile_elem_size == 2, FCL_ERROR_UNSUPPORTED,
             "tile_elem_size = 2: the CPU kernels' tiles hold floats");
  return FCL_SUCCESS;
}

/* Chunks of 16 rows: the hint's, else `most` halved while there are more
 * than the rows need or fewer than two work-groups per compute unit over
 * `slices` (batch x heads) sequences of `seqlen`. */
static unsigned choose_chunks(const fcl_device_limits *limits, const fcl_plan *hint,
                              unsigned most, size_t slices, size_t seqlen) {
  if (hint && hint->rows_per_thread) return hint->rows_per_thread;
  unsigned chunks = most;
  const size_t rows_chunks = (seqlen + CPU_LANES - 1) / CPU_LANES;
  while (chunks > 1 && chunks / 2 >= rows_chunks) chunks /= 2;
  const size_t want = 2 * (size_t)fcl__compute_units(limits);
  while (chunks > 1) {
    const size_t block = (size_t)chunks * CPU_LANES;
    if (slices * ((seqlen + block - 1) / block) >= want) break;
    chunks /= 2;
  }
  return chunks;
}

fcl_status fcl__plan_backward_cpu(const fcl_device_limits *limits, const fcl__shape *sh,
                                  const fcl_attention_desc *desc, const fcl_plan *hint,
                                  fcl_plan *out, char *why, size_t why_len) {
  fcl_plan plan = cpu_plan();
  plan.splits = plan.packed_heads = 1;
  /* the wider padded width decides the chunks */
  const unsigned most = fcl__set_head_dims(&plan, sh, padded_head_dim) <= CPU_WIDE_HEAD_DIM
                            ? CPU_BWD_MAX_CHUNKS
                            : CPU_BWD_MAX_CHUNKS / 2;
  plan.rows_per_thread = choose_chunks(limits, hint, most, desc->batch * desc->heads_kv,
                                       desc->seqlen_k);
  plan.block_q = plan.block_k = plan.rows_per_thread * CPU_LANES;
  FCL_FORWARD_IF(check_cpu_hint(hint, plan.block_k, why, why_len));
  *out = plan;
  return FCL_SUCCESS;
}

fcl_status fcl__plan_forward_cpu(const fcl_device_limits *limits, const fcl__shape *sh,
                                 const fcl_attention_desc *desc, const fcl_plan *hint,
                                 fcl_plan *out, char *why, size_t why_len) {
  FCL_FORWARD_IF(check_cpu_hint(hint, CPU_LANES, why, why_len));
  fcl_plan plan = cpu_plan();
  plan.block_k = CPU_LANES;
  const unsigned most = fcl__set_head_dims(&plan, sh, padded_head_dim) <= CPU_WIDE_HEAD_DIM
                            ? CPU_MAX_CHUNKS
                            : CPU_MAX_CHUNKS / 2;
  plan.rows_per_thread = choose_chunks(limits, hint, most, desc->batch * desc->heads_q,
                                       desc->seqlen_q);
  plan.block_q = plan.rows_per_thread * CPU_LANES;
  *out = plan;
  return FCL_SUCCESS;
}

/* Blocks of at most FCL_CPU_FEW_ROWS rows (a decode's packed heads) take
 * their scores a row at a time, across a vector of columns (cl/cpu.cl,
 * fcl_cpu_dots_few): 1.1-1.3x at B 8 x 8k on 2 cores (docs/performance.md).
 * Those sums are ordered otherwise than the 16-row path's, so the
 * batch-invariant mode, whose decode row is a chunk's bit for bit, keeps
 * the one path. */
unsigned fcl__cpu_few_rows(const fcl_attention_desc *desc, const fcl_plan *plan) {
  const size_t rows = desc->seqlen_q * plan->packed_heads;
  return plan->kernel == FCL_FLASH_KERNEL_CPU && !desc->batch_invariant &&
                 rows <= FCL_CPU_FEW_ROWS
             ? FCL_CPU_FEW_ROWS
             : 0u;
}
