#!/usr/bin/env bash
# The command lines of flashcl-bench and flashcl-info as a careless caller
# types them: values the strict parser refuses (exit 2, a reason), shapes
# the library refuses before anything is allocated (the library's own
# message, at once), runs that fail (exit 1) or are unsupported (exit 3)
# while the sweep goes on, and messages printed whole.
# flashcl-call-cost's too: one small decode shape whose four times are
# positive, and the values it refuses.
# Usage: tests/bench-cli.sh path/to/flashcl-bench path/to/flashcl-info path/to/flashcl-call-cost
set -euo pipefail
# shellcheck source=tests/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
info="${2:?usage: $(basename "$0") FLASHCL_BENCH FLASHCL_INFO FLASHCL_CALL_COST}"
callcost="${3:?usage: $(basename "$0") FLASHCL_BENCH FLASHCL_INFO FLASHCL_CALL_COST}"

# expect WANT_RC NEEDLE TOOL ARGS...: the exit status, and NEEDLE in what it printed
expect() {
  local want="$1" needle="$2" tool="$3" rc=0
  shift 3
  timeout 120 "$tool" "$@" > "$tmp/out.txt" 2>&1 || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$(basename "$tool") $*: exit status $rc, want $want"
    cat "$tmp/out.txt"
  elif ! grep -qF -- "$needle" "$tmp/out.txt"; then
    fail "$(basename "$tool") $*: no \"$needle\" in:"
    cat "$tmp/out.txt"
  fi
}

run=("${device[@]}" --no-peaks --quiet)
shape=(--batch 1 --heads 2 --seqlen 16 --head-dim 16)
expect 0 "flash" "$bench" "${run[@]}" "${shape[@]}"
expect 0 "Exit status" "$bench" --help
# every run unsupported: 3, and the library's reason
expect 3 "exceeds FCL_MAX_HEAD_DIM" "$bench" "${run[@]}" --head-dim 600 --seqlen 64
# out of memory: 1, with the message whole (it ends with the scratch limit)
expect 1 "the scratch limit" "$bench" "${run[@]}" --seqlen 200000 --algo naive
# sizes the library refuses, before the bench allocates anything
expect 1 "batch = 35184372088832 exceeds 2147483647" "$bench" "${run[@]}" --batch 35184372088832
expect 1 "exceeds 2147483647" "$bench" "${run[@]}" --batch 18446744073709551615
start=$(date +%s)
expect 1 "largest allocation" "$bench" "${run[@]}" --seqlen 540000000 --seqlen-k 1 --head-dim 1
[ $(($(date +%s) - start)) -lt 30 ] || fail "a shape too large for the device took over 30 s to refuse"
# the sweep goes on past a failing shape: one result per algorithm, all there
expect 3 "naive" "$bench" "${run[@]}" --head-dim 600 --seqlen 64 --causal both
[ "$(grep -c 'FCL_ERROR_UNSUPPORTED' "$tmp/out.txt")" -eq 4 ] || fail "--causal both: not 4 results"
# --batch-invariant both: each shape without, then with the mode
expect 0 "inv" "$bench" "${run[@]}" --algo flash --batch 2 --heads 2 --seqlen 1 --seqlen-k 700 \
  --head-dim 16 --batch-invariant both
[ "$(grep -cE ' (no|yes)$' "$tmp/out.txt")" -eq 2 ] || fail "--batch-invariant both: not 2 results"
# strict values: junk, signs, trailing commas, exponents, overflow
for tiling in 32,128,1,1junk '32,128,1,1,' -1,128,1,1 32,,1,1 32,128,1; do
  expect 2 "--tiling needs" "$bench" "${run[@]}" "${shape[@]}" --tiling "$tiling"
done
expect 2 "is too large" "$bench" "${run[@]}" --seqlen 99999999999999999999999
expect 2 "not a decimal integer" "$bench" "${run[@]}" --seqlen 1e3
for window in 5 5,6,7 a,0 -2,0 '5,' 1e3,0; do
  expect 2 "--window needs L,R" "$bench" "${run[@]}" "${shape[@]}" --window "$window"
done
for cap in -1 nan inf 1e39 x ""; do
  expect 2 "--softcap needs" "$bench" "${run[@]}" "${shape[@]}" --softcap "$cap"
done
expect 2 "--varlen needs" "$bench" "${run[@]}" --varlen 5,,6
expect 2 "excludes --batch" "$bench" "${run[@]}" --varlen 5,6 --batch 2
expect 2 "excludes --sweep" "$bench" "${run[@]}" --varlen 5,6 --sweep
expect 2 "add up past" "$bench" "${run[@]}" --varlen 2000000000,2000000000
expect 2 "--layout needs" "$bench" "${run[@]}" "${shape[@]}" --layout bsdh
# a quantized KV cache: the forms by name, the forward only, head_dim a
# multiple of the block for int8 and int4 (the library's reason, exit 3)
expect 2 "--kv-dtype 'int3'" "$bench" "${run[@]}" "${shape[@]}" --kv-dtype int8,int3
expect 2 "listed twice" "$bench" "${run[@]}" "${shape[@]}" --kv-dtype int8,int8
expect 2 "--kv-dtype is for --pass fwd" "$bench" "${run[@]}" "${shape[@]}" --kv-dtype int8 \
  --pass bwd
