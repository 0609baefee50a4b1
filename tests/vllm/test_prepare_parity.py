"""Parity: ``backends.prepare`` against vLLM 0.32.0's own NVFP4 weight preparation, run on CPU.

vLLM's real functions (``prepare_nvfp4_moe_layer_for_fi_or_cutlass``, ``..._for_flashinfer_cutedsl``,
``..._for_b12x``, ``..._for_marlin``, ``prepare_fp4_layer_for_marlin``, the experts'
``process_weights_after_loading`` / ``_compute_g1_scale_c``, ``make_nvfp4_moe_quant_config``, the
ModelOpt linear schemes and the NVFP4 linear kernels' ``process_weights_after_loading``) run next
to ours on random NVFP4 checkpoints: gated and non-gated MoE, aligned and unaligned sizes, W4A4
and W4A16, bf16 and fp16, linear aligned and unaligned. Every output must be bit-exact (same
dtype, shape and bytes) unless ``DELIBERATE`` lists it (the table "Deliberate differences from
vLLM" in docs/backends.md); an output that differs and is not listed fails.

Where vLLM's code cannot run on CPU, it is substituted or the comparison stops, as listed here:

1. ``nvfp4_utils.swizzle_blockscale`` ends with ``.cuda()``: ``torch.Tensor.cuda`` is made the
   identity, so vLLM's own CPU swizzle runs and stays on CPU.
2. FlashInfer's ``nvfp4_block_scale_interleave`` (CUDA-only, used by the TRT-LLM preparation) is
   replaced by vLLM's ``swizzle_blockscale`` on the same 2-D tensor: the same 128x4 layout
   (FlashInfer documents both as the 128x4 swizzle; test_nvfp4 checks the index formula).
3. ``ops.gptq_marlin_repack`` (CUDA) is replaced by the identity: the Marlin comparison stops at
   its input ``b_q_weight``, the padded int32 weight.
4. The CuTe-DSL / b12x MMA view (``flashinfer.cute_dsl.utils.convert_sf_to_mma_layout``, needs
   cutlass-dsl; vLLM's ``nvfp4_swizzled_scale_to_cutedsl_mma_view`` wraps it) is replaced by the
   identity: the comparison stops at the swizzled scale bytes the
   view is taken of (tests/test_nvfp4.py compares our view with FlashInfer's, stride for stride).
5. ``layer`` objects are minimal stand-ins holding exactly the attributes vLLM's functions read
   (activation, ``moe_config``, sizes, parameters); expert-class methods run unbound on a
   stand-in ``self`` holding the attributes they read.
FlashInfer's TRT-LLM row-permutation helpers are pure torch and are used as they are; the TRT-LLM
cases skip when ``flashinfer`` is not importable.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

_vllm = pytest.importorskip("vllm")
if getattr(_vllm, "__file__", None) is None:   # this folder, seen as a namespace package "vllm"
    pytest.skip("vLLM is not installed here (tests/vllm runs in the vLLM environment)",
                allow_module_level=True)
torch = pytest.importorskip("torch")

from selector.backends import prepare as P  # noqa: E402
from selector.backends.formats import nvfp4 as nv  # noqa: E402

# id -> (kernel, what differs, why): the rows of docs/backends.md "Deliberate differences from vLLM"
DELIBERATE = {
    "b12x-fold-refused": ("flashinfer_b12x", "scale fold", "refused when it changes a block scale "
                          "by more than 2^-4 (subnormal or flushed E4M3); vLLM folds silently"),
    "b12x-input-global-scale": ("flashinfer_b12x", "input_global_scale", "the calibrated "
                                "per-expert FC1 input scale is passed (FlashInfer #3932); vLLM "
                                "passes none"),
    "pure-prepare": ("all", "inputs", "new tensors; vLLM rewrites the checkpoint's tensors in place"),
    "refusal-type": ("all", "refusals", "ValueError naming the sizes; vLLM raises "
                     "NotImplementedError / AssertionError"),
    "emulation-scales": ("emulation", "activation scales", "per expert, as calibrated; vLLM's "
                         "emulation takes the max over experts"),
    "cutedsl-w4a16-linear": ("flashinfer_cutedsl linear W4A16", "weight layout", "not reproduced: "
                             "the W4A4 layout is prepared"),
}
COMPARED: list = []


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    kernels = sorted({k for k, _ in COMPARED})
    print(f"\nvLLM parity: {len(COMPARED)} outputs bit-exact across {len(kernels)} kernels "
          f"({', '.join(kernels)}); {len(DELIBERATE)} deliberate differences")


def same(kernel: str, output: str, ours, theirs):
    """Bit-exact comparison of one output: dtype, shape and every byte."""
    assert ours.dtype == theirs.dtype, f"{kernel} {output}: dtype {ours.dtype} != vLLM {theirs.dtype}"
    assert tuple(ours.shape) == tuple(theirs.shape), \
        f"{kernel} {output}: shape {tuple(ours.shape)} != vLLM {tuple(theirs.shape)}"
    a, b = (t.contiguous().reshape(-1).view(torch.uint8) for t in (ours, theirs))
    n = int((a != b).sum())
    assert n == 0, f"{kernel} {output}: {n} of {a.numel()} bytes differ from vLLM (not in DELIBERATE)"
    COMPARED.append((kernel, output))


@pytest.fixture(autouse=True)
def cpu_vllm(monkeypatch):
    """Substitutions 1, 3 and 4 (module docstring)."""
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    from vllm.model_executor.layers.fused_moe.experts import flashinfer_b12x_moe
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp4
    monkeypatch.setattr(marlin_utils_fp4.ops, "gptq_marlin_repack",
                        lambda b_q_weight, **kw: b_q_weight, raising=False)
    monkeypatch.setattr(flashinfer_b12x_moe, "flashinfer_convert_sf_to_mma_layout",
                        lambda sf, **kw: sf)
    from vllm.model_executor.layers.fused_moe.oracle import nvfp4 as oracle
    monkeypatch.setattr(oracle, "nvfp4_swizzled_scale_to_cutedsl_mma_view", lambda sf: sf)


# ------------------------------------------------------------------------------------------------
# checkpoints
# ------------------------------------------------------------------------------------------------

E = 3
MOE_SHAPES = {            # name: (gated, H, I)
    "gated_aligned": (True, 256, 128),
    "gated_unaligned": (True, 192, 96),
    "nongated_aligned": (False, 256, 128),
    "nongated_unaligned": (False, 192, 96),
}


def checkpoint(gated: bool, H: int, I: int, sigma=1.0, seed=0) -> nv.MoEWeights:
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([0.5, 1.0, 3.0]).view(E, 1, 1) * sigma
    w13 = torch.randn(E, (2 if gated else 1) * I, H, generator=g) * scale
    w2 = torch.randn(E, H, I, generator=g) * scale
    a13 = torch.rand(E, generator=g) * 1e-3 + 1e-3
    a2 = torch.rand(E, generator=g) * 0.05 + 0.01
    return nv.quantize_moe(w13, w2, a13, a2)


def vllm_args(W: nv.MoEWeights, a13_2d=False):
    """The tensors vLLM's preparation takes, as fresh copies (vLLM modifies some in place)."""
    a13 = W.a13_scale.clone()
    return dict(w13=W.w13.packed.clone(), w13_scale=W.w13.block_scale.clone(),
                w13_scale_2=W.w13.scale_2.clone(),
                a13_scale=a13.unsqueeze(1).expand(E, 2).contiguous() if a13_2d else a13,
                w2=W.w2.packed.clone(), w2_scale=W.w2.block_scale.clone(),
                w2_scale_2=W.w2.scale_2.clone(), a2_scale=W.a2_scale.clone())


