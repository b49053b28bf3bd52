/*
 * cpu.cl — what the CPU kernels (flash_fwd_cpu.cl, flash_bwd_cpu.cl) share,
 * compiled after common.cl and before them (host/run/program.c).
 *
 * A CPU core runs a work-group as one thread, so these kernels have one
 * work-item and write their vectors out: OpenCL's float16 is a core's SIMD
 * register (PoCL lowers it to AVX-512, or to two AVX2 registers), 16 rows
 * of a block share one across its lanes, and tiles of rows wait in private
 * arrays (the work-item is the work-group, so __local would buy nothing,
 * and PoCL 5 moves such arrays to the stack and reports no local memory
 * for them). All of it is cache-resident. Rows kept across a whole loop are kept
 * transposed (element c of 16 rows in one vector), so that a product with
 * a tile's rows is a broadcast element times a vector, with one
 * independent accumulator per tile row: no tile is ever transposed, and no
 * vector is ever summed across its lanes.
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // head_dim bucket compiled for, a multiple of 16
#endif

#define LANES 16                     // rows a vector holds, one a lane
#define VECS (HEAD_DIM_MAX / LANES)  // float16s of a row

#define VECS_V (HEAD_DIM_V_MAX / LANES)  // ... of a V, O, dO or dV row (common.cl)
#if HEAD_DIM_MAX % LANES != 0 || HEAD_DIM_V_MAX % LANES != 0
#error "HEAD_DIM_MAX and HEAD_DIM_V_MAX must be multiples of 16"
#endif

/* The vectors are explicit and a work-group is one work-item, so there is
 * nothing for PoCL to vectorise across: unrolling (which FCL_UNROLL turns
 * off for the other kernels on CPUs) exposes the independent chains. */
#define CPU_UNROLL _Pragma("unroll")
/* ... except the loops over a tile's 16 rows whose bodies take an
 * exponential: unrolled, they doubled PoCL's compile of the forward (3.9
 * against 2.1 s) for nothing their vector bodies did not already have. */
#define CPU_ROLLED _Pragma("nounroll")

/* The lanes whose key lies in [lo, hi), the bounds params.h's
 * fcl_row_keys gives a row (the mask), as select reads a condition: the
 * sign bit set where it does. From integer differences, not a comparison:
 * Oclgrind 21.10 evaluates a vector comparison's true as 1, not -1, and
 * LLVM folds any repair of it back into the comparison. */
#define FCL_KEY_IN(key, lo, hi) (((key) - (hi)) & ((lo) - 1 - (key)))

DEFINE_QUAD_LOADER(fcl_cpu_quad, float4, LOAD4, LOAD1)
DEFINE_QUAD_LOADER_OF(fcl_cpu_kv_quad, float4, kv_t, KV_LOAD4, KV_LOAD1)

/* Defines `name`: rows [0, n) of a tensor into a tile [row][ld] as
 * floats (ld: HEAD_DIM_MAX, or HEAD_DIM_V_MAX for the value side's rows),
 * row j at rows + j stride, sixteen columns by `row16` (a counted load
 * and conversion from any element's address) and, where head_dim ends
 * inside them, four by `quad`; rows from `live` on, and columns past
 * head_dim (the row's width), are 0 (never stale memory: 0 * NaN is NaN).
 * fcl_cpu_tile for queries and dO, fcl_cpu_kv_tile for keys and values
 * (common.cl's K/V loads). Sixteen at a time, not four: PoCL ran the f16
 * decode at half int8's speed by quads, a branch each. */
#define DEFINE_CPU_TILE(name, row16, quad, elem)                                    \
  inline void name(__private float *tile, const int n, __global const elem *rows,    \
                   const size_t stride, const int live, const int head_dim,         \
                   const int ld, const int vec IO_LOADS) {                          \
    IO_HELPER_INIT;                                                                 \
    for (int j = 0; j < n; ++j)                                                     \
      for (int c = 0; c < ld; c += 16) {                                            \
        __global const elem *row = rows + (size_t)j * stride;                       \
        float16 x = (float16)(0.0f);                                                \
        if (j < live && c + 16 <= head_dim) {                                       \
          x = row16(row + c);                                                       \
        } else if (j < live && c < head_dim) {                                      \
          for (int k = 0; k < 16; k += 4)                                           \
            vstore4(quad(row, c + k, head_dim, vec IO_LOADS_ARG), 0,                \
                    (__private float *)&x + k);                                     \
        }                                                                           \
        vstore16(x, 0, tile + j * ld + c);                                          \
      }                                                                             \
    IO_HELPER_LOADS_DONE();                                                         \
  }

