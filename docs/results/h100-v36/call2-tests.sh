#!/usr/bin/env bash
# GPU tests of this tree (KV_UNIT, FULL_WIDTHS, the caps) on the real driver.
cd "$(dirname "$0")"
mkdir -p $OUT/log; t0=$(date +%s)
for t in test_quant_kv test_decode test_mla; do
  [ $(( $(date +%s) - t0 )) -lt ${GUARD:-400} ] || { echo "skipped: $t"; continue; }
  FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 220 ./n/$t > $OUT/log/$t.txt 2>&1
  echo "$(( $(date +%s) - t0 ))s $t rc=$? $(grep -E '^[0-9]+%' $OUT/log/$t.txt | tail -1)"
done
