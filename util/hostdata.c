/*
 * hostdata.c — see hostdata.h.
 */
#include "hostdata.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void fclu_rng_seed(fclu_rng *rng, uint64_t seed) {
  /* splitmix64 spreads any seed over the whole state */
  for (int i = 0; i < 4; ++i) {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    rng->s[i] = z ^ (z >> 31);
  }
}

uint64_t fclu_next(fclu_rng *rng) {
  uint64_t *s = rng->s;
  const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double fclu_uniform(fclu_rng *rng) { return (double)(fclu_next(rng) >> 11) * 0x1.0p-53; }

size_t fclu_range(fclu_rng *rng, size_t lo, size_t hi) {
  return lo + (size_t)(fclu_uniform(rng) * (double)(hi - lo + 1));
}

static struct {
  cl_mem mem;
  const void *host;
} host_copies[32];
static unsigned host_copies_next;

void fclu_remember_host_copy(cl_mem mem, const void *host) {
  for (unsigned i = 0; i < 32; ++i)
    if (host_copies[i].mem == mem) {
      host_copies[i].host = host;
      return;
    }
  host_copies[host_copies_next % 32].mem = mem;
  host_copies[host_copies_next % 32].host = host;
  host_copies_next++;
}

const void *fclu_host_copy(cl_mem mem) {
  for (unsigned i = 0; i < 32; ++i)
    if (mem && host_copies[i].mem == mem) return host_copies[i].host;
  return NULL;
}

void fclu_fill_normal(fclu_rng *rng, float *x, size_t n, double sigma, fcl_dtype dtype) {
  for (size_t i = 0; i < n; i += 2) {
    /* Box-Muller */
    double u1 = fclu_uniform(rng), u2 = fclu_uniform(rng);
    double r = sqrt(-2.0 * log(u1 > 0 ? u1 : 0x1.0p-53)) * sigma;
    x[i] = fclu_round((float)(r * cos(2 * M_PI * u2)), dtype);
    if (i + 1 < n) x[i + 1] = fclu_round((float)(r * sin(2 * M_PI * u2)), dtype);
  }
}

static uint32_t round_shift(uint32_t x, uint32_t shift) {
  /* x >> shift, rounded to nearest, ties to even */
  uint32_t q = x >> shift, rem = x & ((1u << shift) - 1), mid = 1u << (shift - 1);
  return q + (rem > mid || (rem == mid && (q & 1u)));
}

uint16_t fclu_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
  if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* >= 65520: inf */
  if (mag >= 0x38800000u)  /* normal half: rebias the exponent 127 -> 15 */
    return (uint16_t)(sign | round_shift(mag - 0x38000000u, 13));
  if (mag < 0x33000000u) return (uint16_t)sign;  /* <= 2^-25 rounds to 0 */
  /* subnormal half: count units of 2^-24 */
  uint32_t exp = mag >> 23, mant = (mag & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | round_shift(mant, 126 - exp));
}

float fclu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (!mant) {
      x = sign;
    } else {  /* subnormal: renormalise */
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t fclu_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float fclu_bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

float fclu_round(float x, fcl_dtype dtype) {
  switch (dtype) {
    case FCL_DTYPE_F16: return fclu_f16_to_f32(fclu_f32_to_f16(x));
    case FCL_DTYPE_BF16: return fclu_bf16_to_f32(fclu_f32_to_bf16(x));
    default: return x;
  }
}

cl_mem fclu_upload(fcl_context *ctx, const float *x, size_t n, fcl_dtype dtype) {
  size_t es = fcl_dtype_size(dtype);
  void *staged = (void *)x;
  if (dtype != FCL_DTYPE_F32) {
    uint16_t *h = malloc(n ? n * 2 : 1);
    if (!h) return NULL;
    for (size_t i = 0; i < n; ++i)
      h[i] = dtype == FCL_DTYPE_F16 ? fclu_f32_to_f16(x[i]) : fclu_f32_to_bf16(x[i]);
    staged = h;
  }
  cl_int err;
  cl_mem mem = clCreateBuffer(fcl_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              n ? n * es : 1, staged, &err);
  if (staged != (void *)x) free(staged);
  return err == CL_SUCCESS ? mem : NULL;
}

int fclu_download(fcl_context *ctx, cl_mem mem, float *x, size_t n, fcl_dtype dtype) {
  size_t es = fcl_dtype_size(dtype);
  void *staged = dtype == FCL_DTYPE_F32 ? (void *)x : malloc(n ? n * es : 1);
  if (!staged) return -1;
  cl_int err = clEnqueueReadBuffer(fcl_context_cl_queue(ctx), mem, CL_TRUE, 0, n * es,
                                   staged, 0, NULL, NULL);
  if (dtype != FCL_DTYPE_F32) {
    const uint16_t *h = staged;
    for (size_t i = 0; i < n && err == CL_SUCCESS; ++i)
      x[i] = dtype == FCL_DTYPE_F16 ? fclu_f16_to_f32(h[i]) : fclu_bf16_to_f32(h[i]);
    free(staged);
  }
  return err == CL_SUCCESS ? 0 : -1;
}

int fclu_poison(fcl_context *ctx, cl_mem mem, size_t bytes) {
  const cl_uchar ff = 0xff;
  cl_int err = clEnqueueFillBuffer(fcl_context_cl_queue(ctx), mem, &ff, 1, 0, bytes,
                                   0, NULL, NULL);
  if (err == CL_SUCCESS) err = clFinish(fcl_context_cl_queue(ctx));
  return err == CL_SUCCESS ? 0 : -1;
}

cl_mem fclu_poisoned_buffer(fcl_context *ctx, size_t bytes) {
  cl_int err;
  cl_mem mem = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE,
                              bytes ? bytes : 1, NULL, &err);
  if (!mem) return NULL;
  if (fclu_poison(ctx, mem, bytes ? bytes : 1) != 0) {
    clReleaseMemObject(mem);
    return NULL;
  }
  return mem;
}

double fclu_max_abs_err(const float *x, const double *ref, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double r = ref[i], v = (double)x[i];
    if (isnan(r) && isnan(v)) continue;
    if (isinf(r) && v == r) continue;
    double e = isnan(v) || isnan(r) ? INFINITY : fabs(v - r);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

double fclu_max_abs(const double *ref, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i)
    if (isfinite(ref[i]) && fabs(ref[i]) > m) m = fabs(ref[i]);
  return m;
}
