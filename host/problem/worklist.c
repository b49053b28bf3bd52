/*
 * worklist.c — what the host plans for a ragged batch or a cache's lengths,
 * so that the kernels only walk it: the table of each sequence's start and
 * length (in the packed tensors, or from its own entry's start), and the
 * list of work items, (sequence, block) pairs, a
 * block of query rows (forward, dQ) or of keys (dK/dV) each. A sequence
 * costs as many items as its own blocks, never the longest's. Items are
 * ordered by the work their block sees (the mask's key or query range),
 * largest first, so that a launch does not end on a long tail.
 */
#include "common.h"
#include "errors.h"
#include "resources.h"
#include "args.h"
#include "problem.h"

#include <stdlib.h>
#include <string.h>

typedef struct item {
  cl_int batch, block;
  cl_long work;  /* keys (or queries) the block's rows (or keys) see */
} item;

static int heaviest_first(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->work != y->work) return x->work < y->work ? 1 : -1;
  if (x->batch != y->batch) return x->batch < y->batch ? -1 : 1;
  return (x->block > y->block) - (x->block < y->block);
}

/* The items of one kind: blocks of `block` query rows (keys = 0; each
 * token `packed` slots, fcl_plan.packed_heads) or keys (keys = 1) of every
 * sequence, as (batch, block) pairs, sorted. */
static fcl_status make_items(fcl_context *ctx, const fcl__shape *sh, const cl_int *seqs,
                             unsigned block, unsigned packed, int keys, cl_int **out,
                             size_t *n_out) {
  const size_t batch = sh->desc.batch;
  size_t n = 0;
  for (size_t b = 0; b < batch; ++b) {
    const size_t len = (size_t)seqs[4 * b + (keys ? 3 : 1)] * (keys ? 1 : packed);
    n += (len + block - 1) / block;
  }
  *out = NULL;
  *n_out = n;
  if (n == 0) return FCL_SUCCESS;
  FCL_RETURN_IF(ctx, n > (size_t)INT32_MAX, FCL_ERROR_INVALID_SHAPE,
                "a ragged batch of %zu blocks; at most %d fit", n, INT32_MAX);
  item *items = fcl__malloc(ctx, n * sizeof *items);
  cl_int *pairs = items ? fcl__malloc(ctx, n * 2 * sizeof *pairs) : NULL;
  if (!pairs) {
    fcl__free(items);
    return fcl__fail(ctx, FCL_ERROR_OUT_OF_MEMORY, "out of host memory for a work list of %zu",
                     n);
  }
  size_t m = 0;
  for (size_t b = 0; b < batch; ++b) {
    const cl_int nq = seqs[4 * b + 1], nk = seqs[4 * b + 3];
    const cl_int len = keys ? nk : nq * (cl_int)packed;
    for (cl_int x0 = 0; x0 < len; x0 += (cl_int)block) {
      const cl_int rows = len - x0 < (cl_int)block ? len - x0 : (cl_int)block;
      cl_int lo, hi, full_lo, full_hi;
      if (keys) {
        fcl_block_queries(nq, nk, sh->window_left, sh->window_right, x0, rows, &lo, &hi,
                          &full_lo, &full_hi);
      } else {  /* the block's tokens */
        const cl_int t0 = x0 / (cl_int)packed, t1 = (x0 + rows - 1) / (cl_int)packed;
        fcl_block_keys(nq, nk, sh->window_left, sh->window_right, t0, t1 - t0 + 1, &lo, &hi,
                       &full_lo, &full_hi);
      }
      items[m++] = (item){(cl_int)b, x0 / (cl_int)block, (cl_long)hi - lo};
    }
  }
  qsort(items, n, sizeof *items, heaviest_first);
  for (size_t i = 0; i < n; ++i) {
    pairs[2 * i] = items[i].batch;
    pairs[2 * i + 1] = items[i].block;
  }
  fcl__free(items);
  *out = pairs;
  return FCL_SUCCESS;
}

void fcl__ragged_release(fcl__ragged *r) {
  fcl__release_mem(&r->seqs);
  fcl__release_mem(&r->work_q);
  fcl__release_mem(&r->work_k);
  memset(r, 0, sizeof *r);
}

fcl_status fcl__ragged_upload(fcl_context *ctx, const fcl__shape *sh, unsigned block_q,
                              unsigned packed, unsigned block_k, int with_keys,
                              fcl__ragged *out) {
  memset(out, 0, sizeof *out);
  if (!sh->tabled) return FCL_SUCCESS;
  const fcl_attention_desc *d = &sh->desc;
  const int32_t *cq = d->cu_seqlens_q, *ck = d->cu_seqlens_k ? d->cu_seqlens_k : cq;
  cl_int *seqs = fcl__malloc(ctx, d->batch * 4 * sizeof *seqs);
  FCL_RETURN_IF(ctx, !seqs, FCL_ERROR_OUT_OF_MEMORY,
                "out of host memory for the table of %zu sequences", d->batch);
  for (size_t b = 0; b < d->batch; ++b) {
    if (sh->ragged) {  /* tokens packed across sequences */
      seqs[4 * b] = cq[b];
      seqs[4 * b + 1] = cq[b + 1] - cq[b];
      seqs[4 * b + 2] = ck[b];
      seqs[4 * b + 3] = ck[b + 1] - ck[b];
    } else {  /* a cache's lengths: each entry's tokens from its own start */
      seqs[4 * b] = 0;
      seqs[4 * b + 1] = (cl_int)d->seqlen_q;
      seqs[4 * b + 2] = 0;
      seqs[4 * b + 3] = d->seqlens_k[b];
    }
  }
  cl_int *work_q = NULL, *work_k = NULL;
  fcl_status status = make_items(ctx, sh, seqs, block_q, packed ? packed : 1, 0, &work_q,
                                 &out->items_q);
  if (status == FCL_SUCCESS && with_keys)
    status = make_items(ctx, sh, seqs, block_k, 1, 1, &work_k, &out->items_k);
  if (status == FCL_SUCCESS)
    out->seqs = fcl__upload(ctx, seqs, d->batch * 4 * sizeof *seqs,
                            "the ragged batch's sequence table", &status);
  if (status == FCL_SUCCESS && work_q)
    out->work_q = fcl__upload(ctx, work_q, out->items_q * 2 * sizeof *work_q,
                              "the ragged batch's query work list", &status);
  if (status == FCL_SUCCESS && work_k)
    out->work_k = fcl__upload(ctx, work_k, out->items_k * 2 * sizeof *work_k,
                              "the ragged batch's key work list", &status);
  fcl__free(seqs);
  fcl__free(work_q);
  fcl__free(work_k);
  if (status != FCL_SUCCESS) fcl__ragged_release(out);
  return status;
}
