/*
 * flash_bwd_rows.cl — the flash backward's parameters (-D options), its
 * work-item layout, and the row helpers its kernels share: loading and
 * storing this work-item's slices of rows, tiles of two tensors into local
 * memory, dot products of slices against a tile, the gradients' two-level
 * accumulation and the sums over a row's slices. Compiled after common.cl
 * and before flash_bwd.cl (host/run/program.c), which describes the algorithm.
 */

#ifndef HEAD_DIM_MAX
#define HEAD_DIM_MAX 64     // head_dim bucket compiled for; head_dim <= it
#endif
#ifndef WG_SIZE
#define WG_SIZE 128         // work-items per work-group
#endif
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 2   // work-items splitting one row's head_dim
#endif
#ifndef ROWS_PER_THREAD
#define ROWS_PER_THREAD 1   // rows kept in registers per work-item
#endif
#ifndef SUB_ROWS
#define SUB_ROWS 8          // streamed rows whose scores are in registers at once
#endif

/* The sizes derived from the tunables (traits.h). */
#define ROW_GROUPS (WG_SIZE / THREADS_PER_ROW)
/* Rows a work-group keeps (keys in dK/dV, queries in dQ) and rows of each
 * tile it streams (queries in dK/dV, keys in dQ). */
#define BLOCK FCL_SIMT_BLOCK(WG_SIZE, THREADS_PER_ROW, ROWS_PER_THREAD)
#define D_SLICE FCL_SIMT_SLICE(HEAD_DIM_MAX, THREADS_PER_ROW)
#define D_SLICE4 (D_SLICE / 4)
#define SLICE_STRIDE FCL_SIMT_SLICE_STRIDE(HEAD_DIM_MAX, THREADS_PER_ROW)
#define TILE_LD FCL_SIMT_TILE_LD(HEAD_DIM_MAX, THREADS_PER_ROW) // elements per row in a tile
#define TILE_LD4 (TILE_LD / 4)
/* The same for the value side's rows (V, dO, dV), HEAD_DIM_V_MAX wide
 * (common.cl), and the wider of the two widths' slices. */
#define DV_SLICE FCL_SIMT_SLICE(HEAD_DIM_V_MAX, THREADS_PER_ROW)
#define DV_SLICE4 (DV_SLICE / 4)
#define SLICE_STRIDE_V FCL_SIMT_SLICE_STRIDE(HEAD_DIM_V_MAX, THREADS_PER_ROW)
#define TILE_LD_V4 (FCL_SIMT_TILE_LD(HEAD_DIM_V_MAX, THREADS_PER_ROW) / 4)
#define WIDE_SLICE4 (D_SLICE4 > DV_SLICE4 ? D_SLICE4 : DV_SLICE4)

#if !FCL_SIMT_LANES_VALID(WG_SIZE, THREADS_PER_ROW)
#error "THREADS_PER_ROW must be 1, 2, 4 or 8 and divide WG_SIZE"
#endif
#if D_SLICE * THREADS_PER_ROW < HEAD_DIM_MAX || DV_SLICE * THREADS_PER_ROW < HEAD_DIM_V_MAX
#error "the slices must cover HEAD_DIM_MAX and HEAD_DIM_V_MAX"
#endif
#if BLOCK % SUB_ROWS != 0
#error "SUB_ROWS must divide the tile"
#endif

/* How the THREADS_PER_ROW partial dot products of a row are summed:
 * sub-group shuffles where the device has them and the work-group fills
 * whole sub-groups, else through local memory. */
#define ROW_SUM_IN_LOCAL FCL_SUMS_IN_LOCAL(WG_SIZE, THREADS_PER_ROW)

/* The dK/dV kernel's test of the window (KEY_SEEN_BY) for its key `key`
 * and streamed query row `row`, from the key's place relative to the row's
 * diagonal, rel = row + nk - nq - key, and the parameter block's two
 * bounds: for keys below nk the same as fcl_row_keys's [lo, hi). So
 * neither kernel keeps the streamed rows' bounds in local memory (the dQ
 * kernel's own rows take theirs into registers: LOAD_ROW_STATS with
 * NO_ROW_EXTRA); their reads made IGC spill the f32 dK/dV kernel at d 256
 * on the Max 1550 (docs/design.md, "The SIMT rules"). Pinned windows as
 * before. */
#if WINDOW == 2
#define BWD_KEY_SEEN_BY(key, row, rel, nq, nk)                                  \
  ((key) < (nk) && (WINDOW_LEFT(p) < 0 || (rel) <= WINDOW_LEFT(p)) &&          \
   (WINDOW_RIGHT(p) < 0 || -(rel) <= WINDOW_RIGHT(p)))
#else
#define BWD_KEY_SEEN_BY(key, row, rel, nq, nk) KEY_SEEN_BY(key, row, nq, nk, 0, 0)
#endif

/* Loaders of four columns of a row (common.cl): floats for registers, and
 * what a local tile holds. */
