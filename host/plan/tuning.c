/*
 * tuning.c — tuned plans: the tilings flashcl-tune measured fastest on a
 * device, one per problem bucket, which the planner takes before its rules
 * (docs/design.md, "Tuned plans").
 *
 * A bucket is pass (fwd, bwd, decode) x storage type x head_dim class x
 * causal x size class; its entry in a device's database is a tiling hint
 * (the nonzero fields of an fcl_plan). The database is a JSON file per
 * device, named and keyed by platform and device name and checked against
 * the driver's version and, for a user's file, the kernels' fingerprint. A
 * context loads its device's file at creation (fcl__tuning_load): from
 * $FLASHCL_TUNING_DIR, else $XDG_CACHE_HOME/flashcl (~/.cache/flashcl),
 * else the databases built into the library from the files of tuning/. A
 * file that cannot be read, is another device's, an older driver's or (a
 * user's) other kernels', or an entry that no longer plans on the device's
 * limits, is skipped with a line in the context's log, never a failure.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "context.h"
#include "file.h"
#include "tuning.h"
#include "errors.h"
#include "program.h"
#include "problem.h"
#include "plan.h"

static const char *const pass_names[FCL__TUNING_PASSES] = {"fwd", "bwd", "decode"};
static const unsigned dim_classes[FCL__TUNING_DIMS] = {32, 64, 96, 128, 192, 256};
static const char *const mask_names[2] = {"full", "causal"};
static const char *const size_names[2] = {"small", "large"};
static const char *const dtype_names[FCL__TUNING_DTYPES] = {"f32", "f16", "bf16"};

/* The databases built into the library (cmake/embed_sources.cmake, LIST
 * mode: a NULL-terminated array of the tuning/ files' texts). */
extern const char *const fcl__tuning_shipped[];

/* ---- buckets --------------------------------------------------------------- */

size_t fcl__bucket_index(const fcl__bucket *b) {
  return ((((size_t)b->pass * FCL__TUNING_DTYPES + b->dtype) * FCL__TUNING_DIMS + b->dim) * 2 +
          b->causal) * 2 + b->size;
}

fcl__bucket fcl__bucket_at(size_t index) {
  fcl__bucket b;
  b.size = (unsigned)(index % 2), index /= 2;
  b.causal = (unsigned)(index % 2), index /= 2;
  b.dim = (unsigned)(index % FCL__TUNING_DIMS), index /= FCL__TUNING_DIMS;
  b.dtype = (unsigned)(index % FCL__TUNING_DTYPES), index /= FCL__TUNING_DTYPES;
  b.pass = (unsigned)index;
  return b;
}

unsigned fcl__bucket_head_dim(const fcl__bucket *b) { return dim_classes[b->dim]; }

void fcl__bucket_name(const fcl__bucket *b, char *out, size_t len) {
  snprintf(out, len, "%s.%s.d%u.%s.%s", pass_names[b->pass], dtype_names[b->dtype],
           dim_classes[b->dim], mask_names[b->causal], size_names[b->size]);
}

static int name_index(const char *s, size_t n, const char *const *names, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (strlen(names[i]) == n && strncmp(s, names[i], n) == 0) return (int)i;
  return -1;
}

int fcl__bucket_parse(const char *name, fcl__bucket *out) {
  const char *part[5];
  size_t len[5];
  const char *s = name;
  for (int i = 0; i < 5; ++i) {
    const char *dot = strchr(s, '.');
    part[i] = s;
    len[i] = dot ? (size_t)(dot - s) : strlen(s);
    if ((i < 4) != (dot != NULL)) return 0;
    s = dot ? dot + 1 : s;
  }
  const int pass = name_index(part[0], len[0], pass_names, FCL__TUNING_PASSES);
  const int dtype = name_index(part[1], len[1], dtype_names, FCL__TUNING_DTYPES);
  const int causal = name_index(part[3], len[3], mask_names, 2);
  const int size = name_index(part[4], len[4], size_names, 2);
  int dim = -1;
  if (len[2] >= 2 && part[2][0] == 'd') {
    char digits[8];
    if (len[2] - 1 < sizeof digits) {
      memcpy(digits, part[2] + 1, len[2] - 1);
      digits[len[2] - 1] = '\0';
      for (int i = 0; i < FCL__TUNING_DIMS; ++i) {
        char want[8];
        snprintf(want, sizeof want, "%u", dim_classes[i]);
        if (strcmp(digits, want) == 0) dim = i;
      }
    }
  }
  if (pass < 0 || dtype < 0 || dim < 0 || causal < 0 || size < 0) return 0;
  *out = (fcl__bucket){(unsigned)pass, (unsigned)dtype, (unsigned)dim, (unsigned)causal,
                       (unsigned)size};
  return 1;
}

