/*
 * flashcl-bench-mpi — times ring attention over MPI (flashcl_mpi.h) under
 * mpirun: flashcl-bench's problem options for the whole sequence, split
 * over the ranks; per rank the time, where it went (compute, staging
 * copies, waiting for MPI), the bytes sent and received, and the scaling
 * efficiency against one rank running the library's single-device call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "hostdata.h"
#include "reference.h"
#include "slices.h"

static const char usage_mpi[] =
    "usage: mpirun -np P flashcl-bench-mpi [options]\n"
    "Times ring attention over MPI: the whole sequence split over the P ranks,\n"
    "each with its own device. Options of flashcl-bench that describe the problem\n"
    "(--batch --heads --heads-kv --seqlen --head-dim --dtype --causal --window\n"
    "--softcap --pass fwd|fwdbwd --warmup --repeat --device --check --json FILE)\n"
    "mean the same; --seqlen is the whole sequence. Besides:\n"
    "  --split zigzag|contiguous  how the ranks hold the sequence (default: zigzag\n"
    "                    when causal, else contiguous; include/flashcl_mpi.h)\n"
    "  --weak            weak scaling: --seqlen tokens per rank, the whole P times it\n"
    "  --no-overlap      exchange K/V after each step's compute, not during it\n"
    "  --device-per-rank each rank takes the device numbered by its rank on its\n"
    "                    node (GPUs first; --device then names a platform's devices\n"
    "                    by substring and ranks take the matches in order)\n"
    "  --no-baseline     skip the one-rank run the scaling efficiency divides by\n"
    "  --check           also gather the outputs on rank 0 and compare them with\n"
    "                    the float64 reference over the whole sequence (small only)\n"
    "  --json FILE       rank 0 writes every rank's figures there\n"
    "  --help            this text\n"
    "Per rank: ms (mean of --repeat calls), compute, staging, wait (ms), MB sent and\n"
    "received, steps, blocks computed/skipped. Efficiency: (FLOPs / ms) over P\n"
    "times one rank's, whose problem is the whole one (or --seqlen with --weak).\n";

typedef struct mpi_options {
  fcl_mpi_layout layout;
  int layout_set, weak, no_overlap, device_per_rank, baseline;
} mpi_options;

static int ranks = 1, rank = 0;

/* The figures one rank sends rank 0, per pass. */
typedef struct rank_row {
  double ms, compute, staging, wait, sent, received, steps, computed, skipped;
} rank_row;

static void add_info(rank_row *row, const fcl_mpi_info *info, int n) {
  row->ms += info->ms_total / n;
  row->compute += info->ms_compute / n;
  row->staging += info->ms_staging / n;
  row->wait += info->ms_wait / n;
  row->sent = (double)info->bytes_sent;
  row->received = (double)info->bytes_received;
  row->steps = info->steps;
  row->computed = info->blocks_computed;
  row->skipped = info->blocks_skipped;
}

