/*
 * merge_layout.c — the merge kernel's shape for a device, a width and a
 * number of parts (merge_layout.h).
 */
#include "merge_layout.h"

/* Parts whose O a lane loads before adding them (cl/merge.cl): 8 on NVIDIA,
 * where it measured faster; one on Intel, whose compiler spilled more
 * (docs/design.md, "The rules, measured"). */
static unsigned merge_part_loads(const fcl_device_limits *limits) {
  return limits->vendor == FCL_VENDOR_INTEL ? 1u : 8u;
}

/* Rows of a work-group of 128 (64 where a device allows no more), each
 * merged by enough lane groups that a lane loads its share of the parts in
 * one batch, as far as the work-group holds them: a split decode's few rows
 * of 32-64 parts then wait on one or two round trips, not four to eight. */
fcl__merge_layout fcl__merge_layout_of(const fcl_device_limits *limits, size_t head_dim,
                                       size_t parts) {
  fcl__merge_layout l = {.wg_size = limits->max_work_group_size >= 128 ? 128u : 64u,
                         .head_dim_max = 16,
                         .part_loads = merge_part_loads(limits),
                         .part_groups = 1};
  while (l.head_dim_max < head_dim) l.head_dim_max *= 2;
  const size_t batches = (parts + l.part_loads - 1) / l.part_loads;
  const unsigned row_groups = l.wg_size / (l.head_dim_max / 4);
  while (l.part_groups < batches && 2 * l.part_groups <= row_groups) l.part_groups *= 2;
  l.rows = row_groups / l.part_groups;
  return l;
}
