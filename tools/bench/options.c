/*
 * options.c — flashcl-bench's command line. The interface is a contract
 * (docs/design.md): extend it, don't break it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

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
    "  --causal [both]   causal mask (bottom-right aligned); \"both\" runs each\n"
    "                    shape masked and unmasked\n"
    "  --sweep           the standard sweep sized for the device (the default\n"
    "                    when no shape is given): on GPUs flash-attn's benchmark\n"
    "                    shapes (16k tokens, hidden 2048, d 64 and 128, N 512 to\n"
    "                    16k, causal and not); on CPUs 2k tokens, hidden 512,\n"
    "                    N 256 to 2k\n"
    "\n"
    "Measuring:\n"
    "  --check           compare with the float64 host reference (on a sample\n"
    "                    of rows) and print the errors\n"
    "  --count-io        also run instrumented kernels and report the bytes they\n"
    "                    counted next to the model's\n"
    "  --warmup W        untimed runs first (default 2 on GPUs, 1 on CPUs)\n"
    "  --repeat R        timed runs; the median is reported (default 10 on\n"
    "                    GPUs, 3 on CPUs)\n"
    "  --no-peaks        skip measuring each device's copy bandwidth and FMA\n"
    "                    rate (the roofline's ceilings)\n"
    "  --io-table        print, per device, naive vs flash bytes as N grows\n"
    "  --tiling BK,WG,TPR,RPT[,TILE]\n"
    "                    override the planner: keys per tile, work-group size,\n"
    "                    work-items per row, rows per work-item, bytes per\n"
    "                    local tile element (4: floats; 2: the f16/bf16 storage\n"
    "                    type, converted at each read) (0 = planner's). With\n"
    "                    --pass bwd, the forward that makes O and LSE takes\n"
    "                    the planner's tiling where it cannot take this one\n"
    "  --kernel K        the flash kernels, forward and backward: auto (the\n"
    "                    planner's), simt, or mma (tensor cores on NVIDIA\n"
    "                    sm_80+; emulated, slowly, elsewhere). With mma,\n"
    "                    --tiling takes BK (forward) and WG\n"
    "\n"
    "Output:\n"
    "  --json FILE       {\"devices\": [...], \"results\": [...]}\n"
    "  --csv FILE        one line per result\n"
    "  --svg FILE        per device: throughput against sequence length, a\n"
    "                    roofline with every run on it, and flash's speed-up\n"
    "                    over naive\n"
    "  --quiet           no progress on stderr\n"
    "  --help, --version\n";

static void fail(const char *fmt, const char *what) {
  fprintf(stderr, "flashcl-bench: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\nTry 'flashcl-bench --help'.\n");
  exit(2);
}

static size_t parse_size(const char *option, const char *text) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text || *end || v == 0 || text[0] == '-')
    fail("%s needs a positive integer", option);
  return (size_t)v;
}

static int parse_count(const char *option, const char *text) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < 0 || v > 1000000)
    fail("%s needs a count from 0 to 1000000", option);
  return (int)v;
}

static unsigned parse_algos(const char *text) {
  unsigned algos = 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", text);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "flash")) algos |= ALGO_FLASH;
    else if (!strcmp(tok, "naive")) algos |= ALGO_NAIVE;
    else fail("unknown algorithm '%s' (flash, naive)", tok);
  }
  if (!algos) fail("--algo needs flash, naive or both%s", "");
  return algos;
}

static void parse_dtypes(const char *text, bench_options *o) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s", text);
  o->n_dtypes = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    fcl_dtype t;
    if (!strcmp(tok, "f32")) t = FCL_DTYPE_F32;
    else if (!strcmp(tok, "f16")) t = FCL_DTYPE_F16;
    else if (!strcmp(tok, "bf16")) t = FCL_DTYPE_BF16;
    else fail("unknown dtype '%s' (f32, f16, bf16)", tok);
    for (int i = 0; i < o->n_dtypes; ++i)
      if (o->dtypes[i] == t) fail("dtype '%s' is listed twice", tok);
    o->dtypes[o->n_dtypes++] = t;
  }
  if (!o->n_dtypes) fail("--dtype needs f32, f16 or bf16%s", "");
  o->dtype = o->dtypes[0];
}

int bench_tiling_given(const fcl_plan *t) {
  return t->block_k || t->wg_size || t->threads_per_row || t->rows_per_thread ||
         t->tile_elem_size || t->kernel;
}

static void parse_tiling(const char *text, fcl_plan *hint) {
  unsigned v[5] = {0, 0, 0, 0, 0};
  char extra;
  int n = sscanf(text, "%u,%u,%u,%u,%u%c", &v[0], &v[1], &v[2], &v[3], &v[4], &extra);
  if (n != 4 && n != 5)
    fail("--tiling needs BK,WG,TPR,RPT[,TILE], e.g. 32,128,2,1 (got '%s')", text);
  memset(hint, 0, sizeof *hint);
  hint->block_k = v[0];
  hint->wg_size = v[1];
  hint->threads_per_row = v[2];
  hint->rows_per_thread = v[3];
  hint->tile_elem_size = v[4];
}

void bench_parse(int argc, char **argv, bench_options *o) {
  memset(o, 0, sizeof *o);
  o->algos = ALGO_FLASH | ALGO_NAIVE;
  o->pass = PASS_FWD;
  o->dtype = o->dtypes[0] = FCL_DTYPE_F32;
  o->n_dtypes = 1;
  o->causal = CAUSAL_UNSET;
  o->warmup = -1;  /* -1: by device type */
  o->repeat = -1;
  o->peaks = 1;
  int shape_given = 0;

  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
