"""`selector matrix`: the grid agrees with explain cell by cell, docs/matrix.md is what the
command prints, the HTML form is self-contained with every reason as a tooltip, and it renders
in a real headless Chromium (skipped where no browser is installed)."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest
from helpers import REPO, assert_clean_error, run_cli_many

from selector.core.schema import QUANTS

DOC = REPO / "docs" / "matrix.md"
RUNS = {
    "markdown": ("matrix", "--format", "markdown"),
    "json": ("matrix", "--format", "json"),
    "text": ("matrix", "--op", "moe"),
    "html": ("matrix", "--format", "html"),
    "nemotron": ("matrix", "--format", "json", "layer=nemotron_moe", "--stack",
                 "flashinfer_0_7_4"),
    "explain-spark": ("explain", "--format", "json", "platform=dgx_spark", "stack=vllm_0_32",
                      "layer=default"),
    "explain-h100": ("explain", "--format", "json", "platform=h100", "stack=vllm_0_32",
                     "layer=dense_linear"),
    "list": ("list", "--format", "json"),
    "bad-op": ("matrix", "--op", "linear", "layer=nemotron_moe"),
    "bad-platform": ("matrix", "platform=h100"),
    "bad-format": ("matrix", "--format", "yaml"),
    "one-quant": ("matrix", "--format", "json", "--op", "linear", "--quant", "nvfp4_w4a16"),
    "bad-quant": ("matrix", "--quant", "fp8"),
    "two-quants": ("matrix", "--quant", "nvfp4", "layer.quant=nvfp4_w4a16"),
}


@pytest.fixture(scope="module")
def runs():
    first = run_cli_many([RUNS["json"]])  # composes every preset once into the session cache
    rest = {k: v for k, v in RUNS.items() if k != "json"}
    return {"json": first[0], **dict(zip(rest, run_cli_many(rest.values())))}


def test_docs_matrix_is_current(runs):
    r = runs["markdown"]
    assert r.returncode == 0, r.stderr
    assert DOC.read_text() == r.stdout, (
        "docs/matrix.md is stale: python -m selector matrix --format markdown > docs/matrix.md")


def test_every_backend_on_every_preset_agrees_with_explain(runs):
    every = runs["json"].json["grids"]
    grids = {g["op"]: g for g in every if g["layer"]["quant"] == "nvfp4"}
    catalogue = runs["list"].json
    # one grid per op and scheme some backend implements, holding exactly those backends
    for op in ("moe", "linear"):
        schemes = [q for q in QUANTS if any(q in b["implements"] for b in catalogue[op])]
        assert [g["layer"]["quant"] for g in every if g["op"] == op] == schemes
        for g in every:
            if g["op"] == op:
                assert sorted(g["backends"]) == sorted(
                    b["backend"] for b in catalogue[op] if g["layer"]["quant"] in b["implements"])
    for op in ("moe", "linear"):
        g = grids[op]
        presets = [p["preset"] for p in g["platforms"]]
        assert "auto" not in presets and {"cpu", "h100", "b200", "dgx_spark"} <= set(presets)
        caps = [p["capability"] for p in g["platforms"]]
        assert caps[0] is None  # no GPU first, then by compute capability
        for b in g["backends"]:
            assert set(g["cells"][b]) == set(presets)
    for key, op, preset in (("explain-spark", "moe", "dgx_spark"),
                            ("explain-h100", "linear", "h100")):
        d = runs[key].json
        for c in d["candidates"]:
            if c["backend"] not in grids[op]["backends"]:  # it does not implement nvfp4
                assert c["status"] == "not_applicable", c
                continue
            cell = grids[op]["cells"][c["backend"]][preset]
            assert cell["status"] == c["status"], (op, preset, c["backend"])
            assert cell["reasons"] == c["reasons"]
    assert grids["moe"]["cells"]["flashinfer_cutlass"]["dgx_spark"]["short"] == "selected"
    assert grids["moe"]["cells"]["flashinfer_b12x"]["dgx_spark"]["short"] == "opt-in"
    assert grids["linear"]["cells"]["marlin"]["h100"]["short"] == "selected"
    assert grids["moe"]["cells"]["flashinfer_trtllm"]["h100"]["short"] == "need SM 10.0/10.3/10.7"


def test_the_layer_given_and_the_stack(runs):
    g, = runs["nemotron"].json["grids"]
    assert g["op"] == "moe" and g["stack"] == "flashinfer_0_7_4"
    assert g["layer"]["activation"] == "relu2" and g["layer"]["act_and_mul"] is False
    assert g["cells"]["flashinfer_cutlass"]["dgx_spark"]["status"] == "selected"
    text = runs["text"]
    assert text.returncode == 0
    assert "dgx_spark (SM 12.1)" in text.stdout and "linear backends" not in text.stdout


def test_bad_matrix_input(runs):
    assert_clean_error(runs["bad-op"], "--op", "'linear'", "moe layer")
    assert_clean_error(runs["bad-platform"], "platform=h100", "--stack")
    assert runs["bad-format"].returncode == 2
    assert_clean_error(runs["bad-quant"], "--quant", "'fp8'", "fp8_block")
    assert_clean_error(runs["two-quants"], "--quant", "layer.quant")


def test_one_scheme(runs):
    g, = runs["one-quant"].json["grids"]
    assert (g["op"], g["layer"]["quant"]) == ("linear", "nvfp4_w4a16")
    assert "--quant nvfp4_w4a16" in runs["one-quant"].json["command"]


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells, self.external = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td" and a.get("class") != "b":
            self.cells.append(a)
        for k in ("src", "href"):
            if a.get(k):
                self.external.append(a[k])


def test_html_is_self_contained_with_reasons_as_tooltips(runs):
    page = runs["html"].stdout
    p = _Cells()
    p.feed(page)
    grids = runs["json"].json["grids"]
    assert len(p.cells) == sum(len(g["backends"]) * len(g["platforms"]) for g in grids)
    assert not p.external and "<script" not in page and "@import" not in page
    assert all(c.get("title") for c in p.cells)
    rejected = [c for c in p.cells if c["class"] == "rejected"]
    assert rejected and all(re.search(r"\[\w+\] .+ \(.+\)", c["title"]) for c in rejected)
    assert any("FlashInfer" in c["title"] for c in rejected)  # the sources, not only reasons


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
_PROBE = """<script>
window.addEventListener('load', () => {
  const cells = [...document.querySelectorAll('td:not(.b)')];
  const out = {cells: cells.length,
    visible: cells.filter(c => c.getBoundingClientRect().width > 10 &&
                               c.getBoundingClientRect().height > 10).length,
    selected: [...new Set(cells.filter(c => c.className === 'selected')
                          .map(c => getComputedStyle(c).backgroundColor))],
    tables: document.querySelectorAll('table').length};
  const pre = document.createElement('pre'); pre.id = 'probe';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def _chromium(*args, cwd):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_html_renders_in_headless_chromium(runs, tmp_path):
    """CI (.ci/run) installs Chromium and sets SELECTOR_REQUIRE_CHROMIUM=1: there a missing
    browser fails the test instead of skipping it."""
    if CHROMIUM is None:
        if os.environ.get("SELECTOR_REQUIRE_CHROMIUM") == "1":
            pytest.fail("SELECTOR_REQUIRE_CHROMIUM=1 but no Chromium is installed "
                        "(Debian: apt-get install chromium)")
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    page = runs["html"].stdout
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _PROBE + "</body>"))
    r = _chromium("--dump-dom", f"file://{probe}", cwd=tmp_path)
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout)
    assert m, r.stderr[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["tables"] == len(runs["json"].json["grids"]) >= 4  # one per op and scheme
    assert got["cells"] == got["visible"] > 100
    assert got["selected"] == ["rgb(30, 123, 52)"]  # the stylesheet is applied
    # and a screenshot of the page as a user sees it
    (tmp_path / "matrix.html").write_text(page)
    r = _chromium("--window-size=1500,900", "--screenshot=shot.png",
                  f"file://{tmp_path / 'matrix.html'}", cwd=tmp_path)
    png = (tmp_path / "shot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n", r.stderr[-2000:]
    assert struct.unpack(">II", png[16:24]) == (1500, 900)
    assert len(png) > 30_000  # a blank page compresses to a few KB
