"""`selector fleet FLEET.yaml`: every checkpoint on every machine under every engine.

Each cell must equal `explain --model` for the same overrides; exit codes 0/1/2; `--what-if`
lists exactly the cells whose backends or refusal change; an `auto:` machine is a real
`doctor --format json` capture; the HTML page renders in headless Chromium (as the matrix's)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import REPO, run_cli, run_main
from test_matrix import CHROMIUM, _chromium

import selector
from selector.checkpoint.plan_text import planned
from selector.commands import fleet

EXAMPLES = REPO / "examples"
FLEET = """
machines:
  - {name: h100, platform: h100, stack: vllm_0_32}
  - {name: b200, platform: b200, stack: vllm_0_32}
models: [%s/deepseek-r1-nvfp4, {name: llama, path: %s/llama-3.1-8b-fp4}]
engines: [vllm, trtllm]
"""


def write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    path = write(d, FLEET % (EXAMPLES, EXAMPLES))
    rc, out, err = run_main(["fleet", path, "--format", "json"])
    return {"path": path, "rc": rc, "json": json.loads(out), "err": err, "dir": d}


def test_cells_are_explain_model(small):
    """Every cell's backends and verdict equal selector.plan for the same overrides."""
    rep = small["json"]
    assert rep["counts"]["plans"] == 2 * 2 * 2 == len(rep["cells"])
    machines = {m["name"]: m["overrides"] for m in rep["machines"]}
    models = {m["name"]: m["path"] for m in rep["models"]}
    for c in rep["cells"]:
        p = selector.load(machines[c["machine"]] + [f"engine={c['engine']}"]).plan(
            models[c["model"]])
        want: dict = {}
        for k in p.kinds:
            for s in k.shapes:
                if k.quant and planned(s.decision):
                    names = want.setdefault(k.op, [])
                    if s.decision.selected and s.decision.selected not in names:
                        names.append(s.decision.selected)
        assert c["backends"] == {op: v for op, v in want.items()}, c
        assert c["ok"] == p.ok


def test_exit_code_follows_refusals(small):
    """The TensorRT-LLM cells on an H100 refuse the NVFP4 checkpoints (no TensorRT-LLM NVFP4
    backend on SM 9.0): exit 1; the b200 machine alone plans everything: exit 0."""
    rep = small["json"]
    refused = {(c["machine"], c["engine"]) for c in rep["cells"] if not c["ok"]}
    assert small["rc"] == (1 if refused else 0)
    assert ("h100", "trtllm") in refused and not any(m == "b200" for m, _ in refused)
    only_b200 = FLEET.replace("  - {name: h100, platform: h100, stack: vllm_0_32}\n", "")
    rc, out, _ = run_main(["fleet", write(small["dir"], only_b200 % (EXAMPLES, EXAMPLES),
                                         "b200.yaml")])
    assert rc == 0 and "4 plans; 4 plan, 0 refuse" in out


def test_fail_on_warning(small):
    """--fail-on warning: a cell that plans with a warning fails too."""
    only_b200 = FLEET.replace("  - {name: h100, platform: h100, stack: vllm_0_32}\n", "")
    path = write(small["dir"], only_b200 % (EXAMPLES, EXAMPLES), "b200w.yaml")
    rc, out, _ = run_main(["fleet", path, "--fail-on", "warning", "--format", "json"])
    warned = json.loads(out)["counts"]["warned"]
    assert warned > 0 and rc == 1


def test_what_if_lists_the_changes(small):
    """--what-if platform=b200 moves the h100 machine to a B200: its cells change backend and
    its TensorRT-LLM cells stop failing; the b200 cells do not change."""
    rc, out, _ = run_main(["fleet", small["path"], "--what-if", "platform=b200",
                           "--format", "json"])
    w = json.loads(out)["what_if"]
    assert w["overrides"] == ["platform=b200"]
    changed = {(c["machine"], c["model"], c["engine"]) for c in w["changes"]}
    assert changed and all(m == "h100" for m, _, _ in changed)
    before = {(c["machine"], c["model"], c["engine"]): c for c in small["json"]["cells"]}
    after = {(c["machine"], c["model"], c["engine"]): c for c in w["cells"]}
    for key in before:
        differs = before[key]["backends"] != after[key]["backends"] or \
            before[key]["ok"] != after[key]["ok"]
        assert differs == (key in changed), key
    assert any("stops failing" in c["change"] for c in w["changes"])
    assert rc == 1  # the fleet as it is still has refusing cells


