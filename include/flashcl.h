/*
 * flashcl.h — exact attention for OpenCL devices: FlashAttention and a naive
 * baseline, on any vendor's GPU or CPU.
 *
 * Everything public is declared here. Conventions, for every function:
 *   - Fallible calls return an fcl_status; FCL_SUCCESS is 0. fcl_status_str()
 *     names a status, fcl_context_last_error() explains the last failure.
 *     Every argument is checked before anything is enqueued or allocated; a
 *     bad one gives the status documented at the function and, where there
 *     is a context, a message naming it. No call aborts, prints, or leaves
 *     memory or OpenCL objects behind on any path, failures included.
 *   - Handles are opaque. Nothing is global: two contexts never share state.
 *   - Tensors are caller-owned cl_mem buffers, by default packed
 *       Q, O, dQ, dO : [batch][seqlen_q][heads_q ][head_dim]
 *       K, V, dK, dV : [batch][seqlen_k][heads_kv][head_dim]
 *       (V, O, dO, dV: head_dim_v columns where the descriptor sets it)
 *       LSE          : float [batch][heads_q][seqlen_q]
 *     from offset 0; any other offset and strides (PyTorch's [B, H, N, d]
 *     views, packed QKV) are an fcl_tensor_layout per tensor, ragged batches
 *     are cu_seqlens, and K and V may be a (paged) KV cache: see
 *     fcl_attention_desc. head_dim is always contiguous.
 *   - Causal masking is aligned to the bottom-right corner: query i sees key j
 *     iff j <= i + seqlen_k - seqlen_q; sliding windows likewise. A query that
 *     sees no key outputs zeros and LSE = -INFINITY.
 *   - Grouped-query attention: heads_q % heads_kv == 0 and query head h reads
 *     key/value head h / (heads_q / heads_kv).
 *   - Storage may be f32, f16 or bf16; the flash algorithm's arithmetic is
 *     always f32 (see fcl_dtype for the naive algorithm's).
 */
#ifndef FLASHCL_H
#define FLASHCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FCL_BUILDING_LIBRARY) && defined(__GNUC__)
#define FCL_API __attribute__((visibility("default")))
#else
#define FCL_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

#define FCL_VERSION_MAJOR 0
#define FCL_VERSION_MINOR 3
#define FCL_VERSION_PATCH 0
#define FCL_VERSION_NUMBER \
  (FCL_VERSION_MAJOR * 10000 + FCL_VERSION_MINOR * 100 + FCL_VERSION_PATCH)

/** @return FCL_VERSION_NUMBER of the library actually linked; compare it with
 *  the macro to detect a header/library mismatch. */
FCL_API unsigned fcl_version_number(void);

/** @return the linked library's version as "MAJOR.MINOR.PATCH". */
FCL_API const char *fcl_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum fcl_status {
  FCL_SUCCESS = 0,
  /** A NULL handle or buffer, or a value out of its documented range. */
  FCL_ERROR_INVALID_ARGUMENT = 1,
  /** Sizes that are zero, inconsistent (heads_q % heads_kv != 0) or whose
   *  products overflow. */
  FCL_ERROR_INVALID_SHAPE = 2,
  /** A buffer smaller than the shape needs. */
  FCL_ERROR_BUFFER_TOO_SMALL = 3,
  /** Valid, but this device or algorithm cannot run it (a head_dim that does
   *  not fit local memory, a dtype the device lacks). */
  FCL_ERROR_UNSUPPORTED = 4,
  /** A host or device allocation failed, or scratch memory the call needs
   *  exceeds what the device or the context's scratch limit allows. */
  FCL_ERROR_OUT_OF_MEMORY = 5,
  /** No OpenCL device matched the selector. */
  FCL_ERROR_DEVICE_NOT_FOUND = 6,
  /** A kernel failed to compile; the build log is in the error detail. */
  FCL_ERROR_BUILD_FAILED = 7,
  /** Any other OpenCL error; the detail names the call and the code. */
  FCL_ERROR_OPENCL = 8,
  /** CLBlast (the naive baseline's GEMMs) failed; the detail has its code. */
  FCL_ERROR_CLBLAST = 9,
} fcl_status;

/** @return a constant name for a status, e.g. "FCL_ERROR_INVALID_SHAPE";
 *  "FCL_STATUS_UNKNOWN" for values outside the enum. Never NULL. */
FCL_API const char *fcl_status_str(fcl_status status);

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */
/* ------------------------------------------------------------------------ */

/** Whose GPU a device is, from CL_DEVICE_VENDOR_ID (the PCI vendor); the
 *  planner's rules and the build options differ per vendor. */
typedef enum fcl_vendor {
  FCL_VENDOR_OTHER = 0,   /**< anything else, CPUs through PoCL among them */
  FCL_VENDOR_NVIDIA = 1,  /**< 0x10de */
  FCL_VENDOR_AMD = 2,     /**< 0x1002 */
  FCL_VENDOR_INTEL = 3,   /**< 0x8086, GPUs only (a CPU device is OTHER) */
} fcl_vendor;

/** How a device's work-items exchange values within a sub-group, which the
 *  SIMT kernels use to sum a row's partial dot products (cl/common.cl,
 *  fcl_shfl_xor); without it the sums go through local memory, which the
 *  plan then counts in local_bytes. */
typedef enum fcl_shuffle {
  FCL_SHUFFLE_NONE = 0,        /**< through local memory (PoCL, unknown drivers) */
  FCL_SHUFFLE_NVIDIA_PTX = 1,  /**< shfl.sync.bfly, inline PTX (NVIDIA's driver) */
  /** intel_sub_group_shuffle_xor (cl_intel_subgroups); not chosen for
   *  Intel's devices, whose compiler spilled more with it than with the
   *  local-memory sums (scripts/vendor-check.sh compiles it still). */
  FCL_SHUFFLE_INTEL = 2,
  FCL_SHUFFLE_AMD = 3,         /**< ds_bpermute, the amdgcn compiler's builtin (AMD's
                                    own OpenCL, which has cl_amd_media_ops) */
} fcl_shuffle;

/** The numbers the tile planner needs. Filled from the device by
 *  fcl_devices() and fcl_context_device(), or from a profile
 *  (fcl_device_profiles); tests may make up their own. */
typedef struct fcl_device_limits {
  uint64_t local_mem_bytes;     /**< CL_DEVICE_LOCAL_MEM_SIZE, as reported */
  size_t max_work_group_size;   /**< CL_DEVICE_MAX_WORK_GROUP_SIZE */
  unsigned compute_units;       /**< CL_DEVICE_MAX_COMPUTE_UNITS */
  uint64_t global_mem_bytes;    /**< CL_DEVICE_GLOBAL_MEM_SIZE */
  uint64_t max_alloc_bytes;     /**< CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  int is_gpu;                   /**< CL_DEVICE_TYPE_GPU */
  int has_fp16;                 /**< cl_khr_fp16 */
  int has_fp64;                 /**< cl_khr_fp64 */
  int has_int64_atomics;        /**< cl_khr_int64_base_atomics */
  int nvidia_ptx;               /**< NVIDIA's driver, which accepts inline PTX */
  /** NVIDIA compute capability x 10 (90 on an H200; 0 elsewhere). From 80
   *  on, the planner runs the forward on the tensor cores
   *  (FCL_FLASH_KERNEL_MMA) for f16 and bf16, and for f32 from head_dim 64,
   *  and the backward likewise, where head_dim is a multiple of 8 up to
   *  128. */
  unsigned nvidia_sm;
  unsigned vendor;              /**< fcl_vendor; a GPU's only */
  /** Work-items that run in lockstep: NVIDIA's warp
   *  (CL_DEVICE_WARP_SIZE_NV), AMD's wavefront
   *  (CL_DEVICE_WAVEFRONT_WIDTH_AMD), Intel's narrowest sub-group
   *  (CL_DEVICE_SUB_GROUP_SIZES_INTEL), which the kernels then ask for, with
   *  256 registers a thread; 0 where the device does not say. */
  unsigned sub_group_size;
  /** fcl_shuffle: how the kernels may exchange values within a sub-group
   *  of sub_group_size lanes (NVIDIA: 32 where the query fails). They do
   *  where a work-group fills whole sub-groups. */
  unsigned shuffle;
} fcl_device_limits;

/** One OpenCL device as the library sees it. */
typedef struct fcl_device_info {
  unsigned platform_index;      /**< position in clGetPlatformIDs */
  unsigned device_index;        /**< position in the platform's device list */
  char name[128];
  char vendor[128];
  char platform[128];           /**< the platform's name */
  char version[128];            /**< CL_DEVICE_VERSION */
  char driver[64];              /**< CL_DRIVER_VERSION */
  unsigned max_clock_mhz;
  fcl_device_limits limits;
} fcl_device_info;

/** Lists every OpenCL device of every platform, in platform order.
 *  Writes at most `capacity` entries to `out` (which may be NULL when
 *  capacity is 0) and the total number of devices to `*count`.
 *  On failure *count is 0 (when count is not NULL); entries of `out` may
 *  have been written. A platform that reports no device
 *  (CL_DEVICE_NOT_FOUND) adds none; any other failure to list a platform's
 *  devices is FCL_ERROR_OPENCL, never a shorter list. Thread-safe.
 *  @return FCL_SUCCESS (also when no platform exists: *count is then 0),
 *          FCL_ERROR_INVALID_ARGUMENT (count NULL, or out NULL with a
 *          nonzero capacity), FCL_ERROR_OUT_OF_MEMORY, FCL_ERROR_OPENCL. */
FCL_API fcl_status fcl_devices(fcl_device_info *out, size_t capacity, size_t *count);

/** A device described from its vendor's documentation rather than read
 *  from a driver: what the planner would choose there can be seen, and its
 *  kernels compiled by the vendor's offline compiler
 *  (scripts/vendor-check.sh), without the device. */
typedef struct fcl_device_profile {
  const char *key;          /**< short name for command lines, e.g. "arc-a770" */
  const char *compiler;     /**< the offline target that stands for it, e.g. "ocloc -device dg2" */
  const char *source;       /**< where its numbers come from */
  fcl_device_info info;     /**< name, vendor and limits; indices 0 */
} fcl_device_profile;

/** The library's device profiles (Intel Arc A770 and Data Center GPU Max
 *  1550, AMD Instinct MI300X and Radeon RX 7900 XTX), static and
 *  read-only; `*count` gets their number (count may be NULL). Never fails,
 *  never NULL. Thread-safe. */
FCL_API const fcl_device_profile *fcl_device_profiles(size_t *count);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

