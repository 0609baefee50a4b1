"""Each backend's weight preparation, as pure functions: checkpoint tensors in, new tensors out.

No function here writes into its inputs. Tensors a backend uses unchanged (packed FP4 weights that
need no reordering or padding) are returned as the same objects, never modified; everything
derived (folded, swizzled, reordered, padded tensors; alphas; FC2 input scales) is a new tensor.
This is the fix for the in-place overwrite vLLM's first b12x integration made
(``a2_gscale.fill_(1.0)``, #40082 review: a later switch of backend then read the overwritten
scale).

Each function produces, byte for byte, what vLLM 0.32.0 (= 0.33.0 here) hands the kernel, except
for the differences listed in ``docs/backends.md`` ("Deliberate differences from vLLM");
``tests/vllm/test_prepare_parity.py`` runs vLLM's own functions next to these and fails on any
other difference. Every input is validated first (:func:`moe_shape`, :func:`linear_shape`): one
``ValueError`` naming the tensor, what was expected and what was given.

Checkpoint form: :class:`backends.nvfp4.MoEWeights` / :class:`backends.nvfp4.LinearWeights`
(ModelOpt conventions, ``w13`` rows ``[gate; up]``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .nvfp4 import (
    E4M3_MAX,
    E4M3_MIN_NORMAL,
    E4M3_REL_HALF_ULP,
    LinearWeights,
    MoEWeights,
    NVFP4Tensor,
    _bcast,
    _torch,
    ceil_to,
    check_block_scale,
    check_scale,
    flashinfer_mma_layout,
    swizzle_128x4,
    to_e4m3,
    to_mma_layout,
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


# ================================================================================================
# folding a float32 global scale into the E4M3 block scales
# ================================================================================================

@dataclass(frozen=True)
class FoldReport:
    """What folding ``scale_2`` into a tensor's E4M3 block scales did to them (live blocks only:
    a block whose codes are all zero is ignored, whatever its scale)."""

    name: str
    mode: str
    blocks: int
    nonzero: int
    overflow: int            # folded value > 448 (E4M3 max)
    flushed: int             # a non-zero scale that became 0
    subnormal: int           # a non-zero folded scale below 2^-6 (E4M3 subnormal: few bits left)
    max_folded: float        # largest exact folded value
    min_nonzero_folded: float
    max_rel_error: float     # max |e4m3(folded) - folded| / folded over non-zero scales
    mean_rel_error: float
    bound: float

    @property
    def ok(self) -> bool:
        return self.overflow == 0 and self.flushed == 0 and self.max_rel_error <= self.bound

    def describe(self) -> str:
        return (f"{self.name}: fold mode {self.mode!r}, {self.blocks} block scales "
                f"({self.nonzero} non-zero): {self.overflow} overflow E4M3 max {E4M3_MAX:g} "
                f"(largest folded {self.max_folded:.6g}), {self.flushed} flushed to 0, "
                f"{self.subnormal} subnormal (< 2^-6, smallest {self.min_nonzero_folded:.3g}); "
                f"relative error max {self.max_rel_error:.3g} mean {self.mean_rel_error:.3g} "
                f"(bound {self.bound:.3g})")


class ScaleFoldError(ValueError):
    """Folding the global scale into the block scales would overflow E4M3 or lose precision."""

    def __init__(self, report: FoldReport):
        self.report = report
        what = []
        if report.overflow:
            what.append("overflow")
        if report.flushed or report.max_rel_error > report.bound:
            what.append("precision loss above the bound")
        hint = ("; fold_mode='none' keeps the block scales and passes the global scale as alpha "
                "(exact; needs FlashInfer >= 0.6.17 input_global_scale, #3932)"
                if report.mode == "full" else "")
        super().__init__(f"refusing to fold ({', '.join(what)}): {report.describe()}{hint}")


def fold_global_scale(block_scale, scale_2, *, mode: str = "full",
                      max_rel_error: float = FOLD_MAX_REL_ERROR, name: str = "weight",
                      strict: bool = True, packed=None):
    """Fold ``scale_2`` (0-d or per leading index, e.g. per expert) into E4M3 ``block_scale``.

    mode "full" (vLLM's b12x integration, #40082): folded = e4m3(float32(block_scale * scale_2)),
    vLLM's arithmetic, alpha = 1. The product is re-rounded to E4M3: up to 2^-4 relative in the
    normal range, more once it falls below 2^-6 (subnormal), and a flush to 0 below 2^-10.
    ModelOpt's scale_2 = amax / 2688 makes the folded scale about amax_block / 6, so weights with
    block amax under ~0.09 (typical LLM weights) land in the subnormal range.
    mode "none": folded = block_scale (unchanged values, new tensor), alpha = scale_2: exact.
    ``packed`` (the weight's codes): blocks whose codes are all zero are left out of the report
    (ModelOpt stores scale 1.0 for an all-zero block; whatever the fold does to it changes nothing).

    Returns ``(folded float8_e4m3fn, alpha float32 with scale_2's shape, FoldReport)``; raises
    :class:`ScaleFoldError` on overflow, on a flush to 0 or on a relative error above
    ``max_rel_error`` unless ``strict`` is False. Inputs are not modified.
    """
    torch = _torch()
    if mode not in FOLD_MODES:
        raise ValueError(f"fold mode {mode!r}: accepted: {', '.join(FOLD_MODES)}")
    s2 = torch.as_tensor(scale_2, device=block_scale.device).to(torch.float32)
    if not bool(torch.all(torch.isfinite(s2) & (s2 > 0))):
        raise ValueError(f"{name}: global scale must be finite and positive, got {s2.tolist()}")
    bs64 = block_scale.to(torch.float64).abs()
    if mode == "full":
        folded = to_e4m3(block_scale.to(torch.float32) * _bcast(s2, block_scale.dim()))
        exact = bs64 * _bcast(s2.to(torch.float64), bs64.dim())
        alpha = torch.ones_like(s2)
    else:
        folded = block_scale.clone()
        exact = bs64
        alpha = s2.clone()
    rounded = folded.to(torch.float64).abs()
    nz = exact > 0
    if packed is not None:
        nz &= live_blocks(packed)
    n_nz = int(nz.sum())
    rel = torch.where(nz, (rounded - exact).abs() / torch.where(nz, exact, 1.0), 0.0)
    report = FoldReport(
        name=name, mode=mode, blocks=int(exact.numel()), nonzero=n_nz,
        overflow=int((nz & (exact > E4M3_MAX)).sum()), flushed=int((nz & (rounded == 0)).sum()),
        subnormal=int((nz & (exact < E4M3_MIN_NORMAL)).sum()),
        max_folded=float(exact[nz].max()) if n_nz else 0.0,
        min_nonzero_folded=float(exact[nz].min()) if n_nz else 0.0,
        max_rel_error=float(rel.max()) if n_nz else 0.0,
        mean_rel_error=float(rel[nz].mean()) if n_nz else 0.0,
        bound=float(max_rel_error))
    if strict and not report.ok:
        raise ScaleFoldError(report)
    return folded, alpha, report


def _mma(sf, k: int, E: int, use_flashinfer: bool):
    """The MMA view of swizzled ``[E, rows_pad, cols_pad]`` scales, and who computed it."""
    if use_flashinfer:
        return flashinfer_mma_layout(sf.reshape(E * sf.shape[1], sf.shape[2]), sf.shape[1], k, E)
    return to_mma_layout(sf, sf.shape[1], k, E), "backends.nvfp4.to_mma_layout"


# ================================================================================================
# FlashInfer b12x fused MoE (SM120/SM121)
# ================================================================================================

@dataclass(frozen=True)
class B12xMoEPrepared:
    """Arguments of ``flashinfer.b12x_fused_moe`` for one layer (see :func:`prepare_b12x_moe`)."""

    w13: Any                    # uint8 [E, 2I|I_pad, H/2]; gated rows [up; gate]
    w13_sf: Any                 # e4m3 [E, rows_pad, cols_pad] folded, 128x4 swizzled (owns storage)
    w13_sf_mma: Any             # 6-D MMA view of w13_sf
    w2: Any                     # uint8 [E, H, I_pad/2]
    w2_sf: Any
    w2_sf_mma: Any
    w1_alpha: Any               # float32 [E]: 1 after a full fold, scale_2 without one
    w2_alpha: Any
    fc2_input_scale: Any        # float32 [E], new tensor of ones (never the checkpoint's a2_scale)
    input_global_scale: Any     # float32 [E] (calibrated FC1 input scale) or None (dynamic / W4A16)
    quant_mode: str             # "nvfp4" (W4A4) or "w4a16"
    fold_reports: Tuple[FoldReport, FoldReport]
    mma_layout_source: str
    layout: str = "w31"         # "w31" (gated, up first) or "w13" (non-gated)
    geometry: Dict[str, Any] = field(default_factory=dict)
    notes: Tuple[str, ...] = ()


def prepare_b12x_moe(weights: MoEWeights, *, quant: str = "nvfp4", fold_mode: str = "full",
                     max_rel_error: float = FOLD_MAX_REL_ERROR,
                     use_flashinfer_layout: bool = True) -> B12xMoEPrepared:
    """Weights for FlashInfer's b12x fused MoE, as vLLM prepares them for ``FlashInferB12xExperts``.

    1. Layout (vLLM ``prepare_nvfp4_moe_layer_for_fi_or_cutlass``, FLASHINFER_B12X): gated w13 is
       reordered to ``[up; gate]`` (FlashInfer 0.7.4 ``moe_dispatch.py``: "w1 packs [up(0:n),
       gate(n:2n)]"), rows and block scales alike; a gated 2I that is not a multiple of 128 is
       refused (vLLM raises NotImplementedError); a non-gated w13 is zero-padded to the swizzled
       row count (128), w2's columns and scales alike.
    2. Fold each expert's ``weight_scale_2`` into its E4M3 block scales so the kernel's alpha is 1
       (vLLM #40082 ``process_weights_after_loading``), checked by :func:`fold_global_scale`:
       overflow and precision loss above ``max_rel_error`` are refused; ``fold_mode="none"``
       skips it (alpha = scale_2, exact, FlashInfer >= 0.6.17).
    3. FC2 input scale: the kernel re-quantizes FC1's output per 16-element block, so the
       calibrated ``a2_scale`` is replaced by 1.0 per expert in a new tensor (vLLM fills the
       checkpoint's in place, #40082 review); a W4A16 checkpoint gets the same ones (vLLM #43328).
    4. FC1 input: W4A4 passes the calibrated ``a13_scale`` as ``input_global_scale`` (FlashInfer
       #3932, v0.6.17); without one the kernel quantizes with 1.0 (given explicitly as ones when
       ``fold_mode="none"``). W4A16 uses neither.
    5. Block scales 128x4 swizzled, then viewed in the MMA layout once, through
       ``flashinfer.cute_dsl.convert_sf_to_mma_layout`` when importable (FlashInfer #2398).
    """
    torch = _torch()
    E, H, I, gated = moe_shape(weights)
    _check_quant(quant, "flashinfer_b12x")
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    w2, s2 = weights.w2.packed, weights.w2.block_scale
    if gated:
        if (2 * I) % 128:
            raise ValueError(f"flashinfer_b12x: gated w13 has 2I = {2 * I} rows, not a multiple of "
                             "128; vLLM refuses it too (prepare_nvfp4_moe_layer_for_fi_or_cutlass "
                             "has no per-half padding for b12x)")
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    f13, alpha13, r13 = fold_global_scale(s13, weights.w13.scale_2, mode=fold_mode,
                                          max_rel_error=max_rel_error, name="w13", packed=w13)
    f2, alpha2, r2 = fold_global_scale(s2, weights.w2.scale_2, mode=fold_mode,
                                       max_rel_error=max_rel_error, name="w2", packed=w2)
    sf13 = swizzle_128x4(f13)
    pad = sf13.shape[1] - w13.shape[1]
    if pad > 0:   # non-gated only (gated 2I % 128 == 0 here)
        w13, w2, f2 = _pad(w13, (0, 0, 0, pad)), _pad(w2, (0, pad // 2)), _pad(f2, (0, pad // 16))
    sf2 = swizzle_128x4(f2)
    mma13, src = _mma(sf13, H, E, use_flashinfer_layout)
    mma2, _ = _mma(sf2, w2.shape[2] * 2, E, use_flashinfer_layout)
    dev = w13.device
    notes = []
    fc2_input_scale = torch.ones(E, dtype=torch.float32, device=dev)
    if quant == "nvfp4":
        input_gs = None if weights.a13_scale is None else _per_expert(weights.a13_scale, E).to(dev)
        if input_gs is None and fold_mode == "none":
            input_gs = torch.ones(E, dtype=torch.float32, device=dev)
        if weights.a2_scale is not None:
            notes.append("checkpoint a2_scale not used: b12x re-quantizes FC2 input per block "
                         "(fc2_input_scale = 1, vLLM #40082)")
        if input_gs is None:
            notes.append("no a13_scale: FC1 input quantized dynamically with global scale 1")
        mode = "nvfp4"
    else:
        input_gs = None
        mode = "w4a16"
        notes.append("W4A16: activations stay bf16; fc2_input_scale (ones) is ignored by the "
                     "kernel and provided for older FlashInfer signatures (vLLM #43328)")
    return B12xMoEPrepared(
        w13=w13, w13_sf=sf13, w13_sf_mma=mma13, w2=w2, w2_sf=sf2, w2_sf_mma=mma2,
        w1_alpha=_per_expert(alpha13, E).to(dev), w2_alpha=_per_expert(alpha2, E).to(dev),
        fc2_input_scale=fc2_input_scale, input_global_scale=input_gs, quant_mode=mode,
        fold_reports=(r13, r2), mma_layout_source=src, layout="w31" if gated else "w13",
        geometry=_moe_geometry(E, H, I, gated), notes=tuple(notes))


# ================================================================================================
# FlashInfer CUTLASS / vLLM CUTLASS / TRT-LLM / CuTe-DSL MoE (vLLM prepare_nvfp4_moe_layer_for_*)
# ================================================================================================

@dataclass(frozen=True)
class SwizzledMoEPrepared:
    """W4A4 MoE weights with 128x4 swizzled scales and the alphas of a static-scale kernel.

    a1_gscale / a2_gscale: activation quantization scales (FlashInfer ``global_scale`` convention,
    1 / input_scale); g1_alphas / g2_alphas: GEMM output multipliers (weight_scale_2 * input_scale).
    g1_scale_c (TRT-LLM only): g1_alphas * a2_gscale gated, a2_gscale non-gated.
    padded: the kernel's (hidden_size, intermediate_size) after alignment padding; activations
    are zero-padded to it and outputs sliced back (``geometry`` keeps the checkpoint's sizes).
    """

    w13: Any
    w13_sf: Any
    w2: Any
    w2_sf: Any
    a1_gscale: Any
    a2_gscale: Any
    g1_alphas: Any
    g2_alphas: Any
    layout: str                  # "w31" (up first), "w13" (gate first), "w31_interleaved64", ...
    g1_scale_c: Any = None
    w13_sf_mma: Any = None
    w2_sf_mma: Any = None
    padded: Tuple[int, int] = (0, 0)
    geometry: Dict[str, Any] = field(default_factory=dict)


def _static_scales(weights: MoEWeights, E: int, shared: bool, backend: str):
    """(a13, a2) as new float32 [E]: the max over experts where the kernel shares one (FlashInfer)."""
    if weights.a13_scale is None or weights.a2_scale is None:
        raise ValueError(f"{backend} runs W4A4 only and needs the checkpoint's activation scales "
                         "(a13_scale and a2_scale); a W4A16 checkpoint has none")
    a13, a2 = _per_expert(weights.a13_scale, E), _per_expert(weights.a2_scale, E)
    if shared:  # vLLM amax_for_moe_activation_quant: "input scales are shared by all experts"
        a13, a2 = a13.max().repeat(E), a2.max().repeat(E)
    dev = weights.w13.packed.device
    return a13.to(dev), a2.to(dev)


def _alphas(weights: MoEWeights, E: int, a13, a2):
    """vLLM: a_gscale = 1.0 / a (make_nvfp4_moe_quant_config), alpha = scale_2 * a (the experts'
    ``w*_weight_scale_2.mul_(w*_input_scale)``)."""
    s13 = _per_expert(weights.w13.scale_2, E).to(a13.device)
    s2 = _per_expert(weights.w2.scale_2, E).to(a13.device)
    return 1.0 / a13, 1.0 / a2, s13 * a13, s2 * a2


def prepare_swizzled_moe(weights: MoEWeights, *, backend: str) -> SwizzledMoEPrepared:
    """FlashInfer CUTLASS (``cutlass_fused_moe``) or vLLM CUTLASS MoE weights.

    vLLM ``flashinfer_fp4_moe.prepare_nvfp4_moe_layer_for_fi_or_cutlass``: FlashInfer kernels want
    gated w13 as ``[up; gate]`` (``reorder_w1w3_to_w3w1``) and one activation scale shared by all
    experts (the max); vLLM's CUTLASS keeps ``[gate; up]`` and per-expert scales. Both take 128x4
    swizzled block scales; a non-gated w13 is padded to the swizzled row count (w2's columns and
    scales alike); a gated one with 2I % 128 != 0 is refused (vLLM raises too).
    """
    if backend not in ("flashinfer_cutlass", "cutlass"):
        raise ValueError(f"backend {backend!r}: expected flashinfer_cutlass or cutlass")
    E, H, I, gated = moe_shape(weights)
    fi = backend == "flashinfer_cutlass"
    a13, a2 = _static_scales(weights, E, shared=fi, backend=backend)
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    if gated and fi:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    s13 = swizzle_128x4(s13)
    w2, s2 = weights.w2.packed, weights.w2.block_scale
    pad = s13.shape[1] - w13.shape[1]
    if pad > 0:
        if gated:
            raise ValueError(f"{backend}: gated w13 with 2I = {w13.shape[1]} rows, not a multiple "
                             "of 128, needs per-half padding (vLLM raises NotImplementedError too)")
        w13, w2, s2 = _pad(w13, (0, 0, 0, pad)), _pad(w2, (0, pad // 2)), _pad(s2, (0, pad // 16))
    a1g, a2g, g1, g2 = _alphas(weights, E, a13, a2)
    return SwizzledMoEPrepared(
        w13=w13, w13_sf=s13, w2=w2, w2_sf=swizzle_128x4(s2), a1_gscale=a1g, a2_gscale=a2g,
        g1_alphas=g1, g2_alphas=g2, layout="w31" if (gated and fi) else "w13",
        padded=(H, w2.shape[2] * 2), geometry=_moe_geometry(E, H, I, gated))


def prepare_cutedsl_moe(weights: MoEWeights, *, use_flashinfer_layout: bool = True) -> SwizzledMoEPrepared:
    """FlashInfer CuTe-DSL MoE (``CuteDslMoEWrapper``, SM100) weights.

    vLLM ``prepare_nvfp4_moe_layer_for_flashinfer_cutedsl``: shared (max) activation scales; gated
    w13 reordered to ``[up; gate]``; I zero-padded to 64 (gated, each half) or 128 (non-gated) and
    H to 256 (``align_fp4_moe_weights_for_fi`` / ``align_fp4_moe_hidden_dim_for_fi``); gated rows
    interleaved in 64-row groups (``interleave_linear_and_gate``), weights and scales alike; scales
    swizzled 128x4, then viewed in the MMA layout (``convert_sf_to_mma_layout``, num_groups = E).
    """
    E, H, I, gated = moe_shape(weights)
    a13, a2 = _static_scales(weights, E, shared=True, backend="flashinfer_cutedsl")
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    if gated:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    w13, s13, w2, s2, Ip = align_intermediate(w13, s13, weights.w2.packed, weights.w2.block_scale,
                                              gated, 64 if gated else 128)
    w13, s13, w2, s2, Hp = align_hidden(w13, s13, w2, s2)
    layout = "w13"
    if gated:
        w13, s13 = interleave_linear_and_gate(w13), interleave_linear_and_gate(s13)
        layout = "w31_interleaved64"
    sf13, sf2 = swizzle_128x4(s13), swizzle_128x4(s2)
    mma13, _ = _mma(sf13, Hp, E, use_flashinfer_layout)
    mma2, _ = _mma(sf2, Ip, E, use_flashinfer_layout)
    a1g, a2g, g1, g2 = _alphas(weights, E, a13, a2)
    return SwizzledMoEPrepared(
        w13=w13, w13_sf=sf13, w2=w2, w2_sf=sf2, a1_gscale=a1g, a2_gscale=a2g,
        g1_alphas=g1, g2_alphas=g2, layout=layout, w13_sf_mma=mma13, w2_sf_mma=mma2,
        padded=(Hp, Ip), geometry=_moe_geometry(E, H, I, gated))


def prepare_trtllm_moe(weights: MoEWeights) -> SwizzledMoEPrepared:
    """FlashInfer TRT-LLM-gen MoE (``trtllm_fp4_block_scale_moe``, SM100) weights.

    vLLM ``prepare_nvfp4_moe_layer_for_fi_or_cutlass`` (FLASHINFER_TRTLLM): gated w13 reordered to
    ``[up; gate]``; shared (max) activation scales; H zero-padded to 256, I to 64 (gated, each
    half) or 128 (non-gated); then ``prepare_static_weights_for_trtllm_fp4_moe``: rows of weights
    and of linear scales permuted per expert with FlashInfer's own index helpers
    (``fused_moe.core._maybe_get_cached_w3_w1_permute_indices`` /
    ``get_w2_permute_indices_with_cache``, epilogue_tile_m = 128) and the permuted scales swizzled
    128x4 (FlashInfer's ``nvfp4_block_scale_interleave`` is CUDA-only; :func:`swizzle_128x4`
    computes the same layout). Needs flashinfer importable (the index helpers are pure torch).
    ``g1_scale_c`` as vLLM's ``TrtLlmNvFp4Experts._compute_g1_scale_c``: ``g1_alphas * a2_gscale``
    (= a13 * w13_scale_2 / a2) for a gated layer, ``a2_gscale`` (1 / a2) for a non-gated one.
    """
    torch = _torch()
    E, H, I, gated = moe_shape(weights)
    from flashinfer.fused_moe.core import _maybe_get_cached_w3_w1_permute_indices, get_w2_permute_indices_with_cache  # type: ignore
    a13, a2 = _static_scales(weights, E, shared=True, backend="flashinfer_trtllm")
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    if gated:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    w13, s13, w2, s2, Hp = align_hidden(w13, s13, weights.w2.packed, weights.w2.block_scale)
    w13, s13, w2, s2, Ip = align_intermediate(w13, s13, w2, s2, gated, 64 if gated else 128)
    cache: Dict = {}
    tile = TRTLLM_EPILOGUE_TILE_M
    p13 = _maybe_get_cached_w3_w1_permute_indices(cache, w13[0], tile, is_gated_act_gemm=gated)
    ps13 = _maybe_get_cached_w3_w1_permute_indices(cache, s13[0].view(torch.uint8), tile,
                                                   num_elts_per_sf=16, is_gated_act_gemm=gated)
    p2 = get_w2_permute_indices_with_cache(cache, w2[0], tile)
    ps2 = get_w2_permute_indices_with_cache(cache, s2[0].view(torch.uint8), tile, num_elts_per_sf=16)
    dev = w13.device
    out13, osf13 = w13[:, p13.to(dev)].contiguous(), s13[:, ps13.to(dev)].contiguous()
    out2, osf2 = w2[:, p2.to(dev)].contiguous(), s2[:, ps2.to(dev)].contiguous()
    a1g, a2g, g1, g2 = _alphas(weights, E, a13, a2)
    return SwizzledMoEPrepared(
        w13=out13, w13_sf=swizzle_128x4(osf13), w2=out2, w2_sf=swizzle_128x4(osf2),
        a1_gscale=a1g, a2_gscale=a2g, g1_alphas=g1, g2_alphas=g2,
        layout="w31_trtllm_shuffled" if gated else "w13_trtllm_shuffled",
        g1_scale_c=g1 * a2g if gated else a2g.clone(), padded=(Hp, Ip),
        geometry=_moe_geometry(E, H, I, gated))


# ================================================================================================
# b12x (native package) MoE
# ================================================================================================

@dataclass(frozen=True)
class B12xNativeMoEPrepared:
    w13: Any
    w13_sf: Any
    w13_scale_2: Any
    a13_scale: Any
    w2: Any
    w2_sf: Any
    w2_scale_2: Any
    a2_scale: Any
    pad_half: int
    geometry: Dict[str, Any] = field(default_factory=dict)


def prepare_b12x_native_moe(weights: MoEWeights, *, quant: str = "nvfp4") -> B12xNativeMoEPrepared:
    """Weights for the native ``b12x`` package's MoE (vLLM ``quantization/utils/b12x_moe.py``
    ``prepare_nvfp4_moe_layer_for_b12x``, then ``fused_moe/b12x.py``'s zero-sign canonicalization).

    Per-expert activation scales (ones for a W4A16 checkpoint, which has none); for W4A16 gated w13
    is swapped to ``[up; gate]`` (``reorder_w13=use_a16``); each gated half is zero-padded to a
    multiple of 64 rows (w2 columns and scales alike) before the 128x4 swizzle, a non-gated w13 to
    the swizzled row count; FP4 -0 codes are made +0 in the packed weights.
    """
    torch = _torch()
    E, H, I, gated = moe_shape(weights)
    _check_quant(quant, "b12x")
    dev = weights.w13.packed.device
    a16 = quant == "nvfp4_w4a16"
    if weights.a13_scale is None or weights.a2_scale is None:
        if not a16:
            raise ValueError("b12x NVFP4 MoE requires activation scales (vLLM raises the same)")
        a13 = torch.ones(E, dtype=torch.float32, device=dev)
        a2 = torch.ones(E, dtype=torch.float32, device=dev)
    else:
        a13, a2 = _per_expert(weights.a13_scale, E).to(dev), _per_expert(weights.a2_scale, E).to(dev)
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    w2, s2 = weights.w2.packed, weights.w2.block_scale
    if a16 and gated:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    pad_half = 0
    if gated:
        pad_half = ceil_to(I, 64) - I
        w13, s13 = _pad_halves(w13, I, I + pad_half), _pad_halves(s13, I, I + pad_half)
        w2, s2 = _pad(w2, (0, pad_half // 2)), _pad(s2, (0, pad_half // 16))
    s13 = swizzle_128x4(s13)
    pad = s13.shape[1] - w13.shape[1]
    if pad > 0:
        w13, w2, s2 = _pad(w13, (0, 0, 0, pad)), _pad(w2, (0, pad // 2)), _pad(s2, (0, pad // 16))
    return B12xNativeMoEPrepared(
        w13=canonicalize_fp4_zero_signs(w13), w13_sf=s13,
        w13_scale_2=_per_expert(weights.w13.scale_2, E).to(dev), a13_scale=a13,
        w2=canonicalize_fp4_zero_signs(w2), w2_sf=swizzle_128x4(s2),
        w2_scale_2=_per_expert(weights.w2.scale_2, E).to(dev), a2_scale=a2,
        pad_half=pad_half, geometry=_moe_geometry(E, H, I, gated))


# ================================================================================================
# Marlin (weight-only FP4; vLLM marlin_utils_fp4.py, 0.32.0)
# ================================================================================================

def marlin_scale_perm() -> Tuple[list, list]:
    """vLLM ``marlin_utils.get_scale_perms``: (grouped 64-wide, per-channel 32-wide) permutations."""
    perm = [i + 8 * j for i in range(8) for j in range(8)]
    single = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    return perm, single


def marlin_permute_scales(s, size_k: int, size_n: int, group_size: int):
    """vLLM ``marlin_permute_scales`` (16-bit activations): ``[K/g, N]`` -> permuted ``[K/g, N]``."""
    perm, single = marlin_scale_perm()
    p = perm if (group_size < size_k and group_size != -1) else single
    return s.reshape(-1, len(p))[:, p].reshape(-1, size_n).contiguous()


def marlin_padded_nk(size_n: int, size_k: int, group_size: int = 16) -> Tuple[int, int]:
    """vLLM ``marlin_padded_nk``: the cheaper of (n % 64, k % 128) and (n % 128, k % 64)."""
    cands = ((ceil_to(size_n, 64), ceil_to(size_k, math.lcm(128, group_size))),
             (ceil_to(size_n, 128), ceil_to(size_k, math.lcm(64, group_size))))
    return min(cands, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def marlin_scale_factor(scales, param_dtype=None) -> float:
    """vLLM 0.32.0 ``_nvfp4_compute_scale_factor``: 1 for fp16 activations; otherwise the power of
    two 2^floor(log2(448 * 2^7 / max(scale * 2^7))), taken from the largest scale (so the rescaled
    scales stay <= 448 and can never overflow fp16)."""
    torch = _torch()
    if param_dtype == torch.half:
        return 1.0
    ws = scales.to(torch.float32) * 2 ** 7
    nz = ws > 0
    if bool(nz.any()):
        m = ws[nz].max()
        if float(m) < 448 * 2 ** 7:
            return float((448 * 2 ** 7 / m).log2().floor().exp2())
    return 1.0


def marlin_process_scales(scales_half, scale_factor: float):
    """vLLM ``nvfp4_marlin_process_scales``: permuted scales -> S0E5M3 bytes (float8 view).

    Columns swapped in groups of 4 as ``[0, 2, 1, 3]`` (the FP8 dequantization order), rescaled
    by ``scale_factor``, times 2^7; values under 2 (a rescaled scale under 2^-6) set to 0, as vLLM
    does; then the top byte of ``fp16_bits << 1`` kept: 5 exponent and 3 mantissa bits, the sign
    dropped (scales are >= 0). Lossless for every E4M3 scale that is not flushed.
    """
    torch = _torch()
    s = scales_half.to(torch.half)
    s = s.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(s.shape[0], -1)
    if scale_factor > 1.0:
        s = (s.float() * scale_factor).to(torch.half)
    s = s * 2 ** 7
    s[s < 2] = 0
    b = (s.view(torch.int16) << 1).view(torch.float8_e4m3fn)
    return b[:, 1::2].contiguous()


def marlin_process_global_scale(scale_2, param_dtype, scale_factor: float):
    """vLLM ``nvfp4_marlin_process_global_scale`` divided by ``scale_factor``: scale_2 * 2^(bias-7)."""
    torch = _torch()
    bias = 2 ** 7 - 2 if param_dtype == torch.bfloat16 else 2 ** 4 - 2
    return _f32(scale_2) * (2.0 ** (bias - 7)) / scale_factor


@dataclass(frozen=True)
class MarlinFlushReport:
    """Blocks vLLM's Marlin scale processing sets to zero (rescaled scale * 2^7 < 2), and the
    error that adds: the weights of those blocks are lost (live blocks: a non-zero code)."""

    name: str
    blocks: int
    flushed: int
    max_abs_error: float     # largest |weight| lost
    rel_error: float         # ||lost weights|| / ||weights|| (Frobenius)

    def describe(self) -> str:
        return (f"{self.name}: {self.flushed} of {self.blocks} non-empty blocks flushed to 0 by "
                f"Marlin's scale processing (largest lost |weight| {self.max_abs_error:.3g}, "
                f"relative Frobenius error {self.rel_error:.3g})")


def marlin_flush_report(t: NVFP4Tensor, scale_factor: float, name: str) -> MarlinFlushReport:
    """What :func:`marlin_process_scales` with ``scale_factor`` loses of checkpoint tensor ``t``."""
    torch = _torch()
    bs = t.block_scale.to(torch.float32)
    live = live_blocks(t.packed)
    flushed = live & (bs > 0) & ((bs * scale_factor).to(torch.half).float() * 2 ** 7 < 2)
    n = int(flushed.sum())
    if n == 0:
        return MarlinFlushReport(name, int(live.sum()), 0, 0.0, 0.0)
    w = t.dequantize(torch.float64)
    lost = w * flushed.repeat_interleave(16, dim=-1)
    total = float(w.norm())
    return MarlinFlushReport(name, int(live.sum()), n, float(lost.abs().max()),
                             float(lost.norm()) / total if total else 0.0)


@dataclass(frozen=True)
class MarlinPrepared:
    """Marlin inputs up to (not including) ``gptq_marlin_repack``.

    qweight: int32 ``[(E,) K_pad/8, N_pad]`` = the padded packed weight viewed as int32 and
    transposed: the ``b_q_weight`` vLLM hands to ``ops.gptq_marlin_repack`` (a CUDA op; its tile
    layout is produced by vLLM at load time, not here). scales: S0E5M3 bytes
    ``[(E,) K_pad/16, N_pad]`` (final Marlin form); global_scale: float32 (final form, per expert
    for MoE). flush: blocks the scale processing zeroes (see :class:`MarlinFlushReport`).
    """

    qweight: Any
    scales: Any
    global_scale: Any
    scale_factor: float
    size_n: int
    size_k: int
    padded_n: int
    padded_k: int
    param_dtype: Any
    flush: Optional[MarlinFlushReport] = None
    repacked: bool = False
    geometry: Dict[str, Any] = field(default_factory=dict)


def _marlin_dtype(param_dtype):
    torch = _torch()
    dt = param_dtype or torch.bfloat16
    if dt not in (torch.bfloat16, torch.half):
        raise ValueError(f"marlin: param_dtype {dt}; accepted: torch.bfloat16, torch.float16")
    return dt


def _marlin_scales(s_padded, padded_n: int, padded_k: int, factor: float):
    """``[N_pad, K_pad/16]`` padded scales (param dtype) -> final S0E5M3 bytes ``[K_pad/16, N_pad]``."""
    s = marlin_permute_scales(s_padded.T.contiguous(), padded_k, padded_n, 16)
    return marlin_process_scales(s, factor)


def _qweight(packed_padded):
    torch = _torch()
    return packed_padded.contiguous().view(torch.int32).T.contiguous()


def prepare_marlin_linear(weights: LinearWeights, *, param_dtype=None) -> MarlinPrepared:
    """vLLM ``prepare_fp4_layer_for_marlin`` for an NVFP4 linear layer: N and K zero-padded to a
    Marlin tile family (``marlin_padded_nk``), scales rescaled by :func:`marlin_scale_factor`
    (W4A16: the activation scale is dropped; a W4A4 checkpoint is served weight-only,
    vLLM marlin_utils_fp4.py)."""
    N, K = linear_shape(weights)
    dt = _marlin_dtype(param_dtype)
    Np, Kp = marlin_padded_nk(N, K)
    w = _pad(weights.weight.packed, (0, (Kp - K) // 2, 0, Np - N))
    s = _pad(weights.weight.block_scale.to(dt), (0, (Kp - K) // 16, 0, Np - N))
    factor = marlin_scale_factor(s, dt)
    return MarlinPrepared(
        qweight=_qweight(w), scales=_marlin_scales(s, Np, Kp, factor),
        global_scale=marlin_process_global_scale(weights.weight.scale_2, dt, factor),
        scale_factor=factor, size_n=N, size_k=K, padded_n=Np, padded_k=Kp, param_dtype=dt,
        flush=marlin_flush_report(weights.weight, factor, "weight"),
        geometry={"hidden_size": K, "out_features": N})


def prepare_marlin_moe(weights: MoEWeights, *, param_dtype=None) -> Tuple[MarlinPrepared, MarlinPrepared]:
    """vLLM ``prepare_nvfp4_moe_layer_for_marlin``: (w13, w2) per-expert Marlin inputs.

    I is zero-padded per gate/up shard to 64 (H % 128 == 0) or 128 (H % 64 == 0; other H are
    refused, as vLLM asserts): w13 size_n = shards * I_pad, size_k = H; w2 size_n = H,
    size_k = I_pad. One scale factor for all experts of a tensor (they share the processing).
    """
    torch = _torch()
    E, H, I, gated = moe_shape(weights)
    dt = _marlin_dtype(param_dtype)
    if H % 64:
        raise ValueError(f"marlin: hidden size {H} must be a multiple of 64 (Marlin thread tiles; "
                         "vLLM asserts the same)")
    Ip = ceil_to(I, 64 if H % 128 == 0 else 128)
    shards = 2 if gated else 1

    def pad13(t):
        return _pad_halves(t, I, Ip) if gated else _pad(t, (0, 0, 0, Ip - I))

    out = []
    for t, name, w, s, pn, pk in (
            (weights.w13, "w13", pad13(weights.w13.packed), pad13(weights.w13.block_scale.to(dt)),
             Ip * shards, H),
            (weights.w2, "w2", _pad(weights.w2.packed, (0, (Ip - I) // 2)),
             _pad(weights.w2.block_scale.to(dt), (0, (Ip - I) // 16)), H, Ip)):
        factor = marlin_scale_factor(s, dt)
        out.append(MarlinPrepared(
            qweight=torch.stack([_qweight(w[e]) for e in range(E)]),
            scales=torch.stack([_marlin_scales(s[e], pn, pk, factor) for e in range(E)]),
            global_scale=marlin_process_global_scale(_per_expert(t.scale_2, E), dt, factor),
            scale_factor=factor, size_n=t.packed.shape[1], size_k=t.packed.shape[2] * 2,
            padded_n=pn, padded_k=pk, param_dtype=dt, flush=marlin_flush_report(t, factor, name),
            geometry=_moe_geometry(E, H, I, gated)))
    return out[0], out[1]


# ================================================================================================
# dense GEMM (mm_fp4 and vLLM's CUTLASS scaled_fp4_mm)
# ================================================================================================

@dataclass(frozen=True)
class Fp4LinearPrepared:
    """``mm_fp4(a, weight.T, a_sf, weight_sf.T, alpha)`` operands for one NVFP4 linear layer.

    weight: uint8 ``[N_pad, K_pad/2]`` (the GEMM's B is its transpose, a column-major view; N and
    K zero-padded to 32 for the CUTLASS family, vLLM ``pad_nvfp4_weight_for_cutlass``); weight_sf:
    e4m3 ``[N_pad128, K/16 pad 4]`` 128x4 swizzled; a_gscale: 1 / input_scale (FlashInfer's
    ``fp4_quantize`` global scale) or None (dynamic, computed per call); alpha: input_scale *
    weight_scale_2 or None (then weight_scale_2 / a_gscale per call). Activations are padded to
    ``weight``'s K and outputs sliced to ``geometry["out_features"]``.
    """

    weight: Any
    weight_sf: Any
    weight_scale_2: Any
    a_gscale: Any
    alpha: Any
    bias: Any
    layout: str
    geometry: Dict[str, Any] = field(default_factory=dict)


def prepare_fp4_linear(weights: LinearWeights, *, shuffle_trtllm: bool = False,
                       pad: bool = True) -> Fp4LinearPrepared:
    """Swizzled-scale NVFP4 GEMM weights (vLLM's NVFP4 linear kernels for the FlashInfer CUTLASS /
    cuDNN / b12x / CuTe-DSL and vLLM CUTLASS paths: ``swizzle_blockscale`` and
    ``pad_nvfp4_weight_for_cutlass``; ``alpha = input_global_scale * weight_global_scale``).

    ``shuffle_trtllm``: TRT-LLM-gen's ``mm_fp4(backend="trtllm")`` wants weight rows and linear
    scale rows shuffled (FlashInfer ``utils.get_shuffle_matrix_a_row_indices`` /
    ``get_shuffle_matrix_sf_a_row_indices``, epilogue_tile_m = 128) before the 128x4 swizzle, and
    no padding; needs flashinfer importable (pure-torch helpers) and N % 128 == 0.
    ``pad=False``: no padding (vLLM's native-b12x dense kernel, ``kernels/linear/nvfp4/b12x.py``).
    """
    torch = _torch()
    N, K = linear_shape(weights)
    w, s = weights.weight.packed, weights.weight.block_scale
    if shuffle_trtllm:
        if N % TRTLLM_EPILOGUE_TILE_M:
            raise ValueError(f"flashinfer_trtllm linear: N = {N} must be a multiple of "
                             f"{TRTLLM_EPILOGUE_TILE_M} (the row shuffle's epilogue tile)")
        from flashinfer.utils import get_shuffle_matrix_a_row_indices, get_shuffle_matrix_sf_a_row_indices  # type: ignore
        rows = get_shuffle_matrix_a_row_indices(w, TRTLLM_EPILOGUE_TILE_M).to(w.device)
        srows = get_shuffle_matrix_sf_a_row_indices(s.view(torch.uint8), TRTLLM_EPILOGUE_TILE_M,
                                                    16).to(w.device)
        w, s = w[rows].contiguous(), s[srows].contiguous()
        layout = "trtllm_shuffled_128x4"
    else:
        a = CUTLASS_LINEAR_ALIGN if pad else 1
        w = _pad(w, (0, (ceil_to(K, a) - K) // 2, 0, ceil_to(N, a) - N))
        layout = "swizzled_128x4"
    a_g = alpha = None
    s2 = _f32(weights.weight.scale_2, w.device)
    if weights.input_scale is not None:
        inp = _f32(weights.input_scale, w.device)
        a_g, alpha = 1.0 / inp, inp * s2
    return Fp4LinearPrepared(weight=w, weight_sf=swizzle_128x4(s), weight_scale_2=s2, a_gscale=a_g,
                             alpha=alpha, bias=weights.bias, layout=layout,
                             geometry={"hidden_size": K, "out_features": N})


# ================================================================================================
# emulation
# ================================================================================================

@dataclass(frozen=True)
class EmulationPrepared:
    """The validated checkpoint, unchanged: the emulation dequantizes the routed experts on each
    call (``backends.reference.emulate_moe``), so its memory is the checkpoint's. ``dequantized``
    is None (kept for callers that passed a cache of their own to the reference)."""

    weights: Any
    dequantized: Any = None
    geometry: Dict[str, Any] = field(default_factory=dict)


def prepare_emulation(weights, compute_dtype=None) -> EmulationPrepared:
    """Validate (shapes, dtypes, block and global scales); nothing is copied or cached.
    ``compute_dtype`` is accepted for compatibility and unused here."""
    if isinstance(weights, MoEWeights):
        E, H, I, gated = moe_shape(weights)
        return EmulationPrepared(weights, None, _moe_geometry(E, H, I, gated))
    if isinstance(weights, LinearWeights):
        N, K = linear_shape(weights)
        return EmulationPrepared(weights, None, {"hidden_size": K, "out_features": N})
    raise ValueError(f"expected MoEWeights or LinearWeights, got {type(weights).__name__}")


__all__ = ["FOLD_MAX_REL_ERROR", "FoldReport", "ScaleFoldError", "fold_global_scale",
           "moe_shape", "linear_shape", "align_intermediate", "align_hidden",
           "canonicalize_fp4_zero_signs", "live_blocks",
           "B12xMoEPrepared", "prepare_b12x_moe", "SwizzledMoEPrepared", "prepare_swizzled_moe",
           "prepare_cutedsl_moe", "prepare_trtllm_moe", "reorder_w13_to_w31",
           "interleave_linear_and_gate", "B12xNativeMoEPrepared", "prepare_b12x_native_moe",
           "MarlinPrepared", "MarlinFlushReport", "prepare_marlin_linear", "prepare_marlin_moe",
           "marlin_process_scales", "marlin_permute_scales", "marlin_padded_nk",
           "marlin_scale_factor", "Fp4LinearPrepared", "prepare_fp4_linear", "EmulationPrepared",
           "prepare_emulation", "NVFP4Tensor"]
