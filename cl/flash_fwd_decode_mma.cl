/*
 * flash_fwd_decode_mma.cl — the decode forward (a few query rows against
 * many keys) on warp-level matrix instructions: flash_fwd_decode.cl's
 * problem with flash_fwd_mma.cl's arithmetic.
 *
 * flash_fwd_decode.cl spends per key, in every lane, a dot-product slice,
 * a shuffle tree per row and an exponential per row: in the 16-bit types
 * it streams the cache well under the copy speed, bound by issue
 * (docs/design.md, "The rules, measured"). Here every warp of the work-group holds the
 * block's rows (at most 16: one m16 fragment) and takes its own WARP_KEYS
 * keys of each step; S = Q K^T and O += P V are matrix instructions, so a
 * key costs a warp a few instructions, and the work-group's warps merge
 * their states once at the end (FCL_DECODE_STORE, blocks.cl).
 *
 * No local memory on the way: K and V go from global memory straight into
 * the instructions' B fragments (a quantized cache's bytes as loaded,
 * KV_RAW4, converted where they are used: fcl_kv_raw_bits4, and V's
 * columns of two keys at once, fcl_kv_raw_pair). The order of
 * head_dim within a dot product, and of the keys within a step, is free,
 * so each lane loads whole 8-byte groups of four elements:
 *   - K: lane (g, t) loads keys g and 8 + g of the step, columns
 *     16 j + 4 t .. + 3 of k-step j; as loaded they are that k-step's B
 *     fragment (b[0] the first two columns, b[1] the last two), and Q's A
 *     fragments are read from local memory in the same order;
 *   - V: lane (g, t) loads keys 2 t, 2 t + 1, 8 + 2 t, 9 + 2 t (the keys
 *     of its P fragment's columns), columns 32 i + 4 g .. + 3; column
 *     32 i + 4 g + e is output column g of n-tile 4 i + e, and a
 *     register of B takes its two keys' elements of that column.
 * A load reads whole segments of rows: 32 contiguous bytes per quad of
 * lanes for K, 64 per eight lanes of one t for V. (An fp8 cache's lanes
 * read spans of a row instead, K_COL and V_COL below.)
 *
 * A block of at most 8 rows (GQA groups up to 8) takes the products
 * transposed (DECODE_T): S^T = K Q^T and O^T += V^T P^T,
 * the keys and O's columns on the instruction's 16 rows, the block's rows
 * on its 8 columns, so that no instruction multiplies rows of zeros: half
 * the instructions, and O and Q in half the registers. The same loads
 * serve both orders: a K row's four columns are a B fragment's column and
 * an A fragment's row alike. Lane (g, t) then holds keys g and g + 8 of
 * rows 2t and 2t + 1. With more rows S's fragments are flash_fwd_mma.cl's:
 * s[n][i] of lane (g, t) is row g + 8 (i >> 1) of the block, key
 * 8 n + 2 t + (i & 1) of the warp's step. (Keeping only the row-g halves
 * of 8 rows, and asking L2 for the next step's lines, were each slower on
 * some of the decode family's shapes.)
 *
 * f16 and bf16 storage (f32 takes flash_fwd_decode.cl); head_dim up to
 * HEAD_DIM_MAX, a multiple of 32, and a multiple of 4 (vec4 views). The
 * I/O is the other decode kernel's: Q once per block, the keys of whole
 * BLOCK_K tiles, O and LSE once per row; split, its merge may run in this
 * launch as there (MERGE_LAST_SPLIT, blocks.cl). Emulated (MMA_EMULATE)
 * it runs anywhere, for tests: every warp then takes the same number of
 * steps.
 */

#ifndef BLOCK_Q
#define BLOCK_Q 4           // rows (packed: slots) of the block, at most 16
#endif
#ifndef WARPS
#define WARPS 4             // warps per work-group, each its own keys of a step
#endif
#define WG_SIZE (32 * WARPS)
#define WARP_KEYS FCL_DECODE_MMA_WARP_KEYS  // keys of a warp's step: one k-step of P V
#define BLOCK_K (WARP_KEYS * WARPS)     // keys of the work-group's step (a tile)
#define K_STEPS (HEAD_DIM_MAX / 16)     // k-steps of Q K^T
#define V_GROUPS (HEAD_DIM_MAX / 32)    // a lane's 4-column groups of a V row
#define N_TILES (HEAD_DIM_MAX / 8)      // 8-column n-tiles of P V
#define ROW_HALVES (BLOCK_Q > 8 ? 2 : 1)  // fragment rows g and, with more than 8, g + 8
/* DECODE_T: with at most 8 rows, S^T = K Q^T and O^T += V^T P^T. The
 * step's 16 keys, and 16 of V's columns, are the instruction's rows and
 * the block's rows its 8 columns: one instruction a k-step instead of two,
 * O and Q's fragments half the registers. Lane (g, t) then holds keys g
 * and g + 8 of rows 2t and 2t + 1: the softmax reduces over the eight
 * lanes of a t (octet_max), and P^T's B fragment is P's two 8 x 8 tiles
 * transposed (movmatrix_trans). (O^T += V^T P^T alone, with S as before,
 * was slower for every form but int4: docs/performance.md, v30.) */
