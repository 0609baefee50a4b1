"""Reference NVFP4 linear layer and fused MoE (dequantize, then matmul): the ``emulation`` backend.

Runs on CPU and CUDA (torch only) and is the oracle every other backend is compared with. The
arithmetic is float32 (set ``compute_dtype`` for float64):

- W4A16 (``quant="nvfp4_w4a16"``): ``y = x @ dequantize(W).T``; activations stay as given.
- W4A4 (``quant="nvfp4"``): the activation is first quantized and dequantized to NVFP4 with the
  activation scale (ModelOpt ``input_scale``; None = dynamic, from the amax of the rows the GEMM
  sees), which is what a W4A4 kernel computes up to accumulation order. In the MoE both GEMM
  inputs are quantized: FC1's input with ``a13_scale`` and FC2's input (the activation output)
  with ``a2_scale``. A kernel that re-quantizes FC2's input dynamically per block with scale 1
  (FlashInfer b12x; vLLM #40082) is reproduced by passing ``fc2_input_scale=1.0``.

MoE conventions: ``w13`` rows are ``[gate; up]`` (vLLM's ``[w1; w3]``) and gated activations
compute ``act(gate) * up``; routing is softmax -> top-k -> optional renormalisation (vLLM
``fused_topk``); each token's output is ``sum_k weight_k * expert_k(x)``.

Activations (gated unless noted): silu, gelu (erf), gelu_tanh; the SwiGLU-OAI pair
``g * sigmoid(alpha * g) * (u + beta)``, g clamped above and u on both sides at ``swiglu_limit``
(defaults alpha 1.702, beta 1.0, limit 7.0: vLLM ``activation.py SwigluOAIAndMul``, FlashInfer
0.7.4 ``blackwell_sm12x/moe_activation.py``) in two layouts of FC1's output: ``swigluoai`` reads
gate/up *interleaved* (gate = even columns, up = odd: vLLM ``swigluoai_and_mul``, gpt-oss
checkpoints), ``swigluoai_uninterleave`` reads ``[gate; up]`` halves (FlashInfer b12x / TRT-LLM);
``swiglustep``: ``min(silu(g), limit) * clamp(u, -limit, limit)`` on ``[gate; up]`` halves, limit
7.0 by default, no alpha/beta (vLLM ``SwigluStepAndMul``; FlashInfer 0.7.4 ``SwiGLUStep``,
``ActivationType.SwigluStep``); non-gated relu2 (``relu(x)^2``), silu, gelu, gelu_tanh.
``swiglu_limit`` on silu clamps gate above and up on both sides (the DeepSeek-V4 SwiGLU clamp).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from .nvfp4 import (
    LinearWeights,
    MoEWeights,
    NVFP4Tensor,
    _torch,
    check_block_scale,
    check_float_tensor,
    check_scale,
    dequantize,
    dequantize_unit,
    quantize,
    quantize_dequantize,
)

GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai", "swigluoai_uninterleave",
                     "swiglustep")
# Gated activations that read gate/up interleaved (even/odd columns), not as [gate; up] halves.
INTERLEAVED_ACTIVATIONS = ("swigluoai",)
NON_GATED_ACTIVATIONS = ("relu2", "silu", "gelu", "gelu_tanh")
QUANTS = ("nvfp4", "nvfp4_w4a16")
W13_ORDERS = ("gate_up", "up_gate")
SWIGLUOAI_DEFAULTS = {"alpha": 1.702, "beta": 1.0, "limit": 7.0}
SWIGLUSTEP_DEFAULT_LIMIT = 7.0  # vLLM SwigluStepAndMul; FlashInfer fused_moe/api.py SwiGLUStep

_FROM_WEIGHTS = object()


def check_activation(activation: str, act_and_mul: bool) -> None:
    allowed = GATED_ACTIVATIONS if act_and_mul else NON_GATED_ACTIVATIONS
    if activation not in allowed:
        kind = "gated" if act_and_mul else "non-gated"
        raise ValueError(f"activation {activation!r} is not supported {kind} by the reference; "
                         f"{kind} activations: {', '.join(allowed)}")


def _check_quant(quant: str) -> None:
    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r}: accepted: {', '.join(QUANTS)}")


def activation_fn(h, activation: str, act_and_mul: bool, *, swiglu_limit: Optional[float] = None,
                  swiglu_alpha: Optional[float] = None, swiglu_beta: Optional[float] = None):
    """Apply the MoE activation to FC1's output ``h`` (``[T, 2I]`` gated, ``[T, I]`` non-gated)."""
    torch = _torch()
    F = torch.nn.functional
    check_activation(activation, act_and_mul)
    if not act_and_mul:
        if activation == "relu2":
            return torch.square(F.relu(h))
        if activation == "silu":
            return F.silu(h)
        return F.gelu(h, approximate="tanh" if activation == "gelu_tanh" else "none")
    if activation in INTERLEAVED_ACTIVATIONS:
        g, u = h[..., 0::2], h[..., 1::2]
    else:
        half = h.shape[-1] // 2
        g, u = h[..., :half], h[..., half:]
    if activation in ("swigluoai", "swigluoai_uninterleave"):
        limit = SWIGLUOAI_DEFAULTS["limit"] if swiglu_limit is None else swiglu_limit
        alpha = SWIGLUOAI_DEFAULTS["alpha"] if swiglu_alpha is None else swiglu_alpha
        beta = SWIGLUOAI_DEFAULTS["beta"] if swiglu_beta is None else swiglu_beta
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
        return g * torch.sigmoid(alpha * g) * (u + beta)
    if swiglu_alpha is not None or swiglu_beta is not None:
        raise ValueError(f"swiglu_alpha / swiglu_beta apply to swigluoai and swigluoai_uninterleave "
                         f"only, not {activation!r}")
    if activation == "swiglustep":
        limit = SWIGLUSTEP_DEFAULT_LIMIT if swiglu_limit is None else swiglu_limit
        return F.silu(g).clamp(max=limit) * u.clamp(min=-limit, max=limit)
    if swiglu_limit is not None:
        g = g.clamp(max=swiglu_limit)
        u = u.clamp(min=-swiglu_limit, max=swiglu_limit)
    if activation == "silu":
        return F.silu(g) * u
    return F.gelu(g, approximate="tanh" if activation == "gelu_tanh" else "none") * u


