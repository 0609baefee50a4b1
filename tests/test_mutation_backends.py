"""Tests written against the mutation survivors of backends/ (issue 48; docs/guarantees.md,
"Every module, sharded"): what a one-token change to the NVFP4 containers, the fused MoE's tile
ladder, FlashInfer's host helpers, the scale checks and the weight preparation would break, and
no test noticed. In-process, on the CPU, quick."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from selector.backends import prepare as P  # noqa: E402
from selector.backends.formats import nvfp4 as nv  # noqa: E402

# ---------------------------------------------------------------------------------------------
# formats/nvfp4/containers.py: the sizes a container reports, one scale_2 per expert


def test_linear_weights_report_their_own_sizes():
    """N != K / 2, so that reading the other dimension of the packed weight shows."""
    w = nv.quantize_linear(torch.randn(32, 128))
    assert (w.out_features, w.in_features) == (32, 128)


@pytest.mark.parametrize("gated", [True, False])
def test_moe_weights_report_their_own_sizes_and_one_scale_2_per_expert(gated):
    E, H, I = 3, 64, 32
    w = nv.quantize_moe(torch.randn(E, (2 if gated else 1) * I, H), torch.randn(E, H, I),
                        torch.tensor(1e-3), torch.tensor(1e-2))
    assert (w.num_experts, w.hidden_size, w.intermediate_size) == (E, H, I)
    assert w.act_and_mul is gated
    assert tuple(w.w13.scale_2.shape) == (E,) and tuple(w.w2.scale_2.shape) == (E,)
    assert w.a13_scale.dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# kernels/nvfp4_moe_host.py: the configs tried when a tile does not compile


def test_the_tile_ladder_has_no_repeated_config():
    from selector.backends.kernels.nvfp4_moe_host import tile_ladder
    got = tile_ladder({"BLOCK_M": 64, "num_stages": 2})
    assert [(c["BLOCK_M"], c["num_stages"]) for c in got] == [(64, 2), (32, 2), (16, 2)]
    got = tile_ladder({"BLOCK_M": 32, "num_stages": 4})
    assert [(c["BLOCK_M"], c["num_stages"]) for c in got] == [(32, 4), (32, 2), (16, 2)]


@pytest.mark.parametrize("name", ["CompilationError", "OutOfResources", "PTXASError"])
def test_each_compile_failure_class_is_one(name):
    from selector.backends.kernels.nvfp4_moe_host import compile_failure
    assert compile_failure(type(name, (Exception,), {})("no"))
    assert not compile_failure(ValueError("a wrong input"))


# ---------------------------------------------------------------------------------------------
# wrappers/_flashinfer.py: SwiGLU parameters, K padding


def test_swiglu_parameters_of_each_activation():
    from selector.backends.common.constants import SWIGLUOAI_DEFAULTS as d
    from selector.backends.wrappers._flashinfer import SWIGLUOAI, swiglu_params
    for act in SWIGLUOAI:
        assert swiglu_params(act) == {k: d[k] for k in ("alpha", "beta", "limit")}
        assert swiglu_params(act, limit=3, alpha=2, beta=0.5) == {"alpha": 2.0, "beta": 0.5,
                                                                 "limit": 3.0}
    assert swiglu_params("silu") == {"alpha": None, "beta": None, "limit": None}
    assert swiglu_params("silu", limit=5) == {"alpha": None, "beta": None, "limit": 5.0}


def test_pad_last_pads_the_last_dimension_only():
    from selector.backends.wrappers._flashinfer import pad_last
    x = torch.ones(3, 5)
    assert pad_last(x, 5) is x
    y = pad_last(x, 8)
    assert tuple(y.shape) == (3, 8) and torch.equal(y[:, :5], x) and not y[:, 5:].any()


# ---------------------------------------------------------------------------------------------
# formats/nvfp4/codec.py: a bad scale's error names the first bad position


def test_a_bad_scales_error_names_the_first_bad_position():
    from selector.backends.formats.nvfp4.codec import check_scale
    with pytest.raises(ValueError, match=r"at position \[1\] \(2 of 4 values\)"):
        check_scale(torch.tensor([1.0, float("inf"), 0.0, 2.0]), "scale_2")


# ---------------------------------------------------------------------------------------------
# prepare/: interleave's message, the linear bias, Marlin's scale factor, the swizzled scales


def test_interleave_names_the_row_multiple_it_needs():
    from selector.backends.prepare.common import interleave_linear_and_gate
    with pytest.raises(ValueError, match="96 rows are not a multiple of 128$"):
        interleave_linear_and_gate(torch.zeros(1, 96, 4))


def test_a_linear_layers_bias_of_its_width_is_taken_another_refused():
    w = nv.quantize_linear(torch.randn(32, 128), bias=torch.zeros(32))
    assert P.linear_shape(w) == (32, 128)
    with pytest.raises(ValueError, match=r"bias: expected a tensor of shape \[32\]"):
        P.linear_shape(nv.quantize_linear(torch.randn(32, 128), bias=torch.zeros(31)))


def test_marlin_scale_factor_of_all_zero_scales_is_one():
    from selector.backends.prepare.marlin import marlin_scale_factor
    assert marlin_scale_factor(torch.zeros(8)) == 1.0
    assert marlin_scale_factor(torch.tensor([0.0, 2.0])) == 2.0 ** 7  # 448 * 2^7 / 2^8, floored


@pytest.mark.parametrize("missing", ["a13_scale", "a2_scale"])
def test_the_swizzled_moe_needs_both_activation_scales(missing):
    import dataclasses
    E, H, I = 2, 128, 64
    w = nv.quantize_moe(torch.randn(E, 2 * I, H), torch.randn(E, H, I), torch.tensor(1e-3),
                        torch.tensor(1e-2))
    with pytest.raises(ValueError, match="needs the checkpoint's activation scales"):
        P.prepare_swizzled_moe(dataclasses.replace(w, **{missing: None}), backend="cutlass")


def test_marlin_permutes_per_channel_scales_with_the_32_wide_permutation():
    from selector.backends.prepare.marlin import marlin_permute_scales, marlin_scale_perm
    perm, single = marlin_scale_perm()
    s = torch.arange(128.0).reshape(2, 64)
    want_single = s.reshape(-1, 32)[:, single].reshape(-1, 64)
    assert torch.equal(marlin_permute_scales(s, 128, 64, -1), want_single)  # per channel
    assert torch.equal(marlin_permute_scales(s, 128, 64, 128), want_single)  # one group
    assert torch.equal(marlin_permute_scales(s, 128, 64, 16),
                       s.reshape(-1, 64)[:, perm].reshape(-1, 64))


def test_b12x_native_pads_a_non_gated_w13_to_its_swizzled_scale_rows():
    E, H, I = 2, 256, 64  # H / 2 != I: the packed weight's two sizes differ
    w = nv.quantize_moe(torch.randn(E, I, H), torch.randn(E, H, I), torch.tensor(1e-3),
                        torch.tensor(1e-2))
    p = P.prepare_b12x_native_moe(w)
    assert p.w13.shape[1] == 128 and p.w13_sf.shape[1] == 128  # 64 rows padded to the tile
    assert p.w2.shape[2] == 64 and not p.w13[:, I:].any()  # w2's columns alike, zeros


def test_trtllm_moe_of_one_expert():
    """FlashInfer's permute indices depend on the shape alone; one expert is a layer too."""
    pytest.importorskip("flashinfer.fused_moe.core")
    E, H, I = 1, 256, 64
    w = nv.quantize_moe(torch.randn(E, 2 * I, H), torch.randn(E, H, I), torch.tensor(1e-3),
                        torch.tensor(1e-2))
    p = P.prepare_trtllm_moe(w)
    assert p.w13.shape[0] == 1 and p.w2.shape[0] == 1


