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

__kernel void kv_append(__global const raw_t *k_new, __global const raw_t *v_new,
                        __global raw_t *k_cache, __global raw_t *v_cache,
                        __global const int *lens PAGES_PARAM,
                        const fcl_append_params p FCL_IO_PARAM) {
  FCL_IO_INIT;
  const ulong chunks = (p.head_dim + 3) / 4;
  const ulong id = get_global_id(0);
  if (id >= p.batch * p.new_tokens * p.heads * chunks) return;
  const ulong c = id % chunks * 4, row = id / chunks;
  const ulong h = row % p.heads, bt = row / p.heads;
  const ulong t = bt % p.new_tokens, b = bt / p.new_tokens;
  ulong to = (ulong)FCL_COUNTED_LOAD(4, lens[b]) + t, at_b = b;
  int in_pool = 1;
#if PAGED  /* the page of token `to`, and its place in it */
  const int entry = FCL_COUNTED_LOAD(4, pages[b * p.table_batch + to / p.page_size]);
  in_pool = entry >= 0 && entry < (int)p.num_pages;
  at_b = in_pool ? (ulong)entry : 0;
  to %= p.page_size;
#endif
  const ulong src_k = p.k_new.offset + b * p.k_new.batch + t * p.k_new.seq + h * p.k_new.head + c;
  const ulong src_v = p.v_new.offset + b * p.v_new.batch + t * p.v_new.seq + h * p.v_new.head + c;
  const ulong dst_k =
      p.k_cache.offset + at_b * p.k_cache.batch + to * p.k_cache.seq + h * p.k_cache.head + c;
  const ulong dst_v =
      p.v_cache.offset + at_b * p.v_cache.batch + to * p.v_cache.seq + h * p.v_cache.head + c;
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
