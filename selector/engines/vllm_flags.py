"""vLLM's tables, in vLLM's home beside its launcher (`selector.engines.vllm.VllmLauncher`) and
its file (conf/engine/vllm.yaml): what vLLM's launch flags do to every layer of a model, the
kernel classes it builds under each backend name, and its oracle's enum names. The launch plan
(selector/checkpoint/launch.py) reads them only through the launcher's hooks; `selector audit`
reads vLLM's log with them.

vLLM's `--moe-backend` is one value for every MoE layer of the model, whatever its quant scheme:
each scheme's oracle maps the value to one of its backends or raises (`map_fp8_backend`, ...), so
a value that serves the NVFP4 experts can stop the engine at an FP8 or unquantized MoE layer.
`--linear-backend` is gentler: a layer type without a kernel of that backend falls back to
automatic selection (`_resolve_backend_kernels`), and `linear_backend_per_quant` (in
`--kernel-config`) scopes a backend to one linear scheme. tests/vllm/test_launch_flags.py
compares every table here with vLLM's own functions.
"""
from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

# MoE quant scheme -> the --moe-backend values its oracle accepts (any other value raises
# ValueError when the layer is built). "unquantized" also lets "humming" through to automatic
# selection (oracle/unquantized.py, select_unquantized_moe_backend).
VLLM_MOE_ACCEPTS: Dict[str, Tuple[str, ...]] = {
    "nvfp4": ("cutlass", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl",
              "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x", "marlin", "humming",
              "emulation"),
    "fp8": ("triton", "deep_gemm", "cutlass", "flashinfer_trtllm", "flashinfer_cutlass",
            "marlin", "humming", "aiter", "hpc"),
    "mxfp8": ("flashinfer_trtllm", "deep_gemm", "marlin", "xpu", "aiter", "triton", "humming"),
    "unquantized": ("triton", "batched_triton", "flashinfer_trtllm", "flashinfer_cutlass",
                    "aiter", "humming"),
}
VLLM_MOE_ACCEPTS["nvfp4_w4a16"] = VLLM_MOE_ACCEPTS["nvfp4"]  # the same oracle
# Every FP8 MoE method (Fp8MoEMethod, ModelOptFp8MoEMethod, CompressedTensorsW8A8Fp8MoEMethod)
# maps the value with map_fp8_backend, whatever its quant keys; every MXFP4 one
# (Mxfp4MoEMethod, GptOssMxfp4MoEMethod, CompressedTensorsW4A4Mxfp4MoEMethod) calls
# select_mxfp4_moe_backend without an activation key, which maps it with map_mxfp4_backend
# (_get_requested_backends); the MXFP8 ones take mxfp8.py's _BACKEND_NAME_MAP. A name that maps
# can still be refused later when the backend it maps to does not support the layer
# (select_*_moe_backend: "not supported"): that is the catalogue's rules' part, per backend.
for _s in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block"):
    VLLM_MOE_ACCEPTS[_s] = VLLM_MOE_ACCEPTS["fp8"]
VLLM_MOE_ACCEPTS["mxfp4"] = ("triton", "deep_gemm", "flashinfer_trtllm", "flashinfer_cutlass",
                             "flashinfer_moe_ep_cutedsl", "b12x",
                             "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming",
                             "triton_unfused", "aiter", "aiter_triton_mxfp4_bf16", "emulation")
for _s in ("mxfp4_w4a8", "mxfp4_w4a4"):
    VLLM_MOE_ACCEPTS[_s] = VLLM_MOE_ACCEPTS["mxfp4"]
VLLM_MOE_SOURCES = {
    "nvfp4": "vLLM 0.32.0 fused_moe/oracle/nvfp4.py (map_nvfp4_backend)",
    "nvfp4_w4a16": "vLLM 0.32.0 fused_moe/oracle/nvfp4.py (map_nvfp4_backend)",
    "fp8": "vLLM 0.32.0 fused_moe/oracle/fp8.py (map_fp8_backend)",
    "mxfp8": "vLLM 0.32.0 fused_moe/oracle/mxfp8.py (select_mxfp8_moe_backend)",
    "unquantized": "vLLM 0.32.0 fused_moe/oracle/unquantized.py (map_unquantized_backend)",
}
for _s in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block"):
    VLLM_MOE_SOURCES[_s] = VLLM_MOE_SOURCES["fp8"]
for _s in ("mxfp4", "mxfp4_w4a8", "mxfp4_w4a4"):
    VLLM_MOE_SOURCES[_s] = ("vLLM 0.32.0 fused_moe/oracle/mxfp4.py (select_mxfp4_moe_backend, "
                            "map_mxfp4_backend)")

# selector's linear scheme -> vLLM's linear quantization key (linear_backend_per_quant), the
# `quantization=` each kernel initializer passes to _get_linear_backend: init_nvfp4_linear_kernel
# (nvfp4_w4a4 / nvfp4_w4a16), init_fp8_linear_kernel ("fp8_block_w8a8" when the activation key
# is per-group, else "fp8_w8a8": per-tensor and per-channel FP8 share one key),
# init_mxfp8_linear_kernel ("mxfp8"), init_mxfp4_linear_kernel ("mxfp4").
VLLM_LINEAR_QUANT = {"nvfp4": "nvfp4_w4a4", "nvfp4_w4a16": "nvfp4_w4a16",
                     "fp8_tensor": "fp8_w8a8", "fp8_tensor_dynamic": "fp8_w8a8",
                     "fp8_channel": "fp8_w8a8", "fp8_block": "fp8_block_w8a8",
                     "mxfp8": "mxfp8", "mxfp4": "mxfp4", "mxfp4_w4a8": "mxfp4",
                     "mxfp4_w4a4": "mxfp4"}
