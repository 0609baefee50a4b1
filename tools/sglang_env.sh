#!/usr/bin/env bash
# Build .venv-sglang (repository root): sglang 0.5.23's released code on the CPU torch 2.13.0, with
# the part of its dependencies that its server arguments, MoE runners and quantization methods
# import, then this project. tests/sglang runs SGLang's own choice there on simulated GPUs.
#
# What differs from `pip install sglang==0.5.23`, and why:
# - torch 2.13.0+cpu, not the pinned 2.14.1: the registries have no CPU build of 2.14.1 (PyPI's
#   torch 2.14.1 is the CUDA build, several GB with its nvidia-* wheels).
# - sglang is installed --no-deps and its requirements below one by one: the GPU-only ones
#   (flash-attn-4, sgl-deep-ep, sgl-deep-gemm, sgl-flash-mla, humming-kernels, tilelang,
#   quack-kernels, nvshmem4py, torch_memory_saver, xgrammar, torchaudio, torchcodec, ...) are left
#   out; none is imported by the modules the tests load (sgl-deep-gemm's `deep_gemm` is
#   simulated present or absent by tests/sglang/sglang_sim.py).
# - sglang-kernel 0.4.10 (SGLang's pin) is installed whole; its CUDA op libraries cannot load
#   here and the tests skip loading them (sglang_sim.py: the CUDA build's C++ ops).
# - torchvision: the PyPI wheel (0.28.0, the release built for torch 2.13) is installed without
#   its dependencies; its C++ extension links libtorch_cuda.so and does not load beside a CPU
#   torch, and then `import torchvision` fails ("operator torchvision::nms does not exist"). No
#   CPU build of torchvision is on the reachable registries. The stand-in is the smallest one:
#   tools/sglang_env/torchvision_cpu_ops.py declares the two operator schemas torchvision's
#   Python code registers fake kernels for (nms, qnms), the first time torchvision is imported,
#   so its real Python code imports (SGLang needs it: srt/multimodal/internvl_utils.py, reached
#   from srt/configs); no torchvision C++ op has a kernel.
# Run time: 986 s measured on the 2-core machine kind, shared with other jobs, pip's cache cold
# (sglang-kernel's wheel is 373 MB; flashinfer-python and the CuTe DSL come with it); less with
# a warm cache.  Usage: tools/sglang_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-sglang}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
# torch: the local CPU build; the rest: sglang 0.5.23's own pins (its METADATA)
cat > "$pins" <<'EOF'
torch==2.13.0
transformers==5.19.0
tokenizers==0.23.2
compressed-tensors==0.18.0
openai==2.8.0
sentencepiece==0.2.1
apache-tvm-ffi==0.1.11
flashinfer-python==0.7.2
nvidia-cutlass-dsl==4.8.0
nvidia-cutlass-dsl-libs-base==4.8.0
nvidia-cutlass-dsl-libs-cu13==4.8.0
triton==3.8.0
EOF

python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q -c "$pins")
"${pip[@]}" torch==2.13.0 triton==3.8.0
"${pip[@]}" --no-deps sglang==0.5.23 sglang-kernel==0.4.10 torchvision==0.28.0
# sglang 0.5.23's requirements that its server args, quant methods and MoE runners import
"${pip[@]}" numpy transformers tokenizers pydantic requests packaging psutil orjson pyzmq \
    msgspec aiohttp fastapi uvicorn uvloop tqdm regex pybase64 setproctitle prometheus-client \
    python-multipart einops pillow scipy compressed-tensors interegular partial_json_parser \
    xxhash zstandard distro nvidia-ml-py openai sentencepiece IPython apache-tvm-ffi dill gguf \
    flashinfer-python
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp tools/sglang_env/torchvision_cpu_ops.py "$site/_torchvision_cpu_ops.py"
echo "import _torchvision_cpu_ops" > "$site/_torchvision_cpu_ops.pth"
"${pip[@]}" -e ".[test]"
"$venv/bin/python" -c "
import torch, torchvision, sglang, selector
from sglang.srt.server_args import ServerArgs
print('sglang', sglang.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__)"
