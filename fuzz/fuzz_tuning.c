/*
 * fuzz_tuning.c — libFuzzer target over the tuning database's reader
 * (fcl__tuning_parse, host/plan/tuning.c), whose input is a file anyone who can
 * write the cache folder controls. Arbitrary bytes, cut at their first NUL
 * as the reader sees a file, are parsed for a device of the shipped
 * database's platform and name, with and without the driver check. The
 * target aborts when an invariant breaks:
 *   - the answer is 0 or 1, the same for the same text twice, with the
 *     same plans;
 *   - `why` is NUL-terminated within its buffer, and says something on a
 *     refusal; a refused text leaves no plan;
 *   - an accepted database's count is its number of buckets, and each plan
 *     is a valid tiling hint;
 *   - written back (fcl__tuning_write) and read again, an accepted
 *     database gives the same buckets and the fields the writer writes.
 * Longer inputs than the library reads (FCL__TUNING_FILE_MAX) are skipped:
 * fcl__read_file refuses those files. Built like fuzz_desc_plan
 * (scripts/fuzz.sh); tests/test_fuzz_replay.c replays fuzz/corpus_tuning
 * in ctest.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuning.h"
#include "problem.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz_tuning: invariant broken: %s (%s:%d)\n", #cond,    \
              __FILE__, __LINE__);                                             \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* The device the shipped database (tuning/) names, so that its entries
 * and mutations of them reach the plans' reader. */
static fcl_device_info device(void) {
  fcl_device_info dev;
  memset(&dev, 0, sizeof dev);
  snprintf(dev.platform, sizeof dev.platform, "NVIDIA CUDA");
  snprintf(dev.name, sizeof dev.name, "NVIDIA H200");
  snprintf(dev.driver, sizeof dev.driver, "580.159.04");
  return dev;
}

static int parse(const char *text, const fcl_device_info *dev, int require_driver,
                 fcl__tuning *db) {
  char why[400];
  memset(why, 'x', sizeof why);
  const int taken = fcl__tuning_parse(text, dev, require_driver, db, why, sizeof why);
  CHECK(taken == 0 || taken == 1);
  CHECK(memchr(why, '\0', sizeof why) != NULL);
  if (!taken) CHECK(why[0] != '\0' && db->count == 0);
  unsigned have = 0;
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    CHECK(db->have[i] == 0 || db->have[i] == 1);
    if (!db->have[i]) continue;
    ++have;
    char reason[160];
    CHECK(fcl__check_tiling_hint_why(&db->plans[i], reason, sizeof reason) == FCL_SUCCESS);
  }
  if (taken) CHECK(db->count == have);
  return taken;
}

/* The fields fcl__tuning_write records of a plan. */
static int same_written(const fcl_plan *a, const fcl_plan *b) {
  return a->kernel == b->kernel && a->block_k == b->block_k && a->wg_size == b->wg_size &&
         a->threads_per_row == b->threads_per_row && a->rows_per_thread == b->rows_per_thread &&
         a->tile_elem_size == b->tile_elem_size && a->splits == b->splits;
}

static void round_trip(const fcl__tuning *db, const fcl_device_info *dev) {
  static fcl__tuned_entry entries[FCL__TUNING_BUCKETS];
  size_t n = 0;
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    if (!db->have[i]) continue;
    memset(&entries[n], 0, sizeof entries[n]);
    entries[n].bucket = fcl__bucket_at(i);
    entries[n].hint = db->plans[i];
    ++n;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  CHECK(fcl__tuning_write(f, dev, "2026-12-06T00:00:00Z", entries, n) == 0);
  CHECK(fclose(f) == 0);
  static fcl__tuning again;
  CHECK(parse(text, dev, 0, &again) == 1);
  CHECK(again.count == db->count);
  for (size_t i = 0; i < FCL__TUNING_BUCKETS; ++i) {
    CHECK(again.have[i] == db->have[i]);
    if (db->have[i]) CHECK(same_written(&again.plans[i], &db->plans[i]));
  }
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FCL__TUNING_FILE_MAX) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  const fcl_device_info dev = device();
  static fcl__tuning db, twice;
  for (int require_driver = 0; require_driver < 2; ++require_driver) {
    const int taken = parse(text, &dev, require_driver, &db);
    CHECK(parse(text, &dev, require_driver, &twice) == taken);
    CHECK(memcmp(db.have, twice.have, sizeof db.have) == 0);
    CHECK(memcmp(db.plans, twice.plans, sizeof db.plans) == 0);
    if (taken) round_trip(&db, &dev);
  }
  free(text);
  return 0;
}
