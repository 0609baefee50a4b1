"""Tests written against the schema shard's mutation survivors (issue #36; docs/guarantees.md,
"Every module, sharded"): the model's integer bounds, platform and policy checks and engine-name
clashes (selector.core.model), the schema's layer defaults, dict key types and vLLM QuantKey
pairs (selector.core.schema), declared probes, the probes' required distributions and doctor's
own probes (selector.core.probe_specs), and text wrapping (selector.core.text). In-process and
quick."""
from __future__ import annotations

import sys
import textwrap
import types

import pytest
from helpers import load

from selector.core import model, probe_specs, schema, text, validation
from selector.core.errors import SelectorError

# ---------------------------------------------------------------------------------------------
# model


def _backend_conf(**extra):
    return {"description": "a test backend", "rank": 10, "implements": ["nvfp4"], **extra}


@pytest.mark.parametrize("rank, ok", [(2 ** 63 - 1, True), (2 ** 63, False), (-2 ** 63, True),
                                      (-2 ** 63 - 1, False), (True, False)])
def test_a_rank_is_an_int64(rank, ok):
    conf = _backend_conf(rank=rank)
    if ok:
        assert model.make_backend("moe", "x", conf, "x.yaml").rank == rank
    else:
        with pytest.raises(SelectorError, match="catalogue.moe.x.rank"):
            model.make_backend("moe", "x", conf, "x.yaml")


def test_a_platform_reports_its_cuda_version_or_none():
    sel = load("platform=b200", "stack=flashinfer_0_7_4")
    p = sel.run_config.platform
    assert p.cuda is not None and p.to_dict()["cuda"] == str(p.cuda)
    assert sel.default().platform["cuda"] == str(p.cuda)
    packages = p.to_dict()["packages"]  # the stack's versions; null: a watched one it lacks
    assert packages["flashinfer-python"] == "0.7.4"
    assert packages["vllm"] is None and packages["flashinfer-cubin"] is None
    bare = load("platform=cpu").run_config.platform
    assert bare.cuda is None and bare.to_dict()["cuda"] is None


def test_the_platform_preset_given_is_the_platform_used():
    b200 = load("platform=b200").run_config.platform
    h100 = load("platform=h100").run_config.platform
    assert b200.capability == (10, 0) and h100.capability == (9, 0)
    assert b200.preset == "b200" and b200.source != "detected"


def test_a_policy_given_one_backend_name_as_a_string_requests_that_one():
    p = model.Policy(moe_backend="marlin", linear_backend="cutlass", strict=False)
    assert p.requested("moe") == ("marlin",) and p.requested("linear") == ("cutlass",)
    assert model.Policy(("a", "b"), ("auto",), True).requested("moe") == ("a", "b")


def test_policy_exclude_takes_backends_of_the_catalogue_only():
    sel = load("platform=b200", "policy.exclude=[flashinfer_trtllm]")
    assert sel.run_config.policy.exclude == ("flashinfer_trtllm",)
    assert sel.default().selected != "flashinfer_trtllm"
    with pytest.raises(SelectorError, match="policy.exclude") as exc:
        load("platform=b200", "policy.exclude=[no_such_backend]")
    assert "no_such_backend" in str(exc.value)


def test_one_distribution_spelled_two_ways_in_platform_packages_is_refused():
    conf = {"preset": "mine", "capability": "10.0"}
    twice = {"flashinfer_python": "0.7.4", "flashinfer-python": "0.7.4"}
    with pytest.raises(SelectorError, match="names the distribution 'flashinfer-python' that "
                                            "platform.packages.flashinfer_python names too"):
        model.make_platform({**conf, "packages": twice}, [])
    once = model.make_platform({**conf, "packages": {"flashinfer_python": "0.7.4"}}, [])
    assert str(dict(once.packages)["flashinfer-python"]) == "0.7.4"


def _engine_backend(file: str, name: str, engine_name: str):
    conf = _backend_conf(engines={"vllm": {"name": engine_name, "source": "test"}})
    return model.make_backend("moe", name, conf, file)


def test_engine_name_clashes_within_a_directory_are_those_of_its_files(tmp_path):
    """With `within`, a clash is reported only when a file under that directory is in it, and
    on that file."""
    from selector.core.packaged import packaged_conf_dir
    packaged = f"{packaged_conf_dir()}/backend/moe"
    mine = str(tmp_path / "plug" / "backend" / "moe")
    a = _engine_backend(f"{packaged}/pa.yaml", "pa", "shared")
    b = _engine_backend(f"{packaged}/pb.yaml", "pb", "shared")
    c = _engine_backend(f"{mine}/mc.yaml", "mc", "other")
    d = _engine_backend(f"{mine}/md.yaml", "md", "other")
    everything = model.engine_name_clashes([a, b, c, d])
    assert len(everything) == 2
    only_mine = model.engine_name_clashes([a, b, c, d], tmp_path / "plug")
    assert len(only_mine) == 1 and only_mine[0].startswith(f"{mine}/md.yaml: ")
    assert model.engine_name_clashes([a, b], tmp_path / "plug") == []
    mixed = model.engine_name_clashes([a, _engine_backend(f"{mine}/me.yaml", "me", "shared")],
                                      tmp_path / "plug")
    assert len(mixed) == 1 and mixed[0].startswith(f"{mine}/me.yaml: ") and "pa.yaml" in mixed[0]


# ---------------------------------------------------------------------------------------------
# schema

def test_a_layer_without_parallel_sizes_has_no_parallelism():
    from selector.core.layer import make_layer
    bare = make_layer({"op": "moe", "quant": "nvfp4"})
    assert bare == make_layer({"op": "moe", "quant": "nvfp4", "ep_size": 1, "tp_size": 1})
    assert schema.Layer() == make_layer({})


