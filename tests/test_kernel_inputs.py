"""Kernel inputs (issue 36): every FP8 backend's prepare/apply and the references check their
inputs in one place, backends/common/validate.py, and a careless input is a ValueError naming the
tensor, the value and what is accepted; zero tokens give an empty output.

One regression per example of the issue (each failed before the fix: a silent wrong answer, a
traceback from inside torch, or a device-side assert), then property tests (hypothesis) that
run every backend whose kernel runs here over random valid inputs (checked against the
reference) and random invalid ones (a ValueError, nothing else). On a machine with CUDA the same
properties run there too (the CUDA-only kernels included).
"""
from __future__ import annotations

import importlib.util

import pytest
from helpers import cpu_row_wise_scaled_mm

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from selector.backends.common import validate  # noqa: E402
from selector.backends.formats import fp8  # noqa: E402
from selector.backends.reference import reference_fp8_linear, reference_fp8_moe, route  # noqa: E402
from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE  # noqa: E402
from selector.backends.wrappers.torch_scaled_mm import (  # noqa: E402
    TorchBlockWiseLinear,
    TorchChannelWiseLinear,
    TorchPerTensorLinear,
    TorchRowWiseLinear,
)
from selector.backends.wrappers.triton_fp8 import TritonBlockFp8Linear, TritonScaledFp8Linear  # noqa: E402
from selector.inspect.verify import BOUNDS  # noqa: E402

H200 = ["platform=h200", "stack=vllm_0_32"]  # every FP8 backend passes its gate there
CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
SM90 = CUDA and torch.cuda.get_device_capability() == (9, 0)


