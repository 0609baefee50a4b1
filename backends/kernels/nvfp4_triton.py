"""One Triton kernel for the emulation's hot loop: NVFP4 codes times E4M3 block scales -> bf16/fp16.

``dequantize_unit`` (``backends.formats.nvfp4``) calls :func:`dequantize_unit_triton` for CUDA tensors when
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


@functools.lru_cache(maxsize=1)
def _quant_kernel() -> Optional[Any]:
    try:
        import triton
        import triton.language as tl
    except Exception:  # noqa: BLE001
        return None

    @triton.jit
    def qdq(x_ptr, s_ptr, out_ptr, n_blocks, blocks_per_scale, BLOCKS: tl.constexpr):
        pid = tl.program_id(0)
        rb = pid.to(tl.int64) * BLOCKS + tl.arange(0, BLOCKS)
        offs = rb[:, None] * 16 + tl.arange(0, 16)[None, :]
        mask = rb[:, None] < n_blocks
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        s = tl.load(s_ptr + rb // blocks_per_scale, mask=rb < n_blocks, other=1.0).to(tl.float32)
        amax = tl.max(tl.abs(x), axis=1)
        # E4M3 round-to-nearest-even of amax / (6 s), saturated at 448, in float32 arithmetic
        # (exact: the step is a power of two; RNE by the 1.5 * 2^23 addition)
        v = amax / (6.0 * s)
        e = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
        step_e = tl.maximum(e, -6) - 3
        step = ((step_e + 127) << 23).to(tl.float32, bitcast=True)
        bs = tl.minimum(((v / step + 12582912.0) - 12582912.0) * step, 448.0)
        denom = bs * s
        q = tl.where(denom[:, None] > 0, tl.math.div_rn(x, tl.where(denom > 0, denom, 1.0)[:, None]),
                     0.0)
        a = tl.abs(q)
        v = tl.where(a > 5.0, 6.0, tl.where(a >= 3.5, 4.0, tl.where(a > 2.5, 3.0, tl.where(
            a >= 1.75, 2.0, tl.where(a > 1.25, 1.5, tl.where(a >= 0.75, 1.0, tl.where(
                a > 0.25, 0.5, 0.0)))))))
        v = tl.where(q < 0, -v, v) * bs[:, None]
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)

    return qdq


def quantize_unit_triton(x, scale, dtype, blocks: int = 64):
    """``(codes * block scales in dtype, scale)``: the NVFP4 quantization of ``x`` (``[..., K]``,
    contiguous, K % 16 == 0) with the given global ``scale`` (a 0-d tensor on x's device, or one
    per index of x's first dimension, ``[x.shape[0]]``: one per expert of a grouped GEMM input),
    fused: what ``quantize`` then ``dequantize_unit`` give (the same rounding: division, E4M3 and
    E2M1 round-to-nearest-even, saturation)."""
    import torch
    k = _quant_kernel()
    if k is None:
        raise RuntimeError("triton is not importable")
    xc = x.contiguous()
    s = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    if s.dim() and tuple(s.shape) != tuple(x.shape[:1]):
        raise ValueError(f"scale has shape {tuple(s.shape)}; expected () or ({x.shape[0]},)")
    s = s.contiguous()
    out = torch.empty(xc.shape, dtype=dtype, device=x.device)
    nb = xc.numel() // 16
    if nb:
        k[(-(-nb // blocks),)](xc, s, out, nb, max(1, nb // s.numel()), BLOCKS=blocks)
    return out, s