int fcl__bucket_of(const fcl_device_limits *limits, const fcl_attention_desc *desc,
                   fcl_pass pass, fcl__bucket *out) {
  if ((unsigned)desc->dtype >= FCL__TUNING_DTYPES) return 0;
  int dim = -1;
  for (int i = FCL__TUNING_DIMS - 1; i >= 0; --i)
    if (desc->head_dim <= dim_classes[i]) dim = i;
  if (dim < 0) return 0;
  const unsigned cu = limits->compute_units ? limits->compute_units : 1;
  fcl__bucket b = {.dtype = (unsigned)desc->dtype, .dim = (unsigned)dim,
                   .causal = desc->causal != 0};
  if (pass == FCL_PASS_BACKWARD) {
    b.pass = 1;
  } else if (desc->seqlen_q <= FCL__TUNING_DECODE_ROWS) {
    b.pass = 2;
  }
  if (b.pass == 2) {
    /* a decode launch's blocks are (sequence, KV head) pairs */
    b.size = desc->batch * desc->heads_kv >= cu;
  } else {
    b.size = (double)desc->batch * desc->heads_q * desc->seqlen_q >= (double)FCL__SMALL_ROWS_PER_CU * cu;
  }
  *out = b;
  return 1;
}

static size_t floor_pow2(size_t x) {
  size_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

/* The standard sweep's form (flashcl-bench --sweep): on a GPU flash-attn's
 * benchmark, 16k tokens of hidden 2048; on a CPU 2k tokens of hidden 512. */
#define SWEEP_TOKENS(limits) ((limits)->is_gpu ? (size_t)16384 : (size_t)2048)
#define SWEEP_HIDDEN(limits) ((limits)->is_gpu ? (size_t)2048 : (size_t)512)

size_t fcl__bucket_shapes(const fcl_device_limits *limits, const fcl__bucket *b,
                          fcl_attention_desc out[2]) {
  const unsigned cu = limits->compute_units ? limits->compute_units : 1;
  const size_t d = dim_classes[b->dim];
  size_t n = 0;
  for (int i = 0; i < 2; ++i) {
    fcl_attention_desc *x = &out[n];
    if (b->pass == 2) {
      /* 32 query heads on 8 KV heads, one new row; small: B 1 against a
       * long cache and the largest batch still small, large: enough
       * sequences for every unit, shorter caches */
      size_t batch, cache;
      if (b->size == 0) {
        batch = i == 0 ? 1 : floor_pow2((cu - 1) / 8);
        cache = i == 0 ? 32768 : 8192;
      } else {
        batch = floor_pow2((cu + 7) / 8 * 2);
        cache = i == 0 ? 1024 : 2048;
      }
      if (b->size == 0 && i == 1 && batch == 1) break;  /* the same shape twice */
      fcl_attention_desc_init(x, batch, 32, 8, 1, cache, d);
    } else {
      const size_t heads = d <= SWEEP_HIDDEN(limits) ? SWEEP_HIDDEN(limits) / d : 1;
      size_t batch, seqlen;
      if (b->size == 0) {
        /* one sequence, under the small/large line by 2x and by 8x */
        const size_t line = (size_t)FCL__SMALL_ROWS_PER_CU * cu;
        seqlen = floor_pow2((line - 1) / heads / (i == 0 ? 2 : 8));
        if (seqlen < 64) break;
        batch = 1;
      } else {
        const size_t tokens = SWEEP_TOKENS(limits);
        seqlen = i == 0 ? tokens / 8 : tokens / 2;
        batch = tokens / seqlen;
      }
      fcl_attention_desc_init(x, batch, heads, heads, seqlen, seqlen, d);
    }
    x->causal = (int)b->causal;
    x->dtype = (fcl_dtype)b->dtype;
    fcl__bucket check;
    const fcl_pass pass = b->pass == 1 ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
    if (fcl__bucket_of(limits, x, pass, &check) &&
        fcl__bucket_index(&check) == fcl__bucket_index(b))
      ++n;
  }
  return n;
}

/* ---- a minimal JSON reader, for the database's shape -------------------- */

typedef struct json {
  const char *s;
  int depth;
  char error[96];
} json;

static void json_ws(json *j) {
  while (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r') ++j->s;
}

static int json_fail(json *j, const char *what) {
  if (!j->error[0]) snprintf(j->error, sizeof j->error, "%s", what);
  return 0;
}

static int json_expect(json *j, char c) {
  json_ws(j);
  if (*j->s != c) {
    char what[32];
    snprintf(what, sizeof what, "expected '%c'", c);
    return json_fail(j, what);
  }
  ++j->s;
  return 1;
}

/* A string into out[len] (truncated, NUL-terminated); escapes other than
 * \" \\ \/ \n \t are refused: the writer makes none. */
static int json_string(json *j, char *out, size_t len) {
  json_ws(j);
  if (*j->s != '"') return json_fail(j, "expected a string");
  ++j->s;
  size_t n = 0;
  for (;;) {
    char c = *j->s++;
    if (c == '\0') return json_fail(j, "unterminated string");
    if (c == '"') break;
    if (c == '\\') {
      const char e = *j->s++;
      c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      if (e != '"' && e != '\\' && e != '/' && e != 'n' && e != 't')
        return json_fail(j, "unsupported escape in a string");
    } else if ((unsigned char)c < 0x20) {
      return json_fail(j, "control character in a string");
    }
    if (out && n + 1 < len) out[n++] = c;
  }
  if (out && len) out[n] = '\0';
  return 1;
}

static int json_number(json *j, double *out) {
  json_ws(j);
  char *end;
  errno = 0;
  const double x = strtod(j->s, &end);
  if (end == j->s || errno == ERANGE || !isfinite(x)) return json_fail(j, "expected a number");
  j->s = end;
  if (out) *out = x;
  return 1;
}

/* Skips any value. */
static int json_skip(json *j) {
  json_ws(j);
  if (++j->depth > 32) return json_fail(j, "nested too deep");
  int ok = 1;
  if (*j->s == '"') {
    ok = json_string(j, NULL, 0);
  } else if (*j->s == '{' || *j->s == '[') {
    const char close = *j->s == '{' ? '}' : ']';
    const int object = close == '}';
    ++j->s;
    json_ws(j);
    if (*j->s == close) {
      ++j->s;
    } else {
      for (;;) {
        if (object && !(json_string(j, NULL, 0) && json_expect(j, ':'))) return 0;
        if (!json_skip(j)) return 0;
        json_ws(j);
        if (*j->s == ',') {
          ++j->s;
          continue;
        }
        ok = json_expect(j, close);
        break;
      }
    }
  } else if (strncmp(j->s, "true", 4) == 0 || strncmp(j->s, "null", 4) == 0) {
    j->s += 4;
  } else if (strncmp(j->s, "false", 5) == 0) {
    j->s += 5;
  } else {
    ok = json_number(j, NULL);
  }
  --j->depth;
  return ok;
}

/* Calls `member` for each key of an object, the reader at its value; the
 * callback reads or skips it. */
static int json_object(json *j, int (*member)(json *, const char *key, void *), void *arg) {
  if (!json_expect(j, '{')) return 0;
  json_ws(j);
  if (*j->s == '}') {
    ++j->s;
    return 1;
  }
  for (;;) {
    char key[48];
    if (!json_string(j, key, sizeof key) || !json_expect(j, ':')) return 0;
    if (!member(j, key, arg)) return 0;
    json_ws(j);
    if (*j->s == ',') {
      ++j->s;
      continue;
    }
    return json_expect(j, '}');
  }
}

/* ---- the database file ---------------------------------------------------- */

typedef struct file_header {
  char format[32], platform[128], device[128], driver[64], library[32], kernels[32];
  double version;
} file_header;

typedef struct entry_reader {
  fcl__bucket bucket;
  int have_bucket;
  fcl_plan hint;
  char kernel[16];
} entry_reader;

typedef struct file_reader {
  file_header head;
  fcl__tuning *db;
  int have_plans;
} file_reader;

static int unsigned_field(json *j, unsigned *out, unsigned max) {
  double x;
  if (!json_number(j, &x)) return 0;
  if (x < 0 || x > max || x != floor(x)) return json_fail(j, "a plan field out of range");
  *out = (unsigned)x;
  return 1;
}

static int entry_member(json *j, const char *key, void *arg) {
  entry_reader *e = arg;
  if (strcmp(key, "bucket") == 0) {
    char name[48];
    if (!json_string(j, name, sizeof name)) return 0;
    if (!fcl__bucket_parse(name, &e->bucket)) return json_fail(j, "an unknown bucket");
    e->have_bucket = 1;
    return 1;
  }
  if (strcmp(key, "kernel") == 0) return json_string(j, e->kernel, sizeof e->kernel);
  static const struct {
    const char *name;
    size_t offset;
    unsigned max;
  } fields[] = {
      {"block_k", offsetof(fcl_plan, block_k), 1024},
      {"wg_size", offsetof(fcl_plan, wg_size), 1024},
      {"threads_per_row", offsetof(fcl_plan, threads_per_row), 64},
      {"rows_per_thread", offsetof(fcl_plan, rows_per_thread), 64},
      {"tile_elem_size", offsetof(fcl_plan, tile_elem_size), 4},
      {"splits", offsetof(fcl_plan, splits), FCL_MAX_SPLITS},
      {"packed_heads", offsetof(fcl_plan, packed_heads), 1024},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i)
    if (strcmp(key, fields[i].name) == 0)
      return unsigned_field(j, (unsigned *)((char *)&e->hint + fields[i].offset), fields[i].max);
  return json_skip(j);  /* the tuner's notes: times, shapes */
}

static int plans_array(json *j, fcl__tuning *db) {
  if (!json_expect(j, '[')) return 0;
  json_ws(j);
  if (*j->s == ']') {
    ++j->s;
    return 1;
  }
  for (;;) {
    entry_reader e;
    memset(&e, 0, sizeof e);
    if (!json_object(j, entry_member, &e)) return 0;
    if (!e.have_bucket) return json_fail(j, "a plan without a bucket");
    unsigned kernel = FCL_FLASH_KERNEL_AUTO;
    if (e.kernel[0]) {
      while (kernel < FCL_FLASH_KERNELS && strcmp(fcl_flash_kernel_name(kernel), e.kernel) != 0)
        ++kernel;
      if (kernel >= FCL_FLASH_KERNELS) return json_fail(j, "an unknown kernel");
    }
    e.hint.kernel = kernel;
    char why[160];
    if (fcl__check_tiling_hint_why(&e.hint, why, sizeof why) != FCL_SUCCESS)
      return json_fail(j, "a plan that is not a valid tiling hint");
    const size_t at = fcl__bucket_index(&e.bucket);
    if (db->have[at]) return json_fail(j, "a bucket given twice");
    db->have[at] = 1;
    db->plans[at] = e.hint;
    ++db->count;
    json_ws(j);
    if (*j->s == ',') {
      ++j->s;
      continue;
    }
    return json_expect(j, ']');
  }
}

static int file_member(json *j, const char *key, void *arg) {
  file_reader *r = arg;
  if (strcmp(key, "format") == 0) return json_string(j, r->head.format, sizeof r->head.format);
  if (strcmp(key, "version") == 0) return json_number(j, &r->head.version);
  if (strcmp(key, "platform") == 0)
    return json_string(j, r->head.platform, sizeof r->head.platform);
  if (strcmp(key, "device") == 0) return json_string(j, r->head.device, sizeof r->head.device);
  if (strcmp(key, "driver") == 0) return json_string(j, r->head.driver, sizeof r->head.driver);
  if (strcmp(key, "library") == 0)
    return json_string(j, r->head.library, sizeof r->head.library);
  if (strcmp(key, "kernels") == 0)
    return json_string(j, r->head.kernels, sizeof r->head.kernels);
  if (strcmp(key, "plans") == 0) {
    r->have_plans = 1;
    return plans_array(j, r->db);
  }
  return json_skip(j);
}

int fcl__tuning_parse(const char *text, const fcl_device_info *dev, int require_driver,
                      fcl__tuning *db, char *why, size_t why_len) {
  memset(db->plans, 0, sizeof db->plans);
  memset(db->have, 0, sizeof db->have);
  db->count = 0;
  file_reader r;
  memset(&r, 0, sizeof r);
  r.db = db;
  json j = {.s = text};
  int ok = json_object(&j, file_member, &r);
  if (ok) {
    json_ws(&j);
    if (*j.s != '\0') ok = json_fail(&j, "text after the database's object");
  }
  if (ok && (strcmp(r.head.format, FCL__TUNING_FORMAT) != 0 || r.head.version != 1))
    ok = json_fail(&j, "not a flashcl tuning database of version 1");
  if (ok && !r.have_plans) ok = json_fail(&j, "no \"plans\"");
  if (!ok) {
    const long at = (long)(j.s - text);
    fcl__say(why, why_len, "not a tuning database: %s (at byte %ld)", j.error, at);
    db->count = 0;
    return 0;
  }
  if (strcmp(r.head.platform, dev->platform) != 0 || strcmp(r.head.device, dev->name) != 0) {
    fcl__say(why, why_len, "for another device (%s on %s)", r.head.device, r.head.platform);
    db->count = 0;
    return 0;
  }
  /* A database measured on other kernels than these (another flashcl): a
   * user's is stale as after a driver update. The library's own stays in
   * use, with a note: it is checked against the rules when the kernels
   * change (docs/design.md, "Tuned plans"), and the note says it is due. */
  char kernels[17] = "";
  if (require_driver || r.head.kernels[0]) fcl__kernels_fingerprint(kernels);
  const int other_kernels = strcmp(r.head.kernels, kernels) != 0;
  if (require_driver && other_kernels) {
    fcl__say(why, why_len,
             "tuned with other kernels (flashcl %s, kernels %s; these are %s): stale, run "
             "flashcl-tune again",
             r.head.library[0] ? r.head.library : "?",
             r.head.kernels[0] ? r.head.kernels : "not recorded", kernels);
    db->count = 0;
    return 0;
  }
  const int other_driver = strcmp(r.head.driver, dev->driver) != 0;
  if (require_driver && other_driver) {
    fcl__say(why, why_len,
             "tuned with driver %s, and the device now runs %s: stale, run flashcl-tune again",
             r.head.driver, dev->driver);
    db->count = 0;
    return 0;
  }
  char driver_note[400] = "";
  if (other_driver)
    fcl__say(driver_note, sizeof driver_note, "tuned with driver %s (the device runs %s)",
             r.head.driver, dev->driver);
  fcl__say(why, why_len, "%s%s%s", driver_note, other_driver && other_kernels ? "; " : "",
           other_kernels ? "tuned with other kernels than these: its plans may no longer beat "
                           "the rules"
                         : "");
  return 1;
}

void fcl__tuning_file_name(const fcl_device_info *dev, char *out, size_t len) {
  char name[300];
  snprintf(name, sizeof name, "%s %s", dev->platform, dev->name);
  size_t n = 0;
  int dash = 1;  /* no leading dash */
  for (const char *s = name; *s && n + 6 < len; ++s) {
    const unsigned char c = (unsigned char)*s;
    if (isalnum(c)) {
      out[n++] = (char)tolower(c);
      dash = 0;
    } else if (!dash) {
      out[n++] = '-';
      dash = 1;
    }
  }
  while (n > 0 && out[n - 1] == '-') --n;
  snprintf(out + n, len - n, ".json");
}

static void json_put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if (*s == '\n') {
      fputs("\\n", f);
      continue;
    }
    if (*s == '\t') {
      fputs("\\t", f);
      continue;
    }
    fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
  }
  fputc('"', f);
}

