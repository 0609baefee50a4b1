"""The emulation's fused Triton MoE (``backends/kernels/nvfp4_moe_triton.py``) against the grouped emulation.

The kernels run in Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, a child process, as
tests/test_emulation_grouped.py runs the quantizer). They take the grouped emulation's rounding
steps, so they give its bits except where a float32 intermediate computed in another order (FC1's
sum over the kernel's K tiles against torch's bmm) lands on the other side of a bf16 rounding: one
intermediate value one bf16 step away, seen in the output through FC2 (seed 3 of the every-
activation case: 1 of 1,360 outputs, -16.375 against -16.75). A case passes with at most 1 output
in 200 different, by at most 1% of its largest output; a wrong activation, layout, scale or routing
changes most of them. The block table (``route_blocks``) is pure torch and checked here directly.
Skipped without Triton.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from selector.backends import reference as R  # noqa: E402
from selector.backends.formats import nvfp4 as nv  # noqa: E402
from selector.backends.reference import emulate as EM  # noqa: E402

_CHILD = """
import sys, torch
from selector.backends.formats import nvfp4 as nv
from selector.backends.reference import emulate_moe
E, k, H, I, T = {shape}
seed = {seed}
print("seed", seed)
g = torch.Generator().manual_seed(seed)
x = torch.randn(T, H, generator=g).bfloat16()
tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
ti = ti.int()
ti[0, k - 1] = -1  # an unrouted slot
bad, flips = [], []
for gated, act, quant, scales, order, limit in {cases}:
    w13 = nv.quantize(torch.randn(E, (2 if gated else 1) * I, H, generator=g), global_dims=1)
    w2 = nv.quantize(torch.randn(E, H, I, generator=g), global_dims=1)
    sc = {{"none": (None, None), "scalar": (torch.tensor(0.004), torch.full((E,), 0.002)),
          "expert": (torch.rand(E, generator=g) * 0.01 + 1e-3, torch.tensor(0.002))}}[scales]
    W = nv.MoEWeights(w13, w2, *sc)
    kw = dict(activation=act, quant=quant, w13_order=order, swiglu_limit=limit)
    ref = emulate_moe(x, W, tw, ti, grouped=True, fused=False, **kw)
    y = emulate_moe(x, W, tw, ti, fused=True, **kw)
    d = (y.float() - ref.float()).abs()
    n = int((d > 0).sum())
    # the same bits but for a rounding flip: at most 1 output in 200 differs, by at most 1% of
    # the largest output (a wrong activation, layout, scale or routing changes most outputs)
    if n > max(1, y.numel() // 200) or float(d.max()) > 0.01 * float(ref.float().abs().max()):
        bad.append((gated, act, quant, scales, order, limit, n, float(d.max())))
    elif n:
        flips.append((act, quant, scales, order, limit, n, float(d.max())))
print("flips", flips)
print("bad", bad)
print("done")
"""


def _run_child(shape, cases, seed=0):
    code = _CHILD.format(shape=shape, cases=cases, seed=seed)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0 and "done" in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
    assert "bad []" in p.stdout, p.stdout[-3000:]


def test_fused_matches_grouped_emulation_in_the_interpreter():
    """Tiny odd shape (H 48 and I 32: partial K and N tiles), W4A16 silu, W4A4 dynamic and W4A4
    with given scales (FC1 then writes FC2's NVFP4 input itself: QUANT_OUT); top_k 2, so FC2
    adds each token's contributions into its row (ATOMIC)."""
    pytest.importorskip("triton")
    _run_child((4, 2, 48, 32, 3), [(True, "silu", "nvfp4_w4a16", "none", "gate_up", None),
                                   (True, "silu", "nvfp4", "none", "gate_up", None),
                                   (True, "silu", "nvfp4", "scalar", "gate_up", None)])


@pytest.mark.slow
def test_fused_matches_grouped_emulation_every_activation_in_the_interpreter():
    """Every activation the emulation implements, W4A16 and W4A4 with dynamic, scalar and
    per-expert activation scales, both w13 orders, the swiglu_limit clamp; 8 experts, top-2,
    H 272 and I 144 (verify's odd sizes), 5 tokens (more than one row in some experts)."""
    pytest.importorskip("triton")
    cases = []
    for act in R.GATED_ACTIVATIONS:
        cases.append((True, act, "nvfp4_w4a16", "none", "gate_up", None))
    for act in R.NON_GATED_ACTIVATIONS:
        cases.append((False, act, "nvfp4_w4a16", "none", "gate_up", None))
    cases += [(True, "silu", "nvfp4_w4a16", "none", "up_gate", None),
              (True, "silu", "nvfp4_w4a16", "none", "gate_up", 5.0),
              (True, "swiglustep", "nvfp4", "scalar", "up_gate", 3.0),
              (True, "swigluoai", "nvfp4", "expert", "gate_up", None),
              (True, "silu", "nvfp4", "scalar", "gate_up", None),
              (True, "gelu_tanh", "nvfp4", "none", "gate_up", None),
              (False, "relu2", "nvfp4", "expert", "gate_up", None)]
    _run_child((8, 2, 272, 144, 5), cases, seed=3)


def test_route_blocks_cover_every_routed_row_once():
    """The block table: every routed (token, slot) row in exactly one block of its expert, blocks
    at most BLOCK_M rows, the surplus blocks marked -1, unrouted rows in none (seeded sweep)."""
    from selector.backends.kernels.nvfp4_moe_triton import route_blocks
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        E = int(torch.randint(1, 40, (1,), generator=g))
        T = int(torch.randint(1, 70, (1,), generator=g))
        k = int(torch.randint(1, min(E, 8) + 1, (1,), generator=g))
        bm = (16, 32, 64)[seed % 3]
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
        ids[torch.rand(T, k, generator=g) < 0.1] = -1
        order, be, bs, bend, row_e = route_blocks(ids, E, bm)
        flat = ids.reshape(-1).long()
        seen = torch.zeros(T * k, dtype=torch.long)
        for b in range(be.numel()):
            e = int(be[b])
            if e < 0:
                continue
            r0, r1 = int(bs[b]), min(int(bs[b]) + bm, int(bend[b]))
            assert r1 > r0, f"seed {seed}: empty block {b}"
            rows = order[r0:r1]
            assert bool((flat[rows] == e).all()), f"seed {seed}: block {b} mixes experts"
            seen[rows] += 1
        assert torch.equal(seen, (flat >= 0).long()), f"seed {seed}"
        assert torch.equal(row_e, torch.where(flat >= 0, flat, E)[order]), f"seed {seed}"


def test_route_blocks_kernel_gives_the_torch_table():
    """The one-program Triton block table (Triton's interpreter, a child process) equals the torch
    form on every block a program reads (expert >= 0), and marks the same blocks unused."""
    code = textwrap.dedent("""
        import torch
        from selector.backends.kernels.nvfp4_moe_triton import route_blocks
        bad = 0
        for seed in range(12):
            g = torch.Generator().manual_seed(seed)
            E = int(torch.randint(1, 300, (1,), generator=g))
            T = int(torch.randint(1, 90, (1,), generator=g))
            k = int(torch.randint(1, min(E, 8) + 1, (1,), generator=g))
            bm = (16, 32, 64)[seed % 3]
            ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
            ids[torch.rand(T, k, generator=g) < 0.1] = -1
            a = route_blocks(ids, E, bm, kernel=False)
            b = route_blocks(ids, E, bm, kernel=True)
            used = a[1] >= 0
            same = (torch.equal(a[0], b[0]) and torch.equal(a[4], b[4])
                    and torch.equal(a[1], b[1]) and torch.equal(a[2][used], b[2][used])
                    and torch.equal(a[3][used], b[3][used]))
            bad += not same
        print("mismatches", bad)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "mismatches 0", r.stdout


def test_cpu_default_is_unchanged():
    """On the CPU the emulation never takes the fused path unless asked (fused=True)."""
    import selector.backends.kernels.nvfp4_moe_triton as F
    calls = []
    orig = F.fused_moe
    F.fused_moe = lambda *a, **k: calls.append(1)
    try:
        g = torch.Generator().manual_seed(0)
        w = nv.MoEWeights(nv.quantize(torch.randn(2, 32, 32, generator=g), global_dims=1),
                          nv.quantize(torch.randn(2, 32, 16, generator=g), global_dims=1))
        x = torch.randn(3, 32, generator=g).bfloat16()
        tw, ti = torch.ones(3, 1), torch.zeros(3, 1, dtype=torch.int32)
        R.emulate_moe(x, w, tw, ti, quant="nvfp4_w4a16")
        R.emulate_moe(x, w, tw, ti, quant="nvfp4_w4a16", grouped=True)
        assert calls == []
        with pytest.raises(ValueError, match="bf16"):
            R.emulate_moe(x.float(), w, tw, ti, quant="nvfp4_w4a16", fused=True)
    finally:
        F.fused_moe = orig


def test_a_failing_default_fused_path_falls_back_to_grouped_for_that_shape_only(monkeypatch):
    """By default a failure of the fused kernels warns, naming the shape and the reason, and
    that shape's calls run the grouped path; another shape still tries the fused kernels (issue
    #46: one failure used to keep the whole process grouped). fused=True raises."""
    import selector.backends.kernels.nvfp4_moe_triton as F
    tried = []

    def boom(x, *a, **k):
        tried.append(x.shape[-1])
        raise RuntimeError("PassManager::run failed")
    monkeypatch.setattr(F, "fused_moe", boom)
    monkeypatch.setattr(EM, "_FUSED_FAILED", {})
    monkeypatch.setattr(EM, "_fused_default", lambda x, cd, q: True)
    g = torch.Generator().manual_seed(0)

    def case(H):
        w = nv.MoEWeights(nv.quantize(torch.randn(2, 32, H, generator=g), global_dims=1),
                          nv.quantize(torch.randn(2, H, 16, generator=g), global_dims=1))
        return torch.randn(3, H, generator=g).bfloat16(), w
    x, w = case(32)
    tw, ti = torch.ones(3, 1), torch.zeros(3, 1, dtype=torch.int32)
    ref = R.emulate_moe(x, w, tw, ti, quant="nvfp4_w4a16", fused=False)
    with pytest.warns(RuntimeWarning, match=r"H=32 E=2 I=16 top_k=1 silu nvfp4_w4a16 BLOCK_M=16"
                      r" \(RuntimeError: PassManager::run failed\)"):
        y = R.emulate_moe(x, w, tw, ti, quant="nvfp4_w4a16")
    assert torch.equal(y, ref) and tried == [32]
    assert list(EM.fused_failures()) == ["cpu H=32 E=2 I=16 top_k=1 silu nvfp4_w4a16 BLOCK_M=16"]
    assert torch.equal(R.emulate_moe(x, w, tw, ti, quant="nvfp4_w4a16"), ref)  # no second try
    assert tried == [32]
    x2, w2 = case(64)  # another shape: the fused kernels are tried there
    with pytest.warns(RuntimeWarning, match="H=64"):
        R.emulate_moe(x2, w2, tw, ti, quant="nvfp4_w4a16")
    assert tried == [32, 64]
    with pytest.raises(RuntimeError, match="PassManager"):
        R.emulate_moe(x, w, tw, ti, quant="nvfp4_w4a16", fused=True)


_LADDER_CHILD = """
import warnings, torch
import selector.backends.kernels.nvfp4_moe_triton as F
from selector.backends.formats import nvfp4 as nv
from selector.backends.reference import emulate_moe
real = F._fused_moe

def flaky(*a):
    cfg = a[-1]
    if cfg["num_stages"] == 3:  # as Triton's MLIR pipeline refuses a tile: before any launch
        raise RuntimeError("PassManager::run failed")
    return real(*a)
F._fused_moe = flaky
g = torch.Generator().manual_seed(0)
E, k, H, I, T = 4, 2, 48, 32, 3
x = torch.randn(T, H, generator=g).bfloat16()
tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
ti = ti.int()
W = nv.MoEWeights(nv.quantize(torch.randn(E, 2 * I, H, generator=g), global_dims=1),
                  nv.quantize(torch.randn(E, H, I, generator=g), global_dims=1))
ref = emulate_moe(x, W, tw, ti, grouped=True, fused=False, quant="nvfp4_w4a16")
with warnings.catch_warnings(record=True) as got:
    warnings.simplefilter("always")
    y = emulate_moe(x, W, tw, ti, fused=True, quant="nvfp4_w4a16")
    y2 = emulate_moe(x, W, tw, ti, fused=True, quant="nvfp4_w4a16")
d = (y.float() - ref.float()).abs()
print("diff", int((d > 0).sum()), float(d.max()), float(ref.float().abs().max()))
print("same", torch.equal(y, y2))
print("warnings", [str(w.message) for w in got])
print("failed", sorted(F.TILE_FAILED.values()))
print("done")
"""


def test_a_tile_that_does_not_compile_is_replaced_for_that_shape_in_the_interpreter():
    """A tile config Triton cannot compile (injected: every 3-stage config raises Triton's
    `PassManager::run failed` before a launch) is replaced by the next of the ladder (2 stages):
    the fused kernels still run, give the grouped emulation's values, warn once with the reason,
    and skip the failed config on the next call."""
    pytest.importorskip("triton")
    p = subprocess.run([sys.executable, "-c", _LADDER_CHILD], capture_output=True, text=True,
                       timeout=1200, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0 and "done" in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines() if " " in line)
    n, worst, top = out["diff"].split()
    assert int(n) <= 1 and float(worst) <= 0.01 * float(top), out["diff"]
    assert out["same"] == "True"
    warned = eval(out["warnings"])  # noqa: S307 - our own child's list of strings
    assert len(warned) == 1 and "PassManager::run failed" in warned[0], warned
    assert "'num_stages': 2" in warned[0] and "this shape runs with" in warned[0]
    assert "PassManager::run failed" in out["failed"]


def test_the_tile_ladder_ends_at_16_rows_and_names_compile_failures():
    import selector.backends.kernels.nvfp4_moe_triton as F
    ladder = F.tile_ladder({**F.TILES, "BLOCK_M": 64})
    assert [(c["BLOCK_M"], c["num_stages"]) for c in ladder] == [(64, 3), (64, 2), (32, 2),
                                                                 (16, 2)]
    assert F.compile_failure(RuntimeError("PassManager::run failed"))
    assert not F.compile_failure(RuntimeError("CUDA error: an illegal memory access"))
    assert not F.compile_failure(ValueError("bad shapes"))


def test_block_rows_stop_at_32():
    """BLOCK_M follows the mean rows an expert gets, 16 at decode, and stops at 32: on an H100
    every 64- or 128-row tile failed to compile or ran slower (nvfp4_moe_triton.block_m)."""
    import selector.backends.kernels.nvfp4_moe_triton as F
    assert F.block_m(8, 128) == 16          # decode: one row per routed expert
    assert F.block_m(128 * 16, 128) == 16
    assert F.block_m(128 * 17, 128) == 32
    assert F.block_m(8192, 128) == 32       # Qwen3-30B-A3B at 1,024 tokens (64 rows an expert)
    assert F.block_m(2048, 8) == 32         # Mixtral-8x7B at 1,024 tokens (256 rows an expert)