/** A device, its queue, the kernels built for it and the last errors.
 *
 *  Threads. Every function taking a context may be called from several
 *  threads at once on the same context, except fcl_context_release(), which
 *  must be the last call on it. Calls from several threads share the queue
 *  (their commands interleave on it) and the cache of built kernels (each
 *  variant is compiled once; a thread that needs a variant being compiled
 *  waits for it, other threads do not). The fcl_context_set_* functions may
 *  run while calls are in flight: a call reads the settings once, when it
 *  starts, so it runs wholly with the old or wholly with the new values.
 *  Results do not depend on what other threads do: each call computes the
 *  same bits it would compute alone. Contexts are independent of each
 *  other, apart from two process-wide locks: one around CLBlast (naive
 *  algorithm), whose kernel cache is not thread-safe, and one that makes
 *  device listing (fcl_devices) and context creation (fcl_context_create,
 *  fcl_context_wrap) run one at a time, as some drivers' lazy start-up
 *  needs (PoCL 3.1 crashed without it). Those serialise only the library's
 *  own calls: an application that lists devices through OpenCL on another
 *  thread meanwhile is on its own.
 *
 *  What it keeps. Besides the built programs, a context keeps between
 *  calls what its calls would otherwise create and release each time (a
 *  short decode's time on the host): the kernel objects of each program,
 *  and up to four device buffers for the split forward's partial outputs,
 *  none over 64 MiB. All of it is released by fcl_context_release(). */
typedef struct fcl_context fcl_context;

/** Creates a context on the device `selector` names, with its own OpenCL
 *  context and an in-order, profiling-enabled queue.
 *  selector: NULL or "" means $FLASHCL_DEVICE if set, else the first GPU,
 *  else the first device; "gpu" / "cpu" the first device of that type;
 *  "P:D" platform P's device D (indices as fcl_devices lists them); anything
 *  else the first device whose name contains it (case-insensitive).
 *  As with sqlite3_open, *ctx receives a context even on most failures so
 *  that fcl_context_last_error() can say why; release it either way. *ctx is
 *  NULL only if the context itself could not be allocated.
 *  @return FCL_SUCCESS, FCL_ERROR_DEVICE_NOT_FOUND, FCL_ERROR_OPENCL,
 *          FCL_ERROR_OUT_OF_MEMORY, FCL_ERROR_INVALID_ARGUMENT (ctx NULL). */
FCL_API fcl_status fcl_context_create(const char *selector, fcl_context **ctx);

/** Wraps an OpenCL context, device and in-order queue the caller already
 *  owns. flashcl retains them and releases its references in
 *  fcl_context_release(); the caller keeps its own. Work is enqueued on
 *  `queue`. If the queue was created without profiling, run timings fall
 *  back to the host clock.
 *  As with fcl_context_create, *ctx receives a context even on failure, so
 *  that fcl_context_last_error() can say which argument was wrong; release
 *  it either way. *ctx is NULL only if it could not be allocated.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT (ctx NULL, a NULL or
 *          invalid handle, a queue of another context or device, an
 *          out-of-order queue), FCL_ERROR_OUT_OF_MEMORY, FCL_ERROR_OPENCL. */
FCL_API fcl_status fcl_context_wrap(cl_context context, cl_device_id device,
                            cl_command_queue queue, fcl_context **ctx);

/** Releases a context and every kernel it built. Waits for nothing: finish
 *  the queue first if work is in flight. No other thread may be using the
 *  context. NULL is a no-op.
 *  CLBlast (the naive algorithm's GEMMs) keeps its kernels in one cache for
 *  the whole process, and those retain their OpenCL context; when the last
 *  context that ran the naive algorithm is released, that cache is
 *  cleared, so that no OpenCL context outlives its last user. */
FCL_API void fcl_context_release(fcl_context *ctx);

/** @return a description of the calling thread's last failure on this
 *  context (which argument was bad, the build log, the OpenCL call and
 *  code), or "" if this thread has had none (or the message could not be
 *  stored for lack of memory). Each thread has its own: a failure on
 *  another thread never changes or frees the text this thread reads. The
 *  text stays valid until this thread's next failing call on the context,
 *  or the context's release. A successful call leaves it as it was.
 *  Memory: one small buffer per thread that has failed on the context,
 *  freed with the context. NULL ctx gives a constant message. */
FCL_API const char *fcl_context_last_error(const fcl_context *ctx);

/** Describes the context's device. @return FCL_SUCCESS or
 *  FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed, out NULL). */
FCL_API fcl_status fcl_context_device(const fcl_context *ctx, fcl_device_info *out);

/** The OpenCL objects the context runs on, for allocating buffers; the
 *  context keeps ownership. NULL when ctx is NULL or its creation failed. */
FCL_API cl_context fcl_context_cl_context(const fcl_context *ctx);
FCL_API cl_device_id fcl_context_cl_device(const fcl_context *ctx);
FCL_API cl_command_queue fcl_context_cl_queue(const fcl_context *ctx);

/** Caps the scratch memory one call may allocate (the naive algorithm's S/P
 *  buffers; P and dP in its backward). 0 restores the default, 40% of the
 *  device's global memory. The naive algorithm processes (batch, head)
 *  slices in chunks that fit. The float copies a naive bf16 call makes of
 *  its tensors are allocated besides, as large as the tensors in float.
 *  Applies to calls that start after it returns.
 *  @return FCL_SUCCESS or FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed). */
FCL_API fcl_status fcl_context_set_scratch_limit(fcl_context *ctx, uint64_t bytes);

/** Whether appends into a paged cache (fcl_kv_cache_append,
 *  fcl_attention_forward_kvcache) check the block-table entries they write
 *  through: 1 (the default) reads them back before anything is enqueued
 *  and refuses an entry outside the pool with FCL_ERROR_INVALID_ARGUMENT,
 *  the cache untouched. The read waits for the context's queue, a sync
 *  per append; an engine that keeps its table valid may turn it off (0):
 *  a row whose entry is outside the pool is then left unwritten, without
 *  a status, and no other page is touched. The forwards never read the
 *  table on the host (a check would read every page of the call and wait):
 *  their kernels clamp an entry into the pool, so a bad one reads a wrong
 *  page, never outside the pools. Applies to calls that start after it
 *  returns.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed,
 *          enable not 0 or 1). */
FCL_API fcl_status fcl_context_set_block_table_checks(fcl_context *ctx, int enable);

/** Enables (1) or disables (0) I/O counting: the library's own kernels are
 *  then built with instrumentation that counts every global-memory element
 *  they load and store, reported in fcl_run_info.bytes_counted. Slower; for
 *  verifying the I/O model, not for timing. Requires 64-bit atomics.
 *  Applies to calls that start after it returns.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed,
 *          enable not 0 or 1), FCL_ERROR_UNSUPPORTED. */
FCL_API fcl_status fcl_context_set_count_io(fcl_context *ctx, int enable);

/* ------------------------------------------------------------------------ */
/* Attention                                                                */
/* ------------------------------------------------------------------------ */

/** Storage type of Q, K, V, O and the gradients (LSE is always float).
 *  Loads widen to float exactly; stores round to nearest even. Neither
 *  16-bit type needs cl_khr_fp16 for the flash algorithm (f16 goes through
 *  vload_half/vstore_half, bf16 through bit operations).
 *  The naive algorithm runs f16 with CLBlast's half-precision GEMMs (S and
 *  P stored in half, products accumulated in half, alpha = scale rounded to
 *  half), which exist only on devices with cl_khr_fp16: elsewhere a naive
 *  f16 call returns FCL_ERROR_UNSUPPORTED. It runs bf16, for which no
 *  OpenCL BLAS has a GEMM, by widening Q, K, V (and dO) to float copies,
 *  running its f32 path on them (S and P in float) and rounding the outputs
 *  to bf16: the same inputs exactly, a baseline on every device, and the
 *  conversions counted in its bytes. */
typedef enum fcl_dtype {
  FCL_DTYPE_F32 = 0,
  FCL_DTYPE_F16 = 1,  /**< IEEE binary16, loaded with vload_half */
  FCL_DTYPE_BF16 = 2, /**< bfloat16, rounded to nearest even on store */
} fcl_dtype;

/** @return the size in bytes of one element of `dtype`, 0 if invalid. */
FCL_API size_t fcl_dtype_size(fcl_dtype dtype);

/** @return "f32", "f16", "bf16", or "?" for values outside the enum. */
FCL_API const char *fcl_dtype_name(fcl_dtype dtype);

typedef enum fcl_algo {
  /** Tiled, never writes S or P to global memory. */
  FCL_ALGO_FLASH = 0,
  /** S = scale*QK^T and P = softmax(S) in global memory; GEMMs by CLBlast. */
  FCL_ALGO_NAIVE = 1,
} fcl_algo;

/** @return "flash", "naive", or "?". */
FCL_API const char *fcl_algo_name(fcl_algo algo);

/** How a KV cache keeps K and V (fcl_attention_desc.kv_dtype): as the
 *  query (FCL_KV_AS_DTYPE), or in one of four quantized forms that a decode
 *  reads in a half or a quarter of the bytes. Q, O, LSE and the arithmetic
 *  keep `dtype` and float; the kernels widen each K and V element to float
 *  as it loads (cl/kvquant.h holds the format, for the library's host code
 *  and kernels alike).
 *
 *  A K or V "row" is the head_dim elements of one (entry, token, head).
 *  In the quantized forms the k and v layouts (fcl_tensor_layout) count
 *  BYTES, not elements: a row starts at offset + b batch_stride +
 *  t seq_stride + h head_stride bytes and is fcl_kv_row_bytes() bytes
 *  long; all-zero strides mean rows packed back to back,
 *  [batch or pages][seqlen or page_size][heads_kv][row]. The offset and
 *  strides must be even (the int forms' f16 scales are 2-byte aligned).
 *
 *  The block forms (Q8_0, Q4_0) keep each block of 32 consecutive elements
 *  of a row (head_dim must be a multiple of 32, else the calls return
 *  FCL_ERROR_UNSUPPORTED) as one f16 scale d (IEEE binary16, little-endian,
 *  2 bytes) followed by the block's values: the scale beside its values,
 *  as llama.cpp's q8_0/q4_0, so that a cache is one buffer per tensor that
 *  pages, strides and block tables address exactly as an f16 cache, and a
 *  block's scale arrives with its values in the same cache lines.
 *    - FCL_KV_Q8_0: 34 bytes a block: d, then 32 int8 q_i (two's complement,
 *      element i of the block at byte 2 + i). Element = q_i * d.
 *    - FCL_KV_Q4_0: 18 bytes a block: d, then 16 bytes; byte j holds element
 *      2j in its low nibble and element 2j + 1 in its high nibble, each as
 *      u = q + 8 (0..15). Element = (u - 8) * d.
 *  Written by fcl_kv_cache_append (and readable from any writer): for a
 *  block of 32 inputs x (in `dtype`, widened to float), amax = max |x_i|,
 *  d = f16(min(amax * r, 65504)) with r the float nearest 1/127 (Q8_0) or
 *  1/7 (Q4_0), f16() rounding to nearest even, then raised to the next f16
 *  value where d * 127 (7) < amax (the f16 rounding, coarse for subnormal
 *  scales, would otherwise saturate the largest element); then q_i = x_i / d rounded
 *  to nearest, ties to even (computed exactly), saturated to [-127, 127]
 *  (Q8_0) or [-7, 7] (Q4_0); d = 0 gives q = 0. So |x_i - q_i d| <= d / 2
 *  unless amax exceeds 127 * 65504 (Q8_0) or 7 * 65504 (Q4_0), where the
 *  values saturate. A block holding a NaN or an infinity is written with
 *  d = NaN (0x7e00) and q = 0: it reads as NaN, and so does every output
 *  row that sees it. (Readers take every code: int8 -128, nibble 0.)
 *  - FCL_KV_FP8_E4M3 and FCL_KV_FP8_E5M2: one byte an element, element c of
 *    the row at byte c, times the per-tensor float scale (k_scale,
 *    v_scale), as vLLM keeps fp8 caches. E4M3 is OCP's E4M3FN: sign, 4
 *    exponent bits (bias 7), 3 mantissa bits, subnormals, no infinities,
 *    S.1111.111 NaN, largest finite 448. E5M2: sign, 5 exponent bits (bias
 *    15), 2 mantissa bits (IEEE binary16's top byte): subnormals,
 *    infinities, NaN, largest finite 57344. Written by the append as
 *    fp8(x * (1 / scale)), 1 / scale rounded to float, then rounded to
 *    nearest even; magnitudes beyond the largest finite value, infinities
 *    included, saturate to it (+-448, +-57344); NaN is written NaN (0x7f,
 *    0x7e with the sign) and reads as NaN.
 *  The backward refuses a quantized kv_dtype (FCL_ERROR_UNSUPPORTED). */
