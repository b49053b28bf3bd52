#!/usr/bin/env bash
# The next call, written in v35 before it ran (no device time was left).
# Builds, into a folder git does not track (DIR), with this script as DIR/run.sh:
#   TARGETS="flashcl-bench flashcl-tune test_batch_invariance" \
#     tools/compare/build-variants.sh DIR n= wk1="-DK_CHUNK=1" \
#     c128="-DMMA_REG_CAP=128 -cl-nv-maxrregcount=128" c168="-DMMA_REG_CAP=168 -cl-nv-maxrregcount=168"
# and the tree before the host gave the block forms' load unit (commit 6b605d9):
#   git worktree add /tmp/p 6b605d9 && BUILD_ROOT=/tmp/p-variants \
#     /tmp/p/tools/compare/build-variants.sh $PWD/DIR p=
# Run with carry [DIR, ".deb"] and the recipe's ICD and LD_LIBRARY_PATH.
# Expected (written before any call):
# - Q, #46: the decode kernel told its load units and widths (KV_UNIT,
#   FULL_WIDTHS: n) against p: int8 0.060-0.070 ms at B 8 x 8k against 0.079,
#   B 32 x 8k 0.25-0.29 against 0.322, B 1 x 32k 0.040-0.045 against 0.047
#   (the proxy: 1313 -> 700 loop instructions, 206 -> 166 registers); fp8,
#   int4 and f16 0-5% faster (702 -> 334, 677 -> 655, 394 -> 351).
# - A, #50's status row with the H100's shipped database: the f32 forward
#   at d 64 against PyTorch's EFFICIENT 1.2-1.5x (the table's 1.02-1.18
#   times v35's 1.17-1.33 against the rules); d 128 as the table.
# - M, the (576, 512) decode under the planner's cap with K in chunks of one
#   step (wk1; the proxy: 164 bytes of spill stores against 240 at two,
#   the driver 80 at two): 0.95-1.05x n; the spills are not what binds it.
# - W, #51: the wgmma forward (f16, d 128, B 4 x 4096) of one warpgroup a
#   work-group (WG 128) held to 168 or 128 registers, three or four
#   work-groups a multiprocessor (each with K and V tiles of its own), against
#   three warpgroups sharing them (the planner's 384, one work-group): v29
#   found the loads of K and V bind it; several independent work-groups
#   overlap them. Expected c128 at WG 128 0.9-1.2x n at WG 384 (four times
#   the tiles' L2 traffic against four load pipelines); the sm_90a stage
#   now keeps the cap (fcl__sm90a_rebuild_options).
# - I, the batch-invariant suite on the GPU (the wide kernel capped): passes.
# - T, on an H200 only: its database regenerated on this tree, then the
#   sweep against the rules (tools/compare/ab.sh, ARGS_BEFORE=--no-tuning).
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu
mkdir -p $OUT/log; t0=$(date +%s)
go() { [ $(( $(date +%s) - t0 )) -lt ${GUARD:-450} ] || { echo "skipped: $1"; return 1; }; }
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
b() { local v=$1 B=$2 N=$3; local f=$OUT/log/$v-$B-$N.txt
  FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 90 \
    ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 \
    --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype as-dtype,int8,int4,fp8e4m3 \
    --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go Q && for s in "8 8192" "32 8192" "1 32768" "8 8192"; do b p $s; b n $s; done
grep -h "Used\|spill" $OUT/log/build-p.txt $OUT/log/build-n.txt 2>/dev/null | sort | uniq -c
root=${ROOT:-$PWD/../..}  # DIR two folders under the checkout
go A && FLASHCL_BENCH=$PWD/n/flashcl-bench timeout 240 $root/tools/compare/run.sh $OUT/f32 --dtype f32 \
  > $OUT/log/run-f32.txt 2>&1; tail -30 $OUT/f32/table.md 2>/dev/null
mla() { local v=$1 B=$2 N=$3; shift 3; local f=$OUT/log/mla-$v-$B-$N$(echo "$@" | tr -d ' /-').txt
  FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 90 ./$v/flashcl-bench --device gpu --no-tuning --quiet \
    --no-peaks --algo flash --mla --heads 128 --seqlen 1 --back-to-back 20 --dtype f16 --batch $B \
    --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s mla $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s ms %s TFLOP/s ", $11, $15}' $f)"; }
go M && for s in "64 8192" "8 8192" "1 32768" "64 8192" "8 8192"; do mla n $s; mla wk1 $s; done
w() { local v=$1; shift; local f=$OUT/log/wgmma-$v$(echo "$@" | tr -d ' /-,').txt
  FLASHCL_BUILD_LOG=$OUT/log/build-wgmma-$v.txt FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 90 \
    ./$v/flashcl-bench --device gpu --no-tuning --quiet --no-peaks --algo flash --kernel wgmma \
    --dtype f16 --batch 4 --seqlen 4096 --heads 16 --head-dim 128 "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s wgmma $v $*: $(awk '$1=="fwd"{printf "%s ms %s TFLOP/s ", $11, $15}' $f)"; }
go W && for v in n c168 c128 n; do for t in 64,384,0,0 64,128,0,0; do w $v --tiling $t; done; done
grep -h "Used\|spill" $OUT/log/build-wgmma-*.txt 2>/dev/null | sort | uniq -c
go I && FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 200 ./n/test_batch_invariance \
  > $OUT/log/test_batch_invariance.txt 2>&1; tail -1 $OUT/log/test_batch_invariance.txt
case "$card" in *H200*)
  go T && timeout 500 ./n/flashcl-tune --device gpu --budget 420 --out $OUT/tuning > $OUT/log/tune.log 2>&1
  tail -18 $OUT/log/tune.log ;;
esac
echo done $(( $(date +%s) - t0 ))s
