#!/usr/bin/env bash
# Not run: no device machine came in this session (docs/history/v34-register-caps-and-chunks-not-run.md).
# Its builds go beside it, in a folder git does not track: copy it to DIR/run.sh, then
#   tools/compare/build-variants.sh DIR c= \
#     kr="-DDECODE_K_SCALE_AFTER=1 -DMMA_REQD_WG=0 -cl-nv-maxrregcount=168" \
#     r="-DMMA_REQD_WG=0 -cl-nv-maxrregcount=168" k2="-DDECODE_K_SCALE_AFTER=2" \
#     kr2="-DDECODE_K_SCALE_AFTER=2 -DMMA_REQD_WG=0 -cl-nv-maxrregcount=168" t0="-DDECODE_T=0" \
#     w6="-DK_CHUNK=6" w9="-DK_CHUNK=9" w12="-DK_CHUNK=12" wv2="-DV_CHUNK=2" wv4="-DV_CHUNK=4" \
#     w6v2="-DK_CHUNK=6 -DV_CHUNK=2" wc128="-DMMA_REQD_WG=0 -DK_CHUNK=2 -cl-nv-maxrregcount=128" \
#     wc128k4="-DMMA_REQD_WG=0 -cl-nv-maxrregcount=128"
# (K_CHUNK 12 and 6 do not divide every width's k-steps: those builds serve 576 only.)
# Expected (written before any call):
# - kr: three work-groups a multiprocessor again (167-168 registers, some spill); int8 0.070-0.075 ms
#   at B 8 x 8k against c's 0.080, int4 0.060-0.065 against 0.068; r = c (the tree's kernel is at
#   168 already); k2: int4 may fit 168 alone.
# - wc128: two work-groups of 8 warps a multiprocessor (95 KiB of its 228 of local memory), at the
#   price of spills: 1.2-1.5x at B 64 x 8k and B 8 x 8k if the spills stay in L1; w6: 5-10% at B 8
#   and 64 (more of K in flight, registers to spare at one work-group a multiprocessor); w9, w12
#   flatten or spill; wv2: 5-10%.
# - t0 = c at B 64 x 8k (the planner's rule takes the untransposed kernel there); c faster than t0
#   at B 96 x 2k.
# - the batch-invariant (576, 512) decode: B 1 x 32k ~1.0x (split either way), B 64 x 8k 1.1-1.3x.
# v34 call 1, in order of priority (a section starts only under 450 s):
# A: the block forms' K scaled after the products with a register cap the driver takes
#    (kr, kr2) against the tree (c), the cap alone (r), the product-bias form (k2).
# M: DeepSeek's (576, 512) decode, K chunks of 6, 9, 12 k-steps (w6, w9, w12) against 4 (c);
#    V chunks of 2 and 4 steps (wv2, wv4) against 1; K 6 with V 2 (w6v2); capped at 128 registers
#    without the required size, two work-groups a multiprocessor (wc128: K chunks of 2, wc128k4: of 4).
# B: the planner's untransposed products (c) against the untransposed build (t0).
# I: the batch-invariant mode's cost on the (576, 512) decode.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log
t0=$(date +%s)
tgz() { (cd $OUT && tar czf r.tgz log); }
go() { [ $(( $(date +%s) - t0 )) -lt 450 ] || { echo "skipped: $1"; return 1; }; }
b() { local v=$1 B=$2 N=$3 kv=$4; shift 4
  local f=$OUT/log/$v-$B-$N-$(echo $kv | tr , _)$(echo "$@" | tr -d ' /-').txt; while [ -e "$f" ]; do f=$f.2; done
  timeout 60 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal --kv-dtype $kv --back-to-back 20 --heads-kv 8 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
mla() { local v=$1 B=$2 N=$3; shift 3
  local f=$OUT/log/mla-$v-$B-$N$(echo "$@" | tr -d ' /-').txt; while [ -e "$f" ]; do f=$f.2; done
  timeout 90 ./$v/flashcl-bench --device gpu --no-tuning --quiet --no-peaks --algo flash --mla --heads 128 --seqlen 1 --back-to-back 20 --dtype f16 --batch $B --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s mla $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s ms %s TFLOP/s ", $11, $15}' $f)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in c kr r k2 kr2; do FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt b $v 8 8192 int8,int4; grep -h "Used\|spill" $OUT/log/build-$v.txt | sort | uniq -c; done
tgz
for v in c wc128 wc128k4 w6 w9 w12 wv2 wv4 w6v2; do go M && FLASHCL_BUILD_LOG=$OUT/log/build-mla-$v.txt mla $v 64 8192 && grep -h "Used\|spill" $OUT/log/build-mla-$v.txt | sort | uniq -c; done
tgz
go "M 64" && for v in c wc128 wc128k4 w6 w9 w12 wv2 wv4 w6v2 c wc128; do mla $v 64 8192; done
tgz
go "A 8" && for v in c kr r k2 kr2 c kr kr2; do b $v 8 8192 int8,int4; done
tgz
go "M 8" && for v in c wc128 wc128k4 w6 w9 w12 wv2 wv4 w6v2 c wc128; do mla $v 8 8192; done
tgz
for s in "32 8192" "1 32768"; do go "A $s" && for v in c kr kr2 c; do b $v $s int8,int4; done; done
tgz
go B && b c 64 8192 as-dtype && b t0 64 8192 as-dtype
for s in "96 2048"; do go "B $s" && for v in c t0 c t0; do b $v $s as-dtype; done; done
tgz
for s in "1 32768" "64 8192"; do go "I $s" && { mla c $s; mla c $s --batch-invariant; }; done
./c/flashcl-bench --device gpu --quiet --algo flash --dtype f32 --seqlen 1 --seqlen-k 256 --heads 2 --head-dim 64 > $OUT/log/peaks.txt 2>&1; grep -h peaks $OUT/log/peaks.txt
tgz
echo done $(( $(date +%s) - t0 ))s