typedef enum fcl_kv_dtype {
  FCL_KV_AS_DTYPE = 0,    /**< K and V in fcl_attention_desc.dtype */
  FCL_KV_Q8_0 = 1,        /**< int8, blocks of 32 with an f16 scale: 34 bytes / 32 */
  FCL_KV_Q4_0 = 2,        /**< int4, blocks of 32 with an f16 scale: 18 bytes / 32 */
  FCL_KV_FP8_E4M3 = 3,    /**< fp8 E4M3FN and a per-tensor float scale */
  FCL_KV_FP8_E5M2 = 4,    /**< fp8 E5M2 and a per-tensor float scale */
} fcl_kv_dtype;

/** @return "as-dtype", "int8", "int4", "fp8e4m3", "fp8e5m2", or "?". */
FCL_API const char *fcl_kv_dtype_name(fcl_kv_dtype kv_dtype);

/** @return the bytes of one K or V row of head_dim elements kept as
 *  kv_dtype (FCL_KV_AS_DTYPE: in dtype), 0 for an invalid kv_dtype or
 *  dtype, or a head_dim the form does not take (not a multiple of 32 for
 *  the block forms). */
FCL_API size_t fcl_kv_row_bytes(fcl_kv_dtype kv_dtype, fcl_dtype dtype, size_t head_dim);

/** Where a tensor's elements lie in its buffer, counted in elements of its
 *  storage type (a quantized cache's k and v count bytes: fcl_kv_dtype): element (b, t, h, c) — batch entry, token, head, column —
 *  is at offset + b * batch_stride + t * seq_stride + h * head_stride + c,
 *  so head_dim is contiguous and anything else may be strided, e.g. a
 *  PyTorch [B, H, N, d] view (seq_stride d, head_stride N d) or one of the
 *  three views of a packed QKV buffer [B, N, 3, H, d] (offsets 0, H d and
 *  2 H d; seq_stride 3 H d, head_stride d). All three strides 0 (what
 *  fcl_attention_desc_init sets) mean the packed layout
 *  [batch][seqlen][heads][head_dim], whatever the offset. Strides must map
 *  every element to its own address (no two elements of a view overlap);
 *  with ragged batches t counts the tokens of all sequences and
 *  batch_stride must be 0. */
typedef struct fcl_tensor_layout {
  size_t offset;
  size_t batch_stride, seq_stride, head_stride;
} fcl_tensor_layout;

/** The problem. Fill it with fcl_attention_desc_init(), then adjust.
 *
 *  The descriptor grows: a later version appends fields, and a program
 *  built against an earlier header keeps working, because
 *  fcl_attention_desc_init records in struct_size how much of it the
 *  caller knows and the library gives every field past that its default.
 *  Always start from fcl_attention_desc_init (a struct_size of 0 is
 *  refused); fields a newer header added that this library does not know
 *  must be zero.
 *
 *  The mask is flash-attn's: query i of a sequence of Nq queries and Nk
 *  keys sees key j iff i + Nk - Nq - window_left <= j <=
 *  i + Nk - Nq + window_right, a bound of -1 being none; causal is
 *  window_right = 0, bottom-right aligned. A query that sees no key
 *  outputs zeros, LSE = -INFINITY (with sinks: its head's sink) and zero
 *  gradients. Logits are
 *  l = scale q.k, then softcap * tanh(l / softcap) when softcap > 0, then
 *  l - slope_h * |i + Nk - Nq - j| with ALiBi slopes. */
typedef struct fcl_attention_desc {
  size_t struct_size;  /**< sizeof the caller's fcl_attention_desc: leave as init set it */
  size_t batch;     /**< >= 1 (ragged: the number of sequences) */
  size_t heads_q;   /**< query heads, a multiple of heads_kv */
  size_t heads_kv;  /**< key/value heads, >= 1 */
  size_t seqlen_q;  /**< >= 1; ragged: at least the longest query sequence */
  size_t seqlen_k;  /**< >= 1; ragged: at least the longest key sequence */
  size_t head_dim;  /**< 1 .. FCL_MAX_HEAD_DIM */
  fcl_dtype dtype;  /**< storage type of Q, K, V, O and the gradients */
  int causal;       /**< 0 or 1: window_right = 0 (window_right must be -1 or 0) */
  /** Logits are scale * q.k: finite, > 0 and at most FCL_MAX_SCALE. */
  float scale;
  /* ---- since 0.3 -------------------------------------------------------- */
  int window_left;   /**< keys left of the diagonal a query sees, -1 (default): all */
  int window_right;  /**< keys right of the diagonal a query sees, -1 (default): all */
  /** > 0: logits are soft-capped at +-softcap; 0 (default): not. Finite.
   *  As in flash-attn the cap comes before the mask and applies to every
   *  logit, infinite ones too: +-inf become +-softcap ("Non-finite inputs"
   *  at fcl_attention_forward). */
  float softcap;
  /** ALiBi slopes, floats of the call's OpenCL context, [heads_q] or with
   *  alibi_per_batch [batch][heads_q]; NULL (default): no ALiBi. */
  cl_mem alibi_slopes;
  int alibi_per_batch;  /**< 0 or 1, as above */
  /** Ragged batches (flash-attn's varlen): batch + 1 prefix sums of the
   *  sequences' query (and key) lengths, read on the host during the call:
   *  sequence b is tokens [cu[b], cu[b + 1]) of q, o, dout and dq (of k, v,
   *  dk and dv), which are packed [tokens][heads][head_dim] by default;
   *  cu[0] = 0, non-decreasing (empty sequences allowed), each length at
   *  most seqlen_q (seqlen_k), the total at most INT_MAX. LSE is then
   *  [heads_q][total query tokens]. cu_seqlens_k NULL with cu_seqlens_q
   *  set: keys are ragged alike. Both NULL (default): every sequence is
   *  seqlen_q x seqlen_k. */
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  /** Each tensor's layout; zeros (default): packed. dq, dk, dv are the
   *  outputs of the backward, dout its input. */
  fcl_tensor_layout q, k, v, o, dout, dq, dk, dv;
  /** A KV cache's lengths (flash-attn's cache_seqlens): batch int32s, read
   *  on the host during the call; sequence b's keys are the first
   *  seqlens_k[b] (0 to seqlen_k, 0 allowed: zeros and LSE -inf) of its
   *  seqlen_k rows of K and V, which keep their layouts (seqlen_k is the
   *  capacity), and its queries are the last seqlen_q positions of them
   *  (the causal mask aligns to seqlens_k[b]). Not with cu_seqlens_q;
   *  the forward only (the backward returns FCL_ERROR_UNSUPPORTED). NULL
   *  (default): every sequence has seqlen_k keys. */
  const int32_t *seqlens_k;
  /** A paged KV cache (vLLM's PagedAttention, flash-attn's block_table):
   *  K and V are pools of num_pages pages of page_size tokens each, and
   *  block_table, int32 [batch][pages_per_seq] of the call's OpenCL
   *  context, names sequence b's pages in order: its key t is token
   *  t % page_size of page block_table[b pages_per_seq + t / page_size].
   *  The k and v layouts then describe the pools: batch_stride is the
   *  stride between pages, seq_stride between a page's tokens (all zero:
   *  packed [num_pages][page_size][heads_kv][head_dim]). seqlen_k is the
   *  capacity, at most pages_per_seq page_size; seqlens_k gives the
   *  lengths. page_size a multiple of FCL_PAGE_SIZE_MULTIPLE; the table's
   *  entries must be below num_pages: the forwards' kernels clamp them into
   *  the pool (a bad entry reads a wrong page, never outside the buffers),
   *  and an append refuses one it would write through
   *  (fcl_context_set_block_table_checks).
   *  The forward only, not with cu_seqlens. NULL (default): not paged,
   *  and the three sizes below must be 0. */
  cl_mem block_table;
  size_t page_size;      /**< tokens per page */
  size_t pages_per_seq;  /**< int32s per row of block_table */
  size_t num_pages;      /**< pages in each of the K and V pools, 1 .. INT_MAX */
  /* ---- attention sinks ------------------------------------------------- */
  /** Attention sinks (gpt-oss, FlashAttention-4's learnable_sink): floats
   *  [heads_q] of the call's OpenCL context, read by the forward and the
   *  backward; a logit s_h per query head that joins every row's softmax
   *  denominator and has no value: row i's probabilities are
   *  exp(l_ij - m) / (exp(s_h - m) + sum_j exp(l_ij - m)). O has no sink
   *  term; LSE includes it (LSE = log(exp(s_h) + sum_j exp(l_ij))), so a
   *  row that sees no key outputs zeros and LSE = s_h. Every path takes
   *  them: prefill, ragged, windows, KV caches (paged too) and split-KV
   *  forwards, whose merge adds the sink once. The backward reads the same
   *  buffer and the forward's LSE (which includes the sink). A sink of
   *  -INFINITY is no sink; a NaN or +INFINITY sink makes that head's rows'
   *  O and LSE NaN (the library does not read the buffer on the host, so
   *  it cannot refuse them), and the other heads are unaffected. A buffer
   *  smaller than heads_q floats is FCL_ERROR_BUFFER_TOO_SMALL, with
   *  nothing written. NULL (default): no sinks. */
  cl_mem sinks;
  /** The backward's gradient of the sinks, an output of
   *  fcl_attention_backward: floats [heads_q], dsinks[h] = -sum over the
   *  batch and the rows of head h of exp(s_h - LSE_row) D_row, D =
   *  rowsum(dO * O); written completely (no accumulation into it), by a
   *  fixed-order sum: the same bits run after run. Requires sinks; the
   *  flash algorithm only (the naive backward returns
   *  FCL_ERROR_UNSUPPORTED). Ignored by the forward. NULL (default): not
   *  wanted (dQ, dK and dV are computed as with it). */
  cl_mem dsinks;
  /* ---- quantized KV caches (fcl_kv_dtype) ------------------------------- */
  /** How K and V are stored: FCL_KV_AS_DTYPE (0, default): in `dtype`, as
   *  Q is; else one of the quantized forms of fcl_kv_dtype, whose k and v
   *  layouts then count bytes (see there). The forward only. */
  fcl_kv_dtype kv_dtype;
  /** The fp8 forms' per-tensor scales: a K (V) element is its fp8 value
   *  times k_scale (v_scale). Finite and > 0; 0 (default): 1. Ignored by
   *  the other forms. */
  float k_scale, v_scale;
  /* ---- batch invariance ---- */
  /** 1: batch-invariant forward (FA4's seqlen_k_per_split, FlashInfer's
   *  fixed_split_size): a sequence's O rows and LSE do not depend on the
   *  rest of the call. Every choice that orders a row's floating-point
   *  operations is then made from the row's own problem (its keys,
   *  head_dim, dtype, mask, scale), the call's query rows and the device's
   *  kind, never from the batch size, the other sequences, paging or the
   *  compute-unit count:
   *  - keys split in FCL_BATCH_INVARIANT_SPLIT_KEYS-key ranges (as many as
   *    the longest sequence needs; a shorter sequence's ranges past its
   *    keys weigh nothing) where a block has at most
   *    FCL_BATCH_INVARIANT_SPLIT_ROWS query rows
   *    (FCL_BATCH_INVARIANT_SPLIT_ROWS_WIDE on the matrix decode's wide
   *    kernel), else not split; merged
   *    by the merge kernel, one lane group a row, in split order;
   *  - (key tiles: each family's own, paged or not, since the kernels
   *    look pages up within a tile and a paged plan is the contiguous one)
   *  - the SIMT forward's tile chosen before its work-group shrinks to
   *    the rows and the device, the MMA forward's work-group not shrunk,
   *    the SIMT decode kernel's slices of head_dim 8 elements at any
   *    rows (its lanes order a row's sums; the planner takes 4 beyond 4
   *    rows a block, for registers);
   *  - on CPU devices the CPU forward for every call, whatever its rows;
   *  - no tuned plans (they are chosen per bucket of whole calls).
   *  Invariant, on one device with one library version: a sequence's rows
   *  against the batch size, the other sequences (contents, lengths,
   *  padded or ragged placement), a KV cache's capacity (seqlen_k) and
   *  seqlens_k, paging (any page size) and the compute units; on a CPU
   *  also a decode step's row against the same row of a prefill chunk of
   *  up to FCL_BATCH_INVARIANT_SPLIT_ROWS rows over the same keys.
   *  Not invariant: across the kernel families a GPU picks from the call's
   *  query rows (seqlen_q, max_seqlen_q of a ragged batch, times the packed
   *  heads: a decode step runs a decode kernel, a prefill the MMA or SIMT
   *  one), nor across the split rule's bound, so a decode step's row
   *  differs from a prefill's in its last bits there (docs/design.md,
   *  "Batch invariance", measures it); across devices, drivers and library
   *  versions; in a call whose longest sequence has more than
   *  FCL_MAX_SPLITS x FCL_BATCH_INVARIANT_SPLIT_KEYS keys (the split size
   *  doubles until the splits fit); under a tiling hint
   *  (fcl_context_set_flash_tiling), which decides what it names. The
   *  backward ignores the flag (it is deterministic, without atomics).
   *  Cost (docs/performance.md, "Batch invariance"): splits a short call
   *  no longer gets and a large batch no longer avoids, the merge
   *  kernel's launch, smaller tiles in the SIMT and CPU families;
   *  measured on an H100: decode B 8 x 8k 1.08x the time, prefill 1.00x.
   *  0 (default): the planner chooses for speed from the whole call. The
   *  mode is asked for: most calls want the speed, and every call is
   *  deterministic without it (the same call, the same bits). */
  int batch_invariant;

  /* ---- a value head size of its own ---- */
  /** Columns of V, O, dO and dV (and of their layouts' rows): 1 ..
   *  FCL_MAX_HEAD_DIM; 0 (default): head_dim. Q, K, dQ and dK keep
   *  head_dim. DeepSeek's latent attention prefills at (192, 128) and
   *  decodes at (576, 512), with V a view of K's first 512 columns (the
   *  same buffer and layout as k: the decode kernel then reads each key
   *  row once). FCL_ALGO_NAIVE takes any width, forward and backward. Of
   *  the flash kernels: widths over FCL_MAX_TILED_HEAD_DIM run on the decode
   *  kernels' forward: on matrix instructions for f16 and bf16 where they
   *  run natively (FCL_FLASH_KERNEL_DECODE_MMA, blocks of 32 packed rows),
   *  else FCL_FLASH_KERNEL_DECODE (on every device); two widths
   *  within it on the SIMT and CPU kernels (the planner's choice for a
   *  prefill, and for every call on a CPU), forward and backward, unsplit,
   *  from contiguous K and V, and on the decode kernels' forward (the
   *  planner's choice for a decode-shaped call on a GPU, paged and split
   *  too). The MMA kernels, fcl_kv_cache_append and a quantized cache
   *  (kv_dtype) take head_dim_v equal to head_dim, and refuse another with
   *  FCL_ERROR_UNSUPPORTED, writing nothing. */
  size_t head_dim_v;
} fcl_attention_desc;