#ifndef DECODE_T
#define DECODE_T (BLOCK_Q <= 8)
#endif
#if DECODE_T && BLOCK_Q > 8
#error "DECODE_T takes blocks of at most 8 rows"
#endif
/* DECODE_K_SCALE_AFTER (the planner's for int4 under f16 queries, 2;
 * off otherwise: the block forms, S^T, f16 operands): K's codes enter
 * S^T = K Q^T biased, as exact f16 (Q8_0: 1152 + q, a byte permute a
 * pair; Q4_0: 1032 + q, a permute and two bit operations for four, and a
 * product for the odd ones), each block's two k-steps accumulate apart,
 * less the bias times the block's sum of Q's columns, and the step's S^T
 * adds them times the keys' scales, in floats. 1: the bias's sums kept in
 * 8 floats a lane from the start, the block's accumulation starting from
 * them; 2: those registers spared, the bias's product taken by one more
 * instruction a k-step (A every element -K_BIAS). Both need a register
 * cap for three work-groups a multiprocessor on the H100's driver;
 * int8's lost even then (docs/design.md, "Fast dequantisation"). */
#define K_SCALE_AFTER_FITS \
  (DECODE_T && FCL_DTYPE == 1 && ((FCL_KV_DTYPE == 1 && DECODE_QUAD) || (FCL_KV_DTYPE == 2 && !DECODE_QUAD)))
#ifndef DECODE_K_SCALE_AFTER
#define DECODE_K_SCALE_AFTER 0
#endif
#if DECODE_K_SCALE_AFTER && !K_SCALE_AFTER_FITS
#error "DECODE_K_SCALE_AFTER takes Q8_0's rows read by the quad or Q4_0's by groups, transposed, f16"
#endif
#if DECODE_K_SCALE_AFTER && FCL_KV_DTYPE == 1
#define K_BIAS 1152.0f
#define K_BIAS_NEGATIVE_F16X2 0xe480e480u  /* -1152, -1152 */
/* k-step j's four codes of key u (0: g, 1: g + 8) as biased f16 pairs, and
 * block b's scale of it */
#define K_BIASED4(u, j) fcl_q8_biased_bits4(QUAD_K_CODES(kx[u], j))
#define K_BLOCK_SCALE(u, b) QUAD_K_SCALE(s02_##u, s13_##u, b)
#elif DECODE_K_SCALE_AFTER
#define K_BIAS 1032.0f
#define K_BIAS_NEGATIVE_F16X2 0xe408e408u  /* -1032, -1032 */
#define K_BIASED4(u, j) fcl_q4_biased_bits4(kx[u][j].x)
#define K_BLOCK_SCALE(u, b) fcl_half_bits_to_float(kx[u][2 * (b)].y & 0xffffu)
/* A group's two bytes of codes (elements 0-3) as f16 pairs of 1032 + q,
 * exactly: elements 0 and 2, then 1 and 3 (Q's fragment takes its columns
 * in that order): each nibble in the low mantissa bits of 0x6400, the high
 * ones 16 times over, times 1/16 plus 960. */
inline uint2 fcl_q4_biased_bits4(const uint codes) {
  const uint halves = fcl_prmt(codes, 0u, 0x4140u);  /* byte 0, byte 1 in the halves */
  const uint odd = (halves & 0x00f000f0u) | 0x64006400u;
  uint r;
#if MMA_EMULATE
  r = fcl_float_to_f16(fcl_f16_to_float(odd & 0xffffu) * 0.0625f + 960.0f) |
      fcl_float_to_f16(fcl_f16_to_float(odd >> 16) * 0.0625f + 960.0f) << 16;
#else
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(odd), "r"(0x2c002c00u), "r"(0x63806380u));
#endif
  return (uint2)((halves & 0x000f000fu) | 0x64006400u, r);
}
#endif
/* O's accumulator tiles: 16 columns x 8 rows (DECODE_T), else 16 rows x 8
 * columns. */
#define ACC_TILES (DECODE_T ? HEAD_DIM_MAX / 16 : N_TILES)

#if FCL_DTYPE == 0
#error "flash_fwd_decode_mma.cl takes f16 and bf16 storage"
#endif
#if HEAD_DIM_MAX % 32 != 0 || HEAD_DIM_MAX > 128
#error "HEAD_DIM_MAX must be a multiple of 32 up to 128"
#endif
#if BLOCK_Q > 16
#error "BLOCK_Q must be at most 16: one fragment of rows"
#endif

/* Four columns of O, rounded as the instructions' operands are (pack2). */
#define DECODE_STORE4(dst, four) \
  (STORE_PAIR(dst, (four).s0, (four).s1), STORE_PAIR((dst) + 2, (four).s2, (four).s3))

/* A paged cache's page is looked up a warp's step at a time (STEP_ROWS,
 * mma.cl). */

