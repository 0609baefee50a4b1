"""FP8 linear and MoE backends (torch ``_scaled_mm`` family, Triton block FP8, torch grouped FP8):
formats, the FP8 reference, prepare/apply against the reference, the selector gate, and verify.

torch's CPU build runs ``_scaled_mm`` per-tensor and row-wise, so those paths run here on the
CPU (torch's own kernel, nothing stubbed); block-wise ``_scaled_mm`` and ``_scaled_grouped_mm``
exist on CUDA only: their tests run where torch sees a GPU and are skipped otherwise. The Triton
kernel also runs on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``, a child process).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import cpu_row_wise_scaled_mm

torch = pytest.importorskip("torch")

from selector.backends.formats import fp8  # noqa: E402
from selector.backends.reference import (  # noqa: E402
    reference_fp8_linear,
    reference_fp8_moe,
    reference_linear,
    route,
)
from selector.backends.wrappers._base import BackendUnavailable  # noqa: E402
from selector.backends.wrappers.torch_scaled_mm import (  # noqa: E402
    TorchBlockWiseLinear,
    TorchChannelWiseLinear,
    TorchPerTensorLinear,
    TorchRowWiseLinear,
)
from selector.inspect.verify import BOUNDS  # noqa: E402

H200 = ["platform=h200", "stack=vllm_0_32"]  # a platform on which every FP8 backend passes
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch sees none)")


def _layer(quant, n=144, k=272, t=37, seed=0, bias=True, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) / k ** 0.5
    w = w * torch.exp2(torch.randint(-1, 3, (n, 1), generator=g).float())
    x = torch.randn(t, k, generator=g).bfloat16()
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    s = torch.exp2(torch.ceil(torch.log2(x.float().abs().amax() / fp8.FP8_MAX)))
    weights = fp8.make_linear_weights(w, quant, input_scale=s, bias=b)
    return x.to(device), weights.to(device)


def _err(y, ref):
    y, ref = y.double().cpu(), ref.double().cpu()
    return (float((y - ref).abs().max() / ref.abs().max()),
            float((y - ref).norm() / ref.norm()))


# ---------------------------------------------------------------------------------------------
# formats and reference

@pytest.mark.parametrize("quant", fp8.FP8_QUANTS)
def test_weight_quantization_round_trip(quant):
    w = torch.randn(200, 300) * torch.exp2(torch.randint(-4, 4, (200, 1)).float())
    q, s = fp8.quantize_weight(w, quant)
    assert q.dtype == torch.float8_e4m3fn and tuple(s.shape) == fp8.weight_scale_shape(quant, 200,
                                                                                         300)
    deq = q.float() * fp8.expand_weight_scale(s, quant, 200, 300)
    # E4M3 has 3 mantissa bits: each element within half a step (2^-4 relative) of its value,
    # or below the scale's subnormal step
    step = fp8.expand_weight_scale(s, quant, 200, 300) * 2.0 ** -9
    assert bool(((deq - w).abs() <= w.abs() * 2.0 ** -4 + step).all())


def test_block_scales_follow_the_128x128_blocks():
    w = torch.ones(256, 256)
    w[:128, 128:] *= 8  # one block 8x larger: only its scale changes
    _, s = fp8.quantize_weight(w, "fp8_block")
    want = torch.tensor([[1.0, 8.0], [1.0, 1.0]]) / 448
    assert torch.equal(s, want)


@pytest.mark.parametrize("quant", fp8.FP8_QUANTS)
def test_activation_scales_per_scheme(quant):
    x = torch.randn(5, 300)
    x[2] *= 100
    q, s = fp8.quantize_activation(x, quant, input_scale=torch.tensor(0.5))
    want = {"fp8_tensor": (), "fp8_tensor_dynamic": (), "fp8_channel": (5, 1),
            "fp8_block": (5, 3)}[quant]
    assert tuple(s.shape) == want
    deq = fp8.dequantize_activation(q, s, quant)[:, :300]
    if quant != "fp8_tensor":  # the static scale 0.5 saturates
        assert float(((deq - x).abs() / x.abs().amax(dim=1, keepdim=True)).max()) < 2.0 ** -4


def test_scale_is_a_float32_multiply_by_the_reciprocal():
    """amax * fl32(1/448), not amax / 448: CUDA divides by a Python scalar as a multiplication by
    its reciprocal, so a division would give other scales (and E4M3 codes) on the GPU than on
    the CPU (docs/records/h200.md: a 1.6% output difference on verify's fp8_block problem)."""
    amax = torch.tensor([1.0, 3.0, 4.0, 5.5, 7.0, 100.0])
    s = fp8._scale_from_amax(amax)
    inv = torch.tensor(1 / 448, dtype=torch.float32)
    assert torch.equal(s, amax * inv)
    assert not torch.equal(s, amax / 448.0)  # the two differ in the last bit for some amax
    if CUDA:
        assert torch.equal(fp8._scale_from_amax(amax.cuda()).cpu(), s)
        from selector.backends.children import verify_child as C
        x, _ = C.build_fp8_linear({"num_tokens": 67, "hidden_size": 256, "out_features": 256},
                                  "fp8_block", 0)
        a, sa = fp8.quantize_activation(x, "fp8_block")
        ag, sg = fp8.quantize_activation(x.cuda(), "fp8_block")
        assert torch.equal(sa, sg.cpu())
        assert torch.equal(a.view(torch.uint8), ag.cpu().view(torch.uint8))


def test_weights_validate_with_clear_errors():
    q, s = fp8.quantize_weight(torch.randn(64, 128), "fp8_channel")
    with pytest.raises(ValueError, match=r"weight_scale: expected float32 \[64\] for fp8_channel"):
        fp8.Fp8LinearWeights(q, s[:10], "fp8_channel")
    with pytest.raises(ValueError, match="input_scale: fp8_tensor has a static"):
        fp8.Fp8LinearWeights(q, torch.tensor(1.0), "fp8_tensor")
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        fp8.Fp8LinearWeights(q.float(), s, "fp8_channel")
    with pytest.raises(ValueError, match="quant 'fp8' is not an FP8 scheme; accepted: fp8_tensor"):
        fp8.Fp8LinearWeights(q, s, "fp8")
    with pytest.raises(ValueError, match="finite and > 0"):
        fp8.Fp8LinearWeights(q, s * 0, "fp8_channel")


@pytest.mark.parametrize("quant", fp8.FP8_QUANTS)
def test_reference_is_dequantized_operands_in_float64(quant):
    x, w = _layer(quant)
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    codes, s = fp8.quantize_activation(x.float(), quant, w.input_scale)
    xd = fp8.dequantize_activation(codes, s, quant, torch.float64)[:, :w.in_features]
    want = xd @ w.dequantize(torch.float64).T + w.bias.double()
    assert torch.equal(ref, want)
    # reference_linear dispatches an FP8 scheme to the FP8 reference
    assert torch.equal(reference_linear(x.double(), w, quant=quant,
                                        compute_dtype=torch.float64), ref)
    with pytest.raises(ValueError, match="does not match the weights' scheme"):
        reference_fp8_linear(x, w, quant="fp8_block" if quant != "fp8_block" else "fp8_channel")


# ---------------------------------------------------------------------------------------------
# torch _scaled_mm backends (CPU: torch's CPU _scaled_mm; CUDA where there is one)

DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


def _runs(cls, device) -> None:
    if device == "cpu" and cls in (TorchRowWiseLinear,) and not cpu_row_wise_scaled_mm():
        pytest.skip(f"torch {torch.__version__}'s CPU _scaled_mm has no row-wise scales")


CPU_CASES = [(TorchPerTensorLinear, "fp8_tensor"), (TorchPerTensorLinear, "fp8_tensor_dynamic"),
             (TorchRowWiseLinear, "fp8_channel"), (TorchChannelWiseLinear, "fp8_channel")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,quant", CPU_CASES, ids=[f"{c.__name__}-{q}" for c, q in CPU_CASES])
@pytest.mark.parametrize("bias", [False, True])
def test_scaled_mm_backends_match_the_reference(device, cls, quant, bias):
    _runs(cls, device)
    x, w = _layer(quant, bias=bias, device=device)
    impl = cls(quant=quant, selector_overrides=H200)
    y = impl.apply(x, impl.prepare(w))
    assert y.shape == (37, 144) and y.dtype == torch.bfloat16 and y.device.type == device
    ref = reference_fp8_linear(x.double().cpu(), w.to("cpu"), compute_dtype=torch.float64)
    mx, rms = _err(y, ref)
    bound = BOUNDS["linear", quant]
    assert mx <= bound.max_rel_err and rms <= bound.rms_rel_err, (mx, rms)


def test_a_wrong_scale_is_far_outside_the_bound():
    """The bound is tight enough to see a per-channel scale error of 5% on one channel."""
    _runs(TorchRowWiseLinear, "cpu")
    x, w = _layer("fp8_channel", bias=False)
    s = w.weight_scale.clone()
    s[7] *= 1.05
    bad = fp8.Fp8LinearWeights(w.weight, s, "fp8_channel")
    impl = TorchRowWiseLinear(quant="fp8_channel", selector_overrides=H200)
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    from selector.backends.children.verify_child import measure
    got = measure(impl.apply(x, impl.prepare(bad)), ref, None)
    assert got["gain_err"] > BOUNDS["linear", "fp8_channel"].gain_err


def test_three_dimensional_input_and_out_buffer():
    x, w = _layer("fp8_tensor_dynamic")
    impl = TorchPerTensorLinear(quant="fp8_tensor_dynamic", selector_overrides=H200)
    p = impl.prepare(w)
    y = impl.apply(x.reshape(1, 37, 272), p)
    assert y.shape == (1, 37, 144)
    out = torch.empty(37, 144, dtype=torch.bfloat16)
    assert impl.apply(x, p, out=out) is out
    assert torch.equal(out, y.reshape(37, 144))
    with pytest.raises(ValueError, match=r"expected \[..., 272\]"):
        impl.apply(x[:, :100], p)


@pytest.mark.parametrize("device", DEVICES)
def test_row_wise_float16_output(device):
    """torch 2.11+ writes a float16 row-wise output (older torch: the backend file's dtype rule)."""
    _runs(TorchRowWiseLinear, device)
    x, w = _layer("fp8_channel", device=device)
    impl = TorchRowWiseLinear(quant="fp8_channel", dtype="float16", selector_overrides=H200)
    y = impl.apply(x.half(), impl.prepare(w))
    assert y.dtype == torch.float16
    ref = reference_fp8_linear(x.half().double().cpu(), w.to("cpu"), compute_dtype=torch.float64)
    assert _err(y, ref)[0] <= BOUNDS["linear", "fp8_channel"].max_rel_err


def test_prepare_refuses_other_schemes_and_formats():
    x, w = _layer("fp8_block")
    with pytest.raises(ValueError, match="the weights are fp8_block"):
        TorchPerTensorLinear(quant="fp8_tensor", selector_overrides=H200).prepare(w)
    with pytest.raises(ValueError, match="expected backends.formats.fp8.Fp8LinearWeights"):
        TorchPerTensorLinear(quant="fp8_tensor", selector_overrides=H200).prepare(w.weight)


@pytest.mark.parametrize("overrides,rule", [(["platform=cpu"], "device"),
                                            (["platform=rtx_5090", "stack=vllm_0_32"], "device"),
                                            (["platform=h200"], "package")])
def test_the_selector_gate_refuses_where_the_rules_do(overrides, rule):
    """No GPU, SM 12.0 (block-wise is SM 9.0 only), or no torch on a bare hardware preset."""
    x, w = _layer("fp8_block")
    with pytest.raises(BackendUnavailable) as e:
        TorchBlockWiseLinear(quant="fp8_block", selector_overrides=overrides).prepare(w)
    assert rule in {r for r, _, _ in e.value.reasons}


# the lent H200's software: torch and triton, no vllm, flashinfer or sgl-kernel (docs/records/h200.md)
LENT_H200 = H200 + ["platform.packages.vllm=null", "platform.packages.flashinfer-python=null",
                    "platform.packages.nvidia-cutlass-dsl=null"]


def test_selection_on_the_h200_preset():
    import selector
    # with vLLM installed, vLLM's own kernels come first, as in vLLM (tests/vllm/linear_parity.py)
    full = selector.load(H200)
    assert {q: full.select(op="linear", quant=q, hidden_size=7168).selected
            for q in fp8.FP8_QUANTS} == {
        "fp8_tensor": "cutlass", "fp8_tensor_dynamic": "cutlass", "fp8_channel": "cutlass",
        "fp8_block": "flashinfer_cutlass"}
    sel = selector.load(LENT_H200)
    pick = {q: sel.select(op="linear", quant=q, hidden_size=7168).selected
            for q in fp8.FP8_QUANTS}
    assert pick == {"fp8_tensor": "torch_per_tensor", "fp8_tensor_dynamic": "torch_per_tensor",
                    "fp8_channel": "torch_row_wise", "fp8_block": "triton_block_fp8"}
    # from 128 tokens torch's block-scaled GEMM ranks first on SM 9.0 (measured under CUDA graphs:
    # docs/records/h200-runs/tune_check_2026-12-06.txt, issue #46)
    assert sel.select(op="linear", quant="fp8_block", hidden_size=7168,
                      num_tokens=128).selected == "torch_block_wise"
    assert sel.select(op="linear", quant="fp8_block", hidden_size=7168,
                      num_tokens=127).selected == "triton_block_fp8"
    under_vllm = selector.load(LENT_H200 + ["engine=vllm"]).select(
        op="linear", quant="fp8_channel", hidden_size=7168)
    assert under_vllm.selected == "torch_channel_wise"  # vLLM's row-wise kernel is ROCm-only


def test_flashinfer_bmm_fp8_ranks_first_from_1024_tokens_on_sm90_per_tensor():
    """Measured on the H100 (docs/records/h200-runs/issue46_2026-12-07/, issue #46): FlashInfer's
    bmm_fp8 within 2% of the fastest per-tensor FP8 kernel at 1,024 and 4,096 tokens; below
    that, and for the dynamic scheme (not timed), the static order is torch's."""
    import selector
    with_fi = [o for o in LENT_H200 if "flashinfer-python" not in o] + [
        "platform.packages.flashinfer-python=0.7.4"]
    sel = selector.load(with_fi)
    at = {t: sel.select(op="linear", quant="fp8_tensor", hidden_size=5120,
                        intermediate_size=10240, num_tokens=t) for t in (1023, 1024, 4096)}
    assert at[1023].selected == "torch_per_tensor"
    assert at[1024].selected == at[4096].selected == "flashinfer_bmm_fp8"
    assert "from 1,024 tokens on SM 9.0" in str(at[1024])
    assert sel.select(op="linear", quant="fp8_tensor_dynamic", hidden_size=5120,
                      num_tokens=4096).selected == "torch_per_tensor"
    # no FlashInfer: torch's, at every token count
    assert selector.load(LENT_H200).select(op="linear", quant="fp8_tensor", hidden_size=5120,
                                           num_tokens=4096).selected == "torch_per_tensor"


# ---------------------------------------------------------------------------------------------
# block-wise: CUDA only (torch's block scaling is a cuBLASLt SM 9.0 path)

def test_block_wise_scaled_mm_is_cuda_only_in_torch():
    """torch's CPU _scaled_mm has no block-scaled recipe: apply raises torch's own error."""
    x, w = _layer("fp8_block")
    impl = TorchBlockWiseLinear(quant="fp8_block", selector_overrides=H200)
    with pytest.raises(Exception, match="[Ss]caling"):
        impl.apply(x, impl.prepare(w))


def _sm90() -> bool:
    return CUDA and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.skipif(not _sm90(), reason="torch's block-scaled _scaled_mm runs on SM 9.0 only")
@pytest.mark.parametrize("n,k", [(144, 272), (256, 256), (256, 768), (512, 1024), (256, 7168)])
def test_block_wise_and_triton_on_the_gpu(n, k):
    from selector.backends.wrappers.triton_fp8 import TritonBlockFp8Linear
    x, w = _layer("fp8_block", n=n, k=k, t=67, device="cuda")
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    bound = BOUNDS["linear", "fp8_block"]
    for cls in (TorchBlockWiseLinear, TritonBlockFp8Linear):
        impl = cls(quant="fp8_block", selector_overrides=["platform=auto"])
        mx, rms = _err(impl.apply(x, impl.prepare(w)), ref)
        assert mx <= bound.max_rel_err and rms <= bound.rms_rel_err, (cls.__name__, mx, rms)


@pytest.mark.skipif(CUDA, reason="on a GPU the compiled kernel is tested "
                    "(test_block_wise_and_triton_on_the_gpu); triton 3.6's interpreter cannot "
                    "run it")
def test_triton_kernel_under_the_interpreter():
    """The Triton kernel itself, run by Triton's interpreter on the CPU (a child process: the
    interpreter is chosen when triton is imported), in one launch and with K split over three
    programs a tile (the last to arrive sums the partials: triton_fp8._split_workspace)."""
    pytest.importorskip("triton")
    code = textwrap.dedent("""
        import torch
        from selector.backends.formats import fp8
        from selector.backends.reference import reference_fp8_linear
        from selector.backends.wrappers.triton_fp8 import block_fp8_matmul
        g = torch.Generator().manual_seed(0)
        w = fp8.make_linear_weights(torch.randn(144, 272, generator=g) / 16, "fp8_block",
                                    bias=torch.randn(144, generator=g))
        x = torch.randn(37, 272, generator=g).bfloat16()
        a, sa = fp8.quantize_activation(x, "fp8_block")
        ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
        for cfg in (None, dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2, SPLIT_K=2)):
            y = block_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16,
                                 w.bias.float(), cfg=cfg)
            print(float((y.double() - ref).abs().max() / ref.abs().max()))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    errs = [float(line) for line in r.stdout.strip().splitlines()]
    assert len(errs) == 2 and max(errs) <= BOUNDS["linear", "fp8_block"].max_rel_err, errs


@pytest.mark.skipif(CUDA, reason="on a GPU the compiled kernels run through apply in "
                    "test_block_wise_and_triton_on_the_gpu and test_triton_scaled_on_the_gpu")
def test_triton_layers_apply_under_the_interpreter():
    """Both Triton layer classes end to end in Triton's interpreter (a child process; a preset
    SM 9.0 platform passes the gate): ``apply`` at 5 tokens (the decode tile) and 37, a bias,
    ``out=``, zero tokens, a K of exactly 256 (no padding column), each within verify's bound of
    the float64 reference; and K split over programs equal to one split up to float32 order."""
    pytest.importorskip("triton")
    code = textwrap.dedent("""
        import torch
        from selector.backends.formats import fp8
        from selector.backends.reference import reference_fp8_linear
        from selector.backends.wrappers.triton_fp8 import (TritonBlockFp8Linear, TritonScaledFp8Linear,
                                                  block_fp8_matmul, scaled_fp8_matmul)
        over = ["platform=h200", "platform.packages.triton=3.6.0", "platform.packages.torch=2.11.0"]
        g = torch.Generator().manual_seed(1)
        for cls, q in ((TritonBlockFp8Linear, "fp8_block"), (TritonScaledFp8Linear, "fp8_channel"),
                       (TritonScaledFp8Linear, "fp8_tensor")):
            for k, bias in ((256, True), (272, False)):
                x = torch.randn(37, k, generator=g).bfloat16()
                kw = {"input_scale": x.float().abs().amax() / 448} if q == "fp8_tensor" else {}
                b = torch.randn(80, generator=g) if bias else None
                w = fp8.make_linear_weights(torch.randn(80, k, generator=g) / 16, q, bias=b, **kw)
                impl = cls(quant=q, selector_overrides=over)
                p = impl.prepare(w)
                for t in (5, 37):
                    ref = reference_fp8_linear(x[:t].double(), w, compute_dtype=torch.float64)
                    y = impl.apply(x[:t], p)
                    out = torch.full((t, 80), float("nan"), dtype=torch.bfloat16)
                    y2 = impl.apply(x[:t].reshape(1, t, k), p, out=out.reshape(1, t, 80))
                    assert y.shape == (t, 80) and y.dtype == torch.bfloat16
                    assert y2.shape == (1, t, 80) and torch.equal(out, y), (q, k, t)
                    print(q, k, t, float((y.double() - ref).abs().max() / ref.abs().max()))
                z = impl.apply(x[:0], p)
                assert z.shape == (0, 80), z.shape
        # split-K against one split, tight (the sum's order alone differs)
        k = 384
        for q in ("fp8_block", "fp8_channel"):
            w = fp8.make_linear_weights(torch.randn(80, k, generator=g) / 16, q)
            x = torch.randn(5, k, generator=g).bfloat16()
            a, sa = fp8.quantize_activation(x, q)
            mm = block_fp8_matmul if q == "fp8_block" else scaled_fp8_matmul
            cfg = dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2)
            one = mm(a, sa, w.weight, w.weight_scale, torch.float32, cfg=dict(cfg, SPLIT_K=1))
            for sk in (2, 3):
                y = mm(a, sa, w.weight, w.weight_scale, torch.float32, cfg=dict(cfg, SPLIT_K=sk))
                assert float((y - one).abs().max()) <= 1e-5 * float(one.abs().max()), (q, sk)
        print("split ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "split ok" and len(lines) == 13, r.stdout
    for line in lines[:-1]:
        q, err = line.split()[0], float(line.split()[-1])
        assert err <= BOUNDS["linear", q].max_rel_err, line


@pytest.mark.skipif(CUDA, reason="on a GPU the compiled kernel is tested "
                    "(test_triton_scaled_on_the_gpu)")
def test_triton_scaled_kernel_under_the_interpreter():
    """The per-tensor / per-channel Triton GEMM (scales applied once to the float32 sum), with
    and without split-K, under Triton's interpreter: each scheme within verify's bound."""
    pytest.importorskip("triton")
    code = textwrap.dedent("""
        import torch
        from selector.backends.formats import fp8
        from selector.backends.reference import reference_fp8_linear
        from selector.backends.wrappers.triton_fp8 import scaled_fp8_matmul
        g = torch.Generator().manual_seed(0)
        for q in ("fp8_channel", "fp8_tensor_dynamic", "fp8_tensor"):
            x = torch.randn(37, 272, generator=g).bfloat16()
            kw = {"input_scale": x.float().abs().amax() / 448} if q == "fp8_tensor" else {}
            w = fp8.make_linear_weights(torch.randn(144, 272, generator=g) / 16, q,
                                        bias=torch.randn(144, generator=g), **kw)
            a, sa = fp8.quantize_activation(x, q, w.input_scale)
            ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
            for cfg in (None, dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2,
                                   SPLIT_K=3)):
                y = scaled_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16,
                                      w.bias.float(), cfg=cfg)
                print(q, float((y.double() - ref).abs().max() / ref.abs().max()))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    errs = [float(line.split()[-1]) for line in r.stdout.strip().splitlines()]
    assert len(errs) == 6 and max(errs) <= BOUNDS["linear", "fp8_channel"].max_rel_err, r.stdout


@pytest.mark.skipif(not CUDA, reason="the compiled Triton kernel needs a GPU")
@pytest.mark.parametrize("quant", ["fp8_channel", "fp8_tensor_dynamic", "fp8_tensor"])
@pytest.mark.parametrize("t", [1, 16, 67, 2051])
def test_triton_scaled_on_the_gpu(quant, t):
    """triton_scaled_fp8 on CUDA (split-K at t <= 16; the 128 x 256 prefill tile from 2,048 rows
    where the GPU has the shared memory) within verify's bound, odd sizes, a bias."""
    from selector.backends.wrappers.triton_fp8 import TritonScaledFp8Linear
    x, w = _layer(quant, n=144, k=272, t=t, device="cuda")
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    bound = BOUNDS["linear", quant]
    impl = TritonScaledFp8Linear(quant=quant, selector_overrides=["platform=auto"])
    mx, rms = _err(impl.apply(x, impl.prepare(w)), ref)
    assert mx <= bound.max_rel_err and rms <= bound.rms_rel_err, (quant, t, mx, rms)


# ---------------------------------------------------------------------------------------------
# grouped FP8 MoE

def _moe(quant, device="cpu", E=8, H=256, I=128, T=40, K=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5
    w2 = torch.randn(E, H, I, generator=g) / I ** 0.5
    x = torch.randn(T, H, generator=g).bfloat16()
    tw, ti = route(torch.randn(T, E, generator=g), K)
    a13 = torch.exp2(torch.ceil(torch.log2(x.float().abs().amax() / fp8.FP8_MAX)))
    w = fp8.make_moe_weights(w13, w2, quant, a13_scale=a13,
                             a2_scale=torch.full((E,), 2.0 ** -8))
    return x.to(device), w.to(device), tw.to(device), ti.to(device)


@pytest.mark.parametrize("quant", fp8.MOE_QUANTS)
def test_fp8_moe_reference_routes_and_quantizes(quant):
    x, w, tw, ti = _moe(quant)
    ref = reference_fp8_moe(x.double(), w, tw, ti, compute_dtype=torch.float64)
    # one token by hand: its two experts, FC2's input quantized per the scheme
    t = 3
    xq, xs = fp8.quantize_activation(x.float(), quant, w.a13_scale)
    xd = fp8.dequantize_activation(xq, xs, quant, torch.float64)[t:t + 1]
    total = torch.zeros(1, w.hidden_size, dtype=torch.float64)
    for k in range(2):
        e = int(ti[t, k])
        h = xd @ w.expert("w13", e, torch.float64).T
        a = torch.nn.functional.silu(h[:, :128]) * h[:, 128:]
        if quant == "fp8_channel":
            aq, sa = fp8.quantize_activation(a.float(), quant)
            ad = fp8.dequantize_activation(aq, sa, quant, torch.float64)
        elif quant == "fp8_tensor":
            ad = fp8._to_fp8(a.float(), w.a2_scale[e]).double() * float(w.a2_scale[e])
        else:
            continue  # one scale over every routed row: checked below
        total += float(tw[t, k]) * (ad @ w.expert("w2", e, torch.float64).T)
    if quant != "fp8_tensor_dynamic":
        assert torch.allclose(ref[t:t + 1], total, rtol=0, atol=1e-12)
    assert ref.shape == (40, 256) and bool(torch.isfinite(ref).all())


def test_grouped_mm_is_cuda_only_in_torch():
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    x, w, tw, ti = _moe("fp8_channel")
    impl = TorchGroupedFp8MoE(quant="fp8_channel", activation="silu", selector_overrides=H200)
    p = impl.prepare(w)  # the gate passes on the H200 preset; the kernel is CUDA-only
    with pytest.raises(NotImplementedError, match="_scaled_grouped_mm"):
        impl.apply(x, p, tw, ti)


@pytest.mark.skipif(not _sm90(), reason="torch's FP8 grouped GEMM runs on SM 9.0 only")
@pytest.mark.parametrize("quant", fp8.MOE_QUANTS)
def test_grouped_fp8_moe_on_the_gpu(quant):
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    x, w, tw, ti = _moe(quant, device="cuda", E=16, T=67, K=4)
    impl = TorchGroupedFp8MoE(quant=quant, activation="silu", selector_overrides=["platform=auto"])
    y = impl.apply(x, impl.prepare(w), tw, ti)
    # FC1's bf16 output in the reference too: FC2's input codes are then the kernel's
    ref = reference_fp8_moe(x.double(), w, tw, ti, compute_dtype=torch.float64,
                            fc1_output_dtype=torch.bfloat16)
    mx, rms = _err(y, ref)
    assert mx <= 2.0 ** -6 and rms <= 2.0 ** -7, (mx, rms)
    exact = reference_fp8_moe(x.double(), w, tw, ti, compute_dtype=torch.float64)
    mx, rms = _err(y, exact)
    assert mx <= 2.0 ** -3 and rms <= 2.0 ** -5, (mx, rms)


# ---------------------------------------------------------------------------------------------
# verify: doctor --verify has FP8 linear problems

def test_verify_runs_fp8_cases_for_the_torch_backends():
    import selector
    from selector.inspect import verify as V
    sel = selector.load(H200)
    for name in ("torch_per_tensor", "torch_row_wise", "torch_channel_wise", "torch_block_wise",
                 "triton_block_fp8"):
        b = sel.catalogue.get("linear", name)
        cases, why = V.cases_for(sel, "linear", b)
        assert cases and not why, (name, why)
        assert {c.quant for c in cases} == set(b.implements) & set(fp8.FP8_QUANTS)
    moe = sel.catalogue.get("moe", "torch_grouped_fp8")
    cases, why = V.cases_for(sel, "moe", moe)  # FP8 MoE problems (issue 35)
    assert cases and not why, why
    assert {c.quant for c in cases} == {"fp8_tensor", "fp8_tensor_dynamic", "fp8_channel"}


def test_verify_measures_a_torch_backend_on_this_machine():
    from selector.backends.children import verify_child as C
    from selector.inspect import verify as V
    case = V.Case("linear", "fp8_channel", reference_quant="fp8_channel", bias=True)
    spec = {"overrides": H200, "config_dirs": [], "backend": "torch_row_wise", "op": "linear",
            "entry_point": "selector.backends.wrappers.torch_scaled_mm:TorchRowWiseLinear"}
    r = C.run_case(spec, case.spec(0))
    assert V.judge("torch_row_wise", case, dict(r, outcome="measured")).status == "OK", r


# ---------------------------------------------------------------------------------------------
# one engine name for backends of disjoint schemes (vLLM's `torch` linear backend)

def test_backends_of_disjoint_schemes_may_share_an_engine_name():
    import dataclasses

    import selector
    from selector.core.model import engine_name_clashes
    sel = selector.load(H200)
    linear = sel.catalogue.backends["linear"]
    named = {b.name for b in linear if dict(b.engines).get("vllm") is not None
             and dict(b.engines)["vllm"].name == "torch"}
    assert named == {"torch_per_tensor", "torch_channel_wise", "torch_block_wise"}
    assert engine_name_clashes(linear) == []
    # channel-wise also claiming fp8_tensor: two backends would answer `torch` for one layer
    wide = [dataclasses.replace(b, implements=("fp8_tensor", "fp8_channel"))
            if b.name == "torch_channel_wise" else b for b in linear]
    clashes = engine_name_clashes(wide)
    assert len(clashes) == 1 and "'torch' is also the vllm name" in clashes[0]
    assert "torch_per_tensor" in clashes[0] and "torch_channel_wise" in clashes[0]


def test_linear_input_checks_shape_and_dtype():
    """backends.formats.fp8.linear_input: the input check both FP8 linear backends (torch _scaled_mm,
    Triton block) run before quantizing."""
    torch = pytest.importorskip("torch")
    from selector.backends.formats.fp8 import linear_input
    lead, x2 = linear_input(torch.zeros(2, 3, 8, dtype=torch.bfloat16), 8)
    assert lead == (2, 3) and tuple(x2.shape) == (6, 8)
    with pytest.raises(ValueError, match=r"x has shape \[2, 4\]; expected \[\.\.\., 8\]"):
        linear_input(torch.zeros(2, 4), 8)
    with pytest.raises(ValueError, match=r"expected \[\.\.\., 8\]"):
        linear_input(torch.tensor(1.0), 8)
    with pytest.raises(ValueError, match="x is int32; accepted: bfloat16, float16, float32"):
        linear_input(torch.zeros(2, 8, dtype=torch.int32), 8)
