"""The scheme of a layer group selector does not plan. (Per-rank sizes are checkpoint/arch.py's:
each module split as vLLM's model class builds it.)"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.plan import Kind


def other_scheme(k: Kind) -> str:
    """The scheme of a group selector does not plan (no layer.quant value: unquantized, or a
    scheme the vocabulary lacks), from the rule of the quantization config that decided it
    (checkpoint/quant.py's words)."""
    why = k.why
    if re.search(r"excluded|ignored|skipped|unquantized|not in quantized_layers|LM head", why):
        return "unquantized"
    if re.search(r"\bint\d", why):
        return "int"
    return "unknown"
