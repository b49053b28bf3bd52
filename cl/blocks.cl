/*
 * blocks.cl — compiled in front of every flashcl kernel, after common.cl:
 * where a work-group's work is and where its results go. A batch entry's
 * sequences (ragged or not) and a paged cache's pages; the query blocks
 * the forwards and dQ own and the key blocks dK/dV own (grid order, key
 * ranges, splits); the decode kernels' merge of their key groups and
 * store; and the merge of attention states, by the merge kernel
 * (merge.cl) or in a split forward's own launch.
 */

/* ---- sequences --------------------------------------------------------------
 * A batch entry's queries and keys: where they start among the tokens of
 * their tensors and how many there are; ragged batches read them from the
 * host's table, the others are all seqlen_q x seqlen_k from token 0. */
typedef struct fcl_sequence {
  int q_start, nq, k_start, nk;
} fcl_sequence;

inline fcl_sequence fcl_sequence_of(const fcl_params p, __global const int *seqs,
                                    int b IO_LOADS) {
  fcl_sequence s = {0, p.seqlen_q, 0, p.seqlen_k};
  if (p.ragged) {
    IO_HELPER_INIT;
    const int4 t = FCL_COUNTED_LOAD(16, vload4(b, seqs));
    IO_HELPER_LOADS_DONE();
    s.q_start = t.x;
    s.nq = t.y;
    s.k_start = t.z;
    s.nk = t.w;
  }
  return s;
}

/* Element offset of token `token`, head `head` of batch entry b in a view. */
inline size_t fcl_at(const fcl_view v, int b, int token, int head) {
  return v.offset + (size_t)b * v.batch + (size_t)token * v.seq + (size_t)head * v.head;
}

/* ---- a paged cache ---------------------------------------------------------
 * PAGED = 1: K and V are pools of pages (fcl_attention_desc.block_table),
 * their views' batch stride the stride between pages. A key tile may span
 * pages: the kernels look a page up per key row (KEY_ROW: the SIMT and
 * decode forwards), per FCL_PAGE_RUN_KEYS (16) keys (the MMA forward's
 * FETCH_KEYS, mma.cl; the decode kernel on matrix instructions' warp
 * steps) or per tile of that many keys (the CPU forward), and page_size is
 * a multiple of 16, so that such a run of keys lies in one page. TILE_ROWS
 * gives the row of key k0 of the block's (batch, KV head), from which a
 * kernel steps by the seq stride, and KEY_IN_TILE a key's row past it,
 * within the run; KEY_ROW a key's row, a key past the sequence's last
 * taken as the last (whose page the table names), so that a lookup never
 * reads past the table's row. Unpaged, they are the block's rows and the
 * key itself: the kernels' arithmetic as before paging existed. They need
 * the kernel's `qb` and `pages` in scope. */
#ifndef PAGED
#define PAGED 0
#endif
#if PAGED
/* Element offset of key k0's row in `view`: the table's entry, clamped
 * into the pool, so that a bad entry never reads outside it. */
inline size_t fcl_page_row(const fcl_params p, const fcl_view view, __global const int *pages,
                           int batch, int head, int k0 IO_LOADS) {
  IO_HELPER_INIT;
  const int entry = FCL_COUNTED_LOAD(4, pages[(size_t)batch * p.table_batch + k0 / p.page_size]);
  IO_HELPER_LOADS_DONE();
  const int page = clamp(entry, 0, p.num_pages - 1);
  return view.offset + (size_t)page * view.batch + (size_t)(k0 % p.page_size) * view.seq +
         (size_t)head * view.head;
}
#define TILE_ROWS(rows, tensor, view, k0) \
  ((tensor) + fcl_page_row(p, (view), pages, qb.batch, qb.kv_head, (k0) IO_LOADS_ARG))
#define KEY_IN_TILE(key, k0) ((key) - (k0))
#define KEY_ROW(rows, tensor, view, stride, key) \
  TILE_ROWS(rows, tensor, view, min((int)(key), qb.seq.nk - 1))
#else
#define TILE_ROWS(rows, tensor, view, k0) (rows)
#define KEY_IN_TILE(key, k0) (key)
#define KEY_ROW(rows, tensor, view, stride, key) ((rows) + (size_t)(key) * (stride))
#endif
/* Key k0's row, where a tile from k0 starts, paged or not (stride: the
 * view's rows apart, as the kernel holds it). */
