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
 * (flash_fwd_mma.cl: S_CHAIN and O_CHAIN). The drift grows with the chain
 * and each restart costs four additions. Emulated on PoCL with 64-key
 * tiles, one partial sum of O per tile gave 2.9 times the naive
 * algorithm's error at head_dim 8; chains of 2 steps gave 1.0 there, 2.2
 * at 16, 1.0 at 64 and 0.7 at 128. The emulation rounds the same way where
 * it has doubles to sum exactly in. */
#if MMA_EMULATE && defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double exact_t;
#define TRUNCATE(x) convert_float_rtz(x)
#else
typedef float exact_t;
#define TRUNCATE(x) (x)
#endif
#if MMA_EMULATE
#define MMA_SCRATCH , __local float *mma_a, __local float *mma_b, __local float *quad
#define MMA_ARGS , mma_a, mma_b, quad
#else
#define MMA_SCRATCH
#define MMA_ARGS
#endif

inline int lane_id(void) { return get_local_id(0) & 31; }

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

/* x = big + small, both tf32, all three of x's sign. Against an infinite
 * partner each of the three products must have the sign of the true one
 * (a -inf logit is a key to leave out, inf - inf would be NaN): so big is
 * x truncated, not rounded, and where nothing is left over (x is a tf32
 * already, or infinite: x == big) small is x * 2^-30, an error of 2^-30
 * relative, far below f32's. Truncating costs a bit: x - big - small is
 * below 2^-21 |x| instead of 2^-22. A NaN stays NaN in small.
 *
 * This runs twice per three instructions in the kernels' inner loops, so
 * it is kept to one integer and four float instructions besides the
 * conversion: on an H200 the splitting, not the tensor cores, bounds the
 * f32 kernels (docs/performance.md, v3e). */
inline void split_tf32(float x, uint *big, uint *small) {
  const float b = as_float(as_uint(x) & 0xffffe000u);
  const float rest = x - b;
  *big = as_uint(b);
  *small = to_tf32(x == b ? x * 0x1p-30f : rest);
}

/* c (16x8, f32) += a (16x8, tf32, row-major fragment) b (8x8, tf32). */
inline void mma_tf32(float c[4], const uint a[4], const uint b[2] MMA_SCRATCH) {
#if MMA_EMULATE
  const int g = lane_id() >> 2, t = lane_id() & 3;
  for (int i = 0; i < 4; ++i) mma_a[(g + 8 * (i & 1)) * 8 + t + 4 * (i >> 1)] = as_float(a[i]);
  for (int i = 0; i < 2; ++i) mma_b[(t + 4 * i) * 8 + g] = as_float(b[i]);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
    exact_t acc = c[i];
    for (int k = 0; k < 8; ++k) acc += (exact_t)mma_a[r * 8 + k] * mma_b[k * 8 + n];
    c[i] = TRUNCATE(acc);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* c += a b from three tf32 products, small terms first; both operands come
 * split (split_tf32), as each is reused across several products. */
inline void mma_3xtf32(float c[4], const uint a_big[4], const uint a_small[4],
                       const uint b_big[2], const uint b_small[2] MMA_SCRATCH) {
  mma_tf32(c, a_small, b_big MMA_ARGS);
  mma_tf32(c, a_big, b_small MMA_ARGS);
  mma_tf32(c, a_big, b_big MMA_ARGS);
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
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
    exact_t acc = c[i];
    for (int k = 0; k < 16; ++k) acc += (exact_t)mma_a[r * 16 + k] * mma_b[k * 8 + n];
    c[i] = TRUNCATE(acc);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
#endif  // FCL_DTYPE

/* The max and the sum over a row's quad of lanes. */
inline float quad_max(float x MMA_SCRATCH) {
#if MMA_EMULATE
  const int me = get_local_id(0);
  quad[me] = x;
  barrier(CLK_LOCAL_MEM_FENCE);
  const int q0 = me & ~3;
  x = fmax(fmax(quad[q0], quad[q0 + 1]), fmax(quad[q0 + 2], quad[q0 + 3]));
  barrier(CLK_LOCAL_MEM_FENCE);
  return x;
#else
  x = fmax(x, fcl_shfl_xor(x, 1));
  return fmax(x, fcl_shfl_xor(x, 2));
#endif
}

inline float quad_sum(float x MMA_SCRATCH) {
#if MMA_EMULATE
  const int me = get_local_id(0);
  quad[me] = x;
  barrier(CLK_LOCAL_MEM_FENCE);
  const int q0 = me & ~3;
  x = (quad[q0] + quad[q0 + 1]) + (quad[q0 + 2] + quad[q0 + 3]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return x;
#else
  x += fcl_shfl_xor(x, 1);  // lanes 4g..4g+3 end with the same sum:
  return x + fcl_shfl_xor(x, 2);  // (x0 + x1) + (x2 + x3) in every lane
#endif
}
