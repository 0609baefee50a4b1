"""NVFP4 quantize/dequantize and scale layouts (backends.nvfp4), against float64 and FlashInfer's own code."""
import math

import pytest

torch = pytest.importorskip("torch")

from selector.backends import nvfp4 as nv  # noqa: E402

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _flashinfer():
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"flashinfer not importable here: {exc}")
    return flashinfer


# ------------------------------------------------------------------------------------------------
# element formats
# ------------------------------------------------------------------------------------------------

def test_e2m1_codes_round_trip_every_value():
    values = torch.tensor(GRID + [-v for v in GRID])
    codes = nv.encode_e2m1(values)
    assert torch.equal(nv.decode_e2m1(codes), values)
    assert codes[:8].tolist() == list(range(8))
    assert codes[9:].tolist() == list(range(9, 16))


def test_e2m1_ties_go_to_even_and_saturate():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.4, 1e9, -0.75, -5.0, -2.5, 0.2499])
    expect = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -1.0, -4.0, -2.0, 0.0]
    assert nv.decode_e2m1(nv.encode_e2m1(x)).tolist() == expect


def test_e2m1_rounds_to_nearest_grid_value():
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(20000, generator=g, dtype=torch.float64) * 16 - 8)
    got = nv.decode_e2m1(nv.encode_e2m1(x.float()), torch.float64)
    grid = torch.tensor(GRID + [-v for v in GRID[1:]], dtype=torch.float64)
    nearest = grid[(x.unsqueeze(1) - grid).abs().argmin(1)]
    assert torch.equal(got.abs(), nearest.abs())


def test_pack_puts_even_elements_in_the_low_nibble():
    codes = torch.tensor([[1, 2, 15, 8, 7, 0]], dtype=torch.uint8)
    packed = nv.pack_e2m1(codes)
    assert packed.tolist() == [[1 | 2 << 4, 15 | 8 << 4, 7]]
    assert torch.equal(nv.unpack_e2m1(packed), codes)


def test_e4m3_rounds_to_nearest_even_and_saturates():
    x = torch.tensor([17.0, 19.0, 500.0, -1000.0, 2.0 ** -10, 3 * 2.0 ** -10, 448.0])
    assert nv.to_e4m3(x).float().tolist() == [16.0, 20.0, 448.0, -448.0, 0.0, 2.0 ** -8, 448.0]


# ------------------------------------------------------------------------------------------------
# quantize / dequantize
# ------------------------------------------------------------------------------------------------

def _inputs(kind, g):
    shape = (64, 512)
    if kind == "gaussian":
        return torch.randn(shape, generator=g)
    if kind == "heavy_tailed":
        return torch.randn(shape, generator=g) ** 3
    if kind == "uniform":
        return torch.rand(shape, generator=g) * 2 - 1
    if kind == "tiny":
        return torch.randn(shape, generator=g) * 1e-4
    if kind == "huge":
        return torch.randn(shape, generator=g) * 1e4
    if kind == "zero_blocks":
        x = torch.randn(shape, generator=g)
        x[:, 16:48] = 0
        x[3] = 0
        return x
    if kind == "bf16_weights":
        return (torch.randn(shape, generator=g) * 0.02).bfloat16()
    raise AssertionError(kind)


KINDS = ["gaussian", "heavy_tailed", "uniform", "tiny", "huge", "zero_blocks", "bf16_weights"]


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_error_within_half_a_step(kind):
    """|x - dq(q(x))| <= half an E2M1 step times the block's effective scale, for every element."""
    x = _inputs(kind, torch.Generator().manual_seed(2))
    q = nv.quantize(x)
    dq = q.dequantize(torch.float64)
    err = (x.double() - dq).abs()
    bound = nv.roundtrip_error_bound(x, q)
    assert bool(torch.all(err <= bound * (1 + 1e-6) + 1e-30)), float((err - bound).max())
    assert q.packed.dtype == torch.uint8 and q.packed.shape == (64, 256)
    assert q.block_scale.dtype == torch.float8_e4m3fn and q.block_scale.shape == (64, 32)


def test_round_trip_relative_error_on_gaussian_data():
    x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(3))
    dq = nv.quantize(x).dequantize(torch.float64)
    rel_rms = float((x.double() - dq).norm() / x.double().norm())
    # NVFP4 on Gaussian data: ~9.5% RMS relative error (measured 0.0953 at this seed)
    assert 0.08 < rel_rms < 0.11, rel_rms


def test_values_on_the_grid_round_trip_exactly():
    """x = e2m1 * bs * scale_2 with a 6 in every block (so amax/6 = bs) is reproduced bit for bit."""
    g = torch.Generator().manual_seed(4)
    rows, blocks = 8, 4
    grid = torch.tensor(GRID + [-v for v in GRID[1:]])
    vals = grid[torch.randint(0, len(grid), (rows, blocks, 16), generator=g)]
    vals[..., 0] = 6.0
    bs = nv.to_e4m3(torch.rand(rows, blocks, generator=g) * 400 + 1).float()
    scale_2 = torch.tensor(0.0123)
    x = vals * bs.unsqueeze(-1) * scale_2
    x = x.reshape(rows, blocks * 16)
    q = nv.quantize(x, scale_2)
    assert torch.equal(q.block_scale.float(), bs)
    assert torch.equal(q.dequantize(), x)


def test_scale_2_is_amax_over_2688_and_the_top_block_scale_is_448():
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(5))
    q = nv.quantize(x)
    assert float(q.scale_2) == pytest.approx(float(x.abs().max()) / 2688, rel=1e-6)
    assert float(q.block_scale.float().max()) == 448.0


