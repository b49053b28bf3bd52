/*
 * options.c — flashcl-bench's command line. The interface is a contract
 * (docs/design.md): extend it, don't break it.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static const char usage[] =
    "usage: flashcl-bench [options]\n"
    "\n"
    "Times exact attention with the flash and naive algorithms on OpenCL\n"
    "devices and reports milliseconds, global-memory bytes, GB/s, TFLOP/s,\n"
    "the speed-up of flash over naive and, with --check, the error against a\n"
    "float64 reference.\n"
    "\n"
    "Devices and algorithms:\n"
    "  --device SEL      all | cpu | gpu | P:D (platform:device index, as\n"
    "                    flashcl-info lists) | a substring of the device name.\n"
    "                    Default: $FLASHCL_DEVICE, else the first GPU, else the\n"
    "                    first device.\n"
    "  --algo LIST       flash,naive (default: both)\n"
    "  --pass P          fwd | bwd | fwdbwd (default fwd)\n"
    "  --dtype LIST      f32, f16, bf16, or a list of them such as f32,f16,bf16:\n"
    "                    each shape runs in each storage type (default f32)\n"
    "\n"
    "Shape (any one given selects a single shape; the rest default to\n"
    "batch 1, heads 8, heads-kv = heads, seqlen-k = seqlen, head-dim 64):\n"
    "  --batch B --heads H --heads-kv HKV --seqlen N --seqlen-k NK --head-dim D\n"
    "  --head-dim-v DV   V's, O's and their gradients' head size (default D):\n"
    "                    DeepSeek's latent attention prefills at D 192, DV 128;\n"
    "                    the naive algorithm and the flash SIMT and CPU kernels\n"
    "                    run it, unsplit, and the flash decode kernels' forward\n"
    "                    (decode-shaped calls on a GPU; widths over 256 on any\n"
    "                    device); the MMA kernels refuse (FCL_ERROR_UNSUPPORTED);\n"
    "                    not with --layout qkv\n"
    "  --mla             DeepSeek's latent attention decode: V is a view of K's\n"
    "                    first DV columns (the same buffer and layout, K's row\n"
    "                    stride: the SIMT decode kernel reads each key row once);\n"
    "                    sets --head-dim 576, --head-dim-v 512 and --heads-kv 1\n"
    "                    unless given (e.g. --mla --heads 128 --seqlen 1\n"
    "                    --seqlen-k 8192 --dtype f16 --check); --layout bshd only\n"
    "  --causal [both]   causal mask (bottom-right aligned); \"both\" runs each\n"
    "                    shape masked and unmasked\n"
    "  --sweep           the standard sweep sized for the device (the default\n"
    "                    when no shape is given): on GPUs flash-attn's benchmark\n"
    "                    shapes (16k tokens, hidden 2048, d 64 and 128, N 512 to\n"
    "                    16k, causal and not); on CPUs 2k tokens, hidden 512,\n"
    "                    N 256 to 2k\n"
    "  --sweep-decode    the sweep's decode family: one new query row (causal)\n"
    "                    against a cache, Hq/Hkv 32/8, d 128; on GPUs B 1, 8, 64 x\n"
    "                    cache 1k, 8k, 32k, 128k up to 2^20 cached tokens (B 64:\n"
    "                    1k, 8k); on CPUs B 1, 8 x 1k, 8k\n"
    "\n"
    "Measuring:\n"
    "  --check           compare with the float64 host reference (on a sample\n"
    "                    of rows) and print the errors\n"
    "  --count-io        also run instrumented kernels and report the bytes they\n"
    "                    counted next to the model's\n"
    "  --warmup W        untimed runs first (default 2 on GPUs, 1 on CPUs)\n"
    "  --repeat R        timed runs; the median is reported (default 10 on\n"
    "                    GPUs, 3 on CPUs)\n"
    "  --back-to-back N  time each sample as N calls enqueued one after another\n"
    "                    without waiting (the time per call: the span / N), as\n"
    "                    an inference engine runs a model's layers, so that the\n"
    "                    host's launch latency is hidden behind the device's\n"
    "                    work; default: each call timed alone from an idle queue\n"
    "  --no-peaks        skip measuring each device's copy bandwidth and FMA\n"
    "                    rate (the roofline's ceilings)\n"
    "  --io-table        print, per device, naive vs flash bytes as N grows\n"
    "  --no-tuning       plan by the rules only, ignoring the device's tuning\n"
    "                    database (flashcl-tune; on by default)\n"
    "  --tiling BK,WG,TPR,RPT[,TILE]\n"
    "                    override the planner: keys per tile, work-group size,\n"
    "                    work-items per row, rows per work-item, bytes per\n"
    "                    local tile element (4: floats; 2: the f16/bf16 storage\n"
    "                    type, converted at each read) (0 = planner's). With\n"
    "                    --pass bwd, the forward that makes O and LSE takes\n"
    "                    the planner's tiling where it cannot take this one\n"
    "\n"
    "The problem beyond its shape (every shape of the run takes it):\n"
    "  --window L,R      sliding window: a query sees the L keys left of its\n"
    "                    diagonal and R right of it; -1 is unbounded (flash-attn's\n"
    "                    window_size; the causal runs of --causal take R = 0)\n"
    "  --softcap C       logits soft-capped at +-C (C tanh(logit / C))\n"
    "  --alibi           ALiBi biases, the ALiBi paper's slopes for the head count\n"
    "  --sinks           attention sinks: a logit per query head, drawn from\n"
    "                    normal(0, 1), in every row's denominator (gpt-oss);\n"
    "                    backward passes compute their gradient (dsinks) too\n"
    "  --sinks-value X   attention sinks, X (finite) for every head\n"
    "  --varlen N1,N2,.. one ragged batch of sequences of those lengths (0 allowed;\n"
    "                    at most 256; their keys as long, or --seqlen-k each)\n"
    "  --cache-lens L1,.. a KV cache's lengths, one per batch entry (0 allowed; at\n"
    "                    most 256): each entry's keys are the first L of its\n"
    "                    --seqlen-k (the capacity; default the longest L), its\n"
    "                    queries their last positions (forward only)\n"
    "  --paged P         K and V as a paged cache: pools of pages of P tokens (a\n"
    "                    multiple of 16) named by a block table in a shuffled\n"
    "                    order (forward only)\n"
    "  --kv-dtype LIST   how K and V are kept: as-dtype (the default: in --dtype),\n"
    "                    int8, int4, fp8e4m3, fp8e5m2 (include/flashcl.h,\n"
    "                    fcl_kv_dtype; head_dim a multiple of 32 for int8 and\n"
    "                    int4), or a list such as as-dtype,int8,int4: each shape\n"
    "                    runs in each (forward only)\n"
    "  --layout L        bshd (packed [B,N,H,d], the default), bhsd (PyTorch's\n"
    "                    [B,H,N,d] views of q, k, v and their gradients) or qkv\n"
    "                    (q, k, v views of one packed buffer, the gradients of\n"
    "                    another)\n"
    "  --batch-invariant [both]\n"
    "                    the batch-invariant mode (fcl_attention_desc.\n"
    "                    batch_invariant: a sequence's bits whatever the rest of\n"
    "                    the batch); \"both\" runs each shape without it, then\n"
    "                    with it, to measure its cost\n"
    "\n"
    "  --kernel K        the flash kernels, forward and backward: auto (the\n"
    "                    planner's), simt, mma (tensor cores on NVIDIA\n"
    "                    sm_80+; emulated, slowly, elsewhere), decode (the\n"
    "                    forward of at most 8 rows a block, packed heads'\n"
    "                    slots; its work-items divide the keys) or\n"
    "                    decode-mma (the same on the matrix instructions,\n"
    "                    f16/bf16, up to 16 rows; emulated off NVIDIA) or cpu\n"
    "                    (the forward written for CPU cores, the planner's\n"
    "                    there; forward only) or wgmma (the forward on\n"
    "                    Hopper's warpgroup MMA, f16/bf16, head_dim up to\n"
    "                    128; sm_90a on NVIDIA cc 9.0, mma.sync elsewhere on\n"
    "                    NVIDIA, emulated off NVIDIA; forward only). With\n"
    "                    mma and decode, --tiling takes BK (forward) and WG,\n"
    "                    and for the mma forward RPT 4: two 16-row tiles a\n"
    "                    warp (--tiling 0,0,0,4; 2 or 0: one); with wgmma,\n"
    "                    BK 32 or 64 (or 128 at head_dim up to 64) and WG\n"
    "                    128, 256, 384 (the default) or 512: 1 to 4\n"
    "                    warpgroups of 64 rows sharing each K and V tile\n"
    "  --splits S        the forward's key splits (split-KV: partial states\n"
    "                    over key ranges, merged), 1 = none, 0 = the\n"
    "                    planner's (default); decode is --seqlen 1..16 with a\n"
    "                    long --seqlen-k\n"
    "  --merge M         how split states merge: kernel (a second launch),\n"
    "                    last-split (the block's last split merges them in\n"
    "                    the same launch; decode kernels) or auto (default)\n"
    "  --packed-heads G  the forward's blocks hold the rows of the G query heads\n"
    "                    of a KV head (K and V read once for them): G =\n"
    "                    heads / heads-kv, 1 = never, 0 = the planner's\n"
    "  --v-stages N      the MMA forward's V tiles: 2 fetches the next tile's V\n"
    "                    a tile ahead (16-bit, tiles of at most 64 keys), 1\n"
    "                    during the tile's S = Q K^T, 0 the planner's (default)\n"
    "\n"
    "Output:\n"
    "  --json FILE       {\"devices\": [...], \"results\": [...]}\n"
    "  --csv FILE        one line per result\n"
    "  --svg FILE        per device: throughput against sequence length, a\n"
    "                    roofline with every run on it, and flash's speed-up\n"
    "                    over naive\n"
    "  --quiet           no progress on stderr\n"
    "  --help, --version\n"
    "\n"
    "Exit status:\n"
    "  0  every run succeeded\n"
    "  1  a run failed (its status and message are in the table and the JSON),\n"
    "     no device could be used, or an output file could not be written\n"
    "  2  the command line is wrong\n"
    "  3  every run that did not succeed was FCL_ERROR_UNSUPPORTED: the device or\n"
    "     the algorithm cannot run that configuration (e.g. naive f16 without\n"
    "     cl_khr_fp16)\n";

const char *bench_usage(void) { return usage; }

/* Parsing stops at the first bad option with its reason in the caller's
 * buffer: a parser that exits could not be fuzzed. */
