"""Tests written against the commands shard's mutation survivors (issue #36; docs/guarantees.md,
"Every module, sharded"): `check`'s warnings and its every-problem report, an engine's
`outside:` against the backends it names, `list`'s warning marks, the matrix's refused overrides
and the command it writes, doctor's report and text (no probe, no verification, a faked machine),
and tune's input checks, grid and summary with the timing children and the verification faked
(tests/test_tune.py runs them for real, slow-marked). In-process and quick."""
from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import run_main
from packaging.version import Version

from selector.commands import check, doctor, listing, matrix, tune
from selector.core.errors import SelectorError


def _backend(root: Path, op: str, name: str, text: str) -> Path:
    d = root / "backend" / op
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(textwrap.dedent(text))
    return d / f"{name}.yaml"


# ---------------------------------------------------------------------------------------------
# check

def _warnings_of(report, file: Path):
    return [w["warning"] for w in report["warnings"] if w["file"] == str(file)]


def test_check_warns_of_a_moe_backend_without_an_activation_rule_of_either_kind(tmp_path):
    """A MoE backend with no `activation` and no `act_and_mul` rule claims every activation:
    check warns; one rule of either kind is enough to say which it runs."""
    none = _backend(tmp_path, "moe", "noact", """\
        description: "a MoE backend whose rules say nothing of the activation"
        rank: 991
        implements: [nvfp4]
        rules:
          - {kind: package, package: torch, source: "test"}
        """)
    act = _backend(tmp_path, "moe", "act_only", """\
        description: "an activation rule only"
        rank: 992
        implements: [nvfp4]
        rules:
          - {kind: activation, values: [silu], source: "test"}
        """)
    mul = _backend(tmp_path, "moe", "mul_only", """\
        description: "an act_and_mul rule only"
        rank: 993
        implements: [nvfp4]
        rules:
          - {kind: act_and_mul, gated: [silu], non_gated: [], source: "test"}
        """)
    report = check.check_tree([], [str(tmp_path)])
    assert report["ok"], report["problems"]
    claim = "declares no activation or act_and_mul rule"
    assert any(claim in w for w in _warnings_of(report, none))
    assert not any(claim in w for w in _warnings_of(report, act) + _warnings_of(report, mul))


def test_check_names_only_the_engines_a_backend_file_leaves_out(tmp_path):
    """An engine whose file does not list its backends (no home `backends:`) has the backends
    that name it: a backend file without that engine's entry is warned about, naming that
    engine only (not the ones it names, not `none`, not an engine whose file lists its own
    backends: vLLM, SGLang and TensorRT-LLM do)."""
    from selector.core.engines import ENGINES
    b = _backend(tmp_path, "linear", "half_named", """\
        description: "names vLLM only"
        rank: 991
        implements: [nvfp4]
        engines:
          vllm: {name: half-named, source: "test"}
        rules:
          - {kind: package, package: torch, source: "test"}
        """)
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "bare.yaml").write_text('name: bare\nsource: "test"\n')
    report = check.check_tree([], [str(tmp_path)])
    assert report["ok"], report["problems"]
    mine = _warnings_of(report, b)
    assert len(mine) == 1 and "has no engines.bare entry" in mine[0], mine
    assert "engine=bare" in mine[0] and "vllm" not in mine[0] and "sglang" not in mine[0]
    assert "none" in ENGINES  # the no-engine option, which no backend file names
    # the packaged engines list their own backends: no packaged file is warned about
    assert [w for w in check.check_tree([], [])["warnings"] if "has no engines." in w["warning"]] == []


def test_check_reports_every_bad_part_of_a_backend_file_not_only_the_first(tmp_path):
    f = _backend(tmp_path, "moe", "twobad", """\
        description: "two bad parts"
        rank: 993
        execution: sometimes
        implements: [no_such_scheme]
        """)
    report = check.check_tree([], [str(tmp_path)])
    problems = [p["problem"] for p in report["problems"] if p["file"] == str(f)]
    assert not report["ok"]
    assert len(problems) == 2, problems
    assert "catalogue.moe.twobad.execution" in problems[0] and "'sometimes'" in problems[0]
    assert "catalogue.moe.twobad.implements" in problems[1] and "no_such_scheme" in problems[1]