#define TILE_START(rows, tensor, view, stride, k0) \
  (TILE_ROWS(rows, tensor, view, k0) + (size_t)KEY_IN_TILE(k0, k0) * (stride))

/* A causal-like mask (bounded right, unbounded left): later blocks see more
 * keys and start first. */
#if WINDOW == 2
inline int fcl_grows(const fcl_params p) { return p.window_right >= 0 && p.window_left < 0; }
#else
inline int fcl_grows(const fcl_params p) { return (void)p, WINDOW == 1; }
#endif

/* SPLIT_KV = 1 builds a forward that runs one split of the keys per
 * work-group: p.splits copies of the grid, each writing a partial O and
 * LSE (p.o_split, p.lse_split apart) that the merge kernel combines. */
#ifndef SPLIT_KV
#define SPLIT_KV 0
#endif

/* PACK_GQA = G > 1 builds a forward whose blocks hold packed rows: the
 * query rows of the G heads that share a KV head, slot r being token r / G
 * of head r % G of the group, so that each K and V tile is loaded once for
 * all G heads (decode: G rows of one token instead of one). 1: a block is
 * one head's rows. */
#ifndef PACK_GQA
#define PACK_GQA 1
#endif
#if PACK_GQA > 1 && ALIBI
#error "PACK_GQA: one ALiBi slope per block, and a packed block spans heads"
#endif
#define SLOT_TOKEN(slot) ((slot) / PACK_GQA)
#define SLOT_HEAD(slot) ((slot) % PACK_GQA)

/* ---- the query-block grid ------------------------------------------------
 * The kernels that own a block of query rows (both forwards, the
 * backward's dQ) share one flat grid, since NVIDIA caps the 2nd and 3rd
 * grid dimensions at 65535. Query blocks vary fastest, so that neighbouring
 * work-groups share K and V in cache; with a causal-like mask the last
 * blocks, which see the most keys, start first, so that a launch does not
 * end on a long tail. Ragged batches take their (sequence, block) from the
 * host's work list, heads outermost; the host orders it longest first. */
typedef struct fcl_query_block {
  int q0, rows;                // first query row (packed: slot) of the block; rows of it
  int batch, head, kv_head;
  fcl_sequence seq;
  /* Keys [k_lo, k_hi) are seen by some row of the block, [full_lo,
   * full_hi) by every row (params.h, fcl_block_keys). */
  int k_lo, k_hi, full_lo, full_hi;
  size_t lse;                  // row 0 of this (batch, head) in LSE and D
  size_t o_split;              // where this split's O is, past split 0's (p.o_split)
  float slope;                 // ALiBi, of this (batch, head)
} fcl_query_block;

inline fcl_query_block fcl_locate_query_block(const fcl_params p, __global const int *seqs,
                                              __global const int *work,
                                              __global const float *alibi,
                                              int block_q IO_LOADS) {
  IO_HELPER_INIT;
  fcl_query_block b;
#if SPLIT_KV
  /* Splits of the keys are outermost. */
  const int per_split = get_num_groups(0) / p.splits;
  const int split = get_group_id(0) / per_split, group_id = get_group_id(0) % per_split;
#else
  const int group_id = get_group_id(0);
#endif
  int qblock;
  if (p.ragged) {
    const int item = group_id % p.work_items;
    b.head = group_id / p.work_items * PACK_GQA;  // packed: a group's first head
    const int2 w = FCL_COUNTED_LOAD(8, vload2(item, work));
    b.batch = w.x;
    qblock = w.y;
  } else {
    const int n_qblocks = (p.seqlen_q * PACK_GQA + block_q - 1) / block_q;
    const int bh = group_id / n_qblocks;
    qblock = group_id - bh * n_qblocks;
    if (fcl_grows(p)) qblock = n_qblocks - 1 - qblock;
    const int heads = PACK_GQA > 1 ? p.heads_kv : p.heads_q;  // packed: a group's first head
    b.head = bh % heads * PACK_GQA;
    b.batch = bh / heads;
  }
  b.kv_head = b.head / (p.heads_q / p.heads_kv);
  b.seq = fcl_sequence_of(p, seqs, b.batch IO_LOADS_ARG);
  b.q0 = qblock * block_q;  // packed: a slot
  b.rows = clamp(b.seq.nq * PACK_GQA - b.q0, 0, block_q);
  b.k_lo = b.k_hi = b.full_lo = b.full_hi = 0;
  if (b.rows > 0) {  // the keys of the block's tokens
    const int t0 = SLOT_TOKEN(b.q0), t1 = SLOT_TOKEN(b.q0 + b.rows - 1);
    fcl_block_keys(b.seq.nq, b.seq.nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), t0, t1 - t0 + 1, &b.k_lo,
                   &b.k_hi, &b.full_lo, &b.full_hi);
  }
  b.lse = (size_t)b.batch * p.lse_batch + (size_t)b.head * p.lse_head + b.seq.q_start;
