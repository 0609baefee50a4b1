"""The emulation's fast path, what the ``emulation`` backend runs by default: the NVFP4 linear
layer and fused MoE as a kernel computes them (codes times block scales expanded in x's dtype,
exact in bf16; global scales on the float32 GEMM outputs), against :mod:`.nvfp4`'s float32
references. On CUDA the MoE takes the fused Triton kernels (``backends.kernels.nvfp4_moe_triton``)
or runs its routed experts in groups as batched GEMMs. Imports torch only inside functions.
"""
from __future__ import annotations

import itertools
from typing import Any, Dict, Optional

from ..formats.nvfp4 import (
    LinearWeights,
    MoEWeights,
    _torch,
    check_float_tensor,
    dequantize_unit,
    quantize,
)
from .activations import _write_out, activation_fn
from .nvfp4 import _FROM_WEIGHTS, _check_quant, _expert_scale, _input_scales, _moe_inputs

# The emulation's fast path: what the ``emulation`` backend runs by default

#: float dtypes a GEMM of the fast path runs in as given (others run in float32)
_GEMM_DTYPES = ("bfloat16", "float16", "float32")


def exact_quantizer(x, scale):
    """The activation quantizer of the fast path: ``(codes * block scales, scale_2)`` of
    ``quantize(x, scale)`` (``scale`` None = dynamic, from the amax of ``x``); the first factor is
    exact in bfloat16. On CUDA with a given scale: one fused Triton kernel, same rounding."""
    if scale is not None and x.is_cuda and x.shape[-1] % 16 == 0:
        from ..kernels import nvfp4_triton
        if nvfp4_triton.available():
            return nvfp4_triton.quantize_unit_triton(x, scale, _torch().float32)
    q = quantize(x, scale, check=False)  # the emulation's own values: no wait for the device
    return dequantize_unit(q.packed, q.block_scale, _torch().float32), q.scale_2


def _gemm_dtype(x, dtype):
    torch = _torch()
    if dtype is not None:
        return dtype
    return x.dtype if str(x.dtype).replace("torch.", "") in _GEMM_DTYPES else torch.float32


def _unit_input(x, quant: str, scale, cd, quantizer):
    """A GEMM input as ``(values in cd, multiplier or None)``: W4A4 the NVFP4 codes times block
    scales (exact in bf16) and the activation's global scale; W4A16 x itself."""
    if quant != "nvfp4":
        return x.to(cd), None
    u, s = quantizer(x, scale)
    return u.to(cd), s


def _scaled(y, *scales):
    """float32 ``y`` times every scale that is not None."""
    y = y.float()
    for s in scales:
        if s is not None:
            y = y * s
    return y


def emulate_linear(x, weights: LinearWeights, *, quant: str = "nvfp4", out=None, dtype=None,
                   quantizer=exact_quantizer):
    """The NVFP4 linear layer as a kernel computes it: the weight's codes times block scales
    (exact in bf16) multiplied in x's dtype (bf16/fp16/fp32) with the global scales applied to
    the GEMM output; W4A4 quantizes the activation with the checkpoint's ``input_scale``.
    Dequantizes on every call: memory is the checkpoint plus one bf16 copy of this weight while
    it runs. Weights are taken as ``prepare`` validated them."""
    _check_quant(quant)
    check_float_tensor(x)
    K = weights.in_features
    if x.dim() == 0 or x.shape[-1] != K:
        raise ValueError(f"x has shape {list(x.shape)}; expected [..., {K}] (the layer's in_features)")
    cd = _gemm_dtype(x, dtype)
    w = weights.weight
    x2 = x.reshape(-1, K)
    xu, xs = _unit_input(x2, quant, weights.input_scale, cd, quantizer)
    y = _scaled(xu @ dequantize_unit(w.packed, w.block_scale, cd).T, w.scale_2, xs)
    if weights.bias is not None:
        y = y + weights.bias.float()
    return _write_out(y.reshape(tuple(x.shape[:-1]) + (y.shape[-1],)), out, x)


