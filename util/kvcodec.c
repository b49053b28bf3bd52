/*
 * kvcodec.c — see kvcodec.h.
 */
#include "kvcodec.h"

#include "params.h"
#include "kvquant.h"

#include <stdlib.h>
#include <string.h>

int fclu_kv_quantized(const fcl_attention_desc *d) { return d->kv_dtype != FCL_KV_AS_DTYPE; }

float fclu_kv_scale(const fcl_attention_desc *d, int is_v) {
  const float s = is_v ? d->v_scale : d->k_scale;
  return s > 0.0f ? s : 1.0f;
}

static int block_form(fcl_kv_dtype f) { return f == FCL_KV_Q8_0 || f == FCL_KV_Q4_0; }

void fclu_kv_encode_row(fcl_kv_dtype f, const float *x, size_t hd, float scale, uint8_t *row) {
  if (!block_form(f)) {
    const float inv = 1.0f / scale;
    for (size_t c = 0; c < hd; ++c) row[c] = (uint8_t)fcl_float_to_fp8(x[c] * inv, f == FCL_KV_FP8_E4M3);
    return;
  }
  const int q8 = f == FCL_KV_Q8_0, qmax = q8 ? FCL_KV_Q8_MAX : FCL_KV_Q4_MAX;
  const size_t bytes = q8 ? FCL_KV_Q8_BYTES : FCL_KV_Q4_BYTES;
  for (size_t k = 0; k < hd / FCL_KV_BLOCK; ++k) {
    const float *xb = x + k * FCL_KV_BLOCK;
    uint8_t *b = row + k * bytes;
    float amax = 0.0f;
    for (int j = 0; j < FCL_KV_BLOCK; ++j) {
      const float a = fabsf(xb[j]);
      amax = a <= 3.4028234663852886e38f ? (a > amax ? a : amax) : INFINITY;
    }
    const uint32_t bits = fcl_kv_block_scale(amax, qmax);
    const float d = fcl_f16_to_float(bits);
    b[0] = (uint8_t)(bits & 0xffu);
    b[1] = (uint8_t)(bits >> 8);
    for (int j = 0; j < FCL_KV_BLOCK; j += 2) {
      const int q0 = fcl_kv_block_quant(xb[j], d, qmax), q1 = fcl_kv_block_quant(xb[j + 1], d, qmax);
      if (q8) {
        b[2 + j] = (uint8_t)(int8_t)q0;
        b[3 + j] = (uint8_t)(int8_t)q1;
      } else {
        b[2 + j / 2] = (uint8_t)((q0 + 8) | ((q1 + 8) << 4));
      }
    }
  }
}

void fclu_kv_decode_row(fcl_kv_dtype f, const uint8_t *row, size_t hd, float scale, float *x) {
  if (!block_form(f)) {
    for (size_t c = 0; c < hd; ++c) x[c] = fcl_fp8_to_float(row[c], f == FCL_KV_FP8_E4M3) * scale;
    return;
  }
  const int q8 = f == FCL_KV_Q8_0;
  const size_t bytes = q8 ? FCL_KV_Q8_BYTES : FCL_KV_Q4_BYTES;
  for (size_t c = 0; c < hd; ++c) {
    const uint8_t *b = row + c / FCL_KV_BLOCK * bytes;
    const float d = fcl_f16_to_float((uint32_t)b[0] | ((uint32_t)b[1] << 8));
    const size_t j = c % FCL_KV_BLOCK;
    const int q = q8 ? (int8_t)b[2 + j] : ((j & 1 ? b[2 + j / 2] >> 4 : b[2 + j / 2] & 15) - 8);
    x[c] = (float)q * d;
  }
}

void fclu_kv_round_trip(const fcl_attention_desc *d, int is_v, float *x, size_t rows,
                        size_t period) {
  if (!fclu_kv_quantized(d)) return;
  const size_t hd = d->head_dim, bytes = fcl_kv_row_bytes(d->kv_dtype, d->dtype, hd);
  uint8_t *row = malloc(bytes ? bytes : 1);
  if (!row) abort();
  const float scale = fclu_kv_scale(d, is_v);
  const size_t distinct = period && period < rows ? period : rows;
  for (size_t r = 0; r < distinct; ++r) {
    fclu_kv_encode_row(d->kv_dtype, x + r * hd, hd, scale, row);
    fclu_kv_decode_row(d->kv_dtype, row, hd, scale, x + r * hd);
  }
  for (size_t r = distinct; r < rows; r += distinct)  /* the rows repeat: so do their values */
    memcpy(x + r * hd, x, (rows - r < distinct ? rows - r : distinct) * hd * sizeof *x);
  free(row);
}
