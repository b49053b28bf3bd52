#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs flashcl-bench on
# the default device (the first GPU, else the first device: PoCL on a
# CPU-only machine). Arguments go to flashcl-bench (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec ./build/tools/flashcl-bench "$@"