#if SPLIT_KV
  {  // the keys of this split only: none when they miss the block's
    const int split_lo = split * p.split_keys;
    const int split_hi = split_lo + min(p.split_keys, INT_MAX - split_lo);
    b.k_lo = max(b.k_lo, split_lo);
    b.k_hi = min(b.k_hi, split_hi);
    if (b.k_hi <= b.k_lo) b.k_lo = b.k_hi = 0;  // none: an empty range, in order
  }
  b.o_split = (size_t)split * p.o_split;
  b.lse += (size_t)split * p.lse_split;
#else
  b.o_split = 0;
#endif
#if ALIBI
  b.slope = LOAD_F32(alibi, b.batch * p.alibi_batch + b.head);
#else
  (void)alibi;
  b.slope = 0.0f;
#endif
  IO_HELPER_LOADS_DONE();
  return b;
}

/* A forward's start: its I/O counters (FCL_IO_INIT), its block qb of
 * block_q query rows, and that block's rows: Q's and O's (this split's)
 * from the sequence's first query, K's and V's (its KV head's) from its
 * first key. A declaration macro, with the kernel's arguments in scope. */
#define FCL_FORWARD_BLOCK(qb, block_q)                                          \
  FCL_IO_INIT;                                                                  \
  const fcl_query_block qb =                                                    \
      fcl_locate_query_block(p, seqs, work, alibi, (block_q) IO_LOADS_ARG);     \
  __global const store_t *q_rows = q + fcl_at(p.q, (qb).batch, (qb).seq.q_start, (qb).head); \
  __global store_t *o_rows =                                                    \
      o + fcl_at(p.o, (qb).batch, (qb).seq.q_start, (qb).head) + (qb).o_split;  \
  __global const kv_t *k_rows = k + fcl_at(p.k, (qb).batch, (qb).seq.k_start, (qb).kv_head); \
  __global const kv_t *v_rows = v + fcl_at(p.v, (qb).batch, (qb).seq.k_start, (qb).kv_head)

/* Slot `slot` of a forward's block in sequence `seq`: its query token
 * (packed, PACK_GQA: the slot's) in *row and the keys it sees, [*key_lo,
 * *key_hi); @return whether it is a row of the sequence. */
inline int fcl_query_row(const fcl_params p, const fcl_sequence seq, int slot, int *row,
                         int *key_lo, int *key_hi) {
  *row = SLOT_TOKEN(slot);
  fcl_row_keys(seq.nq, seq.nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), *row, key_lo, key_hi);
  return slot < seq.nq * PACK_GQA;
}

/* ---- the decode kernels' key groups ----------------------------------------
 * Both decode forwards (flash_fwd_decode.cl, flash_fwd_decode_mma.cl) give
 * the keys of a block to `groups` groups of work-items, each with its own
 * running max m, sum l and accumulator per row, left in `state` as
 * [group][row][m, l, accumulator of HEAD_DIM_MAX columns]. Merged exactly,
 * as fcl_merge_states merges splits: O = sum_g w_g acc_g / sum_g w_g l_g,
 * w_g = 2^((m_g - max_g m_g) x); then O and LSE of the block's rows are
 * stored, four columns a work-item, by the work-group. A statement macro,
 * expanded in those kernels only: they store four columns of O with
 * DECODE_STORE4(dst, x), counted (the MMA one through the PTX conversion
 * its instructions use), and need qb, tid, o_rows, lse and sinks in scope. */
