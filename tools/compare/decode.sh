#!/usr/bin/env bash
# Decode against PyTorch on this machine's GPU, in one run: flashcl-bench's
# decode family (--sweep-decode) on the GPU, then PyTorch on the same
# shapes (decode.py), then a markdown table joining both.
#
#   tools/compare/decode.sh OUTDIR [--dtype f16|bf16|f32,...] [flashcl-bench options]
#
# Needs a built flashcl-bench (build/tools/) and python3 with torch + CUDA.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="${FLASHCL_BENCH:-$here/../../build/tools/flashcl-bench}"
out="${1:?usage: decode.sh OUTDIR [options]}"
shift
mkdir -p "$out"
"$bench" --device "${FLASHCL_DEVICE:-gpu}" --sweep-decode --algo flash --json "$out/flashcl.json" \
  "$@" | tee "$out/flashcl.txt"
python3 "$here/decode.py" "$out/flashcl.json" --out "$out/torch.json" | tee "$out/table.md"
