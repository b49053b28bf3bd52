/*
 * traits.h — each flash kernel family's tunables, the sizes derived from
 * them and their invariants, written once for the host and the kernels.
 * Like params.h, the library's C sources include this file and every
 * kernel program is compiled with its text in front (host/run/program.c): a
 * kernel sizes its __local arrays with these macros, and the planner
 * computes a plan's local bytes with the same ones, which the run checks
 * against the built kernel (fcl__check_local_bytes).
 *
 * Every macro is an integer expression of its arguments alone (no sizeof,
 * no casts), so that a kernel can test it in #if; the host passes size_t
 * values. The tunables are the -D options host/plan/families.c writes.
 */
#ifndef FCL_TRAITS_H
#define FCL_TRAITS_H

/* Whether `lanes` adjacent work-items of a `wg`-item work-group sum a
 * row's partial dot products by sub-group shuffles `width` lanes wide (0:
 * the device has none): a shuffle over absent lanes is undefined, so the
 * work-group must fill sub-groups. Otherwise, with more than one lane,
 * they sum through local memory. */
#define FCL_SUMS_BY_SHUFFLE_OF(width, wg, lanes) \
  ((width) != 0 && (wg) >= (width) && (lanes) <= (width))
#define FCL_SUMS_IN_LOCAL_OF(width, wg, lanes) \
  ((lanes) > 1 && !FCL_SUMS_BY_SHUFFLE_OF(width, wg, lanes))

/* ---- SIMT: flash_fwd.cl and flash_bwd.cl -----------------------------------
 * Tunables: HEAD_DIM_MAX (hd), WG_SIZE (wg), THREADS_PER_ROW (lanes: the
 * work-items sharing a row's head_dim), ROWS_PER_THREAD (rows), BLOCK_K
 * (the forward's keys a tile), TILE_STORAGE (elem: 4-byte floats or the
 * 16-bit storage type's 2 bytes in the local tiles), and the backward's
 * SUB_ROWS (streamed rows whose scores are in registers at once). */

/* A lane's slice of head_dim: a whole number of float4s. */
#define FCL_SIMT_SLICE(hd, lanes) (((hd) / (lanes) + 3) / 4 * 4)
/* Slices sit 4 elements apart beyond their width, so that the lanes of a
 * row read different banks at once. */
#define FCL_SIMT_SLICE_STRIDE(hd, lanes) (FCL_SIMT_SLICE(hd, lanes) + ((lanes) > 1 ? 4 : 0))
/* Elements of one row (key, or query in the backward) in a local tile. */
#define FCL_SIMT_TILE_LD(hd, lanes) (FCL_SIMT_SLICE_STRIDE(hd, lanes) * (lanes))
/* Rows a work-group keeps: the forward's query block (Br), the backward's
 * block of keys (dK/dV) or queries (dQ) and the rows of each tile it
 * streams. */
#define FCL_SIMT_BLOCK(wg, lanes, rows) ((wg) / (lanes) * (rows))
#define FCL_SIMT_LANES_VALID(wg, lanes) \
  ((wg) % (lanes) == 0 && ((lanes) == 1 || (lanes) == 2 || (lanes) == 4 || (lanes) == 8))
/* The forward's slices are whole float4s that cover head_dim exactly. */
#define FCL_SIMT_FWD_HEAD_VALID(hd, lanes) ((hd) % (4 * (lanes)) == 0)
/* flash_fwd.cl: the K and V tiles (V's rows of HEAD_DIM_V_MAX, hdv), and
 * the row sums' partial products. */
#define FCL_SIMT_FWD_LOCAL_BYTES(hd, hdv, lanes, block_k, wg, elem, sums_in_local)          \
  ((block_k) * (FCL_SIMT_TILE_LD(hd, lanes) + FCL_SIMT_TILE_LD(hdv, lanes)) * (elem) + \
   ((sums_in_local) ? (block_k) * (wg) * 4 : 0))
/* flash_bwd.cl (both kernels declare the same arrays): two streamed tiles
 * (Q and dO, K and V: the second of hdv columns), the rows' LSE and D (no
 * row bounds: flash_bwd_rows.cl), and the partial dot products of
 * SUB_ROWS rows' scores and dP. */