# ---------------------------------------------------------------------------------------------
# formats/nvfp4/layouts.py, kernels/nvfp4_moe_host.py: index arithmetic


def test_the_swizzled_index_is_where_swizzle_puts_each_scale():
    from selector.backends.formats.nvfp4.layouts import swizzled_index_128x4
    rows, cols = 256, 8
    src = torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols)
    flat = nv.swizzle_128x4(src).flatten()
    for r in range(rows):
        for c in range(cols):
            assert int(flat[swizzled_index_128x4(r, c, cols)]) == r * cols + c, (r, c)


def test_gate_and_up_columns_of_each_layout():
    from selector.backends.kernels.nvfp4_moe_host import gate_up_columns
    assert gate_up_columns("swigluoai", True, "gate_up", 32) == (0, 1, 2)
    assert gate_up_columns("silu", True, "up_gate", 32) == (32, 0, 1)
    assert gate_up_columns("silu", True, "gate_up", 32) == (0, 32, 1)
    assert gate_up_columns("relu2", False, "gate_up", 32) == (0, 32, 1)


# ---------------------------------------------------------------------------------------------
# common/constants.py: the activations the reference implements are the ones its catalogue
# file claims; wrappers/: the NVFP4 classes compute W4A16 layers too


def test_the_reference_implements_the_activations_its_catalogue_file_lists():
    import yaml
    from helpers import REPO

    from selector.backends.common import constants as c
    from selector.backends.reference.activations import activation_fn
    doc = yaml.safe_load((REPO / "conf" / "backend" / "moe" / "emulation.yaml").read_text())
    rule = next(r for r in doc["rules"] if r["kind"] == "act_and_mul")
    assert set(c.GATED_ACTIVATIONS) == set(rule["gated"])
    assert set(c.NON_GATED_ACTIVATIONS) == set(rule["non_gated"])
    for gated, acts in ((True, rule["gated"]), (False, rule["non_gated"])):
        for act in acts:
            h = torch.randn(3, 8)
            assert activation_fn(h, act, gated).shape == (3, 4 if gated else 8), act