/** Keys of one split in the batch-invariant mode
 *  (fcl_attention_desc.batch_invariant): a multiple of every key tile,
 *  enough keys that a split's partial state costs little to write and
 *  merge, few enough that a single long sequence still spreads over the
 *  device (32k keys: 64 splits). */
#define FCL_BATCH_INVARIANT_SPLIT_KEYS 512

/** The most query rows a block of a call may have (seqlen_q, or
 *  max_seqlen_q of a ragged batch, times the packed heads) for the
 *  batch-invariant mode to split its keys: decode steps, speculative rows
 *  and short chunks, whose blocks alone would leave a device idle; a
 *  longer prefill has blocks enough and is not split (its partial states
 *  would cost as much scratch as O for every split). */
#define FCL_BATCH_INVARIANT_SPLIT_ROWS 64

/** The same for the decode kernel on matrix instructions beyond 128
 *  columns (FCL_FLASH_KERNEL_DECODE_MMA's wide kernel): DeepSeek's decode
 *  step, 128 query heads of one KV head, whose four blocks of 32 rows
 *  alone would leave a device idle. */
#define FCL_BATCH_INVARIANT_SPLIT_ROWS_WIDE 128

/** What a paged cache's page_size must be a multiple of
 *  (fcl_attention_desc.block_table): the most keys the flash kernels read
 *  through one page lookup (a key row, or a run of 16 keys). A key tile
 *  may span pages, so a paged forward runs the tiles it would run
 *  contiguous, whatever the page size. */
#define FCL_PAGE_SIZE_MULTIPLE 16

/** The largest scale a descriptor may hold: FLT_MAX / log2(e), rounded
 *  down (about 2.36e38). The flash kernels take exponentials as
 *  exp2(scale * log2(e) * x), and scale * log2(e) must be a finite float;
 *  a larger scale is refused with FCL_ERROR_INVALID_ARGUMENT by every
 *  function that takes a descriptor, whatever the algorithm. */
#define FCL_MAX_SCALE 2.35865744e+38f

/** The largest head_dim (and head_dim_v) any algorithm accepts: DeepSeek's
 *  latent attention decodes at (576, 512). FCL_ALGO_NAIVE and the decode
 *  kernels (FCL_FLASH_KERNEL_DECODE; FCL_FLASH_KERNEL_DECODE_MMA in f16 and
 *  bf16) take up to it; the other flash kernels up to
 *  FCL_MAX_TILED_HEAD_DIM. Devices with little local memory may
 *  support less (FCL_ERROR_UNSUPPORTED says how much). */
#define FCL_MAX_HEAD_DIM 576

/** The largest head_dim (and head_dim_v) of the flash kernels that keep
 *  tiles of K and V rows or a whole row per work-item (SIMT, MMA, the
 *  decode kernel on matrix instructions, CPU, and every backward): a wider
 *  one is refused by their planners with FCL_ERROR_UNSUPPORTED. */
#define FCL_MAX_TILED_HEAD_DIM 256

/** Fills `desc` with the given shape and the defaults: struct_size, f32
 *  storage, no mask (windows -1), no softcap or ALiBi, not ragged, packed
 *  layouts, scale = 1/sqrt(head_dim). NULL desc is a no-op. */
FCL_API void fcl_attention_desc_init(fcl_attention_desc *desc, size_t batch,
                             size_t heads_q, size_t heads_kv, size_t seqlen_q,
                             size_t seqlen_k, size_t head_dim);

/** The bytes each buffer of an attention call must hold at least: up to
 *  the last element its layout touches. */
typedef struct fcl_buffer_sizes {
  size_t q, k, v, o;        /**< the forward's tensors (in the storage type; k and v
                                 in kv_dtype's form, scales included) */
  size_t lse;               /**< LSE, floats */
  size_t dout, dq, dk, dv;  /**< the backward's */
  size_t alibi_slopes;      /**< floats; 0 without ALiBi */
} fcl_buffer_sizes;

/** The buffer sizes of `desc`, in bytes, after validating it as the
 *  attention calls do (the same statuses and reasons), so that a caller
 *  can allocate, or refuse a shape, before touching a device. Every size
 *  is computed without overflow: a shape whose tensors would not fit in
 *  size_t is FCL_ERROR_INVALID_SHAPE. On failure a reason is written to
 *  `why` as fcl_plan_flash does, and `out` is not written.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT (desc or out NULL, a bad
 *          dtype, causal or scale), FCL_ERROR_INVALID_SHAPE,
 *          FCL_ERROR_UNSUPPORTED (head_dim over FCL_MAX_HEAD_DIM). */
FCL_API fcl_status fcl_attention_buffer_sizes(const fcl_attention_desc *desc,
                                              fcl_buffer_sizes *out, char *why,
                                              size_t why_len);

typedef enum fcl_pass {
  FCL_PASS_FORWARD = 0,
  FCL_PASS_BACKWARD = 1,
} fcl_pass;