/* Sixteen f16s' bits as floats in vector integer operations (PoCL's
 * vload_half16 took up to 1.5x as long in the decode): a normal value's
 * exponent and mantissa are the float's, rebiased; a subnormal's value is
 * its mantissa times 2^-24; exponent 31 is infinity or NaN (payload kept). */
inline float16 fcl_cpu_half_bits16(const uint16 b) {
  const uint16 mag = b & (uint16)(0x7fff), e = mag >> 10;
  float16 x = select(convert_float16(mag) * 5.9604644775390625e-8f,
                     as_float16((mag << 13) + (uint16)(112u << 23)), convert_int16(e) != 0);
  x = select(x, as_float16((mag << 13) | (uint16)(0x7f800000u)), convert_int16(e) == 31);
  return as_float16(as_uint16(x) | ((b & (uint16)(0x8000)) << 16));
}
/* Sixteen columns of a row in the storage type as floats. */
#if FCL_DTYPE == 0
inline float16 fcl_cpu_row16(__global const float *p) { return vload16(0, p); }
#elif FCL_DTYPE == 1
inline float16 fcl_cpu_row16(__global const half *p) {
  return fcl_cpu_half_bits16(convert_uint16(vload16(0, (__global const ushort *)p)));
}
#else
inline float16 fcl_cpu_row16(__global const ushort *p) {
  return as_float16(convert_uint16(vload16(0, p)) << 16);
}
#endif
#define FCL_CPU_ROW16(p) FCL_COUNTED_LOAD(16 * STORE_SIZE, fcl_cpu_row16(p))
DEFINE_CPU_TILE(fcl_cpu_tile, FCL_CPU_ROW16, fcl_cpu_quad, store_t)
#if FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2
/* A block form's rows (common.cl) sixteen columns at a time: one scale
 * load and one vector of values, where four-column loads would read the
 * scale eight times a block and convert in pieces. The same bytes count:
 * a block's scale with its first half. Columns past head_dim (a multiple
 * of the block) and rows from `live` on are 0. */
inline void fcl_cpu_kv_tile(__private float *tile, const int n, __global const kv_t *rows,
                            const size_t stride, const int live, const int head_dim,
                            const int ld, const int vec IO_LOADS) {
  IO_HELPER_INIT;
  (void)vec;
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < ld; c += 16) {
      float16 x = (float16)(0.0f);
      if (j < live && c < head_dim) {
        __global const kv_t *b = KV_BLOCK_AT(rows + (size_t)j * stride, c);
        const int half_ = c % FCL_KV_BLOCK / 16;
        const float d = FCL_COUNTED_LOAD(half_ ? 0 : 2, vload_half(0, (__global const half *)b));
#if FCL_KV_DTYPE == 1
        x = convert_float16(as_char16(FCL_COUNTED_LOAD(16, vload16(0, b + 2 + 16 * half_)))) * d;
#else
        /* byte j's nibbles, low then high, as the two bytes of a ushort:
         * elements 2j and 2j + 1 in order, without a shuffle */
        const ushort8 w = convert_ushort8(FCL_COUNTED_LOAD(8, vload8(0, b + 2 + 8 * half_)));
        const uchar16 nib = as_uchar16((ushort8)((w & (ushort8)(15)) | ((w & (ushort8)(0xf0)) << 4)));
        x = (convert_float16(nib) - 8.0f) * d;
#endif
      }
      vstore16(x, 0, tile + j * ld + c);
    }
  IO_HELPER_LOADS_DONE();
}
#elif FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4
/* The fp8 forms sixteen codes at a time, decoded as kvquant.h's
 * fcl_fp8_to_float decodes one, in vector integer operations. E5M2 is an
 * f16's upper byte. E4M3: a normal code's exponent and mantissa are the
 * float's, rebiased; a subnormal's value is its mantissa times the
 * smallest step; S.1111.111 is NaN. */
