#!/usr/bin/env bash
# flashcl-tune on the test device (PoCL in CI) with a tiny budget: it
# writes the device's database, which the library then reads and runs
# (flashcl-bench's JSON says the plan is tuned and is the database's, and
# its check holds it to the reference); flashcl-bench --no-tuning and a
# context without the folder run the rules'; flashcl-info marks the plan
# tuned; a second run on another bucket keeps the first one's entry; the
# command lines it must refuse exit 2.
#
# --without-rules makes the search keep its best candidate other than the
# rules' plan, so that what runs differs from the rules whatever the
# timings (on PoCL the rules often win); the accuracy check still applies.
# Usage: tests/tune.sh FLASHCL_BENCH FLASHCL_TUNE FLASHCL_INFO
set -euo pipefail
# shellcheck source=tests/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
tune="${2:?usage: tune.sh FLASHCL_BENCH FLASHCL_TUNE FLASHCL_INFO}"
info="${3:?usage: tune.sh FLASHCL_BENCH FLASHCL_TUNE FLASHCL_INFO}"
db_dir="$tmp/db"

"$tune" --help | grep -q -- '--budget SECONDS' || fail "--help does not list --budget"
"$tune" --help | grep -q -- '--confirm N' || fail "--help does not list --confirm"
for bad in "--budget 0" "--budget 1x" "--buckets fwd.f64.*.*.*" "--buckets fwd.f32" \
           "--margin 51" "--repeat 0" "--confirm 16" "--confirm -1" "--confirm" "--bogus" \
           "--out" "--out ''"; do
  rc=0
  eval "\"\$tune\" $bad" > /dev/null 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "flashcl-tune $bad: exit status $rc, want 2"
done
# a list with an empty field, as --varlen and --tiling refuse theirs
for bad in "fwd.f32.d64.full.large,,fwd.f32.d64.causal.large" "fwd.f32.d64.full.large," \
           ",fwd.f32.d64.full.large" ""; do
  rc=0
  "$tune" "${device[@]}" --dry-run --buckets "$bad" > /dev/null 2> "$tmp/err.txt" || rc=$?
  [ "$rc" -eq 2 ] && grep -q "empty" "$tmp/err.txt" ||
    fail "flashcl-tune --buckets '$bad': exit status $rc, want 2 and 'empty': $(cat "$tmp/err.txt")"
done
# buckets with no problem on this device (small ones, on few compute units):
# exit 3 and why, never a silent "0 buckets"
rc=0
"$tune" "${device[@]}" --dry-run --buckets '*.*.*.*.small' > "$tmp/small.txt" \
  2> "$tmp/small.err" || rc=$?
if [ -s "$tmp/small.txt" ]; then
  [ "$rc" -eq 0 ] || fail "--dry-run of the small buckets listed some, exit status $rc"
else
  [ "$rc" -eq 3 ] && grep -q "nothing to tune: .* no problem to time on this device (.*small" \
    "$tmp/small.err" ||
    fail "small buckets without problems: exit status $rc, want 3 and why: $(cat "$tmp/small.err")"
fi
"$tune" "${device[@]}" --dry-run --buckets 'fwd.f32.d64.*.large' > "$tmp/dry.txt" ||
  fail "--dry-run failed"
grep -q '^fwd.f32.d64.full.large .* candidates' "$tmp/dry.txt" ||
  fail "--dry-run does not list fwd.f32.d64.full.large: $(cat "$tmp/dry.txt")"

# 1. a search of one bucket
"$tune" "${device[@]}" --buckets fwd.f32.d64.full.large --budget 8 --repeat 1 \
  --without-rules --out "$db_dir" > "$tmp/tune.txt" 2> "$tmp/tune.err" ||
  { cat "$tmp/tune.err"; fail "flashcl-tune failed"; }