def emulate_moe(x, weights: MoEWeights, topk_weights, topk_ids, *, activation: str = "silu",
                quant: str = "nvfp4", fc1_input_scale=_FROM_WEIGHTS,
                fc2_input_scale=_FROM_WEIGHTS, swiglu_limit: Optional[float] = None,
                swiglu_alpha: Optional[float] = None, swiglu_beta: Optional[float] = None,
                out=None, dtype=None, w13_order: str = "gate_up", quantizer=exact_quantizer,
                grouped: Optional[bool] = None, fused: Optional[bool] = None):
    """The fused MoE as a kernel computes it, for the ``emulation`` backend (same semantics and
    arguments as :func:`reference_moe`).

    Tokens are grouped by expert once; for each *routed* expert only, its weights are expanded to
    codes times block scales in x's dtype (exact in bf16), the GEMMs run in that dtype (FC1's
    output rounded to it, as a kernel's bf16 intermediate) and the global and activation scales
    multiply the float32 GEMM outputs. Memory (loop): the checkpoint plus one expert's weights in x's
    dtype and the activations; nothing is cached. ``quantizer(x, scale) -> (values, scale_2)``
    quantizes the W4A4 GEMM inputs (default :func:`exact_quantizer`).

    grouped (default: on CUDA): the routed experts run in groups of at most
    ``EXPERT_GROUP_BYTES`` of expanded FC1 weights, each group as batched GEMMs over its experts'
    tokens padded to the group's largest count (:func:`_emulate_moe_grouped`): a few launches per
    group instead of per expert. The same values as the per-expert loop (same rounding steps; the
    CPU gives the same bits, tests/test_emulation_grouped.py); memory: the checkpoint plus one
    group's weights in x's dtype.

    fused (default: on CUDA SM 8.0+ with Triton, bf16 x, the default quantizer): the two fused Triton
    kernels of ``backends.kernels.nvfp4_moe_triton`` instead, which read the routed experts' packed codes
    and block scales and expand them in registers (no weight is expanded in memory); the grouped
    path's values up to float32 accumulation order. ``fused=True`` runs them on any device Triton
    runs on (the CPU under ``TRITON_INTERPRET=1``: the tests) and raises if they fail; by default
    a tile config that does not compile is replaced by a smaller one (nvfp4_moe_triton.fused_moe),
    and a failure of every one, or of the call, warns once (RuntimeWarning, with the reason) and
    that **shape** (device, sizes, routing width, activation, scheme, tile rows: fused_shape)
    stays on the grouped path; other shapes keep the fused kernels.
    """
    E, H, T, act_and_mul = _moe_inputs(x, weights, topk_weights, topk_ids, activation, quant,
                                       w13_order)
    cd = _gemm_dtype(x, dtype)
    s1, s2 = _input_scales(weights, fc1_input_scale, fc2_input_scale, E, x.device)
    steps: Dict[str, Any] = dict(activation=activation, quant=quant, swiglu_limit=swiglu_limit,
                 swiglu_alpha=swiglu_alpha, swiglu_beta=swiglu_beta, w13_order=w13_order)
    shape = fused_shape(x, weights, topk_ids, activation, quant, act_and_mul)
    if fused if fused is not None else (_fused_default(x, cd, quantizer)
                                        and shape not in _FUSED_FAILED):
        y = _fused(x, weights, topk_weights, topk_ids, act_and_mul, cd, s1, s2, quantizer,
                   auto=fused is None, steps=steps, shape=shape)
        if y is not None:
            return _write_out(y, out, x)
    run = _emulate_moe_grouped if (grouped if grouped is not None else x.is_cuda) else _emulate_moe_loop
    y = run(x, weights, topk_weights, topk_ids, E, act_and_mul, cd, s1, s2, quantizer=quantizer, **steps)
    return _write_out(y, out, x)


