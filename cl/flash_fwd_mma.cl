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
 * quad. P V reuses them as A fragments without moving data: for 16-bit
 * types the layouts coincide; for tf32 (A: row g/g+8, columns t and t+4)
 * the keys are renumbered inside each group of 8 (logical column t is key
 * 2t, t + 4 is key 2t + 1), and V's rows are read in the same order, which
 * leaves the sum over keys unchanged.
 *
 * Local tiles: K and V, BLOCK_K keys each, in the storage type, rows
 * TILE_PAD elements longer than HEAD_DIM_MAX so that the 32 lanes of a
 * fragment read hit 32 different banks (or share a word).
 *
 * Without inline PTX (MMA_EMULATE) the instructions are emulated, at a
 * fraction of the speed: the tests check the layouts and the masking on
 * any device, and a forced plan runs anywhere.
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // head_dim bucket compiled for, a multiple of 16
#endif
#ifndef BLOCK_K
#define BLOCK_K 64          // keys per local-memory tile, a multiple of 16
#endif
#ifndef WARPS
#define WARPS 4             // warps per work-group
#endif
#ifndef M_TILES
#define M_TILES 1           // 16-row tiles per warp: each B fragment read from
                            // local memory feeds M_TILES instructions
#endif
#ifndef CAUSAL
#define CAUSAL 0            // bottom-right aligned causal mask
#endif
#ifndef STORE_LSE
#define STORE_LSE 1         // 0 when the caller passed no LSE buffer
#endif
#ifndef S_CHAIN
#define S_CHAIN 2           // f32: k-steps of 8 per partial sum of S (a
                            // divisor of HEAD_DIM_MAX / 8; see mma.cl)
#endif
#ifndef O_CHAIN
#define O_CHAIN 2           // f32: key steps of 8 per partial sum of O (a
                            // divisor of BLOCK_K / 8)
#endif

#define WG_SIZE (32 * WARPS)
#define BLOCK_Q (16 * M_TILES * WARPS)  // Br
#define D_TILES (HEAD_DIM_MAX / 8)
#define K_TILES (BLOCK_K / 8)

#if HEAD_DIM_MAX % 16 != 0 || BLOCK_K % 16 != 0
#error "HEAD_DIM_MAX and BLOCK_K must be multiples of 16"
#endif
#if D_TILES % S_CHAIN != 0 || K_TILES % O_CHAIN != 0
#error "S_CHAIN must divide HEAD_DIM_MAX / 8, O_CHAIN BLOCK_K / 8"
#endif

#if FCL_DTYPE == 0
typedef float tile_t;
#define TILE_PAD 4
#else
typedef ushort tile_t;     // the storage type's bits
#define TILE_PAD 8
#endif
#define TILE_LD (HEAD_DIM_MAX + TILE_PAD)

/* ---- global <-> local ------------------------------------------------------
 * Four elements at a time; head_dim is a multiple of 8 (the planner's
 * condition for this kernel), so a group of four is all in or all out. */
#if FCL_DTYPE == 0
typedef float4 chunk_t;
#define LOAD_CHUNK(p, i) LOAD4_F32(p, i)
#define CHUNK_ZERO ((float4)(0.0f))
#define TILE_PUT(t, i, x) vstore4((x), 0, (t) + (i))
#else
typedef ushort4 chunk_t;
#define LOAD_CHUNK(p, i) \
  FCL_COUNTED_LOAD(8, *(__global const ushort4 *)((__global const ushort *)(p) + (i)))
#define CHUNK_ZERO ((ushort4)(0))
#define TILE_PUT(t, i, x) (*(__local ushort4 *)((t) + (i)) = (x))
#endif

/* `rows` rows of K or V from src (rows kv_stride apart), columns
 * [0, head_dim), into tile rows [0, BLOCK_K); the rest of the tile is 0
 * (0 * NaN is NaN: stale local memory must never meet a zero weight). */