/* ---- a lane's columns of K and V ----
 * The order of head_dim within a dot product, and of V's columns within
 * the output, is free. A 16-bit cache, and a block form's, take the order
 * above (K: columns 16 j + 4 t of k-step j; V: columns 32 i + 4 g of
 * group i): a load instruction's lanes read whole 32- or 64-byte segments
 * of rows. An fp8 cache takes spans (DECODE_SPANS): lane (g, t) reads K
 * columns K_SPAN t .. + K_SPAN - 1 (k-step j: K_SPAN t + 4 j) and V
 * columns V_SPAN g .. + V_SPAN - 1 (group i: V_SPAN g + 4 i) in aligned
 * 16-byte words (SPAN_WIDE), a quarter of the load instructions of 4 bytes
 * a group. (The block forms on spans were slower: docs/design.md, "Fast
 * dequantisation".) */

/* What the host knows of a call that the kernel would otherwise find per
 * launch, so that the paths a call never takes fold away (docs/design.md,
 * "Fast dequantisation"): FULL_WIDTHS, head_dim and head_dim_v are
 * HEAD_DIM_MAX and HEAD_DIM_V_MAX (every column check constant); KV_UNIT,
 * a quantized cache's widest load unit (16, 8, 4, 2 or 1 bytes) that K's
 * and V's views and buffers allow (0: not known, found per launch). Under
 * clang's NVPTX proxy (4 rows a block) the key loop falls from 1313
 * instructions to 700 for Q8_0, 702 to 334 for fp8 and 394 to 351 for an
 * f16 cache; Q8_0's pair ran faster on the H100 only once the quad's reads
 * stopped testing the row's end (decode_quad.cl, QUAD_WHOLE). */
#ifndef FULL_WIDTHS
#define FULL_WIDTHS 0
#endif
#ifndef KV_UNIT
#define KV_UNIT 0
#endif
#if KV_UNIT
#define DECODE_VIEW_ALIGNED(x, view, bytes) (KV_UNIT >= (bytes))
#elif FCL_KV_DTYPE
#define DECODE_VIEW_ALIGNED(x, view, bytes) KV_VIEW_ALIGNED(x, view, bytes)
#else
#define DECODE_VIEW_ALIGNED(x, view, bytes) KV_VIEW_ALIGNED4(x, view)  // (4 only: whole groups)
#endif
#ifndef DECODE_SPANS
#define DECODE_SPANS                              \
  ((FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4) &&    \
   (HEAD_DIM_MAX == 32 || HEAD_DIM_MAX == 64 || HEAD_DIM_MAX == 128))
#endif
#if DECODE_SPANS
#if !(FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4) || \
    !(HEAD_DIM_MAX == 32 || HEAD_DIM_MAX == 64 || HEAD_DIM_MAX == 128)
#error "spans are of an fp8 cache of HEAD_DIM_MAX 32, 64 or 128"
#endif
#define K_SPAN (HEAD_DIM_MAX / 4)  // columns of a lane's K span: 8, 16 or 32
#define V_SPAN (HEAD_DIM_MAX / 8)  // of its V span: 4, 8 or 16
#define K_COL(j, t) (K_SPAN * (t) + 4 * (j))
#define V_COL(i, g) (V_SPAN * (g) + 4 * (i))
/* Whether a view's spans load in words (SPAN_WIDE): the buffer, the offset
 * and the strides multiples of 16, and width (head_dim or head_dim_v)
 * whole spans. Once per launch. */
#define SPAN_VIEW_WIDE(x, view, width, span) \
  (DECODE_VIEW_ALIGNED(x, view, 16) && (width) % (span) == 0)
/* A lane's span of `span` columns from c, as kv_raw_t groups (KV_RAW4's
 * bits): 16-byte words, or one of 8 or 4 bytes for the shortest spans. */
#define SPAN_WIDE(out, row, c, span)                                                      \
  do {                                                                                    \
    __global const kv_t *codes_ = (row) + (c);                                            \
    (void)FCL_COUNTED_LOAD(span, 0);                                                      \
    if ((span) >= 16) {                                                                   \
      UNROLL for (int i_ = 0; i_ < (span) / 16; ++i_) {                                   \
        const uint4 x_ = ((__global const uint4 *)codes_)[i_];                            \
        (out)[4 * i_] = (kv_raw_t)(x_.x, 0u), (out)[4 * i_ + 1] = (kv_raw_t)(x_.y, 0u);   \
        (out)[4 * i_ + 2] = (kv_raw_t)(x_.z, 0u), (out)[4 * i_ + 3] = (kv_raw_t)(x_.w, 0u); \
      }                                                                                   \
    } else if ((span) == 8) {                                                             \
      const uint2 x_ = *(__global const uint2 *)codes_;                                   \
      (out)[0] = (kv_raw_t)(x_.x, 0u), (out)[(span) / 8] = (kv_raw_t)(x_.y, 0u);          \
    } else {                                                                              \
      (out)[0] = (kv_raw_t)(*(__global const uint *)codes_, 0u);                          \
    }                                                                                     \
  } while (0)
/* A lane's `span` columns of a row from c (K_COL, V_COL of group 0):
 * columns past width, or a key that is not present, are 0; in words where
 * the view is `wide`, else a group (KV_RAW4) at a time. */