VLLM_LINEAR_SOURCE = ("vLLM 0.32.0 config/kernel.py (KernelConfig.linear_backend_per_quant); "
                      "kernels/linear/__init__.py (_get_linear_backend, "
                      "_resolve_backend_kernels)")

# (op, selector scheme, vLLM backend name) -> the kernel classes vLLM may build, in its order:
# the first whose is_supported() holds on the machine runs (init_nvfp4_linear_kernel over
# _POSSIBLE_NVFP4_KERNELS filtered by _LINEAR_BACKEND_KERNEL_MAP; MoE: backend_to_kernel_cls).
VLLM_KERNELS: Dict[Tuple[str, str, str], Tuple[str, ...]] = {
    ("linear", "nvfp4", "flashinfer_cutedsl"): ("FlashInferCuteDslNvFp4LinearKernel",
                                                "FlashInferCuteDslNvFp4W4A16LinearKernel"),
    ("linear", "nvfp4", "flashinfer_cutlass"): ("FlashInferCutlassNvFp4LinearKernel",),
    ("linear", "nvfp4", "flashinfer_b12x"): ("FlashInferB12xNvFp4LinearKernel",),
    ("linear", "nvfp4", "cutlass"): ("CutlassNvFp4LinearKernel",),
    ("linear", "nvfp4", "marlin"): ("MarlinNvFp4LinearKernel",),
    ("linear", "nvfp4", "flashinfer_trtllm"): ("FlashInferTrtllmNvFp4LinearKernel",),
    ("linear", "nvfp4", "flashinfer_cudnn"): ("FlashInferCudnnNvFp4LinearKernel",),
    ("linear", "nvfp4", "b12x"): ("B12xNvFp4LinearKernel", "B12xNvFp4W4A16LinearKernel"),
    ("linear", "nvfp4", "emulation"): ("EmulationNvFp4LinearKernel",),
    ("linear", "nvfp4_w4a16", "flashinfer_cutedsl"): (
        "FlashInferCuteDslNvFp4W4A16LinearKernel",),
    ("linear", "nvfp4_w4a16", "marlin"): ("MarlinNvFp4LinearKernel",),
    ("linear", "nvfp4_w4a16", "b12x"): ("B12xNvFp4W4A16LinearKernel",),
    ("moe", "nvfp4", "flashinfer_trtllm"): ("TrtLlmNvFp4ExpertsMonolithic",
                                            "TrtLlmNvFp4ExpertsModular"),
    ("moe", "nvfp4", "flashinfer_cutlass"): ("FlashInferExperts",),
    ("moe", "nvfp4", "flashinfer_cutedsl"): ("FlashInferCuteDSLExperts",),
    ("moe", "nvfp4", "flashinfer_b12x"): ("FlashInferB12xExperts",),
    ("moe", "nvfp4", "b12x"): ("B12xExperts",),
    ("moe", "nvfp4", "cutlass"): ("CutlassExpertsFp4",),
    ("moe", "nvfp4", "marlin"): ("MarlinExperts",),
    ("moe", "nvfp4", "emulation"): ("Nvfp4QuantizationEmulationTritonExperts",),
}
for (_op, _q, _b), _k in list(VLLM_KERNELS.items()):  # W4A16 MoE: the same oracle and classes
    if _op == "moe":
        VLLM_KERNELS[("moe", "nvfp4_w4a16", _b)] = _k
VLLM_KERNEL_SOURCE = ("vLLM 0.32.0 kernels/linear/__init__.py (_POSSIBLE_NVFP4_KERNELS, "
                      "_LINEAR_BACKEND_KERNEL_MAP); fused_moe/oracle/nvfp4.py "
                      "(backend_to_kernel_cls)")


def vllm_kernels(op: str, quant: str, name: Optional[str]) -> Tuple[str, ...]:
    """The kernel classes vLLM may build for a backend name, in its order (empty: unknown)."""
    return VLLM_KERNELS.get((op, quant, name or ""), ())


__all__ = ["VLLM_MOE_ACCEPTS", "VLLM_MOE_SOURCES", "VLLM_LINEAR_QUANT", "VLLM_LINEAR_SOURCE",
           "VLLM_KERNELS", "VLLM_KERNEL_SOURCE", "vllm_kernels", "vllm_name"]


# vLLM's backend enum values whose --moe-backend name is not value.lower() (the inverse of
# map_nvfp4_backend, map_fp8_backend, mxfp4's map_mxfp4_backend; batched variants are the same
# backend in vLLM's batched activation format)
_VLLM_NAMES = {"vllm_cutlass": "cutlass", "batched_vllm_cutlass": "cutlass",
               "deepgemm": "deep_gemm", "batched_deepgemm": "deep_gemm",
               "batched_triton": "triton", "flashinfer_cutedsl_batched": "flashinfer_cutedsl",
               "batched_marlin": "marlin", "none": ""}
_MXFP4_SUFFIX = re.compile(r"_(mxfp4_mxfp8|mxfp4_bf16|mxfp4_mxfp4|mxfp4|bf16)$")


def vllm_name(value: str) -> str:
    """vLLM's oracle enum value ('FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'DEEPGEMM_MXFP4') ->
    its --moe-backend name ('flashinfer_cutlass', 'cutlass', 'deep_gemm'); '' for NONE."""
    v = _MXFP4_SUFFIX.sub("", value.strip().lower())
    return _VLLM_NAMES.get(v, v)
