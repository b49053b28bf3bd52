/*
 * test_mpi.c — ring attention over MPI (flashcl_mpi.h), run under mpirun
 * with 1 to 4 ranks: on random problems whose length divides by neither
 * the rank count nor twice it, each rank's slice of the ring's O, LSE and
 * gradients, gathered on rank 0, against the float64 reference over the
 * whole sequence, within the single-device rule (at most twice the error
 * of the single-device flash call on the whole problem, plus the rule's
 * floor); the forward and the backward without the overlap
 * (FCL_MPI_NO_OVERLAP) give the same bits as with it; and with --bad, one
 * rank's bad argument (a buffer too small, a descriptor unlike rank 0's, a
 * NULL gradient in the backward) makes every rank return its error, naming
 * that rank, within 10 s. First, every block of small offsets and lengths
 * under every small window: the block's trimmed call, masked bottom-right,
 * shows exactly the (query, key) pairs the whole problem's mask does.
 * Not a Check suite: its ranks are MPI processes, not forks.
 */
#include "harness.h"
#include "ring.h" /* host/mpi: ring_block_plan */
#include "slices.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mcase {
  const char *name;
  size_t b, hq, hkv, n, d;
  fcl_dtype dtype;
  int causal, wl, wr;
  fcl_mpi_layout layout;
} mcase;

static const mcase cases[] = {
    {"f32 causal zigzag b2", 2, 4, 2, 37, 16, FCL_DTYPE_F32, 1, -1, -1, FCL_MPI_LAYOUT_ZIGZAG},
    {"f32 full contiguous", 1, 2, 2, 29, 16, FCL_DTYPE_F32, 0, -1, -1,
     FCL_MPI_LAYOUT_CONTIGUOUS},
    {"bf16 causal window 7 contiguous gqa", 1, 4, 1, 41, 16, FCL_DTYPE_BF16, 1, 7, -1,
     FCL_MPI_LAYOUT_CONTIGUOUS},
    {"f16 causal window 5 zigzag gqa b2", 2, 4, 2, 35, 8, FCL_DTYPE_F16, 1, 5, -1,
     FCL_MPI_LAYOUT_ZIGZAG},
    {"f32 window 4/3 zigzag", 1, 2, 1, 33, 16, FCL_DTYPE_F32, 0, 4, 3, FCL_MPI_LAYOUT_ZIGZAG},
};

static int ranks = 1, rank = 0;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 1 on every rank iff `ok` on every rank. */
static int all(int ok) {
  int every = 0;
  MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return every;
}

/* The whole tensor on rank 0 from every rank's slice (each element comes
 * from one rank, the others add zeros). */
