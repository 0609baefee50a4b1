"""The emulation's fused NVFP4 MoE on CUDA: two Triton grouped GEMMs that dequantize in registers.

``emulate_moe`` (``backends.reference``) runs :func:`fused_moe` on CUDA when Triton imports. It computes what the
grouped emulation computes, step for step, without expanding any weight in memory:

- routing: the ``T * top_k`` (token, slot) rows are sorted by expert once (``argsort`` on the device) and cut into
  blocks of ``BLOCK_M`` rows of one expert each; the block table has a fixed upper-bound size (``ceil(T k / BLOCK_M)
  + min(E, T k)`` blocks, the surplus marked -1), so nothing waits for the device and the launches can be captured
  in a CUDA graph.
- FC1 (``_fc1``): for each block and each tile of ``BLOCK_N`` intermediate columns the program reads the expert's
  packed E2M1 codes and E4M3 block scales (16 elements a scale) of the gate and up rows, expands them to codes times
  block scales in bf16 in registers (exact: a 2-bit times a 4-bit significand), multiplies with the bf16 activations
  (``tl.dot``, float32 accumulation), rounds the GEMM output to bf16 (the emulation's bf16 GEMM output), multiplies
  the float32 value by the weight's global scale and the activation's scale, and applies the activation (silu, gelu,
  gelu_tanh, the SwiGLU-OAI pair in both layouts, swiglustep, the ``swiglu_limit`` clamp; relu2, silu, gelu,
  gelu_tanh non-gated) in float32. Only the routed experts' weights are read, each once per block of its rows.
- W4A4: FC1's input is quantized to NVFP4 (codes times block scales in bf16, the global scale kept aside) by
  ``nvfp4_triton.quantize_unit_triton``, one Triton kernel with the emulation's rounding; FC1's activation likewise
  before FC2: with a given FC2 input scale (the checkpoint's, 0-d or per expert) FC1's epilogue quantizes it itself
  (``_qdq``, the same arithmetic) and writes FC2's bf16 input, with none (dynamic) it writes float32 and the
  per-expert amax and the quantizer follow. W4A16: FC1 writes bf16.
- FC2 (``_fc2``): the same GEMM over ``I``; its bf16-rounded output times the global scales and the router weight is
  added into the token's float32 row of the ``[T, H]`` output (atomic adds, top_k > 1; the order of a token's top_k
  additions varies from run to run), or with config ``ATOMIC=0`` written per (token, slot) row and the rows summed
  (``[T top_k, H]`` float32).

Memory during a call: the checkpoint plus the activations (x, FC2's input ``[T top_k, I]``, the ``[T, H]`` float32
sum): 1.00-1.11x the checkpoint on an H100 at Qwen3-30B-A3B, gpt-oss-120b and Mixtral-8x7B shapes up to 1,024 tokens
(docs/performance.md). No host sync once a shape's kernels are compiled: ``EmulationMoE.apply`` can be captured in a
CUDA graph.

The values are the grouped emulation's up to float32 accumulation order (the GEMM's and the top-k sum's):
tests/test_emulation_fused.py compares them in Triton's interpreter on the CPU.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from selector.core.env_vars import triton_interpret

from .nvfp4_moe_host import (
    TILE_FAILED,
    cfg_key,
    compile_failure,
    fc1_input,
    fc2_input,
    gate_up_columns,
    per_expert,
    swiglu_params,
    tile_ladder,
)

#: activation codes of the kernels (``ACT``)
_ACTS = {"silu": 0, "gelu": 1, "gelu_tanh": 2, "swigluoai": 3, "swigluoai_uninterleave": 3, "swiglustep": 4, "relu2": 5}


try:
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001 - no Triton: the grouped torch path runs
    triton = None

if triton is not None:
    @triton.jit
    def _mma(a, w, acc, F32_DOT: tl.constexpr):
        """``acc + a @ w.T`` (bf16 inputs, float32 accumulation). ``F32_DOT``: in float32 (exact:
        a bf16 product fits float32), for Triton's interpreter, whose bf16 ``tl.dot`` multiplies
        the raw uint16 bits (triton 3.x ``interpreter.py`` stores bf16 as uint16)."""
        if F32_DOT:
            return tl.dot(a.to(tl.float32), tl.trans(w.to(tl.float32)), acc,
                          input_precision="ieee")
        return tl.dot(a, tl.trans(w), acc)

    @triton.jit
    def _bf16(x):
        """float32 ``x`` rounded to bf16 (to nearest, ties to even), as float32: by its bits, so
        that Triton's interpreter (whose float32 -> bf16 cast truncates) rounds as the GPU does."""
        b = x.to(tl.uint32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
        return b.to(tl.float32, bitcast=True)

    @triton.jit
    def _code(c):
        """E2M1 codes ``c`` (int32) as float32 times 2^-14 (exact): the code's sign, exponent and
        mantissa moved to bits 15 and 9-11 of an fp16 (code 1, 0.5, is the fp16 subnormal 2^-15)."""
        v = (((c & 8) << 12) | ((c & 7) << 9)).to(tl.int16).to(tl.float16, bitcast=True)
        return v.to(tl.float32)

    @triton.jit
    def _deq_groups(p_ptr, s_ptr, rows, mask_n, k0, K, stride_pn, stride_sn,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """Codes times block scales of ``rows`` x ``[k0, k0 + BLOCK_K)``, as the low and the high
        nibbles (even and odd columns), bf16 ``[BLOCK_N, BLOCK_K / 16, 8]`` each: read as
        ``[BLOCK_N, BLOCK_K / 16, 8]`` bytes (a 16-element block's 8 bytes) and ``[BLOCK_N,
        BLOCK_K / 16]`` scales, one load per scale (no per-element gather), broadcast over its
        block in registers."""
        G: tl.constexpr = BLOCK_K // 16
        g = tl.arange(0, G)
        kh = k0 // 2 + g[:, None] * 8 + tl.arange(0, 8)[None, :]
        r = rows.to(tl.int64)
        m3 = mask_n[:, None, None] & (kh[None, :, :] < K // 2)
        b = tl.load(p_ptr + r[:, None, None] * stride_pn + kh[None, :, :], mask=m3,
                    other=0).to(tl.int32)
        sg = k0 // 16 + g
        s = tl.load(s_ptr + r[:, None] * stride_sn + sg[None, :],
                    mask=mask_n[:, None] & (sg[None, :] < K // 16), other=0.0).to(tl.float32)
        s3 = (s * 16384.0)[:, :, None]
        lo = (_code(b & 15) * s3).to(tl.bfloat16)
        hi = (_code(b >> 4) * s3).to(tl.bfloat16)
        return lo, hi

    @triton.jit
    def _deq_group_tile(p_ptr, s_ptr, rows, mask_n, k0, K, stride_pn, stride_sn,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """:func:`_deq_groups` in K order, bf16 ``[BLOCK_N, BLOCK_K]``."""
        lo, hi = _deq_groups(p_ptr, s_ptr, rows, mask_n, k0, K, stride_pn, stride_sn, BLOCK_N,
                             BLOCK_K)
        return tl.reshape(tl.interleave(lo, hi), (BLOCK_N, BLOCK_K))

    @triton.jit
    def _deq_group_halves(p_ptr, s_ptr, rows, mask_n, k0, K, stride_pn, stride_sn,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """:func:`_deq_groups`'s even and odd columns, bf16 ``[BLOCK_N, BLOCK_K / 2]`` each."""
        lo, hi = _deq_groups(p_ptr, s_ptr, rows, mask_n, k0, K, stride_pn, stride_sn, BLOCK_N,
                             BLOCK_K)
        return (tl.reshape(lo, (BLOCK_N, BLOCK_K // 2)),
                tl.reshape(hi, (BLOCK_N, BLOCK_K // 2)))

    @triton.jit
    def _act(g, u, limit, alpha, beta, ACT: tl.constexpr, GATED: tl.constexpr,
             HAS_LIMIT: tl.constexpr):
        if GATED and (HAS_LIMIT or ACT == 3):  # the clamps (SwiGLU-OAI: always)
            g = tl.minimum(g, limit)
        if GATED and (HAS_LIMIT or ACT == 3 or ACT == 4):
            u = tl.minimum(tl.maximum(u, -limit), limit)
        if ACT == 0:
            a = g * tl.sigmoid(g)
        elif ACT == 1:
            a = 0.5 * g * (1.0 + tl.math.erf(g * 0.7071067811865476))
        elif ACT == 2:
            t = 0.7978845608028654 * (g + 0.044715 * g * g * g)
            a = 0.5 * g * (1.0 + (2.0 * tl.sigmoid(2.0 * t) - 1.0))
        elif ACT == 3:  # SwiGLU-OAI: g * sigmoid(alpha g) * (u + beta)
            a = g * tl.sigmoid(alpha * g) * (u + beta)
        elif ACT == 4:  # swiglustep: min(silu(g), limit) * clamp(u)
            a = tl.minimum(g * tl.sigmoid(g), limit)
        else:  # relu2
            r = tl.maximum(g, 0.0)
            a = r * r
        if GATED and ACT != 3:
            a = a * u
        return a

    @triton.jit
    def _qdq(y, s, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """float32 ``[BLOCK_M, BLOCK_N]`` quantized to NVFP4 with global scale ``s`` and back:
        codes times block scales (16 columns a block), float32; the arithmetic of
        ``nvfp4_triton.quantize_unit_triton`` step for step (the same bits)."""
        x = tl.reshape(y, (BLOCK_M, BLOCK_N // 16, 16))
        amax = tl.max(tl.abs(x), axis=2)
        v = amax / (6.0 * s)
        ex = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
        step_e = tl.maximum(ex, -6) - 3
        step = ((step_e + 127) << 23).to(tl.float32, bitcast=True)
        bs = tl.minimum(((v / step + 12582912.0) - 12582912.0) * step, 448.0)
        denom = bs * s
        q = tl.where(denom[:, :, None] > 0,
                     tl.math.div_rn(x, tl.where(denom > 0, denom, 1.0)[:, :, None]), 0.0)
        a = tl.abs(q)
        c = tl.where(a > 5.0, 6.0, tl.where(a >= 3.5, 4.0, tl.where(a > 2.5, 3.0, tl.where(
            a >= 1.75, 2.0, tl.where(a > 1.25, 1.5, tl.where(a >= 0.75, 1.0, tl.where(
                a > 0.25, 0.5, 0.0)))))))
        c = tl.where(q < 0, -c, c) * bs[:, :, None]
        return tl.reshape(c, (BLOCK_M, BLOCK_N))

    @triton.jit
    def _fc1(a_ptr, stride_am, arow_ptr, be_ptr, bs_ptr, bend_ptr, wp_ptr, wsc_ptr, ws2_ptr, as_ptr, qs_ptr,
             out_ptr, stride_om, N, K, stride_pe, stride_pn, stride_se, stride_sn,
             gate_base, up_base, row_step, limit, alpha, beta,
             ACT: tl.constexpr, GATED: tl.constexpr, HAS_LIMIT: tl.constexpr, OUT_BF16: tl.constexpr,
             QUANT_OUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             F32_DOT: tl.constexpr, SPLIT: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_b = tl.program_id(1)
        e = tl.load(be_ptr + pid_b)
        if e < 0:
            return
        r0 = tl.load(bs_ptr + pid_b)
        r1 = tl.load(bend_ptr + pid_b)
        rows = r0 + tl.arange(0, BLOCK_M)
        mask_m = rows < r1
        arow = tl.load(arow_ptr + rows, mask=mask_m, other=0).to(tl.int64)
        n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = n < N
        wp = wp_ptr + e.to(tl.int64) * stride_pe
        wsc = wsc_ptr + e.to(tl.int64) * stride_se
        g_rows = gate_base + n * row_step
        u_rows = up_base + n * row_step
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if SPLIT:  # even and odd columns as two GEMMs (no interleave of the nibbles)
                ke = k0 + 2 * tl.arange(0, BLOCK_K // 2)
                pa = a_ptr + arow[:, None] * stride_am + ke[None, :]
                a_e = tl.load(pa, mask=mask_m[:, None] & (ke[None, :] < K), other=0.0)
                a_o = tl.load(pa + 1, mask=mask_m[:, None] & (ke[None, :] + 1 < K), other=0.0)
                lo, hi = _deq_group_halves(wp, wsc, g_rows, mask_n, k0, K, stride_pn, stride_sn,
                                           BLOCK_N, BLOCK_K)
                acc_g = _mma(a_o, hi, _mma(a_e, lo, acc_g, F32_DOT), F32_DOT)
                if GATED:
                    lo, hi = _deq_group_halves(wp, wsc, u_rows, mask_n, k0, K, stride_pn,
                                               stride_sn, BLOCK_N, BLOCK_K)
                    acc_u = _mma(a_o, hi, _mma(a_e, lo, acc_u, F32_DOT), F32_DOT)
            else:
                kk = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(a_ptr + arow[:, None] * stride_am + kk[None, :],
                            mask=mask_m[:, None] & (kk[None, :] < K), other=0.0)
                wg = _deq_group_tile(wp, wsc, g_rows, mask_n, k0, K, stride_pn, stride_sn,
                                     BLOCK_N, BLOCK_K)
                acc_g = _mma(a, wg, acc_g, F32_DOT)
                if GATED:
                    wu = _deq_group_tile(wp, wsc, u_rows, mask_n, k0, K, stride_pn, stride_sn,
                                         BLOCK_N, BLOCK_K)
                    acc_u = _mma(a, wu, acc_u, F32_DOT)
        scale_w = tl.load(ws2_ptr + e)
        scale_a = tl.load(as_ptr + e)
        # the emulation: the bf16 GEMM output, times the weight's then the activation's scale
        g = _bf16(acc_g) * scale_w * scale_a
        u = _bf16(acc_u) * scale_w * scale_a
        y = _act(g, u, limit, alpha, beta, ACT, GATED, HAS_LIMIT)
        o = out_ptr + rows[:, None].to(tl.int64) * stride_om + n[None, :]
        if OUT_BF16:
            y = _bf16(y)  # W4A16: FC2's bf16 input (exact below)
        if QUANT_OUT:  # W4A4 with a given FC2 input scale: FC2's NVFP4 input (exact in bf16)
            y = _qdq(y, tl.load(qs_ptr + e), BLOCK_M, BLOCK_N)
        tl.store(o, y.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])

    @triton.jit
    def _fc2(a_ptr, stride_am, be_ptr, bs_ptr, bend_ptr, slot_ptr, tw_ptr,
             wp_ptr, wsc_ptr, ws2_ptr, as_ptr, out_ptr, stride_om,
             N, K, stride_pe, stride_pn, stride_se, stride_sn, top_k,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             F32_DOT: tl.constexpr, SPLIT: tl.constexpr, ATOMIC: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_b = tl.program_id(1)
        e = tl.load(be_ptr + pid_b)
        if e < 0:
            return
        r0 = tl.load(bs_ptr + pid_b)
        r1 = tl.load(bend_ptr + pid_b)
        rows = r0 + tl.arange(0, BLOCK_M)
        mask_m = rows < r1
        n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = n < N
        wp = wp_ptr + e.to(tl.int64) * stride_pe
        wsc = wsc_ptr + e.to(tl.int64) * stride_se
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if SPLIT:
                ke = k0 + 2 * tl.arange(0, BLOCK_K // 2)
                pa = a_ptr + rows[:, None].to(tl.int64) * stride_am + ke[None, :]
                a_e = tl.load(pa, mask=mask_m[:, None] & (ke[None, :] < K), other=0.0)
                a_o = tl.load(pa + 1, mask=mask_m[:, None] & (ke[None, :] + 1 < K), other=0.0)
                lo, hi = _deq_group_halves(wp, wsc, n, mask_n, k0, K, stride_pn, stride_sn,
                                           BLOCK_N, BLOCK_K)
                acc = _mma(a_o, hi, _mma(a_e, lo, acc, F32_DOT), F32_DOT)
            else:
                kk = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(a_ptr + rows[:, None].to(tl.int64) * stride_am + kk[None, :],
                            mask=mask_m[:, None] & (kk[None, :] < K), other=0.0)
                w = _deq_group_tile(wp, wsc, n, mask_n, k0, K, stride_pn, stride_sn, BLOCK_N,
                                    BLOCK_K)
                acc = _mma(a, w, acc, F32_DOT)
        scale_w = tl.load(ws2_ptr + e)
        scale_a = tl.load(as_ptr + e)
        slot = tl.load(slot_ptr + rows, mask=mask_m, other=0).to(tl.int64)
        tw = tl.load(tw_ptr + slot, mask=mask_m, other=0.0)
        y = _bf16(acc) * scale_w * scale_a
        y = y * tw[:, None]
        if ATOMIC:  # the token's row of [T, H]: its top_k contributions added in float32
            o = out_ptr + (slot // top_k)[:, None] * stride_om + n[None, :]
            tl.atomic_add(o, y, mask=mask_m[:, None] & mask_n[None, :], sem="relaxed")
        else:
            o = out_ptr + slot[:, None] * stride_om + n[None, :]
            tl.store(o, y, mask=mask_m[:, None] & mask_n[None, :])


#: the kernels' tiles (``fused_moe``'s ``config`` overrides them per call; benchmarks/emulation_tiles.py sweeps them)
TILES: Dict[str, int] = {"BLOCK_N1": 64, "BLOCK_N2": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3, "SPLIT": 0}


if triton is not None:
    @triton.jit
    def _blocks(bounds_ptr, be_ptr, first_ptr, end_ptr, E, bm, max_blocks,
                EP: tl.constexpr, BB: tl.constexpr):
        """The block table from ``bounds`` (``[E + 1]``: the first sorted row of each expert and,
        last, of the unrouted rows), in one program: each expert's block count, their prefix sum,
        and per block its expert (the number of experts whose blocks end at or before it), first
        and end row (one-hot sums stand in for gathers, which Triton has not)."""
        e = tl.arange(0, EP)
        st = tl.load(bounds_ptr + e, mask=e <= E, other=0)
        nx = tl.load(bounds_ptr + e + 1, mask=e < E, other=0)
        cnt = tl.where(e < E, nx - st, 0)
        nblk = (cnt + bm - 1) // bm
        cum = tl.cumsum(nblk, 0)
        excl = cum - nblk
        for b0 in range(0, max_blocks, BB):
            b = b0 + tl.arange(0, BB)
            be = tl.sum(((cum[None, :] <= b[:, None]) & (e[None, :] < E)).to(tl.int32), 1)
            hot = e[None, :] == be[:, None]
            first = (b - tl.sum(tl.where(hot, excl[None, :], 0), 1)) * bm + \
                tl.sum(tl.where(hot, st[None, :], 0), 1)
            end = tl.sum(tl.where(hot, st[None, :] + cnt[None, :], 0), 1)
            m = b < max_blocks
            tl.store(be_ptr + b, tl.where(be < E, be, -1), mask=m)
            tl.store(first_ptr + b, first, mask=m)
            tl.store(end_ptr + b, end, mask=m)


def _kernels() -> Optional[Dict[str, Any]]:
    if triton is None:
        return None
    return {"fc1": _fc1, "fc2": _fc2}


def available() -> bool:
    return _kernels() is not None


def block_m(rows: int, num_experts: int) -> int:
    """BLOCK_M by the mean rows an expert gets (16 at decode: one tile of rows per expert), at most 32: on an H100
    (SM 9.0, Triton 3.6) every BLOCK_M 64 or 128 config failed to compile (SPLIT 0: ``PassManager::run failed``, the
    dequantized tile as a wgmma operand) or ran 1.6-3.0x slower than 32 (SPLIT 1) at Mixtral-8x7B 256 and 1,024 tokens,
    Qwen3-30B-A3B and gpt-oss-120b 1,024 (benchmarks/emulation_tiles.py --block-m 64,128; docs/performance.md)."""
    mean = rows / max(1, min(num_experts, rows))
    return 16 if mean <= 16 else 32


def route_blocks(topk_ids, num_experts: int, bm: int, kernel: Optional[bool] = None):
    """The block table of a call, all on the device (no host sync): ``(order, block_expert,
    block_start, block_end)`` with ``order`` the (token * top_k + slot) rows sorted by expert
    (unrouted ids < 0 last), and per block of ``bm`` rows of one expert its expert (-1: unused),
    first and end row in ``order``; also the expert of each sorted row (``num_experts`` for an
    unrouted one). ``kernel`` (default: on CUDA when Triton imports): the table by one Triton program
    (:func:`_blocks`) from the sort and one ``searchsorted``, a handful of launches where the
    torch form (``kernel=False``) takes about thirty (the host's time at decode); blocks past the
    last expert's hold -1 and rows that no program reads."""
    import torch
    E = num_experts
    ids = topk_ids.reshape(-1).long()
    ids = torch.where(ids >= 0, ids, E)
    n = ids.numel()
    row_e, order = torch.sort(ids, stable=True)
    max_blocks = -(-n // bm) + min(E, n)
    if kernel is None:  # the kernel on a GPU, or on the CPU under Triton's interpreter
        kernel = triton is not None and (ids.is_cuda or triton_interpret())
    if kernel:
        bounds = torch.searchsorted(row_e, torch.arange(E + 1, device=ids.device)).int()
        table = torch.empty((3, max_blocks), dtype=torch.int32, device=ids.device)
        if max_blocks:
            _blocks[(1,)](bounds, table[0], table[1], table[2], E, bm, max_blocks,
                          EP=triton.next_power_of_2(E + 1), BB=32)
        return order, table[0], table[1], table[2], row_e
    counts = torch.zeros(E + 1, dtype=torch.long, device=ids.device)
    counts.scatter_add_(0, ids, torch.ones_like(ids))
    starts = torch.cumsum(counts, 0) - counts
    nblk = (counts[:E] + bm - 1) // bm
    cum = torch.cumsum(nblk, 0)
    b = torch.arange(max_blocks, device=ids.device)
    be = torch.searchsorted(cum, b, right=True)
    valid = be < E
    bec = be.clamp(max=E - 1)
    first = (b - (cum - nblk)[bec]) * bm + starts[bec]
    end = starts[bec] + counts[bec]
    return (order, torch.where(valid, bec, -1).int(), first.int(), end.int(), row_e)


def fused_moe(x, weights, topk_weights, topk_ids, *, activation: str, quant: str,
              act_and_mul: bool, s1=None, s2=None, swiglu_limit=None, swiglu_alpha=None,
              swiglu_beta=None, w13_order: str = "gate_up", config: Optional[Dict[str, int]] = None):
    """``[T, H]`` float32: the emulation's MoE by the two fused kernels (arguments as
    ``emulate_moe``'s, checked by it; ``s1`` / ``s2`` the FC1 / FC2 input scales, 0-d, ``[E]`` or
    None = dynamic, used by W4A4 only). ``config`` overrides the tiles (BLOCK_M, BLOCK_N1,
    BLOCK_N2, BLOCK_K, num_warps, num_stages, SPLIT: even/odd columns as two GEMMs) and is run
    as given. Without it the default tiles for the shape are tried, and where Triton cannot
    compile them (compile_failure) the next of tile_ladder: a RuntimeWarning names the config,
    the reason and the config that runs instead, and the device skips that config from then
    on (TILE_FAILED); RuntimeError when no config of the ladder compiles."""
    if config is not None:
        return _fused_moe(x, weights, topk_weights, topk_ids, activation, quant, act_and_mul,
                          s1, s2, swiglu_limit, swiglu_alpha, swiglu_beta, w13_order, config)
    E = weights.w13.packed.shape[0]
    cfg = {"BLOCK_M": block_m(x.shape[0] * topk_ids.shape[1], E), **TILES}
    dev = str(x.device)
    failed: List[str] = []
    fresh = False  # a config failed in this call (warned once; later calls skip it silently)
    for c in tile_ladder(cfg):
        key = (dev, cfg_key(c))
        if key in TILE_FAILED:
            failed.append(f"{c}: {TILE_FAILED[key]}")
            continue
        try:
            y = _fused_moe(x, weights, topk_weights, topk_ids, activation, quant, act_and_mul,
                           s1, s2, swiglu_limit, swiglu_alpha, swiglu_beta, w13_order, c)
        except Exception as exc:  # noqa: BLE001 - only a compile failure tries the next tile
            if not compile_failure(exc):
                raise
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            why = f"{type(exc).__name__}: {first}"
            TILE_FAILED[key] = why
            failed.append(f"{c}: {why}")
            fresh = True
            continue
        if fresh:
            import warnings
            warnings.warn(f"emulation: the fused MoE tile config(s) {'; '.join(failed)} did not "
                          f"compile on {dev}; this shape runs with {c}", RuntimeWarning,
                          stacklevel=3)
        return y
    raise RuntimeError(f"no tile config of the fused MoE compiles on {dev} for this shape: "
                       + "; ".join(failed))


def _fused_moe(x, weights, topk_weights, topk_ids, activation, quant, act_and_mul, s1, s2,
               swiglu_limit, swiglu_alpha, swiglu_beta, w13_order, config):
    """One try of the fused kernels with tile config `config` (fused_moe's body)."""
    import torch

    ks = _kernels()
    if ks is None:
        raise RuntimeError("triton is not importable")
    T, H = x.shape
    k = topk_ids.shape[1]
    E = weights.w13.packed.shape[0]
    n = T * k
    cfg = {"BLOCK_M": block_m(n, E), **TILES}
    cfg.update(config)
    # the output: each token's top_k contributions added into its float32 row by FC2's atomic
    # adds ([T, H], ATOMIC), or per (token, slot) row then summed ([T k, H], 4 k times the
    # memory: config ATOMIC=0, a fixed summation order)
    atomic = bool(cfg.get("ATOMIC", 1)) and k > 1
    y = torch.zeros((T if atomic else n, H), dtype=torch.float32, device=x.device)
    if n == 0 or T == 0:
        return y if atomic else y.view(T, k, H).sum(1)
    order, be, bstart, bend, row_e = route_blocks(topk_ids, E, cfg["BLOCK_M"])
    blocks = (be, bstart, bend, row_e.clamp(max=E))
    opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
            "SPLIT": bool(cfg["SPLIT"]), "F32_DOT": triton_interpret()}
    a2, as2 = _run_fc1(ks["fc1"], x, weights, order, k, blocks, quant, act_and_mul, activation,
                       (s1, s2), (swiglu_limit, swiglu_alpha, swiglu_beta), w13_order, cfg, opts)
    w2 = weights.w2
    p2, b2 = w2.packed, w2.block_scale
    tw = topk_weights.reshape(-1).float().contiguous()
    I = w2.packed.shape[2] * 2
    bn2 = cfg["BLOCK_N2"]
    ks["fc2"][(-(-H // bn2), be.numel())](
        a2, a2.stride(0), be, bstart, bend, order.int(), tw, p2, b2,
        per_expert(w2.scale_2, E, x.device), as2, y, y.stride(0),
        H, I, p2.stride(0), p2.stride(1), b2.stride(0), b2.stride(1), k,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=bn2, BLOCK_K=cfg["BLOCK_K"], ATOMIC=atomic, **opts)
    return y if atomic else y.view(T, k, H).sum(1)


def _run_fc1(fc1, x, weights, order, k, blocks, quant, act_and_mul, activation, scales, swiglu,
             w13_order, cfg, opts):
    """FC1 of one try, launched: FC2's input and its per-expert scales ``(a2, as2)``."""
    import torch

    be, bstart, bend, row_e_c = blocks
    s1, s2 = scales
    swiglu_limit = swiglu[0]
    w13 = weights.w13
    E = w13.packed.shape[0]
    I = weights.w2.packed.shape[2] * 2
    n, H, dev = order.numel(), x.shape[1], x.device
    w4a4 = quant == "nvfp4"
    a1, arow, as1 = fc1_input(x, s1, w4a4, order, k, row_e_c, E)
    gated = bool(act_and_mul)
    gate_base, up_base, step = gate_up_columns(activation, gated, w13_order, I)
    limit, alpha, beta = swiglu_params(activation, *swiglu)
    # W4A4 with a given FC2 input scale: FC1 writes FC2's NVFP4 input itself (bf16, exact);
    # dynamic (s2 None): FC1's float32 output, then the per-expert amax and the quantizer
    quant_out = w4a4 and s2 is not None
    as2 = per_expert(s2, E, dev) if quant_out else None
    inter = torch.empty((n, I), dtype=torch.float32 if w4a4 and not quant_out else x.dtype,
                        device=dev)
    p13, b13 = w13.packed, w13.block_scale
    bn1 = cfg["BLOCK_N1"]
    fc1[(-(-I // bn1), be.numel())](
        a1, a1.stride(0), arow, be, bstart, bend, p13, b13, per_expert(w13.scale_2, E, dev), as1,
        as2 if quant_out else as1, inter, inter.stride(0),
        I, H, p13.stride(0), p13.stride(1), b13.stride(0), b13.stride(1),
        gate_base, up_base, step, float(limit), float(alpha), float(beta),
        ACT=_ACTS[activation], GATED=gated, OUT_BF16=not w4a4, QUANT_OUT=quant_out,
        HAS_LIMIT=swiglu_limit is not None and activation in ("silu", "gelu", "gelu_tanh"),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=bn1, BLOCK_K=cfg["BLOCK_K"], **opts)
    if quant_out:
        return inter, as2
    return fc2_input(inter, s2, w4a4, row_e_c, E, x.dtype)
