/*
 * flashcl-tune — finds the fastest tiling the planner allows on a device,
 * per problem bucket (pass x storage type x head_dim class x causal x size
 * class: host/plan/tuning.c), and writes the winners to the device's tuning
 * database, which every context on that device then reads (docs/design.md,
 * "Tuned plans").
 *
 * Per bucket: the shapes that stand for it (fcl__bucket_shapes: the
 * standard sweep's form on this device), the planner's rules' plan, and
 * the candidates: kernel family x work-group x the family's own fields
 * (SIMT: threads per row, rows per thread, 2-byte tiles; MMA: block_k;
 * decode: the split count), each planned on every shape (those that do
 * not plan are rejected) and deduplicated by the plans they make, nearest
 * to the rules' first. Each is built and timed (a warm-up, then the median
 * of --repeat runs, device time) on every shape. The winner is the fastest
 * by the geometric mean of its times over the rules', if it is faster than
 * the rules on every shape and by --margin overall; it is then checked
 * against the float64 reference (flashcl-bench's check: within twice the
 * naive algorithm's error) on a small odd shape of the bucket, and timed
 * against the rules again in --confirm rounds of alternating order, which
 * it must win every one of (by --margin in the median round), and on each
 * shape in the median of the rounds; the next one is taken if it fails
 * either check, twice at most. A bucket whose rules win
 * keeps no entry.
 */
#include <flashcl.h>

#include "bench.h"
#include "cli.h"
#include "hostdata.h"
#include "file.h"
#include "tuning.h"
#include "rules.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_PATTERNS 32
#define MAX_CANDIDATES 160
#define MAX_CONFIRM 15
#define MAX_REFUSED 2   /* winners refused (inaccurate or not confirmed) before the rules stay */

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_NOTHING = 3 };

/* The buckets a run without --buckets tunes: those of the standard sweep
 * (f32 and f16, forward and backward, head_dim 64 and 128, causal and
 * not, both size classes) and the decode family's (head_dim 128, causal). */
static const char *const default_patterns[] = {
    "fwd.f32.d64.*.*", "fwd.f32.d128.*.*", "fwd.f16.d64.*.*", "fwd.f16.d128.*.*",
    "bwd.f32.d64.*.*", "bwd.f32.d128.*.*", "bwd.f16.d64.*.*", "bwd.f16.d128.*.*",
    "decode.f16.d128.causal.*", "decode.f32.d128.causal.*"};

typedef struct options {
  const char *device;
  const char *patterns[MAX_PATTERNS];
  size_t n_patterns;
  double budget_s;
  const char *out_dir;
  double margin;    /* a winner's geometric mean over the rules' at most 1 - margin */
  int repeat;       /* 0: 7 on a GPU, 3 elsewhere */
  int confirm;      /* rounds against the rules for a winner; -1: 2 on a GPU, 3 elsewhere */
  int without_rules;  /* never keep the rules' plan (for tests of the database path) */
  int dry_run, quiet;
} options;

static const char usage_text[] =
    "usage: flashcl-tune [--device SEL] [--buckets LIST] [--budget SECONDS] [--out DIR]\n"
    "                    [--margin PCT] [--repeat N] [--confirm N] [--dry-run] [--quiet]\n"
    "Times the tilings the planner allows on a device, per problem bucket, and\n"
    "writes the fastest to the device's tuning database, which flashcl then\n"
    "uses on that device (fcl_context_set_tuning_dir).\n"
    "\n"
    "  --device SEL      the device, as flashcl-bench takes it (default: the\n"
    "                    library's, or FLASHCL_DEVICE)\n"
    "  --buckets LIST    comma-separated bucket names, each part a value or '*':\n"
    "                    PASS.TYPE.dDIM.MASK.SIZE, PASS fwd|bwd|decode, TYPE\n"
    "                    f32|f16|bf16, DIM 32|64|96|128|192|256, MASK full|causal,\n"
    "                    SIZE small|large (\"all\": every bucket). Default: the\n"
    "                    standard sweep's (fwd and bwd, f32 and f16, d 64 and 128)\n"
    "                    and the decode family's (d 128, causal, f16 and f32)\n"
    "  --budget SECONDS  the whole search's time (default 480); each bucket gets\n"
    "                    an equal share of what is left, nearest candidates first\n"
    "                    (and the rules' plan and one other at least)\n"
    "  --out DIR         where the database goes (default $FLASHCL_TUNING_DIR,\n"
    "                    $XDG_CACHE_HOME/flashcl or ~/.cache/flashcl); entries of\n"
    "                    buckets not tuned now are kept from the file there\n"
    "  --margin PCT      how much faster than the rules a winner must be, over\n"
    "                    the bucket's shapes (default 3)\n"
    "  --repeat N        timed runs per candidate and shape (default 7 on a GPU,\n"
    "                    3 elsewhere); the median counts\n"
    "  --confirm N       rounds in which a winner is timed against the rules again,\n"
    "                    in alternating order; it must win every round, by\n"
    "                    --margin in the median one, and on each shape in that\n"
    "                    shape's median round, or the next candidate is tried\n"
    "                    (default 2 on a GPU, 3 elsewhere; 0: none)\n"
    "  --dry-run         list the buckets, their shapes and candidates; time nothing\n"
    "  --quiet           no progress on stderr\n"
    "  --without-rules   (tests) keep the best candidate other than the rules'\n"
    "                    whatever its speed\n"
    "\n"
    "Progress goes to stderr, the table of winners to stdout. Exit status: 0,\n"
    "1 when the device or the database fails, 2 for a command line it refuses,\n"
    "3 when none of the buckets named has a problem to time on this device (a\n"
    "small bucket on a device of few compute units: stderr says which and why).\n";

