/*
 * common.cl — compiled in front of every flashcl kernel: the storage type
 * and its conversion to and from float, the optional I/O instrumentation,
 * and vendor helpers. Arithmetic is always float.
 *
 * Loads and stores of global tensors go through the LOAD and STORE macros,
 * so that a build with -DFCL_COUNT_IO counts every global byte exactly, by
 * construction. They need FCL_IO_INIT in scope.
 */

#ifndef FCL_DTYPE
#define FCL_DTYPE 0 // storage of Q, K, V, O and gradients: 0 f32, 1 f16, 2 bf16
#endif
#ifndef FCL_UNROLL
#define FCL_UNROLL 1 // 0 on CPUs: PoCL vectorises across work-items, and
                     // fully unrolled tile loops only slow its compiler down
#endif
#ifndef FCL_NATIVE_EXP
#define FCL_NATIVE_EXP 0 // 1: native_exp2 (hardware approximation, ~2 ulp)
#endif
#ifndef FCL_NVIDIA_PTX
#define FCL_NVIDIA_PTX 0 // 1 on NVIDIA's driver, whose compiler takes inline PTX
#endif

/* ---- I/O counting -------------------------------------------------------- */

#ifdef FCL_COUNT_IO
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#define FCL_IO_PARAM , __global ulong *fcl_io // [0] bytes loaded, [1] stored
#define FCL_IO_INIT ulong fcl_io_loaded = 0, fcl_io_stored = 0
#define FCL_COUNTED_LOAD(bytes, expr) (fcl_io_loaded += (bytes), (expr))
#define FCL_COUNT_STORE(bytes) (fcl_io_stored += (bytes))
#define FCL_IO_COMMIT()                                       \
  do {                                                        \
    if (fcl_io_loaded) atom_add(&fcl_io[0], fcl_io_loaded);   \
    if (fcl_io_stored) atom_add(&fcl_io[1], fcl_io_stored);   \
  } while (0)
#else
#define FCL_IO_PARAM
#define FCL_IO_INIT
#define FCL_COUNTED_LOAD(bytes, expr) (expr)
#define FCL_COUNT_STORE(bytes) ((void)0)
#define FCL_IO_COMMIT() ((void)0)
#endif

/* ---- storage types -------------------------------------------------------
 * RAW_LOAD4 and RAW_STORE4 of the 16-bit types are aligned vector accesses
 * (vloada_half4, ushort4 pointers): one 8-byte load or store rather than
 * four 2-byte ones, which a compiler must emit when it cannot prove the
 * alignment. Their addresses are multiples of 4 elements from the start of
 * a buffer (the kernels take the vector path only where head_dim % 4 == 0,
 * and OpenCL aligns buffers and sub-buffers far beyond 8 bytes). */

#if FCL_DTYPE == 0
typedef float store_t;
#define RAW_LOAD1(p, i) ((p)[i])
#define RAW_LOAD4(p, i) vload4(0, (p) + (i))
#define RAW_STORE1(p, i, x) ((p)[i] = (x))
#define RAW_STORE4(p, i, x) vstore4((x), 0, (p) + (i))
#elif FCL_DTYPE == 1
/* half is usable as a pointer type without cl_khr_fp16 (OpenCL C 1.2 6.1.1.1) */
typedef half store_t;
#define RAW_LOAD1(p, i) vload_half(0, (p) + (i))
#define RAW_LOAD4(p, i) vloada_half4(0, (p) + (i))
#define RAW_STORE1(p, i, x) vstore_half_rte((x), 0, (p) + (i))
#define RAW_STORE4(p, i, x) vstorea_half4_rte((x), 0, (p) + (i))
#elif FCL_DTYPE == 2
typedef ushort store_t;
inline float fcl_bf16_to_float(ushort b) { return as_float((uint)b << 16); }
inline float4 fcl_bf16x4_to_float4(ushort4 b) {
  return as_float4(convert_uint4(b) << 16);
}
/* Round to nearest even; NaN stays NaN (quiet bit set). */
inline ushort fcl_float_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}
inline ushort4 fcl_float4_to_bf16x4(float4 f) {
  return (ushort4)(fcl_float_to_bf16(f.x), fcl_float_to_bf16(f.y),
                   fcl_float_to_bf16(f.z), fcl_float_to_bf16(f.w));
}
#define RAW_LOAD1(p, i) fcl_bf16_to_float((p)[i])
#define RAW_LOAD4(p, i) fcl_bf16x4_to_float4(*(__global const ushort4 *)((p) + (i)))
#define RAW_STORE1(p, i, x) ((p)[i] = fcl_float_to_bf16(x))
#define RAW_STORE4(p, i, x) (*(__global ushort4 *)((p) + (i)) = fcl_float4_to_bf16x4(x))
#else
#error FCL_DTYPE must be 0 (f32), 1 (f16) or 2 (bf16)
#endif

#define STORE_SIZE ((ulong)sizeof(store_t))

/* Counted access to the caller's tensors (storage type) and to float
 * tensors (LSE, and the naive algorithm's S/P when stored as float). */
#define LOAD1(p, i) FCL_COUNTED_LOAD(STORE_SIZE, RAW_LOAD1(p, i))
#define LOAD4(p, i) FCL_COUNTED_LOAD(4 * STORE_SIZE, RAW_LOAD4(p, i))
#define STORE1(p, i, x) (FCL_COUNT_STORE(STORE_SIZE), RAW_STORE1(p, i, x))
#define STORE4(p, i, x) (FCL_COUNT_STORE(4 * STORE_SIZE), RAW_STORE4(p, i, x))
#define LOAD_F32(p, i) FCL_COUNTED_LOAD(4, (p)[i])
#define STORE_F32(p, i, x) (FCL_COUNT_STORE(4), (p)[i] = (x))
/* Whether a kernel stores LSE: the host passes no buffer (NULL) when the
 * caller wants none, a decision at run time so that one program serves
 * both (a build per choice doubled the variants a process compiles). */