def route(router_logits, top_k: int, renormalize: bool = True) -> Tuple[object, object]:
    """Softmax top-k routing: ``(topk_weights float32 [T, k], topk_ids int32 [T, k])``."""
    torch = _torch()
    probs = torch.softmax(router_logits.to(torch.float32), dim=-1)
    w, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def _write_out(y, out, like):
    """``y`` in the dtype of ``like``, or copied into the caller's ``out``, which must have that
    dtype (or the compute dtype itself: a float64 reference keeps its precision), the shape and
    the device (checked as the FlashInfer paths check it: no silent cast)."""
    if out is None:
        return y.to(like.dtype)
    from ._base import output_buffer
    dtype = y.dtype if getattr(out, "dtype", None) == y.dtype else like.dtype
    buf = output_buffer(out, tuple(y.shape), dtype, y.device)
    buf.copy_(y)
    return buf


def _input_scales(weights: Any, fc1: Any, fc2: Any, E: int, device: Any) -> Tuple[Any, Any]:
    """The FC1/FC2 input scales of an MoE call (`_FROM_WEIGHTS`: the checkpoint's a13/a2),
    checked and on `device`."""
    if fc1 is _FROM_WEIGHTS:
        fc1 = weights.a13_scale
    if fc2 is _FROM_WEIGHTS:
        fc2 = weights.a2_scale
    s1 = _check_scale_arg(fc1, "fc1_input_scale", E)
    s2 = _check_scale_arg(fc2, "fc2_input_scale", E)
    return (None if s1 is None else s1.to(device), None if s2 is None else s2.to(device))