def _linear(quant, n=48, k=160, bias=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return fp8.make_linear_weights(torch.randn(n, k, generator=g) / k ** 0.5, quant,
                                   input_scale=2.0 ** -6, bias=bias)


def _moe(quant, E=4, H=32, I=32, T=8, K=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = fp8.make_moe_weights(torch.randn(E, 2 * I, H, generator=g) / H ** 0.5,
                             torch.randn(E, H, I, generator=g) / I ** 0.5, quant,
                             a13_scale=2.0 ** -6, a2_scale=2.0 ** -8)
    x = torch.randn(T, H, generator=g).bfloat16()
    tw, ti = route(torch.randn(T, E, generator=g), K)
    return x, w, tw, ti


# -- regressions: one per example of the issue --------------------------------------------------

def test_triton_block_fp8_refuses_sizes_past_32_bit_indexing():
    """M=270,000, K=8,192: M*K > 2^31 gave non-finite rows past the overflow point."""
    w = _linear("fp8_block", n=256, k=8192)
    impl = TritonBlockFp8Linear(quant="fp8_block", selector_overrides=H200)
    p = impl.prepare(w)
    x = torch.zeros(1, 8192, dtype=torch.bfloat16).expand(270_000, 8192)  # no 4 GB copy
    with pytest.raises(ValueError, match=r"x \[M, K\] has 2211840000 elements, past the "
                                         r"kernel's 32-bit indexing \(at most 2147483647\)"):
        impl.apply(x, p)


def test_a_column_major_x_is_made_contiguous_for_the_kernels():
    """A column-major x reached triton_block_fp8 as a stride-(1, M) tensor: refused with a
    misleading 'do not fit'. linear_input now hands the kernels a contiguous [M, K]."""
    x = torch.randn(256, 37).bfloat16().t()  # [37, 256], column-major
    lead, x2 = fp8.linear_input(x, 256)
    assert x2.is_contiguous() and torch.equal(x2, x)
    a, sa = fp8.quantize_activation(x2, "fp8_block")
    assert a.stride(1) == 1 and tuple(sa.shape) == (37, 2)


@pytest.mark.parametrize("quant", fp8.MOE_QUANTS)
def test_routing_for_fewer_tokens_than_x_is_refused(quant):
    """reference_fp8_moe returned zeros for tokens 4-7; torch_grouped_fp8 a [4, H] output."""
    x, w, tw, ti = _moe(quant)
    with pytest.raises(ValueError, match=r"topk_ids has shape \[4, 2\]; expected \[8, top_k\]"):
        reference_fp8_moe(x, w, tw[:4], ti[:4])
    impl = TorchGroupedFp8MoE(quant=quant, selector_overrides=H200)
    p = impl.prepare(w)
    with pytest.raises(ValueError, match=r"topk_ids has shape \[4, 2\]"):
        impl.apply(x, p, tw[:4], ti[:4])


def test_float_topk_ids_are_refused_not_truncated():
    x, w, tw, ti = _moe("fp8_channel")
    for f in (lambda: reference_fp8_moe(x, w, tw, ti.float() + 0.7),
              lambda: TorchGroupedFp8MoE(quant="fp8_channel", selector_overrides=H200).apply(
                  x, TorchGroupedFp8MoE(quant="fp8_channel", selector_overrides=H200).prepare(w),
                  tw, ti.float())):
        with pytest.raises(ValueError, match="topk_ids is float32; accepted: an integer dtype"):
            f()


@pytest.mark.parametrize("quant", fp8.MOE_QUANTS)
def test_an_expert_id_past_the_layer_is_refused(quant):
    """topk_id >= E: an IndexError (CPU), 'matrix batch sizes have to match' (CUDA)."""
    x, w, tw, ti = _moe(quant)
    bad = ti.clone()
    bad[3, 1] = 4
    with pytest.raises(ValueError, match=r"topk_ids holds expert 4; accepted: 0\.\.3"):
        reference_fp8_moe(x, w, tw, bad)
    impl = TorchGroupedFp8MoE(quant=quant, selector_overrides=H200)
    with pytest.raises(ValueError, match="topk_ids holds expert 4"):
        impl.apply(x, impl.prepare(w), tw, bad)


@pytest.mark.parametrize("a2,needle", [
    ([0.1, 0.2], r"a2_scale: expected float32 \[\] \(a scalar\) or .*\[4\], got float32 \[2\]"),  # wrong shape
    ([0.1, 0.2, 0.3], r"a2_scale: expected float32"),  # short: a device-side assert on CUDA
    (-1.0, r"a2_scale: every scale must be finite and > 0; got -1.0"),
    (float("nan"), r"a2_scale: every scale must be finite and > 0; got nan"),
])
def test_moe_weights_check_their_activation_scales(a2, needle):
    g = torch.Generator().manual_seed(0)
    w13, w2 = torch.randn(4, 64, 32, generator=g), torch.randn(4, 32, 32, generator=g)
    with pytest.raises(ValueError, match=needle):
        fp8.make_moe_weights(w13, w2, "fp8_tensor", a13_scale=0.1, a2_scale=a2)
    good = fp8.make_moe_weights(w13, w2, "fp8_tensor", a13_scale=0.1, a2_scale=0.1)
    with pytest.raises(ValueError, match=needle):  # the dataclass itself checks them
        fp8.Fp8MoEWeights(good.w13, good.w13_scale, good.w2, good.w2_scale, "fp8_tensor",
                          good.a13_scale, torch.as_tensor(a2, dtype=torch.float32))


def test_moe_weight_scales_must_be_finite_and_positive():
    good = fp8.make_moe_weights(torch.randn(4, 64, 32), torch.randn(4, 32, 32), "fp8_channel")
    bad = good.w2_scale.clone()
    bad[1, 3] = float("inf")
    with pytest.raises(ValueError, match="w2_scale: every scale must be finite and > 0; got inf"):
        fp8.Fp8MoEWeights(good.w13, good.w13_scale, good.w2, bad, "fp8_channel")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,quant", [(TorchPerTensorLinear, "fp8_tensor_dynamic"),
                                       (TorchPerTensorLinear, "fp8_tensor"),
                                       (TorchRowWiseLinear, "fp8_channel"),
                                       (TorchChannelWiseLinear, "fp8_channel"),
                                       (TorchBlockWiseLinear, "fp8_block"),
                                       (TritonBlockFp8Linear, "fp8_block"),
                                       (TritonScaledFp8Linear, "fp8_tensor_dynamic"),
                                       (TritonScaledFp8Linear, "fp8_channel")])
