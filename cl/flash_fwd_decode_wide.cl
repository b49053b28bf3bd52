/*
 * flash_fwd_decode_wide.cl — the decode forward on matrix instructions
 * beyond 128 columns: DeepSeek's latent attention (K 576, V the first 512
 * of K's columns, one KV head for 128 query heads), where the call is
 * bound by its multiply-adds, not by its bytes. The decode-mma family's
 * kernel for widths over 128 (the planner's choice, docs/design.md,
 * "DeepSeek's latent attention decode").
 *
 * flash_fwd_decode_mma.cl keeps Q's fragments and the whole accumulator of
 * its 16 rows in every warp: at 576 and 512 columns that is 144 and 256
 * registers a lane. Here the work-group's warps share a block of BLOCK_Q
 * rows (32: the 128 heads read the cache 4 times, from L2) and a tile of
 * BLOCK_K keys, and split the two products differently:
 *   - S = Q K^T: warp w scores keys [w S_KEYS, (w + 1) S_KEYS) of the tile
 *     for every row, Q's A fragments read from local memory at each k-step
 *     (Q_LD: a k-step's 8-byte reads in two wavefronts), K's B fragments
 *     straight from global memory in K_CHUNK k-steps a load, the next
 *     chunk's loads in flight while this one multiplies (asking L1 for a
 *     warp's rows when a tile starts gained nothing measurable: v28);
 *   - the softmax: each warp's row maxima through local memory, so that
 *     every warp takes the tile's maximum (the same m in every warp); P in
 *     local memory in the storage type;
 *   - O += P V: warp w owns O's columns [w O_COLS, (w + 1) O_COLS) of
 *     every row, P's A fragments read from local memory, V's B fragments
 *     from global memory in V_CHUNK k-steps (16 keys each) a load, the
 *     next chunk's in flight as K's.
 * Each warp's running sum l covers its own keys (m is common), so the
 * rows' sums add over the warps at the end, in warp order. Two barriers a
 * tile. The order of head_dim within a dot product is free: K and Q take
 * flash_fwd_decode_mma.cl's (K_COL: a lane's four contiguous columns of a
 * k-step), and V's columns its V_COL order within a warp's columns.
 *
 * f16 and bf16 storage and caches (a quantized cache takes the SIMT decode
 * kernel); HEAD_DIM_MAX a multiple of 32, HEAD_DIM_V_MAX of 32 WARPS.
 * I/O: Q once per block, K's and V's rows of each tile once per
 * work-group (V in its own rows, also where it is a view of K's), O and
 * LSE once per row. Split, the planner merges in the merge kernel's launch
 * (one work-group merging 32 rows of 512 columns was the slower); asked, in
 * this one (MERGE_LAST_SPLIT, blocks.cl, staged over Q's local memory).
 */

#ifndef BLOCK_Q
#define BLOCK_Q 32          // rows (packed: slots) of the block, a multiple of 16
#endif
#ifndef WARPS
#define WARPS 8             // warps of the work-group
#endif
#ifndef HEAD_DIM_V_MAX
#define HEAD_DIM_V_MAX HEAD_DIM_MAX
#endif
/* k-steps of K a lane loads at once, the next chunk's in flight while one
 * multiplies: 4 took B 8 x 8k in 0.190 ms against 0.213 at 2, B 64 x 8k
 * in 1.198 against 1.382 (H100, v28); 2 where 4 does not divide the
 * k-steps, and under a cap of 128 registers, where 4 spilled 216 bytes a
 * lane against 80 and took 1.30 ms against 0.99 (v35) */
#ifndef K_CHUNK
#define K_CHUNK (HEAD_DIM_MAX % 64 == 0 && !(MMA_REG_CAP && MMA_REG_CAP <= 128) ? 4 : 2)
#endif
/* k-steps (16 keys) of V a lane loads at once, as K's chunks: 1, the
 * next step's loads in flight while one multiplies */