#define FCL_DECODE_STORE(state, groups)                                         \
  for (int i_ = tid; i_ < BLOCK_Q * (HEAD_DIM_MAX / 4); i_ += WG_SIZE) {        \
    const int r_ = i_ / (HEAD_DIM_MAX / 4), c_ = (i_ - r_ * (HEAD_DIM_MAX / 4)) * 4; \
    const int slot_ = qb.q0 + r_;                                               \
    if (slot_ >= qb.seq.nq * PACK_GQA) continue;                                \
    __local const float *row_ = (state) + r_ * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX);  \
    const int group_stride_ = BLOCK_Q * FCL_DECODE_STATE_FLOATS(HEAD_DIM_MAX);  \
    float top_ = FCL_MAX_INIT;                                                  \
    for (int g_ = 0; g_ < (groups); ++g_) top_ = fmax(top_, row_[g_ * group_stride_]); \
    float sum_ = 0.0f;                                                          \
    float4 x_ = (float4)(0.0f);                                                 \
    for (int g_ = 0; g_ < (groups); ++g_) {                                     \
      __local const float *st_ = row_ + g_ * group_stride_;                     \
      const float w_ = EXP2((st_[0] - top_) * p.exp_factor);                    \
      sum_ += w_ * st_[1];                                                      \
      x_ = fma((float4)(w_), vload4(0, st_ + 2 + c_), x_);                      \
    }                                                                           \
    const float sink_ = fcl_row_sink(p, sinks, qb.head + SLOT_HEAD(slot_), c_ == 0); \
    const float inv_ = FCL_ROW_OUT(p, top_, sum_, sink_);              \
    const size_t at_ =                                                          \
        (size_t)SLOT_TOKEN(slot_) * p.o.seq + (size_t)SLOT_HEAD(slot_) * p.o.head; \
    if (c_ < p.head_dim_v) DECODE_STORE4(o_rows + at_ + c_, x_ * inv_);          \
    if (FCL_STORES_LSE(lse) && c_ == 0)                                         \
      STORE_F32(lse, qb.lse + (size_t)SLOT_HEAD(slot_) * p.lse_head + SLOT_TOKEN(slot_), \
                fcl_row_lse(top_, p.lse_factor, sum_, sink_));                  \
  }

/* ---- merging attention states ------------------------------------------
 * Parts p over disjoint keys, with natural LSE_p and O_p, merge to
 * O = sum_p w_p O_p / sum_p w_p and LSE = m + log(sum_p w_p), w_p =
 * exp(LSE_p - m) for the largest LSE m (merge.cl, and the merge in a split
 * launch below). A part of LSE -inf weighs nothing, whatever its O (a
 * split that saw no key); a NaN or +inf LSE makes the row NaN; no weight
 * at all gives zeros and -inf. */
inline int fcl_merge_bad(float lse_part) { return isnan(lse_part) || lse_part == INFINITY; }

inline void fcl_merge_add(float lse_part, float4 o_part, float m, float *sum, float4 *acc) {
  if (lse_part != -INFINITY) {
    const float w = exp(lse_part - m);
    *sum += w;
    *acc += w * o_part;
  }
}

inline float4 fcl_merged_o(float4 acc, float sum, int bad) {
  return bad ? (float4)(NAN) : sum > 0.0f ? acc / sum : (float4)(0.0f);
}

inline float fcl_merged_lse(float m, float sum, int bad) {
  return bad ? NAN : sum > 0.0f ? m + log(sum) : -INFINITY;
}

/* A head's attention sink (fcl_attention_desc.sinks) joins a row's merge
 * once, after its parts: one more part of LSE s and O zero, the running
 * max m raised to it (-inf, no sink, changes nothing). */
inline void fcl_merge_sink(float s, float *m, float *sum, float4 *acc, int *bad) {
  *bad |= fcl_merge_bad(s);
  if (s == -INFINITY || isnan(s)) return;
  if (s > *m) {
    const float alpha = exp(*m - s);  // exp(-inf) = 0 for a row of empty parts
    *sum *= alpha;
    *acc *= alpha;
    *m = s;
  }
  *sum += exp(s - *m);
}

/* The sink a merge adds to a row of head `head` (-inf: none); the row's
 * lead lane counts its 4 bytes, as it does the row's LSE store. */
#define fcl_merge_sink_of(sinks, head, lead) \
  ((sinks) != 0 ? ((lead) ? LOAD_F32(sinks, head) : (sinks)[head]) : -INFINITY)

