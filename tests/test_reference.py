"""The reference linear layer and fused MoE (backends.reference) against float64 dense computations.

The oracle below is written independently of backends.reference: its activations are the
textbook formulas in float64, and the MoE is computed densely (every expert on every token,
weighted by a dense [T, E] gate matrix) instead of gathering the tokens routed to each expert.
"""
import math

import pytest

torch = pytest.importorskip("torch")

from selector.backends.formats import nvfp4 as nv  # noqa: E402
from selector.backends.reference import reference_linear, reference_moe, route  # noqa: E402
from selector.backends.wrappers.emulation import EmulationLinear, EmulationMoE  # noqa: E402

F64 = torch.float64


# ------------------------------------------------------------------------------------------------
# float64 oracle
# ------------------------------------------------------------------------------------------------

def _act64(h, activation, gated, limit=None):
    h = h.to(F64)
    sig = lambda z: 1.0 / (1.0 + torch.exp(-z))  # noqa: E731
    erf = torch.special.erf
    if not gated:
        if activation == "relu2":
            return torch.where(h > 0, h * h, torch.zeros_like(h))
        if activation == "silu":
            return h * sig(h)
        if activation == "gelu":
            return 0.5 * h * (1 + erf(h / math.sqrt(2)))
        if activation == "gelu_tanh":
            return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        raise AssertionError(activation)
    n = h.shape[-1] // 2
    g, u = (h[..., 0::2], h[..., 1::2]) if activation == "swigluoai" else (h[..., :n], h[..., n:])
    if activation in ("swigluoai", "swigluoai_uninterleave"):
        lim = 7.0 if limit is None else limit
        g = torch.minimum(g, torch.tensor(lim, dtype=F64))
        u = torch.clamp(u, -lim, lim)
        return g * sig(1.702 * g) * (u + 1.0)
    if activation == "swiglustep":
        lim = 7.0 if limit is None else limit
        return torch.clamp(g * sig(g), max=lim) * torch.clamp(u, -lim, lim)
    if limit is not None:
        g = torch.minimum(g, torch.tensor(limit, dtype=F64))
        u = torch.clamp(u, -limit, limit)
    if activation == "silu":
        return g * sig(g) * u
    if activation == "gelu":
        return 0.5 * g * (1 + erf(g / math.sqrt(2))) * u
    if activation == "gelu_tanh":
        return 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3))) * u
    raise AssertionError(activation)


def dense_moe64(x, w13, w2, topk_weights, topk_ids, activation, gated, fc1_in=None, fc2_in=None,
                limit=None):
    T, E = x.shape[0], w13.shape[0]
    gates = torch.zeros(T, E, dtype=F64)
    for t in range(T):
        for k in range(topk_ids.shape[1]):
            e = int(topk_ids[t, k])
            if e >= 0:
                gates[t, e] += float(topk_weights[t, k])
    xin = (fc1_in(x) if fc1_in else x).to(F64)
    out = torch.zeros(T, w2.shape[1], dtype=F64)
    for e in range(E):
        a = _act64(xin @ w13[e].to(F64).T, activation, gated, limit)
        if fc2_in is not None:
            a = fc2_in(a, e).to(F64)
        out += gates[:, e:e + 1] * (a @ w2[e].to(F64).T)
    return out


def rel_max(a, b):
    """max |a - b| / max |b|."""
    return float((a.to(F64) - b.to(F64)).abs().max() / b.to(F64).abs().max())


def rel_fro(a, b):
    return float((a.to(F64) - b.to(F64)).norm() / b.to(F64).norm())


# ------------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------------

E, H, I, T, TOPK = 4, 128, 64, 24, 2


