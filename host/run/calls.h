/*
 * calls.h — one call as the algorithms take it, and their entry points (flash.c, naive.c, cache.c, convert.c).
 */
#ifndef FCL_CALLS_H
#define FCL_CALLS_H

#include "common.h"
#include "context.h"
#include "measure.h"
#include "problem.h"

/** One forward call, validated; what each algorithm needs. */
typedef struct fcl__forward_call {
  fcl_context *ctx;
  fcl__settings settings; /* read once at the start of the call */
  const fcl_attention_desc *desc;
  fcl__shape shape;
  cl_mem q, k, v, o, lse;
  cl_mem io_counter; /* NULL unless counting */
  fcl__timer *timer; /* NULL unless the caller wants run info */
  fcl_plan plan;     /* flash: filled by the algorithm, unless planned */
  int planned;       /* flash: the caller has put the call's plan in plan */
  unsigned chunks;   /* naive: filled by the algorithm */
} fcl__forward_call;

fcl_status fcl__flash_forward(fcl__forward_call *call);
/** fcl__shape.kv_buffer_unit of a cache's K and V buffers from their lent
 *  host addresses (fcl__check_call_buffers; 0: the device placed it): the
 *  widest unit (16, 8, 4, 2, 1 bytes) the lent ones allow, 0 where neither
 *  is lent. */
unsigned fcl__kv_buffer_unit(uintptr_t k_lent, uintptr_t v_lent);

/** One append to a KV cache (cache.c), validated: the cache's shape (its
 *  lengths before), the kernel's parameters and the buffers. */
typedef struct fcl__append_call {
  fcl__shape shape;
  fcl_append_params params;
  cl_mem k_new, v_new, k_cache, v_cache;
} fcl__append_call;
/** fcl_kv_cache_append's checks, all of them, with nothing enqueued. */
fcl_status fcl__append_prepare(fcl_context *ctx, const fcl_attention_desc *desc,
                               size_t new_tokens, const fcl_tensor_layout *k_new_layout,
                               const fcl_tensor_layout *v_new_layout, cl_mem k_new,
                               cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                               fcl__append_call *call);
/** ... and its launch, timed and counted as `info` asks. */
fcl_status fcl__append_run(fcl_context *ctx, const fcl__append_call *call, fcl_run_info *info);

/** One backward call, validated; what each algorithm needs. */
typedef struct fcl__backward_call {
  fcl_context *ctx;
  fcl__settings settings; /* read once at the start of the call */
  const fcl_attention_desc *desc;
  fcl__shape shape;
  cl_mem q, k, v, o, lse, dout;  /* inputs */
  cl_mem dq, dk, dv;             /* outputs */
  cl_mem io_counter; /* NULL unless counting */
  fcl__timer *timer; /* NULL unless the caller wants run info */
  fcl_plan plan;     /* flash: filled by the algorithm */
  unsigned chunks;   /* naive: filled by the algorithm */
} fcl__backward_call;

fcl_status fcl__flash_backward(fcl__backward_call *call);
fcl_status fcl__naive_backward(fcl__backward_call *call);

fcl_status fcl__naive_forward(fcl__forward_call *call);

/* The naive algorithm's internals: host/run/naive.h. */

/** Forgets the context in CLBlast's process-wide kernel cache; for
 *  fcl_context_release (gemm.c explains). */
void fcl__clblast_release(fcl_context *ctx);

/** Enqueues the conversion of n elements (convert.cl) of a 16-bit storage
 *  type `dtype` to float (to_f32) or from float, rounding to nearest even,
 *  with `width` (1 or 4) elements per work-item; io_counter as the
 *  instrumented kernels take it (NULL when not counting). Counts as an
 *  enqueue for failure injection. */
fcl_status fcl__convert(fcl_context *ctx, fcl_dtype dtype, int to_f32, cl_mem from,
                        cl_mem to, size_t n, unsigned width, cl_mem io_counter);

#endif
