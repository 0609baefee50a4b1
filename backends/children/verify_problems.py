"""verify's problems (selector.inspect.verify; docs/verify.md "Problems") and its measures.

The builders make seeded NVFP4 and FP8 problems on the CPU (random weights quantized as a
checkpoint writer does, calibrated activation scales, balanced routing); the measures compare a
kernel's output with the float64 reference: relative errors, per-expert and per-column gains, the
block-scale tile fit and the activation fit. ``backends.children.verify_child`` runs them in the child.
Imports torch only inside functions.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

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


# ---------------------------------------------------------------------------------------------
# Comparison

def compare(y, ref) -> Dict[str, Any]:
    """Errors of ``y`` against ``ref``, relative to the reference's scale (both moved to float64).

    max_rel_err = max |y - ref| / max |ref|; rms_rel_err = ||y - ref|| / ||ref||; worst = the
    element with the largest |y - ref|. Non-finite outputs are counted, not compared.
    """
    import torch
    y = y.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if tuple(y.shape) != tuple(ref.shape):
        raise ValueError(f"output has shape {tuple(y.shape)}, expected {tuple(ref.shape)}")
    bad = ~torch.isfinite(y)
    if bool(bad.any()):
        first = [int(i) for i in torch.nonzero(bad)[0]]
        return {"max_rel_err": None, "rms_rel_err": None, "nonfinite": int(bad.sum()),
                "worst": {"index": first, "got": str(float(y[tuple(first)])),
                          "expected": float(ref[tuple(first)])}}
    err = (y - ref).abs()
    scale = float(ref.abs().max())
    norm = float(ref.norm())
    flat = int(torch.argmax(err))
    index: List[int] = []
    for n in reversed(err.shape):
        flat, i = divmod(flat, int(n))
        index.insert(0, i)
    return {"max_rel_err": float(err.max()) / scale if scale > 0 else math.inf,
            "rms_rel_err": float((y - ref).norm()) / norm if norm > 0 else math.inf,
            "nonfinite": 0,
            "worst": {"index": index, "got": float(y[tuple(index)]),
                      "expected": float(ref[tuple(index)])}}



# ---------------------------------------------------------------------------------------------
# Gains, tiles, activations

def _z(g, se):
    import torch
    return (g - 1) / torch.clamp(se, min=1e-300)


def moe_gains(y, ref_parts):
    """Per-expert gains and their z-scores: the least-squares ``g`` of
    ``y ~ sum_e g_e * ref_parts[e]`` (float64), and ``(g_e - 1) / standard error``, the error
    estimated from the fit's residual.

    ``ref_parts[e]`` is the reference's output with only expert ``e`` routed. A correct kernel's
    rounding differences do not correlate with any expert's output: every z-score is a few units
    at most. A wrong scale, activation or weight of one expert moves that expert's gain by many
    standard errors.
    """
    import torch
    P = torch.stack([p.reshape(-1) for p in ref_parts]).to(torch.float64)  # [E, n]
    yv = y.reshape(-1).to(torch.float64)
    G = P @ P.T
    b = P @ yv
    live = torch.nonzero(torch.diagonal(G) > 0).flatten()
    g = torch.ones(P.shape[0], dtype=torch.float64)
    se = torch.full((P.shape[0],), math.inf, dtype=torch.float64)
    if len(live):
        Gl = G[live][:, live]
        g[live] = torch.linalg.solve(Gl, b[live])
        resid = yv - g[live] @ P[live]
        dof = max(1, yv.numel() - len(live))
        sigma2 = float(resid @ resid) / dof + (1e-12 * float(yv.abs().max())) ** 2
        se[live] = torch.sqrt(sigma2 * torch.diagonal(torch.linalg.inv(Gl)))
    return g, _z(g, se)


def column_gains(y, ref, group: int = 32):
    """Gains per group of ``group`` output columns, ``<y_J, ref_J> / <ref_J, ref_J>``, and their
    z-scores (the standard error from each group's residual)."""
    import torch
    y, ref = y.to(torch.float64), ref.to(torch.float64)
    n = ref.shape[-1]
    gs, ses = [], []
    for c in range(0, n, group):
        r, v = ref[..., c:c + group].reshape(-1), y[..., c:c + group].reshape(-1)
        d = float(r @ r)
        if d <= 0:
            gs.append(1.0)
            ses.append(math.inf)
            continue
        gj = float(v @ r) / d
        e = v - gj * r
        sigma2 = float(e @ e) / max(1, r.numel() - 1) + (1e-12 * float(v.abs().max())) ** 2
        gs.append(gj)
        ses.append(math.sqrt(sigma2 / d))
    g = torch.tensor(gs, dtype=torch.float64)
    return g, _z(g, torch.tensor(ses, dtype=torch.float64))


def _gain_fields(gz) -> Dict[str, Any]:
    """gain_err: the largest |gain - 1|; gain_worst: [where, its gain]. (The z-scores are not
    used: a kernel's rounding errors of one token's intermediate are shared by all its outputs,
    so the fit's residual is not white and its standard errors are too small.)"""
    import torch
    g, _ = gz
    dev = (g - 1).abs()
    i = int(torch.argmax(dev))
    return {"gain_err": float(dev[i]), "gain_worst": [i, float(g[i])]}


def dense_parts(parts, E: int, shape):
    """``reference_moe(..., parts=...)``'s contributions as ``E`` dense ``[T, H]`` tensors."""
    import torch
    out = []
    for e in range(E):
        d = torch.zeros(shape, dtype=torch.float64)
        if e in parts:
            tok, ye = parts[e]
            d.index_add_(0, tok, ye.to(torch.float64))
        out.append(d)
    return out


#: a block-scale swizzle tile (``nvfp4.swizzle_128x4``): 128 rows by 4 blocks of 16 columns
TILE_ROWS, TILE_COLS = 128, 64


def _act_partials(h, activation: str, act_and_mul: bool, swiglu_limit):
    """``(a, partials)``: the activation of ``h`` (float64) and, for each element of ``h``, the
    derivative of the one output element it feeds (the activation is elementwise in (gate, up)
    pairs), by autograd."""
    import torch

    from ..reference import activation_fn
    h = h.detach().clone().requires_grad_(True)
    a = activation_fn(h, activation, act_and_mul, swiglu_limit=swiglu_limit)
    (d,) = torch.autograd.grad(a.sum(), h)
    return a.detach(), d


def _fold(v, activation: str, act_and_mul: bool):
    """``[n, 2I] -> [n, I]``: sum each (gate, up) pair's terms (interleaved for swigluoai)."""
    from ..reference import INTERLEAVED_ACTIVATIONS
    if not act_and_mul:
        return v
    if activation in INTERLEAVED_ACTIVATIONS:
        return v[..., 0::2] + v[..., 1::2]
    half = v.shape[-1] // 2
    return v[..., :half] + v[..., half:]


def tile_regressors(x, w, tw, ti, *, activation: str, quant: str, swiglu_limit=None,
                    fc2_input_scale=None, **_: Any):
    """The first-order change of the float64 reference's MoE output when the block scales of one
    swizzle tile (``TILE_ROWS`` rows by ``TILE_COLS`` columns) of one expert's w13 or w2 are
    multiplied by ``1 + delta``: per routed expert ``e``, ``(e, token indices, D [m, n, H],
    labels [m])``, one regressor per tile of its w13 and w2, on the rows of its tokens; a label is
    ``(e, "w13"|"w2", tile row, tile column, full)``, full False for a partial tile at the edge of
    an odd-sized weight.

    A tile whose scales are wrong (one code off, transposed, read from the neighbouring tile)
    moves the output along its regressor; a correct kernel's rounding does not. FC2's input
    quantization (W4A4) is taken as the identity for the derivative (it is flat almost
    everywhere, and on average the identity)."""
    import torch

    from ..formats.nvfp4 import quantize_dequantize
    from ..reference.nvfp4 import _expert_scale, _expert_weight
    f64 = torch.float64
    H = x.shape[1]
    E = w.num_experts
    xd = x.to(f64)
    if quant == "nvfp4":
        xd = quantize_dequantize(xd, w.a13_scale, dtype=f64)
    a2 = w.a2_scale if fc2_input_scale is None else torch.as_tensor(fc2_input_scale)
    act_and_mul = w.act_and_mul
    ids = ti.long()
    out = []
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if not len(tok):
            continue
        wt = tw[tok, slot].to(f64).unsqueeze(-1)
        w13 = _expert_weight(w.w13, e, f64)
        w2 = _expert_weight(w.w2, e, f64)
        xe = xd[tok]
        h = xe @ w13.T
        a, d = _act_partials(h, activation, act_and_mul, swiglu_limit)
        aq = a if quant != "nvfp4" else quantize_dequantize(a, _expert_scale(a2, e), dtype=f64)
        D, labels = [], []
        R13, K13 = w13.shape
        for r0 in range(0, R13, TILE_ROWS):
            for c0 in range(0, K13, TILE_COLS):
                dh = torch.zeros_like(h)
                dh[:, r0:r0 + TILE_ROWS] = xe[:, c0:c0 + TILE_COLS] @ w13[
                    r0:r0 + TILE_ROWS, c0:c0 + TILE_COLS].T
                D.append((_fold(d * dh, activation, act_and_mul) @ w2.T) * wt)
                labels.append((e, "w13", r0 // TILE_ROWS, c0 // TILE_COLS,
                               r0 + TILE_ROWS <= R13 and c0 + TILE_COLS <= K13))
        R2, K2 = w2.shape
        for r0 in range(0, R2, TILE_ROWS):
            for c0 in range(0, K2, TILE_COLS):
                dy = torch.zeros((len(tok), H), dtype=f64)
                dy[:, r0:r0 + TILE_ROWS] = (aq[:, c0:c0 + TILE_COLS] @ w2[
                    r0:r0 + TILE_ROWS, c0:c0 + TILE_COLS].T) * wt
                D.append(dy)
                labels.append((e, "w2", r0 // TILE_ROWS, c0 // TILE_COLS,
                               r0 + TILE_ROWS <= R2 and c0 + TILE_COLS <= K2))
        out.append((e, tok, torch.stack(D), labels))
    return out


#: a tile is judged when its regressor carries at least this share of its expert's output energy
#: (below that its fitted scale error is mostly noise, and a wrong scale there moves the output
#: less than a correct kernel's rounding)
TILE_MIN_SHARE = 2.0 ** -8
#: ridge (relative to each regressor's own energy) of the per-expert fit: some combinations of
#: tiles change nothing (a gated expert's up rows times 1 + t and the FC2 input columns they feed
#: times 1 / (1 + t); relu2's rows likewise), so the plain least squares is singular along them
#: and a correct kernel's rounding can fit large opposite errors there; the ridge keeps the
#: smallest solution, which spreads such a family's error over it
TILE_RIDGE = 2.0 ** -5


def tile_fit(y, ref, tiles, parts):
    """Per expert, the least-squares ``delta`` of ``(y - ref)[its tokens] ~ sum_k delta_k D_k``
    over its tiles at once: ``(tile_err, [label, delta])``, the largest ``|delta|`` over the full
    tiles that carry at least ``TILE_MIN_SHARE`` of their expert's output energy (a partial tile,
    16 to 32 rows or columns at the edge of an odd-sized weight, is fitted but not judged: its
    fitted error is as noisy as a wrong code's, 0.046 against 0.09 on the odd W4A16 problem)."""
    import torch
    r = y.to(torch.float64) - ref.to(torch.float64)
    worst, where = 0.0, None
    for e, tok, D, labels in tiles:
        M = D.reshape(D.shape[0], -1)
        G = M @ M.T
        b = M @ r[tok].reshape(-1)
        diag = torch.diagonal(G).clone()
        energy = float(parts[e].pow(2).sum())
        live = diag > 0
        judged = live & (diag >= TILE_MIN_SHARE * energy) & torch.tensor(
            [bool(lab[4]) for lab in labels])
        if not bool(judged.any()):
            continue
        idx = torch.nonzero(live).flatten()
        Gl = G[idx][:, idx] + torch.diag(diag[idx] * TILE_RIDGE)
        delta = torch.zeros(len(labels), dtype=torch.float64)
        delta[idx] = torch.linalg.solve(Gl, b[idx])
        delta = torch.where(judged, delta, torch.zeros_like(delta))
        k = int(delta.abs().argmax())
        if abs(float(delta[k])) > worst:
            worst, where = abs(float(delta[k])), [list(labels[k][:4]), float(delta[k])]
    return worst, where


def activation_alternatives(activation: str, act_and_mul: bool):
    from ..reference import GATED_ACTIVATIONS, NON_GATED_ACTIVATIONS
    acts = GATED_ACTIVATIONS if act_and_mul else NON_GATED_ACTIVATIONS
    return [a for a in acts if a != activation]


def activation_fit(y, ref, alternatives):
    """For each other activation, the least-squares ``beta`` of ``y - ref ~ beta (ref_alt -
    ref)``: about 0 for a correct kernel, about 1 for one that computes ``alt`` instead.
    ``(act_err, [alt, beta])``: the largest ``|beta|``."""
    import torch
    r = (y.to(torch.float64) - ref.to(torch.float64)).reshape(-1)
    worst, where = 0.0, None
    for alt, ra in alternatives.items():
        d = (ra.to(torch.float64) - ref.to(torch.float64)).reshape(-1)
        dd = float(d @ d)
        if dd <= 0:
            continue
        beta = float(r @ d) / dd
        if abs(beta) > worst:
            worst, where = abs(beta), [alt, beta]
    return worst, where


def global_gain(y, ref) -> float:
    """``<y, ref> / <ref, ref>``: the least-squares gain of the whole output."""
    import torch
    y, ref = y.to(torch.float64).reshape(-1), ref.to(torch.float64).reshape(-1)
    d = float(ref @ ref)
    return float(y @ ref) / d if d > 0 else 1.0