def _fused(x, weights: MoEWeights, topk_weights, topk_ids, act_and_mul: bool, cd, s1, s2,
           quantizer, *, auto: bool, steps: dict, shape: tuple):
    """The fused kernels' float32 output; None where they failed on a call that did not ask for
    them (``auto``): that shape then stays on the grouped path, with one RuntimeWarning."""
    torch = _torch()
    from ..kernels.nvfp4_moe_triton import fused_moe
    if quantizer is not exact_quantizer or cd != torch.bfloat16 or x.dtype != torch.bfloat16:
        raise ValueError("fused=True: the fused kernels take bf16 x and the default quantizer")
    try:
        return fused_moe(x, weights, topk_weights, topk_ids, act_and_mul=act_and_mul, s1=s1, s2=s2,
                         **steps)
    except Exception as exc:  # noqa: BLE001 - the last resort must run: the grouped path
        if not auto:
            raise
        _FUSED_FAILED[shape] = f"{type(exc).__name__}: {exc}"
        import warnings
        warnings.warn(f"emulation: the fused Triton MoE failed on {x.device} for "
                      f"{describe_shape(shape)} ({type(exc).__name__}: {str(exc)[:300]}); "
                      "this shape uses the grouped path from now on, other shapes keep the "
                      "fused kernels (emulate_moe(..., fused=True) raises instead)",
                      RuntimeWarning, stacklevel=3)
        return None