def test_zero_tokens_give_an_empty_output(device, cls, quant):
    """fp8_tensor_dynamic: an amax RuntimeError; torch_row_wise on CPU a stride error;
    torch_block_wise on CUDA 'Invalid scaling configuration'."""
    impl = cls(quant=quant, selector_overrides=H200)
    p = impl.prepare(_linear(quant).to(device))
    for shape in ((0, 160), (2, 0, 160)):
        x = torch.zeros(shape, dtype=torch.bfloat16, device=device)
        y = impl.apply(x, p)
        assert tuple(y.shape) == shape[:-1] + (48,) and y.dtype == torch.bfloat16
    ref = reference_fp8_linear(torch.zeros(0, 160), _linear(quant))
    assert tuple(ref.shape) == (0, 48)


@pytest.mark.parametrize("quant", fp8.MOE_QUANTS)
def test_an_unrouted_batch_gives_zeros(quant):
    """Every slot unrouted (-1), or no tokens at all: zeros / an empty output, not an amax
    RuntimeError."""
    x, w, tw, ti = _moe(quant)
    impl = TorchGroupedFp8MoE(quant=quant, selector_overrides=H200)
    p = impl.prepare(w)
    none = torch.full_like(ti, -1)
    for f in (lambda a, b, c: reference_fp8_moe(a, w, b, c), lambda a, b, c: impl.apply(a, p, b, c)):
        y = f(x, tw, none)
        assert tuple(y.shape) == (8, 32) and not bool(y.any())
        assert tuple(f(x[:0], tw[:0], ti[:0]).shape) == (0, 32)


def test_make_linear_weights_checks_input_scale_and_bias():
    w = torch.randn(2, 32)
    with pytest.raises(ValueError, match=r"input_scale: expected float32 \[\] \(a scalar\), got "
                                         r"float32 \[2\]"):
        fp8.make_linear_weights(w, "fp8_tensor", input_scale=[0.1, 0.2])
    with pytest.raises(ValueError, match="input_scale: every scale must be finite and > 0"):
        fp8.make_linear_weights(w, "fp8_tensor", input_scale=0.0)
    lw = fp8.make_linear_weights(w, "fp8_tensor_dynamic", bias=[0.1, 0.2])  # a list: converted
    assert lw.bias.dtype == torch.float32 and lw.bias.tolist() == pytest.approx([0.1, 0.2])
    with pytest.raises(ValueError, match=r"bias: expected a float tensor \[2\]"):
        fp8.make_linear_weights(w, "fp8_tensor_dynamic", bias="ab")
    with pytest.raises(ValueError, match=r"bias: expected a float tensor \[2\]"):
        fp8.make_linear_weights(w, "fp8_tensor_dynamic", bias=[0.1, 0.2, 0.3])


def test_an_option_a_backend_does_not_take_is_named():
    """instantiate(compute_dtype=...) on a backend without one: a raw TypeError before."""
    with pytest.raises(ValueError, match=r"TorchRowWiseLinear takes no option 'compute_dtype'; "
                                         r"accepted: .*selector_overrides"):
        TorchRowWiseLinear(quant="fp8_channel", compute_dtype=torch.float64)
    import selector
    d = selector.load(["platform=cpu", "layer=dense_linear"]).default()
    assert d.instantiate(compute_dtype=torch.float64).compute_dtype == torch.float64  # emulation
    with pytest.raises(ValueError, match="takes no option 'fold_mode_typo'; accepted: "):
        d.instantiate(fold_mode_typo=1)


def test_validate_accepted_options_follow_kw_up_the_mro():
    from selector.backends.wrappers.emulation import EmulationMoE
    got = validate.accepted_options(EmulationMoE)
    assert {"compute_dtype", "fc1_input_scale", "quant", "decision", "layer"} <= set(got)


# -- properties --------------------------------------------------------------------------------

LINEAR = [(TorchPerTensorLinear, "fp8_tensor"), (TorchPerTensorLinear, "fp8_tensor_dynamic"),
          (TorchRowWiseLinear, "fp8_channel"), (TorchChannelWiseLinear, "fp8_channel")]
