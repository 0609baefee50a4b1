"""Issue 24, item 5 and 6: inputs that must not pass (NaN and negative E4M3 block scales, NaN and
implausible global scales), and the emulation that carries a real model (no dequantized cache,
only the routed experts expanded per call, the same numbers as the reference)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from selector.backends import prepare as P  # noqa: E402
from selector.backends.formats import nvfp4 as nv  # noqa: E402
from selector.backends.reference import emulate_moe, reference_linear, reference_moe, route  # noqa: E402
from selector.backends.wrappers.emulation import EmulationLinear, EmulationMoE  # noqa: E402


def _moe(gated=True, E=4, H=64, I=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, (2 if gated else 1) * I, H, generator=g)
    w2 = torch.randn(E, H, I, generator=g)
    return nv.quantize_moe(w13, w2, 0.01, torch.full((E,), 0.02))


def _with_bs(t: nv.NVFP4Tensor, index, byte: int) -> nv.NVFP4Tensor:
    raw = t.block_scale.view(torch.uint8).clone()
    raw[index] = byte
    return nv.NVFP4Tensor(t.packed, raw.view(torch.float8_e4m3fn), t.scale_2)


PREPARES = {
    "emulation": P.prepare_emulation,
    "b12x": lambda w: P.prepare_b12x_moe(w),
    "cutlass": lambda w: P.prepare_swizzled_moe(w, backend="flashinfer_cutlass"),
    "trtllm": P.prepare_trtllm_moe,
    "marlin": P.prepare_marlin_moe,
}


@pytest.mark.parametrize("byte", [0x7F, 0xFF, 0xB8, 0x80], ids=["nan", "neg-nan", "neg", "neg-zero"])
@pytest.mark.parametrize("name", sorted(PREPARES))
def test_prepare_refuses_nan_and_negative_block_scales(name, byte):
    """Before: every prepare passed them (NaN or negated weights at run time)."""
    w = _moe()
    bad = nv.MoEWeights(_with_bs(w.w13, (2, 5, 1), byte), w.w2, w.a13_scale, w.a2_scale)
    with pytest.raises(ValueError) as e:
        PREPARES[name](bad)
    msg = str(e.value)
    assert "w13.block_scale" in msg and "[2, 5, 1]" in msg, msg
    assert ("NaN" in msg) == (byte in (0x7F, 0xFF))


def test_linear_prepare_refuses_a_nan_block_scale():
    lw = nv.quantize_linear(torch.randn(32, 64))
    bad = nv.LinearWeights(_with_bs(lw.weight, (3, 2), 0x7F))
    for f in (P.prepare_emulation, P.prepare_fp4_linear, P.prepare_marlin_linear):
        with pytest.raises(ValueError, match=r"weight.block_scale holds E4M3 NaN bytes .* \[3, 2\]"):
            f(bad)


@pytest.mark.parametrize("byte", [0x7F, 0xFF, 0x88])
def test_dequantize_refuses_nan_and_negative_block_scales(byte):
    q = nv.quantize(torch.randn(8, 32))
    raw = q.block_scale.view(torch.uint8).clone()
    raw[4, 1] = byte
    with pytest.raises(ValueError, match=r"block_scale .* position \[4, 1\]"):
        nv.dequantize(q.packed, raw.view(torch.float8_e4m3fn), q.scale_2)


@pytest.mark.parametrize("s2", [float("nan"), 1e-45, 0.0, -1.0, float("inf"), 1e36])
def test_dequantize_and_quantize_refuse_bad_global_scales(s2):
    """Before: a NaN scale_2 dequantized to NaN silently; 1e-45 saturated every block scale."""
    q = nv.quantize(torch.randn(8, 32))
    with pytest.raises(ValueError, match="scale_2"):
        nv.dequantize(q.packed, q.block_scale, torch.tensor(s2))
    with pytest.raises(ValueError, match="scale_2"):
        nv.quantize(torch.randn(8, 32), torch.tensor(s2))


def test_prepare_refuses_an_implausible_per_expert_scale_naming_the_expert():
    w = _moe()
    s2 = w.w2.scale_2.clone()
    s2[3] = 1e-45
    bad = nv.MoEWeights(w.w13, nv.NVFP4Tensor(w.w2.packed, w.w2.block_scale, s2), w.a13_scale,
                        w.a2_scale)
    with pytest.raises(ValueError, match=r"w2.scale_2 is implausible.*position \[3\]"):
        P.prepare_trtllm_moe(bad)
    a2 = w.a2_scale.clone()
    a2[1] = float("nan")
    with pytest.raises(ValueError, match=r"a2_scale must be finite.*position \[1\]"):
        P.prepare_emulation(nv.MoEWeights(w.w13, w.w2, w.a13_scale, a2))


def test_reference_refuses_them_too():
    w = _moe()
    bad = nv.MoEWeights(_with_bs(w.w13, (0, 0, 0), 0xFF), w.w2, w.a13_scale, w.a2_scale)
    tw, ti = route(torch.randn(4, 4), 2)
    with pytest.raises(ValueError, match="w13.block_scale"):
        reference_moe(torch.randn(4, 64), bad, tw, ti)


# ---------------------------------------------------------------------------------------------
# The emulation

@pytest.mark.parametrize("quant", ["nvfp4", "nvfp4_w4a16"])
@pytest.mark.parametrize("gated,act", [(True, "silu"), (True, "swigluoai"), (False, "relu2")])
def test_emulation_keeps_no_copy_and_matches_the_reference(quant, gated, act):
    """prepare caches nothing (before: float32 weights, 7.1x the checkpoint); apply expands only
    the routed experts, in bf16, and agrees with the float64 reference within verify's bound."""
    from selector.backends.children.verify_child import compare
    from selector.inspect import verify
    w = _moe(gated, E=8)
    if quant == "nvfp4_w4a16":
        w = nv.MoEWeights(w.w13, w.w2)
    emu = EmulationMoE(quant=quant, activation=act, act_and_mul=gated,
                       selector_overrides=["platform=cpu", "platform.packages.torch=2.13.0"])
    p = emu.prepare(w)
    assert p.dequantized is None and p.weights is w
    x = torch.randn(16, 64).bfloat16()
    tw, ti = route(torch.randn(16, 8), 2)
    y = emu.apply(x, p, tw, ti)
    ref = reference_moe(x.double(), w, tw, ti, activation=act, quant=quant,
                        compute_dtype=torch.float64)
    m = compare(y, ref)
    b = verify.BOUNDS["moe", quant]
    assert y.dtype == torch.bfloat16 and m["max_rel_err"] <= b.max_rel_err
    assert m["rms_rel_err"] <= b.rms_rel_err and m["rms_rel_err"] > 0