static void gather(const mcase *c, size_t outer, size_t inner, float *slice, float *whole) {
  const size_t n = outer * c->n * inner;
  float *mine = calloc(n, sizeof *mine);
  fclu_slice_copy(c->layout, c->n, ranks, rank, outer, inner, 0, mine, slice);
  MPI_Reduce(mine, whole, (int)n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  free(mine);
}

static double err_of(const float *x, const double *ref, size_t n) {
  return fclu_max_abs_err(x, ref, n);
}

/* The rule: at most twice the single-device call's error, plus the floor. */
static int within(const char *what, const mcase *c, const float *ring, const float *single,
                  const double *ref, size_t n) {
  const double e_ring = err_of(ring, ref, n), e_single = err_of(single, ref, n);
  const double bound = 2 * e_single + th_err_floor(c->dtype, ref, n);
  const int ok = e_ring <= bound;
  printf("  %-4s ring %.3g single %.3g bound %.3g %s\n", what, e_ring, e_single, bound,
         ok ? "ok" : "FAIL");
  return ok;
}

static cl_mem upload_slice(fcl_context *ctx, const mcase *c, size_t heads, float *whole,
                           size_t *local_elems) {
  size_t local = 0;
  fcl_mpi_slice(c->layout, c->n, ranks, rank, &local, NULL, NULL, NULL);
  const size_t n = c->b * local * heads * c->d;
  float *s = malloc(n * sizeof *s);
  fclu_slice_copy(c->layout, c->n, ranks, rank, c->b, heads * c->d, 1, whole, s);
  cl_mem m = fclu_upload(ctx, s, n, c->dtype);
  free(s);
  if (local_elems) *local_elems = n;
  return m;
}

static int run_case(fcl_context *ctx, const mcase *c, uint64_t seed) {
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->n, c->n, c->d);
  desc.dtype = c->dtype;
  desc.causal = c->causal;
  desc.window_left = c->wl;
  desc.window_right = c->wr;
  const size_t nq = c->b * c->n * c->hq * c->d, nk = c->b * c->n * c->hkv * c->d;
  const size_t nl = c->b * c->hq * c->n;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *dout = malloc(nq * 4);
  fclu_rng rng;
  fclu_rng_seed(&rng, seed);
  fclu_fill_normal(&rng, q, nq, 1.0, c->dtype);
  fclu_fill_normal(&rng, k, nk, 1.0, c->dtype);
  fclu_fill_normal(&rng, v, nk, 1.0, c->dtype);
  fclu_fill_normal(&rng, dout, nq, 1.0, c->dtype);
  size_t local = 0, lq = 0, lk = 0;
  fcl_mpi_slice(c->layout, c->n, ranks, rank, &local, NULL, NULL, NULL);
  cl_mem sq = upload_slice(ctx, c, c->hq, q, &lq), sk = upload_slice(ctx, c, c->hkv, k, &lk);
  cl_mem sv = upload_slice(ctx, c, c->hkv, v, NULL), sdo = upload_slice(ctx, c, c->hq, dout, NULL);
  const size_t es = fcl_dtype_size(c->dtype), ll = c->b * c->hq * local;
  cl_mem so = fclu_poisoned_buffer(ctx, lq * es), slse = fclu_poisoned_buffer(ctx, ll * 4);
  cl_mem g[2][3];
  for (int r = 0; r < 2; r++) {
    g[r][0] = fclu_poisoned_buffer(ctx, lq * es);
    g[r][1] = fclu_poisoned_buffer(ctx, lk * es);
    g[r][2] = fclu_poisoned_buffer(ctx, lk * es);
  }
  fcl_mpi_info fi, bi[2];
  const fcl_status fs = fcl_mpi_attention_forward(MPI_COMM_WORLD, ctx, &desc, c->layout, 0, sq,
                                                  sk, sv, so, slse, &fi);
  fcl_status bs[2] = {FCL_ERROR_INVALID_ARGUMENT, FCL_ERROR_INVALID_ARGUMENT};
  /* the second backward (and forward) without the overlap: the same sums
   * in the same order, so the same bits */
  for (int r = 0; r < 2 && fs == FCL_SUCCESS; r++)
    bs[r] = fcl_mpi_attention_backward(MPI_COMM_WORLD, ctx, &desc, c->layout,
                                       r ? FCL_MPI_NO_OVERLAP : 0, sq, sk, sv, so, slse, sdo,
                                       g[r][0], g[r][1], g[r][2], &bi[r]);
  cl_mem so2 = fclu_poisoned_buffer(ctx, lq * es);
  const fcl_status fs2 = fcl_mpi_attention_forward(MPI_COMM_WORLD, ctx, &desc, c->layout,
                                                   FCL_MPI_NO_OVERLAP, sq, sk, sv, so2, NULL, &fi);
  int ok = fs == FCL_SUCCESS && fs2 == FCL_SUCCESS && bs[0] == FCL_SUCCESS &&
           bs[1] == FCL_SUCCESS;
  if (!ok)
    fprintf(stderr, "rank %d: %s: %s %s\n", rank, c->name, fs ? fi.error : "",
            bs[0] ? bi[0].error : "");
  /* slices to the host, then to rank 0 */
  float *lo = malloc(lq * 4), *llse = malloc(ll * 4), *lg[2][3];
  for (int r = 0; r < 2; r++) {
    lg[r][0] = malloc(lq * 4);
    lg[r][1] = malloc(lk * 4);
    lg[r][2] = malloc(lk * 4);
  }
  ok &= fclu_download(ctx, so, lo, lq, c->dtype) == 0 &&
        fclu_download(ctx, slse, llse, ll, FCL_DTYPE_F32) == 0;
  for (int r = 0; r < 2; r++)
    for (int t = 0; t < 3; t++)
      ok &= fclu_download(ctx, g[r][t], lg[r][t], t ? lk : lq, c->dtype) == 0;
  /* the same inputs on the same ranks: the same bits */
  int same = 1;
  for (int t = 0; t < 3; t++) same &= !memcmp(lg[0][t], lg[1][t], (t ? lk : lq) * 4);
  float *lo2 = malloc(lq * 4);
  ok &= fclu_download(ctx, so2, lo2, lq, c->dtype) == 0;
  same &= !memcmp(lo, lo2, lq * 4);
  free(lo2);
  clReleaseMemObject(so2);
  ok &= same;
  if (!same)
    fprintf(stderr, "rank %d: %s: the bits changed without the overlap\n", rank, c->name);
  float *wo = calloc(nq, 4), *wlse = calloc(nl, 4), *wdq = calloc(nq, 4), *wdk = calloc(nk, 4),
        *wdv = calloc(nk, 4);
  gather(c, c->b, c->hq * c->d, lo, wo);
  gather(c, c->b * c->hq, 1, llse, wlse);
  gather(c, c->b, c->hq * c->d, lg[0][0], wdq);
  gather(c, c->b, c->hkv * c->d, lg[0][1], wdk);
  gather(c, c->b, c->hkv * c->d, lg[0][2], wdv);
  ok = all(ok);
  if (rank == 0 && ok) {
    printf("%s, %d rank%s, N %zu: %u steps, %u blocks computed, %u skipped on rank 0\n",
           c->name, ranks, ranks > 1 ? "s" : "", c->n, fi.steps, fi.blocks_computed,
           fi.blocks_skipped);
    /* the single-device call and the float64 reference, whole sequence */
    cl_mem wq = fclu_upload(ctx, q, nq, c->dtype), wk = fclu_upload(ctx, k, nk, c->dtype);
    cl_mem wv = fclu_upload(ctx, v, nk, c->dtype), wdo = fclu_upload(ctx, dout, nq, c->dtype);
    cl_mem o1 = fclu_poisoned_buffer(ctx, nq * es), l1 = fclu_poisoned_buffer(ctx, nl * 4);
    cl_mem g1[3] = {fclu_poisoned_buffer(ctx, nq * es), fclu_poisoned_buffer(ctx, nk * es),
                    fclu_poisoned_buffer(ctx, nk * es)};
    ok = fcl_attention_forward(ctx, &desc, FCL_ALGO_FLASH, wq, wk, wv, o1, l1, NULL) ==
             FCL_SUCCESS &&
         fcl_attention_backward(ctx, &desc, FCL_ALGO_FLASH, wq, wk, wv, o1, l1, wdo, g1[0],
                                g1[1], g1[2], NULL) == FCL_SUCCESS;
    float *so1 = malloc(nq * 4), *sl1 = malloc(nl * 4), *sg[3] = {malloc(nq * 4), malloc(nk * 4),
                                                                   malloc(nk * 4)};
    ok &= fclu_download(ctx, o1, so1, nq, c->dtype) == 0 &&
          fclu_download(ctx, l1, sl1, nl, FCL_DTYPE_F32) == 0;
    for (int t = 0; t < 3; t++) ok &= fclu_download(ctx, g1[t], sg[t], t ? nk : nq, c->dtype) == 0;
    double *ro = malloc(nq * 8), *rl = malloc(nl * 8), *rdq = malloc(nq * 8),
           *rdk = malloc(nk * 8), *rdv = malloc(nk * 8);
    fclref_forward(&desc, q, k, v, ro, rl);
    fclref_backward(&desc, q, k, v, dout, rdq, rdk, rdv);
    ok &= within("O", c, wo, so1, ro, nq);
    ok &= within("LSE", c, wlse, sl1, rl, nl);
    ok &= within("dQ", c, wdq, sg[0], rdq, nq);
    ok &= within("dK", c, wdk, sg[1], rdk, nk);
    ok &= within("dV", c, wdv, sg[2], rdv, nk);
    cl_mem ms[] = {wq, wk, wv, wdo, o1, l1, g1[0], g1[1], g1[2]};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) clReleaseMemObject(ms[i]);
    free(so1), free(sl1), free(ro), free(rl), free(rdq), free(rdk), free(rdv);
    for (int t = 0; t < 3; t++) free(sg[t]);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  cl_mem ms[] = {sq, sk, sv, sdo, so, slse, g[0][0], g[0][1], g[0][2], g[1][0], g[1][1], g[1][2]};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) clReleaseMemObject(ms[i]);
  free(q), free(k), free(v), free(dout), free(lo), free(llse);
  free(wo), free(wlse), free(wdq), free(wdk), free(wdv);
  for (int r = 0; r < 2; r++)
    for (int t = 0; t < 3; t++) free(lg[r][t]);
  return ok;
}

