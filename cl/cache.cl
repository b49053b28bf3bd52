/*
 * cache.cl — appending new K and V rows to a KV cache
 * (fcl_kv_cache_append): each work-item copies four columns of one row of
 * K and of V, bit for bit, from the new rows to the cache's row
 * lens[b] + token. A row of either goes to one place only, so work-items
 * never touch the same element. With PAGED the caches are pools of pages
 * and `pages` the block table: the row goes to its token's page; a row
 * whose entry names no page of the pool is not written (the host checks
 * the entries first unless told not to: fcl_context_set_block_table_checks),
 * so that a bad entry never writes into another sequence's page.
 */
#ifndef PAGED
#define PAGED 0
#endif
#if PAGED
#define PAGES_PARAM , __global const int *pages
#else
#define PAGES_PARAM
#endif

#if FCL_DTYPE == 0
typedef uint raw_t;
typedef uint4 raw4_t;
#else
typedef ushort raw_t;
typedef ushort4 raw4_t;
#endif
#define RAW_SIZE ((ulong)sizeof(raw_t))

/* Where work-item `id` of an append of `chunk` columns a work-item reads
 * and writes: its first column c; the new rows' elements from c (src_k,
 * src_v) and the caches' rows (dst_k, dst_v: their starts, the token's
 * page when PAGED); live 0 past the launch's items, in_pool 0 for a page
 * outside the pool. */
typedef struct append_at {
  ulong c, src_k, src_v, dst_k, dst_v;
  int live, in_pool;
} append_at;

inline append_at append_locate(const fcl_append_params p, const ulong id, const ulong chunk,
                               __global const int *lens PAGES_PARAM IO_LOADS) {
  IO_HELPER_INIT;
  append_at a = {0, 0, 0, 0, 0, 0, 0};
  const ulong chunks = (p.head_dim + chunk - 1) / chunk;
  if (id >= p.batch * p.new_tokens * p.heads * chunks) return a;
  const ulong c = id % chunks * chunk, row = id / chunks;
  const ulong h = row % p.heads, bt = row / p.heads;
  const ulong t = bt % p.new_tokens, b = bt / p.new_tokens;
  ulong to = (ulong)FCL_COUNTED_LOAD(4, lens[b]) + t, at_b = b;
  a.live = a.in_pool = 1;
#if PAGED  /* the page of token `to`, and its place in it */
  const int entry = FCL_COUNTED_LOAD(4, pages[b * p.table_batch + to / p.page_size]);
  a.in_pool = entry >= 0 && entry < (int)p.num_pages;
  at_b = a.in_pool ? (ulong)entry : 0;
  to %= p.page_size;
#endif
  a.c = c;
  a.src_k = p.k_new.offset + b * p.k_new.batch + t * p.k_new.seq + h * p.k_new.head + c;
  a.src_v = p.v_new.offset + b * p.v_new.batch + t * p.v_new.seq + h * p.v_new.head + c;
  a.dst_k = p.k_cache.offset + at_b * p.k_cache.batch + to * p.k_cache.seq + h * p.k_cache.head;
  a.dst_v = p.v_cache.offset + at_b * p.v_cache.batch + to * p.v_cache.seq + h * p.v_cache.head;
  IO_HELPER_LOADS_DONE();
  return a;
}
#if PAGED
#define PAGES_ARG , pages
#else
#define PAGES_ARG
#endif

__kernel void kv_append(__global const raw_t *k_new, __global const raw_t *v_new,
                        __global raw_t *k_cache, __global raw_t *v_cache,
                        __global const int *lens PAGES_PARAM,
                        const fcl_append_params p FCL_IO_PARAM) {
  FCL_IO_INIT;
  const append_at a = append_locate(p, get_global_id(0), 4, lens PAGES_ARG IO_LOADS_ARG);
  if (!a.live) return;
  const int in_pool = a.in_pool;
  const ulong c = a.c, src_k = a.src_k, src_v = a.src_v, dst_k = a.dst_k + c,
              dst_v = a.dst_v + c;
  if (in_pool && p.vec4) {
    const raw4_t kx = FCL_COUNTED_LOAD(4 * RAW_SIZE, vload4(0, k_new + src_k));
    const raw4_t vx = FCL_COUNTED_LOAD(4 * RAW_SIZE, vload4(0, v_new + src_v));
    FCL_COUNT_STORE(4 * RAW_SIZE);
    vstore4(kx, 0, k_cache + dst_k);
    FCL_COUNT_STORE(4 * RAW_SIZE);
    vstore4(vx, 0, v_cache + dst_v);
  } else if (in_pool) {
    for (ulong i = 0; i < 4 && c + i < p.head_dim; ++i) {
      const raw_t kx = FCL_COUNTED_LOAD(RAW_SIZE, k_new[src_k + i]);
      const raw_t vx = FCL_COUNTED_LOAD(RAW_SIZE, v_new[src_v + i]);
      FCL_COUNT_STORE(RAW_SIZE);
      k_cache[dst_k + i] = kx;
      FCL_COUNT_STORE(RAW_SIZE);
      v_cache[dst_v + i] = vx;
    }
  }
  FCL_IO_COMMIT();
}