int fcl__tuning_write(FILE *f, const fcl_device_info *dev, const char *when,
                      const fcl__tuned_entry *entries, size_t n) {
  fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": 1,\n  \"platform\": ", FCL__TUNING_FORMAT);
  json_put_string(f, dev->platform);
  fputs(",\n  \"device\": ", f);
  json_put_string(f, dev->name);
  fputs(",\n  \"driver\": ", f);
  json_put_string(f, dev->driver);
  char kernels[17];
  fcl__kernels_fingerprint(kernels);
  fprintf(f, ",\n  \"library\": \"%s\",\n  \"kernels\": \"%s\",\n  \"tuned\": ",
          fcl_version_string(), kernels);
  json_put_string(f, when ? when : "");
  fputs(",\n  \"plans\": [", f);
  for (size_t i = 0; i < n; ++i) {
    const fcl__tuned_entry *e = &entries[i];
    const fcl_plan *h = &e->hint;
    char bucket[48];
    fcl__bucket_name(&e->bucket, bucket, sizeof bucket);
    fprintf(f,
            "%s\n    {\"bucket\": \"%s\", \"kernel\": \"%s\", \"block_k\": %u, \"wg_size\": %u, "
            "\"threads_per_row\": %u, \"rows_per_thread\": %u, \"tile_elem_size\": %u, "
            "\"splits\": %u, \"ms\": %.6g, \"rules_ms\": %.6g, \"shapes\": ",
            i ? "," : "", bucket, fcl_flash_kernel_name(h->kernel), h->block_k, h->wg_size,
            h->threads_per_row, h->rows_per_thread, h->tile_elem_size, h->splits, e->ms,
            e->rules_ms);
    json_put_string(f, e->shapes);
    fputc('}', f);
  }
  fputs("\n  ]\n}\n", f);
  return ferror(f) ? -1 : 0;
}