/* Whether global query gq sees global key gk under the window. */
static int sees(long gq, long gk, int wl, int wr) {
  return (wl < 0 || gk >= gq - wl) && (wr < 0 || gk <= gq + wr);
}

static int check_block_masks(void) {
  static const int wls[] = {-1, 0, 1, 3, 7}, wrs[] = {-1, 0, 2, 5};
  long blocks = 0, bad = 0;
  for (long q0 = 0; q0 < 12; q0++)
    for (long k0 = 0; k0 < 12; k0++)
      for (long nq = 1; nq <= 8; nq++)
        for (long nk = 1; nk <= 8; nk++)
          for (size_t a = 0; a < sizeof wls / sizeof *wls; a++)
            for (size_t c = 0; c < sizeof wrs / sizeof *wrs; c++) {
              const int wl = wls[a], wr = wrs[c];
              const ring_block b = ring_block_plan((size_t)q0, (size_t)nq, (size_t)k0,
                                                   (size_t)nk, wl, wr);
              const long rows = (long)b.q_rows, keys = (long)b.k_len, first = (long)b.k_first;
              const long align = keys - rows;
              int ok = !b.visible || (b.window_left >= -1 && b.window_right >= -1 && rows <= nq &&
                                      first + keys <= nk && keys >= 1 && rows >= 1);
              for (long i = 0; ok && i < nq; i++)
                for (long j = 0; ok && j < nk; j++) {
                  const long jj = j - first;
                  const int shown =
                      b.visible && i < rows && jj >= 0 && jj < keys &&
                      (b.window_left < 0 || jj >= i + align - b.window_left) &&
                      (b.window_right < 0 || jj <= i + align + b.window_right);
                  ok = shown == sees(q0 + i, k0 + j, wl, wr);
                }
              blocks++;
              if (!ok && bad++ < 5)
                printf("block mask wrong: q [%ld, +%ld) k [%ld, +%ld) window %d,%d\n", q0, nq, k0,
                       nk, wl, wr);
            }
  printf("block masks: %ld blocks, %ld wrong\n", blocks, bad);
  return bad == 0;
}

