/*
 * decode_quad.cl — a block-form KV cache's rows of 128 columns (Q8_0: 136
 * bytes, Q4_0: 72) read by the lanes that share a key, for the decode on
 * matrix instructions (flash_fwd_decode_mma.cl, which is compiled after
 * this file and mma.cl). The macros expand in that kernel, with its lane
 * (g, t), lane, and the views' units and row bytes (k_unit, k_row_bytes,
 * v_unit, v_row_bytes) in scope.
 */

/* ---- block-form rows of 128 columns, read by the lanes that share a key ----
 * (DECODE_QUAD) A Q8_0 row of 128 columns is 136 bytes, 17 8-byte words;
 * a Q4_0 row 72, 9 words. The lanes that share a key read its words in
 * turn (K: the quad's lane t words t + 4 i; V: the eight lanes' lane g
 * words g, and g + 8 for Q8_0), the last word split between the lanes
 * whose words hold scales, so that every lane holds as many codes as the
 * others: in an 8-byte aligned view a load instruction reads whole runs
 * of 32 or 64 bytes of each row; elsewhere each word in 4- or 2-byte
 * units. The words stay as loaded until the step uses them (work at the
 * load would make the warp wait for it there). Each lane's codes are its
 * columns. A slot (k-step j of K, group i of V) is four elements that one
 * byte permute picks from two of the lane's words (the same two in every
 * lane, the selector the lane's own); its scales come from the lanes that
 * hold them, by shuffles. Q's A fragments and O's columns follow each
 * code's place in the row (QUAD_K_COL, QUAD_V_COL). */
/* Q8_0's by default: on an H200 (B 8 x 8k, Hq/Hkv 32/8, f16 queries) the
 * int8 decode took 0.090 ms this way against 0.138 on the per-group loads,
 * and int4 0.080 against 0.072, so Q4_0 keeps those (docs/performance.md,
 * v28). */
#ifndef DECODE_QUAD
#define DECODE_QUAD (FCL_KV_DTYPE == 1 && FCL_DTYPE == 1 && HEAD_DIM_MAX == 128)
#endif
#if DECODE_QUAD
#if HEAD_DIM_MAX != 128 || HEAD_DIM_V_MAX != 128
#error "DECODE_QUAD reads rows of 128 columns (QUAD_WHOLE counts on it)"
#endif
/* Words w_a and w_b of a row into r[0..3] and, where the lane has one
 * (has_half), 4-byte unit half_at into r[4] (0 elsewhere, and absent
 * rows), each counted once by the bytes it holds of the row (half_bytes:
 * the unit's, at most 4): Q8_0's V rows and Q4_0's K rows. */
#define QUAD_TWO_WORDS_AND_HALF(r, row, present, w_a, w_b, has_half, half_at, half_bytes,  \
                                row_bytes, unit)                                          \
  do {                                                                                   \
    uint2 w0_ = (uint2)(0u), w1_ = (uint2)(0u);                                          \
    uint ex_ = 0u;                                                                       \
    if (present) {                                                                       \
      w0_ = quad_word(row, w_a, row_bytes, unit, QUAD_WHOLE);                            \
      w1_ = quad_word(row, w_b, row_bytes, unit, QUAD_WHOLE);                            \
      (void)FCL_COUNTED_LOAD(QUAD_BYTES_IN(w_a, 1, row_bytes) +                          \
                                 QUAD_BYTES_IN(w_b, 1, row_bytes), 0);                   \
      if (has_half) {                                                                    \
        ex_ = quad_half(row, half_at, row_bytes, unit, QUAD_WHOLE);                      \
        (void)FCL_COUNTED_LOAD(clamp(half_bytes, 0, 4), 0);                              \
      }                                                                                  \
    }                                                                                    \
    (r)[0] = w0_.x, (r)[1] = w0_.y, (r)[2] = w1_.x, (r)[3] = w1_.y, (r)[4] = ex_;        \
  } while (0)
/* Element e (0-3) of prmt(a, b, sel): the byte of the row it was, with
 * a's first byte at a0 and b's at b0. */
inline int quad_byte(const uint sel, const int e, const int a0, const int b0) {
  const int n = sel >> (4 * e) & 7;
  return n < 4 ? a0 + n : b0 + n - 4;
}
/* The selector of the 16-bit scale of block b in the eight bytes
 * (s02, s13): S0 S2 S1 S3. */
