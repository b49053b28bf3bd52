/*
 * plan_naive.c — the naive algorithm's plan (naive_plan.h): its chunks,
 * the softmax kernels' launch shape, its compute type, and the storage
 * types a device runs it in. run/naive.c runs it; model/iomodel.c counts
 * its bytes from the same plan.
 */
#include "common.h"
#include "errors.h"
#include "naive_plan.h"
#include "rules.h"

#include <stdint.h>
#include <string.h>

/* Half of the allowed scratch goes to S; the rest is left for the padded
 * copies CLBlast's indirect GEMM makes of large operands. */
#define CLBLAST_TEMP_SHARE 2

/* CLBlast 1.5.3 computes element offsets in 32-bit ints (an S chunk past
 * 2^31 elements faults on the device), and pads matrices to multiples of
 * its tile sizes, at most 128. */
#define CLBLAST_MAX_ELEMS ((size_t)INT32_MAX)
#define CLBLAST_PAD 128

/* Rows up to this many elements per work-item stay in registers. */
#define SOFTMAX_MAX_COLS 64u

void fcl__softmax_config(const fcl_device_limits *limits, size_t seqlen_k,
                         unsigned *wg_size, unsigned *cols_per_item) {
  size_t max_wg = limits->max_work_group_size ? limits->max_work_group_size : 1;
  unsigned wg = fcl__floor_pow2(max_wg < 256 ? max_wg : 256);
  if (seqlen_k > (size_t)wg * 16) wg = fcl__floor_pow2(max_wg < 1024 ? max_wg : 1024);
  size_t cols = (seqlen_k + wg - 1) / wg;
  /* Powers of two, so that few variants get compiled. */
  unsigned bucket = 1;
  while (bucket < cols) bucket *= 2;
  *wg_size = wg;
  *cols_per_item = bucket <= SOFTMAX_MAX_COLS ? bucket : 0;
}

fcl_dtype fcl__naive_compute_dtype(const fcl_attention_desc *desc) {
  return desc->dtype == FCL_DTYPE_F16 ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
}

size_t fcl__naive_s_elem_size(const fcl_attention_desc *desc) {
  return fcl_dtype_size(fcl__naive_compute_dtype(desc));
}

fcl_status fcl__naive_check_dtype(fcl_context *ctx, const fcl_device_limits *limits,
                                  const fcl_attention_desc *desc) {
  if (desc->dtype != FCL_DTYPE_F16) return FCL_SUCCESS;
  FCL_RETURN_IF(ctx, !limits->has_fp16, FCL_ERROR_UNSUPPORTED,
                "the naive algorithm runs f16 through CLBlast's half-precision GEMMs, "
                "which need cl_khr_fp16, and this device does not have it (the flash "
                "algorithm runs f16 without it)");
  const cl_half alpha = fcl__half_bits(desc->scale);
  FCL_RETURN_IF(ctx, (alpha & 0x7fffu) == 0 || (alpha & 0x7c00u) == 0x7c00u,
                FCL_ERROR_UNSUPPORTED,
                "scale = %g is outside the normal range of f16, in which the naive "
                "algorithm's f16 GEMM takes it",
                (double)desc->scale);
  return FCL_SUCCESS;
}

fcl_status fcl__naive_chunking(fcl_context *ctx, const fcl_device_limits *limits,
                               uint64_t scratch, const fcl__shape *sh, fcl_pass pass,
                               fcl__chunking *out) {
  const fcl_attention_desc *desc = &sh->desc;
  /* The forward needs S (P in place); the backward P and dP (dS in place),
   * and with a softcap the slope of its tanh. */
  const size_t matrices = pass == FCL_PASS_BACKWARD ? (desc->softcap > 0.0f ? 3 : 2) : 1;
  const char *what = pass != FCL_PASS_BACKWARD ? "S"
                     : matrices == 3            ? "P, dP and the softcap's slopes"
                                                : "P and dP";
  size_t one, slice;
  FCL_RETURN_IF(ctx,
                __builtin_mul_overflow(desc->seqlen_q, desc->seqlen_k, &one) ||
                    __builtin_mul_overflow(one, fcl__naive_s_elem_size(desc), &one) ||
                    __builtin_mul_overflow(one, matrices, &slice),
                FCL_ERROR_OUT_OF_MEMORY,
                "the naive algorithm's %s for seqlen_q = %zu, seqlen_k = %zu "
                "overflows size_t",
                what, desc->seqlen_q, desc->seqlen_k);
  uint64_t allowed = limits->max_alloc_bytes;
  if (scratch < allowed) allowed = scratch;
  FCL_RETURN_IF(ctx, slice > allowed, FCL_ERROR_OUT_OF_MEMORY,
                "the naive algorithm needs %zu bytes for %s of one (batch, head) "
                "slice (%zu x %zu); %llu are allowed (the device's largest "
                "allocation is %llu, the scratch limit %llu)",
                slice, what, desc->seqlen_q, desc->seqlen_k, (unsigned long long)allowed,
                (unsigned long long)limits->max_alloc_bytes,
                (unsigned long long)scratch);
  const size_t padded = ((desc->seqlen_q + CLBLAST_PAD - 1) / CLBLAST_PAD * CLBLAST_PAD) *
                        ((desc->seqlen_k + CLBLAST_PAD - 1) / CLBLAST_PAD * CLBLAST_PAD);
  /* CLBlast indexes each operand from its buffer's start */
  const size_t spans[FCL__TENSORS] = {sh->sizes.q, sh->sizes.k,  sh->sizes.v,  sh->sizes.o,
                                      sh->sizes.dout, sh->sizes.dq, sh->sizes.dk, sh->sizes.dv};
  size_t widest = 0;
  for (int t = 0; t < FCL__TENSORS; ++t)
    if (spans[t] / sh->elem_size > widest) widest = spans[t] / sh->elem_size;
  FCL_RETURN_IF(ctx, padded > CLBLAST_MAX_ELEMS || widest > CLBLAST_MAX_ELEMS,
                FCL_ERROR_UNSUPPORTED,
                "the naive algorithm's GEMMs (CLBlast) index at most 2^31 elements per "
                "matrix; seqlen_q %zu x seqlen_k %zu, or a tensor spanning %zu elements, "
                "is more",
                desc->seqlen_q, desc->seqlen_k, widest);
  size_t per_chunk = (size_t)(allowed / CLBLAST_TEMP_SHARE / slice);
  if (per_chunk > CLBLAST_MAX_ELEMS / padded) per_chunk = CLBLAST_MAX_ELEMS / padded;
  if (per_chunk == 0) per_chunk = 1;
  if (per_chunk > desc->heads_kv) per_chunk = desc->heads_kv;
  out->slice_bytes = slice;
  out->matrices = matrices;
  out->per_chunk = per_chunk;
  out->chunks = desc->batch * sh->group * ((desc->heads_kv + per_chunk - 1) / per_chunk);
  return FCL_SUCCESS;
}

cl_half fcl__half_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  /* below f16's normal range: a signed zero; else kvquant.h's rounding */
  if ((x & 0x7fffffffu) < 0x38800000u) return (cl_half)((x >> 16) & 0x8000u);
  return (cl_half)fcl_float_to_f16(f);
}
