/*
 * svg.c — flashcl-bench --svg. Not drawn yet: says so instead of writing a
 * file that pretends to be a plot.
 */
#include "bench.h"

int bench_write_svg(const char *path, const bench_device *devices, size_t n_devices,
                    const bench_results *all) {
  (void)devices;
  (void)n_devices;
  (void)all;
  fprintf(stderr, "flashcl-bench: --svg %s: plotting is not implemented in this build\n", path);
  return -1;
}