inline uint quad_scale_sel(const int b) {
  const int o = 4 * (b & 1) + 2 * (b >> 1);
  return (uint)((o + 1) << 4 | o);
}
/* The y of a slot whose elements 0-1 lie in block ba and 2-3 in bb. */
#define QUAD_Y(s02, s13, ba, bb) fcl_prmt(s02, s13, quad_scale_sel(ba) | quad_scale_sel(bb) << 8)
#if FCL_KV_DTYPE == 1
/* Q8_0. K: lane t's registers r 0-9 are x0 y0 x1 y1 x2 y2 x3 y3 (words
 * t + 4 i, bytes 32 i + 8 t + 4 (r & 1) ..) and lane 0's x4 y4 (bytes 128,
 * 132). Slot j is prmt(r[QK_A(j)], r[QK_B(j)], quad_k_sel(t, j)), its
 * element e byte e of the permute. With DECODE_K_SCALE_AFTER (given on the
 * command line: flash_fwd_decode_mma.cl) slots 2 b and 2 b + 1 are codes of
 * block b in every lane (lanes 1-3: r[j]; lane 0: bytes 2-5, 6-7 32-33,
 * 36-39, 64-67, 96-99, 70-71 100-101, 128-131, 132-135), so that k-steps
 * 2 b and 2 b + 1 of S^T are block b's alone; each lane holds 8 codes of
 * every block. */
#define QUAD_K_WORDS 10
inline int quad_k_first(const int r, const int t) {
  return r < 8 ? 32 * (r >> 1) + 8 * t + 4 * (r & 1) : 128 + 4 * (r - 8);
}
#if defined(DECODE_K_SCALE_AFTER) && DECODE_K_SCALE_AFTER
#define QK_A(j) (j)
#define QK_B(j) ((j) < 4 ? (j) + 1 : (j) + 2)
inline uint quad_k_sel(const int t, const int j) {
  return t != 0 ? 0x3210u : j < 2 || j == 5 ? 0x5432u : 0x7654u;
}
#else
#define QK_A(j) ((j) < 4 ? (j) : (j) == 4 ? 5 : (j) == 6 ? 4 : 6)
#define QK_B(j) ((j) < 4 ? (j) + 1 : (j) == 4 ? 6 : (j) == 5 ? 7 : (j) == 6 ? 8 : 9)
inline uint quad_k_sel(const int t, const int j) {
  return t == 0 ? ((j >> 1) & 1 ? 0x7654u : 0x5432u) : j == 5 ? 0x7654u : 0x3210u;
}
#endif
/* V: lane g's registers r 0-4 are w0.x w0.y w1.x w1.y (words g and
 * g + 8) and lanes 0 and 4's half of word 16 (bytes 128 + 4 (g >> 2)).
 * Slot i's elements 0-1 and 2-3 each lie in one block. */
#define QUAD_V_WORDS 5
#define QV_A_INDEX(i, g) ((i) == 3 && ((g) & 3) == 0 ? 4 : (i))
#define QV_B_INDEX(i, g) ((i) == 0 ? ((g) == 4 ? 3 : 1) : (i) == 1 ? 3 : (i))
#define QV_AREG(r, i, g) ((i) == 3 ? (((g) & 3) == 0 ? (r)[4] : (r)[3]) : (r)[i])
#define QV_BREG(r, i, g) ((i) == 0 ? ((g) == 4 ? (r)[3] : (r)[1]) : (i) == 1 ? (r)[3] : (r)[i])
inline int quad_v_first(const int r, const int g) {
  return r == 4 ? 128 + 4 * (g >> 2) : 64 * (r >> 1) + 8 * g + 4 * (r & 1);
}
inline uint quad_v_sel(const int g, const int i) {
  return i == 0 ? (g == 0 ? 0x5432u : g == 4 ? 0x5410u : 0x3210u)
                : i == 1 && g == 0 ? 0x7632u : 0x3210u;
}
/* The byte of element e of a slot, and its column. */
#define QUAD_ELEMENT_BYTE(e) (e)
#define QUAD_COLUMN(p, e) ((p) / FCL_KV_Q8_BYTES * FCL_KV_BLOCK + (p) % FCL_KV_Q8_BYTES - 2)
#define QUAD_BLOCK_BYTES FCL_KV_Q8_BYTES
#else
/* Q4_0 (element 2 k and 2 k + 1 of a block in byte k of its codes, low
 * nibble first). K: lane t's registers r 0-4 are w.x w.y (word t), x y
 * (word t + 4) and lanes 0 and 2's half of word 8 (bytes 64 + 4 (t >> 1)).
 * Slot j is two bytes of prmt(r[QK_A(j)], r[QK_B(j)], quad_k_sel(t, j))
 * in one block: elements 0-1 the first's nibbles, 2-3 the second's. */
