#!/usr/bin/env bash
# The driver's own code of each kernel a run built, offline: reads a
# FLASHCL_BUILD_PTX file (records "== file options", then the PTX NVIDIA's
# OpenCL compiler wrote), assembles each record's PTX with ptxas for the
# target it names, and prints per record its file, its options, each
# kernel's registers and spills, and with nvdisasm the instruction mix of
# its longest loop (scripts/sass-mix.py: the key loop of a flash kernel)
# and the loop's global loads whose registers are read right away.
# The driver's ptxas may allot registers a little differently from this
# one; the instructions are the driver compiler's, not clang's NVPTX
# proxy's (scripts/ptxas-check.sh).
# Usage: scripts/driver-ptx.sh FILE [FILTER]
#   FILTER: only the records whose header contains it (e.g. a KV form's
#   -DFCL_KV_DTYPE=1). CAPS="144 128": also each kernel's registers and
#   spills under those caps (-maxrregcount, the entries' required
#   work-group size dropped, as MMA_REG_CAP drops it: cl/mma.cl), which
#   says what a cap would cost before a device times it. Needs ptxas (PATH, PTXAS, or /usr/local/cuda/bin);
#   nvdisasm (PATH or NVDISASM) for the mix, which is left out without it
#   (PyPI's nvidia-cuda-nvdisasm wheel holds one: `pip download --no-deps
#   nvidia-cuda-nvdisasm`, unzip, nvidia/cu*/bin/nvdisasm).
#   Exits 77 (skipped) without ptxas.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
file="${1:?usage: driver-ptx.sh FILE [FILTER]}"
filter="${2:-}"
ptxas="${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}"
nvdisasm="${NVDISASM:-$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)}"
[ -x "$ptxas" ] || { echo "driver-ptx: no ptxas (skipped)"; exit 77; }
[ -r "$file" ] || { echo "driver-ptx: cannot read $file" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# one file per record: r.N.head (the header line) and r.N.ptx
awk -v dir="$tmp" '
  /^== / { n++; print > (dir "/r." n ".head"); close(dir "/r." n ".head"); next }
  n { print > (dir "/r." n ".ptx") }' "$file"
records=0 failures=0
for head in "$tmp"/r.*.head; do
  [ -e "$head" ] || break
  header="$(cat "$head")"
  [ -z "$filter" ] || [[ "$header" == *"$filter"* ]] || continue
  records=$((records + 1))
  ptx="${head%.head}.ptx"
  echo "$header"
  target="$(grep -m1 -o '^\.target sm_[0-9]*a\?' "$ptx" 2> /dev/null | sed 's/^\.target //')" || true
  if [ -z "$target" ]; then
    echo "  no .target line: not PTX (another vendor's binary?)"
    failures=$((failures + 1))
    continue
  fi
  if ! "$ptxas" -arch="$target" -v "$ptx" -o "$tmp/k.cubin" > "$tmp/log" 2>&1; then
    echo "  ptxas failed:"
    sed 's/^/    /' "$tmp/log"
    failures=$((failures + 1))
    continue
  fi
  # per kernel: "Compiling entry function 'NAME'" then its properties
  properties() {
    awk -v at="$1" '/Compiling entry function/ { match($0, /\047[^\047]*\047/); name = substr($0, RSTART + 1, RLENGTH - 2) }
       /bytes spill stores/ { spill = $5 " B spilled" }
       /Used [0-9]* registers/ { match($0, /Used [0-9]* registers/)
                                 print "  " name at ": " substr($0, RSTART + 5, RLENGTH - 5) ", " spill }' "$2"
  }
  properties "" "$tmp/log"
  for cap in ${CAPS:-}; do
    sed 's/^[[:space:]]*\.reqntid.*$//' "$ptx" > "$tmp/capped.ptx"
    if "$ptxas" -arch="$target" -v -maxrregcount="$cap" "$tmp/capped.ptx" -o /dev/null \
      > "$tmp/capped.log" 2>&1; then
      properties " (cap $cap)" "$tmp/capped.log"
    else
      echo "  ptxas failed at cap $cap"
      failures=$((failures + 1))
    fi
  done
  if [ -x "$nvdisasm" ]; then
    "$nvdisasm" -c "$tmp/k.cubin" | python3 "$here/sass-mix.py" | sed 's/^/  /'
  fi
done
echo "driver-ptx: $records records, $failures failed"
[ "$failures" -eq 0 ] && [ "$records" -gt 0 ]