#define LOAD_SPAN(out, row, c, span, width, present, wide, aligned4)                     \
  do {                                                                                   \
    if ((present) && (wide) && KV_COLUMN_IN(c, width)) {                                 \
      SPAN_WIDE(out, row, c, span);                                                      \
    } else {                                                                             \
      UNROLL for (int j_ = 0; j_ < (span) / 4; ++j_) {                                   \
        (out)[j_] = KV_RAW_ZERO;                                                         \
        if ((present) && KV_COLUMN_IN((c) + 4 * j_, width))                              \
          (out)[j_] = KV_RAW4(row, (c) + 4 * j_, aligned4);                              \
      }                                                                                  \
    }                                                                                    \
  } while (0)
#else
#define K_COL(j, t) (16 * (j) + 4 * (t))
#define V_COL(i, g) (32 * (i) + 4 * (g))
#endif

/* The block forms' rows of 128 columns, read by the lanes that share a
 * key (DECODE_QUAD, QUAD_K_ROW, QUAD_V_ROW, their slots and scales):
 * decode_quad.cl, compiled before this file. */

/* DECODE_V_AHEAD: V is loaded a step ahead, as K is, so that its loads
 * have a whole step to arrive before P V converts and uses them. Two
 * steps of an fp8 cache's raw V fit the registers; of f16's would not,
 * nor of a block form's with a block of more than 8 rows (two fragment
 * rows of softmax state), with bf16 operands (their conversion through
 * floats: scripts/ptxas-check.sh put those at 255 registers), or beside
 * DECODE_QUAD's slots; and with the transposed products a block form's
 * would take the kernel past 168 registers, where three work-groups fill
 * a multiprocessor (the planner's split target: host/plan/plan.c). */
#ifndef DECODE_V_AHEAD
#define DECODE_V_AHEAD                                                                  \
  (FCL_KV_DTYPE == 3 || FCL_KV_DTYPE == 4 ||                                           \
   ((FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2) && FCL_DTYPE == 1 && BLOCK_Q <= 8 &&      \
    !DECODE_QUAD && !DECODE_T))
#endif

/* DECODE_L2_AHEAD (NVIDIA; 0: none): as a step starts, each warp asks L2
 * for the first and last lines of its K and V rows DECODE_L2_AHEAD tiles
 * ahead (lane 2 u + e: key u's, e = 0 the first line, 1 the last), so
 * that the loads a step ahead find them there. No plan sets it: on an
 * H100 it made a quantized cache 5-7% faster at B 32 x 8k and slower at
 * B 8 x 8k (docs/performance.md, v32). */
#ifndef DECODE_L2_AHEAD
#define DECODE_L2_AHEAD 0
#endif
#if DECODE_L2_AHEAD && FCL_NVIDIA_PTX
inline void fcl_prefetch_l2(__global const void *at) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
}
#define PREFETCH_STEP_ROWS(rows, tensor, view, stride, kp, row_bytes)                         \
  do {                                                                                       \
    const int key_ = (kp) + ((tid & 31) >> 1);                                               \
    if (key_ < nk) {                                                                         \
      __global const uchar *at_ = (__global const uchar *)(STEP_ROWS(rows, tensor, view, kp) + \
                                  (size_t)KEY_IN_TILE(key_, kp) * (stride));                  \
      fcl_prefetch_l2(at_ + (tid & 1) * ((row_bytes) - 1));                                  \
    }                                                                                        \
  } while (0)
#else
#define PREFETCH_STEP_ROWS(rows, tensor, view, stride, kp, row_bytes) ((void)0)
#endif

/* A warp's step from key kw, lane (g, t)'s rows of it: for each u <
 * keys, key kw + key_of(u) and its row, which load_row(x[u], row,
 * present) reads (present: the key is below nk). */
#define LOAD_STEP_ROWS(x, kw, rows, tensor, view, stride, keys, key_of, load_row) \
  do {                                                                           \
    __global const kv_t *step_ = STEP_ROWS(rows, tensor, view, kw);              \
    UNROLL for (int u_ = 0; u_ < (keys); ++u_) {                                 \
      const int key_ = (kw) + key_of(u_);                                        \
      __global const kv_t *at_ = step_ + (size_t)KEY_IN_TILE(key_, kw) * (stride); \
      load_row((x)[u_], at_, key_ < nk);                                         \
    }                                                                            \
  } while (0)

/* K: keys kw + g and kw + 8 + g, columns K_COL(j, t) .. + 3 of k-step j
 * (B fragments as loaded). V: keys 2 t, 2 t + 1, 8 + 2 t and 9 + 2 t of
 * the step (the keys of the lane's P fragment columns), columns
 * V_COL(i, g) .. + 3 of group i. Keys past nk and columns past head_dim
 * (head_dim_v) are 0. Without spans, K's k-steps 2 m and 2 m + 1 are one
 * block of a block form (KV_RAW4_BESIDE). */
#define K_KEY(u) (8 * (u) + g)
#define V_KEY(u) (2 * t + ((u) & 1) + 8 * ((u) >> 1))
#if DECODE_QUAD
#define K_ROW QUAD_K_ROW
#define V_ROW QUAD_V_ROW
#elif DECODE_SPANS
#define K_ROW(out, row, present) \
  LOAD_SPAN(out, row, K_COL(0, t), K_SPAN, head_dim, present, k_wide, k_aligned4)
