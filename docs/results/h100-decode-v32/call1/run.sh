#!/usr/bin/env bash
# e1: quantized decode: p (tree), a2/a4 (L2 prefetch 2/4 tiles ahead), va (V a step ahead); bshd vs bhsd; f32 B1 splits; t0 B64
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log
t0=$(date +%s)
b() { # variant B N kvlist [extra]
  local v=$1 B=$2 N=$3 kv=$4; shift 4
  local f=$OUT/log/$v-$B-$N-$(echo $kv | tr , _)$(echo "$@" | tr -d ' -').txt
  [ -e "$f" ] && f=$f.2
  FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt timeout 90 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype $kv --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N $kv $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"
}
f32() { # splits: f32 decode B1 x N
  local f=$OUT/log/f32-$2-s$1.txt
  timeout 60 ./p/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f32 --heads 32 --seqlen 1 --head-dim 128 --causal --back-to-back 20 --heads-kv 8 --batch 1 --seqlen-k $2 --splits $1 > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s f32 B1 N$2 splits $1: $(awk '$1=="fwd"{printf "%s ms %s GB/s ", $11, $13}' $f)"
}
tgz() { (cd $OUT && tar czf r.tgz log); }
b p 8 8192 int8,int4,fp8e4m3,as-dtype
b p 8 8192 int8,int4,fp8e4m3,as-dtype --layout bhsd
b a2 8 8192 int8,int4,fp8e4m3
b va 8 8192 int8,int4,fp8e4m3
b a4 8 8192 int8,int4,fp8e4m3
tgz
b p 32 8192 int8,int4,fp8e4m3,as-dtype
b p 32 8192 int8,int4,fp8e4m3,as-dtype --layout bhsd
b a2 32 8192 int8,int4,fp8e4m3
tgz
timeout 60 ./p/flashcl-bench --device gpu --quiet --no-tuning --algo flash --dtype f32 --heads 32 --seqlen 1 --head-dim 128 --causal --heads-kv 8 --batch 1 --seqlen-k 8192 > $OUT/log/peaks.txt 2>&1; grep -i "copy" $OUT/log/peaks.txt | head -2
for sp in 0 16 64; do f32 $sp 8192; done
tgz
b p 8 8192 int8,int4,fp8e4m3
b a2 8 8192 int8,int4,fp8e4m3
b p 8 8192 int8,int4,fp8e4m3,as-dtype --layout bhsd
tgz
b p 64 8192 as-dtype; b t0 64 8192 as-dtype
tgz
for f in $OUT/log/build-*.txt; do echo "$f: $(grep -o 'Used [0-9]* registers' $f | sort | uniq -c | tr '\n' ' ')"; done
