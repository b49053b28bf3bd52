/*
 * agree.c — the ranks' agreement on a ring call's arguments before any
 * exchange: each rank checks its own, one MPI_Allreduce tells every rank
 * whether all are good, and the failing rank's reason is broadcast, so
 * that every rank returns the same error and none waits on a message that
 * will never come.
 */
#include "ring.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define WHY_LEN 256

int ring_wait(MPI_Request *reqs, int n) {
  for (int done = !n; !done;) {
    const int err = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    if (err != MPI_SUCCESS) return err;
    const struct timespec pause = {0, 20000};
    if (!done) nanosleep(&pause, NULL);
  }
  return MPI_SUCCESS;
}

fcl_status ring_agree(MPI_Comm comm, fcl_status local, const char *why, fcl_mpi_info *info) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  struct {
    int status, rank;
  } mine = {(int)local, rank}, worst = {0, 0};
  MPI_Request req;
  if (MPI_Iallreduce(&mine, &worst, 1, MPI_2INT, MPI_MAXLOC, comm, &req) != MPI_SUCCESS ||
      ring_wait(&req, 1) != MPI_SUCCESS) {
    snprintf(info->error, sizeof info->error, "rank %d: MPI_Allreduce of the status failed",
             rank);
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (worst.status == FCL_SUCCESS) return FCL_SUCCESS;
  char text[WHY_LEN] = "";
  if (rank == worst.rank) snprintf(text, sizeof text, "%s", why ? why : "");
  MPI_Bcast(text, WHY_LEN, MPI_CHAR, worst.rank, comm);
  text[WHY_LEN - 1] = '\0';
  snprintf(info->error, sizeof info->error, "rank %d: %s", worst.rank, text);
  return (fcl_status)worst.status;
}

/* What must be the same on every rank: rank 0's values are broadcast and
 * each rank compares its own. */
enum { SIG_B, SIG_HQ, SIG_HKV, SIG_NQ, SIG_NK, SIG_D, SIG_DTYPE, SIG_CAUSAL, SIG_WL, SIG_WR,
       SIG_SCALE, SIG_SOFTCAP, SIG_LAYOUT, SIG_FLAGS, SIG_N };
static const char *const sig_names[SIG_N] = {
    "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "dtype", "causal",
    "window_left", "window_right", "scale", "softcap", "layout", "flags"};

static void signature(const fcl_attention_desc *d, fcl_mpi_layout layout, unsigned flags,
                      long long sig[SIG_N]) {
  memset(sig, 0, SIG_N * sizeof *sig);
  if (!d) return;
  float scale = d->scale, softcap = d->softcap;
  int32_t sb, cb;
  memcpy(&sb, &scale, 4);
  memcpy(&cb, &softcap, 4);
  const long long v[SIG_N] = {(long long)d->batch, (long long)d->heads_q, (long long)d->heads_kv,
                              (long long)d->seqlen_q, (long long)d->seqlen_k,
                              (long long)d->head_dim, d->dtype, d->causal, d->window_left,
                              d->window_right, sb, cb, layout, flags};
  memcpy(sig, v, sizeof v);
}

static fcl_status fail(char *why, fcl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, WHY_LEN, fmt, ap);
  va_end(ap);
  return status;
}

static int packed(const fcl_tensor_layout *l) {
  return l->offset == 0 && l->batch_stride == 0 && l->seq_stride == 0 && l->head_stride == 0;
}

