/*
 * merge_layout.h — how the merge kernel (cl/merge.cl) is shaped for a
 * device, a width and a number of parts (merge_layout.c): what the planner
 * asks before it splits a forward, and what the merge's build takes.
 */
#ifndef FCL_MERGE_LAYOUT_H
#define FCL_MERGE_LAYOUT_H

#include "common.h"

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

#endif
