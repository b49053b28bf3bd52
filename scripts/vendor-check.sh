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
# Usage: scripts/vendor-check.sh [--grid G[,G]...] [--profile KEY]... [--quick] [--jobs N]
#                               [--verdicts FILE | --no-verdicts] [--update-verdicts]
#                               [--max-compiles N] [--recheck N] [INFO]
#   INFO     flashcl-info (default build/tools/flashcl-info)
#   --profile  only this profile (flashcl-info --profile list; repeatable)
#   --grid   sweep (default): the standard sweep's form (16 heads, N 2048)
#            at head_dim 32-256, each type, causal or not, and a decode
#            (Hq/Hkv 32/8, 1 row, 32k keys; the decode kernel forced too);
#            or a grid of flashcl-info --grid: ci (each decision boundary,
#            one program per tiling; ~1,600 programs, 15-20 min cold on 2
#            cores), cover (the full grid, one program per tiling; ~1,500,
#            19-39 min cold on 2 busy cores, 15 of CPU)
#            or full (every distinct program of the full grid, ~35,000:
#            hours cold). Several, comma-separated, check the union of
#            their programs: ctest runs sweep,cover against the committed
#            verdicts (below)
#   --quick  the programs of head_dim 64 and 128 in f32 and f16
#   --jobs   compiles at once (default: the number of cores)
#   --verdicts FILE  the committed verdicts (default tests/vendor-verdicts.tsv):
#            the compilers' figures per program key (below); a program
#            whose key is in the file is not compiled, its figures are the
#            file's. --no-verdicts: compile whatever the cache lacks
#   --update-verdicts  after the check, rewrite the verdicts file with the
#            figures of every program of this run (and of these alone: keys
#            no longer planned go); only what the cache and the file lack is
#            compiled. Written even when the check fails (the file records,
#            the check judges); not with --profile or --quick, which would
#            drop the other programs. After a kernel, planner or compiler
#            change: scripts/vendor-check.sh --grid sweep,cover --update-verdicts
#   --max-compiles N  fail at once, compiling nothing, when more than N
#            programs have neither a verdict nor a cached result (ctest: 200,
#            about 3 minutes on 2 cores), so that stale verdicts fail CI
#            with the command that refreshes them instead of running past
#            its time
#   --recheck N  compile N programs picked at random among those the file
#            gave, and fail where a figure differs from the file's (ctest:
#            10): a sample of the file against the compilers at hand
#
# What is verified without compiling: a program's key is a hash of its whole
# text, its options, the target and the compilers' versions (ocloc's Debian
# packages, clang-15's version line), and a compile is deterministic in
# those, so a verdict of the same key is that compile's result; a changed
# kernel, option or compiler version changes the key, and that program (all
# of them, for a compiler) compiles again. The table and the verdict cover
# every program of the grid, whether compiled, cached or from the file; the
# file was made on another machine by the same compilers, so a fresh clone
# checks the whole grid while compiling only the programs its tree changed.
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
verdicts=tests/vendor-verdicts.tsv trust=1 update=0 recheck=0 max_compiles=
while (($#)); do
  case "$1" in
    --grid) grid="${2:?--grid needs sweep, ci, cover or full}"; shift ;;
    --help | -h) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    --profile) profiles="$profiles ${2:?--profile needs a key}"; shift ;;
    --quick) quick=1 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift ;;
    --verdicts) verdicts="${2:?--verdicts needs a file}"; shift ;;
    --no-verdicts) trust=0 ;;
    --update-verdicts) update=1 ;;
    --max-compiles) max_compiles="${2:?--max-compiles needs a number}"; shift ;;
    --recheck) recheck="${2:?--recheck needs a number}"; shift ;;
    -*) echo "vendor-check: unknown option '$1'" >&2; exit 2 ;;
    *) info="$1" ;;
  esac
  shift
