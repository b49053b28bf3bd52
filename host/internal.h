/*
 * internal.h — what the host runtime's files share and the public header
 * does not show: the context's insides, error helpers, the program cache,
 * the allocation and launch wrappers (where failures can be injected), and
 * the per-algorithm entry points.
 */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "flashcl.h"
#include "params.h"  /* cl/params.h: the kernels' parameter block and mask */
#include "traits.h"  /* cl/traits.h: the kernel families' derived sizes */

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/** Byte counts of the I/O model, in 128 bits: every term is a product of
 *  a validated tensor's bytes (below 2^64) and a sequence length (below
 *  2^31) or a few more small factors, so none overflows; what does not fit
 *  the public 64-bit fields is reported as an overflow, never wrapped. */
typedef unsigned __int128 fcl__bytes;

/* ---- context ------------------------------------------------------------ */

typedef struct fcl__program_entry fcl__program_entry;
typedef struct fcl__shape fcl__shape;  /* a validated problem: see below */
typedef struct fcl__error_slot fcl__error_slot;

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
};

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

/* ---- files (file.c) ---------------------------------------------------- */

/** A whole file of at most `max` bytes, NUL-terminated (free() it). NULL
 *  with `why` and errno set (ENOENT: there is none) where it cannot be
 *  opened or read, or is not a regular file (a FIFO, a device, a socket, a
 *  folder: never waited on) or is larger: every file the library reads. */
char *fcl__read_file(const char *path, size_t max, char *why, size_t why_len);
/** `path` opened to append, created where absent; NULL with `why` where it
 *  cannot be, or is not a regular file (never waits on a FIFO). */
FILE *fcl__append_file(const char *path, char *why, size_t why_len);

/* ---- tuned plans (tuning.c) ---------------------------------------------- */

#define FCL__TUNING_FORMAT "flashcl-tuning"
#define FCL__TUNING_PASSES 3   /* fwd, bwd, decode */
#define FCL__TUNING_DTYPES 3   /* fcl_dtype */
#define FCL__TUNING_DIMS 6     /* head_dim classes 32, 64, 96, 128, 192, 256 */
#define FCL__TUNING_BUCKETS (FCL__TUNING_PASSES * FCL__TUNING_DTYPES * FCL__TUNING_DIMS * 2 * 2)
/** A forward of at most this many query rows a sequence is a decode. */
#define FCL__TUNING_DECODE_ROWS 16
#define FCL__LOG_MAX ((size_t)64 << 10)
/** The largest database file read: every bucket's entry, many times over. */
#define FCL__TUNING_FILE_MAX ((size_t)1 << 20)

/** Rows of work that fill a device: a forward's query rows (batch x heads
 *  x seqlen_q) under this many per compute unit are "small" (a grid of a
 *  few work-groups a unit, where the split and the work-group size matter
 *  most); a decode is small under one (sequence, KV head) per unit. */
#define FCL__SMALL_ROWS_PER_CU 128u

/** A problem bucket of the tuning database: indices into the bucket
 *  names' parts (fcl__bucket_name: "fwd.f16.d128.causal.large"). */
typedef struct fcl__bucket {
  unsigned pass;    /* 0 fwd, 1 bwd, 2 decode (a forward of few rows) */
  unsigned dtype;   /* fcl_dtype */
  unsigned dim;     /* head_dim class: the first of 32..256 at least head_dim */
  unsigned causal;
  unsigned size;    /* 0 small, 1 large: rows (decode: sequences x KV heads)
                       under / over 128 (1) per compute unit */
} fcl__bucket;

/** A device's tuned plans, by bucket index. */
typedef struct fcl__tuning {
  int enabled;      /* fcl_context_use_tuned_plans */
  unsigned count;   /* buckets that have a plan */
  fcl_plan plans[FCL__TUNING_BUCKETS];
  unsigned char have[FCL__TUNING_BUCKETS];
  char source[1024];  /* the file, or which shipped database; "" none */
} fcl__tuning;

/** One winner of flashcl-tune, as fcl__tuning_write writes it. */
typedef struct fcl__tuned_entry {
  fcl__bucket bucket;
  fcl_plan hint;          /* the nonzero fields the planner takes */
  double ms, rules_ms;    /* summed over the bucket's shapes */
  char shapes[160];       /* what was timed, for the reader */
} fcl__tuned_entry;

size_t fcl__bucket_index(const fcl__bucket *b);
fcl__bucket fcl__bucket_at(size_t index);
unsigned fcl__bucket_head_dim(const fcl__bucket *b);
void fcl__bucket_name(const fcl__bucket *b, char *out, size_t len);
/** @return 1 and *out for a well-formed bucket name, else 0. */
int fcl__bucket_parse(const char *name, fcl__bucket *out);
/** The bucket of a call. @return 0 where none is (head_dim over 256). */
int fcl__bucket_of(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                   fcl_pass pass, fcl__bucket *out);
/** The shapes that stand for a bucket on a device (the tuner times them;
 *  a loaded plan must plan them): up to two, each in the bucket.
 *  @return how many (0: the device has no such problem, a small bucket on
 *  a device of few compute units). */
size_t fcl__bucket_shapes(const fcl_device_limits *limits, const fcl__bucket *b,
                          fcl_attention_desc out[2]);
/** Parses a database for `dev` into *db (enabled and source untouched).
 *  @return 1 if it is dev's (why: "" or a note on its driver), 0 if not,
 *  or not a database (why says which). A driver other than dev's is 0
 *  when require_driver, else a note. */
int fcl__tuning_parse(const char *text, const fcl_device_info *dev, int require_driver,
                      fcl__tuning *db, char *why, size_t why_len);
/** A device's database file name: platform and device, lower-case. */
void fcl__tuning_file_name(const fcl_device_info *dev, char *out, size_t len);
/** The folder a context reads (and flashcl-tune writes) by default:
 *  $FLASHCL_TUNING_DIR, $XDG_CACHE_HOME/flashcl or ~/.cache/flashcl.
 *  @return 0 where none can be named. */
int fcl__tuning_default_dir(char *out, size_t len);
/** Writes a database. @return 0, or -1 on a write error. */
int fcl__tuning_write(FILE *f, const fcl_device_info *dev, const char *when,
                      const fcl__tuned_entry *entries, size_t n);