static fcl_status check_local(MPI_Comm comm, fcl_context *ctx, const fcl_attention_desc *desc,
                              fcl_mpi_layout layout, unsigned flags, const cl_mem *bufs,
                              unsigned n, const long long sig0[SIG_N], char *why) {
  int ranks = 1, rank = 0;
  MPI_Comm_size(comm, &ranks);
  MPI_Comm_rank(comm, &rank);
  if (!ctx || !fcl_context_cl_queue(ctx))
    return fail(why, FCL_ERROR_INVALID_ARGUMENT, "no context, or a failed one");
  if (!desc) return fail(why, FCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
  long long sig[SIG_N];
  signature(desc, layout, flags, sig);
  for (int i = 0; i < SIG_N; i++)
    if (sig[i] != sig0[i])
      return fail(why, FCL_ERROR_INVALID_ARGUMENT, "%s differs from rank 0's (%lld, not %lld)",
                  sig_names[i], sig[i], sig0[i]);
  if (flags & ~(unsigned)FCL_MPI_NO_OVERLAP)
    return fail(why, FCL_ERROR_INVALID_ARGUMENT, "unknown flags 0x%x", flags);
  if (desc->seqlen_q != desc->seqlen_k)
    return fail(why, FCL_ERROR_INVALID_SHAPE,
                "seqlen_q %zu != seqlen_k %zu: the ring splits one sequence", desc->seqlen_q,
                desc->seqlen_k);
  if (desc->alibi_slopes || desc->cu_seqlens_q || desc->cu_seqlens_k || desc->seqlens_k ||
      desc->block_table)
    return fail(why, FCL_ERROR_UNSUPPORTED,
                "ALiBi, ragged batches, KV caches and paging are not sharded by the ring");
  if (desc->sinks || desc->dsinks)  /* each block's forward would add the sink again */
    return fail(why, FCL_ERROR_UNSUPPORTED, "attention sinks are not sharded by the ring");
  if (desc->struct_size > offsetof(fcl_attention_desc, head_dim_v) && desc->head_dim_v &&
      desc->head_dim_v != desc->head_dim)  /* the ring's slices are of one width */
    return fail(why, FCL_ERROR_UNSUPPORTED,
                "head_dim_v = %zu with head_dim = %zu: the ring keeps one width for Q, K, V "
                "and O", desc->head_dim_v, desc->head_dim);
  const fcl_tensor_layout *views[] = {&desc->q, &desc->k, &desc->v, &desc->o,
                                      &desc->dout, &desc->dq, &desc->dk, &desc->dv};
  for (size_t i = 0; i < sizeof views / sizeof *views; i++)
    if (!packed(views[i]))
      return fail(why, FCL_ERROR_UNSUPPORTED, "the ring takes packed slices only");
  fcl_buffer_sizes sizes;
  char reason[200] = "";
  fcl_status status = fcl_attention_buffer_sizes(desc, &sizes, reason, sizeof reason);
  if (status != FCL_SUCCESS) return fail(why, status, "%s", reason);
  ring_chunk chunks[2];
  unsigned count = 0;
  size_t local = 0;
  status = ring_chunks(layout, desc->seqlen_q, ranks, rank, chunks, &count, &local);
  if (status != FCL_SUCCESS)
    return fail(why, status, "layout %d cannot split %zu tokens over %d ranks", (int)layout,
                desc->seqlen_q, ranks);
  fcl_attention_desc mine = *desc;
  mine.seqlen_q = mine.seqlen_k = local;
  status = fcl_attention_buffer_sizes(&mine, &sizes, reason, sizeof reason);
  if (status != FCL_SUCCESS) return fail(why, status, "%s", reason);
  static const char *const names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
  const size_t need[] = {sizes.q, sizes.k, sizes.v, sizes.o, sizes.lse,
                         sizes.dout, sizes.dq, sizes.dk, sizes.dv};
  for (unsigned i = 0; i < n; i++) {
    if (!bufs[i]) {
      if (i == 4 && n == 5) continue; /* the forward's LSE is optional */
      return fail(why, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", names[i]);
    }
    size_t have = 0;
    if (clGetMemObjectInfo(bufs[i], CL_MEM_SIZE, sizeof have, &have, NULL) != CL_SUCCESS)
      return fail(why, FCL_ERROR_INVALID_ARGUMENT, "%s is not a buffer", names[i]);
    if (have < need[i])
      return fail(why, FCL_ERROR_BUFFER_TOO_SMALL,
                  "%s holds %zu bytes; its slice of %zu tokens needs %zu", names[i], have,
                  local, need[i]);
  }
  return FCL_SUCCESS;
}

fcl_status ring_check(MPI_Comm comm, fcl_context *ctx, const fcl_attention_desc *desc,
                      fcl_mpi_layout layout, unsigned flags, const cl_mem *bufs, unsigned n,
                      fcl_mpi_info *info) {
  long long sig0[SIG_N];
  signature(desc, layout, flags, sig0);
  char why[WHY_LEN] = "";
  fcl_status status = FCL_SUCCESS;
  if (MPI_Bcast(sig0, SIG_N, MPI_LONG_LONG, 0, comm) != MPI_SUCCESS)
    status = fail(why, FCL_ERROR_INVALID_ARGUMENT, "MPI_Bcast of the problem failed");
  else
    status = check_local(comm, ctx, desc, layout, flags, bufs, n, sig0, why);
  return ring_agree(comm, status, why, info);
}
