#!/usr/bin/env bash
# flashcl's kernels under the Oclgrind OpenCL simulator, `oclgrind
# --data-races --check-api`: every global and local access of every
# work-item checked against its buffer, every pair of unsynchronised
# accesses to one address reported as a race, every barrier checked for
# divergence and every API call's status checked. These are the bugs a real
# device, PoCL included, lets pass when the schedule or the memory layout
# happens to be kind. Small odd shapes (Nq 40, Nk 70: partial query and key
# tiles) with GQA (4 heads on 2 KV heads, or 2 on 1), the flash forward and
# backward (--pass fwdbwd) of every storage type in the SIMT and MMA kernel
# families (mma emulated off NVIDIA), causal and not (both in two SIMT, one
# CPU and one decode run, else one mask a run: a race depends on the
# work-items' layout, which the mask does not change), d 24, 72 and 128 (rows
# split over work-items, eight a row in one run), 2-byte local tiles (forced for simt f16, the
# planner's choice on this device in the other 16-bit runs), a forward in
# three key splits and their merge (--splits 3), the decode kernel (a few
# packed rows, in ten splits of 600 keys, whose merge shares a row's parts
# between two lane groups, f16; and on a paged cache of 64-token pages in a
# shuffled order, f32), the decode kernel on (emulated) matrix instructions
# (6 packed rows, split, paged, bf16), the forward on (emulated) wgmma (f16,
# d 40, causal and not), the SIMT forward on the paged cache,
# the MMA forward's 64-key tiles spanning pages of 16 (rows whole per
# work-item step: a lookup per 16 keys) and of 48 (d 72: a lookup per row
# and chunk), with a partial last page, the MMA forward with two V tiles
# (--v-stages 2: the next tile's V fetched a tile ahead into the stage the
# last tile left; Nk 150, three tiles, so a stage is refilled), the CPU
# kernels (d 72, f16, causal and not, both passes; and the forward of packed rows,
# split, paged, bf16), and the naive
# algorithm (its softmax kernels and CLBlast's GEMMs; on the paged cache,
# its gather). Attention sinks: the SIMT forward's row end with them and
# the backward's dsinks kernel (f32), and the decode kernel's split merge
# adding them (five splits). A value head size of its own (head_dim_v): the
# SIMT kernels at d 40 with V 24 wide (f32, four work-items a row), the
# CPU kernels at d 24 with V 40 wide (bf16), both passes.
#
# A run fails when the bench exits non-zero; when Oclgrind writes anything
# (its reports and API errors go to stderr, and the bench is --quiet, so
# any stderr at all counts); when a result is not "ok" on the Oclgrind
# device; or when it is wrong. The bench's exit status
# does not cover --check (it only reports the errors), so every result's
# error ratio must be under 8, as in tests/bench-general.sh. A naive run's
# own ratio is 1 by construction, so its error is judged by the yardstick of
# the flash run of the same shape (the host emulation of the naive
# algorithm's rounding, or the bench's floor).
#
# Not run: the merge in the split launch (fcl_plan.merge LAST_SPLIT), which
# Oclgrind's decode device does not plan: OpenCL 1.2 orders nothing between
# work-groups, so Oclgrind reports its loads of the other splits' states as
# races (docs/design.md, "Split-KV"); test_decode runs it on PoCL.
# Not run: the naive algorithm in f16. Oclgrind 21.10's device does not
# report cl_khr_fp16 and the naive f16 path needs CLBlast's half GEMMs, so
# the bench reports it FCL_ERROR_UNSUPPORTED; flash f16 runs, since its
# storage needs no half arithmetic. Not used: --uninitialized, which aborts
# on LLVM's freeze instruction in Oclgrind 21.10. To keep the whole test
# within 4 minutes on 2 cores, the mma runs, Oclgrind's slowest (f32's
# 3xTF32 products above all), take one mask each and 2 heads on 1 (1 head at
# d 128), and at d 24 and 72 work-groups of 64 (--tiling 0,64,0,0: two
# warps, two query tiles; faster there, slower at d 128). The naive runs
# (CLBlast's GEMMs, simulated in seconds per head) take one mask and the
# shape of an mma run with few heads.
# Usage: tests/oclgrind.sh path/to/flashcl-bench
set -euo pipefail
# shellcheck source=tests/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"

command -v oclgrind > /dev/null ||
  { echo "oclgrind: the oclgrind program is not installed"; exit 1; }

# Under oclgrind the bench sees Oclgrind's platform only; --device names it
# so that FLASHCL_DEVICE (or FLASHCL_TEST_DEVICE, a PoCL device) cannot.
common=(--device Oclgrind --pass fwdbwd --seqlen 40 --seqlen-k 70 --check --no-peaks --quiet
        --warmup 0 --repeat 1)
