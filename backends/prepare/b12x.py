"""The b12x fused MoE preparations: FlashInfer's ``b12x_fused_moe`` (SM120/SM121) and the
native b12x package."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

from ..formats.nvfp4 import (
    MoEWeights,
    _torch,
    ceil_to,
    swizzle_128x4,
)
from .common import (
    FOLD_MAX_REL_ERROR,
    _check_quant,
    _moe_geometry,
    _pad,
    _pad_halves,
    _per_expert,
    canonicalize_fp4_zero_signs,
    moe_shape,
    reorder_w13_to_w31,
)
from .fold import (
    FoldReport,
    _mma,
    fold_global_scale,
)

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


def _b12x_inputs(weights: MoEWeights, quant: str, fold_mode: str, E: int, dev):
    """Steps 3 and 4 of :func:`prepare_b12x_moe`: (fc2_input_scale, input_global_scale, quant
    mode, notes)."""
    torch = _torch()
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
        return fc2_input_scale, input_gs, "nvfp4", notes
    notes.append("W4A16: activations stay bf16; fc2_input_scale (ones) is ignored by the "
                 "kernel and provided for older FlashInfer signatures (vLLM #43328)")
    return fc2_input_scale, None, "w4a16", notes


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
    _torch()
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
    fc2_input_scale, input_gs, mode, notes = _b12x_inputs(weights, quant, fold_mode, E, dev)
    return B12xMoEPrepared(
        w13=w13, w13_sf=sf13, w13_sf_mma=mma13, w2=w2, w2_sf=sf2, w2_sf_mma=mma2,
        w1_alpha=_per_expert(alpha13, E).to(dev), w2_alpha=_per_expert(alpha2, E).to(dev),
        fc2_input_scale=fc2_input_scale, input_global_scale=input_gs, quant_mode=mode,
        fold_reports=(r13, r2), mma_layout_source=src, layout="w31" if gated else "w13",
        geometry=_moe_geometry(E, H, I, gated), notes=tuple(notes))


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
