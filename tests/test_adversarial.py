"""Issue 48's adversarial round, replayed with fresh inputs each run: shell injection through an
engine file's variable names and values and through hostile model paths, `tune --out` paths
with escapes and newlines, concurrent writers of one profile, hostile environment variables,
and nonsense in profile files. Each test generates its inputs from one seed: a random one,
printed (`pytest -s` shows it) and named in every failure message; SELECTOR_ADVERSARIAL_SEED=N
replays a run. The oracles are the issue's: a printed command run by bash does exactly what it
says (the same argv and variables, nothing else run), a printed line stays one printable line,
bad input is exit 2 with one line (never a traceback), concurrent writers keep every cell, and
a profile that loads holds only values of its schema's types and ranges."""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from helpers import REPO, child_env, run_main

SEED = int(os.environ.get("SELECTOR_ADVERSARIAL_SEED") or random.SystemRandom().randrange(1 << 32))
print(f"\ntests/test_adversarial.py: seed {SEED} (SELECTOR_ADVERSARIAL_SEED={SEED} replays it)")
BASH = shutil.which("bash")
CORPUS = REPO / "tests" / "checkpoint_corpus"
PLATFORM = ("platform=b200", "stack=flashinfer_0_7_4")
SHAPE = ("layer=dense_linear", "layer.hidden_size=256", "layer.intermediate_size=256")


def rng(name: str) -> random.Random:
    """The generator of one test: the run's seed and the test's name."""
    return random.Random(f"{SEED}:{name}")


def why(*parts: object) -> str:
    return f"seed {SEED}: " + " ".join(map(repr, parts))


# The pieces of the attacks: shell syntax, terminal escapes, line breaks, OmegaConf and
# str.format syntax, quotes, non-ASCII, and text that looks like selector's own lines.
PIECES = ("$(touch PWNED)", "`touch PWNED`", "; touch PWNED", "&& touch PWNED", "| tee PWNED",
          "> PWNED", "'", '"', "\\", "\\'", "$HOME", "${HOME}", "${oc.env:HOME}", "{model}",
          "{0}", "%s", "\n", "\r", "\t", "\x1b]0;x\x07", "\x1b[2J", "\x7f", "\x01", "\u2028",
          "\u202e", "\x9b", "\x85", "\u2029", "é", "日本", "\U0001f600", " ", "  ", "*", "?", "[a]", "~", "!", "#", "-",
          "--x", "=", "a=b", "\nuse it: rm -rf", "\ncommand: touch PWNED", "selected: x", "%",
          "\\x41", "$'\\n'", "\udcff")


def hostile(r: random.Random, lo: int = 1, hi: int = 5, path_part: bool = False) -> str:
    """A few attack pieces and letters; `path_part`: usable as a file name (no `/`, no NUL, not
    `.` or `..`, a name the file system takes)."""
    while True:
        text = "".join(r.choice(PIECES) if r.random() < 0.7 else r.choice("abcXYZ019_.")
                       for _ in range(r.randint(lo, hi)))
        if not path_part:
            return text
        text = text.replace("/", "_")
        if text not in (".", "..") and len(os.fsencode(text)) < 200:
            return text


def identifier(r: random.Random) -> str:
    """A shell variable name of our own (not PATH, PYTHON*, LD_*: those change how the
    checking command runs, which is the engine file's choice, not an injection)."""
    return "ADV_" + "".join(r.choice("ABCXYZ_019") for _ in range(r.randint(1, 6)))


# A program that prints its argv and the variables named on its command line: bash runs the
# printed command with this in place of the engine (no braces: the launch command's `{model}`
# is the only placeholder there).
DUMP = "import json,os,sys;print(json.dumps([sys.argv[1:],dict(os.environ)]))"


def run_printed(line: str, cwd: Path) -> tuple[list, dict]:
    """Run one printed command line with bash in `cwd`: (argv after the program, environment)."""
    p = subprocess.run([BASH, "--noprofile", "--norc", "-c", line], cwd=str(cwd),
                       capture_output=True, timeout=120, env=child_env())
    assert p.returncode == 0, why(line, p.stderr)
    argv, env = json.loads(p.stdout)
    return argv, env


needs_bash = pytest.mark.skipif(BASH is None, reason="no bash to run the printed commands")