#define FCL_SIMT_BWD_LOCAL_BYTES(hd, hdv, lanes, block, wg, elem, sums_in_local, sub_rows) \
  ((block) * (FCL_SIMT_TILE_LD(hd, lanes) + FCL_SIMT_TILE_LD(hdv, lanes)) * (elem) +      \
   2 * (block) * 4 + ((sums_in_local) ? 2 * (sub_rows) * (wg) * 4 : 0))

/* ---- MMA: flash_fwd_mma.cl, flash_bwd_mma.cl (mma.cl) ---------------------
 * Tunables: HEAD_DIM_MAX (hd, a multiple of 16), WARPS, the forward's
 * BLOCK_K and M_TILES, the backward's SUB_TILES and HEAD_SPLIT (warps a 16-row
 * fragment's columns are split over); tiles in the storage type (elem: 4
 * for f32, else 2). MMA_EMULATE adds the emulated products' scratch. */

/* Tile rows are this much longer than hd, so that a fragment read's 32
 * lanes hit 32 banks. */
#define FCL_MMA_TILE_PAD(elem) ((elem) == 4 ? 4 : 8)
#define FCL_MMA_TILE_LD(hd, elem) ((hd) + FCL_MMA_TILE_PAD(elem))
/* Two tiles of `rows` rows: K and V, or the backward's pair. */
#define FCL_MMA_TILES_BYTES(hd, rows, elem) (2 * (rows) * FCL_MMA_TILE_LD(hd, elem) * (elem))
/* Emulated, each warp's A and B products in floats (mma.cl). */
#define FCL_MMA_EMULATE_BYTES(warps) ((warps) * (16 * 16 + 16 * 8) * 4)
/* The forward's M_TILES (m_tiles: 16-row tiles a warp, 1 or 2; each B
 * fragment read from a tile feeds all of them): its block of rows, and
 * whether its warps keep Q's A fragments in local memory (each lane its
 * own words, read back at each k-step of S) instead of registers: with two
 * row tiles beyond hd 64, where Q, the two accumulators and the two tiles
 * of scores would take more than a lane's 255 registers (16-bit hd 128:
 * 64 + 128 + Bc words). v_stages: V's tiles (cl/flash_fwd_mma.cl's
 * V_STAGES), 2 only where a key tile takes two barriers (16-bit tiles of at
 * most 64 keys: TILE_BARRIERS). */
#define FCL_MMA_FWD_BLOCK_Q(warps, m_tiles) (16 * (m_tiles) * (warps))
#define FCL_MMA_FWD_TWO_BARRIERS(elem, block_k) ((elem) == 2 && (block_k) <= 64)
#define FCL_MMA_FWD_Q_IN_LOCAL(hd, m_tiles) ((m_tiles) > 1 && (hd) > 64)
#define FCL_MMA_FWD_LOCAL_BYTES(hd, block_k, warps, elem, emulate, m_tiles, v_stages)      \
  (FCL_MMA_TILES_BYTES(hd, block_k, elem) +                                              \
   ((v_stages) - 1) * (block_k) * FCL_MMA_TILE_LD(hd, elem) * (elem) +                   \
   (FCL_MMA_FWD_Q_IN_LOCAL(hd, m_tiles) ? FCL_MMA_FWD_BLOCK_Q(warps, m_tiles) * (hd) * (elem) \
                                         : 0) +                                           \
   ((emulate) ? FCL_MMA_EMULATE_BYTES(warps) + 32 * (warps) * 4 : 0))
/* A paged cache's keys the forward's K and V tile loads (mma.cl,
 * TILE_CHUNKS_RUNS) step through from one page lookup: every page size is
 * a multiple of it (FCL_PAGE_SIZE_MULTIPLE), so that a tile may span pages. */
#define FCL_PAGE_RUN_KEYS 16
/* Rows a work-group of `wg` covers at once where it covers whole rows of
 * hd / 4 chunks, else 0 (mma.cl's TILE_ROW_STEP, and its loop's choice). */
#define FCL_MMA_TILE_ROW_STEP(hd, wg) ((wg) % ((hd) / 4) == 0 ? (wg) / ((hd) / 4) : 0)
/* Whether a work-item's loop iteration r (its rows `step` apart) looks a
 * page up: the first of each run of keys, or each where rows of one
 * work-item never share a run. */
