"""Checkpoint containers: an NVFP4 linear layer and MoE layer as a ModelOpt checkpoint stores
them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .codec import (
    NVFP4Tensor,
    amax_checked,
    quantize,
    scale_2_from_amax,
)
from .formats import (
    _torch,
)

# ----------------------------------------------------------------------------------------------
# checkpoint containers
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinearWeights:
    """An NVFP4 linear layer as a ModelOpt checkpoint stores it.

    weight: ``[N, K]`` NVFP4; input_scale: float32 0-d, the calibrated activation scale (ModelOpt
    ``input_scale``, dequantization convention) or None (W4A16 checkpoints have none); bias: ``[N]``
    or None.
    """

    weight: NVFP4Tensor
    input_scale: Any = None
    bias: Any = None

    @property
    def out_features(self) -> int:
        return int(self.weight.packed.shape[-2])

    @property
    def in_features(self) -> int:
        return int(self.weight.packed.shape[-1] * 2)


@dataclass(frozen=True)
class MoEWeights:
    """NVFP4 fused-MoE expert weights in checkpoint (vLLM ``w13``/``w2``) form.

    w13: ``[E, 2I, H]`` for gated activations, rows ``[w1 (gate); w3 (up)]`` as vLLM concatenates
    them (``act(x @ w1.T) * (x @ w3.T)``), or ``[E, I, H]`` non-gated; per-expert ``scale_2`` ``[E]``.
    w2: ``[E, H, I]``. a13_scale / a2_scale: ModelOpt ``input_scale`` of FC1 / FC2, 0-d or ``[E]``,
    or None (W4A16 checkpoints, e.g. ModelOpt ``W4A16_NVFP4``, have no activation scales).
    """

    w13: NVFP4Tensor
    w2: NVFP4Tensor
    a13_scale: Any = None
    a2_scale: Any = None

    @property
    def num_experts(self) -> int:
        return int(self.w13.packed.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.w2.packed.shape[1])

    @property
    def intermediate_size(self) -> int:
        return int(self.w2.packed.shape[2] * 2)

    @property
    def act_and_mul(self) -> bool:
        rows = int(self.w13.packed.shape[1])
        if rows == 2 * self.intermediate_size:
            return True
        if rows == self.intermediate_size:
            return False
        raise ValueError(f"w13 has {rows} rows; expected I={self.intermediate_size} or 2I")


def quantize_linear(w, input_scale=None, bias=None) -> LinearWeights:
    """Quantize a float ``[N, K]`` weight as ModelOpt does (per-tensor scale_2 from amax)."""
    torch = _torch()
    s = None if input_scale is None else torch.as_tensor(input_scale, dtype=torch.float32)
    return LinearWeights(quantize(w), s, bias)


def quantize_moe(w13, w2, a13_scale=None, a2_scale=None) -> MoEWeights:
    """Quantize float expert weights (``[E, 2I|I, H]`` and ``[E, H, I]``), one scale_2 per expert."""
    torch = _torch()

    def f(s):
        return None if s is None else torch.as_tensor(s, dtype=torch.float32, device=w13.device)

    return MoEWeights(quantize(w13, global_dims=1), quantize(w2, global_dims=1), f(a13_scale),
                      f(a2_scale))


def activation_scale_from_amax(x):
    """A calibrated ModelOpt ``input_scale`` for activation ``x``: amax / (6 * 448)."""
    return scale_2_from_amax(amax_checked(x))
