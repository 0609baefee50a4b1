"""Tests written against the engines shard's mutation survivors (issue #36; docs/guarantees.md,
"Every module, sharded"): an engine file's choice errors name the file, SGLang's keyword
arguments of several decisions, the vLLM MoE oracle tables against the catalogue's vLLM names,
and the parts of the vLLM plugin (selector.engines.vllm) that run without vLLM: the QuantKey
mapping, the requested names, the overrides, the patching of vLLM's selection functions and
its undoing (on stand-in `vllm.*` modules), the MXFP4 automatic-list path, and the launch
plan's vLLM answers. What needs vLLM itself is tests/vllm's (vLLM's environment)."""
from __future__ import annotations

import json
import sys
import types
from types import SimpleNamespace

import pytest
from helpers import load

from selector.core.engines import ENGINES, make_engine
from selector.core.errors import SelectorError
from selector.engines import sglang, vllm

# ---------------------------------------------------------------------------------------------
# an engine file's choices


@pytest.mark.parametrize("choice, key", [
    ({"op": "moe", "flag": "--m", "bogus": 1}, "engine.choices[0]: unknown key 'bogus'"),
    ({"op": "attention", "flag": "--m"}, "engine.choices[0].op: unknown value 'attention'"),
    ({"op": "moe"}, "engine.choices[0]: {'op': 'moe'} names exactly one of flag"),
    ({"op": "moe", "flag": "--m", "schemes": ["x"]}, "engine.choices[0].schemes"),
    ("--m", "engine.choices[0]: '--m' is not a mapping"),
])
def test_a_bad_choice_of_an_engine_file_names_the_file(choice, key):
    conf = {"name": "tgi", "label": "TGI", "source": "s", "proof": "p", "choices": [choice]}
    with pytest.raises(SelectorError) as exc:
        make_engine(conf, [*ENGINES, "tgi"], "conf/engine/tgi.yaml")
    assert str(exc.value).startswith(f"conf/engine/tgi.yaml: {key}"), str(exc.value)
    assert exc.value.where == "conf/engine/tgi.yaml"


# ---------------------------------------------------------------------------------------------
# SGLang: several decisions' keyword arguments

def test_sglang_server_kwargs_of_several_decisions_pair_each_flag_with_its_value():
    sel = load("platform=b200", "stack=sglang_0_5_23", "engine=sglang")
    moe = sel.select(op="moe", quant="nvfp4")
    lin = sel.select(op="linear", quant="nvfp4")
    args = sglang.server_args(moe, lin)
    assert len(args) == 4, args
    kwargs = sglang.server_kwargs(moe, lin)
    assert kwargs == {sglang.FIELDS[f]: v for f, v in zip(args[0::2], args[1::2], strict=True)}
    assert set(kwargs.values()) == {args[1], args[3]} and len(kwargs) == 2


# ---------------------------------------------------------------------------------------------
# the vLLM MoE oracle tables (engines/vllm_flags.py) against the catalogue

def test_the_catalogues_vllm_moe_names_are_ones_vllms_oracles_take():
    """Each MoE backend's vLLM name, for each scheme it implements that a vLLM oracle table
    covers, is a `--moe-backend` value that oracle maps; the one exception is documented in
    conf/backend/moe/cutlass.yaml: vLLM runs CUTLASS MXFP4 W4A4 from its automatic list only
    (the launch plan says so and offers the plugin)."""
    from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS
    launcher = vllm.VllmLauncher.__new__(vllm.VllmLauncher)  # refuses() reads the tables only
    refused, checked = set(), 0
    for b in load("platform=b200").catalogue.backends["moe"]:
        entry = dict(b.engines).get("vllm")
        for scheme in b.implements:
            name = entry.name_for(scheme) if entry is not None else None
            if name is None or scheme not in VLLM_MOE_ACCEPTS:
                continue
            checked += 1
            if launcher.refuses("moe", scheme, name) is not None:
                refused.add((b.name, scheme))
    assert checked >= 40
    assert refused == {("cutlass", "mxfp4_w4a4")}


