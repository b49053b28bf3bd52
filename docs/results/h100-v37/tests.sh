#!/usr/bin/env bash
# GPU tests of this tree on the real driver, side by side (one process a
# suite; NVIDIA's compiler runs on the host's cores): n (the tree as
# committed) and ku8 (-DKV_UNIT=8, Q8_0 with its load unit told).
cd "$(dirname "$0")"
mkdir -p $OUT/log; t0=$(date +%s)
# First, timed alone: f32 decode at B 1 x 8k (#50's row under its bar,
# 69% of the copy peak at the planner's 32 splits, v33) at more splits.
# Expected: 48 and 64 splits (384 and 512 work-groups, under three waves
# at three a multiprocessor) 0.95-1.05x the planner's 0.035 ms; nothing
# has said what binds it beyond the split launch's tail and the merge.
if [ -z "$NO_F32" ]; then
  for r in 1 2; do for S in 0 24 48 64; do
    f=$OUT/log/f32-s$S-r$r.txt
    FLASHCL_TUNING_DIR=/tmp/no-tuning FLASHCL_DEVICE=gpu timeout 60 ./n/flashcl-bench --device gpu \
      --quiet --no-tuning --algo flash --dtype f32 --heads 32 --heads-kv 8 --head-dim 128 \
      --seqlen 1 --seqlen-k 8192 --batch 1 --causal --back-to-back 20 --splits $S > $f 2>&1
    echo "f32 B1x8k splits $S: $(awk '$1=="fwd"{printf "%s ms %s GB/s %s%% bw", $11, $13, $14}' $f)"
  done; done
fi
run() { local v=$1 t=$2
  FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout ${TLIMIT:-330} ./$v/$t > $OUT/log/$v-$t.txt 2>&1
  echo "$(( $(date +%s) - t0 ))s $v $t rc=$? $(grep -E '^[0-9]+%' $OUT/log/$v-$t.txt | tail -1)"; }
for spec in ${SUITES:-n:test_quant_kv n:test_decode n:test_mla n:test_batch_invariance ku8:test_quant_kv}; do
  run ${spec%%:*} ${spec#*:} &
done
wait
echo done $(( $(date +%s) - t0 ))s