@pytest.mark.parametrize("path", ["b12x_native:B12xNativeMoE", "flashinfer_cutlass:CutlassMoE",
                                  "flashinfer_trtllm:TrtllmMoE", "marlin:MarlinMoE",
                                  "vllm_cutlass:VllmCutlassMoE", "b12x_native:B12xNativeLinear",
                                  "flashinfer_cutlass:CutlassLinear",
                                  "flashinfer_trtllm:TrtllmLinear", "marlin:MarlinLinear",
                                  "vllm_cutlass:VllmCutlassLinear"])
def test_the_nvfp4_wrappers_compute_w4a16_layers_too(path):
    """Their catalogue files implement nvfp4_w4a16 and the classes compute it (the weight-only
    ModelOpt checkpoints); built for it, none refuses the scheme."""
    import importlib
    mod, _, cls = path.partition(":")
    klass = getattr(importlib.import_module(f"selector.backends.wrappers.{mod}"), cls)
    assert "nvfp4_w4a16" in klass.computes
    klass(quant="nvfp4_w4a16", activation="silu", act_and_mul=True)
    with pytest.raises(NotImplementedError, match="not fp8_block"):
        klass(quant="fp8_block", activation="silu", act_and_mul=True)


# ---------------------------------------------------------------------------------------------
# wrappers/torch_grouped_fp8.py: prepare on the CPU (the grouped GEMM itself is CUDA-only)


def _fp8_moe(quant, a2):
    from selector.backends.formats import fp8
    E, H, I = 2, 128, 64
    return fp8.make_moe_weights(torch.randn(E, 2 * I, H) / 16, torch.randn(E, H, I) / 16, quant,
                                a13_scale=torch.tensor(0.01), a2_scale=a2)


def test_grouped_fp8_prepare_expands_per_tensor_scales_and_a_scalar_a2():
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    impl = TorchGroupedFp8MoE(quant="fp8_tensor", activation="silu",
                              selector_overrides=["platform=h200", "stack=vllm_0_32"])
    p = impl.prepare(_fp8_moe("fp8_tensor", torch.tensor(0.02)))
    assert tuple(p.w13_scale.shape) == (2, 128) and tuple(p.w2_scale.shape) == (2, 128)
    assert tuple(p.a2_scale.shape) == (2,) and torch.equal(p.a2_scale, torch.full((2,), 0.02))


def test_grouped_fp8_prepare_refuses_weights_of_another_scheme():
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    impl = TorchGroupedFp8MoE(quant="fp8_tensor", activation="silu",
                              selector_overrides=["platform=h200", "stack=vllm_0_32"])
    with pytest.raises(ValueError, match="the weights are fp8_channel, the layer fp8_tensor"):
        impl.prepare(_fp8_moe("fp8_channel", None))


@pytest.mark.parametrize("path", ["torch_grouped_fp8:GroupedFp8Prepared",
                                  "flashinfer_fp8:CutlassFp8MoEPrepared"])
def test_prepared_fp8_moe_weights_are_frozen(path):
    """A prepared layer is shared by every call (and across threads): it cannot be changed."""
    import dataclasses
    import importlib
    mod, _, cls = path.partition(":")
    klass = getattr(importlib.import_module(f"selector.backends.wrappers.{mod}"), cls)
    fields = [f.name for f in dataclasses.fields(klass) if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING]
    p = klass(**{f: None for f in fields})
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.quant = "fp8_block"


# ---------------------------------------------------------------------------------------------
# wrappers/_base.py, wrappers/emulation.py: requirements, the layer spec, which computation runs


def test_a_requirement_out_of_range_is_not_satisfied():
    from selector.backends.wrappers._base import _satisfied
    assert _satisfied("torch") and _satisfied("torch>=0.1")
    assert _satisfied("torch<0.1") is False
    assert _satisfied("no-such-distribution-here") is False


