/*
 * problem.c — the words a problem is described in: the version, storage
 * types (size, name), algorithm names and a descriptor's defaults. Pure;
 * every other part of the library may use them.
 */
#include "common.h"

#include <math.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

unsigned fcl_version_number(void) { return FCL_VERSION_NUMBER; }

const char *fcl_version_string(void) {
  return STR(FCL_VERSION_MAJOR) "." STR(FCL_VERSION_MINOR) "." STR(FCL_VERSION_PATCH);
}

size_t fcl_dtype_size(fcl_dtype dtype) {
  switch (dtype) {
    case FCL_DTYPE_F32: return 4;
    case FCL_DTYPE_F16: return 2;
    case FCL_DTYPE_BF16: return 2;
  }
  return 0;
}

const char *fcl_dtype_name(fcl_dtype dtype) {
  switch (dtype) {
    case FCL_DTYPE_F32: return "f32";
    case FCL_DTYPE_F16: return "f16";
    case FCL_DTYPE_BF16: return "bf16";
  }
  return "?";
}

const char *fcl_algo_name(fcl_algo algo) {
  switch (algo) {
    case FCL_ALGO_FLASH: return "flash";
    case FCL_ALGO_NAIVE: return "naive";
  }
  return "?";
}

void fcl_attention_desc_init(fcl_attention_desc *desc, size_t batch,
                             size_t heads_q, size_t heads_kv, size_t seqlen_q,
                             size_t seqlen_k, size_t head_dim) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->batch = batch;
  desc->heads_q = heads_q;
  desc->heads_kv = heads_kv;
  desc->seqlen_q = seqlen_q;
  desc->seqlen_k = seqlen_k;
  desc->head_dim = head_dim;
  desc->dtype = FCL_DTYPE_F32;
  desc->causal = 0;
  desc->scale = head_dim ? (float)(1.0 / sqrt((double)head_dim)) : 0.0f;
  desc->window_left = desc->window_right = -1;
}

const char *fcl_kv_dtype_name(fcl_kv_dtype kv_dtype) {
  switch (kv_dtype) {
    case FCL_KV_AS_DTYPE: return "as-dtype";
    case FCL_KV_Q8_0: return "int8";
    case FCL_KV_Q4_0: return "int4";
    case FCL_KV_FP8_E4M3: return "fp8e4m3";
    case FCL_KV_FP8_E5M2: return "fp8e5m2";
  }
  return "?";
}

size_t fcl_kv_row_bytes(fcl_kv_dtype kv_dtype, fcl_dtype dtype, size_t head_dim) {
  const int block = kv_dtype == FCL_KV_Q8_0 || kv_dtype == FCL_KV_Q4_0;
  if (block && head_dim % FCL_KV_BLOCK != 0) return 0;
  switch (kv_dtype) {
    case FCL_KV_AS_DTYPE: return head_dim * fcl_dtype_size(dtype);
    case FCL_KV_Q8_0: return head_dim / FCL_KV_BLOCK * FCL_KV_Q8_BYTES;
    case FCL_KV_Q4_0: return head_dim / FCL_KV_BLOCK * FCL_KV_Q4_BYTES;
    case FCL_KV_FP8_E4M3:
    case FCL_KV_FP8_E5M2: return head_dim;
  }
  return 0;
}
