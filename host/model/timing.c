/*
 * timing.c — how long one call took on the device (profiling markers around
 * all its commands, so CLBlast's several kernels are covered too), and the
 * device counter that instrumented kernels tally their global I/O into.
 */
#include "context.h"
#include "errors.h"
#include "resources.h"
#include "measure.h"

#include <time.h>

double fcl__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

fcl_status fcl__timer_start(fcl_context *ctx, fcl__timer *timer) {
  if (!timer) return FCL_SUCCESS;
  timer->start = NULL;
  /* Drain earlier work so that neither clock counts it. */
  FCL_CL_RETURN_IF(ctx, clFinish(ctx->queue), "clFinish");
  timer->host_start_ms = fcl__now_ms();
  if (ctx->queue_profiling)
    FCL_FORWARD_IF(fcl__marker(ctx, &timer->start, "enqueueing the start marker"));
  timer->running = 1;
  return FCL_SUCCESS;
}

static int marker_end_ns(cl_event event, cl_ulong *ns) {
  return clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof *ns,
                                 ns, NULL) == CL_SUCCESS;
}

fcl_status fcl__timer_stop(fcl_context *ctx, fcl__timer *timer, double *ms) {
  *ms = 0.0;
  if (!timer->running) return FCL_SUCCESS;
  timer->running = 0;
  cl_event end = NULL;
  fcl_status status = FCL_SUCCESS;
  if (timer->start) status = fcl__marker(ctx, &end, "enqueueing the end marker");
  /* Wait even when the marker failed: the call's work is in flight. */
  cl_int err = clFinish(ctx->queue);
  double host_ms = fcl__now_ms() - timer->host_start_ms;
  cl_ulong t0 = 0, t1 = 0;
  int have_device = status == FCL_SUCCESS && err == CL_SUCCESS && timer->start &&
                    end && marker_end_ns(timer->start, &t0) &&
                    marker_end_ns(end, &t1) && t1 > t0;
  if (timer->start) clReleaseEvent(timer->start);
  if (end) clReleaseEvent(end);
  timer->start = NULL;
  FCL_FORWARD_IF(status);
  FCL_CL_RETURN_IF(ctx, err, "waiting for the call to finish");
  /* Some drivers give markers no timestamps: fall back to the host clock. */
  *ms = have_device ? (double)(t1 - t0) * 1e-6 : host_ms;
  return FCL_SUCCESS;
}

fcl_status fcl__io_counter_begin(fcl_context *ctx, fcl__io_counter *counter) {
  counter->buffer = NULL;
  if (!fcl__context_settings(ctx).count_io) return FCL_SUCCESS;
  fcl_status status;
  counter->buffer = fcl__buffer(ctx, CL_MEM_READ_WRITE, 2 * sizeof(cl_ulong),
                                "the I/O counter", &status);
  FCL_FORWARD_IF(status);
  const cl_ulong zero = 0;
  status = fcl__fill(ctx, counter->buffer, &zero, sizeof zero, 2 * sizeof zero,
                     "clearing the I/O counter");
  if (status != FCL_SUCCESS) fcl__release_mem(&counter->buffer);
  return status;
}

fcl_status fcl__io_counter_end(fcl_context *ctx, fcl__io_counter *counter,
                               uint64_t *loads, uint64_t *stores) {
  *loads = *stores = 0;
  if (!counter->buffer) return FCL_SUCCESS;
  cl_ulong values[2] = {0, 0};
  fcl_status status = fcl__read(ctx, counter->buffer, values, sizeof values,
                                "reading the I/O counter");
  fcl__release_mem(&counter->buffer);
  FCL_FORWARD_IF(status);
  *loads = values[0];
  *stores = values[1];
  return FCL_SUCCESS;
}
