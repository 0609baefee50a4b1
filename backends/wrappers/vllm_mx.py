"""MXFP4 and MXFP8 MoE backends whose kernels ship inside vLLM's CUDA wheel: OpenAI's
``triton_kernels`` MoE (vendored as ``vllm.third_party.triton_kernels``; ``triton`` and
``triton_unfused``) and DeepSeek's DeepGEMM (vendored as ``vllm.third_party.deep_gemm``;
``deep_gemm``). This project does not call them: ``prepare`` and ``apply`` raise
:class:`backends.wrappers._base.BackendUnavailable` or NotImplementedError naming the kernel and the
distribution, like every other engine-only backend (:class:`backends.wrappers._base.ExternalKernelMixin`).
"""
from __future__ import annotations

from ._base import ExternalKernelMixin, MoEBackend


class _EngineOnlyMoE(ExternalKernelMixin, MoEBackend):
    def prepare(self, weights):
        self._unavailable_apply()

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        self._unavailable_apply()


class TritonKernelsMoE(_EngineOnlyMoE):
    needs_source = "vLLM experts/gpt_oss_triton_kernels_moe.py (OAITritonMxfp4ExpertsMonolithic)"
    kernel_call = "triton_kernels.matmul_ogs (vLLM's vendored OpenAI triton_kernels MoE)"


class TritonUnfusedMoE(_EngineOnlyMoE):
    needs_source = "vLLM experts/gpt_oss_triton_kernels_moe.py (UnfusedOAITritonExperts)"
    kernel_call = "triton_kernels.matmul_ogs, unfused activation (vLLM's vendored triton_kernels)"


class DeepGemmMoE(_EngineOnlyMoE):
    needs_source = "vLLM experts/deep_gemm_moe.py (DeepGemmExperts, DeepGemmFP4Experts)"
    kernel_call = "deep_gemm grouped GEMM (vLLM's vendored DeepGEMM)"
