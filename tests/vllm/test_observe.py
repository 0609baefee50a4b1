"""Shadow mode (SELECTOR_VLLM=observe) and `selector audit` on the real vLLM CPU build.

tools/tiny_vllm.py's NVFP4 and FP8 MoE checkpoints are started in vLLM three times each: with
the plugin off (vLLM's own log, also at debug level), in observe mode, and in observe mode with
SELECTOR_VLLM_OVERRIDES describing an H100 with vLLM 0.32's software, so that selector's choice
differs from the one vLLM's CPU build makes. Observe mode must change nothing (the same outcome
as the plugin off), log one line per quantized layer and the summary, write the JSON file
(validated against docs/schemas/observe.schema.json), and its counts must match vLLM's own
log, as `selector audit` reads it. A few minutes on 2 cores."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
import tiny_vllm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # json_schema.py, helpers.py
from helpers import run_main  # noqa: E402
from json_schema import validate  # noqa: E402

import selector  # noqa: E402
from selector.engines import vllm as adapter  # noqa: E402

pytestmark = pytest.mark.slow
H100 = 'platform.capability="9.0" stack=vllm_0_32'
CHECKPOINTS = {"modelopt_moe": tiny_vllm.modelopt_moe, "fp8_moe": tiny_vllm.fp8_moe}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Dict[str, Any]]:
    root = tmp_path_factory.mktemp("observe")
    out: Dict[str, Dict[str, Any]] = {}
    for name, make in CHECKPOINTS.items():
        model = make(root)
        r: Dict[str, Any] = {"model": model}
        r["off"] = tiny_vllm.start(model, False, log=root / f"{name}.off.log")
        r["debug"] = tiny_vllm.start(model, False, env={"VLLM_LOGGING_LEVEL": "DEBUG"},
                                     log=root / f"{name}.debug.log")
        for mode, extra in (("observe", {}), ("differ", {"SELECTOR_VLLM_OVERRIDES": H100})):
            js = root / f"{name}.{mode}.json"
            res = tiny_vllm.start(model, True, mode="observe",
                                  env={"SELECTOR_VLLM_OBSERVE_JSON": str(js), **extra},
                                  log=root / f"{name}.{mode}.log")
            res["json"] = json.loads(js.read_text()) if js.exists() else None
            r[mode] = res
        out[name] = r
    return out


def outcome(res: Dict[str, Any]) -> Any:
    return res.get("tokens") or (res.get("error"), res.get("message"))


def observe_lines(res: Dict[str, Any]):
    return [ln for ln in res["log"] if "] selector: observe: " in ln
            or ("] selector: " in ln and " layers, " in ln and " agree, " in ln)]


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
@pytest.mark.parametrize("mode", ["observe", "differ"])
def test_observe_changes_nothing(runs, name, mode):
    """vLLM's outcome with SELECTOR_VLLM=observe is its outcome with the plugin off; the
    plugin's deciding line ("-> X [vLLM: ...]") never appears."""
    r = runs[name]
    assert outcome(r[mode]) == outcome(r["off"])
    assert not [ln for ln in r[mode]["log"] if "[vLLM: " in ln]
    assert not [ln for ln in r["off"]["log"] if "selector:" in ln]


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
@pytest.mark.parametrize("mode", ["observe", "differ"])
def test_one_line_per_layer_and_the_summary(runs, name, mode):
    res = runs[name][mode]
    rep = res["json"]
    assert rep is not None, res["log"][-20:]
    validate(rep, "observe")
    lines = observe_lines(res)
    per_layer = [ln for ln in lines if " #" in ln]
    assert len(per_layer) == rep["layers"] == len(rep["entries"]) > 0
    summary = [ln for ln in lines if ln.endswith(rep["summary"])]
    assert len(summary) == 1 and rep["summary"].startswith(
        f"selector: {rep['layers']} layers, {rep['counts']['agree']} agree, "
        f"{rep['counts']['differ']} differ")
    for e, ln in zip(rep["entries"], per_layer):
        assert f"#{e['index']}: vLLM " in ln and ln.endswith(e["selector"]["reason"])


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_counts_match_vllms_own_log(runs, name):
    """The plugin-off log, read by `selector audit` with the overrides the plugin used: vLLM's
    answer there is the answer observe mode recorded for every layer; the layers observed are
    every MoE layer of the checkpoint when vLLM built them all, one when vLLM stopped at the
    first (the error its own log shows); agree/differ follow the audit's verdict, with the
    plugin's overrides (agree here) and with the H100 ones (differ)."""
    r = runs[name]
    plan = selector.load(adapter.Chooser(extra=[]).overrides()).plan(r["model"])
    moe = [k for k in plan.kinds if k.op == "moe" and k.quant]
    assert len(moe) == 1
    for mode, extra in (("observe", []), ("differ", H100.split())):
        rep = r[mode]["json"]
        rc, out, err = run_main(["audit", f"{r['model']}.off.log", "--model",
                                 str(r["model"]), "--format", "json", "engine=vllm",
                                 "platform.capability=null", *extra])
        aud = json.loads(out)
        assert aud["log_engine"] == "vllm" and not aud["debug"], err
        row = [k for k in aud["kinds"] if k["op"] == "moe"][0]
        answers = {e["vllm"]["backend"] or "none" for e in rep["entries"]}
        assert answers == {"none"} and row["engine"] == ["none (the engine found no backend)"]
        failed = any(e["vllm"]["error"] for e in rep["entries"])
        assert rep["layers"] == (1 if failed else len(moe[0].layers))
        verdict = "agree" if row["verdict"] == "agree" else "differ"
        assert rep["counts"][verdict] == rep["layers"], (mode, rep["summary"], row)
        assert (rc, verdict) == ((0, "agree") if mode == "observe" else (1, "differ"))


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_audit_of_the_debug_log(runs, name):
    """At debug level vLLM names each backend its oracle passed over; the audit reads them."""
    r = runs[name]
    log = Path(f"{r['model']}.debug.log")
    rc, out, err = run_main(["audit", str(log), "--model", str(r["model"]), "--format", "json",
                             "engine=vllm", "platform.capability=null"])
    aud = json.loads(out)
    assert rc == 0 and aud["debug"], err
    row = [k for k in aud["kinds"] if k["op"] == "moe"][0]
    assert row["verdict"] == "agree"
    assert row["engine_passed_over"], row
    validate(aud, "audit")


def test_audit_of_an_edited_log(runs):
    """vLLM's own FP8 log, edited to name a backend vLLM's oracle prints on a GPU (fp8.py lines
    415-420: "Using TRITON Fp8 MoE backend out of potential backends: [...]"): differ, exit 1."""
    r = runs["fp8_moe"]
    log = Path(f"{r['model']}.off.log")
    text = log.read_text()
    assert "Unsupported FP8 MoE backend: NONE" in text
    edited = log.with_name("fp8_moe.edited.log")
    edited.write_text(text.replace(
        "Unsupported FP8 MoE backend: NONE",
        "Using TRITON Fp8 MoE backend out of potential backends: ['TRITON']."))
    rc, out, _ = run_main(["audit", str(edited), "--model", str(r["model"]), "engine=vllm",
                           "platform.capability=null"])
    assert rc == 1 and "differ: the engine ran triton, selector plans none" in out