typedef struct parser {
  char *why;
  size_t why_len;
} parser;

static int refuse(parser *ps, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int refuse(parser *ps, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->why, ps->why_len, fmt, ap);
  va_end(ap);
  return -1;
}

/* A shape size: any positive integer; the library judges the shape. */
static int parse_size(parser *ps, const char *option, const char *text, size_t *out) {
  char why[FCLU_WHY_LEN];
  uint64_t v;
  if (fclu_parse_u64(text, 1, SIZE_MAX, &v, why, sizeof why) != 0)
    return refuse(ps, "%s needs a positive integer: %s", option, why);
  *out = (size_t)v;
  return 0;
}

static int parse_count(parser *ps, const char *option, const char *text, int min, int *out) {
  char why[FCLU_WHY_LEN];
  uint64_t v;
  if (fclu_parse_u64(text, (uint64_t)min, 1000000, &v, why, sizeof why) != 0)
    return refuse(ps, "%s needs a count from %d to 1000000: %s", option, min, why);
  *out = (int)v;
  return 0;
}

static int parse_algos(parser *ps, const char *text, unsigned *out) {
  unsigned algos = 0;
  char buf[64];
  if (strlen(text) >= sizeof buf) return refuse(ps, "--algo '%s' is too long", text);
  snprintf(buf, sizeof buf, "%s", text);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    const unsigned bit = !strcmp(tok, "flash") ? ALGO_FLASH : !strcmp(tok, "naive") ? ALGO_NAIVE : 0;
    if (!bit) return refuse(ps, "unknown algorithm '%s' (flash, naive)", tok);
    algos |= bit;
  }
  if (!algos) return refuse(ps, "--algo needs flash, naive or both");
  *out = algos;
  return 0;
}