/* ---- the context's database ---------------------------------------------- */

void fcl__log(fcl_context *ctx, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&ctx->lock);
  const size_t have = ctx->log ? strlen(ctx->log) : 0, add = strlen(line) + 1;
  if (have + add + 1 <= FCL__LOG_MAX) {
    char *grown = realloc(ctx->log, have + add + 1);
    if (grown) {
      memcpy(grown + have, line, add - 1);
      grown[have + add - 1] = '\n';
      grown[have + add] = '\0';
      ctx->log = grown;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
}

/* Drops the entries whose hint no longer plans the bucket's shapes on the
 * device's limits (a tuned plan from a device that reported more local
 * memory, say). */
static void drop_unfit(fcl_context *ctx, fcl__tuning *db, const char *source) {
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    if (!db->have[i]) continue;
    const fcl__bucket b = fcl__bucket_at(i);
    fcl_attention_desc shapes[2];
    const size_t n = fcl__bucket_shapes(&ctx->info.limits, &b, shapes);
    for (size_t s = 0; s < n; ++s) {
      fcl_plan plan;
      char why[256] = "";
      const fcl_pass pass = b.pass == 1 ? FCL_PASS_BACKWARD : FCL_PASS_FORWARD;
      if (fcl__plan_flash(&ctx->info.limits, &shapes[s], pass, &db->plans[i], &plan, why,
                          sizeof why) == FCL_SUCCESS)
        continue;
      char name[48];
      fcl__bucket_name(&b, name, sizeof name);
      fcl__log(ctx, "tuning: %s: the plan for %s does not fit this device (%s); its rules "
               "plan it", source, name, why);
      db->have[i] = 0;
      --db->count;
      break;
    }
  }
}