/* One rank's bad argument: every rank returns its status, naming it, in 10 s. */
static int run_bad(fcl_context *ctx, const char *what, int bad_rank, fcl_status want) {
  const mcase *c = &cases[0];
  fcl_attention_desc desc;
  fcl_attention_desc_init(&desc, c->b, c->hq, c->hkv, c->n, c->n, c->d);
  desc.causal = 1;
  float *q = calloc(c->b * c->n * c->hq * c->d, 4);
  size_t lq = 0, lk = 0;
  cl_mem sq = upload_slice(ctx, c, c->hq, q, &lq), sk = upload_slice(ctx, c, c->hkv, q, &lk);
  cl_mem o = fclu_poisoned_buffer(ctx, rank == bad_rank && want == FCL_ERROR_BUFFER_TOO_SMALL
                                           ? 4 : lq * 4);
  cl_mem lse = fclu_poisoned_buffer(ctx, c->b * c->hq * c->n * 4);
  if (rank == bad_rank && want == FCL_ERROR_INVALID_ARGUMENT && bad_rank) desc.heads_q *= 2;
  fcl_mpi_info info;
  const double t0 = now_s();
  /* the backward's case: dq NULL on the bad rank */
  const int bwd = want == FCL_ERROR_INVALID_ARGUMENT && bad_rank == 0;
  cl_mem dq = rank == bad_rank ? NULL : fclu_poisoned_buffer(ctx, lq * 4);
  const fcl_status s =
      bwd ? fcl_mpi_attention_backward(MPI_COMM_WORLD, ctx, &desc, c->layout, 0, sq, sk, sk, o,
                                       lse, sq, dq, sk, sk, &info)
          : fcl_mpi_attention_forward(MPI_COMM_WORLD, ctx, &desc, c->layout, 0, sq, sk, sk, o,
                                      lse, &info);
  const double dt = now_s() - t0;
  char name[32];
  snprintf(name, sizeof name, "rank %d: ", bad_rank);
  const int ok = s == want && !strncmp(info.error, name, strlen(name)) && dt < 10.0;
  printf("rank %d, %s: %s in %.3f s: %s %s\n", rank, what, fcl_status_str(s), dt, info.error,
         ok ? "ok" : "FAIL");
  clReleaseMemObject(sq), clReleaseMemObject(sk), clReleaseMemObject(o), clReleaseMemObject(lse);
  if (dq) clReleaseMemObject(dq);
  free(q);
  return all(ok);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int bad = argc > 1 && !strcmp(argv[1], "--bad");
  if (argc > 1 && !bad) {
    if (rank == 0)
      printf("usage: mpirun -np P test_mpi [--bad]\n"
             "Ring attention against the float64 reference (--bad: one rank's bad argument)."
             "\n$FLASHCL_TEST_DEVICE picks each rank's device, $FLASHCL_TEST_SEED the inputs.\n");
    MPI_Finalize();
    return strcmp(argv[1], "--help") ? 2 : 0;
  }
  fcl_context *ctx = NULL;
  const fcl_status cs = fcl_context_create(getenv("FLASHCL_TEST_DEVICE"), &ctx);
  int ok = all(cs == FCL_SUCCESS);
  unsigned long long seed = 0;
  if (rank == 0) {
    const char *env = getenv("FLASHCL_TEST_SEED");
    seed = env && *env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
    printf("test_mpi: %d ranks, seed %llu (FLASHCL_TEST_SEED)\n", ranks, seed);
  }
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank == 0 && !bad) ok &= check_block_masks();
  ok = all(ok);
  if (ok && bad) {
    ok &= run_bad(ctx, "o too small on the last rank", ranks - 1, FCL_ERROR_BUFFER_TOO_SMALL);
    if (ranks > 1)
      ok &= run_bad(ctx, "heads_q differing on rank 1", 1, FCL_ERROR_INVALID_ARGUMENT);
    ok &= run_bad(ctx, "the backward's dq NULL on rank 0", 0, FCL_ERROR_INVALID_ARGUMENT);
  }
  for (size_t i = 0; ok && !bad && i < sizeof cases / sizeof *cases; i++)
    ok &= run_case(ctx, &cases[i], seed + i);
  fcl_context_release(ctx);
  if (rank == 0) printf("test_mpi: %s\n", ok ? "passed" : "FAILED");
  MPI_Finalize();
  return ok ? 0 : 1;
}