gqa=(--heads 4 --heads-kv 2)
# Oclgrind's reports to stderr, not to a log file named in the environment.
unset OCLGRIND_LOG
# The first lines of Oclgrind's reports (src/core, src/plugins, src/runtime):
# races, invalid accesses, divergence, API errors, fatal errors.
marks='data race at|Invalid (read|write|memory|wait)|Unaligned address|Work-group divergence'
marks+='|Work-item finished without|OpenCL runtime error detected|OCLGRIND FATAL ERROR'
marks+='|^Oclgrind|[Uu]ninitiali[sz]ed'
# name | options | results wanted | tile bytes wanted in the plans (or -)
runs=(
  "simt-f32-d24|--algo flash --kernel simt --dtype f32 ${gqa[*]} --head-dim 24 --causal|1|-"
  "simt-f16-d72-tile2|--algo flash --kernel simt --dtype f16 ${gqa[*]} --head-dim 72 --causal both --tiling 0,0,0,0,2|2|2"
  "simt-bf16-d128|--algo flash --kernel simt --dtype bf16 --heads 2 --heads-kv 1 --head-dim 128 --causal|1|-"
  "simt-f32-d72-rows8|--algo flash --kernel simt --dtype f32 ${gqa[*]} --head-dim 72 --causal --tiling 16,64,8,1|1|-"
  "simt-f16-d24-split3|--algo flash --kernel simt --dtype f16 ${gqa[*]} --head-dim 24 --causal --splits 3|1|-"
  "mma-f32-d24|--algo flash --kernel mma --dtype f32 --heads 2 --heads-kv 1 --head-dim 24 --causal --tiling 0,64,0,0|1|-"
  "mma-f16-d72|--algo flash --kernel mma --dtype f16 --heads 2 --heads-kv 1 --head-dim 72 --causal --tiling 0,64,0,0|1|-"
  "mma-bf16-d128|--algo flash --kernel mma --dtype bf16 --heads 1 --head-dim 128|1|-"
  "naive-f32-d24|--algo naive --dtype f32 --heads 2 --heads-kv 1 --head-dim 24 --causal|1|-"
  "naive-bf16-d128|--algo naive --dtype bf16 --heads 1 --head-dim 128|1|-"
  "decode-f16-d72-split10|--algo flash --kernel decode --dtype f16 --pass fwd --seqlen 2 --seqlen-k 600 --heads 4 --heads-kv 1 --head-dim 72 --causal both --splits 10|2|-"
  "decode-f32-d24-paged|--algo flash --kernel decode --dtype f32 --pass fwd --seqlen 1 ${gqa[*]} --head-dim 24 --causal --paged 64 --splits 2|1|-"
  "wgmma-f16-d40|--algo flash --kernel wgmma --dtype f16 --pass fwd ${gqa[*]} --head-dim 40 --causal both|2|-"
  "decode-mma-bf16-d40-paged16|--algo flash --kernel decode-mma --dtype bf16 --pass fwd --seqlen 3 ${gqa[*]} --head-dim 40 --causal --paged 16 --splits 2|1|-"
  "mma-bf16-d64-paged16|--algo flash --kernel mma --dtype bf16 --pass fwd --heads 2 --heads-kv 1 --head-dim 64 --causal --paged 16 --tiling 64,64,0,0|1|-"
  "mma-f16-d64-vstages2|--algo flash --kernel mma --dtype f16 --pass fwd --heads 2 --heads-kv 1 --head-dim 64 --causal both --seqlen-k 150 --tiling 64,64,0,0 --v-stages 2|2|-"
  "mma-f16-d72-paged48|--algo flash --kernel mma --dtype f16 --pass fwd --heads 2 --heads-kv 1 --head-dim 72 --causal --paged 48 --tiling 64,64,0,0|1|-"
  "simt-bf16-d24-paged48|--algo flash --kernel simt --dtype bf16 --pass fwd --seqlen 3 ${gqa[*]} --head-dim 24 --causal both --paged 48|2|-"
  "cpu-f16-d72|--algo flash --kernel cpu --dtype f16 ${gqa[*]} --head-dim 72 --causal both|2|-"
  "cpu-bf16-d24-paged-split2|--algo flash --kernel cpu --dtype bf16 --pass fwd --seqlen 3 ${gqa[*]} --head-dim 24 --causal --paged 64 --splits 2|1|-"
  "simt-f32-d24-sinks|--algo flash --kernel simt --dtype f32 ${gqa[*]} --head-dim 24 --causal --sinks|1|-"
  "decode-f32-d24-sinks-split5|--algo flash --kernel decode --dtype f32 --pass fwd --seqlen 2 --seqlen-k 300 --heads 4 --heads-kv 1 --head-dim 24 --causal --sinks-value 2 --splits 5|1|-"
  "simt-f32-d40-dv24-lanes4|--algo flash --kernel simt --dtype f32 ${gqa[*]} --head-dim 40 --head-dim-v 24 --causal --tiling 16,64,4,1|1|-"
  "cpu-bf16-d24-dv40|--algo flash --kernel cpu --dtype bf16 ${gqa[*]} --head-dim 24 --head-dim-v 40|1|-"
  "naive-f32-d24-paged|--algo naive --dtype f32 --pass fwd --seqlen 1 ${gqa[*]} --head-dim 24 --causal --paged 64|1|-"
)

