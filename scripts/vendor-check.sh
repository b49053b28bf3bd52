#!/usr/bin/env bash
# The planned kernels of every vendor profile, compiled by that vendor's own
# compiler: for each profile of the library (flashcl-info --profile list),
# the planner's programs over the shapes below (flashcl-info --programs: the
# exact files and options the library would build), each built once per
# target by scripts/vendor-compile.sh, and one table of what the compilers
# made of them. A spill means the planner chose wrong for that device: the
# fix goes into the planner or the kernel, never into this check.
#
# Usage: scripts/vendor-check.sh [--quick] [--jobs N] [INFO]
#   INFO     flashcl-info (default build/tools/flashcl-info)
#   --quick  head_dim 64 and 128 in f32 and f16 only, without a mask
#   --jobs   compiles at once (default: the number of cores)
#
# Shapes: the standard sweep's form (16 heads, N 2048), head_dim 32, 64, 96,
# 128, 192 and 256, f32, f16 and bf16, with and without the causal mask,
# forward and backward; the same at head_dim 64 and 128 (f32, f16) with the
# row sums the profile does not use (flashcl-info --shuffle: AMD's through
# local memory, Intel's by sub-group shuffles), reported with the profile's
# key + "+shuffle-S" and never failing; and a decode shape per type (Hq/Hkv 32/8, d 128,
# one query row against 32k keys: the split, packed forward and its merge,
# in the planner's kernel and in the decode kernel). Results are cached by a hash of the program's text,
# its options, the target and the compilers' versions, in
# $FLASHCL_VENDOR_CACHE (default build/vendor-cache), so that a rerun only
# compiles what changed; FCL_INTEL_OPTIONS (vendor-compile.sh's experiment
# knob) is part of the key.
#
# Fails (exit 1) on a compile error, on local memory over the profile's
# limit or different from the plan's, and on any spill in a planned kernel;
# scratch memory without a spill (private arrays the compiler keeps in
# memory) and occupancy under 2 waves per SIMD on AMD are warnings.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 jobs="$(nproc)" info=build/tools/flashcl-info
while (($#)); do
  case "$1" in
    --help | -h) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    --quick) quick=1 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift ;;
    -*) echo "vendor-check: unknown option '$1'" >&2; exit 2 ;;
    *) info="$1" ;;
  esac
  shift
done
[ -x "$info" ] || { echo "vendor-check: no flashcl-info at $info (build first)" >&2; exit 2; }

scripts/vendor-tools.sh > /dev/null
cache="${FLASHCL_VENDOR_CACHE:-build/vendor-cache}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
tools="${FLASHCL_VENDOR_TOOLS:-build/vendor-tools}"
versions="$(cat "$tools/intel/PACKAGES" 2> /dev/null; clang-15 --version | head -1)"

dims=(32 64 96 128 192 256) dtypes=(f32 f16 bf16) masks=("" --causal)
((quick)) && dims=(64 128) dtypes=(f32 f16) masks=("")

# 1. The programs: profile, target, pass, file, prelude, kernels, plan's
#    local bytes, options; each (target, file, options) once.
"$info" --profile list | while IFS=$'\t' read -r key compiler _; do
  target="${compiler##*-device }"
  target="${target##*-mcpu=}"
  limit="$("$info" --profile "$key" --head-dim 64 | sed -n 's/.*local memory \([0-9]*\) B.*/\1/p' | head -1)"
  for d in "${dims[@]}"; do for t in "${dtypes[@]}"; do for m in "${masks[@]}"; do
    "$info" --profile "$key" --head-dim "$d" --dtype "$t" --heads 16 --seqlen 2048 ${m:+"$m"} --programs |
      { grep '^program' || true; } | sed "s/^program/$key\t$target\t$limit/"
  done; done; done
  # decode: one row of 32 query heads on 8 KV heads against 32k keys, the
  # forward split and packed, and the merge of its splits
  # (the planner's kernel there, and the decode kernel forced: NVIDIA's
  # default, with its dot products summed through local memory elsewhere)
  # the other row sums, not planned for this device (head_dim 64 and 128,
  # f32 and f16; the profile's key gets "+shuffle S"): AMD's through local
  # memory, as a driver without shuffles would have them, and Intel's by
  # its shuffles, which the library does not choose
  other=none
  [ "${key%%-*}" = arc ] || [ "${key%%-*}" = max ] && other=intel
  for d in 64 128; do for t in f32 f16; do
    "$info" --profile "$key" --head-dim "$d" --dtype "$t" --heads 16 --seqlen 2048 \
      --shuffle "$other" --programs | { grep '^program' || true; } |
      sed "s/^program/$key+shuffle-$other\t$target\t$limit/"
  done; done
  for t in "${dtypes[@]}"; do for k in auto decode; do
    "$info" --profile "$key" --head-dim 128 --dtype "$t" --heads 32 --heads-kv 8 --seqlen 1 \
      --seqlen-k 32768 --causal --kernel "$k" --programs |
      { grep '^program' || true; } | sed "s/^program/$key\t$target\t$limit/"
  done; done