def _moe_case(gated, seed=0, with_scales=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).bfloat16().float()
    w13 = torch.randn(E, (2 if gated else 1) * I, H, generator=g) / math.sqrt(H)
    w2 = torch.randn(E, H, I, generator=g) / math.sqrt(I)
    logits = torch.randn(T, E, generator=g)
    tw, ti = route(logits, TOPK)
    # static "calibrated" activation scales: amax / 2688 of the data, a2 from the float MoE's
    # intermediate (generously: the largest |h| of any expert, times 2)
    a13 = nv.activation_scale_from_amax(x) if with_scales else None
    h_amax = max(float((x @ w13[e].T).abs().max()) for e in range(E))
    a2 = torch.tensor(2 * h_amax * h_amax / (6 * 448)) if with_scales else None
    return x, w13, w2, nv.quantize_moe(w13, w2, a13, a2), tw, ti, logits


# ------------------------------------------------------------------------------------------------
# linear
# ------------------------------------------------------------------------------------------------

def _linear_case(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(33, 256, generator=g).bfloat16().float()
    w = torch.randn(96, 256, generator=g) * 0.02
    return x, w, nv.quantize_linear(w, input_scale=nv.activation_scale_from_amax(x))


def test_linear_w4a16_matches_float64():
    x, _, lw = _linear_case()
    y = reference_linear(x, lw, quant="nvfp4_w4a16")
    ref = x.to(F64) @ lw.weight.dequantize(F64).T
    assert rel_max(y, ref) < 1e-6


def test_linear_w4a4_matches_float64_with_the_same_activation_quantization():
    x, _, lw = _linear_case(1)
    y = reference_linear(x, lw, quant="nvfp4")
    xq = nv.quantize_dequantize(x, lw.input_scale, dtype=F64)
    ref = xq @ lw.weight.dequantize(F64).T
    assert rel_max(y, ref) < 1e-6


def test_linear_w4a4_quantizes_the_activation():
    x, w, lw = _linear_case(2)
    y44 = reference_linear(x, lw, quant="nvfp4")
    y416 = reference_linear(x, lw, quant="nvfp4_w4a16")
    exact = x.to(F64) @ w.to(F64).T
    e44, e416 = rel_fro(y44, exact), rel_fro(y416, exact)
    # weight-only NVFP4 ~9.5% relative; with the activation quantized as well ~13%
    assert 0.07 < e416 < 0.12 and 0.10 < e44 < 0.17 and e44 > e416 * 1.2, (e416, e44)


def test_linear_dynamic_activation_scale_equals_the_amax_scale():
    x, _, lw = _linear_case(3)
    dyn = reference_linear(x, lw, quant="nvfp4", input_scale=None)
    stat = reference_linear(x, lw, quant="nvfp4", input_scale=nv.activation_scale_from_amax(x))
    assert torch.equal(dyn, stat)


def test_linear_bias_out_buffer_and_bf16():
    x, _, lw = _linear_case(4)
    bias = torch.randn(96, generator=torch.Generator().manual_seed(5))
    lwb = nv.LinearWeights(lw.weight, lw.input_scale, bias)
    lin = EmulationLinear()
    p = lin.prepare(lwb)
    xb = x.bfloat16()
    y = lin.apply(xb, p)
    assert y.dtype == torch.bfloat16 and y.shape == (33, 96)
    out = torch.empty(33, 96, dtype=torch.bfloat16)
    ptr = out.data_ptr()
    y2 = lin.apply(xb, p, out=out)
    assert y2 is out and out.data_ptr() == ptr and torch.equal(y2, y)
    ref = nv.quantize_dequantize(xb, lw.input_scale, dtype=F64) @ lw.weight.dequantize(F64).T + bias.to(F64)
    assert rel_max(y, ref) < 1e-2          # bf16 output rounding
    with pytest.raises(ValueError):
        lin.apply(xb, p, out=torch.empty(33, 95, dtype=torch.bfloat16))


# ------------------------------------------------------------------------------------------------
# MoE
# ------------------------------------------------------------------------------------------------

CASES = [("silu", True), ("gelu", True), ("gelu_tanh", True), ("swigluoai", True),
         ("swigluoai_uninterleave", True), ("swiglustep", True),
         ("relu2", False), ("silu", False)]


@pytest.mark.parametrize("activation,gated", CASES)
def test_moe_w4a16_matches_float64_dense(activation, gated):
    x, _, _, W, tw, ti, _ = _moe_case(gated, seed=10)
    y = reference_moe(x, W, tw, ti, activation=activation, quant="nvfp4_w4a16")
    w13d, w2d = W.w13.dequantize(F64), W.w2.dequantize(F64)
    ref = dense_moe64(x, w13d, w2d, tw, ti, activation, gated)
    assert rel_max(y, ref) < 1e-5


@pytest.mark.parametrize("activation,gated", CASES)
def test_moe_w4a4_matches_float64_dense(activation, gated):
    x, _, _, W, tw, ti, _ = _moe_case(gated, seed=11)
    y = reference_moe(x, W, tw, ti, activation=activation, quant="nvfp4")
    w13d, w2d = W.w13.dequantize(F64), W.w2.dequantize(F64)

    def fc1_in(v):
        return nv.quantize_dequantize(v.float(), W.a13_scale, dtype=F64)

    def fc2_in(a, e):
        return nv.quantize_dequantize(a.float(), W.a2_scale, dtype=F64)

    ref = dense_moe64(x, w13d, w2d, tw, ti, activation, gated, fc1_in, fc2_in)
    # the oracle's float64 FC1 output is re-quantized after a float32 cast: an element within
    # ~1e-7 of an E2M1 rounding boundary may round the other way; none did at these seeds
    assert rel_max(y, ref) < 1e-5


def test_moe_per_expert_dynamic_fc2_scale_and_b12x_semantics():
    """fc2_input_scale=None: per-expert amax; =1.0: FlashInfer b12x's per-block dynamic quantization."""
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=12)
    w13d, w2d = W.w13.dequantize(F64), W.w2.dequantize(F64)
    y1 = reference_moe(x, W, tw, ti, activation="silu", fc2_input_scale=1.0)
    ref1 = dense_moe64(x, w13d, w2d, tw, ti, "silu", True,
                       lambda v: nv.quantize_dequantize(v.float(), W.a13_scale, dtype=F64),
                       lambda a, e: nv.quantize_dequantize(a.float(), 1.0, dtype=F64))
    assert rel_max(y1, ref1) < 1e-5
    y_static = reference_moe(x, W, tw, ti, activation="silu")
    y16 = reference_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16")
    assert not torch.equal(y1, y_static)
    assert rel_fro(y1, y16) < 0.2 and rel_fro(y_static, y16) < 0.2