/* Splits argv into this tool's options and flashcl-bench's. */
static int parse(int argc, char **argv, mpi_options *m, bench_options *o, char *why,
                 size_t len) {
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int n = 0;
  rest[n++] = argv[0];
  m->baseline = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--weak"))
      m->weak = 1;
    else if (!strcmp(argv[i], "--no-overlap"))
      m->no_overlap = 1;
    else if (!strcmp(argv[i], "--device-per-rank"))
      m->device_per_rank = 1;
    else if (!strcmp(argv[i], "--no-baseline"))
      m->baseline = 0;
    else if (!strcmp(argv[i], "--split") && i + 1 < argc) {
      m->layout_set = 1;
      const char *v = argv[++i];
      if (!strcmp(v, "zigzag"))
        m->layout = FCL_MPI_LAYOUT_ZIGZAG;
      else if (!strcmp(v, "contiguous"))
        m->layout = FCL_MPI_LAYOUT_CONTIGUOUS;
      else {
        snprintf(why, len, "--split needs zigzag or contiguous, not '%s'", v);
        free(rest);
        return BENCH_PARSE_ERROR;
      }
    } else
      rest[n++] = argv[i];
  }
  int r = bench_parse(n, rest, o, why, len);
  free(rest);
  if (r != BENCH_PARSE_RUN) return r;
  const char *no = o->sweep ? "--seqlen (a shape; no sweep)"
                   : o->n_varlen ? "--varlen" : o->n_cache_lens ? "--cache-lens"
                   : o->page_size ? "--paged" : o->alibi ? "--alibi"
                   : o->seqlen_k != o->seqlen ? "--seqlen-k" : o->causal == CAUSAL_BOTH
                   ? "--causal both" : o->n_dtypes > 1 ? "several --dtype"
                   : o->pass == PASS_BWD ? "--pass bwd (give fwdbwd)" : o->svg || o->csv
                   ? "--svg, --csv" : o->algos == ALGO_NAIVE ? "--algo naive"
                   : o->layout != FCLU_BSHD ? "--layout but bshd" : NULL;
  if (no) {
    snprintf(why, len, "the ring takes no %s", no);
    return BENCH_PARSE_ERROR;
  }
  if (!m->layout_set)
    m->layout = o->causal ? FCL_MPI_LAYOUT_ZIGZAG : FCL_MPI_LAYOUT_CONTIGUOUS;
  if (o->warmup < 0) o->warmup = 1;
  if (o->repeat < 0) o->repeat = 3;
  return BENCH_PARSE_RUN;
}

/* The device selector of this rank: with --device-per-rank, the node-local
 * rank's device among the GPUs (or, without GPUs, all devices), or among
 * those whose name contains --device. */
static fcl_status open_context(const bench_options *o, const mpi_options *m, fcl_context **ctx) {
  if (!m->device_per_rank) return fcl_context_create(o->device, ctx);
  MPI_Comm node;
  int local = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  size_t count = 0;
  fcl_devices(NULL, 0, &count);
  fcl_device_info *list = calloc(count ? count : 1, sizeof *list);
  fcl_devices(list, count, &count);
  int gpus = 0;
  for (size_t i = 0; i < count; i++) gpus += list[i].limits.is_gpu;
  char sel[32] = "";
  int seen = 0;
  for (size_t i = 0; i < count && !*sel; i++) {
    const int match = o->device ? strstr(list[i].name, o->device) != NULL
                                : (gpus ? list[i].limits.is_gpu : 1);
    if (match && seen++ == local)
      snprintf(sel, sizeof sel, "%u:%u", list[i].platform_index, list[i].device_index);
  }
  free(list);
  if (!*sel) {
    *ctx = NULL;
    return FCL_ERROR_DEVICE_NOT_FOUND;
  }
  return fcl_context_create(sel, ctx);
}

/* Random slices of q, k, v, dout (from the whole sequence's values when
 * checking, so that rank 0 can rebuild it). */
typedef struct problem {
  fcl_attention_desc desc;
  size_t local, nq, nk;        /* slice tokens and elements */
  float *whole[4];             /* q, k, v, dout of the whole sequence (--check) */
  cl_mem in[4], out[2], grad[3];
} problem;

static const double kSigma = 1.0;

