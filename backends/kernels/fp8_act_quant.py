"""One Triton kernel launch (two for a dynamic per-tensor scale) that quantizes an FP8 linear
layer's activation: per token (``fp8_channel``), per 1x128 group (``fp8_block``), per tensor
with a static (``fp8_tensor``) or a dynamic scale (``fp8_tensor_dynamic``).

The same function as ``backends.formats.fp8.quantize_activation`` (its torch form, the reference's
quantizer), bit for bit: the scale is ``max(amax, 1e-12) * fl32(1/448)`` in float32, the codes
``clamp(x / scale, -448, 448)`` with a correctly rounded float32 division (``div_rn``), rounded
to E4M3 to nearest even. The torch form runs five to eight kernels (upcast, abs, amax, scale,
divide, clamp, cast, pad), each a launch of about 10-30 us at decode sizes; this is one.

``quantize_activation(x, quant, input_scale)`` here takes a CUDA ``[M, K]`` tensor (bf16, fp16
or fp32) and returns what ``backends.formats.fp8.quantize_activation`` returns: codes ``[M, K]``
(``[M, 128 * ceil(K/128)]``, zero-padded, for fp8_block) and the float32 scale (``()``,
``[M, 1]`` or ``[M, ceil(K/128)]``). ``backends.formats.fp8.quantize_activation`` dispatches here for
CUDA inputs when triton imports. Imports triton only when a kernel first runs.
"""
from __future__ import annotations

import functools
from typing import Any

FP8_MAX = 448.0
BLOCK = 128
MIN_AMAX = 1e-12
#: the widest row one program holds in registers (elements; 16 warps, 32 a thread): one read of
#: the row. Longer rows are read twice in chunks of this width (the amax, then the codes)
ROW_CHUNK = 16384


@functools.lru_cache(maxsize=1)
def _kernels() -> Any:
    """The four kernels: ``(per_token, per_group, tensor_amax, per_tensor)``."""
    return (*_row_kernels(), *_tensor_kernels())


@functools.lru_cache(maxsize=1)
def _quant_fn() -> Any:
    """The E4M3 rounding every kernel calls: ``v / s`` rounded to nearest, clamped to +-448."""
    import triton
    import triton.language as tl

    @triton.jit
    def _quant(v, s):
        q = tl.math.div_rn(v, s)
        q = tl.minimum(tl.maximum(q, -448.0), 448.0)
        return q.to(tl.float8e4nv)

    # Triton's interpreter resolves a called @jit function by the module's globals, not the
    # kernels' closure (the compiler takes either)
    globals()["_quant"] = _quant
    return _quant


@functools.lru_cache(maxsize=1)
def _row_kernels() -> Any:
    """Per token (one row a program) and per 1x128 group (rows by groups a program)."""
    import triton
    import triton.language as tl
    _quant = _quant_fn()

    @triton.jit
    def per_token(x_ptr, q_ptr, s_ptr, K, stride_x, stride_q, CHUNK: tl.constexpr,
                  ONE_CHUNK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, CHUNK)
        xr = x_ptr + row.to(tl.int64) * stride_x
        qr = q_ptr + row.to(tl.int64) * stride_q
        if ONE_CHUNK:
            m = offs < K
            v = tl.load(xr + offs, mask=m, other=0.0).to(tl.float32)
            amax = tl.max(tl.abs(v), axis=0)
            s = tl.maximum(amax, 1e-12) * (1.0 / 448.0)
            tl.store(qr + offs, _quant(v, s), mask=m)
        else:
            acc = tl.zeros((CHUNK,), dtype=tl.float32)
            for k0 in range(0, K, CHUNK):
                m = k0 + offs < K
                v = tl.load(xr + k0 + offs, mask=m, other=0.0).to(tl.float32)
                acc = tl.maximum(acc, tl.abs(v))
            amax = tl.max(acc, axis=0)
            s = tl.maximum(amax, 1e-12) * (1.0 / 448.0)
            for k0 in range(0, K, CHUNK):
                m = k0 + offs < K
                v = tl.load(xr + k0 + offs, mask=m, other=0.0).to(tl.float32)
                tl.store(qr + k0 + offs, _quant(v, s), mask=m)
        tl.store(s_ptr + row, s)

    @triton.jit
    def per_group(x_ptr, q_ptr, s_ptr, M, K, KB, stride_x, stride_q, stride_s,
                  ROWS: tl.constexpr, GROUPS: tl.constexpr):
        # one program: ROWS rows by GROUPS groups of 128 (the padding columns get zero codes)
        pid_m = tl.program_id(0)
        pid_g = tl.program_id(1)
        rows = pid_m * ROWS + tl.arange(0, ROWS)
        grp = pid_g * GROUPS + tl.arange(0, GROUPS)
        cols = tl.arange(0, 128)
        k = grp[:, None] * 128 + cols[None, :]  # [GROUPS, 128]
        rm = rows < M
        gm = grp < KB
        ptr = x_ptr + rows.to(tl.int64)[:, None, None] * stride_x + k[None, :, :]
        m = rm[:, None, None] & (k < K)[None, :, :]
        v = tl.load(ptr, mask=m, other=0.0).to(tl.float32)  # [ROWS, GROUPS, 128]
        amax = tl.max(tl.abs(v), axis=2)
        s = tl.maximum(amax, 1e-12) * (1.0 / 448.0)
        q = _quant(v, s[:, :, None])
        qptr = q_ptr + rows.to(tl.int64)[:, None, None] * stride_q + k[None, :, :]
        tl.store(qptr, q, mask=rm[:, None, None] & gm[None, :, None])
        sptr = s_ptr + rows.to(tl.int64)[:, None] * stride_s + grp[None, :]
        tl.store(sptr, s, mask=rm[:, None] & gm[None, :])

    return per_token, per_group


