/*
 * tuning.h — tuned plans (tuning.c): buckets, the per-device database, its log.
 */
#ifndef FCL_TUNING_H
#define FCL_TUNING_H

#include "common.h"
#include "context.h"

#define FCL__TUNING_FORMAT "flashcl-tuning"
#define FCL__TUNING_PASSES 3   /* fwd, bwd, decode */
#define FCL__TUNING_DTYPES 3   /* fcl_dtype */
#define FCL__TUNING_DIMS 6     /* head_dim classes 32, 64, 96, 128, 192, 256 */
#define FCL__TUNING_BUCKETS (FCL__TUNING_PASSES * FCL__TUNING_DTYPES * FCL__TUNING_DIMS * 2 * 2)
/** A forward of at most this many query rows a sequence is a decode. */
#define FCL__TUNING_DECODE_ROWS 16
/** The largest database file read: every bucket's entry, many times over. */
#define FCL__TUNING_FILE_MAX ((size_t)1 << 20)

/** Rows of work that fill a device: a forward's query rows (batch x heads
 *  x seqlen_q) under this many per compute unit are "small" (a grid of a
 *  few work-groups a unit, where the split and the work-group size matter
 *  most); a decode is small under one (sequence, KV head) per unit. */
#define FCL__SMALL_ROWS_PER_CU 128u

/** A problem bucket of the tuning database: indices into the bucket
 *  names' parts (fcl__bucket_name: "fwd.f16.d128.causal.large"). */
typedef struct fcl__bucket {
  unsigned pass;    /* 0 fwd, 1 bwd, 2 decode (a forward of few rows) */
  unsigned dtype;   /* fcl_dtype */
  unsigned dim;     /* head_dim class: the first of 32..256 at least head_dim */
  unsigned causal;
  unsigned size;    /* 0 small, 1 large: rows (decode: sequences x KV heads)
                       under / over 128 (1) per compute unit */
} fcl__bucket;

/** A device's tuned plans, by bucket index. */
typedef struct fcl__tuning {
  int enabled;      /* fcl_context_use_tuned_plans */
  unsigned count;   /* buckets that have a plan */
  fcl_plan plans[FCL__TUNING_BUCKETS];
  unsigned char have[FCL__TUNING_BUCKETS];
  char source[1024];  /* the file, or which shipped database; "" none */
} fcl__tuning;

/** One winner of flashcl-tune, as fcl__tuning_write writes it. */
typedef struct fcl__tuned_entry {
  fcl__bucket bucket;
  fcl_plan hint;          /* the nonzero fields the planner takes */
  double ms, rules_ms;    /* summed over the bucket's shapes */
  char shapes[160];       /* what was timed, for the reader */
} fcl__tuned_entry;

size_t fcl__bucket_index(const fcl__bucket *b);
fcl__bucket fcl__bucket_at(size_t index);
unsigned fcl__bucket_head_dim(const fcl__bucket *b);
void fcl__bucket_name(const fcl__bucket *b, char *out, size_t len);
/** @return 1 and *out for a well-formed bucket name, else 0. */
int fcl__bucket_parse(const char *name, fcl__bucket *out);
/** The bucket of a call. @return 0 where none is (head_dim over 256). */
int fcl__bucket_of(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                   fcl_pass pass, fcl__bucket *out);
/** The shapes that stand for a bucket on a device (the tuner times them;
 *  a loaded plan must plan them): up to two, each in the bucket.
 *  @return how many (0: the device has no such problem, a small bucket on
 *  a device of few compute units). */
size_t fcl__bucket_shapes(const fcl_device_limits *limits, const fcl__bucket *b,
                          fcl_attention_desc out[2]);
/** Parses a database for `dev` into *db (enabled and source untouched).
 *  @return 1 if it is dev's (why: "" or a note on its driver), 0 if not,
 *  or not a database (why says which). A driver other than dev's is 0
 *  when require_driver, else a note. */
int fcl__tuning_parse(const char *text, const fcl_device_info *dev, int require_driver,
                      fcl__tuning *db, char *why, size_t why_len);
/** A device's database file name: platform and device, lower-case. */
void fcl__tuning_file_name(const fcl_device_info *dev, char *out, size_t len);
/** The folder a context reads (and flashcl-tune writes) by default:
 *  $FLASHCL_TUNING_DIR, $XDG_CACHE_HOME/flashcl or ~/.cache/flashcl.
 *  @return 0 where none can be named. */
int fcl__tuning_default_dir(char *out, size_t len);
/** Writes a database. @return 0, or -1 on a write error. */
int fcl__tuning_write(FILE *f, const fcl_device_info *dev, const char *when,
                      const fcl__tuned_entry *entries, size_t n);
/** (Re)loads the context's database from dir/<file name> (NULL: the
 *  default folder), else from the shipped ones. Never fails: what is
 *  skipped is logged. */
void fcl__tuning_load(fcl_context *ctx, const char *dir);
void fcl__tuning_release(fcl_context *ctx);
/** The tuned plan of desc's bucket, where the context's database has one
 *  and tuned plans are on. @return 1 with *out set, else 0. */
int fcl__tuned_plan(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                    fcl_plan *out);

#endif
