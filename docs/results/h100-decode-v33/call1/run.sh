#!/usr/bin/env bash
# e4: k: Q8_0 K scaled after the products (and c); fp8 through sm_89's conversion instruction (c) against the tree (n); test_quant_kv on the GPU; f32 decode B 1 x 8k by splits and merge
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log
t0=$(date +%s)
tgz() { (cd $OUT && tar czf r.tgz log); }
b() { # variant dtype B N kvlist [extra]
  local v=$1 dt=$2 B=$3 N=$4 kv=$5; shift 5
  local f=$OUT/log/$v-$dt-$B-$N-$(echo $kv | tr , _)$(echo "$@" | tr -d ' /-').txt
  while [ -e "$f" ]; do f=$f.2; done
  timeout 90 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype $dt --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype $kv --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v $dt B$B N$N $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"
}
Q=int8,int4,fp8e4m3,fp8e5m2,as-dtype
FLASHCL_BUILD_PTX=$OUT/log/ptx-c.txt FLASHCL_BUILD_LOG=$OUT/log/build-c.txt b c f16 8 8192 $Q
FLASHCL_BUILD_LOG=$OUT/log/build-n.txt b n f16 8 8192 $Q
FLASHCL_BUILD_PTX=$OUT/log/ptx-k.txt FLASHCL_BUILD_LOG=$OUT/log/build-k.txt b k f16 8 8192 int8,int4
tgz
for v in n c k; do b $v f16 8 8192 $Q; done
tgz
for v in n c k; do b $v f16 32 8192 $Q; b $v f16 1 32768 $Q; done
tgz
timeout 90 ./n/flashcl-bench --device gpu --quiet --no-tuning --algo flash --dtype f32 --heads 32 --seqlen 1 --head-dim 128 --causal --back-to-back 20 --heads-kv 8 --batch 1 --seqlen-k 8192 > $OUT/log/f32-peaks.txt 2>&1
echo "$(( $(date +%s) - t0 ))s peaks: $(grep -i copy $OUT/log/f32-peaks.txt | head -2 | tr '\n' ' ') $(awk '$1=="fwd"{printf "%s ", $11}' $OUT/log/f32-peaks.txt)"
for s in 0 16; do for m in kernel last-split; do b n f32 1 8192 as-dtype --splits $s --merge $m; done; done
for B in 4; do for m in kernel last-split; do b n f32 $B 8192 as-dtype --merge $m; done; done
tgz
(cd $OUT/log && FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 120 $OLDPWD/k/test_quant_kv > test_quant_kv.txt 2>&1; echo "rc $?" >> test_quant_kv.txt)
echo "$(( $(date +%s) - t0 ))s test_quant_kv: $(tail -2 $OUT/log/test_quant_kv.txt | tr '\n' ' ')"
tgz