/** (Re)loads the context's database from dir/<file name> (NULL: the
 *  default folder), else from the shipped ones. Never fails: what is
 *  skipped is logged. */
void fcl__tuning_load(fcl_context *ctx, const char *dir);
void fcl__tuning_release(fcl_context *ctx);
/** Appends a line to the context's log. */
void fcl__log(fcl_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/** The tuned plan of desc's bucket, where the context's database has one
 *  and tuned plans are on. @return 1 with *out set, else 0. */
int fcl__tuned_plan(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                    fcl_plan *out);
/** A call's plan (plan.c): the context's tiling hint where one is set;
 *  else the tuned plan of its bucket where it plans the problem
 *  (plan->tuned = 1); else the rules. */
fcl_status fcl__plan_call(fcl_context *ctx, const fcl_plan *hint, const fcl__shape *sh,
                          fcl_pass pass, fcl_plan *plan, char *why, size_t why_len);

/* ---- errors ------------------------------------------------------------- */

/** Records a formatted detail as the calling thread's last error on the
 *  context and returns `status`. ctx may be NULL (the message is then
 *  dropped). */
fcl_status fcl__fail(fcl_context *ctx, fcl_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/** Forgets the calling thread's last error on the context. */
void fcl__clear_error(fcl_context *ctx);

/** Frees every thread's error text; for fcl_context_release. */
void fcl__errors_release(fcl_context *ctx);

/** Formats a reason into a caller's buffer (the context-free functions'
 *  way of explaining a failure); NULL or zero-length buffers are skipped. */
void fcl__say(char *why, size_t why_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/** Records "what failed: CL_NAME (code)" and maps the code to a status:
 *  allocation failures become FCL_ERROR_OUT_OF_MEMORY, the rest
 *  FCL_ERROR_OPENCL. */
fcl_status fcl__cl_fail(fcl_context *ctx, cl_int err, const char *what);

/** @return the name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES". */
const char *fcl__cl_error_name(cl_int err);

#define FCL_RETURN_IF(ctx, cond, status, ...)        \
  do {                                               \
    if (cond) return fcl__fail((ctx), (status), __VA_ARGS__); \
  } while (0)

/** In the context-free checks, which explain a failure in why[why_len]:
 *  formats the reason and returns `status` when `cond` holds. */
#define FCL_WHY_IF(cond, status, ...)           \
  do {                                          \
    if (cond) {                                 \
      fcl__say(why, why_len, __VA_ARGS__);      \
      return (status);                          \
    }                                           \
  } while (0)
/** Each of n named sizes at least 1 and at most INT_MAX (kernels index
 *  with 32-bit ints): FCL_ERROR_INVALID_SHAPE naming the first that is
 *  not. */
fcl_status fcl__check_sizes(const char *const names[], const size_t values[], size_t n,
                            char *why, size_t why_len);
#define FCL_FORWARD_IF(expr)                         \
  do {                                               \
    fcl_status fcl_s_ = (expr);                      \
    if (fcl_s_ != FCL_SUCCESS) return fcl_s_;        \
  } while (0)

#define FCL_CL_RETURN_IF(ctx, err, what)             \
  do {                                               \
    cl_int fcl_e_ = (err);                           \
    if (fcl_e_ != CL_SUCCESS) return fcl__cl_fail((ctx), fcl_e_, (what)); \
  } while (0)

/* ---- resources, through wrappers that tests can make fail --------------- */

/* What an injected failure simulates, and the status each becomes:
 *   HOST_ALLOC    malloc returning NULL, or an OpenCL object (context, queue,
 *                 program, kernel) failing with CL_OUT_OF_HOST_MEMORY
 *                                               -> FCL_ERROR_OUT_OF_MEMORY
 *   DEVICE_ALLOC  clCreateBuffer failing with
 *                 CL_MEM_OBJECT_ALLOCATION_FAILURE -> FCL_ERROR_OUT_OF_MEMORY
 *   ENQUEUE       an enqueue (kernel, copy, fill, read, marker) failing with
 *                 CL_OUT_OF_RESOURCES           -> FCL_ERROR_OPENCL
 *                 a CLBlast call failing with
 *                 CLBlastOpenCLOutOfResources   -> FCL_ERROR_CLBLAST */
enum {
  FCL_INJECT_HOST_ALLOC = 1u << 0,
  FCL_INJECT_DEVICE_ALLOC = 1u << 1,
  FCL_INJECT_ENQUEUE = 1u << 2,
};

/** Test hook: the `n`-th (1-based) subsequent operation of a kind in `mask`
 *  fails as if the resource were exhausted; n = 0 disarms. With a context,
 *  the operations counted are those on that context, from any thread; with
 *  ctx NULL, those of the calling thread (on any context, or none: device
 *  listing, context creation). A context's own setting takes precedence.
 *  @return how many operations of those kinds ran since it was armed. */
long fcl__inject_failures(fcl_context *ctx, unsigned mask, long n);

/** 1 when an injected failure of `kind` is due now (ctx may be NULL). */
int fcl__injected(fcl_context *ctx, unsigned kind);

void *fcl__malloc(fcl_context *ctx, size_t bytes);
void *fcl__calloc(fcl_context *ctx, size_t count, size_t size);
void *fcl__realloc(fcl_context *ctx, void *p, size_t bytes);
void fcl__free(void *p);

/** Creates a device buffer; on failure records the detail and returns NULL
 *  with *status set (FCL_ERROR_OUT_OF_MEMORY or FCL_ERROR_OPENCL). */
cl_mem fcl__buffer(fcl_context *ctx, cl_mem_flags flags, size_t bytes,
                   const char *what, fcl_status *status);
void fcl__release_mem(cl_mem *mem);
/** clRetainMemObject on one of those, counted as a buffer until released. */
cl_int fcl__retain_mem(cl_mem mem);
/** Test hook: device buffers of the library's own (fcl__buffer and its
 *  kin) not yet released, over every context of the process. */
long fcl__live_buffers(void);
/** A read-only device buffer holding a copy of `bytes` of host memory;
 *  as fcl__buffer on failure. */
cl_mem fcl__upload(fcl_context *ctx, const void *host, size_t bytes, const char *what,
                   fcl_status *status);
/** A read-write device buffer of `bytes` zeros; as fcl__buffer on failure. */
cl_mem fcl__zeroed_buffer(fcl_context *ctx, size_t bytes, const char *what,
                          fcl_status *status);

/** Enqueues a 1–3 dimensional NDRange; `name` labels errors. */
fcl_status fcl__launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                       cl_uint dims, const size_t *global, const size_t *local);
/** Enqueues `items` work-items in work-groups of `wg` (halved to the
 *  device's limit), the last group padded: for kernels that skip items
 *  past the end. */
fcl_status fcl__launch_items(fcl_context *ctx, cl_kernel kernel, const char *name, size_t items,
                             size_t wg);

/** Enqueued copies, fills, reads and markers; `what` labels errors. */
fcl_status fcl__copy(fcl_context *ctx, cl_mem from, cl_mem to, size_t bytes,
                     const char *what);
fcl_status fcl__fill(fcl_context *ctx, cl_mem mem, const void *pattern,
                     size_t pattern_size, size_t bytes, const char *what);
fcl_status fcl__read(fcl_context *ctx, cl_mem mem, void *out, size_t bytes,
                     const char *what);
/** `rows` rows of `row_bytes` from byte `col` of each `pitch`-byte row of
 *  mem into out, packed; blocking. */
fcl_status fcl__read_rect(fcl_context *ctx, cl_mem mem, size_t pitch, size_t col,
                          size_t row_bytes, size_t rows, void *out, const char *what);
fcl_status fcl__marker(fcl_context *ctx, cl_event *event, const char *what);

/** OpenCL objects the library creates for itself. */
fcl_status fcl__create_program(fcl_context *ctx, cl_uint count,
                               const char **texts, cl_program *program);
/** clBuildProgram; returns the OpenCL code, injected failures included. */
cl_int fcl__build_program(fcl_context *ctx, cl_program program,
                          const char *options);
fcl_status fcl__create_kernel(fcl_context *ctx, cl_program program,
                              const char *name, cl_kernel *kernel);

/** Sets kernel arguments from a list of (size, pointer) pairs. */
typedef struct fcl__arg {
  size_t size;
  const void *value;
} fcl__arg;
#define FCL_ARG(x) ((fcl__arg){sizeof(x), &(x)})
#define FCL_ARG_LOCAL(bytes) ((fcl__arg){(bytes), NULL})
/** Sets `count` arguments, after checking that the built kernel takes
 *  exactly that many (CL_KERNEL_NUM_ARGS): FCL_ERROR_BUILD_FAILED if not. */
fcl_status fcl__set_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                         const fcl__arg *args, cl_uint count);

/* ---- attention kernels' arguments (args.c) --------------------------------- */

/** The buffers of one attention kernel launch, in cl/params.h's order;
 *  NULL where the kernel takes none. */
#define FCL__BUFFER_FIELD(name, type) cl_mem name;
typedef struct fcl__attention_buffers {
  FCL_ATTENTION_BUFFERS(FCL__BUFFER_FIELD)
} fcl__attention_buffers;
#undef FCL__BUFFER_FIELD

/** A tensor layout as the kernels' parameter blocks hold it. */
fcl_view fcl__view_of(const fcl_tensor_layout *layout);
/** The parameter block of a validated problem (work_items is the
 *  launch's to set). */
fcl_params fcl__params_of(const fcl__shape *shape);

/** A ragged batch's tables on the device (worklist.c); all NULL without
 *  one. */
typedef struct fcl__ragged {
  cl_mem seqs;            /* [batch][4]: q_start, nq, k_start, nk */
  cl_mem work_q, work_k;  /* (batch, block) items: query blocks, key blocks */
  size_t items_q, items_k;
} fcl__ragged;

/** Whether the kernels transform the logits (softcap or ALiBi: -DSOFTCAP,
 *  -DALIBI), and so keep scores in log2 units (cl/params.h). */
int fcl__scores_transformed(const fcl__shape *shape);

/** Builds and uploads the sequence table and work lists of a problem
 *  with one (a ragged batch, a cache's lengths; else nothing): query
 *  blocks of block_q rows (`packed` query heads' slots a token,
 *  fcl_plan.packed_heads), and with_keys key blocks of block_k. */
fcl_status fcl__ragged_upload(fcl_context *ctx, const fcl__shape *shape, unsigned block_q,
                              unsigned packed, unsigned block_k, int with_keys,
                              fcl__ragged *out);
void fcl__ragged_release(fcl__ragged *ragged);

/** Sets an attention kernel's arguments: the buffers, the parameter block
 *  and, when counting, the I/O counter. */
fcl_status fcl__set_attention_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                                   const fcl__attention_buffers *bufs, const fcl_params *params,
                                   cl_mem io_counter);

