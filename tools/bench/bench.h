/*
 * bench.h — what flashcl-bench's files share: its options, the devices it
 * runs on, and one result per (device, shape, pass, algorithm). The result
 * fields are the JSON contract (docs/design.md).
 */
#ifndef FLASHCL_BENCH_H
#define FLASHCL_BENCH_H

#include <stdio.h>

#include "flashcl.h"
#include "views.h"

enum { ALGO_FLASH = 1, ALGO_NAIVE = 2 };
enum { PASS_FWD = 1, PASS_BWD = 2, PASS_FWDBWD = 3 };
enum { CAUSAL_OFF = 0, CAUSAL_ON = 1, CAUSAL_BOTH = 2, CAUSAL_UNSET = 3 };

typedef struct bench_options {
  const char *device;       /* selector, "all", or NULL: the library's default */
  unsigned algos;           /* ALGO_* bits */
  int pass;                 /* PASS_* */
  fcl_dtype dtype;          /* the first of dtypes */
  fcl_dtype dtypes[3];      /* --dtype LIST: each shape runs in each, in order */
  int n_dtypes;
  size_t batch, heads, heads_kv, seqlen, seqlen_k, head_dim; /* 0: unset */
  int causal;               /* CAUSAL_* */
  int sweep;                /* the standard sweep (default without a shape) */
  int sweep_decode;         /* --sweep-decode: its decode family instead */
  int check, count_io;
  int warmup, repeat;
  int back_to_back;         /* --back-to-back N: a timed sample is N calls, unwaited (0: one call) */
  int peaks;                /* measure copy/FMA ceilings per device */
  int io_table;             /* print the naive-vs-flash I/O table */
  int no_tuning;            /* --no-tuning: the planner's rules only */
  fcl_plan tiling;          /* --tiling: overrides of the planner */
  /* The problem beyond its shape (applied to every shape run). */
  int window_left, window_right;  /* --window L,R: -1 unbounded (default) */
  float softcap;                  /* --softcap: 0 off */
  int alibi;                      /* --alibi: the ALiBi paper's slopes per head */
  int n_varlen;                   /* --varlen: sequences of one ragged batch (0: not) */
  int32_t cu_varlen_q[257], cu_varlen_k[257];  /* its prefix sums */
  int varlen_keys_own;            /* --seqlen-k with --varlen: keys of that length each */
  int n_cache_lens;               /* --cache-lens: one KV cache length per batch entry (0: not) */
  int32_t cache_lens[256];
  size_t page_size;               /* --paged: K and V as pools of pages of this many tokens (0: not) */
  fclu_layout layout;             /* --layout */
  const char *json, *csv, *svg;
  /* --kv-dtype LIST: each shape runs with K and V kept in each form, in
   * order (default: as-dtype alone) */
  fcl_kv_dtype kv_dtypes[5];
  int n_kv_dtypes;
  int quiet;                /* no progress on stderr */
  /* attention sinks */
  int sinks;                /* --sinks or --sinks-value: desc.sinks set (fwd+bwd: dsinks too) */
  float sinks_value;        /* --sinks-value's X; NAN with --sinks: random values */
  /* ---- batch invariance ---- */
  int batch_invariant;      /* --batch-invariant: BATCH_INVARIANT_* */
  /* ---- a value head size of its own ---- */
  size_t head_dim_v;        /* --head-dim-v: desc.head_dim_v (0: head_dim) */
  /* ---- DeepSeek's latent attention ---- */
  int mla;                  /* --mla: V a view of K's first head_dim_v columns (one buffer) */
} bench_options;

/** --batch-invariant: off, on, or each shape both ways (off first). */
enum { BATCH_INVARIANT_OFF = 0, BATCH_INVARIANT_ON = 1, BATCH_INVARIANT_BOTH = 2 };

/** What bench_parse found: options to run with, a request for the usage
 *  or the version, or a bad command line. */
enum {
  BENCH_PARSE_ERROR = -1,
  BENCH_PARSE_RUN = 0,
  BENCH_PARSE_HELP = 1,
  BENCH_PARSE_VERSION = 2,
};