def moe_layer(gated: bool, H: int, I: int):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    return SimpleNamespace(
        activation=MoEActivation.SILU if gated else MoEActivation.RELU2_NO_MUL,
        moe_config=SimpleNamespace(moe_parallel_config=SimpleNamespace(enable_eplb=False),
                                   hidden_dim=H, hidden_dim_unpadded=None,
                                   intermediate_size_per_partition=I))


def backend(name):
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend
    return getattr(NvFp4MoeBackend, name)


def vllm_alphas(be, out, gated):
    """vLLM's quant config (a1/a2_gscale) and the experts' in-place alpha fusion
    (``w*_weight_scale_2.mul_(w*_input_scale)``), real code on stand-ins."""
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import make_nvfp4_moe_quant_config
    w13, s13, s13_2, a13, w2, s2, s2_2, a2 = out
    s13_2, s2_2 = s13_2.clone(), s2_2.clone()
    qc = make_nvfp4_moe_quant_config(be, s13, s2, s13_2, s2_2, a13, a2)
    from vllm.model_executor.layers.fused_moe.experts.cutlass_moe import CutlassExpertsFp4
    layer = SimpleNamespace(w13_weight_scale_2=s13_2, w2_weight_scale_2=s2_2,
                            w13_input_scale=a13, w2_input_scale=a2)
    CutlassExpertsFp4.process_weights_after_loading(None, layer)
    return qc


