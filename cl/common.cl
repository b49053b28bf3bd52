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
 * (host/plan/plan.c); the I/O is the same either way. */
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

/* ---- K and V elements --------------------------------------------------------
 * The forwards read the call's keys and values (a KV cache's too) through
 * these, never through the storage type's macros, so that K and V kept in
 * another form are read, and converted, in this one place: four elements
 * of a row from column i, or one, as floats (KV_LOAD4, KV_LOAD1); as a
 * local tile holds them (KV_TILE4, KV_TILE1); for the matrix
 * instructions, four elements' bytes as stored (KV_RAW4, a kv_raw_t;
 * KV_RAW_ZERO reads as zeros), which fcl_kv_raw_bits4 (mma.cl) turns
 * into the operands' 16-bit bits where they are used, so that a load runs
 * ahead of its conversion; each from a row's start and a column. The
 * storage type's, or with FCL_KV_DTYPE a quantized cache's (below). (The
 * MMA forward's tiles arrive by cp.async as storage bytes, with no
 * conversion on the way: the planner keeps a quantized cache off it.) */
#define LOAD_BITS4(p, i) \
  FCL_COUNTED_LOAD(8, *(__global const uint2 *)((__global const ushort *)(p) + (i)))
#ifndef FCL_KV_DTYPE
#define FCL_KV_DTYPE 0  // K and V: 0 in the storage type, else fcl_kv_dtype's form (kvquant.h)
#endif
#if FCL_KV_DTYPE == 0
typedef store_t kv_t;
#define KV_ROW_BYTES(head_dim) ((head_dim) * (int)sizeof(store_t))
#define KV_LOAD4(p, i) LOAD4(p, i)
#define KV_LOAD1(p, i) LOAD1(p, i)
#define KV_TILE4(p, i) LOAD_TILE4(p, i)
#define KV_TILE1(p, i) LOAD_TILE1(p, i)
typedef uint2 kv_raw_t;
#define KV_COLUMN_IN(c, head_dim) ((c) < (head_dim))
#define KV_RAW4(p, i, aligned4) ((void)(aligned4), LOAD_BITS4(p, i))
#define KV_RAW4_BESIDE(prev, p, i, aligned4) KV_RAW4(p, i, aligned4)
#define KV_VIEW_ALIGNED4(x, view) 1
#define KV_RAW_ZERO ((kv_raw_t)(0u))
#else
/* A quantized form (include/flashcl.h, fcl_kv_dtype): the views count
 * bytes and a row's pointer is bytes; four elements from column i (a
 * multiple of 4) or one, as floats. A block's scale is counted with its
 * first column's load, so that each byte of a row a kernel reads counts
 * once; a Q4_0 byte with its even column. The fp8 forms load the codes'
 * values: the host folds k_scale into the logits' scale and the kernels
 * multiply the output by v_scale where a row ends (FCL_ROW_OUT). */
typedef uchar kv_t;
#if TILE_STORAGE
#error "a quantized KV form keeps float tiles (TILE_STORAGE 0)"
#endif
/* Four elements' bytes as stored (KV_RAW4): x the codes (Q4_0's two bytes
 * in its low half), y a block form's f16 scale bits. Loads are of 2-byte
 * units: a quantized cache's offset and strides are even (validate.c) and
 * a block's codes start 2 bytes past it; bytes would take one load each.
 * Four codes at an address known a multiple of 4 (aligned4) take one:
 * fp8's in a view whose offset and strides all are (KV_VIEW_ALIGNED4),
 * Q8_0's of an odd block there. */
typedef uint2 kv_raw_t;
inline uint fcl_kv_u32(__global const kv_t *at, const int aligned4) {
  return aligned4 ? *(__global const uint *)at : as_uint(vload2(0, (__global const ushort *)at));
}
/* Whether a view's rows all start at multiples of `bytes` (a power of
 * two): the buffer, its offset and its strides are; once per launch. */
#define KV_VIEW_ALIGNED(x, view, bytes)                                                      \
  ((((size_t)(x) | (size_t)((view).offset | (view).batch | (view).seq | (view).head)) &     \
    ((bytes) - 1)) == 0)
