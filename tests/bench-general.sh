#!/usr/bin/env bash
# flashcl-bench on the general problem: windows, softcap, ALiBi, a ragged
# batch (empty sequences included) and the strided layouts (one of them
# of a quantized cache, whose strides count bytes), each with
# --check and --count-io through both passes. Every result must run, be
# checked against the same run's reference (an error ratio under 8: a wrong
# mask or transform is off by orders of magnitude), count the model's bytes,
# and echo the problem in its JSON fields.
# Usage: tests/bench-general.sh path/to/flashcl-bench
set -euo pipefail
# shellcheck source=tests/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

shape=(--heads 4 --heads-kv 2 --head-dim 40 --pass fwdbwd --check --count-io --no-peaks --quiet)
# name | options | a JSON field and the value it must show
cases=(
  "window|--batch 2 --seqlen 90 --window 17,5|\"window_left\": 17"
  "causal-window|--batch 1 --seqlen 80 --seqlen-k 120 --causal --window 30,4|\"window_right\": 0"
  "softcap|--batch 1 --seqlen 70 --softcap 2.5|\"softcap\": 2.5"
  "alibi|--batch 2 --seqlen 64 --causal --alibi|\"alibi\": true"
  "ragged|--varlen 33,0,91,1 --causal --window 20,-1|\"seqlens_q\": [33, 0, 91, 1]"
  "ragged-keys|--varlen 40,7 --seqlen-k 75 --softcap 4|\"seqlens_k\": [75, 75]"
  "bhsd|--batch 2 --seqlen 50 --seqlen-k 66 --layout bhsd --alibi|\"layout\": \"bhsd\""
  "qkv|--varlen 24,57 --layout qkv --causal|\"layout\": \"qkv\""
  "bhsd-int8|--batch 2 --seqlen 1 --seqlen-k 70 --head-dim 64 --layout bhsd --kv-dtype int8 --pass fwd|\"layout\": \"bhsd\""
)
for c in "${cases[@]}"; do
  IFS='|' read -r name opts want <<<"$c"
  json="$tmp/$name.json"
  rc=0
  # shellcheck disable=SC2086  # opts is a list of words
  "$bench" "${device[@]}" "${shape[@]}" $opts --json "$json" > "$tmp/out.txt" 2>&1 || rc=$?
  cat "$tmp/out.txt"
  [ "$rc" -eq 0 ] || { fail "$name: exit status $rc"; continue; }
  results=0
  while IFS= read -r line; do
    results=$((results + 1))
    what="$name $(field algo "$line")"
    grep -qF -- "$want" <<<"$line" || fail "$what: no '$want' in the result"
    [ "$(field status "$line")" = '"ok"' ] || { fail "$what: status $(field status "$line")"; continue; }
    [ "$(field bytes_counted "$line")" = "$(field bytes_model "$line")" ] ||
      fail "$what: counted $(field bytes_counted "$line") bytes, model $(field bytes_model "$line")"
    ratio="$(field err_ratio "$line")"
    if [ "$ratio" = null ]; then
      fail "$what: no error ratio"
    elif ! awk -v r="$ratio" 'BEGIN { exit !(r < 8) }'; then
      fail "$what: error ratio $ratio"
    fi
  done < <(grep '"algo": ' "$json")
  [ "$results" -eq 2 ] || fail "$name: $results results, want 2"
done
echo "bench-general: $failures failures"
[ "$failures" -eq 0 ]
