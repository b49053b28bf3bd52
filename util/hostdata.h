/*
 * hostdata.h — host-side helpers the tests and tools share: a seeded random
 * generator, rounding to the storage types, moving tensors to and from a
 * device in a given storage type, poisoning outputs, and error measures.
 */
#ifndef FLASHCL_HOSTDATA_H
#define FLASHCL_HOSTDATA_H

#include "flashcl.h"

#include <stdint.h>

/** xoshiro256** state; deterministic for a seed. */
typedef struct fclu_rng {
  uint64_t s[4];
} fclu_rng;

void fclu_rng_seed(fclu_rng *rng, uint64_t seed);
uint64_t fclu_next(fclu_rng *rng);
/** Uniform in [0, 1). */
double fclu_uniform(fclu_rng *rng);
/** Uniform integer in [lo, hi]. */
size_t fclu_range(fclu_rng *rng, size_t lo, size_t hi);
/** Host copies of device buffers that host code must read as a kernel
 *  does (ALiBi slopes for the reference, a paged cache's block table for
 *  the views): fclu_remember_host_copy names `host` as `mem`'s (the last
 *  32 named are kept); fclu_host_copy finds it, NULL if never named. */
void fclu_remember_host_copy(cl_mem mem, const void *host);
const void *fclu_host_copy(cl_mem mem);

/** Fills x[n] with normal(0, sigma) values rounded to `dtype`. */
void fclu_fill_normal(fclu_rng *rng, float *x, size_t n, double sigma, fcl_dtype dtype);

/** IEEE binary16 and bfloat16 conversions, round to nearest even. */
uint16_t fclu_f32_to_f16(float x);
float fclu_f16_to_f32(uint16_t h);
uint16_t fclu_f32_to_bf16(float x);
float fclu_bf16_to_f32(uint16_t b);
/** x rounded to the storage type and back. */
float fclu_round(float x, fcl_dtype dtype);

/** Creates a buffer of n elements of `dtype` holding x (converted).
 *  @return NULL on failure. */
cl_mem fclu_upload(fcl_context *ctx, const float *x, size_t n, fcl_dtype dtype);
/** Reads n elements of `dtype` into x as floats. @return 0 on success. */
int fclu_download(fcl_context *ctx, cl_mem mem, float *x, size_t n, fcl_dtype dtype);
/** Fills a buffer with 0xFF bytes: NaN in every float format, so elements
 *  a kernel forgot to write stand out. @return 0 on success. */
int fclu_poison(fcl_context *ctx, cl_mem mem, size_t bytes);
/** A buffer of `bytes`, poisoned. NULL on failure. */
cl_mem fclu_poisoned_buffer(fcl_context *ctx, size_t bytes);

/** max |x - ref|; NaN where ref is not NaN counts as infinite, and equal
 *  infinities (LSE of a fully masked row) as 0. */
double fclu_max_abs_err(const float *x, const double *ref, size_t n);
/** max |ref| over finite values. */
double fclu_max_abs(const double *ref, size_t n);

#endif
