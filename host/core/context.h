/*
 * context.h — the context's insides (context.c): its settings, kept scratch (scratch.c) and program cache, and their test hooks.
 */
#ifndef FCL_CONTEXT_H
#define FCL_CONTEXT_H

#include "common.h"

/** What the fcl_context_set_* functions change. Guarded by the context's
 *  lock; a call reads each one once (the forward takes a copy when it
 *  starts, fcl__io_counter_begin decides on counting, the naive chunking
 *  reads the scratch limit), so that a setter running on another thread
 *  never changes a call half-way. */
typedef struct fcl__settings {
  uint64_t scratch_limit; /* 0: default */
  int count_io;
  int table_unchecked;    /* fcl_context_set_block_table_checks(ctx, 0) */
  fcl_plan tiling_hint;   /* nonzero fields override the planner */
} fcl__settings;

/** A device buffer the context keeps between calls (scratch.c). */
typedef struct fcl__scratch_slot {
  cl_mem mem;
  size_t bytes;
  int leased;  /* taken by a call in progress */
} fcl__scratch_slot;
/** Buffers kept: the split forward leases two (partial O and LSE), so two
 *  threads' calls find theirs. */
#define FCL__SCRATCH_SLOTS 4

struct fcl_context {
  cl_context cl;
  cl_device_id device;
  cl_command_queue queue;
  int usable;             /* 0 when creation failed: only last_error works */
  int queue_profiling;    /* the queue has CL_QUEUE_PROFILING_ENABLE */
  int serial_launches;    /* wait for each kernel launch (PoCL, resources.c) */
  fcl_device_info info;
  /* The program cache (program.c), under its own lock, which is held for
   * lookups and insertions only, never across a compile: a thread that
   * needs a variant another thread is compiling waits on cache_built for
   * it, every other thread goes on. Taken before `lock` when both are
   * held, never after. */
  pthread_mutex_t cache_lock;
  pthread_cond_t cache_built;
  fcl__program_entry *programs;  /* a list; entries being built have no program */
  long program_builds;    /* programs compiled successfully (not taken from the cache) */
  /* Test hook (fcl__hold_builds): builds wait at the gate while it is
   * closed; guarded by `lock`. */
  int builds_gated, builds_at_gate;
  pthread_cond_t gate_changed;
  pthread_mutex_t lock;   /* recursive; guards everything below */
  fcl__settings settings;
  int used_clblast;       /* naive.c registered this context with CLBlast */
  /* Failure injection for tests (fcl__inject_failures). */
  unsigned inject_mask;
  long inject_countdown;
  long inject_ops;        /* operations of the armed kinds seen so far */
  /* Device scratch kept between calls (scratch.c). */
  fcl__scratch_slot scratch[FCL__SCRATCH_SLOTS];
  /* The split forward's arrival counts (scratch.c): `arrival_counts`
   * ints, all 0 between launches. */
  cl_mem arrivals;
  size_t arrival_counts;
  /* Tuned plans (tuning.c): the device's database, NULL until one is
   * loaded or tuned plans are switched; and the context's log of
   * warnings (NUL-terminated lines, at most FCL__LOG_MAX bytes). */
  struct fcl__tuning *tuning;
  char *log;
  /* The last error of each thread that failed on this context. */
  fcl__error_slot **errors;
  size_t n_errors, cap_errors;
  /* ---- the sm_90a stage (host/run/sm90a.c) ---- */
  int sm90a_forced;       /* test hook fcl__sm90a_force; guarded by `lock` */
};

/* ---- devices (devices.c) ---- */
/** Fills `out` with a device's name, vendor, versions and the limits
 *  flashcl plans with; ctx (may be NULL) takes the failure's message. */
fcl_status fcl__describe_device(fcl_context *ctx, cl_platform_id platform, cl_device_id dev,
                                unsigned pi, unsigned di, fcl_device_info *out);
/** A device's string property into out[size], "" where it has none. */
void fcl__query_string(cl_device_id dev, cl_device_info what, char *out, size_t size);
/** Calls `visit` for every device of every platform, in order, until it
 *  returns nonzero. */
typedef int (*fcl__device_visitor)(cl_platform_id, cl_device_id, unsigned pi, unsigned di,
                                   void *user);
cl_int fcl__each_device(fcl__device_visitor visit, void *user);
/** Takes (1) or gives back (0) the process's lock on listing devices and
 *  creating contexts: PoCL 3.1 initialises its devices lazily, and did not
 *  survive threads doing either at once. */
void fcl__devices_lock(int hold);

/** The most bytes of the context's log (log.c). */
#define FCL__LOG_MAX ((size_t)64 << 10)
/** Appends a line to the context's log. */
void fcl__log(fcl_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** A consistent copy of the context's settings, for one call. */
fcl__settings fcl__context_settings(fcl_context *ctx);

/** Leases a device buffer of at least `bytes` (read-write) from the
 *  context's kept scratch, or creates one; `what` names it in errors (as
 *  fcl__buffer). Its content is whatever the last lease left. */
fcl_status fcl__scratch_lease(fcl_context *ctx, size_t bytes, const char *what, cl_mem *out);
/** Gives a leased buffer back (after the call's last enqueue that uses
 *  it) and sets *mem to NULL; NULL is a no-op. */
void fcl__scratch_return(fcl_context *ctx, cl_mem *mem);
/** The split forward's arrival counts (cl/blocks.cl, MERGE_LAST_SPLIT):
 *  at least `count` ints, all 0, as every launch that uses them leaves
 *  them. A retained reference, given back with fcl__release_mem after the
 *  call's last enqueue. */
fcl_status fcl__arrivals_lease(fcl_context *ctx, size_t count, cl_mem *out);
/** Releases the kept buffers (the context's release). */
void fcl__scratch_release(fcl_context *ctx);

/** The cap on one call's scratch memory: the user's, or the default share
 *  of the device's global memory. */
uint64_t fcl__scratch_limit(const fcl_context *ctx);
/** The default cap for a device. */
uint64_t fcl__default_scratch_limit(const fcl_device_limits *limits);

/** Test hook: how many programs the context has compiled so far (a cache
 *  hit does not count). */
long fcl__program_builds(fcl_context *ctx);
/** Test hook: how many programs the context's cache holds now. */
long fcl__program_entries(fcl_context *ctx);

/** Test hook: while `hold` is 1, every program build of the context stops
 *  just before compiling and waits until it is 0 again; 0 lets them go. */
void fcl__hold_builds(fcl_context *ctx, int hold);
/** Test hook: waits until at least `n` builds are held, for at most
 *  `timeout_ms`. @return 1 if they are, 0 on timeout. */
int fcl__await_held_builds(fcl_context *ctx, int n, long timeout_ms);

#endif
