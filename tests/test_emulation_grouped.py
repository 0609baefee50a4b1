"""The grouped emulation (issue 24, item 6: per-expert launch overhead on the H200): the routed
experts run in groups as batched GEMMs (``backends.reference.emulate._emulate_moe_grouped``, the default on
CUDA). It must give the per-expert loop's values: on the CPU the same bits, for every scheme,
activation-scale form, group size, gating, FC1 order and quantizer."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from selector.backends.formats import nvfp4 as nv  # noqa: E402
from selector.backends.reference import emulate as R  # noqa: E402
from selector.backends.reference import route  # noqa: E402


def _problem(E, I, H, T, K, gated, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, (2 if gated else 1) * I, H, generator=g)
    w2 = torch.randn(E, H, I, generator=g)
    x = torch.randn(T, H, generator=g).bfloat16()
    tw, ti = route(torch.randn(T, E, generator=g), K)
    ti[0, 0] = -1  # an unrouted slot
    return nv.quantize(w13, global_dims=1), nv.quantize(w2, global_dims=1), x, tw, ti, g


def _reciprocal(x, scale):
    """Another quantizer (the grouped path calls it expert by expert)."""
    u, s = R.exact_quantizer(x * 1.0000001, scale)
    return u, s


@pytest.mark.parametrize("shape", [(8, 144, 272, 21, 4, True, "silu"),
                                   (8, 64, 128, 30, 2, False, "relu2"),
                                   (8, 128, 256, 19, 4, True, "swigluoai")])
def test_grouped_is_bit_identical_to_the_loop_on_cpu(shape, monkeypatch):
    E, I, H, T, K, gated, act = shape
    q13, q2, x, tw, ti, g = _problem(E, I, H, T, K, gated)
    scales = [(None, None), (torch.tensor(0.01), torch.rand(E, generator=g) * 0.01 + 1e-3),
              (torch.rand(E, generator=g) * 0.01 + 1e-3, torch.tensor(0.02))]
    expert_bytes = (2 if gated else 1) * I * H * 2
    for quant in ("nvfp4_w4a16", "nvfp4"):
        for a13, a2 in scales if quant == "nvfp4" else scales[:1]:
            w = nv.MoEWeights(q13, q2, a13, a2)
            for group in (1, 3):
                monkeypatch.setattr(R, "EXPERT_GROUP_BYTES", group * expert_bytes)
                for kw in ({}, {"quantizer": _reciprocal} if group == 3 else {"w13_order": "up_gate"}
                           if gated and act != "swigluoai" else {}):
                    y0 = R.emulate_moe(x, w, tw, ti, activation=act, quant=quant, grouped=False,
                                       **kw)
                    y1 = R.emulate_moe(x, w, tw, ti, activation=act, quant=quant, grouped=True,
                                       **kw)
                    assert torch.equal(y0, y1), (quant, a13 is None, group, kw)


def test_grouped_is_the_default_on_cuda_only(monkeypatch):
    calls = []
    monkeypatch.setattr(R, "_emulate_moe_grouped", lambda x, *a, **k: calls.append(1) or torch.zeros(x.shape))
    q13, q2, x, tw, ti, _ = _problem(4, 32, 64, 5, 2, True)
    R.emulate_moe(x, nv.MoEWeights(q13, q2), tw, ti, quant="nvfp4_w4a16")
    assert calls == []
    R.emulate_moe(x, nv.MoEWeights(q13, q2), tw, ti, quant="nvfp4_w4a16", grouped=True)
    assert calls == [1]


def test_triton_quantizer_with_one_scale_per_expert_in_the_interpreter():
    """The fused activation quantizer with a scale per index of the first dimension (one per
    expert of a group) gives quantize()'s bits with that scale per expert."""
    pytest.importorskip("triton")
    code = """
import torch
from selector.backends.formats import nvfp4 as nv
from selector.backends.kernels import nvfp4_triton as T
g = torch.Generator().manual_seed(0)
a = torch.randn(3, 5, 64, generator=g) * torch.exp2(torch.randint(-12, 12, (3, 5, 4, 1),
                                                     generator=g).float()).repeat_interleave(16, -1).view(3, 5, 64)
s = torch.tensor([1e-3, 3e-7, 0.5])
q = nv.quantize(a, s)
u, s_out = T.quantize_unit_triton(a, s, torch.float32)
assert torch.equal(u, nv.dequantize_unit(q.packed, q.block_scale, torch.float32))
assert torch.equal(s_out, s)
print("same")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0 and "same" in p.stdout, p.stderr[-2000:]


def test_triton_nvfp4_kernels_over_several_programs_in_the_interpreter():
    """The quantizer and the dequantizer with more blocks than one program takes (each program
    its own slice: program_id(0)), on a 3-d input (the output keeps every leading dimension):
    quantize()'s and dequantize_unit()'s bits."""
    pytest.importorskip("triton")
    code = """
import torch
from selector.backends.formats import nvfp4 as nv
from selector.backends.kernels import nvfp4_triton as T
g = torch.Generator().manual_seed(1)
a = torch.randn(3, 40, 64, generator=g)
s = torch.tensor([1e-3, 2e-2, 0.5])
q = nv.quantize(a, s)
u, _ = T.quantize_unit_triton(a, s, torch.float32, blocks=16)
assert torch.equal(u, nv.dequantize_unit(q.packed, q.block_scale, torch.float32))
d = T.dequantize_unit_triton(q.packed, q.block_scale, torch.float32, block=256)
assert d.shape == (3, 40, 64), d.shape
assert torch.equal(d, nv.dequantize_unit(q.packed, q.block_scale, torch.float32))
print("same")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0 and "same" in p.stdout, p.stderr[-2000:]