DEFINE_QUAD_LOADER(load_quad, float4, LOAD4, LOAD1)
DEFINE_QUAD_LOADER(load_tile_quad, tile4_t, LOAD_TILE4, LOAD_TILE1)

/* Columns col..col+3 of a row, those before head_dim; vec4 as for the
 * loaders (common.cl). */
inline void store_quad(__global store_t *row, const int col, const int head_dim,
                       const int vec4, const float4 x IO_STORES) {
  IO_HELPER_INIT;
  if (vec4) {
    if (col < head_dim) STORE4(row, col, x);
  } else {
    if (col + 0 < head_dim) STORE1(row, col + 0, x.x);
    if (col + 1 < head_dim) STORE1(row, col + 1, x.y);
    if (col + 2 < head_dim) STORE1(row, col + 2, x.z);
    if (col + 3 < head_dim) STORE1(row, col + 3, x.w);
  }
  IO_HELPER_STORES_DONE();
}

/* Rows [0, rows) of two tensors (a and b point at the first row; rows are
 * a_stride and b_stride elements apart; a's of head_dim columns, b's of
 * head_dim_v: Q and dO, K and V) into two tiles laid out
 * [row][slice][D_SLICE + skew] (b: DV_SLICE), coalesced over the rows.
 * Rows from `rows` on become 0: never stale local memory (0 * NaN is NaN).
 * The padding columns past a width are not written: the caller zeroes
 * them once. */
inline void load_tile_pair(__local tile4_t *ta, __local tile4_t *tb,
                           __global const store_t *a, __global const store_t *b,
                           const size_t a_stride, const size_t b_stride, const int rows,
                           const int head_dim, const int head_dim_v, const int vec4 IO_LOADS) {
  IO_HELPER_INIT;
  const int quads = (max(head_dim, head_dim_v) + 3) / 4;
  for (int i = get_local_id(0); i < BLOCK * quads; i += WG_SIZE) {
    const int j = i / quads;
    const int c = (i - j * quads) * 4;
    const int at = j * TILE_LD4 + (c / D_SLICE) * (SLICE_STRIDE / 4) + (c % D_SLICE) / 4;
    const int at_v = j * TILE_LD_V4 + (c / DV_SLICE) * (SLICE_STRIDE_V / 4) + (c % DV_SLICE) / 4;
    tile4_t x = TILE_ZERO, y = TILE_ZERO;
    if (j < rows) {
      x = load_tile_quad(a + (size_t)j * a_stride, c, head_dim, vec4 IO_LOADS_ARG);
      y = load_tile_quad(b + (size_t)j * b_stride, c, head_dim_v, vec4 IO_LOADS_ARG);
    }
    if (c < head_dim) ta[at] = x;
    if (c < head_dim_v) tb[at_v] = y;
  }
  IO_HELPER_LOADS_DONE();
}

/* ---- the parts both main kernels share, as statement macros so that the
 * per-row arrays stay private arrays indexed by constants (registers) ---- */

/* dst[r][..] = this work-item's slice of row r, `slice_w` (D_SLICE or
 * DV_SLICE) of a row of `width` columns (0 for rows that are not live and
 * for columns past the width). */
#define LOAD_ROW_SLICES(dst, base, rows, limit, stride, slice_w, width)         \
  UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_) {                          \
    __global const store_t *src_ = (base) + (size_t)(rows)[r_] * (stride);      \
    UNROLL for (int c_ = 0; c_ < (slice_w); c_ += 4) {                          \
      float4 x_ = (float4)(0.0f);                                               \
      if ((rows)[r_] < (limit))                                                 \
        x_ = load_quad(src_, slice * (slice_w) + c_, width, p.vec4 IO_LOADS_ARG); \
      dst[r_][c_] = x_.x;                                                       \
      dst[r_][c_ + 1] = x_.y;                                                   \
      dst[r_][c_ + 2] = x_.z;                                                   \
      dst[r_][c_ + 3] = x_.w;                                                   \
    }                                                                           \
  }

/* Stores this work-item's slice of each live row r, times `factor`;
 * slice_w and width as LOAD_ROW_SLICES's. */
#define STORE_ROW_SLICES(src, base, rows, limit, stride, factor, slice_w, width) \
  UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_) {                          \
    if ((rows)[r_] >= (limit)) continue;                                        \
    __global store_t *dst_ = (base) + (size_t)(rows)[r_] * (stride);            \
    UNROLL for (int c_ = 0; c_ < (slice_w); c_ += 4) {                          \
      const float4 x_ = (float4)(src[r_][c_], src[r_][c_ + 1], src[r_][c_ + 2], \
                                 src[r_][c_ + 3]) * (factor);                   \
      store_quad(dst_, slice * (slice_w) + c_, width, p.vec4, x_ IO_STORES_ARG); \
    }                                                                           \
  }

/* s[r][i] = slice of a_r . tile_a row (sb + i), dp[r][i] likewise for b
 * (the value side: DV_SLICE wide, at slice_base_v4): four chains per dot
 * product, one per float4 lane, summed pairwise, as in flash_fwd.cl. */
