"""Each backend's weight preparation, as pure functions: checkpoint tensors in, new tensors out.

No function here writes into its inputs. Tensors a backend uses unchanged (packed FP4 weights that
need no reordering) are returned as the same objects, never modified; everything derived (folded,
swizzled, reordered, padded scales; alphas; FC2 input scales) is a new tensor. This is the fix for
the in-place overwrite vLLM's first b12x integration made (``a2_gscale.fill_(1.0)``, #40082 review:
a later switch of backend then read the overwritten scale).

Checkpoint form: :class:`backends.nvfp4.MoEWeights` / :class:`backends.nvfp4.LinearWeights`
(ModelOpt conventions, ``w13`` rows ``[gate; up]``). Sources per function; summary in
``docs/backends.md``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

from .nvfp4 import (
    E4M3_MAX,
    E4M3_MIN_NORMAL,
    E4M3_REL_HALF_ULP,
    LinearWeights,
    MoEWeights,
    NVFP4Tensor,
    _bcast,
    flashinfer_mma_layout,
    swizzle_128x4,
    to_e4m3,
)

#: default bound on the relative change of any block scale (hence of any weight) by a fold: one
#: E4M3 rounding (2^-4, the half-ULP of an E4M3 normal number). A fold that pushes block scales
#: into the subnormal range loses more and is refused; a flush of a non-zero scale to 0 always is.
FOLD_MAX_REL_ERROR = E4M3_REL_HALF_ULP
FOLD_MODES = ("full", "none")
MARLIN_TILE_N = 64
TRTLLM_EPILOGUE_TILE_M = 128


def _torch():
    import torch
    return torch


def _f32(t, device=None):
    """A new float32 tensor (never a view of the input)."""
    torch = _torch()
    return torch.as_tensor(t, device=device).to(torch.float32).clone()


def _per_expert(scale, num_experts: int, name: str):
    """A checkpoint activation scale (0-d or ``[E]``) as a new float32 ``[E]`` tensor."""
    s = _f32(scale)
    if s.dim() == 0:
        s = s.expand(num_experts).clone()
    if s.dim() != 1 or s.numel() != num_experts:
        raise ValueError(f"{name} must be a scalar or hold one value per expert ({num_experts}); "
                         f"got shape {tuple(s.shape)}")
    return s


# ================================================================================================
# folding a float32 global scale into the E4M3 block scales
# ================================================================================================

@dataclass(frozen=True)
class FoldReport:
    """What folding ``scale_2`` into a tensor's E4M3 block scales did to them."""

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
                      strict: bool = True):
    """Fold ``scale_2`` (0-d or per leading index, e.g. per expert) into E4M3 ``block_scale``.

    mode "full" (vLLM's b12x integration, #40082): folded = e4m3(block_scale * scale_2), alpha = 1.
    The product is re-rounded to E4M3: up to 2^-4 relative in the normal range, more once it
    falls below 2^-6 (subnormal), and a flush to 0 below 2^-10. ModelOpt's scale_2 = amax / 2688
    makes the folded scale about amax_block / 6, so weights with block amax under ~0.09 (typical
    LLM weights) land in the subnormal range.
    mode "none": folded = block_scale (unchanged values, new tensor), alpha = scale_2: exact.
    Either way ``e2m1 * folded * alpha`` approximates the checkpoint's ``e2m1 * block_scale *
    scale_2`` with the relative error the report gives, per block.

    Returns ``(folded float8_e4m3fn, alpha float32 with scale_2's shape, FoldReport)``; raises
    :class:`ScaleFoldError` on overflow, on a flush to 0 or on a relative error above
    ``max_rel_error`` unless ``strict`` is False. Inputs are not modified.
    """
    torch = _torch()
    if mode not in FOLD_MODES:
        raise ValueError(f"fold mode {mode!r}: accepted: {', '.join(FOLD_MODES)}")
    s2 = torch.as_tensor(scale_2, device=block_scale.device).to(torch.float64)
    if not bool(torch.all(torch.isfinite(s2) & (s2 > 0))):
        raise ValueError(f"{name}: global scale must be finite and positive, got {s2.tolist()}")
    if mode == "full":
        factor = s2
        alpha = torch.ones_like(s2, dtype=torch.float32)
    else:
        factor = torch.ones_like(s2)
        alpha = s2.to(torch.float32)
    bs = block_scale.to(torch.float64).abs()
    exact = bs * _bcast(factor, bs.dim())
    rounded = to_e4m3(exact).to(torch.float64)
    nz = exact > 0
    n_nz = int(nz.sum())
    rel = torch.where(nz, (rounded - exact).abs() / torch.where(nz, exact, torch.ones_like(exact)),
                      torch.zeros_like(exact))
    report = FoldReport(
        name=name, mode=mode, blocks=int(exact.numel()), nonzero=n_nz,
        overflow=int((exact > E4M3_MAX).sum()), flushed=int((nz & (rounded == 0)).sum()),
        subnormal=int((nz & (exact < E4M3_MIN_NORMAL)).sum()),
        max_folded=float(exact.max()) if exact.numel() else 0.0,
        min_nonzero_folded=float(exact[nz].min()) if n_nz else 0.0,
        max_rel_error=float(rel.max()) if n_nz else 0.0,
        mean_rel_error=float(rel[nz].mean()) if n_nz else 0.0,
        bound=float(max_rel_error))
    if strict and not report.ok:
        raise ScaleFoldError(report)
    return to_e4m3(exact), alpha, report


