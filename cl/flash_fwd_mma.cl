/*
 * flash_fwd_mma.cl — FlashAttention-2 forward on warp-level matrix units.
 *
 * The algorithm is flash_fwd.cl's (running max, running sum, unnormalised
 * accumulator, one division at the end, unscaled scores with the scale
 * applied to s - m); the arithmetic is different. Each warp of 32
 * work-items owns 16 query rows and computes its S = Q K^T and O += P V
 * tiles with the m16n8 matrix multiply-accumulate instructions of NVIDIA's
 * tensor cores (PTX mma.sync, sm_80 and later), which the SIMT kernel's
 * fused multiply-adds cannot approach: on an H200 they are where PyTorch's
 * attention kernels get their speed, in fp32 as well (CUTLASS's 3xTF32).
 *
 * Storage types: f32 multiplies in 3xTF32 at f32 accuracy; f16 and bf16
 * go to the instructions as stored, with P rounded to the storage type
 * (round to nearest even) for P V, which the naive algorithm in that type
 * does as well; accumulation is f32 (cl/mma.cl, with the instructions,
 * their fragments and their emulation).
 *
 * S's fragments: s[n][i] of a lane (4 g + t) is row g + 8 (i >> 1) of the
 * warp's 16, key 8 n + 2 t + (i & 1) of the tile; a row's 4 lanes form a
 * quad. P V takes them as A fragments without moving data (mma.cl's
 * MMA_ACCUMULATE). K and V stream through local memory, BLOCK_K keys per
 * tile, laid out as mma.cl's operand tiles.
 *
 * Without inline PTX (MMA_EMULATE) the instructions are emulated, at a
 * fraction of the speed: the tests check the layouts and the masking on
 * any device, and a forced plan runs anywhere.
 */

#ifndef BLOCK_K
#define BLOCK_K 64          // keys per local-memory tile, a multiple of 16
#endif
#ifndef WARPS
#define WARPS 4             // warps per work-group
#endif
#ifndef CAUSAL
#define CAUSAL 0            // bottom-right aligned causal mask
#endif
#ifndef STORE_LSE
#define STORE_LSE 1         // 0 when the caller passed no LSE buffer
#endif
#define WG_SIZE (32 * WARPS)
#define BLOCK_Q (16 * WARPS)  // Br
#define K_TILES (BLOCK_K / 8)