#define FCL_STORES_LSE(lse) ((lse) != 0)
#define LOAD4_F32(p, i) FCL_COUNTED_LOAD(16, vload4(0, (p) + (i)))
#define STORE4_F32(p, i, x) (FCL_COUNT_STORE(16), vstore4((x), 0, (p) + (i)))

/* ---- local-memory tiles --------------------------------------------------
 * The flash kernels stream rows (K and V; Q and dO in the backward) through
 * local memory in groups of four elements, tile4_t. By default a tile holds
 * floats, converted once as they arrive from global memory. TILE_STORAGE = 1
 * (16-bit storage types only) keeps the storage type's bits instead: twice
 * the rows fit the same local memory, and each read from the tile converts
 * (vload_half4 from local memory, or a shift for bf16). The planner turns
 * it on only where local memory, not registers, limits the tile
 * (host/plan.c); the I/O is the same either way. */
#ifndef TILE_STORAGE
#define TILE_STORAGE 0  // 1: local tiles in the storage type (FCL_DTYPE 1 or 2)
#endif
#if TILE_STORAGE
#if FCL_DTYPE == 0
#error "TILE_STORAGE needs a 16-bit storage type"
#endif
typedef ushort4 tile4_t;  // the storage type's bits
#define RAW_BITS1(p, i) (((__global const ushort *)(p))[i])
#define RAW_BITS4(p, i) (*(__global const ushort4 *)((__global const ushort *)(p) + (i)))
#define LOAD_TILE1(p, i) FCL_COUNTED_LOAD(STORE_SIZE, RAW_BITS1(p, i))
#define LOAD_TILE4(p, i) FCL_COUNTED_LOAD(4 * STORE_SIZE, RAW_BITS4(p, i))
#if FCL_DTYPE == 1
#define TILE_READ4(t, i) vloada_half4((i), (__local const half *)(t))  // one 8-byte read
#else
#define TILE_READ4(t, i) fcl_bf16x4_to_float4((t)[i])
#endif
#else
typedef float4 tile4_t;
#define LOAD_TILE1(p, i) LOAD1(p, i)
#define LOAD_TILE4(p, i) LOAD4(p, i)
#define TILE_READ4(t, i) ((t)[i])
#endif
#define TILE_ZERO ((tile4_t)(0))  // +0 in every format

/* ---- helpers -------------------------------------------------------------- */

/* Loops over tile dimensions: unrolled on GPUs, so that per-row arrays stay
 * in registers. */
#if FCL_UNROLL
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("nounroll")
#endif

#if FCL_NATIVE_EXP
#define EXP2(x) native_exp2(x)
#else
#define EXP2(x) exp2(x)
#endif

/* Running maxima start here, not at -INFINITY: exp2(m_old - m_new) then
 * never sees inf - inf (docs/design.md, numerics). */
#define FCL_MAX_INIT (-FLT_MAX)

/* Sub-group shuffles (fcl_device_limits.shuffle): FCL_SHUFFLE 1 NVIDIA's
 * PTX, 2 Intel's cl_intel_subgroups, 3 AMD's amdgcn builtin; 0 none, and
 * sums go through local memory. FCL_SHUFFLE_WIDTH: the sub-group's lanes. */
#ifndef FCL_SHUFFLE
#define FCL_SHUFFLE (FCL_NVIDIA_PTX ? 1 : 0)  // the host passes it; this for tools
#endif
#ifndef FCL_SHUFFLE_WIDTH
#define FCL_SHUFFLE_WIDTH (FCL_SHUFFLE ? 32 : 0)
#endif
/* Whether `lanes` adjacent work-items of a `wg`-item work-group sum by
 * shuffles: the host's fcl__sums_by_shuffle (internal.h). A shuffle over
 * absent lanes is undefined, so the work-group must fill sub-groups. */
#define FCL_SUMS_BY_SHUFFLE(wg, lanes) \
  (FCL_SHUFFLE != 0 && (wg) >= FCL_SHUFFLE_WIDTH && (lanes) <= FCL_SHUFFLE_WIDTH)

/* x from the lane whose id differs in the bits of `mask` (butterfly). */
#if FCL_SHUFFLE == 1
inline float fcl_shfl_xor(float x, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=f"(r)
               : "f"(x), "r"(mask));
  return r;
}
#elif FCL_SHUFFLE == 2
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
inline float fcl_shfl_xor(float x, int mask) {
  return intel_sub_group_shuffle_xor(x, (uint)mask);
}
#elif FCL_SHUFFLE == 3
/* ds_bpermute reads the lane at a byte address; the lane id is the count
 * of lanes below this one (mbcnt), in waves of 32 and 64 alike. */
inline float fcl_shfl_xor(float x, int mask) {
  const int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  return as_float(__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, as_int(x)));
}
#endif

/* The sub-group width a kernel asks for where the host planned one (Intel:
 * the narrowest, whose lanes get the most registers). */
#if defined(FCL_SUB_GROUP_SIZE) && FCL_SUB_GROUP_SIZE > 0
#pragma OPENCL EXTENSION cl_intel_required_subgroup_size : enable
#define FCL_LANES __attribute__((intel_reqd_sub_group_size(FCL_SUB_GROUP_SIZE)))
#else
#define FCL_LANES
#endif

/* ---- arguments -------------------------------------------------------------
 * Every attention kernel's parameters: the buffers of params.h's list,
 * then the problem by value. */
#define FCL_BUFFER_PARAM(name, type) __global type *name,
#define FCL_ATTENTION_PARAMS \
  FCL_ATTENTION_BUFFERS(FCL_BUFFER_PARAM) const fcl_params p FCL_IO_PARAM