/** The families of flash kernels: two with a forward and a backward, and
 *  a forward for decode. SIMT (cl/flash_fwd.cl, cl/flash_bwd.cl) runs anywhere: each work-item
 *  computes dot products with fused multiply-adds. MMA
 *  (cl/flash_fwd_mma.cl, cl/flash_bwd_mma.cl) gives each warp of 32
 *  work-items 16 rows and multiplies with NVIDIA's warp-level matrix
 *  instructions (tensor cores, sm_80 and later; f32 as 3xTF32, at f32
 *  accuracy, in both passes); on other devices it emulates them
 *  through local memory, correct but slow, for tests. It takes head_dim up
 *  to 128 that is a multiple of 8. DECODE (cl/flash_fwd_decode.cl) is a
 *  forward for at most FCL_DECODE_MAX_ROWS query rows per block (packed
 *  heads' slots: one new token of a GQA group, a few speculative ones):
 *  its work-items share the rows and divide the keys, so that a long
 *  cache streams at the memory's speed. It needs head_dim and every view
 *  a multiple of 4 elements. The planner takes it on GPUs (its dot products
 *  summed by sub-group shuffles where the device has them, NVIDIA and AMD,
 *  else through local memory); on
 *  CPUs a hint asks for it. DECODE_MMA (cl/flash_fwd_decode_mma.cl) is the
 *  same forward on the matrix instructions, for f16 and bf16 storage,
 *  head_dim up to 128 and at most FCL_DECODE_MMA_MAX_ROWS rows a block:
 *  each warp holds the block's rows and takes its own keys; beyond 128
 *  columns (cl/flash_fwd_decode_wide.cl: DeepSeek's 576 and 512) blocks of
 *  32 rows (any number of them), whose warps share each tile of keys and
 *  each own a slice of O's columns. The planner
 *  takes it where the instructions run natively (NVIDIA sm_80 and later);
 *  elsewhere a hint runs it emulated, for tests. CPU (cl/flash_fwd_cpu.cl,
 *  cl/flash_bwd_cpu.cl) is a forward and a backward written for CPU cores:
 *  one work-item a work-group, 16 rows a vector, the rows a block keeps
 *  transposed so that no tile is. The planner takes it on CPU devices
 *  (the forward from 16 rows that do not pack heads; decode keeps SIMT);
 *  elsewhere a hint runs it. A head_dim_v of its own, or head_dim beyond
 *  FCL_MAX_TILED_HEAD_DIM (DeepSeek's 576 and 512), runs on the decode
 *  kernels alone, forward: DECODE on any device, in blocks of up to 8 rows
 *  (4 beyond 256) however many rows, DECODE_MMA in blocks of 32 (two
 *  widths up to 128 and beyond, f16 and bf16 from a cache in the storage
 *  type); the others refuse it. */
typedef enum fcl_flash_kernel {
  FCL_FLASH_KERNEL_AUTO = 0,  /**< in a tiling hint: the planner's choice */
  FCL_FLASH_KERNEL_SIMT = 1,
  FCL_FLASH_KERNEL_MMA = 2,
  FCL_FLASH_KERNEL_DECODE = 3,  /**< forward only */
  FCL_FLASH_KERNEL_DECODE_MMA = 4,  /**< forward only */
  FCL_FLASH_KERNEL_CPU = 5,  /**< forward and backward */
  /** Forward only, by a hint only (the planner never takes it): Hopper's
   *  warpgroup MMA (cl/flash_fwd_wgmma.cl), 64 rows a warpgroup and one to
   *  four warpgroups a block (wg_size 128 to 512; 384 unless a hint says
   *  otherwise) sharing its K and V tiles; f16/bf16, head_dim up to 128. Built for sm_90a on NVIDIA cc 9.0
   *  (mma.sync where that build is refused); elsewhere emulated, for tests. */
  FCL_FLASH_KERNEL_WGMMA = 6,
} fcl_flash_kernel;

/** How many fcl_flash_kernel values there are (AUTO included). */
#define FCL_FLASH_KERNELS 7

/** The most query rows (packed: slots) a block of the decode kernel holds
 *  (FCL_FLASH_KERNEL_DECODE). */
#define FCL_DECODE_MAX_ROWS 8

/** The most query rows (packed: slots) a block of the decode kernel on
 *  matrix instructions holds (FCL_FLASH_KERNEL_DECODE_MMA): one fragment
 *  of 16 rows. */
#define FCL_DECODE_MMA_MAX_ROWS 16

/** How a split forward's partial states become the caller's O and LSE
 *  (fcl_plan.merge). */
typedef enum fcl_split_merge {
  FCL_SPLIT_MERGE_AUTO = 0,      /**< in a tiling hint: the planner's choice; in a plan
                                      without splits */
  FCL_SPLIT_MERGE_KERNEL = 1,    /**< fcl_merge_states' kernel, a second launch */
  /** In the split launch: each split's work-group counts itself done, and
   *  the one that finishes a block's last split merges that block's
   *  splits (a device-wide fence before the count; nothing waits). The
   *  decode kernels only. */
  FCL_SPLIT_MERGE_LAST_SPLIT = 2,
} fcl_split_merge;

/** An fcl_split_merge's name: "auto", "kernel", "last-split", or "unknown"
 *  for any other value. Never NULL. */
FCL_API const char *fcl_split_merge_name(unsigned merge);

/** An fcl_flash_kernel's name: "auto", "simt", "mma", "decode",
 *  "decode-mma", "cpu", or "unknown" for any other value. Never NULL. */
FCL_API const char *fcl_flash_kernel_name(unsigned kernel);

/** The tiling a flash kernel runs with: the C form of its -D options.
 *  Forward: a work-group keeps block_q query rows in registers and streams
 *  tiles of block_k keys through local memory. Backward: both kernels (dK/dV
 *  and dQ) share one tiling, with block_q = block_k = wg_size /
 *  threads_per_row * rows_per_thread; the dK/dV kernel keeps block_k keys
 *  in registers and streams tiles of block_q queries, the dQ kernel keeps
 *  block_q queries and streams tiles of block_k keys. */
typedef struct fcl_plan {
  unsigned block_q;          /**< query rows per work-group or tile (Br) */
  unsigned block_k;          /**< keys per local-memory tile or work-group (Bc) */
  unsigned wg_size;          /**< work-items per work-group */
  unsigned threads_per_row;  /**< work-items sharing one query row's head_dim */
  unsigned rows_per_thread;  /**< query rows each work-item owns */
  unsigned head_dim_padded;  /**< head_dim rounded up to the slices' width */
  size_t local_bytes;        /**< local memory per work-group */
  /** Bytes of one element of the local-memory tiles: 4 (floats, converted
   *  once as they are loaded) or, for f16 and bf16 storage, 2 (the storage
   *  type, converted at every read from the tile; twice the rows fit). The
   *  planner uses 2 only where local memory, not registers, limits the
   *  tile and 2-byte elements let a larger one fit. */
  unsigned tile_elem_size;
  /** fcl_flash_kernel of the pass. An MMA plan has rows_per_thread = 2
   *  (16 rows per warp; in a forward whose hint asks for it, 4: two 16-row
   *  tiles per warp, each K/V fragment read once for both),
   *  threads_per_row = 4 (a row's four lanes of a warp) or, in the
   *  backward only, 8 (a pair of warps shares 16 rows, each holding half
   *  of head_dim; for head_dim that pads to a multiple of 32), and
   *  block_q = wg_size * rows_per_thread / threads_per_row; its backward
   *  has block_k = block_q. A DECODE plan has block_q rows in every work-item
   *  (rows_per_thread = block_q), threads_per_row work-items sharing each
   *  key (head_dim_padded / threads_per_row elements each), and block_k
   *  keys per step, block_k * threads_per_row / wg_size per key group. A
   *  DECODE_MMA plan has block_q rows (at most 16) in every warp,
   *  threads_per_row = 4 and rows_per_thread = 2 (the MMA layout), and
   *  block_k = 16 keys per warp of the work-group per step. A CPU plan
   *  has one work-item (wg_size = threads_per_row = 1) that owns block_q
   *  = 16 * rows_per_thread rows (rows_per_thread 16-row vectors),
   *  head_dim_padded a multiple of 16, no local memory, and block_k = 16
   *  (forward) or block_q (backward: keys kept by dK/dV, tiles of dQ). */
  unsigned kernel;
  /** The forward's key splits (split-KV, Flash-Decoding): each (sequence,
   *  head, query block) runs as `splits` work-groups over consecutive
   *  ranges of whole key tiles, each writing a partial O and LSE to
   *  scratch, merged exactly as fcl_plan.merge says. 1: not
   *  split. The planner splits only where the unsplit grid would not
   *  fill the device: fewer work-groups than compute units; then into
   *  min(ceil(2 * compute_units / work-groups), ceil(seqlen_k / 256))
   *  ranges, at most FCL_MAX_SPLITS (the decode kernels, whose work-groups
   *  are few: 2 * compute_units / work-groups rounded down to a power of
   *  two, at most 64; a quantized cache on matrix instructions at up to 8
   *  rows a block, whose multiprocessor holds three work-groups: 3 *
   *  compute_units / work-groups, not rounded), each a whole number of
   *  tiles, and fewer if the keys run out. The backward is never split
   *  (1). In a tiling hint: the count wanted, which the keys' tiles may
   *  lower. The batch-invariant mode splits by a fixed key count instead
   *  (split_keys). */
  unsigned splits;
  /** Query heads whose rows one forward block packs (FA3's pack_gqa,
   *  flash-attn's seqlenq_ngroups_swapped): heads_q / heads_kv when the
   *  query rows of the heads sharing a KV head are one block's rows, so
   *  that each K and V tile is read once for all of them; 1 when a block
   *  is one head's rows. The planner packs where heads_q > heads_kv,
   *  seqlen_q <= FCL_PACK_GQA_MAX_SEQLEN (decode, speculative rows, a
   *  chunk's tail; ragged: the longest query sequence), without ALiBi. The
   *  backward never packs (1). In a tiling hint: 0 the planner's choice,
   *  1 never, heads_q / heads_kv always (where it can: else
   *  FCL_ERROR_UNSUPPORTED). */
  unsigned packed_heads;
  /** In fcl_run_info: 1 when the plan is the context's tuned plan for the
   *  problem's bucket (fcl_context_set_tuning_dir), 0 when the planner's
   *  rules or a tiling hint made it. Ignored in a hint. */
  unsigned tuned;
  /** fcl_split_merge of a split forward; AUTO (0) when not split. The
   *  planner merges in the split launch (LAST_SPLIT) with the decode
   *  kernels, on NVIDIA's driver and on CPUs (where its fence and count
   *  were shown to hold: docs/design.md, "Split-KV"), for a call that reads
   *  at most 256 KiB of K and V per compute unit (one whose second launch
   *  costs the host more than the merge costs the device), when a block's
   *  LSEs fit the kernel's local state (splits <= key groups x
   *  (head_dim_padded + 2)); else by the merge kernel. In a tiling hint:
   *  AUTO, or the one wanted (LAST_SPLIT with another kernel, or more
   *  splits than fit: FCL_ERROR_UNSUPPORTED). */
  unsigned merge;
  /* ---- batch invariance ---- */
  /** Keys of each split: 0 when the splits share seqlen_k evenly (whole
   *  tiles each); a fixed count in the batch-invariant mode
   *  (fcl_attention_desc.batch_invariant), splits then being as many as
   *  seqlen_k needs. Set by the planner; a tiling hint must leave it 0. */
  unsigned split_keys;
  /* ---- a value head size of its own ---- */
  /** head_dim_v rounded up to the slices' width where the descriptor gives
   *  V and O a width of their own (fcl_attention_desc.head_dim_v), the
   *  kernels' HEAD_DIM_V_MAX; 0 when it is head_dim (head_dim_padded
   *  serves both). Set by the planner; ignored in a tiling hint. */
  unsigned head_dim_v_padded;
  /* ---- the decode kernel's products ---- */
  /** 1 where a DECODE_MMA plan of at most 8 rows a block takes its products
   *  untransposed (S = Q K^T, two work-groups a multiprocessor) instead of
   *  transposed (S^T = K Q^T: fewer instructions and registers, three a
   *  multiprocessor); 0 otherwise. The planner sets it on native matrix
   *  instructions for an unsplit call of a 16-bit cache whose work-groups
   *  would leave the transposed kernel's last wave less than half full
   *  (docs/design.md, "The rules, measured"). Set by the planner; ignored
   *  in a tiling hint. */
  unsigned decode_untransposed;
  /* ---- the MMA forward's pipeline ---- */
  /** V tiles an MMA forward keeps in local memory: 2 where the next key
   *  tile's V is fetched as a tile starts, a whole tile ahead of its use
   *  (16-bit types, tiles of at most 64 keys; a third tile of local
   *  memory); 1 where each tile's V arrives while its S = Q K^T is
   *  computed. 0 in other kernels' plans. In a tiling hint: 0 the
   *  planner's choice (1 until timed), 1, or 2 (with block_k left 0 the
   *  tiles are then of at most 64 keys; f32, or a larger block_k:
   *  FCL_ERROR_UNSUPPORTED). Other families ignore it. */
  unsigned v_stages;
} fcl_plan;

