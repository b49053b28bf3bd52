#!/usr/bin/env bash
# The next call, written in v36 before it ran (no device time was left).
# Builds, into a folder git does not track (DIR, two folders under the
# checkout), with this script as DIR/run.sh:
#   TARGETS="flashcl-bench test_batch_invariance" tools/compare/build-variants.sh DIR \
#     n= c128="-DMMA_REG_CAP=128 -cl-nv-maxrregcount=128" p@6b605d9= \
#     q4="-DDECODE_QUAD=1 -DDECODE_K_SCALE_AFTER=0" ku8="-DKV_UNIT=8"
# (p: the tree before the host gave the decode kernel its facts; only its
# flashcl-bench is used).
# Run with carry [DIR, ".deb"] and the recipe's ICD and LD_LIBRARY_PATH.
# About 600 s in all: GUARD (default 450 s) skips what does not fit, for a
# second call (GUARD is checked before each section).
# Expected (written before any call):
# - Q, #46: n is the planner's Q8_0 text (FULL_WIDTHS, no KV_UNIT), which
#   v36 timed only as u0: int8 0.076-0.078 ms at B 8 x 8k against p's
#   0.080-0.081, 0.307-0.311 at B 32 x 8k against 0.327. int4, fp8, f16
#   as v36's n.
# - Q, ku8: Q8_0 with both facts again (`-DKV_UNIT=8`, applied to every
#   form: int4's unit is 8 already, fp8's 16 narrows to 8, so only int8
#   counts), now that the quad's reads test no row end under FULL_WIDTHS
#   (QUAD_WHOLE: v36's pair selected the loaded word at its load and waited
#   there; PoCL: its --check and test_quant_kv pass): 0.068-0.077 ms at
#   B 8 x 8k, at least as fast as n; if so, the
#   planner gives Q8_0 its unit again (host/plan/families.c, kv_unit).
# - Q, c128: the narrow decode kernel at 128 registers, four work-groups a
#   multiprocessor instead of three (ptxas 13.0 here on v36's driver PTX:
#   int8 16 bytes of spill stores, f16 56, int4 112). At the planner's
#   splits (B 8 x 8k: 6, 384 work-groups, which three a multiprocessor
#   already hold) 0.95-1.05x n; with 8 splits (512 work-groups, all
#   resident at four) int8 0.062-0.070 if the warps in flight are what
#   binds it (v32: its own instructions and their latencies), f16 no
#   faster (at the copy peak already). int4's own cap of 168 and this 128
#   both reach its build: the log's registers say which ptxas took.
#   B 8 x 8k at 12 splits and B 32 x 8k at 2: exploratory, nothing expected.
# - Q, q4: int4 read by the quad (8-byte words: 8 loads a step against 56
#   of 2 bytes, more byte permutes and shuffles; its K scaled before the
#   products, as the quad has it): whether int4's loads bind it. On the
#   H200 (v28, before the caps and K scaled after) it was slower, 0.080
#   against 0.072 ms; expected 0.95-1.10x n's int4 (its check on PoCL:
#   0.80 of the error bound at B 2 x 700).
# - W, #51: the wgmma forward (f16, d 128, B 4 x 4096, 16 heads) in tiles
#   of 32 keys (`--tiling 32,384,0,0`: two stages of K and V in 32 KiB,
#   pipe 3 by default; docs/design.md, "The forward on wgmma", not yet
#   timed) against the planner's 64 (pipe 1, 2.19 ms in v36): 2.0-2.4 ms,
#   each load having a tile's products to arrive in, at twice the tiles
#   and barriers; pipes 1 and 2 at 32 keys (FLASHCL_WGMMA_PIPE) for
#   comparison; causal alike. Each 32-key build checked against float64
#   at B 1 x 1024 first (--check).
# - I: test_batch_invariance on the GPU, its bits-differ case comparing
#   where the row's first split ends: passes.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu
mkdir -p $OUT/log; t0=$(date +%s)
go() { [ $(( $(date +%s) - t0 )) -lt ${GUARD:-450} ] || { echo "skipped: $1"; return 1; }; }
b() { local v=$1 B=$2 N=$3; shift 3; local f=$OUT/log/$v-$B-$N$(echo "$@" | tr -d ' -').txt
  while [ -e "$f" ]; do f=$f.2; done
  local ptx=; [ -e $OUT/log/ptx-$v.txt ] || ptx=$OUT/log/ptx-$v.txt
  FLASHCL_BUILD_PTX=$ptx FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt FLASHCL_TUNING_DIR=/tmp/no-tuning \
    timeout 90 ./$v/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash \
    --dtype f16 --heads 32 --seqlen 1 --head-dim 128 --causal \
    --kv-dtype as-dtype,int8,int4,fp8e4m3 --back-to-back 20 --heads-kv 8 --batch $B \
    --seqlen-k $N "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N $*: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go Q && for v in p n ku8 c128; do b $v 8 8192; done
go Q && for v in n c128; do b $v 8 8192 --splits 8; b $v 8 8192 --splits 12; done
go Q && for v in ku8 n; do b $v 32 8192; done
go Q && for v in p n c128; do b $v 32 8192; b $v 1 32768; done
go Q && for v in n c128; do b $v 32 8192 --splits 2; done
go Q && for s in "8 8192" "32 8192"; do b q4 $s; b n $s; done
go Q && for v in p n ku8 c128; do b $v 8 8192; done
w() { local tag=$1; shift; local f=$OUT/log/wgmma-$tag.txt; while [ -e "$f" ]; do f=$f.2; done
  FLASHCL_BUILD_LOG=$OUT/log/build-wgmma-$tag.txt FLASHCL_TUNING_DIR=/tmp/no-tuning timeout 90 \
    ./n/flashcl-bench --device gpu --no-tuning --quiet --no-peaks --algo flash --kernel wgmma \
    --dtype f16 --heads 16 --head-dim 128 "$@" > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s wgmma $tag: $(awk '$1=="fwd"{printf "%s ms %s TFLOP/s err %s ", $11, $15, $(NF-1)}' $f)"; }
go W && for p in "" 1 2; do FLASHCL_WGMMA_PIPE=$p w check32p$p --tiling 32,384,0,0 --batch 1 --seqlen 1024 --check; done
go W && for r in 1 2; do for c in "" --causal; do
  w p64$c --tiling 64,384,0,0 --batch 4 --seqlen 4096 $c
  for p in "" 1 2; do FLASHCL_WGMMA_PIPE=$p w p32$p$c --tiling 32,384,0,0 --batch 4 --seqlen 4096 $c; done
done; done
grep -H "Used\|spill\|^==" $OUT/log/build-*.txt | grep -v merge > $OUT/regs.txt
go I && FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 150 ./n/test_batch_invariance \
  > $OUT/log/test_batch_invariance.txt 2>&1; tail -3 $OUT/log/test_batch_invariance.txt
(cd $OUT && tar czf log.tgz log && rm -rf log)
echo done $(( $(date +%s) - t0 ))s
