/*
 * flash_bwd_mma.cl — the flash backward's dK/dV and dQ kernels on warp-level
 * matrix instructions (cl/mma.cl), for the same algorithm as flash_bwd.cl:
 * recomputation from Q, K and the forward's LSE, nothing of size
 * seqlen_q x seqlen_k stored, no atomics, each gradient element summed by
 * one work-item in a fixed order (bit-identical runs). D = rowsum(dO * O)
 * comes from flash_bwd_pre.cl.
 *
 * Each warp owns 16 rows, held as A fragments; the other side streams
 * through local memory in tiles of BLOCK rows, taken SUB_TILES * 8 rows at
 * a time so that only those scores sit in registers:
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
 * per step, ran 0.93-0.96x on an H200: docs/performance.md, v5.)
 *
 * The traffic is flash_bwd.cl's with BLOCK for its block (host/iomodel.c
 * models both): K and V (dK/dV) or Q, dO, LSE and D (dQ) once per
 * work-group, the other side once per tile it does not skip.
 *
 * The other side's BLOCK rows of a tile stream through local memory in
 * TILE_BUFFERS parts of STREAM_ROWS rows, in the same local memory: with
 * 2, each part is fetched (FETCH_TILE: cp.async on NVIDIA) while the warps
 * compute on the one before, where with 1 the work-group waits for its
 * loads before every tile. Parts run in order across the tiles and, in
 * dK/dV, across the heads of the group, so the pipeline never drains
 * between them.
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
#ifndef TILE_BUFFERS
#define TILE_BUFFERS 1      // 2: the next part of the other side arrives during this one
#endif

#define WG_SIZE (32 * WARPS)
#define ROW_WARPS (WARPS / HEAD_SPLIT)  // warps, or pairs, that own 16 rows
#define BLOCK (16 * ROW_WARPS)  // rows a work-group owns, and rows per tile
#define SUB (8 * SUB_TILES)
#define PART_WIDTH (D_TILES / HEAD_SPLIT)  // 8-column groups a warp holds

#if (HEAD_SPLIT != 1 && HEAD_SPLIT != 2) || WARPS % HEAD_SPLIT != 0
#error "HEAD_SPLIT must be 1 or 2 and divide WARPS"
#endif
#define STREAM_ROWS (BLOCK / TILE_BUFFERS)  // rows of the other side per part
#if SUB_TILES % 2 != 0 || STREAM_ROWS % SUB != 0 || (TILE_BUFFERS != 1 && TILE_BUFFERS != 2)
#error "SUB_TILES must be even, TILE_BUFFERS 1 or 2, and 8 * SUB_TILES divide BLOCK / TILE_BUFFERS"
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

/* The parts' pipeline over `steps` parts: FETCH_PART(i, buffer) starts
 * part i's loads; the loop body, with `step` and `buf`, finds part `step`
 * whole in buffer `buf` after the barrier, and the barrier at its end frees
 * the buffer for the part after next. */