/** Bytes of local memory a driver may report beyond a kernel's own arrays.
 *  NVIDIA's OpenCL on the H200 reports 16 more than the arrays for float4
 *  tiles and 8 more for 8-byte ones (a small reserve of its own, padded to
 *  the first array's alignment); PoCL reports the arrays exactly. */
#define FCL__LOCAL_DRIVER_BYTES 16

/** Whether a kernel reporting `built` bytes of local memory matches a plan
 *  of `planned`: at least as many, at most FCL__LOCAL_DRIVER_BYTES more. */
int fcl__local_bytes_agree(size_t planned, cl_ulong built);

/** Checks that a built kernel declares the local memory its plan says
 *  (CL_KERNEL_LOCAL_MEM_SIZE against plan->local_bytes, up to
 *  FCL__LOCAL_DRIVER_BYTES more): the planner's model of the kernel's
 *  arrays must be the kernel's. */
fcl_status fcl__check_local_bytes(fcl_context *ctx, cl_kernel kernel, const char *name,
                                  size_t planned);

/* ---- programs ----------------------------------------------------------- */

/** The embedded kernel sources; each is compiled after common.cl and blocks.cl. */
typedef enum fcl__source {
  FCL_SRC_FLASH_FWD = 0,
  FCL_SRC_SOFTMAX,
  FCL_SRC_PEAKS,
  FCL_SRC_FLASH_BWD,
  FCL_SRC_CONVERT,
  FCL_SRC_FLASH_FWD_MMA,
  FCL_SRC_FLASH_BWD_MMA,
  FCL_SRC_FLASH_BWD_PRE,
  FCL_SRC_MMA_PROBE,      /* tests/test_mma.c */
  FCL_SRC_PARAMS_PROBE,   /* tests/test_args.c */
  FCL_SRC_MERGE,
  FCL_SRC_CACHE,
  FCL_SRC_FLASH_FWD_DECODE,
  FCL_SRC_FLASH_FWD_DECODE_MMA,
  FCL_SRC_FLASH_FWD_CPU,
  FCL_SRC_FLASH_BWD_CPU,
  FCL_SRC_COUNT
} fcl__source;