#define LOAD_TILE(tile, src, rows)                                              \
  for (int i = tid; i < BLOCK_K * (HEAD_DIM_MAX / 4); i += WG_SIZE) {           \
    const int j = i / (HEAD_DIM_MAX / 4), c = (i % (HEAD_DIM_MAX / 4)) * 4;     \
    chunk_t x = CHUNK_ZERO;                                                     \
    if (j < (rows) && c < head_dim) x = LOAD_CHUNK(src, (size_t)j * kv_stride + c); \
    TILE_PUT(tile, j * TILE_LD + c, x);                                         \
  }

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
#if MMA_EMULATE
  __local float mma_scratch_a[WARPS][16 * 16], mma_scratch_b[WARPS][16 * 8];
  __local float quad[WG_SIZE];
#endif
  FCL_IO_INIT;

  const int tid = get_local_id(0);
  const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
#if MMA_EMULATE
  __local float *mma_a = mma_scratch_a[warp], *mma_b = mma_scratch_b[warp];
#endif
  const fcl_query_block qb = fcl_locate_query_block(BLOCK_Q, CAUSAL, seqlen_q, seqlen_k,
                                                    heads_q, heads_kv, head_dim);
  const int q0 = qb.q0, batch = qb.batch, head = qb.head;
  const size_t q_stride = qb.q_stride, kv_stride = qb.kv_stride;
  const size_t q_offset = qb.q_offset, kv_offset = qb.kv_offset;
  __global const store_t *q_rows = q + q_offset;
  __global store_t *o_rows = o + q_offset;
  __global const store_t *k_rows = k + kv_offset;
  __global const store_t *v_rows = v + kv_offset;

  /* This lane's rows: g and g + 8 of each of the warp's 16-row tiles. */
  int row[M_TILES][2], live[M_TILES][2];
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
    for (int r = 0; r < 2; ++r) {
      row[mt][r] = q0 + 16 * (M_TILES * warp + mt) + g + 8 * r;
      live[mt][r] = row[mt][r] < seqlen_q;
    }

  /* Q as A fragments, for every k-step over head_dim; padding columns and
   * rows past seqlen_q are 0. */
#if FCL_DTYPE == 0
  float qa[M_TILES][D_TILES][4];
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
    for (int kk = 0; kk < D_TILES; ++kk)
UNROLL
      for (int i = 0; i < 4; ++i) {
        const int r = i & 1, col = 8 * kk + t + 4 * (i >> 1);
        qa[mt][kk][i] = live[mt][r] && col < head_dim
                            ? LOAD_F32(q_rows, (size_t)row[mt][r] * q_stride + col)
                            : 0.0f;
      }
#else
  uint qa[M_TILES][D_TILES / 2][4];
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
    for (int kk = 0; kk < D_TILES / 2; ++kk)
UNROLL
      for (int i = 0; i < 4; ++i) {
        const int r = i & 1, col = 16 * kk + 2 * t + 8 * (i >> 1);
        qa[mt][kk][i] = live[mt][r] && col < head_dim
                            ? FCL_COUNTED_LOAD(4, *(__global const uint *)(
                                                      (__global const ushort *)q_rows +
                                                      (size_t)row[mt][r] * q_stride + col))
                            : 0u;
      }
