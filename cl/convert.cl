/*
 * convert.cl — tensors between the storage type and float, through the
 * same LOAD and STORE macros as every other kernel (common.cl): the naive
 * algorithm runs bf16 through its f32 path with them (naive.c), and the
 * tests run every 16-bit pattern through them to check the conversions.
 *
 *   convert_to_f32    y[i] = float(x[i])            (exact for f16 and bf16)
 *   convert_from_f32  y[i] = x[i] rounded to nearest even
 *
 * Each work-item converts CONVERT_WIDTH consecutive elements: 4 with the
 * vector macros (vload_half4 and friends) and a scalar tail, or 1 with the
 * scalar macros only.
 */

#ifndef CONVERT_WIDTH
#define CONVERT_WIDTH 4  // elements per work-item: 4 (vector access) or 1
#endif
#if CONVERT_WIDTH != 1 && CONVERT_WIDTH != 4
#error "CONVERT_WIDTH must be 1 or 4"
#endif

/* y[j] = x[j] for this work-item's elements below n. The loads and stores
 * passed in decide which side is the storage type. */
#if CONVERT_WIDTH == 4
#define CONVERT_ITEMS(load4, load1, store4, store1) \
  do {                                               \
    const ulong i = (ulong)get_global_id(0) * 4;     \
    if (i + 4 <= n) {                                \
      const float4 v = load4(x, i);                  \
      store4(y, i, v);                               \
    } else {                                         \
      for (ulong j = i; j < n; ++j) {                \
        const float v = load1(x, j);                 \
        store1(y, j, v);                             \
      }                                              \
    }                                                \
  } while (0)
#else
#define CONVERT_ITEMS(load4, load1, store4, store1) \
  do {                                               \
    const ulong i = get_global_id(0);                \
    if (i < n) {                                     \
      const float v = load1(x, i);                   \
      store1(y, i, v);                               \
    }                                                \
  } while (0)
#endif

__kernel void convert_to_f32(__global const store_t *x,  // [n], storage type
                             __global float *y,          // [n]
                             const ulong n
                             FCL_IO_PARAM) {
  FCL_IO_INIT;
  CONVERT_ITEMS(LOAD4, LOAD1, STORE4_F32, STORE_F32);
  FCL_IO_COMMIT();
}

__kernel void convert_from_f32(__global const float *x,  // [n]
                               __global store_t *y,      // [n], storage type
                               const ulong n
                               FCL_IO_PARAM) {
  FCL_IO_INIT;
  CONVERT_ITEMS(LOAD4_F32, LOAD_F32, STORE4, STORE1);
  FCL_IO_COMMIT();
}

/* ---- tensor views <-> packed tensors ---------------------------------------
 * The naive algorithm works on packed [tokens][heads][head_dim] copies
 * where it widens bf16 or stages an output, and the caller's tensors may
 * be any view (params.h): these move whole tensors between the two.
 *   view_to_packed  y (packed, float with PACKED_F32, else the storage
 *                   type) = x (a view, storage type)
 *   packed_to_view  y (a view, storage type) = x (packed), rounding to
 *                   nearest even into a 16-bit type
 * Element e of the packed tensor is token e / (heads head_dim) (a batch
 * entry's tokens counted from batch * seqlen, unless ragged), head, column;
 * CONVERT_WIDTH consecutive columns per work-item (4: the view's rows and
 * head_dim are multiples of 4 elements). */
#ifndef PACKED_F32
#define PACKED_F32 1  // 1: the packed side is float; 0: the storage type
#endif
#if PACKED_F32
#define PACKED_T float
#define PACKED_LOAD4 LOAD4_F32
#define PACKED_LOAD1 LOAD_F32
#define PACKED_STORE4 STORE4_F32
#define PACKED_STORE1 STORE_F32
#else
#define PACKED_T store_t
#define PACKED_LOAD4 LOAD4
#define PACKED_LOAD1 LOAD1
#define PACKED_STORE4 STORE4
#define PACKED_STORE1 STORE1
#endif

