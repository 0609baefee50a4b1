"""``triton`` and ``deep_gemm``: the FP8 MoE kernels vLLM and SGLang run from their own wheels
(vLLM ``fused_moe/experts/triton_moe.py`` TritonExperts, ``triton_deep_gemm_moe.py``
TritonOrDeepGemmExperts, DeepGEMM's grouped GEMMs). Neither is installed in this project's
environments: ``prepare`` raises :class:`backends.wrappers._base.BackendUnavailable` naming the missing
distribution (and the selector's reasons); where it is installed, NotImplementedError names the
kernel call this project does not make.
"""
from __future__ import annotations

from ._base import ExternalKernelMixin, MoEBackend


class TritonMoE(ExternalKernelMixin, MoEBackend):
    needs_source = "vLLM fused_moe/experts/triton_moe.py (TritonExperts)"
    kernel_call = "vllm.model_executor.layers.fused_moe.fused_moe.fused_experts"

    def prepare(self, weights):
        self._unavailable_apply()

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        self._unavailable_apply()


class DeepGemmMoE(ExternalKernelMixin, MoEBackend):
    needs_source = "vLLM fused_moe/experts/deep_gemm_moe.py (DeepGemmExperts)"
    kernel_call = "deep_gemm.m_grouped_fp8_gemm_nt_contiguous"

    def prepare(self, weights):
        self._unavailable_apply()

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        self._unavailable_apply()