#define V_ROW(out, row, present) \
  LOAD_SPAN(out, row, V_COL(0, g), V_SPAN, head_dim_v, present, v_wide, v_aligned4)
#else
#define K_ROW(out, row, present)                                                          \
  UNROLL for (int j_ = 0; j_ < K_STEPS; ++j_) {                                           \
    (out)[j_] = KV_RAW_ZERO;                                                              \
    if ((present) && KV_COLUMN_IN(K_COL(j_, t), head_dim))                                \
      (out)[j_] = j_ % 2 ? KV_RAW4_BESIDE((out)[j_ - 1], row, K_COL(j_, t), k_aligned4)   \
                         : KV_RAW4(row, K_COL(j_, t), k_aligned4);                        \
  }
#define V_ROW(out, row, present)                                           \
  UNROLL for (int i_ = 0; i_ < V_GROUPS; ++i_) {                           \
    (out)[i_] = KV_RAW_ZERO;                                               \
    if ((present) && KV_COLUMN_IN(V_COL(i_, g), head_dim_v))               \
      (out)[i_] = KV_RAW4(row, V_COL(i_, g), v_aligned4);                  \
  }
#endif
/* What a step keeps of a row of K and of V until it uses it: a slot
 * (kv_raw_t) per k-step or group, or DECODE_QUAD's words. */
#if DECODE_QUAD
#define K_STORE uint
#define K_STORE_N QUAD_K_WORDS
#define V_STORE uint
#define V_STORE_N QUAD_V_WORDS
#else
#define K_STORE kv_raw_t
#define K_STORE_N K_STEPS
#define V_STORE kv_raw_t
#define V_STORE_N V_GROUPS
#endif
#define LOAD_K_STEP(kx, kw) LOAD_STEP_ROWS(kx, kw, k_rows, k, p.k, k_stride, 2, K_KEY, K_ROW)
#define LOAD_V_STEP(vx, kw) LOAD_STEP_ROWS(vx, kw, v_rows, v, p.v, v_stride, 4, V_KEY, V_ROW)

/* MMA_MASK_SCORES for S^T's fragment (DECODE_T): s[i] is key
 * k0 + g + 8 (i >> 1) of row row[i & 1]. */
#define DECODE_T_MASK_SCORES(s, k0, keys)                                          \
  do {                                                                             \
    if (SCORES_TRANSFORMED) {                                                      \
      UNROLL for (int i_ = 0; i_ < 4; ++i_)                                        \
        s[i_] = fcl_score(s[i_], p, qb.slope, row[i_ & 1] + diag - ((k0) + g + 8 * (i_ >> 1))); \
    }                                                                              \
    if ((k0) < qb.full_lo || (k0) + (keys) > qb.full_hi) {                         \
      UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                      \
        const int key_ = (k0) + g + 8 * (i_ >> 1), r_ = i_ & 1;                    \
        s[i_] = ROW_SEES(key_, row[r_], nq, nk, key_lo[r_], key_hi[r_]) ? s[i_] : -INFINITY; \
      }                                                                            \
    }                                                                              \
  } while (0)

MMA_KERNEL(WG_SIZE)
void flash_fwd_decode_mma(FCL_ATTENTION_PARAMS) {
  __local ushort q_local[BLOCK_Q * HEAD_DIM_MAX] __attribute__((aligned(16)));
  /* the warps' states: m, l, then the accumulator, per row (FCL_DECODE_STORE) */
  __local float state[WARPS * BLOCK_Q * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX)];
  MMA_DECLARE_SCRATCH(WARPS);
  const int tid = get_local_id(0), warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int q0 = qb.q0, nq = qb.seq.nq, nk = qb.seq.nk;
  const int head_dim = FULL_WIDTHS ? HEAD_DIM_MAX : p.head_dim;
  // V's and O's columns (HEAD_DIM_MAX: the wider)
  const int head_dim_v = FULL_WIDTHS ? HEAD_DIM_V_MAX : p.head_dim_v;
  const int slots = nq * PACK_GQA;
  const size_t k_stride = p.k.seq, v_stride = p.v.seq;
  const int k_aligned4 = DECODE_VIEW_ALIGNED(k, p.k, 4);
  const int v_aligned4 = DECODE_VIEW_ALIGNED(v, p.v, 4);
#if DECODE_QUAD
  const int k_unit = KV_VIEW_UNIT(k, p.k), v_unit = KV_VIEW_UNIT(v, p.v);
  const int k_row_bytes = KV_ROW_BYTES(head_dim), v_row_bytes = KV_ROW_BYTES(head_dim_v);
  const int lane = tid & 31;
#endif
#if DECODE_SPANS
  const int k_wide = SPAN_VIEW_WIDE(k, p.k, head_dim, K_SPAN);
  const int v_wide = SPAN_VIEW_WIDE(v, p.v, head_dim_v, V_SPAN);