def _check_scale_arg(scale, name: str, num_experts: int = 0):
    """An activation scale override: None, or finite and positive, 0-d (or [E] for the MoE)."""
    torch = _torch()
    if scale is None:
        return None
    s = torch.as_tensor(scale, dtype=torch.float32)
    shapes = ((), (num_experts,)) if num_experts else ((),)
    if tuple(s.shape) not in shapes:
        raise ValueError(f"{name}: expected a scalar{f' or [{num_experts}]' if num_experts else ''}, "
                         f"got shape {list(s.shape)}")
    if s is scale:  # the caller's float32 tensor (a checkpoint's scale): checked once per version
        from .validate import once
        def checked() -> bool:
            check_scale(s, name)
            return True
        once(s, ("check_scale", name), checked)
    else:
        check_scale(s, name)
    return s


def _act_input(x, quant: str, scale, compute_dtype):
    """The GEMM input a kernel sees: NVFP4 quantize-dequantize for W4A4, as is for W4A16."""
    if quant == "nvfp4":
        return quantize_dequantize(x, scale, dtype=compute_dtype)
    return x.to(compute_dtype)


def reference_linear(x, weights: LinearWeights, *, quant: str = "nvfp4", input_scale=_FROM_WEIGHTS,
                     w_deq=None, out=None, compute_dtype=None):
    """``y = q(x) @ dequantize(W).T (+ bias)`` for ``x`` ``[..., K]``; output in x's dtype or ``out``.

    input_scale: the W4A4 activation scale; default the checkpoint's, None = dynamic per call.
    w_deq: the dequantized weight, when the caller has cached it (``EmulationLinear.prepare``).
    """
    torch = _torch()
    from .fp8 import FP8_QUANTS
    if quant in FP8_QUANTS:
        if input_scale is not _FROM_WEIGHTS or w_deq is not None:
            raise ValueError("an FP8 reference takes its scales from the weights "
                             "(input_scale / w_deq are NVFP4 arguments)")
        return reference_fp8_linear(x, weights, quant=quant, out=out,
                                    compute_dtype=compute_dtype)
    _check_quant(quant)
    check_float_tensor(x)
    K = weights.in_features
    if x.dim() == 0 or x.shape[-1] != K:
        raise ValueError(f"x has shape {list(x.shape)}; expected [..., {K}] (the layer's in_features)")
    cd = compute_dtype or torch.float32
    if input_scale is _FROM_WEIGHTS:
        input_scale = weights.input_scale
    input_scale = _check_scale_arg(input_scale, "input_scale")
    W = weights.weight.dequantize(cd) if w_deq is None else w_deq.to(cd)
    x2 = x.reshape(-1, K)
    y = _act_input(x2, quant, input_scale, cd) @ W.T
    if weights.bias is not None:
        y = y + weights.bias.to(cd)
    return _write_out(y.reshape(tuple(x.shape[:-1]) + (W.shape[0],)), out, x)


def dequantize_moe(weights: MoEWeights, dtype=None):
    """``(w13, w2)`` dequantized, ``[E, 2I|I, H]`` and ``[E, H, I]``."""
    return weights.w13.dequantize(dtype), weights.w2.dequantize(dtype)


def _check_weights(t: NVFP4Tensor, name: str) -> None:
    """The block and global scales of a tensor the reference dequantizes piece by piece."""
    check_block_scale(t.block_scale, f"{name}.block_scale")
    check_scale(_torch().as_tensor(t.scale_2), f"{name}.scale_2", plausible=True)


def _expert_weight(t: NVFP4Tensor, e: int, dtype):
    """Expert ``e`` of an ``[E, rows, K]`` NVFP4 tensor, dequantized (already checked)."""
    s2 = t.scale_2 if t.scale_2.dim() == 0 else t.scale_2[e]
    return dequantize(t.packed[e], t.block_scale[e], s2, dtype, check=False)