/* Loads `text` (from `source`) if it is this device's database; 1 if so. */
static int take_database(fcl_context *ctx, const char *text, const char *source, int user_file) {
  fcl__tuning *db = calloc(1, sizeof *db);
  if (!db) {
    fcl__log(ctx, "tuning: %s: out of host memory", source);
    return 0;
  }
  char why[400];
  if (!fcl__tuning_parse(text, &ctx->info, user_file, db, why, sizeof why)) {
    if (user_file) fcl__log(ctx, "tuning: %s ignored: %s", source, why);
    free(db);
    return 0;
  }
  if (why[0]) fcl__log(ctx, "tuning: %s: %s", source, why);
  drop_unfit(ctx, db, source);
  snprintf(db->source, sizeof db->source, "%s", source);
  pthread_mutex_lock(&ctx->lock);
  db->enabled = ctx->tuning ? ctx->tuning->enabled : 1;
  fcl__tuning *old = ctx->tuning;
  ctx->tuning = db;
  pthread_mutex_unlock(&ctx->lock);
  free(old);
  return 1;
}

static int load_file(fcl_context *ctx, const char *dir) {
  char name[320], path[1024];
  fcl__tuning_file_name(&ctx->info, name, sizeof name);
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
    fcl__log(ctx, "tuning: the folder %s is too long a path", dir);
    return 0;
  }
  char why[1200];
  char *text = fcl__read_file(path, FCL__TUNING_FILE_MAX, why, sizeof why);
  if (!text) {
    if (errno != ENOENT) fcl__log(ctx, "tuning: %s", why);
    return 0;
  }
  const int taken = take_database(ctx, text, path, 1);
  free(text);
  return taken;
}