@functools.lru_cache(maxsize=1)
def _tensor_kernels() -> Any:
    """Per tensor: the amax (atomic max over programs), then the codes with one scale."""
    import triton
    import triton.language as tl
    _quant = _quant_fn()

    @triton.jit
    def tensor_amax(x_ptr, amax_ptr, n, BLOCK_N: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        tl.atomic_max(amax_ptr, tl.max(tl.abs(v), axis=0))

    @triton.jit
    def per_tensor(x_ptr, q_ptr, s_ptr, sout_ptr, n, DYNAMIC: tl.constexpr,
                   BLOCK_N: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        m = offs < n
        if DYNAMIC:  # s_ptr holds amax: the scale from it, as every program computes it
            s = tl.maximum(tl.load(s_ptr), 1e-12) * (1.0 / 448.0)
            if pid == 0:
                tl.store(sout_ptr, s)
        else:
            s = tl.load(s_ptr)
        v = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
        tl.store(q_ptr + offs, _quant(v, s), mask=m)

    return tensor_amax, per_tensor


def _interpreted() -> bool:
    """Whether Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``): CPU tensors then
    (tests/test_fp8_act_quant.py checks the kernels there against the torch form)."""
    from selector.core.env_vars import triton_interpret
    return triton_interpret()


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


#: from this many rows the per-token kernel reads rows in chunks of PREFILL_CHUNK (many programs
#: keep the GPU's memory busy; fewer registers a thread)
PREFILL_ROWS = 64
PREFILL_CHUNK = 4096


def _row_launch(m: int, k: int):
    """``(CHUNK, num_warps)`` of the per-token kernel for ``m`` rows of ``k``. Decode (few rows):
    one read of a row of up to ROW_CHUNK by up to 16 warps, about 32 elements a thread (one row
    of 14,336: 0.0049 ms a call inside a CUDA graph of 24 on an H100). Prefill: 4,096-wide
    chunks, 8 warps for a row read in several (4,096 x 14,336: 77% of the copy bandwidth,
    against 67% one read by 16 warps; 4,096 x 4,096: 88% by 4 warps;
    benchmarks/fp8_tiles.py --quant, docs/records/h200.md)."""
    if m > PREFILL_ROWS:
        chunk = min(_next_pow2(k), PREFILL_CHUNK)
        return chunk, 4 if k <= chunk else 8
    chunk = min(_next_pow2(k), ROW_CHUNK)
    return chunk, max(4, min(16, chunk // 1024))


def quantize_activation(x, quant: str, input_scale=None):
    """``backends.formats.fp8.quantize_activation`` for a CUDA ``[M, K]`` activation, in one launch
    (two for fp8_tensor_dynamic: the amax, then the codes)."""
    import torch
    if x.dim() != 2:
        raise ValueError(f"x has shape {list(x.shape)}; expected [M, K]")
    if not x.is_cuda and not _interpreted():
        raise ValueError("fp8_act_quant runs on CUDA tensors (backends.formats.fp8.quantize_activation "
                         "is the torch form)")
    x = x if x.stride(1) == 1 else x.contiguous()
    M, K = x.shape
    per_token, per_group, tensor_amax, per_tensor = _kernels()
    dev = x.device
    if quant == "fp8_channel":
        q = torch.empty((M, K), dtype=torch.float8_e4m3fn, device=dev)
        s = torch.empty((M, 1), dtype=torch.float32, device=dev)
        if M:
            chunk, warps = _row_launch(M, K)
            per_token[(M,)](x, q, s, K, x.stride(0), q.stride(0), CHUNK=chunk,
                            ONE_CHUNK=K <= chunk, num_warps=warps)
        return q, s
    if quant == "fp8_block":
        kb = -(-K // BLOCK)
        q = torch.empty((M, kb * BLOCK), dtype=torch.float8_e4m3fn, device=dev)
        s = torch.empty((M, kb), dtype=torch.float32, device=dev)
        if M:
            groups = min(_next_pow2(kb), 8)
            rows = 1 if M <= 64 else 4
            grid = (-(-M // rows), -(-kb // groups))
            per_group[grid](x, q, s, M, K, kb, x.stride(0), q.stride(0), s.stride(0),
                            ROWS=rows, GROUPS=groups, num_warps=4)
        return q, s
    if quant not in ("fp8_tensor", "fp8_tensor_dynamic"):
        raise ValueError(f"quant {quant!r} is not an FP8 scheme")
    x = x.contiguous()
    n = x.numel()
    q = torch.empty((M, K), dtype=torch.float8_e4m3fn, device=dev)
    block_n = 2048
    tgrid = (max(1, -(-n // block_n)),)
    if quant == "fp8_tensor":
        if input_scale is None:
            raise ValueError("fp8_tensor needs its static input_scale")
        s = torch.as_tensor(input_scale, dtype=torch.float32, device=dev).reshape(())
        if n:
            per_tensor[tgrid](x, q, s, s, n, DYNAMIC=False, BLOCK_N=block_n, num_warps=4)
        return q, s
    amax = torch.zeros((), dtype=torch.float32, device=dev)
    # a tensor of its own (cuBLASLt refuses a scale pointer into another allocation's middle)
    s = torch.empty((), dtype=torch.float32, device=dev)
    if n:
        tensor_amax[tgrid](x, amax, n, BLOCK_N=block_n, num_warps=4)
        per_tensor[tgrid](x, q, amax, s, n, DYNAMIC=True, BLOCK_N=block_n, num_warps=4)
    else:
        s.fill_(MIN_AMAX * (1.0 / FP8_MAX))
    return q, s


__all__ = ["quantize_activation"]
