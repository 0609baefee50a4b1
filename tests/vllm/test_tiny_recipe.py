"""The shipped CPU recipe (tools/tiny_vllm.py, README "The vLLM plugin"): it writes a tiny NVFP4
and a tiny FP8 block checkpoint and a control, starts the real vLLM (its CPU build) on each with
SELECTOR_VLLM=1, and must show selector's decision line for every NVFP4 and FP8 MoE layer; each
outcome must be the one selector's own decision predicts on this machine (a generated answer
when selector selects a backend, vLLM's error carrying selector's refusal when not), and the
control must generate. About a minute on 2 cores."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
import tiny_vllm

import selector
from selector.engines import vllm as adapter

TOOL = Path(tiny_vllm.__file__).resolve()
pytestmark = pytest.mark.slow


def predicted(model: Path) -> List[Any]:
    """selector's decision for every MoE layer kind of `model`, as the plugin asks on this
    machine (the plugin decides NVFP4 and FP8 MoE; the recipe's checkpoints quantize only
    experts or nothing)."""
    sel = selector.load(adapter.Chooser(extra=[]).overrides())
    try:
        plan = sel.plan(model)
    except selector.SelectorError:  # nothing quantized
        return []
    return [sel.select(**dict(s.fields)) for k in plan.kinds if k.quant and k.op == "moe"
            for s in k.shapes]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("recipe")
    p = subprocess.run([sys.executable, str(TOOL), str(root)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=900)
    return {"root": root, "rc": p.returncode, "out": p.stdout}


def summary(out: str, name: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith(f"tiny: {name}: plugin on: ")]
    assert len(lines) == 1, out[-3000:]
    return lines[0]


def test_recipe_exits_0(run):
    assert run["rc"] == 0, run["out"][-3000:]


@pytest.mark.parametrize("name", ["modelopt_moe", "fp8_moe"])
def test_selector_decides_inside_vllm(name, run):
    """One decision line per distinct MoE layer in vLLM's log, equal to selector's own
    log line for that layer; the outcome is the one that decision predicts."""
    ds = predicted(run["root"] / name)
    assert ds, name  # the NVFP4 and the FP8 checkpoint have MoE layers selector decides
    log = [ln for ln in run["out"].splitlines() if tiny_vllm.DECISION in ln]
    for d in ds:
        assert any(f"] {d.log_line()} [vLLM: " in ln for ln in log), (d.log_line(), log)
    line = summary(run["out"], name)
    if all(d.selected for d in ds):
        assert ": generated [" in line, line
    elif adapter.OUTSIDE_PICK_LOG in run["out"]:  # vLLM's CPU experts (an AMX host): they stand
        assert ": generated [" in line, line
    else:
        assert "selector refuses every " in line, line


def test_control_generates_with_plugin_on(run):
    """NVFP4 declared, every module excluded: selector is never asked and vLLM generates."""
    assert not predicted(run["root"] / "excluded")
    assert ": generated [" in summary(run["out"], "excluded"), run["out"][-3000:]


def test_missing_decision_line_fails():
    """The recipe's verdict: a refusal without selector's decision line, or a vLLM failure
    that is not selector's refusal, is wrong (the script then exits 1)."""
    refused = {"message": "selector refuses every FP8 MoE backend", "error": "X",
               "selector_log": []}
    assert tiny_vllm.verdict(refused, plugin=True)[0] == "no selector decision line in vLLM's log"
    crash = {"message": "Unsupported FP8 MoE backend: NONE", "error": "ValueError",
             "selector_log": []}
    assert tiny_vllm.verdict(crash, plugin=True)[0]
    ok = dict(refused, selector_log=["x] selector: moe quant=fp8_block -> none [nothing_fits]"])
    assert tiny_vllm.verdict(ok, plugin=True)[0] is None


def test_a_vllm_that_imports_another_selector_fails():
    """The started vLLM must decide with the selector this process imports (the child's
    PYTHONPATH starts with this checkout): a child that imported another one (an editable
    install pointing at another checkout) is wrong, whatever it logged."""
    res = {"tokens": [1, 2], "selector": "/elsewhere/selector", "selector_log": [],
           "message": ""}
    wrong = tiny_vllm.verdict(res, plugin=True)[0]
    assert wrong and "/elsewhere/selector" in wrong and tiny_vllm.selector_dir() in wrong
    assert tiny_vllm.verdict(dict(res, selector=tiny_vllm.selector_dir()), plugin=True)[0] is None
