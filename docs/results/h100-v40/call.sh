#!/usr/bin/env bash
# v40's call: v39's (written, not run: no machine came; its README and
# history point here) with section L added. Built here, into a folder git does not track, two levels
# under the checkout, with this script as DIR/run.sh:
#   TARGETS="flashcl-bench test_quant_kv test_decode test_batch_invariance test_mla test_wgmma_fwd" \
#     tools/compare/build-variants.sh DIR n= rs="-DWGMMA_REG_STAGE=1"
#   tools/compare/build-variants.sh DIR n14="-DWGMMA_ELIDE=14" \
#     rs14="-DWGMMA_REG_STAGE=1 -DWGMMA_ELIDE=14" ne="-DFCL_NATIVE_EXP=1"
#   TARGETS="flashcl-bench test_mma test_half test_backward" \
#     tools/compare/build-variants.sh DIR nf="-DFCL_NATIVE_EXP=1 -DFCL_EXP_FMA=1"
# A second call runs what the first left: ONLY="F C D A" (call-lib.sh).
# Run with carry [DIR, ".deb"], NVIDIA's ICD registered and CLBlast/Check
# on the library path; python3 with torch + CUDA for section A. About 600
# s; GUARD (default 450) leaves what would start late to a second call.
# Expected (written before any call; f16 queries, Hq/Hkv 32/8, d 128,
# causal, --back-to-back 20, ms):
# - P, #46: the planner's own build of v38's two changes (Q8_0's K scaled
#   after, fullest waves) gives what the hinted runs gave: int8 0.066-0.067
#   / 0.222 / 0.436 at B 8 / 32 / 64 x 8k, int4 0.059-0.060 / 0.194 /
#   0.377; f16 as before (0.097-0.100 / 0.343-0.353 / 0.686).
# - F: fp8, which takes the fullest waves' rule unmeasured, at the
#   planner's 3 splits against 1 at B 32 and 64 x 8k: 0.90-0.97x the
#   unsplit time (v37: e4m3 0.190-0.197 at B 32 x 8k unsplit), as int8.
# - C: #46's table at B 8 x 8k with --check on this tree (errors as v37's:
#   3-4e-05 against the dequantised cache).
# - D: the decode sweep with every cache form, the table #46 asks for.
# - T: test_quant_kv 22/22, test_decode 33/33, test_batch_invariance
#   48/48, test_mla 21/21 on the GPU.
# - W, #51: the wgmma forward with the next K and V tiles held in
#   registers (rs, WGMMA_REG_STAGE, pipe 1) at two warpgroups, against the
#   same form without (n) and the planner's three warpgroups (f16 d 128,
#   B 4 x 4096, 16 heads, both masks). clang's proxy: 252 registers at two
#   warpgroups (180 without), a key loop of 886 instructions (668).
#   Expected: rs 2.0-2.5 ms against n's two-warpgroup 2.6-2.9 and the
#   planner's 2.19; test_wgmma_fwd 49/49 with rs on the GPU. Faster than
#   the planner's form by 5%: the plan takes it (and the tiles' loads
#   alone, WGMMA_ELIDE 14, are timed again with it).
# - A: #50's f32 rows on this tree with the H100's database (rows of
#   6125de0 now): forward 1.24-1.42 at d 64, 0.71-0.80 at d 128 against
#   EFFICIENT; fwd+bwd 0.90-0.96 and 0.68-0.81, each within 5%.
# Added in v40: L, #45: the wide decode kernel at (576, 512) with tiles of
#   64 keys (a hint) against 128. V's reads take again the lines K's just
#   read; a tile's K is 144 KiB a work-group, two a multiprocessor, more
#   than L1 holds beside 95 KiB of local memory, so V's come from L2 (the
#   4 blocks of 32 of the 128 heads: each tile read 4 times from L2, about
#   4.6 TB/s at 147 TFLOP/s). At 64 both work-groups' K (144 KiB) may stay
#   in L1. Expected: if L2's bandwidth binds, 1.1-1.3x at B 64 x 8k
#   (0.99 ms); if latency does, slower (twice the barriers a key).
# Added in v39 before the call:
# - E, #50: the MMA forward's online softmax with native_exp2 (ne) and
#   with 2^(s x - m x) as one fused multiply-add (nf), against n, f16 and
#   bf16, B 4 x 4096, both masks. v02 found native_exp2 changed nothing in
#   the SIMT kernel; in the MMA forward at d 64 the exponentials are a
#   third of the tensor cores' time a tile, so if exp2 is more than one
#   MUFU instruction on this driver: ne 3-8% faster at d 64, 1-4% at d
#   128; nf 1-2% more. Equal within 1%: exp2 is already one instruction.
#   nf's test_mma and test_half pass on the GPU (errors within the rules).
# - M: int8 at B 8 x 8k (78% of the copy peak, v38) with the merge in the
#   split launch against the merge kernel: within 3% either way.
# - W: the loads alone with two tiles in flight (rs14) against one (n14),
#   two warpgroups: rs14 under n14's time if the loads wait on latency.
cd "$(dirname "$0")" || exit
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
. ../../tools/compare/call-lib.sh
dec=(./n/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --dtype f16
  --heads 32 --heads-kv 8 --seqlen 1 --head-dim 128 --causal --back-to-back 20)