# ---------------------------------------------------------------------------------------------
# 1. Printed commands: a name is refused unless it is an identifier; values and words run as
#    themselves under bash, and nothing else runs.

@needs_bash
def test_printed_commands_do_exactly_what_they_print(tmp_path):
    from selector.core.text import is_shell_name, shell_command
    r = rng("commands")
    for _ in range(12):
        env = [(identifier(r) if r.random() < 0.8 else hostile(r, 1, 3), hostile(r))
               for _ in range(r.randint(0, 3))]
        words = [hostile(r) for _ in range(r.randint(1, 4))]
        if not all(is_shell_name(k) for k, _ in env):
            with pytest.raises(ValueError):
                shell_command(env, [sys.executable, "-c", DUMP, *words])
            continue
        env = list(dict(env).items())  # one value per name, as an engine's choice has
        line = shell_command(env, [sys.executable, "-c", DUMP, *words])
        assert "\n" not in line and line.isprintable(), why(line)
        argv, got = run_printed(line, tmp_path)
        assert argv == words, why(line, argv)
        for k, v in env:
            assert os.fsencode(got[k]) == os.fsencode(v), why(line, k, got[k])
        assert not list(tmp_path.iterdir()), why(line, list(tmp_path.iterdir()))


# ---------------------------------------------------------------------------------------------
# 2. An engine file with hostile variable names, backend names and a hostile model path:
#    `check` refuses it (exit 2, one line) or the printed launch command, run by bash, passes
#    exactly the model path and the variable.

def _engine_file(env_name: str, moe_name: str, linear_name: str) -> dict:
    return {"name": "tgi", "label": "TGI 9.9",
            "source": "TGI 9.9 launcher/src/main.rs (--moe-kernel, --gemm-kernel)",
            "proof": "none: a throwaway engine of tests/test_adversarial.py",
            "choices": [{"op": "moe", "flag": "--moe-kernel"},
                        {"op": "linear", "env": env_name, "schemes": ["nvfp4"]}],
            "backends": {"moe": {"flashinfer_cutlass": {"name": moe_name,
                                                        "source": "TGI 9.9 server/moe.py"}},
                         "linear": {"flashinfer_cutlass": {"name": linear_name,
                                                           "source": "TGI 9.9 server/gemm.py"}}},
            "launch": {"command": [sys.executable, "-c", DUMP, "--model-id", "{model}",
                                   "--model={model}"],
                       "parallel": {"rule": "ep_divides_tp", "tp": "--num-shard",
                                    "source": "TGI 9.9 launcher/src/main.rs"}}}


