/*
 * gemm.c — the library's one door to CLBlast: strided-batched SGEMM and
 * HGEMM for the naive algorithm, serialised process-wide, with CLBlast's
 * statuses turned into the library's and its cache released with the last
 * context that used it.
 */
#include "errors.h"
#include "resources.h"
#include "calls.h"
#include "naive.h"

#include <clblast_c.h>
#include <stdio.h>

/* CLBlast 1.5.3's kernel cache is not thread-safe: one call at a time
 * across the whole process, whatever the context.
 *
 * That cache is keyed by OpenCL context and its programs retain the
 * context, so an OpenCL context that ran a GEMM would never be freed. The
 * contexts that used CLBlast are counted, and when the last of them is
 * released the cache is cleared; contexts that overlap in time share the
 * compiled GEMMs, and none is kept alive after the last one goes. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;
static long clblast_contexts;  /* live contexts that ran CLBlast; under clblast_lock */

/* Runs under clblast_lock. */
static void clblast_register(fcl_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  if (!ctx->used_clblast) {
    ctx->used_clblast = 1;
    clblast_contexts++;
  }
  pthread_mutex_unlock(&ctx->lock);
}

void fcl__clblast_release(fcl_context *ctx) {
  if (!ctx->used_clblast) return;
  pthread_mutex_lock(&clblast_lock);
  ctx->used_clblast = 0;
  if (--clblast_contexts == 0) CLBlastClearCache();
  pthread_mutex_unlock(&clblast_lock);
}

static fcl_status clblast_fail(fcl_context *ctx, CLBlastStatusCode code,
                               const char *what) {
  fcl_status status = FCL_ERROR_CLBLAST;
  if (code == CLBlastTempBufferAllocFailure || code == CLBlastOpenCLOutOfHostMemory)
    status = FCL_ERROR_OUT_OF_MEMORY;
  return fcl__fail(ctx, status, "CLBlast %s failed with status %d%s", what,
                   (int)code,
                   status == FCL_ERROR_OUT_OF_MEMORY ? " (out of memory)" : "");
}

fcl_status fcl__gemm_run(fcl_context *ctx, const fcl__gemm *g, const char *what) {
  const int half = g->type == FCL_DTYPE_F16;
  if (fcl__injected(ctx, FCL_INJECT_ENQUEUE))
    return fcl__fail(ctx, FCL_ERROR_CLBLAST, "CLBlast %s %s (injected failure)",
                     half ? "HGEMM" : "SGEMM", what);
  const CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  const CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode code;
  pthread_mutex_lock(&clblast_lock);
  clblast_register(ctx);
  if (half)
    code = CLBlastHgemmStridedBatched(
        CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, fcl__half_bits(g->alpha), g->a,
        g->a_off, g->a_ld, g->a_stride, g->b, g->b_off, g->b_ld, g->b_stride,
        fcl__half_bits(g->beta), g->c, g->c_off, g->c_ld, g->c_stride, g->batch, &ctx->queue,
        NULL);
  else
    code = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, g->alpha, g->a, g->a_off, g->a_ld,
        g->a_stride, g->b, g->b_off, g->b_ld, g->b_stride, g->beta, g->c, g->c_off, g->c_ld,
        g->c_stride, g->batch, &ctx->queue, NULL);
  /* As for our own kernels (context.c: serial_launches on PoCL). */
  if (code == CLBlastSuccess && ctx->serial_launches && clFinish(ctx->queue) != CL_SUCCESS)
    code = CLBlastOpenCLOutOfResources;
  pthread_mutex_unlock(&clblast_lock);
  if (code == CLBlastNoHalfPrecision)
    return fcl__fail(ctx, FCL_ERROR_UNSUPPORTED,
                     "CLBlast HGEMM %s: the device has no half precision", what);
  if (code != CLBlastSuccess) {
    char name[96];
    snprintf(name, sizeof name, "%s %s", half ? "HGEMM" : "SGEMM", what);
    return clblast_fail(ctx, code, name);
  }
  return FCL_SUCCESS;
}
