/*
 * measure.c — what a public call measures while its algorithm runs: the
 * timer (when the caller wants run info) and the I/O counter (when the
 * context counts), begun before the first enqueue and ended after the
 * last, on failure too.
 */
#include "resources.h"
#include "measure.h"

#include <string.h>

fcl_status fcl__measure_begin(fcl_context *ctx, fcl__measure *m, const fcl_run_info *info,
                              fcl__timer **timer, cl_mem *io_counter) {
  memset(m, 0, sizeof *m);
  *timer = info ? &m->timer : NULL;
  fcl_status status = fcl__io_counter_begin(ctx, &m->counter);
  *io_counter = m->counter.buffer;
  m->counting = m->counter.buffer != NULL;
  return status;
}

fcl_status fcl__measure_end(fcl_context *ctx, fcl__measure *m, fcl_status status) {
  uint64_t loaded = 0, stored = 0;
  if (status == FCL_SUCCESS) status = fcl__io_counter_end(ctx, &m->counter, &loaded, &stored);
  else fcl__release_mem(&m->counter.buffer);
  fcl_status timed = fcl__timer_stop(ctx, &m->timer, &m->ms);
  m->counted = loaded + stored;
  if (status == FCL_SUCCESS) status = timed;
  if (status != FCL_SUCCESS) clFinish(ctx->queue);
  return status;
}