/** A growing "-D NAME=value" string for one build. */
typedef struct fcl__options {
  char text[1024];
  size_t len;
  int overflow;
} fcl__options;

void fcl__options_init(fcl__options *opts);
void fcl__options_define(fcl__options *opts, const char *name, long value);
void fcl__options_flag(fcl__options *opts, const char *flag);
/** Defines FCL_COUNT_IO when the call counts I/O (`io_counter` not NULL).
 *  Every kernel that takes FCL_IO_PARAM needs it in its options: the call,
 *  not the context, decides, so that a concurrent
 *  fcl_context_set_count_io() cannot build a kernel that disagrees with the
 *  call's arguments. */
void fcl__options_count_io(fcl__options *opts, cl_mem io_counter);

/** The options a program is built with on a device with `limits`: `opts`,
 *  then those every build on the device gets; `verbose` adds the vendor
 *  compiler's resource report (FLASHCL_BUILD_LOG). One function for the
 *  builds and for fcl_flash_programs, so that the two cannot differ.
 *  @return FCL_ERROR_INVALID_ARGUMENT when they do not fit. */
fcl_status fcl__program_options(const fcl_device_limits *limits, const fcl__options *opts,
                                int verbose, fcl__options *all);

/** A source's file name in cl/, and its prelude's (NULL if none). */
const char *fcl__source_file(fcl__source source);
/** The most texts a program is built from: the shared ones, a prelude, the source. */
#define FCL__PROGRAM_TEXTS_MAX 6
/** The texts the program of kernel file `file` (e.g. "flash_fwd.cl") is
 *  built from, in order, as the library builds it: what scripts that
 *  compile the kernels with other compilers concatenate. @return how many,
 *  0 for a file that is no program's. */
size_t fcl__program_texts_of(const char *file, const char *texts[FCL__PROGRAM_TEXTS_MAX]);
const char *fcl__source_prelude_file(fcl__source source);
/** A fingerprint of every kernel source built into the library (FNV-1a,
 *  64 bits, as 16 hex digits): tuned plans are measurements of these
 *  kernels, and a database of other kernels is stale (tuning.c). */
void fcl__kernels_fingerprint(char out[17]);

/** Builds (or takes from the context's cache) the program for `source`
 *  with `opts` plus the context-wide options (I/O counting, vendor
 *  extensions), and leases its kernel `name`: kept with the program
 *  between calls, the caller's alone until fcl__kernel_return (so threads
 *  never race on its arguments). */
fcl_status fcl__kernel(fcl_context *ctx, fcl__source source,
                       const fcl__options *opts, const char *name,
                       cl_kernel *kernel);
/** Gives a kernel of fcl__kernel back, after its last enqueue in the
 *  call, and sets *kernel to NULL; NULL is a no-op. */
void fcl__kernel_return(fcl_context *ctx, cl_kernel *kernel);

/** Releases every cached program of the context. */
void fcl__programs_release(fcl_context *ctx);

/* ---- timing ------------------------------------------------------------- */

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
/* ---- validation and shapes ---------------------------------------------- */

/** The eight tensors a descriptor lays out, in fcl_attention_desc's order. */
enum { FCL__Q, FCL__K, FCL__V, FCL__O, FCL__DOUT, FCL__DQ, FCL__DK, FCL__DV, FCL__TENSORS };

/** A validated descriptor and what follows from it, computed once
 *  without overflow by fcl__check_desc: every part of the library works
 *  from `desc` here, the caller's descriptor whole (the defaults past its
 *  struct_size), never from the caller's pointer. */
struct fcl__shape {
  fcl_attention_desc desc;
  size_t tokens_q, tokens_k;  /* batch * seqlen, or the ragged totals */
  size_t q_elems;   /* tokens_q * heads_q * head_dim: Q, O, dO, dQ */
  size_t kv_elems;  /* tokens_k * heads_kv * head_dim: K, V, dK, dV */
  size_t lse_elems; /* tokens_q * heads_q */
  size_t elem_size; /* bytes of the storage type */
  size_t group;     /* heads_q / heads_kv */
  int window_left, window_right;  /* causal folded in: -1 unbounded */
  int ragged;       /* cu_seqlens given */
  int tabled;       /* per-sequence lengths (cu_seqlens or seqlens_k): the kernels read the
                       sequence table and walk a work list */
  int vec4;         /* head_dim and every view's offset and strides multiples of 4 */
  int paged;        /* block_table given: K and V are pools of pages */
  size_t table_bytes;  /* the block table's, paged */
  fcl_tensor_layout views[FCL__TENSORS];  /* strides resolved (packed by default); paged K
                                             and V: batch_stride is between pages */
  fcl_buffer_sizes sizes;                 /* the bytes each buffer must hold */
};

/* ---- sequences and the mask's pair counts (mask.c) ------------------------ */

/** Called for each distinct sequence shape: `count` batch entries of nq
 *  queries against nk keys (all of them at once without ragged batches). */
typedef void (*fcl__sequence_fn)(void *state, size_t nq, size_t nk, size_t count);
void fcl__each_sequence(const fcl__shape *shape, fcl__sequence_fn fn, void *state);

/** Pairs (query, key) a sequence of nq queries and nk keys shows through
 *  the window (params.h, fcl_row_keys), in closed form. */
fcl__bytes fcl__visible_pairs(size_t nq, size_t nk, int window_left, int window_right);

/* ---- tensor views (layout.c) ---------------------------------------------- */

