/*
 * flash_bwd_mma.cl — the flash backward's dK/dV and dQ kernels on warp-level
 * matrix instructions (cl/mma.cl), for the same algorithm as flash_bwd.cl:
 * recomputation from Q, K and the forward's LSE, nothing of size
 * seqlen_q x seqlen_k stored, no atomics, each gradient element summed by
 * one work-item in a fixed order (bit-identical runs). D = rowsum(dO * O)
 * comes from flash_bwd_pre.cl.
 *
 * Each warp owns 16 rows, held as A fragments; the other side streams
 * through local memory in tiles of BLOCK rows (one buffer each: two do not
 * fit NVIDIA's 47 KiB at d 128 in 16-bit; ASYNC_TILES below), taken
 * SUB_TILES * 8 rows at a time so that only those scores sit in registers:
 *   flash_bwd_dkdv_mma  rows = keys. S^T = K Q^T and dP^T = V dO^T, then
 *                       P^T = e^(scale S^T - LSE), dS^T = P^T (dP^T - D),
 *                       dV += P^T dO and dK += dS^T Q; a key block sees the
 *                       query tiles of every head of its GQA group.
 *   flash_bwd_dq_mma    rows = queries. S = Q K^T, dP = dO V^T, the same
 *                       P and dS, dQ += dS K.
 * Both are the forward's two products (mma.cl: MMA_SCORES, rows x tile^T;
 * MMA_ACCUMULATE, scores x tile) with other operands. In 16-bit types P
 * and dS go to the instructions rounded to the storage type, as in the
 * forward. f32 multiplies in 3xTF32 with short partial sums, as the
 * forward does; the planner takes it from head_dim 64 (plan_mma.c: below,
 * the tensor cores' truncating sums cost dK most accuracy).
 *
 * A lane holds two fragments and two accumulators of its rows' head_dim
 * columns: at head_dim 128 in f32 that is 256 floats, past what a lane
 * has. With HEAD_SPLIT 2 a pair of warps shares 16 rows, each warp holding
 * half of the columns (fragments, accumulators, its half of every
 * product's k-steps); the pair adds its halves of S and dP through local
 * memory (JOIN_HALVES: two barriers per step), so that both warps go on
 * with the same scores. (Splitting the dK/dV kernel's products instead,
 * S, P and dV in one warp and dP, dS and dK in the other with one barrier
 * per step, was slower: docs/design.md, "The rules, measured".)
 *
 * The traffic is flash_bwd.cl's with BLOCK for its block (host/model/iomodel.c
 * models both): K and V (dK/dV) or Q, dO, LSE and D (dQ) once per
 * work-group, the other side once per tile it does not skip.
 */

#ifndef WARPS
#define WARPS 4             // warps per work-group
#endif
#ifndef SUB_TILES
#define SUB_TILES 2         // 8-row groups of a tile per step (even)
#endif
#ifndef HEAD_SPLIT
#define HEAD_SPLIT 1        // warps per 16 rows: 1, or 2 (pairs, above)
#endif
#ifndef TILE_LOADS_UNROLL
#define TILE_LOADS_UNROLL 8  // loads in flight per work-item (mma.cl's LOAD_TILE)
#endif

#ifndef ASYNC_TILES
/* 16-bit tiles come by cp.async (mma.cl's FETCH_TILE), a tile's loads all
 * in flight at once and none held in registers; f32, which gained nothing,
 * keeps its loads through registers (docs/design.md, "The rules,
 * measured"). */
#define ASYNC_TILES (FCL_DTYPE != 0)
#endif
#if ASYNC_TILES
#define BWD_TILE FETCH_TILE
#define BWD_TILES_WHOLE() do { FETCH_COMMIT(); FETCH_WAIT(0); } while (0)  /* then a barrier */
#else
#define BWD_TILE LOAD_TILE
#define BWD_TILES_WHOLE() ((void)0)
#endif
#define WG_SIZE (32 * WARPS)
#define ROW_WARPS (WARPS / HEAD_SPLIT)  // warps, or pairs, that own 16 rows
#define BLOCK FCL_MMA_BWD_BLOCK(WARPS, HEAD_SPLIT)  // rows a work-group owns, and rows per tile
#define SUB (8 * SUB_TILES)
#define PART_WIDTH (D_TILES / HEAD_SPLIT)  // 8-column groups a warp holds