#ifndef V_CHUNK
#define V_CHUNK 1
#endif
#define WG_SIZE (32 * WARPS)
#define BLOCK_K FCL_DECODE_WIDE_BLOCK_K  // keys of a tile (traits.h)
#define S_KEYS (BLOCK_K / WARPS)         // keys a warp scores
#define S_TILES (S_KEYS / 8)             // their n-tiles
#define M_TILES (BLOCK_Q / 16)
#define K_STEPS (HEAD_DIM_MAX / 16)      // k-steps of Q K^T
#define O_COLS (HEAD_DIM_V_MAX / WARPS)  // O's columns a warp owns
#define O_GROUPS (O_COLS / 32)           // a lane's 4-column groups of a V row
#define O_TILES (O_COLS / 8)
#define PV_STEPS (BLOCK_K / 16)          // k-steps of P V
#define K_CHUNKS (K_STEPS / K_CHUNK)
#define V_CHUNKS (PV_STEPS / V_CHUNK)
#define NO_UNROLL _Pragma("unroll 1")
/* Chunks 0 .. n - 1 loaded by LOAD(buffer, c) and used by USE(buffer, c),
 * in pairs through two buffers, a loop not unrolled: the next chunk's
 * loads are in flight while one multiplies, and no more (unrolled, the
 * compiler hoisted the loads of many chunks and spilled). K's and V's. */
#define CHUNKS_IN_PAIRS(n, b0, b1, LOAD, USE) \
  do {                                        \
    LOAD(b0, 0);                              \
    NO_UNROLL                                 \
    for (int c_ = 0; c_ < (n); c_ += 2) {     \
      if (c_ + 1 < (n)) LOAD(b1, c_ + 1);     \
      USE(b0, c_);                            \
      if (c_ + 1 < (n)) {                     \
        if (c_ + 2 < (n)) LOAD(b0, c_ + 2);   \
        USE(b1, c_ + 1);                      \
      }                                       \
    }                                         \
  } while (0)
#define Q_LD FCL_DECODE_WIDE_Q_LD(HEAD_DIM_MAX)  // elements between Q's rows in local memory
#define P_LD (BLOCK_K + 8)               // ... and P's: a fragment's rows in distinct banks

#if FCL_DTYPE == 0 || FCL_KV_DTYPE != 0
#error "flash_fwd_decode_wide.cl takes f16 and bf16 storage and caches"
#endif
#if HEAD_DIM_MAX % 32 != 0 || HEAD_DIM_V_MAX % (32 * WARPS) != 0 || HEAD_DIM_V_MAX > HEAD_DIM_MAX
#error "HEAD_DIM_MAX must be a multiple of 32, HEAD_DIM_V_MAX of 32 WARPS and at most it"
#endif
#if BLOCK_Q % 16 != 0 || S_KEYS % 16 != 0 || K_STEPS % K_CHUNK != 0 || PV_STEPS % V_CHUNK != 0
#error "BLOCK_Q, BLOCK_K / WARPS: multiples of 16; K_CHUNK divides HEAD_DIM_MAX / 16, V_CHUNK BLOCK_K / 16"
#endif

#define K_COL(j, t) (16 * (j) + 4 * (t))
#define V_COL(i, g) (32 * (i) + 4 * (g))