#define KV_VIEW_ALIGNED4(x, view) KV_VIEW_ALIGNED(x, view, 4)
/* f16 bits to float, exactly: one conversion instruction on NVIDIA. */
inline float fcl_half_bits_to_float(const uint h) {
#if FCL_NVIDIA_PTX
  float f;
  asm("{.reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo;}" : "=f"(f) : "r"(h));
  return f;
#else
  const ushort bits = (ushort)h;
  return vload_half(0, (const __private half *)&bits);
#endif
}
#define KV_SCALE_BYTES(i) ((i) % FCL_KV_BLOCK == 0 ? 2 : 0)
#if FCL_KV_DTYPE == 1  /* Q8_0 */
#define KV_BLOCK_AT(p, i) ((p) + (size_t)((i) / FCL_KV_BLOCK) * FCL_KV_Q8_BYTES)
inline kv_raw_t fcl_kv_raw4_scaled(__global const kv_t *row, const int i, const int aligned4,
                                   const uint scale) {
  __global const kv_t *b = KV_BLOCK_AT(row, i);
  return (kv_raw_t)(fcl_kv_u32(b + 2 + i % FCL_KV_BLOCK, aligned4 && i / FCL_KV_BLOCK % 2), scale);
}
/* The codes as floats: 2^23 + (q + 128) holds q + 128 in its low mantissa
 * bits, and subtracting 2^23 + 128 leaves q exactly. */
inline float4 fcl_kv_codes_float4(const uint x) {
  const uint u = x ^ 0x80808080u;
  return as_float4((uint4)(u & 0xffu, u >> 8 & 0xffu, u >> 16 & 0xffu, u >> 24) | 0x4b000000u) -
         8388736.0f;
}
inline float fcl_kv_load1(__global const kv_t *row, const int i) {
  __global const kv_t *b = KV_BLOCK_AT(row, i);
  return (float)as_char(b[2 + i % FCL_KV_BLOCK]) * vload_half(0, (__global const half *)b);
}
#define KV_BYTES4(i) (4 + KV_SCALE_BYTES(i))
#define KV_BYTES1(i) (1 + KV_SCALE_BYTES(i))
#define KV_RAW_ZERO ((kv_raw_t)(0u))  /* q = 0, d = 0 */
#elif FCL_KV_DTYPE == 2  /* Q4_0 */
#define KV_BLOCK_AT(p, i) ((p) + (size_t)((i) / FCL_KV_BLOCK) * FCL_KV_Q4_BYTES)
inline kv_raw_t fcl_kv_raw4_scaled(__global const kv_t *row, const int i, const int aligned4,
                                   const uint scale) {
  (void)aligned4;  /* two bytes of codes: one load already */
  return (kv_raw_t)(*(__global const ushort *)(KV_BLOCK_AT(row, i) + 2 + i % FCL_KV_BLOCK / 2),
                    scale);
}
/* The codes (nibbles, element i's the low one) as floats, as Q8_0's. */
inline float4 fcl_kv_codes_float4(const uint x) {
  return as_float4((uint4)(x & 15u, x >> 4 & 15u, x >> 8 & 15u, x >> 12 & 15u) | 0x4b000000u) -
         8388616.0f;
}
inline float fcl_kv_load1(__global const kv_t *row, const int i) {
  __global const kv_t *b = KV_BLOCK_AT(row, i);
  const uchar x = b[2 + i % FCL_KV_BLOCK / 2];
  return (float)(((i & 1) ? x >> 4 : x & 15) - 8) * vload_half(0, (__global const half *)b);
}
#define KV_BYTES4(i) (2 + KV_SCALE_BYTES(i))
#define KV_BYTES1(i) (((i) & 1 ? 0 : 1) + KV_SCALE_BYTES(i))
#define KV_RAW_ZERO ((kv_raw_t)(0x8888u, 0u))  /* q = 0, d = 0 */
#elif FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4  /* fp8 E4M3FN, E5M2 */
#define KV_E4 (FCL_KV_DTYPE == 3)
inline kv_raw_t fcl_kv_raw4(__global const kv_t *row, const int i, const int aligned4) {
  return (kv_raw_t)(fcl_kv_u32(row + i, aligned4), 0u);
}
inline float4 fcl_kv_raw_float4(const kv_raw_t r) {
  return (float4)(fcl_fp8_to_float(r.x & 0xffu, KV_E4), fcl_fp8_to_float(r.x >> 8 & 0xffu, KV_E4),
                  fcl_fp8_to_float(r.x >> 16 & 0xffu, KV_E4), fcl_fp8_to_float(r.x >> 24, KV_E4));
}
inline float fcl_kv_load1(__global const kv_t *row, const int i) {
  return fcl_fp8_to_float(row[i], KV_E4);
}
#define KV_BYTES4(i) 4
#define KV_BYTES1(i) 1
#define KV_RAW_ZERO ((kv_raw_t)(0u))
#else
#error "FCL_KV_DTYPE must be 0 to 4 (fcl_kv_dtype)"
#endif
#if FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2
/* Four elements' codes with their block's scale (KV_RAW4), or with one
 * already loaded (KV_RAW4_BESIDE). */