# ---------------------------------------------------------------------------------------------
# stand-ins for the vLLM modules the plugin reads

@pytest.fixture
def fake_vllm(monkeypatch):
    """`vllm.*` modules with what the plugin reads: quant_utils' QuantKeys (one object per
    name), the current platform (no CUDA), and the selection functions it patches, with a
    caller module that imported them by name, as vLLM's layers do."""
    from selector.core import schema
    mods = {}

    def module(name, **attrs):
        m = types.ModuleType(name)
        for k, v in attrs.items():
            setattr(m, k, v)
        mods[name] = m
        monkeypatch.setitem(sys.modules, name, m)
        parent, _, leaf = name.rpartition(".")
        if parent in mods:
            setattr(mods[parent], leaf, m)
        return m
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.layers",
                 "vllm.model_executor.layers.quantization",
                 "vllm.model_executor.layers.quantization.utils",
                 "vllm.model_executor.layers.fused_moe",
                 "vllm.model_executor.layers.fused_moe.oracle", "vllm.model_executor.kernels"):
        module(name)
    keys = {k for s in schema.QUANT_SCHEMES.values() for k in s.vllm_keys if k}
    keys |= {"kNvfp4Static", "kNvfp4DynamicToken"}
    q = module("vllm.model_executor.layers.quantization.utils.quant_utils",
               **{k: SimpleNamespace(name=k) for k in sorted(keys)})
    module("vllm.platforms", current_platform=SimpleNamespace(is_cuda=lambda: False))

    def fn(name):
        def f(*args, **kw):
            return (name, args)
        f.__name__ = name
        return f
    oracles = {
        vllm.MOE_ORACLE: "select_nvfp4_moe_backend", vllm.FP8_MOE_ORACLE: "select_fp8_moe_backend",
        vllm.MXFP8_MOE_ORACLE: "select_mxfp8_moe_backend",
        vllm.MXFP4_MOE_ORACLE: "select_mxfp4_moe_backend"}
    for mod, attr in oracles.items():
        module(mod, **{attr: fn(attr)})
    module(vllm.LINEAR_KERNELS, init_nvfp4_linear_kernel=fn("init_nvfp4_linear_kernel"),
           _get_linear_backend=lambda *, quantization: "auto")
    caller = module("vllm.model_executor.layers.some_layer",
                    select_nvfp4_moe_backend=sys.modules[vllm.MOE_ORACLE].select_nvfp4_moe_backend,
                    init_nvfp4_linear_kernel=sys.modules[vllm.LINEAR_KERNELS].init_nvfp4_linear_kernel)
    return SimpleNamespace(q=q, mods=mods, caller=caller)


def test_each_scheme_is_the_moe_quant_of_its_vllm_quantkey_pair(fake_vllm):
    from selector.core import schema
    q = fake_vllm.q
    for name, s in schema.QUANT_SCHEMES.items():
        w, a = s.vllm_keys
        if w is None or name == "nvfp4":
            continue
        assert vllm.moe_quant(getattr(q, w), getattr(q, a) if a else None) == name
    assert vllm.moe_quant(q.kNvfp4Static, q.kNvfp4DynamicToken) == "nvfp4"
    assert vllm.moe_quant(q.kMxfp4Static, None) == "mxfp4"
    with pytest.raises(vllm.NotExpressible, match="activation quantization"):
        vllm.moe_quant(q.kMxfp4Static, q.kNvfp4DynamicToken)
    with pytest.raises(vllm.NotExpressible, match="weight quantization"):
        vllm.moe_quant(object(), None)


