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

Checkpoint form: :class:`backends.formats.nvfp4.MoEWeights` / :class:`backends.formats.nvfp4.LinearWeights`
(ModelOpt conventions, ``w13`` rows ``[gate; up]``).

The package: ``common`` (checks, shared tensor operations), ``fold`` (global scale into block
scales), one module per family of schemes (``b12x``, ``swizzled``, ``marlin``, ``linear``).
"""
from __future__ import annotations

from ..formats.nvfp4 import NVFP4Tensor
from .b12x import (
    B12xMoEPrepared,
    B12xNativeMoEPrepared,
    prepare_b12x_moe,
    prepare_b12x_native_moe,
)
from .common import (
    FOLD_MAX_REL_ERROR,
    align_hidden,
    align_intermediate,
    canonicalize_fp4_zero_signs,
    interleave_linear_and_gate,
    linear_shape,
    live_blocks,
    moe_shape,
    reorder_w13_to_w31,
)
from .fold import (
    FoldReport,
    ScaleFoldError,
    fold_global_scale,
)
from .linear import (
    EmulationPrepared,
    Fp4LinearPrepared,
    prepare_emulation,
    prepare_fp4_linear,
)
from .marlin import (
    MarlinFlushReport,
    MarlinPrepared,
    marlin_padded_nk,
    marlin_permute_scales,
    marlin_process_scales,
    marlin_scale_factor,
    marlin_scale_perm,
    prepare_marlin_linear,
    prepare_marlin_moe,
)
from .swizzled import (
    SwizzledMoEPrepared,
    prepare_cutedsl_moe,
    prepare_swizzled_moe,
    prepare_trtllm_moe,
)

__all__ = ["FOLD_MAX_REL_ERROR", "FoldReport", "ScaleFoldError", "fold_global_scale",
           "moe_shape", "linear_shape", "align_intermediate", "align_hidden",
           "canonicalize_fp4_zero_signs", "live_blocks",
           "B12xMoEPrepared", "prepare_b12x_moe", "SwizzledMoEPrepared", "prepare_swizzled_moe",
           "prepare_cutedsl_moe", "prepare_trtllm_moe", "reorder_w13_to_w31",
           "interleave_linear_and_gate", "B12xNativeMoEPrepared", "prepare_b12x_native_moe",
           "MarlinPrepared", "MarlinFlushReport", "prepare_marlin_linear", "prepare_marlin_moe",
           "marlin_process_scales", "marlin_permute_scales", "marlin_padded_nk",
           "marlin_scale_factor", "Fp4LinearPrepared", "prepare_fp4_linear", "EmulationPrepared",
           "prepare_emulation", "NVFP4Tensor", "marlin_scale_perm"]
