"""Host-side pieces of the fused NVFP4 MoE (``nvfp4_moe_triton.fused_moe``): where FC1's output
holds gate and up, the SwiGLU parameters as the kernel takes them, and the tile configs when Triton
cannot compile one (which failures are compile failures, the ladder of smaller configs tried next,
the configs that failed per device), and the per-expert scales and GEMM inputs of a call."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

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


#: (E, device) -> ones [E + 1]: the scales of a scheme that has none
_ONES: Dict[Tuple[int, str], Any] = {}


def per_expert(s, E: int, device):
    """A 0-d / ``[E]`` float32 scale (None: ones) as ``[E + 1]`` (the last entry for unrouted rows);
    computed once per scale tensor while it is unchanged (``validate.once``: a layer's scales
    are the same tensors every call)."""
    import torch

    from ..common.validate import once
    if s is None:  # made once per (E, device): a call allocates nothing for it
        key = (E, str(torch.device(device)))
        if key not in _ONES:
            _ONES[key] = torch.ones(E + 1, dtype=torch.float32, device=device)
        return _ONES[key]

    def make():
        t = torch.as_tensor(s, dtype=torch.float32, device=device)
        v = t.expand(E) if t.dim() == 0 else t
        return torch.cat([v.float(), torch.ones(1, dtype=torch.float32, device=device)])
    if isinstance(s, torch.Tensor) and s.device == torch.device(device):
        return once(s, ("per_expert", E), make)
    return make()


def dynamic_scale(v, row_e, E: int):
    """The emulation's dynamic activation scale per expert, ``[E + 1]``: ``amax / (6 * 448)`` of the
    rows routed to it (1 where the amax is 0), as ``quantize`` computes it."""
    import torch

    from ..common.constants import E2M1_MAX, E4M3_MAX
    amax = torch.zeros(E + 1, dtype=torch.float32, device=v.device)
    amax.scatter_reduce_(0, row_e, v.float().abs().amax(dim=1), reduce="amax")
    return torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))


def fc1_input(x, s1, w4a4: bool, order, k: int, row_e_c, E: int):
    """FC1's input ``(values, row of each routed row in them, per-expert scales [E + 1])``: x
    itself (W4A16), or its NVFP4 codes times block scales (W4A4): x quantized once where one scale
    serves every expert, else each routed row with its expert's (or dynamic) scale."""
    import torch

    from . import nvfp4_triton
    dev = x.device
    row_tok = (order // k).int()
    if not w4a4:
        return x.contiguous(), row_tok, per_expert(None, E, dev)
    if s1 is not None and s1.dim() == 0:  # one scale: x quantized once for all experts
        a1, _ = nvfp4_triton.quantize_unit_triton(x, s1.to(dev), x.dtype)
        return a1, row_tok, per_expert(s1, E, dev)
    xs = x[order // k]  # per expert, or dynamic from the amax of each expert's rows
    as1 = per_expert(s1, E, dev) if s1 is not None else dynamic_scale(xs, row_e_c, E)
    a1, _ = nvfp4_triton.quantize_unit_triton(xs, as1[row_e_c], x.dtype)
    return a1, torch.arange(order.numel(), dtype=torch.int32, device=dev), as1


def fc2_input(inter, s2, w4a4: bool, row_e_c, E: int, dtype):
    """FC2's input ``(values, per-expert scales [E + 1])``: the activation in bf16 (W4A16) or its
    NVFP4 codes times block scales (W4A4), with each expert's (or a dynamic) scale."""
    from . import nvfp4_triton
    if not w4a4:
        return inter, per_expert(None, E, inter.device)
    as2 = per_expert(s2, E, inter.device) if s2 is not None else dynamic_scale(inter, row_e_c, E)
    a2, _ = nvfp4_triton.quantize_unit_triton(inter, as2[row_e_c], dtype)
    return a2, as2