int fcl__tuning_default_dir(char *out, size_t len) {
  const char *dir = getenv("FLASHCL_TUNING_DIR");
  if (dir && *dir) return snprintf(out, len, "%s", dir) < (int)len;
  dir = getenv("XDG_CACHE_HOME");
  if (dir && *dir) return snprintf(out, len, "%s/flashcl", dir) < (int)len;
  dir = getenv("HOME");
  if (dir && *dir) return snprintf(out, len, "%s/.cache/flashcl", dir) < (int)len;
  return 0;
}

static void load_shipped(fcl_context *ctx) {
  for (size_t i = 0; fcl__tuning_shipped[i]; ++i) {
    char source[64];
    snprintf(source, sizeof source, "the library's database %zu", i);
    if (take_database(ctx, fcl__tuning_shipped[i], source, 0)) return;
  }
}

void fcl__tuning_load(fcl_context *ctx, const char *dir) {
  pthread_mutex_lock(&ctx->lock);
  if (ctx->tuning) {
    ctx->tuning->count = 0;
    memset(ctx->tuning->have, 0, sizeof ctx->tuning->have);
    ctx->tuning->source[0] = '\0';
  }
  pthread_mutex_unlock(&ctx->lock);
  char found[1024];
  if (dir) {
    if (load_file(ctx, dir)) return;
  } else if (fcl__tuning_default_dir(found, sizeof found) && load_file(ctx, found)) {
    return;
  }
  load_shipped(ctx);
}

