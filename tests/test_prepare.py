"""Weight preparation per backend (backends.prepare): pure, and dequantizing to the checkpoint.

Every prepared layout is inverted here with the layout's own index arithmetic (unswizzle, undo the
row reorders, decode the Marlin scale bytes) and compared with the checkpoint, bit for bit where the
preparation is lossless and within the stated bound where it is not (the b12x scale fold).
"""
import math

import pytest

torch = pytest.importorskip("torch")

from selector.backends import nvfp4 as nv  # noqa: E402
from selector.backends import prepare as P  # noqa: E402

F64 = torch.float64
E, H, I = 4, 128, 64


def _weights(sigma=1.0, gated=True, scales=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, (2 if gated else 1) * I, H, generator=g) * sigma
    w2 = torch.randn(E, H, I, generator=g) * sigma
    a13 = torch.rand(E, generator=g) * 1e-3 + 1e-3 if scales else None
    a2 = torch.rand(E, generator=g) * 0.05 + 0.01 if scales else None
    return nv.quantize_moe(w13, w2, a13, a2)


def _bytes(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _snapshot(W):
    ts = [W.w13.packed, W.w13.block_scale, W.w13.scale_2, W.w2.packed, W.w2.block_scale, W.w2.scale_2,
          W.a13_scale, W.a2_scale]
    return [(t, None if t is None else _bytes(t).clone()) for t in ts]


def _unchanged(snap):
    return all((t is None and c is None) or torch.equal(_bytes(t), c) for t, c in snap)


def _all_views_unswizzled(sf_swizzled, rows, cols):
    return nv.unswizzle_128x4(sf_swizzled, rows, cols)


def _dequant(packed, block_scale, scale):
    """e2m1 * block_scale * scale (scale per expert) in float64."""
    return nv.dequantize(packed, block_scale, scale, dtype=F64)


# ------------------------------------------------------------------------------------------------
# the b12x fold
# ------------------------------------------------------------------------------------------------

def test_full_fold_dequantizes_to_the_checkpoint_within_the_bound():
    W = _weights(sigma=1.0)
    p = P.prepare_b12x_moe(W)
    r13, r2 = p.fold_reports
    assert r13.ok and r2.ok and r13.overflow == 0 and r13.subnormal == 0
    assert torch.equal(p.w1_alpha, torch.ones(E)) and torch.equal(p.w2_alpha, torch.ones(E))
    sw = nv.from_mma_layout(p.w13_sf_mma)          # the view the kernel gets, back to swizzled
    folded = nv.unswizzle_128x4(sw, 2 * I, H // 16)
    got = _dequant(p.w13, folded, p.w1_alpha)
    ckpt = W.w13.dequantize(F64)
    rel = (got - ckpt).abs() / ckpt.abs().clamp_min(1e-30)
    assert float(rel[ckpt != 0].max()) <= P.FOLD_MAX_REL_ERROR
    assert torch.equal(got == 0, ckpt == 0)
    assert float(rel[ckpt != 0].max()) == pytest.approx(r13.max_rel_error, rel=1e-6)
    folded2 = nv.unswizzle_128x4(nv.from_mma_layout(p.w2_sf_mma), H, I // 16)
    ref2 = W.w2.dequantize(F64)
    rel2 = (_dequant(p.w2, folded2, p.w2_alpha) - ref2).abs() / ref2.abs().clamp_min(1e-30)
    assert float(rel2.max()) <= P.FOLD_MAX_REL_ERROR


@pytest.mark.parametrize("sigma", [0.02, 0.005])
def test_full_fold_of_typical_llm_weights_is_refused_for_precision(sigma):
    """ModelOpt scale_2 = amax/2688 puts folded scales near amax_block/6: subnormal E4M3 for
    weights with std ~0.02 (and flushes to 0 at 0.005)."""
    W = _weights(sigma=sigma)
    with pytest.raises(P.ScaleFoldError, match="precision loss") as exc:
        P.prepare_b12x_moe(W)
    rep = exc.value.report
    assert rep.overflow == 0 and rep.subnormal > 0 and rep.max_rel_error > P.FOLD_MAX_REL_ERROR
    assert "fold_mode='none'" in str(exc.value)
    if sigma == 0.005:
        assert rep.flushed > 0


def test_fold_mode_none_is_exact_for_any_weights():
    W = _weights(sigma=0.005)
    p = P.prepare_b12x_moe(W, fold_mode="none")
    assert all(r.max_rel_error == 0 and r.ok for r in p.fold_reports)
    torch.testing.assert_close(p.w1_alpha, W.w13.scale_2, rtol=0, atol=0)
    got = _dequant(p.w13, nv.unswizzle_128x4(p.w13_sf, 2 * I, H // 16), p.w1_alpha)
    assert torch.equal(got, W.w13.dequantize(F64))
    assert torch.equal(p.input_global_scale, W.a13_scale)      # explicit: w1_alpha is not 1 here


def test_fold_overflow_is_detected():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(E, 2 * I, H, generator=g) * 1000
    q = nv.quantize(w, torch.tensor(4.0))        # block scales up to 448 with scale_2 = 4
    W = nv.MoEWeights(q, nv.quantize(torch.randn(E, H, I, generator=g), global_dims=1),
                      torch.full((E,), 1e-3), torch.full((E,), 1e-2))
    with pytest.raises(P.ScaleFoldError, match="overflow") as exc:
        P.prepare_b12x_moe(W)
    rep = exc.value.report
    assert rep.overflow > 0 and rep.max_folded > nv.E4M3_MAX
    folded, alpha, rep2 = P.fold_global_scale(q.block_scale, q.scale_2, strict=False)
    assert float(folded.float().max()) == nv.E4M3_MAX and rep2.overflow == rep.overflow
    assert not rep2.ok


def test_fold_rejects_a_bad_global_scale_and_mode():
    bs = nv.to_e4m3(torch.full((2, 4), 100.0))
    with pytest.raises(ValueError, match="finite and positive"):
        P.fold_global_scale(bs, torch.tensor(0.0))
    with pytest.raises(ValueError, match="fold mode"):
        P.fold_global_scale(bs, torch.tensor(1.0), mode="pow2")


def test_b12x_fc2_input_scale_is_new_ones_and_a_backend_switch_still_sees_the_checkpoint():
    W = _weights()
    snap = _snapshot(W)
    a2_before = W.a2_scale.clone()
    p = P.prepare_b12x_moe(W)
    assert torch.equal(p.fc2_input_scale, torch.ones(E))
    assert p.fc2_input_scale.data_ptr() != W.a2_scale.data_ptr()
    assert torch.equal(p.input_global_scale, W.a13_scale)
    assert p.input_global_scale.data_ptr() != W.a13_scale.data_ptr()
    assert _unchanged(snap) and torch.equal(W.a2_scale, a2_before)
    # switching backend afterwards: the CUTLASS preparation reads the calibrated FC2 scale
    c = P.prepare_swizzled_moe(W, backend="flashinfer_cutlass")
    torch.testing.assert_close(c.a2_gscale, (1.0 / a2_before.max()).expand(E))


def test_b12x_w4a16_checkpoint_without_activation_scales():
    W = _weights(scales=False)
    assert W.a2_scale is None and W.a13_scale is None
    p = P.prepare_b12x_moe(W, quant="nvfp4_w4a16")
    assert p.quant_mode == "w4a16" and p.input_global_scale is None
    assert torch.equal(p.fc2_input_scale, torch.ones(E))
    with pytest.raises(ValueError, match="W4A4 only"):
        P.prepare_swizzled_moe(W, backend="flashinfer_cutlass")
    with pytest.raises(ValueError, match="activation scales"):
        P.prepare_b12x_native_moe(W)
    n = P.prepare_b12x_native_moe(W, quant="nvfp4_w4a16")
    assert torch.equal(n.a13_scale, torch.ones(E)) and torch.equal(n.a2_scale, torch.ones(E))


def test_b12x_w4a4_without_fc1_scale_quantizes_dynamically():
    W0 = _weights()
    W = nv.MoEWeights(W0.w13, W0.w2, None, torch.full((E,), 0.02))
    p = P.prepare_b12x_moe(W)
    assert p.input_global_scale is None and p.quant_mode == "nvfp4"
    assert any("dynamically" in n for n in p.notes)


def test_b12x_mma_layout_uses_flashinfer_when_present():
    W = _weights()
    p = P.prepare_b12x_moe(W)
    try:
        from flashinfer.cute_dsl import convert_sf_to_mma_layout  # noqa: F401
        expect = "flashinfer.cute_dsl.convert_sf_to_mma_layout"
    except Exception:
        expect = "backends.nvfp4.to_mma_layout"
    assert p.mma_layout_source == expect
    own = P.prepare_b12x_moe(W, use_flashinfer_layout=False)
    assert own.w13_sf_mma.shape == p.w13_sf_mma.shape == (32, 4, 1, 4, 2, E)
    assert torch.equal(own.w13_sf_mma.view(torch.uint8), p.w13_sf_mma.view(torch.uint8))
    assert torch.equal(own.w2_sf_mma.view(torch.uint8), p.w2_sf_mma.view(torch.uint8))


# ------------------------------------------------------------------------------------------------
# every preparation is pure
# ------------------------------------------------------------------------------------------------

def _trtllm(W):
    pytest.importorskip("flashinfer")
    if not W.act_and_mul:
        with pytest.raises(ValueError, match="multiple of 128"):   # I = 64 rows
            P.prepare_trtllm_moe(W)
        pytest.skip("TRT-LLM needs w13 rows % 128 == 0; I = 64 here")
    return P.prepare_trtllm_moe(W)


PREPARES = {
    "b12x": P.prepare_b12x_moe,
    "b12x_none": lambda W: P.prepare_b12x_moe(W, fold_mode="none"),
    "flashinfer_cutlass": lambda W: P.prepare_swizzled_moe(W, backend="flashinfer_cutlass"),
    "cutlass": lambda W: P.prepare_swizzled_moe(W, backend="cutlass"),
    "cutedsl": P.prepare_cutedsl_moe,
    "trtllm": _trtllm,
    "b12x_native": P.prepare_b12x_native_moe,
    "marlin": P.prepare_marlin_moe,
    "emulation": P.prepare_emulation,
}


@pytest.mark.parametrize("name", sorted(PREPARES))
@pytest.mark.parametrize("gated", [True, False])
def test_prepare_never_modifies_its_inputs(name, gated):
    W = _weights(gated=gated, seed=5)
    snap = _snapshot(W)
    out1 = PREPARES[name](W)
    out2 = PREPARES[name](W)           # and is repeatable
    assert _unchanged(snap)
    a = out1[0] if isinstance(out1, tuple) else out1
    b = out2[0] if isinstance(out2, tuple) else out2
    for f in ("w13_sf", "scales", "w13"):
        if hasattr(a, f) and getattr(a, f) is not None:
            assert torch.equal(_bytes(getattr(a, f)), _bytes(getattr(b, f)))


# ------------------------------------------------------------------------------------------------
# layouts invert to the checkpoint
# ------------------------------------------------------------------------------------------------

def _unreorder(t):
    """[up; gate] -> [gate; up]."""
    return P.reorder_w13_to_w31(t)     # the swap is its own inverse


@pytest.mark.parametrize("backend", ["flashinfer_cutlass", "cutlass"])
@pytest.mark.parametrize("gated", [True, False])
def test_swizzled_moe_inverts_to_the_checkpoint(backend, gated):
    W = _weights(gated=gated, seed=6)
    p = P.prepare_swizzled_moe(W, backend=backend)
    rows = W.w13.packed.shape[1]
    w13, s13 = p.w13[:, :rows], nv.unswizzle_128x4(p.w13_sf, rows, H // 16)
    if gated and backend == "flashinfer_cutlass":
        assert p.layout == "w31"
        w13, s13 = _unreorder(w13), _unreorder(s13)
    assert torch.equal(w13, W.w13.packed) and torch.equal(_bytes(s13), _bytes(W.w13.block_scale))
    kp = p.w2.shape[-1] * 2                      # I, or I padded with w13's swizzled rows
    s2 = nv.unswizzle_128x4(p.w2_sf, H, kp // 16)
    assert torch.equal(_bytes(s2[..., :I // 16]), _bytes(W.w2.block_scale))
    assert torch.equal(p.w2[..., :I // 2], W.w2.packed)
    assert int(_bytes(s2[..., I // 16:]).count_nonzero()) == 0 and int(p.w2[..., I // 2:].count_nonzero()) == 0
    if not gated:
        assert kp == 128 and p.w13.shape[1] == 128 and int(p.w13[:, rows:].count_nonzero()) == 0
    a13 = W.a13_scale.to(F64).max() if backend == "flashinfer_cutlass" else W.a13_scale.to(F64)
    a2 = W.a2_scale.to(F64).max() if backend == "flashinfer_cutlass" else W.a2_scale.to(F64)
    torch.testing.assert_close(p.g1_alphas.to(F64), (a13 * W.w13.scale_2.to(F64)).expand(E), rtol=1e-6, atol=0)
    torch.testing.assert_close(p.g2_alphas.to(F64), (a2 * W.w2.scale_2.to(F64)).expand(E), rtol=1e-6, atol=0)
    torch.testing.assert_close(p.a1_gscale.to(F64), (1 / a13).expand(E), rtol=1e-6, atol=0)


def test_cutedsl_moe_inverts_to_the_checkpoint():
    W = _weights(seed=7)
    p = P.prepare_cutedsl_moe(W)
    assert p.layout == "w31_interleaved64"

    def deinterleave(t, group=64):
        rows = t.shape[1]
        rest = tuple(t.shape[2:])
        return t.reshape((E, rows // (2 * group), 2, group) + rest).transpose(1, 2).reshape((E, rows) + rest)

    assert torch.equal(_unreorder(deinterleave(p.w13)), W.w13.packed)
    sw = nv.from_mma_layout(p.w13_sf_mma)
    s13 = nv.unswizzle_128x4(sw, 2 * I, H // 16)
    assert torch.equal(_bytes(_unreorder(deinterleave(s13))), _bytes(W.w13.block_scale))
    # the 64-row groups alternate up, gate: row 64 of the prepared tensor is gate row 0
    assert torch.equal(p.w13[:, 64], W.w13.packed[:, 0]) and torch.equal(p.w13[:, 0], W.w13.packed[:, I])


def test_trtllm_moe_permutes_weights_and_scales_identically():
    flashinfer = pytest.importorskip("flashinfer")  # noqa: F841
    from flashinfer.fused_moe.core import _maybe_get_cached_w3_w1_permute_indices, get_w2_permute_indices_with_cache
    W = _weights(seed=8)
    p = P.prepare_trtllm_moe(W)
    w31, s31 = P.reorder_w13_to_w31(W.w13.packed), P.reorder_w13_to_w31(W.w13.block_scale)
    sf = nv.unswizzle_128x4(p.w13_sf, 2 * I, H // 16)
    for e in range(E):
        perm = _maybe_get_cached_w3_w1_permute_indices({}, w31[e], 128)
        perm_sf = _maybe_get_cached_w3_w1_permute_indices({}, s31[e].view(torch.uint8), 128, num_elts_per_sf=16)
        assert torch.equal(perm, perm_sf) and sorted(perm.tolist()) == list(range(2 * I))
        assert torch.equal(p.w13[e], w31[e][perm])
        assert torch.equal(_bytes(sf[e]), _bytes(s31[e][perm]))
        # row i of the prepared layer dequantizes like checkpoint row perm[i]
        deq = _dequant(p.w13[e], sf[e], W.w13.scale_2[e])
        assert torch.equal(deq, _dequant(w31[e], s31[e], W.w13.scale_2[e])[perm])
        p2 = get_w2_permute_indices_with_cache({}, W.w2.packed[e], 128)
        assert torch.equal(p.w2[e], W.w2.packed[e][p2])
    torch.testing.assert_close(p.g1_scale_c, W.a13_scale.max() * W.w13.scale_2 / W.a2_scale.max(), rtol=1e-6, atol=0)


def test_b12x_native_pads_each_half_to_64_rows():
    g = torch.Generator().manual_seed(9)
    i = 48                                            # not a multiple of 64
    W = nv.quantize_moe(torch.randn(E, 2 * i, H, generator=g), torch.randn(E, H, i, generator=g),
                        torch.full((E,), 1e-3), torch.full((E,), 1e-2))
    p = P.prepare_b12x_native_moe(W)
    assert p.pad_half == 16
    half = i + p.pad_half
    rows = p.w13.shape[1]
    assert rows == 128 and p.w13.shape == (E, 128, H // 2)
    assert torch.equal(p.w13[:, :i], W.w13.packed[:, :i]) and torch.equal(p.w13[:, half:half + i], W.w13.packed[:, i:])
    assert int(p.w13[:, i:half].count_nonzero()) == 0
    s13 = nv.unswizzle_128x4(p.w13_sf, rows, H // 16)
    assert torch.equal(_bytes(s13[:, half:half + i]), _bytes(W.w13.block_scale[:, i:]))
    assert p.w2.shape == (E, H, half // 2) and torch.equal(p.w2[..., : i // 2], W.w2.packed)


# ------------------------------------------------------------------------------------------------
# Marlin
# ------------------------------------------------------------------------------------------------

def _marlin_decode_scales(mp, size_n, size_k):
    """S0E5M3 bytes -> the original E4M3 block scales [N, K/16] (inverse of vLLM's processing)."""
    b = mp.view(torch.uint8).to(torch.int16)
    half = (b << 7).view(torch.half).float() / 2 ** 7       # top byte of (fp16 bits << 1)
    half = half.reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(half.shape)   # the swap is an involution
    perm, _ = P.marlin_scale_perm()
    inv = [0] * len(perm)
    for i, j in enumerate(perm):
        inv[j] = i
    unperm = half.reshape(-1, len(perm))[:, inv].reshape(half.shape)
    return unperm.T[:size_n, :size_k // 16]


def test_marlin_linear_scales_decode_exactly_and_qweight_holds_the_checkpoint():
    g = torch.Generator().manual_seed(10)
    lw = nv.quantize_linear(torch.randn(100, 256, generator=g) * 0.02, input_scale=1e-3)
    m = P.prepare_marlin_linear(lw)
    assert m.padded_n == 128 and m.qweight.dtype == torch.int32 and m.qweight.shape == (32, 128)
    dec = _marlin_decode_scales(m.scales, 100, 256) / m.scale_factor
    assert torch.equal(dec, lw.weight.block_scale.float())
    back = m.qweight.T.contiguous().view(torch.uint8)
    assert torch.equal(back[:100], lw.weight.packed) and int(back[100:].count_nonzero()) == 0
    gs = m.global_scale.to(F64) * m.scale_factor / 2.0 ** (126 - 7)
    torch.testing.assert_close(gs, lw.weight.scale_2.to(F64), rtol=1e-7, atol=0)


def test_marlin_scale_factor_rescues_small_scales():
    """vLLM rescales scales whose S0E5M3 top bit would be 0 (scale * 2^7 < 2) by a power of two."""
    bs = nv.to_e4m3(torch.tensor([[2.0 ** -9, 1.0, 40.0, 3.0] * 4] * 64))
    assert P.marlin_scale_factor(bs.to(torch.half)) == 2.0 ** 3
    lw = nv.LinearWeights(nv.NVFP4Tensor(torch.zeros(64, 128, dtype=torch.uint8), bs, torch.tensor(1.0)))
    m = P.prepare_marlin_linear(lw)
    assert m.scale_factor == 8.0
    assert torch.equal(_marlin_decode_scales(m.scales, 64, 256) / m.scale_factor, bs.float())


def test_marlin_refuses_scales_spanning_more_than_fp16_can_hold():
    """A ModelOpt tensor (max block scale 448) with one block scale under 2^-6: the rescale would
    push 448 * factor * 2^7 past fp16's max (vLLM would store inf)."""
    bs = nv.to_e4m3(torch.tensor([[2.0 ** -9, 1.0, 448.0, 3.0] * 4] * 64))
    lw = nv.LinearWeights(nv.NVFP4Tensor(torch.zeros(64, 128, dtype=torch.uint8), bs, torch.tensor(1.0)))
    with pytest.raises(ValueError, match="Marlin scale range"):
        P.prepare_marlin_linear(lw)


def test_marlin_moe_per_expert():
    W = _weights(seed=11)
    p13, p2 = P.prepare_marlin_moe(W)
    assert p13.qweight.shape == (E, H // 8, 2 * I) and p2.qweight.shape == (E, I // 8, H)
    for e in range(E):
        dec = _marlin_decode_scales(p13.scales[e], 2 * I, H) / p13.scale_factor
        assert torch.equal(dec, W.w13.block_scale[e].float())
        dec2 = _marlin_decode_scales(p2.scales[e], H, I) / p2.scale_factor
        assert torch.equal(dec2, W.w2.block_scale[e].float())


# ------------------------------------------------------------------------------------------------
# dense GEMM layouts
# ------------------------------------------------------------------------------------------------

def test_fp4_linear_swizzled_scales_and_alpha():
    g = torch.Generator().manual_seed(12)
    lw = nv.quantize_linear(torch.randn(200, 256, generator=g), input_scale=2e-3)
    p = P.prepare_fp4_linear(lw)
    assert p.weight is lw.weight.packed and p.weight_sf.shape == (256, 16)
    assert torch.equal(_bytes(nv.unswizzle_128x4(p.weight_sf, 200, 16)), _bytes(lw.weight.block_scale))
    torch.testing.assert_close(p.alpha, lw.input_scale * lw.weight.scale_2, rtol=0, atol=0)
    torch.testing.assert_close(p.a_gscale, 1 / lw.input_scale, rtol=0, atol=0)
    p16 = P.prepare_fp4_linear(nv.LinearWeights(lw.weight))
    assert p16.alpha is None and p16.a_gscale is None


def test_trtllm_linear_shuffles_rows_consistently():
    pytest.importorskip("flashinfer")
    from flashinfer.utils import get_shuffle_matrix_a_row_indices, get_shuffle_matrix_sf_a_row_indices
    g = torch.Generator().manual_seed(13)
    lw = nv.quantize_linear(torch.randn(256, 256, generator=g), input_scale=2e-3)
    p = P.prepare_fp4_linear(lw, shuffle_trtllm=True)
    rows = get_shuffle_matrix_a_row_indices(lw.weight.packed, 128)
    srows = get_shuffle_matrix_sf_a_row_indices(lw.weight.block_scale.view(torch.uint8), 128, 16)
    assert torch.equal(rows, srows)
    assert torch.equal(p.weight, lw.weight.packed[rows])
    sf = nv.unswizzle_128x4(p.weight_sf, 256, 16)
    assert torch.equal(_dequant(p.weight, sf, lw.weight.scale_2), lw.weight.dequantize(F64)[rows])


def test_interleave_rejects_rows_not_multiple_of_128():
    with pytest.raises(ValueError):
        P.interleave_linear_and_gate(torch.zeros(1, 96, 4))


def test_fold_report_describe_mentions_every_count():
    W = _weights(sigma=0.02)
    _, _, rep = P.fold_global_scale(W.w13.block_scale, W.w13.scale_2, strict=False)
    text = rep.describe()
    for word in ("overflow", "flushed", "subnormal", "bound"):
        assert word in text
    assert math.isfinite(rep.mean_rel_error)