def test_moe_close_to_the_unquantized_layer():
    x, w13, w2, W, tw, ti, _ = _moe_case(True, seed=13)
    exact = dense_moe64(x, w13, w2, tw, ti, "silu", True)
    e416 = rel_fro(reference_moe(x, W, tw, ti, quant="nvfp4_w4a16"), exact)
    e44 = rel_fro(reference_moe(x, W, tw, ti, quant="nvfp4"), exact)
    assert 0.05 < e416 < 0.2 and e416 < e44 < 0.35, (e416, e44)


def test_moe_swiglu_limit_clamps_gate_and_up():
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=14)
    w13d, w2d = W.w13.dequantize(F64), W.w2.dequantize(F64)
    y = reference_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16", swiglu_limit=0.5)
    ref = dense_moe64(x, w13d, w2d, tw, ti, "silu", True, limit=0.5)
    assert rel_max(y, ref) < 1e-5
    free = reference_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16")
    assert rel_fro(free, y) > 1e-2


def test_moe_unrouted_slots_contribute_nothing():
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=15)
    ti = ti.clone()
    ti[0, :] = -1
    ti[1, 1] = -1
    y = reference_moe(x, W, tw, ti, quant="nvfp4_w4a16")
    assert torch.count_nonzero(y[0]) == 0
    ref = dense_moe64(x, W.w13.dequantize(F64), W.w2.dequantize(F64), tw, ti, "silu", True)
    assert rel_max(y, ref) < 1e-5


