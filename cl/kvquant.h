/*
 * kvquant.h — the quantized KV-cache forms (fcl_kv_dtype, include/flashcl.h
 * documents the bytes), written once for the host and the kernels: the
 * library's C sources and the tests include this file after params.h, and
 * every kernel program is compiled with its text in front. So the append
 * kernel (cl/cache.cl) writes, and the K/V loads (cl/common.cl) read,
 * exactly what the host's reference quantises and dequantises.
 *
 * Every conversion is integer and bit arithmetic plus float operations
 * that OpenCL rounds correctly (+, -, *, comparisons, rint): no division,
 * whose OpenCL float result may be 2.5 ulp off.
 */
#ifndef FCL_KVQUANT_H
#define FCL_KVQUANT_H

#define FCL_KV_BLOCK 32        /* elements of a block (Q8_0, Q4_0) */
#define FCL_KV_Q8_BYTES 34     /* bytes of a Q8_0 block: f16 scale, 32 int8 */
#define FCL_KV_Q4_BYTES 18     /* bytes of a Q4_0 block: f16 scale, 16 bytes of nibbles */
#define FCL_KV_Q8_MAX 127
#define FCL_KV_Q4_MAX 7
#define FCL_F16_MAX 65504.0f
#define FCL_E4M3_MAX 448.0f
#define FCL_E5M2_MAX 57344.0f

#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
#define FCL_U32 uint
#define FCL_AS_FLOAT(u) as_float(u)
#define FCL_AS_U32(f) as_uint(f)
#define FCL_RINT(x) rint(x)
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#define FCL_U32 uint32_t
static inline float fcl_as_float_(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t fcl_as_u32_(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
#define FCL_AS_FLOAT(u) fcl_as_float_(u)
#define FCL_AS_U32(f) fcl_as_u32_(f)
#define FCL_RINT(x) rintf(x)  /* the default rounding mode: to nearest even */
#endif

/* ---- f16, the block forms' scale -------------------------------------- */

/* binary16 bits to float, exactly. */
FCL_INLINE float fcl_f16_to_float(FCL_U32 h) {
  const FCL_U32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 31) return FCL_AS_FLOAT(sign | 0x7f800000u | (m << 13));  /* inf, NaN */
  if (e == 0) {                                                      /* subnormal */
    const float x = (float)m * 5.9604644775390625e-8f;               /* m 2^-24 */
    return sign ? -x : x;
  }
  return FCL_AS_FLOAT(sign | ((e + 112u) << 23) | (m << 13));
}

/* float to binary16 bits, to nearest even; NaN stays NaN. */
FCL_INLINE FCL_U32 fcl_float_to_f16(float f) {
  const FCL_U32 u = FCL_AS_U32(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;     /* 65520 and up round to inf */
  if (a >= 0x38800000u) {                          /* normal: 2^-14 and up */
    const FCL_U32 r = a - 0x38000000u;             /* exponent rebiased, 127 to 15 */
    return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  return sign | (FCL_U32)FCL_RINT(FCL_AS_FLOAT(a) * 16777216.0f);  /* in units of 2^-24 */
}

/* ---- the block forms ---------------------------------------------------- */

/* The scale's f16 bits of a block whose largest magnitude is amax
 * (qmax 127 or 7): amax / qmax rounded to f16, raised by one f16 step
 * where that rounding went below it (d qmax < amax, exact in float), so
 * that no element saturates below the largest scale; NaN where amax is
 * not finite (a NaN or inf in the block). */
FCL_INLINE FCL_U32 fcl_kv_block_scale(float amax, int qmax) {
  if (!(amax <= 3.4028234663852886e38f)) return 0x7e00u;
  const float r = qmax == FCL_KV_Q8_MAX ? 0.0078740157480314960f /* 1/127 */
                                        : 0.14285714285714285f;  /* 1/7 */
  const float d = amax * r;
  FCL_U32 bits = fcl_float_to_f16(d < FCL_F16_MAX ? d : FCL_F16_MAX);
  if (bits < 0x7bffu && fcl_f16_to_float(bits) * (float)qmax < amax) bits += 1u;
  return bits;
}

/* x / d rounded to nearest even and saturated to [-qmax, qmax], exactly:
 * an estimate, then the midpoints (q +- 1/2) d, exact in float (q has at
 * most 8 bits, d 11), decide. d is the scale's value (0: q = 0). */
FCL_INLINE int fcl_kv_block_quant(float x, float d, int qmax) {
  if (!(d > 0.0f) || !(x == x)) return 0;
  float q = FCL_RINT(x * (1.0f / d));
  q = q > qmax + 1 ? qmax + 1 : q < -qmax - 1 ? -qmax - 1 : q;
  for (int step = 0; step < 2; ++step) {
    const float hi = (q + 0.5f) * d, lo = (q - 0.5f) * d;
    const int q_odd = ((int)q & 1) != 0;
    if (x > hi || (x == hi && q_odd)) q += 1.0f;
    else if (x < lo || (x == lo && q_odd)) q -= 1.0f;
  }
  return (int)(q > qmax ? qmax : q < -qmax ? -qmax : q);
}

/* ---- fp8 ------------------------------------------------------------------ */

/* fp8 bits (E4M3FN: e4 = 1; E5M2: e4 = 0) to float, exactly. */
FCL_INLINE float fcl_fp8_to_float(FCL_U32 b, int e4) {
  const FCL_U32 sign = (b & 0x80u) << 24;
  float x;
  if (e4) {
    const FCL_U32 e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15 && m == 7) return FCL_AS_FLOAT(0x7fc00000u);
    x = e ? FCL_AS_FLOAT(((e + 120u) << 23) | (m << 20)) : (float)m * 0.001953125f; /* m 2^-9 */
  } else {
    const FCL_U32 e = (b >> 2) & 31u, m = b & 3u;
    if (e == 31) return FCL_AS_FLOAT(sign | (m ? 0x7fc00000u : 0x7f800000u));
    x = e ? FCL_AS_FLOAT(((e + 112u) << 23) | (m << 21)) : (float)m * 1.52587890625e-5f; /* m 2^-16 */
  }
  return FCL_AS_FLOAT(FCL_AS_U32(x) | sign);
}

/* float to fp8 bits, to nearest even; beyond the largest finite value
 * (infinities too) saturated to it; NaN to NaN. */
FCL_INLINE FCL_U32 fcl_float_to_fp8(float f, int e4) {
  const FCL_U32 u = FCL_AS_U32(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  const FCL_U32 mbits = e4 ? 3u : 2u, bias_shift = e4 ? 120u : 112u;
  if (a > 0x7f800000u) return sign | (e4 ? 0x7fu : 0x7eu);
  if (FCL_AS_FLOAT(a) >= (e4 ? FCL_E4M3_MAX : FCL_E5M2_MAX)) return sign | (e4 ? 0x7eu : 0x7bu);
  const FCL_U32 min_normal = (bias_shift + 1u) << 23;  /* 2^-6, 2^-14 */
  FCL_U32 r;
  if (a >= min_normal) {
    const FCL_U32 shift = 23u - mbits, x = a - (bias_shift << 23);
    r = (x + ((1u << (shift - 1)) - 1u) + ((x >> shift) & 1u)) >> shift;
  } else {  /* subnormal, in units of 2^-9 (2^-16) */
    r = (FCL_U32)FCL_RINT(FCL_AS_FLOAT(a) * (e4 ? 512.0f : 65536.0f));
  }
  /* the rounding may carry up to the largest value: still finite (448 and
   * 57344 sit below the saturation test's bound) */
  return sign | r;
}

#endif /* FCL_KVQUANT_H */
