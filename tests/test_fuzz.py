"""Fuzzing of the command line and of config files.

Every case must end with exit code 0, 1 or 2, never a traceback; for 2, `explain`/`list` print
exactly one `selector: error: ...` line (naming the file, and the line where YAML gives one, for
a broken config file) and `check` prints its list of problems, each naming the file.

The bulk runs in-process through `selector.commands.cli.main(argv)` (and, for config files, through the
functions the CLI runs: `load_yaml`, `make_backend`, the Resolver); a handful runs through a real
`python -m selector` subprocess. Hypothesis is derandomised here so that CI sees the same cases
on every run; `benchmarks/fuzz.py` runs the same fuzzers with random seeds and
SELECTOR_FUZZ_SCALE times as many examples, and reports the outcome counts.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pytest
import yaml
from fuzz_support import SCALE, SETTINGS, _private_cache, _report  # noqa: F401 (fixtures)
from helpers import child_env, run_main
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from selector.config import MAX_CONFIG_BYTES, load_yaml, schema_keys
from selector.core import schema
from selector.core.errors import SelectorError
from selector.core.model import Layer, Platform, Policy, RunConfig, make_backend, make_catalogue
from selector.core.resolver import Resolver
from selector.core.rules import WHEN_FIELDS, reason_rules, rule_fields

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"

OUTCOMES: Counter = Counter()  # (fuzzer, outcome) -> count; reported by benchmarks/fuzz.py


def n(base: int) -> int:
    return base * SCALE


# ---------------------------------------------------------------------------------------------
# Running the CLI in-process and judging the outcome

def judge(fuzzer: str, argv: Sequence[str], rc: int, out: str, err: str,
          must_name: Sequence[str] = ()) -> int:
    """Assert the CLI contract for one case and count its outcome."""
    command = argv[0]
    assert rc in (0, 1, 2), (argv, rc, out, err)
    assert "Traceback" not in out and "Traceback" not in err, (argv, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if command == "check":  # check reports warnings (a backend without an engine entry) first
        lines = [ln for ln in lines if not ln.startswith("warning: ")]
    if rc == 2:
        if command == "check" and lines and "problem(s) in" in lines[0]:
            assert all(ln.startswith("  - ") for ln in lines[1:]) and len(lines) > 1, err
            msg = "\n".join(lines[1:])
        else:
            usage = [ln for ln in lines if ln.startswith("usage:") or ln.startswith(" ")]
            lines = [ln for ln in lines if ln not in usage]
            assert len(lines) == 1, f"expected one message, got {err!r} for {argv!r}"
            assert lines[0].startswith("selector: error: "), (argv, err)
            msg = lines[0]
        assert out == "" or command == "check", (argv, out)
        for needle in must_name:
            assert needle in msg, f"{needle!r} not named in {msg!r}"
        OUTCOMES[fuzzer, "exit 2"] += 1
        return rc
    if "--format" in argv and argv[argv.index("--format") + 1] == "json":
        obj = json.loads(out)
        if command == "explain":
            assert set(obj) >= {"layer", "platform", "requested", "selected", "candidates"}
            assert (obj["selected"] is not None) == (rc == 0)
    else:
        assert out.strip(), argv
    assert not lines, (argv, err)  # a decision prints no warnings on stderr
    OUTCOMES[fuzzer, f"exit {rc}"] += 1
    return rc


# ---------------------------------------------------------------------------------------------
# Overrides

def _presets(group: str) -> List[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _backends(op: str) -> List[str]:
    return sorted(p.stem for p in (CONF / "backend" / op).glob("*.yaml"))


KEYS = sorted(set(schema_keys()) | {
    "stack", "backend", "hydra", "hydra.run.dir", "hydra/launcher", "catalogue",
    "catalogue.moe.marlin.rank", "layer.nope", "platform.packages.flashinfer-python",
    "platform.packages.nvidia-cutlass-dsl", "platform.packages.Weird_Name.x",
    "platform.packages.vllm", "platform.gpu_name", "policy.linear_backend", "layer@_global_",
    "platform/x", "_target_", "layer._target_", "defaults", "foo", "probe"})
GOOD_VALUES = (_presets("platform") + _presets("stack") + _presets("layer") + ["default"]
               + _backends("moe") + _backends("linear") + ["auto", "flashinfer-b12x"]
               + list(schema.QUANTS + schema.ACTIVATIONS + schema.DTYPES + schema.ALL2ALL)
               + ["0.6.9", "0.7.4", "4.10", "4.8.1", "'12.1'", "12.1", "13.0", "2.11.0+cu130",
                  "1!2.0", "0.6.18.post1", "1.0rc1", "none", "deep"])
BAD_VALUES = ["null", "true", "false", "0", "-1", "1.5", "1e9", "nan", "inf", "-inf", "[]",
              "[1,2]", "{a:1}", "{}", "''", "'", '"', "${oc.env:HOME}", "${oc.decode:'1'}",
              "${now:%Y}", "${layer.op}", "\\${x}", "${", "}", "a,b", "a b", "é", "\u202e",
              "x" * 3000, "../../etc/passwd", "/etc/passwd", "~", "=", "==", "a=b", "\x00",
              "${oc.env:HOME,${x}}", "interpolation:${x}", "[a,[b,[c]]]", "'4.10'", '"4.10"',
              "4.", ".4", "v1", "1..2", "12.x", ">=1.0", "sm_120a", "１２.１", "\t", "\\",
              "\\'", "'a'b'", "1_000", "0x10", "0o7", "+inf", ".nan", "~x", "@", "#c",
              "*alias", "&anchor", "!!python/object:os.system", "%", "?", "|", ">"]
PREFIXES = ["", "", "", "+", "++", "~"]
ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(
    list("=.+~[]{}'\"\\$:/@,#*&!%?| \t-_0123456789abcxyz"))

override_kv = st.builds(lambda p, k, v: f"{p}{k}={v}", st.sampled_from(PREFIXES),
                        st.sampled_from(KEYS), st.sampled_from(GOOD_VALUES + BAD_VALUES))
override_key = st.builds(lambda p, k: f"{p}{k}", st.sampled_from(PREFIXES), st.sampled_from(KEYS))
override_text = st.text(ALPHABET, max_size=30)


@st.composite
def mutated(draw, base: st.SearchStrategy = override_kv) -> str:
    text = list(draw(base))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "swap"]))
        i = draw(st.integers(0, max(0, len(text) - 1)))
        if op == "delete" and text:
            del text[i]
        elif op == "insert":
            text.insert(i, draw(ALPHABET))
        elif op == "replace" and text:
            text[i] = draw(ALPHABET)
        elif op == "swap" and len(text) > 1:
            j = draw(st.integers(0, len(text) - 1))
            text[i], text[j] = text[j], text[i]
    return "".join(text)


VALID = {"layer.op": schema.OPS, "layer.quant": schema.QUANTS,
         "layer.activation": schema.ACTIVATIONS, "layer.act_and_mul": ("true", "false"),
         "layer.ep_size": ("1", "2", "8"), "layer.tp_size": ("1", "4"),
         "layer.swiglu_limit": ("null", "7.0"), "layer.num_tokens": ("null", "1", "8192"),
         "layer.dtype": schema.DTYPES, "layer.hidden_size": ("4096", "4160"),
         "layer.num_experts": ("128", "512"), "layer.all2all": schema.ALL2ALL,
         "platform.capability": ("'9.0'", "'10.0'", "'12.0'", "'12.1'", "null"),
         "platform.cuda": ("12.8", "12.9", "13.0", "null"),
         "platform.packages.flashinfer-python": ("0.6.8", "0.6.10", "0.6.15", "0.7.2.post1",
                                                 "0.7.4", "null"),
         "platform.packages.nvidia-cutlass-dsl": ("4.4.2", "4.5.0", "4.7.1", "4.10", "null"),
         "platform.packages.vllm": ("0.32.0", "null"), "platform.packages.torch": ("2.11.0",),
         "platform.packages.triton": ("3.6.0", "null"), "platform.packages.b12x": ("0.2.0",),
         "policy.moe_backend": tuple(["auto"] + _backends("moe")),
         "policy.linear_backend": tuple(["auto"] + _backends("linear")),
         "policy.strict": ("true", "false"), "stack": tuple(_presets("stack")),
         "layer": tuple(_presets("layer")), "platform": tuple(p for p in _presets("platform")
                                                              if p != "auto")}
valid_override = st.sampled_from(sorted(VALID)).flatmap(
    lambda k: st.sampled_from(VALID[k]).map(lambda v: f"{k}={v}"))
overrides = st.lists(st.one_of(valid_override, valid_override, valid_override, override_kv,
                               override_key, override_text, mutated()), min_size=1, max_size=4)
COMMANDS = st.sampled_from([["explain"], ["explain"], ["explain", "--format", "json"],
                            ["explain", "--format", "json"], ["list", "--format", "json"],
                            ["check"]])
# A valid base keeps most cases past `platform=auto` detection and into composition.
BASES = st.sampled_from([[], ["platform=cpu"], ["platform=dgx_spark", "stack=flashinfer_0_7_4"],
                         ["platform=b200", "stack=vllm_0_32", "layer=dense_linear"]])


@settings(max_examples=n(30), **SETTINGS)
@given(command=COMMANDS, base=BASES, extra=overrides)
def test_fuzz_overrides(command, base, extra):
    argv = command + ["--"] + base + extra
    rc, out, err = run_main(argv)
    judge("overrides", argv, rc, out, err)


@settings(max_examples=n(12), **SETTINGS)
@given(extra=st.lists(mutated(st.sampled_from(
    ["platform=dgx_spark", "stack=flashinfer_0_7_4", "layer=nemotron_moe",
     "layer.ep_size=2", "policy.moe_backend=flashinfer_b12x", "policy.strict=false",
     "platform.packages.vllm=0.32.0", "layer.swiglu_limit=7.0", "platform.capability=12.0",
     "layer.hidden_size=4096", "policy.linear_backend=flashinfer-cutlass"])), min_size=1,
    max_size=3))
def test_fuzz_mutated_valid_overrides(extra):
    argv = ["explain", "--format", "json", "--", "platform=cpu"] + extra
    rc, out, err = run_main(argv)
    judge("mutated overrides", argv, rc, out, err)


@settings(max_examples=n(40), **SETTINGS)
@given(args=st.lists(st.one_of(
    st.sampled_from(["explain", "list", "check", "doctor", "--format", "json", "text", "yaml",
                     "--config-dir", "/nonexistent", "-h", "--deep", "--timeout", "-1", "x",
                     "--", "-", "--format=json", "platform=cpu", "--bogus"]),
    override_text), max_size=5))
def test_fuzz_argv(args):
    """Arbitrary argument vectors (argparse's own errors included): 0, 1 or 2, no traceback.
    (`doctor` is left out of the bulk: it detects this machine; -h exits 0 after help.)"""
    if "doctor" in args[:1] or "-h" in args or "--help" in args or "--deep" in args:
        return
    rc, out, err = run_main(args)
    assert rc in (0, 1, 2), (args, rc, err)
    assert "Traceback" not in out + err, (args, err)
    if rc == 2:
        msgs = [ln for ln in err.splitlines() if ln.startswith("selector: error: ")]
        check_listed = args[:1] == ["check"] and ("problem(s)" in err or '"problems"' in out)
        assert len(msgs) == 1 or check_listed or \
            (not args or args[0] not in ("explain", "list", "check")), (args, err)
    OUTCOMES["argv", f"exit {rc}"] += 1


# ---------------------------------------------------------------------------------------------
# The embedding API: Selector.select(**layer) and selector.load(overrides)

_API: Dict[str, Any] = {}


def _selector():
    if "sel" not in _API:
        import selector
        _API["sel"] = selector.load(["platform=dgx_spark", "stack=flashinfer_0_7_4"])
    return _API["sel"]


api_values = st.one_of(
    st.sampled_from(list(schema.OPS + schema.QUANTS + schema.ACTIVATIONS + schema.DTYPES +
                         schema.ALL2ALL)),
    st.none(), st.booleans(), st.integers(-3, 1 << 20), st.floats(allow_nan=True),
    st.text(max_size=8), st.lists(st.integers(), max_size=2), st.just(b"silu"),
    st.just({"a": 1}), st.just(object()))


@settings(max_examples=n(200), **SETTINGS)
@given(kwargs=st.dictionaries(st.sampled_from(list(Layer.__dataclass_fields__) +
                                              ["bogus", "layer", "op "]), api_values,
                              max_size=4))
def test_fuzz_select_kwargs(kwargs):
    """`select(**layer)` with any values: a Decision, or SelectorError with one-line text."""
    from selector.core.decision import Decision
    sel = _selector()
    try:
        d = sel.select(**kwargs)
    except SelectorError as exc:
        assert str(exc) and "\n" not in str(exc)
        OUTCOMES["api select", "SelectorError"] += 1
        return
    assert isinstance(d, Decision)
    json.dumps(d.to_dict())
    assert sel.select(**kwargs) is d  # asked again: the same answer
    OUTCOMES["api select", "decision"] += 1


@settings(max_examples=n(40), **SETTINGS)
@given(overrides=st.one_of(
    st.lists(st.one_of(st.none(), st.integers(), st.binary(max_size=5), st.just(["x=1"]),
                       st.sampled_from(["platform=cpu", "layer.op=moe", "~layer"]),
                       override_text), max_size=3),
    st.text(max_size=10), st.none(), st.integers()))
def test_fuzz_load_overrides(overrides):
    """`selector.load(overrides)` with values of any type: a Selector or SelectorError."""
    import selector
    try:
        sel = selector.load(overrides)
    except SelectorError:
        OUTCOMES["api load", "SelectorError"] += 1
        return
    sel.default()
    OUTCOMES["api load", "selector"] += 1


# ---------------------------------------------------------------------------------------------
# Config files: the YAML loader

YAML_PIECES = ["rank: 1", "rules:", "  - kind: device", "    devices: [\"12.x\"]", "[", "]", "{",
               "}", ": :", "- -", "\t", "&a x", "*a", "*b", "!!python/name:os.system", "? a",
               "'unterminated", '"unterminated', "key: value", "  indented: 1", "---", "...",
               "%YAML 1.1", "%TAG ! tag:x,2000:", "!x y", "|", ">", "a: |\n  b", "\x00", "\ufeff",
               "#comment", "a: &x [*x]", "- &y {k: *y}", "<<: *a", "a: !!binary AAAA",
               "a: !!set {x}", "a: !!timestamp 2001-12-14", "a: !!float nan"]


@settings(max_examples=n(200), **SETTINGS)
@given(text=st.one_of(st.lists(st.sampled_from(YAML_PIECES), max_size=8).map("\n".join),
                      st.text(ALPHABET, max_size=80),
                      st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
def test_fuzz_yaml_loader(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("y") / "fuzz.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    for node in (False, True):
        try:
            load_yaml(path, node=node)
            OUTCOMES["yaml loader", "parsed"] += 1
        except SelectorError as exc:
            assert str(path) in str(exc) and exc.where == str(path), exc
            assert "\n" not in str(exc), exc
            OUTCOMES["yaml loader", "refused"] += 1


def test_yaml_errors_give_a_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rank: 1\nrules:\n  - kind: device\n   devices: [\n")
    with pytest.raises(SelectorError) as info:
        load_yaml(path)
    assert f"{path} line " in str(info.value)


# ---------------------------------------------------------------------------------------------
# Config files: backend confs (the catalogue), in-process

def _real_confs() -> Dict[Tuple[str, str], dict]:
    out = {}
    for p in sorted((CONF / "backend").rglob("*.yaml")):
        out[p.parent.name, p.stem] = yaml.safe_load(p.read_text())
    return out


REAL = _real_confs()
json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2 ** 70) | st.floats() |
    st.sampled_from(GOOD_VALUES + BAD_VALUES[:40] + [">=0.6.9", "<4.5,>=4.4", "==0.7.2.*",
                                                      "!=4.7.1", "~=1.0", "===1", ">=", "=>1",
                                                      ">=1.0;", "1.0", ">=a.b", "12.x", ">=7.5",
                                                      "x.12", ">=12.x"]),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(
        st.sampled_from(list(rule_fields()) +
                        list(schema.BackendConf.__dataclass_fields__) +
                        list(WHEN_FIELDS) + ["bogus", "_target_"]),
        c, max_size=4),
    max_leaves=12)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_conf(draw) -> Tuple[str, dict]:
    (op, name) = draw(st.sampled_from(sorted(REAL)))
    conf = copy.deepcopy(REAL[op, name])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(conf) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = conf
        for k in path[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add_key", "specifier"]))
        if action == "replace":
            parent[path[-1]] = draw(json_like)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add_key" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["bogus", "_target_", "kind", "when", "values",
                                         "min_num_experts", "multiple_of", "dim"]))] = \
                draw(json_like)
        elif action == "specifier" and isinstance(parent, dict):
            parent["specifier"] = draw(st.sampled_from(
                ["", ">=", "=>1", ">=1.0;", ">=a.b", "1.0", "~=1", "==1.*.2", ">=0.6.9,", ",",
                 ">=0.6.9 <0.7", "*", "latest", 4.5, ["1"], None, ">=99", "<0", "===x"]))
    return op, conf


def _platforms() -> List[Platform]:
    full = {"flashinfer-python": "0.7.4", "nvidia-cutlass-dsl": "4.8.1", "triton": "3.6.0",
            "vllm": "0.32.0", "sgl-kernel": "0.3.0", "b12x": "0.2.0", "torch": "2.11.0+cu130",
            "nvidia-cutlass-dsl-libs-base": "4.5.0", "nvidia-cutlass-dsl-libs-cu13": "4.5.0"}
    old = {"flashinfer-python": "0.6.10", "nvidia-cutlass-dsl": "4.5.0"}
    out = []
    for cap, cuda, pkgs in (((12, 1), "13.0", full), ((10, 0), "12.8", full), (None, None, {}),
                            ((12, 0), "12.9", old), ((9, 0), "13.0", full)):
        out.append(Platform("fuzz", cap, None if cuda is None else Version(cuda), None,
                            tuple(sorted((k, Version(v)) for k, v in pkgs.items())), "fuzz"))
    return out


PLATFORMS = _platforms()
FUZZ_LAYERS = [Layer(), Layer(activation="relu2", act_and_mul=False, num_experts=512),
               Layer(op="linear", hidden_size=4160), Layer(quant="nvfp4_w4a16", ep_size=8,
                                                           swiglu_limit=7.0, all2all="naive"),
               Layer(op="linear", quant="int8"), Layer(dtype="float16", activation="gelu_tanh")]


def _check_backend_conf(fuzzer: str, op: str, conf: Any) -> None:
    where = f"/fuzz/backend/{op}/fuzzed.yaml"
    try:
        backend = make_backend(op, "fuzzed", conf, where)
    except SelectorError as exc:
        text = str(exc)
        assert text.startswith(where + ": "), text
        assert f"catalogue.{op}.fuzzed" in text, text
        OUTCOMES[fuzzer, "refused"] += 1
        return
    OUTCOMES[fuzzer, "accepted"] += 1
    cat = make_catalogue({op: {"fuzzed": conf}}, {(op, "fuzzed"): where})
    assert cat.names(op) == ("fuzzed",) and backend.name == "fuzzed"
    for i, platform in enumerate(PLATFORMS):
        for strict in (True, False) if i < 2 else (True,):
            policy = Policy("fuzzed" if op == "moe" else "auto",
                            "fuzzed" if op == "linear" else "auto", strict)
            resolver = Resolver(RunConfig(cat, platform, Layer(), policy, "none"))
            for j, layer in enumerate(FUZZ_LAYERS):
                d = resolver.decide(layer)
                json.dumps(d.to_dict())
                if j == i:
                    str(d)
                if d.selected:  # the selected backend breaks none of its rules
                    for rule in backend.rules:
                        f = platform.facts
                        r = rule.evaluate(layer, f) if rule.when.holds(layer, f) else None
                        # an explicit_only rule is an opt-in: requested by name, it may run
                        assert r is None or r.severity == "warning" or r.rule == "opt_in", r


@settings(max_examples=n(300), **SETTINGS)
@given(case=mutated_conf())
def test_fuzz_backend_conf_mutations(case):
    """Real backend files with values replaced by random data, keys deleted, unknown keys
    added and malformed specifiers: refused with the file and key named, or decided without
    error (and never selected against its own rules)."""
    op, conf = case
    _check_backend_conf("backend conf (mutated)", op, conf)


@settings(max_examples=n(150), **SETTINGS)
@given(op=st.sampled_from(schema.OPS), conf=json_like)
def test_fuzz_backend_conf_random(op, conf):
    _check_backend_conf("backend conf (random)", op, conf)


@settings(max_examples=n(120), **SETTINGS)
@given(op=st.sampled_from(schema.OPS), rules=st.lists(st.fixed_dictionaries(
    {"kind": st.sampled_from(reason_rules()), "source": st.just("fuzz")},
    optional={k: json_like for k in ("when", "devices", "package", "any_of", "specifier",
                                      "values", "gated", "non_gated", "ep", "all2all_exclude",
                                      "dim", "multiple_of", "message", "severity")}),
    min_size=1, max_size=4))
def test_fuzz_rules(op, rules):
    """Rules of every kind with random fields: compiled with an error naming file and key, or
    they decide without error."""
    _check_backend_conf("rules (random)", op, {"rank": 1, "rules": rules})


# ---------------------------------------------------------------------------------------------
# Config files through the command line

LINE_POOL = ["bogus: 1", "_target_: os.system", "rank: [1]", "rank: '1'", "rules: 7",
             "  - kind: nonsense", "    specifier: '>>=1'", "    devices: [12.1]",
             "    when: {min_num_experts: abc}", "description: ${oc.env:HOME}",
             "execution: compiled", "implements: nvfp4", "entry_point: os:system", "\t- x",
             "rules: [", "  - {kind: package, source: s, package: ~}", "- a", "a: b: c"]


@st.composite
def mutated_text(draw) -> Tuple[str, str]:
    (op, name) = draw(st.sampled_from(sorted(REAL)))
    lines = (CONF / "backend" / op / f"{name}.yaml").read_text().splitlines()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        action = draw(st.sampled_from(["delete", "duplicate", "insert", "indent", "dedent",
                                        "truncate", "replace_value"]))
        if not lines:
            lines = [draw(st.sampled_from(LINE_POOL))]
        elif action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "insert":
            lines.insert(i, draw(st.sampled_from(LINE_POOL)))
        elif action == "indent":
            lines[i] = "  " + lines[i]
        elif action == "dedent":
            lines[i] = lines[i][2:]
        elif action == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif ":" in lines[i]:
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {draw(st.sampled_from(GOOD_VALUES[-20:] + BAD_VALUES[:30]))}"
    return op, "\n".join(lines) + "\n"


@settings(max_examples=n(12), **SETTINGS)
@given(case=mutated_text(), explain=st.booleans())
def test_fuzz_backend_files_cli(tmp_path_factory, case, explain):
    op, text = case
    d = tmp_path_factory.mktemp("conf")
    f = d / "backend" / op / "fuzzed.yaml"
    f.parent.mkdir(parents=True)
    f.write_text(text)
    if explain:
        argv = ["explain", "--format", "json", "--config-dir", str(d), "--",
                "platform=dgx_spark", "stack=flashinfer_0_7_4", f"policy.{op}_backend=fuzzed",
                "layer=dense_linear" if op == "linear" else "layer=default"]
    else:
        argv = ["check", "--config-dir", str(d)]
    rc, out, err = run_main(argv)
    judge("backend files (cli)", argv, rc, out, err,
          must_name=[str(f)] if rc == 2 and "problem(s)" not in err else [])
    if rc == 2 and "problem(s)" in err:
        assert str(f) in err, err


PRESET_POOL = {
    "layer": ["op: moe", "quant: nvfp4", "activation: relu2", "act_and_mul: false",
              "ep_size: 2", "num_experts: 512", "hidden_size: 4096", "dtype: float16",
              "all2all: naive", "swiglu_limit: 7.0"],
    "platform": ["preset: fuzz", "capability: '12.1'", "cuda: '13.0'", "gpu_name: fuzz",
                 "packages:\n  flashinfer-python: '0.7.4'"],
    "stack": ["# @package platform\ncuda: '13.0'", "packages:\n  vllm: '0.32.0'"],
    "policy": ["moe_backend: auto", "strict: false", "linear_backend: marlin"],
}
HOSTILE_LINES = ["bogus: 1", "_target_: os.system", "ep_size: [1]", "op: 3", "act_and_mul: yes",
                 "act_and_mul: maybe", "ep_size: 0", "ep_size: 1.5", "capability: 12.1",
                 "cuda: 13", "packages: 3", "packages:\n  vllm: 0.32", "activation: ${oc.env:HOME}",
                 "defaults:\n  - ../../etc/passwd", "defaults:\n  - /platform: cpu",
                 "defaults:\n  - _self_", "strict: 'no'", "moe_backend: nonsense",
                 "swiglu_limit: -1", "swiglu_limit: .nan", "num_tokens: 0", "dtype: int3",
                 "hidden_size: 1e3", "x: &a [*a]", "capability: '12.1.1'", "cuda: 'abc'",
                 "packages:\n  '${oc.env:HOME}': '1.0'", "preset: ../x", "[1, 2]", "just text",
                 "layer:\n  op: linear", "platform: {capability: '9.0'}", "? [a]\n: b"]


@settings(max_examples=n(12), **SETTINGS)
@given(group=st.sampled_from(sorted(PRESET_POOL)), data=st.data())
def test_fuzz_preset_files_cli(tmp_path_factory, group, data):
    lines = data.draw(st.lists(st.sampled_from(PRESET_POOL[group]), max_size=3))
    lines += data.draw(st.lists(st.sampled_from(HOSTILE_LINES), min_size=1, max_size=2))
    lines = data.draw(st.permutations(lines))
    d = tmp_path_factory.mktemp("conf")
    f = d / group / "fuzz.yaml"
    f.parent.mkdir(parents=True)
    f.write_text("\n".join(lines) + "\n")
    argv = ["explain", "--format", "json", "--config-dir", str(d), "--",
            f"{group}=fuzz"] + (["platform=cpu"] if group != "platform" else [])
    rc, out, err = run_main(argv)
    judge("preset files (cli)", argv, rc, out, err)
    assert os.environ.get("HOME", "/nonexistent-home") not in out + err or \
        os.environ.get("HOME") in str(d), "an interpolation was resolved"


# ---------------------------------------------------------------------------------------------
# Named hostile files

def _bomb(depth: int = 9) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


HOSTILE_FILES = {
    "alias bomb": ("rank: 1\nx:\n" + "".join("  " + ln + "\n" for ln in _bomb().splitlines()),
                   "expands to more than"),
    "recursive alias": ("rank: 1\nrules: &r [*r]\n", "alias"),
    "deep nesting": ("rank: 1\nrules: " + "[" * 600 + "]" * 600 + "\n", "nested too deeply"),
    "nesting": ("rank: 1\nrules: " + "[" * 300 + "]" * 300 + "\n", "nested too deeply"),
    "moderate nesting": ("rank: 1\nrules: " + "[" * 50 + "]" * 50 + "\n", "rules[0]"),
    "huge": ("rank: 1\ndescription: '" + "x" * (MAX_CONFIG_BYTES + 10) + "'\n", "too large"),
    "binary": ("\x00\x01\x02\xff", "fuzzed.yaml"),
    "bad utf-8": (b"rank: 1\ndescription: \xff\xfe\n", "fuzzed.yaml"),
    "bom": ("\ufeffrank: 1\n", None),
    "tabs": ("rank: 1\nrules:\n\t- kind: device\n", "line 3"),
    "empty": ("", "mapping"),
    "comments only": ("# nothing\n", "mapping"),
    "top-level list": ("- rank: 1\n", "mapping"),
    "top-level scalar": ("just text\n", "mapping"),
    "two documents": ("rank: 1\n---\nrank: 2\n", "line"),
    "unknown key": ("rank: 1\nbogus: 2\n", "catalogue.moe.fuzzed"),
    "_target_": ("rank: 1\n_target_: os.system\n", "_target_"),
    "python tag": ("rank: !!python/object/apply:os.system ['true']\n", "line 1"),
    "rank wrong type": ("rank: high\n", "catalogue.moe.fuzzed.rank"),
    "rank inf": ("rank: .inf\n", "catalogue.moe.fuzzed.rank"),
    "rules mapping": ("rank: 1\nrules: {kind: device}\n", "catalogue.moe.fuzzed.rules"),
    "rule scalar": ("rank: 1\nrules: [device]\n", "catalogue.moe.fuzzed.rules[0]"),
    "rule unknown field": ("rank: 1\nrules:\n  - {kind: clamp, source: s, devices: ['12.x']}\n",
                           "catalogue.moe.fuzzed.rules[0].devices"),
    "malformed specifier": ("rank: 1\nrules:\n  - {kind: package, source: s, package: torch, "
                            "specifier: '>>=2'}\n", "catalogue.moe.fuzzed.rules[0].specifier"),
    "number specifier": ("rank: 1\nrules:\n  - {kind: cuda, source: s, specifier: 13}\n",
                         "catalogue.moe.fuzzed.rules[0].specifier"),
    "malformed device": ("rank: 1\nrules:\n  - {kind: device, source: s, devices: ['sm_120']}\n",
                         "catalogue.moe.fuzzed.rules[0].devices"),
    "when wrong type": ("rank: 1\nrules:\n  - {kind: clamp, source: s, when: {min_num_experts: "
                        "abc}}\n", "catalogue.moe.fuzzed.rules[0].when"),
    "when packages list": ("rank: 1\nrules:\n  - {kind: clamp, source: s, when: {packages: "
                           "[torch]}}\n", "catalogue.moe.fuzzed.rules[0].when.packages"),
    "interpolation": ("rank: 1\ndescription: ${oc.env:HOME}\n", "interpolation"),
    "duplicate key": ("rank: 1\nrank: 2\n", None),
}


ALSO_CHECK = {"alias bomb", "recursive alias", "nesting", "interpolation", "unknown key",
              "binary", "rule unknown field"}  # `check` costs more; the rest run `explain`


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_hostile_backend_files(tmp_path, case):
    text, needle = HOSTILE_FILES[case]
    f = tmp_path / "backend" / "moe" / "fuzzed.yaml"
    f.parent.mkdir(parents=True)
    f.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    for argv in [["explain", "--config-dir", str(tmp_path), "--", "platform=cpu"]] + (
            [["check", "--config-dir", str(tmp_path)]] if case in ALSO_CHECK else []):
        rc, out, err = run_main(argv)
        judge("hostile files", argv, rc, out, err)
        if needle is not None:
            assert rc == 2, (case, out, err)
            assert str(f) in err and needle in err, (case, err)


@pytest.mark.parametrize("command", ["explain", "check"])
def test_hostile_preset_nesting(tmp_path, command):
    """OmegaConf recurses per level: a deeply nested preset is refused before it gets there."""
    f = tmp_path / "layer" / "deep.yaml"
    f.parent.mkdir(parents=True)
    f.write_text("op: moe\nx: " + "[" * 300 + "]" * 300 + "\n")
    argv = [command, "--config-dir", str(tmp_path), "--", "platform=cpu", "layer=deep"]
    rc, out, err = run_main(argv)
    judge("hostile files", argv, rc, out, err)
    assert rc == 2 and f"{f} line 2" in err and "nested too deeply" in err, err


def test_hostile_directory_named_yaml(tmp_path):
    (tmp_path / "backend" / "moe" / "odd.yaml").mkdir(parents=True)
    (tmp_path / "layer" / "dir.yaml").mkdir(parents=True)
    argv = ["explain", "--config-dir", str(tmp_path), "--", "platform=cpu"]
    rc, out, err = run_main(argv)
    judge("hostile files", argv, rc, out, err)


# ---------------------------------------------------------------------------------------------
# A handful through a real subprocess

def _subprocess(args: Sequence[str], tmp_path: Path, **env: str) -> Tuple[int, str, str]:
    e = child_env(SELECTOR_CACHE_DIR=str(tmp_path / "cache"), **env)
    e.pop("SELECTOR_NO_CACHE", None)
    p = subprocess.run([sys.executable, "-m", "selector", *args], capture_output=True, text=True,
                       env=e, timeout=120, cwd=str(tmp_path))
    return p.returncode, p.stdout, p.stderr


def test_subprocess_cases(tmp_path):
    bad = tmp_path / "user"
    f = bad / "backend" / "moe" / "broken.yaml"
    f.parent.mkdir(parents=True)
    f.write_text("rank: 1\nrules:\n  - kind: device\n   devices: [\n")
    bomb = tmp_path / "bomb"
    (bomb / "layer").mkdir(parents=True)
    (bomb / "layer" / "bomb.yaml").write_text(_bomb())
    cases = [
        (["explain", "--config-dir", str(bad), "platform=cpu"], [str(f), "line 4"]),
        (["explain", "--config-dir", str(bomb), "platform=cpu", "layer=bomb"],
         ["bomb.yaml", "expands"]),
        (["explain", "platform=cpu", "layer.activation=${oc.env:HOME}"], ["interpolation"]),
        (["explain", "platform=cpu", "layer=../../etc/passwd"], ["layer"]),
        (["explain", "platform=cpu", "+foo=../../../../etc/passwd"], ["override"]),
        (["explain", "--format", "json", "--", "platform=cpu", "x" * 100000], []),
        (["explain", "--format", "json", "platform=dgx_spark", "stack=flashinfer_0_7_4"], None),
    ]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda c: _subprocess(c[0], tmp_path), cases))
    for (argv, needles), (rc, out, err) in zip(cases, results):
        assert "Traceback" not in out + err, (argv, err)
        if needles is None:
            assert rc in (0, 1) and json.loads(out)["candidates"], (argv, err)
            OUTCOMES["subprocess", f"exit {rc}"] += 1
            continue
        judge("subprocess", argv, rc, out, err, must_name=needles)
        assert rc == 2
