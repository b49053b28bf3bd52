#!/usr/bin/env bash
# Compares flashcl with PyTorch's scaled_dot_product_attention on this
# machine's GPU, in one run: flashcl-bench's standard sweep on every device,
# then PyTorch on the same shapes, then a markdown table of both.
#
#   tools/compare/run.sh OUTDIR [--pass fwd|bwd|fwdbwd] [--dtype f32|f16|bf16]
#                        [--backend efficient|flash|math] [flashcl-bench options]
#
# Needs a built flashcl-bench (build/tools/) and python3 with torch + CUDA.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="${FLASHCL_BENCH:-$here/../../build/tools/flashcl-bench}"
out="${1:?usage: run.sh OUTDIR [options]}"
shift
pass=fwd dtype=f32 backend=efficient extra=()
while (($#)); do
  case "$1" in
    --pass) pass="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
mkdir -p "$out"
"$bench" --device "${FLASHCL_DEVICE:-all}" --sweep --pass "$pass" --dtype "$dtype" \
  --json "$out/flashcl.json" --csv "$out/flashcl.csv" "${extra[@]}" | tee "$out/flashcl.txt"
python3 "$here/sdpa.py" --backend "$backend" --dtype "$dtype" --pass "$pass" \
  --out "$out/sdpa_${backend}_${dtype}_${pass}.json"
python3 "$here/table.py" "$out/flashcl.json" "$out/sdpa_${backend}_${dtype}_${pass}.json" \
  | tee "$out/table.md"
