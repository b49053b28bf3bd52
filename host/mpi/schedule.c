/*
 * schedule.c — which tokens each rank holds and which (query chunk, key
 * chunk) blocks the mask shows: pure arithmetic, the same on every rank,
 * so that all ranks agree on the ring's messages without exchanging it.
 */
#include "ring.h"

#include <limits.h>

static size_t chunk_start(size_t seqlen, size_t chunks, size_t c) {
  return (size_t)(((unsigned __int128)seqlen * c) / chunks);
}

fcl_status ring_chunks(fcl_mpi_layout layout, size_t seqlen, int ranks, int rank,
                       ring_chunk out[2], unsigned *count, size_t *local) {
  if ((layout != FCL_MPI_LAYOUT_CONTIGUOUS && layout != FCL_MPI_LAYOUT_ZIGZAG) || ranks < 1 ||
      rank < 0 || rank >= ranks)
    return FCL_ERROR_INVALID_ARGUMENT;
  const size_t p = (size_t)ranks, n = layout == FCL_MPI_LAYOUT_ZIGZAG ? 2 * p : p;
  if (seqlen < n) return FCL_ERROR_INVALID_SHAPE;
  const size_t ids[2] = {(size_t)rank, 2 * p - 1 - (size_t)rank};
  *count = layout == FCL_MPI_LAYOUT_ZIGZAG ? 2 : 1;
  *local = 0;
  for (unsigned i = 0; i < *count; i++) {
    out[i].start = chunk_start(seqlen, n, ids[i]);
    out[i].len = chunk_start(seqlen, n, ids[i] + 1) - out[i].start;
    out[i].local = *local;
    *local += out[i].len;
  }
  return FCL_SUCCESS;
}

fcl_status fcl_mpi_slice(fcl_mpi_layout layout, size_t seqlen, int ranks, int rank,
                         size_t *local, unsigned *chunks, size_t start[2], size_t len[2]) {
  if (!local) return FCL_ERROR_INVALID_ARGUMENT;
  ring_chunk c[2];
  unsigned n = 0;
  size_t total = 0;
  const fcl_status status = ring_chunks(layout, seqlen, ranks, rank, c, &n, &total);
  if (status != FCL_SUCCESS) return status;
  *local = total;
  if (chunks) *chunks = n;
  for (unsigned i = 0; i < n; i++) {
    if (start) start[i] = c[i].start;
    if (len) len[i] = c[i].len;
  }
  return FCL_SUCCESS;
}

void ring_window(const fcl_attention_desc *desc, int *left, int *right) {
  *left = desc->window_left;
  *right = desc->causal ? 0 : desc->window_right;
}

/* Row i (0-based in the block) sees local key j iff lo <= j - i <= hi.
 * Trimming keys no row sees on both sides and the bottom rows that see
 * none leaves a block whose bounds bottom-right alignment expresses with
 * windows >= 0 (docs/design.md, "Ring attention over MPI"). */
ring_block ring_block_plan(size_t q0, size_t nq, size_t k0, size_t nk, int window_left,
                           int window_right) {
  ring_block b = {0, 0, 0, 0, -1, -1};
  const long long d = (long long)q0 - (long long)k0;
  const long long lo = window_left < 0 ? LLONG_MIN / 4 : d - window_left;
  const long long hi = window_right < 0 ? LLONG_MAX / 4 : d + window_right;
  const long long last_row = (long long)nq - 1, last_key = (long long)nk - 1;
  const long long i_min = hi < 0 ? -hi : 0;
  const long long i_max = last_key - lo < last_row ? last_key - lo : last_row;
  if (i_min > i_max) return b;
  const long long k_first = lo > 0 ? lo : 0;
  const long long k_last = last_row + hi < last_key ? last_row + hi : last_key;
  b.visible = 1;
  b.q_rows = (size_t)(i_max + 1);
  b.k_first = (size_t)k_first;
  b.k_len = (size_t)(k_last - k_first + 1);
  const long long rows = (long long)b.q_rows, keys = (long long)b.k_len;
  const long long lo2 = lo - k_first, hi2 = hi - k_first, align = keys - rows;
  /* a side binds where some row's bound falls inside the trimmed keys */
  if (window_left >= 0 && lo2 + rows - 1 > 0) b.window_left = (int)(align - lo2);
  if (window_right >= 0 && hi2 < keys - 1) b.window_right = (int)(hi2 - align);
  return b;
}

unsigned ring_steps(fcl_mpi_layout layout, size_t seqlen, int ranks, int window_left,
                    int window_right) {
  unsigned steps = 1;
  for (int s = 1; s < ranks; s++)
    for (int r = 0; r < ranks; r++) {
      ring_chunk mine[2], theirs[2];
      unsigned nm = 0, nt = 0;
      size_t lm, lt;
      if (ring_chunks(layout, seqlen, ranks, r, mine, &nm, &lm) != FCL_SUCCESS ||
          ring_chunks(layout, seqlen, ranks, (r - s + ranks) % ranks, theirs, &nt, &lt) !=
              FCL_SUCCESS)
        continue;
      for (unsigned a = 0; a < nm; a++)
        for (unsigned e = 0; e < nt; e++)
          if (ring_block_plan(mine[a].start, mine[a].len, theirs[e].start, theirs[e].len,
                              window_left, window_right)
                  .visible)
            steps = (unsigned)s + 1;
    }
  return steps;
}