/** The longest seqlen_q the planner packs query heads for
 *  (fcl_plan.packed_heads). */
#define FCL_PACK_GQA_MAX_SEQLEN 64

/** The most key splits a forward runs (fcl_plan.splits). */
#define FCL_MAX_SPLITS 256

/** Chooses the flash tiling for `desc` on a device with `limits` without
 *  touching any device: the same function the library uses at run time.
 *  `desc` is validated as fcl_attention_forward validates it, with the same
 *  statuses. On any failure a reason (the bad argument, or why the tiles
 *  cannot fit the device's local memory or work-group limit) is written to
 *  `why` when it is non-NULL and why_len > 0 (at most why_len bytes,
 *  NUL-terminated; "" on success). `plan` is written on success only.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT (limits, desc or plan
 *          NULL, pass not an fcl_pass, a bad dtype, causal or scale),
 *          FCL_ERROR_INVALID_SHAPE, FCL_ERROR_UNSUPPORTED (head_dim over
 *          FCL_MAX_HEAD_DIM, tiles that do not fit, a pass not planned yet). */
FCL_API fcl_status fcl_plan_flash(const fcl_device_limits *limits,
                          const fcl_attention_desc *desc, fcl_pass pass,
                          fcl_plan *plan, char *why, size_t why_len);

/** fcl_plan_flash under a tiling hint: the plan a context would run after
 *  fcl_context_set_flash_tiling(ctx, hint); NULL `hint` is fcl_plan_flash.
 *  @return as fcl_plan_flash, and as fcl_context_set_flash_tiling for a
 *          bad hint. */
FCL_API fcl_status fcl_plan_flash_hinted(const fcl_device_limits *limits,
                                         const fcl_attention_desc *desc, fcl_pass pass,
                                         const fcl_plan *hint, fcl_plan *plan, char *why,
                                         size_t why_len);

/** Most programs one flash pass builds (the backward: its preprocessing,
 *  and dK/dV with dQ). */
#define FCL_MAX_PASS_PROGRAMS 2

/** One OpenCL program the library builds for a flash pass. Its text is, in
 *  this order, the library's cl/params.h, cl/common.cl, cl/blocks.cl,
 *  `prelude` when not NULL, and `file` (all embedded in the library, and
 *  in the source tree's cl/ folder). */
typedef struct fcl_program_info {
  const char *file;          /**< the kernels' source, e.g. "flash_fwd.cl" */
  const char *prelude;       /**< a source compiled in front of it, or NULL */
  const char *kernels[2];    /**< the kernels built from it; kernels[1] NULL if one */
  /** Local memory per work-group the plan gives each kernel, which the
   *  library checks against CL_KERNEL_LOCAL_MEM_SIZE after the build; 0
   *  where it does not check. */
  size_t local_bytes;
  unsigned wg_size;          /**< work-items per work-group of its launches */
  char options[1024];        /**< the build options, exactly as passed to clBuildProgram */
} fcl_program_info;

/** The programs a flash `pass` of `desc` builds on a device with `limits`,
 *  from the plan fcl_plan_flash chooses, without touching any device: the
 *  same function the library builds from at run time. The forward is
 *  listed as called with an LSE buffer and without I/O counting, and with
 *  buffers the device placed (a quantized cache in memory the caller lent,
 *  CL_MEM_USE_HOST_PTR, at an address less aligned than its views
 *  builds its decode kernel for that address's load unit, KV_UNIT); the
 *  FLASHCL_BUILD_LOG environment variable's extra option is not included.
 *  Writes `*count` (at most FCL_MAX_PASS_PROGRAMS) entries to `out` on
 *  success; on failure neither is touched, and the reason is in `why` as
 *  for fcl_plan_flash. Thread-safe.
 *  @return as fcl_plan_flash; FCL_ERROR_INVALID_ARGUMENT also for `out` or
 *          `count` NULL. */
FCL_API fcl_status fcl_flash_programs(const fcl_device_limits *limits,
                                      const fcl_attention_desc *desc, fcl_pass pass,
                                      fcl_program_info out[FCL_MAX_PASS_PROGRAMS],
                                      unsigned *count, char *why, size_t why_len);

/** fcl_flash_programs for the plan of fcl_plan_flash_hinted (a forced
 *  kernel family, tiling or split count, as a tuner or an offline
 *  compiler check asks for). */
FCL_API fcl_status fcl_flash_programs_hinted(const fcl_device_limits *limits,
                                             const fcl_attention_desc *desc, fcl_pass pass,
                                             const fcl_plan *hint,
                                             fcl_program_info out[FCL_MAX_PASS_PROGRAMS],
                                             unsigned *count, char *why, size_t why_len);

/** Overrides the planner's flash tiling for this context, for tuning: the
 *  nonzero fields among block_k, wg_size, threads_per_row, rows_per_thread,
 *  tile_elem_size, kernel, splits, packed_heads, merge and v_stages of `hint` replace the
 *  planner's choices; the others stay the planner's (v_stages is the MMA forward's alone:
 *  other families ignore it). NULL restores the planner. A combination that
 *  does not fit the device makes later calls fail with
 *  FCL_ERROR_UNSUPPORTED, as does tile_elem_size = 2 with f32 storage.
 *  An MMA hint takes only block_k (a multiple of 16), wg_size (a power of
 *  two from 32 to 512), rows_per_thread (2; 4 in the forward) and, in the
 *  forward, v_stages besides; its
 *  threads_per_row and tile_elem_size are fixed. With kernel left 0, a hint that sets
 *  threads_per_row, rows_per_thread or tile_elem_size describes, and so
 *  selects, the SIMT kernel.
 *  The hint applies to both passes, kernel included. Their backwards have
 *  block_k = block_q: the SIMT backward derives both from the other fields
 *  (see fcl_plan) and so ignores block_k; the MMA backward takes a block_k
 *  as the work-group it implies (16 rows per warp), which a wg_size given
 *  too must match. threads_per_row = 8 exists for the SIMT kernels (the
 *  MMA forward keeps 4). Applies to calls that start after it returns.
 *  @return FCL_SUCCESS or FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed;
 *          threads_per_row not 1, 2, 4 or 8; rows_per_thread over 4;
 *          wg_size not a power of two up to 1024 (for
 *          FCL_FLASH_KERNEL_WGMMA: nor a multiple of 128) or not a multiple
 *          of threads_per_row; block_k over 128; tile_elem_size not 0, 2 or 4;
 *          kernel not an fcl_flash_kernel, splits over FCL_MAX_SPLITS, merge not
 *          an fcl_split_merge, v_stages over 2). */
FCL_API fcl_status fcl_context_set_flash_tiling(fcl_context *ctx, const fcl_plan *hint);

/** 1 when `hint` sets any field a tiling hint takes (block_k, wg_size,
 *  threads_per_row, rows_per_thread, tile_elem_size, kernel, splits,
 *  packed_heads, merge, v_stages): a context with it runs that hint's plan
 *  instead of a tuned one; 0 when it sets none, or is NULL (the planner's
 *  choice). */
FCL_API int fcl_tiling_hint_given(const fcl_plan *hint);

/** Where a context's tuned plans come from (fcl_context_tuning). */
typedef struct fcl_tuning_info {
  int enabled;          /**< tuned plans are used (fcl_context_use_tuned_plans) */
  unsigned plans;       /**< buckets with a tuned plan; 0: the rules plan every call */
  /** The database file read, or "the library's database N" for one built
   *  into the library; "" when none is this device's. */
  char source[1024];
  /** The file name flashcl-tune writes and a context reads in a tuning
   *  folder for this device: its platform and name, lower-case, ".json". */
  char file_name[320];
} fcl_tuning_info;

/** Tuned plans. flashcl-tune times the tilings the planner allows on a
 *  device, per problem bucket (pass, storage type, head_dim class, causal,
 *  small or large), and writes the winners to a JSON database for that
 *  device (keyed by platform, device name and driver version). A context
 *  loads its device's database when it is created: from
 *  $FLASHCL_TUNING_DIR, else $XDG_CACHE_HOME/flashcl, else
 *  ~/.cache/flashcl; where there is none, from the databases built into
 *  the library (devices measured by its authors, used across driver
 *  versions). A call without a tiling hint (fcl_context_set_flash_tiling)
 *  then runs its bucket's tuned plan where there is one and it plans the
 *  call's shape, else the rules' (fcl_run_info.plan.tuned says which). A
 *  file that is corrupt, another device's, from another driver version, or
 *  an entry that no longer fits the device's limits is skipped with a line
 *  in the context's log (fcl_context_log), never a failure; so is anything
 *  at the file's name but a regular file of at most 1 MiB (a FIFO, a
 *  device, a socket, a folder, a symbolic-link loop), which is never
 *  waited on or read.
 *
 *  This function loads the device's database from `dir` (the file
 *  fcl_tuning_info.file_name in it) instead, or from the default folder
 *  when `dir` is NULL; without one there, the shipped ones. Applies to calls
 *  that start after it returns. Thread-safe.
 *  @return FCL_SUCCESS (also when no database was found: see the log),
 *          FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed, `dir` ""). */
FCL_API fcl_status fcl_context_set_tuning_dir(fcl_context *ctx, const char *dir);

/** Switches tuned plans off (0: the rules plan every call) or back on (1,
 *  the default). The loaded database is kept. Thread-safe.
 *  @return FCL_SUCCESS or FCL_ERROR_INVALID_ARGUMENT (ctx NULL or failed,
 *          enable not 0 or 1). */
FCL_API fcl_status fcl_context_use_tuned_plans(fcl_context *ctx, int enable);

/** What the context's tuned plans are: whether used, how many buckets,
 *  from which file. @return FCL_SUCCESS or FCL_ERROR_INVALID_ARGUMENT. */
FCL_API fcl_status fcl_context_tuning(fcl_context *ctx, fcl_tuning_info *out);