static int parse_dtypes(parser *ps, const char *text, bench_options *o) {
  char buf[64], why[FCLU_WHY_LEN];
  if (strlen(text) >= sizeof buf) return refuse(ps, "--dtype '%s' is too long", text);
  snprintf(buf, sizeof buf, "%s", text);
  int n = 0;
  fcl_dtype types[3];
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    fcl_dtype t;
    if (fclu_parse_dtype(tok, &t, why, sizeof why) != 0) return refuse(ps, "%s", why);
    for (int i = 0; i < n; ++i)
      if (types[i] == t) return refuse(ps, "dtype '%s' is listed twice", tok);
    types[n++] = t;
  }
  if (!n) return refuse(ps, "--dtype needs f32, f16 or bf16");
  memcpy(o->dtypes, types, sizeof types);
  o->n_dtypes = n;
  o->dtype = o->dtypes[0];
  return 0;
}

static int parse_kv_dtypes(parser *ps, const char *text, bench_options *o) {
  static const fcl_kv_dtype forms[5] = {FCL_KV_AS_DTYPE, FCL_KV_Q8_0, FCL_KV_Q4_0,
                                        FCL_KV_FP8_E4M3, FCL_KV_FP8_E5M2};
  char buf[64];
  if (strlen(text) >= sizeof buf) return refuse(ps, "--kv-dtype '%s' is too long", text);
  snprintf(buf, sizeof buf, "%s", text);
  int n = 0;
  fcl_kv_dtype got[5];
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    int found = -1;
    for (int i = 0; i < 5; ++i)
      if (!strcmp(tok, fcl_kv_dtype_name(forms[i]))) found = i;
    if (found < 0)
      return refuse(ps, "--kv-dtype '%s': as-dtype, int8, int4, fp8e4m3 or fp8e5m2", tok);
    for (int i = 0; i < n; ++i)
      if (got[i] == forms[found]) return refuse(ps, "kv-dtype '%s' is listed twice", tok);
    got[n++] = forms[found];
  }
  if (!n) return refuse(ps, "--kv-dtype needs as-dtype, int8, int4, fp8e4m3 or fp8e5m2");
  memcpy(o->kv_dtypes, got, sizeof got);
  o->n_kv_dtypes = n;
  return 0;
}

