#!/bin/sh
# fuzz.sh — builds the libFuzzer targets with clang's
# -fsanitize=fuzzer,address,undefined and runs each for a bounded time from
# its committed seed corpus:
#   fuzz_desc_plan  descriptor validation, tiling hints, the planner,
#                   chunking, the I/O model (fuzz/corpus), for two thirds
#                   of `seconds`;
#   fuzz_cli        flashcl-bench's and flashcl-info's command lines
#                   (fuzz/corpus_cli), for a third;
#   fuzz_tuning     the tuning database's reader (fuzz/corpus_tuning,
#                   written by fuzz/make_corpus_tuning.py), for a third,
#                   after fuzz_cli on the same core.
# The second core's two runs take as long as the first's one: `seconds`
# of wall time spread over two cores, 4/3 of it in CPU time all told.
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
cmake --build "$build" -j "$jobs" --target fuzz_desc_plan fuzz_cli fuzz_tuning

mkdir -p "$build/artifacts"
rm -f "$build"/artifacts/crash-* "$build"/artifacts/leak-* \
  "$build"/artifacts/timeout-* "$build"/artifacts/oom-* "$build"/artifacts/slow-unit-*
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

status=0
# run TARGET SECONDS SEED_CORPUS [MAX_LEN]: its output to build-dir/fuzz-TARGET.log
run() {
  mkdir -p "$build/corpus-$1"
  echo "fuzz: running $1 for ${2}s"
  "$build/$1" "$build/corpus-$1" "$3" \
    -max_total_time="$2" -timeout=10 -rss_limit_mb=2048 -max_len="${4:-256}" \
    -artifact_prefix="$build/artifacts/" -print_final_stats=1 > "$build/fuzz-$1.log" 2>&1
}
# The planner's target on one core, the two others one after the other on
# the second: the run takes the longer side's time, not the sum.
third=$(( (seconds + 2) / 3 ))
run fuzz_desc_plan $(( seconds - third )) "$root/fuzz/corpus" &
desc_plan=$!
# a database is a few KiB; the shipped one's seeds must fit whole
( run fuzz_cli "$third" "$root/fuzz/corpus_cli" && \
  run fuzz_tuning "$third" "$root/fuzz/corpus_tuning" 16384 ) &
others=$!
wait "$desc_plan" || status=$?
wait "$others" || status=$?
logs="$build/fuzz-fuzz_desc_plan.log $build/fuzz-fuzz_cli.log $build/fuzz-fuzz_tuning.log"
if [ "$status" -ne 0 ]; then
  # shellcheck disable=SC2086
  cat $logs 2>/dev/null
else
  # shellcheck disable=SC2086
  tail -n 25 $logs
fi

found=$(find "$build/artifacts" -type f | head -n 1)
if [ "$status" -ne 0 ] || [ -n "$found" ]; then
  echo "fuzz: FAILED (exit status $status); inputs in $build/artifacts:" >&2
  ls -l "$build/artifacts" >&2
  exit 1
fi
echo "fuzz: nothing found"
