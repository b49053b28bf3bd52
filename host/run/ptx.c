/*
 * ptx.c — sm_90 PTX with marked Hopper instructions made sm_90a PTX
 * (ptx.h): the text is checked for the form NVIDIA's OpenCL compiler
 * emits before anything is changed, so that a driver emitting something
 * else is refused with a reason rather than patched blindly.
 */
#include "ptx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK_LEN (sizeof FCL_PTX_MARK - 1)

static int blank(char c) { return c == ' ' || c == '\t'; }

/* A line's first non-blank character, or its end. */
static const char *text_start(const char *line, const char *end) {
  while (line < end && blank(*line)) ++line;
  return line;
}

/* Whether [p, end) starts with directive `name` followed by a blank. */
static int directive(const char *p, const char *end, const char *name) {
  const size_t n = strlen(name);
  return (size_t)(end - p) > n && !memcmp(p, name, n) && blank(p[n]);
}

/* The facts of the text that decide whether it can be patched. */
typedef struct scan {
  int version_major, version_minor, versions;
  int targets;
  size_t target_end;  /* offset just past the first target's name */
  size_t markers;
} scan;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int refuse(char *why, size_t why_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && why_len) vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
  return -1;
}

/* Checks one line [line, end), the `number`-th, into *s. @return 0 or -1. */
static int scan_line(const char *ptx, const char *line, const char *end, long number, scan *s,
                     char *why, size_t why_len) {
  const char *p = text_start(line, end);
  const int shown = (int)(end - p < 80 ? end - p : 80);  /* of the line, in messages */
  for (const char *m = line; (m = memchr(m, '/', (size_t)(end - m))) != NULL; ++m) {
    if ((size_t)(end - m) < MARK_LEN - 1 || memcmp(m, FCL_PTX_MARK, MARK_LEN - 1)) continue;
    if (m != p)
      return refuse(why, why_len, "line %ld: a marker inside other text: %.*s", number, shown, p);
    if ((size_t)(end - m) < MARK_LEN || m[MARK_LEN - 1] != ' ')
      return refuse(why, why_len, "line %ld: a marker without its space: %.*s", number, shown, p);
    s->markers++;
  }
  if (directive(p, end, ".version")) {
    int major = 0, minor = 0;
    char tail[24];
    snprintf(tail, sizeof tail, "%.*s", (int)(end - p - 8 < 23 ? end - p - 8 : 23), p + 8);
    if (sscanf(tail, "%d.%d", &major, &minor) != 2)
      return refuse(why, why_len, "line %ld: an unreadable .version: %.*s", number, shown, p);
    if (!s->versions++) s->version_major = major, s->version_minor = minor;
  }
  if (directive(p, end, ".target")) {
    if (s->targets++)
      return refuse(why, why_len, "line %ld: a second .target line: %.*s", number, shown, p);
    const char *name = text_start(p + 7, end), *stop = name;
    while (stop < end && *stop != ',' && !blank(*stop) && *stop != '\r') ++stop;
    char target[32];
    snprintf(target, sizeof target, "%.*s", (int)(stop - name < 31 ? stop - name : 31), name);
    if (strcmp(target, "sm_90"))
      return refuse(why, why_len, "line %ld: the PTX targets %s, not sm_90", number, target);
    s->target_end = (size_t)(stop - ptx);
  }
  return 0;
}

int fcl__ptx_unmark(const char *ptx, size_t len, char **out, size_t *out_len, char *why,
                    size_t why_len) {
  *out = NULL;
  *out_len = 0;
  if (why && why_len) why[0] = '\0';
  while (len && ptx[len - 1] == '\0') --len;
  const char *nul = memchr(ptx, '\0', len);
  if (nul)
    return refuse(why, why_len, "a NUL byte at offset %ld: not PTX text", (long)(nul - ptx));
  scan s = {0};
  long number = 1;
  for (const char *line = ptx, *stop = ptx + len; line < stop; ++number) {
    const char *end = memchr(line, '\n', (size_t)(stop - line));
    if (!end) end = stop;
    if (scan_line(ptx, line, end, number, &s, why, why_len)) return -1;
    line = end + 1;
  }
  if (!s.versions) return refuse(why, why_len, "no .version line: not PTX text");
  if (s.version_major < 8)
    return refuse(why, why_len, "PTX ISA %d.%d has no wgmma (8.0 or later)", s.version_major,
                  s.version_minor);
  if (!s.targets) return refuse(why, why_len, "no .target line");
  if (!s.markers) return refuse(why, why_len, "no marked instruction (%s)", FCL_PTX_MARK);

  const size_t n = len - s.markers * MARK_LEN + 1;  /* + the target's 'a' */
  char *text = malloc(n + 1);
  if (!text) return -2;
  size_t at = 0;
  for (const char *line = ptx, *stop = ptx + len; line < stop;) {
    const char *end = memchr(line, '\n', (size_t)(stop - line));
    end = end ? end + 1 : stop;
    const char *p = text_start(line, end);
    const int marked = (size_t)(end - p) >= MARK_LEN && !memcmp(p, FCL_PTX_MARK, MARK_LEN);
    for (const char *c = line; c < end; ++c) {
      if (marked && c == p) c += MARK_LEN;
      if (c >= end) break;
      text[at++] = *c;
      if ((size_t)(c - ptx) + 1 == s.target_end) text[at++] = 'a';
    }
    line = end;
  }
  text[at] = '\0';
  *out = text;
  *out_len = at;
  return 0;
}
