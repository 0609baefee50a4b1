"""backends/kernels/fp8_act_quant.py: the one-launch Triton activation quantizer gives the torch form's
codes and scales bit for bit (``backends.formats.fp8.quantize_activation`` with
``SELECTOR_FP8_ACT_QUANT=torch``), on every scheme, odd sizes, rows of zeros and saturating
inputs. CUDA (SM >= 8.9) with triton only; on the CPU the dispatch stays on the torch form."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from selector.backends.formats import fp8  # noqa: E402

QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")


def test_cpu_tensors_keep_the_torch_form():
    x = torch.randn(3, 200).bfloat16()
    q, s = fp8.quantize_activation(x, "fp8_block")
    assert q.shape == (3, 256) and s.shape == (3, 2)


def _cuda_fp8() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.skipif(not _cuda_fp8(), reason="needs a CUDA GPU of SM >= 8.9 and triton")
@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("shape", [(1, 7168), (3, 200), (16, 4096), (67, 18432), (257, 272),
                                   (1024, 1000)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_fused_equals_the_torch_form(monkeypatch, quant, shape, dtype):
    from selector.backends.kernels import fp8_act_quant
    g = torch.Generator(device="cuda").manual_seed(hash((quant, shape, dtype)) % 2 ** 31)
    x = (torch.randn(shape, generator=g, device="cuda") * 3).to(getattr(torch, dtype))
    x[0, : min(5, shape[1])] = 0
    if shape[0] > 1:
        x[1] = 0  # a row of zeros: the MIN_AMAX scale
    x[-1, -1] = 1e4  # an outlier
    scale = torch.tensor(2.0 ** -5, device="cuda")  # static: saturates the outliers
    q1, s1 = fp8_act_quant.quantize_activation(x, quant, scale)
    monkeypatch.setenv("SELECTOR_FP8_ACT_QUANT", "torch")
    q0, s0 = fp8.quantize_activation(x, quant, scale)
    assert q1.shape == q0.shape and s1.shape == s0.shape, (q1.shape, q0.shape, s1.shape, s0.shape)
    assert torch.equal(s1, s0)
    assert torch.equal(q1.view(torch.uint8), q0.view(torch.uint8)), int(
        (q1.view(torch.uint8) != q0.view(torch.uint8)).sum())
    monkeypatch.delenv("SELECTOR_FP8_ACT_QUANT")
    q2, s2 = fp8.quantize_activation(x, quant, scale)  # the dispatch takes the fused form
    assert torch.equal(q2.view(torch.uint8), q0.view(torch.uint8)) and torch.equal(s2, s0)


@pytest.mark.skipif(not _cuda_fp8(), reason="needs a CUDA GPU of SM >= 8.9 and triton")
@pytest.mark.parametrize("m", [1, 5, 16])
def test_split_k_decode_gemm_matches_the_reference(m):
    """triton_block_fp8 at decode splits K (backends/wrappers/triton_fp8.py split_k): the same result as
    one split up to float32 summation order, and within verify's FP8 linear bound of the
    float64 reference, with and without a bias."""
    from selector.backends.reference import reference_fp8_linear
    from selector.backends.wrappers.triton_fp8 import _sm_count, block_fp8_matmul, split_k
    from selector.inspect.verify import BOUNDS
    g = torch.Generator(device="cuda").manual_seed(m)
    n, k = 320, 2176  # 5 tiles of 64 columns, 17 K blocks: two splits, a partial last block
    assert split_k(m, n, -(-k // 128), 64, _sm_count(torch.device("cuda"))) > 1
    w = fp8.make_linear_weights(torch.randn(n, k, generator=g, device="cuda") / k ** 0.5,
                                "fp8_block", bias=torch.randn(n, generator=g, device="cuda"))
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    a, sa = fp8.quantize_activation(x, "fp8_block")
    for bias in (None, w.bias.float()):
        y = block_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16, bias)
        one = block_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16, bias,
                               cfg=dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4,
                                        SPLIT_K=1))
        ww = w if bias is not None else fp8.Fp8LinearWeights(w.weight, w.weight_scale,
                                                             "fp8_block")
        ref = reference_fp8_linear(x.double(), ww, compute_dtype=torch.float64).double()
        err = float((y.double() - ref).abs().max() / ref.abs().max())
        assert err <= BOUNDS["linear", "fp8_block"].max_rel_err, err
        assert float((y.float() - one.float()).abs().max()) <= 2 ** -7 * float(one.abs().max())


@pytest.mark.skipif(not _cuda_fp8(), reason="needs a CUDA GPU of SM >= 8.9 and triton")
def test_split_k_in_one_launch_is_deterministic_and_leaves_its_counters_at_zero():
    """Split-K sums its partials in the launch (the split that arrives last, in a fixed order):
    repeated calls are bit-identical, a CUDA graph's replays equal the eager call, two streams
    at once each get their own counters, and every counter is back at zero afterwards."""
    from selector.backends.wrappers import triton_fp8
    from selector.backends.wrappers.triton_fp8 import scaled_fp8_matmul
    g = torch.Generator(device="cuda").manual_seed(3)
    n, k = 4096, 14336  # Llama-3.1-8B's down_proj: 64 tiles, split-K at decode
    w = fp8.make_linear_weights(torch.randn(n, k, generator=g, device="cuda") / k ** 0.5,
                                "fp8_channel")
    xs = [torch.randn(t, k, generator=g, device="cuda").bfloat16() for t in (1, 16)]
    qs = [fp8.quantize_activation(x, "fp8_channel") for x in xs]
    one = dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4, SPLIT_K=1)

    def run(i, cfg=None):
        a, sa = qs[i]
        return scaled_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16, cfg=cfg)

    for i in range(2):
        first = run(i)
        for _ in range(20):
            assert torch.equal(run(i), first)
        ref = run(i, one)
        assert float((first.float() - ref.float()).abs().max()) <= 2 ** -7 * float(
            ref.float().abs().max())
    side = [torch.cuda.Stream(), torch.cuda.Stream()]
    want = [run(0), run(1)]
    torch.cuda.synchronize()
    got = [[], []]
    for _ in range(10):
        for i, s in enumerate(side):
            with torch.cuda.stream(s):
                got[i].append(run(i))
    torch.cuda.synchronize()
    for i in range(2):
        assert all(torch.equal(y, want[i]) for y in got[i])
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run(0)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        captured = run(0)
    for _ in range(5):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, want[0])
    for locks in triton_fp8._COUNTERS.values():
        assert int(locks.abs().sum()) == 0


# -- the tile and split-K choices on the host (no GPU: what decides them, both sides of each bound)

def test_split_k_splits_decode_only_when_the_output_has_few_tiles():
    from selector.backends.wrappers.triton_fp8 import split_k
    # Llama-3.1-8B's down_proj (N 4096: 64 tiles of 64) on 132 SMs, 112 K blocks: 5 splits
    assert split_k(1, 4096, 112, 64, 132) == 5 and split_k(16, 4096, 112, 64, 132) == 5
    assert split_k(17, 4096, 112, 64, 132) == 1  # past decode: one split
    assert split_k(1, 64 * 264, 112, 64, 132) == 1  # two waves of tiles already
    assert split_k(1, 4096, 16, 64, 132) == 2  # each split at least 8 K blocks
    assert split_k(1, 4096, 7, 64, 132) == 1


def test_scaled_tile_config_takes_the_prefill_tile_where_it_fits(monkeypatch):
    from selector.backends.wrappers import triton_fp8
    cuda = torch.device("cuda", 0)
    big = triton_fp8.LARGE_SCALED_SMEM
    assert big == 3 * (128 + 256) * 128 == 147456
    monkeypatch.setattr(triton_fp8, "_smem_per_block", lambda device: 232448)  # H100, H200
    assert triton_fp8.scaled_tile_config(2048, cuda) == triton_fp8.LARGE_SCALED
    assert triton_fp8.scaled_tile_config(2047, cuda) == triton_fp8.tile_config(2047)
    assert triton_fp8.scaled_tile_config(16, cuda) == triton_fp8.tile_config(16)
    monkeypatch.setattr(triton_fp8, "_smem_per_block", lambda device: big)
    assert triton_fp8.scaled_tile_config(4096, cuda) == triton_fp8.LARGE_SCALED
    monkeypatch.setattr(triton_fp8, "_smem_per_block", lambda device: 101376)  # SM 8.9 / 12.0
    assert triton_fp8.scaled_tile_config(4096, cuda) == triton_fp8.tile_config(4096)
    # the interpreter's CPU tensors never take it (and never ask the CUDA runtime)
    monkeypatch.setattr(triton_fp8, "_smem_per_block", lambda device: 1 / 0)
    assert triton_fp8.scaled_tile_config(4096, torch.device("cpu")) == \
        triton_fp8.tile_config(4096)
    # a copy: a caller that pops SPLIT_K or BLOCK_K does not change the shipped tile
    triton_fp8.scaled_tile_config(4096, torch.device("cpu")).clear()
    assert triton_fp8.tile_config(4096)["BLOCK_N"] == 128


def test_split_workspace_on_the_cpu():
    from selector.backends.wrappers.triton_fp8 import _split_workspace
    like = torch.empty(3, 5)
    assert _split_workspace(1, 3, 5, 1, like) == (like, like)
    ws, locks = _split_workspace(4, 3, 5, 2, like)
    assert ws.shape == (4, 3, 5) and ws.dtype == torch.float32
    assert locks.shape == (2,) and locks.dtype == torch.int32 and not locks.any()


def test_the_per_token_launch_reads_a_decode_row_once_and_prefill_rows_in_chunks():
    from selector.backends.kernels.fp8_act_quant import PREFILL_ROWS, _row_launch
    assert _row_launch(1, 14336) == (16384, 16)  # one read, 16 warps
    assert _row_launch(PREFILL_ROWS, 14336) == (16384, 16)
    assert _row_launch(1, 4096) == (4096, 4) and _row_launch(1, 200) == (256, 4)
    assert _row_launch(1, 20000) == (16384, 16)  # past ROW_CHUNK: two reads
    assert _row_launch(PREFILL_ROWS + 1, 14336) == (4096, 8)  # chunks of 4,096, 8 warps
    assert _row_launch(4096, 4096) == (4096, 4) and _row_launch(4096, 272) == (512, 4)


@pytest.mark.skipif(_cuda_fp8(), reason="on a GPU the compiled kernels are compared bit for bit "
                    "(test_fused_equals_the_torch_form)")
def test_the_kernels_under_the_interpreter():
    """The quantizer's kernels in Triton's interpreter on the CPU (a child process), every
    scheme, decode and prefill rows, a row read twice (K > ROW_CHUNK), a row of zeros and an
    outlier: the scales equal the torch form's bit for bit, the block codes' padding is zero,
    and the codes agree but for the interpreter's own E4M3 conversion, which does not round to
    nearest even (triton 3.9 on this machine: 31.9 -> 16 where the GPU gives 32, 42 -> 44 where
    it gives 40): each code is the torch form's, or of its sign within a factor of two, or both
    are below 2^-6 (the GPU test compares every code)."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import torch
        from selector.backends.formats import fp8
        from selector.backends.kernels import fp8_act_quant as aq
        g = torch.Generator().manual_seed(0)
        for shape in [(1, 200), (2, 16400), (67, 300), (70, 1000), (3, 96)]:
            x = (torch.randn(shape, generator=g) * 3).bfloat16()
            if shape == (3, 96):  # a column-major view: the kernels' rows need unit stride
                x = (torch.randn(96, 3, generator=g) * 3).bfloat16().t()
            x[0, :5] = 0
            if shape[0] > 1:
                x[1] = 0  # a row of zeros: the MIN_AMAX scale
            x[-1, -1] = 1e4
            s = torch.tensor(2.0 ** -5)
            for q in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block"):
                q1, s1 = aq.quantize_activation(x, q, s)
                q0, s0 = fp8.quantize_activation(x, q, s)
                assert q1.shape == q0.shape and s1.shape == s0.shape, (shape, q)
                assert torch.equal(s1, s0), (shape, q)
                a, b = q1.float(), q0.float()
                same = a == b
                near = (torch.sign(a) == torch.sign(b)) & (a.abs() <= 2 * b.abs()) & (
                    b.abs() <= 2 * a.abs())
                tiny = (a.abs() < 2 ** -5) & (b.abs() < 2 ** -6)
                assert bool((same | near | tiny).all()), (shape, q)
                assert float(same.float().mean()) > 0.6, (shape, q, float(same.float().mean()))
                if q == "fp8_block":
                    assert not a[:, shape[1]:].any()
                print(shape, q, "ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count(" ok") == 20, r.stdout


def test_cpu_tensors_outside_the_interpreter_are_refused_by_name(monkeypatch):
    pytest.importorskip("triton")
    from selector.backends.kernels import fp8_act_quant
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="fp8_act_quant runs on CUDA tensors"):
        fp8_act_quant.quantize_activation(torch.ones(2, 8), "fp8_channel")
    with pytest.raises(ValueError, match=r"x has shape \[8\]; expected \[M, K\]"):
        fp8_act_quant.quantize_activation(torch.ones(8), "fp8_channel")