ENGINE = """\
name: tgi
label: "TGI 9.9"
source: "TGI 9.9 launcher/src/main.rs"
proof: "none: a throwaway engine of tests/test_mutation_commands.py"
choices:
  - {op: moe, flag: "--moe-kernel"}
backends:
  moe:
    flashinfer_cutlass: {name: fi-cutlass-moe, source: "TGI 9.9 server/moe.py"}
launch:
  command: [text-generation-launcher, --model-id, "{model}"]
  parallel: {rule: ep_divides_tp, tp: "--num-shard", source: "TGI 9.9 launcher/src/main.rs"}
"""


@pytest.mark.parametrize("why, clash", [
    ("TGI's own kernel", True),  # names no scheme: the name is the catalogue's backend
    ("TGI's NVFP4 path", True),  # a scheme flashinfer_cutlass implements: still the backend
    ("TGI's int4 path", False),  # a scheme it does not implement: an engine kernel outside
])
def test_an_engine_outside_entry_that_is_its_own_name_for_a_backend(tmp_path, why, clash):
    """`outside:` lists the engine's backends the catalogue does not model; the engine's own
    name for a catalogue backend is refused there, unless the reason names a scheme that
    backend does not implement (vLLM's `torch`: its FP8 torch._scaled_mm linear backends)."""
    root = tmp_path / "conf"
    (root / "engine").mkdir(parents=True)
    (root / "engine" / "tgi.yaml").write_text(ENGINE + f'outside:\n  fi-cutlass-moe: "{why}"\n')
    report = check.check_tree([], [str(root)])
    found = [p["problem"] for p in report["problems"] if "engine.outside.fi-cutlass-moe" in p["problem"]]
    if clash:
        assert len(found) == 1 and "tgi's name for moe/flashinfer_cutlass" in found[0], found
    else:
        assert found == [] and report["ok"], report["problems"]


# ---------------------------------------------------------------------------------------------
# list, matrix

def test_list_marks_exactly_the_warning_rules():
    from selector.api import load
    cat = load([]).catalogue
    text = listing.catalogue_text(cat)
    rules = [r for bs in cat.backends.values() for b in bs for r in b.rules]
    warnings = [r for r in rules if r.severity == "warning"]
    assert warnings and len(warnings) < len(rules)
    assert text.count(" [warning]  -- ") == len(warnings)
    for r in warnings:
        assert f"{r.describe()} [warning]  -- {r.source}" in text


@pytest.mark.parametrize("override", ["stack.cuda=13.0", "+stack.family=x", "platform.gpu_name=x"])
def test_the_matrix_refuses_a_stack_or_platform_key_override(override):
    with pytest.raises(SelectorError, match="the matrix sets the platform itself") as exc:
        matrix.build(["moe"], None, [override])
    assert exc.value.key == override.lstrip("+").partition("=")[0]


def test_the_matrix_command_line_names_the_stack_only_when_it_is_not_the_default():
    default = matrix.default_stack()
    assert "--stack" not in matrix.command_line(["moe"], default, [], "text")
    assert "--stack" not in matrix.command_line(["moe"], default, [], "text", default)
    # a config dir's own default stack: the command run with that config dir needs no --stack
    assert "--stack" not in matrix.command_line(["moe"], "mine", [], "text", "mine")
    assert "--stack mine" in matrix.command_line(["moe"], "mine", [], "text", default)
    assert f"--stack {default}" in matrix.command_line(["moe"], default, [], "text", "mine")


# ---------------------------------------------------------------------------------------------
# doctor

