/*
 * timing.c — how long one call took on the device (profiling markers around
 * all its commands, so CLBlast's several kernels are covered too), and the
 * device counter that instrumented kernels tally their global I/O into.
 */
#include "internal.h"

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
    FCL_CL_RETURN_IF(ctx,
                     clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &timer->start),
                     "clEnqueueMarkerWithWaitList");
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
  cl_int err = CL_SUCCESS;
  if (timer->start)
    err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &end);
  if (err == CL_SUCCESS) err = clFinish(ctx->queue);
  double host_ms = fcl__now_ms() - timer->host_start_ms;
  cl_ulong t0 = 0, t1 = 0;
  int have_device = err == CL_SUCCESS && timer->start && end &&
                    marker_end_ns(timer->start, &t0) && marker_end_ns(end, &t1) &&
                    t1 > t0;
  if (timer->start) clReleaseEvent(timer->start);
  if (end) clReleaseEvent(end);
  timer->start = NULL;
  FCL_CL_RETURN_IF(ctx, err, "waiting for the call to finish");
  /* Some drivers give markers no timestamps: fall back to the host clock. */
  *ms = have_device ? (double)(t1 - t0) * 1e-6 : host_ms;
  return FCL_SUCCESS;
}

fcl_status fcl__io_counter_begin(fcl_context *ctx, fcl__io_counter *counter) {
  counter->buffer = NULL;
  if (!ctx->count_io) return FCL_SUCCESS;
  fcl_status status;
  counter->buffer = fcl__buffer(ctx, CL_MEM_READ_WRITE, 2 * sizeof(cl_ulong),
                                "the I/O counter", &status);
  FCL_FORWARD_IF(status);
  cl_ulong zero = 0;
  cl_int err = clEnqueueFillBuffer(ctx->queue, counter->buffer, &zero, sizeof zero,
                                   0, 2 * sizeof zero, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    fcl__release_mem(&counter->buffer);
    return fcl__cl_fail(ctx, err, "clearing the I/O counter");
  }
  return FCL_SUCCESS;
}

fcl_status fcl__io_counter_end(fcl_context *ctx, fcl__io_counter *counter,
                               uint64_t *loads, uint64_t *stores) {
  *loads = *stores = 0;
  if (!counter->buffer) return FCL_SUCCESS;
  cl_ulong values[2] = {0, 0};
  cl_int err = clEnqueueReadBuffer(ctx->queue, counter->buffer, CL_TRUE, 0,
                                   sizeof values, values, 0, NULL, NULL);
  fcl__release_mem(&counter->buffer);
  FCL_CL_RETURN_IF(ctx, err, "reading the I/O counter");
  *loads = values[0];
  *stores = values[1];
  return FCL_SUCCESS;
}