#define FCL_MMA_PAGE_REBASE(step, r) \
  ((step) >= FCL_PAGE_RUN_KEYS || FCL_PAGE_RUN_KEYS % (step) != 0 || \
   ((r) * (step)) % FCL_PAGE_RUN_KEYS == 0)
/* Page lookups of one paged K or V tile of `rows` (BLOCK_K) by the
 * work-group: a lookup per row and chunk where the work-items do not
 * cover whole rows, else each work-item's rebasing iterations. */
#define FCL_MMA_PAGE_LOOKUPS(hd, rows, wg)                                               \
  (FCL_MMA_TILE_ROW_STEP(hd, wg) == 0 ? (rows) * ((hd) / 4)                             \
   : FCL_MMA_TILE_ROW_STEP(hd, wg) >= FCL_PAGE_RUN_KEYS ||                              \
           FCL_PAGE_RUN_KEYS % FCL_MMA_TILE_ROW_STEP(hd, wg) != 0                       \
       ? (wg) * (((rows) + FCL_MMA_TILE_ROW_STEP(hd, wg) - 1) / FCL_MMA_TILE_ROW_STEP(hd, wg)) \
       : (wg) * (((rows) + FCL_PAGE_RUN_KEYS - 1) / FCL_PAGE_RUN_KEYS))
/* The wgmma forward (flash_fwd_wgmma.cl, wgmma.cl): K's tile and V's,
 * `keys` (32 to 128) by hd (64 or 128) 16-bit elements each, which its `groups`
 * warpgroups share; emulated (mma_emulate) the quads' scratch, and the
 * products' for 4 warps a warpgroup, or where wgmma is emulated
 * (wgmma_emulate) the warpgroups' A operands; stages: 1, or 2
 * (WGMMA_PIPE 3, two of each tile). */
#define FCL_WGMMA_FWD_LOCAL_BYTES(hd, keys, stages, groups, mma_emulate, wgmma_emulate) \
  ((stages) * 2 * (keys) * (hd) * 2 + ((mma_emulate) ? (groups) * 32 * 4 * 4 : 0) +    \
   ((wgmma_emulate) ? (groups) * 64 * 16 * 4                                        \
    : (mma_emulate) ? FCL_MMA_EMULATE_BYTES(4 * (groups)) : 0))
/* The backward's rows a work-group owns and streams a tile of. */
#define FCL_MMA_BWD_BLOCK(warps, head_split) (16 * ((warps) / (head_split)))
/* ... its two tiles, LSE and D (and with row_keys the visible keys) of a
 * tile's rows and, where warps pair (head_split 2), their exchange: two
 * slots of each pair's s and dp, a float per lane of SUB_TILES 8-row
 * groups of 4 fragments. */
#define FCL_MMA_BWD_LOCAL_BYTES(hd, warps, head_split, sub_tiles, elem, emulate, row_keys) \
  (FCL_MMA_TILES_BYTES(hd, FCL_MMA_BWD_BLOCK(warps, head_split), elem) +                   \
   ((emulate) ? FCL_MMA_EMULATE_BYTES(warps) : 0) +                                        \
   2 * FCL_MMA_BWD_BLOCK(warps, head_split) * 4 +                                          \
   ((row_keys) ? 2 * FCL_MMA_BWD_BLOCK(warps, head_split) * 4 : 0) +                       \
   ((head_split) == 2 ? 2 * ((warps) / 2) * (2 * (sub_tiles) * 4) * 32 * 4 : 0))

/* ---- DECODE: flash_fwd_decode.cl -------------------------------------------
 * Tunables: HEAD_DIM_MAX (hd), BLOCK_Q (rows: packed slots), BLOCK_K (keys
 * a step of the work-group), WG_SIZE (wg), KEY_LANES (lanes sharing a
 * key). */
#define FCL_DECODE_KEY_GROUPS(wg, lanes) ((wg) / (lanes))
#define FCL_DECODE_KEYS_PER_GROUP(block_k, wg, lanes) \
  ((block_k) / FCL_DECODE_KEY_GROUPS(wg, lanes))
#define FCL_DECODE_VALID(hd, block_k, wg, lanes)                                   \
  ((hd) % (lanes) == 0 && ((hd) / (lanes)) % 4 == 0 && (wg) % (lanes) == 0 &&     \
   (block_k) % FCL_DECODE_KEY_GROUPS(wg, lanes) == 0 && ((lanes) & ((lanes) - 1)) == 0)
