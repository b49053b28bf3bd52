/*
 * fuzz_cli.c — libFuzzer target over the command lines of flashcl-bench
 * and flashcl-info: arbitrary bytes become an argument vector (split at
 * NUL and newline bytes; the first byte picks the tool, or both), parsed
 * by each tool's own parser (tools/bench/options.c, tools/info/options.c,
 * both over util/cli.c). The target aborts when an invariant breaks:
 *   - the parser returns one of its four answers, the same one twice;
 *   - a refusal comes with a reason, NUL-terminated within its buffer;
 *   - options it accepts are ones the tool can run with: at least one
 *     algorithm and storage type (no type twice), a pass, counts in range,
 *     and for a single shape sizes of at least 1 with heads a multiple of
 *     heads_kv; every size given on the command line was decimal digits;
 *     window bounds of at least -1, a finite softcap of at least 0, and a
 *     ragged batch whose prefix sums rise from 0 and set batch and seqlen.
 * Built like fuzz_desc_plan (scripts/fuzz.sh); tests/test_fuzz_replay.c
 * replays fuzz/corpus_cli in ctest.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "info.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz_cli: invariant broken: %s (%s:%d)\n", #cond,       \
              __FILE__, __LINE__);                                             \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define MAX_ARGS 32

static void check_reason(const char *why, size_t len) {
  CHECK(memchr(why, '\0', len) != NULL);
  CHECK(why[0] != '\0');
}

static int listed(const char *const *list, const char *arg) {
  for (; *list; ++list)
    if (!strcmp(*list, arg)) return 1;
  return 0;
}

/* Walks argv as the tool's documentation describes it (the options that
 * take a value, and of those the numeric ones) and checks that every
 * number the parser accepted was decimal digits only. */
static void check_numbers(int argc, char **argv, const char *const *takes_value,
                          const char *const *numeric) {
  for (int i = 1; i < argc; ++i) {
    if (!listed(takes_value, argv[i])) continue;
    CHECK(i + 1 < argc);  /* accepted, so the value was there */
    if (listed(numeric, argv[i]))
      for (const char *c = argv[i + 1]; *c; ++c) CHECK(*c >= '0' && *c <= '9');
    ++i;
  }
}

static const char *const bench_numeric[] = {"--batch",  "--heads",    "--heads-kv", "--seqlen",
                                            "--seqlen-k", "--head-dim", "--warmup", "--repeat",
                                            "--head-dim-v", NULL};
static const char *const bench_values[] = {
    "--batch", "--heads", "--heads-kv", "--seqlen", "--seqlen-k", "--head-dim", "--warmup",
    "--repeat", "--device", "--algo", "--pass", "--dtype", "--tiling", "--kernel", "--json",
    "--csv", "--svg", "--window", "--softcap", "--varlen", "--layout", "--splits", "--merge",
    "--packed-heads", "--cache-lens", "--back-to-back", "--paged",
    /* later options */
    "--head-dim-v", "--kv-dtype", "--sinks-value", NULL};
static const char *const info_numeric[] = {"--batch",  "--heads",    "--heads-kv",   "--seqlen",
                                           "--seqlen-k", "--head-dim", "--head-dim-v", NULL};
static const char *const info_values[] = {"--batch",    "--heads",    "--heads-kv", "--seqlen",
                                          "--seqlen-k", "--head-dim", "--dtype",    "--profile",
                                          "--shuffle",  "--kernel",   "--splits",   "--program-text",
                                          /* later options */
                                          "--head-dim-v", "--grid", "--ptx-unmark", "--wgmma-reps",
                                          NULL};

