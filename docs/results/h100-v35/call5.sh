#!/usr/bin/env bash
# v35 call 5: the planner's register caps (n) against the tree before them (c), then the GPU tests of n.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log; t0=$(date +%s)
b() { local v=$1 B=$2 N=$3 kv=$4; shift 4; local f=$OUT/log/$v-$B-$N-$kv.txt
  timeout 60 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype $kv --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
mla() { local v=$1 B=$2 N=$3; shift 3; local f=$OUT/log/mla-$v-$B-$N$(echo "$@" | tr -d ' /-').txt
  timeout 90 ./$v/flashcl-bench --device gpu --no-tuning --quiet --no-peaks --algo flash --mla --heads 128 --seqlen 1 --back-to-back 20 --dtype f16 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s mla $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s ms %s TFLOP/s ", $11, $15}' $f)"; }
FLASHCL_BUILD_LOG=$OUT/log/build-n.txt mla n 64 8192; grep -h "Used\|spill" $OUT/log/build-n.txt | sort | uniq -c
FLASHCL_BUILD_LOG=$OUT/log/build-n-q.txt b n 8 8192 int8,int4; grep -h "Used\|spill" $OUT/log/build-n-q.txt | sort | uniq -c
for s in "64 8192" "8 8192" "1 32768"; do mla c $s; mla n $s; mla n $s --batch-invariant; done
for s in "8 8192" "32 8192" "1 32768"; do b c $s int8,int4; b n $s int8,int4; done
for t in test_mla test_quant_kv test_decode; do
  [ $(( $(date +%s) - t0 )) -lt ${GUARD:-250} ] || { echo "skipped: $t"; continue; }
  FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 150 ./n/$t > $OUT/log/$t.txt 2>&1; echo "$(( $(date +%s) - t0 ))s $t rc=$?: $(tail -1 $OUT/log/$t.txt)"
done
echo done $(( $(date +%s) - t0 ))s