void fcl__tuning_release(fcl_context *ctx) {
  free(ctx->tuning);
  ctx->tuning = NULL;
  free(ctx->log);
  ctx->log = NULL;
}

int fcl_tiling_hint_given(const fcl_plan *h) {
  return h && (h->block_k || h->wg_size || h->threads_per_row || h->rows_per_thread ||
               h->tile_elem_size || h->kernel || h->splits || h->packed_heads || h->merge);
}

int fcl__tuned_plan(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                    fcl_plan *out) {
  fcl__bucket b;
  if (!fcl__bucket_of(&ctx->info.limits, desc, pass, &b)) return 0;
  const size_t at = fcl__bucket_index(&b);
  int have = 0;
  pthread_mutex_lock(&ctx->lock);
  if (ctx->tuning && ctx->tuning->enabled && ctx->tuning->have[at]) {
    *out = ctx->tuning->plans[at];
    have = 1;
  }
  pthread_mutex_unlock(&ctx->lock);
  return have;
}

/* ---- public ------------------------------------------------------------------ */

fcl_status fcl_context_set_tuning_dir(fcl_context *ctx, const char *dir) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, dir && !*dir, FCL_ERROR_INVALID_ARGUMENT,
                "the tuning folder is an empty string (NULL means the default)");
  fcl__tuning_load(ctx, dir);
  return FCL_SUCCESS;
}