def _fake_env(count: int = 1, driver_cuda=None):
    from selector.inspect.environment import Environment, Gpu
    gpu = Gpu(name="Fake GPU", capability=(9, 0), driver="575.1", driver_cuda=driver_cuda,
              count=count, method="nvml")
    return Environment((9, 0), "Fake GPU", Version("12.9"), {}, gpu, "nvcc", ())


@pytest.fixture
def nothing_deep(monkeypatch):
    """Doctor's probes and verification fail the test if they run; calls are recorded."""
    from selector.inspect import probing, verify
    calls = []

    def refuse(what):
        def run(*a, **kw):
            calls.append((what, kw))
            raise AssertionError(f"{what} ran")
        return run
    monkeypatch.setattr(probing, "probe_once", refuse("probe_once"))
    monkeypatch.setattr(verify, "verify_once", refuse("verify_once"))
    monkeypatch.setattr(verify, "run_verify", refuse("run_verify"))
    return calls


def test_doctor_by_default_neither_probes_nor_verifies(nothing_deep):
    r = doctor.build_report(["platform=h100"])
    assert r.deep is False and r.deep_report is None and r.verify_report is None
    assert r.to_dict()["probes"] is None and r.to_dict()["verify"] is None
    assert nothing_deep == []


@pytest.mark.parametrize("kw, used", [({}, "verify_once"), ({"verify_cache": True}, "verify_once"),
                                      ({"verify_cache": False}, "run_verify")])
def test_doctor_verify_reuses_the_cache_unless_told_not_to(monkeypatch, kw, used):
    from selector.inspect import verify
    calls = []

    def fake(name):
        def run(sel, overrides, config_dirs, **k):
            calls.append((name, k["use_cache"]))
            return verify.Report([], "fake", None, 0.0)
        return run
    monkeypatch.setattr(verify, "verify_once", fake("verify_once"))
    monkeypatch.setattr(verify, "run_verify", fake("run_verify"))
    r = doctor.build_report(["platform=h100"], verify=True, **kw)
    assert calls == [(used, used == "verify_once")]
    assert r.verify_report.fingerprint == "fake"


@pytest.mark.parametrize("driver_cuda, shown", [(None, None), (Version("12.9"), "12.9")])
def test_doctor_reports_the_drivers_cuda_version_or_none(monkeypatch, nothing_deep, driver_cuda,
                                                          shown):
    from selector.inspect import environment
    monkeypatch.setattr(environment, "detect", lambda names: _fake_env(1, driver_cuda))
    r = doctor.build_report(["platform=h100"])
    assert r.platform["driver_cuda"] == shown
    assert r.to_dict()["platform"]["driver_cuda"] == shown
    text = doctor.render_text(r)
    assert ("(supports CUDA 12.9)" in text) == (shown is not None)


@pytest.mark.parametrize("count", [1, 2, 8])
def test_doctor_text_says_which_gpu_of_several(monkeypatch, nothing_deep, count):
    from selector.inspect import environment
    monkeypatch.setattr(environment, "detect", lambda names: _fake_env(count))
    text = doctor.render_text(doctor.build_report(["platform=h100"]))
    line = next(ln for ln in text.splitlines() if ln.startswith("  GPU "))
    assert ("(GPU 0 of" in line) == (count > 1), line
    if count > 1:
        assert f"Fake GPU (GPU 0 of {count})" in line


