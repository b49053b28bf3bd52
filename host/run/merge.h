/*
 * merge.h — merging attention states (merge.c), and the split forward's merge
 * (its shape: merge_layout.h).
 */
#ifndef FCL_MERGE_H
#define FCL_MERGE_H

#include "common.h"
#include "context.h"
#include "program.h"
#include "merge_layout.h"

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
