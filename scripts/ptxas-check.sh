#!/usr/bin/env bash
# Assembles the sm_90a kernels with NVIDIA's ptxas, without the GPU: each N
# and type of the wgmma probe (cl/wgmma_probe.cl, FCL_WGMMA=1), each type,
# width and hook variant of the forward on wgmma (cl/flash_fwd_wgmma.cl;
# its blocks of two and three warpgroups under their register budgets),
# and each KV form of the decode on matrix instructions at its heaviest
# variants (cl/flash_fwd_decode_mma.cl, and cl/flash_fwd_decode_wide.cl
# beyond 128 columns; with scripts/nvptx-builtins.h for
# the builtins they call), compiled to PTX
# by clang's NVPTX target, given the .target NVIDIA's OpenCL compiler writes
# (sm_90) and .version 8.0 (wgmma's: any ptxas that knows sm_90a takes it),
# patched by the library's sm_90a stage
# (flashcl-info --ptx-unmark) and assembled for sm_90a, warnings as errors,
# and ptxas's notes that it serialized the wgmmas or injected waits into
# their pipeline, and spills, as failures. What the lint cannot tell: that
# the operand lists, the descriptor operand and the patched text are PTX that ptxas
# takes. Last, scripts/driver-ptx.sh reads a record of one build's PTX.
# Exits 77 (skipped) without a ptxas that assembles sm_90a.
# Usage: scripts/ptxas-check.sh [clang] [flashcl-info] [ptxas]
#        scripts/ptxas-check.sh --mix FILE OPTIONS...: one build of FILE
#          (STAGE=0 for a kernel without Hopper's instructions), its
#          registers and its key loop's instruction mix (scripts/sass-mix.py;
#          needs nvdisasm: on PATH, or NVDISASM; scripts/driver-ptx.sh
#          says where one is had)
set -euo pipefail
cd "$(dirname "$0")/.."
mix=""
if [ "${1:-}" = --mix ]; then
  mix="$2"
  shift 2
  mix_options=("$@")
  set --
  nvdisasm="${NVDISASM:-$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)}"
  [ -x "$nvdisasm" ] || { echo "ptxas-check: no nvdisasm (skipped)"; exit 77; }
