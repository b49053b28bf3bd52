#!/usr/bin/env bash
# The call written after v40's, run in v41: what the driver makes of the
# 16-bit MMA forward, whose exponentials v40 showed not to bind. Built
# here, into a folder git ignores, two levels under the checkout, with this
# script as DIR/run.sh:
#   TARGETS=flashcl-bench tools/compare/build-variants.sh DIR n= \
#     nf="-DFCL_NATIVE_EXP=1 -DFCL_EXP_FMA=1" \
#     c128="-DMMA_REG_CAP=128 -cl-nv-maxrregcount=128"
# Run with carry [DIR, ".deb"], NVIDIA's ICD registered and CLBlast/Check
# on the library path. Each X and L run writes the driver's PTX of the
# programs it built (FLASHCL_BUILD_PTX) and its build log (registers,
# spills); back here, `scripts/driver-ptx.sh $OUT/log/ptx-TAG.txt` gives
# each kernel's registers and its key loop's instruction mix (ptxas for
# sm_90, nvdisasm: `pip download nvidia-cuda-nvdisasm` has one).
# Expected (written before any call; f16, B 4 x 4096, hidden 2048, no mask
# / causal, ms, v40's figures for the planned kernel):
# - X, #50, d 64: planned (8 warps x 64 keys; causal 4 x 128) 2.506 /
#   1.356; 8 warps x 128 keys within 3% of it (the tuner kept no 16-bit
#   plan at the large shapes, so no tiling it tried won); two row tiles a
#   warp (M_TILES 2, `--tiling 0,0,0,4`) 1.2-1.45x slower (v21: 0.69-0.84x
#   the speed, 243-255 registers); 4 warps x 128 keys without the mask
#   within 3% (v19: 1.00-1.03x). nf's loop against n's: what made it
#   1.20x slower at d 64 without the mask (a spill, or a loop the driver no
#   longer unrolls).
# - X, added in v41: one work-group of the planned d 64 forward fills a
#   multiprocessor's warps (8 warps, 167 registers under clang's proxy):
#   every barrier drains it, and its warps reach the softmax together while
#   the tensor cores wait. Held to 128 registers (c128: no spill under the
#   proxy) two work-groups share one: 1.10-1.25x faster if that binds, slower
#   if the driver's build spills. 4 warps x 64 keys (three work-groups at
#   d 64, two at d 128, uncapped): the same direction.
# - X, d 128: planned 2.078-2.089 / 1.151-1.152; 8 warps x 128 keys does
#   not fit 47 KiB (refused); M_TILES 2 (Q in local memory) slower.
# - The loop mixes: the planned d 64 loop's instructions other than HMMA
#   against FlashAttention-2's order of 2-3 a product: if the driver's
#   loop holds 8 or more a product, as clang's proxy's does (690 for 64
#   HMMA), the next change is the loop's arithmetic, not its tiles.
# - L, #45: the wide decode kernel's driver loop at (576, 512), B 64 x 8k
#   (0.995 ms in v40).
# - D, #46: the decode sweep with every cache form (v40's ran past 200 s).
cd "$(dirname "$0")" || exit
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
. ../../tools/compare/call-lib.sh
# a run whose programs' PTX and build log are kept beside its table
ptx_row() {
  local tag=$1
  shift
  FLASHCL_BUILD_PTX=$OUT/log/ptx-$tag.txt FLASHCL_BUILD_LOG=$OUT/log/build-$tag.txt row "$tag" "$@"
}
fa=(--device gpu --no-peaks --quiet --no-tuning --algo flash --kernel mma --dtype f16 --batch 4
  --seqlen 4096 --causal both)
go X && for r in 1 2; do
  R=ptx_row  # the PTX of the first round's builds
  [ $r = 2 ] && R=row
  # a second round only while it fits (a call past its limit brings nothing back)
  [ $r = 2 ] && [ $(($(date +%s) - t0)) -gt "${ROUND2_BY:-250}" ] && { echo "skipped: X round 2"; break; }
  for t in 0,0,0,0 128,256,0,0 0,0,0,4 128,128,0,0; do
    $R X-n-d64-${t//,/_} ./n/flashcl-bench "${fa[@]}" --heads 32 --head-dim 64 --tiling $t
  done
  $R X-nf-d64 ./nf/flashcl-bench "${fa[@]}" --heads 32 --head-dim 64
  # more work-groups a multiprocessor: the planned tiles held to 128
  # registers (two), and 4 warps x 64 keys (three at d 64, two at d 128)
  $R X-c128-d64 ./c128/flashcl-bench "${fa[@]}" --heads 32 --head-dim 64
  $R X-n-d64-64_128_0_0 ./n/flashcl-bench "${fa[@]}" --heads 32 --head-dim 64 --tiling 64,128,0,0
  $R X-n-d128-64_128_0_0 ./n/flashcl-bench "${fa[@]}" --heads 16 --head-dim 128 --tiling 64,128,0,0
  for t in 0,0,0,0 0,0,0,4; do
    $R X-n-d128-${t//,/_} ./n/flashcl-bench "${fa[@]}" --heads 16 --head-dim 128 --tiling $t
  done
  # the backward's programs as planned (fwd+bwd d 128: 0.70-0.92 of FA2)
  $R X-n-fb-d128 ./n/flashcl-bench "${fa[@]}" --heads 16 --head-dim 128 --pass fwdbwd
done
go L && ptx_row L-wide ./n/flashcl-bench --device gpu --no-peaks --quiet --no-tuning --algo flash \
  --mla --heads 128 --seqlen 1 --back-to-back 20 --dtype f16 --batch 64 --seqlen-k 8192
go D && ROW_LIMIT=400 row D-sweep ./n/flashcl-bench --device gpu --quiet --no-tuning \
  --sweep-decode --algo flash --dtype f16 --kv-dtype as-dtype,int8,int4,fp8e4m3,fp8e5m2 \
  --back-to-back 20
pack
echo "done $(($(date +%s) - t0))s"
