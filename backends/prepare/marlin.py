"""Marlin (weight-only FP4; vLLM marlin_utils_fp4.py, 0.32.0): scale permutation and
rescaling, padding, the flush report, linear and MoE preparation."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..formats.nvfp4 import (
    LinearWeights,
    MoEWeights,
    NVFP4Tensor,
    _torch,
    ceil_to,
)
from .common import (
    _f32,
    _moe_geometry,
    _pad,
    _pad_halves,
    _per_expert,
    linear_shape,
    live_blocks,
    moe_shape,
)

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
