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

#if FCL_NVIDIA_PTX
/* x from the lane whose id differs in the bits of `mask` (butterfly). */
inline float fcl_shfl_xor(float x, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=f"(r)
               : "f"(x), "r"(mask));
  return r;
}
#endif

/* ---- the query-block grid ------------------------------------------------
 * The kernels that own a block of query rows (both forwards, the
 * backward's dQ) share one flat grid, since NVIDIA caps the 2nd and 3rd
 * grid dimensions at 65535. Query blocks vary fastest, so that neighbouring
 * work-groups share K and V in cache; with a causal mask the last blocks,
 * which see the most keys, start first, so that a launch does not end on a
 * long tail. */
typedef struct fcl_query_block {
  int q0;                      // first query row of the block
  int batch, head, kv_head;
  size_t q_stride, kv_stride;  // elements between rows: Q, O, dO; K, V
  size_t q_offset, kv_offset;  // row 0 of this (batch, head) in Q; in K
  /* Query i sees key j iff j <= i + diag (causal, bottom-right aligned).
   * Keys below kv_full are seen by every row of the block, keys from
   * kv_end on by none. */
  int diag, kv_full, kv_end;
} fcl_query_block;

inline fcl_query_block fcl_locate_query_block(int block_q, int causal, int seqlen_q,
                                              int seqlen_k, int heads_q, int heads_kv,
                                              int head_dim) {
  fcl_query_block b;
  const int n_qblocks = (seqlen_q + block_q - 1) / block_q;
  const int group_id = get_group_id(0);
  const int bh = group_id / n_qblocks;
  const int qblock = causal ? n_qblocks - 1 - (group_id - bh * n_qblocks)
                            : group_id - bh * n_qblocks;
  b.head = bh % heads_q;
  b.batch = bh / heads_q;
  b.kv_head = b.head / (heads_q / heads_kv);
  b.q0 = qblock * block_q;
  b.q_stride = (size_t)heads_q * head_dim;
  b.kv_stride = (size_t)heads_kv * head_dim;
  b.q_offset = ((size_t)b.batch * seqlen_q * heads_q + b.head) * head_dim;
  b.kv_offset = ((size_t)b.batch * seqlen_k * heads_kv + b.kv_head) * head_dim;
  b.diag = seqlen_k - seqlen_q;
  const int last_row = min(b.q0 + block_q, seqlen_q) - 1;
  b.kv_full = causal ? clamp(b.q0 + b.diag + 1, 0, seqlen_k) : seqlen_k;
  b.kv_end = causal ? clamp(last_row + b.diag + 1, 0, seqlen_k) : seqlen_k;
  return b;
}

/* ---- the key-block grid ----------------------------------------------------
 * The backward's dK/dV kernels own a block of keys of one (batch, kv head)
 * and stream the query tiles of every query head of its group. Key blocks
 * vary fastest; causal: the first key blocks, seen by the most queries,
 * start first. */
typedef struct fcl_key_block {
  int k0;                      // first key of the block
  int batch, kv_head, group;   // group: query heads per kv head
  size_t q_stride, kv_stride;  // elements between rows: Q, dO; K, V, dK, dV
  size_t kv_offset;            // row 0 of this (batch, kv head) in K
  /* Query i sees key j iff j <= i + diag. Query tiles of block_q rows
   * before first_tile see none of the block's keys (skipped); queries from
   * q_full on see all of them (no mask). */
  int diag, first_tile, q_full;
} fcl_key_block;

inline fcl_key_block fcl_locate_key_block(int block_k, int block_q, int causal, int seqlen_q,
                                          int seqlen_k, int heads_q, int heads_kv,
                                          int head_dim) {
  fcl_key_block b;
  const int n_kblocks = (seqlen_k + block_k - 1) / block_k;
  const int bh = get_group_id(0) / n_kblocks;
  b.k0 = (get_group_id(0) - bh * n_kblocks) * block_k;
  b.kv_head = bh % heads_kv;
  b.batch = bh / heads_kv;
  b.group = heads_q / heads_kv;
  b.q_stride = (size_t)heads_q * head_dim;
  b.kv_stride = (size_t)heads_kv * head_dim;
  b.kv_offset = ((size_t)b.batch * seqlen_k * heads_kv + b.kv_head) * head_dim;
  b.diag = seqlen_k - seqlen_q;
  const int last_key = min(b.k0 + block_k, seqlen_k) - 1;
  b.first_tile = causal ? clamp(b.k0 - b.diag, 0, seqlen_q) / block_q : 0;
  b.q_full = causal ? clamp(last_key - b.diag, 0, seqlen_q) : 0;
  return b;
}

/* LSE, in log2 units (LSE log2(e), for fcl_prob), and D (= rowsum(dO * O))
 * of query rows [q0, q0 + n) into local arrays of n by the work-group (tid,
 * WG_SIZE); rows from seqlen_q on get LSE -inf, which the backward kernels
 * read as "P = 0", and D 0. */
#define LOAD_ROW_STATS(lse2_dst, d_dst, lse, dsum, stat_offset, q0, n)          \
  for (int i_ = tid; i_ < (n); i_ += WG_SIZE) {                                 \
    const int live_ = (q0) + i_ < seqlen_q;                                     \
    (lse2_dst)[i_] =                                                            \
        live_ ? LOAD_F32(lse, (stat_offset) + (q0) + i_) * M_LOG2E_F : -INFINITY; \
    (d_dst)[i_] = live_ ? LOAD_F32(dsum, (stat_offset) + (q0) + i_) : 0.0f;     \
  }

/* The backward's P of an unscaled score s in a row whose LSE is lse2 in
 * log2 units: e^(scale s - LSE) as 2^(scale log2(e) s - LSE log2(e)),
 * where scale_log2 = scale log2(e): the forward's exponential, with which
 * the f32 tensor-core backward ran 1.05-1.07x as fast as with exp() on an
 * H200 (docs/performance.md, v6). */
inline float fcl_prob(float s, float scale_log2, float lse2) {
  return EXP2(s * scale_log2 - lse2);
}

/* ---- four columns of a row from global memory (the backward's kernels) -- */

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

/* Defines `name`: columns col..col+3 of a row as a `type`, those past
 * head_dim 0. Each program instantiates the loaders it needs (load_quad,
 * floats for registers; load_tile_quad, what a local tile holds): the MMA
 * programs need none. */
#define DEFINE_QUAD_LOADER(name, type, load4, load1)                           \
  inline type name(__global const store_t *row, const int col,                \
                   const int head_dim IO_LOADS) {                             \
    IO_HELPER_INIT;                                                            \
    type x = (type)(0);                                                        \
    if ((head_dim & 3) == 0) {                                                 \
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