if SM90:  # CUDA-only kernels
    LINEAR += [(TorchBlockWiseLinear, "fp8_block"), (TritonBlockFp8Linear, "fp8_block")] + [
        (TritonScaledFp8Linear, q) for q in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel")]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(LINEAR), device=st.sampled_from(DEVICES), m=st.integers(0, 40),
       n=st.integers(1, 160), k=st.integers(1, 300), lead=st.sampled_from([(), (2,)]),
       bias=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_valid_linear_inputs_match_the_reference(case, device, m, n, k, lead, bias, seed):
    cls, quant = case
    if device == "cpu" and (cls in (TorchBlockWiseLinear, TritonBlockFp8Linear,
                                    TritonScaledFp8Linear) or (
            cls is TorchRowWiseLinear and not cpu_row_wise_scaled_mm())):
        return  # CUDA-only kernels; torch 2.11's CPU _scaled_mm has per-tensor scales only
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    w = _linear(quant, n, k, bias=b, seed=seed)
    x = torch.randn(lead + (m, k), generator=g).bfloat16()
    impl = cls(quant=quant, selector_overrides=H200)
    y = impl.apply(x.to(device), impl.prepare(w.to(device)))
    assert tuple(y.shape) == lead + (m, n) and y.dtype == x.dtype
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    if ref.numel() and float(ref.abs().max()) > 0:
        err = float((y.double().cpu() - ref).abs().max() / ref.abs().max())
        assert err <= BOUNDS["linear", quant].max_rel_err, (cls.__name__, err)


FLASHINFER = SM90 and importlib.util.find_spec("flashinfer") is not None


def _fi_linear_cases():
    from selector.backends.wrappers.flashinfer_fp8 import BlockScaleSm90Linear, BmmFp8CudnnLinear, BmmFp8Linear
    cases = [(BlockScaleSm90Linear, "fp8_block"), (BmmFp8Linear, "fp8_tensor"),
             (BmmFp8Linear, "fp8_tensor_dynamic")]
    if importlib.util.find_spec("cudnn") is not None:
        cases += [(BmmFp8CudnnLinear, "fp8_tensor"), (BmmFp8CudnnLinear, "fp8_tensor_dynamic")]
    return cases


@pytest.mark.skipif(not FLASHINFER, reason="FlashInfer's SM90 FP8 GEMMs need an SM 9.0 GPU and "
                    "flashinfer-python (docs/records/h200.md, 'FlashInfer on the H200')")
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), m=st.integers(0, 40), lead=st.sampled_from([(), (2,)]),
       bias=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_flashinfer_linear_inputs_match_the_reference(data, m, lead, bias, seed):
    """selector's direct FlashInfer backends (backends/wrappers/flashinfer_fp8.py) on the GPU: random valid
    inputs against the reference (block: K a multiple of 128 and N of 64, the kernel's sizes)."""
    cls, quant = data.draw(st.sampled_from(_fi_linear_cases()))
    if quant == "fp8_block":
        n, k = 64 * data.draw(st.integers(1, 4)), 128 * data.draw(st.integers(1, 3))
    else:
        n, k = data.draw(st.integers(1, 160)), data.draw(st.integers(1, 300))
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    w = _linear(quant, n, k, bias=b, seed=seed)
    x = torch.randn(lead + (m, k), generator=g).bfloat16()
    impl = cls(quant=quant, selector_overrides=["platform=auto"])
    y = impl.apply(x.cuda(), impl.prepare(w.to("cuda")))
    assert tuple(y.shape) == lead + (m, n) and y.dtype == x.dtype
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    if ref.numel() and float(ref.abs().max()) > 0:
        err = float((y.double().cpu() - ref).abs().max() / ref.abs().max())
        assert err <= BOUNDS["linear", quant].max_rel_err, (cls.__name__, n, k, err)


def _mutations():
    return st.sampled_from(["last_dim", "int_dtype", "scalar", "float64", "fp8_dtype",
                            "not_tensor"])


def _mutate(x, how):
    return {"last_dim": lambda: x[..., :-1], "int_dtype": lambda: x.to(torch.int32),
            "scalar": lambda: x.reshape(-1)[0], "float64": lambda: x.double(),
            "fp8_dtype": lambda: x.to(torch.float8_e4m3fn), "not_tensor": lambda: x.tolist()}[how]()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(LINEAR + [(TorchBlockWiseLinear, "fp8_block"),
                                      (TritonBlockFp8Linear, "fp8_block"),
                                      (TritonScaledFp8Linear, "fp8_channel"),
                                      (TritonScaledFp8Linear, "fp8_tensor")]),
       how=_mutations(), m=st.integers(1, 8))
