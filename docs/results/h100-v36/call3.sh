#!/usr/bin/env bash
# v36 call 3. Q: which of the host's two new facts slowed the int8 decode
# (call 1: n 0.102 ms at B 8 x 8k against p's 0.080): n (KV_UNIT=8,
# FULL_WIDTHS=1), u0 (-DKV_UNIT=0: the unit found per launch), f0
# (-DFULL_WIDTHS=0), u0f0 (both off: p's kernel from this tree), p; the
# driver's PTX of each (FLASHCL_BUILD_PTX) for scripts/driver-ptx.sh here.
# I: test_batch_invariance (its batch test fixed) on the GPU. A2: the f32
# forward+backward sweep with the H100's shipped database against PyTorch.
# Expected: u0 as p for int8 (the unit is what changed the loads), f0 as n.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu
mkdir -p $OUT/log; t0=$(date +%s)
go() { [ $(( $(date +%s) - t0 )) -lt ${GUARD:-450} ] || { echo "skipped: $1"; return 1; }; }
b() { local v=$1 B=$2 N=$3; local f=$OUT/log/$v-$B-$N.txt; while [ -e "$f" ]; do f=$f.2; done
  local ptx=; [ -e $OUT/log/ptx-$v.txt ] || ptx=$OUT/log/ptx-$v.txt
  FLASHCL_BUILD_PTX=$ptx FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 90 \
    ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 \
    --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype as-dtype,int8,int4 \
    --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go Q && for s in "8 8192" "32 8192"; do for v in p n u0 f0 u0f0; do b $v $s; done; done
go Q && for v in p n u0 f0 u0f0; do b $v 8 8192; done
go Q && for v in p n; do b $v 1 32768; done
grep -H "Used\|spill\|^==" $OUT/log/build-*.txt | grep -v merge > $OUT/regs.txt
go I && FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 150 ./n/test_batch_invariance \
  > $OUT/log/test_batch_invariance.txt 2>&1; tail -3 $OUT/log/test_batch_invariance.txt
go A2 && FLASHCL_BENCH=$PWD/n/flashcl-bench timeout 200 ${ROOT:-$PWD/../..}/tools/compare/run.sh $OUT/f32bwd \
  --dtype f32 --pass fwdbwd > $OUT/log/run-f32-fwdbwd.txt 2>&1; tail -28 $OUT/f32bwd/table.md 2>/dev/null
(cd $OUT && tar czf log.tgz log && rm -rf log)
echo done $(( $(date +%s) - t0 ))s