static int quiet;

static void progress(const char *fmt, ...) {
  if (quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

static double now_s(void) { return fclu_now_ms() * 1e-3; }

static int parse(int argc, char **argv, options *o, char *why, size_t why_len) {
  memset(o, 0, sizeof *o);
  o->budget_s = 480;
  o->margin = 0.03;
  o->confirm = -1;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const int has_value = i + 1 < argc;
    uint64_t v;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
    if (strcmp(a, "--dry-run") == 0) {
      o->dry_run = 1;
    } else if (strcmp(a, "--quiet") == 0) {
      o->quiet = 1;
    } else if (strcmp(a, "--without-rules") == 0) {
      o->without_rules = 1;
    } else if (!has_value && (strcmp(a, "--device") == 0 || strcmp(a, "--buckets") == 0 ||
                              strcmp(a, "--budget") == 0 || strcmp(a, "--out") == 0 ||
                              strcmp(a, "--margin") == 0 || strcmp(a, "--repeat") == 0 ||
                              strcmp(a, "--confirm") == 0)) {
      snprintf(why, why_len, "%s needs a value", a);
      return -1;
    } else if (strcmp(a, "--device") == 0) {
      o->device = argv[++i];
    } else if (strcmp(a, "--out") == 0) {
      o->out_dir = argv[++i];
      if (!*o->out_dir) {
        snprintf(why, why_len, "--out: an empty folder name");
        return -1;
      }
    } else if (strcmp(a, "--budget") == 0) {
      if (fclu_parse_u64(argv[++i], 1, 86400, &v, why, why_len) != 0) return -1;
      o->budget_s = (double)v;
    } else if (strcmp(a, "--margin") == 0) {
      if (fclu_parse_u64(argv[++i], 0, 50, &v, why, why_len) != 0) return -1;
      o->margin = (double)v / 100.0;
    } else if (strcmp(a, "--confirm") == 0) {
      if (fclu_parse_u64(argv[++i], 0, MAX_CONFIRM, &v, why, why_len) != 0) return -1;
      o->confirm = (int)v;
    } else if (strcmp(a, "--repeat") == 0) {
      if (fclu_parse_u64(argv[++i], 1, 1000, &v, why, why_len) != 0) return -1;
      o->repeat = (int)v;
    } else if (strcmp(a, "--buckets") == 0) {
      char *fields[MAX_PATTERNS], reason[FCLU_WHY_LEN];
      size_t n = 0;
      if (fclu_split_list(argv[++i], fields, MAX_PATTERNS, &n, reason, sizeof reason) != 0) {
        snprintf(why, why_len, "--buckets: %.200s", reason);
        return -1;
      }
      for (size_t f = 0; f < n; ++f) o->patterns[f] = fields[f];
      o->n_patterns = n;
    } else {
      snprintf(why, why_len, "unknown argument '%s'", a);
      return -1;
    }
  }
  return 0;
}

/* A bucket name against a pattern whose parts may be '*'. */
static int matches(const char *pattern, const char *name) {
  if (strcmp(pattern, "all") == 0) return 1;
  while (*pattern && *name) {
    const char *pe = strchr(pattern, '.'), *ne = strchr(name, '.');
    const size_t pl = pe ? (size_t)(pe - pattern) : strlen(pattern);
    const size_t nl = ne ? (size_t)(ne - name) : strlen(name);
    if (!(pl == 1 && pattern[0] == '*') && !(pl == nl && strncmp(pattern, name, nl) == 0))
      return 0;
    if (!pe || !ne) return !pe && !ne;
    pattern = pe + 1;
    name = ne + 1;
  }
  return 0;
}

/* A pattern that names no bucket is a typing error, reported before
 * anything runs. */
static int pattern_valid(const char *pattern) {
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    char name[48];
    const fcl__bucket b = fcl__bucket_at(i);
    fcl__bucket_name(&b, name, sizeof name);
    if (matches(pattern, name)) return 1;
  }
  return 0;
}

typedef struct candidate {
  fcl_plan hint;
  fcl_plan plans[2];
  double ms[2];
  int timed;      /* shapes timed; -1: failed to run */
  double score;   /* geometric mean of ms over the rules' */
} candidate;

