#!/usr/bin/env bash
# e2: the untransposed decode where waves fill better (n: the planner's rule; p: always transposed; t0: never); driver PTX of the decode kernels
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log
t0=$(date +%s)
tgz() { (cd $OUT && tar czf r.tgz log); }
b() { # variant B N kvlist [extra]
  local v=$1 B=$2 N=$3 kv=$4; shift 4
  local f=$OUT/log/$v-$B-$N-$(echo $kv | tr , _)$(echo "$@" | tr -d ' /-').txt
  [ -e "$f" ] && f=$f.2
  timeout 90 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype $kv --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N $kv $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"
}
FLASHCL_BUILD_PTX=$OUT/log/ptx.txt FLASHCL_BUILD_LOG=$OUT/log/build-n.txt b n 8 8192 int8,int4,fp8e4m3,as-dtype
tgz
for v in n p t0; do FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt b $v 64 8192 as-dtype; done
tgz
for s in "128 1024" "96 2048"; do for v in n p t0; do b $v $s as-dtype; done; done
tgz
b n 64 1024 as-dtype --check
tgz
b a2 32 8192 int8,int4,fp8e4m3; b p 32 8192 int8,int4,fp8e4m3
tgz
b n 64 8192 as-dtype
tgz
