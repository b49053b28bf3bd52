#!/usr/bin/env bash
# v37's second call: the planner giving Q8_0 its load unit again (n2: the
# tree with kv_unit's Q8_0 exception dropped) against n and p, then the
# GPU tests of n2 (the planner's Q8_0 programs on the real driver: call
# 1's blanket -DKV_UNIT=8 crashed on layouts whose unit is smaller, which
# the planner never gives); q4 (int4 by the quad) and the wgmma forward in
# 32-key tiles if time remains.
# Expected: n2 int8 0.068-0.070 ms at B 8 x 8k (ku8's 0.069 in call 1,
# the same text for these layouts); tests pass.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu
mkdir -p $OUT/log; t0=$(date +%s)
go() { [ $(( $(date +%s) - t0 )) -lt ${GUARD:-300} ] || { echo "skipped: $1"; return 1; }; }
b() { local v=$1 B=$2 N=$3; shift 3; local f=$OUT/log/$v-$B-$N$(echo "$@" | tr -d ' -').txt
  while [ -e "$f" ]; do f=$f.2; done
  FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt FLASHCL_TUNING_DIR=/tmp/no-tuning \
    timeout 90 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash \
    --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal \
    --kv-dtype ${KVD:-as-dtype,int8,int4,fp8e4m3} --back-to-back 20 --heads-kv 8 --batch $B \
    --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go Q && for v in n2 n p n2; do b $v 8 8192; done
go Q && for v in n2 n; do b $v 32 8192; b $v 1 32768; done
go Q && for v in q4 n q4; do KVD=as-dtype,int4 b $v 8 8192; done
SUITES="n2:test_quant_kv n2:test_decode" NO_F32=1 TLIMIT=250 bash ./tests.sh
w() { local tag=$1; shift; local f=$OUT/log/wgmma-$tag.txt; while [ -e "$f" ]; do f=$f.2; done
  FLASHCL_BUILD_LOG=$OUT/log/build-wgmma-$tag.txt FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 60 \
    ./n/flashcl-bench --device gpu --no-tuning --quiet --no-peaks --algo flash --kernel wgmma \
    --dtype f16 --heads 16 --head-dim 128 "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s wgmma $tag: $(awk '$1=="fwd"{printf "%s ms %s TFLOP/s err %s ", $11, $15, $(NF-1)}' $f)"; }
GUARD=${WGUARD:-420}
go W && w check32 --tiling 32,384,0,0 --batch 1 --seqlen 1024 --check
go W && for r in 1 2; do w p64 --tiling 64,384,0,0 --batch 4 --seqlen 4096; w p32 --tiling 32,384,0,0 --batch 4 --seqlen 4096; done
grep -H "Used\|spill" $OUT/log/build-*.txt | grep -v merge | sort | uniq -c > $OUT/regs.txt
(cd $OUT && tar czf log.tgz log && rm -rf log)
echo done $(( $(date +%s) - t0 ))s
