"""``triton_block_fp8``: a Triton GEMM for FP8 linear layers with DeepSeek-style block scales.

``y[m, n] = sum_kb (sum_{k in kb} A[m, k] * W[n, k]) * sa[m, kb] * sw[n // 128, kb]``: FP8 E4M3
operands on the tensor cores (``tl.dot``, float32 accumulation), one K step per 128-wide scale
group, each partial product scaled in float32 and summed; the output written in x's dtype (and
the bias added) in the epilogue. The activation is quantized per 1x128 group by
``backends.formats.fp8.quantize_activation`` (the reference's quantizer). The same algorithm as vLLM's
``w8a8_triton_block_scaled_mm`` (``model_executor/layers/quantization/utils/fp8_utils.py``), written
here for selector. Needs triton and SM >= 8.9 (E4M3 ``tl.dot``); any K and N (masked tiles).

Imports triton only when a kernel first runs.
"""
from __future__ import annotations

import functools
from typing import Any

from ..common import validate
from ..formats.fp8 import BLOCK, is_fp8_linear_weights, linear_input, quantize_activation
from ._base import LinearBackend


@functools.lru_cache(maxsize=1)
def _k_blocks() -> Any:
    """The GEMM's main loop over K blocks ``[kb0, kb1)``: float32 sums, each 128-wide block's
    product scaled by its activation and weight scales (OUTER: unscaled; the epilogue applies
    the row scales once)."""
    import triton
    import triton.language as tl

    @triton.jit
    def k_blocks(a_ptrs, b_ptrs, as_ptrs, bs_ptrs, mask_m, mask_n, rk, kb0, kb1, K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 MAX_IMPRECISE: tl.constexpr, OUTER: tl.constexpr):
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        a_ptrs += kb0 * BLOCK_K
        b_ptrs += kb0 * BLOCK_K
        for kb in range(kb0, kb1):
            k_left = K - kb * BLOCK_K
            a = tl.load(a_ptrs, mask=mask_m[:, None] & (rk[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :] & (rk[:, None] < k_left), other=0.0)
            if OUTER:
                acc = tl.dot(a, b, acc, max_num_imprecise_acc=MAX_IMPRECISE)
            else:
                sa = tl.load(as_ptrs + kb, mask=mask_m, other=0.0)
                sb = tl.load(bs_ptrs + kb, mask=mask_n, other=0.0)
                acc += tl.dot(a, b, max_num_imprecise_acc=MAX_IMPRECISE) * sa[:, None] * sb[None, :]
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K
        return acc

    # Triton's interpreter resolves a called @jit function by the module's globals, not the
    # kernel's closure (the compiler takes either)
    globals()["k_blocks"] = k_blocks
    return k_blocks


@functools.lru_cache(maxsize=1)
def _split_k_sum() -> Any:
    """Split-K in one launch: each split stores its float32 partial sums in its slice of the
    workspace and counts itself in the tile's counter; the split that arrives last sums the
    slices in a fixed order (deterministic), and puts the counter back to 0 for the next call
    (the counters start at 0: _split_workspace). ``(the sum, whether this split writes it)``."""
    import triton
    import triton.language as tl

    @triton.jit
    def split_k_sum(acc, ws_ptr, lock_ptr, pid, pid_k, tile, mask, M, N,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr):
        tl.store(ws_ptr + pid_k * M * N + tile, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial stored before the release below
        arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel", scope="gpu")
        last = arrived == SPLIT_K - 1
        if last:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(SPLIT_K):
                acc += tl.load(ws_ptr + s * M * N + tile, mask=mask, other=0.0, cache_modifier=".cg")
            tl.atomic_xchg(lock_ptr + pid, 0, sem="relaxed", scope="gpu")
        return acc, last

    globals()["split_k_sum"] = split_k_sum
    return split_k_sum


@functools.lru_cache(maxsize=1)
def _kernel() -> Any:
    import triton
    import triton.language as tl
    k_blocks, split_k_sum = _k_blocks(), _split_k_sum()

    @triton.jit
    def block_fp8_gemm(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, bias_ptr, ws_ptr, lock_ptr,
                       M, N, K, KB, stride_am, stride_bn, stride_cm, stride_asm, stride_bsn,
                       HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       MAX_IMPRECISE: tl.constexpr, SPLIT_K: tl.constexpr,
                       OUTER: tl.constexpr = False):
        pid = tl.program_id(0)  # the output tile
        pid_k = tl.program_id(1)  # split-K: this program's share of the K blocks
        num_m = tl.cdiv(M, BLOCK_M)
        num_n = tl.cdiv(N, BLOCK_N)
        group = GROUP_M * num_n
        first_m = (pid // group) * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (pid % group) % size_m
        pid_n = (pid % group) // size_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        mask_m = rm < M
        mask_n = rn < N
        a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
        b_ptrs = b_ptr + rn[None, :] * stride_bn + rk[:, None]
        as_ptrs = as_ptr + rm * stride_asm
        # OUTER: one scale per row of A and per row of W (stride 0: one for the tensor), applied
        # once to the sum; else one per 128-wide K block (and 128 rows of W), applied per block
        bs_ptrs = bs_ptr + (rn if OUTER else rn // 128) * stride_bsn
        per = tl.cdiv(KB, SPLIT_K)
        kb0 = pid_k * per
        acc = k_blocks(a_ptrs, b_ptrs, as_ptrs, bs_ptrs, mask_m, mask_n, rk, kb0,
                       tl.minimum(kb0 + per, KB), K, BLOCK_M, BLOCK_N, BLOCK_K, MAX_IMPRECISE, OUTER)
        mask = mask_m[:, None] & mask_n[None, :]
        last = True
        if SPLIT_K > 1:
            acc, last = split_k_sum(acc, ws_ptr, lock_ptr, pid, pid_k, rm[:, None] * N + rn[None, :],
                                    mask, M, N, BLOCK_M, BLOCK_N, SPLIT_K)
        if last:
            if OUTER:
                sa = tl.load(as_ptrs, mask=mask_m, other=0.0)
                sb = tl.load(bs_ptrs, mask=mask_n, other=0.0)
                acc = acc * sa[:, None] * sb[None, :]
            if HAS_BIAS:
                acc += tl.load(bias_ptr + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]
            c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :]
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)

    return block_fp8_gemm


def split_k(m: int, n: int, kb: int, block_n: int, sms: int) -> int:
    """How many splits of K at decode: enough programs for two waves over the SMs when the
    output's tiles alone are fewer (DeepSeek-V3's down_proj: 112 tiles of 64 columns on 132
    SMs; docs/records/h200.md for the measurement), each split at least 8 K blocks."""
    if m > 16:
        return 1
    tiles = -(-n // block_n)
    if tiles >= 2 * sms:
        return 1
    return max(1, min(-(-2 * sms // tiles), kb // 8))


def tile_config(m: int) -> dict:
    """Tile sizes by the number of tokens: small M (decode) uses narrow M tiles."""
    if m <= 16:
        return dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4)
    if m <= 64:
        return dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=4)
    return dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)


#: the scaled kernel's prefill tile (128 x 256, K step 128, 3 stages: 144 KiB of shared memory):
#: on an H100 it ran Llama-3.1-8B's down_proj at 4,096 and 16,384 tokens in 0.36 and 1.49 ms
#: against 0.43 and 1.71-1.86 ms with 128 x 128 tiles and 0.40 and 1.72 ms for torch's row-wise
#: _scaled_mm (benchmarks/fp8_tiles.py --large, docs/records/h200.md)
LARGE_SCALED = dict(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3)
#: its shared memory: a K step of A's and W's rows (one byte each) a stage
LARGE_SCALED_SMEM = LARGE_SCALED["num_stages"] * (LARGE_SCALED["BLOCK_M"] + LARGE_SCALED["BLOCK_N"]) * 128
#: from this many rows the output has enough 128 x 256 tiles (Llama's 4096 columns: 16 a row
#: of tiles, 256 tiles at 2,048 rows) for two waves over an H100's 132 SMs
LARGE_SCALED_MIN_M = 2048


def scaled_tile_config(m: int, device) -> dict:
    """``tile_config(m)``, but the larger prefill tile (``LARGE_SCALED``) for the scaled kernel
    from ``LARGE_SCALED_MIN_M`` rows on a GPU whose blocks may take its shared memory."""
    if m >= LARGE_SCALED_MIN_M and device.type == "cuda" and \
            _smem_per_block(device) >= LARGE_SCALED_SMEM:
        return dict(LARGE_SCALED)
    return tile_config(m)


@functools.cache
def _smem_per_block(device) -> int:
    import torch
    return int(getattr(torch.cuda.get_device_properties(device),
                       "shared_memory_per_block_optin", 0))


#: tl.dot's max_num_imprecise_acc for the FP8 products (None: Triton's default)
MAX_IMPRECISE = None


def block_fp8_matmul(a, a_scale, w, w_scale, out_dtype, bias=None, max_imprecise="default",
                     cfg=None):
    """``[M, K']`` FP8 codes (K' >= K: the first K columns are read) with ``[M, ceil(K/128)]``
    scales times ``[N, K]`` FP8 weights with ``[ceil(N/128), ceil(K/128)]`` scales: ``[M, N]`` in
    ``out_dtype`` (CUDA tensors). ``cfg``: tile sizes instead of ``tile_config(M)`` (sweeps)."""
    import triton
    M = a.shape[0]
    N, K = w.shape
    KB = triton.cdiv(K, BLOCK)
    if a.shape[1] < K or a.stride(1) != 1 or tuple(a_scale.shape) != (M, KB) or tuple(w_scale.shape) != (
            triton.cdiv(N, BLOCK), KB):
        raise ValueError(f"block_fp8_matmul: a {list(a.shape)}, a_scale {list(a_scale.shape)}, "
                         f"w {list(w.shape)}, w_scale {list(w_scale.shape)} do not fit")
    w = w.contiguous()
    a_scale, w_scale = a_scale.contiguous().float(), w_scale.contiguous().float()
    cfg = dict(tile_config(M) if cfg is None else cfg)
    splits = cfg.pop("SPLIT_K", None)
    if splits is None:
        # split-K is a decode tiling for the GPU; the interpreter (CPU tensors) runs one split
        splits = split_k(M, N, KB, cfg["BLOCK_N"], _sm_count(a.device)) if a.is_cuda else 1
    return _launch(a, a_scale, w, w_scale, bias, out_dtype, K, KB, a_scale.stride(0),
                   w_scale.stride(0), splits, cfg, BLOCK_K=BLOCK, OUTER=False,
                   MAX_IMPRECISE=MAX_IMPRECISE if max_imprecise == "default" else max_imprecise)


def _launch(a, a_scale, w, w_scale, bias, out_dtype, K, KB, stride_asm, stride_bsn, splits,
            cfg, **constexprs):
    """The shared GEMM kernel on ``[M, K]`` codes and ``[N, K]`` weights: the ``[M, N]`` output
    in ``out_dtype``, K split over ``splits`` programs a tile (summed in the launch)."""
    import torch
    import triton
    M, N = a.shape[0], w.shape[0]
    c = torch.empty((M, N), dtype=out_dtype, device=a.device)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    ws, locks = _split_workspace(splits, M, N, tiles, c)
    _kernel()[(tiles, splits)](
        a, w, c, a_scale, w_scale, bias if bias is not None else c, ws, locks, M, N, K, KB,
        a.stride(0), w.stride(0), c.stride(0), stride_asm, stride_bsn,
        HAS_BIAS=bias is not None, GROUP_M=8, SPLIT_K=splits, **constexprs, **cfg)
    return c


#: split-K tile counters, one zeroed int32 buffer per (device, stream): every kernel that uses
#: one leaves it zeroed, and the kernels of one stream run one after another
_COUNTERS: dict = {}
_MAX_STREAMS = 64


def _split_workspace(splits: int, m: int, n: int, tiles: int, like):
    """``(workspace, counters)`` for a split-K launch: float32 partial sums ``[splits, M, N]``
    and one arrival counter per output tile, zero at launch. Outside a CUDA graph capture the
    counters are the current stream's (kept, since every launch leaves them at zero); during a
    capture they are fresh zeros, so the memset is part of the graph and every replay starts
    from zero (two graphs never share counters). ``splits == 1``: the output stands in for
    both (never read)."""
    import torch
    if splits == 1:
        return like, like
    dev = like.device
    ws = torch.empty((splits, m, n), dtype=torch.float32, device=dev)
    # the interpreter (CPU tensors), or a capture: fresh zeros
    if dev.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return ws, torch.zeros(tiles, dtype=torch.int32, device=dev)
    key = (dev.index, torch.cuda.current_stream(dev).cuda_stream)
    locks = _COUNTERS.get(key)
    if locks is None or locks.numel() < tiles:
        if locks is None and len(_COUNTERS) >= _MAX_STREAMS:
            _COUNTERS.pop(next(iter(_COUNTERS)))
        locks = _COUNTERS[key] = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=dev)
    return ws, locks


def _shaped(y, shape, out):
    """The GEMM's ``[M, N]`` output as the layer's ``[..., N]``, or copied into the caller's
    ``out`` (checked by ``_base.output_buffer``)."""
    from ..common.validate import output_buffer
    y = y.reshape(shape)
    if out is None:
        return y
    buf = output_buffer(out, tuple(y.shape), y.dtype, y.device)
    buf.copy_(y)
    return buf


@functools.cache
def _sm_count(device) -> int:
    import torch
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


class TritonBlockFp8Linear(LinearBackend):
    """Block-FP8 linear layer (``fp8_block``). ``prepare(Fp8LinearWeights)`` gates and keeps the
    checkpoint's codes and 128x128 scales as they are; ``apply(x, prepared, out=None)``."""
    computes = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")

    def prepare(self, weights):
        if not is_fp8_linear_weights(weights):
            raise ValueError(f"TritonBlockFp8Linear.prepare: expected backends.formats.fp8."
                             f"Fp8LinearWeights, got {type(weights).__name__}")
        if weights.quant != "fp8_block" or self.quant != "fp8_block":
            raise ValueError(f"triton_block_fp8 runs fp8_block; the weights are "
                             f"{weights.quant}, the layer {self.quant}")
        from .torch_scaled_mm import TorchFp8Prepared
        n, k = weights.out_features, weights.in_features
        validate.int32_indexing("triton_block_fp8", **{"the weight [N, K]": n * k})
        return self.admit(TorchFp8Prepared.unpadded_block(weights))

    def apply(self, x, prepared, *, out=None):
        import torch

        p = prepared
        validate.float_input("x", x, last=p.in_features, device=p.weight.device)
        m = x.numel() // p.in_features
        validate.int32_indexing("triton_block_fp8", **{  # the kernel's offsets are int32
            "x [M, K]": m * (p.in_features + (-p.in_features) % BLOCK),
            "the output [M, N]": m * p.out_features})
        lead, x2 = linear_input(x, p.in_features, p.weight.device)
        if not x2.shape[0]:
            return validate.empty_output(lead + (p.out_features,), x, out)
        a, sa = quantize_activation(x2, "fp8_block")
        bias = None if p.bias is None else p.bias.to(torch.float32).contiguous()
        y = block_fp8_matmul(a, sa, p.weight, p.weight_scale, x.dtype, bias)
        return _shaped(y, lead + (p.out_features,), out)


def scaled_fp8_matmul(a, a_scale, w, w_scale, out_dtype, bias=None, cfg=None):
    """``[M, K]`` FP8 codes with one scale per row (``[M]`` / ``[M, 1]``) or one for the tensor
    (a 0-d or 1-element tensor) times ``[N, K]`` FP8 weights with one scale per output channel
    (``[N]``) or one for the tensor: ``[M, N]`` in ``out_dtype`` (CUDA tensors; the same kernel as
    :func:`block_fp8_matmul` with the scales applied once to the float32 sum; split-K at decode)."""
    import triton
    M, K = a.shape
    N = w.shape[0]
    if w.shape[1] != K or a.stride(1) != 1 or a_scale.numel() not in (1, M) or \
            w_scale.numel() not in (1, N):
        raise ValueError(f"scaled_fp8_matmul: a {list(a.shape)}, a_scale {list(a_scale.shape)}, "
                         f"w {list(w.shape)}, w_scale {list(w_scale.shape)} do not fit")
    sa = a_scale.reshape(-1).float()
    sw = w_scale.reshape(-1).float()
    cfg = dict(scaled_tile_config(M, a.device) if cfg is None else cfg)
    bk = cfg.pop("BLOCK_K", BLOCK)  # any K step: no scale per 128-wide block here
    KB = triton.cdiv(K, bk)
    splits = cfg.pop("SPLIT_K", None)
    if splits is None:
        splits = split_k(M, N, KB, cfg["BLOCK_N"], _sm_count(a.device)) if a.is_cuda else 1
    return _launch(a, sa, w, sw, bias, out_dtype, K, KB, int(sa.numel() > 1),
                   int(sw.numel() > 1), splits, cfg, BLOCK_K=bk, OUTER=True,
                   MAX_IMPRECISE=MAX_IMPRECISE)


class TritonScaledFp8Linear(LinearBackend):
    """FP8 linear layer with per-tensor (static or dynamic) or per-channel weight scales
    (``fp8_tensor``, ``fp8_tensor_dynamic``, ``fp8_channel``) on selector's Triton GEMM: the
    activation quantized per tensor or per token (``backends.formats.fp8.quantize_activation``), one
    ``tl.dot`` sum per output tile, both scales applied once to it in the epilogue with the
    bias; K split across programs at decode when the output has too few tiles for the GPU.
    ``prepare(Fp8LinearWeights)`` keeps the checkpoint's codes and scales (no padding: the
    tiles are masked); ``apply(x, prepared, out=None)``."""
    computes = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
    schemes = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel")

    def prepare(self, weights):
        if not is_fp8_linear_weights(weights):
            raise ValueError(f"TritonScaledFp8Linear.prepare: expected backends.formats.fp8."
                             f"Fp8LinearWeights, got {type(weights).__name__}")
        if weights.quant != self.quant or self.quant not in self.schemes:
            raise ValueError(f"triton_scaled_fp8 runs {', '.join(self.schemes)}; the weights are "
                             f"{weights.quant}, the layer {self.quant}")
        from .torch_scaled_mm import TorchFp8Prepared
        n, k = weights.out_features, weights.in_features
        validate.int32_indexing("triton_scaled_fp8", **{"the weight [N, K]": n * k})
        prepared = TorchFp8Prepared(
            quant=weights.quant, weight=weights.weight.contiguous(),
            weight_scale=weights.weight_scale.float().reshape(-1).contiguous(),
            input_scale=None if weights.input_scale is None else
            weights.input_scale.float().reshape(()),
            bias=None if weights.bias is None else weights.bias.float().contiguous(),
            in_features=k, out_features=n, padded_k=k, padded_n=n,
            geometry={"hidden_size": k, "out_features": n})
        return self.admit(prepared)

    def apply(self, x, prepared, *, out=None):
        p = prepared
        lead, x2 = linear_input(x, p.in_features, p.weight.device)
        m = x2.shape[0]
        validate.int32_indexing("triton_scaled_fp8", **{
            "x [M, K]": m * p.in_features, "the output [M, N]": m * p.out_features})
        if not m:
            return validate.empty_output(lead + (p.out_features,), x, out)
        a, sa = quantize_activation(x2, p.quant, p.input_scale)
        y = scaled_fp8_matmul(a, sa, p.weight, p.weight_scale, x.dtype, p.bias)
        return _shaped(y, lead + (p.out_features,), out)


__all__ = ["TritonBlockFp8Linear", "TritonScaledFp8Linear", "block_fp8_matmul",
           "scaled_fp8_matmul", "scaled_tile_config", "tile_config"]
