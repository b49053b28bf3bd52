/*
 * test_fuzz_replay.c — replays every input of a fuzzer's committed corpus
 * (fuzz/corpus, corpus_cli or corpus_tuning, whichever target it is built
 * with: the seeds, and any input a fuzzing run found, copied there
 * as its regression test) through the fuzz target, without libFuzzer, so
 * that ctest checks the planner's and validation's invariants on them with
 * any compiler. An input that breaks an invariant aborts the test. Pure:
 * no OpenCL device is touched.
 */
#include "harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

START_TEST(fuzz_corpus_replays_clean) {
  DIR *dir = opendir(FCL_FUZZ_CORPUS_DIR);
  ck_assert_msg(dir != NULL, "cannot open %s", FCL_FUZZ_CORPUS_DIR);
  size_t files = 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", FCL_FUZZ_CORPUS_DIR, e->d_name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t n = 0, cap = 4096;
    uint8_t *data = malloc(cap);
    for (size_t got; data && (got = fread(data + n, 1, cap - n, f)) > 0;) {
      n += got;
      if (n == cap) data = realloc(data, cap *= 2);
    }
    ck_assert_ptr_nonnull(data);
    fclose(f);
    /* On a broken invariant the target prints it and aborts. */
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    ++files;
  }
  closedir(dir);
  ck_assert_uint_gt(files, 0);
  printf("fuzz replay: %zu inputs of %s pass\n", files, FCL_FUZZ_CORPUS_DIR);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fuzz_replay");
  TCase *tc = th_tcase("corpus");
  tcase_add_test(tc, fuzz_corpus_replays_clean);
  suite_add_tcase(s, tc);
  return th_run_suite(s);
}
