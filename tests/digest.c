/*
 * flashcl-digest — the flash outputs of a fixed set of problems, as hashes.
 *
 * A refactor that must not change a single bit of any result runs this
 * before and after, on the same device, and diffs the two outputs: every
 * kernel family the device can run (the matrix-instruction ones emulated
 * off NVIDIA), each storage type, masks, softcap and ALiBi, GQA, a ragged
 * batch, a paged decode and key splits. The inputs come from a fixed seed,
 * so the same build gives the same lines on the same device.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl.h"
#include "hostdata.h"

typedef struct digest_case {
  const char *name;
  size_t b, hq, hkv, nq, nk, d;
  unsigned dtype;  /* fcl_dtype */
  int causal, window_left;
  float softcap;
  int alibi;
  unsigned kernel;  /* fcl_flash_kernel */
  unsigned splits;
  int varlen;        /* ragged batch of b sequences of lengths up to nq */
  size_t page_size;  /* > 0: K and V in a paged cache with this page */
  int backward;
} digest_case;

enum { F32 = FCL_DTYPE_F32, F16 = FCL_DTYPE_F16, BF16 = FCL_DTYPE_BF16 };
enum { AUTO = FCL_FLASH_KERNEL_AUTO, SIMT = FCL_FLASH_KERNEL_SIMT, MMA = FCL_FLASH_KERNEL_MMA,
       DEC = FCL_FLASH_KERNEL_DECODE, DECMMA = FCL_FLASH_KERNEL_DECODE_MMA,
       CPU = FCL_FLASH_KERNEL_CPU };

/* name, b, hq, hkv, nq, nk, d, dtype, causal, window_left, softcap, alibi,
 * kernel, splits, varlen, page, backward */
static const digest_case cases[] = {
    {"auto-f32", 2, 4, 4, 70, 90, 64, F32, 0, -1, 0, 0, AUTO, 0, 0, 0, 1},
    {"auto-f16-causal", 2, 4, 2, 70, 90, 64, F16, 1, -1, 0, 0, AUTO, 0, 0, 0, 1},
    {"simt-f32", 1, 4, 4, 65, 97, 64, F32, 0, -1, 0, 0, SIMT, 0, 0, 0, 1},
    {"simt-f32-causal-gqa", 2, 8, 2, 64, 80, 128, F32, 1, -1, 0, 0, SIMT, 0, 0, 0, 1},
    {"simt-f16-window", 1, 4, 4, 96, 96, 64, F16, 1, 20, 0, 0, SIMT, 0, 0, 0, 1},
    {"simt-bf16-softcap-alibi", 1, 4, 2, 50, 70, 32, BF16, 1, -1, 5.0f, 1, SIMT, 0, 0, 0, 1},
    {"simt-f32-d80", 1, 2, 2, 40, 60, 80, F32, 0, -1, 0, 0, SIMT, 0, 0, 0, 1},
    {"simt-f32-varlen", 3, 4, 2, 50, 50, 64, F32, 1, -1, 0, 0, SIMT, 0, 1, 0, 1},
    {"simt-f32-splits", 1, 4, 4, 8, 300, 64, F32, 1, -1, 0, 0, SIMT, 3, 0, 0, 0},
    {"mma-f16", 1, 4, 4, 70, 90, 64, F16, 0, -1, 0, 0, MMA, 0, 0, 0, 1},
    {"mma-bf16-causal-gqa", 1, 4, 2, 64, 96, 128, BF16, 1, -1, 0, 0, MMA, 0, 0, 0, 1},
    {"mma-f32-softcap", 1, 2, 2, 48, 64, 64, F32, 1, -1, 8.0f, 1, MMA, 0, 0, 0, 1},
    {"mma-f16-varlen", 3, 2, 2, 40, 40, 64, F16, 0, -1, 0, 0, MMA, 0, 1, 0, 1},
    {"decode-f32", 4, 8, 2, 1, 300, 64, F32, 1, -1, 0, 0, DEC, 0, 0, 0, 0},
    {"decode-f16-splits", 2, 8, 2, 2, 520, 128, F16, 1, -1, 0, 0, DEC, 4, 0, 0, 0},
    {"decode-f32-paged16", 3, 8, 2, 1, 200, 64, F32, 1, -1, 0, 0, DEC, 0, 0, 16, 0},
    {"decode-bf16-paged64-splits", 2, 4, 1, 1, 400, 64, BF16, 1, -1, 0, 0, DEC, 3, 0, 64, 0},
    {"decodemma-f16", 2, 8, 2, 1, 300, 64, F16, 1, -1, 0, 0, DECMMA, 0, 0, 0, 0},
    {"decodemma-bf16-splits-paged", 2, 16, 2, 1, 400, 128, BF16, 1, -1, 0, 0, DECMMA, 2, 0, 32, 0},
    {"cpu-f32", 1, 4, 4, 70, 90, 64, F32, 0, -1, 0, 0, CPU, 0, 0, 0, 1},
    {"cpu-f16-causal-gqa", 2, 4, 2, 64, 80, 64, F16, 1, -1, 0, 0, CPU, 0, 0, 0, 1},
    {"cpu-bf16-window-softcap", 1, 2, 2, 80, 80, 32, BF16, 1, 16, 4.0f, 1, CPU, 0, 0, 0, 1},
    {"cpu-f32-varlen", 3, 2, 1, 48, 48, 64, F32, 1, -1, 0, 0, CPU, 0, 1, 0, 1},
    {"auto-f32-paged-prefill", 2, 4, 2, 30, 160, 64, F32, 1, -1, 0, 0, AUTO, 0, 0, 32, 0},
};

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static fcl_context *ctx;

