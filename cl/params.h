/*
 * params.h — one attention problem as every flash kernel receives it, and
 * the mask, written once for the host and the kernels: the library's C
 * sources include this file, and every kernel program is compiled with
 * its text in front (host/run/program.c). So the parameter block the host
 * fills (host/problem/args.c) is the struct the kernels read, and the I/O model
 * and the tests see exactly the keys the kernels visit.
 *
 * The block is passed by value, with the buffers as separate arguments
 * (FCL_ATTENTION_BUFFERS). Its fields are 8-byte ones first, then 4-byte
 * ones, to a multiple of 8: the same layout in C and OpenCL C
 * (tests/test_args.c checks each field on the device).
 */
#ifndef FCL_PARAMS_H
#define FCL_PARAMS_H

#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)  /* OpenCL C */
#define FCL_U64 ulong
#define FCL_I64 long
#define FCL_I32 int
#define FCL_F32 float
#define FCL_INLINE inline
#else
#define FCL_U64 cl_ulong
#define FCL_I64 cl_long
#define FCL_I32 cl_int
#define FCL_F32 cl_float
#define FCL_INLINE static inline
#endif

/* Where a tensor's elements are, in elements of the storage type: element
 * (b, token, h, c) at offset + b * batch + token * seq + h * head + c.
 * Ragged batches pack their sequences' tokens: batch is 0 and token
 * counts from the start of the tensor. */
typedef struct fcl_view {
  FCL_U64 offset, batch, seq, head;
} fcl_view;

typedef struct fcl_params {
  fcl_view q, k, v, o, dout, dq, dk, dv;
  /* A split forward that merges in its own launch (MERGE_LAST_SPLIT): the
   * caller's O, which a block's last split writes; o is then the splits'
   * packed partial O. */
  fcl_view o_merged;
  /* LSE and the backward's D = rowsum(dO * O), floats: row i of (b, h)
   * at b * lse_batch + h * lse_head + token (token as above). */
  FCL_U64 lse_batch, lse_head;
  /* Query and key tokens in all (ragged: the last cu_seqlens; else batch
   * * seqlen). */
  FCL_U64 tokens_q, tokens_k;
  /* Split-KV forward: split s of the keys writes its partial O and LSE
   * o_split and lse_split elements past split 0's (0 without splits). */
  FCL_U64 o_split, lse_split;
  /* A paged cache (cl/blocks.cl, PAGED): entries between two sequences'
   * rows of the block table (fcl_attention_desc.pages_per_seq); K and V's
   * views are pools, whose batch stride is between pages. 0 when not paged. */
  FCL_U64 table_batch;
  FCL_I32 batch, heads_q, heads_kv, head_dim;
  FCL_I32 seqlen_q, seqlen_k;  /* the longest sequences */
  /* Query i of a sequence of nq queries and nk keys sees key j iff
   * i + nk - nq - window_left <= j <= i + nk - nq + window_right; -1: no
   * bound on that side (causal is window_right 0). */
  FCL_I32 window_left, window_right;
  FCL_I32 ragged;        /* 1: per-sequence starts and lengths in `seqs` */
  FCL_I32 work_items;    /* entries of the work list (ragged), else 0 */
  FCL_I32 vec4;          /* 1: head_dim and every view a multiple of 4 elements */
  FCL_I32 alibi_batch;   /* floats between two batches' slopes (0: shared) */
  /* The forward's key splits: split s sees keys [s split_keys, (s + 1)
   * split_keys) of each row's; 1 and INT_MAX when not split. */
  FCL_I32 splits, split_keys;
  /* Exponentials are exp2(x * exp_factor) of score differences x, and
   * LSE = m * lse_factor + log(l) of the running max m: scale log2(e) and
   * scale for plain scores (kept unscaled), 1 and ln(2) for transformed
   * ones (kept as logit * log2(e)). */
  FCL_F32 scale, exp_factor, lse_factor;
  FCL_F32 softcap;       /* logits become softcap tanh(logit / softcap); 0: off */
  /* Paged: tokens per page, and pages in each pool (table entries are
   * clamped below it). 0 when not paged. */
  FCL_I32 page_size, num_pages;
  /* A quantized KV cache (FCL_KV_DTYPE): its fcl_kv_dtype, and the fp8
   * forms' V scale, by which a row's output is multiplied (K's is folded
   * into scale); 0 and 1 otherwise. */
  FCL_I32 kv_dtype;
  FCL_F32 v_scale;
  /* A value head size of its own: V, O, dO and dV have head_dim_v columns
   * (fcl_attention_desc.head_dim_v resolved: head_dim when it is 0), and
   * a 4-byte field that keeps the struct's end on 8 bytes. */
  FCL_I32 head_dim_v, pad_;
  /* 24 fields of 4 bytes: the struct ends on 8 bytes (args.c asserts it) */
} fcl_params;