/* A strict integer of at least -1 (a window bound). */
static int parse_bound(const char *text, int *out) {
  uint64_t v;
  char why[FCLU_WHY_LEN];
  if (!strcmp(text, "-1")) {
    *out = -1;
    return 0;
  }
  if (fclu_parse_u64(text, 0, 2147483647, &v, why, sizeof why) != 0) return -1;
  *out = (int)v;
  return 0;
}

static int parse_window(parser *ps, const char *text, bench_options *o) {
  char buf[64];
  const char *comma = strchr(text, ',');
  if (!comma || strlen(text) >= sizeof buf || strchr(comma + 1, ','))
    return refuse(ps, "--window needs L,R (each -1 or at least 0), got '%s'", text);
  memcpy(buf, text, (size_t)(comma - text));
  buf[comma - text] = '\0';
  if (parse_bound(buf, &o->window_left) != 0 || parse_bound(comma + 1, &o->window_right) != 0)
    return refuse(ps, "--window needs L,R (each -1 or at least 0), got '%s'", text);
  return 0;
}

static int parse_softcap(parser *ps, const char *text, float *out) {
  char *end;
  errno = 0;
  const double v = strtod(text, &end);
  if (errno || end == text || *end || !(v >= 0) || v > 3.4e38 || text[0] == '-' || text[0] == '+' ||
      text[0] == ' ')
    return refuse(ps, "--softcap needs a finite number >= 0, got '%s'", text);
  *out = (float)v;
  return 0;
}