def _one_error_line(err: str) -> str:
    """The one `selector: error:` line of a refusal (warnings may come before it), or check's
    list of problems; every line printable, no traceback."""
    assert "Traceback" not in err, why(err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert all(ln.isprintable() for ln in lines), why(err)
    errors = [ln for ln in lines if ln.startswith("selector: error: ")]
    if not errors:  # check: "N problem(s) in M config files:" and one "  - " line each
        assert any("problem(s) in" in ln for ln in lines), why(err)
        return next(ln for ln in lines if ln.startswith("  - "))
    assert len(errors) == 1, why(err)
    return errors[0]


@needs_bash
def test_engine_files_and_model_paths_inject_nothing(tmp_path):
    r = rng("engine")
    reached = 0
    for i in range(6):
        case = tmp_path / f"case{i}"
        root = case / "conf" / "engine"
        root.mkdir(parents=True)
        # written as JSON with \u escapes (a raw NEL or U+2028 is a line break to YAML, folded
        # into a space when the file is read); no lone surrogate and nothing past U+FFFF, whose
        # JSON escapes are surrogates PyYAML refuses (the file is then refused, exit 2)
        def yaml_text(text: str) -> str:
            return "".join(ch for ch in text if ch != "\udcff" and ord(ch) <= 0xFFFF)
        env_name = identifier(r) if i % 3 else yaml_text(hostile(r, 1, 3))
        moe_name, linear_name = (yaml_text(hostile(r)) for _ in range(2))
        (root / "tgi.yaml").write_text(json.dumps(_engine_file(env_name, moe_name, linear_name)))
        model = case / hostile(r, 2, 4, path_part=True)
        shutil.copytree(CORPUS / "qwen3-30b-a3b-fp4", model)
        run = case / "run"
        run.mkdir()
        cd = ("--config-dir", str(case / "conf"))
        rc, out, err = run_main(["check", *cd])
        assert rc in (0, 2), why(env_name, moe_name, linear_name, rc, err)
        rc2, out2, err2 = run_main(["explain", *cd, "--model", str(model), "engine=tgi",
                                    *PLATFORM, "parallel.tp=2"])
        if rc == 2:  # refused by check: explain refuses the same file
            _one_error_line(err)
            assert rc2 == 2, why(env_name, moe_name, linear_name, out2, err2)
            _one_error_line(err2)
            continue
        assert rc2 in (0, 1) and "Traceback" not in err2, why(env_name, model.name, err2)
        assert all(ln.isprintable() for ln in out2.splitlines()), why(out2)
        lines = [ln.strip()[len("command: "):] for ln in out2.splitlines()
                 if ln.strip().startswith("command: ")]
        assert len(lines) == 1, why(model.name, out2)
        argv, env = run_printed(lines[0], run)
        reached += 1
        assert argv[:3] == ["--model-id", str(model), f"--model={model}"], why(lines[0], argv)
        assert argv[3:] == ["--num-shard", "2", "--moe-kernel", moe_name], why(lines[0], argv)
        assert os.fsencode(env.get(env_name, "")) == os.fsencode(linear_name), why(lines[0])
        assert not list(run.iterdir()), why(lines[0], list(run.iterdir()))
    print(f"engine files: {reached} of 6 printed a launch command run by bash")
    assert reached, why("no engine file reached a printed command")  # 4 of 6 have valid names


# ---------------------------------------------------------------------------------------------
# 3. `tune --out`: the path in every printed line is one printable line, the suggested command
#    gives the shell exactly the path; a file there that is not a profile is refused in one line
#    and left as it was.

@needs_bash
def test_tune_out_paths_forge_no_line(tmp_path):
    from selector.commands import tune
    r = rng("tune-out")
    paths = [str(tmp_path / hostile(r, 1, 4, path_part=True)) if r.random() < 0.5
             else hostile(r, 1, 6) for _ in range(20)]
    words = []
    for path in paths:
        s = {"profile": path, "key": {}, "seconds": 1.0, "kept_cells": r.randint(0, 2),
             "verify_cache": None, "cells": []}
        lines = tune.render_text(s)
        assert all(ln.isprintable() for ln in lines), why(path, lines)
        assert [ln.lstrip().startswith("use it:") for ln in lines].count(True) == 1, why(lines)
        assert [ln.startswith("tune:") for ln in lines].count(True) == 1, why(lines)
        word = lines[-1].rpartition("policy.preference=measured ")[2]
        words.append(word)
    # every suggested word, given to bash, is policy.profile=<the path>, byte for byte
    script = "; ".join(f"printf '%s\\0' {w}" for w in words)
    p = subprocess.run([BASH, "--noprofile", "--norc", "-c", script], cwd=str(tmp_path),
                       capture_output=True, timeout=120)
    got = p.stdout.split(b"\0")[:-1]
    assert got == [os.fsencode("policy.profile=" + x) for x in paths], why(paths, got)
    assert sorted(f.name for f in tmp_path.iterdir()) == [], why(list(tmp_path.iterdir()))


def test_tune_out_onto_a_file_that_is_not_a_profile_is_one_line_and_leaves_it(tmp_path):
    r = rng("tune-out-file")
    for _ in range(3):
        f = tmp_path / (hostile(r, 1, 4, path_part=True) + ".json")
        content = bytes(r.randrange(256) for _ in range(r.randint(0, 64)))
        f.write_bytes(content)
        rc, out, err = run_main(["tune", *SHAPE, "--tokens", "4", "--out", str(f)])
        assert rc == 2, why(f.name, rc, err)
        line = _one_error_line(err)
        assert "--out" in line and "not a selector profile" in line, why(line)
        assert f.read_bytes() == content, why(f.name)


# ---------------------------------------------------------------------------------------------
# 4. Concurrent writers of one profile: each with its own random cells, some shared; every
#    cell is kept, and a shared cell holds one writer's timing.

WRITER = r"""
import json, os, sys, time
from selector.commands import tune
from selector.core import profile as prof
from selector.inspect import tuning
path, go, ms, tokens = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
def layer(t):
    return dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
                tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
                swiglu_limit=None, num_experts=None, top_k=None, all2all=None, num_tokens=t)
key = {k: None for k in prof.KEY_FIELDS}
key["packages"] = {}
cells = tuple(prof.Cell(layer(t), t, {"emulation": prof.Timing(ms, ms, ms, 5)}) for t in tokens)
new = prof.Profile(key, cells, {}, "2026-12-07T00:00:00Z")
while not os.path.exists(go):
    time.sleep(0.005)
print(json.dumps(tuning.save_profile(new, path, tune._merge)))
"""


def test_concurrent_writers_keep_every_cell(tmp_path):
    from selector.core import profile as prof
    r = rng("writers")
    out, go = tmp_path / "p.json", tmp_path / "go"
    pool = [1 << i for i in range(10)]
    n = r.randint(3, 5)
    plans = [sorted(r.sample(pool, r.randint(1, 4))) for _ in range(n)]
    ms = [float(i + 1) for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(go), str(m),
                               json.dumps(t)], env=child_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for m, t in zip(ms, plans)]
    go.write_text("")
    for p in procs:
        o, e = p.communicate(timeout=300)
        assert p.returncode == 0, why(plans, e)
    got = prof.load(str(out))
    want = sorted({t for plan in plans for t in plan})
    assert sorted(c.tokens for c in got.cells) == want, why(plans)
    for c in got.cells:  # a shared cell: the timing of one of the writers that measured it
        writers = [m for m, plan in zip(ms, plans) if c.tokens in plan]
        assert c.times["emulation"].median_ms in writers, why(plans, c.tokens)
    assert not [f for f in tmp_path.iterdir() if f.name not in ("p.json", "go")
                and not f.name.endswith(".lock")], why(list(tmp_path.iterdir()))


