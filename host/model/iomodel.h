/*
 * iomodel.h — the global-memory bytes of every kernel as run (iomodel.c).
 */
#ifndef FCL_IOMODEL_H
#define FCL_IOMODEL_H

#include "common.h"
#include "problem.h"
#include "merge.h"

/** Global-memory traffic of an algorithm as it runs, in bytes (each element
 *  weighted by its type: the storage type, float for LSE and S/P). */
typedef struct fcl__io {
  fcl__bytes loads;
  fcl__bytes stores;
} fcl__io;

/** loads + stores as 64 bits; UINT64_MAX when they do not fit. */
uint64_t fcl__io_total(fcl__io io);
/** 1 when both counts fit 64 bits each and in sum. */
int fcl__io_fits(fcl__io io);

/** Forward traffic of the flash kernel for `plan` (split: its partial
 *  states and their merge). */
fcl__io fcl__io_flash_forward(const fcl__shape *shape, const fcl_plan *plan, int with_lse);
/** Backward traffic of the flash kernels (preprocessing, dK/dV, dQ) for
 *  `plan`, the mask's skipped tiles included. */
fcl__io fcl__io_flash_backward(const fcl__shape *shape, const fcl_plan *plan);
/** Traffic of a naive pass in `chunks` chunks: all of it, or (own_only)
 *  what the library's own kernels count (not CLBlast's GEMMs, nor the
 *  queue's copies). */
fcl__io fcl__io_naive(const fcl_device_limits *limits, const fcl__shape *shape, fcl_pass pass,
                      int with_lse, unsigned chunks, int own_only);

/** Traffic of the merge kernel: every part's LSE and O once, the merged O
 *  (and LSE) once. */
fcl__io fcl__io_merge(const fcl__merge_shape *shape, int with_lse);
/** Traffic of appending `rows` rows (batch x new tokens x KV heads) of K
 *  and V to a cache (cache.c): each work-item's length (and, paged, its
 *  page's table entry; a work-item takes `chunk` columns of a row), the
 *  new rows read once and the cache's rows, row_bytes each, written once. */
fcl__io fcl__io_kv_append(size_t rows, size_t head_dim, size_t elem_size, size_t chunk,
                          size_t row_bytes, int paged);
/** The same for `rows` rows of `parts` parts (the split forward's merge). */
fcl__io fcl__io_merge_rows(size_t rows, size_t parts, size_t head_dim, size_t elem_size,
                           int with_lse);

#endif