static int parse_sink(parser *ps, const char *text, float *out) {
  char *end;
  errno = 0;
  const double v = strtod(text, &end);
  if (errno || end == text || *end || !isfinite(v) || fabs(v) > 3.4e38 || text[0] == ' ')
    return refuse(ps, "--sinks-value needs a finite number, got '%s'", text);
  *out = (float)v;
  return 0;
}

static int parse_cache_lens(parser *ps, const char *text, bench_options *o) {
  uint64_t lens[256];
  size_t n = 0;
  char why[FCLU_WHY_LEN];
  if (fclu_parse_u64_list(text, 2147483647, 1, 256, lens, &n, why, sizeof why) != 0)
    return refuse(ps, "--cache-lens needs lengths L1,L2,... (one per batch entry): %s", why);
  for (size_t i = 0; i < n; ++i) o->cache_lens[i] = (int32_t)lens[i];
  o->n_cache_lens = (int)n;
  return 0;
}

static int parse_varlen(parser *ps, const char *text, bench_options *o) {
  uint64_t lens[256];
  size_t n = 0;
  char why[FCLU_WHY_LEN];
  if (fclu_parse_u64_list(text, 2147483647, 1, 256, lens, &n, why, sizeof why) != 0)
    return refuse(ps, "--varlen needs lengths N1,N2,...: %s", why);
  o->cu_varlen_q[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    if (lens[i] > (uint64_t)(2147483647 - o->cu_varlen_q[i]))
      return refuse(ps, "--varlen: the lengths add up past 2^31 - 1");
    o->cu_varlen_q[i + 1] = o->cu_varlen_q[i] + (int32_t)lens[i];
  }
  o->n_varlen = (int)n;
  return 0;
}

static int parse_tiling(parser *ps, const char *text, fcl_plan *hint) {
  uint64_t v[5] = {0, 0, 0, 0, 0};
  size_t n = 0;
  char why[FCLU_WHY_LEN];
  if (fclu_parse_u64_list(text, UINT32_MAX, 4, 5, v, &n, why, sizeof why) != 0)
    return refuse(ps, "--tiling needs BK,WG,TPR,RPT[,TILE], e.g. 32,128,2,1: %s", why);
  const unsigned kernel = hint->kernel, splits = hint->splits, packed = hint->packed_heads,
                 merge = hint->merge, v_stages = hint->v_stages;
  memset(hint, 0, sizeof *hint);
  hint->block_k = (unsigned)v[0];
  hint->wg_size = (unsigned)v[1];
  hint->threads_per_row = (unsigned)v[2];
  hint->rows_per_thread = (unsigned)v[3];
  hint->tile_elem_size = (unsigned)v[4];
  hint->kernel = kernel;
  hint->splits = splits;
  hint->packed_heads = packed;
  hint->merge = merge;
  hint->v_stages = v_stages;
  return 0;
}

