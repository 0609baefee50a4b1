"""selector's direct calls of FlashInfer's SM90 FP8 kernels (backends/wrappers/flashinfer_fp8.py), on this
machine: the gate refuses them where the GPU is not SM 9.0 (with every reason), and on an H200
preset their prepare builds the operands FlashInfer takes, as vLLM builds them for the same kernel
(the kernels themselves run on the H200: tests/test_kernel_inputs.py, `doctor --verify`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from selector.backends.formats import fp8  # noqa: E402
from selector.backends.wrappers._base import BackendUnavailable  # noqa: E402
from selector.backends.wrappers.flashinfer_fp8 import (  # noqa: E402
    BlockScaleSm90Linear,
    BmmFp8CudnnLinear,
    BmmFp8Linear,
    CutlassFp8MoE,
)

H200 = ["platform=h200", "stack=flashinfer_0_7_4"]


def _lin(quant, n=256, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    return fp8.make_linear_weights(torch.randn(n, k, generator=g) / k ** 0.5, quant,
                                   input_scale=2.0 ** -6)


def _moe(quant, E=4, H=256, I=128, gated=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = 2 * I if gated else I
    return fp8.make_moe_weights(torch.randn(E, rows, H, generator=g) / H ** 0.5,
                                torch.randn(E, H, I, generator=g) / I ** 0.5, quant,
                                a13_scale=2.0 ** -6, a2_scale=torch.tensor([2.0 ** -8, 2.0 ** -7,
                                                                           2.0 ** -8, 2.0 ** -9]))


@pytest.mark.parametrize("cls,quant", [(BlockScaleSm90Linear, "fp8_block"),
                                       (BmmFp8Linear, "fp8_tensor"),
                                       (BmmFp8CudnnLinear, "fp8_tensor_dynamic")])
def test_the_gate_refuses_them_off_sm90_with_every_reason(cls, quant):
    impl = cls(quant=quant, selector_overrides=["platform=b200", "stack=flashinfer_0_7_4"]
               if cls is BlockScaleSm90Linear else ["platform=cpu"])
    with pytest.raises(BackendUnavailable) as exc:
        impl.prepare(_lin(quant))
    rules = {r for r, _, _ in exc.value.reasons}
    assert "device" in rules or "package" in rules, exc.value.reasons


def test_block_linear_keeps_the_checkpoints_codes_and_scales():
    w = _lin("fp8_block", n=192, k=384)
    p = BlockScaleSm90Linear(quant="fp8_block", selector_overrides=H200).prepare(w)
    assert torch.equal(p.weight.view(torch.uint8), w.weight.view(torch.uint8))
    assert tuple(p.weight_scale.shape) == (2, 3)  # [ceil(N/128), K/128], as FlashInfer checks
    assert p.weight_scale.dtype == torch.float32


def test_block_linear_refuses_what_the_kernel_refuses_before_calling_it():
    impl = BlockScaleSm90Linear(quant="fp8_block", selector_overrides=H200)
    with pytest.raises((ValueError, BackendUnavailable), match="128|shape"):
        impl.prepare(_lin("fp8_block", n=192, k=320))
    p = impl.prepare(_lin("fp8_block"))
    with pytest.raises(ValueError, match="^x"):
        impl.apply(torch.randn(4, 512, dtype=torch.float16), p)  # the kernel takes bf16 only


def test_per_tensor_linear_pads_as_the_torch_backend_and_takes_bf16_or_fp16_only():
    impl = BmmFp8Linear(quant="fp8_tensor", selector_overrides=H200)
    p = impl.prepare(_lin("fp8_tensor", n=100, k=200))
    assert (p.padded_n, p.padded_k) == (112, 208)
    with pytest.raises(ValueError, match="^x"):
        impl.apply(torch.randn(3, 200), p)  # float32: bmm_fp8 writes bf16 or fp16


@pytest.mark.parametrize("gated", [True, False])
def test_moe_per_tensor_operands_are_vllms(gated):
    """vLLM 0.32.0 oracle/fp8.py (FLASHINFER_CUTLASS per-tensor): g1_alphas = w13_scale * a1,
    a2_gscale = 1 / a2, g2_alphas = w2_scale * a2 (a2 reduced to one scale), and
    prepare_fp8_moe_layer_for_fi's swap_w13_to_w31 of a gated w13."""
    w = _moe("fp8_tensor", gated=gated)
    act = "silu" if gated else "relu2"
    p = CutlassFp8MoE(quant="fp8_tensor", activation=act, act_and_mul=gated,
                      selector_overrides=H200).prepare(w)
    a2 = w.a2_scale.max()
    g1, a2g, g2, a1 = p.quant_scales
    assert torch.allclose(g1, w.w13_scale * w.a13_scale)
    assert torch.allclose(a2g, 1 / a2) and torch.allclose(g2, w.w2_scale * a2)
    assert torch.allclose(a1, w.a13_scale)
    I = w.intermediate_size
    want = torch.cat([w.w13[:, I:], w.w13[:, :I]], 1) if gated else w.w13
    assert torch.equal(p.w13.view(torch.uint8), want.view(torch.uint8))


def test_moe_block_scales_swap_with_the_rows():
    w = _moe("fp8_block", I=256)
    p = CutlassFp8MoE(quant="fp8_block", selector_overrides=H200).prepare(w)
    s13, s2 = p.quant_scales
    assert torch.equal(s13, torch.cat([w.w13_scale[:, 2:], w.w13_scale[:, :2]], 1))
    assert torch.equal(s2, w.w2_scale)


def test_moe_refuses_an_activation_it_does_not_run():
    with pytest.raises(ValueError, match="swigluoai"):
        CutlassFp8MoE(quant="fp8_block", activation="swigluoai",
                      selector_overrides=H200).prepare(_moe("fp8_block"))