#if BLOCK_K % 16 != 0
#error "BLOCK_K must be a multiple of 16"
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void flash_fwd_mma(__global const store_t *q,   // [batch][seqlen_q][heads_q][head_dim]
                   __global const store_t *k,   // [batch][seqlen_k][heads_kv][head_dim]
                   __global const store_t *v,   // [batch][seqlen_k][heads_kv][head_dim]
                   __global store_t *o,         // [batch][seqlen_q][heads_q][head_dim]
                   __global float *lse,         // [batch][heads_q][seqlen_q]
                   const int seqlen_q, const int seqlen_k, const int heads_q,
                   const int heads_kv, const int head_dim,
                   const float scale,           // logits are scale * q.k
                   const float scale_log2       // scale * log2(e)
                   FCL_IO_PARAM) {
  __local tile_t k_tile[BLOCK_K * TILE_LD] __attribute__((aligned(16)));
  __local tile_t v_tile[BLOCK_K * TILE_LD] __attribute__((aligned(16)));
  MMA_DECLARE_SCRATCH(WARPS);
  const int tid = get_local_id(0);
  const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  FCL_IO_INIT;
  const fcl_query_block qb = fcl_locate_query_block(BLOCK_Q, CAUSAL, seqlen_q, seqlen_k,
                                                    heads_q, heads_kv, head_dim);
  const int q0 = qb.q0, batch = qb.batch, head = qb.head;
  const size_t q_stride = qb.q_stride, kv_stride = qb.kv_stride;
  const size_t q_offset = qb.q_offset, kv_offset = qb.kv_offset;
  __global const store_t *q_rows = q + q_offset;
  __global store_t *o_rows = o + q_offset;
  __global const store_t *k_rows = k + kv_offset;
  __global const store_t *v_rows = v + kv_offset;

  /* This lane's rows: g and g + 8 of the warp's 16. */
  int row[2], live[2];
UNROLL
  for (int r = 0; r < 2; ++r) {
    row[r] = q0 + 16 * warp + g + 8 * r;
    live[r] = row[r] < seqlen_q;
  }

  /* Q as A fragments, for every k-step over head_dim. */
  DECLARE_FRAG_A(qa, D_TILES);
  LOAD_A_ROWS(qa, D_TILES, q_rows, row[0], seqlen_q, q_stride, 0);

  float acc[D_TILES][4];
  float m[2] = {FCL_MAX_INIT, FCL_MAX_INIT};
  float l[2] = {0.0f, 0.0f};  // this lane's columns; the quad sums at the end
UNROLL
  for (int n = 0; n < D_TILES; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  const int diag = qb.diag, kv_full = qb.kv_full;
  const int n_tiles = (qb.kv_end + BLOCK_K - 1) / BLOCK_K;

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int k0 = tile * BLOCK_K;
    const int keys = min(BLOCK_K, seqlen_k - k0);
    LOAD_TILE(k_tile, k_rows + (size_t)k0 * kv_stride, keys, BLOCK_K, kv_stride);
    LOAD_TILE(v_tile, v_rows + (size_t)k0 * kv_stride, keys, BLOCK_K, kv_stride);
    barrier(CLK_LOCAL_MEM_FENCE);

    /* ---- S = Q K^T ---- */
    float s[K_TILES][4];
    MMA_SCORES(s, K_TILES, qa, D_TILES, k_tile, split_tf32_signed);

    /* ---- mask, new max, rescale, p = e^(scale (s - m)) ----
     * s[n][i] is row row[i >> 1], key k0 + 8 n + 2 t + (i & 1). */
    if (k0 + BLOCK_K > kv_full) {  // uniform over the group
UNROLL
      for (int n = 0; n < K_TILES; ++n)
UNROLL
        for (int i = 0; i < 4; ++i) {
          const int key = k0 + 8 * n + 2 * t + (i & 1);
#if CAUSAL
          const int seen = key < seqlen_k && key <= row[i >> 1] + diag;
#else
          const int seen = key < seqlen_k;
#endif
          s[n][i] = seen ? s[n][i] : -INFINITY;
        }
    }
UNROLL
    for (int r = 0; r < 2; ++r) {
      float m_new = m[r];
UNROLL
      for (int n = 0; n < K_TILES; ++n)
        m_new = fmax(m_new, fmax(s[n][2 * r], s[n][2 * r + 1]));
      m_new = quad_max(m_new MMA_ARGS);
      const float alpha = EXP2((m[r] - m_new) * scale_log2);
      m[r] = m_new;
      float sum = 0.0f;
UNROLL
      for (int n = 0; n < K_TILES; ++n)
UNROLL
        for (int c = 0; c < 2; ++c) {
          const float p = EXP2((s[n][2 * r + c] - m_new) * scale_log2);  // masked: 0
          s[n][2 * r + c] = p;
          sum += p;
        }
      l[r] = l[r] * alpha + sum;
UNROLL
      for (int n = 0; n < D_TILES; ++n) {
        acc[n][2 * r] *= alpha;
        acc[n][2 * r + 1] *= alpha;
      }
    }

    /* ---- O += P V ---- */
    MMA_ACCUMULATE(acc, D_TILES, s, K_TILES, v_tile);
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites K and V
  }

  /* ---- O = acc / l, LSE = ln(sum exp) ---- */
UNROLL
  for (int r = 0; r < 2; ++r) {
    const float l_row = quad_sum(l[r] MMA_ARGS);
    if (!live[r]) continue;
    /* A row that saw no key has l = 0 and acc = 0: output zeros. */
    const float inv = l_row > 0.0f ? 1.0f / l_row : 0.0f;
    const size_t at = (size_t)row[r] * q_stride + 2 * t;
UNROLL
    for (int n = 0; n < D_TILES; ++n) {
      if (8 * n + 2 * t >= head_dim) continue;
      STORE_PAIR(o_rows + at + 8 * n, acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    }
#if STORE_LSE
    if (t == 0) {
      /* l is 0 only for a row that saw no key; NaN stays NaN. */
      const float value = l_row == 0.0f ? -INFINITY : m[r] * scale + log(l_row);
      STORE_F32(lse, ((size_t)batch * heads_q + head) * seqlen_q + row[r], value);
    }
#endif
  }
  FCL_IO_COMMIT();
}