/* ---- a split forward's merge in its own launch --------------------------
 * MERGE_LAST_SPLIT = 1 (SPLIT_KV decode kernels; fcl_plan.merge): each
 * work-group, its partial O and LSE stored, fences them device-wide and
 * counts itself done in arrivals[block]; the one whose count completes the
 * block (whichever split it ran) merges the block's splits exactly, as
 * fcl_merge_states does, into o_merged and lse_merged, and sets the count
 * back to 0. Nothing waits for another work-group, so nothing depends on
 * which run at once. It adds the splits in their order: the same bits
 * whichever finishes last. Each partial LSE and O element is loaded once,
 * as by the merge kernel, so the I/O model is the same (the count is not
 * counted). docs/design.md, "The merge", says why the fences suffice. */
#ifndef MERGE_LAST_SPLIT
#define MERGE_LAST_SPLIT 0
#endif
#if MERGE_LAST_SPLIT && !SPLIT_KV
#error "MERGE_LAST_SPLIT merges the splits of a SPLIT_KV forward"
#endif
#if MERGE_LAST_SPLIT
#define MERGE_LOADS 16  // parts whose O a work-item loads before adding them (measured)

/* Orders this work-item's global loads and stores against other compute
 * units': NVIDIA's membar.gl, by name (fence.sc.gpu in the PTX memory
 * model); elsewhere OpenCL's global fence. */
inline void fcl_fence_device(void) {
#if FCL_NVIDIA_PTX
  asm volatile("membar.gl;" ::: "memory");
#else
  mem_fence(CLK_GLOBAL_MEM_FENCE);
#endif
}

/* The merge of block qb's p.splits partial states, by the work-group
 * (wg_size items, all of them calling; rows and head_dim_max are the
 * kernel's BLOCK_Q and HEAD_DIM_MAX): its LSEs staged in `stage` (rows x
 * p.splits floats of local memory the kernel is done with; the planner
 * keeps splits within it), then four columns of a row a work-item. */
inline void fcl_merge_block_splits(const fcl_params p, const fcl_query_block qb, int tid,
                                   int wg_size, int rows, int head_dim_max,
                                   __global const store_t *o_parts,
                                   __global const float *lse_parts,
                                   __global store_t *o_merged, __global float *lse_merged,
                                   __global const float *sinks,
                                   __local float *stage IO_LOADS IO_STORES) {
  IO_HELPER_INIT;
  const int splits = p.splits, slots = qb.seq.nq * PACK_GQA, quads = head_dim_max / 4;
  const size_t lse0 = (size_t)qb.batch * p.lse_batch + (size_t)qb.head * p.lse_head + qb.seq.q_start;
  __global const store_t *part_rows = o_parts + fcl_at(p.o, qb.batch, qb.seq.q_start, qb.head);
  __global store_t *o_rows = o_merged + fcl_at(p.o_merged, qb.batch, qb.seq.q_start, qb.head);
  /* A work-item's first batch of O parts is loaded with the LSEs, so that
   * the two wait on one round trip (a split decode has 32-64 parts). */
  float4 x[MERGE_LOADS];
  {
    const int r = tid / quads, c = (tid - r * quads) * 4, slot = qb.q0 + r;
    if (r < rows && slot < slots && c < p.head_dim_v) {
      const size_t at = (size_t)SLOT_TOKEN(slot) * p.o.seq + (size_t)SLOT_HEAD(slot) * p.o.head + c;
UNROLL
      for (int j = 0; j < MERGE_LOADS; ++j)
        x[j] = j < splits ? LOAD4(part_rows, at + (size_t)j * p.o_split) : (float4)(0.0f);
    }
  }
  for (int i = tid; i < rows * splits; i += wg_size) {  // [row][split]
    const int r = i / splits, s = i - r * splits, slot = qb.q0 + r;
    stage[i] = slot < slots ? LOAD_F32(lse_parts, lse0 + (size_t)s * p.lse_split +
                                                      (size_t)SLOT_HEAD(slot) * p.lse_head +
                                                      SLOT_TOKEN(slot))
                            : -INFINITY;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = tid; i < rows * quads; i += wg_size) {
    const int r = i / quads, c = (i - r * quads) * 4, slot = qb.q0 + r;
    if (slot >= slots || c >= p.head_dim_v) continue;
    __local const float *row_lse = stage + r * splits;
    float m = -INFINITY, sum = 0.0f;
    int bad = 0;  // a NaN or +inf LSE
    for (int s = 0; s < splits; ++s) {
      bad |= fcl_merge_bad(row_lse[s]);
      m = fmax(m, row_lse[s]);
    }
    const size_t part_at = (size_t)SLOT_TOKEN(slot) * p.o.seq + (size_t)SLOT_HEAD(slot) * p.o.head + c;
    float4 acc = (float4)(0.0f);
    for (int s0 = 0; s0 < splits; s0 += MERGE_LOADS) {
      if (i != tid || s0 != 0) {  // (the first batch is in)
UNROLL
        for (int j = 0; j < MERGE_LOADS; ++j)
          x[j] = s0 + j < splits ? LOAD4(part_rows, part_at + (size_t)(s0 + j) * p.o_split)
                                 : (float4)(0.0f);
      }
UNROLL
      for (int j = 0; j < MERGE_LOADS; ++j)
        fcl_merge_add(s0 + j < splits ? row_lse[s0 + j] : -INFINITY, x[j], m, &sum, &acc);
    }
    fcl_merge_sink(fcl_merge_sink_of(sinks, qb.head + SLOT_HEAD(slot), c == 0), &m, &sum, &acc,
                   &bad);
    STORE4(o_rows, (size_t)SLOT_TOKEN(slot) * p.o_merged.seq +
                       (size_t)SLOT_HEAD(slot) * p.o_merged.head + c,
           fcl_merged_o(acc, sum, bad));
    if (FCL_STORES_LSE(lse_merged) && c == 0)
      STORE_F32(lse_merged, lse0 + (size_t)SLOT_HEAD(slot) * p.lse_head + SLOT_TOKEN(slot),
                fcl_merged_lse(m, sum, bad));
  }
  IO_HELPER_LOADS_DONE();
  IO_HELPER_STORES_DONE();
}

