/*
 * scratch.c — device scratch a context keeps between calls.
 *
 * The split forward's partial outputs are leased from here rather than
 * created and released by every call: drivers that allocate a buffer on
 * its first use (NVIDIA's) would otherwise do so inside the call's time
 * on the device, every call, which is most of a short decode's time
 * (docs/design.md, "The rules, measured"). A lease is exclusive from the moment it is
 * taken until it is given back, after the call's last enqueue; the
 * context's queue is in order, so the next lease's commands run after the
 * last one's. A thread that finds every slot leased, or asks for more than
 * a slot keeps, gets a buffer of its own, released when given back.
 */
#include "context.h"
#include "errors.h"
#include "resources.h"

/* Buffers larger than this are not kept: a long prefill's rare split
 * should not hold its scratch for the context's life. */
#define KEEP_MAX_BYTES ((size_t)64 << 20)
/* Growth rounds up to this, so that nearby sizes share a buffer. */
#define GRAIN_BYTES ((size_t)64 << 10)

fcl_status fcl__scratch_lease(fcl_context *ctx, size_t bytes, const char *what,
                              cl_mem *out) {
  *out = NULL;
  if (bytes == 0) bytes = 1;
  const size_t rounded = (bytes + GRAIN_BYTES - 1) / GRAIN_BYTES * GRAIN_BYTES;
  fcl_status status = FCL_SUCCESS;
  cl_mem outgrown = NULL;
  pthread_mutex_lock(&ctx->lock);
  fcl__scratch_slot *fit = NULL, *free_slot = NULL;
  for (unsigned i = 0; i < FCL__SCRATCH_SLOTS; ++i) {
    fcl__scratch_slot *s = &ctx->scratch[i];
    if (s->leased) continue;
    if (s->mem && s->bytes >= bytes && (!fit || s->bytes < fit->bytes)) fit = s;
    if (!free_slot || s->bytes < free_slot->bytes) free_slot = s;
  }
  if (!fit && free_slot && bytes <= KEEP_MAX_BYTES) {
    /* Grow the smallest free slot; its old buffer may still be read by
     * commands in flight, which OpenCL lets finish before freeing it (and
     * NVIDIA's release waits for: so not under the lock). */
    cl_mem grown = fcl__buffer(ctx, CL_MEM_READ_WRITE, rounded, what, &status);
    if (grown) {
      outgrown = free_slot->mem;
      free_slot->mem = grown;
      free_slot->bytes = rounded;
      fit = free_slot;
    }
  }
  if (fit) {
    fit->leased = 1;
    *out = fit->mem;
  }
  pthread_mutex_unlock(&ctx->lock);
  fcl__release_mem(&outgrown);
  if (*out || status != FCL_SUCCESS) return status;
  *out = fcl__buffer(ctx, CL_MEM_READ_WRITE, bytes, what, &status);
  return status;
}

void fcl__scratch_return(fcl_context *ctx, cl_mem *mem) {
  if (!*mem) return;
  pthread_mutex_lock(&ctx->lock);
  for (unsigned i = 0; i < FCL__SCRATCH_SLOTS; ++i)
    if (ctx->scratch[i].mem == *mem && ctx->scratch[i].leased) {
      ctx->scratch[i].leased = 0;
      *mem = NULL;
      break;
    }
  pthread_mutex_unlock(&ctx->lock);
  fcl__release_mem(mem);  /* a buffer of the caller's own */
}

/* Kept for the context's life, grown by a new buffer of zeros: the counts
 * are never cleared by a command, each block's last split sets its count
 * back (cl/blocks.cl), so a buffer that one launch has used is all zeros
 * for the next. The old one may still be counted in by commands in flight,
 * which OpenCL lets finish before freeing it. */
fcl_status fcl__arrivals_lease(fcl_context *ctx, size_t count, cl_mem *out) {
  *out = NULL;
  fcl_status status = FCL_SUCCESS;
  cl_mem outgrown = NULL;
  pthread_mutex_lock(&ctx->lock);
  if (ctx->arrival_counts < count) {
    const size_t grown = count < 256 ? 256 : count;
    cl_mem mem = fcl__zeroed_buffer(ctx, grown * sizeof(cl_int),
                                    "the split forward's arrival counts", &status);
    if (mem) {
      outgrown = ctx->arrivals;
      ctx->arrivals = mem;
      ctx->arrival_counts = grown;
    }
  }
  if (status == FCL_SUCCESS && fcl__retain_mem(ctx->arrivals) == CL_SUCCESS)
    *out = ctx->arrivals;
  else if (status == FCL_SUCCESS)
    status = fcl__fail(ctx, FCL_ERROR_OPENCL, "retaining the split forward's arrival counts");
  pthread_mutex_unlock(&ctx->lock);
  fcl__release_mem(&outgrown);
  return status;
}

void fcl__scratch_release(fcl_context *ctx) {
  fcl__release_mem(&ctx->arrivals);
  ctx->arrival_counts = 0;
  for (unsigned i = 0; i < FCL__SCRATCH_SLOTS; ++i) {
    fcl__release_mem(&ctx->scratch[i].mem);
    ctx->scratch[i].bytes = 0;
    ctx->scratch[i].leased = 0;
  }
}
