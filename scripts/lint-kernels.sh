#!/usr/bin/env bash
# Compiles every kernel file with clang over a matrix of its -D variants,
# warnings as errors: what PoCL or a GPU driver would only mention in a
# build log nobody reads (an unsequenced I/O count, a constant condition).
# Usage: scripts/lint-kernels.sh [clang] [flashcl-info]
# Each program's text is the one the library compiles (flashcl-info
# --program-text: the shared texts, the file's prelude, the file).
set -euo pipefail
cd "$(dirname "$0")/.."
clang="${1:-clang}"
info="${2:-build/tools/flashcl-info}"
[ -x "$info" ] || { echo "lint-kernels: no flashcl-info at $info (build first)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0 builds=0
declare -A linted=()
check() {  # file, options...
  local file="$1"
  shift
  linted[$file]=1
  "$info" --program-text "$file" > "$tmp/k.cl"
  builds=$((builds + 1))
  if ! "$clang" -x cl -cl-std=CL1.2 -Xclang -finclude-default-header -fsyntax-only \
      -Werror "$@" "$tmp/k.cl" 2> "$tmp/log"; then
    echo "FAILED: $file $*"
    cat "$tmp/log"
    failures=$((failures + 1))
  fi
}
# NVIDIA's native kernels: clang's PTX target, which spells the driver's asm
# as __asm__ and declares the half loads (vloada_half) only with cl_khr_fp16
nvptx=(-DFCL_NVIDIA_PTX=1 -target nvptx64-nvidia-nvcl -Dasm=__asm__
       -Xclang -cl-ext=+cl_khr_int64_base_atomics -Xclang -cl-ext=+cl_khr_fp16)
for dtype in 0 1 2; do
  # local tiles in floats; for the 16-bit types also in the storage type
  tiles=(0)
  [ "$dtype" -ne 0 ] && tiles=(0 1)
  # the window pinned to none or causal's with plain scores, or read from
  # the parameter block with scores soft-capped and ALiBi-biased (common.cl)
  for mask in "0 0" "1 0" "2 1"; do
    set -- $mask
    window=$1 transform=$2
    for io in "" -DFCL_COUNT_IO=1; do
      for unroll in 0 1; do
        common=(-DFCL_DTYPE=$dtype -DWINDOW=$window -DSOFTCAP=$transform -DALIBI=$transform
                -DFCL_UNROLL=$unroll $io)
        for tile in "${tiles[@]}"; do
          for layout in "1 1" "2 1" "2 2" "4 2"; do
            set -- $layout
            check flash_fwd.cl "${common[@]}" -DTILE_STORAGE=$tile -DTHREADS_PER_ROW=$1 \
              -DROWS_PER_THREAD=$2 -DHEAD_DIM_MAX=64 -DBLOCK_K=16 -DWG_SIZE=128
          done
          for layout in "1 1" "2 2" "4 1" "8 1"; do
            set -- $layout
            check flash_bwd.cl "${common[@]}" -DTILE_STORAGE=$tile -DTHREADS_PER_ROW=$1 \
              -DROWS_PER_THREAD=$2
          done
          # V, O, dO and dV of a width of their own: narrower, and wider
          check flash_fwd.cl "${common[@]}" -DTILE_STORAGE=$tile -DTHREADS_PER_ROW=2 \
            -DROWS_PER_THREAD=2 -DHEAD_DIM_MAX=192 -DHEAD_DIM_V_MAX=128 -DBLOCK_K=16 -DWG_SIZE=128
          check flash_bwd.cl "${common[@]}" -DTILE_STORAGE=$tile -DTHREADS_PER_ROW=4 \
            -DROWS_PER_THREAD=1 -DHEAD_DIM_MAX=64 -DHEAD_DIM_V_MAX=128
        done
        # the MMA kernels, emulated and native
        check flash_fwd_mma.cl "${common[@]}" -DMMA_EMULATE=1 -DHEAD_DIM_MAX=64 -DBLOCK_K=32
        check flash_fwd_mma.cl "${common[@]}" -DMMA_EMULATE=1 -DHEAD_DIM_MAX=32 -DBLOCK_K=16 \
          -DWARPS=1 -DMMA_CHAIN=0
        check flash_fwd_mma.cl "${common[@]}" "${nvptx[@]}" -DHEAD_DIM_MAX=128 -DBLOCK_K=64
        # two 16-row tiles a warp: Q in registers (d 64), in local memory (d 128)
        check flash_fwd_mma.cl "${common[@]}" "${nvptx[@]}" -DHEAD_DIM_MAX=64 -DBLOCK_K=64 \
          -DM_TILES=2
        check flash_fwd_mma.cl "${common[@]}" "${nvptx[@]}" -DHEAD_DIM_MAX=128 -DBLOCK_K=16 \
          -DM_TILES=2
        # paged: tiles spanning pages, looked up per 16 keys (whole rows a
        # work-item step) and per row (d 96: rows not whole)
        check flash_fwd_mma.cl "${common[@]}" "${nvptx[@]}" -DPAGED=1 -DHEAD_DIM_MAX=64 -DBLOCK_K=64
        check flash_fwd_mma.cl "${common[@]}" "${nvptx[@]}" -DPAGED=1 -DHEAD_DIM_MAX=96 -DBLOCK_K=64
        check flash_fwd.cl "${common[@]}" -DPAGED=1 -DHEAD_DIM_MAX=64 -DBLOCK_K=64 -DWG_SIZE=128
        check flash_bwd_mma.cl "${common[@]}" -DMMA_EMULATE=1 -DHEAD_DIM_MAX=64 -DWARPS=4
        check flash_bwd_mma.cl "${common[@]}" -DMMA_EMULATE=1 -DHEAD_DIM_MAX=16 -DWARPS=1 \
          -DMMA_EMULATE_ALIGN=1 -DMMA_CHAIN=0
        check flash_bwd_mma.cl "${common[@]}" "${nvptx[@]}" -DHEAD_DIM_MAX=128 -DWARPS=4
        # warp pairs that split head_dim
        check flash_bwd_mma.cl "${common[@]}" -DMMA_EMULATE=1 -DHEAD_DIM_MAX=32 -DWARPS=2 \
          -DHEAD_SPLIT=2
        check flash_bwd_mma.cl "${common[@]}" "${nvptx[@]}" -DHEAD_DIM_MAX=128 -DWARPS=8 \
          -DHEAD_SPLIT=2
        # the decode kernels, split, paged and (without ALiBi) packed
        decode=(-DSPLIT_KV=1 -DPAGED=1 -DPACK_GQA=$((transform ? 1 : 4)))
        # the splits merged in their own launch, or in this one
        for last in 0 1; do
          check flash_fwd_decode.cl "${common[@]}" "${decode[@]}" -DMERGE_LAST_SPLIT=$last \
            -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DBLOCK_K=32 -DWG_SIZE=128 -DKEY_LANES=16
          # DeepSeek's latent attention (576, 512): q in local memory, V in K's rows
          check flash_fwd_decode.cl "${common[@]}" "${decode[@]}" -DMERGE_LAST_SPLIT=$last \
            -DHEAD_DIM_MAX=640 -DBLOCK_Q=4 -DBLOCK_K=4 -DWG_SIZE=128 -DKEY_LANES=32 -DV_IN_K=1
          if [ "$dtype" -ne 0 ]; then
            check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMERGE_LAST_SPLIT=$last \
              -DMMA_EMULATE=1 -DHEAD_DIM_MAX=64 -DBLOCK_Q=4
            check flash_fwd_decode_mma.cl "${common[@]}" "${nvptx[@]}" "${decode[@]}" \
              -DMERGE_LAST_SPLIT=$last -DHEAD_DIM_MAX=128 -DBLOCK_Q=16
            # ... its widths given, as the planner builds it where they are the padded ones
            check flash_fwd_decode_mma.cl "${common[@]}" "${nvptx[@]}" "${decode[@]}" \
              -DMERGE_LAST_SPLIT=$last -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DFULL_WIDTHS=1
            # its wide kernel: DeepSeek's (576, 512), and one width of 256
            check flash_fwd_decode_wide.cl "${common[@]}" "${decode[@]}" -DMERGE_LAST_SPLIT=$last \
              -DMMA_EMULATE=1 -DHEAD_DIM_MAX=576 -DHEAD_DIM_V_MAX=512 -DBLOCK_Q=32 -DWARPS=8
            check flash_fwd_decode_wide.cl "${common[@]}" "${nvptx[@]}" "${decode[@]}" \
              -DMERGE_LAST_SPLIT=$last -DHEAD_DIM_MAX=256 -DBLOCK_Q=16 -DWARPS=4
            # ... under the planner's register cap on NVIDIA (K's chunks of two), and
            # its options: K and V in other chunks, the size unstated
            check flash_fwd_decode_wide.cl "${common[@]}" "${nvptx[@]}" "${decode[@]}" \
              -DMERGE_LAST_SPLIT=$last -DHEAD_DIM_MAX=576 -DHEAD_DIM_V_MAX=512 -DBLOCK_Q=32 \
              -DWARPS=8 -DMMA_REG_CAP=128
            if [ "$last" -eq 0 ]; then
              check flash_fwd_decode_wide.cl "${common[@]}" "${nvptx[@]}" "${decode[@]}" \
                -DMERGE_LAST_SPLIT=0 -DHEAD_DIM_MAX=576 -DHEAD_DIM_V_MAX=512 -DBLOCK_Q=32 \
                -DWARPS=8 -DK_CHUNK=6 -DV_CHUNK=2 -DMMA_REQD_WG=0
            fi
          fi
        done
        # the CPU kernels (their -D options as plan_cpu.c gives them), the
        # forward also split over a paged cache
        check flash_fwd_cpu.cl "${common[@]}" -DHEAD_DIM_MAX=64 -DBLOCK_K=16 -DBLOCK_Q=64
        check flash_fwd_cpu.cl "${common[@]}" "${decode[@]}" -DHEAD_DIM_MAX=128 -DBLOCK_K=16 \
          -DBLOCK_Q=16
        check flash_bwd_cpu.cl "${common[@]}" -DHEAD_DIM_MAX=64 -DBLOCK=32
        # ... with V, O, dO and dV of a width of their own
        check flash_fwd_cpu.cl "${common[@]}" -DHEAD_DIM_MAX=192 -DHEAD_DIM_V_MAX=128 \
          -DBLOCK_K=16 -DBLOCK_Q=32
        check flash_bwd_cpu.cl "${common[@]}" -DHEAD_DIM_MAX=64 -DHEAD_DIM_V_MAX=128 -DBLOCK=32
        for cols in 0 4; do
          check softmax.cl "${common[@]}" -DCOLS_PER_ITEM=$cols -DWG_SIZE=256
        done
      done
    done
  done
done
for dtype in 0 1 2; do
  for io in "" -DFCL_COUNT_IO=1; do
    check flash_bwd_pre.cl -DFCL_DTYPE=$dtype $io -DWG_SIZE=128 -DPRE_THREADS=16
    check flash_bwd_pre.cl -DFCL_DTYPE=$dtype $io -DWG_SIZE=1 -DPRE_THREADS=1
  done
done
for dtype in 1 2; do
  for io in "" -DFCL_COUNT_IO=1; do
    for width in 1 4; do
      check convert.cl -DFCL_DTYPE=$dtype -DCONVERT_WIDTH=$width $io
    done
  done
done
for dtype in 0 1 2; do
  for io in "" -DFCL_COUNT_IO=1; do
    # the merge's lane groups and part loads (merge.c), and the cache append
    for layout in "64 64 1 1" "128 128 8 1" "128 128 8 4" "16 128 8 8" "256 128 8 2"; do
      set -- $layout
      check merge.cl -DFCL_DTYPE=$dtype $io -DHEAD_DIM_MAX=$1 -DWG_SIZE=$2 -DPART_LOADS=$3 \
        -DPART_GROUPS=$4
    done
    for paged in 0 1; do
      check cache.cl -DFCL_DTYPE=$dtype $io -DPAGED=$paged
    done
  done
done
# quantized KV caches (common.cl's K/V loads, FCL_KV_DTYPE 1-4): the forwards
# that read a cache, the NVIDIA decode kernel natively, the append and the
# naive algorithm's dequantising gather
for kv in 1 2 3 4; do
  for dtype in 0 1 2; do
    for io in "" -DFCL_COUNT_IO=1; do
      common=(-DFCL_DTYPE=$dtype -DFCL_KV_DTYPE=$kv -DWINDOW=2 -DSOFTCAP=1 -DALIBI=1 $io)
      decode=(-DSPLIT_KV=1 -DPAGED=1)
      check flash_fwd.cl "${common[@]}" -DPAGED=1 -DTHREADS_PER_ROW=2 -DROWS_PER_THREAD=1 \
        -DHEAD_DIM_MAX=64 -DBLOCK_K=16 -DWG_SIZE=128
      check flash_fwd_decode.cl "${common[@]}" "${decode[@]}" -DMERGE_LAST_SPLIT=1 \
        -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DBLOCK_K=32 -DWG_SIZE=128 -DKEY_LANES=16
      check flash_fwd_cpu.cl "${common[@]}" "${decode[@]}" -DHEAD_DIM_MAX=128 -DBLOCK_K=16 \
        -DBLOCK_Q=16
      if [ "$dtype" -ne 0 ]; then
        check flash_fwd_decode_mma.cl "${common[@]}" "${nvptx[@]}" "${decode[@]}" \
          -DMERGE_LAST_SPLIT=1 -DHEAD_DIM_MAX=128 -DBLOCK_Q=16
        check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMMA_EMULATE=1 \
          -DHEAD_DIM_MAX=64 -DBLOCK_Q=4
        # the block forms' rows of 128 read by a key's lanes in turn (Q4_0's
        # an option, Q8_0's the default)
        [ "$kv" -le 2 ] && [ "$dtype" -eq 1 ] &&
          check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMMA_EMULATE=1 \
            -DHEAD_DIM_MAX=128 -DBLOCK_Q=8 -DDECODE_QUAD=1
        # ... and as the planner builds it, the load unit given (16 bytes with
        # the widths, 2 where a view allows no more)
        check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMMA_EMULATE=1 \
          -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DKV_UNIT=16 -DFULL_WIDTHS=1
        check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMMA_EMULATE=1 \
          -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DKV_UNIT=2
        # K scaled after the products (int4's 2 the planner's), under a register
        # cap, and the size unstated alone
        if [ "$kv" -ge 1 ] && [ "$kv" -le 2 ] && [ "$dtype" -eq 1 ]; then
          for after in 1 2; do
            check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMMA_EMULATE=1 \
              -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DDECODE_K_SCALE_AFTER=$after -DMMA_REG_CAP=168
          done
          check flash_fwd_decode_mma.cl "${common[@]}" "${decode[@]}" -DMMA_EMULATE=1 \
            -DHEAD_DIM_MAX=128 -DBLOCK_Q=4 -DDECODE_K_SCALE_AFTER=2 -DMMA_REQD_WG=0
        fi
      fi
      for paged in 0 1; do
        check cache.cl -DFCL_DTYPE=$dtype -DFCL_KV_DTYPE=$kv $io -DPAGED=$paged
      done
      [ "$dtype" -ne 0 ] && check convert.cl -DFCL_DTYPE=$dtype -DFCL_KV_DTYPE=$kv $io \
        -DCONVERT_WIDTH=4 -DPACKED_F32=1 -DPAGED=1
      check convert.cl -DFCL_DTYPE=$dtype -DFCL_KV_DTYPE=$kv $io -DCONVERT_WIDTH=4 \
        -DPACKED_F32=0 -DPAGED=1
    done
  done
done
check peaks.cl
check params_probe.cl
for split in 0 1; do
  check mma_probe.cl -DFCL_DTYPE=0 -DMMA_EMULATE=1 -DSPLIT=$split
  check mma_probe.cl -DFCL_DTYPE=0 "${nvptx[@]}" -DSPLIT=$split
done
# Hopper's warpgroup MMA probe: the marked sm_90a instructions (each N's
# operand list), mma.sync, and the emulated layouts
for dtype in 1 2; do
  for n in 8 16 32 64 128; do
    check wgmma_probe.cl -DFCL_DTYPE=$dtype "${nvptx[@]}" -DFCL_WGMMA=1 -DWGMMA_N=$n -DKSTEPS=2
  done
  for n in 8 128; do
    check wgmma_probe.cl -DFCL_DTYPE=$dtype "${nvptx[@]}" -DWGMMA_N=$n -DKSTEPS=3
    check wgmma_probe.cl -DFCL_DTYPE=$dtype -DMMA_EMULATE=1 -DWGMMA_N=$n
    check wgmma_probe.cl -DFCL_DTYPE=$dtype -DMMA_EMULATE=1 -DWGMMA_EMULATE=1 -DWGMMA_N=$n \
      -DKSTEPS=2
  done
done
# the forward on wgmma: the marked instructions, their fallback on mma.sync,
# their emulation; the hooks (masks, transforms, packed heads, splits,
# pages) and the I/O count
for dtype in 1 2; do
  for hd in 64 128; do
    for io in "" -DFCL_COUNT_IO=1; do
      common=(-DFCL_DTYPE=$dtype -DHEAD_DIM_MAX=$hd $io)
      check flash_fwd_wgmma.cl "${common[@]}" "${nvptx[@]}" -DFCL_WGMMA=1 -DWINDOW=1
      check flash_fwd_wgmma.cl "${common[@]}" "${nvptx[@]}" -DFCL_WGMMA=1 -DWINDOW=2 -DSOFTCAP=1 \
        -DALIBI=1 -DSPLIT_KV=1 -DPAGED=1
      check flash_fwd_wgmma.cl "${common[@]}" "${nvptx[@]}" -DWINDOW=0 -DPACK_GQA=4
      check flash_fwd_wgmma.cl "${common[@]}" -DMMA_EMULATE=1 -DWGMMA_EMULATE=1 -DWINDOW=2 \
        -DSOFTCAP=1 -DALIBI=1
      check flash_fwd_wgmma.cl "${common[@]}" -DMMA_EMULATE=1 -DWINDOW=1 -DSPLIT_KV=1
    done
  done
done
# every kernel file, once at least: a new one is not silently left out
for path in cl/*.cl; do
  file="${path#cl/}"
  grep -q '^ *__kernel\|^MMA_KERNEL(' "$path" || continue  # a prelude, linted with its kernels
  if [ -z "${linted[$file]:-}" ]; then
    echo "FAILED: $file has kernels and no check in scripts/lint-kernels.sh"
    failures=$((failures + 1))
  fi
done
echo "lint-kernels: $builds builds, $failures failed"
[ "$failures" -eq 0 ]
