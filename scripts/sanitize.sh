#!/bin/sh
# sanitize.sh — builds flashcl and its tests with AddressSanitizer (with
# LeakSanitizer) and UndefinedBehaviorSanitizer, and runs the ctest suite
# under them (all but the tests labelled "plain": the kernels' lint, Oclgrind
# and the vendor check, which run the kernels' own tools; and "mpi"), failing on the
# first report.
#
# Host code only: the OpenCL kernels are compiled by the driver at run
# time and are not instrumented. LeakSanitizer runs at the exit of every
# test process (Check forks one per test), so a leak fails that test; the
# only suppressions, in tests/lsan.supp, are for the OpenCL driver's own
# kernel compiler (see the file for why).
#
# A second build (<build-dir>-tsan) runs the thread tests and the soak
# under ThreadSanitizer, which cannot be combined with AddressSanitizer; set
# SANITIZE_TSAN=0 to skip it.
#
# Usage: scripts/sanitize.sh [build-dir]   (default: build-asan)
# Environment: CC (default clang if installed, else cc), JOBS (default:
# the number of CPUs), FLASHCL_TEST_DEVICE, FLASHCL_TEST_SEED as for ctest.
# Idempotent: reconfigures and rebuilds the directory incrementally.
# Exit status: 0 when everything builds and passes clean, else non-zero.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build-asan"}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if [ -z "${CC:-}" ]; then
  if command -v clang >/dev/null 2>&1; then CC=clang; else CC=cc; fi
fi

echo "sanitize: configuring $build with $CC, -fsanitize=address,undefined"
cmake -S "$root" -B "$build" \
  -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFLASHCL_SANITIZE=address,undefined \
  -DFLASHCL_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j "$jobs"

# The frame-pointer unwinder by default (tests/lsan.supp says why that is
# enough); SANITIZE_FULL_STACKS=1 unwinds every allocation from DWARF, for
# complete stacks in a report, at the price of a much slower kernel
# compiler in the driver.
unwind=""
if [ "${SANITIZE_FULL_STACKS:-0}" != 0 ]; then unwind=":fast_unwind_on_malloc=0"; fi
# use_sigaltstack=0: the OpenCL driver's LLVM installs its own alternate
# signal stack (malloc'd) in threads that first call it, which ASan would
# try to munmap as its own when the thread exits ("unable to unmap").
# intercept_tls_get_addr=0: with it, LeakSanitizer's stop-the-world tracer
# (clang 14's runtime, glibc 2.36) crashed at the exit of a test process in
# every sanitized run of tests/test_general here ("Tracer caught signal
# 11", pc ...72a; reruns crashed too), the dynamic TLS bookkeeping fixed in
# later runtimes (LLVM D147459); without it, 0 crashes in 44 processes.
# Leaks are still reported; dynamic TLS blocks (dlopen'd libraries'
# __thread data) are no longer scanned as roots, which could only add a
# report, never hide one.
ASAN_OPTIONS="use_sigaltstack=0:intercept_tls_get_addr=0:detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1$unwind"
LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS

echo "sanitize: running the tests"
status=0
log="$build/sanitize-ctest.log"
# The kernels' own checks (Oclgrind, the kernel lint, the vendor compilers)
# exercise no host code the other tests do not, and the plain ctest run
# has them: skipped here, where they were a third of CI's time. So are the
# ring's tests under mpirun (label "mpi"): they pass under ASan and UBSan,
# but LeakSanitizer reports Open MPI's own allocations (in its components,
# unloaded by MPI_Finalize, so that no suppression can name them).
(cd "$build" && ctest --output-on-failure -j "$jobs" -LE 'plain|mpi') \
  > "$log" 2>&1 || status=$?
cat "$log"
# LeakSanitizer's stop-the-world tracer itself sometimes dies at process
# exit ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal
# error"; google/sanitizers#1353): no leak was found or missed, the check
# did not run. When that is the only kind of failure, the failed tests run
# once more; a leak, a sanitizer report or a failed check fails at once.
if [ "$status" -ne 0 ] && grep -q "LeakSanitizer has encountered a fatal error" "$log" &&
    ! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|:F:" "$log"; then
  echo "sanitize: LeakSanitizer's tracer crashed (not a leak); running the failed tests again" >&2
  status=0
  (cd "$build" && ctest --output-on-failure --rerun-failed) || status=$?
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize: FAILED (ctest exit status $status)" >&2
  exit "$status"
fi
echo "sanitize: all tests clean under AddressSanitizer, LeakSanitizer and UBSan"

if [ "${SANITIZE_TSAN:-1}" != 0 ]; then
  tsan="$build-tsan"
  echo "sanitize: configuring $tsan with $CC, -fsanitize=thread"
  cmake -S "$root" -B "$tsan" \
    -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFLASHCL_SANITIZE=thread \
    -DFLASHCL_BUILD_TESTS=ON >/dev/null
  cmake --build "$tsan" -j "$jobs" --target test_threads soak
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
  export TSAN_OPTIONS
  # the thread suite, and the soak's decode steps from 4 threads on one context
  (cd "$tsan" && ctest --output-on-failure -R '^(threads|soak)$') || status=$?
  if [ "$status" -ne 0 ]; then
    echo "sanitize: FAILED under ThreadSanitizer (ctest exit status $status)" >&2
    exit "$status"
  fi
  echo "sanitize: the thread tests and the soak are clean under ThreadSanitizer"
fi