fi
clang="${1:-clang}"
info="${2:-build/tools/flashcl-info}"
ptxas="${3:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}"
[ -x "$ptxas" ] || { echo "ptxas-check: no ptxas (skipped)"; exit 77; }
[ -x "$info" ] || { echo "ptxas-check: no flashcl-info at $info (build first)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# a ptxas older than sm_90a (CUDA 12.0, PTX ISA 8.0) cannot tell
printf '.version 8.0\n.target sm_90a\n.address_size 64\n' > "$tmp/empty.ptx"
if ! "$ptxas" -arch=sm_90a "$tmp/empty.ptx" -o "$tmp/empty.cubin" > /dev/null 2>&1; then
  echo "ptxas-check: $ptxas does not assemble sm_90a (skipped)"
  exit 77
fi
failures=0 builds=0
# assemble FILE LABEL OPTIONS...: FILE's program text (with the builtins
# header for a kernel that calls the library's) through clang's NVPTX
# target, the stage's patch (STAGE=0: none, for a kernel without Hopper's
# instructions) and ptxas for sm_90a
assemble() {
  local file="$1" label="$2"
  shift 2
  builds=$((builds + 1))
  "$info" --program-text "$file" > "$tmp/k.cl"
  # clang's OpenCL has no library for NVPTX: two builtins spelled as the
  # NVVM intrinsics they are, the others in scripts/nvptx-builtins.h
  if ! "$clang" -x cl -cl-std=CL1.2 -Xclang -fdeclare-opencl-builtins \
      -Xclang -finclude-default-header -target nvptx64-nvidia-nvcl -O2 -S \
      -Dasm=__asm__ -Xclang -cl-ext=+cl_khr_fp16 -DFCL_NVIDIA_PTX=1 -DFCL_NVIDIA_SM=90 \
      -D'get_local_id(x)=__nvvm_read_ptx_sreg_tid_x()' -D'barrier(x)=__nvvm_bar_sync(0)' \
      "$@" -o "$tmp/clang.ptx" "$tmp/k.cl" 2> "$tmp/log" ||
    grep -q 'call\.uni' "$tmp/clang.ptx" ||
    ! sed -e 's/^\.version .*/.version 8.0/' -e 's/^\.target sm_[0-9]*/.target sm_90/' \
      "$tmp/clang.ptx" > "$tmp/sm90.ptx" ||
    ! { if [ "${STAGE:-1}" = 1 ]; then "$info" --ptx-unmark "$tmp/sm90.ptx"; else
          sed 's/^\.target sm_90$/.target sm_90a/' "$tmp/sm90.ptx"; fi; } > "$tmp/sm90a.ptx" \
        2>> "$tmp/log" ||
    ! "$ptxas" -arch=sm_90a ${PTXAS_REGS:+-maxrregcount "$PTXAS_REGS"} -v --warning-as-error \
      "$tmp/sm90a.ptx" -o "$tmp/k.cubin" \
      >> "$tmp/log" 2>&1 ||
    grep -q 'serialized\|is injected' "$tmp/log" ||
    { [ "${SPILLS_NOTED:-0}" = 0 ] && grep -q '[1-9][0-9]* bytes spill' "$tmp/log"; }; then
    echo "FAILED: $label"
    cat "$tmp/log"
    grep -A1 'call\.uni' "$tmp/clang.ptx" | grep -v 'call\.uni' | sort -u || true  # calls left
    failures=$((failures + 1))
    return
  fi
  echo "$label: $(grep -o 'Used [0-9]* registers' "$tmp/log"), $(grep -o '[0-9]* bytes spill stores' "$tmp/log")"
}
if [ -n "$mix" ]; then
  assemble "$mix" "$mix ${mix_options[*]}" -include "$PWD/scripts/nvptx-builtins.h" \
    "${mix_options[@]}"
  [ "$failures" -eq 0 ] || exit 1
  "$nvdisasm" -c "$tmp/k.cubin" | python3 scripts/sass-mix.py
  exit
fi
# B K-major and MN-major (TRANS_B)
for dtype in 1 2; do
  for n in 8 16 32 64 128; do
    for tb in 0 1; do
      assemble wgmma_probe.cl "wgmma_probe.cl FCL_DTYPE=$dtype WGMMA_N=$n TRANS_B=$tb" \
        -DFCL_DTYPE=$dtype -DFCL_WGMMA=1 -DWGMMA_N=$n -DKSTEPS=4 -DTRANS_B=$tb
    done
  done
done
# the forward on wgmma: each schedule, type and width, causal, and with the
# hooks that add registers (a window read from the parameters, softcap,
# packed heads; splits, ALiBi)
builtins="$PWD/scripts/nvptx-builtins.h"
for pipe in 1 2 3; do
  for dtype in 1 2; do
    for hd in 64 128; do
      [ "$pipe" = 3 ] && [ "$hd" = 128 ] && continue  # two stages: d 64 only
      for opts in "-DWINDOW=0" "-DWINDOW=1" "-DWINDOW=2 -DSOFTCAP=1 -DPACK_GQA=4" \
          "-DWINDOW=1 -DALIBI=1 -DSPLIT_KV=1 -DPAGED=1"; do
        # shellcheck disable=SC2086
        assemble flash_fwd_wgmma.cl \
          "flash_fwd_wgmma.cl WGMMA_PIPE=$pipe FCL_DTYPE=$dtype HEAD_DIM_MAX=$hd $opts" \
          -include "$builtins" -DWGMMA_PIPE=$pipe -DFCL_DTYPE=$dtype -DFCL_WGMMA=1 \
          -DHEAD_DIM_MAX=$hd $opts
      done
    done
  done
done
# ... and its blocks of two and three warpgroups, in the schedules the
# planner gives them (and 32-key tiles at d 128, a hint's, in two stages),
# under the registers the driver's ptxas gets for 256 and 384 work-items
# (clang writes no .reqntid; 65536 / 384 = 170). At three warpgroups and
# d 128 clang's PTX spills 4-80 bytes where the driver's own builds
# spilled none (v29): spills there are noted, not failures;
# serialization still fails. Each form: warpgroups, width, schedule,
# registers, spills noted, keys a tile[, an option: the next tiles held in
# registers, an experiment's]
for form in "2 128 2 255 0 64" "3 128 1 168 1 64" "3 64 3 168 0 64" "3 128 3 168 1 32" \
    "2 128 1 255 1 64 -DWGMMA_REG_STAGE=1"; do
  set -- $form
  for dtype in 1 2; do
    for opts in "-DWINDOW=0" "-DWINDOW=2 -DSOFTCAP=1 -DPACK_GQA=4" \
        "-DWINDOW=1 -DALIBI=1 -DSPLIT_KV=1 -DPAGED=1"; do
      form_label="flash_fwd_wgmma.cl WARPGROUPS=$1 WGMMA_PIPE=$3 BLOCK_K=$6 ${7:-}"
      # shellcheck disable=SC2086
      PTXAS_REGS=$4 SPILLS_NOTED=$5 assemble flash_fwd_wgmma.cl \
        "$form_label FCL_DTYPE=$dtype HEAD_DIM_MAX=$2 $opts" \
        -include "$builtins" -DWARPGROUPS=$1 -DWGMMA_PIPE=$3 -DBLOCK_K=$6 -DFCL_DTYPE=$dtype \
        -DFCL_WGMMA=1 -DHEAD_DIM_MAX=$2 ${7:-} $opts
    done
  done
done
# the decode on matrix instructions: each KV form (f16 storage, and bf16
# for int8 and e4m3), at 4 rows a block with a window and splits, at 8
# with a softcap and pages (the transposed products' heaviest), and at 16
# packed rows with a softcap and pages: the variants nearest the
# registers' end (docs/design.md, "Fast dequantisation")
for kv in 0 1 2 3 4 b1 b3; do
  dtype=1
  case $kv in b*) dtype=2; kv=${kv#b};; esac
  for opts in "-DBLOCK_Q=4 -DPACK_GQA=4 -DWINDOW=1 -DSPLIT_KV=1" \
      "-DBLOCK_Q=8 -DPACK_GQA=8 -DWINDOW=2 -DSOFTCAP=1 -DPAGED=1" \
      "-DBLOCK_Q=16 -DPACK_GQA=16 -DWINDOW=2 -DSOFTCAP=1 -DPAGED=1"; do
    # shellcheck disable=SC2086
    STAGE=0 assemble flash_fwd_decode_mma.cl \
      "flash_fwd_decode_mma.cl FCL_DTYPE=$dtype FCL_KV_DTYPE=$kv $opts" \
      -include "$builtins" -DFCL_DTYPE=$dtype -DFCL_KV_DTYPE=$kv -DHEAD_DIM_MAX=128 -DWARPS=4 \
      -DFCL_SHUFFLE=1 -DFCL_SHUFFLE_WIDTH=32 $opts
  done
  # ... as the planner builds it for a packed cache: the widths constants,
  # a quantized cache's load unit given (FULL_WIDTHS, KV_UNIT)
  given="-DFULL_WIDTHS=1"
  case $kv in 1 | 2) given="$given -DKV_UNIT=8" ;; 3 | 4) given="$given -DKV_UNIT=16" ;; esac
  # shellcheck disable=SC2086
  STAGE=0 assemble flash_fwd_decode_mma.cl \
    "flash_fwd_decode_mma.cl FCL_DTYPE=$dtype FCL_KV_DTYPE=$kv $given" \
    -include "$builtins" -DFCL_DTYPE=$dtype -DFCL_KV_DTYPE=$kv -DHEAD_DIM_MAX=128 -DWARPS=4 \
    -DFCL_SHUFFLE=1 -DFCL_SHUFFLE_WIDTH=32 -DBLOCK_Q=4 -DPACK_GQA=4 -DWINDOW=1 -DSPLIT_KV=1 \
    $given