#if (HEAD_SPLIT != 1 && HEAD_SPLIT != 2) || WARPS % HEAD_SPLIT != 0
#error "HEAD_SPLIT must be 1 or 2 and divide WARPS"
#endif
#if SUB_TILES % 2 != 0 || BLOCK % SUB != 0
#error "SUB_TILES must be even and 8 * SUB_TILES divide BLOCK"
#endif
#if PART_WIDTH % 2 != 0 || (FCL_DTYPE == 0 && PART_WIDTH % MMA_PART_STEPS != 0)
#error "HEAD_DIM_MAX / HEAD_SPLIT must hold whole k-steps and partial sums"
#endif

/* This warp's rows and columns: row_warp's 16 rows, and from col0 on the
 * 8 PART_WIDTH columns of its half (all of them without pairs). */
#define LOCATE_WARP()                                                           \
  const int tid = get_local_id(0), lane = tid & 31;                             \
  const int g = lane >> 2, t = lane & 3;                                        \
  const int row_warp = (tid >> 5) % ROW_WARPS, upper = (tid >> 5) / ROW_WARPS;  \
  const int col0 = upper * 8 * PART_WIDTH

/* Rows row_g and row_g + 8 of acc (this warp's columns), times `factor`,
 * where row < limit; columns past head_dim are left alone. */
#define STORE_ROWS(acc, base, row_g, limit, stride, factor)                     \
  UNROLL for (int r_ = 0; r_ < 2; ++r_) {                                       \
    const int row_ = (row_g) + 8 * r_;                                          \
    if (row_ >= (limit)) continue;                                              \
    __global store_t *dst_ = (base) + (size_t)row_ * (stride) + col0 + 2 * t;   \
    UNROLL for (int n_ = 0; n_ < PART_WIDTH; ++n_) {                            \
      if (col0 + 8 * n_ + 2 * t >= head_dim) continue;                          \
      STORE_PAIR(dst_ + 8 * n_, (acc)[n_][2 * r_] * (factor),                   \
                 (acc)[n_][2 * r_ + 1] * (factor));                             \
    }                                                                           \
  }

#define ZERO_ACC(acc)                                                           \
  UNROLL for (int n_ = 0; n_ < PART_WIDTH; ++n_)                                \
    UNROLL for (int i_ = 0; i_ < 4; ++i_) (acc)[n_][i_] = 0.0f

#if HEAD_SPLIT == 2
/* A step's S and dP of the pair's rows, summed over both halves of
 * head_dim, the same in both warps: the upper warp hands over its parts,
 * the lower adds its own, both read the sums. Steps alternate between two
 * slots, so that the upper warp's next parts never overwrite sums the
 * lower warp may still be reading. */
#define DECLARE_PAIR_SUMS()                                                     \
  __local float pair_sums[2][ROW_WARPS][2 * SUB_TILES * 4][32];                 \
  int slot = 0
#define JOIN_HALVES(s, dp)                                                      \
  {                                                                             \
    __local float(*sums_)[32] = pair_sums[slot][row_warp];                      \
    slot ^= 1;                                                                  \
    if (upper) {                                                                \
      UNROLL for (int n_ = 0; n_ < SUB_TILES; ++n_)                             \
        UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                 \
          sums_[4 * n_ + i_][lane] = s[n_][i_];                                 \
          sums_[4 * (SUB_TILES + n_) + i_][lane] = dp[n_][i_];                  \
        }                                                                       \
    }                                                                           \
    barrier(CLK_LOCAL_MEM_FENCE);                                               \
    if (!upper) {                                                               \
      UNROLL for (int n_ = 0; n_ < SUB_TILES; ++n_)                             \
        UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                 \
          sums_[4 * n_ + i_][lane] += s[n_][i_];                                \
          sums_[4 * (SUB_TILES + n_) + i_][lane] += dp[n_][i_];                 \
        }                                                                       \
    }                                                                           \
    barrier(CLK_LOCAL_MEM_FENCE);                                               \
    UNROLL for (int n_ = 0; n_ < SUB_TILES; ++n_)                               \
      UNROLL for (int i_ = 0; i_ < 4; ++i_) {                                   \
        s[n_][i_] = sums_[4 * n_ + i_][lane];                                   \
        dp[n_][i_] = sums_[4 * (SUB_TILES + n_) + i_][lane];                    \
      }                                                                         \
  }