/* ---- the window the kernels mask with ---------------------------------------
 * WINDOW pins the problem's window where it is none (0) or causal's (1:
 * no left bound, right bound 0), so that the compiler folds the mask
 * functions of params.h to the arithmetic of a plain or causal kernel;
 * 2 reads the bounds from the parameter block. The host sets it from the
 * problem (host/flash.c); the naive algorithm's kernels take the default. */
#ifndef WINDOW
#define WINDOW 2
#endif
#if WINDOW == 0
#define WINDOW_LEFT(p) (-1)
#define WINDOW_RIGHT(p) (-1)
#elif WINDOW == 1
#define WINDOW_LEFT(p) (-1)
#define WINDOW_RIGHT(p) 0
#elif WINDOW == 2
#define WINDOW_LEFT(p) ((p).window_left)
#define WINDOW_RIGHT(p) ((p).window_right)
#else
#error "WINDOW must be 0 (none), 1 (causal) or 2 (the parameter block's)"
#endif

/* Whether key `key` is among those query row `row` of a sequence of nq
 * queries and nk keys sees, given [lo, hi), the row's bounds, where
 * WINDOW = 2; with the window pinned, from the row itself: the plain and
 * causal kernels compare as they did before windows existed (the f32
 * tensor-core forward at d = 64 spilled otherwise), and the backward's
 * kernels keep no bounds in local memory (ROW_KEYS_IN_LOCAL). */
#define ROW_KEYS_IN_LOCAL (WINDOW == 2)
#if WINDOW == 0
#define ROW_SEES(key, row, nq, nk, lo, hi) ((key) < (nk))
#elif WINDOW == 1
#define ROW_SEES(key, row, nq, nk, lo, hi) ((key) < (nk) && (key) <= (row) + (nk) - (nq))
#else
#define ROW_SEES(key, row, nq, nk, lo, hi) ((key) >= (lo) && (key) < (hi))
#endif
/* ROW_SEES for the dK/dV kernels, whose keys past nk are their own padding
 * rows, never stored: with the window pinned, no test of key < nk (v6's
 * causal dK/dV kernel had none, and fewer registers). */
#if WINDOW == 0
#define KEY_SEEN_BY(key, row, nq, nk, lo, hi) 1
#elif WINDOW == 1
#define KEY_SEEN_BY(key, row, nq, nk, lo, hi) ((key) <= (row) + (nk) - (nq))
#else
#define KEY_SEEN_BY(key, row, nq, nk, lo, hi) ROW_SEES(key, row, nq, nk, lo, hi)
#endif

/* ---- score transforms ------------------------------------------------------
 * SOFTCAP and ALIBI select logits that are transformed before the
 * softmax: softcap tanh(logit / softcap), then minus slope |i + nk - nq - j|.
 * Without either, the kernels keep scores as unscaled dot products and
 * scale only differences (flash_fwd.cl says why); with one, scores are the
 * transformed logits times log2(e), so that exp2 takes their differences
 * as they are (params.h: exp_factor, lse_factor). */
#ifndef SOFTCAP
#define SOFTCAP 0           // 1: logits soft-capped (p.softcap)
#endif
#ifndef ALIBI
#define ALIBI 0             // 1: ALiBi biases from the slopes buffer
#endif
#define SCORES_TRANSFORMED (SOFTCAP || ALIBI)

/* The score of an unscaled dot product s; rel = i + nk - nq - j, the
 * query's distance past the key (ALiBi). One definition for a score
 * (fcl_score) and for 16 rows' scores across a vector's lanes
 * (fcl_score16, flash_fwd_cpu.cl); the pinned macros fold the branches. */
#define FCL_DEFINE_SCORE(name, T, I, to_T)                          \
  inline T name(T s, const fcl_params p, float slope, I rel) {      \
    if (!SCORES_TRANSFORMED) return (void)slope, (void)rel, s;      \
    T logit = p.scale * s;                                          \
    if (SOFTCAP) logit = p.softcap * tanh(logit / p.softcap);       \
    if (ALIBI) logit -= slope * fabs(to_T(rel));                    \
    return logit * M_LOG2E_F;                                       \
  }
FCL_DEFINE_SCORE(fcl_score, float, int, (float))
FCL_DEFINE_SCORE(fcl_score16, float16, int16, convert_float16)

/* The backward's P of an unscaled score s in a row whose LSE is lse2 in
 * log2 units (LSE log2(e)), and in *dscale the factor the transform puts
 * into dS = P (dP - D): d logit / d(scale s), 1 - tanh^2 with a softcap.
 * P = 2^(score exp_factor - lse2), the forward's exponential: with it the
 * f32 tensor-core backward ran 1.05-1.07x as fast as with exp() on an
 * H200 (docs/performance.md, v6). As fcl_score, for one score (fcl_prob)
 * and for 16 across a vector's lanes (fcl_prob16, flash_bwd_cpu.cl). */
#define FCL_DEFINE_PROB(name, T, I, to_T)                                      \
  inline T name(T s, const fcl_params p, T lse2, float slope, I rel, T *dscale) { \
    *dscale = (T)(1.0f);                                                       \
    if (!SCORES_TRANSFORMED) return (void)slope, (void)rel, EXP2(s * p.exp_factor - lse2); \
    T logit = p.scale * s;                                                     \
    if (SOFTCAP) {                                                             \
      const T th = tanh(logit / p.softcap);                                    \
      logit = p.softcap * th;                                                  \
      *dscale = 1.0f - th * th;                                                \
    }                                                                          \
    if (ALIBI) logit -= slope * fabs(to_T(rel));                               \
    return EXP2(logit * M_LOG2E_F - lse2);                                     \
  }