done
# the block forms' K scaled after the products (an option)
for kv in 1 2; do
  for after in 1 2; do
    STAGE=0 assemble flash_fwd_decode_mma.cl \
      "flash_fwd_decode_mma.cl FCL_DTYPE=1 FCL_KV_DTYPE=$kv DECODE_K_SCALE_AFTER=$after" \
      -include "$builtins" -DFCL_DTYPE=1 -DFCL_KV_DTYPE=$kv -DHEAD_DIM_MAX=128 -DWARPS=4 \
      -DFCL_SHUFFLE=1 -DFCL_SHUFFLE_WIDTH=32 -DBLOCK_Q=4 -DPACK_GQA=4 -DWINDOW=1 -DSPLIT_KV=1 \
      -DDECODE_K_SCALE_AFTER=$after
  done
done
# its wide kernel (beyond 128 columns: DeepSeek's 576 and 512), each type,
# at 32 packed rows split and paged, and at 16
# with a window and a softcap
for dtype in 1 2; do
  for opts in "-DBLOCK_Q=32 -DPACK_GQA=128 -DSPLIT_KV=1 -DPAGED=1" \
      "-DBLOCK_Q=16 -DPACK_GQA=16 -DWINDOW=2 -DSOFTCAP=1"; do
    # shellcheck disable=SC2086
    STAGE=0 assemble flash_fwd_decode_wide.cl \
      "flash_fwd_decode_wide.cl FCL_DTYPE=$dtype $opts" \
      -include "$builtins" -DFCL_DTYPE=$dtype -DHEAD_DIM_MAX=576 -DHEAD_DIM_V_MAX=512 \
      -DWARPS=8 -DFCL_SHUFFLE=1 -DFCL_SHUFFLE_WIDTH=32 $opts
  done
  # ... as the planner builds it for NVIDIA's compiler: held to 128
  # registers, where it spills (80 bytes a lane on the H100's driver)
  PTXAS_REGS=128 SPILLS_NOTED=1 STAGE=0 assemble flash_fwd_decode_wide.cl \
    "flash_fwd_decode_wide.cl FCL_DTYPE=$dtype MMA_REG_CAP=128 (128 registers)" \
    -include "$builtins" -DFCL_DTYPE=$dtype -DHEAD_DIM_MAX=576 -DHEAD_DIM_V_MAX=512 \
    -DWARPS=8 -DFCL_SHUFFLE=1 -DFCL_SHUFFLE_WIDTH=32 -DBLOCK_Q=32 -DPACK_GQA=128 -DSPLIT_KV=1 \
    -DMMA_REG_CAP=128
done
# scripts/driver-ptx.sh, which reads the driver's PTX that FLASHCL_BUILD_PTX
# writes, on a record of the last build's (sm_90) PTX
{ echo "== flash_fwd_decode_wide.cl (ptxas-check)"; cat "$tmp/sm90.ptx"; } > "$tmp/record.txt"
builds=$((builds + 1))
if ! PTXAS="$ptxas" scripts/driver-ptx.sh "$tmp/record.txt" > "$tmp/driver.txt" 2>&1 ||
    ! grep -q "flash_fwd_decode_mma: [0-9]* registers" "$tmp/driver.txt"; then
  echo "FAILED: scripts/driver-ptx.sh on a record of the last build"
  cat "$tmp/driver.txt"
  failures=$((failures + 1))
fi
echo "ptxas-check: $builds builds, $failures failed"
[ "$failures" -eq 0 ]
