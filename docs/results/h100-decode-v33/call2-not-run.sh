#!/usr/bin/env bash
# Not run (no device time left in v33). The block forms' K scaled after the
# products with a register cap that the driver's ptxas takes: without the
# required work-group size (.reqntid), -cl-nv-maxrregcount=168 (three
# work-groups a multiprocessor, as the planner splits). Builds, each
# `cmake -S . -B /tmp/bv-X -DCMAKE_BUILD_TYPE=Release -DFLASHCL_KERNEL_DEFINES="..."
#  && make -C /tmp/bv-X flashcl-bench`, copied to X/flashcl-bench beside this script:
#   c:  "" (the tree)
#   kr: "-DDECODE_K_SCALE_AFTER=1 -DDECODE_REQD_WG=0 -cl-nv-maxrregcount=168"
#   r:  "-DDECODE_REQD_WG=0 -cl-nv-maxrregcount=168" (the cap alone)
#   k2: "-DDECODE_K_SCALE_AFTER=2" (the bias by a product: 7-8 registers
#       fewer under the NVPTX proxy)
#   kr2: "-DDECODE_K_SCALE_AFTER=2 -DDECODE_REQD_WG=0 -cl-nv-maxrregcount=168"
# Expected: kr at three work-groups a multiprocessor, 167-168 registers and
# some spills (CUDA 13.0's ptxas on the driver's PTX with .minnctapersm 3:
# int8 36 bytes of spill stores, int4 8), int8 0.070-0.075 ms at B 8 x 8k
# against c's 0.080, int4 0.060-0.065 against 0.068; at B 32 x 8k near the
# uncapped 0.305 / 0.236.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log
t0=$(date +%s)
tgz() { (cd $OUT && tar czf r.tgz log); }
b() { local v=$1 B=$2 N=$3 kv=$4; shift 4
  local f=$OUT/log/$v-$B-$N-$(echo $kv | tr , _).txt; while [ -e "$f" ]; do f=$f.2; done
  timeout 60 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype $kv --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
for v in kr r k2 kr2; do FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt b $v 8 8192 int8,int4; grep -h "Used\|spill" $OUT/log/build-$v.txt | sort | uniq -c; done
tgz
for s in "8 8192" "32 8192" "1 32768"; do for v in c kr r k2 kr2 c kr kr2; do b $v $s int8,int4; done; done
tgz