#endif

  float acc[M_TILES][D_TILES][4];
  float m[M_TILES][2], l[M_TILES][2];  // l: this lane's columns; the quad sums at the end
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt) {
UNROLL
    for (int n = 0; n < D_TILES; ++n)
      acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
    m[mt][0] = m[mt][1] = FCL_MAX_INIT;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  const int diag = qb.diag, kv_full = qb.kv_full;
  const int n_tiles = (qb.kv_end + BLOCK_K - 1) / BLOCK_K;

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int k0 = tile * BLOCK_K;
    const int keys = min(BLOCK_K, seqlen_k - k0);
    LOAD_TILE(k_tile, k_rows + (size_t)k0 * kv_stride, keys);
    LOAD_TILE(v_tile, v_rows + (size_t)k0 * kv_stride, keys);
    barrier(CLK_LOCAL_MEM_FENCE);

    /* ---- S = Q K^T: B fragment (k = head_dim, n = key) from K's rows,
     * read once for all of the warp's row tiles ---- */
    float s[M_TILES][K_TILES][4];
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
      for (int n = 0; n < K_TILES; ++n)
        s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#if FCL_DTYPE == 0
    /* S_CHAIN k-steps per partial sum (mma.cl: tensor cores truncate) */
UNROLL
    for (int k0s = 0; k0s < D_TILES; k0s += S_CHAIN) {
      float part[M_TILES][K_TILES][4];
UNROLL
      for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
        for (int n = 0; n < K_TILES; ++n)
          part[mt][n][0] = part[mt][n][1] = part[mt][n][2] = part[mt][n][3] = 0.0f;
UNROLL
      for (int kk = k0s; kk < k0s + S_CHAIN; ++kk) {
        /* Q is split again for every tile: kept split it would need twice
         * its registers, which f32 at d = 128 does not have. */
        uint a_big[M_TILES][4], a_small[M_TILES][4];
UNROLL
        for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
          for (int i = 0; i < 4; ++i) split_tf32(qa[mt][kk][i], &a_big[mt][i], &a_small[mt][i]);
UNROLL
        for (int n = 0; n < K_TILES; ++n) {
          __local const float *kr = k_tile + (8 * n + g) * TILE_LD + 8 * kk + t;
          uint b_big[2], b_small[2];
          split_tf32(kr[0], &b_big[0], &b_small[0]);
          split_tf32(kr[4], &b_big[1], &b_small[1]);
UNROLL
          for (int mt = 0; mt < M_TILES; ++mt)
            mma_3xtf32(part[mt][n], a_big[mt], a_small[mt], b_big, b_small MMA_ARGS);
        }
      }
UNROLL
      for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
        for (int n = 0; n < K_TILES; ++n)
UNROLL
          for (int i = 0; i < 4; ++i) s[mt][n][i] += part[mt][n][i];
    }
#else
    __local const uint *k_words = (__local const uint *)k_tile;
UNROLL
    for (int kk = 0; kk < D_TILES / 2; ++kk)
UNROLL
      for (int n = 0; n < K_TILES; ++n) {
        __local const uint *kr = k_words + ((8 * n + g) * TILE_LD + 16 * kk + 2 * t) / 2;
        const uint b[2] = {kr[0], kr[4]};
UNROLL
        for (int mt = 0; mt < M_TILES; ++mt) mma_16bit(s[mt][n], qa[mt][kk], b MMA_ARGS);
      }
#endif

    /* ---- mask, new max, rescale, p = e^(scale (s - m)) ----
     * s[mt][n][i] is row row[mt][i >> 1], key k0 + 8 n + 2 t + (i & 1). */
    if (k0 + BLOCK_K > kv_full) {  // uniform over the group
UNROLL
      for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
        for (int n = 0; n < K_TILES; ++n)
UNROLL
          for (int i = 0; i < 4; ++i) {
            const int key = k0 + 8 * n + 2 * t + (i & 1);
#if CAUSAL
            const int seen = key < seqlen_k && key <= row[mt][i >> 1] + diag;
#else
            const int seen = key < seqlen_k;
#endif
            s[mt][n][i] = seen ? s[mt][n][i] : -INFINITY;
          }
    }
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
      for (int r = 0; r < 2; ++r) {
        float m_new = m[mt][r];
UNROLL
        for (int n = 0; n < K_TILES; ++n)
          m_new = fmax(m_new, fmax(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
        m_new = quad_max(m_new MMA_ARGS);
        const float alpha = EXP2((m[mt][r] - m_new) * scale_log2);
        m[mt][r] = m_new;
        float sum = 0.0f;
UNROLL
        for (int n = 0; n < K_TILES; ++n)
UNROLL
          for (int c = 0; c < 2; ++c) {
            const float p = EXP2((s[mt][n][2 * r + c] - m_new) * scale_log2);  // masked: 0
            s[mt][n][2 * r + c] = p;
            sum += p;
          }
        l[mt][r] = l[mt][r] * alpha + sum;
UNROLL
        for (int n = 0; n < D_TILES; ++n) {
          acc[mt][n][2 * r] *= alpha;
          acc[mt][n][2 * r + 1] *= alpha;
        }
      }

    /* ---- O += P V: A fragments from s in place, B (k = key, n = column)
     * from V's rows, read once for all row tiles ---- */
#if FCL_DTYPE == 0
    /* logical columns t, t + 4 of an A fragment are keys 2t, 2t + 1 */
    uint p_big[M_TILES][K_TILES][4], p_small[M_TILES][K_TILES][4];
UNROLL
    for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
      for (int kt = 0; kt < K_TILES; ++kt) {
        const float a[4] = {s[mt][kt][0], s[mt][kt][2], s[mt][kt][1], s[mt][kt][3]};
UNROLL
        for (int i = 0; i < 4; ++i) split_tf32(a[i], &p_big[mt][kt][i], &p_small[mt][kt][i]);
      }
    /* per output column block, O_CHAIN key steps per partial sum */
UNROLL
    for (int n = 0; n < D_TILES; ++n)
UNROLL
      for (int kc = 0; kc < K_TILES; kc += O_CHAIN) {
        float part[M_TILES][4];
UNROLL
        for (int mt = 0; mt < M_TILES; ++mt)
          part[mt][0] = part[mt][1] = part[mt][2] = part[mt][3] = 0.0f;
UNROLL
        for (int kt = kc; kt < kc + O_CHAIN; ++kt) {
          __local const float *vr = v_tile + (8 * kt + 2 * t) * TILE_LD + 8 * n + g;
          uint b_big[2], b_small[2];
          split_tf32(vr[0], &b_big[0], &b_small[0]);
          split_tf32(vr[TILE_LD], &b_big[1], &b_small[1]);
UNROLL
          for (int mt = 0; mt < M_TILES; ++mt)
            mma_3xtf32(part[mt], p_big[mt][kt], p_small[mt][kt], b_big, b_small MMA_ARGS);
        }
UNROLL
        for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
          for (int i = 0; i < 4; ++i) acc[mt][n][i] += part[mt][i];
      }
#else
UNROLL
    for (int kt = 0; kt < K_TILES / 2; ++kt) {
      uint a[M_TILES][4];
UNROLL
      for (int mt = 0; mt < M_TILES; ++mt) {
        a[mt][0] = pack2(s[mt][2 * kt][0], s[mt][2 * kt][1]);
        a[mt][1] = pack2(s[mt][2 * kt][2], s[mt][2 * kt][3]);
        a[mt][2] = pack2(s[mt][2 * kt + 1][0], s[mt][2 * kt + 1][1]);
        a[mt][3] = pack2(s[mt][2 * kt + 1][2], s[mt][2 * kt + 1][3]);
      }
      __local const ushort *vr = v_tile + (16 * kt + 2 * t) * TILE_LD + g;
UNROLL
      for (int n = 0; n < D_TILES; ++n) {
        __local const ushort *vc = vr + 8 * n;
        const uint b[2] = {(uint)vc[0] | ((uint)vc[TILE_LD] << 16),
                           (uint)vc[8 * TILE_LD] | ((uint)vc[9 * TILE_LD] << 16)};
UNROLL
        for (int mt = 0; mt < M_TILES; ++mt) mma_16bit(acc[mt][n], a[mt], b MMA_ARGS);
      }
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites K and V
  }

  /* ---- O = acc / l, LSE = ln(sum exp) ---- */
UNROLL
  for (int mt = 0; mt < M_TILES; ++mt)
UNROLL
    for (int r = 0; r < 2; ++r) {
      const float l_row = quad_sum(l[mt][r] MMA_ARGS);
      if (!live[mt][r]) continue;
      /* A row that saw no key has l = 0 and acc = 0: output zeros. */
      const float inv = l_row > 0.0f ? 1.0f / l_row : 0.0f;
      const size_t at = (size_t)row[mt][r] * q_stride + 2 * t;
UNROLL
      for (int n = 0; n < D_TILES; ++n) {
        if (8 * n + 2 * t >= head_dim) continue;
        const float x0 = acc[mt][n][2 * r] * inv, x1 = acc[mt][n][2 * r + 1] * inv;
#if FCL_DTYPE == 0
        FCL_COUNT_STORE(8);
        vstore2((float2)(x0, x1), 0, o_rows + at + 8 * n);
#else
        FCL_COUNT_STORE(4);
        *(__global uint *)((__global ushort *)o_rows + at + 8 * n) = pack2(x0, x1);
#endif
      }
#if STORE_LSE
      if (t == 0) {
        /* l is 0 only for a row that saw no key; NaN stays NaN. */
        const float value = l_row == 0.0f ? -INFINITY : m[mt][r] * scale + log(l_row);
        STORE_F32(lse, ((size_t)batch * heads_q + head) * seqlen_q + row[mt][r], value);
      }
#endif
    }
  FCL_IO_COMMIT();
}