static unsigned plan_distance(const fcl_plan *a, const fcl_plan *b) {
  return (a->kernel != b->kernel) * 2 + (a->wg_size != b->wg_size) +
         (a->block_k != b->block_k) + (a->threads_per_row != b->threads_per_row) +
         (a->rows_per_thread != b->rows_per_thread) + (a->tile_elem_size != b->tile_elem_size) +
         (a->splits != b->splits);
}

static fcl_pass bucket_pass(const fcl__bucket *b) {
  return b->pass == 1 ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
}

/* Adds `hint` if it plans every shape and makes plans no candidate has. */
static void consider(const fcl_device_limits *lim, const fcl__bucket *b,
                     const fcl_attention_desc *shapes, size_t n_shapes, const fcl_plan *hint,
                     candidate *out, size_t *n) {
  if (*n == MAX_CANDIDATES) return;
  candidate c;
  memset(&c, 0, sizeof c);
  c.hint = *hint;
  for (size_t s = 0; s < n_shapes; ++s)
    if (fcl_plan_flash_hinted(lim, &shapes[s], bucket_pass(b), hint, &c.plans[s], NULL, 0) !=
        FCL_SUCCESS)
      return;
  for (size_t i = 0; i < *n; ++i) {
    int same = 1;
    for (size_t s = 0; s < n_shapes; ++s) same &= fcl__same_plan(&out[i].plans[s], &c.plans[s]);
    if (same) return;
  }
  out[(*n)++] = c;
}

static int by_distance_from_first(const void *x, const void *y, void *rules) {
  const candidate *a = x, *b = y;
  const unsigned da = plan_distance(&a->plans[0], rules), db = plan_distance(&b->plans[0], rules);
  return (da > db) - (da < db);
}

/* qsort_r is not in C11; a small insertion sort keeps it portable. */
static void sort_by_distance(candidate *c, size_t n, const fcl_plan *rules) {
  for (size_t i = 1; i < n; ++i) {
    candidate x = c[i];
    size_t j = i;
    while (j > 1 && by_distance_from_first(&c[j - 1], &x, (void *)rules) > 0) {
      c[j] = c[j - 1];
      --j;
    }
    c[j] = x;
  }
}

/* Every tiling the planner might be asked for in this bucket; the rules'
 * plan (the empty hint) first, then the others by their distance from it. */
static size_t enumerate(const fcl_device_limits *lim, const fcl__bucket *b,
                        const fcl_attention_desc *shapes, size_t n_shapes, candidate *out) {
  size_t n = 0;
  const fcl_plan rules = {0};
  consider(lim, b, shapes, n_shapes, &rules, out, &n);
  if (n == 0) return 0;
  static const unsigned wgs[] = {64, 128, 256};
  const int native_mma = lim->nvidia_sm >= 80;
  if (b->pass == 2) {
    static const unsigned splits[] = {0, 8, 16, 32, 64};
    const unsigned kernels[] = {FCL_FLASH_KERNEL_DECODE, FCL_FLASH_KERNEL_DECODE_MMA};
    for (int k = 0; k < 2; ++k) {
      if (kernels[k] == FCL_FLASH_KERNEL_DECODE_MMA && !native_mma) continue;
      for (int w = 0; w < 3; ++w)
        for (int s = 0; s < 5; ++s) {
          const fcl_plan h = {.kernel = kernels[k], .wg_size = wgs[w], .splits = splits[s]};
          consider(lim, b, shapes, n_shapes, &h, out, &n);
        }
    }
    /* The SIMT decode kernel with two keys a key group a step (Intel's
     * rule) where the rules take four: fewer registers a lane, where f32
     * at B 1 runs two work-groups a multiprocessor (docs/performance.md,
     * v20). block_k 16 is that at head_dim 128 (8 key groups), 32 at 64
     * (16); elsewhere they are other plans, or the rules' (not kept twice). */
    static const unsigned two_keys_steps[] = {16, 32};
    for (int k = 0; k < 2; ++k)
      for (int s = 0; s < 5; ++s) {
        const fcl_plan h = {.kernel = FCL_FLASH_KERNEL_DECODE, .wg_size = 128,
                            .block_k = two_keys_steps[k], .splits = splits[s]};
        consider(lim, b, shapes, n_shapes, &h, out, &n);
      }
  } else {
    if (native_mma) {
      /* 16: fewer score registers a lane, where f32 at d 128 spills with 32
       * (docs/performance.md, v19) */
      static const unsigned block_ks[] = {0, 16, 32, 64, 128};
      for (int w = 0; w < 3; ++w)
        for (int k = 0; k < 5; ++k) {
          const fcl_plan h = {.kernel = FCL_FLASH_KERNEL_MMA, .wg_size = wgs[w],
                              .block_k = block_ks[k]};
          consider(lim, b, shapes, n_shapes, &h, out, &n);
        }
    }
    static const unsigned tprs[] = {1, 2, 4, 8}, rpts[] = {1, 2, 4};
    const int tiles = b->dtype == FCL_DTYPE_F32 ? 1 : 2;
    for (int w = 0; w < 3; ++w)
      for (int t = 0; t < 4; ++t)
        for (int r = 0; r < 3; ++r)
          for (int e = 0; e < tiles; ++e) {
            const fcl_plan h = {.kernel = FCL_FLASH_KERNEL_SIMT, .wg_size = wgs[w],
                                .threads_per_row = tprs[t], .rows_per_thread = rpts[r],
                                .tile_elem_size = e ? 2u : 0u};
            consider(lim, b, shapes, n_shapes, &h, out, &n);
          }
    if (!lim->is_gpu)  /* the CPU kernels: 1 to 4 vectors of 16 rows */
      for (unsigned chunks = 1; chunks <= 4; ++chunks) {
        const fcl_plan h = {.kernel = FCL_FLASH_KERNEL_CPU, .rows_per_thread = chunks};
        consider(lim, b, shapes, n_shapes, &h, out, &n);
      }
  }
  sort_by_distance(out, n, &out[0].plans[0]);
  return n;
}

