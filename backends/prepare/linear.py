"""The dense GEMM preparation (FlashInfer mm_fp4 and vLLM's CUTLASS scaled_fp4_mm) and the
emulation's (validation only)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

from ..formats.nvfp4 import (
    LinearWeights,
    MoEWeights,
    _torch,
    ceil_to,
    swizzle_128x4,
)
from .common import (
    CUTLASS_LINEAR_ALIGN,
    TRTLLM_EPILOGUE_TILE_M,
    _f32,
    _moe_geometry,
    _pad,
    linear_shape,
    moe_shape,
)

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
