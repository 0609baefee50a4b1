"""NVFP4 reference quantization and the scale-factor layouts kernels use (pure torch, CPU or CUDA).

Format (NVIDIA NVFP4, as ModelOpt checkpoints and FlashInfer store it):

- values: FP4 E2M1 {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit; code = sign << 3 | magnitude index.
  Two codes per byte along the last (K) dimension, element ``2i`` in the low nibble and ``2i + 1``
  in the high nibble (FlashInfer ``quantization/fp4_quantization.py``,
  ``_e2m1_and_ufp8sf_scale_to_float_cpu``: "low nibble = even indices, high nibble = odd").
- block scales: one FP8 E4M3 (``torch.float8_e4m3fn``, max 448) per 16 consecutive elements of K.
- global scale: one float32 per tensor (per expert for MoE weights).

Scale convention used throughout ``backends``: ``scale_2`` is the *dequantization* multiplier, as
ModelOpt stores it (``weight_scale_2`` and ``input_scale`` = amax / (6 * 448)), so that::

    value = e2m1(code) * float(block_scale) * scale_2

FlashInfer's ``fp4_quantize(x, global_scale)`` takes the reciprocal, ``global_scale = 1 / scale_2``
(= 448 * 6 / amax); vLLM calls ``1 / input_scale`` ``a1_gscale`` and ``input_scale * weight_scale_2``
``g1_alphas``.

Rounding, as FlashInfer's CUDA quantizer does it (``cvt_warp_fp16_to_fp4``): the block scale is
``amax_block / (6 * scale_2)`` rounded to E4M3 (round-to-nearest-even, saturated at 448), and each
element is ``x / (block_scale * scale_2)`` rounded to E2M1 (round-to-nearest-even, saturated at 6).

Scale layouts:

- linear: ``[..., rows, K // 16]``, what checkpoints store.
- 128x4 swizzled: rows padded to 128 and scale columns to 4, tile ``(r // 128, c // 4)`` holds
  byte ``(r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4`` and tiles are row-block major
  (FlashInfer ``quantization_cute_dsl_utils.compute_sf_index_swizzled_128x4_gpu``;
  ``block_scale_interleave``; vLLM ``nvfp4_utils.swizzle_blockscale``). Returned with the padded
  2-D (or 3-D for experts) shape ``[..., rows_pad, cols_pad]`` as vLLM does.
- MMA (CuTe-DSL): the 6-D strided view ``(32, 4, m_tiles, 4, k_tiles, num_groups)`` of the swizzled
  bytes (FlashInfer ``cute_dsl/utils.py convert_sf_to_mma_layout``, present since v0.6.4, #2398).

torch is imported inside the functions (``import backends.formats.nvfp4`` stays cheap).

The package: ``formats`` (E2M1, E4M3), ``codec`` (NVFP4Tensor, quantize / dequantize),
``layouts`` (swizzled and MMA scale layouts), ``containers`` (LinearWeights, MoEWeights).
"""
from __future__ import annotations

from .codec import (
    _E2M1_THRESHOLDS,
    _FLOAT_INPUTS,
    CHUNK_ELEMENTS,
    MAX_SCALE_2,
    MIN_SCALE_2,
    NVFP4Tensor,
    _bcast,
    _e2m1_pair_lut,
    _encode_pack,
    _per_row,
    _position,
    amax_checked,
    check_block_scale,
    check_float_tensor,
    check_scale,
    dequantize,
    dequantize_unit,
    quantize,
    quantize_dequantize,
    roundtrip_error_bound,
    scale_2_from_amax,
)
from .containers import (
    LinearWeights,
    MoEWeights,
    activation_scale_from_amax,
    quantize_linear,
    quantize_moe,
)
from .formats import (
    BLOCK_SIZE,
    E2M1_GRID,
    E2M1_MAX,
    E4M3_MAX,
    E4M3_MIN_NORMAL,
    E4M3_MIN_SUBNORMAL,
    E4M3_REL_HALF_ULP,
    SF_TILE_COLS,
    SF_TILE_ROWS,
    _torch,
    ceil_to,
    decode_e2m1,
    e2m1_values,
    e4m3_round,
    encode_e2m1,
    pack_e2m1,
    to_e4m3,
    unpack_e2m1,
)
from .layouts import (
    flashinfer_mma_layout,
    from_mma_layout,
    swizzle_128x4,
    swizzled_index_128x4,
    to_mma_layout,
    unswizzle_128x4,
)

__all__ = [
    "BLOCK_SIZE",
    "CHUNK_ELEMENTS",
    "E2M1_GRID",
    "E2M1_MAX",
    "E4M3_MAX",
    "E4M3_MIN_NORMAL",
    "E4M3_MIN_SUBNORMAL",
    "E4M3_REL_HALF_ULP",
    "LinearWeights",
    "MAX_SCALE_2",
    "MIN_SCALE_2",
    "MoEWeights",
    "NVFP4Tensor",
    "SF_TILE_COLS",
    "SF_TILE_ROWS",
    "_E2M1_THRESHOLDS",
    "_FLOAT_INPUTS",
    "_bcast",
    "_e2m1_pair_lut",
    "_encode_pack",
    "_per_row",
    "_position",
    "_torch",
    "activation_scale_from_amax",
    "amax_checked",
    "ceil_to",
    "check_block_scale",
    "check_float_tensor",
    "check_scale",
    "decode_e2m1",
    "dequantize",
    "dequantize_unit",
    "e2m1_values",
    "e4m3_round",
    "encode_e2m1",
    "flashinfer_mma_layout",
    "from_mma_layout",
    "pack_e2m1",
    "quantize",
    "quantize_dequantize",
    "quantize_linear",
    "quantize_moe",
    "roundtrip_error_bound",
    "scale_2_from_amax",
    "swizzle_128x4",
    "swizzled_index_128x4",
    "to_e4m3",
    "to_mma_layout",
    "unpack_e2m1",
    "unswizzle_128x4",
]