static void describe_plan(const fcl_plan *p, char *out, size_t len) {
  snprintf(out, len, "%s wg %u bk %u tpr %u rpt %u tile %u splits %u",
           fcl_flash_kernel_name(p->kernel), p->wg_size, p->block_k, p->threads_per_row,
           p->rows_per_thread, p->tile_elem_size, p->splits);
}

static void describe_shape(const fcl_attention_desc *d, char *out, size_t len) {
  snprintf(out, len, "B %zu H %zu/%zu Nq %zu Nk %zu", d->batch, d->heads_q, d->heads_kv,
           d->seqlen_q, d->seqlen_k);
}

/* Device buffers for the largest shape of a run, per storage type; every
 * shape of that type uses their beginnings. Inputs are normal(0, 1). */
typedef struct buffers {
  size_t bytes[9];
  cl_mem mem[9];  /* q k v o lse dout dq dk dv */
} buffers;

static void sizes_of(const fcl_attention_desc *d, int backward, size_t out[9]) {
  fcl_buffer_sizes s;
  if (fcl_attention_buffer_sizes(d, &s, NULL, 0) != FCL_SUCCESS) memset(&s, 0, sizeof s);
  const size_t all[9] = {s.q, s.k, s.v, s.o, s.lse, s.dout, s.dq, s.dk, s.dv};
  memcpy(out, all, sizeof all);
  if (!backward) memset(out + 5, 0, 4 * sizeof *out);
}

static int buffers_make(fcl_context *ctx, fcl_dtype dtype, buffers *b) {
  fclu_rng rng;
  fclu_rng_seed(&rng, 0x7e57 + (uint64_t)dtype);
  const size_t esize = fcl_dtype_size(dtype);
  for (int i = 0; i < 9; ++i) {
    if (!b->bytes[i]) continue;
    const int input = i < 3 || i == 5;
    if (input) {
      const size_t n = b->bytes[i] / esize;
      float *x = malloc(n * sizeof *x);
      if (!x) return -1;
      fclu_fill_normal(&rng, x, n, 1.0, dtype);
      b->mem[i] = fclu_upload(ctx, x, n, dtype);
      free(x);
    } else {
      cl_int err;
      b->mem[i] = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, b->bytes[i],
                                 NULL, &err);
    }
    if (!b->mem[i]) return -1;
  }
  return 0;
}

