#!/usr/bin/env bash
# v37's first call, the most wanted part of run.sh (v36's next call) first:
# Q8_0 with its load unit told (ku8) against the planner's text (n) and
# the tree before the host gave any fact (p); the narrow decode kernel at
# 128 registers (c128) and both together (kc), at the planner's splits and
# at 8; then the GPU tests of this tree (tests.sh, side by side).
# Expected (run.sh's header): ku8 int8 0.068-0.077 ms at B 8 x 8k, at least
# as fast as n; c128/kc with 8 splits int8 0.062-0.070; f16 no faster.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu
mkdir -p $OUT/log; t0=$(date +%s)
go() { [ $(( $(date +%s) - t0 )) -lt ${GUARD:-300} ] || { echo "skipped: $1"; return 1; }; }
b() { local v=$1 B=$2 N=$3; shift 3; local f=$OUT/log/$v-$B-$N$(echo "$@" | tr -d ' -').txt
  while [ -e "$f" ]; do f=$f.2; done
  FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt FLASHCL_TUNING_DIR=/tmp/no-tuning \
    timeout 90 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash \
    --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal \
    --kv-dtype as-dtype,int8,int4,fp8e4m3 --back-to-back 20 --heads-kv 8 --batch $B \
    --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go Q && for v in p n ku8 kc c128; do b $v 8 8192; done
go Q && for v in c128 kc ku8 n; do b $v 8 8192 --splits 8; done
go Q && for v in ku8 n kc; do b $v 32 8192; done
go Q && for v in ku8 n; do b $v 1 32768; done
go Q && for v in kc c128 n ku8 p; do b $v 8 8192; done
grep -H "Used\|spill" $OUT/log/build-*.txt | grep -v merge | sort | uniq -c > $OUT/regs.txt
NO_F32=1 TLIMIT=$(( ${TOTAL:-560} - ($(date +%s) - t0) )) bash ./tests.sh
(cd $OUT && tar czf log.tgz log && rm -rf log)
echo done $(( $(date +%s) - t0 ))s