#endif

  DECODE_Q_TO_LOCAL(q_local, HEAD_DIM_MAX);
  barrier(CLK_LOCAL_MEM_FENCE);

  /* Row r's four columns of lane t's k-step j (K's load order); rows past
   * BLOCK_Q are 0. */
#if DECODE_QUAD  /* the columns of the codes lane t holds */
#define Q_COLUMNS(r, j)                                                                  \
  ((r) < BLOCK_Q ? (uint2)(q_local[(r) * HEAD_DIM_MAX + QUAD_K_COL(t, j, 0)] |            \
                               (uint)q_local[(r) * HEAD_DIM_MAX + QUAD_K_COL(t, j, 1)] << 16, \
                           q_local[(r) * HEAD_DIM_MAX + QUAD_K_COL(t, j, 2)] |            \
                               (uint)q_local[(r) * HEAD_DIM_MAX + QUAD_K_COL(t, j, 3)] << 16) \
                 : (uint2)(0u))
#else
#define Q_COLUMNS(r, j)                                                                   \
  ((r) < BLOCK_Q ? *(__local const uint2 *)(q_local + (r) * HEAD_DIM_MAX + K_COL(j, t)) \
                 : (uint2)(0u))
#endif
#if DECODE_T
  /* Q^T's B fragments: row g. */
  uint qf[K_STEPS][2];
UNROLL
  for (int j = 0; j < K_STEPS; ++j) {
    const uint2 x = Q_COLUMNS(g, j);
#if DECODE_K_SCALE_AFTER && FCL_KV_DTYPE == 2  /* columns 0 and 2, 1 and 3 */
    qf[j][0] = fcl_prmt(x.x, x.y, 0x5410u);
    qf[j][1] = fcl_prmt(x.x, x.y, 0x7632u);
#else
    qf[j][0] = x.x;
    qf[j][1] = x.y;
#endif
  }
  /* This lane's rows: 2t and 2t + 1 of the block (tokens; packed, of
   * slots). */
#define LANE_ROW(h) (2 * t + (h))
#if DECODE_K_SCALE_AFTER == 1
  /* -K_BIAS times each block's sum of Q's columns, rows 2t and 2t + 1 */
  float q_bias[HEAD_DIM_MAX / FCL_KV_BLOCK][2];
UNROLL
  for (int b = 0; b < HEAD_DIM_MAX / FCL_KV_BLOCK; ++b)
UNROLL
    for (int h = 0; h < 2; ++h) {
      float sum = 0.0f;
      if (LANE_ROW(h) < BLOCK_Q)
        for (int c = 0; c < FCL_KV_BLOCK; ++c)
          sum += fcl_half_bits_to_float(q_local[LANE_ROW(h) * HEAD_DIM_MAX + FCL_KV_BLOCK * b + c]);
      q_bias[b][h] = -K_BIAS * sum;
    }
#endif
#else
  /* Q's A fragments: rows g and g + 8. */
  uint qa[K_STEPS][4];
UNROLL
  for (int j = 0; j < K_STEPS; ++j)
UNROLL
    for (int h = 0; h < 2; ++h) {
      const uint2 x = Q_COLUMNS(g + 8 * h, j);
      qa[j][h] = x.x;
      qa[j][2 + h] = x.y;
    }
  /* This lane's rows: g and g + 8 of the block. */
#define LANE_ROW(h) (g + 8 * (h))
#endif
  int row[2], key_lo[2], key_hi[2];
UNROLL
  for (int h = 0; h < 2; ++h) {
    fcl_query_row(p, qb.seq, q0 + LANE_ROW(h), &row[h], &key_lo[h], &key_hi[h]);
  }
  float acc[ACC_TILES][4];
  float m[2] = {FCL_MAX_INIT, FCL_MAX_INIT};
  float l[2] = {0.0f, 0.0f};  // this lane's columns; the quad sums at the end
