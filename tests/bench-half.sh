#!/usr/bin/env bash
# flashcl-bench in f16 and bf16 storage with --check and --count-io, on a
# small shape: every flash result runs, is checked (an error ratio, against
# the naive algorithm or its host emulation) and counts the model's bytes;
# the naive algorithm runs bf16 (its f32 path) and, on a device without
# cl_khr_fp16, reports f16 as unsupported with that reason.
# Usage: tests/bench-half.sh path/to/flashcl-bench
set -euo pipefail
# shellcheck source=tests/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

for dtype in f16 bf16; do
  for pass in fwd fwdbwd; do
    json="$tmp/$dtype-$pass.json"
    rc=0
    "$bench" "${device[@]}" --dtype "$dtype" --pass "$pass" --batch 2 --heads 4 --heads-kv 2 --seqlen 70 \
      --seqlen-k 90 --head-dim 40 --causal both --check --count-io --no-peaks --quiet \
      --json "$json" > "$tmp/out.txt" || rc=$?
    cat "$tmp/out.txt"
    fp16="$(grep -o '"fp16": [a-z]*' "$json" | head -1 | sed 's/.*: //')"
    # Exit status 3: only unsupported runs (naive f16 without cl_khr_fp16) failed.
    want_rc=0
    [ "$dtype" = f16 ] && [ "$fp16" = false ] && want_rc=3
    [ "$rc" -eq "$want_rc" ] || fail "$dtype $pass: exit status $rc, want $want_rc"
    results=0
    while IFS= read -r line; do
      results=$((results + 1))
      algo="$(field algo "$line")" status="$(field status "$line")"
      what="$dtype $pass $algo causal=$(field causal "$line")"
      if [ "$algo" = '"naive"' ] && [ "$dtype" = f16 ] && [ "$fp16" = false ]; then
        [ "$status" = '"FCL_ERROR_UNSUPPORTED"' ] || fail "$what: status $status"
        grep -q 'cl_khr_fp16' <<<"$line" || fail "$what: the message does not name cl_khr_fp16"
        continue
      fi
      [ "$status" = '"ok"' ] || { fail "$what: status $status"; continue; }
      [ "$(field bytes_counted "$line")" = "$(field bytes_model "$line")" ] ||
        fail "$what: counted $(field bytes_counted "$line") bytes, model $(field bytes_model "$line")"
      [ "$(field err_ratio "$line")" != null ] || fail "$what: no error ratio"
    done < <(grep '"algo": ' "$json")
    [ "$results" -eq 4 ] || fail "$dtype $pass: $results results, want 4"
  done
done
echo "bench-half: $failures failures"
[ "$failures" -eq 0 ]