/** The extents a view's strides are checked against. */
typedef struct fcl__view_extent {
  size_t batch, tokens, heads, head_dim, elem_size;  /* tokens: per entry, or in all (ragged) */
  int ragged;
} fcl__view_extent;

/** A layout with the packed default's strides filled in where all three
 *  are 0. */
fcl_tensor_layout fcl__resolve_layout(const fcl_tensor_layout *given, size_t batch,
                                      size_t seqlen, size_t heads, size_t head_dim,
                                      int ragged);
/** Whether a view's offset and strides are multiples of 4 elements (with
 *  head_dim one too, the kernels' aligned 4-element loads). */
int fcl__layout_vec4(const fcl_tensor_layout *layout);
/** Checks that no two elements of a view share an address (and that a
 *  ragged view has no batch stride), and gives the bytes from the
 *  buffer's start to its last element. */
fcl_status fcl__check_layout(const fcl_tensor_layout *layout, const fcl__view_extent *extent,
                             const char *name, size_t *span, char *why, size_t why_len);

/** A view, or a plain range (LSE, slopes), placed in the memory it lives
 *  in: [begin, end) in bytes, and for a view its byte strides. */
typedef struct fcl__placed_view {
  uint64_t begin, end;
  int strided;
  size_t token_bytes, batch_bytes, head_bytes, row_bytes, heads;
} fcl__placed_view;

/** Whether two views in one memory may share a byte: their ranges meet,
 *  and they are not interleaved on a common token stride with their heads
 *  apart (packed QKV). Conservative: 1 when it cannot tell. */
int fcl__views_share_bytes(const fcl__placed_view *a, const fcl__placed_view *b);

/** A caller's growing struct (struct_size first) made whole in `out`,
 *  which holds the defaults: the `given_size` bytes it has (up to the
 *  `known` this library has) copied over them. Refuses a size below
 *  `first_version` and nonzero bytes in fields this library does not know;
 *  `what` names the argument and `init` its init function in messages. */
fcl_status fcl__grown_struct(const void *given, size_t given_size, size_t first_version,
                             void *out, size_t known, const char *what, const char *init,
                             char *why, size_t why_len);
/** Validates a descriptor's fields and computes its shape (when `shape` is
 *  not NULL). Pure apart from the error message, which goes to the context
 *  (ctx may be NULL). */
fcl_status fcl__check_desc(fcl_context *ctx, const fcl_attention_desc *desc,
                           fcl__shape *shape);
/** The same, writing the message to why[why_len] (may be NULL / 0). */
fcl_status fcl__check_desc_why(const fcl_attention_desc *desc, fcl__shape *shape,
                               char *why, size_t why_len);

/** Keys of one split of a forward plan (fcl_plan.splits): whole tiles,
 *  as many as ceil(seqlen_k / splits) needs. */
unsigned fcl__split_keys(const fcl_plan *plan, size_t seqlen_k);
/** Validates a tiling override as fcl_context_set_flash_tiling documents.
 *  Pure apart from the message (ctx may be NULL). */
fcl_status fcl__check_tiling_hint(fcl_context *ctx, const fcl_plan *hint);
fcl_status fcl__check_tiling_hint_why(const fcl_plan *hint, char *why, size_t why_len);

/** Checks that `mem` is non-NULL (unless optional), belongs to the context's
 *  OpenCL context and holds at least `bytes`. */
fcl_status fcl__check_buffer(fcl_context *ctx, cl_mem mem, size_t bytes,
                             const char *name, int optional);

/** One buffer argument of a call: the buffer, its name for messages, the
 *  bytes it must hold, whether NULL is allowed, and the bytes of it the
 *  call touches (a tensor's view, or a plain range). */
typedef struct fcl__call_buffer {
  cl_mem mem;
  const char *name;
  size_t bytes;
  int optional;
  fcl__placed_view view;
} fcl__call_buffer;

/** Checks the buffer arguments of one call, args[0..n): the first n_inputs
 *  are read, the rest written (NULL entries are absent optional buffers).
 *  Each is a buffer (fcl__check_buffer); an output must be writable by
 *  kernels (not CL_MEM_READ_ONLY) and share no byte with any other
 *  argument: through one root buffer or through host memory lent with
 *  CL_MEM_USE_HOST_PTR, with views interleaved on one token stride (packed
 *  QKV) told apart; an input must be readable (not CL_MEM_WRITE_ONLY). */
fcl_status fcl__check_call_buffers(fcl_context *ctx, const fcl__call_buffer *args,
                                   size_t n_inputs, size_t n);

/** The placed view of tensor `t` of a checked shape, relative to its
 *  buffer's start; and of a plain range of `bytes`. */
fcl__placed_view fcl__tensor_view(const fcl__shape *shape, int t);
/** The placed view of a layout of `heads` heads that spans `span` bytes. */
fcl__placed_view fcl__layout_view(const fcl_tensor_layout *layout, size_t span, size_t elem_size,
                                  size_t batch, size_t heads, size_t head_dim, int ragged);
fcl__placed_view fcl__range_view(size_t bytes);

/** Validates the context handle (non-NULL, created successfully). */
fcl_status fcl__check_context(fcl_context *ctx);

/* ---- algorithms --------------------------------------------------------- */

/** One forward call, validated; what each algorithm needs. */
typedef struct fcl__forward_call {
  fcl_context *ctx;
  fcl__settings settings; /* read once at the start of the call */
  const fcl_attention_desc *desc;
  fcl__shape shape;
  cl_mem q, k, v, o, lse;
  cl_mem io_counter; /* NULL unless counting */
  fcl__timer *timer; /* NULL unless the caller wants run info */
  fcl_plan plan;     /* flash: filled by the algorithm, unless planned */
  int planned;       /* flash: the caller has put the call's plan in plan */
  unsigned chunks;   /* naive: filled by the algorithm */
} fcl__forward_call;

fcl_status fcl__flash_forward(fcl__forward_call *call);

/** One append to a KV cache (cache.c), validated: the cache's shape (its
 *  lengths before), the kernel's parameters and the buffers. */