#if TILE_BUFFERS == 2
#define PIPELINE_BEGIN(steps)                                                   \
  if ((steps) > 0) FETCH_PART(0, 0);                                            \
  FETCH_COMMIT();                                                               \
  for (int step = 0; step < (steps); ++step) {                                  \
    const int buf = step & 1;                                                   \
    if (step + 1 < (steps)) FETCH_PART(step + 1, buf ^ 1);                      \
    FETCH_COMMIT();                                                             \
    FETCH_WAIT(1);  /* this part's, not the next one's */
#else
#define PIPELINE_BEGIN(steps)                                                   \
  for (int step = 0; step < (steps); ++step) {                                  \
    const int buf = 0;                                                          \
    FETCH_PART(step, 0);                                                        \
    FETCH_COMMIT();                                                             \
    FETCH_WAIT(0);
#endif
#define PIPELINE_END()                                                          \
    barrier(CLK_LOCAL_MEM_FENCE); /* the buffer's next part may come */         \
  }

/* LSE and D of query rows [q0, q0 + STREAM_ROWS) from `stat` on, as stored
 * (FETCH_ROW_STATS, with the part's tiles); then, once this work-item's
 * fetches have arrived, what the products read (FINISH_ROW_STATS: LSE in
 * log2 units, rows from nq on LSE -inf and D 0, with ROW_KEYS_IN_LOCAL the
 * keys each row sees). Each work-item finishes the rows it fetched, so the
 * barrier after makes them the work-group's. */
#define FETCH_ROW_STATS(lse_dst, d_dst, stat, q0)                               \
  for (int i_ = tid; i_ < STREAM_ROWS; i_ += WG_SIZE) {                         \
    const int live_ = (q0) + i_ < nq;                                           \
    FETCH_F32(&(lse_dst)[i_], live_ ? lse + (stat) + (q0) + i_ : lse, live_);   \
    FETCH_F32(&(d_dst)[i_], live_ ? dsum + (stat) + (q0) + i_ : dsum, live_);   \
  }
#define FINISH_ROW_STATS(lse_dst, lo_dst, hi_dst, q0)                          \
  for (int i_ = tid; i_ < STREAM_ROWS; i_ += WG_SIZE) {                         \
    const int row_ = (q0) + i_, live_ = row_ < nq;                              \
    (lse_dst)[i_] = live_ ? (lse_dst)[i_] * M_LOG2E_F : -INFINITY;              \
    ROW_KEYS_STORE(lo_dst, hi_dst, i_, row_, live_, nq, nk);                    \
  }

/* ---- dK, dV --------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_bwd_dkdv_mma(FCL_ATTENTION_PARAMS) {
  __local tile_t q_tile[TILE_BUFFERS][STREAM_ROWS * TILE_LD] __attribute__((aligned(16)));
  __local tile_t do_tile[TILE_BUFFERS][STREAM_ROWS * TILE_LD] __attribute__((aligned(16)));
  __local float lse2_tile[TILE_BUFFERS][STREAM_ROWS], d_tile[TILE_BUFFERS][STREAM_ROWS];
#if ROW_KEYS_IN_LOCAL
  __local int lo_tile[TILE_BUFFERS][STREAM_ROWS], hi_tile[TILE_BUFFERS][STREAM_ROWS];
#define LO_TILE lo_tile[buf]
#define HI_TILE hi_tile[buf]
#else
#define LO_TILE 0
#define HI_TILE 0
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
  /* The query rows the block sees, in whole tiles of BLOCK rows, taken a
   * part at a time: for each head of the group, parts first_part.. */
  const int first_part = kb.q_lo / BLOCK * TILE_BUFFERS;
  const int parts = ((kb.q_hi + BLOCK - 1) / BLOCK) * TILE_BUFFERS - first_part;
  /* Part i: head member i / parts, query rows from q0. */
#define PART_HEAD(i) (kb.kv_head * kb.group + (i) / parts)
#define PART_Q0(i) ((first_part + (i) % parts) * STREAM_ROWS)
#define FETCH_PART(i, b)                                                        \
  {                                                                             \
    const int head_ = PART_HEAD(i), q0_ = PART_Q0(i), rows_ = min(STREAM_ROWS, nq - q0_); \
    FETCH_TILE(q_tile[b], q + fcl_at(p.q, batch, kb.seq.q_start, head_) + (size_t)q0_ * p.q.seq, \
               rows_, STREAM_ROWS, p.q.seq);                                    \
    FETCH_TILE(do_tile[b],                                                      \
               dout + fcl_at(p.dout, batch, kb.seq.q_start, head_) + (size_t)q0_ * p.dout.seq, \
               rows_, STREAM_ROWS, p.dout.seq);                                 \
    FETCH_ROW_STATS(lse2_tile[b], d_tile[b],                                    \
                    (size_t)batch * p.lse_batch + (size_t)head_ * p.lse_head + kb.seq.q_start, \
                    q0_);                                                       \
  }

  float slope = 0.0f;
  PIPELINE_BEGIN(kb.group * parts)
    const int q0 = PART_Q0(step);
    if (step % parts == 0) slope = ALIBI_SLOPE(batch, PART_HEAD(step));  // a head's first
    FINISH_ROW_STATS(lse2_tile[buf], LO_TILE, HI_TILE, q0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int masked = q0 < kb.full_lo || q0 + STREAM_ROWS > kb.full_hi;  // uniform over the group

    for (int sb = 0; sb < STREAM_ROWS; sb += SUB) {
      __local const tile_t *q_sub = q_tile[buf] + sb * TILE_LD + col0;
      __local const tile_t *do_sub = do_tile[buf] + sb * TILE_LD + col0;
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
          const float lse2_i = lse2_tile[buf][qi];
          int seen = lse2_i != -INFINITY;  // past the sequence, or saw no key
          if (masked) seen = seen && KEY_SEEN_BY(key, q0 + qi, nq, nk, LO_TILE[qi], HI_TILE[qi]);
          float dscale;
          const float pr = fcl_prob(s[n][i], p, lse2_i, slope, q0 + qi + diag - key, &dscale);
          s[n][i] = seen ? pr : 0.0f;
          dp[n][i] = s[n][i] * (dp[n][i] - d_tile[buf][qi]) * dscale;
        }
      MMA_ACCUMULATE(dv_acc, PART_WIDTH, s, SUB_TILES, do_sub);
      MMA_ACCUMULATE(dk_acc, PART_WIDTH, dp, SUB_TILES, q_sub);
    }
  PIPELINE_END()
#undef FETCH_PART
#undef PART_HEAD
#undef PART_Q0
#undef LO_TILE
#undef HI_TILE

  STORE_ROWS(dk_acc, dk + fcl_at(p.dk, batch, kb.seq.k_start, kb.kv_head), key_g, nk, p.dk.seq,
             p.scale);
  STORE_ROWS(dv_acc, dv + fcl_at(p.dv, batch, kb.seq.k_start, kb.kv_head), key_g, nk, p.dv.seq,
             1.0f);
  FCL_IO_COMMIT();
}

