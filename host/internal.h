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

#include <pthread.h>
#include <stdarg.h>

/* ---- context ------------------------------------------------------------ */

typedef struct fcl__program_entry fcl__program_entry;
typedef struct fcl__error_slot fcl__error_slot;

/** What the fcl_context_set_* functions change. Guarded by the context's
 *  lock; a call reads each one once (the forward takes a copy when it
 *  starts, fcl__io_counter_begin decides on counting, the naive chunking
 *  reads the scratch limit), so that a setter running on another thread
 *  never changes a call half-way. */
typedef struct fcl__settings {
  uint64_t scratch_limit; /* 0: default */
  int count_io;
  fcl_plan tiling_hint;   /* nonzero fields override the planner */
} fcl__settings;

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
  /* The last error of each thread that failed on this context. */
  fcl__error_slot **errors;
  size_t n_errors, cap_errors;
};

/** A consistent copy of the context's settings, for one call. */
fcl__settings fcl__context_settings(fcl_context *ctx);

/** The cap on one call's scratch memory: the user's, or the default share
 *  of the device's global memory. */
uint64_t fcl__scratch_limit(const fcl_context *ctx);
/** The default cap for a device. */
uint64_t fcl__default_scratch_limit(const fcl_device_limits *limits);

/** Test hook: how many programs the context has compiled so far (a cache
 *  hit does not count). */
long fcl__program_builds(fcl_context *ctx);

/** Test hook: while `hold` is 1, every program build of the context stops
 *  just before compiling and waits until it is 0 again; 0 lets them go. */
void fcl__hold_builds(fcl_context *ctx, int hold);
/** Test hook: waits until at least `n` builds are held, for at most
 *  `timeout_ms`. @return 1 if they are, 0 on timeout. */
int fcl__await_held_builds(fcl_context *ctx, int n, long timeout_ms);

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

/** Enqueues a 1–3 dimensional NDRange; `name` labels errors. */
fcl_status fcl__launch(fcl_context *ctx, cl_kernel kernel, const char *name,
                       cl_uint dims, const size_t *global, const size_t *local);

/** Enqueued copies, fills, reads and markers; `what` labels errors. */
fcl_status fcl__copy(fcl_context *ctx, cl_mem from, cl_mem to, size_t bytes,
                     const char *what);
fcl_status fcl__fill(fcl_context *ctx, cl_mem mem, const void *pattern,
                     size_t pattern_size, size_t bytes, const char *what);
fcl_status fcl__read(fcl_context *ctx, cl_mem mem, void *out, size_t bytes,
                     const char *what);
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

/** The parameter block of a validated descriptor. */
fcl_params fcl__params_of(const fcl_attention_desc *desc);

/** Sets an attention kernel's arguments: the buffers, the parameter block
 *  and, when counting, the I/O counter. */
fcl_status fcl__set_attention_args(fcl_context *ctx, cl_kernel kernel, const char *name,
                                   const fcl__attention_buffers *bufs, const fcl_params *params,
                                   cl_mem io_counter);

/** Checks that a built kernel declares the local memory its plan says
 *  (CL_KERNEL_LOCAL_MEM_SIZE against plan->local_bytes): the planner's
 *  model of the kernel's arrays must be the kernel's. */
fcl_status fcl__check_local_bytes(fcl_context *ctx, cl_kernel kernel, const char *name,
                                  size_t planned);

/* ---- programs ----------------------------------------------------------- */

/** The embedded kernel sources; each is compiled after common.cl. */
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

/** Builds (or takes from the context's cache) the program for `source`
 *  with `opts` plus the context-wide options (I/O counting, vendor
 *  extensions), and creates a fresh kernel `name` from it. The kernel is the
 *  caller's to release; kernels are not shared so threads never race on
 *  their arguments. */
fcl_status fcl__kernel(fcl_context *ctx, fcl__source source,
                       const fcl__options *opts, const char *name,
                       cl_kernel *kernel);

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

/* ---- validation and shapes ---------------------------------------------- */

/** Element counts of the tensors of a descriptor, computed without overflow
 *  by fcl__check_desc. */
typedef struct fcl__shape {
  size_t q_elems;   /* batch * seqlen_q * heads_q * head_dim */
  size_t kv_elems;  /* batch * seqlen_k * heads_kv * head_dim */
  size_t lse_elems; /* batch * heads_q * seqlen_q */
  size_t elem_size; /* bytes of the storage type */
  size_t group;     /* heads_q / heads_kv */
} fcl__shape;

/** The bytes each buffer of a call needs, from a checked shape. */
fcl_buffer_sizes fcl__buffer_sizes(const fcl__shape *shape);