static int make_problem(fcl_context *ctx, const bench_options *o, const mpi_options *m,
                        problem *p, uint64_t seed) {
  fcl_attention_desc *d = &p->desc;
  const size_t n = m->weak ? o->seqlen * (size_t)ranks : o->seqlen;
  fcl_attention_desc_init(d, o->batch, o->heads, o->heads_kv, n, n, o->head_dim);
  d->dtype = o->dtype;
  d->causal = o->causal == CAUSAL_ON;
  d->window_left = o->window_left; /* as flashcl-bench: causal keeps R = 0 */
  d->window_right = d->causal && o->window_right > 0 ? 0 : o->window_right;
  d->softcap = o->softcap;
  if (fcl_mpi_slice(m->layout, n, ranks, rank, &p->local, NULL, NULL, NULL) != FCL_SUCCESS)
    return 0;
  const size_t heads[4] = {d->heads_q, d->heads_kv, d->heads_kv, d->heads_q};
  const size_t es = fcl_dtype_size(d->dtype);
  fclu_rng rng;
  fclu_rng_seed(&rng, seed + (o->check ? 0 : (uint64_t)rank));
  p->nq = d->batch * p->local * d->heads_q * d->head_dim;
  p->nk = d->batch * p->local * d->heads_kv * d->head_dim;
  for (int t = 0; t < 4; t++) {
    const size_t row = heads[t] * d->head_dim, sn = d->batch * p->local * row;
    float *slice = malloc(sn * sizeof *slice);
    if (!slice) return 0;
    if (o->check) {
      p->whole[t] = malloc(d->batch * n * row * sizeof(float));
      if (!p->whole[t]) return 0;
      fclu_fill_normal(&rng, p->whole[t], d->batch * n * row, t == 2 ? 1.0 : kSigma, d->dtype);
      fclu_slice_copy(m->layout, n, ranks, rank, d->batch, row, 1, p->whole[t], slice);
    } else {
      fclu_fill_normal(&rng, slice, sn, t == 2 ? 1.0 : kSigma, d->dtype);
    }
    p->in[t] = fclu_upload(ctx, slice, sn, d->dtype);
    free(slice);
    if (!p->in[t]) return 0;
  }
  p->out[0] = fclu_poisoned_buffer(ctx, p->nq * es);
  p->out[1] = fclu_poisoned_buffer(ctx, d->batch * d->heads_q * p->local * 4);
  p->grad[0] = fclu_poisoned_buffer(ctx, p->nq * es);
  p->grad[1] = fclu_poisoned_buffer(ctx, p->nk * es);
  p->grad[2] = fclu_poisoned_buffer(ctx, p->nk * es);
  return p->out[0] && p->out[1] && p->grad[0] && p->grad[1] && p->grad[2];
}

static void free_problem(problem *p) {
  cl_mem *all[] = {&p->in[0], &p->in[1], &p->in[2], &p->in[3], &p->out[0],
                   &p->out[1], &p->grad[0], &p->grad[1], &p->grad[2]};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (*all[i]) clReleaseMemObject(*all[i]);
  for (int t = 0; t < 4; t++) free(p->whole[t]);
}

static fcl_status run_pass(fcl_context *ctx, const mpi_options *m, problem *p, int bwd,
                           fcl_mpi_info *info) {
  const unsigned flags = m->no_overlap ? FCL_MPI_NO_OVERLAP : 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (!bwd)
    return fcl_mpi_attention_forward(MPI_COMM_WORLD, ctx, &p->desc, m->layout, flags, p->in[0],
                                     p->in[1], p->in[2], p->out[0], p->out[1], info);
  return fcl_mpi_attention_backward(MPI_COMM_WORLD, ctx, &p->desc, m->layout, flags, p->in[0],
                                    p->in[1], p->in[2], p->out[0], p->out[1], p->in[3],
                                    p->grad[0], p->grad[1], p->grad[2], info);
}