def test_route_softmax_topk_renormalized():
    logits = torch.randn(16, 8, generator=torch.Generator().manual_seed(16))
    w, ids = route(logits, 3)
    p = torch.softmax(logits.to(F64), -1)
    top = p.topk(3, -1)
    assert torch.equal(ids.long(), top.indices)
    torch.testing.assert_close(w.to(F64), top.values / top.values.sum(-1, keepdim=True), rtol=1e-6, atol=0)
    w2, _ = route(logits, 3, renormalize=False)
    torch.testing.assert_close(w2.to(F64), top.values, rtol=1e-6, atol=0)


def test_emulation_moe_reuses_the_out_buffer_and_keeps_the_checkpoint():
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=17)
    before = [t.clone() for t in (W.w13.packed, W.w13.block_scale.view(torch.uint8), W.a2_scale)]
    moe = EmulationMoE(activation="silu")
    p = moe.prepare(W)
    xb = x.bfloat16()
    out = torch.full((T, H), float("nan"), dtype=torch.bfloat16)
    ptr = out.data_ptr()
    for _ in range(2):
        y = moe.apply(xb, p, tw, ti, out=out)
        assert y is out and y.data_ptr() == ptr
    assert not torch.isnan(out).any()
    assert torch.equal(out, moe.apply(xb, p, tw, ti))
    after = (W.w13.packed, W.w13.block_scale.view(torch.uint8), W.a2_scale)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_emulation_moe_makes_its_scale_overrides_on_the_device_once():
    """A constructor's ``fc2_input_scale=1.0`` becomes one float32 tensor per device, reused by
    every call (on CUDA a call then copies nothing from the host: a CUDA graph can capture it),
    and gives what passing that scale to ``emulate_moe`` gives."""
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=19)
    moe = EmulationMoE(activation="silu", fc2_input_scale=1.0)
    p = moe.prepare(W)
    xb = x.bfloat16()
    y = moe.apply(xb, p, tw, ti)
    made = moe._overrides_on(xb.device)["fc2_input_scale"]
    assert made.dtype == torch.float32 and made.device == xb.device and float(made) == 1.0
    assert torch.equal(moe.apply(xb, p, tw, ti), y)
    assert moe._overrides_on(xb.device)["fc2_input_scale"] is made
    from selector.backends.reference import emulate_moe
    assert torch.equal(y, emulate_moe(xb, W, tw, ti, activation="silu", fc2_input_scale=1.0))
    assert EmulationMoE(activation="silu")._overrides_on(xb.device) == {}


def test_moe_rejects_a_gated_relu2_and_bad_quant():
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=18)
    with pytest.raises(ValueError, match="relu2"):
        reference_moe(x, W, tw, ti, activation="relu2")
    with pytest.raises(ValueError, match="quant"):
        reference_moe(x, W, tw, ti, quant="int8")


# ------------------------------------------------------------------------------------------------
# bad and edge-case input: clear errors, empty in / empty out
# ------------------------------------------------------------------------------------------------

def test_empty_batches_give_empty_outputs():
    x, _, lw = _linear_case(6)
    for scale in (None, lw.input_scale):                  # dynamic and static activation scale
        y = reference_linear(x[:0], lw, input_scale=scale)
        assert y.shape == (0, 96) and y.dtype == x.dtype
    assert EmulationLinear().apply(x[:0], EmulationLinear().prepare(lw)).shape == (0, 96)
    xm, _, _, W, tw, ti, _ = _moe_case(True, seed=6)
    for s in (None, W.a13_scale):
        y = reference_moe(xm[:0], W, tw[:0], ti[:0], fc1_input_scale=s, fc2_input_scale=None)
        assert y.shape == (0, H)
    moe = EmulationMoE(activation="silu")
    assert moe.apply(xm[:0], moe.prepare(W), tw[:0], ti[:0]).shape == (0, H)


