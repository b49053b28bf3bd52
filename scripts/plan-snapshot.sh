#!/usr/bin/env bash
# Prints every plan and program the planner makes over a grid of problems,
# on every profile (and, with --devices, this machine's OpenCL devices), so
# that a refactor can show it changed none: run it before and after and
# diff the two outputs.
#
# Usage: scripts/plan-snapshot.sh [--devices] [flashcl-info]   > snapshot.txt
# The grid: head_dim buckets 32..256; f32, f16, bf16; causal or not; one
# prefill shape, a long prefill, a GQA prefill, decode rows 1, 4 and 16
# over a long cache, small batches; each kernel family forced and the
# planner's own choice.
set -euo pipefail
devices=0
if [ "${1:-}" = "--devices" ]; then devices=1; shift; fi
case "${1:-}" in -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
info="${1:-$(dirname "$0")/../build/tools/flashcl-info}"

shapes=(
  "--batch 1 --heads 16 --seqlen 2048"
  "--batch 4 --heads 32 --heads-kv 8 --seqlen 512 --seqlen-k 4096"
  "--batch 1 --heads 8 --seqlen 8192"
  "--batch 8 --heads 32 --heads-kv 8 --seqlen 1 --seqlen-k 8192"
  "--batch 1 --heads 32 --heads-kv 8 --seqlen 4 --seqlen-k 32768"
  "--batch 2 --heads 64 --heads-kv 4 --seqlen 16 --seqlen-k 4096"
)
where=(--profile all)
for d in 32 64 80 96 128 160 192 224 256; do
  for t in f32 f16 bf16; do
    for c in "" --causal; do
      for s in "${shapes[@]}"; do
        for k in auto simt mma decode decode-mma cpu; do
          # shellcheck disable=SC2086
          args=(--head-dim "$d" --dtype "$t" $c $s --kernel "$k" --programs)
          echo "## ${args[*]}"
          "$info" "${where[@]}" "${args[@]}" 2>&1 || true
          if ((devices)); then "$info" "${args[@]}" 2>&1 || true; fi
        done
      done
    done
  done
done