/* The arrival, and the merge by the block's last split: a statement macro
 * at kernel scope after the partial state's stores (FCL_DECODE_STORE),
 * with qb, tid, o, lse, o_merged, lse_merged and arrivals in scope. The
 * fences before the count and after it are the release and acquire of
 * the PTX memory model's fence-and-atomic patterns; thread 0's, either
 * side of the barriers, carry the work-group's stores and loads. */
#define FCL_MERGE_LAST_SPLIT(stage)                                              \
  fcl_fence_device();                                                           \
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE); /* stage read: free */   \
  if (tid == 0) {                                                               \
    const int block_ = get_group_id(0) % (get_num_groups(0) / p.splits);       \
    fcl_fence_device();                                                         \
    const int last_ = atomic_inc(arrivals + block_) == p.splits - 1;           \
    if (last_) atomic_xchg(arrivals + block_, 0);                               \
    fcl_fence_device();                                                         \
    (stage)[0] = last_ ? 1.0f : 0.0f; /* the verdict, in local memory it has */ \
  }                                                                             \
  barrier(CLK_LOCAL_MEM_FENCE);                                                  \
  const int merge_last_ = (stage)[0] != 0.0f;                                   \
  barrier(CLK_LOCAL_MEM_FENCE); /* read by all before the merge stages LSEs */  \
  if (merge_last_) {                                                            \
    fcl_fence_device();                                                         \
    fcl_merge_block_splits(p, qb, tid, WG_SIZE, BLOCK_Q, HEAD_DIM_MAX, o, lse, o_merged, \
                           lse_merged, sinks, (stage) IO_LOADS_ARG IO_STORES_ARG); \
  }
#else
#define FCL_MERGE_LAST_SPLIT(stage)
#endif

/* ---- the key-block grid ----------------------------------------------------
 * The backward's dK/dV kernels own a block of keys of one (batch, kv head)
 * and stream the query tiles of every query head of its group. Key blocks
 * vary fastest (ragged: the host's work list, kv heads outermost). */
typedef struct fcl_key_block {
  int k0, keys;                // first key of the block; keys of it in the sequence
  int batch, kv_head, group;   // group: query heads per kv head
  fcl_sequence seq;
  /* Query rows [q_lo, q_hi) see some key of the block, [full_lo, full_hi)
   * all of them (params.h, fcl_block_queries). */
  int q_lo, q_hi, full_lo, full_hi;
  /* The query tiles of block_k rows it streams, [first_tile, end_tile), and
   * the heads of its group it reads them for: none where it sees no query
   * row, so that such a block reads nothing of them, slopes included (as
   * host/model/iomodel.c counts). */
  int first_tile, end_tile, heads;
} fcl_key_block;