inline float16 fcl_cpu_fp8x16(const uchar16 code) {
  const uint16 b = convert_uint16(code);
#if FCL_KV_DTYPE == 3
  const uint16 mag = b & (uint16)(0x7f), e = mag >> 3, m = b & (uint16)(7);
  float16 x = select(convert_float16(m) * 0.001953125f,
                     as_float16((mag << 20) + (uint16)(120u << 23)), convert_int16(e) != 0);
  x = select(x, (float16)(NAN), convert_int16(mag) == 0x7f);
  return as_float16(as_uint16(x) | ((b & (uint16)(0x80)) << 24));
#else
  return fcl_cpu_half_bits16(b << 8);
#endif
}
#define FCL_CPU_FP8_ROW16(p) FCL_COUNTED_LOAD(16, fcl_cpu_fp8x16(vload16(0, p)))
DEFINE_CPU_TILE(fcl_cpu_kv_tile, FCL_CPU_FP8_ROW16, fcl_cpu_kv_quad, kv_t)
#else
DEFINE_CPU_TILE(fcl_cpu_kv_tile, FCL_CPU_ROW16, fcl_cpu_kv_quad, kv_t)
#endif

/* The next tile's rows on their way into the cache (L2: the tiles, q and
 * the accumulators fill L1) while this tile's products run; without it the
 * tile loads above stalled on memory (docs/design.md, "The rules,
 * measured"). OpenCL's
 * prefetch() is empty in PoCL; clang's __builtin_prefetch is the CPU's
 * instruction, used where clang compiles for the CPU itself and the kernel
 * does not count its loads (Oclgrind's SPIR, other compilers: nothing). */
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(FCL_COUNT_IO)
#define FCL_CACHE_LINE 64
inline void fcl_cpu_prefetch_rows(__global const uchar *rows, const size_t stride, const int n,
                                  const int bytes) {
  for (int j = 0; j < n; ++j) {
    __global const uchar *row = rows + (size_t)j * stride;
    for (int c = 0; c < bytes; c += FCL_CACHE_LINE) __builtin_prefetch(row + c, 0, 2);
    __builtin_prefetch(row + bytes - 1, 0, 2);  // a row that starts mid-line ends in one more
  }
}
/* The bytes of a row of head_dim elements at `rows`: a byte pointer is a
 * quantized K or V row (kv_t; the storage types are wider). */
#define FCL_CPU_ROW_BYTES(rows, head_dim) \
  (sizeof(*(rows)) == 1 ? KV_ROW_BYTES(head_dim) : (int)sizeof(*(rows)) * (head_dim))
#define FCL_CPU_PREFETCH_ROWS(a, a_stride, n, head_dim)                            \
  fcl_cpu_prefetch_rows((__global const uchar *)(a), (a_stride) * sizeof(*(a)), (n), \
                        FCL_CPU_ROW_BYTES(a, head_dim))
/* Rows [0, n) of the two tiles a loop loads together, row j at a + j
 * a_stride and b + j b_stride, of a_dim and b_dim elements; elsewhere
 * nothing, its arguments unread. */
#define FCL_CPU_PREFETCH_TILES(a, a_stride, b, b_stride, n, a_dim, b_dim) \
  (FCL_CPU_PREFETCH_ROWS(a, a_stride, n, a_dim), FCL_CPU_PREFETCH_ROWS(b, b_stride, n, b_dim))
#else
#define FCL_CPU_PREFETCH_TILES(a, a_stride, b, b_stride, n, a_dim, b_dim) ((void)0)
#endif

/* Sixteen rows, transposed: dst[c * 16 + r] = element c of row r, row r at
 * base + off[r]; rows from `live` on, and columns past head_dim (the rows'
 * width), are 0. dst is a private float16[ld] seen as floats. */
inline void fcl_cpu_rows_t(__private float *dst, __global const store_t *base,
                           __private const size_t *off, const int live, const int head_dim,
                           const int ld, const int vec IO_LOADS) {
  IO_HELPER_INIT;
  for (int r = 0; r < LANES; ++r)
    for (int c = 0; c < ld; c += 4) {
      float4 x = (float4)(0.0f);
      if (r < live) x = fcl_cpu_quad(base + off[r], c, head_dim, vec IO_LOADS_ARG);
      dst[(c + 0) * LANES + r] = x.x;
      dst[(c + 1) * LANES + r] = x.y;
      dst[(c + 2) * LANES + r] = x.z;
      dst[(c + 3) * LANES + r] = x.w;
    }
  IO_HELPER_LOADS_DONE();
}

/* Defines `name`: a row of `vecs` float16s times `factor` to global
 * memory, its head_dim columns only (the row's width): fcl_cpu_store_row
 * for rows of VECS, fcl_cpu_store_row_v for the value side's of VECS_V. */
