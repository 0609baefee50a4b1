"""The packaged catalogue (conf/backend/): the backends docs/interface.md names, for their ops
and no other; every rule cites a source; `check` passes on the packaged tree; docs/rules.md is
generated from it and does not drift."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from helpers import REPO, load

from selector.core import schema
from selector.core.rules import reason_rules

# the interface contract, a file of the repository
INTERFACE = REPO / "docs" / "interface.md"


def _yaml_names(op):
    return sorted(p.stem for p in (REPO / "conf" / "backend" / op).glob("*.yaml"))


@pytest.fixture(scope="module")
def cat():
    return load("platform=cpu").catalogue


def test_every_backend_file_is_in_the_catalogue_for_its_op_and_no_other(cat):
    ops = sorted(p.name for p in (REPO / "conf" / "backend").iterdir() if p.is_dir())
    assert ops == sorted(schema.OPS)
    for op in ops:
        assert sorted(cat.names(op)) == _yaml_names(op) and _yaml_names(op), op
        assert "emulation" in cat.names(op), "the reference must back every op"


def test_backend_names_match_the_interface_text(cat):
    """docs/interface.md's "Backend names" lists each op's backends in preference order, the
    opt-in ones marked (tools/regen.py writes the block)."""
    text = INTERFACE.read_text()
    m = re.search(r"### Backend names\n.*?<!-- regen:backend-names -->\n(.*?)<!-- /regen", text, re.S)
    assert m, "docs/interface.md has no 'Backend names' block: python tools/regen.py"
    listed = dict(re.findall(r"^- (\w+) \(\d+\): (.*)\.$", m.group(1), re.M))
    assert sorted(listed) == sorted(cat.backends), listed
    for op, backends in cat.backends.items():
        names = re.findall(r"`([a-z0-9_]+)`( \(opt-in\))?", listed[op])
        assert [n for n, _ in names] == [b.name for b in backends], (op, "python tools/regen.py")
        assert {n for n, o in names if o} == {b.name for b in backends if b.opt_in}, op


def test_every_rule_cites_a_source(cat):
    n = 0
    for op, backends in cat.backends.items():
        for b in backends:
            # the reference needs nothing the asking engine lacks (issue 17): it may have none
            assert b.rules or b.execution == "reference", f"{op}.{b.name} has no rules"
            for r in b.rules:
                n += 1
                src = r.source.strip()
                assert src and src != "???" and len(src) >= 8, (r.key, r.source)
                assert r.kind in reason_rules()
                assert r.key.startswith(f"catalogue.{op}.{b.name}.rules[")
    assert n > 95


def test_backend_fields(cat):
    for op, backends in cat.backends.items():
        ranks = [b.rank for b in backends]
        assert len(set(ranks)) == len(ranks), f"{op}: ranks must be distinct"
        assert ranks == sorted(ranks)
        for b in backends:
            assert b.description.strip(), b.name
            assert b.entry_point and re.fullmatch(r"selector\.backends\.wrappers\.[a-z0-9_]+:[A-Z]\w+", b.entry_point)
            assert b.implements and set(b.implements) <= set(schema.QUANTS), b.name
            assert Path(b.file).name == f"{b.name}.yaml"


def _opt_in_files():
    """The opt-in backends as their files declare them (`opt_in:`), read with PyYAML alone: the
    set is derived from the catalogue's files, never written in a test."""
    out = {}
    for f in sorted((REPO / "conf" / "backend").glob("*/*.yaml")):
        opt_in = (yaml.safe_load(f.read_text()) or {}).get("opt_in")
        if opt_in:
            out[f.parent.name, f.stem] = opt_in
    return out


def test_execution_kinds_and_opt_in(cat):
    execution = {(op, b.name): b.execution for op, bs in cat.backends.items() for b in bs}
    assert {k for k, v in execution.items() if v == "weight_only"} == {("moe", "marlin"),
                                                                       ("linear", "marlin")}
    assert {k for k, v in execution.items() if v == "reference"} == {("moe", "emulation"),
                                                                     ("linear", "emulation")}
    opt_in = {(op, b.name): b.opt_in for op, bs in cat.backends.items() for b in bs if b.opt_in}
    declared = _opt_in_files()
    assert set(opt_in) == set(declared) and opt_in, (set(opt_in), set(declared))
    for key, o in opt_in.items():  # each with its reason and public source, as its file says
        assert (o.reason, o.source) == (declared[key]["reason"], declared[key]["source"]), key
        assert o.reason.strip() and o.source.strip(), key
    # vLLM's automatic order (vLLM 0.32.0 fused_moe/oracle/nvfp4.py and
    # kernels/linear/nvfp4): the catalogue's rank order, among the backends vLLM names, keeps
    # it. A new backend (any rank) leaves this test alone.
    def vllm_order(op):
        return [b.name for b in cat.backends[op] if not b.opt_in
                and dict(b.engines).get("vllm") and dict(b.engines)["vllm"].name]
    moe = vllm_order("moe")
    assert [n for n in moe if n in VLLM_MOE] == [n for n in VLLM_MOE if n in moe]
    assert set(VLLM_MOE) <= set(moe)
    linear = vllm_order("linear")
    assert [n for n in linear if n in VLLM_LINEAR] == [n for n in VLLM_LINEAR if n in linear]
    assert set(VLLM_LINEAR) <= set(linear)