expect 3 "is not a multiple of 32" "$bench" "${run[@]}" "${shape[@]}" --kv-dtype int8
expect 0 "f32+fp8e4m3" "$bench" "${run[@]}" "${shape[@]}" --kv-dtype as-dtype,fp8e4m3 --check
# a value head size of its own: the naive algorithm and the flash kernels
# run it, checked (which flash family depends on the shape and the device:
# SIMT or CPU for a prefill, a decode kernel for a decode step on a GPU);
# the MMA kernels refuse with the library's reason (exit 3); not with
# packed QKV
expect 0 "naive" "$bench" "${run[@]}" --seqlen 40 --head-dim 80 --head-dim-v 48 --algo naive \
  --pass fwdbwd
expect 0 "flash" "$bench" "${run[@]}" --seqlen 40 --head-dim 80 --head-dim-v 48 --algo flash \
  --pass fwdbwd --check
expect 0 "flash" "$bench" "${run[@]}" --seqlen 1 --seqlen-k 60 --head-dim 80 --head-dim-v 48 \
  --algo flash --check
expect 3 "head_dim_v = 48 with head_dim = 80: the mma kernels" "$bench" "${run[@]}" --seqlen 40 \
  --head-dim 80 --head-dim-v 48 --algo flash --kernel mma
# DeepSeek's latent attention decode: V a view of K, its bytes counted once
expect 0 "=model" "$bench" "${run[@]}" --mla --heads 16 --seqlen 1 --seqlen-k 200 --dtype f16 \
  --algo flash --check --count-io
expect 2 "--mla takes --layout bshd" "$bench" "${run[@]}" --mla --layout bhsd
expect 2 "--head-dim-v and --layout qkv" "$bench" "${run[@]}" "${shape[@]}" --head-dim-v 32 \
  --layout qkv
# --causal takes the window's right bound to 0
expect 0 "window -1,3" "$bench" "${run[@]}" --varlen 5,6 --seqlen-k 4 --causal --window -1,3
expect 2 "unknown option" "$bench" --frobnicate
expect 2 "needs a value" "$bench" --seqlen

expect 0 "flash forward plan" "$info" --seqlen 1000 --head-dim 64
# DeepSeek's prefill widths: V's bucket of its own in both passes' plans
expect 0 "value width: V, O, dO and dV in a bucket of 128" "$info" --profile arc-a770 \
  --head-dim 192 --head-dim-v 128
expect 0 "Exit status" "$info" --help
for bad in 1e3 12abc 99999999999999999999999 -5 0; do
  expect 2 "--seqlen" "$info" --seqlen "$bad"
done
expect 2 "unknown dtype" "$info" --dtype f64
expect 2 "heads_q = 3 is not a multiple of heads_kv = 2" "$info" --heads 3 --heads-kv 2
expect 2 "exceeds 2147483647" "$info" --batch 4294967296
expect 2 "unknown option" "$info" --frobnicate
# a program's text: the shared texts (params.h, traits.h, ...), the prelude, the file
expect 0 "FCL_TRAITS_H" "$info" --program-text flash_fwd_mma.cl
grep -qF "void flash_fwd_mma(" "$tmp/out.txt" || fail "--program-text flash_fwd_mma.cl: no kernel"
grep -qF "inline void ldsm_x4(" "$tmp/out.txt" || fail "--program-text flash_fwd_mma.cl: no prelude"
expect 2 "no kernel file of the library" "$info" --program-text nope.cl
expect 2 "needs a kernel file" "$info" --program-text
# the wgmma probe's options, and the sm_90a stage's patch on a file
expect 2 "--wgmma-reps needs 0 to" "$info" --wgmma-probe --wgmma-reps x
expect 2 "needs a PTX file" "$info" --ptx-unmark
expect 2 "cannot read" "$info" --ptx-unmark "$tmp/no-such.ptx"
printf '.version 9.0\n.target sm_90\n\tmov.u32 %%r1, 0; //@@ wgmma.fence.sync.aligned;\n' \
  > "$tmp/inside.ptx"
expect 1 "line 3: a marker inside other text" "$info" --ptx-unmark "$tmp/inside.ptx"
printf '.version 9.0\n.target sm_90\n\t//@@ wgmma.fence.sync.aligned;\n' > "$tmp/marked.ptx"
expect 0 ".target sm_90a" "$info" --ptx-unmark "$tmp/marked.ptx"
grep -qF "$(printf '\twgmma.fence.sync.aligned;')" "$tmp/out.txt" ||
  fail "--ptx-unmark: the marker is still there"

expect 0 "usage" "$callcost" --help
expect 0 "in a run" "$callcost" "${device[@]}" --dtype f32 2 100
# the shape's line: type, B, x, cache, kernel, splits, then four times and GB/s
line="$(grep -E '^f32 +2 x 100 ' "$tmp/out.txt" || true)"
if ! awk '{ exit !(NF == 11 && $7 > 0 && $8 > 0 && $9 > 0 && $10 > 0) }' <<<"$line"; then
  fail "flashcl-call-cost: no positive times in \"$line\""
fi
expect 2 "usage" "$callcost" 1
expect 2 "CACHE: 0 is out of range" "$callcost" 1 0
expect 2 "not a decimal integer" "$callcost" --splits x 1 2
expect 2 "unknown dtype" "$callcost" --dtype f64 1 2
expect 1 "overflow" "$callcost" "${device[@]}" 2147483647 2147483647

echo "bench-cli: $failures failures"
[ "$failures" -eq 0 ]