all=as-dtype,int8,int4,fp8e4m3,fp8e5m2
# E, #50: the online softmax's exponentials by native_exp2 (ne), and that
# with 2^(s x - m x) as one fused multiply-add (nf), against the tree (n);
# f16/bf16, B 4 x 4096, hidden 2048, both masks, alternated twice
fa=(--device gpu --no-peaks --quiet --no-tuning --algo flash --batch 4 --seqlen 4096 --causal both)
go E && for r in 1 2; do for v in n ne nf; do
  row E-$v-d64 ./$v/flashcl-bench "${fa[@]}" --dtype f16,bf16 --heads 32 --head-dim 64
  row E-$v-d128 ./$v/flashcl-bench "${fa[@]}" --dtype f16,bf16 --heads 16 --head-dim 128
done; done
go E && for v in n nf; do
  row E-$v-fwdbwd ./$v/flashcl-bench "${fa[@]}" --pass fwdbwd --dtype f16 --heads 16 --head-dim 128
done
for t in n/test_quant_kv n/test_decode n/test_batch_invariance n/test_mla nf/test_mma nf/test_half \
  rs/test_wgmma_fwd; do
  go T && (log=$OUT/log/${t/\//-}.txt
    FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 240 ./$t > "$log" 2>&1
    rc=$?  # before any expansion below runs a command
    echo "$(($(date +%s) - t0))s $t rc=$rc $(grep -E '^[0-9]+%' "$log" | tail -1)") &
done
wait
wg=(--device gpu --no-peaks --quiet --no-tuning --algo flash --kernel wgmma --pass fwd --dtype f16
  --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal both)
go W && for r in 1 2; do
  row W-n-planned ./n/flashcl-bench "${wg[@]}"
  row W-nf-planned ./nf/flashcl-bench "${wg[@]}"
  for v in n rs; do FLASHCL_WGMMA_PIPE=1 row W-$v-2wg ./$v/flashcl-bench "${wg[@]}" --tiling 64,256,0,0; done
done
# the loads alone (WGMMA_ELIDE 14) at two warpgroups, pipe 1: one tile of
# K and V in flight (n14) against two (rs14)
go W && for v in n14 rs14; do
  FLASHCL_WGMMA_PIPE=1 row W-$v-2wg ./$v/flashcl-bench "${wg[@]}" --tiling 64,256,0,0; done
# L, #45: DeepSeek's latent attention decode, tiles of 128 keys (the
# planner's) against 64 (a hint), alternated twice
mla=(./n/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash --mla --heads 128
  --seqlen 1 --back-to-back 20 --dtype f16)
go L && for r in 1 2; do for bk in 0 64; do
  row L-bk$bk-B64 "${mla[@]}" --batch 64 --seqlen-k 8192 --tiling $bk,0,0,0
  row L-bk$bk-B8 "${mla[@]}" --batch 8 --seqlen-k 8192 --tiling $bk,0,0,0
  row L-bk$bk-B1-32k "${mla[@]}" --batch 1 --seqlen-k 32768 --tiling $bk,0,0,0
done; done
go P && for B in 8 32 64 8; do
  row P-B$B "${dec[@]}" --kv-dtype $all --batch $B --seqlen-k 8192; done
go P && row P-B1-32k "${dec[@]}" --kv-dtype $all --batch 1 --seqlen-k 32768
# M: B 8 x 8k, where int8 reads at 78% of the copy peak (v38): the merge
# in the split launch against the kernel, and the copy peak in the run.
go M && for m in kernel last-split; do
  row M-B8-$m "${dec[@]}" --kv-dtype as-dtype,int8,int4 --batch 8 --seqlen-k 8192 --merge $m; done
peaks=(); for a in "${dec[@]}"; do [ "$a" = --no-peaks ] || peaks+=("$a"); done
go M && row M-B8-peaks "${peaks[@]}" --kv-dtype as-dtype,int8,int4 --batch 8 --seqlen-k 8192
go F && for B in 32 64; do for S in 0 1; do
  row F-B$B-s$S "${dec[@]}" --kv-dtype fp8e4m3,fp8e5m2 --batch $B --seqlen-k 8192 --splits $S
done; done
go C && row C-B8 "${dec[@]}" --kv-dtype $all --batch 8 --seqlen-k 8192 --check
go D && ROW_LIMIT=200 row D-sweep ./n/flashcl-bench --device gpu --quiet --no-tuning \
  --sweep-decode --algo flash --dtype f16 --kv-dtype $all --back-to-back 20
for p in fwd fwdbwd; do
  go "A f32 $p" && FLASHCL_TUNING_DIR=$PWD/../../tuning FLASHCL_BENCH=$PWD/n/flashcl-bench \
    timeout 300 ../../tools/compare/run.sh $OUT/$p-f32 --pass $p --dtype f32 \
    --backend efficient --algo flash > $OUT/log/A-$p-f32.txt 2>&1
  echo "$(($(date +%s) - t0))s A f32 $p: $(grep -c '^|' $OUT/$p-f32/table.md 2>/dev/null) table rows"
done
pack
echo "done $(($(date +%s) - t0))s"