def test_linear_bad_input_is_refused_clearly():
    x, _, lw = _linear_case(7)
    lin = EmulationLinear()
    p = lin.prepare(lw)
    with pytest.raises(ValueError, match="dtype"):
        lin.apply(x.to(torch.int32), p)                   # used to truncate the output
    with pytest.raises(ValueError, match=r"expected \[\.\.\., 256\]"):
        lin.apply(torch.tensor(1.0), p)                   # 0-d: used to raise IndexError
    with pytest.raises(ValueError, match=r"expected \[\.\.\., 256\]"):
        lin.apply(x[:, :128], p)
    with pytest.raises(ValueError, match="out is"):       # no silent cast into another dtype
        lin.apply(x, p, out=torch.empty(33, 96, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="finite and > 0"):
        reference_linear(x, lw, input_scale=0.0)


def test_moe_bad_input_is_refused_clearly():
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=8)
    moe = EmulationMoE(activation="silu")
    p = moe.prepare(W)
    cases = [
        ((x.unsqueeze(0), p, tw, ti), "2-D"),                            # 3-D x
        ((x[:, :64], p, tw, ti), "hidden size"),                         # wrong K
        ((x.to(torch.int64), p, tw, ti), "dtype"),
        ((x, p, tw, torch.full_like(ti, E)), "experts"),                 # topk_ids >= E
        ((x, p, tw, ti.float()), "integer"),
        ((x, p, tw[:, :1], ti), "top_k"),
    ]
    for args, msg in cases:
        with pytest.raises(ValueError, match=msg):
            moe.apply(*args)
    with pytest.raises(ValueError, match="fc1_input_scale"):              # too-short per-expert scale
        reference_moe(x, W, tw, ti, fc1_input_scale=torch.full((E - 1,), 1e-3))
    with pytest.raises(ValueError, match="out is"):
        moe.apply(x, p, tw, ti, out=torch.empty(T, H, dtype=torch.float64))


def test_up_gate_order_reproduces_the_checkpoint_and_gate_up_does_not():
    """The convention flag: weights reordered to [up; gate] (FlashInfer / b12x) give the
    checkpoint's output with w13_order="up_gate", and a different one when read as [gate; up]."""
    from selector.backends.prepare import reorder_w13_to_w31
    x, _, _, W, tw, ti, _ = _moe_case(True, seed=9)
    w31 = nv.NVFP4Tensor(reorder_w13_to_w31(W.w13.packed), reorder_w13_to_w31(W.w13.block_scale),
                         W.w13.scale_2)
    R = nv.MoEWeights(w31, W.w2, W.a13_scale, W.a2_scale)
    ref = reference_moe(x, W, tw, ti)
    torch.testing.assert_close(reference_moe(x, R, tw, ti, w13_order="up_gate"), ref, rtol=1e-6, atol=1e-7)
    assert rel_max(reference_moe(x, R, tw, ti), ref) > 0.1
    with pytest.raises(ValueError, match="w13_order"):
        reference_moe(x, W, tw, ti, w13_order="interleaved")


@pytest.mark.parametrize("cls", [EmulationMoE, EmulationLinear])
@pytest.mark.parametrize("quant", ["mxfp4", "fp8_block"])
def test_a_scheme_the_reference_does_not_compute_is_refused_when_built(cls, quant):
    """A scheme added to the emulation's file (`implements:`) without reference code for it is
    refused when the object is built, naming what the class computes, not inside `apply`."""
    with pytest.raises(NotImplementedError, match=f"computes nvfp4, nvfp4_w4a16 layers, not {quant}: "
                                                  f".*{cls.__name__}.computes"):
        cls(quant=quant)
    assert cls(quant="nvfp4_w4a16").quant == "nvfp4_w4a16"
