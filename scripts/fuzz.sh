#!/bin/sh
# fuzz.sh — builds the libFuzzer targets with clang's
# -fsanitize=fuzzer,address,undefined and runs each for a bounded time from
# its committed seed corpus:
#   fuzz_desc_plan  descriptor validation, tiling hints, the planner,
#                   chunking, the I/O model (fuzz/corpus), for `seconds`;
#   fuzz_cli        flashcl-bench's and flashcl-info's command lines
#                   (fuzz/corpus_cli), for a third of that.
#
# Usage: scripts/fuzz.sh [seconds] [build-dir]   (defaults: 60, build-fuzz)
# New interesting inputs go to <build-dir>/corpus-<target> (kept between
# runs, not committed); a crashing or invariant-breaking input is written
# to <build-dir>/artifacts/ and the script fails. To keep it as a
# regression test, copy it into the target's corpus: tests/test_fuzz_replay.c
# replays every file of both in ctest.
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
cmake --build "$build" -j "$jobs" --target fuzz_desc_plan fuzz_cli

mkdir -p "$build/artifacts"
rm -f "$build"/artifacts/crash-* "$build"/artifacts/leak-* \
  "$build"/artifacts/timeout-* "$build"/artifacts/oom-* "$build"/artifacts/slow-unit-*
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

status=0
# run TARGET SECONDS SEED_CORPUS: its output to build-dir/fuzz-TARGET.log
run() {
  mkdir -p "$build/corpus-$1"
  echo "fuzz: running $1 for ${2}s"
  "$build/$1" "$build/corpus-$1" "$3" \
    -max_total_time="$2" -timeout=10 -rss_limit_mb=2048 -max_len=256 \
    -artifact_prefix="$build/artifacts/" -print_final_stats=1 > "$build/fuzz-$1.log" 2>&1
}
# Both targets at once, each on a core of its own where there are two: the
# run takes the longer one's time, not their sum.
run fuzz_desc_plan "$seconds" "$root/fuzz/corpus" &
desc_plan=$!
run fuzz_cli $(( (seconds + 2) / 3 )) "$root/fuzz/corpus_cli" &
cli=$!
wait "$desc_plan" || status=$?
wait "$cli" || status=$?
if [ "$status" -ne 0 ]; then
  cat "$build/fuzz-fuzz_desc_plan.log" "$build/fuzz-fuzz_cli.log"
else
  tail -n 25 "$build/fuzz-fuzz_desc_plan.log" "$build/fuzz-fuzz_cli.log"
fi

found=$(find "$build/artifacts" -type f | head -n 1)
if [ "$status" -ne 0 ] || [ -n "$found" ]; then
  echo "fuzz: FAILED (exit status $status); inputs in $build/artifacts:" >&2
  ls -l "$build/artifacts" >&2
  exit 1
fi
echo "fuzz: nothing found"
