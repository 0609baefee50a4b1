"""The first ten minutes and the daily loop (issue 17): each point has a test here."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import REPO, assert_clean_error, load, run_cli, run_cli_many

from selector.core.errors import SelectorError

DGX = ("platform=dgx_spark", "stack=flashinfer_0_7_4", "layer=nemotron_moe")


# 1. A hardware preset alone answers, with one prominent line naming what to add -------------
def test_preset_without_stack_selects_the_reference_and_says_what_to_add():
    d = load("platform=b200").default()
    assert d.selected == "emulation" and d.outcome == "selected"
    hint = d.notes_of("no_packages")
    assert len(hint) == 1 and hint[0].severity == "warning"
    assert all(a.startswith("stack=") for a in hint[0].data["add"]) and hint[0].data["add"]
    assert d.note_data[0] == hint[0] and d.hint == str(hint[0])
    text = str(d).splitlines()
    assert text[2].startswith("!! this platform lists no packages")  # right under platform:
    assert d.to_dict()["notes"][0] == d.hint


def test_no_hint_once_packages_are_given():
    assert load("platform=b200", "stack=vllm_0_32").default().hint == ""
    assert load("platform=b200", "platform.packages.torch=2.11.0").default().hint == ""


def test_hint_names_only_existing_stacks():
    hint = load("platform=dgx_spark").default().hint
    stacks = {p.stem for p in (REPO / "conf" / "stack").glob("*.yaml")}
    named = re.findall(r"stack=(\w+)", hint)
    assert named and set(named) <= stacks


def test_cpu_preset_runs_the_reference():
    assert load("platform=cpu").default().selected == "emulation"
    assert load("platform=cpu", "layer=dense_linear").default().selected == "emulation"


# 4. Why selected is None: the outcome field --------------------------------------------------
@pytest.mark.parametrize("overrides,outcome", [
    (DGX, "selected"),
    (DGX + ("policy.moe_backend=flashinfer_trtllm",), "refused_explicit"),
    (("platform=cpu", "layer.activation=relu2"), "nothing_fits"),
    (DGX + ("layer.quant=unquantized",), "unsupported_layer"),
])
def test_outcome(overrides, outcome):
    d = load(*overrides).default()
    assert d.outcome == outcome and d.to_dict()["outcome"] == outcome
    assert d.ok == (outcome == "selected")


def test_outcome_in_cli_json():
    r = run_cli("explain", "--format", "json", *DGX, "policy.moe_backend=flashinfer_trtllm")
    assert r.returncode == 1 and r.json["outcome"] == "refused_explicit"


# 3. From decision to a running backend --------------------------------------------------------
def test_instantiate_prepare_apply_emulation_on_cpu():
    torch = pytest.importorskip("torch")
    from selector.backends.formats import nvfp4 as nv
    from selector.backends.reference import route
    d = load("platform=cpu", "layer.hidden_size=256", "layer.intermediate_size=128",
             "layer.num_experts=8", "layer.top_k=2").default()
    moe = d.instantiate(compute_dtype=torch.float32)
    assert type(moe).__name__ == "EmulationMoE" and moe.decision is d
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(8, 256, 256, generator=g) * 0.05
    w2 = torch.randn(8, 256, 128, generator=g) * 0.05
    x = torch.randn(4, 256, generator=g, dtype=torch.bfloat16)
    prepared = moe.prepare(nv.quantize_moe(w13, w2))
    tw, ti = route(torch.randn(4, 8, generator=g), 2)
    y = moe.apply(x, prepared, tw, ti)
    assert y.shape == (4, 256) and torch.isfinite(y.float()).all()


def test_instantiate_without_selection_names_the_outcome():
    d = load(*DGX, "policy.moe_backend=flashinfer_trtllm").default()
    with pytest.raises(SelectorError, match="refused_explicit"):
        d.instantiate()


# 5. Log lines an engine can keep ---------------------------------------------------------------
def test_log_line_names_distinguishing_fields_and_no_moe_fields_on_linear():
    moe = load(*DGX).default().log_line()
    assert all(f in moe for f in ("selector: moe ", "activation=relu2", "act_and_mul=False",
                                  "hidden_size=2688", "num_experts=128", "top_k=6"))
    lin = load("platform=dgx_spark", "stack=flashinfer_0_7_4", "layer=dense_linear"
               ).default().log_line()
    assert "linear" in lin and "hidden_size=4096" in lin
    for moe_only in ("activation", "act_and_mul", "num_experts", "top_k", "ep_size"):
        assert moe_only not in lin.split("->")[0], lin


def test_refusal_log_line_names_request_and_first_failing_rule():
    line = load(*DGX, "policy.moe_backend=flashinfer_trtllm").default().log_line()
    assert "[refused_explicit]" in line and "requested flashinfer_trtllm" in line
    assert "[device]" in line


# 6. The operator's daily loop -------------------------------------------------------------------
def test_explain_why_line_presets_exclude():
    why, why_bad, line, presets, presets_json = run_cli_many([
        ("explain", *DGX, "--why", "flashinfer_trtllm"),
        ("explain", *DGX, "--why", "flashinfer_trtlm"),
        ("explain", *DGX, "--format", "line"),
        ("list", "--presets"),
        ("list", "--presets", "--format", "json")])
    assert why.returncode == 1 and why.stdout.startswith("flashinfer_trtllm: rejected")
    assert "marlin" not in why.stdout and "[device]" in why.stdout
    assert_clean_error(why_bad, "--why", "did you mean 'flashinfer_trtllm'")
    assert line.returncode == 0 and len(line.stdout.splitlines()) == 1
    # the default carries warning-level rules of flashinfer_cutlass on SM 12.1: marked
    assert "-> flashinfer_cutlass [selected, warning] flashinfer_cutlass: " in line.stdout
    for group in ("platform=", "stack=", "layer=", "policy="):
        assert group in presets.stdout
    stacks = json.loads(presets_json.stdout)["stack"]
    assert "vllm 0.32.0" in stacks["vllm_0_32"]["describes"]


def test_backend_list_first_usable_wins_and_strict_applies_to_the_list():
    d = load(*DGX, "policy.moe_backend=[flashinfer_trtllm,flashinfer_b12x]").default()
    assert d.selected == "flashinfer_b12x" and d.requested == "flashinfer_trtllm,flashinfer_b12x"
    d = load(*DGX, "policy.moe_backend=[flashinfer_trtllm,flashinfer_cutedsl]").default()
    assert d.selected is None and d.outcome == "refused_explicit"
    refused = d.notes_of("request_refused")
    assert [f["backend"] for f in refused[0].data["failing"]] == ["flashinfer_trtllm",
                                                                   "flashinfer_cutedsl"]
    d = load(*DGX, "policy.moe_backend=[flashinfer_trtllm,flashinfer_cutedsl]",
             "policy.strict=false").default()
    assert d.selected == "flashinfer_cutlass" and d.outcome == "selected"
    assert d.marks[0] == "fallback" and d.notes_of("fallback")[0].data["chose"] == d.selected


def test_exclude_never_chooses():
    d = load(*DGX, "policy.exclude=[flashinfer_cutlass]").default()
    assert d.selected == "emulation"
    c = d.candidate("flashinfer_cutlass")
    assert c.status == "rejected" and c.reasons[0].rule == "exclude"
    with pytest.raises(SelectorError, match="policy.exclude"):
        load(*DGX, "policy.exclude=[nope]")


# 7. check reports every problem of a file, and warns on activation-blind backends -------------
def test_check_reports_every_problem_and_warns(tmp_path: Path):
    (tmp_path / "backend" / "moe").mkdir(parents=True)
    (tmp_path / "backend" / "moe" / "broken.yaml").write_text(
        'rank: 777\nexecuton: native\nrules:\n  - kind: devise\n    source: "x"\n'
        '  - kind: cuda\n    specifier: ">=12.8"\n')
    (tmp_path / "backend" / "moe" / "blind.yaml").write_text(
        'rank: 778\nrules:\n  - kind: cuda\n    specifier: ">=12.8"\n    source: "vLLM 0.32.0"\n')
    r = run_cli("check", "--config-dir", str(tmp_path))
    assert r.returncode == 2
    problems = [ln for ln in r.stderr.splitlines() if ln.startswith("  - ")]
    assert len(problems) == 3, r.stderr
    assert any("executon" in p for p in problems) and any("devise" in p for p in problems)
    assert any("rules[1]" in p for p in problems)
    assert "warning:" in r.stderr and "blind" in r.stderr


# 8. The docs stand alone --------------------------------------------------------------------------
def test_no_reference_to_files_outside_the_repository():
    """No file of the repository cites the team's notes users cannot open (the interface
    contract is docs/interface.md)."""
    outside = ("CONTRACT" + ".md", "FACTS" + ".md")  # spelled so that this file passes too
    files = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted(p for d in ("selector", "backends", "tests", "tools", "conf", "benchmarks")
                     for p in (REPO / d).rglob("*") if p.suffix in (".py", ".md", ".yaml", ".sh"))]
    bad = [str(f.relative_to(REPO)) for f in files if f.is_file()
           and any(n in f.read_text(errors="replace") for n in outside)]
    assert not bad, bad


def test_list_presets_describes_each_group_in_order(tmp_path):
    from selector.commands.preset_list import presets_dict, presets_text
    from selector.config.dirs import ConfigTree
    from selector.core.packaged import packaged_conf_dir
    (tmp_path / "layer").mkdir()
    (tmp_path / "layer" / "mine.yaml").write_text(
        "defaults:\n  - default\nop: moe\nquant: nvfp4\ntop_k: 2\ndtype: bfloat16\n")
    tree = ConfigTree.from_dirs([packaged_conf_dir(), tmp_path])
    got = presets_dict(tree)
    assert list(got) == ["platform", "stack", "layer", "policy"]
    assert got["layer"]["deepseek_moe"]["describes"] == (
        "op moe, quant nvfp4, activation silu, act_and_mul True, hidden_size 7168, "
        "intermediate_size 2048, num_experts 256, top_k 8")
    assert got["layer"]["mine"] == {"describes": "op moe, quant nvfp4, top_k 2",
                                    "values": {"op": "moe", "quant": "nvfp4", "top_k": 2,
                                               "dtype": "bfloat16"}}
    assert got["platform"]["auto"]["describes"].startswith("detect this machine")
    assert got["platform"]["b200"]["describes"] == "NVIDIA B200 (SM 10.0)"
    assert got["platform"]["cpu"]["describes"] == "no GPU"
    text = presets_text(tree).splitlines()
    assert text[0] == "platform= (use platform=NAME)" and "layer= (use layer=NAME)" in text


def test_merging_keeps_only_the_old_cells_of_this_machine_not_measured_again(tmp_path):
    """`tune` merges into an existing profile (in the fast suite: test_tune.py is slow-marked)."""
    from selector.commands.tune import _merge
    from selector.core import profile as prof
    layer = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
                 tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
                 swiglu_limit=None, num_experts=None, top_k=None, all2all=None,
                 act_scale=None, routing=None, quant_method=None, dp_size=None)
    key = {"gpu": None, "capability": None, "driver": None, "cuda": None,
           "packages": {"torch": "2.13.0"}, "selector": "0.1.0", "machine": "x86_64"}

    def _timing(med):
        return prof.Timing(med, med * 0.9, med * 1.1, 8)

    def _profile(key, cells):
        return prof.Profile(key, tuple(prof.Cell(dict(layer, num_tokens=t), t, times, {})
                                       for t, times in cells), {"warmup": 1}, "now")
    new = _profile(key, [(128, {"emulation": _timing(1.0)})])
    f = tmp_path / "p.json"
    assert _merge(new, str(f)) == (new, 0)  # no file yet
    f.write_text("not json")
    with pytest.raises(SelectorError, match="not a selector profile"):  # never overwritten
        _merge(new, str(f))
    assert f.read_text() == "not json"
    f.write_text(_profile(dict(key, machine="aarch64"), [(64, {"emulation": _timing(2.0)})])
                 .dumps())
    assert _merge(new, str(f)) == (new, 0)  # another machine's
    old = _profile(key, [(64, {"emulation": _timing(2.0)}), (128, {"emulation": _timing(3.0)})])
    f.write_text(old.dumps())
    merged, kept = _merge(new, str(f))
    assert kept == 1 and [c.tokens for c in merged.cells] == [64, 128]
    assert merged.cells[1] == new.cells[0] and merged.key == new.key