/** Validates a descriptor's fields and computes its shape (when `shape` is
 *  not NULL). Pure apart from the error message, which goes to the context
 *  (ctx may be NULL). */
fcl_status fcl__check_desc(fcl_context *ctx, const fcl_attention_desc *desc,
                           fcl__shape *shape);
/** The same, writing the message to why[why_len] (may be NULL / 0). */
fcl_status fcl__check_desc_why(const fcl_attention_desc *desc, fcl__shape *shape,
                               char *why, size_t why_len);

/** Validates a tiling override as fcl_context_set_flash_tiling documents.
 *  Pure apart from the message (ctx may be NULL). */
fcl_status fcl__check_tiling_hint(fcl_context *ctx, const fcl_plan *hint);
fcl_status fcl__check_tiling_hint_why(const fcl_plan *hint, char *why, size_t why_len);

/** Checks that `mem` is non-NULL (unless optional), belongs to the context's
 *  OpenCL context and holds at least `bytes`. */
fcl_status fcl__check_buffer(fcl_context *ctx, cl_mem mem, size_t bytes,
                             const char *name, int optional);

/** Checks the buffers of one call, mems[0..n): the first n_inputs are read,
 *  the rest written (NULL entries are absent optional buffers). An output
 *  must be writable by kernels (not CL_MEM_READ_ONLY) and share no byte
 *  with any other buffer of the call, sub-buffers and host memory lent
 *  with CL_MEM_USE_HOST_PTR included; an input must be readable (not
 *  CL_MEM_WRITE_ONLY). Call after fcl__check_buffer. */
fcl_status fcl__check_call_buffers(fcl_context *ctx, const cl_mem *mems,
                                   const char *const *names, size_t n_inputs,
                                   size_t n);

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
  fcl_plan plan;     /* flash: filled by the algorithm */
  unsigned chunks;   /* naive: filled by the algorithm */
} fcl__forward_call;

fcl_status fcl__flash_forward(fcl__forward_call *call);

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

/** The planner, with optional overrides: the nonzero fields of `hint`
 *  replace its choices (fcl_context_set_flash_tiling). */
fcl_status fcl__plan_flash(const fcl_device_limits *limits,
                           const fcl_attention_desc *desc, fcl_pass pass,
                           const fcl_plan *hint, fcl_plan *out, char *why,
                           size_t why_len);
/** The local memory a flash kernel may declare: the device's less the 1 KiB
 *  NVIDIA keeps per work-group (an H200 reports 48 KiB; 47 KiB of __local
 *  arrays work, 48 fail); elsewhere the margin costs nothing. Both
 *  planners (plan.c, plan_mma.c) budget with it. */
static inline uint64_t fcl__local_budget(const fcl_device_limits *limits) {
  const uint64_t reserve = 1024;
  return limits->local_mem_bytes > reserve ? limits->local_mem_bytes - reserve : 0;
}
/** Local memory of the flash forward kernel (SIMT) for a tiling. */
size_t fcl__flash_local_bytes(const fcl_plan *plan, int row_sum_in_local);

/* The tensor-core forward's planner (plan_mma.c). */
/** The device runs mma.sync natively (NVIDIA, sm_80 and later); the MMA
 *  kernel emulates it elsewhere. */
int fcl__mma_native(const fcl_device_limits *limits);
/** The planner's default, the same for both passes: the MMA kernels where
 *  they run natively, take the head_dim and dtype, and were measured faster
 *  than SIMT (plan_mma.c). */
int fcl__mma_suits(const fcl_device_limits *limits, const fcl_attention_desc *desc);
/** The MMA forward's tiling; arguments already checked by fcl__plan_flash. */
fcl_status fcl__plan_forward_mma(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc, const fcl_plan *hint,
                                 fcl_plan *out, char *why, size_t why_len);
/** Local memory of flash_fwd_mma.cl for a tiling, with its emulation
 *  scratch when `emulate`. */
size_t fcl__flash_mma_local_bytes(const fcl_plan *plan, int emulate);
/** The MMA backward's tiling; arguments already checked by
 *  fcl__plan_flash. */
fcl_status fcl__plan_backward_mma(const fcl_device_limits *limits,
                                  const fcl_attention_desc *desc, const fcl_plan *hint,
                                  fcl_plan *out, char *why, size_t why_len);
/** 8-row groups of a streamed tile the MMA backward takes per step
 *  (flash_bwd_mma.cl's SUB_TILES, which the host passes): its scores'
 *  registers, and the size of what warp pairs exchange. */
#define FCL__MMA_BWD_SUB_TILES 2
/** Local memory of flash_bwd_mma.cl's kernels (both alike) for a tiling,
 *  with the emulation scratch when `emulate`. */
