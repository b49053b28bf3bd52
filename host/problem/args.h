/*
 * args.h — the parameter block and buffers every attention kernel takes (args.c).
 */
#ifndef FCL_ARGS_H
#define FCL_ARGS_H

#include "common.h"
#include "context.h"

/** The buffers of one attention kernel launch, in cl/params.h's order;
 *  NULL where the kernel takes none. */
#define FCL__BUFFER_FIELD(name, type) cl_mem name;
typedef struct fcl__attention_buffers {
  FCL_ATTENTION_BUFFERS(FCL__BUFFER_FIELD)
} fcl__attention_buffers;
#undef FCL__BUFFER_FIELD

/** A tensor layout as the kernels' parameter blocks hold it. */
fcl_view fcl__view_of(const fcl_tensor_layout *layout);
/** The parameter block of a validated problem (work_items is the
 *  launch's to set). */
fcl_params fcl__params_of(const fcl__shape *shape);

/** A ragged batch's tables on the device (worklist.c); all NULL without
 *  one. */
typedef struct fcl__ragged {
  cl_mem seqs;            /* [batch][4]: q_start, nq, k_start, nk */
  cl_mem work_q, work_k;  /* (batch, block) items: query blocks, key blocks */
  size_t items_q, items_k;
} fcl__ragged;

/** Whether the kernels transform the logits (softcap or ALiBi: -DSOFTCAP,
 *  -DALIBI), and so keep scores in log2 units (cl/params.h). */
int fcl__scores_transformed(const fcl__shape *shape);

/** Builds and uploads the sequence table and work lists of a problem
 *  with one (a ragged batch, a cache's lengths; else nothing): query
 *  blocks of block_q rows (`packed` query heads' slots a token,
 *  fcl_plan.packed_heads), and with_keys key blocks of block_k. */
fcl_status fcl__ragged_upload(fcl_context *ctx, const fcl__shape *shape, unsigned block_q,
                              unsigned packed, unsigned block_k, int with_keys,
                              fcl__ragged *out);
void fcl__ragged_release(fcl__ragged *ragged);

/** Sets an attention kernel's arguments: the buffers, the parameter block
 *  and, when counting, the I/O counter. */
fcl_status fcl__set_attention_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                                   const fcl__attention_buffers *bufs, const fcl_params *params,
                                   cl_mem io_counter);

/** Bytes of local memory a driver may report beyond a kernel's own arrays.
 *  NVIDIA's OpenCL on the H200 reports 16 more than the arrays for float4
 *  tiles and 8 more for 8-byte ones (a small reserve of its own, padded to
 *  the first array's alignment); PoCL reports the arrays exactly. */
#define FCL__LOCAL_DRIVER_BYTES 16

/** Whether a kernel reporting `built` bytes of local memory matches a plan
 *  of `planned`: at least as many, at most FCL__LOCAL_DRIVER_BYTES more. */
int fcl__local_bytes_agree(size_t planned, cl_ulong built);

/** Checks that a built kernel declares the local memory its plan says
 *  (CL_KERNEL_LOCAL_MEM_SIZE against plan->local_bytes, up to
 *  FCL__LOCAL_DRIVER_BYTES more): the planner's model of the kernel's
 *  arrays must be the kernel's. */
fcl_status fcl__check_local_bytes(fcl_context *ctx, cl_kernel kernel, const char *name,
                                  size_t planned);

#endif
