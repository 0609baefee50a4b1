"""The MoE activations of the references (see ``backends.reference``'s docstring for each one's
formula and source), softmax top-k routing, and how a reference writes its output."""
from __future__ import annotations

from typing import Optional, Tuple

from ..common.constants import (
    GATED_ACTIVATIONS,
    INTERLEAVED_ACTIVATIONS,
    NON_GATED_ACTIVATIONS,
    SWIGLUOAI_DEFAULTS,
    SWIGLUSTEP_DEFAULT_LIMIT,
)
from ..formats.nvfp4 import _torch


def check_activation(activation: str, act_and_mul: bool) -> None:
    allowed = GATED_ACTIVATIONS if act_and_mul else NON_GATED_ACTIVATIONS
    if activation not in allowed:
        kind = "gated" if act_and_mul else "non-gated"
        raise ValueError(f"activation {activation!r} is not supported {kind} by the reference; "
                         f"{kind} activations: {', '.join(allowed)}")


def activation_fn(h, activation: str, act_and_mul: bool, *, swiglu_limit: Optional[float] = None,
                  swiglu_alpha: Optional[float] = None, swiglu_beta: Optional[float] = None):
    """Apply the MoE activation to FC1's output ``h`` (``[T, 2I]`` gated, ``[T, I]`` non-gated)."""
    torch = _torch()
    F = torch.nn.functional
    check_activation(activation, act_and_mul)
    if not act_and_mul:
        if activation == "relu2":
            return torch.square(F.relu(h))
        if activation == "silu":
            return F.silu(h)
        return F.gelu(h, approximate="tanh" if activation == "gelu_tanh" else "none")
    if activation in INTERLEAVED_ACTIVATIONS:
        g, u = h[..., 0::2], h[..., 1::2]
    else:
        half = h.shape[-1] // 2
        g, u = h[..., :half], h[..., half:]
    if activation in ("swigluoai", "swigluoai_uninterleave"):
        limit = SWIGLUOAI_DEFAULTS["limit"] if swiglu_limit is None else swiglu_limit
        alpha = SWIGLUOAI_DEFAULTS["alpha"] if swiglu_alpha is None else swiglu_alpha
        beta = SWIGLUOAI_DEFAULTS["beta"] if swiglu_beta is None else swiglu_beta
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
        return g * torch.sigmoid(alpha * g) * (u + beta)
    if swiglu_alpha is not None or swiglu_beta is not None:
        raise ValueError(f"swiglu_alpha / swiglu_beta apply to swigluoai and swigluoai_uninterleave "
                         f"only, not {activation!r}")
    if activation == "swiglustep":
        limit = SWIGLUSTEP_DEFAULT_LIMIT if swiglu_limit is None else swiglu_limit
        return F.silu(g).clamp(max=limit) * u.clamp(min=-limit, max=limit)
    if swiglu_limit is not None:
        g = g.clamp(max=swiglu_limit)
        u = u.clamp(min=-swiglu_limit, max=swiglu_limit)
    if activation == "silu":
        return F.silu(g) * u
    return F.gelu(g, approximate="tanh" if activation == "gelu_tanh" else "none") * u


def route(router_logits, top_k: int, renormalize: bool = True) -> Tuple[object, object]:
    """Softmax top-k routing: ``(topk_weights float32 [T, k], topk_ids int32 [T, k])``."""
    torch = _torch()
    probs = torch.softmax(router_logits.to(torch.float32), dim=-1)
    w, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def _write_out(y, out, like):
    """``y`` in the dtype of ``like``, or copied into the caller's ``out``, which must have that
    dtype (or the compute dtype itself: a float64 reference keeps its precision), the shape and
    the device (checked as the FlashInfer paths check it: no silent cast)."""
    if out is None:
        return y.to(like.dtype)
    from ..common.validate import output_buffer
    dtype = y.dtype if getattr(out, "dtype", None) == y.dtype else like.dtype
    buf = output_buffer(out, tuple(y.shape), dtype, y.device)
    buf.copy_(y)
    return buf


__all__ = ["GATED_ACTIVATIONS", "INTERLEAVED_ACTIVATIONS", "NON_GATED_ACTIVATIONS", "SWIGLUOAI_DEFAULTS",
           "SWIGLUSTEP_DEFAULT_LIMIT", "check_activation", "activation_fn", "route"]