def test_auto_machine_from_a_doctor_capture(tmp_path):
    """`auto: FILE`: a real `doctor --format json` capture of this machine is planned as that
    machine, whatever machine runs the fleet; its cells equal a plan with the same overrides."""
    r = run_cli("doctor", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    (tmp_path / "here.json").write_text(r.stdout)
    cap = json.loads(r.stdout)
    path = write(tmp_path, f"machines: [{{name: here, auto: here.json}}]\n"
                 f"models: [{EXAMPLES}/llama-3.1-8b-fp4]\nengines: [vllm]\n")
    rc, out, err = run_main(["fleet", path, "--format", "json"])
    rep = json.loads(out)
    ov = rep["machines"][0]["overrides"]
    assert ov[0] == "platform=cpu"
    assert any(o.startswith("platform.packages.flashinfer-python=") for o in ov)
    cell = rep["cells"][0]
    p = selector.load(ov + ["engine=vllm"]).plan(str(EXAMPLES / "llama-3.1-8b-fp4"))
    assert cell["ok"] == p.ok
    assert p.decisions()[0].platform["capability"] == cap["platform"]["capability"]


@pytest.mark.parametrize("text,needle", [
    ("machines: []\nmodels: [x]\n", "machines: a non-empty list"),
    ("machines: [{name: a, platform: h100, auto: x.json}]\nmodels: [x]\n", "give one of"),
    ("machines: [{name: a, platform: h100}]\nmodels: [nowhere]\n", "is not a directory"),
    ("machines: [{name: a, platform: h100}]\nmodels: [MODEL]\nengines: [tgi]\n", "tgi"),
    ("machines: [{name: a, platform: nosuch}]\nmodels: [MODEL]\n", "nosuch"),
    ("machines: [{name: a, auto: missing.json}]\nmodels: [MODEL]\n", "cannot read"),
    ("machines: [{name: a, platform: h100}]\nmodels: [MODEL]\nfail_on: sometimes\n",
     "sometimes"),
    ("machines: [{name: a, platform: h100, gpus: 8}]\nmodels: [MODEL]\n", "gpus"),
    ("- a list\n", "a fleet file is a mapping"),
    ("machines: [{name: a, platform: h100}]\nmodels: [EMPTY]\n", "models: empty"),
])
def test_bad_fleet(tmp_path, text, needle):
    (tmp_path / "empty").mkdir()
    path = write(tmp_path, text.replace("MODEL", str(EXAMPLES / "llama-3.1-8b-fp4"))
                 .replace("EMPTY", str(tmp_path / "empty")))
    rc, out, err = run_main(["fleet", path])
    assert rc == 2 and needle in err and out == "" and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_not_a_doctor_capture(tmp_path):
    (tmp_path / "c.json").write_text('{"gpu": "H100"}')
    path = write(tmp_path, f"machines: [{{auto: c.json}}]\nmodels: [{EXAMPLES}/llama-3.1-8b-fp4]\n")
    rc, _, err = run_main(["fleet", path])
    assert rc == 2 and "is not a `selector doctor --format json` capture" in err


def test_example_fleet_file_is_valid():
    """examples/fleet.yaml: 5 machines x 4 checkpoints x 3 engines (benchmarks/fleet_time.py
    times it); read here without planning every cell."""
    f = fleet.read_fleet(str(EXAMPLES / "fleet.yaml"))
    assert (len(f.machines), len(f.models), len(f.engines)) == (5, 4, 3)


def test_markdown_and_text(small):
    rc, md, _ = run_main(["fleet", small["path"], "--format", "markdown"])
    lines = md.splitlines()
    assert lines[0].startswith("| model | h100 / vllm | h100 / trtllm | b200 / vllm |")
    assert len([ln for ln in lines if ln.startswith("| ")]) == 1 + 2  # header + one per model
    rc, text, _ = run_main(["fleet", small["path"]])
    assert re.search(r"8 plans; \d+ plan, \d+ refuse", text)


def test_html_renders_in_headless_chromium(small, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("SELECTOR_REQUIRE_CHROMIUM") == "1":
            pytest.fail("SELECTOR_REQUIRE_CHROMIUM=1 but no Chromium is installed")
        pytest.skip("no Chromium installed (Debian: apt-get install chromium)")
    rc, page, _ = run_main(["fleet", small["path"], "--format", "html"])
    probe = """<script>window.addEventListener('load', () => {
      const cells = [...document.querySelectorAll('td')];
      const pre = document.createElement('pre'); pre.id = 'probe';
      pre.textContent = JSON.stringify({cells: cells.length, visible: cells.filter(
        c => c.getBoundingClientRect().width > 10).length,
        refused: cells.filter(c => c.classList.contains('refused')).length});
      document.body.appendChild(pre);});</script>"""
    (tmp_path / "p.html").write_text(page.replace("</body>", probe + "</body>"))
    r = _chromium("--dump-dom", f"file://{tmp_path / 'p.html'}", cwd=tmp_path)
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout)
    assert m, r.stderr[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["cells"] == got["visible"] == 8
    assert got["refused"] == small["json"]["counts"]["refused"]