static cl_mem random_buffer(fclu_rng *rng, size_t elems, fcl_dtype dtype) {
  float *x = malloc(elems * sizeof *x);
  if (!x) return NULL;
  fclu_fill_normal(rng, x, elems, 1.0, dtype);
  cl_mem m = fclu_upload(ctx, x, elems, dtype);
  free(x);
  return m;
}

static cl_mem int_buffer(const int32_t *x, size_t n) {
  cl_int err;
  return clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                        n * sizeof *x, (void *)x, &err);
}

/* Prints one output's hash; nonzero when it could not be read. */
static int print_digest(const char *name, const char *what, cl_mem m, size_t bytes) {
  unsigned char *host = malloc(bytes ? bytes : 1);
  if (!host) return 1;
  cl_int err = clEnqueueReadBuffer(fcl_context_cl_queue(ctx), m, CL_TRUE, 0, bytes, host, 0,
                                   NULL, NULL);
  if (err == CL_SUCCESS) printf("%-30s %-4s %016" PRIx64 "\n", name, what, fnv1a(host, bytes));
  free(host);
  return err != CL_SUCCESS;
}

static int run_case(const digest_case *c) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->nq, c->nk, c->d);
  desc.dtype = (fcl_dtype)c->dtype;
  desc.causal = c->causal;
  desc.window_left = c->window_left;
  desc.softcap = c->softcap;
  fclu_rng rng;
  fclu_rng_seed(&rng, fnv1a((const unsigned char *)c->name, strlen(c->name)));
  int32_t cu[17] = {0}, lens[16] = {0}, *table = NULL;
  if (c->varlen) {
    for (size_t i = 0; i < c->b; ++i)
      cu[i + 1] = cu[i] + (int32_t)(i == 1 ? 0 : c->nq - 7 * i);  /* one empty sequence */
    desc.cu_seqlens_q = cu;
  }
  size_t num_pages = 0;
  if (c->page_size) {
    desc.page_size = c->page_size;
    desc.pages_per_seq = (c->nk + c->page_size - 1) / c->page_size;
    num_pages = c->b * desc.pages_per_seq + 3;
    desc.num_pages = num_pages;
    table = malloc(c->b * desc.pages_per_seq * sizeof *table);
    if (!table) return 1;
    for (size_t i = 0; i < c->b * desc.pages_per_seq; ++i)  /* pages out of order */
      table[i] = (int32_t)((i * 7 + 2) % num_pages);
    for (size_t i = 0; i < c->b; ++i) lens[i] = (int32_t)(c->nk - 13 * i);
    desc.seqlens_k = lens;
  }
  const size_t tokens_q = c->varlen ? (size_t)cu[c->b] : c->b * c->nq;
  const size_t kv_rows = c->page_size ? num_pages * c->page_size
                                      : (c->varlen ? tokens_q : c->b * c->nk);
  const size_t q_elems = tokens_q * c->hq * c->d, kv_elems = kv_rows * c->hkv * c->d;
  const size_t lse_elems = tokens_q * c->hq;
  const size_t es = fcl_dtype_size(desc.dtype);
  cl_mem q = random_buffer(&rng, q_elems, desc.dtype), k = random_buffer(&rng, kv_elems, desc.dtype),
         v = random_buffer(&rng, kv_elems, desc.dtype);
  cl_mem o = fclu_poisoned_buffer(ctx, q_elems * es),
         lse = fclu_poisoned_buffer(ctx, lse_elems * sizeof(float));
  cl_mem alibi = NULL, pages = NULL;
  if (c->alibi) {
    float slopes[64];
    for (size_t h = 0; h < c->hq; ++h) slopes[h] = 0.5f / (float)(h + 1);
    alibi = fclu_upload(ctx, slopes, c->hq, FCL_DTYPE_F32);
    desc.alibi_slopes = alibi;
  }
  if (table) {
    pages = int_buffer(table, c->b * desc.pages_per_seq);
    desc.block_table = pages;
  }
  fcl_plan hint = {.kernel = c->kernel, .splits = c->splits};
  int failed = fcl_context_set_flash_tiling(ctx, fcl_tiling_hint_given(&hint) ? &hint : NULL) !=
               FCL_SUCCESS;
  fcl_status st = failed ? FCL_ERROR_INVALID_ARGUMENT
                         : fcl_attention_forward(ctx, &desc, FCL_ALGO_FLASH, q, k, v, o, lse,
                                                 NULL);
  if (st != FCL_SUCCESS) {
    printf("%-30s fwd  %s: %s\n", c->name, fcl_status_str(st), fcl_context_last_error(ctx));
    failed = 1;
  } else {
    failed |= print_digest(c->name, "O", o, q_elems * es);
    failed |= print_digest(c->name, "LSE", lse, lse_elems * sizeof(float));
  }
  if (!failed && c->backward) {
    cl_mem dout = random_buffer(&rng, q_elems, desc.dtype);
    cl_mem dq = fclu_poisoned_buffer(ctx, q_elems * es), dk = fclu_poisoned_buffer(ctx, kv_elems * es),
           dv = fclu_poisoned_buffer(ctx, kv_elems * es);
    st = fcl_attention_backward(ctx, &desc, FCL_ALGO_FLASH, q, k, v, o, lse, dout, dq, dk, dv,
                                NULL);
    if (st != FCL_SUCCESS) {
      printf("%-30s bwd  %s: %s\n", c->name, fcl_status_str(st), fcl_context_last_error(ctx));
      failed = 1;
    } else {
      failed |= print_digest(c->name, "dQ", dq, q_elems * es);
      failed |= print_digest(c->name, "dK", dk, kv_elems * es);
      failed |= print_digest(c->name, "dV", dv, kv_elems * es);
    }
    clReleaseMemObject(dout);
    clReleaseMemObject(dq);
    clReleaseMemObject(dk);
    clReleaseMemObject(dv);
  }
  fflush(stdout);
  clReleaseMemObject(q);
  clReleaseMemObject(k);
  clReleaseMemObject(v);
  clReleaseMemObject(o);
  clReleaseMemObject(lse);
  if (alibi) clReleaseMemObject(alibi);
  if (pages) clReleaseMemObject(pages);
  free(table);
  return failed;
}

