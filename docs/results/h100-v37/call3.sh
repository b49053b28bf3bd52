#!/usr/bin/env bash
# v37's third call: the planner's Q8_0 with its unit (n2) for #46's table,
# every form with its error against float64 over the dequantised cache
# (--check), and the f32 decode at B 1 x 8k at more splits (tests.sh's
# first part: #50's row under its bar).
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu
mkdir -p $OUT/log; t0=$(date +%s)
for r in 1 2; do
  f=$OUT/log/n2-check-r$r.txt
  FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 120 ./n2/flashcl-bench --device gpu --no-peaks --quiet \
    --no-tuning --algo flash --dtype f16 --heads 32 --heads-kv 8 --seqlen 1 --head-dim 128 --causal \
    --kv-dtype as-dtype,int8,int4,fp8e4m3,fp8e5m2 --back-to-back 20 --batch 8 --seqlen-k 8192 \
    $([ $r = 1 ] && echo --check) > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s n2 B8 N8192 r$r: $(awk '$1=="fwd"{printf "%s=%s err %s  ", $2, $11, $(NF-1)}' $f)"
done
SUITES=" " TLIMIT=1 bash ./tests.sh
(cd $OUT && tar czf log.tgz log && rm -rf log)
echo done $(( $(date +%s) - t0 ))s