/* Head `member` of a key block's group: its index, and where its rows of Q
 * and dO (elements) and of LSE and D (floats) start. */
typedef struct fcl_group_head {
  int head;
  size_t q, dout, stats;
} fcl_group_head;

inline fcl_key_block fcl_locate_key_block(const fcl_params p, __global const int *seqs,
                                          __global const int *work, int block_k IO_LOADS) {
  IO_HELPER_INIT;
  fcl_key_block b;
  const int group_id = get_group_id(0);
  int kblock;
  if (p.ragged) {
    const int item = group_id % p.work_items;
    b.kv_head = group_id / p.work_items;
    const int2 w = FCL_COUNTED_LOAD(8, vload2(item, work));
    b.batch = w.x;
    kblock = w.y;
  } else {
    const int n_kblocks = (p.seqlen_k + block_k - 1) / block_k;
    const int bh = group_id / n_kblocks;
    kblock = group_id - bh * n_kblocks;
    b.kv_head = bh % p.heads_kv;
    b.batch = bh / p.heads_kv;
  }
  b.group = p.heads_q / p.heads_kv;
  b.seq = fcl_sequence_of(p, seqs, b.batch IO_LOADS_ARG);
  IO_HELPER_LOADS_DONE();
  b.k0 = kblock * block_k;
  b.keys = clamp(b.seq.nk - b.k0, 0, block_k);
  b.q_lo = b.q_hi = b.full_lo = b.full_hi = 0;
  if (b.keys > 0)
    fcl_block_queries(b.seq.nq, b.seq.nk, WINDOW_LEFT(p), WINDOW_RIGHT(p), b.k0, b.keys,
                      &b.q_lo, &b.q_hi, &b.full_lo, &b.full_hi);
  b.first_tile = b.q_lo / block_k;
  b.end_tile = (b.q_hi + block_k - 1) / block_k;
  b.heads = b.first_tile < b.end_tile ? b.group : 0;
  return b;
}

inline fcl_group_head fcl_group_head_of(const fcl_params p, const fcl_key_block kb, int member) {
  fcl_group_head h;
  h.head = kb.kv_head * kb.group + member;
  h.q = fcl_at(p.q, kb.batch, kb.seq.q_start, h.head);
  h.dout = fcl_at(p.dout, kb.batch, kb.seq.q_start, h.head);
  h.stats = (size_t)kb.batch * p.lse_batch + (size_t)h.head * p.lse_head + kb.seq.q_start;
  return h;
}

/* The ALiBi slope of (batch, head), 0 without ALiBi. */
#if ALIBI
#define ALIBI_SLOPE(batch, head) LOAD_F32(alibi, (batch) * p.alibi_batch + (head))
#else
#define ALIBI_SLOPE(batch, head) 0.0f
#endif

/* LSE, in log2 units (LSE log2(e), for fcl_prob), and D (= rowsum(dO * O))
 * of query rows [q0, q0 + n) of a sequence of nq queries, into local arrays
 * of n by the work-group (tid, WG_SIZE), from row 0 of a (batch, head) at
 * `stat`; rows from nq on get LSE -inf, which the backward kernels read as
 * "P = 0", and D 0. row_extra(i, row, live) runs for each row beside them
 * (NO_ROW_EXTRA: nothing; the MMA backward stores the row's visible keys
 * there, flash_bwd_mma.cl). */
#define NO_ROW_EXTRA(i_, row_, live_) ((void)0)
#define LOAD_ROW_STATS(lse2_dst, d_dst, lse, dsum, stat, q0, n, nq, row_extra)  \
  for (int i_ = tid; i_ < (n); i_ += WG_SIZE) {                                 \
    const int row_ = (q0) + i_, live_ = row_ < (nq);                            \
    (lse2_dst)[i_] = live_ ? LOAD_F32(lse, (stat) + row_) * M_LOG2E_F : -INFINITY; \
    (d_dst)[i_] = live_ ? LOAD_F32(dsum, (stat) + row_) : 0.0f;                 \
    row_extra(i_, row_, live_);                                                 \
  }