FCL_DEFINE_PROB(fcl_prob, float, int, (float))
FCL_DEFINE_PROB(fcl_prob16, float16, int16, convert_float16)

/* ---- counted loads in helpers ------------------------------------------- */

/* Helpers that touch global memory take the kernel's counters along. */
#ifdef FCL_COUNT_IO
#define IO_LOADS , ulong *io_loads
#define IO_STORES , ulong *io_stores
#define IO_LOADS_ARG , &fcl_io_loaded
#define IO_STORES_ARG , &fcl_io_stored
#define IO_HELPER_INIT FCL_IO_INIT
#define IO_HELPER_LOADS_DONE() (*io_loads += fcl_io_loaded)
#define IO_HELPER_STORES_DONE() (*io_stores += fcl_io_stored)
#else
#define IO_LOADS
#define IO_STORES
#define IO_LOADS_ARG
#define IO_STORES_ARG
#define IO_HELPER_INIT
#define IO_HELPER_LOADS_DONE() ((void)0)
#define IO_HELPER_STORES_DONE() ((void)0)
#endif

/* ---- sequences --------------------------------------------------------------
 * A batch entry's queries and keys: where they start among the tokens of
 * their tensors and how many there are; ragged batches read them from the
 * host's table, the others are all seqlen_q x seqlen_k from token 0. */
typedef struct fcl_sequence {
  int q_start, nq, k_start, nk;
} fcl_sequence;

inline fcl_sequence fcl_sequence_of(const fcl_params p, __global const int *seqs,
                                    int b IO_LOADS) {
  fcl_sequence s = {0, p.seqlen_q, 0, p.seqlen_k};
  if (p.ragged) {
    IO_HELPER_INIT;
    const int4 t = FCL_COUNTED_LOAD(16, vload4(b, seqs));
    IO_HELPER_LOADS_DONE();
    s.q_start = t.x;
    s.nq = t.y;
    s.k_start = t.z;
    s.nk = t.w;
  }
  return s;
}

/* Element offset of token `token`, head `head` of batch entry b in a view. */
inline size_t fcl_at(const fcl_view v, int b, int token, int head) {
  return v.offset + (size_t)b * v.batch + (size_t)token * v.seq + (size_t)head * v.head;
}

/* ---- a paged cache ---------------------------------------------------------
 * PAGED = 1: K and V are pools of pages (fcl_attention_desc.block_table),
 * their views' batch stride the stride between pages. A forward's key tile
 * [k0, k0 + BLOCK_K) lies in one page (page_size is a multiple of every
 * tile the planner makes), so TILE_ROWS gives the row of key k0 of the
 * block's (batch, KV head), from which a kernel steps by the seq stride,
 * and KEY_IN_TILE a key's row past it. Unpaged, they are the block's rows
 * and the key itself: the kernels' arithmetic as before paging existed.
 * They need the kernel's `qb` and `pages` in scope. */
#ifndef PAGED
#define PAGED 0
#endif
#if PAGED
/* Element offset of key k0's row in `view`: the table's entry, clamped
 * into the pool, so that a bad entry never reads outside it. */
inline size_t fcl_page_row(const fcl_params p, const fcl_view view, __global const int *pages,
                           int batch, int head, int k0 IO_LOADS) {
  IO_HELPER_INIT;
  const int entry = FCL_COUNTED_LOAD(4, pages[(size_t)batch * p.table_batch + k0 / p.page_size]);
  IO_HELPER_LOADS_DONE();
  const int page = clamp(entry, 0, p.num_pages - 1);
  return view.offset + (size_t)page * view.batch + (size_t)(k0 % p.page_size) * view.seq +
         (size_t)head * view.head;
}
#define TILE_ROWS(rows, tensor, view, k0) \
  ((tensor) + fcl_page_row(p, (view), pages, qb.batch, qb.kv_head, (k0) IO_LOADS_ARG))
#define KEY_IN_TILE(key, k0) ((key) - (k0))
#else
#define TILE_ROWS(rows, tensor, view, k0) (rows)
#define KEY_IN_TILE(key, k0) (key)
#endif
/* Key k0's row, where a tile from k0 starts, paged or not (stride: the
 * view's rows apart, as the kernel holds it). */
#define TILE_START(rows, tensor, view, stride, k0) \
  (TILE_ROWS(rows, tensor, view, k0) + (size_t)KEY_IN_TILE(k0, k0) * (stride))

/* A causal-like mask (bounded right, unbounded left): later blocks see more
 * keys and start first. */
#if WINDOW == 2
inline int fcl_grows(const fcl_params p) { return p.window_right >= 0 && p.window_left < 0; }
#else
inline int fcl_grows(const fcl_params p) { return (void)p, WINDOW == 1; }
#endif

/* SPLIT_KV = 1 builds a forward that runs one split of the keys per
 * work-group: p.splits copies of the grid, each writing a partial O and
 * LSE (p.o_split, p.lse_split apart) that the merge kernel combines. */
#ifndef SPLIT_KV
#define SPLIT_KV 0
#endif

/* PACK_GQA = G > 1 builds a forward whose blocks hold packed rows: the
 * query rows of the G heads that share a KV head, slot r being token r / G
 * of head r % G of the group, so that each K and V tile is loaded once for
 * all G heads (decode: G rows of one token instead of one). 1: a block is
 * one head's rows. */
#ifndef PACK_GQA
#define PACK_GQA 1
#endif
#if PACK_GQA > 1 && ALIBI
#error "PACK_GQA: one ALiBi slope per block, and a packed block spans heads"
#endif
#define SLOT_TOKEN(slot) ((slot) / PACK_GQA)
#define SLOT_HEAD(slot) ((slot) % PACK_GQA)

