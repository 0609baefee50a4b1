"""Constants more than one floor of ``backends`` reads: the NVFP4 element formats' largest values
(the fused-MoE kernel's dynamic scale, the quantizer, verify's bounds) and the MoE activations
(the references, the fused kernel, the wrappers' admission checks)."""
from __future__ import annotations

E2M1_MAX = 6.0    # largest FP4 E2M1 magnitude
E4M3_MAX = 448.0  # largest FP8 E4M3 magnitude

GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai", "swigluoai_uninterleave",
                     "swiglustep")
# Gated activations that read gate/up interleaved (even/odd columns), not as [gate; up] halves.
INTERLEAVED_ACTIVATIONS = ("swigluoai",)
NON_GATED_ACTIVATIONS = ("relu2", "silu", "gelu", "gelu_tanh")
SWIGLUOAI_DEFAULTS = {"alpha": 1.702, "beta": 1.0, "limit": 7.0}
SWIGLUSTEP_DEFAULT_LIMIT = 7.0  # vLLM SwigluStepAndMul; FlashInfer fused_moe/api.py SwiGLUStep