# ---------------------------------------------------------------------------------------------
# 5. Hostile environment variables: each parse gives a value in range or a SelectorError naming
#    the variable in one printable line; a CLI run with all of them set is exit 0 or 2, never a
#    traceback.

NUMBERS = ("nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e-400", "0",
           "-0", "-0.0", "0x10", "1_0", "١٢", "５", " 5 ", "5\n", "5;rm", "", " ", "1e5000",
           "9" * 5000, "0.0001", "86400", "86400.0001", "-5", "+5", "5e", ".", "1/2", "true")


def _number_text(r: random.Random) -> str:
    return r.choice(NUMBERS) if r.random() < 0.6 else repr(r.uniform(-1e6, 1e6)) \
        if r.random() < 0.5 else hostile(r, 1, 3)


def _one_line_refusal(name: str, value: str, exc: Exception) -> None:
    text = str(exc)
    assert name in text and text.isprintable(), why(name, value, text)


def test_hostile_environment_variables_are_values_or_one_line_refusals(monkeypatch):
    from selector.core import env_vars
    from selector.core.errors import SelectorError
    r = rng("env")
    refusal = _one_line_refusal
    lo, hi = env_vars.TIMEOUT_RANGE
    for _ in range(60):
        name = r.choice(sorted(env_vars.TIMEOUTS))
        value = _number_text(r)
        try:
            monkeypatch.setenv(name, value)
        except ValueError:  # an embedded NUL: no process environment can hold it
            continue
        try:
            got = env_vars.timeout(name)
        except SelectorError as exc:
            refusal(name, value, exc)
            continue
        assert type(got) is float and math.isfinite(got) and lo <= got <= hi, why(name, value, got)
    for _ in range(40):
        value = r.choice(("1", "true", "YES", "on", "0", "off", "", " ", "2", "tru", "observe",
                          "on\n", "\x1b[2J", "nan")) if r.random() < 0.6 else hostile(r, 1, 3)
        checks = [("SELECTOR_NO_CACHE", lambda: env_vars.flag("SELECTOR_NO_CACHE"), (bool,)),
                  ("SELECTOR_EMULATION_FUSED", env_vars.emulation_fused, (bool,)),
                  ("SELECTOR_FP8_ACT_QUANT", env_vars.fp8_act_quant, env_vars.FP8_ACT_QUANT),
                  ("SELECTOR_VLLM", env_vars.vllm_mode, ("observe", "on", "off"))]
        name, fn, accepted = r.choice(checks)
        monkeypatch.setenv(name, value)
        try:
            got = fn()
        except SelectorError as exc:
            refusal(name, value, exc)
            continue
        assert (type(got) in accepted) if accepted == (bool,) else (got in accepted), \
            why(name, value, got)
    for _ in range(20):
        name = r.choice(("SELECTOR_NVML_LIBRARY", "SELECTOR_CUDA_LIBRARY",
                         "SELECTOR_VLLM_OBSERVE_JSON"))
        value = hostile(r, 1, 6) if r.random() < 0.8 else "x" * r.choice((4096, 4097, 10000))
        monkeypatch.setenv(name, value)
        try:
            got = env_vars.path_text(name)
        except SelectorError as exc:
            refusal(name, value, exc)
            continue
        assert got is None or (got == value and len(got) <= 4096 and not any(
            unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in got)), why(name, value)
    for _ in range(20):
        value = hostile(r, 1, 5) if r.random() < 0.5 else "/tmp/" + hostile(r, 1, 5)
        monkeypatch.setenv("SELECTOR_CACHE_DIR", value)
        monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)
        try:
            got = env_vars.cache_dir()
        except SelectorError as exc:
            refusal("SELECTOR_CACHE_DIR", value, exc)
            continue
        assert got is not None and got.is_absolute(), why(value, got)


