#!/usr/bin/env bash
# The whole test-suite: installs what is missing, builds, runs the unit
# tests with ctest (which also lints every kernel variant with clang), then
# the same tests under AddressSanitizer, UndefinedBehaviorSanitizer and
# (the thread tests) ThreadSanitizer, then the fuzzer for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh clang libclang-rt-14-dev oclgrind
(cd build && ctest --output-on-failure -j "$(nproc)")
./scripts/sanitize.sh
./scripts/fuzz.sh "${FLASHCL_FUZZ_SECONDS:-60}"