# ================================================================================================
# FlashInfer b12x fused MoE (SM120/SM121)
# ================================================================================================

@dataclass(frozen=True)
class B12xMoEPrepared:
    """Arguments of ``flashinfer.b12x_fused_moe`` for one layer (see :func:`prepare_b12x_moe`)."""

    w13: Any                    # uint8 [E, 2I|I, H/2], checkpoint order [gate; up] (unchanged)
    w13_sf: Any                 # e4m3 [E, rows_pad, cols_pad] folded, 128x4 swizzled (owns storage)
    w13_sf_mma: Any             # 6-D MMA view of w13_sf
    w2: Any                     # uint8 [E, H, I/2] (unchanged)
    w2_sf: Any
    w2_sf_mma: Any
    w1_alpha: Any               # float32 [E]: 1 after a full fold, scale_2 without one
    w2_alpha: Any
    fc2_input_scale: Any        # float32 [E], new tensor of ones (never the checkpoint's a2_scale)
    input_global_scale: Any     # float32 [E] (calibrated FC1 input scale) or None (dynamic / W4A16)
    quant_mode: str             # "nvfp4" (W4A4) or "w4a16"
    fold_reports: Tuple[FoldReport, FoldReport]
    mma_layout_source: str
    geometry: Dict[str, Any] = field(default_factory=dict)
    notes: Tuple[str, ...] = ()