def test_vllms_requested_name_is_the_catalogues_backends_of_that_vllm_name():
    cat = load("platform=b200").catalogue
    assert vllm.requested_names("moe", "auto", cat) == ("auto",)
    assert vllm.requested_names("moe", "flashinfer_cutlass", cat) == ("flashinfer_cutlass",)
    triton = vllm.requested_names("moe", "triton", cat)  # one vLLM name, a backend per scheme
    assert set(triton) == {"triton", "triton_kernels"}
    assert vllm.requested_name("moe", "triton", cat, "mxfp4") == "triton_kernels"
    with pytest.raises(vllm.NotExpressible, match="not in selector's catalogue"):
        vllm.requested_names("moe", "no_such_kernel", cat)


def test_the_plugins_overrides_are_its_own_or_the_environments(fake_vllm, monkeypatch):
    monkeypatch.setenv(vllm.ENV_OVERRIDES, "policy.exclude=[marlin]")
    base = ["engine=vllm", "platform=auto", "platform.capability=null"]
    assert vllm.Chooser().overrides() == [*base, "policy.exclude=[marlin]"]
    assert vllm.Chooser(["policy.strict=true"]).overrides() == [*base, "policy.strict=true"]
    assert vllm.Chooser([]).overrides() == base


def test_install_rebinds_every_name_of_vllms_selection_functions_and_uninstall_undoes_it(
        fake_vllm):
    oracle = sys.modules[vllm.MOE_ORACLE]
    original = oracle.select_nvfp4_moe_backend
    assert not vllm.installed() and list(vllm.iter_rebound()) == []
    vllm.install()
    try:
        assert vllm.installed()
        assert fake_vllm.caller.select_nvfp4_moe_backend is oracle.select_nvfp4_moe_backend
        assert oracle.select_nvfp4_moe_backend.__selector_original__ is original
        rebound = set(vllm.iter_rebound())
        assert {f"{vllm.MOE_ORACLE}.select_nvfp4_moe_backend",
                f"{vllm.FP8_MOE_ORACLE}.select_fp8_moe_backend",
                f"{vllm.MXFP8_MOE_ORACLE}.select_mxfp8_moe_backend",
                f"{vllm.MXFP4_MOE_ORACLE}.select_mxfp4_moe_backend",
                f"{vllm.LINEAR_KERNELS}.init_nvfp4_linear_kernel",
                "vllm.model_executor.layers.some_layer.select_nvfp4_moe_backend",
                "vllm.model_executor.layers.some_layer.init_nvfp4_linear_kernel"} == rebound
        vllm.install()  # idempotent
        assert oracle.select_nvfp4_moe_backend.__selector_original__ is original
    finally:
        vllm.uninstall()
    assert not vllm.installed() and list(vllm.iter_rebound()) == []
    assert fake_vllm.caller.select_nvfp4_moe_backend is original


def test_installed_is_false_without_vllm(monkeypatch):
    monkeypatch.delitem(sys.modules, vllm.MOE_ORACLE, raising=False)
    assert vllm.installed() is False


class _Chooser:
    """A Chooser whose decision is given: selector's choice `backend` (vLLM's name)."""

    def __init__(self, backend):
        self.backend, self.layers = backend, []

    def decide(self, layer, requested, exclude=()):
        self.layers.append(layer)
        return SimpleNamespace(selected=self.backend, engine=SimpleNamespace(backend=self.backend))


def _moe_config(moe_backend="auto"):
    par = SimpleNamespace(ep_size=1, use_ep=False, tp_size=1, use_all2all_kernels=False,
                          all2all_backend=None)
    return SimpleNamespace(moe_backend=moe_backend, moe_parallel_config=par, activation="silu",
                           swiglu_limit=None, in_dtype="torch.bfloat16", hidden_dim=256,
                           intermediate_size_per_partition=256, num_experts=16,
                           experts_per_token=4)