def _expert_scale(scale, e: int):
    if scale is None:
        return None
    return scale if scale.dim() == 0 else scale[e]


def _moe_inputs(x, weights: MoEWeights, topk_weights, topk_ids, activation: str, quant: str,
                w13_order: str) -> Tuple[int, int, int, bool]:
    """Validate a fused-MoE call; ``(E, H, T, act_and_mul)``."""
    _check_quant(quant)
    act_and_mul = weights.act_and_mul
    check_activation(activation, act_and_mul)
    if w13_order not in W13_ORDERS:
        raise ValueError(f"w13_order {w13_order!r}: accepted: {', '.join(W13_ORDERS)}")
    if w13_order == "up_gate" and act_and_mul and activation in INTERLEAVED_ACTIVATIONS:
        raise ValueError(f"w13_order 'up_gate' swaps [gate; up] halves; activation {activation!r} "
                         f"reads gate/up interleaved: pass its weights in checkpoint order")
    check_float_tensor(x)
    E, H = weights.num_experts, weights.hidden_size
    if x.dim() != 2 or x.shape[1] != H:
        raise ValueError(f"x has shape {list(x.shape)}; expected [num_tokens, {H}] (2-D, hidden size {H})")
    T = x.shape[0]
    from . import validate
    validate.routing(topk_weights, topk_ids, T, E, x.device)
    return E, H, T, act_and_mul