def test_a_cli_run_under_hostile_variables_is_exit_0_or_2_in_one_line(tmp_path):
    from selector.core import env_vars
    r = rng("env-cli")
    for argv in (["explain", *SHAPE, "policy.preference=measured"], ["doctor"]):
        env = child_env()
        env["SELECTOR_CACHE_DIR"] = str(tmp_path / "cache")
        for name in sorted(env_vars.TIMEOUTS) + ["SELECTOR_FP8_ACT_QUANT", "SELECTOR_VLLM",
                                                  "SELECTOR_EMULATION_FUSED"]:
            if r.random() < 0.5:
                env[name] = _number_text(r)
        p = subprocess.run([sys.executable, "-m", "selector", *argv], cwd=str(REPO), env=env,
                           capture_output=True, text=True, timeout=600)
        shown = {k: v for k, v in env.items() if k.startswith("SELECTOR_")}
        assert p.returncode in (0, 1, 2), why(argv, shown, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout, why(argv, shown, p.stderr)
        if p.returncode == 2:
            _one_error_line(p.stderr)


# ---------------------------------------------------------------------------------------------
# 6. Profiles: a valid document with one or two random fields replaced, removed or added.
#    Loading it is a SelectorError naming the file in one line, or a profile of the schema's
#    types and ranges only; `explain` under an accepted one answers without a traceback.

def _doc(r: random.Random) -> dict:
    from selector.core import profile as prof
    cells = []
    for t in sorted(r.sample([1, 2, 4, 16, 128, 1000], r.randint(1, 3))):
        layer = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
                     tp_size=1, dtype="bfloat16", hidden_size=256, intermediate_size=256,
                     swiglu_limit=None, num_experts=None, top_k=None, all2all=None)
        ms = r.uniform(0.01, 5)
        cells.append({"layer": layer, "tokens": t, "bucket": prof.bucket(t),
                      "times": {"emulation": {"median_ms": ms, "p10_ms": ms * 0.9,
                                              "p90_ms": ms * 1.1, "n": 5}},
                      "skipped": {}, "eager": {}})
    return {"schema": prof.SCHEMA, "version": prof.VERSION, "created": "2026-12-07T00:00:00Z",
            "settings": {}, "key": {k: ({} if k == "packages" else None) for k in prof.KEY_FIELDS},
            "cells": cells}


VALUES = (True, False, None, 0, 1, -1, 2, 1.0, 0.5, -0.0, 1e308, 10 ** 30, 2 ** 24, 2 ** 24 + 1,
          "", "1", "nan", "\n", "\x1b[2J", [], [1], {}, {"a": 1}, "emulation", "median_ms")


def _paths(doc: object, at: tuple = ()) -> list:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, at + (i,))
    return out