/* ---- appending to a quantized cache (FCL_KV_DTYPE, kvquant.h) ---------------
 * kv_append_quant: each work-item quantises APPEND_CHUNK columns of one
 * row of K and of V (a block of 32 in the block forms, four fp8 codes)
 * from the new rows (the storage type, widened to float) into the cache's
 * bytes, as include/flashcl.h writes the forms down. */
#if FCL_KV_DTYPE != 0
#if FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2
#define APPEND_CHUNK FCL_KV_BLOCK
#else
#define APPEND_CHUNK 4
#endif

inline void quantize_chunk(__global const store_t *src, __global uchar *row, const int c0,
                           const int head_dim, const int vec4, const float inv IO_LOADS
                               IO_STORES) {
  IO_HELPER_INIT;
  float x[APPEND_CHUNK];
  for (int j = 0; j < APPEND_CHUNK; j += 4) {
    float4 v = (float4)(0.0f);
    if (vec4) {
      v = LOAD4(src, j);
    } else {
      if (c0 + j + 0 < head_dim) v.x = LOAD1(src, j + 0);
      if (c0 + j + 1 < head_dim) v.y = LOAD1(src, j + 1);
      if (c0 + j + 2 < head_dim) v.z = LOAD1(src, j + 2);
      if (c0 + j + 3 < head_dim) v.w = LOAD1(src, j + 3);
    }
    vstore4(v, 0, x + j);
  }
#if FCL_KV_DTYPE == 1 || FCL_KV_DTYPE == 2
  const int qmax = FCL_KV_DTYPE == 1 ? FCL_KV_Q8_MAX : FCL_KV_Q4_MAX;
  float amax = 0.0f;
  for (int j = 0; j < APPEND_CHUNK; ++j)  /* a NaN or inf makes amax inf: the scale NaN */
    amax = fabs(x[j]) <= FLT_MAX ? fmax(amax, fabs(x[j])) : INFINITY;
  const uint bits = fcl_kv_block_scale(amax, qmax);
  const float d = fcl_f16_to_float(bits);
  __global uchar *b = row + (size_t)(c0 / FCL_KV_BLOCK) *
                               (FCL_KV_DTYPE == 1 ? FCL_KV_Q8_BYTES : FCL_KV_Q4_BYTES);
  b[0] = (uchar)(bits & 0xffu);  /* little-endian */
  b[1] = (uchar)(bits >> 8);
#if FCL_KV_DTYPE == 1
  for (int j = 0; j < APPEND_CHUNK; ++j) b[2 + j] = (uchar)(char)fcl_kv_block_quant(x[j], d, qmax);
  FCL_COUNT_STORE(FCL_KV_Q8_BYTES);
#else
  for (int j = 0; j < APPEND_CHUNK; j += 2)
    b[2 + j / 2] = (uchar)((fcl_kv_block_quant(x[j], d, qmax) + 8) |
                           ((fcl_kv_block_quant(x[j + 1], d, qmax) + 8) << 4));
  FCL_COUNT_STORE(FCL_KV_Q4_BYTES);
#endif
#else
  for (int j = 0; j < APPEND_CHUNK && c0 + j < head_dim; ++j) {
    row[c0 + j] = (uchar)fcl_float_to_fp8(x[j] * inv, FCL_KV_DTYPE == 3);
    FCL_COUNT_STORE(1);
  }
#endif
  IO_HELPER_LOADS_DONE();
  IO_HELPER_STORES_DONE();
}

__kernel void kv_append_quant(__global const store_t *k_new, __global const store_t *v_new,
                              __global uchar *k_cache, __global uchar *v_cache,
                              __global const int *lens PAGES_PARAM,
                              const fcl_append_params p FCL_IO_PARAM) {
  FCL_IO_INIT;
  const append_at a = append_locate(p, get_global_id(0), APPEND_CHUNK, lens PAGES_ARG IO_LOADS_ARG);
  if (!a.live) return;
  if (a.in_pool) {
    quantize_chunk(k_new + a.src_k, k_cache + a.dst_k, (int)a.c, (int)p.head_dim, (int)p.vec4,
                   p.k_inv IO_LOADS_ARG IO_STORES_ARG);
    quantize_chunk(v_new + a.src_v, v_cache + a.dst_v, (int)a.c, (int)p.head_dim, (int)p.vec4,
                   p.v_inv IO_LOADS_ARG IO_STORES_ARG);
  }
  FCL_IO_COMMIT();
}
#endif