int bench_parse(int argc, char **argv, bench_options *o, char *why, size_t why_len) {
  parser p = {why, why_len}, *ps = &p;
  if (why && why_len) why[0] = '\0';
  memset(o, 0, sizeof *o);
  o->algos = ALGO_FLASH | ALGO_NAIVE;
  o->pass = PASS_FWD;
  o->dtype = o->dtypes[0] = FCL_DTYPE_F32;
  o->n_dtypes = 1;
  o->kv_dtypes[0] = FCL_KV_AS_DTYPE;
  o->n_kv_dtypes = 1;
  o->causal = CAUSAL_UNSET;
  o->warmup = -1;  /* -1: by device type */
  o->repeat = -1;
  o->peaks = 1;
  o->window_left = o->window_right = -1;
  int shape_given = 0;

  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    /* The option's value, or a refusal. */
#define VALUE(v)                                                 \
  do {                                                           \
    if (i + 1 >= argc) return refuse(ps, "%s needs a value", a); \
    (v) = argv[++i];                                             \
  } while (0)
#define TRY(expr)                    \
  do {                               \
    if ((expr) != 0) return -1;      \
  } while (0)
    const char *val = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      return BENCH_PARSE_HELP;
    } else if (!strcmp(a, "--version")) {
      return BENCH_PARSE_VERSION;
    } else if (!strcmp(a, "--device")) {
      VALUE(o->device);
    } else if (!strcmp(a, "--algo")) {
      VALUE(val);
      TRY(parse_algos(ps, val, &o->algos));
    } else if (!strcmp(a, "--pass")) {
      VALUE(val);
      if (!strcmp(val, "fwd")) o->pass = PASS_FWD;
      else if (!strcmp(val, "bwd")) o->pass = PASS_BWD;
      else if (!strcmp(val, "fwdbwd")) o->pass = PASS_FWDBWD;
      else return refuse(ps, "unknown pass '%s' (fwd, bwd, fwdbwd)", val);
    } else if (!strcmp(a, "--dtype")) {
      VALUE(val);
      TRY(parse_dtypes(ps, val, o));
    } else if (!strcmp(a, "--batch")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->batch));
      shape_given = 1;
    } else if (!strcmp(a, "--heads")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->heads));
      shape_given = 1;
    } else if (!strcmp(a, "--heads-kv")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->heads_kv));
      shape_given = 1;
    } else if (!strcmp(a, "--seqlen")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->seqlen));
      shape_given = 1;
    } else if (!strcmp(a, "--seqlen-k")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->seqlen_k));
      shape_given = 1;
    } else if (!strcmp(a, "--head-dim")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->head_dim));
      shape_given = 1;
    } else if (!strcmp(a, "--head-dim-v")) {
      VALUE(val);
      TRY(parse_size(ps, a, val, &o->head_dim_v));
      shape_given = 1;
    } else if (!strcmp(a, "--mla")) {
      o->mla = 1;
      shape_given = 1;
    } else if (!strcmp(a, "--causal")) {
      o->causal = CAUSAL_ON;
      if (i + 1 < argc && !strcmp(argv[i + 1], "both")) o->causal = CAUSAL_BOTH, ++i;
    } else if (!strcmp(a, "--sweep")) {
      o->sweep = 1;
    } else if (!strcmp(a, "--sweep-decode")) {
      o->sweep = o->sweep_decode = 1;
    } else if (!strcmp(a, "--check")) {
      o->check = 1;
    } else if (!strcmp(a, "--count-io")) {
      o->count_io = 1;
    } else if (!strcmp(a, "--warmup")) {
      VALUE(val);
      TRY(parse_count(ps, a, val, 0, &o->warmup));
    } else if (!strcmp(a, "--repeat")) {
      VALUE(val);
      TRY(parse_count(ps, a, val, 1, &o->repeat));
    } else if (!strcmp(a, "--back-to-back")) {
      VALUE(val);
      TRY(parse_count(ps, a, val, 1, &o->back_to_back));
    } else if (!strcmp(a, "--no-peaks")) {
      o->peaks = 0;
    } else if (!strcmp(a, "--io-table")) {
      o->io_table = 1;
    } else if (!strcmp(a, "--no-tuning")) {
      o->no_tuning = 1;
    } else if (!strcmp(a, "--tiling")) {
      VALUE(val);
      TRY(parse_tiling(ps, val, &o->tiling));
    } else if (!strcmp(a, "--splits")) {
      VALUE(val);
      char vwhy[FCLU_WHY_LEN];
      uint64_t splits;
      if (fclu_parse_u64(val, 0, FCL_MAX_SPLITS, &splits, vwhy, sizeof vwhy) != 0)
        return refuse(ps, "--splits needs 0 (the planner's) to %d: %s", FCL_MAX_SPLITS, vwhy);
      o->tiling.splits = (unsigned)splits;
    } else if (!strcmp(a, "--merge")) {
      VALUE(val);
      unsigned m = FCL_SPLIT_MERGE_AUTO;
      while (m <= FCL_SPLIT_MERGE_LAST_SPLIT && strcmp(val, fcl_split_merge_name(m))) ++m;
      if (m > FCL_SPLIT_MERGE_LAST_SPLIT)
        return refuse(ps, "--merge needs kernel, last-split or auto, not '%s'", val);
      o->tiling.merge = m;
    } else if (!strcmp(a, "--cache-lens")) {
      VALUE(val);
      TRY(parse_cache_lens(ps, val, o));
    } else if (!strcmp(a, "--batch-invariant")) {
      o->batch_invariant = BATCH_INVARIANT_ON;
      if (i + 1 < argc && !strcmp(argv[i + 1], "both")) o->batch_invariant = BATCH_INVARIANT_BOTH, ++i;
    } else if (!strcmp(a, "--packed-heads")) {
      VALUE(val);
      char vwhy[FCLU_WHY_LEN];
      uint64_t packed;
      if (fclu_parse_u64(val, 0, 1u << 20, &packed, vwhy, sizeof vwhy) != 0)
        return refuse(ps, "--packed-heads needs 0 (the planner's), 1 (never) or heads / "
                          "heads-kv: %s", vwhy);
      o->tiling.packed_heads = (unsigned)packed;
    } else if (!strcmp(a, "--v-stages")) {
      VALUE(val);
      char vwhy[FCLU_WHY_LEN];
      uint64_t stages;
      if (fclu_parse_u64(val, 0, 2, &stages, vwhy, sizeof vwhy) != 0)
        return refuse(ps, "--v-stages needs 0 (the planner's), 1 or 2: %s", vwhy);
      o->tiling.v_stages = (unsigned)stages;
    } else if (!strcmp(a, "--kv-dtype")) {
      VALUE(val);
      TRY(parse_kv_dtypes(ps, val, o));
    } else if (!strcmp(a, "--paged")) {
      VALUE(val);
      uint64_t ps_tokens;
      char vwhy[FCLU_WHY_LEN];
      if (fclu_parse_u64(val, FCL_PAGE_SIZE_MULTIPLE, 1u << 30, &ps_tokens, vwhy, sizeof vwhy) != 0 ||
          ps_tokens % FCL_PAGE_SIZE_MULTIPLE)
        return refuse(ps, "--paged needs a page size, a multiple of %d tokens: '%s'",
                      FCL_PAGE_SIZE_MULTIPLE, val);
      o->page_size = (size_t)ps_tokens;
    } else if (!strcmp(a, "--kernel")) {
      VALUE(val);
      char kwhy[FCLU_WHY_LEN];
      unsigned kind;
      if (fclu_parse_kernel(val, &kind, kwhy, sizeof kwhy) != 0) return refuse(ps, "%s", kwhy);
      o->tiling.kernel = kind;
    } else if (!strcmp(a, "--window")) {
      VALUE(val);
      TRY(parse_window(ps, val, o));
    } else if (!strcmp(a, "--softcap")) {
      VALUE(val);
      TRY(parse_softcap(ps, val, &o->softcap));
    } else if (!strcmp(a, "--alibi")) {
      o->alibi = 1;
    } else if (!strcmp(a, "--sinks")) {
      o->sinks = 1;
      o->sinks_value = NAN;
    } else if (!strcmp(a, "--sinks-value")) {
      VALUE(val);
      TRY(parse_sink(ps, val, &o->sinks_value));
      o->sinks = 1;
    } else if (!strcmp(a, "--varlen")) {
      VALUE(val);
      TRY(parse_varlen(ps, val, o));
    } else if (!strcmp(a, "--layout")) {
      VALUE(val);
      if (fclu_layout_named(val, &o->layout) != 0)
        return refuse(ps, "--layout needs bshd, bhsd or qkv (got '%s')", val);
    } else if (!strcmp(a, "--json")) {
      VALUE(o->json);
    } else if (!strcmp(a, "--csv")) {
      VALUE(o->csv);
    } else if (!strcmp(a, "--svg")) {
      VALUE(o->svg);
    } else if (!strcmp(a, "--quiet")) {
      o->quiet = 1;
    } else {
      return refuse(ps, "unknown option '%s'", a);
    }
