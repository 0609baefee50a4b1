"""The version guard (issue 43): an engine or library on the platform (detected or given) newer
than the newest release selector has proven says so in one visible line in every decision
(text, line, JSON) and in doctor, the answer is the newest proven release's, and exit codes do
not change."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINE = "answers proven up to vLLM 0.34.0; vllm 0.35.0 is installed"
# SM 11.0 NVFP4 MoE: vLLM 0.34.0 runs Marlin (experts/cutlass_moe.py 724-730), 0.33.0 cutlass
SM110 = ["stack=vllm_0_34", "engine=vllm", "platform=b200", "platform.capability=11.0"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "selector", *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)


def test_explain_text_line_and_json_carry_the_guard_with_unchanged_exit_codes():
    for fmt in ("text", "line", "json"):
        new = _cli("explain", *SM110, "platform.packages.vllm=0.35.0", "--format", fmt)
        old = _cli("explain", *SM110, "--format", fmt)
        assert new.returncode == old.returncode == 0, (fmt, new.stderr)
        assert LINE not in old.stdout + old.stderr, fmt
        if fmt == "json":
            d = json.loads(new.stdout)
            assert d["guard"] == LINE and LINE in d["notes"]
            assert {"kind": "unproven_release", "severity": "warning", "backend": None,
                    "data": {"releases": [{"package": "vllm", "name": "vLLM",
                                           "proven": "0.34.0", "installed": "0.35.0"}]}
                    } in d["notes_data"]
            assert d["selected"] == "marlin"  # the newest proven release's answer
            assert "guard" not in json.loads(old.stdout)
        elif fmt == "line":
            assert new.stderr.splitlines() == [f"selector: note: {LINE}"]
            assert new.stdout.count("\n") == 1 and "-> marlin" in new.stdout
        else:
            lines = new.stdout.splitlines()
            assert lines.count(f"!! {LINE}") == 1
            assert sum(LINE in x for x in lines) == 1  # once: not again among the notes
            assert "selected: marlin" in new.stdout


def test_a_refusal_keeps_exit_1_with_the_guard():
    args = [*SM110, "policy.moe_backend=cutlass", "platform.packages.vllm=0.35.0"]
    r = _cli("explain", *args, "--format", "line")
    assert r.returncode == 1 and LINE in r.stderr


def test_doctor_prints_the_guard_in_text_and_json():
    r = _cli("doctor", "platform.packages.vllm=0.35.0")
    plain = _cli("doctor")
    assert r.returncode == plain.returncode
    assert f"!! {LINE}" in r.stdout.splitlines()[:3]
    assert LINE not in plain.stdout
    j = _cli("doctor", "platform.packages.vllm=0.35.0", "--format", "json")
    assert json.loads(j.stdout)["guard"] == LINE


def test_api_decision_guard_and_the_answer_of_the_newest_proven_release():
    from selector import load
    d = load([*SM110, "platform.packages.vllm=0.35.0"]).default()
    assert d.guard == LINE and d.selected == "marlin"
    assert [n.kind for n in d.note_data].count("unproven_release") == 1
    assert LINE not in d.notes  # the guard is a line of its own, as the hint is
    assert f"!! {LINE}" in str(d)
    assert load(SM110).default().guard == ""
    # a proven release, an older one and a patch-free local build: no guard
    for v in ("0.34.0", "0.32.0", "0.34.0+cpu"):
        assert load([*SM110, f"platform.packages.vllm={v}"]).default().guard == "", v


@pytest.mark.parametrize("key, value, line", [
    ("sglang", "0.5.24", "answers proven up to SGLang 0.5.23; sglang 0.5.24 is installed"),
    ("flashinfer-python", "0.7.5",
     "answers proven up to FlashInfer 0.7.4; flashinfer-python 0.7.5 is installed"),
    ("vllm", "0.35.0rc1", "answers proven up to vLLM 0.34.0; vllm 0.35.0rc1 is installed"),
    # TensorRT-LLM: its main branch's pre-release is the newest proven (conf/stack/trtllm_main)
    ("tensorrt-llm", "1.3.0",
     "answers proven up to TensorRT-LLM 1.3.0rc24; tensorrt-llm 1.3.0 is installed"),
    ("tensorrt-llm", "1.3.0rc25",
     "answers proven up to TensorRT-LLM 1.3.0rc24; tensorrt-llm 1.3.0rc25 is installed"),
])
def test_every_family_with_release_data_is_guarded(key, value, line):
    from selector import load
    d = load(["platform=b200", "stack=vllm_0_34", f"platform.packages.{key}={value}"]).default()
    assert d.guard == line


def test_two_families_newer_make_one_line():
    from selector import load
    d = load(["platform=b200", "stack=vllm_0_34", "platform.packages.vllm=0.35.0",
              "platform.packages.sglang=0.6.0"]).default()
    assert d.guard == ("answers proven up to SGLang 0.5.23; sglang 0.6.0 is installed; "
                       "answers proven up to vLLM 0.34.0; vllm 0.35.0 is installed")
    assert "\n" not in d.guard


def test_proven_releases_come_from_the_stack_presets():
    from selector import load
    from selector.config.presets import proven_releases
    tree = load(["platform=b200"]).tree
    got = {d: v for d, _, v in proven_releases(tree)}
    assert got == {"vllm": "0.34.0", "sglang": "0.5.23", "flashinfer-python": "0.7.4",
                   "tensorrt-llm": "1.3.0rc24"}


@pytest.mark.parametrize("stack, given", [
    ("trtllm_main", ()), ("trtllm_1_2", ()),  # the proven pre-release and the older release
    ("trtllm_main", ("platform.packages.tensorrt-llm=1.3.0rc24+local",)),
    ("trtllm_main", ("platform.packages.tensorrt-llm=1.3.0rc24.post1",)),
])
def test_proven_tensorrt_llm_releases_get_no_guard(stack, given):
    from selector import load
    d = load(["platform=b200", "engine=trtllm", f"stack={stack}", *given]).default()
    assert d.guard == ""


def test_tensorrt_llm_guard_under_its_engine():
    from selector import load
    d = load(["platform=b200", "engine=trtllm", "stack=trtllm_main",
              "platform.packages.tensorrt-llm=1.3.1"]).default()
    assert d.guard == "answers proven up to TensorRT-LLM 1.3.0rc24; tensorrt-llm 1.3.1 is installed"
    assert [n.kind for n in d.note_data].count("unproven_release") == 1


def test_the_vllm_plugin_warns_the_guard_once(monkeypatch, caplog):
    """A vLLM newer than the newest proven stack, with selector's plugin deciding its layers:
    one warning with the guard's line for the process, not one per layer. (The Chooser asks
    vLLM's platform only for the capability: given here; tests/vllm runs it inside vLLM.)"""
    import logging

    from selector.engines import vllm as adapter
    from selector.engines import vllm_choice
    monkeypatch.setattr(vllm_choice, "capability", lambda: "11.0")
    layers = [{"op": "moe", "quant": "nvfp4", "activation": a, "act_and_mul": True}
              for a in ("silu", "gelu")]
    for given, want in ((["platform.packages.vllm=0.35.0"], [f"selector: note: {LINE}"]),
                        ([], [])):
        chooser = adapter.Chooser(["stack=vllm_0_34", *given])
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="vllm.selector"):
            got = [chooser.decide(layer, "auto") for layer in layers * 2]
        assert {d.selected for d in got} == {"marlin"}  # 0.34.0's answer on SM 11.0
        warned = [r.getMessage() for r in caplog.records
                  if r.name == "vllm.selector" and r.levelno == logging.WARNING]
        assert warned == want, given