#else
#define DECLARE_PAIR_SUMS()
#define JOIN_HALVES(s, dp)
#endif

/* With ROW_KEYS_IN_LOCAL (a window from the parameters), the visible keys
 * [lo, hi) of each row LOAD_ROW_STATS loads, into lo_dst and hi_dst (the
 * kernel's nq and nk in scope); TILE_KEYS and ROWS_KEYS are its row_extra
 * for the dK/dV kernel's streamed tile and the dQ kernel's rows. */
#if ROW_KEYS_IN_LOCAL
#define STORE_ROW_KEYS(lo_dst, hi_dst, i_, row_, live_)                         \
  do {                                                                          \
    int lo_ = 0, hi_ = 0;                                                       \
    if (live_) fcl_row_keys(nq, nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), row_, &lo_, &hi_); \
    (lo_dst)[i_] = lo_;                                                         \
    (hi_dst)[i_] = hi_;                                                         \
  } while (0)
#define TILE_KEYS(i_, row_, live_) STORE_ROW_KEYS(lo_tile, hi_tile, i_, row_, live_)
#define ROWS_KEYS(i_, row_, live_) STORE_ROW_KEYS(lo_rows, hi_rows, i_, row_, live_)
#else
#define TILE_KEYS NO_ROW_EXTRA
#define ROWS_KEYS NO_ROW_EXTRA
#endif

/* ---- dK, dV --------------------------------------------------------------- */

