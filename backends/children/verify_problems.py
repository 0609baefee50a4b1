"""verify's problems (selector.inspect.verify; docs/verify.md "Problems").

The builders make seeded NVFP4 and FP8 problems on the CPU (random weights quantized as a
checkpoint writer does, calibrated activation scales, balanced routing); ``verify_measures``
compares a kernel's output with the float64 reference. ``backends.children.verify_child`` runs
both in the child.
Imports torch only inside functions.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

# ---------------------------------------------------------------------------------------------
# Problems

def pow2_scale(amax):
    """The smallest power of two >= ModelOpt's scale amax / (6 * 448) (elementwise).

    A power-of-two global scale makes every exact rescaling a kernel's preparation may do (b12x
    folds the weight scale into the E4M3 block scales; kernels take 1 / input_scale) exact, so
    the comparison measures the kernel, not float rounding in the scales (which
    ``backends.prepare`` checks and reports on its own).
    """
    import torch

    from ..formats.nvfp4 import E2M1_MAX, E4M3_MAX
    amax = torch.as_tensor(amax, dtype=torch.float32)
    ratio = torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))
    return torch.exp2(torch.ceil(torch.log2(ratio)))


#: per-expert multipliers of the power-of-two global scales (weight ``scale_2``, FC2's ``a2``):
#: 2^-1 to 2^2, so a kernel that uses one expert's scale for another is off by 2x to 8x. 2^-1 also
#: makes the largest block scales saturate at 448.
SCALE_MULTIPLIERS = (0.5, 1.0, 2.0, 4.0)
#: the constant input channel (x[:, 0]) that carries each FC1 row's offset
OFFSET_CHANNEL = 4.0
#: FC2's activation scales are powers of two times the multipliers times this 24-bit factor: an
#: activation output that equals its input (gelu and silu beyond +6, relu2 of a few bits) has a
#: bf16 value's few significant bits and, over a power-of-two scale, is an E2M1 rounding midpoint
#: one time in a few hundred, where a reciprocal quantizer (FlashInfer's) and a dividing one round
#: to different codes, a whole FP4 step; over this factor no value is a midpoint. (FC1's scale
#: stays a power of two: a kernel's bf16 FC1 output times it is the reference's, rounded the same.)
A2_FACTOR = 1.0905077
#: FC1 row offsets (pre-activation means) of gate rows: the bulk in [-3, 1], where silu, gelu and
#: gelu_tanh differ most, and some rows at +-10, beyond every SwiGLU limit (7, and the 5 verify
#: sets), so that a clamp is exercised
GATE_OFFSETS = (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0)
OUTLIER_OFFSET = 10.0
OUTLIER_SHARE = 0.0625
#: every 4th expert's gate rows sit at TAIL_OFFSET (the activations' negative tail; not for relu2, for
#: which that expert would be dead)
TAIL_EVERY = 4
TAIL_OFFSET = -3.75
#: the tail experts' gate rows vary by this around TAIL_OFFSET (the others by about 1): in
#: [-4.25, -3.25] gelu and gelu_tanh differ by 20-90% (gelu(-3.75) = -3.3e-4, gelu_tanh -2.2e-4),
#: silu and gelu by 100x, so a kernel computing the wrong one moves that expert's gain by 0.3 and
#: more; a wider spread lets the least negative rows (about -3, where they differ by 10%) dominate
TAIL_SPREAD = 0.25


def _weights(g, lead, rows, k, offsets=None, spread=None):
    """float32 ``[*lead, rows, k]`` weights for a unit-variance input: each row's 16-blocks scaled by
    2^-3..2^3 (so block scales span many binades), about 3% zero blocks and 3% blocks 2^-12 down
    (E4M3 subnormal block scales), then the row renormalised to unit norm (the GEMM output has
    about unit variance); ``offsets`` ``[*lead, rows]`` go to column 0, the constant channel."""
    import torch
    w = torch.randn(*lead, rows, k // 16, 16, generator=g)
    mag = torch.exp2(torch.randint(-3, 4, (*lead, rows, k // 16, 1), generator=g).float())
    u = torch.rand(*lead, rows, k // 16, 1, generator=g)
    mag = torch.where(u < 0.03, 0.0, torch.where(u < 0.06, 2.0 ** -12, mag))
    w = (w * mag).reshape(*lead, rows, k)
    w[..., 0] = 0.0
    w = w / w.norm(dim=-1, keepdim=True).clamp(min=1e-30)
    if spread is not None:  # [*lead, rows]: each row's standard deviation
        w = w * spread.unsqueeze(-1)
    if offsets is not None:
        w[..., 0] = offsets / OFFSET_CHANNEL
    return w


def _multipliers(g, n):
    import torch
    m = torch.tensor(SCALE_MULTIPLIERS)
    return m[torch.randint(0, len(SCALE_MULTIPLIERS), (n,), generator=g)]


def _x(g, T, H):
    """bf16 activations ``[T, H]``: unit normal with an odd bf16 significand (8 significant bits),
    column 0 the constant offset channel.

    An E2M1 rounding midpoint (0.25, 0.75, ..., 5: at most 3 significant bits) times an E4M3 block
    scale (4) and a power-of-two global scale has at most 7 significant bits: no element is a
    midpoint, where a kernel that multiplies by a reciprocal (FlashInfer's quantizer) and one that
    divides legitimately round to different codes, a whole FP4 step (with a random bf16 input
    about 1 element in 100 is one)."""
    import torch
    x = torch.randn(T, H, generator=g).bfloat16()
    x = (x.view(torch.int16) | 1).view(torch.bfloat16)
    x[:, 0] = OFFSET_CHANNEL
    return x


def balanced_routing(g, T: int, E: int, K: int):
    """``(topk_weights float32 [T, K], topk_ids int32 [T, K])``: every expert gets T*K/E tokens
    (+-1), no token an expert twice (E % K == 0: consecutive slices of shuffled expert lists), and
    the weights are a softmax over random router logits, renormalised over the K chosen experts."""
    import torch
    if E % K:
        raise ValueError(f"balanced_routing needs E % K == 0, got E={E}, K={K}")
    perms = [torch.randperm(E, generator=g) for _ in range(-(-T * K // E))]
    ids = torch.cat(perms)[:T * K].reshape(T, K)
    probs = torch.softmax(2.0 * torch.randn(T, E, generator=g), dim=-1)
    w = probs.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True), ids.to(torch.int32)


def build_moe(shape: Dict[str, int], quant: str, act_and_mul: bool, activation: str, seed: int,
              swiglu_limit: Optional[float] = None):
    """(x bf16 [T, H], MoEWeights, topk_weights, topk_ids), on the CPU, from ``seed``.

    A problem a per-expert or activation bug shows in (docs/verify.md, "Problems"): FC1
    pre-activations of about unit variance around per-row offsets (gate rows in [-3, 1], some
    rows at +-10), block scales over many binades with zero, subnormal and saturated ones, weight
    ``scale_2`` and FC2 ``a2`` that differ per expert by 2^-1..2^2 (powers of two, as
    ``pow2_scale``), every 4th expert in the activations' negative tail, each expert's output of
    about unit RMS (w2 scaled), balanced routing (every expert >= 8 tokens for T*K/E >= 8) with
    renormalised top-k weights. FC1's activation scale is one scalar (vLLM reduces w13's input
    scales to one); FC2's is per expert, calibrated on every token's activation output.
    """
    import torch

    from ..formats.nvfp4 import MoEWeights, quantize, quantize_dequantize
    from ..reference import activation_fn
    T, H, I = shape["num_tokens"], shape["hidden_size"], shape["intermediate_size"]
    E, K = shape["num_experts"], shape["top_k"]
    g = torch.Generator().manual_seed(seed)
    x = _x(g, T, H)
    rows = (2 if act_and_mul else 1) * I
    gate = torch.tensor(GATE_OFFSETS)[torch.randint(0, len(GATE_OFFSETS), (E, I), generator=g)]
    out = torch.rand(E, I, generator=g) < OUTLIER_SHARE
    gate = torch.where(out, OUTLIER_OFFSET, gate)
    # every TAIL_EVERY-th expert works in the activations' negative tail only (gelu vs gelu_tanh,
    # silu vs gelu differ there by 10% and more); its w2 is scaled up like every expert's below
    tail = (torch.arange(E) % TAIL_EVERY == TAIL_EVERY - 1) & (activation != "relu2")
    gate = torch.where(tail.unsqueeze(1), TAIL_OFFSET, gate)
    spread = torch.where(tail.unsqueeze(1), TAIL_SPREAD, torch.ones(E, I))
    if act_and_mul:
        up_sign = torch.where(torch.rand(E, I, generator=g) < 0.5, -1.0, 1.0)
        up = torch.where(torch.rand(E, I, generator=g) < OUTLIER_SHARE, OUTLIER_OFFSET * up_sign, 0.0)
        offsets = torch.cat([gate, up], dim=1)
        spread = torch.cat([spread, torch.ones(E, I)], dim=1)
    else:
        offsets = gate
    w13 = _weights(g, (E,), rows, H, offsets, spread)
    w2 = _weights(g, (E,), H, I)
    topk_weights, topk_ids = balanced_routing(g, T, E, K)
    s13 = pow2_scale(w13.abs().amax(dim=(1, 2))) * _multipliers(g, E)
    q13 = quantize(w13, s13)
    # each expert's w2 scaled so that its output has about unit RMS: no expert (a tail one
    # included) is drowned by the others in the comparison
    h = torch.einsum("th,erh->etr", x.float(), q13.dequantize())
    act_rms = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit).pow(2).mean(
        dim=(1, 2)).sqrt().clamp(min=1e-6)
    w2 = w2 / (act_rms.view(E, 1, 1) * math.sqrt(I))
    s2 = pow2_scale(w2.abs().amax(dim=(1, 2))) * _multipliers(g, E)
    q2 = quantize(w2, s2)
    a13 = a2 = None
    if quant == "nvfp4":
        a13 = pow2_scale(x.float().abs().amax())
        h = torch.einsum("th,erh->etr", quantize_dequantize(x.float(), a13), q13.dequantize())
        a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit)
        a2 = pow2_scale(a.abs().amax(dim=(1, 2))) * _multipliers(g, E) * A2_FACTOR
    return x, MoEWeights(q13, q2, a13, a2), topk_weights, topk_ids


def build_linear(shape: Dict[str, int], quant: str, seed: int, bias: bool = False):
    """(x bf16 [T, K], LinearWeights) on the CPU, from ``seed``: weights as ``build_moe``'s (block
    scales over many binades, zero and subnormal blocks), ``scale_2`` a power of two times 2^-1..2^2,
    a bias of about the output's scale when ``bias``."""
    import torch

    from ..formats.nvfp4 import LinearWeights, quantize
    T, K, N = shape["num_tokens"], shape["hidden_size"], shape["out_features"]
    g = torch.Generator().manual_seed(seed)
    x = _x(g, T, K)
    w = _weights(g, (), N, K, torch.randn(N, generator=g))
    s2 = pow2_scale(w.abs().amax()) * _multipliers(g, 1)[0]
    scale = pow2_scale(x.float().abs().amax()) if quant == "nvfp4" else None
    b = torch.randn(N, generator=g).bfloat16() if bias else None
    return x, LinearWeights(quantize(w, s2), scale, b)