/* The merge of attention states (cl/merge.cl, host/run/merge.c): rows are
 * (batch entry, token, head), row r = (b seqlen + t) heads + h; part p's
 * O by o_parts moved p * o_part_stride, its LSE at p * lse_part_stride +
 * (b heads + h) seqlen + t. All fields 8 bytes: one layout everywhere. */
typedef struct fcl_merge_params {
  fcl_view o_parts, o;
  FCL_U64 o_part_stride, lse_part_stride;
  FCL_U64 rows, parts, seqlen, heads, head_dim;
  FCL_U64 vec4;  /* 1: head_dim and both views' offsets and strides multiples of 4 */
} fcl_merge_params;

/* Appending rows to a KV cache (cl/cache.cl, host/run/cache.c): rows (b,
 * token, head) of the new K and V, copied to the cache's token
 * lens[b] + token. All fields 8 bytes. */
typedef struct fcl_append_params {
  fcl_view k_new, v_new, k_cache, v_cache;
  FCL_U64 batch, new_tokens, heads, head_dim;
  FCL_U64 vec4;  /* 1: head_dim and every view's offset and strides multiples of 4 */
  /* A paged cache (PAGED): the block table's row stride, tokens per page
   * and pages per pool, as in fcl_params; the caches' views are pools. */
  FCL_U64 table_batch, page_size, num_pages;
  /* A quantized cache's fp8 forms: 1 / k_scale and 1 / v_scale, rounded
   * to float (kvquant.h; 1 otherwise). */
  FCL_F32 k_inv, v_inv;
} fcl_append_params;

/* The buffers every attention kernel takes, in argument order, before the
 * parameter block (and the I/O counter when counting): X(name, element
 * type). A kernel ignores those it does not use, which the host passes as
 * NULL. The host's list of cl_mem (host/problem/args.c) is made from the same
 * macro, so the two cannot disagree. */
#define FCL_ATTENTION_BUFFERS(X)                                              \
  X(q, const store_t)     /* [tokens_q][heads_q][head_dim] by p.q */          \
  X(k, const kv_t)        /* [tokens_k][heads_kv][head_dim] by p.k (kv_t:  */ \
  X(v, const kv_t)        /* by p.v      common.cl, FCL_KV_DTYPE)         */ \
  X(o, store_t)           /* as q, by p.o */                                  \
  X(lse, float)           /* by p.lse_batch, p.lse_head */                    \
  X(dout, const store_t)  /* as q, by p.dout */                               \
  X(dsum, float)          /* D = rowsum(dO * O), as lse */                    \
  X(dq, store_t)          /* as q, by p.dq */                                 \
  X(dk, store_t)          /* as k, by p.dk */                                 \
  X(dv, store_t)          /* as k, by p.dv */                                 \
  X(alibi, const float)   /* ALiBi slopes [batch or 1][heads_q] */            \
  X(seqs, const int)      /* ragged: per batch q_start, nq, k_start, nk */   \
  X(work, const int)      /* ragged: (batch, block) per work item */          \
  X(pages, const int)     /* paged: the block table [batch][pages_per_seq] */ \
  X(o_merged, store_t)    /* MERGE_LAST_SPLIT: the caller's O, by p.o_merged */\
  X(lse_merged, float)    /* ... and its LSE, as lse (NULL: none wanted) */   \
  X(arrivals, int)        /* ... splits done per block; 0 between launches */ \
  /* attention sinks */                                                       \
  X(sinks, const float)   /* [heads_q] (NULL: none): cl/common.cl's row end */\
  X(dsinks, float)        /* the backward's gradient of them, [heads_q] */    \
  X(dsink_parts, float)   /* ... its per-head partial sums (flash_bwd_pre.cl) */

