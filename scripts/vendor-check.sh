#!/usr/bin/env bash
# The planned kernels of every vendor profile, compiled by that vendor's own
# compiler: for each profile of the library (flashcl-info --profile list),
# the programs the planner builds over a grid of problems that spans its
# decisions (flashcl-info --grid: the exact files and options the library
# would build), each built once per target by scripts/vendor-compile.sh,
# and one table of what the compilers made of them. A spill means the
# planner chose wrong for that device: the fix goes into the planner or the
# kernel, never into this check.
#
# Usage: scripts/vendor-check.sh [--grid G] [--profile KEY]... [--quick] [--jobs N] [INFO]
#   INFO     flashcl-info (default build/tools/flashcl-info)
#   --profile  only this profile (flashcl-info --profile list; repeatable)
#   --grid   sweep (default, what ctest runs): the standard sweep's form
#            (16 heads, N 2048) at head_dim 32-256, each type, causal or
#            not, and a decode (Hq/Hkv 32/8, 1 row, 32k keys; the decode
#            kernel forced too); or a grid of flashcl-info --grid: ci (each
#            decision boundary, one program per tiling; ~1,600 programs,
#            15-20 min cold on 2 cores), cover (the full grid, one program
#            per tiling; ~2,300) or full (every distinct program of the full
#            grid, ~35,000: hours cold). The grids still find spills the
#            planner does not avoid (docs/design.md, "Every planned kernel,
#            compiled"), which is why ctest runs the sweep
#   --quick  the programs of head_dim 64 and 128 in f32 and f16
#   --jobs   compiles at once (default: the number of cores)
#
# The grid (flashcl-info --help, tools/info/grid.c): every head_dim bucket;
# batch x heads x length across the work-group and key-tile choices, with
# and without GQA; Nq x GQA group across packing and splitting (decode rows
# 1-16, packed-and-split forwards of 9-64 rows) over short and long caches;
# paged caches (tiles spanning pages); f32, f16 and bf16; no mask,
# causal, a sliding window (and in cover and full soft-capping and ALiBi);
# forward and backward. A program is the planner's file and options, and
# under ci and cover one per tiling: the options less the feature hooks
# (WINDOW, SOFTCAP, ALIBI, PACK_GQA, PAGED, SPLIT_KV, MERGE_LAST_SPLIT),
# the one with the most of them on. Besides, at head_dim 64 and 128 (f32,
# f16, 16 heads, N 2048), the row sums the profile does not use
# (flashcl-info --shuffle: AMD's through local memory, Intel's by sub-group
# shuffles), reported with the profile's key + "+shuffle-S" and never
# failing. Results are cached by a hash of the program's text, its options,
# the target and the compilers' versions, in $FLASHCL_VENDOR_CACHE (default
# build/vendor-cache), so that a rerun only compiles what changed;
# FCL_INTEL_OPTIONS (vendor-compile.sh's experiment knob) is part of the key.
#
# Fails (exit 1) on a compile error, on local memory over the profile's
# limit or different from the plan's, and on any spill in a planned kernel;
# scratch memory without a spill (private arrays the compiler keeps in
# memory) and occupancy under 2 waves per SIMD on AMD are warnings. The
# table's last column is the first problem of the grid that built the
# program.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 jobs="$(nproc)" info=build/tools/flashcl-info grid=sweep profiles=
while (($#)); do
  case "$1" in
    --grid) grid="${2:?--grid needs sweep, ci, cover or full}"; shift ;;
    --help | -h) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    --profile) profiles="$profiles ${2:?--profile needs a key}"; shift ;;
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

