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

from ..formats.nvfp4 import (
    LinearWeights,
    MoEWeights,
    NVFP4Tensor,
    _torch,
    check_block_scale,
    check_float_tensor,
    check_scale,
    dequantize,
    quantize_dequantize,
)
from .activations import INTERLEAVED_ACTIVATIONS, _write_out, activation_fn, check_activation
from .fp8 import reference_fp8_linear

QUANTS = ("nvfp4", "nvfp4_w4a16")
W13_ORDERS = ("gate_up", "up_gate")

_FROM_WEIGHTS = object()


def _check_quant(quant: str) -> None:
    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r}: accepted: {', '.join(QUANTS)}")


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
        from ..common.validate import once
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
    from ..formats.fp8 import FP8_QUANTS
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
    from ..common import validate
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


__all__ = ["QUANTS", "W13_ORDERS", "dequantize_moe", "reference_linear", "reference_moe"]
