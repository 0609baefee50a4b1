"""What every preparation shares: the constants, the input checks (one ValueError naming the
tensor, what was expected and what was given: :func:`moe_shape`, :func:`linear_shape`) and the
shared tensor operations (padding, reordering, alignment)."""
from __future__ import annotations

from typing import Any, Dict, Tuple

from ..formats.nvfp4 import (
    E4M3_REL_HALF_ULP,
    LinearWeights,
    MoEWeights,
    NVFP4Tensor,
    _torch,
    ceil_to,
    check_block_scale,
    check_scale,
)

#: default bound on the relative change of any block scale (hence of any weight) by a fold: one
#: E4M3 rounding (2^-4, the half-ULP of an E4M3 normal number). A fold that pushes block scales
#: into the subnormal range loses more and is refused; a flush of a non-zero scale to 0 always is.
FOLD_MAX_REL_ERROR = E4M3_REL_HALF_ULP
FOLD_MODES = ("full", "none")
QUANTS = ("nvfp4", "nvfp4_w4a16")
TRTLLM_EPILOGUE_TILE_M = 128
#: vLLM ``align_fp4_moe_hidden_dim_for_fi``: TRT-LLM and CuTe-DSL read whole 256-wide K tiles.
FI_HIDDEN_ALIGN = 256
#: vLLM ``pad_nvfp4_weight_for_cutlass``: CUTLASS-family dense GEMMs need N and K % 32 == 0.
CUTLASS_LINEAR_ALIGN = 32


# ================================================================================================
# validation
# ================================================================================================

def _describe(t) -> str:
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{str(t.dtype).replace('torch.', '')} {list(t.shape)}"


def _expect(t, name: str, dtype, shape) -> None:
    """``t`` must be a tensor of ``dtype`` and ``shape``; one message naming all three otherwise."""
    torch = _torch()
    if (not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != tuple(shape)):
        raise ValueError(f"{name}: expected {str(dtype).replace('torch.', '')} {list(shape)}, "
                         f"got {_describe(t)}")