#define QUAD_K_WORDS 5
#define QK_A(j) ((j) >> 1)
#define QK_B(j) ((j) == 1 || (j) == 7 ? 4 : (j) >> 1)
inline int quad_k_first(const int r, const int t) {
  return r < 4 ? 8 * (t + 4 * (r >> 1)) + 4 * (r & 1) : 64 + 4 * (t >> 1);
}
inline uint quad_k_sel(const int t, const int j) {
  return t & 1                     ? (j & 1 ? 0x32u : 0x10u)
         : j == 1                  ? 0x54u
         : j == 7                  ? 0x76u
         : t == 0 && (j == 0 || j == 6) ? 0x32u
                                   : (j & 1 ? 0x32u : 0x10u);
}
/* V: lane g's registers r 0-2 are w.x w.y (word g) and the even lanes'
 * quarter of word 8 (bytes 64 + g, 65 + g). */
#define QUAD_V_WORDS 3
#define QV_A_INDEX(i, g) ((i) >> 1)
#define QV_B_INDEX(i, g) ((i) & 1 ? 2 : (i) >> 1)
#define QV_AREG(r, i, g) ((r)[(i) >> 1])
#define QV_BREG(r, i, g) ((i) & 1 ? (r)[2] : (r)[(i) >> 1])
inline int quad_v_first(const int r, const int g) { return r < 2 ? 8 * g + 4 * r : 64 + g; }
inline uint quad_v_sel(const int g, const int i) {
  return g & 1    ? (i & 1 ? 0x32u : 0x10u)
         : i == 0 ? (g == 0 ? 0x32u : 0x10u)
         : i == 1 ? (g < 4 ? 0x54u : 0x32u)
         : i == 2 ? (g == 4 ? 0x32u : 0x10u)
                  : (g < 4 ? 0x32u : 0x54u);
}
#define QUAD_ELEMENT_BYTE(e) ((e) >> 1)
#define QUAD_COLUMN(p, e) \
  ((p) / FCL_KV_Q4_BYTES * FCL_KV_BLOCK + 2 * ((p) % FCL_KV_Q4_BYTES - 2) + ((e) & 1))
#define QUAD_BLOCK_BYTES FCL_KV_Q4_BYTES
#endif
inline int quad_k_byte(const int t, const int j, const int e) {
  return quad_byte(quad_k_sel(t, j), QUAD_ELEMENT_BYTE(e), quad_k_first(QK_A(j), t),
                   quad_k_first(QK_B(j), t));
}
inline int quad_v_byte(const int g, const int i, const int e) {
  return quad_byte(quad_v_sel(g, i), QUAD_ELEMENT_BYTE(e), quad_v_first(QV_A_INDEX(i, g), g),
                   quad_v_first(QV_B_INDEX(i, g), g));
}
/* The column of element e of lane t's K slot j, of lane g's V slot i. */
#define QUAD_K_COL(t, j, e) QUAD_COLUMN(quad_k_byte(t, j, e), e)
#define QUAD_V_COL(g, i, e) QUAD_COLUMN(quad_v_byte(g, i, e), e)

/* The widest unit (8, 4 or 2 bytes) a view's rows may be read in: the
 * host's KV_UNIT where it gives one (flash_fwd_decode_mma.cl; with the
 * rows' bytes constant too, FULL_WIDTHS, the paths of narrower units and
 * partial words fold away), else once per launch. */
#if KV_UNIT
#define KV_VIEW_UNIT(x, view) (KV_UNIT > 8 ? 8 : KV_UNIT)
#else
#define KV_VIEW_UNIT(x, view)                                                               \
  ((((size_t)(x) | (size_t)((view).offset | (view).batch | (view).seq | (view).head)) & 7) \
       == 0 ? 8                                                                            \
   : ((((size_t)(x) | (size_t)((view).offset | (view).batch | (view).seq | (view).head)) & \
       3) == 0)                                                                            \
       ? 4                                                                                 \
       : 2)