def _emulate_moe_loop(x, weights: MoEWeights, topk_weights, topk_ids, E: int, act_and_mul: bool,
                      cd, s1, s2, *, activation: str, quant: str, swiglu_limit, swiglu_alpha,
                      swiglu_beta, w13_order: str, quantizer):
    """:func:`emulate_moe` expert by expert (routed experts only): the float32 ``[T, H]`` sum."""
    torch = _torch()
    T, H = x.shape
    y = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    k = topk_ids.shape[1]
    ids = topk_ids.reshape(-1).long()
    order = torch.argsort(torch.where(ids >= 0, ids, E), stable=True)
    counts = torch.bincount(ids[ids >= 0], minlength=E).tolist()
    shared = None
    if quant == "nvfp4" and s1 is not None and s1.dim() == 0:
        shared = _unit_input(x, quant, s1, cd, quantizer)
    w13, w2 = weights.w13, weights.w2
    start = 0
    for e, n in enumerate(counts):
        if not n:
            continue
        sel = order[start:start + n]
        start += n
        tok, slot = sel // k, sel % k
        if shared is not None:
            xu, xs = shared[0][tok], shared[1]
        else:
            xu, xs = _unit_input(x[tok], quant, _expert_scale(s1, e), cd, quantizer)
        g13 = dequantize_unit(w13.packed[e], w13.block_scale[e], cd)
        h = xu @ g13.T  # FC1's output, rounded to cd
        del g13
        h = _scaled(h, _expert_scale(w13.scale_2, e), xs)
        if act_and_mul and w13_order == "up_gate":
            h = torch.cat([h[:, h.shape[1] // 2:], h[:, :h.shape[1] // 2]], dim=1)
        a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit,
                          swiglu_alpha=swiglu_alpha, swiglu_beta=swiglu_beta)
        au, as_ = _unit_input(a, quant, _expert_scale(s2, e), cd, quantizer)
        ye = _scaled(au @ dequantize_unit(w2.packed[e], w2.block_scale[e], cd).T,
                     _expert_scale(w2.scale_2, e), as_)
        y.index_add_(0, tok, ye * topk_weights[tok, slot].float().unsqueeze(-1))
    return y


#: shapes (fused_shape) on which the fused kernels failed once -> why (the default path then
#: stays grouped for that shape only)
_FUSED_FAILED: dict = {}


def fused_shape(x, weights, topk_ids, activation: str, quant: str, act_and_mul: bool) -> tuple:
    """What the fused kernels compile and run differently for: the device, H, the expert
    count, I, top_k, the activation, the scheme, gating, and the block rows (BLOCK_M, from the
    rows per expert: nvfp4_moe_triton.block_m) that the tile config follows."""
    from ..kernels.nvfp4_moe_triton import block_m
    E = int(weights.w13.packed.shape[0])
    k = int(topk_ids.shape[1]) if topk_ids.dim() > 1 else 1
    return (str(x.device), int(x.shape[-1]), E, int(weights.w2.packed.shape[2]) * 2, k,
            activation, quant, bool(act_and_mul), block_m(int(x.shape[0]) * k, E))


def describe_shape(shape: tuple) -> str:
    dev, H, E, I, k, act, quant, gated, bm = shape
    return (f"H={H} E={E} I={I} top_k={k} {act}{'' if gated else ' (no mul)'} {quant} "
            f"BLOCK_M={bm}")


def fused_failures() -> dict:
    """The shapes that run grouped because the fused kernels failed there: {shape text: why}."""
    return {f"{s[0]} {describe_shape(s)}": why for s, why in _FUSED_FAILED.items()}


def _fused_default(x, cd, quantizer) -> bool:
    """Whether ``emulate_moe`` takes the fused kernels by default for this call: on CUDA (bf16,
    the default quantizer, SM 8.0+ with Triton) unless ``SELECTOR_EMULATION_FUSED=0``. On an H100
    they gave the grouped path's outputs on every activation, scheme and scale form
    (``benchmarks/emulation_bench.py``'s check cases: worst 1.35e-3 of max |y|, float32
    accumulation order) at 0.84-1.27x a grouped bf16 MoE's time (eager, 1-256 tokens) where the
    grouped emulation took 3.1-8.3x (docs/records/h200.md, "Round five")."""
    from selector.core.env_vars import emulation_fused
    torch = _torch()
    if not emulation_fused():
        return False
    return bool(x.is_cuda and x.dtype == torch.bfloat16 and cd == torch.bfloat16
                and quantizer is exact_quantizer and _fused_available(x.device))


def _fused_available(device) -> bool:
    """The fused kernels by default: Triton imports and the GPU has bf16 tensor cores (SM 8.0 or
    later: Triton's bf16 ``tl.dot``); a shape they failed on is left out by emulate_moe."""
    from ..kernels import nvfp4_moe_triton
    if not nvfp4_moe_triton.available():
        return False
    return tuple(_torch().cuda.get_device_capability(device)) >= (8, 0)


#: the expanded (codes times block scales, x's dtype) FC1 weights of one group of experts in
#: the grouped emulation: the memory it adds to the checkpoint's (FC2's are half as large at most)
EXPERT_GROUP_BYTES = 256 * 2 ** 20


def _group_input(v, quant: str, scale, cd, quantizer, per_expert: bool):
    """A grouped GEMM input ``[c, n, K]`` as ``(values in cd, multiplier [c, 1, 1] or 0-d or
    None)``: W4A4 quantized with the scale of each expert (``scale`` ``[c]``, 0-d, or None =
    dynamic per expert, from the amax of its rows: padding rows repeat a real row, so the amax is
    the expert's), W4A16 as is."""
    torch = _torch()
    if quant != "nvfp4":
        return v.to(cd), None
    c = v.shape[0]
    if quantizer is exact_quantizer:
        if scale is None:  # dynamic: quantize()'s own formula, per expert
            from ..formats.nvfp4 import E2M1_MAX, E4M3_MAX
            amax = v.float().abs().amax(dim=(1, 2))
            scale = torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))
        u, s = quantizer(v, scale)
        return u.to(cd), (s.reshape(c, 1, 1) if s.dim() else s)
    # another quantizer (verify's simulated kernels): expert by expert, as the loop calls it
    parts = [quantizer(v[i], scale[i] if per_expert else scale) for i in range(c)]
    return (torch.stack([u.to(cd) for u, _ in parts]),
            torch.stack([torch.as_tensor(s, dtype=torch.float32, device=v.device).reshape(())
                         for _, s in parts]).reshape(c, 1, 1))


def _per_expert(s, es_t):
    """A scale for the experts ``es_t`` of a group: 0-d as is, ``[E]`` indexed, None stays None."""
    return None if s is None else (s if s.dim() == 0 else s[es_t])


