/*
 * buckets.c — the problem buckets of tuned plans: pass x storage type x
 * head_dim class x mask x size class, their names, the bucket of a problem
 * and the shapes flashcl-tune times for one (docs/design.md, "Tuned plans").
 */
#include "tuning.h"
#include "problem.h"

#include <stdio.h>
#include <string.h>

static const char *const pass_names[FCL__TUNING_PASSES] = {"fwd", "bwd", "decode"};
static const unsigned dim_classes[FCL__TUNING_DIMS] = {32, 64, 96, 128, 192, 256};
static const char *const mask_names[2] = {"full", "causal"};
static const char *const size_names[2] = {"small", "large"};
static const char *const dtype_names[FCL__TUNING_DTYPES] = {"f32", "f16", "bf16"};

/* ---- buckets --------------------------------------------------------------- */

size_t fcl__bucket_index(const fcl__bucket *b) {
  return ((((size_t)b->pass * FCL__TUNING_DTYPES + b->dtype) * FCL__TUNING_DIMS + b->dim) * 2 +
          b->causal) * 2 + b->size;
}

fcl__bucket fcl__bucket_at(size_t index) {
  fcl__bucket b;
  b.size = (unsigned)(index % 2), index /= 2;
  b.causal = (unsigned)(index % 2), index /= 2;
  b.dim = (unsigned)(index % FCL__TUNING_DIMS), index /= FCL__TUNING_DIMS;
  b.dtype = (unsigned)(index % FCL__TUNING_DTYPES), index /= FCL__TUNING_DTYPES;
  b.pass = (unsigned)index;
  return b;
}

unsigned fcl__bucket_head_dim(const fcl__bucket *b) { return dim_classes[b->dim]; }

void fcl__bucket_name(const fcl__bucket *b, char *out, size_t len) {
  snprintf(out, len, "%s.%s.d%u.%s.%s", pass_names[b->pass], dtype_names[b->dtype],
           dim_classes[b->dim], mask_names[b->causal], size_names[b->size]);
}

static int name_index(const char *s, size_t n, const char *const *names, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (strlen(names[i]) == n && strncmp(s, names[i], n) == 0) return (int)i;
  return -1;
}

int fcl__bucket_parse(const char *name, fcl__bucket *out) {
  const char *part[5];
  size_t len[5];
  const char *s = name;
  for (int i = 0; i < 5; ++i) {
    const char *dot = strchr(s, '.');
    part[i] = s;
    len[i] = dot ? (size_t)(dot - s) : strlen(s);
    if ((i < 4) != (dot != NULL)) return 0;
    s = dot ? dot + 1 : s;
  }
  const int pass = name_index(part[0], len[0], pass_names, FCL__TUNING_PASSES);
  const int dtype = name_index(part[1], len[1], dtype_names, FCL__TUNING_DTYPES);
  const int causal = name_index(part[3], len[3], mask_names, 2);
  const int size = name_index(part[4], len[4], size_names, 2);
  int dim = -1;
  if (len[2] >= 2 && part[2][0] == 'd') {
    char digits[8];
    if (len[2] - 1 < sizeof digits) {
      memcpy(digits, part[2] + 1, len[2] - 1);
      digits[len[2] - 1] = '\0';
      for (int i = 0; i < FCL__TUNING_DIMS; ++i) {
        char want[8];
        snprintf(want, sizeof want, "%u", dim_classes[i]);
        if (strcmp(digits, want) == 0) dim = i;
      }
    }
  }
  if (pass < 0 || dtype < 0 || dim < 0 || causal < 0 || size < 0) return 0;
  *out = (fcl__bucket){(unsigned)pass, (unsigned)dtype, (unsigned)dim, (unsigned)causal,
                       (unsigned)size};
  return 1;
}

int fcl__bucket_of(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                   fcl_pass pass, fcl__bucket *out) {
  if ((unsigned)desc->dtype >= FCL__TUNING_DTYPES) return 0;
  int dim = -1;
  for (int i = FCL__TUNING_DIMS - 1; i >= 0; --i)
    if (desc->head_dim <= dim_classes[i]) dim = i;
  if (dim < 0) return 0;
  const unsigned cu = fcl__compute_units(limits);
  fcl__bucket b = {.dtype = (unsigned)desc->dtype, .dim = (unsigned)dim,
                   .causal = desc->causal != 0};
  if (pass == FCL_PASS_BACKWARD) {
    b.pass = 1;
  } else if (desc->seqlen_q <= FCL__TUNING_DECODE_ROWS) {
    b.pass = 2;
  }
  if (b.pass == 2) {
    /* a decode launch's blocks are (sequence, KV head) pairs */
    b.size = desc->batch * desc->heads_kv >= cu;
  } else {
    b.size = (double)desc->batch * desc->heads_q * desc->seqlen_q >= (double)FCL__SMALL_ROWS_PER_CU * cu;
  }
  *out = b;
  return 1;
}

static size_t floor_pow2(size_t x) {
  size_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

/* The standard sweep's form (flashcl-bench --sweep): on a GPU flash-attn's
 * benchmark, 16k tokens of hidden 2048; on a CPU 2k tokens of hidden 512. */
#define SWEEP_TOKENS(limits) ((limits)->is_gpu ? (size_t)16384 : (size_t)2048)
#define SWEEP_HIDDEN(limits) ((limits)->is_gpu ? (size_t)2048 : (size_t)512)

size_t fcl__bucket_shapes(const fcl_device_limits *limits, const fcl__bucket *b,
                          fcl_attention_desc out[2]) {
  const unsigned cu = fcl__compute_units(limits);
  const size_t d = dim_classes[b->dim];
  size_t n = 0;
  for (int i = 0; i < 2; ++i) {
    fcl_attention_desc *x = &out[n];
    if (b->pass == 2) {
      /* 32 query heads on 8 KV heads, one new row; small: B 1 against a
       * long cache and the largest batch still small, large: enough
       * sequences for every unit, shorter caches */
      size_t batch, cache;
      if (b->size == 0) {
        batch = i == 0 ? 1 : floor_pow2((cu - 1) / 8);
        cache = i == 0 ? 32768 : 8192;
      } else {
        batch = floor_pow2((cu + 7) / 8 * 2);
        cache = i == 0 ? 1024 : 2048;
      }
      if (b->size == 0 && i == 1 && batch == 1) break;  /* the same shape twice */
      fcl_attention_desc_init(x, batch, 32, 8, 1, cache, d);
    } else {
      const size_t heads = d <= SWEEP_HIDDEN(limits) ? SWEEP_HIDDEN(limits) / d : 1;
      size_t batch, seqlen;
      if (b->size == 0) {
        /* one sequence, under the small/large line by 2x and by 8x */
        const size_t line = (size_t)FCL__SMALL_ROWS_PER_CU * cu;
        seqlen = floor_pow2((line - 1) / heads / (i == 0 ? 2 : 8));
        if (seqlen < 64) break;
        batch = 1;
      } else {
        const size_t tokens = SWEEP_TOKENS(limits);
        seqlen = i == 0 ? tokens / 8 : tokens / 2;
        batch = tokens / seqlen;
      }
      fcl_attention_desc_init(x, batch, heads, heads, seqlen, seqlen, d);
    }
    x->causal = (int)b->causal;
    x->dtype = (fcl_dtype)b->dtype;
    fcl__bucket check;
    const fcl_pass pass = b->pass == 1 ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
    if (fcl__bucket_of(limits, x, pass, &check) &&
        fcl__bucket_index(&check) == fcl__bucket_index(b))
      ++n;
  }
  return n;
}