def test_doctor_text_of_probe_groups_and_drift(monkeypatch, nothing_deep):
    from selector.inspect import environment
    from selector.inspect.drift import DriftItem
    from selector.inspect.probing import DeepReport, Finding, GroupRun
    monkeypatch.setattr(environment, "detect", lambda names: _fake_env())
    base = doctor.build_report(["platform=h100"])
    rep = DeepReport({"x.ok": Finding("x.ok", "ok", "fine", group="import:x")},
                     [GroupRun("import:x", ("x.ok",), processes=1, seconds=0.5),
                      GroupRun("import:y", ("y.ok",), processes=2, seconds=1.5),
                      GroupRun("import:z", ("z.ok",), processes=3, seconds=1.5)], 2.0)
    drift = [DriftItem("moe/alpha", "sm", "10.0", "agrees", "same", "10.0"),
             DriftItem("moe/beta", "sm", "12.0", "drift", "the library says 12.0", "10.0")]
    text = doctor.render_text(dataclasses.replace(base, deep=True, deep_report=rep, drift=drift))
    assert "  x: 1 process, 0.50 s" in text
    assert "  y: 2 processes, 1.50 s" in text and "  z: 3 processes, 1.50 s" in text
    assert "(1 agree, 0 explained, 1 drift)" in text
    assert "moe/beta  sm: catalogue 10.0; installed 12.0" in text
    assert "moe/alpha" not in text
    assert "exit status 1: the catalogue drifted" in text


# ---------------------------------------------------------------------------------------------
# tune: input checks (exit 2 before anything runs)

def test_tune_parses_token_counts_and_layer_specs():
    assert tune.parse_tokens("1, 16,16,4096") == (1, 16, 4096)
    assert tune.parse_layer_spec("hidden_size=7168,,layer.top_k=2 act_and_mul=true") == {
        "hidden_size": 7168, "top_k": 2, "act_and_mul": True}
    for bad in ("0", "1,x", "-1"):
        with pytest.raises(SelectorError, match="--tokens"):
            tune.parse_tokens(bad)
    for bad in ("", ",,", "hidden_size"):
        with pytest.raises(SelectorError, match="--layer"):
            tune.parse_layer_spec(bad)


@pytest.mark.parametrize("argv, needle", [
    (["--timer", "wallclock"], "--timer: 'wallclock' is not one of graph, events"),
    (["--timer", "events"], "platform=h100: tune times kernels on this machine"),
    (["--timer", "graph"], "platform=h100: tune times kernels on this machine"),
    (["--repeats", "10001"], "at most 10000 calls each"),
    (["--warmup", "10001"], "at most 10000 calls each"),
    (["--repeats", "10000", "--warmup", "10000"], "platform=h100: tune times kernels"),
])
def test_tune_refuses_bad_settings_and_takes_good_ones(argv, needle):
    """Each setting is checked before the platform; a good one passes on to the platform check
    (a preset platform: tune times this machine only)."""
    rc, out, err = run_main(["tune", *argv, "platform=h100"])
    assert rc == 2 and needle in err, (rc, out, err)


# ---------------------------------------------------------------------------------------------
# tune: the grid, the profile and the summary (verification and the timing children faked)

@pytest.fixture
def fake_timing(monkeypatch):
    """verify_once verifies nothing (no rejection); each usable backend is 'timed' at a fixed
    median, 1 to 3 ms by its name."""
    from selector.core import profile as prof
    from selector.inspect import tuning, verify
    timed = []

    def fake_verify(sel, overrides, config_dirs, **kw):
        return verify.Report([], "fake", None, 0.0)

    def fake_time(b, cases, overrides, config_dirs, **kw):
        timed.append((b.name, [layer["num_tokens"] for _, layer in cases]))
        ms = 1.0 + len(b.name) % 3
        return [tuning.CaseResult(b.name, cid, prof.Timing(ms, ms, ms, 5), device="cpu",
                                  timer="perf_counter") for cid, _ in cases]
    monkeypatch.setattr(verify, "verify_once", fake_verify)
    monkeypatch.setattr(tuning, "time_backend", fake_time)
    return timed


SMALL = ["layer=dense_linear", "layer.hidden_size=256", "layer.intermediate_size=256"]


