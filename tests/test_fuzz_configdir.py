"""Fuzzing of config-dir contents and of the environment, in the style of test_fuzz.py.

A drawn config dir holds files of every kind (regular, FIFO, directory, symbolic links in,
out and dangling, sparse files over the size limit, binary), under hostile names (packaged
and reserved names, `.yml`, upper case, dots, spaces, newlines, backslashes, very long), with
hostile contents (`# @package` headers, defaults lists that leave their group or loop, YAML
tags, dates, sets, non-string keys, huge and non-ASCII numbers, NaN, interpolations, control
characters). A drawn environment sets selector's variables to hostile values. Every case must
end with exit 0, 1 or 2, with no traceback and within a time limit (a SIGALRM fails the case
as a hang); exit 2 prints one `selector: error:` line (or `check`'s list of problems).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import List, Sequence, Tuple

import pytest
from fuzz_support import SCALE, SETTINGS, _private_cache, _report  # noqa: F401 (fixtures)
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.commands.cli import main
from selector.config import MAX_CONFIG_BYTES

OUTCOMES: Counter = Counter()  # (fuzzer, outcome) -> count; reported by benchmarks/fuzz.py
CASE_LIMIT_S = 60  # a case that takes longer is a hang


def n(base: int) -> int:
    return base * SCALE


def run_main(argv: Sequence[str]) -> Tuple[int, str, str]:
    """The CLI in-process, bounded by SIGALRM: a hang fails the case instead of the run."""
    out, err = io.StringIO(), io.StringIO()

    def hang(signum, frame):
        raise TimeoutError(f"selector {' '.join(argv)[:200]!r} hung for {CASE_LIMIT_S} s")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(CASE_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as exc:
                rc = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def judge(fuzzer: str, argv: Sequence[str], rc: int, out: str, err: str) -> None:
    command = argv[0]
    assert rc in (0, 1, 2), (argv, rc, out, err)
    assert "Traceback" not in out + err, (argv, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if command == "check":  # check reports warnings (a backend without an engine entry) first
        lines = [ln for ln in lines if not ln.startswith("warning: ")]
    if rc == 2 and command == "check" and "--format" in argv and out:
        assert json.loads(out)["ok"] is False and not lines, (argv, out, err)
    elif rc == 2:
        if command == "check" and lines and "problem(s) in" in lines[0]:
            assert len(lines) > 1 and all(ln.startswith("  - ") for ln in lines[1:]), err
        else:
            lines = [ln for ln in lines if not ln.startswith(("usage:", " "))]
            assert len(lines) == 1 and lines[0].startswith("selector: error: "), (argv, err)
        assert out == "" or command in ("check", "doctor"), (argv, out)
    elif "--format" in argv:
        json.loads(out)
    else:
        assert out.strip(), argv
    OUTCOMES[fuzzer, f"exit {rc}"] += 1


# ---------------------------------------------------------------------------------------------
# Config-dir contents

PLACES = ["backend/moe", "backend/linear", "platform", "stack", "layer", "policy", "", "misc"]
NAMES = st.one_of(
    st.sampled_from(["mine", "b200", "default", "marlin", "auto", "none", "config",
                     "selector_schema", "Upper", "a-b", "a.b", "with space", "new\nline",
                     "back\\slash", "quote'd", "ünï", "x" * 200, "_self_", "hydra", "1abc"]),
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
            min_size=1, max_size=12).filter(lambda s: s not in (".", "..")))
SUFFIXES = st.sampled_from([".yaml", ".yaml", ".yaml", ".yml", ""])
KINDS = st.sampled_from(["file"] * 8 + ["fifo", "dir", "link in", "link out", "dangling",
                                        "loop", "sparse", "binary", "empty"])

SCALARS = st.sampled_from([
    "x", "'12.0'", "12.0", "4.10", "null", "~", "true", "on", "yes", "2024-01-01",
    "2024-01-01T00:00:00Z", "!!set {a, b}", "!!binary aGVsbG8=", "!!python/object:os.system x",
    "!!float nan", ".inf", "-.inf", "9" * 401, "9" * 5000, "1e400", "0x1F", "0o17", "1_000",
    "'\u0661\u0662.\u0660'", "'１２.０'", "${oc.env:HOME}", "${now:%Y}", "'a\\nselected: b'",
    '"a\\nselected: b\\x1b[2J"', "'\u202e'", "[1, 2]", "{a: 1}", "!local x", "&a [*a]", "-1",
    "0", "silu", "relu2", "moe", "linear", "nvfp4", "b12x", "'>=0.6'", "'==1.*'"])
KEYS = st.sampled_from([
    "op", "quant", "activation", "act_and_mul", "ep_size", "tp_size", "swiglu_limit",
    "num_tokens", "capability", "cuda", "gpu_name", "preset", "packages", "moe_backend",
    "strict", "rank", "rules", "execution", "implements", "entry_point", "description",
    "probes", "hints", "on", "yes", "1", "null", "_target_", "defaults", "platform", "layer",
    "hydra", "catalogue", "'${x}'"])
HEADERS = st.sampled_from(["", "", "# @package _global_\n", "# @package platform\n",
                           "# @package layer\n", "# @package\n", "# @package _group_\n",
                           "# @package a b c\n"])
DEFAULTS = st.sampled_from([
    None, "[_self_]", "[mine]", "[mine, _self_]", "['/platform: b200']",
    "['/platform@_global_: b200']", "[{/stack: vllm_0_32}]", "['../../etc/passwd']",
    "['override /platform: cpu']", "['${oc.env:HOME}']", "[1, 2]", "x"])


@st.composite
def yaml_text(draw) -> str:
    lines = [draw(HEADERS)]
    defaults = draw(DEFAULTS)
    if defaults is not None:
        lines.append(f"defaults: {defaults}\n")
    for _ in range(draw(st.integers(0, 6))):
        key = draw(KEYS)
        if draw(st.booleans()):
            lines.append(f"{key}: {draw(SCALARS)}\n")
        else:
            lines.append(f"{key}:\n  {draw(KEYS)}: {draw(SCALARS)}\n  "
                         f"{draw(KEYS)}: [{draw(SCALARS)}]\n")
    if draw(st.integers(0, 9)) == 0:
        lines.append(draw(st.text(max_size=40)))
    return "".join(lines)


ENTRY = st.tuples(st.sampled_from(PLACES), NAMES, SUFFIXES, KINDS, yaml_text())


def build_dir(root: Path, entries: List[tuple]) -> List[str]:
    """Write the drawn entries; return the preset names created (to select some of them)."""
    made = []
    outside = root.parent / f"{root.name}-outside.yaml"
    outside.write_text("op: moe\n")
    for place, name, suffix, kind, text in entries:
        d = root / place if place else root
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{name}{suffix}"
        try:
            if p.exists() or p.is_symlink():
                continue
            if kind == "file":
                p.write_text(text)
            elif kind == "fifo":
                os.mkfifo(p)
            elif kind == "dir":
                p.mkdir()
            elif kind == "link in":
                (d / f"{name}.target").write_text(text)
                p.symlink_to(d / f"{name}.target")
            elif kind == "link out":
                p.symlink_to(outside)
            elif kind == "dangling":
                p.symlink_to(root / "nowhere")
            elif kind == "loop":
                p.symlink_to(p)
            elif kind == "sparse":
                with open(p, "wb") as fh:
                    fh.truncate(MAX_CONFIG_BYTES + 1 + len(text))
            elif kind == "binary":
                p.write_bytes(b"\xff\xfe\x00" + text.encode()[:50])
            elif kind == "empty":
                p.write_bytes(b"")
        except (OSError, ValueError):  # a name the file system refuses: not a case
            continue
        made.append((place, name))
    return made


COMMANDS = st.sampled_from([["explain"], ["explain", "--format", "json"], ["list"],
                            ["check"], ["check", "--format", "json"], ["doctor"]])


@settings(max_examples=n(40), **SETTINGS)
@given(entries=st.lists(ENTRY, min_size=1, max_size=5), command=COMMANDS, data=st.data())
def test_fuzz_config_dir_contents(tmp_path_factory, entries, command, data):
    root = tmp_path_factory.mktemp("cfg") / "user"
    root.mkdir()
    made = build_dir(root, entries)
    overrides = ["platform=cpu"]
    for place, name in made:
        if place in ("platform", "stack", "layer", "policy") and data.draw(st.booleans()):
            overrides.append(f"{place}={name}")
    argv = [*command, "--config-dir", str(root), "--", *overrides]
    rc, out, err = run_main(argv)
    judge("config-dir contents", argv, rc, out, err)


# ---------------------------------------------------------------------------------------------
# The environment

VARIABLES = ["SELECTOR_NVML_TIMEOUT", "SELECTOR_TORCH_PROBE_TIMEOUT", "SELECTOR_PROBE_TIMEOUT",
             "SELECTOR_NO_CACHE", "SELECTOR_CACHE_DIR", "XDG_CACHE_HOME", "HOME",
             "SELECTOR_NVML_LIBRARY", "SELECTOR_CUDA_LIBRARY"]
VALUES = st.sampled_from([
    "", " ", "abc", "nan", "NaN", "inf", "-inf", "-1", "0", "0.0005", "1e9", "3e6", "1", "0.5",
    "2", "true", "false", "yes", "off", "maybe", "~/x", "relative/dir", "{tmp}/c",
    "{tmp}/file", "{tmp}/open", "/nonexistent/lib.so", "\u0661", "x" * 5000, "1" * 400])


@settings(max_examples=n(30), **SETTINGS)
@given(env=st.dictionaries(st.sampled_from(VARIABLES), VALUES, max_size=4),
       command=COMMANDS, auto=st.booleans())
def test_fuzz_environment(tmp_path_factory, env, command, auto):
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "file").write_text("not a dir")
    (tmp / "open").mkdir()
    (tmp / "open").chmod(0o777)
    argv = [*command, "--", "platform=auto" if auto else "platform=b200"]
    with pytest.MonkeyPatch.context() as mp:
        for k in VARIABLES:
            mp.delenv(k, raising=False)
        mp.setenv("HOME", str(tmp / "home"))
        mp.setenv("SELECTOR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        mp.setenv("SELECTOR_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
        mp.setenv("SELECTOR_CACHE_DIR", str(tmp / "cache"))
        for k, v in env.items():
            value = v.replace("{tmp}", str(tmp))
            if k == "HOME" and not value.startswith("/"):
                value = str(tmp / "home2")
            mp.setenv(k, value)
        mp.chdir(tmp)
        rc, out, err = run_main(argv)
    judge("environment", argv, rc, out, err)
