/*
 * tuning_file.c — the tuning database's file: a small JSON reader for its
 * shape, and its writer (what flashcl-tune saves and a context loads).
 */
#include "tuning.h"
#include "errors.h"
#include "program.h"
#include "problem.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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
