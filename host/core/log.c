/*
 * log.c — the context's log: lines of warnings a call does not fail on (a
 * tuning database skipped, a build log not written), appended under the
 * context's lock and read back by fcl_context_log.
 */
#include "context.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