def test_tune_times_the_token_counts_given_and_compares_the_static_pick(fake_timing, tmp_path):
    out = tmp_path / "p.json"
    rc, stdout, err = run_main(["tune", *SMALL, "--tokens",
                                "4,64", "--out", str(out), "--format", "json"])
    assert rc == 0, err
    doc = json.loads(stdout)
    assert [c["tokens"] for c in doc["cells"]] == [4, 64]
    assert fake_timing and all(tokens == [4, 64] for _, tokens in fake_timing)
    for c in doc["cells"]:
        assert c["static"] in c["times"], c
        ms = {b: t["median_ms"] for b, t in c["times"].items()}
        assert c["fastest"] == min(ms, key=ms.__getitem__)
        assert c["static_over_fastest"] == round(ms[c["static"]] / min(ms.values()), 3)
    assert out.is_file()


def test_tune_without_token_counts_times_the_layers_own(fake_timing, tmp_path):
    rc, stdout, err = run_main(["tune", *SMALL,
                                "layer.num_tokens=8", "--out", str(tmp_path / "p.json"),
                                "--format", "json"])
    assert rc == 0, err
    assert [c["tokens"] for c in json.loads(stdout)["cells"]] == [8]


def test_a_cell_over_the_memory_bound_says_how_much_it_needs(fake_timing, tmp_path):
    from selector.inspect import tuning
    big = ["layer=dense_linear", "layer.hidden_size=8192", "layer.intermediate_size=8192"]
    rc, stdout, err = run_main(["tune", *big, "--tokens", "4096",
                                "--max-memory", "0.1", "--out", str(tmp_path / "p.json"),
                                "--format", "json"])
    assert rc == 1, err  # nothing timed
    cell = json.loads(stdout)["cells"][0]
    need = tuning.estimate_bytes("linear", cell["layer"])
    assert need > 2 ** 30 // 4  # large enough for the GiB figure to tell its unit
    assert cell["times"] == {} and fake_timing == []
    assert cell["skipped"] and all(
        why == f"too large here: needs about {need / 2 ** 30:.1f} GiB, over --max-memory 0.1"
        for why in cell["skipped"].values()), cell["skipped"]


def test_the_summary_ratio_needs_the_static_pick_timed():
    t = SimpleNamespace(median_ms=1.0, to_dict=lambda: {})
    timed = tune._cell_dict({"layer": {}, "tokens": 4, "static": "a", "skipped": {},
                             "times": {"a": SimpleNamespace(median_ms=3.0, to_dict=dict), "b": t}})
    assert timed["fastest"] == "b" and timed["static_over_fastest"] == 3.0
    untimed = tune._cell_dict({"layer": {}, "tokens": 4, "static": "c", "skipped": {},
                               "times": {"b": t}})
    assert untimed["fastest"] == "b" and untimed["static_over_fastest"] is None


# ---------------------------------------------------------------------------------------------
# explain --model without an engine: the plan as JSON, --why as JSON

def _checkpoint(tmp_path):
    from checkpoint_fixtures import NEMOTRON_H, nemotron_mixed_precision, write_checkpoint
    return write_checkpoint(tmp_path, "nem", {**NEMOTRON_H,
                                              "quantization_config": nemotron_mixed_precision()})


PLAIN = ("platform=b200", "stack=flashinfer_0_7_4")  # engine none: the plan, no launch plan


def test_explain_model_json_is_the_plan(tmp_path):
    d = _checkpoint(tmp_path)
    rc, out, err = run_main(["explain", "--model", str(d), *PLAIN, "--format", "json"])
    assert rc in (0, 1), err
    assert "launch" not in json.loads(out) and json.loads(out)["kinds"]


def test_explain_model_why_json_is_one_object_per_kind(tmp_path):
    d = _checkpoint(tmp_path)
    rc, out, err = run_main(["explain", "--model", str(d), *PLAIN, "--why", "flashinfer_cutlass",
                             "--format", "json"])
    rows = json.loads(out)
    assert rows and all(r["backend"] == "flashinfer_cutlass" and r["kind"] for r in rows), rows
    rc2, line, _ = run_main(["explain", "--model", str(d), *PLAIN, "--why", "flashinfer_cutlass"])
    assert rc2 == rc and len(line.splitlines()) == len(rows)