done
[ -x "$info" ] || { echo "vendor-check: no flashcl-info at $info (build first)" >&2; exit 2; }
for g in ${grid//,/ }; do
  case "$g" in
    sweep | ci | cover | full) ;;
    *) echo "vendor-check: unknown grid '$g' (sweep, ci, cover or full)" >&2; exit 2 ;;
  esac
done
if ! [[ "$max_compiles" =~ ^[0-9]*$ && "$recheck" =~ ^[0-9]+$ ]]; then
  echo "vendor-check: --max-compiles and --recheck need a number" >&2
  exit 2
fi
if ((update)) && { [ -n "$profiles" ] || ((quick)); }; then
  echo "vendor-check: --update-verdicts writes the whole grid's verdicts: not with --profile or --quick" >&2
  exit 2
fi

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
  for g in ${grid//,/ }; do
    if [ "$g" = sweep ]; then
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
      "$info" --profile "$key" --grid "$g" 2> /dev/null
    fi
  done | if ((quick)); then grep -E 'HEAD_DIM_MAX=(64|128) ' | grep -E 'FCL_DTYPE=(0|1) '; else cat; fi |
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

# 2. Each program's key: a hash of its text (once per file), its options,
#    the target and the compilers' versions. Its result comes from the
#    cache, else from the verdicts, else from a compile.
mkdir -p "$work/text" "$work/verdicts"
cut -f5 "$work/programs" | sort -u | while read -r file; do
  "$info" --program-text "$file" > "$work/text/$file"
done
while IFS=$'\t' read -r _ target _ _ file _ _ _ _ options _; do
  (cat "$work/text/$file"; echo "$target $options ${FCL_INTEL_OPTIONS:-}"; echo "$versions") |
    sha256sum | cut -c1-32
done < "$work/programs" > "$work/keys"
paste "$work/programs" "$work/keys" > "$work/keyed"
compilers="$(echo "$versions" | tr '\n' ' ' | sed 's/ *$//')"
refresh="scripts/vendor-check.sh --grid $grid --update-verdicts"
[ "$verdicts" = tests/vendor-verdicts.tsv ] || refresh="$refresh --verdicts $verdicts"
if ((trust)) && [ -r "$verdicts" ]; then
  # one file per key, as the cache has
  awk -F'\t' -v dir="$work/verdicts" '/^#/ || NF < 2 { next }
    { f = dir "/" $1; sub(/^[^\t]*\t/, ""); print >> f; close(f) }' "$verdicts"
  if ! grep -qxF "# compilers: $compilers" "$verdicts"; then
    echo "vendor-check: $verdicts is of other compilers than these ($compilers): none of its verdicts applies" >&2
  fi
fi
: > "$work/results"
: > "$work/todo"
from_cache=0 from_verdicts=0
while IFS= read -r line; do
  key="${line##*$'\t'}"
  if [ -s "$cache/$key" ]; then
    printf '%s\t%s\n' "${line%$'\t'*}" "$cache/$key" >> "$work/results"
    from_cache=$((from_cache + 1))
  elif [ -s "$work/verdicts/$key" ]; then
    printf '%s\n' "$line" >> "$work/trusted"
    from_verdicts=$((from_verdicts + 1))
  else
    printf '%s\n' "$line" >> "$work/todo"
  fi
done < "$work/keyed"
# --recheck: a random few of the trusted compile all the same, to be compared
touch "$work/trusted"
shuf -n "$recheck" "$work/trusted" > "$work/recheck"
{ grep -vxFf "$work/recheck" "$work/trusted" || true; } |
  awk -F'\t' -v OFS='\t' -v dir="$work/verdicts/" '{ $NF = dir $NF; print }' >> "$work/results"
n="$(wc -l < "$work/programs")"
todo="$(wc -l < "$work/todo")"
echo "vendor-check: $n programs over $(cut -f1 "$work/programs" | sed "s/+.*//" | sort -u | wc -l) profiles: $from_verdicts from $( ((trust)) && echo "$verdicts" || echo "no verdicts"), $from_cache cached, $todo to compile, $jobs at a time" >&2
if [ -n "$max_compiles" ] && [ "$todo" -gt "$max_compiles" ]; then
  echo "vendor-check: $todo programs have no verdict nor cached result, more than --max-compiles $max_compiles:" \
    "the kernels, the planner or the compilers changed since $verdicts was written; refresh it" \
    "($refresh) and commit it" >&2
  exit 1
fi

# Compile a program (its line, its key last) into the cache; print its line
# and its cache file (*.failed where the compile failed).
compile_one() {
  local target file options key out
  IFS=$'\t' read -r _ target _ _ file _ _ _ _ options _ <<< "$1"
  key="${1##*$'\t'}"
  out="$cache/$key"
  # shellcheck disable=SC2086 # options are words
  if scripts/vendor-compile.sh "$target" "$work/text/$file" $options > "$out.tmp" 2> "$out.log"; then
    mv "$out.tmp" "$out"
  else
    rm -f "$out.tmp"
    out="$out.failed"
  fi
  printf '%s\t%s\n' "${1%$'\t'*}" "$out"
}
export -f compile_one
export work cache
start=$(date +%s)
cat "$work/todo" "$work/recheck" | tr '\n' '\0' | xargs -0 -r -P "$jobs" -I{} bash -c 'compile_one "$@"' _ {} >> "$work/results"
sort -o "$work/results" "$work/results"
echo "vendor-check: compiled $((todo + $(wc -l < "$work/recheck"))) in $(( $(date +%s) - start )) s" >&2
# a verdict that differs from its program's compile here fails the check:
# the file was not written by these compilers from this text
rechecked=0 differing=0
while IFS= read -r line; do
  key="${line##*$'\t'}"
  [ -s "$cache/$key" ] || continue  # a failed compile is in the table
  rechecked=$((rechecked + 1))
  if [ "$(sort "$cache/$key")" != "$(sort "$work/verdicts/$key")" ]; then
    echo "vendor-check: the verdict of $key differs from its compile here ($cache/$key)" >&2
    differing=$((differing + 1))
  fi
done < "$work/recheck"
((rechecked == 0)) ||
  echo "vendor-check: $rechecked verdicts compiled again, $differing differing from the file" >&2

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
if ((update)); then
  # every program's kernels, under its key (its result file's name), sorted;
  # a failed compile has no verdict (it fails each run until fixed)
  # shellcheck disable=SC2016 # awk's own variables, in single quotes
  {
    cat << EOF
# The vendor compilers' figures for the planned programs, which
# scripts/vendor-check.sh trusts for an unchanged program: one line per kernel,
# the program's key (a hash of its text, options, target and the compilers'
# versions), then scripts/vendor-compile.sh's line. After a kernel, planner or
# compiler change, refresh it (compiles only what changed) and commit it:
#   scripts/vendor-check.sh --grid $grid --update-verdicts
# compilers: $compilers
# key	target	kernel	simd	regs	agprs	sgprs	spill_bytes	scratch_bytes	local_bytes	occupancy
EOF
    awk -F'\t' '$NF !~ /\.failed$/ { print $NF }' "$work/results" | sort -u |
      xargs -r awk '{ k = FILENAME; sub(/.*\//, "", k); print k "\t" $0 }' | sort
  } > "$work/verdicts.tsv"
  mv "$work/verdicts.tsv" "$verdicts"
  echo "vendor-check: wrote $verdicts ($(grep -vc '^#' "$verdicts") kernels of $((n - $(grep -c '\.failed$' "$work/results" || true))) programs)" >&2
fi
if ((trust && todo && !update)); then
  echo "vendor-check: $todo programs had no verdict in $verdicts: refresh it" \
    "($refresh) and commit it" >&2
fi
[ "$failures" -eq 0 ] && [ "$differing" -eq 0 ]