static void buffers_free(buffers *b) {
  for (int i = 0; i < 9; ++i)
    if (b->mem[i]) clReleaseMemObject(b->mem[i]);
  memset(b->mem, 0, sizeof b->mem);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One call of the bucket's pass; its device time in *ms. */
static fcl_status run_once(fcl_context *ctx, const fcl_attention_desc *d, fcl_pass pass,
                           cl_mem *m, double *ms) {
  fcl_run_info info;
  const fcl_status st =
      pass == FCL_PASS_FORWARD
          ? fcl_attention_forward(ctx, d, FCL_ALGO_FLASH, m[0], m[1], m[2], m[3], m[4],
                                  ms ? &info : NULL)
          : fcl_attention_backward(ctx, d, FCL_ALGO_FLASH, m[0], m[1], m[2], m[3], m[4], m[5],
                                   m[6], m[7], m[8], ms ? &info : NULL);
  if (st == FCL_SUCCESS && ms) *ms = info.ms;
  return st;
}

/* Times a candidate on shape s: a warm-up (which builds it), then the
 * median of `repeat` runs. */
static fcl_status time_on(fcl_context *ctx, const fcl__bucket *b, const fcl_attention_desc *d,
                          const candidate *c, cl_mem *m, int repeat, double *ms) {
  const fcl_plan none = {0};
  /* the backward reads this shape's O and LSE: the rules' forward makes them */
  fcl_status st = b->pass == 1 ? run_once(ctx, d, FCL_PASS_FORWARD, m, NULL) : FCL_SUCCESS;
  if (st == FCL_SUCCESS) st = fcl_context_set_flash_tiling(ctx, &c->hint);
  if (st != FCL_SUCCESS) return st;
  st = run_once(ctx, d, bucket_pass(b), m, NULL);
  double t[1000];
  for (int r = 0; r < repeat && st == FCL_SUCCESS; ++r) st = run_once(ctx, d, bucket_pass(b), m, &t[r]);
  fcl_context_set_flash_tiling(ctx, &none);
  if (st != FCL_SUCCESS) return st;
  qsort(t, (size_t)repeat, sizeof t[0], cmp_double);
  *ms = t[repeat / 2];
  return FCL_SUCCESS;
}

/* The winner's error on a small odd shape of the bucket, by
 * flashcl-bench's check; 1 when within twice the naive algorithm's. */
static int accurate(fcl_context *ctx, int device_index, const fcl__bucket *b,
                    const fcl_plan *hint, double *ratio) {
  fcl_attention_desc d;
  const size_t dim = fcl__bucket_head_dim(b);
  if (b->pass == 2)
    fcl_attention_desc_init(&d, 2, 8, 2, 1, 700, dim);
  else
    fcl_attention_desc_init(&d, 1, 2, 2, 130, 150, dim);
  d.dtype = (fcl_dtype)b->dtype;
  d.causal = (int)b->causal;
  bench_options o;
  memset(&o, 0, sizeof o);
  o.algos = ALGO_FLASH;
  o.check = 1;
  o.warmup = 0;
  o.repeat = 1;
  o.tiling = *hint;
  o.window_left = o.window_right = -1;
  bench_results all = {0};
  *ratio = INFINITY;
  if (fcl_context_set_flash_tiling(ctx, hint) == FCL_SUCCESS)
    bench_measure(ctx, device_index, &o, &d, b->pass == 1 ? PASS_FWDBWD : PASS_FWD, &all);
  const fcl_plan none = {0};
  fcl_context_set_flash_tiling(ctx, &none);
  int ok = 0;
  if (all.count == 1 && all.items[0].status == FCL_SUCCESS && all.items[0].have_check) {
    *ratio = all.items[0].err_ratio;
    ok = *ratio <= 2.0;
  }
  free(all.items);
  return ok;
}

typedef struct run {
  fcl_context *ctx;
  fcl_device_info dev;
  const options *opts;
  int repeat, confirm;
  double deadline;
  buffers bufs[FCL__TUNING_DTYPES];
  fcl__tuned_entry *won;
  size_t n_won;
} run;

/* The winner x against the rules again, r->confirm rounds, the side timed
 * first alternating: on a machine whose neighbours move one timing by more
 * than the difference between two plans, a single win decides nothing.
 * Confirmed when x's geometric mean over the rules' is under 1 in every
 * round and at most 1 - margin in the median one, and x is faster on each
 * shape in that shape's median round (a bucket's plan must not trade one
 * shape for another); *median is the geometric means' median, and x->ms
 * and rules_ms[] become each side's fastest over the rounds. */
static int confirmed(run *r, const fcl__bucket *b, const fcl_attention_desc *shapes,
                     size_t n_shapes, const candidate *rules, candidate *x, double *rules_ms,
                     double *median, double *shape_median) {
  cl_mem *m = r->bufs[b->dtype].mem;
  double g[MAX_CONFIRM], per_shape[2][MAX_CONFIRM];
  double best[2][2] = {{INFINITY, INFINITY}, {INFINITY, INFINITY}};
  int all_won = 1;
  for (int k = 0; k < r->confirm; ++k) {
    double ms[2][2];
    for (int turn = 0; turn < 2; ++turn) {
      const int side = (k + turn) % 2;  /* 0: the rules, 1: x */
      for (size_t s = 0; s < n_shapes; ++s) {
        if (time_on(r->ctx, b, &shapes[s], side ? x : rules, m, r->repeat, &ms[side][s]) !=
            FCL_SUCCESS)
          return 0;
        best[side][s] = fmin(best[side][s], ms[side][s]);
      }
    }
    double log_sum = 0;
    for (size_t s = 0; s < n_shapes; ++s) {
      per_shape[s][k] = ms[1][s] / ms[0][s];
      log_sum += log(per_shape[s][k]);
    }
    g[k] = exp(log_sum / (double)n_shapes);
    all_won &= g[k] < 1.0;
  }
  qsort(g, (size_t)r->confirm, sizeof g[0], cmp_double);
  *median = g[r->confirm / 2];
  for (size_t s = 0; s < n_shapes; ++s) {
    qsort(per_shape[s], (size_t)r->confirm, sizeof per_shape[s][0], cmp_double);
    shape_median[s] = per_shape[s][r->confirm / 2];
    all_won &= shape_median[s] < 1.0;
    x->ms[s] = best[1][s];
    rules_ms[s] = best[0][s];
  }
  return all_won && *median <= 1.0 - r->opts->margin;
}

/* Tunes one bucket within `seconds`; appends its winner, if any, to run->won. */
static int tune_bucket(run *r, const fcl__bucket *b, size_t index, size_t total,
                       double seconds) {
  const double start = now_s();
  char name[48];
  fcl__bucket_name(b, name, sizeof name);
  fcl_attention_desc shapes[2];
  const size_t n_shapes = fcl__bucket_shapes(&r->dev.limits, b, shapes);
  static candidate c[MAX_CANDIDATES];
  const size_t n = n_shapes ? enumerate(&r->dev.limits, b, shapes, n_shapes, c) : 0;
  progress("[%zu/%zu] %s: %zu candidates, %.0f s\n", index + 1, total, name, n, seconds);
  if (n == 0) return 0;
  cl_mem *m = r->bufs[b->dtype].mem;
  size_t timed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 1 && now_s() - start > seconds) break;  /* the rules and one other at least */
    if (now_s() > r->deadline && i > 1) break;
    candidate *x = &c[i];
    x->timed = 0;
    for (size_t s = 0; s < n_shapes; ++s) {
      if (time_on(r->ctx, b, &shapes[s], x, m, r->repeat, &x->ms[s]) != FCL_SUCCESS) {
        x->timed = -1;
        break;
      }
      x->timed = (int)s + 1;
      /* far slower than the rules on the first shape: not a winner */
      if (i > 0 && !r->opts->without_rules && x->ms[s] > 1.5 * c[0].ms[s]) break;
    }
    ++timed;
    char what[160];
    describe_plan(&x->plans[0], what, sizeof what);
    if (x->timed < 0)
      progress("    %-52s failed to run\n", what);
    else
      progress("    %-52s %10.4f %10.4f ms\n", what, x->ms[0], x->timed > 1 ? x->ms[1] : NAN);
    if (i == 0 && x->timed != (int)n_shapes) {
      progress("  the rules' plan failed to run: skipped\n");
      return 0;
    }
  }
  /* scores, then winners in order until one is accurate */
  for (size_t i = 0; i < timed; ++i) {
    candidate *x = &c[i];
    x->score = INFINITY;
    if (x->timed != (int)n_shapes) continue;
    double log_sum = 0;
    int slower = 0;
    for (size_t s = 0; s < n_shapes; ++s) {
      log_sum += log(x->ms[s] / c[0].ms[s]);
      slower |= x->ms[s] > c[0].ms[s];
    }
    x->score = exp(log_sum / (double)n_shapes);
    if (i > 0 && !r->opts->without_rules && (slower || x->score > 1.0 - r->opts->margin))
      x->score = INFINITY;
  }
  if (r->opts->without_rules) c[0].score = INFINITY;
  double rules_ms[2] = {c[0].ms[0], n_shapes > 1 ? c[0].ms[1] : NAN};
  for (int refused = 0;; ++refused) {
    size_t best = 0;
    for (size_t i = 1; i < timed; ++i)
      if (c[i].score < c[best].score) best = i;
    if (best == 0 || !isfinite(c[best].score) || refused == MAX_REFUSED) {
      progress("  %zu timed in %.0f s; the rules' plan stays (%.4g ms)\n", timed,
               now_s() - start, c[0].ms[0]);
      return 0;
    }
    double ratio;
    char what[160];
    describe_plan(&c[best].plans[0], what, sizeof what);
    if (!accurate(r->ctx, 0, b, &c[best].hint, &ratio)) {
      progress("  %s: error ratio %.3g against the reference, over 2: next\n", what, ratio);
      c[best].score = INFINITY;
      continue;
    }
    double median = c[best].score, shape_median[2] = {NAN, NAN};
    if (!r->opts->without_rules && r->confirm > 0 &&
        !confirmed(r, b, shapes, n_shapes, &c[0], &c[best], rules_ms, &median, shape_median)) {
      progress("  %s: %.3fx the rules' time at first, %.3fx in the median of %d rounds "
               "again (per shape %.3fx, %.3fx): not confirmed, next\n",
               what, c[best].score, median, r->confirm, shape_median[0], shape_median[1]);
      c[best].score = INFINITY;
      continue;
    }
    fcl__tuned_entry *e = &r->won[r->n_won++];
    memset(e, 0, sizeof *e);
    e->bucket = *b;
    e->hint = c[best].hint;
    for (size_t s = 0; s < n_shapes; ++s) {
      e->ms += c[best].ms[s];
      e->rules_ms += rules_ms[s];
      char shape[64];
      describe_shape(&shapes[s], shape, sizeof shape);
      const size_t used = strlen(e->shapes);
      snprintf(e->shapes + used, sizeof e->shapes - used, "%s%s", s ? "; " : "", shape);
    }
    progress("  %zu timed in %.0f s; %s: %.3fx the rules' time (error ratio %.2f)\n", timed,
             now_s() - start, what, median, ratio);
    return 0;
  }
}