def build_fp8_linear(shape: Dict[str, int], quant: str, seed: int, bias: bool = False):
    """(x bf16 [T, K], Fp8LinearWeights) on the CPU, from ``seed``: ``_weights``' rows (16-blocks
    over many binades, zero and tiny blocks), each output row scaled by 2^-1..2^2 (a per-channel
    or per-block scale bug moves its columns' gains), quantized to ``quant`` as an FP8 quantizer
    writes a checkpoint; fp8_tensor's static input scale a power of two >= amax(x) / 448."""
    import torch

    from ..formats.fp8 import FP8_MAX, make_linear_weights
    T, K, N = shape["num_tokens"], shape["hidden_size"], shape["out_features"]
    g = torch.Generator().manual_seed(seed)
    x = _x(g, T, K)
    w = _weights(g, (), N, K, torch.randn(N, generator=g)) * _multipliers(g, N)[:, None]
    amax = x.float().abs().amax() / FP8_MAX
    scale = torch.exp2(torch.ceil(torch.log2(amax)))
    b = torch.randn(N, generator=g).bfloat16() if bias else None
    return x, make_linear_weights(w, quant, input_scale=scale, bias=b)


#: FP8 MoE: each 128x128 weight block (and each expert, through its multiplier) scaled by 2^k,
#: k in [-2, 2]: block scales differ by up to 16x inside one expert, so a block scale read from
#: the wrong block, a transposed scale layout or another expert's scale moves the output by 2x
#: and more where it applies
FP8_BLOCK_SPREAD = 2


