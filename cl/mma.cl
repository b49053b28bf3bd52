/*
 * mma.cl — NVIDIA's warp-level matrix multiply-accumulate instructions
 * (PTX mma.sync, sm_80 and later) through inline PTX, and their emulation
 * through local memory for every other device; compiled after common.cl,
 * before the kernels that use them.
 *
 * Shapes: m16n8k8 with tf32 inputs (f32 storage) and m16n8k16 with f16 or
 * bf16 inputs, f32 accumulators. Fragments (PTX ISA, "Matrix fragments for
 * mma.m16n8k8 / m16n8k16"), lane = 4 g + t:
 *   - C, 16 x 8 f32: c[0..3] at rows g, g, g + 8, g + 8, columns 2t, 2t + 1,
 *     2t, 2t + 1;
 *   - A, 16 x 8 tf32: a[0..3] at rows g, g + 8, g, g + 8, columns t, t, t + 4,
 *     t + 4; B, 8 x 8: b[0..1] at rows (k) t, t + 4, column g;
 *   - A, 16 x 16 16-bit, two per register (lower column in the low half):
 *     a[0..3] at rows g, g + 8, g, g + 8, columns 2t..2t+1, 2t..2t+1,
 *     2t+8..2t+9, 2t+8..2t+9; B, 16 x 8: b[0..1] at rows 2t..2t+1,
 *     2t+8..2t+9, column g.
 *
 * f32 in 3xTF32: each operand x = big + small, both tf32, and a*b is taken
 * as a_small*b_big + a_big*b_small + a_big*b_big; the dropped
 * a_small*b_small and the split's own rounding leave 2^-21 relative.
 *
 * The emulation (MMA_EMULATE) keeps the fragment layouts: each lane writes
 * its fragments to a per-warp scratch, the work-group waits at a barrier,
 * each lane computes its C elements. All work-items of a work-group must
 * therefore call the instructions, and quad_max / quad_sum, the same
 * number of times.
 */

#ifndef MMA_EMULATE
#define MMA_EMULATE (!FCL_NVIDIA_PTX)
#endif

/* A kernel of these instructions with its work-group size as the plan
 * fixes it; MMA_REQD_WG 0 leaves the size unstated, since NVIDIA's ptxas
 * ignores a register cap (-cl-nv-maxrregcount) for an entry with a
 * required size (.reqntid; docs/design.md, "Register caps"). MMA_REG_CAP
 * (the host's, with that cap): the registers a lane is held to, 0 none. */
#ifndef MMA_REG_CAP
#define MMA_REG_CAP 0
#endif
#ifndef MMA_REQD_WG
#define MMA_REQD_WG (!MMA_REG_CAP)
#endif
#if MMA_REQD_WG
#define MMA_KERNEL(wg_size) __kernel __attribute__((reqd_work_group_size(wg_size, 1, 1)))
#else
#define MMA_KERNEL(wg_size) __kernel
#endif

/* Signatures take the per-warp scratch that emulation needs; MMA_SCRATCH
 * declares it, MMA_ARGS passes it, or nothing.
 *
 * Tensor cores add the products of an instruction and c exactly aligned
 * but round the sum toward zero (Fasi et al., "Numerical behavior of NVIDIA
 * tensor cores", 2021): a long chain of instructions into one accumulator
 * drifts toward zero by up to an ulp per instruction, which at f32 would
 * cost several times the naive algorithm's error. So in f32 a kernel sums
 * short chains of instructions into partial sums that start from zero and
 * join its running sums in ordinary, rounded-to-nearest additions
 * (MMA_CHAIN). The drift grows with the chain and each restart costs four
 * additions. Emulated on PoCL with 64-key tiles, one partial sum of O per
 * tile gave 2.9 times the naive algorithm's error at head_dim 8; chains of
 * 2 steps gave 1.0 there, 2.2 at 16, 1.0 at 64 and 0.7 at 128. The
 * emulation rounds the same way where it has doubles to sum exactly in.
 * MMA_CHAIN 0 starts every instruction from zero (mma_3xtf32): in a host
 * model of the backward (tools/numerics/mma_backward_error.py) about half
 * the gradient error of chains of 2 at head_dim 16, for a slower backward,
 * so it is not the default (docs/design.md, "The rules, measured"). */
#ifndef MMA_CHAIN
#define MMA_CHAIN 2         // f32: k-steps of 8 per partial sum; 0: see above
#endif
#if MMA_EMULATE && defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double exact_t;
#define TRUNCATE(x) convert_float_rtz(x)
/* MMA_EMULATE_ALIGN: a harsher model, for calibrating the emulation
 * against a GPU: the products and c are aligned to the largest of them and
 * each is truncated toward zero below its 24 + MMA_EMULATE_ALIGN_EXTRA
 * leading bits before the sum (Fasi et al. describe such alignment; how
 * many extra bits NVIDIA's hardware keeps was not measured): not the
 * default until calibrated (docs/design.md, "The rules, measured"). Needs
 * doubles. */
#ifndef MMA_EMULATE_ALIGN_EXTRA
#define MMA_EMULATE_ALIGN_EXTRA 0
#endif
#define MMA_ALIGNED MMA_EMULATE_ALIGN
#if MMA_ALIGNED
inline float aligned_sum(float c, const double *p, int n) {
  double m = fabs((double)c);
  for (int k = 0; k < n; ++k) m = fmax(m, fabs(p[k]));
  double acc = c;
  if (m == 0.0 || !isfinite(m)) {
    for (int k = 0; k < n; ++k) acc += p[k];
    return convert_float_rtz(acc);
  }
  int e;
  frexp(m, &e);
  const double quantum = ldexp(1.0, e - 24 - MMA_EMULATE_ALIGN_EXTRA);
  acc = trunc((double)c / quantum) * quantum;
  for (int k = 0; k < n; ++k) acc += trunc(p[k] / quantum) * quantum;
  return convert_float_rtz(acc);
}
#endif
#else
typedef float exact_t;
#define TRUNCATE(x) (x)
#define MMA_ALIGNED 0
#endif
#if MMA_EMULATE
#define MMA_SCRATCH , __local float *mma_a, __local float *mma_b, __local float *quad
#define MMA_ARGS , mma_a, mma_b, quad
/* First in a kernel that has `warps` warps, with its local arrays; the
 * quad's scratch only where it calls quad_max or quad_sum, so that every
 * array a kernel declares is one it uses (host/core/resources.c compares the
 * kernel's local memory with the planner's model of it). */
#define MMA_PRODUCT_ARRAYS(warps)                                               \
  __local float mma_scratch_a[warps][16 * 16], mma_scratch_b[warps][16 * 8];    \
  __local float *mma_a = mma_scratch_a[get_local_id(0) >> 5];                   \
  __local float *mma_b = mma_scratch_b[get_local_id(0) >> 5]
#define MMA_DECLARE_SCRATCH(warps)                                              \
  MMA_PRODUCT_ARRAYS(warps);                                                    \
  __local float quad[32 * (warps)]
#define MMA_DECLARE_PRODUCT_SCRATCH(warps)                                      \
  MMA_PRODUCT_ARRAYS(warps);                                                    \
  __local float *const quad = 0
#else
#define MMA_SCRATCH
#define MMA_ARGS
#define MMA_DECLARE_SCRATCH(warps)
#define MMA_DECLARE_PRODUCT_SCRATCH(warps)
#endif

inline int lane_id(void) { return get_local_id(0) & 31; }