#define VALUE() (i + 1 < argc ? argv[++i] : (fail("%s needs a value", a), ""))
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      printf("flashcl-bench %s\n", fcl_version_string());
      exit(0);
    } else if (!strcmp(a, "--device")) {
      o->device = VALUE();
    } else if (!strcmp(a, "--algo")) {
      o->algos = parse_algos(VALUE());
    } else if (!strcmp(a, "--pass")) {
      const char *p = VALUE();
      if (!strcmp(p, "fwd")) o->pass = PASS_FWD;
      else if (!strcmp(p, "bwd")) o->pass = PASS_BWD;
      else if (!strcmp(p, "fwdbwd")) o->pass = PASS_FWDBWD;
      else fail("unknown pass '%s' (fwd, bwd, fwdbwd)", p);
    } else if (!strcmp(a, "--dtype")) {
      parse_dtypes(VALUE(), o);
    } else if (!strcmp(a, "--batch")) {
      o->batch = parse_size(a, VALUE()), shape_given = 1;
    } else if (!strcmp(a, "--heads")) {
      o->heads = parse_size(a, VALUE()), shape_given = 1;
    } else if (!strcmp(a, "--heads-kv")) {
      o->heads_kv = parse_size(a, VALUE()), shape_given = 1;
    } else if (!strcmp(a, "--seqlen")) {
      o->seqlen = parse_size(a, VALUE()), shape_given = 1;
    } else if (!strcmp(a, "--seqlen-k")) {
      o->seqlen_k = parse_size(a, VALUE()), shape_given = 1;
    } else if (!strcmp(a, "--head-dim")) {
      o->head_dim = parse_size(a, VALUE()), shape_given = 1;
    } else if (!strcmp(a, "--causal")) {
      o->causal = CAUSAL_ON;
      if (i + 1 < argc && !strcmp(argv[i + 1], "both")) o->causal = CAUSAL_BOTH, ++i;
    } else if (!strcmp(a, "--sweep")) {
      o->sweep = 1;
    } else if (!strcmp(a, "--check")) {
      o->check = 1;
    } else if (!strcmp(a, "--count-io")) {
      o->count_io = 1;
    } else if (!strcmp(a, "--warmup")) {
      o->warmup = parse_count(a, VALUE());
    } else if (!strcmp(a, "--repeat")) {
      o->repeat = parse_count(a, VALUE());
      if (o->repeat == 0) fail("%s needs at least 1", a);
    } else if (!strcmp(a, "--no-peaks")) {
      o->peaks = 0;
    } else if (!strcmp(a, "--io-table")) {
      o->io_table = 1;
    } else if (!strcmp(a, "--tiling")) {
      const unsigned kernel = o->tiling.kernel;
      parse_tiling(VALUE(), &o->tiling);
      o->tiling.kernel = kernel;
    } else if (!strcmp(a, "--kernel")) {
      const char *k = VALUE();
      if (!strcmp(k, "auto")) o->tiling.kernel = FCL_FLASH_KERNEL_AUTO;
      else if (!strcmp(k, "simt")) o->tiling.kernel = FCL_FLASH_KERNEL_SIMT;
      else if (!strcmp(k, "mma")) o->tiling.kernel = FCL_FLASH_KERNEL_MMA;
      else fail("--kernel needs auto, simt or mma (got '%s')", k);
    } else if (!strcmp(a, "--json")) {
      o->json = VALUE();
    } else if (!strcmp(a, "--csv")) {
      o->csv = VALUE();
    } else if (!strcmp(a, "--svg")) {
      o->svg = VALUE();
    } else if (!strcmp(a, "--quiet")) {
      o->quiet = 1;
    } else {
      fail("unknown option '%s'", a);
    }
#undef VALUE
  }
  if (o->sweep && shape_given) fail("--sweep and a shape exclude each other%s", "");
  if (o->svg && o->n_dtypes > 1) fail("--svg plots one storage type; give --dtype one%s", "");
  if (!shape_given) o->sweep = 1;
  if (!o->sweep) {
    if (!o->batch) o->batch = 1;
    if (!o->heads) o->heads = 8;
    if (!o->heads_kv) o->heads_kv = o->heads;
    if (!o->seqlen) o->seqlen = 1024;
    if (!o->seqlen_k) o->seqlen_k = o->seqlen;
    if (!o->head_dim) o->head_dim = 64;
    if (o->heads % o->heads_kv) fail("--heads must be a multiple of --heads-kv%s", "");
    if (o->causal == CAUSAL_UNSET) o->causal = CAUSAL_OFF;
  } else if (o->causal == CAUSAL_UNSET) {
    o->causal = CAUSAL_BOTH;  /* flash-attn reports its shapes both ways */
  }
}
