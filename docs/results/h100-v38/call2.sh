#!/usr/bin/env bash
# Second call of v38: #50's GPU suites on this tree (n), ks's test_quant_kv,
# then the 16-bit sweeps the first call's guard left (A="fwd:f16 ...").
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log; t0=$(date +%s)
run() { local v=$1 t=$2
  FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout ${TLIMIT:-240} ./$v/$t > $OUT/log/$v-$t.txt 2>&1
  echo "$(( $(date +%s) - t0 ))s $v $t rc=$? $(grep -E '^[0-9]+%' $OUT/log/$v-$t.txt | tail -1)"; }
if [ -z "$NO_TESTS" ]; then
  for spec in ${SUITES:-n:test_flash n:test_backward n:test_half n:test_mma n:test_edges n:test_decode ks:test_quant_kv}; do
    run ${spec%%:*} ${spec#*:} &
  done
  wait
fi
# W, #51: the wgmma forward's loads alone (e14: S, softmax and P V left
# out), beside everything (n) and everything but the loads (e1), f16 d 128
# B 4 x 4096, 16 heads, both masks, two rounds.
w() { local v=$1 r=$2 f=$OUT/log/w-$1-$2.txt
  FLASHCL_BUILD_LOG=$OUT/log/build-w-$v.txt timeout 90 ./$v/flashcl-bench --device gpu --no-peaks \
    --quiet --no-tuning --algo flash --kernel wgmma --pass fwd --dtype f16 --batch 4 --heads 16 \
    --seqlen 4096 --head-dim 128 --causal both > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s W $v r$r: $(awk '$1=="fwd"{printf "%s ms %s TF/s  ", $11, $15}' $f)"; }
[ -z "$NO_W" ] && for r in 1 2; do for v in n e14 e1; do w $v $r; done; done
for spec in ${A:-}; do
  p=${spec%%:*} d=${spec#*:}
  [ $(( $(date +%s) - t0 )) -lt ${GUARD:-420} ] || { echo "skipped: A $p $d"; continue; }
  FLASHCL_BENCH=$PWD/n/flashcl-bench timeout 300 ../../tools/compare/run.sh \
    $OUT/$p-$d --pass $p --dtype $d --backend flash --algo flash > $OUT/log/A-$p-$d.txt 2>&1
  echo "$(( $(date +%s) - t0 ))s A $p $d: rc=$? $(grep -c '^|' $OUT/$p-$d/table.md 2>/dev/null) table rows"
done
(cd $OUT && tar czf all.tgz --exclude=all.tgz . && find . -mindepth 1 -maxdepth 1 ! -name all.tgz -exec rm -rf {} +)
echo done $(( $(date +%s) - t0 ))s