/* One rank alone, the library's single-device calls: ms per pass. */
static void baseline(fcl_context *ctx, const bench_options *o, const mpi_options *m,
                     const fcl_attention_desc *whole, double ms[2]) {
  fcl_attention_desc d = *whole;
  if (m->weak) d.seqlen_q = d.seqlen_k = o->seqlen;
  const size_t es = fcl_dtype_size(d.dtype);
  const size_t nq = d.batch * d.seqlen_q * d.heads_q * d.head_dim,
               nk = d.batch * d.seqlen_k * d.heads_kv * d.head_dim;
  cl_mem q = fclu_poisoned_buffer(ctx, nq * es), k = fclu_poisoned_buffer(ctx, nk * es),
         v = fclu_poisoned_buffer(ctx, nk * es), out = fclu_poisoned_buffer(ctx, nq * es),
         lse = fclu_poisoned_buffer(ctx, d.batch * d.heads_q * d.seqlen_q * 4),
         dq = fclu_poisoned_buffer(ctx, nq * es), dk = fclu_poisoned_buffer(ctx, nk * es),
         dv = fclu_poisoned_buffer(ctx, nk * es);
  ms[0] = ms[1] = 0;
  if (q && k && v && out && lse && dq && dk && dv) {
    /* zeros in, finite out: the time does not depend on the values */
    const float zero = 0;
    cl_command_queue queue = fcl_context_cl_queue(ctx);
    cl_mem ins[] = {q, k, v};
    for (int i = 0; i < 3; i++)
      clEnqueueFillBuffer(queue, ins[i], &zero, 1, 0, i ? nk * es : nq * es, 0, NULL, NULL);
    for (int it = -o->warmup; it < o->repeat; it++) {
      fcl_run_info fi, bi;
      if (fcl_attention_forward(ctx, &d, FCL_ALGO_FLASH, q, k, v, out, lse, &fi) != FCL_SUCCESS)
        break;
      if (it >= 0) ms[0] += fi.ms / o->repeat;
      if (o->pass == PASS_FWDBWD) {
        if (fcl_attention_backward(ctx, &d, FCL_ALGO_FLASH, q, k, v, out, lse, out, dq, dk, dv,
                                   &bi) != FCL_SUCCESS)
          break;
        if (it >= 0) ms[1] += bi.ms / o->repeat;
      }
    }
  }
  cl_mem all[] = {q, k, v, out, lse, dq, dk, dv};
  for (int i = 0; i < 8; i++)
    if (all[i]) clReleaseMemObject(all[i]);
}

