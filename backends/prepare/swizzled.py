"""The 128x4-swizzled W4A4 MoE preparations: FlashInfer CUTLASS, vLLM CUTLASS, TRT-LLM and
CuTe-DSL (vLLM ``prepare_nvfp4_moe_layer_for_*``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

from ..formats.nvfp4 import (
    MoEWeights,
    _torch,
    swizzle_128x4,
)
from .common import (
    TRTLLM_EPILOGUE_TILE_M,
    _moe_geometry,
    _pad,
    _per_expert,
    align_hidden,
    align_intermediate,
    interleave_linear_and_gate,
    moe_shape,
    reorder_w13_to_w31,
)
from .fold import (
    _mma,
)

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
