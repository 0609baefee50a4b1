"""``emulation``: the reference NVFP4 implementation (dequantize, then matmul) on any device.

Slow by design and always available: it is the last resort of every selector order and the
oracle the other backends are tested against. See ``backends.reference`` for the arithmetic.
"""
from __future__ import annotations

from ._base import LinearBackend, MoEBackend
from .prepare import prepare_emulation


class EmulationMoE(MoEBackend):
    """Reference fused MoE. ``apply(x, prepared, topk_weights, topk_ids, out=None)``.

    fc1_input_scale / fc2_input_scale override the checkpoint's activation scales (W4A4); e.g.
    ``fc2_input_scale=1.0`` reproduces b12x's per-block dynamic FC2 input quantization.
    """


    def __init__(self, *, compute_dtype=None, fc1_input_scale=None, fc2_input_scale=None,
                 swiglu_alpha=None, swiglu_beta=None, **kw):
        super().__init__(**kw)
        self.compute_dtype = compute_dtype
        self.scale_overrides = {k: v for k, v in (("fc1_input_scale", fc1_input_scale),
                                                  ("fc2_input_scale", fc2_input_scale))
                                if v is not None}
        self.swiglu_alpha, self.swiglu_beta = swiglu_alpha, swiglu_beta

    @classmethod
    def activations(cls, gated: bool):
        """The activations the reference implements (gated or not), both SwiGLU-OAI layouts."""
        from .reference import GATED_ACTIVATIONS, NON_GATED_ACTIVATIONS
        return GATED_ACTIVATIONS if gated else NON_GATED_ACTIVATIONS

    def prepare(self, weights):
        """Pure: caches the dequantized weights next to the (unmodified) checkpoint."""
        return prepare_emulation(weights, self.compute_dtype)

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        from .reference import reference_moe
        return reference_moe(x, prepared.weights, topk_weights, topk_ids, activation=self.activation,
                             quant=self.quant, swiglu_limit=self.swiglu_limit,
                             swiglu_alpha=self.swiglu_alpha, swiglu_beta=self.swiglu_beta,
                             deq=prepared.dequantized, out=out, compute_dtype=self.compute_dtype,
                             **self.scale_overrides)


class EmulationLinear(LinearBackend):
    """Reference NVFP4 linear layer. ``apply(x, prepared, out=None)``."""


    def __init__(self, *, compute_dtype=None, **kw):
        super().__init__(**kw)
        self.compute_dtype = compute_dtype

    def prepare(self, weights):
        return prepare_emulation(weights, self.compute_dtype)

    def apply(self, x, prepared, *, out=None):
        from .reference import reference_linear
        return reference_linear(x, prepared.weights, quant=self.quant, w_deq=prepared.dequantized,
                                out=out, compute_dtype=self.compute_dtype)