/* Rank 0: every output against the float64 reference; max abs errors. */
static void check(fcl_context *ctx, const mpi_options *m, problem *p, int bwd, double err[5]) {
  const fcl_attention_desc *d = &p->desc;
  const size_t n = d->seqlen_q, hd = d->head_dim;
  const size_t nq = d->batch * n * d->heads_q * hd, nk = d->batch * n * d->heads_kv * hd,
               nl = d->batch * d->heads_q * n;
  cl_mem outs[5] = {p->out[0], p->out[1], p->grad[0], p->grad[1], p->grad[2]};
  const size_t outer[5] = {d->batch, d->batch * d->heads_q, d->batch, d->batch, d->batch};
  const size_t inner[5] = {d->heads_q * hd, 1, d->heads_q * hd, d->heads_kv * hd,
                           d->heads_kv * hd};
  const size_t whole_n[5] = {nq, nl, nq, nk, nk};
  float *got[5] = {0};
  for (int t = 0; t < (bwd ? 5 : 2); t++) {
    const size_t sn = outer[t] * p->local * inner[t];
    float *slice = malloc(sn * 4), *mine = calloc(whole_n[t], 4);
    got[t] = rank == 0 ? calloc(whole_n[t], 4) : NULL;
    fclu_download(ctx, outs[t], slice, sn, t == 1 ? FCL_DTYPE_F32 : d->dtype);
    fclu_slice_copy(m->layout, n, ranks, rank, outer[t], inner[t], 0, mine, slice);
    MPI_Reduce(mine, got[t], (int)whole_n[t], MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    free(slice);
    free(mine);
  }
  if (rank == 0) {
    double *ref[5] = {malloc(nq * 8), malloc(nl * 8), malloc(nq * 8), malloc(nk * 8),
                      malloc(nk * 8)};
    fclref_forward(d, p->whole[0], p->whole[1], p->whole[2], ref[0], ref[1]);
    if (bwd)
      fclref_backward_given_o(d, p->whole[0], p->whole[1], p->whole[2], p->whole[3], got[0],
                              ref[2], ref[3], ref[4]);
    for (int t = 0; t < (bwd ? 5 : 2); t++) err[t] = fclu_max_abs_err(got[t], ref[t], whole_n[t]);
    for (int t = 0; t < 5; t++) free(ref[t]);
  }
  for (int t = 0; t < 5; t++) free(got[t]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bench_options o;
  mpi_options m = {0};
  char why[512] = "";
  const int parsed = parse(argc, argv, &m, &o, why, sizeof why);
  if (parsed != BENCH_PARSE_RUN) {
    if (rank == 0) {
      if (parsed == BENCH_PARSE_ERROR)
        fprintf(stderr, "flashcl-bench-mpi: %s (--help)\n", why);
      else if (parsed == BENCH_PARSE_VERSION)
        printf("flashcl-bench-mpi %s\n", fcl_version_string());
      else
        fputs(usage_mpi, stdout);
    }
    MPI_Finalize();
    return parsed == BENCH_PARSE_ERROR ? BENCH_EXIT_USAGE : BENCH_EXIT_OK;
  }
  fcl_context *ctx = NULL;
  fcl_status status = open_context(&o, &m, &ctx);
  fcl_device_info dev;
  memset(&dev, 0, sizeof dev);
  if (status == FCL_SUCCESS) fcl_context_device(ctx, &dev);
  problem p;
  memset(&p, 0, sizeof p);
  int ok = status == FCL_SUCCESS && make_problem(ctx, &o, &m, &p, 20261206);
  if (!ok)
    fprintf(stderr, "flashcl-bench-mpi: rank %d: no device or problem: %s\n", rank,
            ctx ? fcl_context_last_error(ctx) : fcl_status_str(status));
  int every = 0;
  MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  const int passes = o.pass == PASS_FWDBWD ? 2 : 1;
  rank_row rows[2];
  memset(rows, 0, sizeof rows);
  double err[2][5] = {{0}};
  fcl_mpi_info info;
  for (int pass = 0; every && pass < passes; pass++) {
    for (int it = -o.warmup; every && it < o.repeat; it++) {
      if (pass == 1 && run_pass(ctx, &m, &p, 0, &info) != FCL_SUCCESS) every = 0;
      status = every ? run_pass(ctx, &m, &p, pass, &info) : FCL_ERROR_INVALID_ARGUMENT;
      if (status != FCL_SUCCESS) {
        if (rank == 0) fprintf(stderr, "flashcl-bench-mpi: %s\n", info.error);
        every = 0;
      } else if (it >= 0)
        add_info(&rows[pass], &info, o.repeat);
    }
    if (every && o.check) check(ctx, &m, &p, pass, err[pass]);
  }
  double base[2] = {0, 0};
  if (every && m.baseline && rank == 0) baseline(ctx, &o, &m, &p.desc, base);
  /* the others wait without spinning (MPI_Barrier would), so that rank 0
   * has the cores it would have alone */
  MPI_Request alone;
  MPI_Ibarrier(MPI_COMM_WORLD, &alone);
  for (int done = 0; !done;) {
    MPI_Test(&alone, &done, MPI_STATUS_IGNORE);
    const struct timespec pause = {0, 1000000};
    if (!done) nanosleep(&pause, NULL);
  }
  rank_row *all = rank == 0 ? calloc((size_t)ranks * 2, sizeof *all) : NULL;
  MPI_Gather(rows, (int)(2 * sizeof(rank_row) / sizeof(double)), MPI_DOUBLE, all,
             (int)(2 * sizeof(rank_row) / sizeof(double)), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0 && every) {
    const char *names[2] = {"fwd", "bwd"};
    fcl_attention_desc one = p.desc;
    if (m.weak) one.seqlen_q = one.seqlen_k = o.seqlen;
    printf("ring attention: %d ranks, %s split%s, B %zu, Hq %zu, Hkv %zu, N %zu (%zu a rank "
           "on rank 0), d %zu, %s, %s, window %d,%d; rank 0: %s\n",
           ranks, m.layout == FCL_MPI_LAYOUT_ZIGZAG ? "zigzag" : "contiguous",
           m.no_overlap ? ", no overlap" : "", p.desc.batch, p.desc.heads_q, p.desc.heads_kv,
           p.desc.seqlen_q, p.local, p.desc.head_dim, fcl_dtype_name(p.desc.dtype),
           p.desc.causal ? "causal" : "not causal", p.desc.window_left, p.desc.window_right,
           dev.name);
    printf("pass rank        ms   compute   staging      wait   MB sent   MB recv  steps  "
           "blocks  skipped\n");
    FILE *json = o.json ? fopen(o.json, "w") : NULL;
    if (json)
      fprintf(json, "{\"ranks\": %d, \"layout\": \"%s\", \"overlap\": %d, \"weak\": %d, "
                    "\"batch\": %zu, \"heads_q\": %zu, \"heads_kv\": %zu, \"seqlen\": %zu, "
                    "\"head_dim\": %zu, \"dtype\": \"%s\", \"causal\": %d, \"window\": [%d, %d], "
                    "\"device\": \"%s\", \"passes\": [",
              ranks, m.layout == FCL_MPI_LAYOUT_ZIGZAG ? "zigzag" : "contiguous", !m.no_overlap,
              m.weak, p.desc.batch, p.desc.heads_q, p.desc.heads_kv, p.desc.seqlen_q,
              p.desc.head_dim, fcl_dtype_name(p.desc.dtype), p.desc.causal,
              p.desc.window_left, p.desc.window_right, dev.name);
    for (int pass = 0; pass < passes; pass++) {
      double slowest = 0;
      for (int r = 0; r < ranks; r++) {
        const rank_row *x = &all[r * 2 + pass];
        if (x->ms > slowest) slowest = x->ms;
        printf("%-4s %4d %9.2f %9.2f %9.2f %9.2f %9.3f %9.3f %6.0f %7.0f %8.0f\n", names[pass],
               r, x->ms, x->compute, x->staging, x->wait, x->sent / 1e6, x->received / 1e6,
               x->steps, x->computed, x->skipped);
      }
      const fcl_pass fp = pass ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
      const double f_p = fcl_attention_flops(&p.desc, fp), f_1 = fcl_attention_flops(&one, fp);
      const double eff = base[pass] > 0 && slowest > 0
                             ? (f_p / slowest) / (ranks * f_1 / base[pass]) : 0;
      printf("%s: slowest rank %.2f ms, %.2f TFLOP/s; one rank alone %.2f ms; scaling "
             "efficiency %.3f\n", names[pass], slowest, f_p / slowest / 1e9, base[pass], eff);
      if (o.check)
        printf("%s check, max abs error vs float64: O %.3g LSE %.3g%s", names[pass],
               err[pass][0], err[pass][1], pass ? "" : "\n");
      if (o.check && pass)
        printf(" dQ %.3g dK %.3g dV %.3g\n", err[pass][2], err[pass][3], err[pass][4]);
      if (json) {
        fprintf(json, "%s{\"pass\": \"%s\", \"slowest_ms\": %.6g, \"one_rank_ms\": %.6g, "
                      "\"efficiency\": %.6g, \"ranks\": [", pass ? ", " : "", names[pass],
                slowest, base[pass], eff);
        for (int r = 0; r < ranks; r++) {
          const rank_row *x = &all[r * 2 + pass];
          fprintf(json, "%s{\"rank\": %d, \"ms\": %.6g, \"compute_ms\": %.6g, "
                        "\"staging_ms\": %.6g, \"wait_ms\": %.6g, \"bytes_sent\": %.0f, "
                        "\"bytes_received\": %.0f, \"steps\": %.0f, \"blocks\": %.0f, "
                        "\"skipped\": %.0f}", r ? ", " : "", r, x->ms, x->compute, x->staging,
                  x->wait, x->sent, x->received, x->steps, x->computed, x->skipped);
        }
        fprintf(json, "]");
        if (o.check)
          fprintf(json, ", \"max_abs_err\": {\"o\": %.6g, \"lse\": %.6g, \"dq\": %.6g, "
                        "\"dk\": %.6g, \"dv\": %.6g}", err[pass][0], err[pass][1],
                  err[pass][2], err[pass][3], err[pass][4]);
        fprintf(json, "}");
      }
    }
    if (json) {
      fprintf(json, "]}\n");
      fclose(json);
    }
  }
  free(all);
  free_problem(&p);
  fcl_context_release(ctx);
  MPI_Finalize();
  return every ? BENCH_EXIT_OK : BENCH_EXIT_FAILED;
}
