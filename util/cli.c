/*
 * cli.c — see cli.h.
 */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double fclu_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int refuse(char *why, size_t why_len, const char *fmt, ...) {
  if (why && why_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Digits text[0..len) as a number: 0, -1 for anything but digits, -2 past
 * 64 bits. */
static int digits_value(const char *text, size_t len, uint64_t *out) {
  if (len == 0) return -1;
  uint64_t v = 0;
  int overflow = 0;
  for (size_t i = 0; i < len; ++i) {
    const unsigned char c = (unsigned char)text[i];
    if (c < '0' || c > '9') return -1;
    if (v > (UINT64_MAX - (c - '0')) / 10) overflow = 1;
    v = v * 10 + (c - '0');
  }
  if (overflow) return -2;
  *out = v;
  return 0;
}

static const char *what_is_wrong(int code) {
  return code == -2 ? "is too large" : "is not a decimal integer";
}

int fclu_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *why,
                   size_t why_len) {
  uint64_t v;
  if (!text) return refuse(why, why_len, "no value given");
  const int code = digits_value(text, strlen(text), &v);
  if (code != 0) return refuse(why, why_len, "'%s' %s", text, what_is_wrong(code));
  if (v < min || v > max)
    return refuse(why, why_len, "%llu is out of range (%llu to %llu)", (unsigned long long)v,
                  (unsigned long long)min, (unsigned long long)max);
  *out = v;
  return 0;
}

int fclu_split_list(char *text, char **fields, size_t max_n, size_t *n, char *why,
                    size_t why_len) {
  if (!text) return refuse(why, why_len, "no list given");
  if (!*text) return refuse(why, why_len, "an empty list");
  char *copy = strdup(text); /* the whole list, for the reason */
  size_t count = 0;
  int bad = 0;
  for (char *p = text; !bad; ++count) {
    char *comma = strchr(p, ',');
    if (count == max_n)
      bad = refuse(why, why_len, "'%s' has more than %zu fields", copy ? copy : "", max_n);
    else if (comma == p || !*p)
      bad = refuse(why, why_len, "field %zu of '%s' is empty", count + 1, copy ? copy : "");
    if (bad) break;
    fields[count] = p;
    if (!comma) {
      ++count;
      break;
    }
    *comma = '\0';
    p = comma + 1;
  }
  free(copy);
  if (bad) return -1;
  *n = count;
  return 0;
}

int fclu_parse_u64_list(const char *text, uint64_t max, size_t min_n, size_t max_n,
                        uint64_t *out, size_t *n, char *why, size_t why_len) {
  if (!text) return refuse(why, why_len, "no list given");
  uint64_t values[64];
  char *fields[64], *split = strdup(text);
  size_t count = 0;
  if (!split) return refuse(why, why_len, "out of memory");
  const size_t most = max_n < 64 ? max_n : 64;
  int bad = fclu_split_list(split, fields, most, &count, why, why_len);
  for (size_t i = 0; !bad && i < count; ++i) {
    const int code = digits_value(fields[i], strlen(fields[i]), &values[i]);
    if (code != 0)
      bad = refuse(why, why_len, "field %zu of '%s' %s", i + 1, text, what_is_wrong(code));
    else if (values[i] > max)
      bad = refuse(why, why_len, "field %zu of '%s' is over %llu", i + 1, text,
                   (unsigned long long)max);
  }
  free(split);
  if (bad) return -1;
  if (count < min_n)
    return refuse(why, why_len, "'%s' has %zu fields; at least %zu are needed", text, count,
                  min_n);
  memcpy(out, values, count * sizeof *values);
  *n = count;
  return 0;
}

int fclu_parse_dtype(const char *text, fcl_dtype *out, char *why, size_t why_len) {
  static const struct {
    const char *name;
    fcl_dtype type;
  } names[] = {{"f32", FCL_DTYPE_F32}, {"f16", FCL_DTYPE_F16}, {"bf16", FCL_DTYPE_BF16}};
  for (size_t i = 0; text && i < sizeof names / sizeof names[0]; ++i)
    if (!strcmp(text, names[i].name)) {
      *out = names[i].type;
      return 0;
    }
  return refuse(why, why_len, "unknown dtype '%s' (f32, f16, bf16)", text ? text : "(null)");
}

int fclu_parse_kernel(const char *text, unsigned *out, char *why, size_t why_len) {
  for (unsigned k = FCL_FLASH_KERNEL_AUTO; text && k < FCL_FLASH_KERNELS; ++k)
    if (!strcmp(text, fcl_flash_kernel_name(k))) {
      *out = k;
      return 0;
    }
  char names[128] = "";
  for (unsigned k = FCL_FLASH_KERNEL_AUTO; k < FCL_FLASH_KERNELS; ++k)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
             fcl_flash_kernel_name(k));
  return refuse(why, why_len, "--kernel needs one of %s (got '%s')", names,
                text ? text : "(null)");
}
