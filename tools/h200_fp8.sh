#!/usr/bin/env bash
# FP8 on the lent H200: the GPU tests of the FP8 backends, select -> prepare -> apply -> verify
# and timings (benchmarks/fp8_h200.py), doctor --verify for the linear op, explain for the
# DeepSeek-V3 / Qwen3 FP8 layers. Run from the repository root of a copy shipped to the device:
#   WHEELS=../.whl OUT=/tmp/out bash tools/h200_fp8.sh
# Writes $OUT/fp8_h200.txt (the transcript), $OUT/fp8_h200.json, $OUT/pytest_fp8.txt,
# $OUT/verify_linear.json.
set -u
OUT=${OUT:-/tmp/h200_fp8}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" hydra-core omegaconf || exit 3
fi
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 3
export SELECTOR_CACHE_DIR="$OUT/cache" PYTHONUNBUFFERED=1
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
  "$PY" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  echo "=== pytest tests/test_fp8_backends.py"
  "$PY" -m pytest -q -p no:cacheprovider tests/test_fp8_backends.py -rfs 2>&1 | tail -40
  for q in fp8_block fp8_channel fp8_tensor; do
    echo "=== python -m selector explain layer=dense_linear layer.quant=$q layer.hidden_size=7168"
    "$PY" -m selector explain layer=dense_linear layer.quant=$q layer.hidden_size=7168 2>&1 | head -12
  done
  echo "=== python -m selector explain layer=qwen_moe layer.quant=fp8_channel (Qwen3-30B-A3B shapes)"
  "$PY" -m selector explain layer=qwen_moe layer.quant=fp8_channel layer.hidden_size=2048 layer.intermediate_size=768 layer.num_experts=128 layer.top_k=8 2>&1 | head -8
  echo "=== python -m selector doctor --verify --op linear"
  "$PY" -m selector doctor --verify --op linear --timeout 300 2>&1 | grep -v "^    \[" | tail -60
  "$PY" -m selector doctor --verify --op linear --format json > "$OUT/verify_linear.json" 2>/dev/null
  echo "=== python benchmarks/fp8_h200.py ${FP8_ARGS:-}"
  "$PY" benchmarks/fp8_h200.py --json "$OUT/fp8_h200.json" ${FP8_ARGS:-}
} 2>&1 | tee "$OUT/fp8_h200.txt"