def _mutate(doc: dict, r: random.Random) -> str:
    at = r.choice(_paths(doc)[1:])
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    what = r.random()
    if what < 0.15 and isinstance(parent, dict):
        del parent[at[-1]]
        return f"del {at}"
    if what < 0.25 and isinstance(parent, dict):
        parent[hostile(r, 1, 2)] = r.choice(VALUES)
        return f"add a key beside {at}"
    parent[at[-1]] = r.choice(VALUES)
    return f"{at} = {parent[at[-1]]!r}"


def _check_profile(p) -> None:  # type: ignore[no-untyped-def]
    from selector.core import profile as prof
    assert type(p.version) is int and p.version in prof.READ_VERSIONS
    assert isinstance(p.key["packages"], dict)
    for c in p.cells:
        assert type(c.tokens) is int and 1 <= c.tokens <= prof.MAX_TOKENS
        for t in list(c.times.values()) + list(c.eager.values()):
            for v in (t.median_ms, t.p10_ms, t.p90_ms):
                assert type(v) is float and math.isfinite(v) and v > 0
            assert t.p10_ms <= t.median_ms <= t.p90_ms
            assert type(t.n) is int and t.n >= 1
        assert set(c.eager) <= set(c.times)
        assert all(isinstance(s, str) for s in c.skipped.values())


def test_nonsense_in_a_profile_is_refused_by_name_or_never_loaded(tmp_path):
    from selector.core import profile as prof
    from selector.core.errors import SelectorError
    r = rng("profiles")
    accepted = []
    for i in range(80):
        doc = _doc(r)
        changes = [_mutate(doc, r) for _ in range(r.randint(1, 2))]
        f = tmp_path / f"p{i}.json"
        f.write_text(json.dumps(doc, allow_nan=True))
        try:
            p = prof.load(str(f))
        except SelectorError as exc:
            text = str(exc)
            assert text.startswith(f"policy.profile: {f}: ") and text.isprintable(), \
                why(changes, text)
            continue
        try:
            _check_profile(p)
        except AssertionError:
            raise AssertionError(why("accepted nonsense", changes, p)) from None
        accepted.append((f, changes))
    for f, changes in accepted[:6]:
        rc, out, err = run_main(["explain", *SHAPE, "platform=b200", f"policy.profile={f}"])
        assert rc in (0, 1, 2) and "Traceback" not in err, why(changes, rc, err)
        if rc == 2:
            _one_error_line(err)


# ---------------------------------------------------------------------------------------------
# What the adversarial run found (each a fixed input, so that it stays found)

@pytest.mark.parametrize("value", ["lib\x9b2Jx.so", "lib\x85.so", "a\u2028b.so", "a\u2029b"])
def test_a_path_variable_with_a_c1_control_or_a_line_separator_is_refused(monkeypatch, value):
    """path_text refused C0 controls and DEL only: the 8-bit CSI (U+009B, a terminal escape),
    NEL and the Unicode line separators passed as a file name."""
    from selector.core import env_vars
    from selector.core.errors import SelectorError
    monkeypatch.setenv("SELECTOR_VLLM_OBSERVE_JSON", value)
    with pytest.raises(SelectorError) as e:
        env_vars.observe_json()
    assert "SELECTOR_VLLM_OBSERVE_JSON" in str(e.value) and str(e.value).isprintable()
    monkeypatch.setenv("SELECTOR_VLLM_OBSERVE_JSON", "/tmp/r\udcffé.json")  # a file name's bytes
    assert env_vars.observe_json() == Path("/tmp/r\udcffé.json")


@pytest.mark.parametrize("where", ["top", "key", "cell"])
def test_a_hostile_key_in_a_profile_is_named_in_one_printable_line(tmp_path, where):
    """An unknown key's name reached the profile's error message raw (`key.\\nuse it: rm -rf :
    unknown key`): a library caller printing the message got a forged line."""
    from selector.core import profile as prof
    from selector.core.errors import SelectorError
    doc = _doc(random.Random(0))
    target = {"top": doc, "key": doc["key"], "cell": doc["cells"][0]}[where]
    target["\nuse it: rm -rf \x1b[2J"] = 1
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(SelectorError) as e:
        prof.load(str(f))
    text = str(e.value)
    assert text.isprintable() and "unknown key" in text and "\\nuse it: rm -rf \\x1b[2J" in text