/* Why bucket `name` has no shape to time on a device (fcl__bucket_shapes):
 * the small buckets hold problems under a line of rows per compute unit,
 * which on few units leaves none of the lengths timed. */
static void no_shape_reason(const fcl_device_limits *limits, const char *name, char *out,
                            size_t len) {
  fcl__bucket b;
  const unsigned cu = fcl__compute_units(limits);
  if (fcl__bucket_parse(name, &b) && b.size == 0 && b.pass == 2)
    snprintf(out, len, "a small decode bucket holds calls of fewer sequences x KV heads than "
             "compute units, %u here, and its timed shapes have 8 KV heads", cu);
  else if (fcl__bucket_parse(name, &b) && b.size == 0)
    snprintf(out, len, "a small bucket holds problems of under %u query rows per compute "
             "unit, %u on %u unit%s: too few for one sequence of 64 tokens or more over "
             "the standard shape's heads", FCL__SMALL_ROWS_PER_CU, FCL__SMALL_ROWS_PER_CU * cu,
             cu, cu == 1 ? "" : "s");
  else
    snprintf(out, len, "none of its standard shapes falls in it on this device");
}

/* Entries of an existing database for this device whose buckets this run
 * does not tune are kept. */
static void keep_others(run *r, const char *path, const unsigned char *tuned_now) {
  char why[1200];
  char *text = fcl__read_file(path, FCL__TUNING_FILE_MAX, why, sizeof why);
  if (!text) {
    if (errno != ENOENT) progress("flashcl-tune: %s; it is replaced\n", why);
    return;
  }
  static fcl__tuning db;
  const int mine = fcl__tuning_parse(text, &r->dev, 1, &db, why, sizeof why);
  free(text);
  if (!mine) {
    progress("flashcl-tune: %s is replaced (%s)\n", path, why);
    return;
  }
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    if (!db.have[i] || tuned_now[i]) continue;
    fcl__tuned_entry *e = &r->won[r->n_won++];
    memset(e, 0, sizeof *e);
    e->bucket = fcl__bucket_at(i);
    e->hint = db.plans[i];
    e->ms = e->rules_ms = NAN;
    snprintf(e->shapes, sizeof e->shapes, "kept from the previous database");
  }
}

