/*
 * merge.h — merging attention states (merge.c), and the split forward's merge.
 */
#ifndef FCL_MERGE_H
#define FCL_MERGE_H

#include "common.h"
#include "context.h"
#include "program.h"

/** A validated merge descriptor and what follows from it. */
typedef struct fcl__merge_shape {
  fcl_merge_desc desc;       /* the caller's, whole */
  size_t rows;               /* batch * seqlen * heads */
  size_t lse_per_part;       /* rows: floats of one part's LSE */
  size_t elem_size;
  fcl_tensor_layout o_parts, o;  /* resolved (packed by default) */
  size_t o_part_stride, lse_part_stride;  /* resolved */
  int vec4;
  fcl_merge_sizes sizes;
  size_t sinks_bytes;        /* the sinks' floats (0: none) */
  size_t layout_parts;  /* the parts the kernel's layout is chosen for (fcl__merge_layout_parts) */
} fcl__merge_shape;
/** Validates a merge descriptor as fcl_merge_states does. */
fcl_status fcl__check_merge_why(const fcl_merge_desc *desc, fcl__merge_shape *shape,
                                char *why, size_t why_len);
/** How the merge kernel (cl/merge.cl) is built for a device, a head_dim
 *  and a number of parts: work-group size, head_dim bucket (a power of
 *  two, at least 16), parts a lane loads at once, lane groups per row, and
 *  rows per work-group (given to the kernel, which checks it). */
typedef struct fcl__merge_layout {
  unsigned wg_size, head_dim_max, part_loads, part_groups, rows;
} fcl__merge_layout;
fcl__merge_layout fcl__merge_layout_of(const fcl_device_limits *limits, size_t head_dim,
                                       size_t parts);
/** Whether the merge kernel takes head_dim on a device: a row's lanes of
 *  four columns within one work-group (512 at 128). */
static inline int fcl__merge_takes(const fcl_device_limits *limits, size_t head_dim) {
  const fcl__merge_layout l = fcl__merge_layout_of(limits, head_dim, 1);
  return l.head_dim_max / 4 <= l.wg_size;
}
/** The parts a split forward's merge layout is chosen for: its splits, or
 *  1 in the batch-invariant mode (fcl_plan.split_keys set): one lane group
 *  a row, which adds the row's parts in order in chunks that depend on
 *  head_dim alone, so that parts of LSE -inf (the splits past a shorter
 *  sequence's keys) change no bit of it. */
static inline size_t fcl__merge_layout_parts(const fcl_plan *plan) {
  return plan->split_keys ? 1 : plan->splits;
}
/** The merge kernel's build options for a layout. */
void fcl__merge_options(const fcl__merge_layout *layout, fcl_dtype dtype, cl_mem io_counter,
                        fcl__options *opts);
/** The merge kernel with its arguments set, ready to launch. */
typedef struct fcl__merge_run {
  cl_kernel kernel;
  size_t global, local;
} fcl__merge_run;
/** Builds the merge kernel and sets its arguments (lse NULL: no merged
 *  LSE), so that launching it later costs one enqueue. */
fcl_status fcl__merge_prepare(fcl_context *ctx, const fcl__merge_shape *shape, cl_mem o_parts,
                              cl_mem lse_parts, cl_mem o, cl_mem lse, cl_mem io_counter,
                              fcl__merge_run *run);
fcl_status fcl__merge_launch(fcl_context *ctx, const fcl__merge_run *run);
/** Releases the prepared kernel; a run never prepared (zeroed) is a no-op. */
void fcl__merge_release(fcl_context *ctx, fcl__merge_run *run);

#endif