def compare_alphas(kernel, p, qc):
    same(kernel, "a1_gscale", p.a1_gscale, qc.a1_gscale)
    same(kernel, "a2_gscale", p.a2_gscale, qc.a2_gscale)
    same(kernel, "g1_alphas", p.g1_alphas, qc.g1_alphas)
    same(kernel, "g2_alphas", p.g2_alphas, qc.g2_alphas)


# ------------------------------------------------------------------------------------------------
# FlashInfer CUTLASS and vLLM CUTLASS
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", sorted(MOE_SHAPES))
@pytest.mark.parametrize("kernel,be", [("flashinfer_cutlass", "FLASHINFER_CUTLASS"),
                                       ("cutlass", "VLLM_CUTLASS")])
def test_cutlass_moe(shape, kernel, be):
    from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
        prepare_nvfp4_moe_layer_for_fi_or_cutlass,
    )
    gated, H, I = MOE_SHAPES[shape]
    W = checkpoint(gated, H, I, seed=1)
    args = vllm_args(W, a13_2d=(be == "VLLM_CUTLASS"))
    layer = moe_layer(gated, H, I)
    if gated and (2 * I) % 128:
        with pytest.raises(NotImplementedError):
            prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend(be), layer, is_act_and_mul=True, **args)
        with pytest.raises(ValueError, match="multiple of 128"):
            P.prepare_swizzled_moe(W, backend=kernel)
        return
    out = prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend(be), layer, is_act_and_mul=gated, **args)
    p = P.prepare_swizzled_moe(W, backend=kernel)
    for name, ours, theirs in zip(("w13", "w13_sf", "w2", "w2_sf"), (p.w13, p.w13_sf, p.w2, p.w2_sf),
                                  (out[0], out[1], out[4], out[5])):
        same(kernel, name, ours, theirs)
    compare_alphas(kernel, p, vllm_alphas(backend(be), out, gated))


# ------------------------------------------------------------------------------------------------
# FlashInfer b12x MoE
# ------------------------------------------------------------------------------------------------

def vllm_b12x(W, gated, H, I):
    """vLLM's FLASHINFER_B12X preparation, then ``FlashInferB12xExperts.process_weights_after_loading``
    (the fold and the FC2 scale fill), on stand-ins."""
    from vllm.model_executor.layers.fused_moe.experts.flashinfer_b12x_moe import FlashInferB12xExperts
    from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
        prepare_nvfp4_moe_layer_for_fi_or_cutlass,
    )
    out = prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend("FLASHINFER_B12X"), moe_layer(gated, H, I),
                                                    is_act_and_mul=gated, **vllm_args(W))
    prm = lambda t: torch.nn.Parameter(t, requires_grad=False)  # noqa: E731
    layer = SimpleNamespace(w13_weight_scale=prm(out[1]), w13_weight_scale_2=prm(out[2].clone()),
                            w2_weight_scale=prm(out[5]), w2_weight_scale_2=prm(out[6].clone()),
                            w13_weight=out[0])
    a2_gscale = 1.0 / out[7]
    me = SimpleNamespace(a2_gscale=a2_gscale, num_local_experts=E, _fc2_input_scale=None,
                         w1_scale=layer.w13_weight_scale, w2_scale=layer.w2_weight_scale)
    FlashInferB12xExperts.process_weights_after_loading(me, layer)
    return out, layer, me