/* Whether q is read from local memory at each use (beyond 256 columns:
 * DeepSeek's 576), not kept in registers beside the accumulator. */
#define FCL_DECODE_Q_IN_LOCAL(hd) ((hd) > 256)
/* A key group's row state: the accumulator, then m and l. */
#define FCL_DECODE_STATE_FLOATS(hd) ((hd) + 2)
/* Each key group's states in floats; where q is read from local memory
 * (FCL_DECODE_Q_IN_LOCAL) they take its place once the keys are done. */
#define FCL_DECODE_STATES_FLOATS(hd, rows, wg, lanes) \
  (FCL_DECODE_KEY_GROUPS(wg, lanes) * (rows) * FCL_DECODE_STATE_FLOATS(hd))
#define FCL_DECODE_Q_AND_STATES_FLOATS(hd, rows, wg, lanes)                         \
  (FCL_DECODE_Q_IN_LOCAL(hd)                                                        \
       ? ((rows) * (hd) > FCL_DECODE_STATES_FLOATS(hd, rows, wg, lanes)             \
              ? (rows) * (hd)                                                       \
              : (FCL_DECODE_STATES_FLOATS(hd, rows, wg, lanes) + 3) / 4 * 4)        \
       : (rows) * (hd) + FCL_DECODE_STATES_FLOATS(hd, rows, wg, lanes))
/* Q in floats, each key group's states, and without shuffles the lanes'
 * partial dot products. */
#define FCL_DECODE_LOCAL_BYTES(hd, rows, block_k, wg, lanes, sums_by_shuffle)       \
  (4 * (FCL_DECODE_Q_AND_STATES_FLOATS(hd, rows, wg, lanes) +                      \
        ((sums_by_shuffle) ? 0 : (wg) * FCL_DECODE_KEYS_PER_GROUP(block_k, wg, lanes) * (rows))))

/* ---- DECODE_MMA: flash_fwd_decode_mma.cl -----------------------------------
 * Tunables: HEAD_DIM_MAX (hd, a multiple of 32 up to 128), BLOCK_Q (rows, at
 * most 16), WARPS (each its own 16 keys a step). */
#define FCL_DECODE_MMA_WARP_KEYS 16
/* The widest K or V row of flash_fwd_decode_mma.cl; wider rows take
 * flash_fwd_decode_wide.cl (below). */
#define FCL_DECODE_MMA_NARROW_MAX 128
/* Q in the storage type, each warp's states, and emulated the products'
 * scratch and a float per work-item. */
#define FCL_DECODE_MMA_LOCAL_BYTES(hd, rows, warps, emulate)             \
  ((rows) * (hd) * 2 + (warps) * (rows) * FCL_DECODE_STATE_FLOATS(hd) * 4 + \
   ((emulate) ? FCL_MMA_EMULATE_BYTES(warps) + 32 * (warps) * 4 : 0))

/* The same family's kernel beyond 128 columns (flash_fwd_decode_wide.cl):
 * HEAD_DIM_MAX (hd), HEAD_DIM_V_MAX, BLOCK_Q (rows, a multiple of 16),
 * WARPS; tiles of FCL_DECODE_WIDE_BLOCK_K keys. Q's rows are 16 elements
 * longer than hd (a k-step's 8-byte reads of eight rows in two
 * wavefronts), P's rows 8 longer than a tile. */
#define FCL_DECODE_WIDE_BLOCK_K 128
#define FCL_DECODE_WIDE_Q_LD(hd) ((hd) + 16)
/* Q (then the split merge's LSEs: FCL_DECODE_WIDE_STAGE_FLOATS a row), P in
 * the storage type, each warp's row maxima, and emulated the products'
 * scratch and a float per work-item. */
#define FCL_DECODE_WIDE_STAGE_FLOATS(hd) (FCL_DECODE_WIDE_Q_LD(hd) / 2)
#define FCL_DECODE_WIDE_LOCAL_BYTES(hd, rows, warps, emulate)                         \
  ((rows) * FCL_DECODE_WIDE_Q_LD(hd) * 2 + (rows) * (FCL_DECODE_WIDE_BLOCK_K + 8) * 2 + \
   (warps) * (rows) * 4 +                                                             \
   ((emulate) ? FCL_MMA_EMULATE_BYTES(warps) + 32 * (warps) * 4 : 0))

#endif