def test_a_linear_layers_spec_carries_its_hidden_size():
    from selector.backends.wrappers.emulation import EmulationLinear
    spec = EmulationLinear(quant="nvfp4").layer_spec({"hidden_size": 64, "intermediate_size": 32})
    assert spec["hidden_size"] == 64


def test_the_emulation_linear_runs_the_kernels_computation_unless_given_a_dtype():
    from selector.backends.reference import emulate_linear, reference_linear
    from selector.backends.wrappers.emulation import EmulationLinear
    w = nv.quantize_linear(torch.randn(32, 128), input_scale=torch.tensor(0.01))
    x = torch.randn(4, 128).bfloat16()
    impl = EmulationLinear(quant="nvfp4")
    assert torch.equal(impl.apply(x, impl.prepare(w)), emulate_linear(x, w, quant="nvfp4"))
    ref = EmulationLinear(quant="nvfp4", compute_dtype=torch.float64)
    got = ref.apply(x.double(), ref.prepare(w))
    assert torch.equal(got, reference_linear(x.double(), w, quant="nvfp4",
                                             compute_dtype=torch.float64))


def test_the_emulation_moe_runs_the_kernels_computation_unless_given_a_dtype():
    from selector.backends.reference import emulate_moe, reference_moe
    from selector.backends.wrappers.emulation import EmulationMoE
    E, H, I, T = 4, 128, 64, 6
    w = nv.quantize_moe(torch.randn(E, 2 * I, H), torch.randn(E, H, I) / 8, torch.tensor(1e-3),
                        torch.tensor(1e-2))
    x = torch.randn(T, H).bfloat16()
    tw = torch.full((T, 2), 0.5)
    ti = torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0], [0, 2], [1, 3]])
    impl = EmulationMoE(quant="nvfp4", activation="silu", act_and_mul=True)
    assert torch.equal(impl.apply(x, impl.prepare(w), tw, ti), emulate_moe(x, w, tw, ti))
    ref = EmulationMoE(quant="nvfp4", activation="silu", act_and_mul=True,
                       compute_dtype=torch.float64)
    assert torch.equal(ref.apply(x.double(), ref.prepare(w), tw, ti),
                       reference_moe(x.double(), w, tw, ti, compute_dtype=torch.float64))


def test_accepted_options_stop_at_an_init_without_var_keywords():
    from selector.backends.common.validate import accepted_options

    class Base:
        def __init__(self, *, b=1, **kw):
            pass

    class Mid(Base):
        def __init__(self, *, m=1):  # takes no **kw: Base's options are not reachable
            super().__init__()

    class Top(Mid):
        def __init__(self, *, t=1, **kw):
            super().__init__(**kw)

    assert accepted_options(Top) == ("t", "m")
    assert accepted_options(Base) == ("b",)


# ---------------------------------------------------------------------------------------------
# wrappers/torch_grouped_fp8.py: the unrouted early return, expert 0's rows

def _grouped_fp8(T: int = 4, E: int = 2, H: int = 32, I: int = 16):
    from selector.backends.formats import fp8
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    g = torch.Generator().manual_seed(0)
    w = fp8.make_moe_weights(torch.randn(E, 2 * I, H, generator=g),
                             torch.randn(E, H, I, generator=g), "fp8_channel")
    impl = TorchGroupedFp8MoE(quant="fp8_channel", activation="silu",
                              selector_overrides=["platform=h200", "stack=vllm_0_32"])
    x = torch.randn(T, H, generator=g).bfloat16()
    return impl, impl.prepare(w), x


def test_grouped_fp8_with_every_slot_unrouted_fills_the_callers_out():
    impl, p, x = _grouped_fp8()
    tw, ti = torch.ones(4, 2), torch.full((4, 2), -1, dtype=torch.int32)
    out = torch.ones(4, 32, dtype=torch.bfloat16)
    got = impl.apply(x, p, tw, ti, out=out)
    assert got is out and not out.any()
    fresh = impl.apply(x, p, tw, ti)
    assert fresh.shape == (4, 32) and fresh.dtype == torch.bfloat16 and not fresh.any()


def test_grouped_fp8_computes_rows_routed_to_expert_0():
    """Expert 0 is an expert, not an unrouted slot: its rows reach the grouped GEMM (CUDA-only
    in torch: on the CPU that is the NotImplementedError; zeros would mean they were dropped)."""
    impl, p, x = _grouped_fp8()
    tw, ti = torch.ones(4, 1), torch.zeros((4, 1), dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="_scaled_grouped_mm"):
        impl.apply(x, p, tw, ti)


