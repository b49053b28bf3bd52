/*
 * common.h — what every host file builds on: the public header, the kernels' parameter block and traits (cl/), the I/O model's 128-bit byte counts, and the names the internal headers share.
 */
#ifndef FCL_COMMON_H
#define FCL_COMMON_H

#include "flashcl.h"
#include "params.h"  /* cl/params.h: the kernels' parameter block and mask */
#include "kvquant.h"  /* cl/kvquant.h: the quantized KV-cache forms */
#include "traits.h"  /* cl/traits.h: the kernel families' derived sizes */

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/** Byte counts of the I/O model, in 128 bits: every term is a product of
 *  a validated tensor's bytes (below 2^64) and a sequence length (below
 *  2^31) or a few more small factors, so none overflows; what does not fit
 *  the public 64-bit fields is reported as an overflow, never wrapped. */
typedef unsigned __int128 fcl__bytes;


/** A device's compute units, at least 1: limits made up by a test or a
 *  profile may leave the count 0, and the planners divide work by it. */
static inline unsigned fcl__compute_units(const fcl_device_limits *limits) {
  return limits->compute_units ? limits->compute_units : 1;
}

typedef struct fcl__program_entry fcl__program_entry;
typedef struct fcl__shape fcl__shape;  /* a validated problem: see below */
typedef struct fcl__error_slot fcl__error_slot;

#endif
