#!/bin/sh
# fuzz.sh — builds the libFuzzer target fuzz/fuzz_desc_plan.c (descriptor
# validation, tiling hints, the planner, chunking, the I/O model) with
# clang's -fsanitize=fuzzer,address,undefined and runs it for a bounded
# time from the committed seed corpus (fuzz/corpus).
#
# Usage: scripts/fuzz.sh [seconds] [build-dir]   (defaults: 60, build-fuzz)
# New interesting inputs go to <build-dir>/corpus (kept between runs, not
# committed); a crashing or invariant-breaking input is written to
# <build-dir>/artifacts/ and the script fails. To keep it as a regression
# test, copy it into fuzz/corpus/: tests/test_fuzz_replay.c replays every
# file there in ctest.
# Exit status: 0 when the run found nothing, else non-zero.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build=${2:-"$root/build-fuzz"}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
cc=${CC:-clang}

echo "fuzz: configuring $build with $cc"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHCL_BUILD_FUZZERS=ON \
  -DFLASHCL_BUILD_TESTS=OFF -DFLASHCL_BUILD_TOOLS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target fuzz_desc_plan

mkdir -p "$build/corpus" "$build/artifacts"
rm -f "$build"/artifacts/crash-* "$build"/artifacts/leak-* \
  "$build"/artifacts/timeout-* "$build"/artifacts/oom-* "$build"/artifacts/slow-unit-*
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

echo "fuzz: running fuzz_desc_plan for ${seconds}s"
status=0
"$build/fuzz_desc_plan" "$build/corpus" "$root/fuzz/corpus" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=256 \
  -artifact_prefix="$build/artifacts/" -print_final_stats=1 || status=$?

found=$(find "$build/artifacts" -type f | head -n 1)
if [ "$status" -ne 0 ] || [ -n "$found" ]; then
  echo "fuzz: FAILED (exit status $status); inputs in $build/artifacts:" >&2
  ls -l "$build/artifacts" >&2
  exit 1
fi
echo "fuzz: nothing found in ${seconds}s"