static int make_dirs(const char *dir) {
  char path[1024];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return -1;
  for (char *p = path + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  mkdir(path, 0755);
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

static int write_database(run *r, const char *dir) {
  char name[320], path[1400], tmp[1420], when[32];
  fcl_tuning_info ti;
  fcl_context_tuning(r->ctx, &ti);
  snprintf(name, sizeof name, "%s", ti.file_name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  const time_t t = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
  if (make_dirs(dir) != 0) {
    fprintf(stderr, "flashcl-tune: cannot make the folder %s\n", dir);
    return -1;
  }
  FILE *f = fopen(tmp, "w");
  int ok = f && fcl__tuning_write(f, &r->dev, when, r->won, r->n_won) == 0;
  if (f && fclose(f) != 0) ok = 0;
  if (ok && rename(tmp, path) != 0) ok = 0;
  if (!ok) {
    remove(tmp);
    fprintf(stderr, "flashcl-tune: cannot write %s\n", path);
    return -1;
  }
  printf("database: %s (%zu tuned buckets)\n", path, r->n_won);
  return 0;
}

int main(int argc, char **argv) {
  options o;
  char why[FCLU_WHY_LEN] = "";
  const int parsed = parse(argc, argv, &o, why, sizeof why);
  if (parsed == 1) {
    fputs(usage_text, stdout);
    return EXIT_OK;
  }
  if (parsed < 0) {
    fprintf(stderr, "flashcl-tune: %s\n%s", why, usage_text);
    return EXIT_USAGE;
  }
  quiet = o.quiet;
  if (!o.n_patterns) {
    for (size_t i = 0; i < sizeof default_patterns / sizeof default_patterns[0]; ++i)
      o.patterns[o.n_patterns++] = default_patterns[i];
  }
  for (size_t i = 0; i < o.n_patterns; ++i)
    if (!pattern_valid(o.patterns[i])) {
      fprintf(stderr, "flashcl-tune: --buckets: '%s' names no bucket\n%s", o.patterns[i],
              usage_text);
      return EXIT_USAGE;
    }
  char dir[1024];
  if (o.out_dir)
    snprintf(dir, sizeof dir, "%s", o.out_dir);
  else if (!fcl__tuning_default_dir(dir, sizeof dir)) {
    fprintf(stderr, "flashcl-tune: no folder for the database: give --out, or set "
                    "FLASHCL_TUNING_DIR or HOME\n");
    return EXIT_USAGE;
  }

  run r;
  memset(&r, 0, sizeof r);
  r.opts = &o;
  fcl_status st = fcl_context_create(o.device, &r.ctx);
  if (st != FCL_SUCCESS) {
    fprintf(stderr, "flashcl-tune: no device: %s\n", fcl_context_last_error(r.ctx));
    fcl_context_release(r.ctx);
    return EXIT_FAILED;
  }
  fcl_context_device(r.ctx, &r.dev);
  fcl_context_use_tuned_plans(r.ctx, 0);  /* the rules are the baseline */
  r.repeat = o.repeat ? o.repeat : r.dev.limits.is_gpu ? 7 : 3;
  r.confirm = o.confirm >= 0 ? o.confirm : r.dev.limits.is_gpu ? 2 : 3;

  /* the buckets, their shapes, and the buffers for the largest */
  static size_t chosen[FCL__TUNING_BUCKETS];
  static unsigned char tuned_now[FCL__TUNING_BUCKETS];
  size_t n_chosen = 0, n_shapeless = 0;
  char shapeless[48] = "";
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    const fcl__bucket b = fcl__bucket_at(i);
    char name[48];
    fcl__bucket_name(&b, name, sizeof name);
    int want = 0;
    for (size_t p = 0; p < o.n_patterns; ++p) want |= matches(o.patterns[p], name);
    fcl_attention_desc shapes[2];
    const size_t n_shapes = want ? fcl__bucket_shapes(&r.dev.limits, &b, shapes) : 0;
    if (want && !n_shapes && !n_shapeless++) snprintf(shapeless, sizeof shapeless, "%s", name);
    if (!n_shapes) continue;
    chosen[n_chosen++] = i;
    tuned_now[i] = 1;
    for (size_t s = 0; s < n_shapes; ++s) {
      size_t sz[9];
      sizes_of(&shapes[s], b.pass == 1, sz);
      for (int k = 0; k < 9; ++k)
        if (sz[k] > r.bufs[b.dtype].bytes[k]) r.bufs[b.dtype].bytes[k] = sz[k];
    }
  }
  progress("flashcl-tune: %s (%s, driver %s): %zu buckets, %.0f s\n", r.dev.name,
           r.dev.platform, r.dev.driver, n_chosen, o.budget_s);
  if (n_shapeless) {
    char why_none[200];
    no_shape_reason(&r.dev.limits, shapeless, why_none, sizeof why_none);
    if (!n_chosen || !o.quiet)
      fprintf(stderr, "flashcl-tune: %s%zu bucket%s chosen ha%s no problem to time on this "
              "device (%s%s: %s)\n", n_chosen ? "" : "nothing to tune: ", n_shapeless,
              n_shapeless == 1 ? "" : "s", n_shapeless == 1 ? "s" : "ve",
              n_shapeless == 1 ? "" : "e.g. ", shapeless, why_none);
  }
  if (!n_chosen) {
    fcl_context_release(r.ctx);
    return EXIT_NOTHING;
  }
  if (o.dry_run) {
    for (size_t i = 0; i < n_chosen; ++i) {
      const fcl__bucket b = fcl__bucket_at(chosen[i]);
      char name[48], shape[64];
      fcl__bucket_name(&b, name, sizeof name);
      fcl_attention_desc shapes[2];
      const size_t n_shapes = fcl__bucket_shapes(&r.dev.limits, &b, shapes);
      static candidate c[MAX_CANDIDATES];
      printf("%-26s %3zu candidates;", name, enumerate(&r.dev.limits, &b, shapes, n_shapes, c));
      for (size_t s = 0; s < n_shapes; ++s) {
        describe_shape(&shapes[s], shape, sizeof shape);
        printf(" %s%s", s ? "| " : "", shape);
      }
      printf("\n");
    }
    fcl_context_release(r.ctx);
    return EXIT_OK;
  }
  r.won = calloc(FCL__TUNING_BUCKETS, sizeof *r.won);
  int failed = !r.won;
  for (int t = 0; t < FCL__TUNING_DTYPES && !failed; ++t)
    if (buffers_make(r.ctx, (fcl_dtype)t, &r.bufs[t]) != 0) {
      fprintf(stderr, "flashcl-tune: cannot allocate the inputs on %s\n", r.dev.name);
      failed = 1;
    }
  const double start = now_s();
  r.deadline = start + o.budget_s;
  for (size_t i = 0; i < n_chosen && !failed; ++i) {
    const fcl__bucket b = fcl__bucket_at(chosen[i]);
    const double left = r.deadline - now_s();
    tune_bucket(&r, &b, i, n_chosen, left > 0 ? left / (double)(n_chosen - i) : 0);
  }
  if (!failed) {
    printf("%-26s %-44s %10s %10s %7s\n", "bucket", "tuned hint", "ms", "rules ms", "ratio");
    for (size_t i = 0; i < r.n_won; ++i) {
      char name[48], what[160];
      fcl__bucket_name(&r.won[i].bucket, name, sizeof name);
      describe_plan(&r.won[i].hint, what, sizeof what);
      printf("%-26s %-44s %10.4f %10.4f %7.3f\n", name, what, r.won[i].ms, r.won[i].rules_ms,
             r.won[i].ms / r.won[i].rules_ms);
    }
    char path[1400], name[320];
    fcl_tuning_info ti;
    fcl_context_tuning(r.ctx, &ti);
    snprintf(name, sizeof name, "%s", ti.file_name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    keep_others(&r, path, tuned_now);
    failed = write_database(&r, dir) != 0;
    progress("flashcl-tune: %.0f s\n", now_s() - start);
  }
  for (int t = 0; t < FCL__TUNING_DTYPES; ++t) buffers_free(&r.bufs[t]);
  free(r.won);
  fcl_context_release(r.ctx);
  return failed ? EXIT_FAILED : EXIT_OK;
}