MMA_KERNEL(WG_SIZE)
void flash_fwd_decode_mma(FCL_ATTENTION_PARAMS) {
  /* Q, then (the keys done) the split merge's LSEs */
  __local ushort q_local[BLOCK_Q * Q_LD] __attribute__((aligned(16)));
  __local ushort p_local[BLOCK_Q * P_LD] __attribute__((aligned(16)));
  __local float row_part[WARPS * BLOCK_Q];  // each warp's row maxima, then its sums
  MMA_DECLARE_SCRATCH(WARPS);
  const int tid = get_local_id(0), warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int q0 = qb.q0, nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim;
  const int head_dim_v = p.head_dim_v;
  const int slots = nq * PACK_GQA;
  const size_t k_stride = p.k.seq, v_stride = p.v.seq;
  const int o_col0 = warp * O_COLS;  // this warp's first column of O

  DECODE_Q_TO_LOCAL(q_local, Q_LD);
  barrier(CLK_LOCAL_MEM_FENCE);

  /* This lane's rows: g + 8 h of row tile mt is row[2 mt + h] (tokens;
   * packed, of slots). */
  int row[2 * M_TILES], key_lo[2 * M_TILES], key_hi[2 * M_TILES];
UNROLL
  for (int r = 0; r < 2 * M_TILES; ++r)
    fcl_query_row(p, qb.seq, q0 + 16 * (r >> 1) + g + 8 * (r & 1), &row[r], &key_lo[r], &key_hi[r]);
  float acc[M_TILES][O_TILES][4];
  float m[2 * M_TILES], l[2 * M_TILES];  // l: this lane's columns of this warp's keys
UNROLL
  for (int r = 0; r < 2 * M_TILES; ++r) m[r] = FCL_MAX_INIT, l[r] = 0.0f;
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
    for (int n = 0; n < O_TILES; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK_K, kw = k0 + S_KEYS * warp;  // the tile's, this warp's first key

    /* ---- S = Q K^T over this warp's keys: lane (g, t) loads keys
     * kw + 8 n + g, columns K_COL(j, t) .. + 3, B fragments as loaded ---- */
    __global const kv_t *k_step[S_KEYS / 16];
UNROLL
    for (int u = 0; u < S_KEYS / 16; ++u) k_step[u] = STEP_ROWS(k_rows, k, p.k, kw + 16 * u);
    kv_raw_t kx0[K_CHUNK][S_TILES], kx1[K_CHUNK][S_TILES];
#define LOAD_K_CHUNK(buf, c)                                                              \
    UNROLL for (int j_ = 0; j_ < K_CHUNK; ++j_)                                           \
    UNROLL for (int n_ = 0; n_ < S_TILES; ++n_) {                                         \
      const int key_ = kw + 8 * n_ + g, col_ = K_COL((c) * K_CHUNK + j_, t);               \
      (buf)[j_][n_] = KV_RAW_ZERO;                                                        \
      if (key_ < nk && col_ < head_dim)                                                   \
        (buf)[j_][n_] = KV_RAW4(k_step[n_ >> 1] +                                         \
                                    (size_t)KEY_IN_TILE(key_, kw + 16 * (n_ >> 1)) * k_stride, \
                                col_, 1);                                                 \
    }
/* S += Q K^T over chunk c's k-steps, K's B fragments in buf */
#define SCORE_K_CHUNK(buf, c)                                                             \
    UNROLL for (int jj_ = 0; jj_ < K_CHUNK; ++jj_) {                                      \
      const int j_ = (c) * K_CHUNK + jj_;                                                 \
      uint qa_[M_TILES][4];                                                               \
      UNROLL for (int mt_ = 0; mt_ < M_TILES; ++mt_)                                      \
      UNROLL for (int h_ = 0; h_ < 2; ++h_) {                                             \
        const uint2 x_ =                                                                  \
            *(__local const uint2 *)(q_local + (16 * mt_ + g + 8 * h_) * Q_LD + K_COL(j_, t)); \
        qa_[mt_][h_] = x_.x;                                                              \
        qa_[mt_][2 + h_] = x_.y;                                                          \
      }                                                                                   \
      UNROLL for (int n_ = 0; n_ < S_TILES; ++n_) {                                       \
        const uint2 bits_ = fcl_kv_raw_bits4((buf)[jj_][n_]);                             \
        const uint b_[2] = {bits_.x, bits_.y};                                            \
        UNROLL for (int mt_ = 0; mt_ < M_TILES; ++mt_) mma_16bit(s[mt_][n_], qa_[mt_], b_ MMA_ARGS); \
      }                                                                                   \
    }
    float s[M_TILES][S_TILES][4];
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
      for (int n = 0; n < S_TILES; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    CHUNKS_IN_PAIRS(K_CHUNKS, kx0, kx1, LOAD_K_CHUNK, SCORE_K_CHUNK);
#undef LOAD_K_CHUNK
#undef SCORE_K_CHUNK

    /* ---- the softmax: masks, the tile's row maxima over the warps ---- */
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt) MMA_MASK_SCORES(s[mt], S_TILES, kw, S_KEYS, 2 * mt);
UNROLL
    for (int r = 0; r < 2 * M_TILES; ++r) {
      float x = FCL_MAX_INIT;
UNROLL
      for (int n = 0; n < S_TILES; ++n)
        x = fmax(x, fmax(s[r >> 1][n][2 * (r & 1)], s[r >> 1][n][2 * (r & 1) + 1]));
      x = quad_max(x MMA_ARGS);
      if (t == 0) row_part[warp * BLOCK_Q + 16 * (r >> 1) + g + 8 * (r & 1)] = x;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float alpha[2 * M_TILES];
UNROLL
    for (int r = 0; r < 2 * M_TILES; ++r) {
      const int at = 16 * (r >> 1) + g + 8 * (r & 1);
      float m_new = m[r];
      for (int w = 0; w < WARPS; ++w) m_new = fmax(m_new, row_part[w * BLOCK_Q + at]);
      alpha[r] = EXP2_FROM_MAX(m[r], m_new, p.exp_factor);
      m[r] = m_new;
      float sum = 0.0f;
UNROLL
      for (int n = 0; n < S_TILES; ++n)
UNROLL
        for (int c = 0; c < 2; ++c) {
          const float pr = EXP2_FROM_MAX(s[r >> 1][n][2 * (r & 1) + c], m_new, p.exp_factor);
          s[r >> 1][n][2 * (r & 1) + c] = pr;
          sum += pr;
        }
      l[r] = l[r] * alpha[r] + sum;
      /* P, rounded as the instructions' operands are */
UNROLL
      for (int n = 0; n < S_TILES; ++n)
        *(__local uint *)(p_local + at * P_LD + S_KEYS * warp + 8 * n + 2 * t) =
            pack2(s[r >> 1][n][2 * (r & 1)], s[r >> 1][n][2 * (r & 1) + 1]);
    }
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
      for (int n = 0; n < O_TILES; ++n) {
        acc[mt][n][0] *= alpha[2 * mt], acc[mt][n][1] *= alpha[2 * mt];
        acc[mt][n][2] *= alpha[2 * mt + 1], acc[mt][n][3] *= alpha[2 * mt + 1];
      }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* ---- O += P V over this warp's columns: lane (g, t) loads keys 2 t,
     * 2 t + 1, 8 + 2 t and 9 + 2 t of each 16-key step (its P fragment's
     * columns), columns o_col0 + V_COL(i, g) .. + 3 of group i ---- */
    kv_raw_t vx0[V_CHUNK][4][O_GROUPS], vx1[V_CHUNK][4][O_GROUPS];
#define LOAD_V_CHUNK(buf, c)                                                              \
    UNROLL for (int j_ = 0; j_ < V_CHUNK; ++j_) {                                         \
      const int ks_ = (c) * V_CHUNK + j_;                                                 \
      __global const kv_t *step_ = STEP_ROWS(v_rows, v, p.v, k0 + 16 * ks_);              \
      UNROLL for (int u_ = 0; u_ < 4; ++u_) {                                             \
        const int key_ = k0 + 16 * ks_ + 2 * t + (u_ & 1) + 8 * (u_ >> 1);               \
        __global const kv_t *at_ = step_ + (size_t)KEY_IN_TILE(key_, k0 + 16 * ks_) * v_stride; \
        UNROLL for (int i_ = 0; i_ < O_GROUPS; ++i_) {                                    \
          const int col_ = o_col0 + V_COL(i_, g);                                         \
          (buf)[j_][u_][i_] = KV_RAW_ZERO;                                                \
          if (key_ < nk && col_ < head_dim_v) (buf)[j_][u_][i_] = KV_RAW4(at_, col_, 1);  \
        }                                                                                 \
      }                                                                                   \
    }
/* O += P V over chunk c's k-steps (16 keys each), V's loads in buf */
#define ACCUMULATE_V_CHUNK(buf, c)                                                        \
    UNROLL for (int j_ = 0; j_ < V_CHUNK; ++j_) {                                         \
      const int ks_ = (c) * V_CHUNK + j_;                                                 \
      uint pa_[M_TILES][4];                                                               \
      UNROLL for (int mt_ = 0; mt_ < M_TILES; ++mt_)                                      \
      UNROLL for (int i_ = 0; i_ < 4; ++i_)                                               \
        pa_[mt_][i_] = *(__local const uint *)(p_local + (16 * mt_ + g + 8 * (i_ & 1)) * P_LD + \
                                               16 * ks_ + 8 * (i_ >> 1) + 2 * t);        \
      UNROLL for (int i_ = 0; i_ < O_GROUPS; ++i_)                                        \
      UNROLL for (int e_ = 0; e_ < 4; ++e_) {                                             \
        const uint b_[2] = {fcl_kv_raw_pair((buf)[j_][0][i_], (buf)[j_][1][i_], e_),      \
                            fcl_kv_raw_pair((buf)[j_][2][i_], (buf)[j_][3][i_], e_)};     \
        UNROLL for (int mt_ = 0; mt_ < M_TILES; ++mt_)                                    \
          mma_16bit(acc[mt_][4 * i_ + e_], pa_[mt_], b_ MMA_ARGS);                        \
      }                                                                                   \
    }
    CHUNKS_IN_PAIRS(V_CHUNKS, vx0, vx1, LOAD_V_CHUNK, ACCUMULATE_V_CHUNK);
#undef LOAD_V_CHUNK
#undef ACCUMULATE_V_CHUNK
  }

  /* ---- the rows' sums over the warps (in warp order), O and LSE ----
   * acc[mt][4 i + e][2 h + c] is row 16 mt + g + 8 h, column
   * o_col0 + V_COL(i, 2 t + c) + e: four contiguous columns per (i, c). */
  /* (the last tile's reads of row_part were before its second barrier) */
UNROLL
  for (int r = 0; r < 2 * M_TILES; ++r) {
    const float x = quad_sum(l[r] MMA_ARGS);
    if (t == 0) row_part[warp * BLOCK_Q + 16 * (r >> 1) + g + 8 * (r & 1)] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
UNROLL
  for (int r = 0; r < 2 * M_TILES; ++r) {
    const int at = 16 * (r >> 1) + g + 8 * (r & 1), slot = q0 + at;
    if (slot >= slots) continue;
    float sum = 0.0f;
    for (int w = 0; w < WARPS; ++w) sum += row_part[w * BLOCK_Q + at];
    const int lead = warp == 0 && t == 0;
    const float sink = fcl_row_sink(p, sinks, qb.head + SLOT_HEAD(slot), lead);
    const float inv = FCL_ROW_OUT(p, m[r], sum, sink);
    __global store_t *o_row =
        o_rows + (size_t)SLOT_TOKEN(slot) * p.o.seq + (size_t)SLOT_HEAD(slot) * p.o.head;
UNROLL
    for (int i = 0; i < O_GROUPS; ++i)
UNROLL
      for (int c = 0; c < 2; ++c) {
        const int col = o_col0 + V_COL(i, 2 * t + c);
        if (col < head_dim_v) {
          STORE_PAIR(o_row + col, acc[r >> 1][4 * i][2 * (r & 1) + c] * inv,
                     acc[r >> 1][4 * i + 1][2 * (r & 1) + c] * inv);
          STORE_PAIR(o_row + col + 2, acc[r >> 1][4 * i + 2][2 * (r & 1) + c] * inv,
                     acc[r >> 1][4 * i + 3][2 * (r & 1) + c] * inv);
        }
      }
    if (FCL_STORES_LSE(lse) && lead)
      STORE_F32(lse, qb.lse + (size_t)SLOT_HEAD(slot) * p.lse_head + SLOT_TOKEN(slot),
                fcl_row_lse(m[r], p.lse_factor, sum, sink));
  }
  FCL_MERGE_LAST_SPLIT((__local float *)q_local);
  FCL_IO_COMMIT();
}