static void fuzz_bench(int argc, char **argv) {
  bench_options a, b;
  char why[512], why2[512];
  const int r = bench_parse(argc, argv, &a, why, sizeof why);
  CHECK(r == BENCH_PARSE_ERROR || r == BENCH_PARSE_RUN || r == BENCH_PARSE_HELP ||
        r == BENCH_PARSE_VERSION);
  CHECK(bench_parse(argc, argv, &b, why2, sizeof why2) == r);
  if (r == BENCH_PARSE_ERROR) {
    check_reason(why, sizeof why);
    CHECK(!strcmp(why, why2));
    return;
  }
  if (r != BENCH_PARSE_RUN) return;
  CHECK(a.algos && (a.algos & ~(unsigned)(ALGO_FLASH | ALGO_NAIVE)) == 0);
  CHECK(a.pass == PASS_FWD || a.pass == PASS_BWD || a.pass == PASS_FWDBWD);
  CHECK(a.n_dtypes >= 1 && a.n_dtypes <= 3 && a.dtype == a.dtypes[0]);
  for (int i = 0; i < a.n_dtypes; ++i) {
    CHECK(fcl_dtype_size(a.dtypes[i]) != 0);
    for (int j = 0; j < i; ++j) CHECK(a.dtypes[i] != a.dtypes[j]);
  }
  CHECK(a.causal == CAUSAL_OFF || a.causal == CAUSAL_ON || a.causal == CAUSAL_BOTH);
  CHECK(a.warmup >= -1 && a.warmup <= 1000000);
  CHECK(a.repeat == -1 || (a.repeat >= 1 && a.repeat <= 1000000));
  CHECK(a.tiling.kernel < FCL_FLASH_KERNELS);
  CHECK(a.window_left >= -1 && a.window_right >= -1);
  CHECK(a.softcap >= 0 && a.softcap <= 3.4e38f);
  CHECK(a.layout == FCLU_BSHD || a.layout == FCLU_BHSD || a.layout == FCLU_QKV);
  CHECK(a.n_varlen >= 0 && a.n_varlen <= 256);
  if (a.n_varlen) {
    int32_t longest = 1;
    CHECK(a.cu_varlen_q[0] == 0 && a.cu_varlen_k[0] == 0 && !a.sweep);
    for (int i = 0; i < a.n_varlen; ++i) {
      const int32_t n = a.cu_varlen_q[i + 1] - a.cu_varlen_q[i];
      CHECK(n >= 0 && a.cu_varlen_k[i + 1] >= a.cu_varlen_k[i]);
      if (n > longest) longest = n;
    }
    CHECK(a.batch == (size_t)a.n_varlen && a.seqlen == (size_t)longest);
  }
  if (!a.sweep) {
    const size_t sizes[] = {a.batch, a.heads, a.heads_kv, a.seqlen, a.seqlen_k, a.head_dim};
    for (size_t i = 0; i < 6; ++i) CHECK(sizes[i] >= 1);
    CHECK(a.heads % a.heads_kv == 0);
  }
  check_numbers(argc, argv, bench_values, bench_numeric);
}

static void fuzz_info(int argc, char **argv) {
  info_options a, b;
  char why[512], why2[512];
  const int r = info_parse(argc, argv, &a, why, sizeof why);
  CHECK(r == INFO_PARSE_ERROR || r == INFO_PARSE_RUN || r == INFO_PARSE_HELP ||
        r == INFO_PARSE_VERSION);
  CHECK(info_parse(argc, argv, &b, why2, sizeof why2) == r);
  if (r == INFO_PARSE_ERROR) {
    check_reason(why, sizeof why);
    return;
  }
  if (r != INFO_PARSE_RUN) return;
  CHECK(a.batch >= 1 && a.heads >= 1 && a.seqlen >= 1);
  CHECK(fcl_dtype_size(a.dtype) != 0);
  fcl_attention_desc descs[2];
  const int n = info_descs(&a, descs);
  CHECK(n == (a.head_dim ? 1 : 2));
  for (int k = 0; k < n; ++k) CHECK(descs[k].dtype == a.dtype && descs[k].batch == a.batch);
  check_numbers(argc, argv, info_values, info_numeric);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  const unsigned tool = data[0] % 3;  /* 0 bench, 1 info, 2 both */
  char *text = malloc(size);
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  char *argv[MAX_ARGS + 1];
  int argc = 0;
  argv[argc++] = "tool";
  for (char *p = text; argc < MAX_ARGS && p < text + size - 1;) {
    argv[argc++] = p;
    while (*p && *p != '\n') ++p;
    if (*p == '\n') *p++ = '\0';
    else ++p;
  }
  argv[argc] = NULL;
  if (tool != 1) fuzz_bench(argc, argv);
  if (tool != 0) fuzz_info(argc, argv);
  free(text);
  return 0;
}