#define SLICE_DOTS(s, dp, ra, rb, tile_a, tile_b, sb)                           \
  UNROLL for (int i_ = 0; i_ < SUB_ROWS; ++i_) {                                 \
    float4 sa_[ROWS_PER_THREAD], sb_[ROWS_PER_THREAD];                          \
    UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_)                          \
      sa_[r_] = sb_[r_] = (float4)(0.0f);                                       \
    const int at_ = ((sb) + i_) * TILE_LD4 + slice_base4;                       \
    const int atv_ = ((sb) + i_) * TILE_LD_V4 + slice_base_v4;                  \
    UNROLL for (int c4_ = 0; c4_ < WIDE_SLICE4; ++c4_) {                         \
      if (c4_ < D_SLICE4) {                                                     \
        const float4 ta_ = TILE_READ4(tile_a, at_ + c4_);                       \
        UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_)                      \
          sa_[r_] = fma((float4)(ra[r_][4 * c4_], ra[r_][4 * c4_ + 1],          \
                                 ra[r_][4 * c4_ + 2], ra[r_][4 * c4_ + 3]),     \
                        ta_, sa_[r_]);                                          \
      }                                                                         \
      if (c4_ < DV_SLICE4) {                                                    \
        const float4 tb_ = TILE_READ4(tile_b, atv_ + c4_);                      \
        UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_)                      \
          sb_[r_] = fma((float4)(rb[r_][4 * c4_], rb[r_][4 * c4_ + 1],          \
                                 rb[r_][4 * c4_ + 2], rb[r_][4 * c4_ + 3]),     \
                        tb_, sb_[r_]);                                          \
      }                                                                         \
    }                                                                           \
    UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_) {                        \
      s[r_][i_] = (sa_[r_].x + sa_[r_].y) + (sa_[r_].z + sa_[r_].w);            \
      dp[r_][i_] = (sb_[r_].x + sb_[r_].y) + (sb_[r_].z + sb_[r_].w);           \
    }                                                                           \
  }

/* acc[r][4 c4 .. 4 c4 + 3] += t[r]. The gradients are sums over every
 * query (dK, dV) or key (dQ): the SUB_ROWS terms of a sub-tile are summed
 * first, on their own, and only that partial joins the long running sum,
 * which divides the running sum's rounding error by about sqrt(SUB_ROWS)
 * for one add per SUB_ROWS multiply-adds. With one chain per element, a
 * sum over a few hundred rows was up to 3x less accurate than CLBlast's
 * GEMM on the same data. */
#define ACCUMULATE(acc, t, c4)                                                  \
  UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_) {                          \
    acc[r_][4 * (c4) + 0] += t[r_].x;                                           \
    acc[r_][4 * (c4) + 1] += t[r_].y;                                           \
    acc[r_][4 * (c4) + 2] += t[r_].z;                                           \
    acc[r_][4 * (c4) + 3] += t[r_].w;                                           \
  }

/* Sums the THREADS_PER_ROW partial dot products of each row; every slice
 * of a row gets the same sum, in the same order run after run. */
#if THREADS_PER_ROW == 1
#define ROW_SUMS(s, dp) ((void)0)
#elif ROW_SUM_IN_LOCAL
#define ROW_SUMS(s, dp)                                                         \
  UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_) {                          \
    UNROLL for (int i_ = 0; i_ < SUB_ROWS; ++i_) {                               \
      part[i_ * WG_SIZE + tid] = s[r_][i_];                                     \
      part[(SUB_ROWS + i_) * WG_SIZE + tid] = dp[r_][i_];                       \
    }                                                                           \
    barrier(CLK_LOCAL_MEM_FENCE);                                               \
    UNROLL for (int i_ = 0; i_ < SUB_ROWS; ++i_) {                               \
      float x_ = 0.0f, y_ = 0.0f;                                               \
      UNROLL for (int t_ = 0; t_ < THREADS_PER_ROW; ++t_) {                      \
        x_ += part[i_ * WG_SIZE + row_group * THREADS_PER_ROW + t_];            \
        y_ += part[(SUB_ROWS + i_) * WG_SIZE + row_group * THREADS_PER_ROW + t_]; \
      }                                                                         \
      s[r_][i_] = x_;                                                           \
      dp[r_][i_] = y_;                                                          \
    }                                                                           \
    barrier(CLK_LOCAL_MEM_FENCE);                                               \
  }
#else
/* Butterfly: x + y == y + x exactly, so all lanes of a row agree. */
#define ROW_SUMS(s, dp)                                                         \
  UNROLL for (int r_ = 0; r_ < ROWS_PER_THREAD; ++r_)                            \
    UNROLL for (int i_ = 0; i_ < SUB_ROWS; ++i_) {                               \
      UNROLL for (int m_ = 1; m_ < THREADS_PER_ROW; m_ *= 2) {                   \
        s[r_][i_] += fcl_shfl_xor(s[r_][i_], m_);                               \
        dp[r_][i_] += fcl_shfl_xor(dp[r_][i_], m_);                             \
      }                                                                         \
    }
#endif