#define DEFINE_CPU_STORE_ROW(name, vecs)                                              \
  inline void name(__global store_t *dst, __private const float16 *row, const float factor, \
                   const int head_dim, const int vec IO_STORES) {                    \
    IO_HELPER_INIT;                                                                  \
    float out[(vecs) * LANES];                                                       \
    CPU_UNROLL                                                                       \
    for (int c = 0; c < (vecs); ++c) vstore16(row[c] * factor, c, out);              \
    for (int c = 0; c < head_dim; c += 4) {                                          \
      const float4 x = vload4(0, out + c);                                           \
      if (vec) {                                                                     \
        STORE4(dst, c, x);                                                           \
      } else {                                                                       \
        STORE1(dst, c + 0, x.x);                                                     \
        if (c + 1 < head_dim) STORE1(dst, c + 1, x.y);                               \
        if (c + 2 < head_dim) STORE1(dst, c + 2, x.z);                               \
        if (c + 3 < head_dim) STORE1(dst, c + 3, x.w);                               \
      }                                                                              \
    }                                                                                \
    IO_HELPER_STORES_DONE();                                                         \
  }
DEFINE_CPU_STORE_ROW(fcl_cpu_store_row, VECS)
DEFINE_CPU_STORE_ROW(fcl_cpu_store_row_v, VECS_V)

/* Defines `name`: acc[r] += sum_j w[j][r] x_j for rows r < `rows` (of 16:
 * the others keep what they hold), over n tile rows x_j = tile[j], two
 * rows at a time: a row's `vecs` accumulators stay
 * in registers over the tile, and each vector of x_j feeds both rows. acc
 * holds LANES rows of `vecs` float16s, the tile's rows are `vecs` float16s
 * (fcl_cpu_rows_axpy: VECS; fcl_cpu_rows_axpy_v: the value side's VECS_V);
 * w is [n][LANES] floats. `scale`: each row first multiplied by its
 * scale[r] (the forward's e^(m_old - m_new)), or NULL. `partial`: the
 * tile's terms summed on their own first, then added (the backward's
 * gradients, long sums over every query or key; flash_bwd_rows.cl,
 * ACCUMULATE, says why); `scale` is then not used. */
#define DEFINE_CPU_ROWS_AXPY(name, vecs)                                                  \
  inline void name(__private float16 (*acc)[vecs], __private const float *scale,          \
                   const int partial, __private const float *w, __private const float *tile, \
                   const int n, const int rows) {                                         \
    for (int r = 0; r < rows; r += 2) {                                                   \
      float16 a0[vecs], a1[vecs];                                                         \
      const float s0 = scale ? scale[r] : 1.0f, s1 = scale ? scale[r + 1] : 1.0f;         \
      CPU_UNROLL                                                                          \
      for (int c = 0; c < (vecs); ++c) {                                                  \
        a0[c] = partial ? (float16)(0.0f) : acc[r][c] * s0;                               \
        a1[c] = partial ? (float16)(0.0f) : acc[r + 1][c] * s1;                           \
      }                                                                                   \
      for (int j = 0; j < n; ++j) {                                                       \
        const float16 p0 = (float16)(w[j * LANES + r]), p1 = (float16)(w[j * LANES + r + 1]); \
        CPU_UNROLL                                                                        \
        for (int c = 0; c < (vecs); ++c) {                                                \
          const float16 x = vload16(c, tile + j * (vecs) * LANES);                        \
          a0[c] = fma(p0, x, a0[c]);                                                      \
          a1[c] = fma(p1, x, a1[c]);                                                      \
        }                                                                                 \
      }                                                                                   \
      CPU_UNROLL                                                                          \
      for (int c = 0; c < (vecs); ++c) {                                                  \
        acc[r][c] = partial ? acc[r][c] + a0[c] : a0[c];                                  \
        acc[r + 1][c] = partial ? acc[r + 1][c] + a1[c] : a1[c];                          \
      }                                                                                   \
    }                                                                                     \
  }
DEFINE_CPU_ROWS_AXPY(fcl_cpu_rows_axpy, VECS)
DEFINE_CPU_ROWS_AXPY(fcl_cpu_rows_axpy_v, VECS_V)

