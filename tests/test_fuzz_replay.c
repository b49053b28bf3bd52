/*
 * test_fuzz_replay.c — replays every input of the fuzzer's committed corpus
 * (fuzz/corpus: the seeds, and any input a fuzzing run found, copied there
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
    uint8_t data[4096];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    /* On a broken invariant the target prints it and aborts. */
    LLVMFuzzerTestOneInput(data, n);
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