db="$(ls "$db_dir"/*.json 2> /dev/null | head -1)"
[ -n "$db" ] || { cat "$tmp/tune.txt" "$tmp/tune.err"; fail "no database in $db_dir"; exit 1; }
grep -q '"bucket": "fwd.f32.d64.full.large"' "$db" || fail "the database has no entry: $(cat "$db")"
grep -q '^\[1/1\] fwd.f32.d64.full.large' "$tmp/tune.err" || fail "no progress on stderr"
entry="$(grep '"bucket": "fwd.f32.d64.full.large"' "$db")"

# 2. what the library runs on a shape of that bucket, with the folder and without
shape=(--algo flash --pass fwd --dtype f32 --batch 2 --heads 8 --seqlen 256 --head-dim 64
       --check --no-peaks --quiet --warmup 0 --repeat 1)
FLASHCL_TUNING_DIR="$db_dir" "$bench" "${device[@]}" "${shape[@]}" --json "$tmp/tuned.json" \
  > /dev/null || fail "the bench with the database failed"
FLASHCL_TUNING_DIR="$db_dir" "$bench" "${device[@]}" "${shape[@]}" --no-tuning \
  --json "$tmp/rules.json" > /dev/null || fail "the bench with --no-tuning failed"
tuned="$(grep '"algo": ' "$tmp/tuned.json")" rules="$(grep '"algo": ' "$tmp/rules.json")"
[ "$(field tuned "$tuned")" = 1 ] || fail "with the database the plan is not tuned: $tuned"
[ "$(field tuned "$rules")" = 0 ] || fail "with --no-tuning the plan is tuned: $rules"
for f in wg_size threads_per_row rows_per_thread; do
  want="$(field "$f" "$entry")"
  [ "$want" = 0 ] || [ "$(field "$f" "$tuned")" = "$want" ] ||
    fail "tuned plan's $f is $(field "$f" "$tuned"), the database's $want"
done
plan_of() { grep -o '"plan": {[^}]*' <<<"$1" | sed 's/, "tuned": [01]//'; }
[ "$(plan_of "$tuned")" != "$(plan_of "$rules")" ] ||
  fail "the tuned plan is the rules' ($(plan_of "$rules"))"
awk -v r="$(field err_ratio "$tuned")" 'BEGIN { exit !(r < 2) }' ||
  fail "the tuned plan's error ratio is $(field err_ratio "$tuned")"
FLASHCL_TUNING_DIR="$tmp/elsewhere" "$bench" "${device[@]}" "${shape[@]}" \
  --json "$tmp/none.json" > /dev/null || fail "the bench without a database failed"
[ "$(field tuned "$(grep '"algo": ' "$tmp/none.json")")" = 0 ] ||
  fail "a folder without a database gave a tuned plan"

# 3. flashcl-info says so
FLASHCL_TUNING_DIR="$db_dir" "$info" --batch 2 --heads 8 --seqlen 256 --head-dim 64 \
  > "$tmp/info.txt" || fail "flashcl-info failed"
grep -q 'tuned plans: 1 bucket(s) from' "$tmp/info.txt" || fail "flashcl-info: no tuned plans line"
grep -q 'flash forward plan: .*(tuned)' "$tmp/info.txt" || fail "flashcl-info: forward not tuned"
grep -q 'flash backward plan: .*(rules)' "$tmp/info.txt" || fail "flashcl-info: backward not rules"

# 4. another bucket later: both kept
"$tune" "${device[@]}" --buckets fwd.f32.d128.full.large --budget 1 --repeat 1 \
  --without-rules --out "$db_dir" > /dev/null 2>&1 || fail "the second flashcl-tune failed"
grep -q '"bucket": "fwd.f32.d64.full.large"' "$db" || fail "the first bucket's entry was lost"
grep -q '"bucket": "fwd.f32.d128.full.large"' "$db" || fail "the second bucket has no entry"

echo "tune: $(grep -c '"bucket"' "$db") tuned buckets; $failures failures"
[ "$failures" -eq 0 ]