def prepare_b12x_moe(weights: MoEWeights, *, quant: str = "nvfp4", fold_mode: str = "full",
                     max_rel_error: float = FOLD_MAX_REL_ERROR,
                     use_flashinfer_layout: bool = True) -> B12xMoEPrepared:
    """Weights for FlashInfer's b12x fused MoE, as vLLM's ``FlashInferB12xExperts`` prepares them.

    1. Fold each expert's weight global scale (``weight_scale_2``) into its E4M3 block scales so the
       kernel's alpha is 1 (vLLM #40082 ``process_weights_after_loading``), checked by
       :func:`fold_global_scale`: overflow and precision loss above ``max_rel_error`` are refused.
    2. FC2 input scale: the kernel re-quantizes FC1's output dynamically per 16-element block, so the
       calibrated ``a2_scale`` (meant for static-scale kernels; tens to hundreds, it saturates FP4)
       is replaced by 1.0 per expert, in a new tensor: the checkpoint's is left as it was (#40082
       review: the in-place ``fill_(1.0)`` broke a later backend switch), and a W4A16 checkpoint
       with no FC2 input scale at all (None) gets the same ones (vLLM #43328).
    3. FC1 input: W4A4 passes the calibrated ``a13_scale`` as ``input_global_scale`` (FlashInfer
       #3932, v0.6.17: decouples it from ``w1_alpha``); without one the kernel quantizes with 1.0
       (given explicitly as ones when ``fold_mode="none"``, where ``w1_alpha`` is not 1).
       W4A16 (``quant="nvfp4_w4a16"``, FlashInfer #3271) uses neither.
    ``fold_mode="none"`` skips the fold (alpha = scale_2, exact) for FlashInfer >= 0.6.17.
    4. Block scales in the 128x4 swizzled layout, then viewed in the MMA layout once, through
       ``flashinfer.cute_dsl.convert_sf_to_mma_layout`` when importable (FlashInfer #2398).
    The kernel takes w13 in checkpoint order ``[gate; up]`` and pads the intermediate size itself
    (``blackwell_sm12x/moe_dispatch.py _prepare_weight_views``).
    """
    torch = _torch()
    if quant not in ("nvfp4", "nvfp4_w4a16"):
        raise ValueError(f"quant {quant!r}: b12x takes nvfp4 or nvfp4_w4a16")
    E, H, I = weights.num_experts, weights.hidden_size, weights.intermediate_size
    gated = weights.act_and_mul
    f13, alpha13, r13 = fold_global_scale(weights.w13.block_scale, weights.w13.scale_2, mode=fold_mode,
                                          max_rel_error=max_rel_error, name="w13")
    f2, alpha2, r2 = fold_global_scale(weights.w2.block_scale, weights.w2.scale_2, mode=fold_mode,
                                       max_rel_error=max_rel_error, name="w2")
    dev = weights.w13.packed.device
    w1_alpha = _per_expert(alpha13, E, "w13 scale_2")
    w2_alpha = _per_expert(alpha2, E, "w2 scale_2")
    sf13, sf2 = swizzle_128x4(f13), swizzle_128x4(f2)
    if use_flashinfer_layout:
        mma13, src = flashinfer_mma_layout(sf13.reshape(E * sf13.shape[1], sf13.shape[2]),
                                           sf13.shape[1], H, E)
        mma2, _ = flashinfer_mma_layout(sf2.reshape(E * sf2.shape[1], sf2.shape[2]), sf2.shape[1], I, E)
    else:
        from .nvfp4 import to_mma_layout
        mma13 = to_mma_layout(sf13, sf13.shape[1], H, E)
        mma2 = to_mma_layout(sf2, sf2.shape[1], I, E)
        src = "backends.nvfp4.to_mma_layout"
    notes = []
    fc2_input_scale = torch.ones(E, dtype=torch.float32, device=dev)
    if quant == "nvfp4":
        input_gs = None if weights.a13_scale is None else _per_expert(weights.a13_scale, E, "a13_scale").to(dev)
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
    geometry = {"num_experts": E, "hidden_size": H, "intermediate_size": I, "act_and_mul": gated}
    return B12xMoEPrepared(
        w13=weights.w13.packed, w13_sf=sf13, w13_sf_mma=mma13, w2=weights.w2.packed, w2_sf=sf2,
        w2_sf_mma=mma2, w1_alpha=w1_alpha.to(dev), w2_alpha=w2_alpha.to(dev),
        fc2_input_scale=fc2_input_scale, input_global_scale=input_gs, quant_mode=mode,
        fold_reports=(r13, r2), mma_layout_source=src,
        geometry=geometry, notes=tuple(notes))


# ================================================================================================
# FlashInfer CUTLASS / vLLM CUTLASS / TRT-LLM / CuTe-DSL MoE (vLLM prepare_nvfp4_moe_layer_for_*)
# ================================================================================================