def test_emulation_expands_only_the_routed_experts(monkeypatch):
    """An expert no token is routed to is never dequantized."""
    import selector.backends.reference.emulate as R
    seen = []
    real = R.dequantize_unit

    def spy(packed, block_scale, dtype=None):
        seen.append(packed.data_ptr())
        return real(packed, block_scale, dtype)
    monkeypatch.setattr(R, "dequantize_unit", spy)
    w = _moe(E=8)
    ti = torch.tensor([[1, 5], [5, 1], [1, 5]], dtype=torch.int32)
    tw = torch.full((3, 2), 0.5)
    emulate_moe(torch.randn(3, 64).bfloat16(), w, tw, ti, quant="nvfp4_w4a16")
    experts = {w.w13.packed[e].data_ptr(): e for e in range(8)}
    assert sorted(experts[p] for p in seen if p in experts) == [1, 5]


def test_emulation_linear_matches_the_reference_with_bias():
    lw = nv.quantize_linear(torch.randn(48, 64), 0.01, torch.randn(48))
    emu = EmulationLinear(quant="nvfp4", selector_overrides=["platform=cpu",
                                                             "platform.packages.torch=2.13.0"])
    p = emu.prepare(lw)
    assert p.dequantized is None
    x = torch.randn(5, 64).bfloat16()
    y = emu.apply(x, p)
    ref = reference_linear(x.double(), lw, compute_dtype=torch.float64)
    assert float((y.double() - ref).abs().max() / ref.abs().max()) < 2.0 ** -5


def test_triton_dequantization_equals_the_torch_path():
    """The CUDA kernels (dequantization, fused activation quantization), run in Triton's
    interpreter on the CPU (a fresh process: the mode is read at import): the same bits as the
    torch path, subnormal, saturated and zero block scales included."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    code = """
import torch
from selector.backends.formats import nvfp4 as nv
from selector.backends.kernels import nvfp4_triton as T
assert T.available()
x = torch.randn(3, 16, 96)
x[0, 0, :16] = 0
x[1, 1, :16] *= 1e-7
q = nv.quantize(x, global_dims=1)
for dt in (torch.bfloat16, torch.float16, torch.float32):
    assert torch.equal(T.dequantize_unit_triton(q.packed, q.block_scale, dt),
                       nv.dequantize_unit(q.packed, q.block_scale, dt)), dt
# the fused activation quantizer: ties, saturated (448) and subnormal block scales, zero blocks
g = torch.Generator().manual_seed(0)
a = torch.randn(40, 256, generator=g) * torch.exp2(torch.randint(
    -12, 12, (40, 16, 1), generator=g).float()).repeat_interleave(16, -1).view(40, 256)
a[0, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2) * 0.01
a[1, :16] = 0
for s in (1e-3, 1e-5, 0.5, 3e-7):
    s = torch.tensor(s)
    q = nv.quantize(a, s)
    assert torch.equal(T.quantize_unit_triton(a, s, torch.float32)[0],
                       nv.dequantize_unit(q.packed, q.block_scale, torch.float32)), s
print("same")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0 and "same" in p.stdout, p.stderr[-2000:]


def test_quantize_is_bit_identical_to_encode_and_pack():
    """The fused encoder gives what encode_e2m1 + pack_e2m1 give (ties, saturation, -0)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 128, generator=g) * torch.exp2(torch.randint(-8, 8, (64, 8, 1),
                                                                     generator=g).float()
                                                      ).repeat_interleave(16, -1).view(64, 128)
    x[0, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2) * (
        torch.tensor([1, -1]).repeat_interleave(8))
    q = nv.quantize(x)
    s = (q.block_scale.float() * q.scale_2).repeat_interleave(16, -1)
    scaled = torch.where(s > 0, x / torch.where(s > 0, s, 1.0), 0.0)
    assert torch.equal(q.packed, nv.pack_e2m1(nv.encode_e2m1(scaled)))


def test_the_cases_mark_unverified_exactly_what_the_reference_does_not_implement():
    from selector.backends import reference
    from selector.inspect import verify_cases
    assert verify_cases._reference_activations(True) == reference.GATED_ACTIVATIONS
    assert verify_cases._reference_activations(False) == reference.NON_GATED_ACTIVATIONS