/** Parses argv into *opts (strictly: util/cli.h). Prints nothing and never
 *  exits; on BENCH_PARSE_ERROR the reason is in why[why_len].
 *  @return a BENCH_PARSE_* value. */
int bench_parse(int argc, char **argv, bench_options *opts, char *why, size_t why_len);

/** The --help text. */
const char *bench_usage(void);

/** flashcl-bench's exit statuses (bench_usage() lists them). */
enum {
  BENCH_EXIT_OK = 0,
  BENCH_EXIT_FAILED = 1,
  BENCH_EXIT_USAGE = 2,
  BENCH_EXIT_UNSUPPORTED = 3,
};

typedef struct bench_device {
  fcl_device_info info;
  fcl_peaks peaks;          /* zeros when not measured */
  int have_peaks;
  fcl_status status;        /* why the device could not be used, if so */
  char message[512];
} bench_device;

typedef struct bench_result {
  int device;               /* index into the device list */
  fcl_algo algo;
  int pass;                 /* PASS_* */
  fcl_attention_desc desc;
  double ms_median, ms_min;
  int calls_per_sample;     /* 1, or --back-to-back's N */
  uint64_t bytes_model, bytes_counted;
  int have_counted;
  double flops, gbps, tflops;
  double max_abs_err, naive_max_abs_err, err_ratio;
  int have_check;
  double speedup;           /* naive median / this median, 0 if unknown */
  fcl_status status;
  char message[512];
  fcl_plan plan;
  unsigned chunks;
  int alibi;                /* desc.alibi_slopes is gone by output time */
  fclu_layout layout;
  /* a quantized cache with --check: the error against the float64
   * attention over the unquantised K and V (max_abs_err: over what the
   * cache holds) */
  double max_abs_err_unquantised;
  int have_unquantised;
} bench_result;

typedef struct bench_results {
  bench_result *items;
  size_t count, capacity;
} bench_results;

/** Appends a result; exits on out-of-memory (a tool, not the library). */
bench_result *bench_results_add(bench_results *all);

/** The shapes one device runs: the user's, or the standard sweep for the
 *  device (flash-attn's benchmark shapes on GPUs, smaller ones on CPUs). */
typedef struct bench_shape {
  fcl_attention_desc desc;
} bench_shape;

size_t bench_shapes(const bench_options *opts, const fcl_device_info *device,
                    bench_shape *out, size_t capacity);

/** Runs every algorithm of `opts` on one shape and appends the results.
 *  Inputs are drawn once and shared by the algorithms, so --check compares
 *  them on the same data. */
void bench_measure(fcl_context *ctx, int device_index, const bench_options *opts,
                   const fcl_attention_desc *desc, int pass, bench_results *all);

/** The problem options (window, softcap, ragged batch, layout) applied to
 *  a shape's descriptor. */
void bench_apply_problem(const bench_options *opts, fcl_attention_desc *desc);
/** --mla: K's layout for K and V both, V its rows' first head_dim_v
 *  columns (packed tokens, or a paged pool's pages). */
void bench_mla_views(fcl_attention_desc *desc);

/* Output. */
void bench_print_table(FILE *out, const bench_device *devices, size_t n_devices,
                       const bench_results *all, const bench_options *opts);
void bench_print_io_table(FILE *out, const bench_device *device, fcl_dtype dtype);
int bench_write_json(const char *path, const bench_device *devices, size_t n_devices,
                     const bench_results *all);
int bench_write_csv(const char *path, const bench_device *devices,
                    const bench_results *all);
/** Plots, per device, throughput against sequence length, a roofline on the
 *  measured peaks and flash's speed-up over naive (svg.c). Only successful
 *  results are drawn. @return 0, or -1 if the file cannot be written. */
int bench_write_svg(const char *path, const bench_device *devices, size_t n_devices,
                    const bench_results *all);

const char *bench_pass_name(int pass);
/** The storage a result ran with: "f16", or "f16+int8" with a quantized KV cache. */
const char *bench_dtype_label(const fcl_attention_desc *desc, char *buf, size_t len);
/** "flash-attn style" label for a device: its name, trimmed. */
const char *bench_device_label(const bench_device *device);

#endif
