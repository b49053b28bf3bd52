/*
 * flash_fwd.cl — FlashAttention-2 forward.
 *
 * A work-group owns BLOCK_Q query rows of one (batch, head). K and V stream
 * through local memory in tiles of BLOCK_K keys. Each row keeps a running
 * max m, a running sum l and an unnormalised output accumulator in private
 * memory, rescaled by e^(m_old - m_new) when the max grows, and divided by l
 * once at the end. S and P never leave the chip: the kernel reads Q once,
 * K and V once per query block, and writes O and LSE once.
 *
 * Work-item layout: THREADS_PER_ROW adjacent work-items share a query row,
 * each holding a D_SLICE-wide slice of q and of the accumulator, and each
 * owns ROWS_PER_THREAD rows ROW_GROUPS apart. All rows of a warp read the
 * same K/V tile address at once (a broadcast), so one 16-byte local load
 * feeds 4 * ROWS_PER_THREAD multiply-adds. The tiles hold floats, or with
 * TILE_STORAGE the storage type, converted at each read (common.cl).
 *
 * Accuracy: scores stay unscaled dot products; the running max is kept in
 * those units and the scale (times log2 e, for exp2) multiplies only the
 * difference s - m. That difference is exact when the two are close, so
 * the one rounding at the logits' full magnitude that the naive algorithm
 * pays (fl(scale * dot), 5e-4 at logits of 1e4) never happens here.
 * Folding the scale into q, as CUDA FlashAttention does, would instead add
 * a rounding per element of q. With a softcap or ALiBi the scores are the
 * transformed logits instead (common.cl, fcl_score).
 *
 * The mask is params.h's: the block visits the key tiles some row sees
 * (fcl_block_keys) and tests each pair only in the tiles that not every
 * row sees whole.
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // head_dim bucket compiled for; head_dim <= it
#endif
#ifndef BLOCK_K
#define BLOCK_K 32          // keys per local-memory tile (Bc)
#endif
#ifndef WG_SIZE
#define WG_SIZE 128         // work-items per work-group
#endif
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 1   // work-items splitting one row's head_dim
#endif
#ifndef ROWS_PER_THREAD
#define ROWS_PER_THREAD 1   // query rows per work-item
#endif

/* The sizes derived from the tunables (traits.h). */
#define ROW_GROUPS (WG_SIZE / THREADS_PER_ROW)
#define BLOCK_Q FCL_SIMT_BLOCK(WG_SIZE, THREADS_PER_ROW, ROWS_PER_THREAD) // Br
#define D_SLICE FCL_SIMT_SLICE(HEAD_DIM_MAX, THREADS_PER_ROW)
#define D_SLICE4 (D_SLICE / 4)
#define SLICE_STRIDE FCL_SIMT_SLICE_STRIDE(HEAD_DIM_MAX, THREADS_PER_ROW)
#define TILE_LD FCL_SIMT_TILE_LD(HEAD_DIM_MAX, THREADS_PER_ROW) // elements per key in a tile
#define TILE_LD4 (TILE_LD / 4)
/* The same for V and the accumulator, HEAD_DIM_V_MAX wide (common.cl). */
#define DV_SLICE FCL_SIMT_SLICE(HEAD_DIM_V_MAX, THREADS_PER_ROW)
#define DV_SLICE4 (DV_SLICE / 4)
#define SLICE_STRIDE_V FCL_SIMT_SLICE_STRIDE(HEAD_DIM_V_MAX, THREADS_PER_ROW)
#define TILE_LD_V4 (FCL_SIMT_TILE_LD(HEAD_DIM_V_MAX, THREADS_PER_ROW) / 4)
/* Accumulator chains per dot product: 8 (two float4s) where a slice is
 * long enough to pay for the longer final sum, else 4. */
#ifndef DOT_LANES
#define DOT_LANES (D_SLICE >= 64 ? 8 : 4)
#endif
#define DOT_VECS (DOT_LANES / 4)

#if !FCL_SIMT_LANES_VALID(WG_SIZE, THREADS_PER_ROW)
#error "THREADS_PER_ROW must be 1, 2, 4 or 8 and divide WG_SIZE"
#endif
#if !FCL_SIMT_FWD_HEAD_VALID(HEAD_DIM_MAX, THREADS_PER_ROW) || \
    !FCL_SIMT_FWD_HEAD_VALID(HEAD_DIM_V_MAX, THREADS_PER_ROW)
