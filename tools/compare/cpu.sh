#!/usr/bin/env bash
# Compares flashcl on a CPU (PoCL) with PyTorch's CPU
# scaled_dot_product_attention on the same cores, in one run: flashcl-bench's
# CPU sweep (2k tokens, hidden 512, d 64 and 128, N 256..2048, causal and not;
# flash and naive), then PyTorch on the same shapes with as many threads,
# then a markdown table of both.
#
#   tools/compare/cpu.sh OUTDIR [--pass fwd|fwdbwd] [--threads N] [flashcl-bench options]
#
#   --threads N  cores for both (default: all); PoCL takes them as
#                POCL_CPU_MAX_CU_COUNT, PyTorch as torch.set_num_threads
#
# PyTorch comes from its CPU wheel index (PyPI's wheel where that is not
# reachable), installed once into build/torch-cpu (FLASHCL_TORCH_DIR) unless
# python3 already imports torch; the tests never need it. Needs a built flashcl-bench (FLASHCL_BENCH, default
# build/tools/flashcl-bench) and a CPU OpenCL device (PoCL).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="${FLASHCL_BENCH:-$here/../../build/tools/flashcl-bench}"
torch_dir="${FLASHCL_TORCH_DIR:-$here/../../build/torch-cpu}"
case "${1:-}" in
  -h | --help | "") sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
esac
out="$1"
shift
pass=fwd threads="$(nproc)" extra=()
while (($#)); do
  case "$1" in
    --pass) pass="${2:?--pass needs fwd or fwdbwd}"; shift 2 ;;
    --threads) threads="${2:?--threads needs a count}"; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
[ -x "$bench" ] || { echo "cpu.sh: no flashcl-bench at $bench (build first)" >&2; exit 2; }

if ! python3 -c 'import torch' 2> /dev/null; then
  if ! PYTHONPATH="$torch_dir" python3 -c 'import torch' 2> /dev/null; then
    echo "cpu.sh: installing PyTorch's CPU wheel into $torch_dir" >&2
    python3 -m pip install --quiet --target "$torch_dir" \
      --index-url https://download.pytorch.org/whl/cpu torch numpy ||
      { echo "cpu.sh: no CPU wheel index; PyPI's torch instead (with its CUDA libraries)" >&2
        python3 -m pip install --quiet --target "$torch_dir" torch numpy; }
  fi
  export PYTHONPATH="$torch_dir${PYTHONPATH:+:$PYTHONPATH}"
fi

mkdir -p "$out"
POCL_CPU_MAX_CU_COUNT="$threads" "$bench" --device cpu --sweep --pass "$pass" --dtype f32 \
  --json "$out/flashcl.json" "${extra[@]}" | tee "$out/flashcl.txt"
python3 "$here/sdpa.py" --device cpu --threads "$threads" --backend auto --dtype f32 \
  --pass "$pass" --out "$out/sdpa_cpu_${pass}.json"
python3 "$here/table.py" "$out/flashcl.json" "$out/sdpa_cpu_${pass}.json" | tee "$out/table.md"
