"""Fuzzing of installed plugins (issue 25), in the style of test_fuzz_configdir.py.

A drawn site directory holds one or two distributions that may contribute a catalogue through
`selector.catalogues` and register kernel modules under `selector.backends`. Drawn: the
metadata directory's name and kind; `entry_points.txt`, `METADATA` and `RECORD` as regular
files (valid, malformed, not UTF-8, binary, over the size limit), FIFOs, directories, links to
a device or nowhere, or missing; entry-point values (valid, not dotted, missing directories,
paths, the packaged conf, very long, non-ASCII); the contributed catalogue's backend and
preset files (a valid backend, one claiming a packaged engine name, a packaged backend or
preset name, a mistyped key, hostile YAML scalars, a FIFO) and the kernel module's body
(fine, raising, calling sys.exit). Each case runs `explain` (JSON, on a platform preset) and
`check` or `list` or `explain --format line` in-process under SIGALRM, and must end with exit
0, 1 or 2, no traceback, no hang; and no built-in decision may change unless a backend of the
plugin is the one selected.
"""
from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from fuzz_support import SCALE, SETTINGS, _private_cache, _report  # noqa: F401 (fixtures)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz_configdir import SCALARS, judge, run_main

from selector.config import catalogues
from selector.core import entry_points as scanner

pytestmark = pytest.mark.slow

OUTCOMES: Counter = Counter()  # (fuzzer, outcome) -> count; reported by benchmarks/fuzz.py
PLATFORMS = (["platform=rtx_5090", "stack=vllm_0_33", "engine=vllm"],
             ["platform=b200", "stack=flashinfer_0_7_4"], ["platform=cpu"])
PACKAGE = "fuzz_kernels"

GOOD_BACKEND = """\
description: "a fuzzed third-party kernel"
rank: {rank}
entry_point: fuzz_kernels.moe:FuzzMoE
rules:
  - kind: device
    devices: ["{devices}"]
    source: "fuzz-kernels release notes"
  - kind: activation
    values: [silu]
    source: "fuzz-kernels release notes"
engines:
  vllm:
    name: {vllm}
    source: "fuzz-kernels README"
"""

BACKENDS = st.one_of(
    st.builds(GOOD_BACKEND.format, rank=st.sampled_from([-5, 1, 50, 95, 2000]),
              devices=st.sampled_from(["12.x", "10.x", "9.0", "8.x"]),
              vllm=st.sampled_from(["fuzz_moe", "null"])),
    st.builds(GOOD_BACKEND.format, rank=st.sampled_from([-5, 1, 50, 95, 2000]),
              devices=st.sampled_from(["12.x", "10.x", "9.0", "8.x"]),
              vllm=st.sampled_from(["fuzz_moe", "null", "flashinfer_trtllm", "marlin",
                                    "flashinfer_cutlass", "'1'", "''"])),
    st.builds(lambda k, v: f"rank: 3\n{k}: {v}\n",
              st.sampled_from(["rank", "rnak", "rules", "engines", "entry_point", "probes",
                               "execution", "implements", "opt_in", "preference"]), SCALARS),
    st.sampled_from(["", "[]", "rank: 1\nrules: [{kind: devise}]\n", "\x00\xff", "{",
                     "rank: 1\nentry_point: os:system\n"]))
PRESETS = st.sampled_from([None, "capability: '12.0'\ngpu_name: Fuzz GPU\n", "capability: 12.0\n",
                           "# @package _global_\nplatform: {capability: '9.0'}\n",
                           "defaults: [b200]\n", "oops: 1\n"])
MODULES = st.sampled_from(["class FuzzMoE:\n    pass\n", "raise SystemExit(0)\n",
                           "import sys\nsys.exit(7)\n", "raise RuntimeError('broken plugin')\n",
                           "raise ImportError('missing dep')\n", "x = (\n",
                           "import sys\nsys.exit('bye')\n"])
EP_VALUES = st.one_of(
    st.sampled_from([f"{PACKAGE}.selector_conf", f"{PACKAGE}:selector_conf", f"{PACKAGE}.nope",
                     "selector.conf", "os", "", "a..b", "../../etc", "x" * 300, "ünï.conf",
                     f"{PACKAGE}.selector_conf extra", f"{PACKAGE}.selector_conf  # c"]),
    st.text(st.characters(blacklist_characters="\n\r\x00", blacklist_categories=("Cs",)),
            max_size=20))
META_KINDS = st.sampled_from(["file"] * 6 + ["missing", "fifo", "dir", "huge", "not_utf8",
                                            "binary", "devzero", "dangling", "garbage"])


VALID_EPS = (f"[selector.catalogues]\nfuzz = {PACKAGE}.selector_conf\n\n"
             f"[selector.backends]\nfuzz = {PACKAGE}.moe\n")


@st.composite
def entry_points_text(draw) -> str:
    if draw(st.sampled_from([True, False])):  # about half: a plugin declared as pip writes it
        return VALID_EPS
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        group = draw(st.sampled_from(["selector.catalogues", "selector.backends",
                                      "console_scripts", "selector.catalogues ", "", "[x"]))
        lines.append(f"[{group}]")
        for i in range(draw(st.integers(0, 2))):
            if group.strip() == "selector.backends":
                value = draw(st.sampled_from([f"{PACKAGE}.moe", f"{PACKAGE}", "os", ""]))
            else:
                value = draw(EP_VALUES)
            sep = draw(st.sampled_from([" = ", "=", " ", " == "]))
            lines.append(f"e{i}{sep}{value}")
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\nnot a pair\n", "\n\x00"]))