/* ---- the query-block grid ------------------------------------------------
 * The kernels that own a block of query rows (both forwards, the
 * backward's dQ) share one flat grid, since NVIDIA caps the 2nd and 3rd
 * grid dimensions at 65535. Query blocks vary fastest, so that neighbouring
 * work-groups share K and V in cache; with a causal-like mask the last
 * blocks, which see the most keys, start first, so that a launch does not
 * end on a long tail. Ragged batches take their (sequence, block) from the
 * host's work list, heads outermost; the host orders it longest first. */
typedef struct fcl_query_block {
  int q0, rows;                // first query row (packed: slot) of the block; rows of it
  int batch, head, kv_head;
  fcl_sequence seq;
  /* Keys [k_lo, k_hi) are seen by some row of the block, [full_lo,
   * full_hi) by every row (params.h, fcl_block_keys). */
  int k_lo, k_hi, full_lo, full_hi;
  size_t lse;                  // row 0 of this (batch, head) in LSE and D
  size_t o_split;              // where this split's O is, past split 0's (p.o_split)
  float slope;                 // ALiBi, of this (batch, head)
} fcl_query_block;

inline fcl_query_block fcl_locate_query_block(const fcl_params p, __global const int *seqs,
                                              __global const int *work,
                                              __global const float *alibi,
                                              int block_q IO_LOADS) {
  IO_HELPER_INIT;
  fcl_query_block b;
#if SPLIT_KV
  /* Splits of the keys are outermost. */
  const int per_split = get_num_groups(0) / p.splits;
  const int split = get_group_id(0) / per_split, group_id = get_group_id(0) % per_split;
#else
  const int group_id = get_group_id(0);
#endif
  int qblock;
  if (p.ragged) {
    const int item = group_id % p.work_items;
    b.head = group_id / p.work_items * PACK_GQA;  // packed: a group's first head
    const int2 w = FCL_COUNTED_LOAD(8, vload2(item, work));
    b.batch = w.x;
    qblock = w.y;
  } else {
    const int n_qblocks = (p.seqlen_q * PACK_GQA + block_q - 1) / block_q;
    const int bh = group_id / n_qblocks;
    qblock = group_id - bh * n_qblocks;
    if (fcl_grows(p)) qblock = n_qblocks - 1 - qblock;
    const int heads = PACK_GQA > 1 ? p.heads_kv : p.heads_q;  // packed: a group's first head
    b.head = bh % heads * PACK_GQA;
    b.batch = bh / heads;
  }
  b.kv_head = b.head / (p.heads_q / p.heads_kv);
  b.seq = fcl_sequence_of(p, seqs, b.batch IO_LOADS_ARG);
  b.q0 = qblock * block_q;  // packed: a slot
  b.rows = clamp(b.seq.nq * PACK_GQA - b.q0, 0, block_q);
  b.k_lo = b.k_hi = b.full_lo = b.full_hi = 0;
  if (b.rows > 0) {  // the keys of the block's tokens
    const int t0 = SLOT_TOKEN(b.q0), t1 = SLOT_TOKEN(b.q0 + b.rows - 1);
    fcl_block_keys(b.seq.nq, b.seq.nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), t0, t1 - t0 + 1, &b.k_lo,
                   &b.k_hi, &b.full_lo, &b.full_hi);
  }
  b.lse = (size_t)b.batch * p.lse_batch + (size_t)b.head * p.lse_head + b.seq.q_start;
#if SPLIT_KV
  {  // the keys of this split only: none when they miss the block's
    const int split_lo = split * p.split_keys;
    const int split_hi = split_lo + min(p.split_keys, INT_MAX - split_lo);
    b.k_lo = max(b.k_lo, split_lo);
    b.k_hi = min(b.k_hi, split_hi);
    if (b.k_hi <= b.k_lo) b.k_lo = b.k_hi = 0;  // none: an empty range, in order
  }
  b.o_split = (size_t)split * p.o_split;
  b.lse += (size_t)split * p.lse_split;
#else
  b.o_split = 0;
#endif
#if ALIBI
  b.slope = LOAD_F32(alibi, b.batch * p.alibi_batch + b.head);
#else
  (void)alibi;
  b.slope = 0.0f;
#endif
  IO_HELPER_LOADS_DONE();
  return b;
}

/* ---- the decode kernels' key groups ----------------------------------------
 * Both decode forwards (flash_fwd_decode.cl, flash_fwd_decode_mma.cl) give
 * the keys of a block to `groups` groups of work-items, each with its own
 * running max m, sum l and accumulator per row, left in `state` as
 * [group][row][m, l, accumulator of HEAD_DIM_MAX columns]. Merged exactly,
 * as fcl_merge_states merges splits: O = sum_g w_g acc_g / sum_g w_g l_g,
 * w_g = 2^((m_g - max_g m_g) x); then O and LSE of the block's rows are
 * stored, four columns a work-item, by the work-group. A statement macro,
 * expanded in those kernels only: they store four columns of O with
 * DECODE_STORE4(dst, x), counted (the MMA one through the PTX conversion
 * its instructions use), and need qb, tid, o_rows and lse in scope. */