MMA_KERNEL(WG_SIZE)
void flash_bwd_dkdv_mma(FCL_ATTENTION_PARAMS) {
  __local tile_t q_tile[BLOCK * TILE_LD] __attribute__((aligned(16)));
  __local tile_t do_tile[BLOCK * TILE_LD] __attribute__((aligned(16)));
  __local float lse2_tile[BLOCK], d_tile[BLOCK];
#if ROW_KEYS_IN_LOCAL
  __local int lo_tile[BLOCK], hi_tile[BLOCK];  // the keys each query row sees
#endif
  DECLARE_PAIR_SUMS();
  MMA_DECLARE_PRODUCT_SCRATCH(WARPS);  // no quad reductions here
  LOCATE_WARP();
  FCL_IO_INIT;

  const fcl_key_block kb = fcl_locate_key_block(p, seqs, work, BLOCK IO_LOADS_ARG);
  const int batch = kb.batch, nq = kb.seq.nq, nk = kb.seq.nk, head_dim = p.head_dim;

  /* This lane's keys: key_g and key_g + 8. */
  const int key_g = kb.k0 + 16 * row_warp + g;
  DECLARE_FRAG_A(ka, PART_WIDTH);
  DECLARE_FRAG_A(va, PART_WIDTH);
  LOAD_A_ROWS(ka, PART_WIDTH, k + fcl_at(p.k, batch, kb.seq.k_start, kb.kv_head), key_g, nk,
              p.k.seq, 0, col0);
  LOAD_A_ROWS(va, PART_WIDTH, v + fcl_at(p.v, batch, kb.seq.k_start, kb.kv_head), key_g, nk,
              p.v.seq, 0, col0);
  float dk_acc[PART_WIDTH][4], dv_acc[PART_WIDTH][4];
  ZERO_ACC(dk_acc);
  ZERO_ACC(dv_acc);

  const int diag = nk - nq;

  for (int member = 0; member < kb.heads; ++member) {
    const fcl_group_head gh = fcl_group_head_of(p, kb, member);
    const float slope = ALIBI_SLOPE(batch, gh.head);
    for (int tile = kb.first_tile; tile < kb.end_tile; ++tile) {
      const int q0 = tile * BLOCK;
      const int rows = min(BLOCK, nq - q0);
      BWD_TILE(q_tile, q + gh.q + (size_t)q0 * p.q.seq, rows, BLOCK, p.q.seq);
      BWD_TILE(do_tile, dout + gh.dout + (size_t)q0 * p.dout.seq, rows, BLOCK, p.dout.seq);
      LOAD_ROW_STATS(lse2_tile, d_tile, lse, dsum, gh.stats, q0, BLOCK, nq, TILE_KEYS);
      BWD_TILES_WHOLE();
      barrier(CLK_LOCAL_MEM_FENCE);
      const int masked = q0 < kb.full_lo || q0 + BLOCK > kb.full_hi;  // uniform over the group

      for (int sb = 0; sb < BLOCK; sb += SUB) {
        __local const tile_t *q_sub = q_tile + sb * TILE_LD + col0;
        __local const tile_t *do_sub = do_tile + sb * TILE_LD + col0;
        float s[SUB_TILES][4], dp[SUB_TILES][4];
        MMA_SCORES(s, SUB_TILES, ka, PART_WIDTH, q_sub, split_tf32);
        MMA_SCORES(dp, SUB_TILES, va, PART_WIDTH, do_sub, split_tf32);
        JOIN_HALVES(s, dp);
        /* s[n][i]: key key_g + 8 (i >> 1), query q0 + sb + 8 n + 2 t + (i & 1) */
UNROLL
        for (int n = 0; n < SUB_TILES; ++n)
UNROLL
          for (int i = 0; i < 4; ++i) {
            const int qi = sb + 8 * n + 2 * t + (i & 1), key = key_g + 8 * (i >> 1);
            const float lse2_i = lse2_tile[qi];
            int seen = lse2_i != -INFINITY;  // past the sequence, or saw no key
            if (masked)
              seen = seen && KEY_SEEN_BY(key, q0 + qi, nq, nk, lo_tile[qi], hi_tile[qi]);
            float dscale;
            const float pr = fcl_prob(s[n][i], p, lse2_i, slope, q0 + qi + diag - key, &dscale);
            s[n][i] = seen ? pr : 0.0f;
            dp[n][i] = s[n][i] * (dp[n][i] - d_tile[qi]) * dscale;
          }
        MMA_ACCUMULATE(dv_acc, PART_WIDTH, s, SUB_TILES, do_sub);
        MMA_ACCUMULATE(dk_acc, PART_WIDTH, dp, SUB_TILES, q_sub);
      }
      barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites Q and dO
    }
  }

  STORE_ROWS(dk_acc, dk + fcl_at(p.dk, batch, kb.seq.k_start, kb.kv_head), key_g, nk, p.dk.seq,
             p.scale);
  STORE_ROWS(dv_acc, dv + fcl_at(p.dv, batch, kb.seq.k_start, kb.kv_head), key_g, nk, p.dv.seq,
             1.0f);
  FCL_IO_COMMIT();
}

/* ---- dQ ------------------------------------------------------------------- */

