#!/usr/bin/env bash
# The whole test-suite: installs what is missing, builds, runs every test
# with ctest (the unit suites against the float64 reference, the tools'
# tests, the kernels' lint, Oclgrind, the vendor check, the ring under
# mpirun), the Python package's tests (python-test.sh), then the tests not
# labelled "plain" or "mpi" again under AddressSanitizer and
# UndefinedBehaviorSanitizer
# and the thread tests under ThreadSanitizer (sanitize.sh), then the fuzzer
# for a bounded time. The plain run goes first: it fills PoCL's kernel
# cache, which the sanitized processes then read (PoCL compiling inside a
# sanitized process took 2-3x as long: tests/test_half 676 s cold against
# 198-354 s plain).
#
# One random seed for both runs (the caller's FLASHCL_TEST_SEED, else one
# drawn here): the tests draw their shapes, and so the kernel variants they
# build, from it, so the sanitized run meets the programs the plain run
# compiled (with a seed of its own it compiled about as many again).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLASHCL_TEST_SEED="${FLASHCL_TEST_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}"
echo "test: FLASHCL_TEST_SEED=$FLASHCL_TEST_SEED reproduces this run"
./scripts/setup.sh clang libclang-rt-14-dev oclgrind python3-venv
(cd build && ctest --output-on-failure -j "$(nproc)")
./scripts/python-test.sh
./scripts/sanitize.sh
./scripts/fuzz.sh "${FLASHCL_FUZZ_SECONDS:-60}"