def test_invalid_linear_inputs_are_a_value_error(case, how, m):
    cls, quant = case
    impl = cls(quant=quant, selector_overrides=H200)
    p = impl.prepare(_linear(quant))
    x = _mutate(torch.randn(m, 160).bfloat16(), how)
    with pytest.raises(ValueError, match="^x"):
        impl.apply(x, p)
    if how != "float64":  # the reference also takes float64
        with pytest.raises(ValueError, match="^x"):
            reference_fp8_linear(x, _linear(quant))


ROUTING = st.sampled_from(["short", "long", "float", "bool", "too_big", "weights_shape",
                           "weights_int", "one_d"])


def _bad_routing(tw, ti, how, E):
    return {"short": lambda: (tw[:-1], ti[:-1]), "long": lambda: (torch.cat([tw, tw]),
                                                                    torch.cat([ti, ti])),
            "float": lambda: (tw, ti.float()), "bool": lambda: (tw, ti > 0),
            "too_big": lambda: (tw, ti + E), "weights_shape": lambda: (torch.cat([tw, tw], 1), ti),
            "weights_int": lambda: (ti, ti), "one_d": lambda: (tw[:, 0], ti[:, 0])}[how]()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(quant=st.sampled_from(fp8.MOE_QUANTS), how=ROUTING, t=st.integers(1, 12),
       k=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_invalid_routing_is_a_value_error_naming_it(quant, how, t, k, seed):
    x, w, tw, ti = _moe(quant, T=t, K=k, seed=seed)
    tw, ti = _bad_routing(tw, ti, how, 4)
    impl = TorchGroupedFp8MoE(quant=quant, selector_overrides=H200)
    p = impl.prepare(w)
    for f in (lambda: reference_fp8_moe(x, w, tw, ti), lambda: impl.apply(x, p, tw, ti)):
        with pytest.raises(ValueError, match="^topk_(ids|weights)"):
            f()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(quant=st.sampled_from(fp8.MOE_QUANTS), t=st.integers(0, 12), k=st.integers(1, 3),
       unrouted=st.floats(0, 1), seed=st.integers(0, 2 ** 16))
def test_valid_moe_inputs_match_the_reference(quant, t, k, unrouted, seed):
    """The reference against a per-token sum (CPU), and the grouped kernel against the
    reference where it runs (SM 9.0)."""
    x, w, tw, ti = _moe(quant, T=t, K=k, seed=seed)
    g = torch.Generator().manual_seed(seed)
    ti = torch.where(torch.rand(ti.shape, generator=g) < unrouted, torch.full_like(ti, -1), ti)
    ref = reference_fp8_moe(x.double(), w, tw, ti, compute_dtype=torch.float64)
    assert tuple(ref.shape) == (t, 32) and bool(torch.isfinite(ref).all())
    rows = (ti >= 0).any(dim=1)
    assert not bool(ref[~rows].any())  # an unrouted token's output is zero
    if SM90 and t:
        impl = TorchGroupedFp8MoE(quant=quant, selector_overrides=["platform=auto"])
        y = impl.apply(x.cuda(), impl.prepare(w.to("cuda")), tw.cuda(), ti.cuda())
        refk = reference_fp8_moe(x.double(), w, tw, ti, compute_dtype=torch.float64,
                                 fc1_output_dtype=torch.bfloat16)
        if float(refk.abs().max()) > 0:
            err = float((y.double().cpu() - refk).abs().max() / refk.abs().max())
            assert err <= BOUNDS["moe", quant].max_rel_err, err


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(v=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.lists(st.floats(0.01, 1),
                                                                             max_size=3),
                   st.text(max_size=3), st.none()))
def test_scales_are_checked_once_at_prepare(v):
    """Any user-given activation scale: a checked float32 scalar or a ValueError naming it."""
    try:
        s = validate.to_scale("input_scale", v, "cpu")
    except ValueError as exc:
        assert str(exc).startswith("input_scale")
    else:
        assert s.shape == () and s.dtype == torch.float32 and float(s) > 0