#error "HEAD_DIM_MAX must split into float4 slices"
#endif
#if DOT_LANES != 4 && DOT_LANES != 8
#error "DOT_LANES must be 4 or 8"
#endif

/* How the THREADS_PER_ROW partial dot products of a row are summed:
 * sub-group shuffles where the device has them, else through local memory. */
#define ROW_SUM_IN_LOCAL FCL_SUMS_IN_LOCAL(WG_SIZE, THREADS_PER_ROW)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) FCL_LANES
void flash_fwd(FCL_ATTENTION_PARAMS) {
  __local tile4_t k_tile[BLOCK_K * TILE_LD4];  // [key][slice][D_SLICE + skew]
  __local tile4_t v_tile[BLOCK_K * TILE_LD_V4];
#if ROW_SUM_IN_LOCAL
  __local float s_part[BLOCK_K * WG_SIZE];     // [key][work-item]
#endif

  const int tid = get_local_id(0);
  const int slice = tid % THREADS_PER_ROW;
  const int row_group = tid / THREADS_PER_ROW;
  FCL_FORWARD_BLOCK(qb, BLOCK_Q);
  const int q0 = qb.q0, nq = qb.seq.nq;
  const int head_dim = p.head_dim, head_dim_v = FCL_HEAD_DIM_V(p), vec = p.vec4;
  const size_t q_stride = p.q.seq, o_stride = p.o.seq;
  const size_t k_stride = p.k.seq, v_stride = p.v.seq;

  /* Padding columns and keys past seqlen_k must read as 0, never as stale
   * local memory (0 * NaN is NaN). */
  for (int i = tid; i < BLOCK_K * TILE_LD4; i += WG_SIZE) k_tile[i] = TILE_ZERO;
  for (int i = tid; i < BLOCK_K * TILE_LD_V4; i += WG_SIZE) v_tile[i] = TILE_ZERO;

  /* row: a query token; packed (PACK_GQA), the token of a slot, whose
   * head is `hoff` past the block's. */
  int row[ROWS_PER_THREAD], hoff[ROWS_PER_THREAD], key_lo[ROWS_PER_THREAD], key_hi[ROWS_PER_THREAD];
  const int slots = nq * PACK_GQA;
  float qr[ROWS_PER_THREAD][D_SLICE];
  float acc[ROWS_PER_THREAD][DV_SLICE];
  float m[ROWS_PER_THREAD], l[ROWS_PER_THREAD];
  const int col0 = slice * D_SLICE, col0_v = slice * DV_SLICE;
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    const int slot = q0 + row_group + r * ROW_GROUPS;
    hoff[r] = SLOT_HEAD(slot);
    m[r] = FCL_MAX_INIT;
    l[r] = 0.0f;
    const int live = fcl_query_row(p, qb.seq, slot, &row[r], &key_lo[r], &key_hi[r]);
    __global const store_t *src = q_rows + (size_t)row[r] * q_stride + (size_t)hoff[r] * p.q.head;
UNROLL
    for (int c = 0; c < D_SLICE; c += 4) {
      const int col = col0 + c;
      float4 x = (float4)(0.0f);
      if (live && vec && col < head_dim) {
        x = LOAD4(src, col);
      } else if (live) {
        if (col + 0 < head_dim) x.x = LOAD1(src, col + 0);
        if (col + 1 < head_dim) x.y = LOAD1(src, col + 1);
        if (col + 2 < head_dim) x.z = LOAD1(src, col + 2);
        if (col + 3 < head_dim) x.w = LOAD1(src, col + 3);
      }
      qr[r][c] = x.x;
      qr[r][c + 1] = x.y;
      qr[r][c + 2] = x.z;
      qr[r][c + 3] = x.w;
    }
UNROLL
    for (int c = 0; c < DV_SLICE; ++c) acc[r][c] = 0.0f;
  }

  const int diag = qb.seq.nk - nq;
  const int first_tile = qb.k_lo / BLOCK_K, end_tile = (qb.k_hi + BLOCK_K - 1) / BLOCK_K;
  const int slice_base4 = slice * (SLICE_STRIDE / 4), slice_base_v4 = slice * (SLICE_STRIDE_V / 4);
  barrier(CLK_LOCAL_MEM_FENCE);

  for (int tile = first_tile; tile < end_tile; ++tile) {
    const int k0 = tile * BLOCK_K;
    const int keys = min(BLOCK_K, qb.seq.nk - k0);

    /* ---- K and V tiles into local memory, coalesced over head_dim ----
     * (paged, each row's page looked up: a tile may span pages, KEY_ROW;
     * over the wider of K's and V's rows, each column within its own) */
    const int quads = (max(head_dim, head_dim_v) + 3) / 4;
    for (int i = tid; i < BLOCK_K * quads; i += WG_SIZE) {
      const int j = i / quads;
      const int c = (i - j * quads) * 4;
      const int at = j * TILE_LD4 + (c / D_SLICE) * (SLICE_STRIDE / 4) + (c % D_SLICE) / 4;
      const int at_v =
          j * TILE_LD_V4 + (c / DV_SLICE) * (SLICE_STRIDE_V / 4) + (c % DV_SLICE) / 4;
      const int in_k = c < head_dim, in_v = c < head_dim_v;
      tile4_t kx = TILE_ZERO, vx = TILE_ZERO;
      if (j < keys) {
        /* the K/V hooks take a row and a column (common.cl) */
        __global const kv_t *kr = KEY_ROW(k_rows, k, p.k, k_stride, k0 + j);
        __global const kv_t *vr = KEY_ROW(v_rows, v, p.v, v_stride, k0 + j);
        if (vec) {
          if (in_k) kx = KV_TILE4(kr, c);
          if (in_v) vx = KV_TILE4(vr, c);
        } else {
          if (in_k) {
            kx.x = KV_TILE1(kr, c);
            if (c + 1 < head_dim) kx.y = KV_TILE1(kr, c + 1);
            if (c + 2 < head_dim) kx.z = KV_TILE1(kr, c + 2);
            if (c + 3 < head_dim) kx.w = KV_TILE1(kr, c + 3);
          }
          if (in_v) {
            vx.x = KV_TILE1(vr, c);
            if (c + 1 < head_dim_v) vx.y = KV_TILE1(vr, c + 1);
            if (c + 2 < head_dim_v) vx.z = KV_TILE1(vr, c + 2);
            if (c + 3 < head_dim_v) vx.w = KV_TILE1(vr, c + 3);
          }
        }
      }
      if (in_k) k_tile[at] = kx;
      if (in_v) v_tile[at_v] = vx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* ---- S = q . k for this tile (this work-item's slice) ----
     * DOT_LANES accumulator chains per score (float4s used in turn),
     * summed as a tree at the end: the rounding error of a dot product
     * grows with its chain length, and at logits of 1e4 it decides the
     * result. */
    float s[ROWS_PER_THREAD][BLOCK_K];
UNROLL
    for (int j = 0; j < BLOCK_K; ++j) {
      float4 dot[ROWS_PER_THREAD][DOT_VECS];
UNROLL
      for (int r = 0; r < ROWS_PER_THREAD; ++r)
UNROLL
        for (int v = 0; v < DOT_VECS; ++v) dot[r][v] = (float4)(0.0f);
UNROLL
      for (int c4 = 0; c4 < D_SLICE4; ++c4) {
        const float4 kk = TILE_READ4(k_tile, j * TILE_LD4 + slice_base4 + c4);
UNROLL
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
          const float4 qq = (float4)(qr[r][4 * c4], qr[r][4 * c4 + 1], qr[r][4 * c4 + 2],
                                     qr[r][4 * c4 + 3]);
          dot[r][c4 % DOT_VECS] = fma(qq, kk, dot[r][c4 % DOT_VECS]);
        }
      }
UNROLL
      for (int r = 0; r < ROWS_PER_THREAD; ++r) {
#if DOT_VECS == 2
        const float4 t = dot[r][0] + dot[r][1];
#else
        const float4 t = dot[r][0];
#endif
        s[r][j] = (t.x + t.y) + (t.z + t.w);
      }
    }

    /* ---- sum the slices' partial dot products ---- */
#if THREADS_PER_ROW > 1
#if ROW_SUM_IN_LOCAL
UNROLL
    for (int r = 0; r < ROWS_PER_THREAD; ++r) {
UNROLL
      for (int j = 0; j < BLOCK_K; ++j) s_part[j * WG_SIZE + tid] = s[r][j];
      barrier(CLK_LOCAL_MEM_FENCE);
UNROLL
      for (int j = 0; j < BLOCK_K; ++j) {
        float x = 0.0f;
UNROLL
        for (int t = 0; t < THREADS_PER_ROW; ++t)
          x += s_part[j * WG_SIZE + row_group * THREADS_PER_ROW + t];
        s[r][j] = x;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
UNROLL
    for (int r = 0; r < ROWS_PER_THREAD; ++r)
UNROLL
      for (int j = 0; j < BLOCK_K; ++j)
UNROLL
        for (int mask = 1; mask < THREADS_PER_ROW; mask *= 2)
          s[r][j] += fcl_shfl_xor(s[r][j], mask);
#endif
#endif

    /* ---- online softmax: transform, mask, new max, rescale, p = 2^(x (s - m)) ---- */
    const int masked = k0 < qb.full_lo || k0 + BLOCK_K > qb.full_hi;  // uniform over the group
UNROLL
    for (int r = 0; r < ROWS_PER_THREAD; ++r) {
#if SCORES_TRANSFORMED
UNROLL
      for (int j = 0; j < BLOCK_K; ++j)
        s[r][j] = fcl_score(s[r][j], p, qb.slope, row[r] + diag - (k0 + j));
#endif
      if (masked) {
UNROLL
        for (int j = 0; j < BLOCK_K; ++j) {
          const int key = k0 + j;
          s[r][j] = ROW_SEES(key, row[r], nq, qb.seq.nk, key_lo[r], key_hi[r]) ? s[r][j]
                                                                             : -INFINITY;
        }
      }
      float m_new = m[r];
UNROLL
      for (int j = 0; j < BLOCK_K; ++j) m_new = fmax(m_new, s[r][j]);
      const float alpha = EXP2_FROM_MAX(m[r], m_new, p.exp_factor);
      m[r] = m_new;
      float sum = 0.0f;
UNROLL
      for (int j = 0; j < BLOCK_K; ++j) {
        s[r][j] = EXP2_FROM_MAX(s[r][j], m_new, p.exp_factor);  // masked: exp2(-inf) = 0
        sum += s[r][j];
      }
      l[r] = l[r] * alpha + sum;
UNROLL
      for (int c = 0; c < DV_SLICE; ++c) acc[r][c] *= alpha;
    }

    /* ---- acc += p . v ---- */
UNROLL
    for (int j = 0; j < BLOCK_K; ++j) {
UNROLL
      for (int c4 = 0; c4 < DV_SLICE4; ++c4) {
        const float4 vv = TILE_READ4(v_tile, j * TILE_LD_V4 + slice_base_v4 + c4);
UNROLL
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
          const float pr = s[r][j];
          acc[r][4 * c4 + 0] = fma(pr, vv.x, acc[r][4 * c4 + 0]);
          acc[r][4 * c4 + 1] = fma(pr, vv.y, acc[r][4 * c4 + 1]);
          acc[r][4 * c4 + 2] = fma(pr, vv.z, acc[r][4 * c4 + 2]);
          acc[r][4 * c4 + 3] = fma(pr, vv.w, acc[r][4 * c4 + 3]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites K and V
  }

  /* ---- O = acc / l, LSE = ln(sum exp) ---- */
UNROLL
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    if (row[r] * PACK_GQA + hoff[r] >= slots) continue;
    const float sink = fcl_row_sink(p, sinks, qb.head + hoff[r], slice == 0);
    const float inv = FCL_ROW_OUT(p, m[r], l[r], sink);
    __global store_t *dst = o_rows + (size_t)row[r] * o_stride + (size_t)hoff[r] * p.o.head;
UNROLL
    for (int c = 0; c < DV_SLICE; c += 4) {
      const int col = col0_v + c;
      const float4 x = (float4)(acc[r][c], acc[r][c + 1], acc[r][c + 2], acc[r][c + 3]) * inv;
      if (vec && col < head_dim_v) {
        STORE4(dst, col, x);
      } else {
        if (col + 0 < head_dim_v) STORE1(dst, col + 0, x.x);
        if (col + 1 < head_dim_v) STORE1(dst, col + 1, x.y);
        if (col + 2 < head_dim_v) STORE1(dst, col + 2, x.z);
        if (col + 3 < head_dim_v) STORE1(dst, col + 3, x.w);
      }
    }
    if (FCL_STORES_LSE(lse) && slice == 0)
      STORE_F32(lse, qb.lse + (size_t)hoff[r] * p.lse_head + row[r], fcl_row_lse(m[r], p.lse_factor, l[r], sink));
  }
  FCL_IO_COMMIT();
}