inline kv_raw_t fcl_kv_raw4(__global const kv_t *row, const int i, const int aligned4) {
  return fcl_kv_raw4_scaled(row, i, aligned4, *(__global const ushort *)KV_BLOCK_AT(row, i));
}
/* q d: exact in float (q 8 bits, d 11), as the host's reference has it. */
inline float4 fcl_kv_raw_float4(const kv_raw_t r) {
  return fcl_kv_codes_float4(r.x) * fcl_half_bits_to_float(r.y);
}
#endif
inline float4 fcl_kv_load4(__global const kv_t *row, const int i) {
  return fcl_kv_raw_float4(fcl_kv_raw4(row, i, 0));
}
/* The bytes of a row of head_dim elements. */
#if FCL_KV_DTYPE == 1
#define KV_ROW_BYTES(head_dim) ((head_dim) / FCL_KV_BLOCK * FCL_KV_Q8_BYTES)
#elif FCL_KV_DTYPE == 2
#define KV_ROW_BYTES(head_dim) ((head_dim) / FCL_KV_BLOCK * FCL_KV_Q4_BYTES)
#else
#define KV_ROW_BYTES(head_dim) (head_dim)
#endif
#define KV_LOAD4(p, i) FCL_COUNTED_LOAD(KV_BYTES4(i), fcl_kv_load4(p, i))
#define KV_LOAD1(p, i) FCL_COUNTED_LOAD(KV_BYTES1(i), fcl_kv_load1(p, i))
#define KV_TILE4(p, i) KV_LOAD4(p, i)
#define KV_TILE1(p, i) KV_LOAD1(p, i)
#define KV_RAW4(p, i, aligned4) FCL_COUNTED_LOAD(KV_BYTES4(i), fcl_kv_raw4(p, i, aligned4))
/* KV_RAW4_BESIDE: as KV_RAW4, where `prev` holds a group of the same
 * block loaded by KV_RAW4 (a block form then takes its scale: one load of
 * a scale per block a lane reads). KV_COLUMN_IN: whether four columns from
 * c are in the row; a block form's head_dim is a multiple of the block, so
 * it tests the block's first column, the same test for all its groups. */
#if FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2
#define KV_RAW4_BESIDE(prev, p, i, aligned4) \
  FCL_COUNTED_LOAD(KV_BYTES4(i), fcl_kv_raw4_scaled(p, i, aligned4, (prev).y))
#define KV_COLUMN_IN(c, head_dim) (((c) & -FCL_KV_BLOCK) < (head_dim))
#else
#define KV_RAW4_BESIDE(prev, p, i, aligned4) KV_RAW4(p, i, aligned4)
#define KV_COLUMN_IN(c, head_dim) ((c) < (head_dim))
#endif
#endif
/* A row's output factor where it ends: fcl_row_inv (below: the sum, with
 * the row's sink), and with fp8 K and V the values' per-tensor scale (the
 * host folds K's into the logits'). */
#if FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4
#define FCL_ROW_OUT(p, m, l, s) (fcl_row_inv(m, (p).lse_factor, l, s) * (p).v_scale)
#else
#define FCL_ROW_OUT(p, m, l, s) fcl_row_inv(m, (p).lse_factor, l, s)
#endif

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

