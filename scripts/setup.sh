#!/usr/bin/env bash
# Installs what flashcl needs on Debian 12 (only the packages that are
# missing), then configures and builds it into build/. Safe to run again.
# Arguments name further packages to install (the test-suite's tools).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake make gcc pkg-config    # build
  ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd clinfo  # OpenCL, and a CPU device
  libclblast-dev               # GEMMs of the naive baseline
  check                        # unit tests
  libopenmpi-dev openmpi-bin   # ring attention over MPI (flashcl_mpi) and its tests
  "$@"
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "flashcl: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
