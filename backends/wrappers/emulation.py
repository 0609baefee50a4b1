"""``emulation``: the layer computed with plain torch (dequantize, then matmul) on any device.

Always available: the last resort of every selector order. By default it runs as a kernel would
(``backends.reference.emulate_moe`` / ``emulate_linear``): only the routed experts' weights are
expanded, per call, to codes times block scales in the activation dtype (exact in bf16), GEMMs in
that dtype, global scales on the float32 outputs; nothing is cached, so its memory is the
checkpoint's plus one expert's weights in bf16 (on CUDA, where the routed experts run grouped as
batched GEMMs: one group's, at most ``reference.EXPERT_GROUP_BYTES``; docs/records/h200.md for the figures).
``compute_dtype=torch.float64`` (or float32) runs the oracle, ``reference_moe`` /
``reference_linear``, instead: what ``doctor --verify`` compares every backend with.
"""
from __future__ import annotations

from ..prepare import prepare_emulation
from ..reference import QUANTS
from ._base import LinearBackend, MoEBackend


class EmulationMoE(MoEBackend):
    """Reference fused MoE. ``apply(x, prepared, topk_weights, topk_ids, out=None)``.

    fc1_input_scale / fc2_input_scale override the checkpoint's activation scales (W4A4); e.g.
    ``fc2_input_scale=1.0`` reproduces b12x's per-block dynamic FC2 input quantization.
    """

    #: what the reference computes: a scheme added to its file but not to the reference is
    #: refused when the object is built, not deep inside ``apply``
    computes = QUANTS

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
        from ..reference import GATED_ACTIVATIONS, NON_GATED_ACTIVATIONS
        return GATED_ACTIVATIONS if gated else NON_GATED_ACTIVATIONS

    def prepare(self, weights):
        """Pure: validates the checkpoint and keeps it as is (no dequantized copy)."""
        return prepare_emulation(weights, self.compute_dtype)

    def _overrides_on(self, device):
        """The scale overrides as float32 tensors on ``device``, made once per device: a call
        then copies nothing from the host (a CUDA graph can capture it) and their value check
        runs once (``validate.once`` on the same tensor)."""
        if not self.scale_overrides:
            return {}
        import torch
        cache = self.__dict__.setdefault("_overrides_by_device", {})
        key = str(device)
        if key not in cache:
            cache[key] = {k: torch.as_tensor(v, dtype=torch.float32, device=device)
                          for k, v in self.scale_overrides.items()}
        return cache[key]

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        """The fast path (``emulate_moe``): on CUDA with the fused kernels, once a shape has run
        (its kernels compiled), the call has no host sync and can be captured in a CUDA graph."""
        from ..reference import emulate_moe, reference_moe
        if self.compute_dtype is None:
            return emulate_moe(x, prepared.weights, topk_weights, topk_ids,
                               activation=self.activation, quant=self.quant,
                               swiglu_limit=self.swiglu_limit, swiglu_alpha=self.swiglu_alpha,
                               swiglu_beta=self.swiglu_beta, out=out,
                               **self._overrides_on(x.device))
        return reference_moe(x, prepared.weights, topk_weights, topk_ids, activation=self.activation,
                             quant=self.quant, swiglu_limit=self.swiglu_limit,
                             swiglu_alpha=self.swiglu_alpha, swiglu_beta=self.swiglu_beta,
                             deq=prepared.dequantized, out=out, compute_dtype=self.compute_dtype,
                             **self.scale_overrides)


class EmulationLinear(LinearBackend):
    """Reference linear layer. ``apply(x, prepared, out=None)``."""

    computes = QUANTS

    def __init__(self, *, compute_dtype=None, **kw):
        super().__init__(**kw)
        self.compute_dtype = compute_dtype

    def prepare(self, weights):
        return prepare_emulation(weights, self.compute_dtype)

    def apply(self, x, prepared, *, out=None):
        from ..reference import emulate_linear, reference_linear
        if self.compute_dtype is None and prepared.dequantized is None:
            return emulate_linear(x, prepared.weights, quant=self.quant, out=out)
        return reference_linear(x, prepared.weights, quant=self.quant, w_deq=prepared.dequantized,
                                out=out, compute_dtype=self.compute_dtype)