@pytest.mark.parametrize("shape", sorted(MOE_SHAPES))
def test_flashinfer_b12x_moe(shape):
    gated, H, I = MOE_SHAPES[shape]
    W = checkpoint(gated, H, I, seed=2)
    if gated and (2 * I) % 128:
        from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
            prepare_nvfp4_moe_layer_for_fi_or_cutlass,
        )
        with pytest.raises(NotImplementedError):
            prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend("FLASHINFER_B12X"), moe_layer(gated, H, I),
                                                      is_act_and_mul=True, **vllm_args(W))
        with pytest.raises(ValueError, match="multiple of 128"):
            P.prepare_b12x_moe(W)
        return
    out, layer, me = vllm_b12x(W, gated, H, I)
    p = P.prepare_b12x_moe(W)
    same("flashinfer_b12x", "w13", p.w13, out[0])
    same("flashinfer_b12x", "w2", p.w2, out[4])
    same("flashinfer_b12x", "w13_sf (folded)", p.w13_sf, layer.w13_weight_scale.data)
    same("flashinfer_b12x", "w2_sf (folded)", p.w2_sf, layer.w2_weight_scale.data)
    same("flashinfer_b12x", "w1_alpha", p.w1_alpha, layer.w13_weight_scale_2.data)
    same("flashinfer_b12x", "w2_alpha", p.w2_alpha, layer.w2_weight_scale_2.data)
    same("flashinfer_b12x", "fc2_input_scale", p.fc2_input_scale, me._fc2_input_scale)
    # unfolded: the scales before process_weights_after_loading
    q = P.prepare_b12x_moe(W, fold_mode="none")
    from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
        prepare_nvfp4_moe_layer_for_fi_or_cutlass,
    )
    raw = prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend("FLASHINFER_B12X"), moe_layer(gated, H, I),
                                                    is_act_and_mul=gated, **vllm_args(W))
    same("flashinfer_b12x", "w13_sf (fold none)", q.w13_sf, raw[1])
    same("flashinfer_b12x", "w2_sf (fold none)", q.w2_sf, raw[5])


def test_flashinfer_b12x_fold_of_typical_weights_is_refused_where_vllm_folds_silently():
    """DELIBERATE b12x-fold-refused: std-0.02 weights make every folded scale
    E4M3-subnormal; vLLM folds; ours refuses, and without strict mode gives vLLM's bytes."""
    gated, H, I = MOE_SHAPES["gated_aligned"]
    W = checkpoint(gated, H, I, sigma=0.02, seed=3)
    _, layer, _ = vllm_b12x(W, gated, H, I)
    with pytest.raises(P.ScaleFoldError):
        P.prepare_b12x_moe(W)
    s13 = nv.swizzle_128x4(P.reorder_w13_to_w31(W.w13.block_scale))
    folded, _, rep = P.fold_global_scale(s13, W.w13.scale_2, strict=False)
    assert not rep.ok and rep.subnormal > 0
    same("fold_global_scale", "folded bytes (strict=False)", folded, layer.w13_weight_scale.data)


# ------------------------------------------------------------------------------------------------
# FlashInfer CuTe-DSL and TRT-LLM
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", sorted(MOE_SHAPES))
def test_flashinfer_cutedsl_moe(shape):
    from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
        prepare_nvfp4_moe_layer_for_flashinfer_cutedsl,
    )
    gated, H, I = MOE_SHAPES[shape]
    W = checkpoint(gated, H, I, seed=4)
    layer = moe_layer(gated, H, I)
    out = prepare_nvfp4_moe_layer_for_flashinfer_cutedsl(layer, **vllm_args(W))
    p = P.prepare_cutedsl_moe(W, use_flashinfer_layout=False)
    for name, ours, theirs in zip(("w13", "w13_sf", "w2", "w2_sf"), (p.w13, p.w13_sf, p.w2, p.w2_sf),
                                  (out[0], out[1], out[4], out[5])):
        same("flashinfer_cutedsl", name, ours, theirs)
    assert p.padded == (layer.moe_config.hidden_dim, layer.moe_config.intermediate_size_per_partition)
    compare_alphas("flashinfer_cutedsl", p, vllm_alphas(backend("FLASHINFER_CUTEDSL"), out, gated))