#define FCL_DECODE_STORE(state, groups)                                         \
  for (int i_ = tid; i_ < BLOCK_Q * (HEAD_DIM_MAX / 4); i_ += WG_SIZE) {        \
    const int r_ = i_ / (HEAD_DIM_MAX / 4), c_ = (i_ - r_ * (HEAD_DIM_MAX / 4)) * 4; \
    const int slot_ = qb.q0 + r_;                                               \
    if (slot_ >= qb.seq.nq * PACK_GQA) continue;                                \
    __local const float *row_ = (state) + r_ * (HEAD_DIM_MAX + 2);              \
    const int group_stride_ = BLOCK_Q * (HEAD_DIM_MAX + 2);                     \
    float top_ = FCL_MAX_INIT;                                                  \
    for (int g_ = 0; g_ < (groups); ++g_) top_ = fmax(top_, row_[g_ * group_stride_]); \
    float sum_ = 0.0f;                                                          \
    float4 x_ = (float4)(0.0f);                                                 \
    for (int g_ = 0; g_ < (groups); ++g_) {                                     \
      __local const float *st_ = row_ + g_ * group_stride_;                     \
      const float w_ = EXP2((st_[0] - top_) * p.exp_factor);                    \
      sum_ += w_ * st_[1];                                                      \
      x_ = fma((float4)(w_), vload4(0, st_ + 2 + c_), x_);                      \
    }                                                                           \
    /* a row that saw no key has l = 0 and acc = 0: zeros */                    \
    const float inv_ = sum_ > 0.0f ? 1.0f / sum_ : 0.0f;                        \
    const size_t at_ =                                                          \
        (size_t)SLOT_TOKEN(slot_) * p.o.seq + (size_t)SLOT_HEAD(slot_) * p.o.head; \
    if (c_ < p.head_dim) DECODE_STORE4(o_rows + at_ + c_, x_ * inv_);            \
    if (FCL_STORES_LSE(lse) && c_ == 0) /* l is 0 only for a row that saw no key; NaN stays NaN */ \
      STORE_F32(lse, qb.lse + (size_t)SLOT_HEAD(slot_) * p.lse_head + SLOT_TOKEN(slot_), \
                sum_ == 0.0f ? -INFINITY : top_ * p.lse_factor + log(sum_));    \
  }

/* ---- merging attention states ------------------------------------------
 * Parts p over disjoint keys, with natural LSE_p and O_p, merge to
 * O = sum_p w_p O_p / sum_p w_p and LSE = m + log(sum_p w_p), w_p =
 * exp(LSE_p - m) for the largest LSE m (merge.cl, and the merge in a split
 * launch below). A part of LSE -inf weighs nothing, whatever its O (a
 * split that saw no key); a NaN or +inf LSE makes the row NaN; no weight
 * at all gives zeros and -inf. */
inline int fcl_merge_bad(float lse_part) { return isnan(lse_part) || lse_part == INFINITY; }

inline void fcl_merge_add(float lse_part, float4 o_part, float m, float *sum, float4 *acc) {
  if (lse_part != -INFINITY) {
    const float w = exp(lse_part - m);
    *sum += w;
    *acc += w * o_part;
  }
}

inline float4 fcl_merged_o(float4 acc, float sum, int bad) {
  return bad ? (float4)(NAN) : sum > 0.0f ? acc / sum : (float4)(0.0f);
}

inline float fcl_merged_lse(float m, float sum, int bad) {
  return bad ? NAN : sum > 0.0f ? m + log(sum) : -INFINITY;
}

/* ---- a split forward's merge in its own launch --------------------------
 * MERGE_LAST_SPLIT = 1 (SPLIT_KV decode kernels; fcl_plan.merge): each
 * work-group, its partial O and LSE stored, fences them device-wide and
 * counts itself done in arrivals[block]; the one whose count completes the
 * block (whichever split it ran) merges the block's splits exactly, as
 * fcl_merge_states does, into o_merged and lse_merged, and sets the count
 * back to 0. Nothing waits for another work-group, so nothing depends on
 * which run at once. It adds the splits in their order: the same bits
 * whichever finishes last. Each partial LSE and O element is loaded once,
 * as by the merge kernel, so the I/O model is the same (the count is not
 * counted). docs/design.md, "The merge", says why the fences suffice. */
#ifndef MERGE_LAST_SPLIT
#define MERGE_LAST_SPLIT 0
#endif
#if MERGE_LAST_SPLIT && !SPLIT_KV
#error "MERGE_LAST_SPLIT merges the splits of a SPLIT_KV forward"
#endif
#if MERGE_LAST_SPLIT
#define MERGE_LOADS 16  // parts whose O a work-item loads before adding them (v20: 16 for 8)

/* Orders this work-item's global loads and stores against other compute
 * units': NVIDIA's membar.gl, by name (fence.sc.gpu in the PTX memory
 * model); elsewhere OpenCL's global fence. */
inline void fcl_fence_device(void) {
#if FCL_NVIDIA_PTX
  asm volatile("membar.gl;" ::: "memory");
#else
  mem_fence(CLK_GLOBAL_MEM_FENCE);
#endif
}

/* The merge of block qb's p.splits partial states, by the work-group
 * (wg_size items, all of them calling; rows and head_dim_max are the
 * kernel's BLOCK_Q and HEAD_DIM_MAX): its LSEs staged in `stage` (rows x
 * p.splits floats of local memory the kernel is done with; the planner
 * keeps splits within it), then four columns of a row a work-item. */