/* The view's element for packed element e (a multiple of CONVERT_WIDTH). */
inline size_t view_element(const fcl_view view, const ulong e, const int heads,
                           const int head_dim, const int seqlen, const int ragged) {
  const ulong row = e / head_dim;
  const int c = (int)(e - row * head_dim), h = (int)(row % heads);
  const ulong token = row / heads;
  const int b = ragged ? 0 : (int)(token / seqlen);
  const int t = (int)(ragged ? token : token % seqlen);
  return fcl_at(view, b, t, h) + c;
}

#define VIEW_PARAMS                                                             \
  const fcl_view view, const ulong n, const int heads, const int head_dim,      \
      const int seqlen, const int ragged

#if PAGED
/* A paged pool's element for packed element e of K or V (the naive
 * algorithm's gather): entry b of the block table gives the page of token
 * t, clamped into the pool as the flash kernels clamp it (blocks.cl). */
#define PAGE_PARAMS \
  , __global const int *pages, const ulong table_batch, const int page_size, const int num_pages
inline size_t paged_element(const fcl_view view, const ulong e, const int heads,
                            const int head_dim, const int seqlen, __global const int *pages,
                            const ulong table_batch, const int page_size,
                            const int num_pages IO_LOADS) {
  IO_HELPER_INIT;
  const ulong row = e / head_dim;
  const int c = (int)(e - row * head_dim), h = (int)(row % heads);
  const ulong token = row / heads;
  const int b = (int)(token / seqlen), t = (int)(token % seqlen);
  const int entry = FCL_COUNTED_LOAD(4, pages[(size_t)b * table_batch + t / page_size]);
  IO_HELPER_LOADS_DONE();
  const int page = clamp(entry, 0, num_pages - 1);
  return view.offset + (size_t)page * view.batch + (size_t)(t % page_size) * view.seq +
         (size_t)h * view.head + c;
}
#else
#define PAGE_PARAMS
#endif

/* The view's side: the storage type, or a quantized K or V cache (the
 * naive algorithm's dequantising gather), whose rows are bytes read by
 * column through common.cl's K/V loads. */
#if FCL_KV_DTYPE
#define VIEW_T kv_t
#define VIEW_LOAD4(x, at, c) KV_LOAD4((x) + (at) - (c), c)
#define VIEW_LOAD1(x, at, c) KV_LOAD1((x) + (at) - (c), c)
#else
#define VIEW_T store_t
#define VIEW_LOAD4(x, at, c) LOAD4(x, at)
#define VIEW_LOAD1(x, at, c) LOAD1(x, at)
#endif

__kernel void view_to_packed(__global const VIEW_T *x, __global PACKED_T *y,
                             VIEW_PARAMS PAGE_PARAMS FCL_IO_PARAM) {
  FCL_IO_INIT;
  const ulong e = (ulong)get_global_id(0) * CONVERT_WIDTH;
  if (e < n) {
#if PAGED
    const size_t at = paged_element(view, e, heads, head_dim, seqlen, pages, table_batch,
                                    page_size, num_pages IO_LOADS_ARG);
#else
    const size_t at = view_element(view, e, heads, head_dim, seqlen, ragged);
#endif
    const int c = (int)(e % (ulong)head_dim);
    (void)c;
#if CONVERT_WIDTH == 4
    const float4 v = VIEW_LOAD4(x, at, c);
    PACKED_STORE4(y, e, v);
#else
    const float v = VIEW_LOAD1(x, at, c);
    PACKED_STORE1(y, e, v);
#endif
  }
  FCL_IO_COMMIT();
}

__kernel void packed_to_view(__global const PACKED_T *x, __global store_t *y,
                             VIEW_PARAMS FCL_IO_PARAM) {
  FCL_IO_INIT;
  const ulong e = (ulong)get_global_id(0) * CONVERT_WIDTH;
  if (e < n) {
    const size_t at = view_element(view, e, heads, head_dim, seqlen, ragged);
#if CONVERT_WIDTH == 4
    const float4 v = PACKED_LOAD4(x, e);
    STORE4(y, at, v);
#else
    const float v = PACKED_LOAD1(x, e);
    STORE1(y, at, v);
#endif
  }
  FCL_IO_COMMIT();
}