def _check_nvfp4(t: NVFP4Tensor, name: str, lead: Tuple[int, ...], rows: int, k: int,
                 scale_shapes) -> None:
    torch = _torch()
    if not isinstance(t, NVFP4Tensor):
        raise ValueError(f"{name}: expected an NVFP4Tensor, got {type(t).__name__}")
    if k % 16:
        raise ValueError(f"{name}: K = {k} (twice packed's last dimension) must be a multiple of 16")
    _expect(t.packed, f"{name}.packed", torch.uint8, lead + (rows, k // 2))
    _expect(t.block_scale, f"{name}.block_scale", torch.float8_e4m3fn, lead + (rows, k // 16))
    s2 = t.scale_2
    if not isinstance(s2, torch.Tensor) or s2.dtype != torch.float32 or tuple(s2.shape) not in scale_shapes:
        raise ValueError(f"{name}.scale_2: expected float32 of shape "
                         f"{' or '.join(str(list(s)) for s in scale_shapes)}, got {_describe(s2)}")
    check_scale(s2, f"{name}.scale_2", plausible=True)
    check_block_scale(t.block_scale, f"{name}.block_scale")


def _check_act_scale(s, name: str, shapes) -> None:
    torch = _torch()
    if s is None:
        return
    if not isinstance(s, torch.Tensor) or not s.dtype.is_floating_point or tuple(s.shape) not in shapes:
        raise ValueError(f"{name}: expected a float tensor of shape "
                         f"{' or '.join(str(list(x)) for x in shapes)}, got {_describe(s)}")
    check_scale(s, name, plausible=True)


def moe_shape(weights) -> Tuple[int, int, int, bool]:
    """Validate an :class:`MoEWeights`; ``(E, H, I, gated)``.

    Every tensor's dtype and shape is checked against the others (w2's hidden size against w13's,
    block scales against weights, one global scale per expert or one in all); scales must be
    finite and positive. A mismatch raises one ``ValueError`` naming the tensor, the expected and
    the actual dtype and shape.
    """
    if not isinstance(weights, MoEWeights):
        raise ValueError(f"expected MoEWeights, got {type(weights).__name__}")
    p13, p2 = weights.w13.packed, weights.w2.packed
    if getattr(p13, "dim", lambda: 0)() != 3 or getattr(p2, "dim", lambda: 0)() != 3:
        raise ValueError(f"w13.packed and w2.packed must be 3-D [E, rows, K/2]; got "
                         f"{_describe(p13)} and {_describe(p2)}")
    E, rows, H = int(p13.shape[0]), int(p13.shape[1]), int(p13.shape[2]) * 2
    I = int(p2.shape[2]) * 2
    if rows not in (I, 2 * I):
        raise ValueError(f"w13 has {rows} rows; expected I = {I} (non-gated) or 2I = {2 * I} "
                         f"(gated), I being w2's K")
    scale_shapes = ((), (E,))
    _check_nvfp4(weights.w13, "w13", (E,), rows, H, scale_shapes)
    _check_nvfp4(weights.w2, "w2", (E,), H, I, scale_shapes)
    _check_act_scale(weights.a13_scale, "a13_scale", scale_shapes)
    _check_act_scale(weights.a2_scale, "a2_scale", scale_shapes)
    return E, H, I, rows == 2 * I


def linear_shape(weights) -> Tuple[int, int]:
    """Validate a :class:`LinearWeights`; ``(N, K)``."""
    torch = _torch()
    if not isinstance(weights, LinearWeights):
        raise ValueError(f"expected LinearWeights, got {type(weights).__name__}")
    p = weights.weight.packed
    if getattr(p, "dim", lambda: 0)() != 2:
        raise ValueError(f"weight.packed must be 2-D [N, K/2]; got {_describe(p)}")
    N, K = int(p.shape[0]), int(p.shape[1]) * 2
    _check_nvfp4(weights.weight, "weight", (), N, K, ((), (1,)))
    _check_act_scale(weights.input_scale, "input_scale", ((), (1,)))
    if weights.bias is not None and (not isinstance(weights.bias, torch.Tensor)
                                     or tuple(weights.bias.shape) != (N,)):
        raise ValueError(f"bias: expected a tensor of shape [{N}], got {_describe(weights.bias)}")
    return N, K


def _check_quant(quant: str, backend: str, accepted=QUANTS) -> None:
    if quant not in accepted:
        raise ValueError(f"{backend}: quant {quant!r}; accepted: {', '.join(accepted)}")


def _f32(t, device=None):
    """A new float32 tensor (never a view of the input)."""
    torch = _torch()
    return torch.as_tensor(t, device=device).to(torch.float32).clone()


def _per_expert(scale, num_experts: int):
    """A validated 0-d or ``[E]`` scale as a new float32 ``[E]`` tensor."""
    s = _f32(scale)
    return s.expand(num_experts).clone() if s.dim() == 0 else s


def _moe_geometry(E: int, H: int, I: int, gated: bool) -> Dict[str, Any]:
    return {"num_experts": E, "hidden_size": H, "intermediate_size": I, "act_and_mul": gated}


# ================================================================================================
# shared tensor operations
# ================================================================================================

def _pad(t, pad):
    """``F.pad`` with zeros, for float8 tensors too (padded through a uint8 view)."""
    torch = _torch()
    if not any(pad):
        return t
    raw = t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t
    out = torch.nn.functional.pad(raw, pad)
    return out.view(t.dtype) if t.dtype == torch.float8_e4m3fn else out


def _pad_halves(t, half: int, padded: int):
    """``[E, 2*half, ...]`` -> ``[E, 2*padded, ...]``: each of the two halves zero-padded."""
    E, rest = t.shape[0], tuple(t.shape[2:])
    v = t.reshape((E, 2, half) + rest)
    return _pad(v, (0, 0) * len(rest) + (0, padded - half)).reshape((E, 2 * padded) + rest)


def reorder_w13_to_w31(t):
    """``[E, 2I, ...]`` rows ``[gate; up]`` -> ``[up; gate]`` (vLLM ``reorder_w1w3_to_w3w1``); new tensor."""
    torch = _torch()
    half = t.shape[1] // 2
    return torch.cat([t[:, half:], t[:, :half]], dim=1).contiguous()


def interleave_linear_and_gate(t, group_size: int = 64):
    """``[E, 2I, ...]`` rows ``[up; gate]`` -> alternating 64-row groups (vLLM, for CuTe-DSL)."""
    E, rows = t.shape[0], t.shape[1]
    if rows % (2 * group_size):
        raise ValueError(f"{rows} rows are not a multiple of {2 * group_size}")
    rest = tuple(t.shape[2:])
    v = t.reshape((E, 2, rows // (2 * group_size), group_size) + rest)
    return v.transpose(1, 2).contiguous().reshape((E, rows) + rest)


def align_intermediate(w13, s13, w2, s2, gated: bool, align: int):
    """vLLM ``align_fp4_moe_weights_for_fi``: zero-pad I to a multiple of ``align`` (each gated
    half separately, w2's K and scales alike); ``(w13, s13, w2, s2, padded I)``."""
    I = w2.shape[2] * 2
    Ip = ceil_to(I, align)
    if Ip == I:
        return w13, s13, w2, s2, I
    if gated:
        w13, s13 = _pad_halves(w13, I, Ip), _pad_halves(s13, I, Ip)
    else:
        w13, s13 = _pad(w13, (0, 0, 0, Ip - I)), _pad(s13, (0, 0, 0, Ip - I))
    return w13, s13, _pad(w2, (0, (Ip - I) // 2)), _pad(s2, (0, (Ip - I) // 16)), Ip


def align_hidden(w13, s13, w2, s2, align: int = FI_HIDDEN_ALIGN):
    """vLLM ``align_fp4_moe_hidden_dim_for_fi``: zero-pad H to a multiple of ``align`` (w13's K,
    w2's rows); ``(w13, s13, w2, s2, padded H)``."""
    H = w13.shape[2] * 2
    Hp = ceil_to(H, align)
    if Hp == H:
        return w13, s13, w2, s2, H
    return (_pad(w13, (0, (Hp - H) // 2)), _pad(s13, (0, (Hp - H) // 16)),
            _pad(w2, (0, 0, 0, Hp - H)), _pad(s2, (0, 0, 0, Hp - H)), Hp)


def canonicalize_fp4_zero_signs(packed):
    """A copy of ``packed`` with every FP4 -0 code (0x8) made +0 (vLLM ``_canonicalize_fp4_zero_signs_``,
    which native b12x needs; vLLM does it in place)."""
    torch = _torch()
    mag = packed & 0x77
    nonzero = (mag | (mag >> 1) | (mag >> 2)) & 0x11
    return packed & (0x77 | (nonzero << 3)).to(torch.uint8)


def live_blocks(packed):
    """``[..., rows, K/2]`` packed codes -> bool ``[..., rows, K/16]``: the block holds a non-zero code.
    A block whose codes are all zero contributes nothing whatever its scale (ModelOpt writes 1.0)."""
    b = packed.reshape(tuple(packed.shape[:-1]) + (-1, 8))
    return ((b & 0x77) != 0).any(-1)