def _emulate_moe_grouped(x, weights: MoEWeights, topk_weights, topk_ids, E: int,
                         act_and_mul: bool, cd, s1, s2, *, activation: str, quant: str,
                         swiglu_limit, swiglu_alpha, swiglu_beta, w13_order: str, quantizer):
    """:func:`emulate_moe` with the routed experts in groups (batched GEMMs): the same steps and
    rounding, per group instead of per expert (a group's experts' tokens padded to its largest
    count by repeating a real row, whose router weight is set to 0). The float32 ``[T, H]`` sum."""
    torch = _torch()
    T, H = x.shape
    dev = x.device
    y = torch.zeros((T, H), dtype=torch.float32, device=dev)
    k = topk_ids.shape[1]
    ids = topk_ids.reshape(-1).long()
    order = torch.argsort(torch.where(ids >= 0, ids, E), stable=True)
    counts = torch.bincount(ids[ids >= 0], minlength=E).tolist()
    tok_s = order // k
    wt_s = topk_weights.reshape(-1)[order].float()
    rows13 = weights.w13.packed.shape[1]
    per_group = max(1, EXPERT_GROUP_BYTES // max(1, rows13 * H * torch.empty(
        (), dtype=cd).element_size()))
    starts = [0, *itertools.accumulate(counts)][:E]  # each expert's first row in `order`
    routed = [e for e in range(E) if counts[e]]
    shared = None
    if quant == "nvfp4" and s1 is not None and s1.dim() == 0:
        shared = _unit_input(x, quant, s1, cd, quantizer)
    steps = dict(activation=activation, swiglu_limit=swiglu_limit, swiglu_alpha=swiglu_alpha,
                 swiglu_beta=swiglu_beta)
    for g0 in range(0, len(routed), per_group):
        es = routed[g0:g0 + per_group]
        ns = [counts[e] for e in es]
        meta = torch.tensor([es, ns, [starts[e] for e in es]], dtype=torch.long).to(dev)
        es_t, ns_t, st_t = meta[0], meta[1], meta[2]
        ar = torch.arange(max(ns), device=dev)
        pos = st_t.unsqueeze(1) + torch.minimum(ar.unsqueeze(0), ns_t.unsqueeze(1) - 1)  # [c, m]
        tok = tok_s[pos]
        wt = torch.where(ar.unsqueeze(0) < ns_t.unsqueeze(1), wt_s[pos], 0.0)
        if shared is not None:
            xu, xs = shared[0][tok], shared[1]
        else:
            xu, xs = _group_input(x[tok], quant, _per_expert(s1, es_t), cd, quantizer,
                                  s1 is not None and s1.dim() > 0)
        ye = _group_ffn(xu, xs, weights, es_t, act_and_mul, cd, s2, quant=quant, w13_order=w13_order,
                        quantizer=quantizer, steps=steps)
        y.index_add_(0, tok.reshape(-1), (ye * wt.unsqueeze(-1)).reshape(-1, H))
    return y


def _group_ffn(xu, xs, weights: MoEWeights, es_t, act_and_mul: bool, cd, s2, *, quant: str,
               w13_order: str, quantizer, steps: dict):
    """One group's FC1 -> activation -> FC2 as batched GEMMs: ``[c, m, H]`` float32 from its
    inputs ``xu`` (in cd) times ``xs``."""
    torch = _torch()
    w13, w2 = weights.w13, weights.w2
    g13 = dequantize_unit(w13.packed[es_t], w13.block_scale[es_t], cd)
    h = torch.bmm(xu, g13.transpose(1, 2))  # FC1's output, rounded to cd
    del g13
    w13s = w13.scale_2 if w13.scale_2.dim() == 0 else w13.scale_2[es_t].view(-1, 1, 1)
    h = _scaled(h, w13s, xs)
    if act_and_mul and w13_order == "up_gate":
        h = torch.cat([h[..., h.shape[-1] // 2:], h[..., :h.shape[-1] // 2]], dim=-1)
    a = activation_fn(h, act_and_mul=act_and_mul, **steps)
    del h
    au, as_ = _group_input(a, quant, _per_expert(s2, es_t), cd, quantizer,
                           s2 is not None and s2.dim() > 0)
    del a
    g2 = dequantize_unit(w2.packed[es_t], w2.block_scale[es_t], cd)
    w2s = w2.scale_2 if w2.scale_2.dim() == 0 else w2.scale_2[es_t].view(-1, 1, 1)
    return _scaled(torch.bmm(au, g2.transpose(1, 2)), w2s, as_)


__all__ = ["EXPERT_GROUP_BYTES", "emulate_linear", "emulate_moe", "exact_quantizer"]
