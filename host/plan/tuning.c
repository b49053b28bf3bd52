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

/* The databases built into the library (cmake/embed_sources.cmake, LIST
 * mode: a NULL-terminated array of the tuning/ files' texts). */
extern const char *const fcl__tuning_shipped[];

/* ---- the context's database ---------------------------------------------- */

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