fcl_status fcl_context_use_tuned_plans(fcl_context *ctx, int enable) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, enable != 0 && enable != 1, FCL_ERROR_INVALID_ARGUMENT,
                "enable must be 0 or 1, got %d", enable);
  fcl__tuning *fresh = NULL;
  pthread_mutex_lock(&ctx->lock);
  if (!ctx->tuning) ctx->tuning = fresh = calloc(1, sizeof *fresh);
  if (ctx->tuning) ctx->tuning->enabled = enable;
  const int ok = ctx->tuning != NULL;
  pthread_mutex_unlock(&ctx->lock);
  FCL_RETURN_IF(ctx, !ok, FCL_ERROR_OUT_OF_MEMORY, "the tuning state: out of host memory");
  return FCL_SUCCESS;
}

fcl_status fcl_context_tuning(fcl_context *ctx, fcl_tuning_info *out) {
  FCL_FORWARD_IF(fcl__check_context(ctx));
  FCL_RETURN_IF(ctx, !out, FCL_ERROR_INVALID_ARGUMENT, "out is NULL");
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&ctx->lock);
  out->enabled = !ctx->tuning || ctx->tuning->enabled;
  if (ctx->tuning) {
    out->plans = ctx->tuning->count;
    snprintf(out->source, sizeof out->source, "%s", ctx->tuning->source);
  }
  pthread_mutex_unlock(&ctx->lock);
  fcl__tuning_file_name(&ctx->info, out->file_name, sizeof out->file_name);
  return FCL_SUCCESS;
}

fcl_status fcl_context_plan(fcl_context *ctx, const fcl_attention_desc *desc, fcl_pass pass,
                            fcl_plan *plan, char *why, size_t why_len) {
  if (!ctx || !ctx->usable) {
    fcl__say(why, why_len, "%s", ctx ? "the context was not created successfully" : "ctx is NULL");
    return FCL_ERROR_INVALID_ARGUMENT;
  }
  if (why && why_len) why[0] = '\0';
  FCL_WHY_IF(!desc || !plan, FCL_ERROR_INVALID_ARGUMENT, "%s is NULL", !desc ? "desc" : "plan");
  FCL_WHY_IF(pass != FCL_PASS_FORWARD && pass != FCL_PASS_BACKWARD, FCL_ERROR_INVALID_ARGUMENT,
             "pass = %d is not an fcl_pass", (int)pass);
  fcl__shape shape;
  FCL_FORWARD_IF(fcl__check_desc_why(desc, &shape, why, why_len));
  const fcl__settings settings = fcl__context_settings(ctx);
  return fcl__plan_call(ctx, &settings.tiling_hint, &shape, pass, plan, why, why_len);
}

size_t fcl_context_log(fcl_context *ctx, char *out, size_t capacity) {
  if (!ctx) {
    if (out && capacity) out[0] = '\0';
    return 0;
  }
  pthread_mutex_lock(&ctx->lock);
  const size_t n = ctx->log ? strlen(ctx->log) : 0;
  if (out && capacity) {
    const size_t copied = n < capacity - 1 ? n : capacity - 1;
    if (copied) memcpy(out, ctx->log, copied);
    out[copied] = '\0';
  }
  pthread_mutex_unlock(&ctx->lock);
  return n;
}