def _fp8_block_gains(g, lead, rows, k):
    """``[*lead, rows, k]`` multipliers, 2^k per 128x128 block (k in +-FP8_BLOCK_SPREAD)."""
    import torch

    from ..formats.fp8 import BLOCK, cdiv
    kb = torch.randint(-FP8_BLOCK_SPREAD, FP8_BLOCK_SPREAD + 1,
                       (*lead, cdiv(rows, BLOCK), cdiv(k, BLOCK)), generator=g).float()
    full = torch.exp2(kb).repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
    return full[..., :rows, :k]


def build_fp8_moe(shape: Dict[str, int], quant: str, act_and_mul: bool, activation: str,
                  seed: int, swiglu_limit: Optional[float] = None):
    """(x bf16 [T, H], Fp8MoEWeights, topk_weights, topk_ids) on the CPU, from ``seed``: the
    NVFP4 problem's structure (``build_moe``: per-row offsets, outliers beyond the SwiGLU limits,
    tail experts, unit-RMS expert outputs, balanced routing), each expert and each 128x128 block
    of its weights scaled by 2^-2..2^2 (``FP8_BLOCK_SPREAD``), quantized to ``quant``
    (``backends.formats.fp8.make_moe_weights``, as an FP8 checkpoint writer does); fp8_tensor's static
    scales: FC1's one power of two >= amax(x) / 448, FC2's per expert, a power of two >= that
    expert's activation amax / 448 times 2^-1..2^2 (a kernel that takes expert 0's for all is off
    by 2x and more)."""
    import torch

    from ..formats.fp8 import FP8_MAX, make_moe_weights
    from ..reference import activation_fn
    T, H, I = shape["num_tokens"], shape["hidden_size"], shape["intermediate_size"]
    E, K = shape["num_experts"], shape["top_k"]
    g = torch.Generator().manual_seed(seed)
    x = _x(g, T, H)
    rows = (2 if act_and_mul else 1) * I
    gate = torch.tensor(GATE_OFFSETS)[torch.randint(0, len(GATE_OFFSETS), (E, I), generator=g)]
    gate = torch.where(torch.rand(E, I, generator=g) < OUTLIER_SHARE, OUTLIER_OFFSET, gate)
    # the tail experts are 0, 4, 8, ... here: expert 0's FC2 activations are 30-100x smaller
    # than the others', so a kernel that quantizes every expert's FC2 input with expert 0's
    # static scale saturates them (FP8 is floating point: a scale that is only too coarse
    # loses no precision until the subnormals, and no output comparison could see it)
    tail = (torch.arange(E) % TAIL_EVERY == 0) & (activation != "relu2")
    gate = torch.where(tail.unsqueeze(1), TAIL_OFFSET, gate)
    spread = torch.where(tail.unsqueeze(1), TAIL_SPREAD, torch.ones(E, I))
    if act_and_mul:
        up_sign = torch.where(torch.rand(E, I, generator=g) < 0.5, -1.0, 1.0)
        up = torch.where(torch.rand(E, I, generator=g) < OUTLIER_SHARE,
                         OUTLIER_OFFSET * up_sign, 0.0)
        offsets = torch.cat([gate, up], dim=1)
        spread = torch.cat([spread, torch.ones(E, I)], dim=1)
    else:
        offsets = gate
    w13 = _weights(g, (E,), rows, H, offsets, spread)
    # the block gains leave column 0 (the offset channel) alone: the pre-activations keep their
    # offsets; the rest of each row keeps about unit norm on average
    gb = _fp8_block_gains(g, (E,), rows, H)
    gb[..., 0] = 1.0
    w13 = w13 * gb
    h = torch.einsum("th,erh->etr", x.float(), w13)
    act_rms = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit).pow(2).mean(
        dim=(1, 2)).sqrt().clamp(min=1e-6)
    w2 = _weights(g, (E,), H, I) * _fp8_block_gains(g, (E,), H, I)
    w2 = w2 / (act_rms.view(E, 1, 1) * math.sqrt(I)) * _multipliers(g, E).view(E, 1, 1)
    topk_weights, topk_ids = balanced_routing(g, T, E, K)
    a13 = a2 = None
    if quant == "fp8_tensor":
        a13 = torch.exp2(torch.ceil(torch.log2(x.float().abs().amax() / FP8_MAX)))
        a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit)
        amax = a.abs().amax(dim=(1, 2)).clamp(min=1e-6) / FP8_MAX
        a2 = torch.exp2(torch.ceil(torch.log2(amax))) * _multipliers(g, E)
    w = make_moe_weights(w13, w2, quant, a13_scale=a13, a2_scale=a2)
    return x, w, topk_weights, topk_ids


def _moe_to(w, device):
    from ..formats.nvfp4 import MoEWeights
    if type(w).__name__ == "Fp8MoEWeights":
        return w.to(device)

    def mv(t):
        return None if t is None else t.to(device)
    return MoEWeights(w.w13.to(device), w.w2.to(device), mv(w.a13_scale), mv(w.a2_scale))


def _linear_to(w, device):
    from ..formats.fp8 import is_fp8_linear_weights
    from ..formats.nvfp4 import LinearWeights
    if is_fp8_linear_weights(w):
        return w.to(device)
    return LinearWeights(w.weight.to(device), None if w.input_scale is None else
                         w.input_scale.to(device), None if w.bias is None else w.bias.to(device))