@pytest.mark.parametrize("node, conf, key", [
    (schema.EngineEntryConf, {"source": "s", "env": {1: "x"}}, "env"),
    (schema.EngineEntryConf, {"source": "s", "names": {None: "x"}}, "names"),
])
def test_a_mapping_with_keys_of_the_wrong_type_is_refused(node, conf, key):
    with pytest.raises(SelectorError, match=key):
        validation.validate(node, conf, "k")


def test_each_quant_scheme_is_found_back_from_its_vllm_quantkey_pair(monkeypatch):
    """selector.engines.vllm maps vLLM's (weight, activation) QuantKeys to a scheme through
    schema.QUANT_SCHEMES' `vllm_keys`; with a stand-in for vLLM's quant_utils (one object per
    QuantKey name), every scheme that names a pair is found back from it."""
    names = {k for s in schema.QUANT_SCHEMES.values() for k in s.vllm_keys if k}
    names |= {"kNvfp4Static", "kNvfp4DynamicToken"}
    q = types.ModuleType("quant_utils")
    for n in names:
        setattr(q, n, object())
    for mod in ("vllm", "vllm.model_executor", "vllm.model_executor.layers",
                "vllm.model_executor.layers.quantization",
                "vllm.model_executor.layers.quantization.utils"):
        monkeypatch.setitem(sys.modules, mod, types.ModuleType(mod))
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.quantization.utils.quant_utils", q)
    sys.modules["vllm.model_executor.layers.quantization.utils"].quant_utils = q
    from selector.engines import vllm
    found = 0
    for name, s in schema.QUANT_SCHEMES.items():
        assert len(s.vllm_keys) == 2, (name, s.vllm_keys)
        w, a = s.vllm_keys
        if w is None:
            continue
        key = (getattr(q, w), getattr(q, a) if a else None)
        if name == "nvfp4":
            continue  # vLLM's NVFP4 activations are per token: kNvfp4DynamicToken
        assert vllm.quant_scheme(*key) == name
        found += 1
    assert found >= 8
    assert vllm.quant_scheme(q.kNvfp4Static, q.kNvfp4DynamicToken) == "nvfp4"
    assert vllm.quant_scheme(q.kMxfp8Static, q.kMxfp8Dynamic) == "mxfp8"
    assert vllm.quant_scheme(q.kMxfp4Static, q.kMxfp8Dynamic) == "mxfp4_w4a8"
    assert vllm.moe_quant(q.kMxfp4Static, None) == "mxfp4"


# ---------------------------------------------------------------------------------------------
# probe_specs

def _declaration(**over):
    conf = {"name": "mut.test_probe", "func": "selector.backends.children.probes.import_probes:import_attr",
            "description": "a test probe", "source": "test", "imports": [], "requires": {}}
    conf.update(over)
    return conf


@pytest.mark.parametrize("imports, group", [([], "metadata"), (["torch"], "torch"),
                                            (["torch", "flashinfer"], "torch"),
                                            (["b12x.gating", "torch"], "import:b12x")])
def test_a_declared_probes_group_is_its_first_import(monkeypatch, imports, group):
    monkeypatch.setattr(probe_specs, "DECLARED", {})
    spec = probe_specs.declare(_declaration(imports=imports), "k", "f.yaml")
    assert spec.group == group and spec.imports == tuple(imports)
    assert probe_specs.resolve("mut.test_probe") == spec


def test_a_declared_probes_imports_are_module_names(monkeypatch):
    monkeypatch.setattr(probe_specs, "DECLARED", {})
    with pytest.raises(SelectorError, match=r"k.imports.*is not a module name"):
        probe_specs.declare(_declaration(imports=["torch", "not a module"]), "k", "f.yaml")


@pytest.mark.parametrize("probe, dist", [("flashinfer.declarations", "flashinfer-python"),
                                         ("b12x.declarations", "b12x")])
def test_the_declaration_probes_are_skipped_without_their_distribution(monkeypatch, probe, dist):
    import importlib.metadata as md

    from selector.inspect import probing
    real = md.version

    def version(name):
        if name == dist:
            raise md.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(md, "version", version)
    assert probing._skip_reason(probe_specs.resolve(probe)) == f"{dist} not installed"


def test_doctor_deep_runs_torchs_view_and_both_declaration_probes(monkeypatch):
    """The drift report compares the catalogue with what flashinfer and b12x declare: doctor
    --deep runs those probes (and torch's view of CUDA) whatever the catalogue declares."""
    from selector.commands import doctor
    from selector.inspect import probing
    wanted = []

    def probe_once(names, **kw):
        wanted.extend(names)
        return probing.DeepReport({}, [], 0.0)
    monkeypatch.setattr(probing, "probe_once", probe_once)
    doctor.build_report(["platform=h100"], deep=True)
    assert {"torch.cuda", "flashinfer.declarations", "b12x.declarations"} <= set(wanted)


# ---------------------------------------------------------------------------------------------
# text

def test_wrap_is_textwraps_of_the_printable_text():
    words = "one two three four five six seven eight nine ten eleven twelve " * 4
    assert text.wrap(words) == textwrap.wrap(words)
    assert text.wrap(words, width=30) == textwrap.wrap(words, width=30)
    assert text.wrap("a\nb\x1b[2Jc") == ["a\\nb\\x1b[2Jc"]
    seventy_one = "a" * 35 + " " + "b" * 35  # one line at 71 columns, two at textwrap's 70
    assert text.wrap(seventy_one) == textwrap.wrap(seventy_one) == ["a" * 35, "b" * 35]