inline void fcl_merge_block_splits(const fcl_params p, const fcl_query_block qb, int tid,
                                   int wg_size, int rows, int head_dim_max,
                                   __global const store_t *o_parts,
                                   __global const float *lse_parts,
                                   __global store_t *o_merged, __global float *lse_merged,
                                   __local float *stage IO_LOADS IO_STORES) {
  IO_HELPER_INIT;
  const int splits = p.splits, slots = qb.seq.nq * PACK_GQA, quads = head_dim_max / 4;
  const size_t lse0 = (size_t)qb.batch * p.lse_batch + (size_t)qb.head * p.lse_head + qb.seq.q_start;
  __global const store_t *part_rows = o_parts + fcl_at(p.o, qb.batch, qb.seq.q_start, qb.head);
  __global store_t *o_rows = o_merged + fcl_at(p.o_merged, qb.batch, qb.seq.q_start, qb.head);
  /* A work-item's first batch of O parts is loaded with the LSEs, so that
   * the two wait on one round trip (a split decode has 32-64 parts). */
  float4 x[MERGE_LOADS];
  {
    const int r = tid / quads, c = (tid - r * quads) * 4, slot = qb.q0 + r;
    if (r < rows && slot < slots && c < p.head_dim) {
      const size_t at = (size_t)SLOT_TOKEN(slot) * p.o.seq + (size_t)SLOT_HEAD(slot) * p.o.head + c;
UNROLL
      for (int j = 0; j < MERGE_LOADS; ++j)
        x[j] = j < splits ? LOAD4(part_rows, at + (size_t)j * p.o_split) : (float4)(0.0f);
    }
  }
  for (int i = tid; i < rows * splits; i += wg_size) {  // [row][split]
    const int r = i / splits, s = i - r * splits, slot = qb.q0 + r;
    stage[i] = slot < slots ? LOAD_F32(lse_parts, lse0 + (size_t)s * p.lse_split +
                                                      (size_t)SLOT_HEAD(slot) * p.lse_head +
                                                      SLOT_TOKEN(slot))
                            : -INFINITY;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = tid; i < rows * quads; i += wg_size) {
    const int r = i / quads, c = (i - r * quads) * 4, slot = qb.q0 + r;
    if (slot >= slots || c >= p.head_dim) continue;
    __local const float *row_lse = stage + r * splits;
    float m = -INFINITY, sum = 0.0f;
    int bad = 0;  // a NaN or +inf LSE
    for (int s = 0; s < splits; ++s) {
      bad |= fcl_merge_bad(row_lse[s]);
      m = fmax(m, row_lse[s]);
    }
    const size_t part_at = (size_t)SLOT_TOKEN(slot) * p.o.seq + (size_t)SLOT_HEAD(slot) * p.o.head + c;
    float4 acc = (float4)(0.0f);
    for (int s0 = 0; s0 < splits; s0 += MERGE_LOADS) {
      if (i != tid || s0 != 0) {  // (the first batch is in)
UNROLL
        for (int j = 0; j < MERGE_LOADS; ++j)
          x[j] = s0 + j < splits ? LOAD4(part_rows, part_at + (size_t)(s0 + j) * p.o_split)
                                 : (float4)(0.0f);
      }
UNROLL
      for (int j = 0; j < MERGE_LOADS; ++j)
        fcl_merge_add(s0 + j < splits ? row_lse[s0 + j] : -INFINITY, x[j], m, &sum, &acc);
    }
    STORE4(o_rows, (size_t)SLOT_TOKEN(slot) * p.o_merged.seq +
                       (size_t)SLOT_HEAD(slot) * p.o_merged.head + c,
           fcl_merged_o(acc, sum, bad));
    if (FCL_STORES_LSE(lse_merged) && c == 0)
      STORE_F32(lse_merged, lse0 + (size_t)SLOT_HEAD(slot) * p.lse_head + SLOT_TOKEN(slot),
                fcl_merged_lse(m, sum, bad));
  }
  IO_HELPER_LOADS_DONE();
  IO_HELPER_STORES_DONE();
}

/* The arrival, and the merge by the block's last split: a statement macro
 * at kernel scope after the partial state's stores (FCL_DECODE_STORE),
 * with qb, tid, o, lse, o_merged, lse_merged and arrivals in scope. The
 * fences before the count and after it are the release and acquire of
 * the PTX memory model's fence-and-atomic patterns; thread 0's, either
 * side of the barriers, carry the work-group's stores and loads. */
#define FCL_MERGE_LAST_SPLIT(stage)                                              \
  fcl_fence_device();                                                           \
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE); /* stage read: free */   \
  if (tid == 0) {                                                               \
    const int block_ = get_group_id(0) % (get_num_groups(0) / p.splits);       \
    fcl_fence_device();                                                         \
    const int last_ = atomic_inc(arrivals + block_) == p.splits - 1;           \
    if (last_) atomic_xchg(arrivals + block_, 0);                               \
    fcl_fence_device();                                                         \
    (stage)[0] = last_ ? 1.0f : 0.0f; /* the verdict, in local memory it has */ \
  }                                                                             \
  barrier(CLK_LOCAL_MEM_FENCE);                                                  \
  const int merge_last_ = (stage)[0] != 0.0f;                                   \
  barrier(CLK_LOCAL_MEM_FENCE); /* read by all before the merge stages LSEs */  \
  if (merge_last_) {                                                            \
    fcl_fence_device();                                                         \
    fcl_merge_block_splits(p, qb, tid, WG_SIZE, BLOCK_Q, HEAD_DIM_MAX, o, lse, o_merged, \
                           lse_merged, (stage) IO_LOADS_ARG IO_STORES_ARG);     \
  }
#else
#define FCL_MERGE_LAST_SPLIT(stage)
#endif

/* ---- the key-block grid ----------------------------------------------------
 * The backward's dK/dV kernels own a block of keys of one (batch, kv head)
 * and stream the query tiles of every query head of its group. Key blocks
 * vary fastest (ragged: the host's work list, kv heads outermost). */
typedef struct fcl_key_block {
  int k0, keys;                // first key of the block; keys of it in the sequence
  int batch, kv_head, group;   // group: query heads per kv head
  fcl_sequence seq;
  /* Query rows [q_lo, q_hi) see some key of the block, [full_lo, full_hi)
   * all of them (params.h, fcl_block_queries). */
  int q_lo, q_hi, full_lo, full_hi;
  /* The query tiles of block_k rows it streams, [first_tile, end_tile), and
   * the heads of its group it reads them for: none where it sees no query
   * row, so that such a block reads nothing of them, slopes included (as
   * host/iomodel.c counts). */
  int first_tile, end_tile, heads;
} fcl_key_block;

/* Head `member` of a key block's group: its index, and where its rows of Q
 * and dO (elements) and of LSE and D (floats) start. */
typedef struct fcl_group_head {
  int head;
  size_t q, dout, stats;
} fcl_group_head;