typedef struct fcl__append_call {
  fcl__shape shape;
  fcl_append_params params;
  cl_mem k_new, v_new, k_cache, v_cache;
} fcl__append_call;
/** fcl_kv_cache_append's checks, all of them, with nothing enqueued. */
fcl_status fcl__append_prepare(fcl_context *ctx, const fcl_attention_desc *desc,
                               size_t new_tokens, const fcl_tensor_layout *k_new_layout,
                               const fcl_tensor_layout *v_new_layout, cl_mem k_new,
                               cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                               fcl__append_call *call);
/** ... and its launch, timed and counted as `info` asks. */
fcl_status fcl__append_run(fcl_context *ctx, const fcl__append_call *call, fcl_run_info *info);

/** One backward call, validated; what each algorithm needs. */
typedef struct fcl__backward_call {
  fcl_context *ctx;
  fcl__settings settings; /* read once at the start of the call */
  const fcl_attention_desc *desc;
  fcl__shape shape;
  cl_mem q, k, v, o, lse, dout;  /* inputs */
  cl_mem dq, dk, dv;             /* outputs */
  cl_mem io_counter; /* NULL unless counting */
  fcl__timer *timer; /* NULL unless the caller wants run info */
  fcl_plan plan;     /* flash: filled by the algorithm */
  unsigned chunks;   /* naive: filled by the algorithm */
} fcl__backward_call;

fcl_status fcl__flash_backward(fcl__backward_call *call);
fcl_status fcl__naive_backward(fcl__backward_call *call);

/** The planner on a validated problem: what fcl__plan_flash does after
 *  validating its descriptor. */
fcl_status fcl__plan_shape(const fcl_device_limits *limits, const fcl__shape *sh, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why, size_t why_len);
/** The planner, with optional overrides: the nonzero fields of `hint`
 *  replace its choices (fcl_context_set_flash_tiling). */
fcl_status fcl__plan_flash(const fcl_device_limits *limits,
                           const fcl_attention_desc *desc, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why,
                           size_t why_len);
/** The largest power of two up to x (1 for x < 2), at most 2^30: the
 *  planners' work-group sizes. */
static inline unsigned fcl__floor_pow2(size_t x) {
  unsigned p = 1;
  while ((size_t)p * 2 <= x && p < (1u << 30)) p *= 2;
  return p;
}
/** The most keys a paged forward's tile may hold, so that no tile
 *  straddles two pages (tiles start at multiples of their size): the
 *  largest power of two dividing page_size, FCL_PAGE_SIZE_MULTIPLE at
 *  least; without a block table, no limit. Every forward planner keeps
 *  its block_k within it. */
static inline unsigned fcl__page_tile_cap(const fcl_attention_desc *desc) {
  if (!desc->block_table || !desc->page_size) return UINT_MAX;
  return (unsigned)(desc->page_size & (~desc->page_size + 1));  /* page_size <= INT_MAX */
}
/** Keys the decode kernel on matrix instructions reads a warp a step, from
 *  one page of a paged cache (cl/flash_fwd_decode_mma.cl). */
#define FCL__DECODE_MMA_WARP_KEYS 16u
/** Keys a plan's kernel reads through one page lookup of a paged cache,
 *  which page_size must be a multiple of: a tile's, or a warp's step in
 *  the decode kernel on matrix instructions. */
static inline unsigned fcl__page_lookup_keys(const fcl_plan *plan) {
  return plan->kernel == FCL_FLASH_KERNEL_DECODE_MMA ? FCL__DECODE_MMA_WARP_KEYS : plan->block_k;
}
/** The local memory a flash kernel may declare: the device's less the 1 KiB
 *  NVIDIA keeps per work-group (an H200 reports 48 KiB; 47 KiB of __local
 *  arrays work, 48 fail); elsewhere the margin costs nothing. Both
 *  planners (plan.c, plan_mma.c) budget with it. */
static inline uint64_t fcl__local_budget(const fcl_device_limits *limits) {
  const uint64_t reserve = 1024;
  return limits->local_mem_bytes > reserve ? limits->local_mem_bytes - reserve : 0;
}
/** The lanes of a device's sub-group shuffles (fcl_device_limits.shuffle):
 *  its sub-group size, a warp on NVIDIA where the query gave none; 0
 *  without shuffles. */
static inline unsigned fcl__shuffle_width(const fcl_device_limits *limits) {
  if (limits->shuffle == FCL_SHUFFLE_NONE) return 0;
  if (limits->sub_group_size) return limits->sub_group_size;
  return limits->shuffle == FCL_SHUFFLE_NVIDIA_PTX ? 32 : 0;
}
/** Whether `lanes` adjacent work-items of a `wg`-item work-group sum their
 *  partial products by shuffles rather than through local memory: the
 *  device has them and the work-group fills whole sub-groups (a shuffle
 *  over absent lanes is undefined). common.cl's FCL_SUMS_BY_SHUFFLE is
 *  the same test, from the FCL_SHUFFLE options program.c passes. */
static inline int fcl__sums_by_shuffle(const fcl_device_limits *limits, size_t wg,
                                       unsigned lanes) {
  return FCL_SUMS_BY_SHUFFLE_OF((size_t)fcl__shuffle_width(limits), wg, lanes);
}
/** Local memory of the flash forward kernel (SIMT) for a tiling on a
 *  device (its row sums through local memory without shuffles). */
size_t fcl__flash_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits);
/** A kernel family's planner of one pass (families.c): `sh` the validated
 *  problem, `desc` the problem as the planner sees it (the forward's packed
 *  heads' rows as one head's; arguments already checked by
 *  fcl__plan_flash). Writes `out` on success only; else says why. */
typedef fcl_status fcl__planner(const fcl_device_limits *limits, const fcl__shape *sh,
                                const fcl_attention_desc *desc, const fcl_plan *hint,
                                fcl_plan *out, char *why, size_t why_len);
/** The SIMT kernels' rules (plan_simt.c). */
fcl__planner fcl__plan_forward_simt, fcl__plan_backward_simt;

/* The tensor-core forward's planner (plan_mma.c). */
/** The device runs mma.sync natively (NVIDIA, sm_80 and later); the MMA
 *  kernel emulates it elsewhere. */
int fcl__mma_native(const fcl_device_limits *limits);
/** The planner's default, the same for both passes: the MMA kernels where
 *  they run natively, take the head_dim and dtype, and were measured faster
 *  than SIMT (plan_mma.c). */