UNROLL
  for (int n = 0; n < ACC_TILES; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
  /* Loads run ahead of their use: K of the first step here, then in each
   * step V before S = Q K^T and the next step's K before the softmax, so
   * that a warp has loads in flight while it computes; with
   * DECODE_V_AHEAD, V of the next step where this step's was. */
  K_STORE kx[2][K_STORE_N];
#if DECODE_V_AHEAD
  V_STORE vx[4][V_STORE_N];
  if (first_tile < end_tile) LOAD_V_STEP(vx, first_tile * BLOCK_K + WARP_KEYS * warp);
#endif
  if (first_tile < end_tile) LOAD_K_STEP(kx, first_tile * BLOCK_K + WARP_KEYS * warp);
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int kw = tile * BLOCK_K + WARP_KEYS * warp;  // this warp's first key
#if DECODE_L2_AHEAD
    if (tile + DECODE_L2_AHEAD < end_tile) {
      PREFETCH_STEP_ROWS(k_rows, k, p.k, k_stride, kw + DECODE_L2_AHEAD * BLOCK_K,
                         KV_ROW_BYTES(head_dim));
      PREFETCH_STEP_ROWS(v_rows, v, p.v, v_stride, kw + DECODE_L2_AHEAD * BLOCK_K,
                         KV_ROW_BYTES(head_dim_v));
    }
#endif
#if DECODE_V_AHEAD
    V_STORE vn[4][V_STORE_N];
    if (tile + 1 < end_tile) LOAD_V_STEP(vn, kw + BLOCK_K);
#else
    V_STORE vx[4][V_STORE_N];
    LOAD_V_STEP(vx, kw);
#endif

#if DECODE_T
    /* ---- S^T = K Q^T: s[i] is key kw + g + 8 (i >> 1), row 2t + (i & 1) ---- */
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    {
#if DECODE_QUAD
      QUAD_K_SCALES(s02_0, s13_0, kx[0]);
      QUAD_K_SCALES(s02_1, s13_1, kx[1]);
#define K_SLOT_0(j) QUAD_K_SLOT(kx[0], j, s02_0, s13_0)
#define K_SLOT_1(j) QUAD_K_SLOT(kx[1], j, s02_1, s13_1)
#else
#define K_SLOT_0(j) kx[0][j]
#define K_SLOT_1(j) kx[1][j]
#endif
#if DECODE_K_SCALE_AFTER
UNROLL
      for (int b = 0; b < HEAD_DIM_MAX / FCL_KV_BLOCK; ++b) {
#if DECODE_K_SCALE_AFTER == 1
        float sb[4] = {q_bias[b][0], q_bias[b][1], q_bias[b][0], q_bias[b][1]};
#else
        float sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint bias_a[4] = {K_BIAS_NEGATIVE_F16X2, K_BIAS_NEGATIVE_F16X2,
                                K_BIAS_NEGATIVE_F16X2, K_BIAS_NEGATIVE_F16X2};
#endif
UNROLL
        for (int j = 2 * b; j < 2 * b + 2; ++j) {
          const uint2 k0 = K_BIASED4(0, j), k1 = K_BIASED4(1, j);
          const uint a[4] = {k0.x, k1.x, k0.y, k1.y};
          mma_16bit(sb, a, qf[j] MMA_ARGS);
#if DECODE_K_SCALE_AFTER == 2
          mma_16bit(sb, bias_a, qf[j] MMA_ARGS);
#endif
        }
        const float d0 = K_BLOCK_SCALE(0, b), d1 = K_BLOCK_SCALE(1, b);
        s[0] = fma(d0, sb[0], s[0]), s[1] = fma(d0, sb[1], s[1]);
        s[2] = fma(d1, sb[2], s[2]), s[3] = fma(d1, sb[3], s[3]);
      }
#else
UNROLL
      for (int j = 0; j < K_STEPS; ++j) {
        const uint2 k0 = fcl_kv_raw_bits4(K_SLOT_0(j)), k1 = fcl_kv_raw_bits4(K_SLOT_1(j));
        const uint a[4] = {k0.x, k1.x, k0.y, k1.y};
        mma_16bit(s, a, qf[j] MMA_ARGS);
      }
#endif
    }

    if (tile + 1 < end_tile) LOAD_K_STEP(kx, kw + BLOCK_K);

    /* ---- transform, mask, new max over the octet, rescale, p ---- */
    DECODE_T_MASK_SCORES(s, kw, WARP_KEYS);
UNROLL
    for (int c = 0; c < 2; ++c) {
      const float m_new = octet_max(fmax(m[c], fmax(s[c], s[c + 2])) MMA_ARGS);
      const float alpha = EXP2_FROM_MAX(m[c], m_new, p.exp_factor);
      m[c] = m_new;
      s[c] = EXP2_FROM_MAX(s[c], m_new, p.exp_factor);
      s[c + 2] = EXP2_FROM_MAX(s[c + 2], m_new, p.exp_factor);
      l[c] = l[c] * alpha + (s[c] + s[c + 2]);
UNROLL
      for (int n = 0; n < ACC_TILES; ++n) acc[n][c] *= alpha, acc[n][c + 2] *= alpha;
    }
#else
    /* ---- S = Q K^T ---- */
    float s[2][4];
UNROLL
    for (int n = 0; n < 2; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#if DECODE_QUAD
      QUAD_K_SCALES(s02, s13, kx[n]);
#define K_SLOT(j) QUAD_K_SLOT(kx[n], j, s02, s13)
#else
#define K_SLOT(j) kx[n][j]
#endif
UNROLL
      for (int j = 0; j < K_STEPS; ++j) {
        const uint2 bits = fcl_kv_raw_bits4(K_SLOT(j));
        const uint b[2] = {bits.x, bits.y};
        mma_16bit(s[n], qa[j], b MMA_ARGS);
      }
    }

    if (tile + 1 < end_tile) LOAD_K_STEP(kx, kw + BLOCK_K);

    /* ---- transform, mask, new max, rescale, p = 2^(x (s - m)) ---- */
    MMA_MASK_SCORES(s, 2, kw, WARP_KEYS, 0);
UNROLL
    for (int h = 0; h < ROW_HALVES; ++h) MMA_ONLINE_SOFTMAX(s, 2, acc, N_TILES, m, l, h);
#endif  /* DECODE_T */

    /* ---- O += P V: P's C fragments are its A fragment (mma.cl) ---- */
#if DECODE_QUAD
    kv_raw_t vs[4][V_GROUPS];
UNROLL
    for (int u = 0; u < 4; ++u) {
      QUAD_V_SCALES(s02, s13, vx[u]);
UNROLL
      for (int i = 0; i < V_GROUPS; ++i) vs[u][i] = QUAD_V_SLOT(vx[u], i, s02, s13);
    }
#define V_SLOTS vs
#define V_PAIR QUAD_V_PAIR
#else
#define V_SLOTS vx
#define V_PAIR fcl_kv_raw_pair
#endif
#if DECODE_T
    /* Tile 2 i + h: A's rows g and g + 8 are group i's elements 2 h and
     * 2 h + 1 of lane g's columns, its columns keys 2t, 2t + 1, 8 + 2t,
     * 9 + 2t; B is P^T: P's tiles of keys 0-7 and 8-15, rows as columns,
     * transposed. */
    const uint pb[2] = {movmatrix_trans(pack2(s[0], s[1]) MMA_ARGS),
                        movmatrix_trans(pack2(s[2], s[3]) MMA_ARGS)};
UNROLL
    for (int i = 0; i < V_GROUPS; ++i)
UNROLL
      for (int h = 0; h < 2; ++h) {
        const uint a[4] = {V_PAIR(V_SLOTS[0][i], V_SLOTS[1][i], 2 * h),
                           V_PAIR(V_SLOTS[0][i], V_SLOTS[1][i], 2 * h + 1),
                           V_PAIR(V_SLOTS[2][i], V_SLOTS[3][i], 2 * h),
                           V_PAIR(V_SLOTS[2][i], V_SLOTS[3][i], 2 * h + 1)};
        mma_16bit(acc[2 * i + h], a, pb MMA_ARGS);
      }
#else
    const uint pa[4] = {pack2(s[0][0], s[0][1]), ROW_HALVES > 1 ? pack2(s[0][2], s[0][3]) : 0u,
                        pack2(s[1][0], s[1][1]), ROW_HALVES > 1 ? pack2(s[1][2], s[1][3]) : 0u};
UNROLL
    for (int i = 0; i < V_GROUPS; ++i)
UNROLL
      for (int e = 0; e < 4; ++e) {
        const uint b[2] = {V_PAIR(V_SLOTS[0][i], V_SLOTS[1][i], e),
                           V_PAIR(V_SLOTS[2][i], V_SLOTS[3][i], e)};
        mma_16bit(acc[4 * i + e], pa, b MMA_ARGS);
      }
#endif
#if DECODE_V_AHEAD
UNROLL
    for (int u = 0; u < 4; ++u)
UNROLL
      for (int i = 0; i < V_STORE_N; ++i) vx[u][i] = vn[u][i];
#endif
  }

  /* ---- the warps' states to local memory, merged, O and LSE stored ---- */