@dataclass(frozen=True)
class SwizzledMoEPrepared:
    """W4A4 MoE weights with 128x4 swizzled scales and the alphas of a static-scale kernel.

    a1_gscale / a2_gscale: activation quantization scales (FlashInfer ``global_scale`` convention,
    1 / input_scale); g1_alphas / g2_alphas: GEMM output multipliers (input_scale * weight_scale_2).
    g1_scale_c (TRT-LLM only): a13 * w13_scale_2 / a2.
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
    geometry: Dict[str, Any] = field(default_factory=dict)


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


def _static_scales(weights: MoEWeights, shared: bool, backend: str):
    """(a13, a2) as new float32 [E]: the max over experts where the kernel shares one (FlashInfer)."""
    if weights.a13_scale is None or weights.a2_scale is None:
        raise ValueError(f"{backend} runs W4A4 only and needs the checkpoint's activation scales "
                         "(a13_scale and a2_scale); a W4A16 checkpoint has none")
    E = weights.num_experts
    a13 = _per_expert(weights.a13_scale, E, "a13_scale")
    a2 = _per_expert(weights.a2_scale, E, "a2_scale")
    if shared:  # "For some FI kernels, the input scales are shared by all experts."
        a13 = a13.max().expand(E).clone()
        a2 = a2.max().expand(E).clone()
    dev = weights.w13.packed.device
    return a13.to(dev), a2.to(dev)


def _alphas(weights: MoEWeights, a13, a2):
    E = weights.num_experts
    s13 = _per_expert(weights.w13.scale_2, E, "w13 scale_2").to(a13.device)
    s2 = _per_expert(weights.w2.scale_2, E, "w2 scale_2").to(a13.device)
    return 1.0 / a13, 1.0 / a2, a13 * s13, a2 * s2, s13


def prepare_swizzled_moe(weights: MoEWeights, *, backend: str) -> SwizzledMoEPrepared:
    """FlashInfer CUTLASS (``cutlass_fused_moe``) or vLLM CUTLASS MoE weights.

    vLLM ``flashinfer_fp4_moe.prepare_nvfp4_moe_layer_for_fi_or_cutlass``: FlashInfer kernels want
    gated w13 as ``[up; gate]`` (``reorder_w1w3_to_w3w1``) and one activation scale shared by all
    experts (the max); vLLM's CUTLASS keeps ``[gate; up]`` and per-expert scales. Both take 128x4
    swizzled block scales; a non-gated w13 is padded to the swizzled row count.
    """
    torch = _torch()
    if backend not in ("flashinfer_cutlass", "cutlass"):
        raise ValueError(f"backend {backend!r}: expected flashinfer_cutlass or cutlass")
    fi = backend == "flashinfer_cutlass"
    gated = weights.act_and_mul
    a13, a2 = _static_scales(weights, shared=fi, backend=backend)
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    if gated and fi:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    s13 = swizzle_128x4(s13)
    w2, s2 = weights.w2.packed, weights.w2.block_scale
    pad = s13.shape[1] - w13.shape[1]
    if pad > 0:
        if gated:
            raise NotImplementedError(f"{backend}: gated w13 with 2I={w13.shape[1]} rows not a "
                                      "multiple of 128 needs per-half padding (vLLM raises too)")
        w13 = torch.nn.functional.pad(w13, (0, 0, 0, pad))
        w2 = torch.nn.functional.pad(w2, (0, pad // 2, 0, 0))
        s2 = torch.cat([s2, torch.zeros(s2.shape[:-1] + (pad // 16,), dtype=s2.dtype,
                                        device=s2.device)], dim=-1)
    a1g, a2g, g1, g2, _ = _alphas(weights, a13, a2)
    return SwizzledMoEPrepared(
        w13=w13, w13_sf=s13, w2=w2, w2_sf=swizzle_128x4(s2), a1_gscale=a1g, a2_gscale=a2g,
        g1_alphas=g1, g2_alphas=g2, layout="w31" if (gated and fi) else "w13",
        geometry=_moe_geometry(weights))


def _moe_geometry(weights: MoEWeights) -> Dict[str, Any]:
    return {"num_experts": weights.num_experts, "hidden_size": weights.hidden_size,
            "intermediate_size": weights.intermediate_size, "act_and_mul": weights.act_and_mul}


def prepare_cutedsl_moe(weights: MoEWeights, *, use_flashinfer_layout: bool = True) -> SwizzledMoEPrepared:
    """FlashInfer CuTe-DSL MoE (``CuteDslMoEWrapper``, SM100) weights.

    vLLM ``prepare_nvfp4_moe_layer_for_flashinfer_cutedsl``: shared (max) activation scales; gated
    w13 reordered to ``[up; gate]`` and its rows interleaved in 64-row groups
    (``interleave_linear_and_gate``), weights and scales alike; scales swizzled 128x4, then viewed in
    the MMA layout (``convert_sf_to_mma_layout``, num_groups = E).
    """
    a13, a2 = _static_scales(weights, shared=True, backend="flashinfer_cutedsl")
    E, H, I = weights.num_experts, weights.hidden_size, weights.intermediate_size
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    layout = "w13"
    if weights.act_and_mul:
        w13 = interleave_linear_and_gate(reorder_w13_to_w31(w13))
        s13 = interleave_linear_and_gate(reorder_w13_to_w31(s13))
        layout = "w31_interleaved64"
    sf13, sf2 = swizzle_128x4(s13), swizzle_128x4(weights.w2.block_scale)
    if use_flashinfer_layout:
        mma13, _ = flashinfer_mma_layout(sf13.reshape(-1, sf13.shape[2]), sf13.shape[1], H, E)
        mma2, _ = flashinfer_mma_layout(sf2.reshape(-1, sf2.shape[2]), sf2.shape[1], I, E)
    else:
        from .nvfp4 import to_mma_layout
        mma13, mma2 = to_mma_layout(sf13, sf13.shape[1], H, E), to_mma_layout(sf2, sf2.shape[1], I, E)
    a1g, a2g, g1, g2, _ = _alphas(weights, a13, a2)
    return SwizzledMoEPrepared(
        w13=w13, w13_sf=sf13, w2=weights.w2.packed, w2_sf=sf2, a1_gscale=a1g, a2_gscale=a2g,
        g1_alphas=g1, g2_alphas=g2, layout=layout, w13_sf_mma=mma13, w2_sf_mma=mma2,
        geometry=_moe_geometry(weights))


def prepare_trtllm_moe(weights: MoEWeights) -> SwizzledMoEPrepared:
    """FlashInfer TRT-LLM-gen MoE (``trtllm_fp4_block_scale_moe``, SM100) weights.

    vLLM ``prepare_static_weights_for_trtllm_fp4_moe``: gated w13 reordered to ``[up; gate]``, then
    rows of weights and of linear scales permuted per expert with FlashInfer's own index helpers
    (``fused_moe.core._maybe_get_cached_w3_w1_permute_indices`` /
    ``get_w2_permute_indices_with_cache``, epilogue_tile_m = 128) and the permuted scales swizzled
    128x4 (FlashInfer's ``block_scale_interleave`` is CUDA-only; :func:`swizzle_128x4` computes the
    same layout). Needs flashinfer importable (the index helpers are pure torch, CPU is fine).
    g1_scale_c = a13 * w13_scale_2 / a2 (``output1_scale_scalar``).
    """
    torch = _torch()
    from flashinfer.fused_moe.core import _maybe_get_cached_w3_w1_permute_indices, get_w2_permute_indices_with_cache  # type: ignore
    a13, a2 = _static_scales(weights, shared=True, backend="flashinfer_trtllm")
    gated = weights.act_and_mul
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    if gated:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    w2, s2 = weights.w2.packed, weights.w2.block_scale
    for name, t in (("w13", w13), ("w2", w2)):
        if t.shape[1] % TRTLLM_EPILOGUE_TILE_M:
            raise ValueError(f"trtllm: {name} has {t.shape[1]} rows, not a multiple of 128")
    cache: Dict = {}
    tile = TRTLLM_EPILOGUE_TILE_M
    out13, osf13, out2, osf2 = [], [], [], []
    for e in range(weights.num_experts):
        p = _maybe_get_cached_w3_w1_permute_indices(cache, w13[e], tile, is_gated_act_gemm=gated)
        out13.append(w13[e][p.to(w13.device)].contiguous())
        p = _maybe_get_cached_w3_w1_permute_indices(cache, s13[e].view(torch.uint8), tile,
                                                    num_elts_per_sf=16, is_gated_act_gemm=gated)
        osf13.append(s13[e][p.to(s13.device)].contiguous())
        p = get_w2_permute_indices_with_cache(cache, w2[e], tile)
        out2.append(w2[e][p.to(w2.device)].contiguous())
        p = get_w2_permute_indices_with_cache(cache, s2[e].view(torch.uint8), tile, num_elts_per_sf=16)
        osf2.append(s2[e][p.to(s2.device)].contiguous())
    a1g, a2g, g1, g2, s13_2 = _alphas(weights, a13, a2)
    return SwizzledMoEPrepared(
        w13=torch.stack(out13), w13_sf=swizzle_128x4(torch.stack(osf13)), w2=torch.stack(out2),
        w2_sf=swizzle_128x4(torch.stack(osf2)), a1_gscale=a1g, a2_gscale=a2g, g1_alphas=g1,
        g2_alphas=g2, layout="w31_trtllm_shuffled" if gated else "w13_trtllm_shuffled",
        g1_scale_c=a13 * s13_2 / a2, geometry=_moe_geometry(weights))


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
    """Weights for the native ``b12x`` package's MoE (vLLM ``quantization/utils/b12x_moe.py``).

    Per-expert activation scales (ones for a W4A16 checkpoint, which has none); for W4A16 gated w13
    is swapped to ``[up; gate]`` (``reorder_w13=use_a16``); each gated half is zero-padded to a
    multiple of 64 rows (w2 columns and scales alike) before the 128x4 swizzle.
    """
    torch = _torch()
    F = torch.nn.functional
    E = weights.num_experts
    dev = weights.w13.packed.device
    a16 = quant == "nvfp4_w4a16"
    if weights.a13_scale is None or weights.a2_scale is None:
        if not a16:
            raise ValueError("b12x NVFP4 MoE requires activation scales (vLLM raises the same)")
        a13 = torch.ones(E, dtype=torch.float32, device=dev)
        a2 = torch.ones(E, dtype=torch.float32, device=dev)
    else:
        a13 = _per_expert(weights.a13_scale, E, "a13_scale").to(dev)
        a2 = _per_expert(weights.a2_scale, E, "a2_scale").to(dev)
    w13, s13 = weights.w13.packed, weights.w13.block_scale
    w2, s2 = weights.w2.packed, weights.w2.block_scale
    gated = weights.act_and_mul
    if a16 and gated:
        w13, s13 = reorder_w13_to_w31(w13), reorder_w13_to_w31(s13)
    pad_half = 0
    if gated:
        half = w13.shape[1] // 2
        pad_half = -half % 64
        if pad_half:
            def pad_rows(t):
                raw = t.view(torch.uint8)
                v = raw.reshape((E, 2, half) + tuple(raw.shape[2:]))
                v = F.pad(v, (0, 0, 0, pad_half)).reshape((E, 2 * (half + pad_half)) + tuple(raw.shape[2:]))
                return v.view(t.dtype)
            w13, s13 = pad_rows(w13), pad_rows(s13)
            w2 = F.pad(w2, (0, pad_half // 2))
            s2 = F.pad(s2.view(torch.uint8), (0, pad_half // 16)).view(s2.dtype)
    s13 = swizzle_128x4(s13)
    pad = s13.shape[1] - w13.shape[1]
    if pad > 0:
        w13 = F.pad(w13, (0, 0, 0, pad))
        w2 = F.pad(w2, (0, pad // 2, 0, 0))
        s2 = F.pad(s2.view(torch.uint8), (0, pad // 16)).view(s2.dtype)
    return B12xNativeMoEPrepared(
        w13=w13, w13_sf=s13, w13_scale_2=_per_expert(weights.w13.scale_2, E, "w13 scale_2").to(dev),
        a13_scale=a13, w2=w2, w2_sf=swizzle_128x4(s2),
        w2_scale_2=_per_expert(weights.w2.scale_2, E, "w2 scale_2").to(dev), a2_scale=a2,
        pad_half=pad_half, geometry=_moe_geometry(weights))


# ================================================================================================
# Marlin (weight-only FP4; vLLM marlin_utils_fp4.py)
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


def marlin_scale_factor(scales_half) -> float:
    """vLLM ``_nvfp4_compute_scale_factor``: the power of two making every non-zero scale*2^7 >= 2."""
    torch = _torch()
    ws = scales_half.to(torch.float32) * 2 ** 7
    nz = ws > 0
    if bool(nz.any()):
        m = float(ws[nz].min())
        if m < 2:
            return float(2.0 ** math.ceil(math.log2(2 / m)))
    return 1.0


FP16_MAX = 65504.0


def check_marlin_scale_range(scales, scale_factor: float, name: str = "weight") -> None:
    """Refuse scales Marlin's S0E5M3 form cannot hold: after the rescale every scale * 2^7 must
    stay a finite fp16 (vLLM computes ``(scale * factor).to(half)`` and would store inf: a tensor
    whose block scales span more than 2^15 -- e.g. a ModelOpt tensor, max 448, with a block under
    2^-6 -- cannot be represented)."""
    torch = _torch()
    top = float(scales.to(torch.float32).abs().max()) * scale_factor * 2 ** 7
    if top > FP16_MAX:
        raise ValueError(f"{name}: Marlin scale range exceeded: largest scale * factor {scale_factor:g} "
                         f"* 2^7 = {top:g} > fp16 max {FP16_MAX:g} (the factor lifts the smallest "
                         "non-zero scale to >= 2^-6); vLLM's nvfp4_marlin_process_scales would "
                         "store inf here")


def marlin_process_scales(scales_half, scale_factor: float):
    """vLLM ``nvfp4_marlin_process_scales``: permuted fp16 scales -> S0E5M3 bytes (float8 view).

    Columns swapped in groups of 4 as ``[0, 2, 1, 3]`` (the FP8 dequantization order), scaled by
    ``scale_factor * 2^7``, and the top byte of ``fp16_bits << 1`` kept: 5 exponent and 3 mantissa
    bits, the sign dropped (scales are >= 0). Lossless for E4M3 inputs.
    """
    torch = _torch()
    s = scales_half.to(torch.half)
    s = s.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(s.shape[0], -1)
    if scale_factor > 1.0:
        s = (s.float() * scale_factor).to(torch.half)
    b = ((s * 2 ** 7).view(torch.int16) << 1).view(torch.float8_e4m3fn)
    return b[:, 1::2].contiguous()


def marlin_process_global_scale(scale_2, param_dtype, scale_factor: float):
    """vLLM ``nvfp4_marlin_process_global_scale`` divided by ``scale_factor``: scale_2 * 2^(bias-7)."""
    torch = _torch()
    bias = 2 ** 7 - 2 if param_dtype == torch.bfloat16 else 2 ** 4 - 2
    return _f32(scale_2) * (2.0 ** (bias - 7)) / scale_factor


@dataclass(frozen=True)
class MarlinPrepared:
    """Marlin inputs up to (not including) ``gptq_marlin_repack``.

    qweight: int32 ``[(E,) K/8, N_pad]`` = the N-padded packed weight viewed as int32 and
    transposed: the ``b_q_weight`` vLLM hands to ``ops.gptq_marlin_repack`` (a CUDA op; its tile
    layout is produced by vLLM at load time, not here). scales: S0E5M3 bytes ``[(E,) K/16, N_pad]``
    (final Marlin form); global_scale: float32 (final form, per expert for MoE).
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
    repacked: bool = False
    geometry: Dict[str, Any] = field(default_factory=dict)


