#!/usr/bin/env bash
# v38's first call: v37's next call (docs/results/h100-v37/next-call-not-run.sh)
# with W added and S in one round.
# Build here, into a folder git does not track, with this script as DIR/run.sh:
#   TARGETS="flashcl-bench" tools/compare/build-variants.sh DIR n= ks@ks-q8=
# (ks-q8: this tree with ks-q8.patch applied and committed, the planner
# scaling Q8_0's K after the products as it does Q4_0's, capped at 168).
# Run with carry [DIR, ".deb"], NVIDIA's ICD registered and CLBlast/Check
# on the library path; needs python3 with torch + CUDA for section A.
# About 600 s: GUARD (default 450 s) skips a section that would start
# late, for a second call (A's rows each take one tools/compare/run.sh).
# Expected (written before any call):
# - S, #46: the split count around the planner's for Q8_0 and Q4_0 now that
#   int8 takes 0.069 ms at B 8 x 8k (the planner splits a quantized cache
#   for three work-groups a multiprocessor: 6 at B 8 x 8k, 1 at B 64 x 8k).
#   Expected: the planner's within 3% of the best of 4, 5, 6, 8 at B 8 x
#   8k and of 1, 2 at B 64 x 8k; a count more than 5% faster moves the
#   quantized split rule (host/plan/plan_decode.c).
# - K, #46: ks, Q8_0's K scaled after the products now that its unit is
#   told (clang's NVPTX proxy: key loop 700 -> 625 instructions, 166 -> 161
#   registers, no load read within 16 instructions; before the unit was
#   told this form lost, 0.092-0.099 ms against 0.080 in v35): int8
#   0.062-0.069 ms at B 8 x 8k against n's 0.069; if faster at B 8 and 32
#   x 8k, the planner takes it (the patch, with test_plan's
#   decode_mma_caps_registers_where_it_paid, which expects Q8_0 without it).
#   PoCL, ks: test_quant_kv 22/22; `--kernel decode-mma --kv-dtype int8
#   --head-dim 128 --check` at B 2 x 700, 0.48 of the error bound.
# - A, #50: the 16-bit sweeps on this tree (its MMA kernels' text changed
#   since ad9eccc, which the status table's 16-bit rows are of: the
#   forward's setup through blocks.cl, MMA_KERNEL, the backward's row
#   stats), flashcl and FlashAttention-2 (PyTorch's FLASH) in one run
#   each: f16 forward 0.72-0.92 at every shape as at ad9eccc, bf16 alike,
#   fwd+bwd 0.69-1.03; any row outside ad9eccc's range by more than 5% is
#   a change this tree made and is looked for before anything else.
# - W, #51 (written before the call): the wgmma forward's loads alone
#   (e14: -DWGMMA_ELIDE=14, S, softmax and P V left out) at f16 d 128
#   B 4 x 4096, 16 heads, beside everything (n) and everything but the
#   loads (e1). v29: 2.19 ms with everything, 1.33 without the loads.
#   Expected: 1.5-2.0 ms with the loads alone. At 1.26 ms or more
#   (FlashAttention-2's 1.637 / 1.3) the loads alone, at one K and one V
#   tile in flight, rule #51's 1.3x out for this schedule.
cd "$(dirname "$0")"
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
mkdir -p $OUT/log; t0=$(date +%s)
go() { [ $(( $(date +%s) - t0 )) -lt ${GUARD:-450} ] || { echo "skipped: $1"; return 1; }; }
k() { local v=$1 B=$2 N=$3 f=$OUT/log/k-$1-$2-$3.txt; while [ -e "$f" ]; do f=$f.2; done
  FLASHCL_BUILD_LOG=$OUT/log/build-$v.txt timeout 90 ./$v/flashcl-bench --device gpu --no-peaks \
    --quiet --no-tuning --algo flash --dtype f16 --heads 32 --heads-kv 8 --seqlen 1 --head-dim 128 \
    --causal --kv-dtype as-dtype,int8 --back-to-back 20 --batch $B --seqlen-k $N > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s $v B$B N$N: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go K && for r in 1 2; do for v in ks n; do k $v 8 8192; k $v 32 8192; done; done
go K && for v in ks n; do k $v 1 32768; k $v 64 8192; done
# W, #51: the wgmma forward's loads alone (e14: S, softmax and P V left
# out), beside everything (n) and everything but the loads (e1), f16 d 128
# B 4 x 4096, 16 heads, both masks, two rounds.
w() { local v=$1 r=$2 f=$OUT/log/w-$1-$2.txt
  FLASHCL_BUILD_LOG=$OUT/log/build-w-$v.txt timeout 90 ./$v/flashcl-bench --device gpu --no-peaks \
    --quiet --no-tuning --algo flash --kernel wgmma --pass fwd --dtype f16 --batch 4 --heads 16 \
    --seqlen 4096 --head-dim 128 --causal both > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s W $v r$r: $(awk '$1=="fwd"{printf "%s ms %s TF/s  ", $11, $15}' $f)"; }
go W && for r in 1; do for v in n e14 e1; do w $v $r; done; done
b() { local B=$1 N=$2 S=$3 f=$OUT/log/s-$1-$2-$3.txt
  timeout 90 ./n/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash \
    --dtype f16 --heads 32 --heads-kv 8 --seqlen 1 --head-dim 128 --causal \
    --kv-dtype as-dtype,int8,int4 --back-to-back 20 --batch $B --seqlen-k $N --splits $S > $f 2>&1
  echo "$(( $(date +%s) - t0 ))s B$B N$N splits $S: $(awk '$1=="fwd"{printf "%s=%s ", $2, $11}' $f)"; }
go S && for r in 1; do for S in 0 4 5 6 8; do b 8 8192 $S; done; done
go S && for S in 0 1 2; do b 64 8192 $S; done
for spec in "fwd f16" "fwd bf16" "fwdbwd f16" "fwdbwd bf16"; do
  set -- $spec
  go "A $1 $2" && FLASHCL_BENCH=$PWD/n/flashcl-bench timeout 300 ../../tools/compare/run.sh \
    $OUT/$1-$2 --pass $1 --dtype $2 --backend flash --algo flash > $OUT/log/A-$1-$2.txt 2>&1
  [ -e $OUT/$1-$2/table.md ] && echo "$(( $(date +%s) - t0 ))s A $1 $2: $(grep -c '^|' $OUT/$1-$2/table.md) table rows"
done
(cd $OUT && tar czf log.tgz log && rm -rf log)
echo done $(( $(date +%s) - t0 ))s