@pytest.fixture
def fi_interleave(monkeypatch):
    """Substitution 2: FlashInfer's CUDA-only block-scale interleave -> vLLM's swizzle_blockscale."""
    pytest.importorskip("flashinfer.fused_moe.core")
    import flashinfer
    from vllm.model_executor.layers.quantization.utils.nvfp4_utils import swizzle_blockscale
    monkeypatch.setattr(flashinfer, "nvfp4_block_scale_interleave",
                        lambda sf: swizzle_blockscale(sf.view(torch.float8_e4m3fn)).view(torch.uint8)
                        .reshape(-1),
                        raising=False)


@pytest.mark.parametrize("shape", sorted(MOE_SHAPES))
def test_flashinfer_trtllm_moe(shape, fi_interleave):
    from vllm.model_executor.layers.fused_moe.experts.trtllm_nvfp4_moe import TrtLlmNvFp4ExpertsBase
    from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
        prepare_nvfp4_moe_layer_for_fi_or_cutlass,
    )
    gated, H, I = MOE_SHAPES[shape]
    W = checkpoint(gated, H, I, seed=5)
    layer = moe_layer(gated, H, I)
    out = prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend("FLASHINFER_TRTLLM"), layer,
                                                    is_act_and_mul=gated, **vllm_args(W))
    p = P.prepare_trtllm_moe(W)
    for name, ours, theirs in zip(("w13", "w13_sf", "w2", "w2_sf"), (p.w13, p.w13_sf, p.w2, p.w2_sf),
                                  (out[0], out[1], out[4], out[5])):
        same("flashinfer_trtllm", name, ours, theirs)
    assert p.padded == (layer.moe_config.hidden_dim, layer.moe_config.intermediate_size_per_partition)
    qc = vllm_alphas(backend("FLASHINFER_TRTLLM"), out, gated)
    compare_alphas("flashinfer_trtllm", p, qc)
    me = SimpleNamespace(quant_config=qc, moe_config=SimpleNamespace(is_act_and_mul=gated), is_situ=False)
    same("flashinfer_trtllm", "g1_scale_c", p.g1_scale_c, TrtLlmNvFp4ExpertsBase._compute_g1_scale_c(me))


# ------------------------------------------------------------------------------------------------
# native b12x
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", sorted(MOE_SHAPES))
@pytest.mark.parametrize("quant", ["nvfp4", "nvfp4_w4a16"])
def test_b12x_native_moe(shape, quant):
    from vllm.model_executor.layers.fused_moe.b12x import _canonicalize_fp4_zero_signs_
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import convert_to_nvfp4_moe_kernel_format
    gated, H, I = MOE_SHAPES[shape]
    W = checkpoint(gated, H, I, seed=6)
    a16 = quant == "nvfp4_w4a16"
    args = vllm_args(W)
    if a16:                                            # a W4A16 checkpoint: no activation scales
        W = nv.MoEWeights(W.w13, W.w2)
        args.update(a13_scale=None, a2_scale=None)
    out = convert_to_nvfp4_moe_kernel_format(backend("B12X"), None, is_act_and_mul=gated,
                                             use_a16=a16, **args)
    w13, w2 = out[0].clone(), out[4].clone()
    _canonicalize_fp4_zero_signs_(w13)                 # what B12xExperts.apply does to w1 / w2
    _canonicalize_fp4_zero_signs_(w2)
    p = P.prepare_b12x_native_moe(W, quant=quant)
    for name, ours, theirs in zip(
            ("w13", "w13_sf", "w13_scale_2", "a13_scale", "w2", "w2_sf", "w2_scale_2", "a2_scale"),
            (p.w13, p.w13_sf, p.w13_scale_2, p.a13_scale, p.w2, p.w2_sf, p.w2_scale_2, p.a2_scale),
            (w13, out[1], out[2], out[3], w2, out[5], out[6], out[7])):
        same("b12x", name, ours, theirs)