inline fcl_key_block fcl_locate_key_block(const fcl_params p, __global const int *seqs,
                                          __global const int *work, int block_k IO_LOADS) {
  IO_HELPER_INIT;
  fcl_key_block b;
  const int group_id = get_group_id(0);
  int kblock;
  if (p.ragged) {
    const int item = group_id % p.work_items;
    b.kv_head = group_id / p.work_items;
    const int2 w = FCL_COUNTED_LOAD(8, vload2(item, work));
    b.batch = w.x;
    kblock = w.y;
  } else {
    const int n_kblocks = (p.seqlen_k + block_k - 1) / block_k;
    const int bh = group_id / n_kblocks;
    kblock = group_id - bh * n_kblocks;
    b.kv_head = bh % p.heads_kv;
    b.batch = bh / p.heads_kv;
  }
  b.group = p.heads_q / p.heads_kv;
  b.seq = fcl_sequence_of(p, seqs, b.batch IO_LOADS_ARG);
  IO_HELPER_LOADS_DONE();
  b.k0 = kblock * block_k;
  b.keys = clamp(b.seq.nk - b.k0, 0, block_k);
  b.q_lo = b.q_hi = b.full_lo = b.full_hi = 0;
  if (b.keys > 0)
    fcl_block_queries(b.seq.nq, b.seq.nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), b.k0, b.keys,
                      &b.q_lo, &b.q_hi, &b.full_lo, &b.full_hi);
  b.first_tile = b.q_lo / block_k;
  b.end_tile = (b.q_hi + block_k - 1) / block_k;
  b.heads = b.first_tile < b.end_tile ? b.group : 0;
  return b;
}

inline fcl_group_head fcl_group_head_of(const fcl_params p, const fcl_key_block kb, int member) {
  fcl_group_head h;
  h.head = kb.kv_head * kb.group + member;
  h.q = fcl_at(p.q, kb.batch, kb.seq.q_start, h.head);
  h.dout = fcl_at(p.dout, kb.batch, kb.seq.q_start, h.head);
  h.stats = (size_t)kb.batch * p.lse_batch + (size_t)h.head * p.lse_head + kb.seq.q_start;
  return h;
}

/* The ALiBi slope of (batch, head), 0 without ALiBi. */
#if ALIBI
#define ALIBI_SLOPE(batch, head) LOAD_F32(alibi, (batch) * p.alibi_batch + (head))
#else
#define ALIBI_SLOPE(batch, head) 0.0f
#endif

/* LSE, in log2 units (LSE log2(e), for fcl_prob), D (= rowsum(dO * O)) and,
 * with ROW_KEYS_IN_LOCAL, the visible keys [lo, hi) of query rows
 * [q0, q0 + n) of a sequence of nq queries and nk keys, into local arrays
 * of n by the work-group (tid, WG_SIZE), from row 0 of a (batch, head) at
 * `stat`; rows from nq on get LSE -inf, which the backward kernels read as
 * "P = 0", and D 0. Without ROW_KEYS_IN_LOCAL, lo_dst and hi_dst are not
 * used (ROW_SEES needs no bounds). */
#if ROW_KEYS_IN_LOCAL
#define ROW_KEYS_STORE(lo_dst, hi_dst, i_, row_, live_, nq, nk)                 \
  do {                                                                          \
    int lo_ = 0, hi_ = 0;                                                       \
    if (live_) fcl_row_keys((nq), (nk), WINDOW_LEFT(p), WINDOW_RIGHT(p), row_, &lo_, &hi_); \
    (lo_dst)[i_] = lo_;                                                         \
    (hi_dst)[i_] = hi_;                                                         \
  } while (0)
#else
#define ROW_KEYS_STORE(lo_dst, hi_dst, i_, row_, live_, nq, nk) ((void)0)
#endif
#define LOAD_ROW_STATS(lse2_dst, d_dst, lo_dst, hi_dst, lse, dsum, stat, q0, n, nq, nk) \
  for (int i_ = tid; i_ < (n); i_ += WG_SIZE) {                                 \
    const int row_ = (q0) + i_, live_ = row_ < (nq);                            \
    (lse2_dst)[i_] = live_ ? LOAD_F32(lse, (stat) + row_) * M_LOG2E_F : -INFINITY; \
    (d_dst)[i_] = live_ ? LOAD_F32(dsum, (stat) + row_) : 0.0f;                 \
    ROW_KEYS_STORE(lo_dst, hi_dst, i_, row_, live_, nq, nk);                    \
  }

/* ---- four columns of a row from global memory (the backward's kernels) -- */

/* Defines `name`: columns col..col+3 of a row as a `type`, those past
 * head_dim 0; vec4: the row and head_dim are multiples of 4 elements
 * (params.h), so that one aligned vector load takes them. Each program
 * instantiates the loaders it needs (load_quad, floats for registers;
 * load_tile_quad, what a local tile holds): the MMA programs need none. */
#define DEFINE_QUAD_LOADER(name, type, load4, load1)                           \
  inline type name(__global const store_t *row, const int col,                \
                   const int head_dim, const int vec4 IO_LOADS) {             \
    IO_HELPER_INIT;                                                            \
    type x = (type)(0);                                                        \
    if (vec4) {                                                                \
      if (col < head_dim) x = load4(row, col);                                 \
    } else {                                                                   \
      if (col + 0 < head_dim) x.x = load1(row, col + 0);                       \
      if (col + 1 < head_dim) x.y = load1(row, col + 1);                       \
      if (col + 2 < head_dim) x.z = load1(row, col + 2);                       \
      if (col + 3 < head_dim) x.w = load1(row, col + 3);                       \
    }                                                                          \
    IO_HELPER_LOADS_DONE();                                                    \
    return x;                                                                  \
  }
