#!/usr/bin/env bash
# The whole test-suite, every test once: installs what is missing and
# builds (setup.sh); runs, in that plain build, the tests labelled "plain"
# (the kernels' lint with clang, the kernels under Oclgrind, the vendor
# check's compilers), which examine the kernels rather than the host code;
# then every other test (the unit suites against the float64 reference,
# the tools' tests) under AddressSanitizer and UndefinedBehaviorSanitizer,
# and the thread tests under ThreadSanitizer (sanitize.sh); then the
# fuzzer for a bounded time. `ctest` in build/ runs all of them unsanitized.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh clang libclang-rt-14-dev oclgrind
(cd build && ctest --output-on-failure -j "$(nproc)" -L plain)
./scripts/sanitize.sh
./scripts/fuzz.sh "${FLASHCL_FUZZ_SECONDS:-60}"