int main(int argc, char **argv) {
  const char *filter = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: flashcl-digest [--device SEL] [SUBSTRING]\n\n"
             "Runs a fixed set of flash problems (each kernel family, storage type,\n"
             "mask, GQA, a ragged batch, a paged decode, key splits) from fixed\n"
             "inputs and prints a 64-bit hash of every output (O, LSE, dQ, dK, dV).\n"
             "Run it before and after a change that must keep every result bit for\n"
             "bit, on the same device, and diff the two. SUBSTRING runs only the\n"
             "cases whose name holds it.\n\n"
             "Exit status: 0 when every case ran, 1 when one failed, 2 on a bad\n"
             "command line.\n");
      return 0;
    }
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      setenv("FLASHCL_DEVICE", argv[++i], 1);
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "flashcl-digest: unknown option '%s' (see --help)\n", argv[i]);
      return 2;
    } else {
      filter = argv[i];
    }
  }
  fcl_status st = fcl_context_create(getenv("FLASHCL_DEVICE"), &ctx);
  if (st != FCL_SUCCESS) {
    fprintf(stderr, "flashcl-digest: no context: %s\n", fcl_status_str(st));
    return 1;
  }
  fcl_device_info info;
  if (fcl_context_device(ctx, &info) == FCL_SUCCESS) printf("# device: %s\n", info.name);
  fcl_context_use_tuned_plans(ctx, 0);  /* the rules' plans, whatever database is there */
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (filter && !strstr(cases[i].name, filter)) continue;
    fprintf(stderr, "flashcl-digest: %s\n", cases[i].name);
    failed |= run_case(&cases[i]);
  }
  fcl_context_release(ctx);
  return failed;
}