size_t fcl__flash_bwd_mma_local_bytes(const fcl_plan *plan, int emulate);
/** Local memory of the flash backward kernels (dK/dV and dQ alike) for a
 *  backward tiling; row_sum_in_local: the device has no warp shuffles
 *  (work-groups smaller than a warp never use them). */
size_t fcl__flash_bwd_local_bytes(const fcl_plan *plan, int row_sum_in_local);
/** Rows of a streamed tile the backward kernels take into registers at a
 *  time: the largest of 8, 4, 2, 1 that divides the tile. */
unsigned fcl__flash_bwd_sub_rows(const fcl_plan *plan);
/** Launch shape of the backward's preprocessing kernel (flash_bwd_pre.cl,
 *  D = rowsum(dO * O)), the same for both kernel families. */
typedef struct fcl__pre_shape {
  unsigned wg_size;          /**< 128, or the device's largest power of two below */
  unsigned threads_per_row;  /**< enough for a float4 each: at most 32 and wg_size */
} fcl__pre_shape;
fcl__pre_shape fcl__flash_bwd_pre_shape(const fcl_device_limits *limits, size_t head_dim);
fcl_status fcl__naive_forward(fcl__forward_call *call);

/** Chunking of the naive algorithm: (batch, head) slices per chunk given
 *  the device and scratch limits; shared by naive.c, naive_bwd.c and the
 *  I/O model. The forward keeps one seqlen_q x seqlen_k matrix per slice
 *  (S, then P in place), the backward two (P, and dP then dS in place). */
typedef struct fcl__chunking {
  size_t slice_bytes;  /* one slice's matrices */
  size_t per_chunk;    /* kv heads per chunk */
  size_t chunks;       /* total chunks over batch * group * kv heads */
} fcl__chunking;

/** ctx only receives the error message and may be NULL. */
fcl_status fcl__naive_chunking(fcl_context *ctx, const fcl_device_limits *limits,
                               uint64_t scratch_limit, const fcl_attention_desc *desc,
                               fcl_pass pass, fcl__chunking *out);

/** One strided-batched GEMM, row-major: C = alpha * op(A) op(B) + beta * C
 *  for `batch` matrices `*_stride` elements apart, in f32 (SGEMM) or f16
 *  (HGEMM, alpha and beta rounded to half). */
typedef struct fcl__gemm {
  fcl_dtype type;  /* FCL_DTYPE_F32 (0, the default) or FCL_DTYPE_F16 */
  int trans_a, trans_b;
  size_t m, n, k;
  float alpha, beta;
  cl_mem a, b, c;
  size_t a_off, a_ld, a_stride;
  size_t b_off, b_ld, b_stride;
  size_t c_off, c_ld, c_stride;
  size_t batch;
} fcl__gemm;

/* CLBlast (gemm.c). */
/** Runs a GEMM through CLBlast, one call at a time across the process
 *  (CLBlast 1.5.3's caches are not thread-safe); `what` names it in errors.
 *  Counts as an enqueue for failure injection. */
fcl_status fcl__gemm_run(fcl_context *ctx, const fcl__gemm *gemm, const char *what);
/** Forgets the context in CLBlast's process-wide kernel cache; for
 *  fcl_context_release (gemm.c explains). */
void fcl__clblast_release(fcl_context *ctx);
/** float -> IEEE binary16 bits, rounded to nearest even, for HGEMM's alpha
 *  and beta (the kernels convert on the device); magnitudes below the
 *  normal range (2^-14) become 0. */
cl_half fcl__half_bits(float f);

/** What both naive passes do first: refuse a storage type the device
 *  cannot run, chunk the slices, and report the chunk count (saturated). */
fcl_status fcl__naive_begin(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                            fcl__chunking *ch, unsigned *chunks);

/** One chunk of the naive algorithm: batch b, group member `member`, kv
 *  heads [kv0, kv0 + n). */
typedef fcl_status (*fcl__chunk_fn)(void *state, size_t b, size_t member, size_t kv0,
                                    size_t n);

/** Calls `fn` for every chunk, members in order within each batch; stops
 *  at the first failure. */
fcl_status fcl__naive_each_chunk(const fcl_attention_desc *desc, const fcl__chunking *ch,
                                 fcl__chunk_fn fn, void *state);

/** Launch shape of softmax.cl for rows of seqlen_k: work-items per row and
 *  row elements per work-item (0: the streaming variant that reads twice). */
void fcl__softmax_config(const fcl_device_limits *limits, size_t seqlen_k,
                         unsigned *wg_size, unsigned *cols_per_item);

/** The type the naive algorithm computes in, for its GEMMs and S/P: f16
 *  for f16 storage, else f32 (bf16 runs the f32 path on widened copies). */