int fcl__mma_suits(const fcl_device_limits *limits, const fcl_attention_desc *desc);
/** The MMA forward's tiling. */
fcl__planner fcl__plan_forward_mma;
/** Local memory of flash_fwd_mma.cl for a tiling, with its emulation
 *  scratch when `emulate`. */
size_t fcl__flash_mma_local_bytes(const fcl_plan *plan, int emulate);
/* The CPU forward's planner (plan_cpu.c). */
/** Whether the rules take the CPU forward: a CPU device, a forward of at
 *  least 16 rows (`packed_rows`, seqlen_q times the packed heads) that
 *  does not pack heads (`packed` 1). */
int fcl__cpu_forward_suits(const fcl_device_limits *limits, size_t packed_rows, unsigned packed);
/** The CPU forward's tiling for the packed problem `desc`. */
fcl__planner fcl__plan_forward_cpu;
/** Whether the rules take the CPU backward: a CPU device. */
int fcl__cpu_backward_suits(const fcl_device_limits *limits);
/** The CPU backward's tiling (both kernels). */
fcl__planner fcl__plan_backward_cpu;
/** Whether two plans are the same, field by field (fcl_plan has padding,
 *  which memcmp would compare too). */
static inline int fcl__same_plan(const fcl_plan *a, const fcl_plan *b) {
  return a->block_q == b->block_q && a->block_k == b->block_k && a->wg_size == b->wg_size &&
         a->threads_per_row == b->threads_per_row && a->rows_per_thread == b->rows_per_thread &&
         a->head_dim_padded == b->head_dim_padded && a->local_bytes == b->local_bytes &&
         a->tile_elem_size == b->tile_elem_size && a->kernel == b->kernel &&
         a->splits == b->splits && a->packed_heads == b->packed_heads && a->tuned == b->tuned &&
         a->merge == b->merge;
}
/** Whether a kernel family is one of the two decode kernels. */
static inline int fcl__decode_kernel_family(unsigned kernel) {
  return kernel == FCL_FLASH_KERNEL_DECODE || kernel == FCL_FLASH_KERNEL_DECODE_MMA;
}
/** Whether a kernel family has a forward only: the decode kernels. */
static inline int fcl__kernel_forward_only(unsigned kernel) {
  return fcl__decode_kernel_family(kernel);
}
/* The decode forward's planner (plan_decode.c). */
/** The planner's default decode kernel for a forward of `packed_rows` rows
 *  a block (seqlen_q times the packed heads): FCL_FLASH_KERNEL_DECODE_MMA
 *  where the matrix instructions run natively (16-bit types, head_dim up
 *  to 128, at most FCL_DECODE_MMA_MAX_ROWS rows), else
 *  FCL_FLASH_KERNEL_DECODE on GPUs for vec4 shapes of at most
 *  FCL_DECODE_MAX_ROWS rows, else FCL_FLASH_KERNEL_AUTO (none). */
unsigned fcl__decode_kernel(const fcl_device_limits *limits, const fcl__shape *sh,
                            size_t packed_rows);
/** The decode forward's tiling for the packed problem `desc` of shape
 *  `sh`, and the same for the decode kernel on matrix instructions. */
fcl__planner fcl__plan_forward_decode, fcl__plan_forward_decode_mma;
/** Local memory of either decode kernel (plan->kernel) for a tiling on a
 *  device (whose partial sums may go through local memory, and whose
 *  matrix instructions may be emulated). */
size_t fcl__flash_decode_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits);
/** Floats per block row of either decode kernel's local state (key groups
 *  or warps x (HEAD_DIM_MAX + 2)): how many splits' LSEs a row of the
 *  merge in the split launch stages there (cl/blocks.cl). */
size_t fcl__decode_state_row_floats(const fcl_plan *plan);
/** The MMA backward's tiling. */
fcl__planner fcl__plan_backward_mma;
/** How the flash kernels are built for a problem's window (common.cl's
 *  WINDOW): without one, with causal's (no left bound, right bound 0), so
 *  that the compiler folds the mask, or from the parameter block. */
typedef enum fcl__window_kind {
  FCL__WINDOW_NONE = 0,
  FCL__WINDOW_CAUSAL = 1,
  FCL__WINDOW_GENERAL = 2,
} fcl__window_kind;

static inline fcl__window_kind fcl__window_of(const fcl_attention_desc *desc) {
  const int right = desc->causal ? 0 : desc->window_right;
  if (desc->window_left >= 0 || right > 0) return FCL__WINDOW_GENERAL;
  return right == 0 ? FCL__WINDOW_CAUSAL : FCL__WINDOW_NONE;
}

/** Whether the backward kernels keep each query row's visible keys in
 *  local memory (common.cl's ROW_KEYS_IN_LOCAL): for a general window
 *  only; a pinned one gives them from the row. */
static inline int fcl__row_keys_in_local(const fcl_attention_desc *desc) {
  return fcl__window_of(desc) == FCL__WINDOW_GENERAL;
}

/** 8-row groups of a streamed tile the MMA backward takes per step
 *  (flash_bwd_mma.cl's SUB_TILES, which the host passes): its scores'
 *  registers, and the size of what warp pairs exchange. */
#define FCL__MMA_BWD_SUB_TILES 2
/** Local memory of flash_bwd_mma.cl's kernels (both alike) for a tiling,
 *  with the emulation scratch when `emulate`, and each query row's key
 *  bounds when `row_keys` (fcl__row_keys_in_local). */
size_t fcl__flash_bwd_mma_local_bytes(const fcl_plan *plan, int emulate, int row_keys);
/** Local memory of the flash backward kernels (dK/dV and dQ alike) for a
 *  backward tiling on a device (row sums through local memory without
 *  shuffles); row_keys: as above. */
size_t fcl__flash_bwd_local_bytes(const fcl_plan *plan, const fcl_device_limits *limits,
                                  int row_keys);
/** Rows of a streamed tile the backward kernels take into registers at a
 *  time: the largest of 8, 4, 2, 1 that divides the tile, at most 4 where
 *  eight work-items share a row, and on AMD and Intel then 2 for slices of
 *  24 floats, 1 for 32 (plan.c says what spilled). */