def reference_moe(x, weights: MoEWeights, topk_weights, topk_ids, *, activation: str = "silu",
                  quant: str = "nvfp4", fc1_input_scale=_FROM_WEIGHTS, fc2_input_scale=_FROM_WEIGHTS,
                  swiglu_limit: Optional[float] = None, swiglu_alpha: Optional[float] = None,
                  swiglu_beta: Optional[float] = None, deq=None, out=None, compute_dtype=None,
                  w13_order: str = "gate_up", parts=None, intermediate_dtype=None):
    """Fused MoE: ``out[t] = sum_k topk_weights[t,k] * W2_e @ act(W13_e @ q(x_t))``, e = topk_ids[t,k].

    x: ``[T, H]``; topk_weights / topk_ids: ``[T, k]`` (ids < 0 are unrouted slots, skipped).
    fc1/fc2_input_scale: W4A4 activation scales (0-d or per expert ``[E]``); default the
    checkpoint's ``a13_scale`` / ``a2_scale``; None = dynamic (amax of the rows routed to each
    expert). deq: cached ``dequantize_moe(weights)``. Output in x's dtype, or written into ``out``.
    w13_order: ``"gate_up"`` (checkpoint) or ``"up_gate"`` (the FlashInfer / b12x convention: the
    first half of FC1's output is up, the second gate), for weights already reordered.
    parts: a dict that receives each routed expert's contribution, ``{e: (token indices,
    weighted [n, H] output)}`` (verify's per-expert gains).
    intermediate_dtype: round FC1's output to it (a kernel's bf16 intermediate; exact when the
    global scales are powers of two, as verify's are), and W4A16's FC2 input (the GEMM's bf16
    input): the kernel-model reference verify judges its finer measures against too.
    """
    torch = _torch()
    E, H, T, act_and_mul = _moe_inputs(x, weights, topk_weights, topk_ids, activation, quant,
                                       w13_order)
    cd = compute_dtype or torch.float32
    s1, s2 = _input_scales(weights, fc1_input_scale, fc2_input_scale, E, x.device)
    if deq is None:
        _check_weights(weights.w13, "w13")
        _check_weights(weights.w2, "w2")
    y = torch.zeros((T, H), dtype=cd, device=x.device)
    # A scalar FC1 scale quantizes x once for all experts; a per-expert one inside the loop.
    shared_x = None
    if quant == "nvfp4" and s1 is not None and s1.dim() == 0:
        shared_x = quantize_dequantize(x, s1, dtype=cd)
    ids = topk_ids.long()
    for e in torch.unique(ids[ids >= 0]).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if shared_x is not None:
            xe = shared_x[tok]
        else:
            xe = _act_input(x[tok], quant, _expert_scale(s1, e), cd)
        if deq is not None:
            w13e, w2e = deq[0][e].to(cd), deq[1][e].to(cd)
        else:  # only the routed experts, one at a time: no copy of the layer
            w13e, w2e = _expert_weight(weights.w13, e, cd), _expert_weight(weights.w2, e, cd)
        h = xe @ w13e.T
        if intermediate_dtype is not None:
            h = h.to(intermediate_dtype).to(cd)
        if act_and_mul and w13_order == "up_gate":  # halves only (checked above)
            h = torch.cat([h[:, h.shape[1] // 2:], h[:, :h.shape[1] // 2]], dim=1)
        a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit,
                          swiglu_alpha=swiglu_alpha, swiglu_beta=swiglu_beta)
        if intermediate_dtype is not None and quant != "nvfp4":
            a = a.to(intermediate_dtype).to(cd)
        a = _act_input(a, quant, _expert_scale(s2, e), cd)
        ye = (a @ w2e.T) * topk_weights[tok, slot].to(cd).unsqueeze(-1)
        y.index_add_(0, tok, ye)
        if parts is not None:
            parts[e] = (tok, ye)
    return _write_out(y, out, x)


# ---------------------------------------------------------------------------------------------
# The emulation's fast path: what the ``emulation`` backend runs by default

#: float dtypes a GEMM of the fast path runs in as given (others run in float32)
_GEMM_DTYPES = ("bfloat16", "float16", "float32")


def exact_quantizer(x, scale):
    """The activation quantizer of the fast path: ``(codes * block scales, scale_2)`` of
    ``quantize(x, scale)`` (``scale`` None = dynamic, from the amax of ``x``); the first factor is
    exact in bfloat16. On CUDA with a given scale: one fused Triton kernel, same rounding."""
    if scale is not None and x.is_cuda and x.shape[-1] % 16 == 0:
        from . import nvfp4_triton
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
    kernels of ``backends.nvfp4_moe_triton`` instead, which read the routed experts' packed codes
    and block scales and expand them in registers (no weight is expanded in memory); the grouped
    path's values up to float32 accumulation order. ``fused=True`` runs them on any device Triton
    runs on (the CPU under ``TRITON_INTERPRET=1``: the tests) and raises if they fail; by default
    a tile config that does not compile is replaced by a smaller one (nvfp4_moe_triton.fused_moe),
    and a failure of every one, or of the call, warns once (RuntimeWarning, with the reason) and
    that **shape** (device, sizes, routing width, activation, scheme, tile rows: fused_shape)
    stays on the grouped path; other shapes keep the fused kernels.
    """
    torch = _torch()
    E, H, T, act_and_mul = _moe_inputs(x, weights, topk_weights, topk_ids, activation, quant,
                                       w13_order)
    cd = _gemm_dtype(x, dtype)
    s1, s2 = _input_scales(weights, fc1_input_scale, fc2_input_scale, E, x.device)
    auto = fused is None
    shape = fused_shape(x, weights, topk_ids, activation, quant, act_and_mul)
    if auto:
        fused = _fused_default(x, cd, quantizer) and shape not in _FUSED_FAILED
    if fused:
        from .nvfp4_moe_triton import fused_moe
        if quantizer is not exact_quantizer or cd != torch.bfloat16 or x.dtype != torch.bfloat16:
            raise ValueError("fused=True: the fused kernels take bf16 x and the default quantizer")
        try:
            y = fused_moe(x, weights, topk_weights, topk_ids, activation=activation, quant=quant,
                          act_and_mul=act_and_mul, s1=s1, s2=s2, swiglu_limit=swiglu_limit,
                          swiglu_alpha=swiglu_alpha, swiglu_beta=swiglu_beta,
                          w13_order=w13_order)
            return _write_out(y, out, x)
        except Exception as exc:  # noqa: BLE001 - the last resort must run: the grouped path
            if not auto:
                raise
            _FUSED_FAILED[shape] = f"{type(exc).__name__}: {exc}"
            import warnings
            warnings.warn(f"emulation: the fused Triton MoE failed on {x.device} for "
                          f"{describe_shape(shape)} ({type(exc).__name__}: {str(exc)[:300]}); "
                          "this shape uses the grouped path from now on, other shapes keep the "
                          "fused kernels (emulate_moe(..., fused=True) raises instead)",
                          RuntimeWarning, stacklevel=2)
    if grouped if grouped is not None else x.is_cuda:
        return _emulate_moe_grouped(x, weights, topk_weights, topk_ids, E, act_and_mul, cd, s1,
                                    s2, activation=activation, quant=quant,
                                    swiglu_limit=swiglu_limit, swiglu_alpha=swiglu_alpha,
                                    swiglu_beta=swiglu_beta, out=out, w13_order=w13_order,
                                    quantizer=quantizer)
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
    return _write_out(y, out, x)


#: shapes (fused_shape) on which the fused kernels failed once -> why (the default path then
#: stays grouped for that shape only)
_FUSED_FAILED: dict = {}


def fused_shape(x, weights, topk_ids, activation: str, quant: str, act_and_mul: bool) -> tuple:
    """What the fused kernels compile and run differently for: the device, H, the expert
    count, I, top_k, the activation, the scheme, gating, and the block rows (BLOCK_M, from the
    rows per expert: nvfp4_moe_triton.block_m) that the tile config follows."""
    from .nvfp4_moe_triton import block_m
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
    grouped emulation took 3.1-8.3x (docs/h200.md, "Round five")."""
    import os
    torch = _torch()
    if os.environ.get("SELECTOR_EMULATION_FUSED", "") == "0":
        return False
    return bool(x.is_cuda and x.dtype == torch.bfloat16 and cd == torch.bfloat16
                and quantizer is exact_quantizer and _fused_available(x.device))


def _fused_available(device) -> bool:
    """The fused kernels by default: Triton imports and the GPU has bf16 tensor cores (SM 8.0 or
    later: Triton's bf16 ``tl.dot``); a shape they failed on is left out by emulate_moe."""
    from . import nvfp4_moe_triton
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
            from .nvfp4 import E2M1_MAX, E4M3_MAX
            amax = v.float().abs().amax(dim=(1, 2))
            scale = torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))
        u, s = quantizer(v, scale)
        return u.to(cd), (s.reshape(c, 1, 1) if s.dim() else s)
    # another quantizer (verify's simulated kernels): expert by expert, as the loop calls it
    parts = [quantizer(v[i], scale[i] if per_expert else scale) for i in range(c)]
    return (torch.stack([u.to(cd) for u, _ in parts]),
            torch.stack([torch.as_tensor(s, dtype=torch.float32, device=v.device).reshape(())
                         for _, s in parts]).reshape(c, 1, 1))