fcl_dtype fcl__naive_compute_dtype(const fcl_attention_desc *desc);
/** Where one chunk's slices sit in the caller's tensors and in the S
 *  scratch, in elements, as the strided-batched GEMMs take them. */
typedef struct fcl__chunk_view {
  size_t q_off, q_ld, q_stride;    /* Q, O, dO, dQ: first slice, row, slice */
  size_t kv_off, kv_ld;            /* K, V, dK, dV (slices d apart) */
  size_t s_stride;                 /* S/P scratch: seqlen_q x seqlen_k each */
} fcl__chunk_view;

fcl__chunk_view fcl__naive_chunk_view(const fcl_attention_desc *desc, size_t b,
                                       size_t member, size_t kv0);

/** The -D options softmax.cl's kernels share (storage type, launch shape,
 *  mask, I/O counting), into a fresh `opts`. */
void fcl__softmax_options(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                          fcl_dtype type, cl_mem io_counter, fcl__options *opts);

/** Bytes per element of the naive algorithm's S/P. */
size_t fcl__naive_s_elem_size(const fcl_attention_desc *desc);
/** Whether the naive algorithm runs desc's storage type on a device with
 *  `limits` (f16 needs cl_khr_fp16 and a scale that is a normal half);
 *  FCL_ERROR_UNSUPPORTED and why if not. ctx may be NULL. */
fcl_status fcl__naive_check_dtype(fcl_context *ctx, const fcl_device_limits *limits,
                                  const fcl_attention_desc *desc);
/** Allocates n float buffers of elems[i] elements into out[] (NULL where
 *  not allocated); `what` names them in errors. */
fcl_status fcl__f32_copies(fcl_context *ctx, const size_t *elems, cl_mem *out, size_t n,
                           const char *what);
/** Enqueues the widening of n tensors of desc's 16-bit type to float. */
fcl_status fcl__naive_widen(fcl_context *ctx, const fcl_attention_desc *desc,
                            cl_mem io_counter, const cl_mem *from, const cl_mem *to,
                            const size_t *elems, size_t n);

/** Enqueues the conversion of n elements (convert.cl) of a 16-bit storage
 *  type `dtype` to float (to_f32) or from float, rounding to nearest even,
 *  with `width` (1 or 4) elements per work-item; io_counter as the
 *  instrumented kernels take it (NULL when not counting). Counts as an
 *  enqueue for failure injection. */
fcl_status fcl__convert(fcl_context *ctx, fcl_dtype dtype, int to_f32, cl_mem from,
                        cl_mem to, size_t n, unsigned width, cl_mem io_counter);

/* ---- the I/O model ------------------------------------------------------ */

/** Byte counts of the I/O model, in 128 bits: every term is a product of
 *  a validated tensor's bytes (below 2^64) and a sequence length (below
 *  2^31) or a few more small factors, so none overflows; what does not fit
 *  the public 64-bit fields is reported as an overflow, never wrapped. */
typedef unsigned __int128 fcl__bytes;

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

/** Forward traffic of the flash kernel for `plan`. */
fcl__io fcl__io_flash_forward(const fcl_attention_desc *desc,
                              const fcl_plan *plan, int with_lse);
/** Traffic of the naive forward's softmax kernel (what it can count). */
fcl__io fcl__io_softmax(const fcl_device_limits *limits,
                        const fcl_attention_desc *desc, int with_lse);
/** The conversions of a bf16 naive run (its f32 path's float copies of the
 *  inputs, and the outputs rounded back); zero for f32 and f16. */
fcl__io fcl__io_naive_conversions(const fcl_attention_desc *desc, fcl_pass pass);
/** Whole naive forward: GEMMs (each operand read once, result written once),
 *  the softmax, the conversions and the copies a chunked run makes. */
fcl__io fcl__io_naive_forward(const fcl_device_limits *limits,
                              const fcl_attention_desc *desc, int with_lse,
                              unsigned chunks);
/** Backward traffic of the flash kernels (preprocessing, dK/dV, dQ) for
 *  `plan`, causal block skipping included. */
fcl__io fcl__io_flash_backward(const fcl_attention_desc *desc, const fcl_plan *plan);
/** Traffic of the naive backward's own kernels (P recomputed from LSE, and
 *  the softmax backward): what they can count. */
fcl__io fcl__io_softmax_backward(const fcl_device_limits *limits,
                                 const fcl_attention_desc *desc);
/** Whole naive backward: five GEMMs plus the one that recomputes S, the two
 *  row kernels, the conversions and the copies a chunked run makes. */
fcl__io fcl__io_naive_backward(const fcl_device_limits *limits,
                               const fcl_attention_desc *desc, unsigned chunks);

#endif /* FLASHCL_INTERNAL_H */
