#!/usr/bin/env bash
# v41's third call: the MMA forward with a second V tile (fcl_plan.v_stages
# 2, `--v-stages 2`) against one, in the same binary, and its tests on the
# driver. Built here as DIR/t (`TARGETS="flashcl-bench test_mma test_half"
# tools/compare/build-variants.sh DIR t=`), this script as DIR/run.sh, DIR
# two levels under the checkout; run with carry [DIR, ".deb"], NVIDIA's ICD
# registered and CLBlast/Check on the library path.
# Expected (written before the call; f16, B 4 x 4096, hidden 2048, ms):
# - The first call showed the planned d 64 forward bound by its warps'
#   waits, not its instructions: 128 registers, two work-groups a
#   multiprocessor, 2.51 / 1.35 ms; at 138 registers (one work-group) 1.2x
#   slower, at 4 warps (three) 1.10x slower. One wait each tile is V's:
#   fetched as the tile starts, it must land during S = Q K^T, 32 products
#   a warp. Two V tiles fetch it a tile earlier: 1.05-1.15x faster at d 64
#   without the mask if that wait binds (and the driver keeps 128
#   registers), the same if not. Causal at 8 warps x 64 keys likewise;
#   the planned causal 4 warps x 128 keys drop to 64 keys with two V tiles.
# - d 128: two V tiles do not fit 64-key tiles (52 KiB), so 32 keys: against
#   one V tile at 64 keys (planned) within 5% either way, and against one
#   at 32 keys faster.
# - test_mma (its new case: two V tiles give one's bits) and test_half pass.
# - R: the f16 forward sweep against FlashAttention-2 (PyTorch's FLASH) with
#   one V tile and with two (a hint on every shape: d 128 at 32 keys,
#   causal d 64 at 4 warps x 64): the d 64 rows move as V above; the
#   ratios (v38: 0.72-0.87 no mask, 0.74-1.00 causal at d 64).
cd "$(dirname "$0")" || exit
export FLASHCL_DEVICE=gpu FLASHCL_TUNING_DIR=/tmp/no-tuning
. ../../tools/compare/call-lib.sh
fa=(--device gpu --no-peaks --quiet --no-tuning --algo flash --kernel mma --batch 4
  --seqlen 4096)
go V && for r in 1 2; do
  # a second round only while it fits (a call past its limit brings nothing back)
  [ $r = 2 ] && [ $(($(date +%s) - t0)) -gt "${ROUND2_BY:-150}" ] && { echo "skipped: V round 2"; break; }
  for dt in ${DTYPES:-f16 bf16}; do
    for vs in 1 2; do
      row V-d64-$dt-v$vs ./t/flashcl-bench "${fa[@]}" --dtype $dt --causal both --heads 32 \
        --head-dim 64 --v-stages $vs
      row V-d64-8w-causal-$dt-v$vs ./t/flashcl-bench "${fa[@]}" --dtype $dt --causal \
        --heads 32 --head-dim 64 --tiling 64,256,0,0 --v-stages $vs
      row V-d128-$dt-v$vs ./t/flashcl-bench "${fa[@]}" --dtype $dt --causal both --heads 16 \
        --head-dim 128 --v-stages $vs
    done
    row V-d128-32k-$dt-v1 ./t/flashcl-bench "${fa[@]}" --dtype $dt --causal both --heads 16 \
      --head-dim 128 --tiling 32,0,0,0 --v-stages 1
  done
done
# the driver's registers of each two-stage build, and its errors against float64
go C && for d in 64 128; do
  FLASHCL_BUILD_LOG=$OUT/log/build-C-d$d.txt row C-check-d$d ./t/flashcl-bench --device gpu \
    --no-peaks --quiet --no-tuning --algo flash --kernel mma --dtype f16,bf16 --batch 2 \
    --seqlen 1000 --seqlen-k 1500 --causal both --heads 8 --heads-kv 2 --head-dim $d \
    --v-stages 2 --check
done
for t in ${TESTS:-test_mma test_half}; do
  go T && (log=$OUT/log/$t.txt
    FLASHCL_TEST_DEVICE=gpu CK_DEFAULT_TIMEOUT=300 timeout 240 ./t/$t > "$log" 2>&1
    rc=$?  # before any expansion below runs a command
    echo "$(($(date +%s) - t0))s $t rc=$rc $(grep -E '^[0-9]+%' "$log" | tail -1)") &
done
wait
# the f16 forward sweep against FlashAttention-2, one V tile and two, one run each
for vs in 2 1; do
  [ $(($(date +%s) - t0)) -lt "${R_BY:-300}" ] && go R && FLASHCL_BENCH=$PWD/t/flashcl-bench ../../tools/compare/run.sh "$OUT/R-f16-fwd-v$vs" \
    --pass fwd --dtype f16 --backend flash --algo flash --no-tuning --v-stages $vs \
    > "$OUT/log/R-v$vs.txt" 2>&1 && echo "$(($(date +%s) - t0))s R-v$vs: $(grep -c '|' "$OUT/R-f16-fwd-v$vs/table.md") table lines"
done
pack