/* 2^((s - m) x), the online softmax's exponential of a score s against the
 * row's max m; FCL_EXP_FMA 1: as 2^(s x - m x), one fused multiply-add a
 * score once m x is known (a measurement's option, never planned). */
#ifndef FCL_EXP_FMA
#define FCL_EXP_FMA 0
#endif
#if FCL_EXP_FMA
#define EXP2_FROM_MAX(s, m, x) EXP2(fma((s), (x), -(m) * (x)))
#else
#define EXP2_FROM_MAX(s, m, x) EXP2(((s) - (m)) * (x))
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
 * shuffles: the host's fcl__sums_by_shuffle (host/plan/plan.h). A shuffle over
 * absent lanes is undefined, so the work-group must fill sub-groups. */
#define FCL_SUMS_BY_SHUFFLE(wg, lanes) \
  (FCL_SHUFFLE != 0 && FCL_SUMS_BY_SHUFFLE_OF(FCL_SHUFFLE_WIDTH, wg, lanes))
/* Whether they are summed through local memory instead (more than one). */
#define FCL_SUMS_IN_LOCAL(wg, lanes) ((lanes) > 1 && !FCL_SUMS_BY_SHUFFLE(wg, lanes))

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
 * problem (host/run/flash.c); the naive algorithm's kernels take the default. */
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
 * rows, never stored: with the window pinned, no test of key < nk (fewer
 * registers). */
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

/* The transforms of a logit (scale q.k, natural units) in place, as
 * flash-attn applies them: the softcap, then ALiBi's bias, both before the
 * mask. Every family's forward and backward and the naive algorithm take
 * them from here, and with them the one rule for non-finite logits
 * (include/flashcl.h, "Non-finite inputs"): under a softcap a +-inf logit
 * becomes +-softcap (tanh(+-inf) = +-1), finite and weighed as any other,
 * and NaN stays NaN; masked keys are -inf after this, so weigh 0. */
#define FCL_TRANSFORM_LOGIT(logit, p, slope, rel, to_T)                         \
  do {                                                                          \
    if (SOFTCAP) (logit) = (p).softcap * tanh((logit) / (p).softcap);           \
    if (ALIBI) (logit) -= (slope) * fabs(to_T(rel));                            \
  } while (0)

/* The score of an unscaled dot product s; rel = i + nk - nq - j, the
 * query's distance past the key (ALiBi). One definition for a score
 * (fcl_score) and for 16 rows' scores across a vector's lanes
 * (fcl_score16, flash_fwd_cpu.cl); the pinned macros fold the branches. */
#define FCL_DEFINE_SCORE(name, T, I, to_T)                          \
  inline T name(T s, const fcl_params p, float slope, I rel) {      \
    if (!SCORES_TRANSFORMED) return (void)slope, (void)rel, s;      \
    T logit = p.scale * s;                                          \
    FCL_TRANSFORM_LOGIT(logit, p, slope, rel, to_T);                \
    return logit * M_LOG2E_F;                                       \
  }
FCL_DEFINE_SCORE(fcl_score, float, int, (float))
FCL_DEFINE_SCORE(fcl_score16, float16, int16, convert_float16)

/* The backward's P of an unscaled score s in a row whose LSE is lse2 in
 * log2 units (LSE log2(e)), and in *dscale the factor the transform puts
 * into dS = P (dP - D): d logit / d(scale s), 1 - tanh^2 with a softcap.
 * P = 2^(score exp_factor - lse2), the forward's exponential (faster than
 * exp(); docs/design.md, "The rules, measured"). As fcl_score, for one score (fcl_prob)
 * and for 16 across a vector's lanes (fcl_prob16, flash_bwd_cpu.cl). */
#define FCL_DEFINE_PROB(name, T, I, to_T)                                      \
  inline T name(T s, const fcl_params p, T lse2, float slope, I rel, T *dscale) { \
    *dscale = (T)(1.0f);                                                       \
    if (!SCORES_TRANSFORMED) return (void)slope, (void)rel, EXP2(s * p.exp_factor - lse2); \
    T logit = p.scale * s;                                                     \
    if (SOFTCAP) {                                                             \
      const T th = tanh(logit / p.softcap); /* the same tanh as the transform */ \
      *dscale = 1.0f - th * th;                                                \
    }                                                                          \
    FCL_TRANSFORM_LOGIT(logit, p, slope, rel, to_T);                           \
    return EXP2(logit * M_LOG2E_F - lse2);                                     \
  }
