"""Host-side pieces of the fused NVFP4 MoE (``nvfp4_moe_triton.fused_moe``): where FC1's output
holds gate and up, the SwiGLU parameters as the kernel takes them, and the tile configs when Triton
cannot compile one (which failures are compile failures, the ladder of smaller configs tried next,
the configs that failed per device)."""
from __future__ import annotations

from typing import Dict, List, Tuple

#: (device, tile config) -> why it did not compile there: a later call of any shape skips it
TILE_FAILED: Dict[Tuple[str, Tuple[Tuple[str, int], ...]], str] = {}


def compile_failure(exc: BaseException) -> bool:
    """Whether `exc` is Triton failing to build a kernel for a tile config (its MLIR pass
    pipeline, `RuntimeError: PassManager::run failed`, seen on an H100 at BLOCK_M 64 for
    Qwen3-30B-A3B at 1,024 tokens and Mixtral-8x7B at 256 and 1,024 (issue #46); a front-end
    CompilationError; too many resources for the tile), not a failure of the call's data."""
    name = type(exc).__name__
    text = str(exc)
    return (name in ("CompilationError", "OutOfResources", "PTXASError")
            or "PassManager::run failed" in text or "out of resource" in text.lower())


def tile_ladder(cfg: Dict[str, int]) -> List[Dict[str, int]]:
    """`cfg`, then the configs tried when it does not compile: two pipeline stages, then BLOCK_M
    halved down to 16 (a block of fewer rows of one expert: the same values, more blocks)."""
    out = [dict(cfg)]
    c = dict(cfg)
    if c["num_stages"] > 2:
        c = dict(c, num_stages=2)
        out.append(c)
    while c["BLOCK_M"] > 16:
        c = dict(c, BLOCK_M=c["BLOCK_M"] // 2)
        out.append(c)
    return out


def cfg_key(cfg: Dict[str, int]) -> Tuple[Tuple[str, int], ...]:
    return tuple(sorted((k, int(v)) for k, v in cfg.items()))


def gate_up_columns(activation: str, gated: bool, w13_order: str, I: int):
    """Where FC1's output holds gate and up: ``(gate's first column, up's first column, step)``."""
    from ..common.constants import INTERLEAVED_ACTIVATIONS
    if gated and activation in INTERLEAVED_ACTIVATIONS:
        return 0, 1, 2
    if gated and w13_order == "up_gate":
        return I, 0, 1
    return 0, I, 1


def swiglu_params(activation: str, swiglu_limit, swiglu_alpha, swiglu_beta):
    """``(limit, alpha, beta)`` as the kernel takes them: the SwiGLU-OAI / SwiGLU-step defaults
    where not given, 0 where the activation has none."""
    from ..common.constants import SWIGLUOAI_DEFAULTS, SWIGLUSTEP_DEFAULT_LIMIT
    if activation in ("swigluoai", "swigluoai_uninterleave"):
        d = SWIGLUOAI_DEFAULTS
        return (d["limit"] if swiglu_limit is None else swiglu_limit,
                d["alpha"] if swiglu_alpha is None else swiglu_alpha,
                d["beta"] if swiglu_beta is None else swiglu_beta)
    if activation == "swiglustep":
        return SWIGLUSTEP_DEFAULT_LIMIT if swiglu_limit is None else swiglu_limit, 0.0, 0.0
    return 0.0 if swiglu_limit is None else swiglu_limit, 0.0, 0.0