# ------------------------------------------------------------------------------------------------
# Marlin
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", sorted(MOE_SHAPES))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_marlin_moe(shape, dtype):
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import prepare_nvfp4_moe_layer_for_marlin
    gated, H, I = MOE_SHAPES[shape]
    dt = getattr(torch, dtype)
    W = checkpoint(gated, H, I, seed=7)
    layer = SimpleNamespace(num_experts=E, hidden_size=H, intermediate_size_per_partition=I,
                            params_dtype=dt)
    a = vllm_args(W)
    out = prepare_nvfp4_moe_layer_for_marlin(layer, a["w13"], a["w13_scale"], a["w13_scale_2"],
                                             a["w2"], a["w2_scale"], a["w2_scale_2"], gated)
    p13, p2 = P.prepare_marlin_moe(W, param_dtype=dt)
    for name, ours, theirs in zip(("w13 qweight", "w13 scales", "w13 global_scale",
                                   "w2 qweight", "w2 scales", "w2 global_scale"),
                                  (p13.qweight, p13.scales, p13.global_scale,
                                   p2.qweight, p2.scales, p2.global_scale), out):
        same("marlin", name, ours, theirs)


def test_marlin_flush_is_reported_and_matches_vllm():
    """vLLM zeroes rescaled scales under 2^-6 (``marlin_scales[marlin_scales < 2] = 0``); ours
    produces the same bytes and reports the lost blocks."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import prepare_nvfp4_moe_layer_for_marlin
    gated, H, I = MOE_SHAPES["gated_aligned"]
    W = checkpoint(gated, H, I, seed=8)
    bs = W.w13.block_scale.clone()
    bs[0, :4, :2] = nv.to_e4m3(torch.tensor(2.0 ** -9))            # tiny blocks next to 448
    W = nv.MoEWeights(nv.NVFP4Tensor(W.w13.packed, bs, W.w13.scale_2), W.w2, W.a13_scale, W.a2_scale)
    layer = SimpleNamespace(num_experts=E, hidden_size=H, intermediate_size_per_partition=I,
                            params_dtype=torch.bfloat16)
    a = vllm_args(W)
    out = prepare_nvfp4_moe_layer_for_marlin(layer, a["w13"], a["w13_scale"], a["w13_scale_2"],
                                             a["w2"], a["w2_scale"], a["w2_scale_2"], gated)
    p13, _ = P.prepare_marlin_moe(W)
    same("marlin", "w13 scales (with flushed blocks)", p13.scales, out[1])
    live = int(P.live_blocks(W.w13.packed)[0, :4, :2].sum())
    assert p13.scale_factor == 1.0 and p13.flush.flushed == live > 0
    assert 0 < p13.flush.rel_error < 1e-2


def linear_module(lw: nv.LinearWeights, dt):
    m = torch.nn.Module()
    prm = lambda t: torch.nn.Parameter(t.clone(), requires_grad=False)  # noqa: E731
    m.weight, m.weight_scale = prm(lw.weight.packed), prm(lw.weight.block_scale)
    m.weight_scale_2 = prm(lw.weight.scale_2.reshape(1))
    if lw.input_scale is not None:
        m.input_scale = prm(torch.as_tensor(lw.input_scale, dtype=torch.float32).reshape(1))
    m.output_size_per_partition, m.input_size_per_partition = lw.out_features, lw.in_features
    m.params_dtype = dt
    from vllm.model_executor.layers.quantization.modelopt import (
        ACT,
        WEIGHT,
        KNvfp4Dynamic,
        KNvfp4Static,
        maybe_fuse_global_scales,
    )
    KNvfp4Static().process(m, WEIGHT)
    if lw.input_scale is not None:
        KNvfp4Dynamic().process(m, ACT)
    maybe_fuse_global_scales(m)
    return m


LINEAR_SHAPES = {"aligned": (256, 512), "unaligned_n": (200, 512), "unaligned_k": (256, 208),
                 "unaligned_nk": (100, 176)}


def linear_checkpoint(N, K, seed, w4a4=True):
    g = torch.Generator().manual_seed(seed)
    return nv.quantize_linear(torch.randn(N, K, generator=g) * 0.05, input_scale=2e-3 if w4a4 else None)


@pytest.mark.parametrize("shape", sorted(LINEAR_SHAPES))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_marlin_linear(shape, dtype):
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import prepare_fp4_layer_for_marlin
    N, K = LINEAR_SHAPES[shape]
    dt = getattr(torch, dtype)
    lw = linear_checkpoint(N, K, seed=9, w4a4=False)
    m = linear_module(lw, dt)
    prepare_fp4_layer_for_marlin(m)
    p = P.prepare_marlin_linear(lw, param_dtype=dt)
    same("marlin", "linear qweight", p.qweight, m.weight.data)
    same("marlin", "linear scales", p.scales, m.weight_scale.data)
    same("marlin", "linear global_scale", p.global_scale, m.weight_global_scale.data)


# ------------------------------------------------------------------------------------------------
# dense NVFP4 GEMM (CUTLASS family)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", sorted(LINEAR_SHAPES))
@pytest.mark.parametrize("w4a4", [True, False])
def test_cutlass_family_linear(shape, w4a4):
    from vllm.model_executor.kernels.linear.nvfp4.cutlass import CutlassNvFp4LinearKernel
    from vllm.model_executor.kernels.linear.nvfp4.flashinfer import (
        FlashInferB12xNvFp4LinearKernel,
        FlashInferCudnnNvFp4LinearKernel,
        FlashInferCuteDslNvFp4LinearKernel,
        FlashInferCutlassNvFp4LinearKernel,
    )
    N, K = LINEAR_SHAPES[shape]
    lw = linear_checkpoint(N, K, seed=10, w4a4=w4a4)
    p = P.prepare_fp4_linear(lw)
    for kernel, cls in (("cutlass", CutlassNvFp4LinearKernel),
                        ("flashinfer_cutlass", FlashInferCutlassNvFp4LinearKernel),
                        ("flashinfer_cutedsl", FlashInferCuteDslNvFp4LinearKernel),
                        ("flashinfer_cudnn", FlashInferCudnnNvFp4LinearKernel),
                        ("flashinfer_b12x", FlashInferB12xNvFp4LinearKernel)):
        m = linear_module(lw, torch.bfloat16)
        cls.process_weights_after_loading(None, m)
        same(kernel, "linear weight", p.weight, m.weight.data)
        same(kernel, "linear weight_sf", p.weight_sf, m.weight_scale.data)
        if w4a4:
            same(kernel, "linear alpha", p.alpha.reshape(()), m.alpha.data)
            same(kernel, "linear a_gscale", p.a_gscale.reshape(()), m.input_global_scale_inv.data)


def test_every_deliberate_difference_is_in_the_docs_table():
    """The deliberate differences are the rows of docs/backends.md's table, and only those."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()
    table = text.split("### Deliberate differences from vLLM", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
    ids = {ln.split("`")[1] for ln in rows}
    assert ids == set(DELIBERATE), (ids, set(DELIBERATE))


def test_deliberate_b12x_input_scale_inputs_untouched_and_refusal_types():
    """b12x-input-global-scale, pure-prepare, refusal-type: the differences exist as documented."""
    from vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe import (
        prepare_nvfp4_moe_layer_for_fi_or_cutlass,
    )
    gated, H, I = MOE_SHAPES["gated_aligned"]
    W = checkpoint(gated, H, I, seed=11)
    args = vllm_args(W)
    before = args["w13"].clone()
    out = prepare_nvfp4_moe_layer_for_fi_or_cutlass(backend("FLASHINFER_B12X"), moe_layer(gated, H, I),
                                                    is_act_and_mul=True, **args)
    assert not torch.equal(args["w13"], before)          # vLLM reordered the checkpoint in place
    snap = W.w13.packed.clone()
    p = P.prepare_b12x_moe(W)
    assert torch.equal(W.w13.packed, snap)                # ours did not
    assert torch.equal(out[3], W.a13_scale.max().repeat(E))          # vLLM: shared max, unused
    assert torch.equal(p.input_global_scale, W.a13_scale)            # ours: calibrated, per expert


def test_deliberate_emulation_scales():
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import convert_to_nvfp4_moe_kernel_format
    gated, H, I = MOE_SHAPES["gated_aligned"]
    W = checkpoint(gated, H, I, seed=12)
    out = convert_to_nvfp4_moe_kernel_format(backend("EMULATION"), None, is_act_and_mul=gated,
                                             **vllm_args(W))
    assert torch.equal(out[3], 1.0 / W.a13_scale.max())              # vLLM: one scale, the max
    assert not torch.equal(W.a13_scale, W.a13_scale.max().expand(E))  # ours keeps them per expert
    assert P.prepare_emulation(W).weights.a13_scale is W.a13_scale