def _write(path: Path, kind: str, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "missing":
        return
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "huge":
        with open(path, "wb") as f:
            f.write(text.encode("utf-8", "surrogatepass"))
            f.truncate(scanner.MAX_METADATA_BYTES + 10)
    elif kind == "not_utf8":
        path.write_bytes(text.encode("utf-8", "surrogatepass") + b"\xff\xfe\x80")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)))
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "garbage":
        path.write_text("\x00,\"\n" * 3, encoding="utf-8")
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")


@st.composite
def sites(draw):
    """{relative path: (kind, text)} of a site directory."""
    files = {}
    for d in range(draw(st.integers(1, 2))):
        meta = st.sampled_from(["file"]) if draw(st.sampled_from([True, False])) else META_KINDS
        dist = draw(st.sampled_from(["fuzz-kernels", "fuzz_kernels", "Fuzz.Kernels", "other"]))
        version = draw(st.sampled_from(["1.0", "2.0rc1", "not a version", ""]))
        info = draw(st.sampled_from([f"{dist.replace('-', '_')}-{version or '0'}.dist-info",
                                     f"{dist}.egg-info", "weird name.dist-info",
                                     "x.dist-info"])) + ("" if d == 0 else "")
        files[f"{info}/entry_points.txt"] = (draw(meta), draw(entry_points_text()))
        files[f"{info}/METADATA"] = (draw(meta),
                                     f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        record = [f"{PACKAGE}/selector_conf/backend/moe/fuzz_moe.yaml,,", f"{PACKAGE}/moe.py,,"]
        files[f"{info}/RECORD"] = (draw(meta), "\n".join(record) + "\n")
    conf = f"{PACKAGE}/selector_conf"
    files[f"{PACKAGE}/__init__.py"] = ("file", "")
    files[f"{PACKAGE}/moe.py"] = ("file", draw(MODULES))
    name = draw(st.sampled_from(["fuzz_moe"] * 4 + ["marlin", "Fuzz", "auto"]))
    files[f"{conf}/backend/moe/{name}.yaml"] = (draw(st.sampled_from(["file"] * 8 + ["fifo"])),
                                                draw(BACKENDS))
    preset = draw(PRESETS)
    if preset is not None:
        files[f"{conf}/platform/{draw(st.sampled_from(['fuzz_gpu', 'b200']))}.yaml"] = \
            ("file", preset)
    return files


@pytest.fixture(scope="module")
def baseline():
    """Every platform's built-in decision without a plugin: (selected, {backend: status})."""
    catalogues.reset()
    out = {}
    for p in PLATFORMS:
        rc, text, err = run_main(["explain", "--format", "json", *p])
        d = json.loads(text)
        out[tuple(p)] = (d["selected"], {c["backend"]: c["status"] for c in d["candidates"]})
    return out


def _builtins_unchanged(before, d) -> None:
    selected, statuses = before
    plugin = d["selected"] not in statuses and d["selected"] is not None
    for c in d["candidates"]:
        if c["backend"] not in statuses:
            continue
        want = statuses[c["backend"]]
        if plugin and want == "selected":
            want = "eligible"
        assert c["status"] == want, (c["backend"], c["status"], want, d["selected"])
    if not plugin:
        assert d["selected"] == selected, (d["selected"], selected)


@settings(max_examples=150 * SCALE, **SETTINGS)
@given(files=sites(), platform=st.sampled_from(PLATFORMS),
       second=st.sampled_from(["check", "list", "line"]))
def test_fuzzed_plugins(tmp_path_factory, baseline, files, platform, second):
    site = tmp_path_factory.mktemp("site")
    for rel, (kind, text) in files.items():
        _write(site / rel, kind, text)
    sys.path.insert(0, str(site))
    catalogues.reset()
    try:
        argv = ["explain", "--format", "json", *platform]
        rc, out, err = run_main(argv)
        judge("plugins", argv, rc, out, err)
        assert rc in (0, 1), (rc, err)  # the built-ins always answer
        OUTCOMES["plugins", f"explain: exit {rc}"] += 1
        OUTCOMES["plugins", "warned" if "selector: warning:" in err else "quiet"] += 1
        d = json.loads(out)
        _builtins_unchanged(baseline[tuple(platform)], d)
        theirs = [c for c in d["candidates"] if c["backend"] not in baseline[tuple(platform)][1]]
        OUTCOMES["plugins", "catalogue loaded" if theirs else "catalogue left out or none"] += 1
        if theirs and d["selected"] in (c["backend"] for c in theirs):
            OUTCOMES["plugins", "plugin backend selected"] += 1
        argv = {"check": ["check"], "list": ["list"],
                "line": ["explain", "--format", "line", *platform]}[second]
        rc, out, err = run_main(argv)
        judge("plugins", [a for a in argv if a not in ("--format", "line")], rc, out, err)
        if second != "check":
            assert rc in (0, 1), (rc, err)
        OUTCOMES["plugins", f"{second}: exit {rc}"] += 1
    finally:
        sys.path.remove(str(site))
        catalogues.reset()
        for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
            del sys.modules[name]
