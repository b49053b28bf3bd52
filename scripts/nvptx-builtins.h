/*
 * nvptx-builtins.h — the OpenCL builtins the flash kernels call, for
 * clang's NVPTX target, which has no OpenCL library: each float one as
 * the NVVM intrinsic or instruction it becomes (approximate where that is
 * ptx's own), so that scripts/ptxas-check.sh can hand ptxas a whole
 * kernel without calls. For assembling only: nothing computed with these
 * is checked. Included ahead of a kernel's text (-include).
 */
#define FCL_NVPTX_FN __attribute__((overloadable, always_inline))
FCL_NVPTX_FN float exp2(float x) { return __nvvm_ex2_approx_f(x); }
FCL_NVPTX_FN float exp(float x) { return __nvvm_ex2_approx_f(x * 1.4426950f); }
FCL_NVPTX_FN float log(float x) { return __nvvm_lg2_approx_f(x) * 0.6931472f; }
FCL_NVPTX_FN float tanh(float x) {
  const float e = __nvvm_ex2_approx_f(2.8853901f * x);
  return (e - 1.0f) / (e + 1.0f);
}
FCL_NVPTX_FN float fabs(float x) { return __builtin_fabsf(x); }
FCL_NVPTX_FN float fmax(float a, float b) { return __builtin_fmaxf(a, b); }
FCL_NVPTX_FN float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
FCL_NVPTX_FN int min(int a, int b) { return a < b ? a : b; }
FCL_NVPTX_FN int max(int a, int b) { return a > b ? a : b; }
FCL_NVPTX_FN int clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }
FCL_NVPTX_FN size_t get_group_id(uint d) { return (void)d, __nvvm_read_ptx_sreg_ctaid_x(); }
FCL_NVPTX_FN size_t get_num_groups(uint d) { return (void)d, __nvvm_read_ptx_sreg_nctaid_x(); }
FCL_NVPTX_FN int2 vload2(size_t i, const __global int *p) {
  return (int2)(p[2 * i], p[2 * i + 1]);
}
FCL_NVPTX_FN int4 vload4(size_t i, const __global int *p) {
  return (int4)(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]);
}
/* the vector forms the shared texts use, element by element (a user's
 * overload hides the builtin's others) */
#define FCL_NVPTX_VECTOR(f)                                                              \
  FCL_NVPTX_FN float2 f(float2 x) { return (float2)(f(x.s0), f(x.s1)); }                 \
  FCL_NVPTX_FN float4 f(float4 x) { return (float4)(f(x.s01), f(x.s23)); }               \
  FCL_NVPTX_FN float8 f(float8 x) { return (float8)(f(x.s0123), f(x.s4567)); }           \
  FCL_NVPTX_FN float16 f(float16 x) { return (float16)(f(x.lo), f(x.hi)); }
FCL_NVPTX_VECTOR(exp2)
FCL_NVPTX_VECTOR(tanh)
FCL_NVPTX_VECTOR(fabs)
/* the decode kernel's: 2-byte halves of K and V, its states' float4s */
FCL_NVPTX_FN ushort2 vload2(size_t i, const __global ushort *p) {
  return (ushort2)(p[2 * i], p[2 * i + 1]);
}
FCL_NVPTX_FN float4 vload4(size_t i, const __local float *p) {
  return (float4)(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]);
}
FCL_NVPTX_FN float4 fma(float4 a, float4 b, float4 c) {
  return (float4)(fma(a.s0, b.s0, c.s0), fma(a.s1, b.s1, c.s1), fma(a.s2, b.s2, c.s2),
                  fma(a.s3, b.s3, c.s3));
}