#endif
/* Whether every word and half a lane reads lies inside its row: with
 * FULL_WIDTHS (the kernel's) a row is all 128 columns' bytes, which the
 * reads above cover exactly, so no read tests the row's end. NVIDIA's
 * compiler does not bound a lane's word by itself: with the unit known
 * (KV_UNIT), v36's driver code kept the test and selected the loaded word
 * at the load, which waited for it there (the int8 decode 1.27x slower).
 * A unit found per launch keeps its paths, as v36 timed them. Expands in
 * the kernel. */
#define QUAD_WHOLE (FULL_WIDTHS && KV_UNIT)
/* Bytes 4 h .. 4 h + 3 of a row of `bytes` bytes (0 past its end; whole:
 * known inside it), in units of `unit` bytes at most. */
inline uint quad_half(__global const kv_t *row, const int h, const int bytes, const int unit,
                      const int whole) {
  __global const kv_t *at = row + 4 * h;
  if (whole || 4 * h + 4 <= bytes)
    return unit >= 4 ? *(__global const uint *)at : as_uint(vload2(0, (__global const ushort *)at));
  return 4 * h + 2 <= bytes ? (uint)*(__global const ushort *)at : 0u;
}
/* Bytes 8 w .. 8 w + 7 of it, as two halves. */
inline uint2 quad_word(__global const kv_t *row, const int w, const int bytes, const int unit,
                       const int whole) {
  if (unit == 8 && (whole || 8 * w + 8 <= bytes)) return *(__global const uint2 *)(row + 8 * w);
  return (uint2)(quad_half(row, 2 * w, bytes, unit, whole),
                 quad_half(row, 2 * w + 1, bytes, unit, whole));
}
/* The bytes of words w .. w + n - 1 inside a row, which a lane counts. */
#define QUAD_BYTES_IN(w, n, bytes) clamp((bytes) - 8 * (w), 0, 8 * (n))

/* Lane t's words of a K row and lane g's of a V row (the registers
 * above); a key not present reads as zeros. */
#if FCL_KV_DTYPE == 1
#define QUAD_K_ROW(r, row, present)                                                      \
  do {                                                                                   \
    UNROLL for (int i_ = 0; i_ < 5; ++i_) {                                              \
      uint2 w_ = (uint2)(0u);                                                            \
      if ((present) && (i_ < 4 || t == 0)) {                                             \
        w_ = quad_word(row, t + 4 * i_, k_row_bytes, k_unit, QUAD_WHOLE);                \
        (void)FCL_COUNTED_LOAD(QUAD_BYTES_IN(t + 4 * i_, 1, k_row_bytes), 0);            \
      }                                                                                  \
      (r)[2 * i_] = w_.x, (r)[2 * i_ + 1] = w_.y;                                        \
    }                                                                                    \
  } while (0)
#define QUAD_V_ROW(r, row, present)                                                      \
  QUAD_TWO_WORDS_AND_HALF(r, row, present, g, g + 8, (g & 3) == 0, 32 + (g >> 2),       \
                          v_row_bytes - 128 - 4 * (g >> 2), v_row_bytes, v_unit)
/* The row's scales where a step uses them, in every lane that shares it:
 * K's from the quad's lane 0, V's from the eight's lanes 0 and 4. */
#define QUAD_SCALES(s02, s13, a02, b02, lane02, a13, b13, lane13)                \
  const uint s02 = warp_shfl_idx(fcl_prmt(a02, b02, 0x5410u), lane02 MMA_ARGS); \
  const uint s13 = warp_shfl_idx(fcl_prmt(a13, b13, 0x7632u), lane13 MMA_ARGS)
#define QUAD_K_SCALES(s02, s13, r) \
  QUAD_SCALES(s02, s13, (r)[0], (r)[5], lane & ~3, (r)[2], (r)[7], lane & ~3)
#define QUAD_V_SCALES(s02, s13, r) QUAD_SCALES(s02, s13, (r)[0], (r)[3], t, (r)[0], (r)[3], 16 + t)
/* V's operand word of element e of two keys' slots: fcl_kv_raw_pair, the
 * scale of elements 2-3 from y's high half. */
inline uint quad_v_pair(const kv_raw_t a, const kv_raw_t b, const int e) {
  const uint codes = (FCL_BYTES_AB(a.x, b.x, e) & 0x00ff00ffu) ^ 0x00800080u;
  return fcl_kv_block_pair(codes, fcl_prmt(a.y, b.y, e < 2 ? 0x5410u : 0x7632u));
}
#define QUAD_V_PAIR quad_v_pair
/* Slot j's four codes, and block b's K scale as a float from
 * QUAD_K_SCALES's pairs, picked as QUAD_Y picks it (DECODE_K_SCALE_AFTER). */
