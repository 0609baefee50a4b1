"""The FP8 references (``backends.formats.fp8`` weights): the oracle of the FP8 linear and MoE
backends (torch ``_scaled_mm`` family, Triton block FP8, torch grouped FP8). Split from
``backends.reference``, which re-exports both functions; inputs are checked by
``backends.common.validate`` as every backend checks them.

Imports torch only inside functions.
"""
from __future__ import annotations

from typing import Optional

from ..formats.nvfp4 import _torch
from .activations import _write_out, activation_fn, check_activation


def reference_fp8_linear(x, weights, *, quant: Optional[str] = None, out=None,
                         compute_dtype=None):
    """FP8 linear reference: ``y = deq(q(x)) @ deq(W).T (+ bias)`` for ``x`` ``[..., K]``.

    ``weights``: ``backends.formats.fp8.Fp8LinearWeights``; ``quant`` (default the weights' scheme) must
    be theirs. The activation is quantized as every FP8 kernel of this package quantizes it
    (``backends.formats.fp8.quantize_activation``, in float32: per tensor with the static
    ``input_scale`` or dynamically, per token, or per 1x128 group), then both operands are
    dequantized and multiplied in ``compute_dtype`` (float32 by default; float64 for verify).
    Output in x's dtype, or written into ``out``.
    """
    torch = _torch()
    from ..formats.fp8 import dequantize_activation, is_fp8_linear_weights, quantize_activation
    if not is_fp8_linear_weights(weights):
        raise ValueError(f"expected Fp8LinearWeights, got {type(weights).__name__}")
    q = weights.quant if quant is None else quant
    if q != weights.quant:
        raise ValueError(f"quant {q!r} does not match the weights' scheme {weights.quant!r}")
    from ..common import validate
    K, N = weights.in_features, weights.out_features
    validate.float_input("x", x, last=K, device=weights.weight.device,
                         allowed=validate.FLOAT_INPUTS + ("float64",))
    if not x.numel():  # zero tokens: an empty output
        return validate.empty_output(tuple(x.shape[:-1]) + (N,), x, out)
    cd = compute_dtype or torch.float32
    x2 = x.reshape(-1, K)
    # the codes come from float32 arithmetic whatever compute_dtype is: the kernels' quantizer
    codes, scale = quantize_activation(x2.to(torch.float32), q, weights.input_scale)
    xd = dequantize_activation(codes, scale, q, cd)[:, :K]
    y = xd @ weights.dequantize(cd).T
    if weights.bias is not None:
        y = y + weights.bias.to(cd)
    return _write_out(y.reshape(tuple(x.shape[:-1]) + (N,)), out, x)


def reference_fp8_moe(x, weights, topk_weights, topk_ids, *, activation: str = "silu",
                      swiglu_limit: Optional[float] = None, out=None, compute_dtype=None,
                      fc1_output_dtype=None, parts=None):
    """FP8 fused MoE (``backends.formats.fp8.Fp8MoEWeights``): ``out[t] = sum_k w_tk * W2_e @
    q2(act(W13_e @ q1(x_t)))`` with both GEMM inputs quantized to FP8 as the grouped kernel
    quantizes them (``backends.formats.fp8.quantize_activation``, float32 arithmetic):

    - FC1's input ``q1``: fp8_tensor with ``a13_scale``; fp8_tensor_dynamic with one scale,
      amax(x) / 448; fp8_channel per token;
    - FC2's input ``q2``: fp8_tensor with expert e's ``a2_scale``; fp8_tensor_dynamic with one
      scale over every routed row of every expert; fp8_channel per routed row.

    Weights dequantized (codes times scales), GEMMs in ``compute_dtype`` (float32 default).
    ``fc1_output_dtype`` (e.g. torch.bfloat16): FC1's output rounded to it before the activation,
    as a kernel whose FC1 GEMM writes that dtype (the grouped GEMM writes bf16): FC2's input
    codes then match the kernel's, where an exact FC1 output can round to the neighbouring E4M3
    code (one step, 2^-3 relative). fp8_block: both inputs per 1x128 group, the weights'
    128x128 block scales. ``parts``: a dict that receives each expert's ``(tokens, output)``.
    """
    torch = _torch()
    from ..formats.fp8 import _scale_from_amax, dequantize_activation, quantize_activation
    quant = _check_moe_inputs(x, weights, topk_weights, topk_ids, activation)
    H = weights.hidden_size
    act_and_mul = weights.act_and_mul
    cd = compute_dtype or torch.float32
    xq, xs = quantize_activation(x.to(torch.float32), quant, weights.a13_scale)
    xd = dequantize_activation(xq, xs, quant, cd)[:, :H]
    ids = topk_ids.long()
    acts = {}
    for e in torch.unique(ids[ids >= 0]).tolist():
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        h = xd[tok] @ weights.expert("w13", e, cd).T
        if fc1_output_dtype is not None:
            h = h.to(fc1_output_dtype).to(cd)
        acts[e] = (tok, slot, activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit))
    s2 = None  # fp8_tensor_dynamic: one FC2 input scale over every routed row
    if quant == "fp8_tensor_dynamic" and acts:
        amax = max(float(a.abs().max()) for _, _, a in acts.values())
        s2 = _scale_from_amax(torch.tensor(amax))
    y = torch.zeros((x.shape[0], H), dtype=cd, device=x.device)
    for e, (tok, slot, a) in acts.items():
        af = a.to(torch.float32)
        aq, sa = _fc2_input(af, quant, weights, e, s2)
        ad = dequantize_activation(aq, sa.to(af.device), quant, cd)[:, :af.shape[1]]
        ye = (ad @ weights.expert("w2", e, cd).T) * topk_weights[tok, slot].to(cd).unsqueeze(-1)
        if parts is not None:
            parts[e] = (tok, ye)
        y.index_add_(0, tok, ye)
    return _write_out(y, out, x)


def _check_moe_inputs(x, weights, topk_weights, topk_ids, activation: str) -> str:
    """The FP8 MoE reference's checks (scheme, activation, x, routing); its scheme."""
    from ..common import validate
    from ..formats.fp8 import MOE_QUANTS
    quant = weights.quant
    if quant not in MOE_QUANTS + ("fp8_block",):
        raise ValueError(f"the FP8 MoE reference runs {', '.join(MOE_QUANTS)}, fp8_block, not "
                         f"{quant!r}")
    check_activation(activation, weights.act_and_mul)
    validate.float_input("x", x, last=weights.hidden_size, dim=2, device=weights.w13.device,
                         allowed=validate.FLOAT_INPUTS + ("float64",))
    validate.routing(topk_weights, topk_ids, x.shape[0], weights.num_experts, weights.w13.device)
    return quant


def _fc2_input(af, quant: str, weights, e: int, s2):
    """Expert e's FC2 input (float32 ``af``) quantized as the kernel quantizes it: ``(codes,
    scale)``; per token / 1x128 group, else with expert e's ``a2_scale`` (fp8_tensor) or the one
    dynamic scale ``s2``."""
    from ..formats.fp8 import _to_fp8, quantize_activation
    if quant in ("fp8_channel", "fp8_block"):
        return quantize_activation(af, quant)
    if quant == "fp8_tensor":
        a2 = weights.a2_scale
        s2 = (a2 if a2.dim() == 0 else a2[e]).to(_torch().float32)
    return _to_fp8(af, s2.to(af.device)), s2

