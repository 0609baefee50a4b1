"""backends/wrappers/triton_fp8.py on the host, no GPU: the tile choices at their bounds, the shape checks
that refuse an operand before any launch (each on its own), and which schemes each class builds
and prepares (a preset SM 9.0 platform passes the device gate; the kernels themselves run in
Triton's interpreter in tests/test_fp8_backends.py and on the GPU there)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from selector.backends.formats import fp8  # noqa: E402
from selector.backends.wrappers import triton_fp8  # noqa: E402
from selector.backends.wrappers.triton_fp8 import (  # noqa: E402
    TritonBlockFp8Linear,
    TritonScaledFp8Linear,
    block_fp8_matmul,
    scaled_fp8_matmul,
    tile_config,
)

H200 = ["platform=h200", "platform.packages.triton=3.6.0", "platform.packages.torch=2.11.0"]


@pytest.mark.parametrize("m,block_m", [(1, 16), (16, 16), (17, 64), (64, 64), (65, 128),
                                       (4096, 128)])
def test_tile_config_narrows_the_m_tile_at_decode(m, block_m):
    assert tile_config(m)["BLOCK_M"] == block_m


def test_the_prefill_tile_fits_the_shared_memory_it_asks_for():
    t = triton_fp8.LARGE_SCALED
    for key in ("BLOCK_M", "BLOCK_N"):
        assert t[key] & (t[key] - 1) == 0, key  # tl.arange needs powers of two
    # one K step of 128 FP8 bytes a row of A and of W, a buffer per stage
    assert triton_fp8.LARGE_SCALED_SMEM == t["num_stages"] * (t["BLOCK_M"] + t["BLOCK_N"]) * 128
    assert (t["BLOCK_M"], t["BLOCK_N"], t["num_warps"], t["num_stages"]) == (128, 256, 8, 3)


def _codes(*shape):
    return torch.zeros(shape).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("bad", ["a_short", "a_strided", "a_scale", "w_scale"])
def test_block_fp8_matmul_refuses_each_misfit_operand(bad):
    m, n, k = 3, 160, 300  # K blocks: 3; W's row blocks: 2
    a, sa = _codes(m, 384), torch.ones(m, 3)
    w, sw = _codes(n, k), torch.ones(2, 3)
    if bad == "a_short":
        a = _codes(m, k - 1)
    elif bad == "a_strided":
        a = _codes(384, m).t()
    elif bad == "a_scale":
        sa = torch.ones(m, 2)
    else:
        sw = torch.ones(1, 3)
    with pytest.raises(ValueError, match="block_fp8_matmul: .* do not fit"):
        block_fp8_matmul(a, sa, w, sw, torch.bfloat16)


@pytest.mark.parametrize("bad", ["w_k", "a_strided", "a_scale", "w_scale"])
def test_scaled_fp8_matmul_refuses_each_misfit_operand(bad):
    m, n, k = 3, 160, 300
    a, sa = _codes(m, k), torch.ones(m, 1)
    w, sw = _codes(n, k), torch.ones(n)
    if bad == "w_k":
        w = _codes(n, k + 1)
    elif bad == "a_strided":
        a = _codes(k, m).t()
    elif bad == "a_scale":
        sa = torch.ones(m + 1)
    else:
        sw = torch.ones(n - 1)
    with pytest.raises(ValueError, match="scaled_fp8_matmul: .* do not fit"):
        scaled_fp8_matmul(a, sa, w, sw, torch.bfloat16)


def _weights(quant, n=160, k=300):
    g = torch.Generator().manual_seed(0)
    kw = {"input_scale": torch.tensor(0.01)} if quant == "fp8_tensor" else {}
    return fp8.make_linear_weights(torch.randn(n, k, generator=g) / 16, quant, **kw)


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_tensor_dynamic", "fp8_channel"])
def test_triton_scaled_builds_and_prepares_its_three_schemes(quant):
    impl = TritonScaledFp8Linear(quant=quant, selector_overrides=H200)
    p = impl.prepare(_weights(quant))
    assert (p.in_features, p.out_features, p.quant) == (300, 160, quant)
    assert p.weight_scale.dtype == torch.float32 and p.weight_scale.dim() == 1
    assert p.weight_scale.numel() == (160 if quant == "fp8_channel" else 1)
    with pytest.raises(ValueError, match="triton_scaled_fp8 runs fp8_tensor, "
                       "fp8_tensor_dynamic, fp8_channel"):
        impl.prepare(_weights("fp8_block"))


@pytest.mark.parametrize("cls", [TritonScaledFp8Linear, TritonBlockFp8Linear])
def test_each_class_is_built_for_every_fp8_scheme_and_prepares_only_its_own(cls):
    """Both classes are built for any FP8 linear layer (selector decides the file's layers; the
    torch classes share the pattern) and refuse another scheme's weights at prepare."""
    own = {"fp8_block"} if cls is TritonBlockFp8Linear else {
        "fp8_tensor", "fp8_tensor_dynamic", "fp8_channel"}
    name = "triton_block_fp8" if cls is TritonBlockFp8Linear else "triton_scaled_fp8"
    for quant in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block"):
        impl = cls(quant=quant, selector_overrides=H200)
        assert impl.quant == quant
        if quant in own:
            assert impl.prepare(_weights(quant)).quant == quant
        else:
            with pytest.raises(ValueError, match=f"{name} runs "):
                impl.prepare(_weights(quant))
    with pytest.raises(NotImplementedError, match="not nvfp4"):
        cls(quant="nvfp4")


def test_a_layer_built_for_another_scheme_refuses_weights_of_its_own_kind():
    """Both sides are checked: the weights' scheme and the one the layer was built for."""
    with pytest.raises(ValueError, match="triton_block_fp8 runs fp8_block; the weights are "
                       "fp8_block, the layer fp8_channel"):
        TritonBlockFp8Linear(quant="fp8_channel", selector_overrides=H200).prepare(
            _weights("fp8_block"))
    with pytest.raises(ValueError, match="the weights are fp8_channel, the layer fp8_tensor"):
        TritonScaledFp8Linear(quant="fp8_tensor", selector_overrides=H200).prepare(
            _weights("fp8_channel"))
