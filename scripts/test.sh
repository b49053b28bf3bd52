#!/usr/bin/env bash
# The whole test-suite: installs what is missing, builds, runs the unit
# tests with ctest (which also lints every kernel variant with clang).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh clang
(cd build && ctest --output-on-failure -j "$(nproc)")