# 1. The programs: profile, target, pass, file, prelude, kernels, plan's
#    local bytes, work-group, options, problem; each (target, file,
#    options) once.
"$info" --profile list | while IFS=$'\t' read -r key compiler _; do
  [ -z "$profiles" ] || [[ " $profiles " == *" $key "* ]] || continue
  target="${compiler##*-device }"
  target="${target##*-mcpu=}"
  limit="$("$info" --profile "$key" --head-dim 64 | sed -n 's/.*local memory \([0-9]*\) B.*/\1/p' | head -1)"
  if [ "$grid" = sweep ]; then
    # the standard sweep's form (16 heads, N 2048) over head_dim 32-256,
    # each type, causal or not; and a decode (Hq/Hkv 32/8, one row against
    # 32k keys), the planner's kernel and the decode kernel forced
    for d in 32 64 96 128 192 256; do for t in f32 f16 bf16; do for m in "" --causal; do
      "$info" --profile "$key" --head-dim "$d" --dtype "$t" --heads 16 --seqlen 2048 ${m:+"$m"} \
        --programs | { grep '^program' || true; } | sed "s/\$/\tB1 H16 N2048 d$d $t${m:+ causal}/"
    done; done; done
    for t in f32 f16 bf16; do for k in auto decode; do
      "$info" --profile "$key" --head-dim 128 --dtype "$t" --heads 32 --heads-kv 8 --seqlen 1 \
        --seqlen-k 32768 --causal --kernel "$k" --programs | { grep '^program' || true; } |
        sed "s/\$/\tB1 H32\/8 N1\/32768 d128 $t causal kernel $k/"
    done; done
  else
    "$info" --profile "$key" --grid "$grid" 2> /dev/null
  fi | if ((quick)); then grep -E 'HEAD_DIM_MAX=(64|128) ' | grep -E 'FCL_DTYPE=(0|1) '; else cat; fi |
    sed "s/^program/$key\t$target\t$limit/"
  # the other row sums, not planned for this device (head_dim 64 and 128,
  # f32 and f16; the profile's key gets "+shuffle S"): AMD's through local
  # memory, as a driver without shuffles would have them, and Intel's by
  # its shuffles, which the library does not choose
  other=none
  [ "${key%%-*}" = arc ] || [ "${key%%-*}" = max ] && other=intel
  for d in 64 128; do for t in f32 f16; do
    "$info" --profile "$key" --head-dim "$d" --dtype "$t" --heads 16 --seqlen 2048 \
      --shuffle "$other" --programs | { grep '^program' || true; } |
      sed -e "s/^program/$key+shuffle-$other\t$target\t$limit/" -e "s/\$/\tB1 H16 N2048 d$d $t/"
  done; done
done | sort -u -t$'\t' -k2,2 -k5,5 -k10,10 > "$work/programs"

# 2. Compile each new one (cache miss) in parallel; each prints its
#    program line and its cache file (*.failed where the compile failed).
compile_one() {
  local target file prelude options
  IFS=$'\t' read -r _ target _ _ file prelude _ _ _ options _ <<< "$1"
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
printf 'profile\ttarget\tpass\tkernel\tsimd\tregs\tagprs\tsgprs\tspill\tscratch\tlocal\tplan_local\toccupancy\tverdict\toptions\tproblem\n'
while IFS=$'\t' read -r key target limit pass file _ _ local _ options problem result; do
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
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$key" "$target" \
      "$pass" "$kernel" "$simd" "$regs" "$agprs" "$sgprs" "$spill" "$scratch" "$lds" "$local" \
      "$occ" "$verdict" "$options" "$problem"
  done < "$result"
done < "$work/results" | tee "$work/table"
# the loop ran in a pipeline: its counts, again, from the table (which has
# no header line: every line is a kernel)
failures="$(awk -F'\t' '$14 !~ /^(ok|not planned)/' "$work/table" | wc -l)"
warnings="$(awk -F'\t' '($14 ~ /^ok \(/ || $14 ~ /^not planned/)' "$work/table" | wc -l)"
# per profile: kernels, those that spill to memory (and the most bytes),
# those with scratch, and on AMD the forwards at 2 waves per SIMD or more
awk -F'\t' '{
    k = $1; n[k]++
    if ($9 != 0 && $10 != 0) { s[k]++; if ($9 + 0 > w[k]) w[k] = $9 + 0 }
    if ($10 != 0) sc[k]++
    if ($13 != "-" && $4 ~ /^flash_fwd/) { f[k]++; if ($13 >= 2) o[k]++ }
  }
  END {
    for (k in n)
      printf "vendor-check: %-24s %5d kernels, %3d spill (worst %d B), %3d with scratch%s\n", k,
        n[k], s[k], w[k], sc[k],
        f[k] ? sprintf(", forwards at >= 2 waves/SIMD: %d of %d (%d%%)", o[k], f[k],
                       100 * o[k] / f[k]) : ""
  }' "$work/table" | sort >&2
echo "vendor-check: $n programs, $failures failing kernels, $warnings warnings" >&2
[ "$failures" -eq 0 ]