/* ---- the mask ----------------------------------------------------------
 * Every visibility decision of the library comes from these three
 * functions: the keys one query row sees, the keys a block of rows needs
 * and the part every row of it sees (tile loops and their masking), and
 * the rows a block of keys needs (the backward's key blocks). Bounds are
 * computed in 64 bits and clamped, so no window or length overflows. */

/* Keys [*lo, *hi) that query `row` of a sequence of nq queries and nk keys
 * sees; empty (lo >= hi) when it sees none. */
FCL_INLINE void fcl_row_keys(FCL_I32 nq, FCL_I32 nk, FCL_I32 wl, FCL_I32 wr, FCL_I32 row,
                             FCL_I32 *lo, FCL_I32 *hi) {
  /* An unbounded side is its end of the keys as it is, unclamped, so that
   * a kernel with the window pinned (cl/common.cl, WINDOW) folds it. */
  const FCL_I64 at = (FCL_I64)row + nk - nq;  /* the diagonal's key */
  const FCL_I64 a = at - wl, b = at + wr + 1;
  *lo = wl < 0 ? 0 : (FCL_I32)(a < 0 ? 0 : a > nk ? nk : a);
  *hi = wr < 0 ? nk : (FCL_I32)(b < 0 ? 0 : b > nk ? nk : b);
}

/* For query rows [q0, q0 + rows) (rows >= 1, within the sequence): the
 * keys any of them sees, [*lo, *hi), and those all of them see,
 * [*full_lo, *full_hi) (empty if none). Both bounds grow with the row. */
FCL_INLINE void fcl_block_keys(FCL_I32 nq, FCL_I32 nk, FCL_I32 wl, FCL_I32 wr, FCL_I32 q0,
                               FCL_I32 rows, FCL_I32 *lo, FCL_I32 *hi, FCL_I32 *full_lo,
                               FCL_I32 *full_hi) {
  FCL_I32 first_lo, first_hi, last_lo, last_hi;
  fcl_row_keys(nq, nk, wl, wr, q0, &first_lo, &first_hi);
  fcl_row_keys(nq, nk, wl, wr, q0 + rows - 1, &last_lo, &last_hi);
  *lo = first_lo;
  *hi = last_hi > first_lo ? last_hi : first_lo;
  *full_lo = last_lo;
  *full_hi = first_hi;
}

/* For keys [k0, k0 + keys) (keys >= 1, within the sequence): the query
 * rows that see any of them, [*lo, *hi), and those that see all of them,
 * [*full_lo, *full_hi) (empty if none). */
FCL_INLINE void fcl_block_queries(FCL_I32 nq, FCL_I32 nk, FCL_I32 wl, FCL_I32 wr, FCL_I32 k0,
                                  FCL_I32 keys, FCL_I32 *lo, FCL_I32 *hi, FCL_I32 *full_lo,
                                  FCL_I32 *full_hi) {
  /* Row i sees key j iff j - diag - wr <= i <= j - diag + wl (diag = nk - nq). */
  const FCL_I64 diag = (FCL_I64)nk - nq, k_last = (FCL_I64)k0 + keys - 1;
  FCL_I64 a = wr < 0 ? 0 : k0 - diag - wr, b = wl < 0 ? nq : k_last - diag + wl + 1;
  FCL_I64 fa = wr < 0 ? 0 : k_last - diag - wr, fb = wl < 0 ? nq : k0 - diag + wl + 1;
  a = a < 0 ? 0 : a > nq ? nq : a;
  b = b < a ? a : b > nq ? nq : b;
  fa = fa < 0 ? 0 : fa > nq ? nq : fa;
  fb = fb < fa ? fa : fb > nq ? nq : fb;
  *lo = (FCL_I32)a;
  *hi = (FCL_I32)b;
  *full_lo = (FCL_I32)fa;
  *full_hi = (FCL_I32)fb;
}

#endif /* FCL_PARAMS_H */
