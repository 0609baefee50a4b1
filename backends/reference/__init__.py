"""The references, what each backend's output is compared with: `activations` (the MoE
activations, routing, the output write), `nvfp4` (the NVFP4 linear layer and fused MoE:
dequantize, then matmul), `emulate` (the same layers as a kernel computes them: the `emulation`
backend's fast path) and `fp8` (the FP8 linear layer and MoE).

This face re-exports their public names; code that replaces one (a test's monkeypatch) names the
module that defines it. Imports torch only inside functions.
"""
from .activations import (
    GATED_ACTIVATIONS,
    INTERLEAVED_ACTIVATIONS,
    NON_GATED_ACTIVATIONS,
    SWIGLUOAI_DEFAULTS,
    SWIGLUSTEP_DEFAULT_LIMIT,
    activation_fn,
    check_activation,
    route,
)
from .emulate import EXPERT_GROUP_BYTES, emulate_linear, emulate_moe, exact_quantizer
from .fp8 import reference_fp8_linear, reference_fp8_moe
from .nvfp4 import QUANTS, W13_ORDERS, dequantize_moe, reference_linear, reference_moe

__all__ = ["GATED_ACTIVATIONS", "INTERLEAVED_ACTIVATIONS", "NON_GATED_ACTIVATIONS", "SWIGLUOAI_DEFAULTS",
           "SWIGLUSTEP_DEFAULT_LIMIT", "EXPERT_GROUP_BYTES", "QUANTS", "W13_ORDERS", "activation_fn",
           "check_activation", "route", "dequantize_moe", "emulate_linear", "emulate_moe", "exact_quantizer",
           "reference_linear", "reference_moe", "reference_fp8_linear", "reference_fp8_moe"]