#if MMA_EMULATE
/* An emulated instruction once each lane has written its A (16 x kdim,
 * row-major, kdim 8 or 16) and B (kdim x 8) fragments to the warp's
 * scratch: this lane's four C elements, summed as the model above says. */
inline void emulated_products(float c[4], const int kdim, __local const float *mma_a,
                              __local const float *mma_b) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
#if MMA_ALIGNED
    double prod[16];
    for (int k = 0; k < kdim; ++k) prod[k] = (double)mma_a[r * kdim + k] * mma_b[k * 8 + n];
    c[i] = aligned_sum(c[i], prod, kdim);
#else
    exact_t acc = c[i];
    for (int k = 0; k < kdim; ++k) acc += (exact_t)mma_a[r * kdim + k] * mma_b[k * 8 + n];
    c[i] = TRUNCATE(acc);
#endif
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

#if FCL_DTYPE == 0

/* tf32 with round to nearest, ties away from zero (cvt.rna.tf32.f32): the
 * low 13 mantissa bits cleared. */
#if MMA_EMULATE
inline uint to_tf32(float x) {
  const uint u = as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf, NaN
  return (u + 0x1000u) & 0xffffe000u;
}
#else
inline uint to_tf32(float x) {
  uint r;
  asm volatile("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
#endif

/* x rounded to nearest, ties away from zero, as an operand of mma_tf32:
 * the instructions read a tf32 operand's 19 high bits and ignore the 13
 * low ones (mma_tf32's emulation does the same), so adding half of the last
 * kept unit is all the rounding left to do: one integer addition where the
 * conversion costs about three. For finite x only:
 * a NaN's or an infinity's carry may reach the sign bit. */
inline uint tf32_operand(float x) { return as_uint(x) + 0x1000u; }

/* x = big + small, both tf32 rounded to nearest: x - big - small is below
 * 2^-22 |x| and the product a_small b_small that 3xTF32 drops below 2^-22
 * |a b|. A NaN x gives a NaN big; an infinite x an infinite big and a small
 * of no meaning, so that its products are infinite or NaN. */
inline void split_tf32(float x, uint *big, uint *small) {
  *big = to_tf32(x);
  *small = tf32_operand(x - as_float(*big));  // finite for a finite x
}

/* The same with all three of x's sign, for operands that may be infinite
 * where the sign of an infinite product matters (the logits: a -inf logit
 * is a key to leave out, and inf - inf would be NaN). Against an infinite
 * partner each of the three products must have the sign of the true one:
 * so big is x truncated, not rounded, and where nothing is left over (x is
 * a tf32 already, or infinite: x == big) small is x * 2^-30, an error of
 * 2^-30 relative, far below f32's. A NaN stays NaN in small. Truncating
 * costs accuracy: x - big - small is below 2^-21 |x| and the dropped
 * product below 2^-20 |a b|, which is why only the logits pay it (in the
 * backward, where the logits' error reaches the gradients through
 * dS = P (dP - D), it would cost up to 4 times the naive algorithm's error
 * at head_dim 16).
 *
 * This runs twice per three instructions of the forward's S, so it is
 * kept to one integer and four float instructions besides the conversion:
 * the splitting, not the tensor cores, bounds the f32 kernels
 * (docs/design.md, "The rules, measured"). */
inline void split_tf32_signed(float x, uint *big, uint *small) {
  const float b = as_float(as_uint(x) & 0xffffe000u);
  const float rest = x - b;
  *big = as_uint(b);
  *small = to_tf32(x == b ? x * 0x1p-30f : rest);
}

/* c (16x8, f32) += a (16x8, tf32, row-major fragment) b (8x8, tf32). */
inline void mma_tf32(float c[4], const uint a[4], const uint b[2] MMA_SCRATCH) {
#if MMA_EMULATE
  const int g = lane_id() >> 2, t = lane_id() & 3;
  /* The instructions ignore the low 13 bits of a tf32 operand (tf32_operand). */
  for (int i = 0; i < 4; ++i)
    mma_a[(g + 8 * (i & 1)) * 8 + t + 4 * (i >> 1)] = as_float(a[i] & 0xffffe000u);
  for (int i = 0; i < 2; ++i) mma_b[(t + 4 * i) * 8 + g] = as_float(b[i] & 0xffffe000u);
  emulated_products(c, 8, mma_a, mma_b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* c += a b from three tf32 products, small terms first; both operands come
 * split (split_tf32), as each is reused across several products. With
 * MMA_CHAIN 0 each product starts from zero and joins c in an f32
 * addition, so that no instruction truncates c (below). */
inline void mma_3xtf32(float c[4], const uint a_big[4], const uint a_small[4],
                       const uint b_big[2], const uint b_small[2] MMA_SCRATCH) {
#if MMA_CHAIN == 0
  float t[3][4] = {{0.0f}};
  mma_tf32(t[0], a_small, b_big MMA_ARGS);
  mma_tf32(t[1], a_big, b_small MMA_ARGS);
  mma_tf32(t[2], a_big, b_big MMA_ARGS);
  for (int i = 0; i < 4; ++i) c[i] += (t[0][i] + t[1][i]) + t[2][i];
#else
  mma_tf32(c, a_small, b_big MMA_ARGS);
  mma_tf32(c, a_big, b_small MMA_ARGS);
  mma_tf32(c, a_big, b_big MMA_ARGS);
#endif
}

#else  // 16-bit storage

#if FCL_DTYPE == 1
#define MMA_TYPE "f16"
#else
#define MMA_TYPE "bf16"
#endif

#if MMA_EMULATE
/* Round to nearest even, as the instructions and the stores do. */
#if FCL_DTYPE == 1
inline ushort to_bits(float x) {
  ushort h;
  vstore_half_rte(x, 0, (half *)&h);
  return h;
}
inline float from_bits(ushort h) { return vload_half(0, (const half *)&h); }
#else
inline ushort to_bits(float x) { return fcl_float_to_bf16(x); }
inline float from_bits(ushort h) { return fcl_bf16_to_float(h); }
#endif
#endif

/* Two values in one register, the lower column in the low half. */
inline uint pack2(float lo, float hi) {
#if MMA_EMULATE
  return (uint)to_bits(lo) | ((uint)to_bits(hi) << 16);
#else
  uint r;
  asm volatile("cvt.rn." MMA_TYPE "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

/* c (16x8, f32) += a (16x16, row-major fragment) b (16x8), 16-bit inputs. */
inline void mma_16bit(float c[4], const uint a[4], const uint b[2] MMA_SCRATCH) {
#if MMA_EMULATE
  const int g = lane_id() >> 2, t = lane_id() & 3;
  for (int i = 0; i < 4; ++i)
    for (int h = 0; h < 2; ++h)
      mma_a[(g + 8 * (i & 1)) * 16 + 2 * t + h + 8 * (i >> 1)] =
          from_bits((ushort)(a[i] >> (16 * h)));
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 2; ++h)
      mma_b[(2 * t + h + 8 * i) * 8 + g] = from_bits((ushort)(b[i] >> (16 * h)));
  emulated_products(c, 16, mma_a, mma_b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* ---- K and V as operands ---------------------------------------------------
 * fcl_kv_raw_bits4: four elements that KV_RAW4 (common.cl) loaded, as the
 * operands' bits: the storage type's as loaded; a quantized form's value
 * rounded to nearest even, the same bits as its float (fcl_kv_load4) packed
 * by pack2 (docs/design.md, "Quantized KV caches"). In registers, a few
 * instructions a pair: f16 arithmetic where it is exact or rounds once,
 * integer bit moves else. NaN stays NaN (its bits may differ). */
#if FCL_KV_DTYPE
/* f16x2 a - b and a b, each half rounded to nearest even: NVIDIA's
 * instructions, subnormals kept (no .ftz); elsewhere through floats, where
 * both are exact. */
inline uint fcl_f16x2_sub(const uint a, const uint b) {
#if MMA_EMULATE
  return fcl_float_to_f16(fcl_f16_to_float(a & 0xffffu) - fcl_f16_to_float(b & 0xffffu)) |
         fcl_float_to_f16(fcl_f16_to_float(a >> 16) - fcl_f16_to_float(b >> 16)) << 16;
#else
  uint r;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#endif
}
inline uint fcl_f16x2_mul(const uint a, const uint b) {
#if MMA_EMULATE
  return fcl_float_to_f16(fcl_f16_to_float(a & 0xffffu) * fcl_f16_to_float(b & 0xffffu)) |
         fcl_float_to_f16(fcl_f16_to_float(a >> 16) * fcl_f16_to_float(b >> 16)) << 16;
#else
  uint r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#endif
}
#endif
/* The bytes of b:a (a bytes 0-3, b 4-7) that sel's nibbles name, byte i
 * of the result the one nibble i names (each below 8): PTX's prmt.b32, one
 * instruction on NVIDIA. */
inline uint fcl_prmt(const uint a, const uint b, const uint sel) {
#if FCL_NVIDIA_PTX
  uint r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
#else
  const ulong x = (ulong)b << 32 | a;
  uint r = 0;
  for (int i = 0; i < 4; ++i) r |= (uint)(x >> (8 * (sel >> (4 * i) & 7u)) & 0xffu) << (8 * i);
  return r;
#endif
}
#if FCL_KV_DTYPE
/* Bytes 0 and 1 (hi: 2 and 3) of x in the low bytes of a pair's halves. */
#define FCL_BYTE_PAIR(x, hi) fcl_prmt(x, 0u, (hi) ? 0x4342u : 0x4140u)
/* Byte k of a and of b in bytes 0 and 2 (1 and 3 unspecified). */
#define FCL_BYTES_AB(a, b, k) fcl_prmt(a, b, (k) * 0x1111u + 0x4400u)
#endif

#if FCL_KV_DTYPE == 0
inline uint2 fcl_kv_raw_bits4(const kv_raw_t r) { return r; }
#elif (FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2) && FCL_DTYPE == 1
/* Two codes c = q + 128 (Q4_0: q + 8), in the low bits of a pair's halves,
 * as f16 1024 + c, exactly (c fills the low mantissa bits of 0x6400);
 * minus 1024 + 128 (+ 8), q exactly; times the halves' scales d2, q d
 * rounded once, as the float product (exact) rounded by pack2. */
inline uint fcl_kv_block_pair(const uint codes, const uint d2) {
  return fcl_f16x2_mul(fcl_f16x2_sub(codes | 0x64006400u,
                                     FCL_KV_DTYPE == 1 ? 0x64806480u : 0x64086408u),
                       d2);
}
inline uint2 fcl_kv_raw_bits4(const kv_raw_t r) {
  const uint d2 = fcl_prmt(r.y, 0u, 0x1010u);  /* the scale (y's low half) in both halves */
#if FCL_KV_DTYPE == 1
  const uint u = r.x ^ 0x80808080u;
  return (uint2)(fcl_kv_block_pair(FCL_BYTE_PAIR(u, 0), d2),
                 fcl_kv_block_pair(FCL_BYTE_PAIR(u, 1), d2));
#else
  return (uint2)(fcl_kv_block_pair((r.x & 15u) | (r.x << 12 & 0xf0000u), d2),
                 fcl_kv_block_pair((r.x >> 8 & 15u) | (r.x << 4 & 0xf0000u), d2));
#endif
}
#elif FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2
/* bf16 storage: q d in float (exact), rounded by pack2. */
inline uint2 fcl_kv_raw_bits4(const kv_raw_t r) {
  const float4 x = fcl_kv_raw_float4(r);
  return (uint2)(pack2(x.s0, x.s1), pack2(x.s2, x.s3));
}
#else  /* fp8 */
/* Two codes, in the low bytes of x's halves, as f16 bits (every fp8 value
 * is an f16 value): E5M2 is f16's upper byte; E4M3FN's exponent and
 * mantissa put where f16's are read as 2^-8 times the value, normal or
 * not, so that a product by 256 is exact. Emulated, NaN as
 * fcl_fp8_to_float's rounded (0x7e00, E5M2's with its sign), bit for bit;
 * on NVIDIA a NaN of other bits, as the hardware's rounding gave. */
inline uint fcl_fp8x2_f16x2(const uint x) {
#if KV_E4
  const uint a = x & 0x007f007fu;
  const uint h = fcl_f16x2_mul(((x & 0x00800080u) << 8) | (a << 7), 0x5c005c00u);
#if MMA_EMULATE
  const uint nan = (((a ^ 0x007f007fu) + 0x7fff7fffu) & 0x80008000u) ^ 0x80008000u;  /* a 0x7f */
  const uint m = (nan >> 15) * 0xffffu;
  return (h & ~m) | (0x7e007e00u & m);
#else  /* NaN (a 0x7f, a + 1 0x80) of other bits: all exponent bits set, and 0x200 */
  return h | (((a + 0x00010001u) & 0x00800080u) * 0xfcu);
#endif
#elif MMA_EMULATE
  const uint h = x << 8;
  const uint nan = ((h & 0x7fff7fffu) + 0x03ff03ffu) & 0x80008000u;  /* above 0x7c00 */
  const uint m = (nan >> 15) * 0xffffu;
  return (h & ~m) | (((h & 0x80008000u) | 0x7e007e00u) & m);
#else
  return x << 8;  /* NaN codes are f16 NaNs already, of other bits */
#endif
}
/* FCL_FP8_CVT: from sm_89 one instruction converts two adjacent codes
 * (cvt.rn.f16x2.e4m3x2 and .e5m2x2), exactly, a NaN code to an f16 NaN of
 * its own bits: on an H100 e4m3's decode at B 8 x 8k took 0.058 ms against
 * 0.062 (docs/performance.md, v33). */
#ifndef FCL_NVIDIA_SM
#define FCL_NVIDIA_SM 0  /* NVIDIA's compute capability x 10 (90: Hopper) */
#endif
#ifndef FCL_FP8_CVT
#define FCL_FP8_CVT (FCL_NVIDIA_PTX && FCL_NVIDIA_SM >= 89 && !MMA_EMULATE)
#endif
#if FCL_FP8_CVT
#if KV_E4
#define FCL_FP8X2_CVT(half) "cvt.rn.f16x2.e4m3x2 %0, " half ";"
#else
#define FCL_FP8X2_CVT(half) "cvt.rn.f16x2.e5m2x2 %0, " half ";"
#endif
/* Codes 0 and 1 of x (hi: 2 and 3) as f16x2, the first in the low half. */
inline uint fcl_fp8_adjacent_f16x2(const uint x, const int hi) {
  uint r;
  if (hi)
    asm("{.reg .b16 lo, hi; mov.b32 {lo, hi}, %1;" FCL_FP8X2_CVT("hi") "}" : "=r"(r) : "r"(x));
  else
    asm("{.reg .b16 lo, hi; mov.b32 {lo, hi}, %1;" FCL_FP8X2_CVT("lo") "}" : "=r"(r) : "r"(x));
  return r;
}
#else
#define fcl_fp8_adjacent_f16x2(x, hi) fcl_fp8x2_f16x2(FCL_BYTE_PAIR(x, hi))
#endif
#if FCL_DTYPE == 1
#define FCL_FP8_PAIR(x, hi) fcl_fp8_adjacent_f16x2(x, hi)
#else /* bf16: the f16 values, exactly, through floats */
inline uint fcl_f16x2_bf16x2(const uint h) {
  return pack2(fcl_half_bits_to_float(h & 0xffffu), fcl_half_bits_to_float(h >> 16));
}
#define FCL_FP8_PAIR(x, hi) fcl_f16x2_bf16x2(fcl_fp8_adjacent_f16x2(x, hi))
#endif
inline uint2 fcl_kv_raw_bits4(const kv_raw_t r) {
  return (uint2)(FCL_FP8_PAIR(r.x, 0), FCL_FP8_PAIR(r.x, 1));
}
#endif

/* fcl_kv_raw_pair(a, b, e): element e (0-3) of two groups KV_RAW4 loaded
 * (two keys' same column), as one operand word, a's in the low half: the
 * bits fcl_kv_raw_bits4 gives them, picked and converted together, so
 * that a pair costs a byte permute and its conversion (f16 storage and
 * fp8; elsewhere each group converted, then its element picked). */
#if FCL_KV_DTYPE == 0
inline uint fcl_kv_raw_pair(const kv_raw_t a, const kv_raw_t b, const int e) {
  return fcl_prmt(e < 2 ? a.x : a.y, e < 2 ? b.x : b.y, e & 1 ? 0x7632u : 0x5410u);
}
#elif (FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2) && FCL_DTYPE == 1
inline uint fcl_kv_raw_pair(const kv_raw_t a, const kv_raw_t b, const int e) {
#if FCL_KV_DTYPE == 1
  const uint codes = (FCL_BYTES_AB(a.x, b.x, e) & 0x00ff00ffu) ^ 0x00800080u;
#else
  const uint codes = FCL_BYTES_AB(a.x, b.x, e >> 1) >> (4 * (e & 1)) & 0x000f000fu;
#endif
  return fcl_kv_block_pair(codes, fcl_prmt(a.y, b.y, 0x5410u));
}
#elif FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4
inline uint fcl_kv_raw_pair(const kv_raw_t a, const kv_raw_t b, const int e) {
#if FCL_FP8_CVT  /* byte e of a and of b side by side */
  const uint h = fcl_fp8_adjacent_f16x2(fcl_prmt(a.x, b.x, (uint)e | (uint)(4 + e) << 4), 0);
#else
  const uint h = fcl_fp8x2_f16x2(FCL_BYTES_AB(a.x, b.x, e) & 0x00ff00ffu);
#endif
#if FCL_DTYPE == 1
  return h;
#else
  return fcl_f16x2_bf16x2(h);
#endif
}
#else  /* a block form in bf16 storage: through floats */
inline uint fcl_kv_raw_pair(const kv_raw_t a, const kv_raw_t b, const int e) {
  const uint2 x = fcl_kv_raw_bits4(a), y = fcl_kv_raw_bits4(b);
  const uint xe = (e < 2 ? x.x : x.y) >> (16 * (e & 1)) & 0xffffu;
  return xe | ((e < 2 ? y.x : y.y) >> (16 * (e & 1))) << 16;
}
#endif
#endif  // FCL_DTYPE

/* The decode kernels' rows of a warp's 16-key step from key kw, a page
 * lookup each (every page size is a multiple of 16); a step past the last
 * key (of the last tile) looks up the last key's, which the table names,
 * and loads nothing. With the kernel's nk in scope. */
#define STEP_ROWS(rows, tensor, view, kw) TILE_ROWS(rows, tensor, view, min(kw, nk - 1))

/* The decode kernels' Q (flash_fwd_decode_mma.cl, flash_fwd_decode_wide.cl):
 * the block's BLOCK_Q rows of HEAD_DIM_MAX columns into local memory, rows
 * `ld` elements apart, each element loaded once; absent rows and columns
 * are 0. A statement macro with the kernel's tid, q0, slots, head_dim,
 * q_rows and p in scope; the caller waits at a barrier before reading. */
#define DECODE_Q_TO_LOCAL(q_local, ld)                                                    \
  for (int i_ = tid; i_ < BLOCK_Q * HEAD_DIM_MAX / 4; i_ += WG_SIZE) {                    \
    const int r_ = i_ / (HEAD_DIM_MAX / 4), c_ = (i_ - r_ * (HEAD_DIM_MAX / 4)) * 4;      \
    const int slot_ = q0 + r_;                                                            \
    uint2 x_ = (uint2)(0u);                                                               \
    if (slot_ < slots && c_ < head_dim)                                                   \
      x_ = LOAD_BITS4(q_rows + (size_t)SLOT_TOKEN(slot_) * p.q.seq +                      \
                          (size_t)SLOT_HEAD(slot_) * p.q.head, c_);                       \
    *(__local uint2 *)((q_local) + r_ * (ld) + c_) = x_;                                  \
  }

/* x of lane src of this warp (src a lane's own choice). Every lane of
 * the warp calls it. */
inline uint warp_shfl_idx(const uint x, const int src MMA_SCRATCH) {
#if MMA_EMULATE
  const int me = get_local_id(0);
  quad[me] = as_float(x);
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint r = as_uint(quad[(me & ~31) + src]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#else
  uint r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(x), "r"(src));
  return r;
#endif
}

/* The 8 x 8 matrix of 16-bit elements whose row g, columns 2t and 2t + 1
 * lane (g, t) holds in x, transposed: this lane's row g, columns 2t and
 * 2t + 1 of the transpose (movmatrix, sm_75 and later). */
inline uint movmatrix_trans(const uint x MMA_SCRATCH) {
#if MMA_EMULATE
  const int g = lane_id() >> 2, t = lane_id() & 3, shift = 16 * (g & 1);
  const uint a = warp_shfl_idx(x, 8 * t + (g >> 1) MMA_ARGS);
  const uint b = warp_shfl_idx(x, 8 * t + 4 + (g >> 1) MMA_ARGS);
  return (a >> shift & 0xffffu) | (b >> shift & 0xffffu) << 16;
#else
  uint r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
  return r;
#endif
}

/* x of the lane whose id differs from this one's in the bits of `mask`.
 * Every lane of the warp calls it. */
inline float lane_xor(float x, const int mask MMA_SCRATCH) {
#if MMA_EMULATE
  return as_float(warp_shfl_idx(as_uint(x), lane_id() ^ mask MMA_ARGS));
#else
  return fcl_shfl_xor(x, mask);
#endif
}

/* The max and the sum over the lanes whose ids differ from this one's in
 * the bits from..to - 1 (powers of two), by butterfly, so that every lane
 * ends with the same value: over a row's quad of lanes (t: 1, 4), over the
 * octet that shares t (a column of C fragments, rows g: 4, 32). */
inline float lanes_max(float x, const int from, const int to MMA_SCRATCH) {
  for (int mask = from; mask < to; mask <<= 1) x = fmax(x, lane_xor(x, mask MMA_ARGS));
  return x;
}
inline float lanes_sum(float x, const int from, const int to MMA_SCRATCH) {
  for (int mask = from; mask < to; mask <<= 1) x += lane_xor(x, mask MMA_ARGS);
  return x;
}
inline float quad_max(float x MMA_SCRATCH) { return lanes_max(x, 1, 4 MMA_ARGS); }
inline float quad_sum(float x MMA_SCRATCH) { return lanes_sum(x, 1, 4 MMA_ARGS); }
inline float octet_max(float x MMA_SCRATCH) { return lanes_max(x, 4, 32 MMA_ARGS); }
inline float octet_sum(float x MMA_SCRATCH) { return lanes_sum(x, 4, 32 MMA_ARGS); }

/* ---- operands: rows in local memory, A fragments in registers -------------
 * The kernels that use the instructions stream tiles of rows (keys, or
 * queries in the backward's dK/dV) through local memory and keep 16 rows
 * per warp as A fragments. Both in the storage type; head_dim is a
 * multiple of 8 (the planners' condition for these kernels), so a group of
 * four elements is all in or all out. */
#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // head_dim bucket compiled for, a multiple of 16
#endif
#if HEAD_DIM_MAX % 16 != 0
#error "HEAD_DIM_MAX must be a multiple of 16"
#endif
#define D_TILES (HEAD_DIM_MAX / 8)  // 8-column groups of a row

/* Tiles: rows FCL_MMA_TILE_PAD elements longer than HEAD_DIM_MAX, so that the 32
 * lanes of a fragment read hit 32 different banks (or share a word). */
#define FCL_MMA_TILE_ELEM (FCL_DTYPE == 0 ? 4 : 2)  // bytes of a tile element
#if FCL_DTYPE == 0
typedef float tile_t;
typedef float4 chunk_t;
#define LOAD_CHUNK(p, i) LOAD4_F32(p, i)
#define CHUNK_ZERO ((float4)(0.0f))
#define TILE_PUT(t, i, x) vstore4((x), 0, (t) + (i))
#else
typedef ushort tile_t;     // the storage type's bits
typedef ushort4 chunk_t;
#define LOAD_CHUNK(p, i) \
  FCL_COUNTED_LOAD(8, *(__global const ushort4 *)((__global const ushort *)(p) + (i)))
#define CHUNK_ZERO ((ushort4)(0))
#define TILE_PUT(t, i, x) (*(__local ushort4 *)((t) + (i)) = (x))
#endif
#define TILE_LD FCL_MMA_TILE_LD(HEAD_DIM_MAX, FCL_MMA_TILE_ELEM)  // traits.h

/* `rows` rows from src (`stride` elements apart), columns [0, head_dim),
 * into tile rows [0, tile_rows), by the whole work-group (tid, WG_SIZE);
 * the rest of the tile is 0 (0 * NaN is NaN: stale local memory must
 * never meet a zero weight). Where the work-group covers whole rows, each
 * work-item keeps one column and steps its pointer down the rows: a
 * 64-bit add per chunk instead of a 64-bit multiply, which K and V, whose
 * strides may differ, would each pay. Its trip count is a constant, so
 * that TILE_LOADS_UNROLL loads a work-item are in flight at once (one at a
 * time, a single-warp work-group waits out each load's latency). */
#define TILE_CHUNKS (HEAD_DIM_MAX / 4)  // 4-element chunks of a tile row
/* Rows a work-group covers at once where it covers whole rows (WG_SIZE is
 * the kernel's, defined after this file: the test is in the expansion). */
#define TILE_ROW_STEP (WG_SIZE % TILE_CHUNKS == 0 ? WG_SIZE / TILE_CHUNKS : 1)
/* TILE_LOADS_UNROLL is the kernel's, like WG_SIZE. */
#define FCL_PRAGMA_(x) _Pragma(#x)
#define FCL_UNROLL_BY_(n) FCL_PRAGMA_(unroll n)
#if FCL_UNROLL
#define UNROLL_TILE_LOADS FCL_UNROLL_BY_(TILE_LOADS_UNROLL)
#else
#define UNROLL_TILE_LOADS UNROLL
#endif
/* The loop of LOAD_TILE and FETCH_TILE; COPY(dst, src, valid) moves one
 * chunk, or writes zeros where !valid. */
#define TILE_CHUNKS_BY(COPY, tile, src, rows, tile_rows, stride) \
  TILE_CHUNKS_RUNS(COPY, tile, src, 0, NO_ROW, 0, rows, tile_rows, stride)
#define NO_ROW(key) ((__global const store_t *)0)
/* ... and of a paged cache's keys [k0, k0 + tile_rows) (runs: 1): ROW(key)
 * gives a key's row (KEY_ROW), looked up at each FCL_PAGE_RUN_KEYS keys
 * that a work-item's rows enter (traits.h, FCL_MMA_PAGE_REBASE), each row
 * where they are not a whole number of runs; within a run the rows are
 * `stride` apart. `src` is then any valid row: !valid chunks name it. */
#define TILE_CHUNKS_RUNS(COPY, tile, src, runs, ROW, k0, rows, tile_rows, stride)  \
  if (WG_SIZE % TILE_CHUNKS == 0) {                                             \
    const int c_ = (tid % TILE_CHUNKS) * 4, j0_ = tid / TILE_CHUNKS;            \
    const size_t step_ = (size_t)TILE_ROW_STEP * (stride);                      \
    __global const store_t *at_ = (src) + (size_t)j0_ * (stride) + c_;         \
    UNROLL_TILE_LOADS                                                           \
    for (int r_ = 0; r_ < ((tile_rows) + TILE_ROW_STEP - 1) / TILE_ROW_STEP;    \
         ++r_, at_ += step_) {                                                  \
      const int j = j0_ + r_ * TILE_ROW_STEP;                                   \
      if ((runs) && FCL_MMA_PAGE_REBASE(TILE_ROW_STEP, r_)) at_ = ROW((k0) + j) + c_; \
      if ((tile_rows) % TILE_ROW_STEP == 0 || j < (tile_rows))                  \
        COPY((tile) + j * TILE_LD + c_, j < (rows) && c_ < head_dim ? at_ : (src), \
             j < (rows) && c_ < head_dim);                                      \
    }                                                                           \
  } else {                                                                      \
    for (int i = tid; i < (tile_rows) * TILE_CHUNKS; i += WG_SIZE) {            \
      const int j = i / TILE_CHUNKS, c = (i % TILE_CHUNKS) * 4;                 \
      const int valid_ = j < (rows) && c < head_dim;                            \
      __global const store_t *row_ = (runs) ? ROW((k0) + j) : (src) + (size_t)j * (stride); \
      COPY((tile) + j * TILE_LD + c, valid_ ? row_ + c : (src), valid_);        \
    }                                                                           \
  }
#define COPY_CHUNK(dst, src, valid) \
  TILE_PUT(dst, 0, (valid) ? LOAD_CHUNK(src, 0) : CHUNK_ZERO)
#define LOAD_TILE(tile, src, rows, tile_rows, stride) \
  TILE_CHUNKS_BY(COPY_CHUNK, tile, src, rows, tile_rows, stride)

/* FETCH_TILE: LOAD_TILE, started and left in flight on NVIDIA (PTX
 * cp.async: global to local memory without passing through registers, so
 * the work-group computes while the tile arrives). FETCH_COMMIT closes the
 * fetches started since the last one into a group; FETCH_WAIT(n) returns
 * once at most the n latest groups of this work-item are in flight, and a
 * barrier after it makes the tiles whole for the work-group. Elsewhere,
 * and when the kernel counts its loads, the copy is LOAD_TILE's and the
 * two are nothing. The views are vec4 (the MMA planner's condition), so
 * every chunk is 4-element aligned, as cp.async's 16 (f32) and 8 bytes
 * (16-bit) need; the tiles are 16-byte aligned. */
#if FCL_NVIDIA_PTX && !defined(FCL_COUNT_IO) && !defined(FCL_NO_ASYNC_TILES)
inline void fetch_chunk(__local tile_t *dst, __global const store_t *src, int valid) {
  /* Bytes past the source size (all of them where !valid) arrive as 0. */
#if FCL_DTYPE == 0
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"((uint)(size_t)dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
               :: "r"((uint)(size_t)dst), "l"(src), "r"(valid ? 8 : 0) : "memory");
#endif
}
#define FETCH_COPY fetch_chunk
#define FETCH_ASYNC 1  // FETCH_COPY is cp.async
#define FETCH_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define FETCH_WAIT(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")
#else
#define FETCH_COPY COPY_CHUNK
#define FETCH_ASYNC 0
#define FETCH_COMMIT() ((void)0)
#define FETCH_WAIT(n) ((void)0)
#endif
#define FETCH_TILE(tile, src, rows, tile_rows, stride) \
  TILE_CHUNKS_BY(FETCH_COPY, tile, src, rows, tile_rows, stride)
/* FETCH_TILE of keys [k0, k0 + tile_rows) of K or V, whose rows from
 * `rows` are `stride` apart; paged, a tile may span pages: ROW(key) gives
 * a key's row (KEY_ROW), looked up per run of keys, and `pool` is the
 * tensor (blocks.cl, "a paged cache"). */
#if PAGED
#define FETCH_KEYS(tile, ROW, pool, rows, k0, keys, tile_rows, stride) \
  TILE_CHUNKS_RUNS(FETCH_COPY, tile, pool, 1, ROW, k0, keys, tile_rows, stride)
#else
#define FETCH_KEYS(tile, ROW, pool, rows, k0, keys, tile_rows, stride) \
  FETCH_TILE(tile, (rows) + (size_t)(k0) * (stride), keys, tile_rows, stride)
#endif

/* ---- B fragments from a tile: ldmatrix -------------------------------------
 * ldsm_x4 gives this lane its words of four 8 x 8 matrices of 16-bit
 * elements (a row: 16 bytes, 4 floats in f32) held in a local tile: matrix
 * j's row r starts at base + (j >> 1) hi + (j & 1) lo + r TILE_LD, and
 * reg[j] holds row g's elements 2t and 2t + 1 (f32: its element t), which
 * is a B fragment's register. ldsm_x4_trans (16-bit) transposes each
 * matrix: reg[j] holds rows 2t and 2t + 1 of column g, lower row low.
 * On NVIDIA one instruction (PTX ldmatrix, lane 8 j + r supplying matrix
 * j's row r) replaces four 32-bit reads, or eight 16-bit reads and their
 * packing; the emulation reads the same elements, so the addresses are
 * tested wherever the kernels run. The tiles' rows are 16 bytes past a
 * multiple of 128 apart (FCL_MMA_TILE_PAD), so that the eight rows of a matrix
 * meet eight different groups of banks. Rows and tiles 16-byte aligned. */
#define LDSM_ROW(base, j, r, hi, lo) ((base) + ((j) >> 1) * (hi) + ((j) & 1) * (lo) + (r) * TILE_LD)
inline void ldsm_x4(uint reg[4], __local const tile_t *base, const int hi, const int lo) {
#if MMA_EMULATE
  const int g = lane_id() >> 2, t = lane_id() & 3;
  for (int j = 0; j < 4; ++j)
    reg[j] = ((__local const uint *)LDSM_ROW(base, j, g, hi, lo))[t];
#else
  const int lane = lane_id();
  const uint at = (uint)(size_t)LDSM_ROW(base, lane >> 3, lane & 7, hi, lo);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
               : "r"(at));
#endif
}
#if FCL_DTYPE != 0
inline void ldsm_x4_trans(uint reg[4], __local const tile_t *base, const int hi, const int lo) {
#if MMA_EMULATE
  const int g = lane_id() >> 2, t = lane_id() & 3;
  for (int j = 0; j < 4; ++j)
    reg[j] = (uint)LDSM_ROW(base, j, 2 * t, hi, lo)[g] |
             ((uint)LDSM_ROW(base, j, 2 * t + 1, hi, lo)[g] << 16);
#else
  const int lane = lane_id();
  const uint at = (uint)(size_t)LDSM_ROW(base, lane >> 3, lane & 7, hi, lo);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
               : "r"(at));
#endif
}
#endif

/* The products below work on `width` 8-column groups of head_dim: all of
 * them (D_TILES), or a part that holds whole k-steps of the 16-bit
 * instructions (an even width). */

/* A fragments of 16 rows by 8 * width columns, one per k-step: f32 as
 * stored (split at each use: kept split they would need twice the
 * registers), 16-bit types two to a register. */
#if FCL_DTYPE == 0
typedef float frag_t;  // a register of an A fragment
#define FRAG_STEPS(width) (width)  // its k-steps over 8 * width columns
#else
typedef uint frag_t;
#define FRAG_STEPS(width) ((width) / 2)
#endif
#define DECLARE_FRAG_A(name, width) frag_t name[FRAG_STEPS(width)][4]

/* This lane's part of rows row_g and row_g + 8 (row_g = the warp's first
 * row + g), columns [col0, col0 + 8 * width), from base (`stride` elements
 * apart; packed slots, PACK_GQA, at their token's row and their head,
 * `head_stride` apart); rows from `limit` on and columns past head_dim are
 * 0. Every element is read by one lane. */
#define A_ROW_AT(r, stride, head_stride) \
  ((size_t)SLOT_TOKEN(r) * (stride) + (size_t)SLOT_HEAD(r) * (head_stride))
#if FCL_DTYPE == 0
#define LOAD_A_ROWS(a, width, base, row_g, limit, stride, head_stride, col0)    \
  UNROLL for (int kk_ = 0; kk_ < (width); ++kk_)                               \
  UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                       \
    const int r_ = (row_g) + 8 * (i_ & 1);                                      \
    const int col_ = (col0) + 8 * kk_ + t + 4 * (i_ >> 1);                      \
    (a)[kk_][i_] = r_ < (limit) && col_ < head_dim                              \
                       ? LOAD_F32(base, A_ROW_AT(r_, stride, head_stride) + col_) \
                       : 0.0f;                                                  \
  }
#else
#define LOAD_A_ROWS(a, width, base, row_g, limit, stride, head_stride, col0)    \
  UNROLL for (int kk_ = 0; kk_ < (width) / 2; ++kk_)                           \
  UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                       \
    const int r_ = (row_g) + 8 * (i_ & 1);                                      \
    const int col_ = (col0) + 16 * kk_ + 2 * t + 8 * (i_ >> 1);                 \
    (a)[kk_][i_] = r_ < (limit) && col_ < head_dim                              \
                       ? FCL_COUNTED_LOAD(4, *(__global const uint *)(          \
                             (__global const ushort *)(base) +                  \
                             A_ROW_AT(r_, stride, head_stride) + col_))         \
                       : 0u;                                                    \
  }
#endif

/* Columns 2t and 2t + 1 of a C fragment's row (x0, x1) to dst, counted,
 * in the storage type (rounded to nearest even). */
#if FCL_DTYPE == 0
#define STORE_PAIR(dst, x0, x1) (FCL_COUNT_STORE(8), vstore2((float2)(x0, x1), 0, (dst)))
#else
#define STORE_PAIR(dst, x0, x1) \
  (FCL_COUNT_STORE(4), *(__global uint *)((__global ushort *)(dst)) = pack2(x0, x1))
#endif

/* ---- the two products of attention ----------------------------------------
 * Statement macros, so that the fragment arrays stay private arrays indexed
 * by constants (registers). They use the caller's g and t (lane = 4 g + t),
 * and in f32 restart their partial sums every MMA_CHAIN k-steps (see the
 * tensor cores' rounding above): both sums are short, so each partial sum
 * joins its total in one rounded addition. */
#define MMA_PART_STEPS (MMA_CHAIN > 0 ? MMA_CHAIN : 1)
#if FCL_DTYPE == 0 && D_TILES % MMA_PART_STEPS != 0
#error "MMA_CHAIN must divide HEAD_DIM_MAX / 8"
#endif

/* Row tiles: the products take `mtiles` 16-row A operands (a warp's row
 * tiles) against each B fragment, which is read from local memory once for
 * all of them. TILE_AT(x, m) names row tile m of an operand that has
 * such a first index (ROW_TILE), or the operand itself (ONE_TILE: one row
 * tile, arrays without it). The A fragments' elements are read through
 * an accessor A_AT(a, m, kk, i) (register element i of k-step kk of row
 * tile m): FRAG_OF_ONE and FRAG_OF_TILES for DECLARE_FRAG_A arrays (one,
 * or one per row tile), or the kernel's own. */
#define ONE_TILE(x, m) (x)
#define ROW_TILE(x, m) (x)[m]
#define FRAG_OF_ONE(a, m, kk, i) (a)[kk][i]
#define FRAG_OF_TILES(a, m, kk, i) (a)[m][kk][i]

/* S_AT(s, m)[n] (16 x 8, n < tiles) = A of row tile m (16 x 8 width, read
 * by A_AT) times rows [8n, 8n + 8) of the local tile `rows` (its columns
 * from the fragments' first), transposed: B's column is a row of the
 * tile. f32 splits both operands with `split` (split_tf32, or
 * split_tf32_signed where infinite logits must keep their sign). B comes
 * two n-tiles at a time (ldsm_x4): tiles is even. */
#if FCL_DTYPE == 0
#define MMA_SCORES_TILES(s, S_AT, mtiles, tiles, a, A_AT, width, rows, split)   \
  do {                                                                          \
    UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                                \
    UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                                 \
      S_AT(s, m_)[n_][0] = S_AT(s, m_)[n_][1] = S_AT(s, m_)[n_][2] =           \
          S_AT(s, m_)[n_][3] = 0.0f;                                            \
    UNROLL for (int k0_ = 0; k0_ < (width); k0_ += MMA_PART_STEPS) {            \
      float part_[mtiles][tiles][4];                                            \
      UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                              \
      UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                               \
        part_[m_][n_][0] = part_[m_][n_][1] = part_[m_][n_][2] =                \
            part_[m_][n_][3] = 0.0f;                                            \
      UNROLL for (int kk_ = k0_; kk_ < k0_ + MMA_PART_STEPS; ++kk_) {           \
        uint a_big_[mtiles][4], a_small_[mtiles][4];                            \
        UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                            \
        UNROLL for (int i_ = 0; i_ < 4; ++i_)                                   \
          split(A_AT(a, m_, kk_, i_), &a_big_[m_][i_], &a_small_[m_][i_]);      \
        UNROLL for (int n_ = 0; n_ < (tiles); n_ += 2) {                        \
          uint w_[4];                                                           \
          ldsm_x4(w_, (rows) + 8 * n_ * TILE_LD + 8 * kk_, 8 * TILE_LD, 4);     \
          UNROLL for (int h_ = 0; h_ < 2; ++h_) {                               \
            uint b_big_[2], b_small_[2];                                        \
            split(as_float(w_[2 * h_]), &b_big_[0], &b_small_[0]);              \
            split(as_float(w_[2 * h_ + 1]), &b_big_[1], &b_small_[1]);          \
            UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                        \
              mma_3xtf32(part_[m_][n_ + h_], a_big_[m_], a_small_[m_], b_big_,  \
                         b_small_ MMA_ARGS);                                    \
          }                                                                     \
        }                                                                       \
      }                                                                         \
      UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                              \
      UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                               \
        UNROLL for (int i_ = 0; i_ < 4; ++i_) S_AT(s, m_)[n_][i_] += part_[m_][n_][i_]; \
    }                                                                           \
  } while (0)
#else
#define MMA_SCORES_TILES(s, S_AT, mtiles, tiles, a, A_AT, width, rows, split)   \
  do {                                                                          \
    UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                                \
    UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                                 \
      S_AT(s, m_)[n_][0] = S_AT(s, m_)[n_][1] = S_AT(s, m_)[n_][2] =           \
          S_AT(s, m_)[n_][3] = 0.0f;                                            \
    UNROLL for (int kk_ = 0; kk_ < (width) / 2; ++kk_) {                        \
      uint a_[mtiles][4];                                                       \
      UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                              \
      UNROLL for (int i_ = 0; i_ < 4; ++i_) a_[m_][i_] = A_AT(a, m_, kk_, i_);  \
      UNROLL for (int n_ = 0; n_ < (tiles); n_ += 2) {                          \
        uint b_[4];                                                             \
        ldsm_x4(b_, (rows) + 8 * n_ * TILE_LD + 16 * kk_, 8 * TILE_LD, 8);      \
        UNROLL for (int m_ = 0; m_ < (mtiles); ++m_) {                          \
          mma_16bit(S_AT(s, m_)[n_], a_[m_], b_ MMA_ARGS);                      \
          mma_16bit(S_AT(s, m_)[n_ + 1], a_[m_], b_ + 2 MMA_ARGS);              \
        }                                                                       \
      }                                                                         \
    }                                                                           \
  } while (0)
#endif
/* One row tile: s[n] from a DECLARE_FRAG_A array. */
#define MMA_SCORES(s, tiles, a, width, rows, split) \
  MMA_SCORES_TILES(s, ONE_TILE, 1, tiles, a, FRAG_OF_ONE, width, rows, split)

/* ACC_AT(acc, m) (16 x 8 width) += P_AT(p, m) (16 x 8 tiles, C fragments)
 * times the local tile `rows` (8 tiles x 8 width, from the accumulator's
 * first column), for each of `mtiles` row tiles, each B fragment read once
 * for all of them (ACC_AT and P_AT: ONE_TILE or ROW_TILE, above).
 * p's fragments become A fragments in
 * place: for 16-bit types the layouts coincide; for tf32 (A: columns t and
 * t + 4) the tile's rows are renumbered inside each group of 8 (logical
 * column t is row 2t, t + 4 is row 2t + 1) and read in the same order,
 * which leaves the sum unchanged. 16-bit p is rounded to the storage type;
 * B comes transposed, two n-tiles at a time (ldsm_x4_trans): width is even.
 * (f32 has no transposing load of 32-bit elements: it reads B as before.) */
#if FCL_DTYPE == 0
#define MMA_ACCUMULATE_TILES(acc, AT, mtiles, width, p, tiles, rows)            \
  do {                                                                          \
    uint p_big_[mtiles][tiles][4], p_small_[mtiles][tiles][4];                  \
    UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                                \
    UNROLL for (int kt_ = 0; kt_ < (tiles); ++kt_) {                            \
      const float a_[4] = {AT(p, m_)[kt_][0], AT(p, m_)[kt_][2], AT(p, m_)[kt_][1], \
                           AT(p, m_)[kt_][3]};                                  \
      UNROLL for (int i_ = 0; i_ < 4; ++i_)                                     \
        split_tf32(a_[i_], &p_big_[m_][kt_][i_], &p_small_[m_][kt_][i_]);       \
    }                                                                           \
    UNROLL for (int n_ = 0; n_ < (width); ++n_)                                 \
      UNROLL for (int k0_ = 0; k0_ < (tiles); k0_ += MMA_PART_STEPS) {          \
        float part_[mtiles][4];                                                 \
        UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                            \
          part_[m_][0] = part_[m_][1] = part_[m_][2] = part_[m_][3] = 0.0f;     \
        UNROLL for (int kt_ = k0_; kt_ < k0_ + MMA_PART_STEPS; ++kt_) {         \
          __local const float *br_ = (rows) + (8 * kt_ + 2 * t) * TILE_LD + 8 * n_ + g; \
          uint b_big_[2], b_small_[2];                                          \
          split_tf32(br_[0], &b_big_[0], &b_small_[0]);                         \
          split_tf32(br_[TILE_LD], &b_big_[1], &b_small_[1]);                   \
          UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                          \
            mma_3xtf32(part_[m_], p_big_[m_][kt_], p_small_[m_][kt_], b_big_,   \
                       b_small_ MMA_ARGS);                                      \
        }                                                                       \
        UNROLL for (int m_ = 0; m_ < (mtiles); ++m_)                            \
          UNROLL for (int i_ = 0; i_ < 4; ++i_) AT(acc, m_)[n_][i_] += part_[m_][i_]; \
      }                                                                         \
  } while (0)
#else
#define MMA_ACCUMULATE_TILES(acc, AT, mtiles, width, p, tiles, rows)            \
  do {                                                                          \
    UNROLL for (int kt_ = 0; kt_ < (tiles) / 2; ++kt_) {                        \
      uint a_[mtiles][4];                                                       \
      UNROLL for (int m_ = 0; m_ < (mtiles); ++m_) {                            \
        a_[m_][0] = pack2(AT(p, m_)[2 * kt_][0], AT(p, m_)[2 * kt_][1]);        \
        a_[m_][1] = pack2(AT(p, m_)[2 * kt_][2], AT(p, m_)[2 * kt_][3]);        \
        a_[m_][2] = pack2(AT(p, m_)[2 * kt_ + 1][0], AT(p, m_)[2 * kt_ + 1][1]); \
        a_[m_][3] = pack2(AT(p, m_)[2 * kt_ + 1][2], AT(p, m_)[2 * kt_ + 1][3]); \
      }                                                                         \
      UNROLL for (int n_ = 0; n_ < (width); n_ += 2) {                          \
        uint b_[4];                                                             \
        ldsm_x4_trans(b_, (rows) + 16 * kt_ * TILE_LD + 8 * n_, 8, 8 * TILE_LD); \
        UNROLL for (int m_ = 0; m_ < (mtiles); ++m_) {                          \
          mma_16bit(AT(acc, m_)[n_], a_[m_], b_ MMA_ARGS);                      \
          mma_16bit(AT(acc, m_)[n_ + 1], a_[m_], b_ + 2 MMA_ARGS);              \
        }                                                                       \
      }                                                                         \
    }                                                                           \
  } while (0)
#endif
/* One row tile: acc[n] and p[kt], arrays without a row-tile index. */
#define MMA_ACCUMULATE(acc, width, p, tiles, rows) \
  MMA_ACCUMULATE_TILES(acc, ONE_TILE, 1, width, p, tiles, rows)

/* ---- the softmax of S's fragments -----------------------------------------
 * Statement macros over the `tiles` n-tiles of a step of S whose first key
 * is k0: s[n][i] is row row[i >> 1] (g or g + 8 of the fragment), key
 * k0 + 8 n + 2 t + (i & 1). They use the kernel's p, qb, t, nq, nk, diag,
 * row, key_lo and key_hi: a fragment's rows are row[r0], row[r0 + 1]. */

/* The score transforms (softcap, ALiBi), then -inf where a row does not
 * see a key; the mask only on a step of `keys` keys that some row of the
 * block does not see whole (uniform over the work-group). */
#define MMA_MASK_SCORES(s, tiles, k0, keys, r0)                                   \
  do {                                                                          \
    if (SCORES_TRANSFORMED) {                                                   \
      UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                               \
      UNROLL for (int i_ = 0; i_ < 4; ++i_)                                     \
        s[n_][i_] = fcl_score(s[n_][i_], p, qb.slope,                           \
                              row[(r0) + (i_ >> 1)] + diag - ((k0) + 8 * n_ + 2 * t + (i_ & 1))); \
    }                                                                           \
    if ((k0) < qb.full_lo || (k0) + (keys) > qb.full_hi) {                      \
      UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                               \
      UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                   \
        const int key_ = (k0) + 8 * n_ + 2 * t + (i_ & 1);                      \
        const int r_ = (r0) + (i_ >> 1);                                        \
        s[n_][i_] = ROW_SEES(key_, row[r_], nq, nk, key_lo[r_], key_hi[r_])     \
                        ? s[n_][i_] : -INFINITY;                                \
      }                                                                         \
    }                                                                           \
  } while (0)

/* The online softmax of fragment row r (0: g, 1: g + 8): its new max over
 * the quad, its running sum l[r] and its half of the accumulator acc
 * (`width` n-tiles) rescaled, and s's row replaced by p = 2^(x (s - m)),
 * masked scores giving 0. Every lane calls it (quad_max). */
#define MMA_ONLINE_SOFTMAX(s, tiles, acc, width, m, l, r)                       \
  do {                                                                          \
    float m_new_ = m[r];                                                        \
    UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                                 \
      m_new_ = fmax(m_new_, fmax(s[n_][2 * (r)], s[n_][2 * (r) + 1]));          \
    m_new_ = quad_max(m_new_ MMA_ARGS);                                         \
    const float alpha_ = EXP2_FROM_MAX(m[r], m_new_, p.exp_factor);             \
    m[r] = m_new_;                                                              \
    float sum_ = 0.0f;                                                          \
    UNROLL for (int n_ = 0; n_ < (tiles); ++n_)                                 \
    UNROLL for (int c_ = 0; c_ < 2; ++c_) {                                     \
      const float pr_ =                                                         \
          EXP2_FROM_MAX(s[n_][2 * (r) + c_], m_new_, p.exp_factor);             \
      s[n_][2 * (r) + c_] = pr_;                                                \
      sum_ += pr_;                                                              \
    }                                                                           \
    l[r] = l[r] * alpha_ + sum_;                                                \
    UNROLL for (int n_ = 0; n_ < (width); ++n_) {                               \
      acc[n_][2 * (r)] *= alpha_;                                               \
      acc[n_][2 * (r) + 1] *= alpha_;                                           \
    }                                                                           \
  } while (0)