/** The plan a flash call of `pass` on `desc` would run on this context
 *  now: its tiling hint's (fcl_context_set_flash_tiling) where one is set,
 *  else its tuned plan for the problem's bucket where it has one that plans
 *  `desc` (plan->tuned = 1), else the rules' (fcl_plan_flash). Thread-safe.
 *  @return as fcl_plan_flash; FCL_ERROR_INVALID_ARGUMENT also for a NULL
 *          or failed ctx. */
FCL_API fcl_status fcl_context_plan(fcl_context *ctx, const fcl_attention_desc *desc,
                                    fcl_pass pass, fcl_plan *plan, char *why, size_t why_len);

/** Copies the context's log (warnings that did not fail a call, one a
 *  line, such as a tuning database skipped) into out[capacity],
 *  NUL-terminated and truncated to fit; `out` may be NULL with capacity 0.
 *  @return the log's full length in bytes (0: empty, or ctx NULL). */
FCL_API size_t fcl_context_log(fcl_context *ctx, char *out, size_t capacity);

/** What one call did. Pass a pointer to get it; the call then blocks until
 *  its work has finished, so that the timing is known. */
typedef struct fcl_run_info {
  /** Device time from the queue reaching the call to its last command
   *  ending, from profiling markers; host wall time when the queue has no
   *  profiling. */
  double ms;
  /** Global-memory bytes the algorithm moves, by the I/O model, for the plan
   *  actually used. */
  uint64_t bytes_model;
  /** Bytes the instrumented kernels counted (fcl_context_set_count_io), plus
   *  the model's figure for work they cannot count (CLBlast GEMMs); 0 when
   *  counting is off. */
  uint64_t bytes_counted;
  /** Floating-point operations by flash-attn's convention. */
  double flops;
  /** The flash tiling used (zeros for the naive algorithm). */
  fcl_plan plan;
  /** Chunks the naive algorithm split the (batch, head) slices into
   *  (0 for the flash algorithm; UINT_MAX if more). */
  unsigned chunks;
} fcl_run_info;

/** Exact attention forward: O = softmax(scale * Q K^T + causal mask) V, and
 *  LSE = log of each row's softmax denominator (natural log, of the scaled
 *  logits). Enqueues on the context's queue and returns; when `info` is not
 *  NULL, waits for completion and fills it.
 *  q, k, v: inputs; o: output; lse: output, or NULL if not wanted.
 *  Buffers must belong to the context's OpenCL context and hold at least the
 *  shape's bytes (checked with CL_MEM_SIZE). Inputs may be the same buffer;
 *  an output may share no byte with any other buffer of the call (checked,
 *  through sub-buffers and through host memory lent with
 *  CL_MEM_USE_HOST_PTR; memory shared in ways OpenCL 1.2 cannot report,
 *  such as graphics interop or one allocation imported twice, cannot be
 *  checked), may not be the parent buffer or a sub-buffer of another
 *  argument even where their bytes are apart (OpenCL 1.2 leaves the
 *  concurrent use of a buffer and its sub-buffer undefined; sub-buffers of
 *  one parent that do not overlap are fine), and may not be
 *  CL_MEM_READ_ONLY (nor an input CL_MEM_WRITE_ONLY). Every argument must
 *  be a buffer (CL_MEM_TYPE CL_MEM_OBJECT_BUFFER), not an image or pipe.
 *  On failure, each output buffer is either untouched or completely
 *  written, never half: the call waits for the work it had enqueued
 *  before returning the failure, so this holds on return.
 *
 *  Non-finite inputs. NaN and infinities in q, k or v never make the call
 *  fail, hang or crash; they propagate as IEEE arithmetic makes them, and
 *  only into the elements named here. With s_ij = scale * (q_i . k_j) the
 *  logit of query row i and a key j it sees (NaN or +-inf when q_i or k_j
 *  holds a NaN or an infinity; which one follows IEEE: NaN for inf * 0 or
 *  inf - inf):
 *    - a row with a NaN or +inf logit has O all NaN and LSE NaN;
 *    - a logit of -inf weighs 0, like a masked key: the row is the exact
 *      attention over its other keys; if all its logits are -inf it outputs
 *      zeros and LSE = -INFINITY, like a row that sees no key;
 *    - a NaN or infinity in v at key j, column c makes column c of O NaN or
 *      +-inf in every row that sees key j, and may do so (0 * inf is NaN)
 *      in the other rows of that batch whose query heads read that kv
 *      head; LSE and the other columns are unaffected;
 *    - every other element of O and LSE is bit for bit what it would be if
 *      the non-finite values were replaced by finite ones.
 *  With softcap > 0 these rules apply to the capped logit
 *  softcap * tanh(s_ij / softcap), as flash-attn computes it (the cap
 *  before the mask): a logit of +inf becomes +softcap and one of -inf
 *  -softcap, finite logits weighed as any other (the row stays finite, and
 *  a -inf logit's key keeps the weight exp(-softcap) relative to a key at
 *  logit 0); NaN stays NaN, so a NaN logit still makes the row NaN. Keys
 *  the mask hides weigh 0 whatever their logit.
 *  Rows that see no key (causal) output zeros and LSE = -INFINITY (with
 *  sinks: the head's sink) whatever their q holds (subject to the rule for
 *  v above). Sinks: see fcl_attention_desc.sinks.
 *  @return FCL_SUCCESS;
 *          FCL_ERROR_INVALID_ARGUMENT: ctx NULL or failed, desc NULL or
 *            with struct_size 0, algo, dtype, causal or scale out of range,
 *            a window bound below -1 (or window_right > 0 with causal),
 *            softcap negative or not finite, alibi_per_batch not 0 or 1,
 *            cu_seqlens not starting at 0 or decreasing (the message names
 *            the entry), cu_seqlens_k without cu_seqlens_q, seqlens_k with
 *            cu_seqlens_q or an entry below 0, strides that
 *            make a view's elements overlap, q, k, v or o NULL, a handle
 *            that is not a buffer (not a cl_mem, an image), of another
 *            OpenCL context, with the wrong access flags, or an output
 *            whose view shares bytes with another view or buffer;
 *          FCL_ERROR_INVALID_SHAPE: a size 0 or over INT_MAX, heads_q not a
 *            multiple of heads_kv, a ragged sequence longer than seqlen_q
 *            (seqlen_k), a seqlens_k entry over seqlen_k, tensor sizes or
 *            layouts overflowing size_t;
 *          FCL_ERROR_BUFFER_TOO_SMALL (the message names the buffer);
 *          FCL_ERROR_UNSUPPORTED: head_dim over FCL_MAX_HEAD_DIM or too
 *            large for the device's local memory (flash), f16 with the
 *            naive algorithm on a device without cl_khr_fp16;
 *          FCL_ERROR_OUT_OF_MEMORY: a host or device allocation failed, or
 *            the naive algorithm's S for one (batch, head) exceeds the
 *            device's largest allocation or the scratch limit;
 *          FCL_ERROR_BUILD_FAILED (the message holds the build log);
 *          FCL_ERROR_OPENCL: an OpenCL call, e.g. an enqueue, failed;
 *          FCL_ERROR_CLBLAST: a CLBlast GEMM failed. */
FCL_API fcl_status fcl_attention_forward(fcl_context *ctx,
                                 const fcl_attention_desc *desc,
                                 fcl_algo algo, cl_mem q, cl_mem k, cl_mem v,
                                 cl_mem o, cl_mem lse, fcl_run_info *info);

/** Exact attention backward: given the forward's inputs, its outputs O and
 *  LSE, and dO = dL/dO, computes dQ, dK and dV. For grouped-query attention
 *  dK and dV of a key/value head are summed over the query heads that read
 *  it. A query row that saw no key (LSE = -INFINITY) contributes nothing
 *  and gets dQ = 0. Enqueues on the context's queue and returns; when
 *  `info` is not NULL, waits for completion and fills it.
 *  q, k, v, o, lse, dout: inputs (o and lse as fcl_attention_forward wrote
 *  them for the same desc; lse is required); dq, dk, dv: outputs, in the
 *  layouts of q, k and v.
 *  The flash algorithm stores nothing of size seqlen_q x seqlen_k: it
 *  recomputes P block by block from Q, K and LSE, with D = rowsum(dO * O).
 *  It uses no floating-point atomics: the same inputs give bit-identical
 *  gradients run after run. The naive algorithm materialises P and dP
 *  (in the storage types fcl_dtype describes).
 *  On failure, each of dq, dk and dv is either untouched or completely
 *  written: never half.
 *  With sinks (fcl_attention_desc.sinks) dQ, dK and dV need nothing more
 *  than the forward's LSE, which includes the sink; desc.dsinks, when set,
 *  receives the sinks' gradient (dsinks without sinks is
 *  FCL_ERROR_INVALID_ARGUMENT), likewise never half written.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT, FCL_ERROR_INVALID_SHAPE,
 *          FCL_ERROR_BUFFER_TOO_SMALL, FCL_ERROR_UNSUPPORTED,
 *          FCL_ERROR_OUT_OF_MEMORY, FCL_ERROR_BUILD_FAILED, FCL_ERROR_OPENCL,
 *          FCL_ERROR_CLBLAST. */
FCL_API fcl_status fcl_attention_backward(fcl_context *ctx,
                                  const fcl_attention_desc *desc,
                                  fcl_algo algo, cl_mem q, cl_mem k, cl_mem v,
                                  cl_mem o, cl_mem lse, cl_mem dout, cl_mem dq,
                                  cl_mem dk, cl_mem dv, fcl_run_info *info);

/* ------------------------------------------------------------------------ */
/* Merging attention states                                                 */
/* ------------------------------------------------------------------------ */

/** Partial attention states to merge: `parts` pairs (O_p, LSE_p) of the
 *  same query rows, each the exact attention of those rows over its own
 *  set of keys, the sets disjoint (a key range of a split cache, a shared
 *  prefix and each sequence's suffix, a device's shard of the keys). The
 *  merge is the attention over their union, exactly:
 *    LSE = log sum_p exp(LSE_p),  O = sum_p exp(LSE_p - LSE) O_p.
 *  Fill it with fcl_merge_desc_init(), then adjust; it grows as
 *  fcl_attention_desc does (struct_size).
 *
 *  Rows are (batch entry, token, head) as in the attention calls: O_p and
 *  O in fcl_tensor_layout views of [batch][seqlen][heads][head_dim], LSE_p
 *  and LSE as the attention calls write LSE, float [batch][heads][seqlen]
 *  (natural log). A ragged batch's outputs ([tokens][heads][head_dim],
 *  LSE [heads][tokens]) are batch 1 with seqlen the token count. */