#define QUAD_K_CODES(r, j) fcl_prmt((r)[QK_A(j)], (r)[QK_B(j)], quad_k_sel(t, j))
#define QUAD_K_SCALE(s02, s13, b) \
  fcl_half_bits_to_float(fcl_prmt(s02, s13, quad_scale_sel(b)) & 0xffffu)
/* Four Q8_0 codes as two f16x2 of 1152 + q, exactly (the code + 128 in the
 * low mantissa bits of 0x6400), elements 0-1 and 2-3. */
inline uint2 fcl_q8_biased_bits4(const uint codes) {
  const uint u = codes ^ 0x80808080u;
  return (uint2)(fcl_prmt(u, 0x64646464u, 0x4140u), fcl_prmt(u, 0x64646464u, 0x4342u));
}
#else
#define QUAD_K_ROW(r, row, present)                                                      \
  QUAD_TWO_WORDS_AND_HALF(r, row, present, t, t + 4, (t & 1) == 0, 16 + (t >> 1),       \
                          k_row_bytes - 64 - 4 * (t >> 1), k_row_bytes, k_unit)
#define QUAD_V_ROW(r, row, present)                                                      \
  do {                                                                                   \
    uint2 w_ = (uint2)(0u);                                                              \
    uint ex_ = 0u;                                                                       \
    if (present) {                                                                       \
      w_ = quad_word(row, g, v_row_bytes, v_unit, QUAD_WHOLE);                           \
      (void)FCL_COUNTED_LOAD(QUAD_BYTES_IN(g, 1, v_row_bytes), 0);                       \
      if ((g & 1) == 0 && (QUAD_WHOLE || 66 + g <= v_row_bytes)) {                       \
        ex_ = *(__global const ushort *)((row) + 64 + g);                                \
        (void)FCL_COUNTED_LOAD(2, 0);                                                    \
      }                                                                                  \
    }                                                                                    \
    (r)[0] = w_.x, (r)[1] = w_.y, (r)[2] = ex_;                                          \
  } while (0)
/* K's scales from the quad's lanes 0 (S0, S2) and 2 (S1, S3); V's one
 * from each of the eight's lanes 0, 2, 4, 6. */
#define QUAD_K_SCALES(s02, s13, r)                                                          \
  const uint s02 = warp_shfl_idx(fcl_prmt((r)[0], (r)[3], 0x5410u), lane & ~3 MMA_ARGS);   \
  const uint s13 = warp_shfl_idx(fcl_prmt((r)[0], (r)[3], 0x7632u), (lane & ~3) + 2 MMA_ARGS)
#define QUAD_V_SCALES(s02, s13, r)                                                       \
  const uint own_ = (((g & 4) ? (r)[1] : (r)[0]) >> (8 * (g & 2))) & 0xffffu;           \
  const uint s02 = warp_shfl_idx(own_, t MMA_ARGS) |                                     \
                   warp_shfl_idx(own_, 16 + t MMA_ARGS) << 16;                           \
  const uint s13 = warp_shfl_idx(own_, 8 + t MMA_ARGS) |                                 \
                   warp_shfl_idx(own_, 24 + t MMA_ARGS) << 16
#define QUAD_V_PAIR fcl_kv_raw_pair
#endif
/* Slot j of a K row's words, slot i of a V row's, where a step uses them. */
#define QUAD_K_SLOT(r, j, s02, s13)                                                 \
  ((kv_raw_t)(fcl_prmt((r)[QK_A(j)], (r)[QK_B(j)], quad_k_sel(t, j)),              \
              QUAD_Y(s02, s13, quad_k_byte(t, j, 0) / QUAD_BLOCK_BYTES,            \
                     quad_k_byte(t, j, 0) / QUAD_BLOCK_BYTES)))
#define QUAD_V_SLOT(r, i, s02, s13)                                                 \
  ((kv_raw_t)(fcl_prmt(QV_AREG(r, i, g), QV_BREG(r, i, g), quad_v_sel(g, i)),       \
              QUAD_Y(s02, s13, quad_v_byte(g, i, 0) / QUAD_BLOCK_BYTES,             \
                     quad_v_byte(g, i, 2) / QUAD_BLOCK_BYTES)))
#endif