#undef VALUE
#undef TRY
  }
  if (o->n_varlen) {
    if (o->sweep) return refuse(ps, "--varlen is a shape: it excludes --sweep");
    if (o->batch || o->seqlen) return refuse(ps, "--varlen sets the batch and the lengths: "
                                                 "it excludes --batch and --seqlen");
    int32_t longest = 1;
    for (int i = 0; i < o->n_varlen; ++i)
      if (o->cu_varlen_q[i + 1] - o->cu_varlen_q[i] > longest)
        longest = o->cu_varlen_q[i + 1] - o->cu_varlen_q[i];
    o->batch = (size_t)o->n_varlen;
    o->seqlen = (size_t)longest;
    o->varlen_keys_own = o->seqlen_k != 0;
    /* (checked before the sums, which would overflow) */
    if (o->varlen_keys_own && o->seqlen_k > (size_t)2147483647 / (size_t)o->n_varlen)
      return refuse(ps, "--varlen with --seqlen-k: the keys add up past 2^31 - 1");
    for (int i = 0; i <= o->n_varlen; ++i)
      o->cu_varlen_k[i] = o->varlen_keys_own ? (int32_t)(i * (int64_t)o->seqlen_k)
                                             : o->cu_varlen_q[i];
    shape_given = 1;
  }
  if (o->n_cache_lens) {
    if (o->sweep) return refuse(ps, "--cache-lens is a shape: it excludes --sweep");
    if (o->n_varlen) return refuse(ps, "--cache-lens and --varlen exclude each other");
    if (o->batch && o->batch != (size_t)o->n_cache_lens)
      return refuse(ps, "--cache-lens gives %d lengths for --batch %zu", o->n_cache_lens,
                    o->batch);
    int32_t longest = 1;
    for (int i = 0; i < o->n_cache_lens; ++i)
      if (o->cache_lens[i] > longest) longest = o->cache_lens[i];
    if (o->seqlen_k && o->seqlen_k < (size_t)longest)
      return refuse(ps, "--cache-lens: a length of %d exceeds --seqlen-k %zu, the capacity",
                    (int)longest, o->seqlen_k);
    o->batch = (size_t)o->n_cache_lens;
    if (!o->seqlen_k) o->seqlen_k = (size_t)longest;
    shape_given = 1;
  }
  if (o->page_size && o->n_varlen) return refuse(ps, "--paged and --varlen exclude each other");
  if (o->page_size && o->pass != PASS_FWD) return refuse(ps, "--paged is for --pass fwd");
  if ((o->n_kv_dtypes > 1 || o->kv_dtypes[0] != FCL_KV_AS_DTYPE) && o->pass != PASS_FWD)
    return refuse(ps, "--kv-dtype is for --pass fwd");
  if (o->sweep && shape_given) return refuse(ps, "--sweep and a shape exclude each other");
  if (o->mla) {  /* DeepSeek's decode widths, one KV head, unless given */
    if (!o->head_dim) o->head_dim = 576;
    if (!o->head_dim_v) o->head_dim_v = 512;
    if (!o->heads_kv) o->heads_kv = 1;
    if (o->head_dim_v > o->head_dim)
      return refuse(ps, "--mla: V is a view of K's first --head-dim-v columns, at most --head-dim");
    if (o->layout != FCLU_BSHD) return refuse(ps, "--mla takes --layout bshd (K's rows hold V)");
  }
  if (o->head_dim_v && o->layout == FCLU_QKV)
    return refuse(ps, "--head-dim-v and --layout qkv exclude each other: packed QKV has one width");
  if (o->svg && o->n_dtypes > 1) return refuse(ps, "--svg plots one storage type; give --dtype one");
  if (!shape_given) o->sweep = 1;
  if (!o->sweep) {
    if (!o->batch) o->batch = 1;
    if (!o->heads) o->heads = 8;
    if (!o->heads_kv) o->heads_kv = o->heads;
    if (!o->seqlen) o->seqlen = 1024;
    if (!o->seqlen_k) o->seqlen_k = o->seqlen;
    if (!o->head_dim) o->head_dim = 64;
    if (o->heads % o->heads_kv) return refuse(ps, "--heads must be a multiple of --heads-kv");
    if (o->causal == CAUSAL_UNSET) o->causal = CAUSAL_OFF;
  } else if (o->causal == CAUSAL_UNSET) {
    o->causal = CAUSAL_BOTH;  /* flash-attn reports its shapes both ways */
  }
  return BENCH_PARSE_RUN;
}
