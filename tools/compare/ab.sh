#!/usr/bin/env bash
# Times two builds of flashcl-bench on the same shapes in one run, one after
# the other per round, and compares them (ab.py): a change's before and
# after on one machine.
#
#   tools/compare/ab.sh OUTDIR BENCH_BEFORE BENCH_AFTER [flashcl-bench options]
#
# Options default to the standard sweep of the flash algorithm; with
# ROUNDS=n (default 1) each build runs n times, alternating, and every
# round is compared. A build finds its library through LIBS_BEFORE and
# LIBS_AFTER (prepended to LD_LIBRARY_PATH) when they are set; ARGS_BEFORE
# and ARGS_AFTER are options for one side only (one build with and without
# its tuned plans: BENCH twice, ARGS_BEFORE=--no-tuning). With more than one
# round, ab-best.md compares each side's fastest sample over the rounds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: ab.sh OUTDIR BENCH_BEFORE BENCH_AFTER [options]}"
before="${2:?usage: ab.sh OUTDIR BENCH_BEFORE BENCH_AFTER [options]}"
after="${3:?usage: ab.sh OUTDIR BENCH_BEFORE BENCH_AFTER [options]}"
shift 3
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--sweep --algo flash)
mkdir -p "$out"
for round in $(seq 1 "${ROUNDS:-1}"); do
  for side in before after; do
    bench="$before" libs="${LIBS_BEFORE:-}" side_args="${ARGS_BEFORE:-}"
    [ "$side" = after ] && bench="$after" libs="${LIBS_AFTER:-}" side_args="${ARGS_AFTER:-}"
    # shellcheck disable=SC2086  # side_args is a list of words
    LD_LIBRARY_PATH="$libs${libs:+:}${LD_LIBRARY_PATH:-}" "$bench" --no-peaks --quiet \
      $side_args "${opts[@]}" \
      --json "$out/$side-$round.json" > "$out/$side-$round.txt"
  done
  python3 "$here/ab.py" "$out/before-$round.json" "$out/after-$round.json" | tee "$out/ab-$round.md"
done
# Several rounds: also each side's fastest sample over all of them.
if [ "${ROUNDS:-1}" -gt 1 ]; then
  python3 "$here/ab.py" --best "$out" | tee "$out/ab-best.md"
fi
