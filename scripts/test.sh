#!/usr/bin/env bash
# The whole test-suite: installs what is missing, builds, runs the unit
# tests with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
(cd build && ctest --output-on-failure -j "$(nproc)")
