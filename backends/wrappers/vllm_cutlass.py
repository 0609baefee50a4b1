"""``cutlass``: vLLM's own CUTLASS NVFP4 kernels (``vllm._custom_ops.cutlass_scaled_fp4_mm`` and
``cutlass_fp4_moe_mm``; SM 10.x-12.x, vLLM built with CUDA >= 12.8).

Weights: :func:`backends.prepare.prepare_fp4_linear` (swizzled 128x4, vLLM ``swizzle_blockscale``)
and :func:`backends.prepare.prepare_swizzled_moe` (``[gate; up]`` kept, per-expert activation
scales: vLLM ``prepare_nvfp4_moe_layer_for_fi_or_cutlass`` with ``VLLM_CUTLASS``). The kernels need
the ``vllm`` distribution, which is not installed in this project's environments: ``prepare``
raises :class:`backends.wrappers._base.BackendUnavailable` naming it (and the selector's reasons).
"""
from __future__ import annotations

from ..prepare import prepare_fp4_linear, prepare_swizzled_moe
from ._base import ExternalKernelMixin, LinearBackend, MoEBackend


class VllmCutlassMoE(ExternalKernelMixin, MoEBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    needs_source = "vLLM experts/cutlass_moe.py (CutlassExpertsFp4)"
    kernel_call = "vllm._custom_ops.cutlass_fp4_moe_mm"

    def prepare(self, weights):
        return self.admit(prepare_swizzled_moe(weights, backend="cutlass"))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        self._unavailable_apply()


class VllmCutlassLinear(ExternalKernelMixin, LinearBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    needs_source = "vLLM quantization/utils/nvfp4_utils.py (cutlass_scaled_fp4_mm)"
    kernel_call = "vllm._custom_ops.cutlass_scaled_fp4_mm"

    def prepare(self, weights):
        return self.admit(prepare_fp4_linear(weights))

    def apply(self, x, prepared, *, out=None):
        self._unavailable_apply()