done | sort -u -t$'\t' -k2,2 -k5,5 -k10 > "$work/programs"

# 2. Compile each new one (cache miss) in parallel; each prints its
#    program line and its cache file (*.failed where the compile failed).
compile_one() {
  local target file prelude options
  IFS=$'\t' read -r _ target _ _ file prelude _ _ _ options <<< "$1"
  local text
  text="$(mktemp -p "$work" XXXXXX.cl)"
  "$info" --program-text "$file" > "$text"
  local hash
  hash="$( (cat "$text"; echo "$target $options ${FCL_INTEL_OPTIONS:-}"; echo "$versions") |
    sha256sum | cut -c1-32)"
  local out="$cache/$hash"
  if [ ! -s "$out" ]; then
    # shellcheck disable=SC2086 # options are words
    if scripts/vendor-compile.sh "$target" "$text" $options > "$out.tmp" 2> "$out.log"; then
      mv "$out.tmp" "$out"
    else
      rm -f "$out.tmp"
      out="$out.failed"
    fi
  fi
  rm -f "$text"
  printf '%s\t%s\n' "$1" "$out"
}
export -f compile_one
export work cache versions info
n="$(wc -l < "$work/programs")"
echo "vendor-check: $n programs over $(cut -f1 "$work/programs" | sed "s/+.*//" | sort -u | wc -l) profiles, $jobs at a time" >&2
start=$(date +%s)
tr '\n' '\0' < "$work/programs" | xargs -0 -P "$jobs" -I{} bash -c 'compile_one "$@"' _ {} |
  sort > "$work/results"
echo "vendor-check: compiled in $(( $(date +%s) - start )) s" >&2

# 3. The table, and the verdict.
failures=0 warnings=0
printf 'profile\ttarget\tpass\tkernel\tsimd\tregs\tagprs\tsgprs\tspill\tscratch\tlocal\tplan_local\toccupancy\tverdict\toptions\n'
while IFS=$'\t' read -r key target limit pass file prelude _ local _ options result; do
  if [ "${result%.failed}" != "$result" ]; then
    printf '%s\t%s\t%s\t%s\tcompile error (%s.log)\n' "$key" "$target" "$pass" "$file" \
      "${result%.failed}"
    failures=$((failures + 1))
    continue
  fi
  while IFS=$'\t' read -r _ kernel simd regs agprs sgprs spill scratch lds occ; do
    verdict=ok
    # a spill into other registers (AMD's SGPRs into VGPR lanes) moves no memory
    [ "$spill" != 0 ] && [ "$scratch" != 0 ] && verdict=SPILL
    if [ "$local" != 0 ] && [ "$lds" != "$local" ]; then verdict="$verdict,LOCAL!=PLAN"; fi
    if [ "$lds" -gt "$limit" ]; then verdict="$verdict,LOCAL>LIMIT"; fi
    if [ "$verdict" != ok ] && [ "${key%+shuffle-*}" != "$key" ]; then
      verdict="not planned: ${verdict#ok,}"  # a variant the library does not build here
      warnings=$((warnings + 1))
    elif [ "$verdict" != ok ]; then
      verdict="${verdict#ok,}"
      failures=$((failures + 1))
    fi
    if [ "$verdict" = ok ] && [ "$spill" != 0 ]; then
      verdict="ok (spilled into registers)"
      warnings=$((warnings + 1))
    elif [ "$verdict" = ok ] && [ "$scratch" != 0 ]; then
      verdict="ok (scratch: private arrays in memory)"
      warnings=$((warnings + 1))
    elif [ "$verdict" = ok ] && [ "$occ" != - ] && [ "$occ" -lt 2 ]; then
      verdict="ok (occupancy $occ)"
      warnings=$((warnings + 1))
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$key" "$target" \
      "$pass" "$kernel" "$simd" "$regs" "$agprs" "$sgprs" "$spill" "$scratch" "$lds" "$local" \
      "$occ" "$verdict" "$options"
  done < "$result"
done < "$work/results"
echo "vendor-check: $n programs, $failures failing kernels, $warnings warnings" >&2
[ "$failures" -eq 0 ]
