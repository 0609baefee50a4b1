"""``marlin``: weight-only FP4 (W4A16) Marlin kernels from vLLM (``ops.marlin_gemm``,
``fused_marlin_moe``) or SGLang's sgl-kernel; SM >= 7.5, the only real NVFP4 path on SM 9.0.

Weights: :func:`backends.prepare.prepare_marlin_linear` / :func:`backends.prepare.prepare_marlin_moe`
(vLLM ``marlin_utils_fp4.py``): N padded to 64, scales permuted and turned into S0E5M3 bytes, global
scale re-biased; the final tile repack (``ops.gptq_marlin_repack``) is a CUDA op of vLLM and is not
reproduced here. ``prepare`` raises :class:`backends.wrappers._base.BackendUnavailable` naming the missing
distribution (vllm or sgl-kernel) and the selector's reasons.
"""
from __future__ import annotations

from ..prepare import prepare_marlin_linear, prepare_marlin_moe
from ._base import ExternalKernelMixin, LinearBackend, MoEBackend


class MarlinMoE(ExternalKernelMixin, MoEBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    needs_source = "vLLM experts/marlin_moe.py; SGLang sgl-kernel"
    kernel_call = "vllm fused_marlin_moe (ops.moe_wna16_marlin_gemm)"

    def prepare(self, weights):
        return self.admit(prepare_marlin_moe(weights))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        self._unavailable_apply()


class MarlinLinear(ExternalKernelMixin, LinearBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    needs_source = "vLLM quantization/utils/marlin_utils_fp4.py; SGLang sgl-kernel"
    kernel_call = "vllm._custom_ops.marlin_gemm (apply_fp4_marlin_linear)"

    def prepare(self, weights):
        return self.admit(prepare_marlin_linear(weights))

    def apply(self, x, prepared, *, out=None):
        self._unavailable_apply()
