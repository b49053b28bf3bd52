/*
 * flash_fwd_decode.cl — the forward for a few query rows against many keys
 * (decode: one new token per sequence, its group's query heads packed).
 *
 * flash_fwd.cl and flash_fwd_mma.cl give each work-item its own rows;
 * with BLOCK_Q rows in all (1 to 8) that leaves a work-group of a warp or
 * less streaming the keys, and the memory system idle. Here every
 * work-item works on all BLOCK_Q rows and the work-group divides the keys
 * instead: KEY_LANES adjacent work-items share a key, each holding ELEMS
 * of head_dim of it (and of q and the accumulator), so that a key group's
 * loads are one coalesced row; the WG_SIZE / KEY_LANES key groups take
 * the keys of a tile in turn, KEYS_PER_GROUP each, loaded a step before
 * they are used. A key group's partial dot products are summed over its lanes
 * (warp shuffles on NVIDIA, local memory elsewhere), each group keeps its
 * own running max, sum and accumulator, and the groups' states are merged
 * once at the end, exactly (FCL_DECODE_STORE, blocks.cl).
 *
 * The I/O is the other forwards': Q once per block (through local memory,
 * each element loaded by one work-item), the keys of whole BLOCK_K tiles
 * from the first any row sees to the last, O and LSE once per row.
 *
 * Split (SPLIT_KV), the block's last split may merge the splits in this
 * launch (MERGE_LAST_SPLIT, blocks.cl), in the local state.
 *
 * V and O have p.head_dim_v columns (fcl_attention_desc.head_dim_v), in
 * the same lane slices as q and K (columns past it are 0 and not stored).
 * V_IN_K = 1: V is a view of K's first head_dim_v columns (DeepSeek's
 * latent attention, 576 and 512), so a tile's K registers are its V and
 * each key row is read once. Beyond HEAD_DIM_MAX 256 (FCL_DECODE_Q_IN_LOCAL)
 * q is read from local memory at each use instead of being kept in
 * registers beside the accumulator.
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 128    // head_dim bucket: KEY_LANES * ELEMS
#endif
#ifndef BLOCK_Q
#define BLOCK_Q 4           // rows (packed: slots) of the block, all in every work-item
#endif
#ifndef BLOCK_K
#define BLOCK_K 32          // keys per step of the work-group
#endif
#ifndef WG_SIZE
#define WG_SIZE 128
#endif
#ifndef KEY_LANES
#define KEY_LANES 16        // work-items sharing one key
#endif
#ifndef V_IN_K
#define V_IN_K 0            // 1: V is K's first head_dim_v columns (host: flash.c)
#endif
#define Q_IN_LOCAL FCL_DECODE_Q_IN_LOCAL(HEAD_DIM_MAX)

#define ELEMS (HEAD_DIM_MAX / KEY_LANES)      // of head_dim per work-item
#define ELEMS4 (ELEMS / 4)
#define KEY_GROUPS FCL_DECODE_KEY_GROUPS(WG_SIZE, KEY_LANES)
#define KEYS_PER_GROUP FCL_DECODE_KEYS_PER_GROUP(BLOCK_K, WG_SIZE, KEY_LANES)
#define HD4 (HEAD_DIM_MAX / 4)
#define DECODE_STORE4(dst, x) STORE4(dst, 0, x)
/* A group's lanes are adjacent, within one sub-group where it has as
 * many: butterfly shuffles sum them where the device has them. */
#define SUM_BY_SHUFFLE FCL_SUMS_BY_SHUFFLE(WG_SIZE, KEY_LANES)

#if !FCL_DECODE_VALID(HEAD_DIM_MAX, BLOCK_K, WG_SIZE, KEY_LANES)
#error "KEY_LANES (a power of two) must split HEAD_DIM_MAX into float4s, WG_SIZE into key groups"
#endif

/* This key group's rows of a tile of K or V from key k0: keys
 * k0 + u KEY_GROUPS + group (adjacent groups on adjacent keys), this
 * lane's ELEMS columns; keys past nk and columns past width are 0.
 * Paged, each key's page is looked up (KEY_ROW): a tile may span pages. */