# ---------------------------------------------------------------------------------------------
# prepare/swizzled.py: the layout name a prepared MoE reports (w31 only for FlashInfer's gated)

@pytest.mark.parametrize("gated,backend,layout", [(True, "flashinfer_cutlass", "w31"),
                                                  (True, "cutlass", "w13"),
                                                  (False, "flashinfer_cutlass", "w13"),
                                                  (False, "cutlass", "w13")])
def test_swizzled_moe_layout_names_the_w13_order(gated, backend, layout):
    E, H, I = 2, 128, 128
    w = nv.quantize_moe(torch.randn(E, (2 if gated else 1) * I, H), torch.randn(E, H, I),
                        torch.tensor(1e-3), torch.tensor(1e-2))
    assert P.prepare_swizzled_moe(w, backend=backend).layout == layout


# ---------------------------------------------------------------------------------------------
# wrappers/flashinfer_fp8.py: the FP8 CUTLASS MoE prepares every activation its catalogue file
# accepts (the gated ones in [gate; up] halves), and refuses the interleaved swigluoai

@pytest.mark.parametrize("activation,gated", [("silu", True), ("gelu_tanh", True),
                                              ("swigluoai_uninterleave", True),
                                              ("relu2", False)])
def test_fp8_cutlass_moe_prepares_each_activation_of_its_catalogue(activation, gated):
    from selector.backends.formats import fp8
    from selector.backends.wrappers.flashinfer_fp8 import CutlassFp8MoE
    g = torch.Generator().manual_seed(0)
    w = fp8.make_moe_weights(torch.randn(2, 256 if gated else 128, 128, generator=g),
                             torch.randn(2, 128, 128, generator=g), "fp8_tensor",
                             a13_scale=torch.tensor(0.01), a2_scale=torch.tensor(0.01))
    impl = CutlassFp8MoE(quant="fp8_tensor", activation=activation,
                         selector_overrides=["platform=h200", "stack=vllm_0_32"])
    assert type(impl.prepare(w)).__name__ == "CutlassFp8MoEPrepared"
    if gated:
        bad = CutlassFp8MoE(quant="fp8_tensor", activation="swigluoai",
                            selector_overrides=["platform=h200", "stack=vllm_0_32"])
        with pytest.raises(ValueError, match="'swigluoai' is not supported"):
            bad.prepare(w)


# ---------------------------------------------------------------------------------------------
# prepare/: a prepared weight is immutable (a wrapper's admit() and the verify cache share it)

def test_prepared_weights_and_reports_are_frozen():
    import dataclasses

    from selector.backends.prepare import linear as L
    from selector.backends.prepare import marlin as M
    fp4 = P.prepare_fp4_linear(nv.quantize_linear(torch.randn(32, 128), torch.tensor(1e-2)))
    emu = L.EmulationPrepared(weights=None)
    report = M.MarlinFlushReport(**{f.name: None for f in dataclasses.fields(M.MarlinFlushReport)})
    for obj in (fp4, emu, report):
        name = dataclasses.fields(obj)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)


def test_a_gated_w13_off_the_swizzle_rows_is_refused_naming_its_rows():
    w = nv.quantize_moe(torch.randn(1, 160, 64), torch.randn(1, 64, 80), torch.tensor(1e-3),
                        torch.tensor(1e-2))  # 2I = 160, not a multiple of 128
    with pytest.raises(ValueError, match=r"gated w13 with 2I = 160 rows"):
        P.prepare_swizzled_moe(w, backend="cutlass")


# ---------------------------------------------------------------------------------------------
# prepare/b12x.py: a non-gated w13 padded to the swizzled row count, w2's columns alike

def test_b12x_non_gated_w13_is_padded_to_the_swizzle_rows():
    E, H, I = 2, 128, 80  # I rows of w13, swizzled to 128
    w = nv.quantize_moe(torch.randn(E, I, H), torch.randn(E, H, I), torch.tensor(1e-3),
                        torch.tensor(1e-2))
    p = P.prepare_b12x_moe(w)
    assert tuple(p.w13.shape) == (E, 128, H // 2)
    assert tuple(p.w2.shape) == (E, H, 128 // 2)
    assert not p.w13[:, I:].any() and not p.w2[:, :, I // 2:].any()
    assert torch.equal(p.w13[:, :I], w.w13.packed) and torch.equal(p.w2[:, :, :I // 2],
                                                                       w.w2.packed)