#if DECODE_QUAD
#define O_COL(i, gv, e) QUAD_V_COL(gv, i, e)
#else
#define O_COL(i, gv, e) (V_COL(i, gv) + (e))
#endif
#define STATE_ROW(r) (state + (warp * BLOCK_Q + (r)) * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX))
#if DECODE_T
  /* rows 2t and 2t + 1: m is the octet's, l its sum; acc[2 i + h][c + 2 d]
   * is row 2t + c, column O_COL(i, g, 2 h + d) */
UNROLL
  for (int c = 0; c < 2; ++c) {
    const float l_row = octet_sum(l[c] MMA_ARGS);
    if (g == 0 && 2 * t + c < BLOCK_Q) {
      STATE_ROW(2 * t + c)[0] = m[c];
      STATE_ROW(2 * t + c)[1] = l_row;
    }
  }
UNROLL
  for (int c = 0; c < 2; ++c) {
    if (2 * t + c >= BLOCK_Q) continue;
    __local float *st = STATE_ROW(2 * t + c);
UNROLL
    for (int n = 0; n < ACC_TILES; ++n)
UNROLL
      for (int d = 0; d < 2; ++d) st[2 + O_COL(n >> 1, g, 2 * (n & 1) + d)] = acc[n][c + 2 * d];
  }
#else
  /* acc[4 i + e][2 h + c] is row g + 8 h, column O_COL(i, 2 t + c, e) */
UNROLL
  for (int h = 0; h < ROW_HALVES; ++h) {
    const float l_row = quad_sum(l[h] MMA_ARGS);
    const int r = g + 8 * h;
    if (r >= BLOCK_Q) continue;
    __local float *st = STATE_ROW(r);
    if (t == 0) {
      st[0] = m[h];
      st[1] = l_row;
    }
UNROLL
    for (int n = 0; n < N_TILES; ++n)
UNROLL
      for (int c = 0; c < 2; ++c) st[2 + O_COL(n >> 2, 2 * t + c, n & 3)] = acc[n][2 * h + c];
  }
#endif
  barrier(CLK_LOCAL_MEM_FENCE);
  FCL_DECODE_STORE(state, WARPS);
  FCL_MERGE_LAST_SPLIT(state);
  FCL_IO_COMMIT();
}