MMA_KERNEL(WG_SIZE)
void flash_bwd_dq_mma(FCL_ATTENTION_PARAMS) {
  __local tile_t k_tile[BLOCK * TILE_LD] __attribute__((aligned(16)));
  __local tile_t v_tile[BLOCK * TILE_LD] __attribute__((aligned(16)));
  __local float lse2_rows[BLOCK], d_rows[BLOCK];
#if ROW_KEYS_IN_LOCAL
  __local int lo_rows[BLOCK], hi_rows[BLOCK];  // the keys each row sees
#endif
  DECLARE_PAIR_SUMS();
  MMA_DECLARE_PRODUCT_SCRATCH(WARPS);  // no quad reductions here
  LOCATE_WARP();
  FCL_IO_INIT;

  const fcl_query_block qb = fcl_locate_query_block(p, seqs, work, alibi, BLOCK IO_LOADS_ARG);
  const int q0 = qb.q0, nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim;
  LOAD_ROW_STATS(lse2_rows, d_rows, lse, dsum, qb.lse, q0, BLOCK, nq, ROWS_KEYS);

  /* This lane's rows: row_g and row_g + 8. */
  const int row_g = q0 + 16 * row_warp + g;
  DECLARE_FRAG_A(qa, PART_WIDTH);
  DECLARE_FRAG_A(doa, PART_WIDTH);
  LOAD_A_ROWS(qa, PART_WIDTH, q + fcl_at(p.q, qb.batch, qb.seq.q_start, qb.head), row_g, nq,
              p.q.seq, 0, col0);
  LOAD_A_ROWS(doa, PART_WIDTH, dout + fcl_at(p.dout, qb.batch, qb.seq.q_start, qb.head), row_g,
              nq, p.dout.seq, 0, col0);
  float dq_acc[PART_WIDTH][4];
  ZERO_ACC(dq_acc);
  barrier(CLK_LOCAL_MEM_FENCE);
  float lse2_r[2], d_r[2];
#if ROW_KEYS_IN_LOCAL
  int lo_r[2], hi_r[2];
#endif
UNROLL
  for (int r = 0; r < 2; ++r) {
    const int at = 16 * row_warp + g + 8 * r;
    lse2_r[r] = lse2_rows[at];
    d_r[r] = d_rows[at];
#if ROW_KEYS_IN_LOCAL
    lo_r[r] = lo_rows[at];
    hi_r[r] = hi_rows[at];
#endif
  }

  const int diag = nk - nq;
  const int first_tile = qb.k_lo / BLOCK, end_tile = (qb.k_hi + BLOCK - 1) / BLOCK;
  __global const store_t *k_rows = k + fcl_at(p.k, qb.batch, qb.seq.k_start, qb.kv_head);
  __global const store_t *v_rows = v + fcl_at(p.v, qb.batch, qb.seq.k_start, qb.kv_head);

  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK;
    const int keys = min(BLOCK, nk - k0);
    BWD_TILE(k_tile, k_rows + (size_t)k0 * p.k.seq, keys, BLOCK, p.k.seq);
    BWD_TILE(v_tile, v_rows + (size_t)k0 * p.v.seq, keys, BLOCK, p.v.seq);
    BWD_TILES_WHOLE();
    barrier(CLK_LOCAL_MEM_FENCE);
    const int masked = k0 < qb.full_lo || k0 + BLOCK > qb.full_hi;  // uniform over the group

    for (int sb = 0; sb < BLOCK; sb += SUB) {
      __local const tile_t *k_sub = k_tile + sb * TILE_LD + col0;
      float s[SUB_TILES][4], dp[SUB_TILES][4];
      MMA_SCORES(s, SUB_TILES, qa, PART_WIDTH, k_sub, split_tf32);
      MMA_SCORES(dp, SUB_TILES, doa, PART_WIDTH, v_tile + sb * TILE_LD + col0, split_tf32);
      JOIN_HALVES(s, dp);
      /* s[n][i]: row row_g + 8 (i >> 1), key k0 + sb + 8 n + 2 t + (i & 1) */
UNROLL
      for (int n = 0; n < SUB_TILES; ++n)
UNROLL
        for (int i = 0; i < 4; ++i) {
          const int r = i >> 1, key = k0 + sb + 8 * n + 2 * t + (i & 1);
          int seen = lse2_r[r] != -INFINITY;  // past the sequence, or sees no key
          if (masked) seen = seen && ROW_SEES(key, row_g + 8 * r, nq, nk, lo_r[r], hi_r[r]);
          float dscale;
          const float pr = fcl_prob(s[n][i], p, lse2_r[r], qb.slope, row_g + 8 * r + diag - key,
                                    &dscale);
          dp[n][i] = (seen ? pr : 0.0f) * (dp[n][i] - d_r[r]) * dscale;
        }
      MMA_ACCUMULATE(dq_acc, PART_WIDTH, dp, SUB_TILES, k_sub);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites K and V
  }

  STORE_ROWS(dq_acc, dq + fcl_at(p.dq, qb.batch, qb.seq.q_start, qb.head), row_g, nq, p.dq.seq,
             p.scale);
  FCL_IO_COMMIT();
}
