"""Weight preparation per backend (backends.prepare): pure, and dequantizing to the checkpoint.

Every prepared layout is inverted here with the layout's own index arithmetic (unswizzle, undo the
row reorders, decode the Marlin scale bytes) and compared with the checkpoint, bit for bit where the
preparation is lossless and within the stated bound where it is not (the b12x scale fold).
"""
import math

import pytest

torch = pytest.importorskip("torch")

from selector.backends import prepare as P  # noqa: E402
from selector.backends.formats import nvfp4 as nv  # noqa: E402

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
    got = _unreorder(_dequant(p.w13, folded, p.w1_alpha))      # b12x takes [up; gate]
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
    assert torch.equal(_unreorder(got), W.w13.dequantize(F64))
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
        expect = "backends.formats.nvfp4.to_mma_layout"
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
    assert p.layout == "w31_interleaved64" and p.padded == (256, I)    # H padded to 256

    def deinterleave(t, group=64):
        rows = t.shape[1]
        rest = tuple(t.shape[2:])
        return t.reshape((E, rows // (2 * group), 2, group) + rest).transpose(1, 2).reshape((E, rows) + rest)

    assert torch.equal(_unreorder(deinterleave(p.w13))[..., :H // 2], W.w13.packed)
    assert int(p.w13[..., H // 2:].count_nonzero()) == 0
    sw = nv.from_mma_layout(p.w13_sf_mma)
    s13 = nv.unswizzle_128x4(sw, 2 * I, 256 // 16)
    assert torch.equal(_bytes(_unreorder(deinterleave(s13)))[..., :H // 16], _bytes(W.w13.block_scale))
    assert torch.equal(p.w2[:, :H], W.w2.packed) and int(p.w2[:, H:].count_nonzero()) == 0
    # the 64-row groups alternate up, gate: row 64 of the prepared tensor is gate row 0
    assert torch.equal(p.w13[:, 64, :H // 2], W.w13.packed[:, 0])
    assert torch.equal(p.w13[:, 0, :H // 2], W.w13.packed[:, I])


@pytest.mark.parametrize("gated,i,expect", [(True, 48, 64), (False, 64, 128), (False, 160, 256)])
def test_cutedsl_and_trtllm_pad_the_intermediate_size_instead_of_refusing(gated, i, expect):
    """vLLM align_fp4_moe_weights_for_fi: I to 64 (gated, each half) or 128 (non-gated)."""
    g = torch.Generator().manual_seed(20)
    W = nv.quantize_moe(torch.randn(E, (2 if gated else 1) * i, H, generator=g),
                        torch.randn(E, H, i, generator=g), torch.full((E,), 1e-3), torch.full((E,), 1e-2))
    preps = [P.prepare_cutedsl_moe(W)]
    try:
        import flashinfer.fused_moe.core  # noqa: F401
        preps.append(P.prepare_trtllm_moe(W))
    except ImportError:
        pass
    for p in preps:
        assert p.padded == (256, expect)
        assert p.w13.shape[1] == (2 if gated else 1) * expect and p.w2.shape == (E, 256, expect // 2)
        assert p.geometry["intermediate_size"] == i and p.geometry["hidden_size"] == H


@pytest.mark.parametrize("gated", [True, False])
def test_trtllm_moe_permutes_weights_and_scales_identically(gated):
    pytest.importorskip("flashinfer")
    from flashinfer.fused_moe.core import _maybe_get_cached_w3_w1_permute_indices, get_w2_permute_indices_with_cache
    W = _weights(seed=8, gated=gated)
    p = P.prepare_trtllm_moe(W)
    Hp, Ip = p.padded
    assert (Hp, Ip) == (256, I if gated else 128)
    rows = 2 * Ip if gated else Ip
    w31 = P.reorder_w13_to_w31(W.w13.packed) if gated else W.w13.packed
    s31 = P.reorder_w13_to_w31(W.w13.block_scale) if gated else W.w13.block_scale
    w31 = torch.nn.functional.pad(w31, (0, (Hp - H) // 2, 0, rows - w31.shape[1]))
    s31 = torch.nn.functional.pad(s31.view(torch.uint8), (0, (Hp - H) // 16, 0, rows - s31.shape[1]))
    sf = nv.unswizzle_128x4(p.w13_sf, rows, Hp // 16)
    for e in range(E):
        perm = _maybe_get_cached_w3_w1_permute_indices({}, w31[e], 128, is_gated_act_gemm=gated)
        perm_sf = _maybe_get_cached_w3_w1_permute_indices({}, s31[e], 128, num_elts_per_sf=16,
                                                          is_gated_act_gemm=gated)
        assert torch.equal(perm, perm_sf) and sorted(perm.tolist()) == list(range(rows))
        assert torch.equal(p.w13[e], w31[e][perm])
        assert torch.equal(_bytes(sf[e]), s31[e][perm])
        w2 = torch.nn.functional.pad(W.w2.packed[e], (0, (Ip - I) // 2, 0, Hp - H))
        assert torch.equal(p.w2[e], w2[get_w2_permute_indices_with_cache({}, w2, 128)])
    a13, a2 = W.a13_scale.max(), W.a2_scale.max()
    g1 = W.w13.scale_2 * a13
    # vLLM _compute_g1_scale_c: g1_alphas * a2_gscale gated, a2_gscale (1 / a2) non-gated
    expect = g1 * (1.0 / a2) if gated else (1.0 / a2).expand(E)
    assert torch.equal(p.g1_scale_c, expect) and torch.equal(p.g1_alphas, g1)


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
    ckpt = P.canonicalize_fp4_zero_signs(W.w13.packed)
    assert torch.equal(p.w13[:, :i], ckpt[:, :i]) and torch.equal(p.w13[:, half:half + i], ckpt[:, i:])
    assert int(p.w13[:, i:half].count_nonzero()) == 0
    s13 = nv.unswizzle_128x4(p.w13_sf, rows, H // 16)
    assert torch.equal(_bytes(s13[:, half:half + i]), _bytes(W.w13.block_scale[:, i:]))
    assert p.w2.shape == (E, H, half // 2)
    assert torch.equal(p.w2[..., : i // 2], P.canonicalize_fp4_zero_signs(W.w2.packed))


def test_b12x_native_clears_fp4_negative_zero_codes():
    """vLLM _canonicalize_fp4_zero_signs_: code 0x8 (-0) becomes 0x0; other codes are kept."""
    packed = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 256)
    out = P.canonicalize_fp4_zero_signs(packed)
    lo, hi = out & 0xF, out >> 4
    plo, phi = packed & 0xF, packed >> 4
    assert torch.equal(lo, torch.where(plo == 8, 0, plo).to(torch.uint8))
    assert torch.equal(hi, torch.where(phi == 8, 0, phi).to(torch.uint8))
    g = torch.Generator().manual_seed(21)
    W = nv.quantize_moe(-torch.rand(E, 2 * I, H, generator=g) * 1e-3 + torch.randn(E, 2 * I, H, generator=g),
                        torch.randn(E, H, I, generator=g), torch.full((E,), 1e-3), torch.full((E,), 1e-2))
    assert int(((nv.unpack_e2m1(W.w13.packed)) == 8).sum()) > 0      # the quantizer writes -0
    p = P.prepare_b12x_native_moe(W)
    assert int((nv.unpack_e2m1(p.w13) == 8).sum()) == 0
    assert torch.equal(nv.decode_e2m1(nv.unpack_e2m1(p.w13)), nv.decode_e2m1(nv.unpack_e2m1(W.w13.packed)))


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


def test_marlin_scale_factor_comes_from_the_largest_scale():
    """vLLM 0.32.0 _nvfp4_compute_scale_factor: 2^floor(log2(448 * 2^7 / max(scale * 2^7)))."""
    bs = nv.to_e4m3(torch.tensor([[2.0 ** -6, 1.0, 40.0, 3.0] * 4] * 64))
    assert P.marlin_scale_factor(bs.to(torch.half)) == 2.0 ** 3            # 448 / 40 -> 8
    assert P.marlin_scale_factor(bs.to(torch.bfloat16), torch.half) == 1.0  # fp16: no rescale
    lw = nv.LinearWeights(nv.NVFP4Tensor(torch.full((64, 128), 0x11, dtype=torch.uint8), bs, torch.tensor(1.0)))
    m = P.prepare_marlin_linear(lw)
    assert m.scale_factor == 8.0 and m.flush.flushed == 0
    assert torch.equal(_marlin_decode_scales(m.scales, 64, 256) / m.scale_factor, bs.float())
    h = P.prepare_marlin_linear(lw, param_dtype=torch.half)
    assert h.scale_factor == 1.0 and h.param_dtype == torch.half
    gs = h.global_scale.to(F64) / 2.0 ** (14 - 7)                  # fp16 exponent bias 14
    assert float(gs) == 1.0
    # at factor 1, 2^-6 * 2^7 = 2 is kept, so fp16 stores the whole range {2^-6 .. 448}
    assert torch.equal(_marlin_decode_scales(h.scales, 64, 256), bs.float())


def test_marlin_reports_the_blocks_its_scale_processing_flushes():
    """Scales {2^-9, 448}: factor 1, and 2^-9 * 2^7 < 2 is set to 0 by vLLM: the block is lost.
    The report counts those blocks and the error they add; nothing is refused."""
    bs = nv.to_e4m3(torch.tensor([[2.0 ** -9, 1.0, 448.0, 3.0] * 4] * 64))
    packed = torch.full((64, 128), 0x22, dtype=torch.uint8)       # every code 1.0
    lw = nv.LinearWeights(nv.NVFP4Tensor(packed, bs, torch.tensor(1.0)))
    m = P.prepare_marlin_linear(lw)
    assert m.scale_factor == 1.0
    rep = m.flush
    assert rep.flushed == 64 * 4 and rep.blocks == 64 * 16
    assert rep.max_abs_error == 2.0 ** -9
    w = lw.weight.dequantize(F64)
    assert rep.rel_error == pytest.approx(float(w[:, (w[0] == 2.0 ** -9)].norm() / w.norm()), rel=1e-12)
    assert "flushed" in rep.describe()
    dec = _marlin_decode_scales(m.scales, 64, 256)
    assert torch.equal(dec, torch.where(bs.float() == 2.0 ** -9, 0.0, bs.float()))
    # blocks whose codes are all zero lose nothing and are not counted
    lz = nv.LinearWeights(nv.NVFP4Tensor(torch.zeros(64, 128, dtype=torch.uint8), bs, torch.tensor(1.0)))
    assert P.prepare_marlin_linear(lz).flush.flushed == 0


@pytest.mark.parametrize("n,k,expect", [(100, 256, (128, 256)), (96, 192, (128, 192)),
                                        (64, 64, (64, 128)), (200, 320, (256, 320))])
def test_marlin_linear_pads_n_and_k_like_vllm(n, k, expect):
    """vLLM marlin_padded_nk: the cheaper of (n % 64, k % 128) and (n % 128, k % 64)."""
    assert P.marlin_padded_nk(n, k) == expect
    g = torch.Generator().manual_seed(22)
    lw = nv.quantize_linear(torch.randn(n, k, generator=g))
    m = P.prepare_marlin_linear(lw)
    Np, Kp = expect
    assert (m.padded_n, m.padded_k) == expect and m.qweight.shape == (Kp // 8, Np)
    back = m.qweight.T.contiguous().view(torch.uint8)
    assert torch.equal(back[:n, :k // 2], lw.weight.packed) and int(back[n:].count_nonzero()) == 0
    assert int(back[:, k // 2:].count_nonzero()) == 0
    dec = _marlin_decode_scales(m.scales, Np, Kp) / m.scale_factor
    assert torch.equal(dec[:n, :k // 16], lw.weight.block_scale.float())


def test_marlin_moe_pads_each_shard():
    g = torch.Generator().manual_seed(23)
    i = 48
    W = nv.quantize_moe(torch.randn(E, 2 * i, H, generator=g), torch.randn(E, H, i, generator=g))
    p13, p2 = P.prepare_marlin_moe(W)
    assert p13.padded_n == 128 and p2.padded_k == 64
    back = p13.qweight[0].T.contiguous().view(torch.uint8)
    assert torch.equal(back[:i], W.w13.packed[0, :i]) and torch.equal(back[64:64 + i], W.w13.packed[0, i:])
    assert int(back[i:64].count_nonzero()) == 0
    with pytest.raises(ValueError, match="multiple of 64"):
        P.prepare_marlin_moe(nv.quantize_moe(torch.randn(E, 2 * I, 96, generator=g),
                                             torch.randn(E, 96, I, generator=g)))


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
    assert p.weight.shape == (224, 128) and p.weight_sf.shape == (256, 16)   # N padded to 32
    assert torch.equal(p.weight[:200], lw.weight.packed) and int(p.weight[200:].count_nonzero()) == 0
    assert torch.equal(_bytes(nv.unswizzle_128x4(p.weight_sf, 200, 16)), _bytes(lw.weight.block_scale))
    torch.testing.assert_close(p.alpha, lw.input_scale * lw.weight.scale_2, rtol=0, atol=0)
    torch.testing.assert_close(p.a_gscale, 1 / lw.input_scale, rtol=0, atol=0)
    p16 = P.prepare_fp4_linear(nv.LinearWeights(lw.weight))
    assert p16.alpha is None and p16.a_gscale is None
    aligned = nv.quantize_linear(torch.randn(64, 256, generator=g))
    assert P.prepare_fp4_linear(aligned).weight is aligned.weight.packed      # nothing to pad
    k16 = nv.quantize_linear(torch.randn(64, 48, generator=g))                # K = 48 -> 64
    assert P.prepare_fp4_linear(k16).weight.shape == (64, 32)
    assert P.prepare_fp4_linear(lw, pad=False).weight is lw.weight.packed     # native b12x dense


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


# ------------------------------------------------------------------------------------------------
# b12x: [up; gate], padding, ModelOpt's all-zero blocks
# ------------------------------------------------------------------------------------------------

def _from_b12x(p, W):
    """An MoEWeights holding exactly what the b12x kernel gets (scales read back from the MMA view)."""
    rows, K13 = p.w13.shape[1], p.w13.shape[2] * 2
    s13 = nv.unswizzle_128x4(nv.from_mma_layout(p.w13_sf_mma), rows, K13 // 16)
    s2 = nv.unswizzle_128x4(nv.from_mma_layout(p.w2_sf_mma), p.w2.shape[1], p.w2.shape[2] * 2 // 16)
    return nv.MoEWeights(nv.NVFP4Tensor(p.w13, s13, p.w1_alpha), nv.NVFP4Tensor(p.w2, s2, p.w2_alpha),
                         W.a13_scale, W.a2_scale)


@pytest.mark.parametrize("fold_mode", ["none", "full"])
def test_b12x_gated_layer_run_with_the_b12x_convention_equals_the_checkpoint(fold_mode):
    """FlashInfer 0.7.4's dispatcher: "w1 packs [up(0:n), gate(n:2n)]". The prepared layer, read
    with that convention by the reference, gives the checkpoint's output (exactly without a fold,
    within the fold's bound with one); read as [gate; up] it does not."""
    from selector.backends.reference import reference_moe, route
    W = _weights(sigma=1.0, seed=40)
    p = P.prepare_b12x_moe(W, fold_mode=fold_mode)
    assert p.layout == "w31"
    g = torch.Generator().manual_seed(41)
    x = torch.randn(16, H, generator=g)
    tw, ti = route(torch.randn(16, E, generator=g), 2)
    ref = reference_moe(x, W, tw, ti, quant="nvfp4_w4a16")
    K = _from_b12x(p, W)
    got = reference_moe(x, K, tw, ti, quant="nvfp4_w4a16", w13_order="up_gate")
    rel = float((got - ref).norm() / ref.norm())
    assert rel < (1e-6 if fold_mode == "none" else 2 * P.FOLD_MAX_REL_ERROR), rel
    wrong = reference_moe(x, K, tw, ti, quant="nvfp4_w4a16")
    assert float((wrong - ref).norm() / ref.norm()) > 0.3


def test_b12x_pads_a_non_gated_intermediate_to_128_and_refuses_an_unaligned_gated_one():
    g = torch.Generator().manual_seed(42)
    W = nv.quantize_moe(torch.randn(E, 96, H, generator=g), torch.randn(E, H, 96, generator=g))
    p = P.prepare_b12x_moe(W, quant="nvfp4_w4a16")
    assert p.w13.shape == (E, 128, H // 2) and p.w2.shape == (E, H, 64) and p.layout == "w13"
    assert torch.equal(p.w13[:, :96], W.w13.packed) and int(p.w13[:, 96:].count_nonzero()) == 0
    assert torch.equal(p.w2[..., :48], W.w2.packed) and int(p.w2[..., 48:].count_nonzero()) == 0
    s2 = nv.unswizzle_128x4(p.w2_sf, H, 8)
    assert int(_bytes(s2[..., 6:]).count_nonzero()) == 0
    Wg = nv.quantize_moe(torch.randn(E, 2 * 96, H, generator=g), torch.randn(E, H, 96, generator=g))
    with pytest.raises(ValueError, match="2I = 192 rows, not a multiple of 128"):
        P.prepare_b12x_moe(Wg)


def test_fold_ignores_modelopt_all_zero_blocks():
    """ModelOpt writes 1.0 (not 0) as the scale of an all-zero block; folded with a tiny scale_2
    it becomes subnormal or 0, which changes nothing (every code is 0): not counted, not refused."""
    W = _weights(sigma=1.0, seed=43)
    packed, bs = W.w13.packed.clone(), W.w13.block_scale.clone()
    packed[:, 5, 8:16] = 0                          # block 1 of row 5: all codes zero
    bs[:, 5, 1] = nv.to_e4m3(torch.tensor(1.0))     # ModelOpt's convention
    s2 = torch.full((E,), 2.0 ** -12)               # tiny global scale: 1.0 * 2^-12 is subnormal
    bs = nv.to_e4m3(bs.float().clamp(min=2.0 ** 2))  # the other blocks stay normal after the fold
    bs[:, 5, 1] = nv.to_e4m3(torch.tensor(1.0))
    w13 = nv.NVFP4Tensor(packed, bs, s2)
    _, _, with_codes = P.fold_global_scale(bs, s2, strict=False, packed=packed)
    _, _, blind = P.fold_global_scale(bs, s2, strict=False)
    assert with_codes.ok and with_codes.nonzero == blind.nonzero - E
    assert not blind.ok                              # what the old check refused
    Wz = nv.MoEWeights(w13, W.w2, W.a13_scale, W.a2_scale)
    P.prepare_b12x_moe(Wz)                           # a valid checkpoint prepares


# ------------------------------------------------------------------------------------------------
# validation: one clear message naming the tensor, expected and actual
# ------------------------------------------------------------------------------------------------

def _replace(W, **kw):
    d = dict(w13=W.w13, w2=W.w2, a13_scale=W.a13_scale, a2_scale=W.a2_scale)
    d.update(kw)
    return nv.MoEWeights(**d)


def _bad_inputs():
    W = _weights(seed=44)
    t = W.w13
    yield "bf16 block scales", _replace(W, w13=nv.NVFP4Tensor(t.packed, t.block_scale.to(torch.bfloat16), t.scale_2)), \
        r"w13.block_scale: expected float8_e4m3fn \[4, 128, 8\], got bfloat16 \[4, 128, 8\]"
    yield "a scale row missing", _replace(W, w13=nv.NVFP4Tensor(t.packed, t.block_scale[:, :-1], t.scale_2)), \
        r"w13.block_scale: expected float8_e4m3fn \[4, 128, 8\], got float8_e4m3fn \[4, 127, 8\]"
    w2 = nv.quantize(torch.randn(E, 2 * H, I), global_dims=1)
    yield "w2 hidden size", _replace(W, w2=w2), r"w2.packed: expected uint8 \[4, 128, 32\], got uint8 \[4, 256, 32\]"
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        yield f"a2_scale {bad}", _replace(W, a2_scale=torch.full((E,), bad)), "a2_scale must be finite and > 0"
    yield "short a13_scale", _replace(W, a13_scale=torch.full((E - 1,), 1e-3)), r"a13_scale: expected .*\[4\]"
    yield "scale_2 zero", _replace(W, w2=nv.NVFP4Tensor(W.w2.packed, W.w2.block_scale, torch.zeros(E))), \
        "w2.scale_2 must be finite and > 0"
    yield "w13 rows", _replace(W, w13=nv.quantize(torch.randn(E, 100, H), global_dims=1)), "expected I = 64"


@pytest.mark.parametrize("name", [n for n, _, _ in _bad_inputs()])
@pytest.mark.parametrize("prepare", ["b12x", "flashinfer_cutlass", "cutedsl", "b12x_native", "marlin",
                                     "emulation"])
def test_every_prepare_validates_its_inputs(name, prepare):
    W, msg = next((w, m) for n, w, m in _bad_inputs() if n == name)
    with pytest.raises(ValueError, match=msg):
        PREPARES[prepare](W)


def test_linear_prepare_validates_its_inputs():
    lw = nv.quantize_linear(torch.randn(64, 128), input_scale=1e-3)
    bad = nv.LinearWeights(nv.NVFP4Tensor(lw.weight.packed, lw.weight.block_scale[:-1], lw.weight.scale_2))
    for f in (P.prepare_fp4_linear, P.prepare_marlin_linear, P.prepare_emulation):
        with pytest.raises(ValueError, match=r"weight.block_scale: expected float8_e4m3fn \[64, 8\]"):
            f(bad)
        with pytest.raises(ValueError, match="input_scale must be finite"):
            f(nv.LinearWeights(lw.weight, torch.tensor(0.0)))
    with pytest.raises(ValueError, match="param_dtype"):
        P.prepare_marlin_linear(lw, param_dtype=torch.float32)