/* s[j] = sum_c tile[j][c] t[c] for the n <= 16 tile rows j: products of
 * tile rows with 16 rows kept transposed (t, ld float16s: HEAD_DIM_MAX, or
 * HEAD_DIM_V_MAX for the value side's dO V^T; the tile's rows ld long), one
 * independent accumulator per tile row, each element of the tile a
 * broadcast. The sum runs in two levels, CPU_DOT_RUN elements a chain,
 * then the chains added: a dot product's rounding error grows with its
 * chain's length, and one chain of 256 put the backward's dQ at d = 256
 * past 3x the naive algorithm's error (the SIMT kernels' chains are 16-64
 * long for the same reason). */
#define CPU_DOT_RUN 32
#define FCL_CPU_DOTS(s, tile, t, n, ld)                                       \
  do {                                                                        \
    CPU_UNROLL for (int j_ = 0; j_ < (n); ++j_) (s)[j_] = (float16)(0.0f);    \
    for (int c0_ = 0; c0_ < (ld); c0_ += CPU_DOT_RUN) {                        \
      float16 run_[LANES];                                                    \
      CPU_UNROLL for (int j_ = 0; j_ < (n); ++j_) run_[j_] = (float16)(0.0f); \
      const int c1_ = min(c0_ + CPU_DOT_RUN, (ld));                            \
      for (int c_ = c0_; c_ < c1_; ++c_) {                                    \
        const float16 tc_ = (t)[c_];                                          \
        CPU_UNROLL for (int j_ = 0; j_ < (n); ++j_)                           \
          run_[j_] = fma((float16)((tile)[j_ * (ld) + c_]), tc_, run_[j_]); \
      }                                                                       \
      CPU_UNROLL for (int j_ = 0; j_ < (n); ++j_) (s)[j_] += run_[j_];         \
    }                                                                         \
  } while (0)

#ifndef CPU_FEW_ROWS
#define CPU_FEW_ROWS 0  // the most rows a block takes fcl_cpu_dots_few for; 0: none (plan_cpu.c)
#endif
#if CPU_FEW_ROWS
/* Lane j of the result: the sum of v[j]'s sixteen lanes. Four rounds of
 * pairs, each adding a vector's even lanes to its odd ones and packing two
 * vectors' halves into one, keep the keys in lane order. */
#define FCL_CPU_PAIR_SUMS(x, y) ((float16)((x).even + (x).odd, (y).even + (y).odd))
inline float16 fcl_cpu_lane_sums16(__private const float16 *v) {
  float16 a[8], b[4];
  CPU_UNROLL for (int i = 0; i < 8; ++i) a[i] = FCL_CPU_PAIR_SUMS(v[2 * i], v[2 * i + 1]);
  CPU_UNROLL for (int i = 0; i < 4; ++i) b[i] = FCL_CPU_PAIR_SUMS(a[2 * i], a[2 * i + 1]);
  return FCL_CPU_PAIR_SUMS(FCL_CPU_PAIR_SUMS(b[0], b[1]), FCL_CPU_PAIR_SUMS(b[2], b[3]));
}

/* FCL_CPU_DOTS for a block of at most CPU_FEW_ROWS rows (a decode's packed
 * heads: 4 of 16 lanes at GQA 4), whose lanes would mostly multiply
 * zeros: each row r < rows (q, untransposed, ld floats a row) takes its
 * products across a vector of columns, summed across lanes for all n keys
 * at once; s[j]'s lanes from `rows` on are 0. A lane's chain is ld / 16
 * long, within CPU_DOT_RUN's bound up to head_dim 512. Its sums are
 * ordered otherwise than FCL_CPU_DOTS', so a row's bits depend on its
 * block's rows: the planner leaves it out of the batch-invariant mode. */
inline void fcl_cpu_dots_few(__private float16 *s, __private const float *tile,
                             __private const float *q, const int rows, const int ld) {
  __private float *sf = (__private float *)s;
  CPU_UNROLL for (int j = 0; j < LANES; ++j) s[j] = (float16)(0.0f);
  for (int r = 0; r < rows; ++r) {
    float16 part[LANES];
    CPU_UNROLL for (int j = 0; j < LANES; ++j) part[j] = (float16)(0.0f);
    for (int c = 0; c < ld; c += LANES) {
      const float16 qc = vload16(0, q + r * ld + c);
      CPU_UNROLL for (int j = 0; j < LANES; ++j)
        part[j] = fma(vload16(0, tile + j * ld + c), qc, part[j]);
    }
    float t[LANES];
    vstore16(fcl_cpu_lane_sums16(part), 0, t);
    CPU_UNROLL for (int j = 0; j < LANES; ++j) sf[j * LANES + r] = t[j];
  }
}
#endif