FCL_DEFINE_PROB(fcl_prob, float, int, (float))
FCL_DEFINE_PROB(fcl_prob16, float16, int16, convert_float16)

/* ---- a row's end -----------------------------------------------------------
 * Every forward ends a row the same way, from its softmax state: the
 * running max m (in the kernel's score units; m f is its natural log, f
 * p.lse_factor) and sum l, relative to m; and the row's sink s, a logit of
 * natural units that joins the denominator with no value (fcl_row_sink:
 * -inf for none). Its output is acc times fcl_row_inv(m, f, l, s), its LSE
 * fcl_row_lse(m, f, l, s). Without a sink: 1/l and m f + ln l, 0 and -inf
 * for a row that saw no key (l = 0, acc = 0); a NaN l (a NaN or +inf
 * logit) stays NaN. With one, the state first takes the sink in: with M =
 * m f, M' = max(M, s) and l' = l e^(M - M') + e^(s - M'), the output is acc
 * e^(M - M') / l' and LSE M' + ln l'; a row that saw no key gets zeros and
 * LSE s, and a NaN or +inf sink makes the row NaN. A term that joins every
 * row's denominator joins the row here. */
inline float fcl_row_top(float m, float l) { return l > 0.0f ? m : -INFINITY; }
inline float fcl_row_inv(float m, float f, float l, float s) {
  if (s == -INFINITY) return l > 0.0f ? 1.0f / l : 0.0f;
  const float mr = fcl_row_top(m * f, l), top = s > mr ? s : mr;  // NaN s: NaN below
  return exp(mr - top) / fma(l, exp(mr - top), exp(s - top));
}
inline float fcl_row_lse(float m, float f, float l, float s) {
  if (s == -INFINITY) return l == 0.0f ? -INFINITY : m * f + log(l);
  const float mr = fcl_row_top(m * f, l), top = s > mr ? s : mr;
  return top + log(fma(l, exp(mr - top), exp(s - top)));
}

/* Row `head`'s sink, in natural units, or -inf where there is none: no
 * sinks buffer, or a split forward's partial state, whose sink the merge
 * adds once (fcl_merge_sink). Each work-item that ends a row loads it; the
 * row's `lead` (the one that stores its LSE) counts the 4 bytes, so the
 * I/O model counts a row's sink once, as its LSE. */
#define fcl_row_sink(p, sinks, head, lead)                                      \
  ((sinks) != 0 && (p).splits == 1                                              \
       ? ((lead) ? LOAD_F32(sinks, head) : (sinks)[head])                       \
       : -INFINITY)

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

/* ---- four columns of a row from global memory (the backward's kernels) -- */

/* Defines `name`: columns col..col+3 of a row as a `type`, those past
 * head_dim 0; vec4: the row and head_dim are multiples of 4 elements
 * (params.h), so that one aligned vector load takes them. Each program
 * instantiates the loaders it needs (load_quad, floats for registers;
 * load_tile_quad, what a local tile holds): the MMA programs need none. */
#define DEFINE_QUAD_LOADER(name, type, load4, load1) \
  DEFINE_QUAD_LOADER_OF(name, type, store_t, load4, load1)
/* ... of a row of `elem`s (kv_t: common.cl's K and V loads). */
#define DEFINE_QUAD_LOADER_OF(name, type, elem, load4, load1)                  \
  inline type name(__global const elem *row, const int col,                   \
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

/* V, O, dO and dV rows' width bucket where the descriptor gives them a
 * width of their own (fcl_attention_desc.head_dim_v, run-time
 * p.head_dim_v): the -D option the prefill families take, else head_dim's;
 * and their width, which without the option is head_dim's, so that a
 * one-width build folds it (registers: a run-time width spilled on Arc). */
#ifndef HEAD_DIM_V_MAX
#define HEAD_DIM_V_MAX HEAD_DIM_MAX
#define FCL_HEAD_DIM_V(p) ((p).head_dim)
#else
#define FCL_HEAD_DIM_V(p) ((p).head_dim_v)
#endif
