"""The output channel (issue 36): every string that comes from a file, a plugin or the
environment is neutralised by selector.core.text before any text output, so a hostile config
message, engine label or plugin cannot forge a `selected:` line or send a terminal escape.

Hostile strings (a newline and a forged `selected:` line, ESC sequences, other C0 and C1
controls, bidi overrides, Unicode line separators) go in through a user backend file's rule
message, description and source, a user engine file's label, and an installed plugin's backend;
they come out of every format: escaped in text, intact in JSON (which escapes by itself).
"""
from __future__ import annotations

import json
import re
import sys

import pytest
from helpers import REPO, run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_site import make_site

import selector
from selector.config import catalogues
from selector.core.text import printable

HOSTILE = ("bad\nselected: forged\x1b[2J\x1b]0;title\x07\r\x00\x7f\x85\x9b31m"
           "\u202e\u2066\u2028\u2029end")
FORGED = "selected: forged"
R1 = str(REPO / "examples" / "deepseek-r1-nvfp4")
# what may never reach a terminal raw: C0 but the newline, DEL, C1, bidi controls, separators
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f\x80-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                 "\u2028\u2029]")


def _yaml(s: str) -> str:
    return json.dumps(s)  # a JSON string is a YAML double-quoted scalar


def backend_file(name: str = "evil_be") -> str:
    return (f"description: {_yaml(HOSTILE)}\nrank: 990\nexecution: reference\nrules:\n"
            f"  - kind: device\n    devices: ['>=9.0']\n    message: {_yaml(HOSTILE)}\n"
            f"    source: {_yaml(HOSTILE)}\n")


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "user"
    (d / "backend" / "moe").mkdir(parents=True)
    (d / "engine").mkdir()
    (d / "backend" / "moe" / "evil_be.yaml").write_text(backend_file())
    from selector.core.packaged import packaged_conf_dir
    vllm = (packaged_conf_dir() / "engine" / "vllm.yaml").read_text()
    vllm = re.sub(r"(?m)^name: vllm", "name: evil", vllm)
    vllm = re.sub(r"(?m)^label: .*$", lambda _: f"label: {_yaml('vLLM ' + HOSTILE)}", vllm)
    (d / "engine" / "evil.yaml").write_text(vllm)
    return d


def assert_clean(text: str, where: str) -> None:
    bad = RAW.findall(text)
    assert not bad, f"{where}: raw control characters {bad!r} in\n{text!r}"
    forged = [ln for ln in text.splitlines() if ln.lstrip().startswith(FORGED)]
    assert not forged, f"{where}: a forged line {forged!r}"


TEXT_RUNS = [
    ["explain", "platform=cpu"],
    ["explain", "--format", "line", "platform=cpu"],
    ["explain", "--format", "line", "platform=cpu", "engine=evil"],
    ["explain", "platform=cpu", "engine=evil"],
    ["explain", "--why", "evil_be", "platform=cpu"],
    ["explain", "--why", "evil_be", "--format", "line", "platform=cpu"],
    ["list"],
    ["explain", "--model", R1, "engine=evil", "platform=b200"],  # the launch plan's heading
    pytest.param(["matrix", "--op", "moe"], marks=pytest.mark.slow),  # every platform preset
    pytest.param(["matrix", "--op", "moe", "--format", "html"], marks=pytest.mark.slow),
    pytest.param(["matrix", "--op", "moe", "--format", "markdown"], marks=pytest.mark.slow),
]


@pytest.mark.parametrize("argv", TEXT_RUNS, ids=" ".join)
def test_hostile_config_strings_are_escaped_in_every_text_format(user_dir, argv):
    rc, out, err = run_main([*argv, "--config-dir", str(user_dir)])
    assert rc in (0, 1), err
    assert_clean(out, " ".join(argv))
    assert_clean(err, " ".join(argv) + " (stderr)")
    if "--model" in argv:
        assert "launch plan for vLLM bad\\nselected: forged\\x1b[2J" in out  # the label, escaped
    if "--why" in argv or argv == ["explain", "platform=cpu"]:
        # shown escaped (a long line may wrap at its spaces): what the file says
        assert re.search(r"bad\\nselected:\s+forged\\x1b\[2J", out), out


@pytest.mark.parametrize("argv", [["explain", "--format", "json", "platform=cpu"],
                                  ["explain", "--why", "evil_be", "--format", "json",
                                   "platform=cpu"],
                                  pytest.param(["matrix", "--op", "moe", "--format", "json"],
                                               marks=pytest.mark.slow)], ids=" ".join)
def test_json_keeps_the_original_string(user_dir, argv):
    rc, out, err = run_main([*argv, "--config-dir", str(user_dir)])
    assert rc in (0, 1), err
    json.loads(out)  # valid JSON
    assert json.dumps(HOSTILE)[1:-1] in out  # the original string, JSON-escaped


def test_log_line_and_engine_label(user_dir):
    """Decision.log_line() is what the vLLM plugin logs: one line, whatever the files say."""
    for overrides in (["platform=cpu"], ["platform=cpu", "engine=evil"],
                      ["platform=cpu", "policy.moe_backend=evil_be"]):
        d = selector.load(overrides, config_dirs=[user_dir]).default()
        line = d.log_line()
        assert "\n" not in line
        assert_clean(line, f"log_line {overrides}")
        assert_clean(str(d), f"str(decision) {overrides}")


def test_a_plugin_cannot_forge_a_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    site = make_site(tmp_path, {"backend/moe/fast_moe.yaml": backend_file()})
    monkeypatch.syspath_prepend(str(site))
    catalogues.reset()
    try:
        for argv in (["explain", "--why", "fast_moe", "platform=cpu"],
                     ["explain", "--format", "line", "platform=cpu", "policy.moe_backend=fast_moe"],
                     ["matrix", "--op", "moe", "--format", "html", "--quant", "nvfp4"]):
            rc, out, err = run_main(argv)
            assert rc in (0, 1), err
            assert_clean(out, " ".join(argv))
    finally:
        catalogues.reset()
        for name in [m for m in sys.modules if m.split(".")[0] == "fast_kernels"]:
            del sys.modules[name]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text())
def test_printable_is_one_line_of_printable_text(s):
    """The neutraliser: any string gives one line of printable characters, and a printable
    string is left as it is."""
    out = printable(s)
    assert out.isprintable() and "\n" not in out and not RAW.search(out)
    if s.isprintable():
        assert out == s