/* ---- dQ ------------------------------------------------------------------- */

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_bwd_dq_mma(FCL_ATTENTION_PARAMS) {
  __local tile_t k_tile[TILE_BUFFERS][STREAM_ROWS * TILE_LD] __attribute__((aligned(16)));
  __local tile_t v_tile[TILE_BUFFERS][STREAM_ROWS * TILE_LD] __attribute__((aligned(16)));
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
  LOAD_ROW_STATS(lse2_rows, d_rows, lo_rows, hi_rows, lse, dsum, qb.lse, q0, BLOCK, nq, nk);

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
  /* The keys the block sees, in whole tiles of BLOCK keys, a part at a time. */
  const int first_part = qb.k_lo / BLOCK * TILE_BUFFERS;
  const int parts = ((qb.k_hi + BLOCK - 1) / BLOCK) * TILE_BUFFERS - first_part;
  __global const store_t *k_rows = k + fcl_at(p.k, qb.batch, qb.seq.k_start, qb.kv_head);
  __global const store_t *v_rows = v + fcl_at(p.v, qb.batch, qb.seq.k_start, qb.kv_head);
#define PART_K0(i) ((first_part + (i)) * STREAM_ROWS)
#define FETCH_PART(i, b)                                                        \
  {                                                                             \
    const int k0_ = PART_K0(i), keys_ = min(STREAM_ROWS, nk - k0_);             \
    FETCH_TILE(k_tile[b], k_rows + (size_t)k0_ * p.k.seq, keys_, STREAM_ROWS, p.k.seq); \
    FETCH_TILE(v_tile[b], v_rows + (size_t)k0_ * p.v.seq, keys_, STREAM_ROWS, p.v.seq); \
  }

  PIPELINE_BEGIN(parts)
    const int k0 = PART_K0(step);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int masked = k0 < qb.full_lo || k0 + STREAM_ROWS > qb.full_hi;  // uniform over the group

    for (int sb = 0; sb < STREAM_ROWS; sb += SUB) {
      __local const tile_t *k_sub = k_tile[buf] + sb * TILE_LD + col0;
      float s[SUB_TILES][4], dp[SUB_TILES][4];
      MMA_SCORES(s, SUB_TILES, qa, PART_WIDTH, k_sub, split_tf32);
      MMA_SCORES(dp, SUB_TILES, doa, PART_WIDTH, v_tile[buf] + sb * TILE_LD + col0, split_tf32);
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
  PIPELINE_END()
#undef FETCH_PART
#undef PART_K0

  STORE_ROWS(dq_acc, dq + fcl_at(p.dq, qb.batch, qb.seq.q_start, qb.head), row_g, nq, p.dq.seq,
             p.scale);
  FCL_IO_COMMIT();
}
