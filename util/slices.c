/*
 * slices.c — cutting a rank's slice from a whole tensor and putting it back.
 */
#include "slices.h"

#include <string.h>

size_t fclu_slice_copy(fcl_mpi_layout layout, size_t seqlen, int ranks, int rank, size_t outer,
                       size_t inner, int to_slice, float *whole, float *slice) {
  size_t local = 0, start[2], len[2];
  unsigned chunks = 0;
  if (fcl_mpi_slice(layout, seqlen, ranks, rank, &local, &chunks, start, len) != FCL_SUCCESS)
    return 0;
  for (size_t o = 0; o < outer; o++)
    for (unsigned c = 0, at = 0; c < chunks; at += (unsigned)len[c], c++) {
      float *w = whole + (o * seqlen + start[c]) * inner;
      float *s = slice + (o * local + at) * inner;
      const size_t bytes = len[c] * inner * sizeof(float);
      if (to_slice)
        memcpy(s, w, bytes);
      else
        memcpy(w, s, bytes);
    }
  return local;
}