def _pad_to(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def _marlin_one(weight, block_scale, size_n, size_k, padded_n, padded_k, scale_factor, param_dtype):
    torch = _torch()
    F = torch.nn.functional
    w = F.pad(weight, (0, (padded_k - size_k) // 2, 0, padded_n - size_n))
    qweight = w.contiguous().view(torch.int32).T.contiguous()
    s = F.pad(block_scale.to(param_dtype), (0, (padded_k - size_k) // 16, 0, padded_n - size_n)).T
    s = marlin_permute_scales(s.contiguous(), padded_k, padded_n, 16)
    return qweight, marlin_process_scales(s, scale_factor)


def prepare_marlin_linear(weights: LinearWeights, *, param_dtype=None) -> MarlinPrepared:
    """vLLM ``prepare_fp4_layer_for_marlin`` for an NVFP4 linear layer (W4A16: the activation scale
    is dropped; a W4A4 checkpoint is served weight-only, FACTS.md)."""
    torch = _torch()
    dt = param_dtype or torch.bfloat16
    N, K = weights.out_features, weights.in_features
    Np = _pad_to(N, MARLIN_TILE_N)
    factor = marlin_scale_factor(weights.weight.block_scale.to(torch.half))
    check_marlin_scale_range(weights.weight.block_scale, factor)
    q, s = _marlin_one(weights.weight.packed, weights.weight.block_scale, N, K, Np, K, factor, dt)
    return MarlinPrepared(qweight=q, scales=s,
                          global_scale=marlin_process_global_scale(weights.weight.scale_2, dt, factor),
                          scale_factor=factor, size_n=N, size_k=K, padded_n=Np, padded_k=K,
                          param_dtype=dt, geometry={"hidden_size": K, "out_features": N})


def prepare_marlin_moe(weights: MoEWeights, *, param_dtype=None) -> Tuple[MarlinPrepared, MarlinPrepared]:
    """vLLM ``prepare_nvfp4_moe_layer_for_marlin``: (w13, w2) per-expert Marlin inputs.

    w13: size_n = I * shards (2 gated) padded to 64, size_k = H; w2: size_n = H padded to 64,
    size_k = the activation output (w13's padded size_n / shards). One scale factor for all
    experts of a tensor (they share the processing).
    """
    torch = _torch()
    dt = param_dtype or torch.bfloat16
    E, H, I = weights.num_experts, weights.hidden_size, weights.intermediate_size
    shards = 2 if weights.act_and_mul else 1
    n13 = _pad_to(I * shards, MARLIN_TILE_N)
    act_out = n13 // shards
    if shards == 2 and act_out != I:
        raise NotImplementedError("gated w13 with I not a multiple of 32: Marlin pads the "
                                  "concatenation, which splits [gate; up] unevenly")
    out = []
    for t, size_n, size_k, pn, pk in ((weights.w13, I * shards, H, n13, H),
                                      (weights.w2, H, I, _pad_to(H, MARLIN_TILE_N), act_out)):
        factor = marlin_scale_factor(t.block_scale.to(torch.half))
        check_marlin_scale_range(t.block_scale, factor, "w13" if t is weights.w13 else "w2")
        qs, ss = zip(*[_marlin_one(t.packed[e], t.block_scale[e], size_n, size_k, pn, pk, factor, dt)
                       for e in range(E)])
        out.append(MarlinPrepared(
            qweight=torch.stack(qs), scales=torch.stack(ss),
            global_scale=marlin_process_global_scale(_per_expert(t.scale_2, E, "scale_2"), dt, factor),
            scale_factor=factor, size_n=size_n, size_k=size_k, padded_n=pn, padded_k=pk,
            param_dtype=dt, geometry=_moe_geometry(weights)))
    return out[0], out[1]


# ================================================================================================
# dense GEMM (mm_fp4 and vLLM's CUTLASS scaled_fp4_mm)
# ================================================================================================

@dataclass(frozen=True)
class Fp4LinearPrepared:
    """``mm_fp4(a, weight.T, a_sf, weight_sf.T, alpha)`` operands for one NVFP4 linear layer.

    weight: uint8 ``[N, K/2]`` (the GEMM's B is its transpose, a column-major view); weight_sf:
    e4m3 ``[N_pad, K/16 pad]`` 128x4 swizzled; a_gscale: 1 / input_scale (FlashInfer's
    ``fp4_quantize`` global scale) or None (dynamic, computed per call); alpha: input_scale *
    weight_scale_2 or None (then weight_scale_2 / a_gscale per call).
    """

    weight: Any
    weight_sf: Any
    weight_scale_2: Any
    a_gscale: Any
    alpha: Any
    bias: Any
    layout: str
    geometry: Dict[str, Any] = field(default_factory=dict)


def prepare_fp4_linear(weights: LinearWeights, *, shuffle_trtllm: bool = False) -> Fp4LinearPrepared:
    """Swizzled-scale NVFP4 GEMM weights (vLLM ``ModelOptNvFp4LinearMethod`` for the FlashInfer
    CUTLASS / cuDNN / b12x / CuTe-DSL and vLLM CUTLASS paths: ``swizzle_blockscale``).

    ``shuffle_trtllm``: TRT-LLM-gen's ``mm_fp4(backend="trtllm")`` wants weight rows and linear
    scale rows shuffled (FlashInfer ``utils.get_shuffle_matrix_a_row_indices`` /
    ``get_shuffle_matrix_sf_a_row_indices``, epilogue_tile_m = 128) before the 128x4 swizzle;
    needs flashinfer importable (pure-torch helpers) and N % 128 == 0.
    """
    torch = _torch()
    w, s = weights.weight.packed, weights.weight.block_scale
    layout = "swizzled_128x4"
    if shuffle_trtllm:
        from flashinfer.utils import get_shuffle_matrix_a_row_indices, get_shuffle_matrix_sf_a_row_indices  # type: ignore
        rows = get_shuffle_matrix_a_row_indices(w, TRTLLM_EPILOGUE_TILE_M).to(w.device)
        srows = get_shuffle_matrix_sf_a_row_indices(s.view(torch.uint8), TRTLLM_EPILOGUE_TILE_M,
                                                    16).to(w.device)
        w, s = w[rows].contiguous(), s[srows].contiguous()
        layout = "trtllm_shuffled_128x4"
    a_g = alpha = None
    s2 = _f32(weights.weight.scale_2, w.device)
    if weights.input_scale is not None:
        inp = _f32(weights.input_scale, w.device)
        a_g, alpha = 1.0 / inp, inp * s2
    return Fp4LinearPrepared(weight=w, weight_sf=swizzle_128x4(s), weight_scale_2=s2, a_gscale=a_g,
                             alpha=alpha, bias=weights.bias, layout=layout,
                             geometry={"hidden_size": weights.in_features,
                                       "out_features": weights.out_features})


# ================================================================================================
# emulation
# ================================================================================================

@dataclass(frozen=True)
class EmulationPrepared:
    """The checkpoint, plus its dequantized float32 weights cached once (the reference's prepare)."""

    weights: Any
    dequantized: Any
    geometry: Dict[str, Any] = field(default_factory=dict)


def prepare_emulation(weights, compute_dtype=None) -> EmulationPrepared:
    torch = _torch()
    cd = compute_dtype or torch.float32
    if isinstance(weights, MoEWeights):
        return EmulationPrepared(weights, (weights.w13.dequantize(cd), weights.w2.dequantize(cd)),
                                 _moe_geometry(weights))
    if isinstance(weights, LinearWeights):
        return EmulationPrepared(weights, weights.weight.dequantize(cd),
                                 {"hidden_size": weights.in_features,
                                  "out_features": weights.out_features})
    raise TypeError(f"expected MoEWeights or LinearWeights, got {type(weights).__name__}")


__all__ = ["FOLD_MAX_REL_ERROR", "FoldReport", "ScaleFoldError", "fold_global_scale",
           "B12xMoEPrepared", "prepare_b12x_moe", "SwizzledMoEPrepared", "prepare_swizzled_moe",
           "prepare_cutedsl_moe", "prepare_trtllm_moe", "reorder_w13_to_w31",
           "interleave_linear_and_gate", "B12xNativeMoEPrepared", "prepare_b12x_native_moe",
           "MarlinPrepared", "prepare_marlin_linear", "prepare_marlin_moe", "marlin_process_scales",
           "marlin_permute_scales", "Fp4LinearPrepared", "prepare_fp4_linear", "EmulationPrepared",
           "prepare_emulation", "NVFP4Tensor"]
