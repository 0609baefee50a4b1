"""One Triton kernel for the emulation's hot loop: NVFP4 codes times E4M3 block scales -> bf16/fp16.

``dequantize_unit`` (``backends.nvfp4``) calls :func:`dequantize_unit_triton` for CUDA tensors when
Triton imports; it reads each packed byte and its block scale once and writes the two values,
where the torch path makes five passes (index conversion, table gather, scale conversion, multiply,
copy). The values are exact in bf16 (a 2-bit times a 4-bit significand), so both paths give the
same bits (tests/test_reference.py runs this kernel in Triton's interpreter on the CPU).
"""
from __future__ import annotations

import functools
from typing import Any, Optional


@functools.lru_cache(maxsize=1)
def _kernel() -> Optional[Any]:
    try:
        import triton
        import triton.language as tl
    except Exception:  # noqa: BLE001 - no Triton: the torch path runs
        return None

    @triton.jit
    def deq(p_ptr, bs_ptr, out_ptr, n_bytes, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_bytes
        b = tl.load(p_ptr + offs, mask=mask, other=0).to(tl.int32)
        s = tl.load(bs_ptr + offs // 8, mask=mask).to(tl.float32)
        lo = b & 15
        hi = b >> 4
        m_lo = lo & 7
        m_hi = hi & 7
        # E2M1 magnitude of index m: 0, .5, 1, 1.5, 2, 3, 4, 6
        v_lo = tl.where(m_lo <= 4, m_lo * 0.5, tl.where(m_lo == 7, 6.0, m_lo - 2.0))
        v_hi = tl.where(m_hi <= 4, m_hi * 0.5, tl.where(m_hi == 7, 6.0, m_hi - 2.0))
        v_lo = tl.where(lo >= 8, -v_lo, v_lo) * s
        v_hi = tl.where(hi >= 8, -v_hi, v_hi) * s
        v = tl.interleave(v_lo, v_hi)
        o = pid.to(tl.int64) * (2 * BLOCK) + tl.arange(0, 2 * BLOCK)
        tl.store(out_ptr + o, v.to(out_ptr.dtype.element_ty), mask=o < 2 * n_bytes)

    return deq


def available() -> bool:
    return _kernel() is not None


def dequantize_unit_triton(packed, block_scale, dtype, block: int = 1024):
    """``e2m1 * block_scale`` of contiguous ``packed`` ``[..., K/2]`` (uint8) and ``block_scale``
    ``[..., K/16]`` (float8_e4m3fn) in ``dtype``, by the Triton kernel."""
    import torch
    k = _kernel()
    if k is None:
        raise RuntimeError("triton is not importable")
    p = packed.contiguous()
    bs = block_scale.contiguous()
    out = torch.empty(tuple(p.shape[:-1]) + (p.shape[-1] * 2,), dtype=dtype, device=p.device)
    n = p.numel()
    if n:
        k[(-(-n // block),)](p, bs, out, n, BLOCK=block)
    return out
