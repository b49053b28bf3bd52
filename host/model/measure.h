/*
 * measure.h — what a call measures: its timer (timing.c) and I/O counter.
 */
#ifndef FCL_MEASURE_H
#define FCL_MEASURE_H

#include "common.h"
#include "context.h"

typedef struct fcl__timer {
  cl_event start;
  double host_start_ms;
  int running;
} fcl__timer;

/** Marks the start of a timed call. Algorithms call it after building their
 *  kernels and before their first enqueue, so compiles are not timed.
 *  A NULL timer (the caller wants no run info) is a no-op. */
fcl_status fcl__timer_start(fcl_context *ctx, fcl__timer *timer);
/** Waits for the work enqueued since start and returns its duration; 0 when
 *  the timer never started (the call failed before enqueuing). */
fcl_status fcl__timer_stop(fcl_context *ctx, fcl__timer *timer, double *ms);
/** Host monotonic clock in milliseconds. */
double fcl__now_ms(void);
/** Launches `kernel` (1-D, `local` 0 for the driver's choice) once to warm
 *  up, then 5 times, and gives the fastest run's ms (peaks.c). */
fcl_status fcl__fastest_launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                               size_t global, size_t local, double *best_ms);

/* ---- I/O counting ------------------------------------------------------- */

/** A device counter the instrumented kernels add their traffic to: two
 *  ulongs, [0] bytes loaded, [1] bytes stored. */
typedef struct fcl__io_counter {
  cl_mem buffer;  /* NULL when counting is off */
} fcl__io_counter;

/** Creates and clears the counter when the context counts I/O (read once
 *  here: kernels of the call are built with FCL_COUNT_IO exactly when
 *  counter->buffer is set, see fcl__options_count_io). */
fcl_status fcl__io_counter_begin(fcl_context *ctx, fcl__io_counter *counter);
/** Reads the counter (blocking) and releases it. */
fcl_status fcl__io_counter_end(fcl_context *ctx, fcl__io_counter *counter,
                               uint64_t *loads, uint64_t *stores);

/** What a public call measures while its algorithm runs (measure.c). */
typedef struct fcl__measure {
  fcl__timer timer;
  fcl__io_counter counter;
  int counting;      /* the kernels of this call count their I/O */
  uint64_t counted;  /* bytes they counted, loads + stores */
  double ms;
} fcl__measure;
/** Starts the I/O counter when the context counts; *timer is the timer to
 *  start when the caller wants run info (`info` not NULL), else NULL. */
fcl_status fcl__measure_begin(fcl_context *ctx, fcl__measure *m, const fcl_run_info *info,
                              fcl__timer **timer, cl_mem *io_counter);
/** Reads the counter and stops the timer after the algorithm returned
 *  `status`; the timer is stopped even after a failure, to release its
 *  marker. After a failure it also lets what was enqueued before it finish,
 *  so that on return each output is final: untouched or completely
 *  written. */
fcl_status fcl__measure_end(fcl_context *ctx, fcl__measure *m, fcl_status status);

#endif