VLLM_MOE = ("flashinfer_trtllm", "flashinfer_cutedsl", "flashinfer_cutlass", "cutlass", "marlin")
VLLM_LINEAR = ("flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_b12x", "cutlass", "marlin",
               "flashinfer_cudnn")


def test_a_wrapper_takes_its_name_and_kernel_distributions_from_its_backend_file(cat):
    """The wrapper's `backend` is the stem of the file naming it; `needs_any` is that file's
    kernel package rule (Marlin's once lacked the YAML's sglang>=0.5.10 alternative)."""
    from selector.core.entry_points import load_entry_point
    for op, backends in cat.backends.items():
        for b in backends:
            cls = load_entry_point(b.entry_point, b.name)
            assert cls.backend == b.name and cls.op == op, b.entry_point
    marlin = load_entry_point(cat.get("moe", "marlin").entry_point, "marlin")
    rule = next(r for r in cat.get("moe", "marlin").rules if r.kind == "package")
    assert marlin.needs_any == rule.params.any_of
    assert "sglang>=0.5.10" in marlin.needs_any


def test_instantiate_hands_the_implementation_the_whole_layer():
    """Decision.instantiate passes the decision and its whole layer (not a hand-copied subset
    of keys): dtype, num_tokens and top_k reach the implementation too."""
    d = load("platform=cpu").select(op="moe", dtype="float16", num_tokens=7, top_k=2,
                                    activation="relu2", act_and_mul=False)
    impl = d.instantiate()
    assert impl.backend == d.selected and impl.decision is d
    assert (impl.dtype, impl.num_tokens, impl.top_k) == ("float16", 7, 2)
    assert (impl.activation, impl.act_and_mul) == ("relu2", False)
    assert impl.layer == d.layer.to_dict()
    assert d.instantiate(dtype="float32").dtype == "float32"  # an option overrides the layer


def test_swiglu_clamp_set(cat):
    """Every MoE backend applies swiglu_limit except flashinfer_b12x; for FP8 and MXFP8,
    TRT-LLM applies it to block-scaled SwiGLU layers only (vLLM trtllm_fp8_moe.py)."""
    fp8_family = set(schema.FP8_QUANTS) | {"mxfp8"}
    no_clamp = {b.name for b in cat.backends["moe"] if any(
        r.kind == "clamp" and not (r.when.get("quant") and r.when.get("quant") <= fp8_family)
        for r in b.rules)}
    assert no_clamp == {"flashinfer_b12x"}
    fp8 = {b.name for b in cat.backends["moe"] if any(
        r.kind == "clamp" and r.when.get("quant") and r.when.get("quant") <= fp8_family
        for r in b.rules)}
    assert fp8 == {"flashinfer_trtllm"}


def test_no_ep_backends(cat):
    """flashinfer_b12x and b12x do not support EP; the others do (each `parallel` rule cites
    its source)."""
    no_ep = {b.name for b in cat.backends["moe"]
             if any(r.kind == "parallel" and r.ep is False for r in b.rules)}
    assert no_ep == {"flashinfer_b12x", "b12x"}


def _missing_entry_points(cat):
    import importlib
    missing = []
    for bs in cat.backends.values():
        for b in bs:
            module, _, attr = b.entry_point.partition(":")
            try:
                if not hasattr(importlib.import_module(module), attr):
                    missing.append(b.entry_point)
            except ImportError:
                missing.append(b.entry_point)
    return missing


def test_check_passes_on_the_packaged_tree(cat):
    missing = _missing_entry_points(cat)
    if missing:
        pytest.skip(f"backends/ entry points not written yet: {missing}")
    from selector.commands.check import check_tree
    report = check_tree([], [])
    assert report["problems"] == [] and report["ok"] is True
    assert report["backends"] == {op: _yaml_names(op) for op in schema.OPS}
    assert report["files"] >= sum(len(_yaml_names(op)) for op in schema.OPS)


def test_check_catches_a_duplicate_rank(tmp_path):
    d = tmp_path / "backend" / "moe"
    d.mkdir(parents=True)
    (d / "twin.yaml").write_text('description: "same rank as marlin"\nrank: 60\nrules:\n'
                                 '  - kind: clamp\n    source: "test"\n')
    from selector.commands.check import check_tree
    report = check_tree([], [str(tmp_path)])
    assert report["ok"] is False
    assert any("rank" in p["problem"] and "marlin" in p["problem"] for p in report["problems"])


def test_docs_rules_md_is_generated_from_the_catalogue(cat):
    from selector.commands.listing import catalogue_markdown
    path = REPO / "docs" / "rules.md"
    assert path.is_file(), "generate it: python -m selector.commands.listing > docs/rules.md"
    want = catalogue_markdown(cat)
    assert path.read_text() == want, \
        "docs/rules.md drifted from conf/backend/: python -m selector.commands.listing > docs/rules.md"
    for _op, bs in cat.backends.items():
        for b in bs:
            assert f"### `{b.name}`" in want
            for r in b.rules:
                assert r.source in want


def test_importing_the_listing_module_prints_nothing(capsys):
    """Only `python -m selector.commands.listing` prints the catalogue, not an import."""
    import runpy

    from selector.commands import listing
    names = runpy.run_path(listing.__file__, run_name="selector.commands.listing_imported")
    assert "catalogue_markdown" in names and capsys.readouterr().out == ""