@pytest.mark.parametrize("auto_picks, ok", [("CUTLASS_MXFP4_MXFP4", True), ("TRITON", False)])
def test_an_mxfp4_backend_vllm_runs_from_its_automatic_list_only(fake_vllm, auto_picks, ok):
    """selector's choice has no `--moe-backend` value in vLLM's MXFP4 oracle (CUTLASS W4A4):
    vLLM's automatic list builds it when that list picks it, else selector says why."""
    mx4 = sys.modules[vllm.MXFP4_MOE_ORACLE]
    mx4._resolve_activation_key = lambda key: key

    def map_mxfp4_backend(value):
        if value == "cutlass":
            raise ValueError(value)
        return value
    mx4.map_mxfp4_backend = map_mxfp4_backend
    calls = []

    def original(config, activation_key):
        calls.append(config.moe_backend)
        return SimpleNamespace(value=auto_picks), "experts"
    q = fake_vllm.q
    chooser = _Chooser("cutlass")
    if ok:
        backend, experts = vllm.select_mxfp4_moe(original, _moe_config(), q.kMxfp4Dynamic,
                                                 chooser)
        assert backend.value == auto_picks and experts == "experts"
    else:
        with pytest.raises(ValueError, match="vLLM runs cutlass for MXFP4 from its automatic "
                                             "list only .* picks TRITON here"):
            vllm.select_mxfp4_moe(original, _moe_config(), q.kMxfp4Dynamic, chooser)
    assert calls == ["auto"]
    assert chooser.layers[0]["quant"] == "mxfp4_w4a4"
    named = _Chooser("triton")  # a name vLLM maps: its explicit path, as asked
    assert vllm.select_mxfp4_moe(original, _moe_config(), None, named)[1] == "experts"
    assert calls == ["auto", "triton"] and named.layers[0]["quant"] == "mxfp4"


# ---------------------------------------------------------------------------------------------
# the launch plan's vLLM answers (VllmLauncher)

def _launcher():
    return vllm.VllmLauncher.__new__(vllm.VllmLauncher)  # linear() and options() read no state


def test_linear_schemes_that_need_different_backends_get_linear_backend_per_quant():
    notes = []
    assert _launcher().linear({"nvfp4": "cutlass"}, [], notes) is None
    assert _launcher().linear({"nvfp4": "cutlass", "fp8_block": "cutlass"}, [], notes) is None
    flags, problem = _launcher().linear({"nvfp4": "flashinfer_cutlass", "fp8_block": "deep_gemm"},
                                        [], notes)
    assert problem == "" and flags[0] == "--kernel-config"
    per = json.loads(flags[1])["linear_backend_per_quant"]
    assert set(per.values()) == {"flashinfer_cutlass", "deep_gemm"} and len(per) == 2
    assert notes == []


def _group(backend, layer):
    return SimpleNamespace(backend=backend, per_rank=layer, scheme=layer["quant"])


def test_the_plugin_is_offered_when_its_automatic_choice_is_the_plans():
    sel = load("platform=b200", "stack=vllm_0_32")
    layer = dict(op="moe", quant="nvfp4")
    auto = sel.select(**layer).selected
    assert auto is not None
    [opt] = _launcher().options(sel, "moe", [_group(auto, layer)])
    assert opt.flags == () and dict(opt.env) == {vllm.ENV_ENABLE: "1"}
    other = next(c.backend for c in sel.select(**layer).candidates
                 if c.backend != auto and str(c.status) == "eligible")
    assert _launcher().options(sel, "moe", [_group(other, layer)]) == []


def test_the_plugin_is_told_to_allow_the_opt_in_backend_the_plan_chose():
    """triton_unfused is opt-in: the plugin's automatic choice is it only when the overrides
    the plan gives the plugin allow it."""
    sel = load("platform=rtx_5090", "stack=vllm_0_32")
    layer = dict(op="moe", quant="mxfp4")
    assert sel.catalogue.get("moe", "triton_unfused").opt_in is not None
    assert sel.select(**layer).selected != "triton_unfused"
    [opt] = _launcher().options(sel, "moe", [_group("triton_unfused", layer)])
    env = dict(opt.env)
    assert env[vllm.ENV_ENABLE] == "1"
    assert env[vllm.ENV_OVERRIDES] == "policy.allow_opt_in=[triton_unfused]"
    assert "mxfp4 moe layer" in opt.why
