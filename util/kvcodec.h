/*
 * kvcodec.h — a row of a quantized KV cache (fcl_kv_dtype) on the host,
 * for the tests and flashcl-bench: written and read with the library's own
 * format (cl/kvquant.h), so that a host copy of a cache holds the bytes
 * fcl_kv_cache_append writes and dequantises to the values the kernels read.
 */
#ifndef FLASHCL_KVCODEC_H
#define FLASHCL_KVCODEC_H

#include <stdint.h>

#include "flashcl.h"

/** Whether K and V of `desc` are kept in a quantized form. */
int fclu_kv_quantized(const fcl_attention_desc *desc);

/** The fp8 forms' scale of K (is_v 0) or V (1) of desc: 0 taken as 1. */
float fclu_kv_scale(const fcl_attention_desc *desc, int is_v);

/** Quantises head_dim floats x into one row of `form` at `row`
 *  (fcl_kv_row_bytes bytes; `scale` the fp8 forms' per-tensor scale). */
void fclu_kv_encode_row(fcl_kv_dtype form, const float *x, size_t head_dim, float scale,
                        uint8_t *row);
/** Dequantises one row: x = what the kernels read (the fp8 forms times
 *  `scale`). */
void fclu_kv_decode_row(fcl_kv_dtype form, const uint8_t *row, size_t head_dim, float scale,
                        float *x);

/** Replaces `rows` rows of head_dim floats by what K (is_v 0) or V (1)
 *  of desc reads back from its quantized form: the values a reference
 *  computes with. Nothing when desc keeps K and V in its dtype. Where the
 *  rows repeat every `period` rows (0: they may not), the first `period`
 *  are quantized and the rest copied from them. */
void fclu_kv_round_trip(const fcl_attention_desc *desc, int is_v, float *x, size_t rows,
                        size_t period);

#endif
