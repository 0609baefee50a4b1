"""``b12x``: the native ``b12x`` package's SM12x kernels (vLLM ``vllm[b12x]``, #52016 #52018).

flashinfer-python 0.7.4 also installs a top-level module named ``b12x``: only the distribution
metadata proves the package is there, which is what ``prepare`` checks. Weights:
:func:`backends.prepare.prepare_b12x_native_moe` (vLLM ``quantization/utils/b12x_moe.py``) and,
for dense layers, the swizzled 128x4 form of :func:`backends.prepare.prepare_fp4_linear`
(assumed as for the MoE; not verified against the package). ``prepare`` raises
:class:`backends.wrappers._base.BackendUnavailable` naming the missing distribution ``b12x``.
"""
from __future__ import annotations

from ..prepare import prepare_b12x_native_moe, prepare_fp4_linear
from ._base import ExternalKernelMixin, LinearBackend, MoEBackend


class B12xNativeMoE(ExternalKernelMixin, MoEBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    needs_source = ("vLLM #52016 #52018 (vllm[b12x]); flashinfer-python 0.7.4 wheel (its top-level "
                    "b12x module: distribution metadata, not the import)")
    kernel_call = "the b12x package's NVFP4 MoE (vLLM fused_moe/b12x.py B12xExperts)"

    def prepare(self, weights):
        return self.admit(prepare_b12x_native_moe(weights, quant=self.quant))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        self._unavailable_apply()


class B12xNativeLinear(ExternalKernelMixin, LinearBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    needs_source = "vLLM #39634 #52016 (b12x dense FP4 GEMM)"
    kernel_call = "the b12x package's dense NVFP4 GEMM"

    def prepare(self, weights):
        return self.admit(prepare_fp4_linear(weights, pad=False))  # vLLM's b12x linear kernel does not pad

    def apply(self, x, prepared, *, out=None):
        self._unavailable_apply()