typedef struct fcl_merge_desc {
  size_t struct_size;  /**< sizeof the caller's fcl_merge_desc: leave as init set it */
  size_t parts;        /**< states to merge, >= 1 */
  size_t batch;        /**< >= 1 */
  size_t seqlen;       /**< query tokens per batch entry, >= 1 */
  size_t heads;        /**< >= 1 */
  size_t head_dim;     /**< 1 .. FCL_MAX_HEAD_DIM */
  fcl_dtype dtype;     /**< storage type of every O_p and of O; arithmetic is f32 */
  /** Part p's O: the view `o_parts` moved by p * o_part_stride elements.
   *  o_part_stride 0 (default): the parts back to back, each as long as
   *  its view's span. Parts must not overlap. */
  fcl_tensor_layout o_parts;
  size_t o_part_stride;
  /** Part p's LSE starts p * lse_part_stride floats into lse_parts; 0
   *  (default): batch * heads * seqlen, back to back. At least that. */
  size_t lse_part_stride;
  fcl_tensor_layout o;  /**< the merged O's view; zeros: packed */
  /* ---- attention sinks ------------------------------------------------- */
  /** Attention sinks (fcl_attention_desc.sinks), floats [heads] of the
   *  call's OpenCL context: head h's sink joins every row's merge as one
   *  more part with LSE s_h and O zero, so that the merged LSE includes
   *  it and O is scaled by it. A row whose parts are all empty then gets
   *  zeros and LSE = s_h. NaN or +INFINITY: that head's rows are NaN.
   *  Fewer than heads floats: FCL_ERROR_BUFFER_TOO_SMALL. NULL (default):
   *  none. */
  cl_mem sinks;
} fcl_merge_desc;

/** Fills `desc` with the given shape and the defaults: struct_size, f32,
 *  packed views, parts back to back. NULL desc is a no-op. */
FCL_API void fcl_merge_desc_init(fcl_merge_desc *desc, size_t parts, size_t batch,
                                 size_t seqlen, size_t heads, size_t head_dim);

/** The bytes each buffer of a merge must hold at least. */
typedef struct fcl_merge_sizes {
  size_t o_parts, lse_parts;  /**< every part's O (storage type) and LSE (floats) */
  size_t o, lse;              /**< the merged O and LSE */
} fcl_merge_sizes;

/** The buffer sizes of `desc` after validating it as fcl_merge_states
 *  does; `why` and the statuses as fcl_attention_buffer_sizes. */
FCL_API fcl_status fcl_merge_buffer_sizes(const fcl_merge_desc *desc, fcl_merge_sizes *out,
                                          char *why, size_t why_len);

/** Merges `parts` attention states (fcl_merge_desc) into O and, when `lse`
 *  is not NULL, LSE. Enqueues on the context's queue and returns; when
 *  `info` is not NULL, waits for completion and fills it (ms, bytes_model,
 *  bytes_counted; flops are 3 per O_p element; plan zeros).
 *  Empty parts: a part whose LSE is -INFINITY (a query that saw none of
 *  its keys) weighs nothing, whatever its O holds; a row whose parts are
 *  all empty gets zeros and LSE = -INFINITY. A NaN or +INFINITY among a
 *  row's LSEs makes its O and LSE NaN. Otherwise the result's error is a
 *  few float roundings of each weighted sum; the same inputs on the same
 *  device give the same bits (the parts are summed in a fixed order).
 *  Buffers as for fcl_attention_forward: of the context, large enough
 *  (fcl_merge_buffer_sizes), outputs sharing no byte with another argument
 *  and not CL_MEM_READ_ONLY; on failure the outputs are untouched.
 *  @return FCL_SUCCESS; FCL_ERROR_INVALID_ARGUMENT (ctx, desc or a buffer
 *          NULL or bad, struct_size 0, a bad dtype, overlapping views or
 *          parts, an output sharing bytes with another buffer);
 *          FCL_ERROR_INVALID_SHAPE (a size 0 or over INT_MAX, sizes that
 *          overflow, lse_part_stride below one part's LSE);
 *          FCL_ERROR_UNSUPPORTED (head_dim over FCL_MAX_HEAD_DIM, or over
 *          four columns a work-item of the merge's work-group: 512 where
 *          the device takes work-groups of 128, 256 below);
 *          FCL_ERROR_BUFFER_TOO_SMALL; FCL_ERROR_OUT_OF_MEMORY;
 *          FCL_ERROR_BUILD_FAILED; FCL_ERROR_OPENCL. */
FCL_API fcl_status fcl_merge_states(fcl_context *ctx, const fcl_merge_desc *desc,
                                    cl_mem o_parts, cl_mem lse_parts, cl_mem o, cl_mem lse,
                                    fcl_run_info *info);

/** Appends new K and V rows to a KV cache: for each batch entry b, the
 *  `new_tokens` rows of k_new and v_new go to the cache's rows
 *  [seqlens_k[b], seqlens_k[b] + new_tokens). The cache is the one `desc`
 *  describes for fcl_attention_forward: its K and V views (k, v), heads_kv,
 *  head_dim, dtype, batch, capacity seqlen_k and current lengths
 *  seqlens_k (required here). The new rows are [batch][new_tokens]
 *  [heads_kv][head_dim] views, `k_new_layout` and `v_new_layout` (NULL or
 *  zeros: packed; a packed QKV projection's K and V views work). Rows are
 *  copied bit for bit; into a quantized cache (kv_dtype) they are
 *  quantised as fcl_kv_dtype writes down. Then raise each seqlens_k[b] by new_tokens and run
 *  the forward with seqlen_q = new_tokens: causal, the new queries see the
 *  cache and themselves. A paged cache (desc->block_table) takes each row
 *  at its token's page, which the table must already name: the entries
 *  the append writes through are read back and checked first (a sync;
 *  fcl_context_set_block_table_checks). Writes only the appended rows; on
 *  failure the cache is untouched. `info` as for the attention calls
 *  (flops 0).
 *  @return FCL_SUCCESS; FCL_ERROR_INVALID_ARGUMENT (ctx, desc or a buffer
 *          NULL or bad, seqlens_k NULL, cu_seqlens set, new_tokens 0,
 *          views that overlap, k_cache or v_cache sharing bytes with k_new
 *          or v_new, a block-table entry the append writes through outside
 *          the pool: the message names it); FCL_ERROR_INVALID_SHAPE (an append past the capacity:
 *          the message names the entry; the descriptor's own checks);
 *          FCL_ERROR_BUFFER_TOO_SMALL; FCL_ERROR_UNSUPPORTED;
 *          FCL_ERROR_OUT_OF_MEMORY; FCL_ERROR_BUILD_FAILED; FCL_ERROR_OPENCL. */
FCL_API fcl_status fcl_kv_cache_append(fcl_context *ctx, const fcl_attention_desc *desc,
                                       size_t new_tokens, const fcl_tensor_layout *k_new_layout,
                                       const fcl_tensor_layout *v_new_layout, cl_mem k_new,
                                       cl_mem v_new, cl_mem k_cache, cl_mem v_cache,
                                       fcl_run_info *info);

/** The decode step in one call (flash-attn's flash_attn_with_kvcache with
 *  k and v): appends the `new_tokens` rows of k_new and v_new to the cache
 *  as fcl_kv_cache_append does, then runs fcl_attention_forward over the
 *  cache with each length raised by new_tokens. `desc` describes the cache
 *  before the append (seqlens_k its current lengths, required) and q
 *  (seqlen_q rows, usually new_tokens: causal, they see the cache and
 *  themselves); the caller raises its own lengths afterwards. Every check
 *  of both steps, the forward's plan included, runs before anything is
 *  enqueued: a refused call writes nothing. Should the forward then fail
 *  (a build, an allocation), the appended rows are in the cache, past the
 *  old lengths, and o and lse are untouched. `info`: the forward's plan
 *  and FLOPs, both steps' time and bytes.
 *  @return as fcl_kv_cache_append and fcl_attention_forward. */
FCL_API fcl_status fcl_attention_forward_kvcache(fcl_context *ctx, const fcl_attention_desc *desc,
                                                 fcl_algo algo, cl_mem q, size_t new_tokens,
                                                 const fcl_tensor_layout *k_new_layout,
                                                 const fcl_tensor_layout *v_new_layout,
                                                 cl_mem k_new, cl_mem v_new, cl_mem k_cache,
                                                 cl_mem v_cache, cl_mem o, cl_mem lse,
                                                 fcl_run_info *info);

/** Floating-point operations of a pass by flash-attn's convention:
 *  4*B*Nq*Nk*H*d forward (halved when causal and seqlen_q == seqlen_k),
 *  2.5 times that backward; with a window (other than causal's) or a
 *  ragged batch, 4*H*d per (query, key) pair the mask shows. 0 for a
 *  descriptor the attention calls would refuse. */
FCL_API double fcl_attention_flops(const fcl_attention_desc *desc, fcl_pass pass);

/* ------------------------------------------------------------------------ */
/* Global-memory traffic and device ceilings                                */
/* ------------------------------------------------------------------------ */

/** Bytes an algorithm moves through global memory. */
typedef struct fcl_io_estimate {
  /** Exact traffic of the kernels as they run with the plan the library
   *  would choose (each CLBlast GEMM counted as reading its operands and
   *  writing its result once). Instrumented kernels count the same. */
  uint64_t bytes_loaded;
  uint64_t bytes_stored;
  /** The FlashAttention paper's asymptotic figure for comparison, in bytes
   *  of the storage type: standard attention B*H*((Nq + Nk)*d + Nq*Nk)
   *  elements, flash B*H*Nq*Nk*d^2/M with M the local memory in elements
   *  (the paper's Theta(N d + N^2) and Theta(N^2 d^2 / M)). */
  double bytes_asymptotic;
  /** The flash plan the figures assume (zeros for the naive algorithm). */
  fcl_plan plan;
  /** Chunks the naive algorithm would use (1 for flash). */
  unsigned chunks;
} fcl_io_estimate;

/** Computes an algorithm's global-memory traffic for `desc` on a device
 *  with `limits`, without running anything. `with_lse` says whether the
 *  forward writes LSE. The naive algorithm's chunking assumes the default
 *  scratch limit. `out` is written on success only.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT, FCL_ERROR_INVALID_SHAPE
 *          (also when a byte count would not fit 64 bits),
 *          FCL_ERROR_UNSUPPORTED, FCL_ERROR_OUT_OF_MEMORY (the naive S does
 *          not fit the device). */
FCL_API fcl_status fcl_io_model(const fcl_device_limits *limits,
                                const fcl_attention_desc *desc, fcl_algo algo,
                                fcl_pass pass, int with_lse,
                                fcl_io_estimate *out);

/** What the device can do at best, measured: the ceilings of a roofline. */
typedef struct fcl_peaks {
  double copy_gbps;    /**< device-to-device copy, bytes read + written */
  double fma_tflops;   /**< fp32 fused multiply-add, 2 FLOPs each */
} fcl_peaks;

/** Measures the device's copy bandwidth and fp32 FMA rate with two small
 *  kernels (best of several runs; about a second on a GPU). Blocks.
 *  @return FCL_SUCCESS, FCL_ERROR_INVALID_ARGUMENT, FCL_ERROR_OUT_OF_MEMORY,
 *          FCL_ERROR_BUILD_FAILED, FCL_ERROR_OPENCL. */
FCL_API fcl_status fcl_measure_peaks(fcl_context *ctx, fcl_peaks *out);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCL_H */