# The flash runs' yardsticks by shape (max_abs_err / err_ratio: the error
# of the naive algorithm as the host emulates it, or the bench's floor).
declare -A yardstick
key() {
  local f k=''
  for f in dtype heads heads_kv seqlen_q seqlen_k head_dim causal; do k+="$(field "$f" "$1"),"; done
  echo "$k"
}

runs_done=0
t0=$EPOCHREALTIME
for r in "${runs[@]}"; do
  IFS='|' read -r name opts want_results want_tile <<<"$r"
  json="$tmp/$name.json" err="$tmp/$name.err"
  before=$failures
  start=$EPOCHREALTIME
  rc=0
  # shellcheck disable=SC2086  # opts is a list of words
  oclgrind --data-races --check-api "$bench" "${common[@]}" $opts --json "$json" \
    > "$tmp/out.txt" 2> "$err" || rc=$?
  secs="$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
  runs_done=$((runs_done + 1))
  [ "$rc" -eq 0 ] || { cat "$tmp/out.txt"; fail "$name: exit status $rc"; }
  if [ -s "$err" ]; then
    if grep -qE -- "$marks" "$err"; then
      fail "$name: Oclgrind reported $(grep -cE -- "$marks" "$err") problem(s):"
      grep -E -A12 -- "$marks" "$err" | head -80 || true
    else
      fail "$name: unexpected output on stderr:"
      head -40 "$err" || true
    fi
  fi
  results=0 worst=- tiles=-
  if [ -f "$json" ]; then
    while IFS= read -r line; do
      results=$((results + 1))
      what="$name causal=$(field causal "$line")"
      [ "$(field device "$line")" = '"Oclgrind Simulator"' ] ||
        fail "$what: ran on $(field device "$line"), not Oclgrind"
      status="$(field status "$line")"
      [ "$status" = '"ok"' ] || { fail "$what: status $status $(field message "$line")"; continue; }
      if [ "$(field algo "$line")" = '"flash"' ]; then
        tiles="$(field tile_elem_size "$line")"
        [ "$want_tile" = - ] || [ "$tiles" = "$want_tile" ] ||
          fail "$what: plan tile_elem_size $tiles, want $want_tile"
      fi
      err_abs="$(field max_abs_err "$line")" ratio="$(field err_ratio "$line")"
      if [ "$err_abs" = null ] || [ "$ratio" = null ]; then
        fail "$what: not checked"
        continue
      fi
      k="$(key "$line")"
      if [ "$(field algo "$line")" = '"flash"' ]; then
        yardstick[$k]="$(awk -v e="$err_abs" -v r="$ratio" \
          'BEGIN { printf "%.9g", (r > 0 ? e / r : 0) }')"
      elif [ -z "${yardstick[$k]:-}" ]; then
        fail "$what: no flash run of this shape to judge the naive result by"
        continue
      else
        ratio="$(awk -v e="$err_abs" -v y="${yardstick[$k]}" \
          'BEGIN { printf "%.6g", (y > 0 ? e / y : (e > 0 ? 1e30 : 0)) }')"
      fi
      awk -v r="$ratio" 'BEGIN { exit !(r < 8) }' ||
        fail "$what: error $err_abs, ratio $ratio (want < 8)"
      worst="$(awk -v r="$ratio" -v w="$worst" 'BEGIN { print (w == "-" || r > w + 0 ? r : w) }')"
    done < <(grep '"algo": ' "$json")
  fi
  [ "$results" -eq "$want_results" ] || fail "$name: $results results, want $want_results"
  [ "$failures" -eq "$before" ] && verdict=ok || verdict=FAILED
  echo "oclgrind: $name ($opts) ${secs} s, tiles ${tiles} B, error ratio $worst, $verdict"
done
total="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')"
echo "oclgrind: $runs_done runs in ${total} s, $failures failures"
[ "$failures" -eq 0 ]
