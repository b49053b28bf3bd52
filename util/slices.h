/*
 * slices.h — a rank's slice of a whole sequence's tensor (flashcl_mpi.h's
 * layouts), cut from or put back into the whole, for the ring's tests and
 * its bench, which hold the whole problem on the host.
 */
#ifndef FLASHCL_SLICES_H
#define FLASHCL_SLICES_H

#include "flashcl_mpi.h"

/** Copies between a whole tensor viewed as [outer][seqlen][inner] floats
 *  and rank `rank`'s slice [outer][local][inner] (Q, O: outer batch,
 *  inner heads * head_dim; LSE: outer batch * heads, inner 1): into the
 *  slice when to_slice, else back into the whole. @return local. */
size_t fclu_slice_copy(fcl_mpi_layout layout, size_t seqlen, int ranks, int rank, size_t outer,
                       size_t inner, int to_slice, float *whole, float *slice);

#endif