def test_per_expert_global_scales():
    w = (torch.randn(3, 64, 128, generator=torch.Generator().manual_seed(6))
         * torch.tensor([0.01, 1.0, 50.0]).view(3, 1, 1))
    q = nv.quantize(w, global_dims=1)
    assert q.scale_2.shape == (3,)
    for e in range(3):
        qe = nv.quantize(w[e])
        assert torch.equal(q.packed[e], qe.packed) and torch.equal(q.block_scale[e], qe.block_scale)
        assert torch.equal(q.dequantize()[e], qe.dequantize())


def test_quantize_rejects_k_not_multiple_of_16():
    with pytest.raises(ValueError, match="multiple of 16"):
        nv.quantize(torch.randn(4, 24))


def test_dequantize_matches_flashinfer_cpu_decoder():
    """FlashInfer's own CPU decoder (nibble order, E4M3 scales, global scale) agrees exactly."""
    _flashinfer()
    from flashinfer.quantization.fp4_quantization import _e2m1_and_ufp8sf_scale_to_float_cpu
    x = torch.randn(48, 256, generator=torch.Generator().manual_seed(7))
    q = nv.quantize(x)
    theirs = _e2m1_and_ufp8sf_scale_to_float_cpu(q.packed, q.block_scale.view(torch.uint8),
                                                 q.scale_2.reshape(1), 16, 1, False)
    # same values; FlashInfer multiplies (e2m1 * sf) * gs, we e2m1 * (sf * gs): float32 rounding only
    torch.testing.assert_close(theirs, q.dequantize(), rtol=1e-6, atol=0)
    assert torch.equal(nv.unpack_e2m1(q.packed) % 8 == 0, theirs == 0)


# ------------------------------------------------------------------------------------------------
# layouts
# ------------------------------------------------------------------------------------------------

def _formula(r, c, padded_cols):
    # FlashInfer quantization_cute_dsl_utils.compute_sf_index_swizzled_128x4_gpu
    return (c % 4) + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (r // 128) * 128 * padded_cols


@pytest.mark.parametrize("rows,cols", [(128, 4), (300, 12), (64, 3), (257, 9)])
def test_swizzle_128x4_places_every_scale_where_flashinfer_kernels_read_it(rows, cols):
    sf = (torch.arange(rows * cols) % 251 + 1).to(torch.uint8).reshape(rows, cols)
    sw = nv.swizzle_128x4(sf)
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    assert sw.shape == (rp, cp)
    flat = sw.reshape(-1)
    pos = torch.tensor([[_formula(r, c, cp) for c in range(cols)] for r in range(rows)])
    assert torch.equal(flat[pos], sf)
    mask = torch.ones(rp * cp, dtype=torch.bool)
    mask[pos.reshape(-1)] = False
    assert int(flat[mask].sum()) == 0          # padding is zero
    assert torch.equal(nv.unswizzle_128x4(sw, rows, cols), sf)


def test_swizzle_keeps_float8_dtype_and_experts():
    sf = nv.to_e4m3(torch.rand(3, 200, 8, generator=torch.Generator().manual_seed(8)) * 448)
    sw = nv.swizzle_128x4(sf)
    assert sw.dtype == torch.float8_e4m3fn and sw.shape == (3, 256, 8)
    for e in range(3):
        assert torch.equal(sw[e].view(torch.uint8), nv.swizzle_128x4(sf[e]).view(torch.uint8))
    assert torch.equal(nv.unswizzle_128x4(sw, 200, 8).view(torch.uint8), sf.view(torch.uint8))


def test_swizzle_inverts_with_flashinfers_reference_unswizzle():
    _flashinfer()
    from flashinfer.trace.templates.gemm import _unswizzle_sf_128x4
    sf = (torch.arange(300 * 12) % 253).to(torch.uint8).reshape(300, 12)
    assert torch.equal(_unswizzle_sf_128x4(nv.swizzle_128x4(sf).reshape(-1), 300, 12), sf)


def test_mma_layout_positions_and_inverse():
    E, m, k = 2, 256, 512                       # k // 16 = 32 scale columns
    sf = (torch.arange(E * m * (k // 16)) % 249).to(torch.uint8).reshape(E, m, k // 16)
    sw = nv.swizzle_128x4(sf)
    mma = nv.to_mma_layout(sw, m, k, E)
    assert mma.shape == (32, 4, m // 128, 4, k // 64, E)
    for g, r, c in [(0, 0, 0), (1, 37, 5), (0, 255, 31), (1, 130, 17)]:
        assert mma[r % 32, (r % 128) // 32, r // 128, c % 4, c // 4, g] == sf[g, r, c]
    assert torch.equal(nv.from_mma_layout(mma), sw)


def test_mma_layout_equals_flashinfer_convert_sf_to_mma_layout():
    _flashinfer()
    from flashinfer.cute_dsl import convert_sf_to_mma_layout
    E, m, k = 3, 256, 256
    sf = nv.to_e4m3(torch.rand(E, m, k // 16, generator=torch.Generator().manual_seed(9)) * 448)
    sw = nv.swizzle_128x4(sf)
    ours = nv.to_mma_layout(sw, m, k, E)
    theirs = convert_sf_to_mma_layout(sw.reshape(E * m, -1), m=m, k=k, num_groups=E)
    assert ours.shape == theirs.shape and ours.stride() == theirs.stride()
    assert torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8))


@pytest.mark.slow
def test_nvfp4_module_imports_no_torch():
    import subprocess
    import sys
    code = "import sys, backends.nvfp4, backends.reference, backends.prepare; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=__import__("pathlib").Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


def test_e4m3_constants():
    assert nv.E4M3_MAX == 448.0 and nv.E4M3_MIN_NORMAL == 2.0 ** -6
    assert math.isclose(nv.E4M3_REL_HALF_ULP, 1 / 16)