#define LOAD_KEY_GROUP(x, rows, tensor, view, stride, k0, width)               \
  do {                                                                         \
    UNROLL for (int u_ = 0; u_ < KEYS_PER_GROUP; ++u_) {                       \
      const int key_ = (k0) + u_ * KEY_GROUPS + group;                         \
      __global const kv_t *row_ = KEY_ROW(rows, tensor, view, stride, key_);   \
      UNROLL for (int e_ = 0; e_ < ELEMS4; ++e_) {                             \
        (x)[u_][e_] = (float4)(0.0f);                                          \
        if (key_ < nk && col + 4 * e_ < (width))                               \
          (x)[u_][e_] = KV_LOAD4(row_, col + 4 * e_);                          \
      }                                                                        \
    }                                                                          \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_fwd_decode(FCL_ATTENTION_PARAMS) {
#if Q_IN_LOCAL
  /* q while the keys go by, then the key groups' states in its place */
  __local float4 q_and_states[FCL_DECODE_Q_AND_STATES_FLOATS(HEAD_DIM_MAX, BLOCK_Q, WG_SIZE, KEY_LANES) / 4];
  __local float4 *q_local = q_and_states;
  __local float *state = (__local float *)q_and_states;
#else
  __local float4 q_local[BLOCK_Q * HD4];
  /* the key groups' states: m, l, then the accumulator, per row */
  __local float state[KEY_GROUPS * BLOCK_Q * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX)];
#endif
#if !SUM_BY_SHUFFLE
  __local float part[WG_SIZE * KEYS_PER_GROUP * BLOCK_Q];  // [group][key][row][lane]
#endif
  const int tid = get_local_id(0), lane = tid % KEY_LANES, group = tid / KEY_LANES;
  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int q0 = qb.q0, nq = qb.seq.nq, nk = qb.seq.nk, head_dim = p.head_dim;
  const int head_dim_v = p.head_dim_v;
  const int slots = nq * PACK_GQA;
  const size_t k_stride = p.k.seq, v_stride = p.v.seq;

  /* Q into local memory, each element loaded once; absent rows and
   * columns are 0. (The planner takes this kernel for vec4 shapes only.) */
  for (int i = tid; i < BLOCK_Q * HD4; i += WG_SIZE) {
    const int r = i / HD4, c = (i - r * HD4) * 4, slot = q0 + r;
    float4 x = (float4)(0.0f);
    if (slot < slots && c < head_dim)
      x = LOAD4(q_rows + (size_t)SLOT_TOKEN(slot) * p.q.seq + (size_t)SLOT_HEAD(slot) * p.q.head, c);
    q_local[i] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);

  int row[BLOCK_Q], key_lo[BLOCK_Q], key_hi[BLOCK_Q];
  float4 acc[BLOCK_Q][ELEMS4];
#if Q_IN_LOCAL
#define QR(r, e) q_local[(r) * HD4 + lane * ELEMS4 + (e)]
#else
  float4 qr[BLOCK_Q][ELEMS4];
#define QR(r, e) qr[r][e]
#endif
  float m[BLOCK_Q], l[BLOCK_Q];
UNROLL
  for (int r = 0; r < BLOCK_Q; ++r) {
    fcl_query_row(p, qb.seq, q0 + r, &row[r], &key_lo[r], &key_hi[r]);
    m[r] = FCL_MAX_INIT;
    l[r] = 0.0f;
UNROLL
    for (int e = 0; e < ELEMS4; ++e) {
#if !Q_IN_LOCAL
      qr[r][e] = q_local[r * HD4 + lane * ELEMS4 + e];
#endif
      acc[r][e] = (float4)(0.0f);
    }
  }

  const int diag = nk - nq, col = lane * ELEMS;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
  /* Loads run a step ahead of their use, as in flash_fwd_decode_mma.cl:
   * K of the first tile here, then in each tile V before the scores and
   * the next tile's K before the softmax. */
  float4 kx[KEYS_PER_GROUP][ELEMS4];
  if (first_tile < end_tile)
    LOAD_KEY_GROUP(kx, k_rows, k, p.k, k_stride, first_tile * BLOCK_K, head_dim);
  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK_K;
    float4 vx[KEYS_PER_GROUP][ELEMS4];
#if V_IN_K
UNROLL
    for (int u = 0; u < KEYS_PER_GROUP; ++u)
UNROLL
      for (int e = 0; e < ELEMS4; ++e) vx[u][e] = kx[u][e];  // (columns past head_dim_v unused)
#else
    LOAD_KEY_GROUP(vx, v_rows, v, p.v, v_stride, k0, head_dim_v);
#endif
    /* ---- scores: this lane's part of q . k, summed over the group ---- */
    float s[KEYS_PER_GROUP][BLOCK_Q];
UNROLL
    for (int u = 0; u < KEYS_PER_GROUP; ++u)
UNROLL
      for (int r = 0; r < BLOCK_Q; ++r) {
        float4 d = (float4)(0.0f);
UNROLL
        for (int e = 0; e < ELEMS4; ++e) d = fma(QR(r, e), kx[u][e], d);
        s[u][r] = (d.x + d.y) + (d.z + d.w);
      }
#if SUM_BY_SHUFFLE
UNROLL
    for (int mask = 1; mask < KEY_LANES; mask *= 2)
UNROLL
      for (int u = 0; u < KEYS_PER_GROUP; ++u)
UNROLL
        for (int r = 0; r < BLOCK_Q; ++r) s[u][r] += fcl_shfl_xor(s[u][r], mask);
#else
UNROLL
    for (int u = 0; u < KEYS_PER_GROUP; ++u)
UNROLL
      for (int r = 0; r < BLOCK_Q; ++r)
        part[((group * KEYS_PER_GROUP + u) * BLOCK_Q + r) * KEY_LANES + lane] = s[u][r];
    barrier(CLK_LOCAL_MEM_FENCE);
UNROLL
    for (int u = 0; u < KEYS_PER_GROUP; ++u)
UNROLL
      for (int r = 0; r < BLOCK_Q; ++r) {
        __local const float *x = part + ((group * KEYS_PER_GROUP + u) * BLOCK_Q + r) * KEY_LANES;
        float sum = 0.0f;
        for (int j = 0; j < KEY_LANES; ++j) sum += x[j];
        s[u][r] = sum;
      }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile's partial sums overwrite these
#endif

    if (tile + 1 < end_tile)
      LOAD_KEY_GROUP(kx, k_rows, k, p.k, k_stride, k0 + BLOCK_K, head_dim);

    /* ---- online softmax per row, over this group's keys ---- */
    const int masked = k0 < qb.full_lo || k0 + BLOCK_K > qb.full_hi;  // uniform over the group
UNROLL
    for (int r = 0; r < BLOCK_Q; ++r) {
      float m_new = m[r];
UNROLL
      for (int u = 0; u < KEYS_PER_GROUP; ++u) {
        const int key = k0 + u * KEY_GROUPS + group;
#if SCORES_TRANSFORMED
        s[u][r] = fcl_score(s[u][r], p, qb.slope, row[r] + diag - key);
#endif
        if (masked && !ROW_SEES(key, row[r], nq, nk, key_lo[r], key_hi[r])) s[u][r] = -INFINITY;
        m_new = fmax(m_new, s[u][r]);
      }
      const float alpha = EXP2_FROM_MAX(m[r], m_new, p.exp_factor);
      m[r] = m_new;
      float sum = 0.0f;
UNROLL
      for (int e = 0; e < ELEMS4; ++e) acc[r][e] *= alpha;
UNROLL
      for (int u = 0; u < KEYS_PER_GROUP; ++u) {
        const float pr = EXP2_FROM_MAX(s[u][r], m_new, p.exp_factor);  // masked: 0
        sum += pr;
UNROLL
        for (int e = 0; e < ELEMS4; ++e) acc[r][e] = fma((float4)(pr), vx[u][e], acc[r][e]);
      }
      l[r] = l[r] * alpha + sum;
    }
  }

  /* ---- the key groups' states to local memory, merged, O and LSE stored ---- */
#if Q_IN_LOCAL
  barrier(CLK_LOCAL_MEM_FENCE);  // every group is done with q, whose place the states take
#endif
  __local float *mine = state + group * BLOCK_Q * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX);
UNROLL
  for (int r = 0; r < BLOCK_Q; ++r) {
    __local float *st = mine + r * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX);
    if (lane == 0) {
      st[0] = m[r];
      st[1] = l[r];
    }
UNROLL
    for (int e = 0; e < ELEMS4; ++e) vstore4(acc[r][e], 0, st + 2 + col + 4 * e);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  FCL_DECODE_STORE(state, KEY_GROUPS);
  FCL_MERGE_LAST_SPLIT(state);
  FCL_IO_COMMIT();
}