unsigned fcl__flash_bwd_sub_rows(const fcl_plan *plan, const fcl_device_limits *limits);
/** Launch shape of the backward's preprocessing kernel (flash_bwd_pre.cl,
 *  D = rowsum(dO * O)), the same for both kernel families. */
typedef struct fcl__pre_shape {
  unsigned wg_size;          /**< 128, or the device's largest power of two below */
  unsigned threads_per_row;  /**< enough for a float4 each: at most 32 and wg_size */
} fcl__pre_shape;
fcl__pre_shape fcl__flash_bwd_pre_shape(const fcl_device_limits *limits, size_t head_dim);
fcl_status fcl__naive_forward(fcl__forward_call *call);

/* The naive algorithm's internals: host/naive.h. */

/** Forgets the context in CLBlast's process-wide kernel cache; for
 *  fcl_context_release (gemm.c explains). */
void fcl__clblast_release(fcl_context *ctx);

/** Enqueues the conversion of n elements (convert.cl) of a 16-bit storage
 *  type `dtype` to float (to_f32) or from float, rounding to nearest even,
 *  with `width` (1 or 4) elements per work-item; io_counter as the
 *  instrumented kernels take it (NULL when not counting). Counts as an
 *  enqueue for failure injection. */
fcl_status fcl__convert(fcl_context *ctx, fcl_dtype dtype, int to_f32, cl_mem from,
                        cl_mem to, size_t n, unsigned width, cl_mem io_counter);

/* ---- merging attention states (merge.c) ---------------------------------- */
/** A validated merge descriptor and what follows from it. */
typedef struct fcl__merge_shape {
  fcl_merge_desc desc;       /* the caller's, whole */
  size_t rows;               /* batch * seqlen * heads */
  size_t lse_per_part;       /* rows: floats of one part's LSE */
  size_t elem_size;
  fcl_tensor_layout o_parts, o;  /* resolved (packed by default) */
  size_t o_part_stride, lse_part_stride;  /* resolved */
  int vec4;
  fcl_merge_sizes sizes;
} fcl__merge_shape;
/** Validates a merge descriptor as fcl_merge_states does. */
fcl_status fcl__check_merge_why(const fcl_merge_desc *desc, fcl__merge_shape *shape,
                                char *why, size_t why_len);
/** How the merge kernel (cl/merge.cl) is built for a device, a head_dim
 *  and a number of parts: work-group size, head_dim bucket (a power of
 *  two, at least 16), parts a lane loads at once, lane groups per row, and
 *  rows per work-group (given to the kernel, which checks it). */
typedef struct fcl__merge_layout {
  unsigned wg_size, head_dim_max, part_loads, part_groups, rows;
} fcl__merge_layout;
fcl__merge_layout fcl__merge_layout_of(const fcl_device_limits *limits, size_t head_dim,
                                       size_t parts);
/** The merge kernel's build options for a layout. */
void fcl__merge_options(const fcl__merge_layout *layout, fcl_dtype dtype, cl_mem io_counter,
                        fcl__options *opts);
/** The merge kernel with its arguments set, ready to launch. */
typedef struct fcl__merge_run {
  cl_kernel kernel;
  size_t global, local;
} fcl__merge_run;
/** Builds the merge kernel and sets its arguments (lse NULL: no merged
 *  LSE), so that launching it later costs one enqueue. */
fcl_status fcl__merge_prepare(fcl_context *ctx, const fcl__merge_shape *shape, cl_mem o_parts,
                              cl_mem lse_parts, cl_mem o, cl_mem lse, cl_mem io_counter,
                              fcl__merge_run *run);
fcl_status fcl__merge_launch(fcl_context *ctx, const fcl__merge_run *run);
/** Releases the prepared kernel; a run never prepared (zeroed) is a no-op. */
void fcl__merge_release(fcl_context *ctx, fcl__merge_run *run);

/* ---- the I/O model ------------------------------------------------------ */


/** Global-memory traffic of an algorithm as it runs, in bytes (each element
 *  weighted by its type: the storage type, float for LSE and S/P). */
typedef struct fcl__io {
  fcl__bytes loads;
  fcl__bytes stores;
} fcl__io;

/** loads + stores as 64 bits; UINT64_MAX when they do not fit. */
uint64_t fcl__io_total(fcl__io io);
/** 1 when both counts fit 64 bits each and in sum. */
int fcl__io_fits(fcl__io io);

/** Forward traffic of the flash kernel for `plan` (split: its partial
 *  states and their merge). */
fcl__io fcl__io_flash_forward(const fcl__shape *shape, const fcl_plan *plan, int with_lse);
/** Backward traffic of the flash kernels (preprocessing, dK/dV, dQ) for
 *  `plan`, the mask's skipped tiles included. */
fcl__io fcl__io_flash_backward(const fcl__shape *shape, const fcl_plan *plan);
/** Traffic of a naive pass in `chunks` chunks: all of it, or (own_only)
 *  what the library's own kernels count (not CLBlast's GEMMs, nor the
 *  queue's copies). */
fcl__io fcl__io_naive(const fcl_device_limits *limits, const fcl__shape *shape, fcl_pass pass,
                      int with_lse, unsigned chunks, int own_only);

/** Traffic of the merge kernel: every part's LSE and O once, the merged O
 *  (and LSE) once. */
fcl__io fcl__io_merge(const fcl__merge_shape *shape, int with_lse);
/** Traffic of appending `rows` rows (batch x new tokens x KV heads) of K
 *  and V to a cache (cache.c): each work-item's length (and, paged, its
 *  page's table entry), and the rows read and written once. */
fcl__io fcl__io_kv_append(size_t rows, size_t head_dim, size_t elem_size, int paged);
/** The same for `rows` rows of `parts` parts (the split forward's merge). */
fcl__io fcl__io_merge_rows(size_t rows, size_t parts, size_t head_dim, size_t elem_size,
                           int with_lse);

/** Pairs (query, key) all sequences show, per head: what FLOP counts and
 *  the asymptotic figures count (mask.c). */
double fcl__shown_pairs(const fcl__shape *shape);
/** FLOPs of a pass by flash-attn's convention (fcl_attention_flops). */
double fcl__flops(const fcl__shape *shape, fcl_pass pass);

#endif /* FLASHCL_INTERNAL_H */