def _emulate_moe_grouped(x, weights: MoEWeights, topk_weights, topk_ids, E: int,
                         act_and_mul: bool, cd, s1, s2, *, activation: str, quant: str,
                         swiglu_limit, swiglu_alpha, swiglu_beta, out, w13_order: str,
                         quantizer):
    """:func:`emulate_moe` with the routed experts in groups (batched GEMMs): the same steps and
    rounding, per group instead of per expert (a group's experts' tokens padded to its largest
    count by repeating a real row, whose router weight is set to 0)."""
    torch = _torch()
    from .nvfp4 import dequantize_unit
    T, H = x.shape
    dev = x.device
    y = torch.zeros((T, H), dtype=torch.float32, device=dev)
    k = topk_ids.shape[1]
    ids = topk_ids.reshape(-1).long()
    order = torch.argsort(torch.where(ids >= 0, ids, E), stable=True)
    counts = torch.bincount(ids[ids >= 0], minlength=E).tolist()
    tok_s = order // k
    wt_s = topk_weights.reshape(-1)[order].float()
    w13, w2 = weights.w13, weights.w2
    rows13 = w13.packed.shape[1]
    per_group = max(1, EXPERT_GROUP_BYTES // max(1, rows13 * H * torch.empty(
        (), dtype=cd).element_size()))
    starts, acc = [], 0
    for n in counts:
        starts.append(acc)
        acc += n
    routed = [e for e in range(E) if counts[e]]
    shared = None
    if quant == "nvfp4" and s1 is not None and s1.dim() == 0:
        shared = _unit_input(x, quant, s1, cd, quantizer)

    def per_e(s, es_t):
        return None if s is None else (s if s.dim() == 0 else s[es_t])

    for g0 in range(0, len(routed), per_group):
        es = routed[g0:g0 + per_group]
        ns = [counts[e] for e in es]
        m = max(ns)
        meta = torch.tensor([es, ns, [starts[e] for e in es]], dtype=torch.long).to(dev)
        es_t, ns_t, st_t = meta[0], meta[1], meta[2]
        ar = torch.arange(m, device=dev)
        pos = st_t.unsqueeze(1) + torch.minimum(ar.unsqueeze(0), ns_t.unsqueeze(1) - 1)  # [c, m]
        tok = tok_s[pos]
        wt = torch.where(ar.unsqueeze(0) < ns_t.unsqueeze(1), wt_s[pos], 0.0)
        if shared is not None:
            xu, xs = shared[0][tok], shared[1]
        else:
            xu, xs = _group_input(x[tok], quant, per_e(s1, es_t), cd, quantizer,
                                  s1 is not None and s1.dim() > 0)
        g13 = dequantize_unit(w13.packed[es_t], w13.block_scale[es_t], cd)
        h = torch.bmm(xu, g13.transpose(1, 2))  # FC1's output, rounded to cd
        del g13
        w13s = w13.scale_2 if w13.scale_2.dim() == 0 else w13.scale_2[es_t].view(-1, 1, 1)
        h = _scaled(h, w13s, xs)
        if act_and_mul and w13_order == "up_gate":
            h = torch.cat([h[..., h.shape[-1] // 2:], h[..., :h.shape[-1] // 2]], dim=-1)
        a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit,
                          swiglu_alpha=swiglu_alpha, swiglu_beta=swiglu_beta)
        del h
        au, as_ = _group_input(a, quant, per_e(s2, es_t), cd, quantizer,
                               s2 is not None and s2.dim() > 0)
        del a
        g2 = dequantize_unit(w2.packed[es_t], w2.block_scale[es_t], cd)
        w2s = w2.scale_2 if w2.scale_2.dim() == 0 else w2.scale_2[es_t].view(-1, 1, 1)
        ye = _scaled(torch.bmm(au, g2.transpose(1, 2)), w2s, as_)
        del g2, au
        y.index_add_(0, tok.reshape(-1), (ye * wt.unsqueeze(-1)).reshape(-1, H))
    return _write_out(y, out, x)


from .reference_fp8 import reference_fp8_linear, reference_fp8_moe  # noqa: E402  (re-exported)

__all__ = ["activation_fn", "reference_fp8_linear", "reference_fp8_moe", "emulate_linear",
           "emulate_moe", "exact_quantizer",
           "check_activation", "dequantize_moe", "route", "reference_linear",
           "reference_moe", "GATED_ACTIVATIONS", "INTERLEAVED_ACTIVATIONS", "NON_GATED_ACTIVATIONS",
           "NVFP4Tensor"]
