#!/usr/bin/env bash
# flashcl-bench --tiling reaches the pass it times: a SIMT tiling of 8
# work-items per row with a key tile of 2, below the forward's minimum (the
# backward derives its tiles and ignores it), runs with --pass bwd, whose
# forward then makes O and LSE with the planner's tiling, and its plan is
# the one reported; with --pass fwdbwd the forward refuses it, naming the
# forward.
# Usage: tests/bench-tiling.sh path/to/flashcl-bench
set -euo pipefail
# shellcheck source=tests/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

for pass in bwd fwdbwd; do
  json="$tmp/$pass.json"
  rc=0
  "$bench" "${device[@]}" --algo flash --kernel simt --tiling 2,128,8,1 --pass "$pass" \
    --batch 1 --heads 2 --seqlen 80 --head-dim 64 --check --no-peaks --quiet \
    --json "$json" > "$tmp/out.txt" || rc=$?
  want_rc=0
  [ "$pass" = fwdbwd ] && want_rc=3  # the one run is unsupported
  [ "$rc" -eq "$want_rc" ] || fail "$pass: exit status $rc, want $want_rc"
  line="$(grep '"algo": ' "$json" | head -1)"
  status="$(field status "$line")"
  if [ "$pass" = bwd ]; then
    [ "$status" = '"ok"' ] || { fail "bwd: status $status"; continue; }
    [ "$(field threads_per_row "$line")" = 8 ] ||
      fail "bwd: plan threads_per_row $(field threads_per_row "$line"), want 8"
    [ "$(field err_ratio "$line")" != null ] || fail "bwd: no error ratio"
  else
    [ "$status" = '"FCL_ERROR_UNSUPPORTED"' ] || fail "fwdbwd: status $status"
    grep -q 'forward' <<<"$line" || fail "fwdbwd: the message does not name the forward"
  fi
done
echo "bench-tiling: $failures failures"
[ "$failures" -eq 0 ]
