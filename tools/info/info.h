/*
 * info.h — flashcl-info's command line: the shape whose plans it shows.
 */
#ifndef FLASHCL_INFO_H
#define FLASHCL_INFO_H

#include <stddef.h>

#include "flashcl.h"

typedef struct info_options {
  size_t batch, heads, heads_kv, seqlen, seqlen_k; /* heads_kv, seqlen_k 0: as heads, seqlen */
  size_t head_dim;  /* 0: both 64 and 128 */
  int causal;
  fcl_dtype dtype;
  const char *profile;  /* NULL: the devices; else a profile's key, or "all" */
  int programs;         /* 1: list the programs each pass builds */
  int shuffle;          /* fcl_shuffle + 1 for profiles planned with it; 0: theirs */
  fcl_plan hint;        /* --kernel, --splits: the plans asked for (zeros: the planner's) */
  const char *program_text;  /* --program-text FILE: print that program's text, nothing else */
  /* ---- batch invariance ---- */
  int batch_invariant;  /* --batch-invariant: the descriptors' flag */
  /* --grid: with --profile KEY, the distinct programs of a grid of problems */
  const char *grid;  /* NULL, "full" or "ci" */
  /* ---- a value head size of its own ---- */
  size_t head_dim_v;  /* --head-dim-v: desc.head_dim_v (0: head_dim) */
} info_options;

/** What info_parse found (as bench_parse's values). */
enum { INFO_PARSE_ERROR = -1, INFO_PARSE_RUN = 0, INFO_PARSE_HELP = 1, INFO_PARSE_VERSION = 2 };

/** Parses argv strictly (util/cli.h) into *opts; prints nothing, never
 *  exits. @return an INFO_PARSE_* value; on INFO_PARSE_ERROR the reason is
 *  in why[why_len]. */
int info_parse(int argc, char **argv, info_options *opts, char *why, size_t why_len);

/** The --help text. */
const char *info_usage(void);

/** The descriptors the options name: one, or head_dim 64 and 128.
 *  @return how many (1 or 2). */
int info_descs(const info_options *opts, fcl_attention_desc out[2]);

/** --grid: prints each distinct program the planner builds on `limits`
 *  over the grid opts->grid names ("full" or "ci"), once, as --programs
 *  prints them plus the first problem that built it, and a count on
 *  stderr. @return 0, or 1 out of memory. */
int info_grid(const info_options *opts, const fcl_device_limits *limits);

#endif
