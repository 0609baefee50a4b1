"""``deep_gemm``: DeepGEMM's block-FP8 GEMM (``fp8_gemm_nt``, 1x128 activation and 128x128 weight
block scales) as vLLM vendors it (``vllm.third_party.deep_gemm``) and runs it
(``DeepGemmFp8BlockScaledMMKernel``; SM 9.0 and 10.x).

The kernel needs the ``vllm`` distribution (or DeepGEMM itself), which this project's environments
do not install: ``prepare`` raises :class:`backends.wrappers._base.BackendUnavailable` naming it (and the
selector's reasons), and where it is installed ``apply`` says to run the layer through vLLM.
"""
from __future__ import annotations

from ._base import ExternalKernelMixin, LinearBackend


class DeepGemmLinear(ExternalKernelMixin, LinearBackend):
    needs_source = "vLLM kernels/linear/scaled_mm/deep_gemm.py (DeepGemmFp8BlockScaledMMKernel)"
    kernel_call = "vllm.utils.deep_gemm.fp8_gemm_nt"

    def prepare(self, weights):
        return self.admit(weights)

    def apply(self, x, prepared, *, out=None):
        self._unavailable_apply()
