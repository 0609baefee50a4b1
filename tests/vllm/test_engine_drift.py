"""doctor --deep's engine drift against the real vLLM: the whole path (the CLI, the child that
imports vLLM and asks its own oracles, selector's answers, the report) on this machine.

vLLM's CPU build (0.32) answers without a GPU platform: its oracles run on CpuPlatform and
refuse NVFP4 MoE ("No NvFp4 MoE backend supports the deployment configuration"), return
Fp8MoeBackend.NONE for FP8 MoE and find no NVFP4 linear kernel. The check asks them anyway and
reports that no CUDA platform was there (differences then are `explained`, never drift)."""
from __future__ import annotations

import json
import subprocess
import sys

import vllm
from packaging.version import Version

from selector.engines.vllm_drift import LAYERS
from selector.inspect.drift import STATUSES


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "selector", "doctor", "--deep", *args],
                          capture_output=True, text=True, timeout=900)


def test_doctor_deep_asks_the_installed_vllm_and_reports_well_formed_items():
    got = _doctor("--format", "json")
    assert got.returncode in (0, 1), got.stderr[-2000:]
    assert "Traceback" not in got.stdout + got.stderr
    report = json.loads(got.stdout)
    engine = report["engine_drift"]
    assert engine["status"] == "compared", engine["message"]
    assert f"vLLM {vllm.__version__}'s own oracles" in engine["message"]
    items = engine["items"]
    assert [i["backend"] for i in items] == [f"vllm/{name}" for name, _, _ in LAYERS]
    for i in items:
        assert i["status"] in STATUSES and i["claim"] == "automatic choice"
        assert i["installed"] and i["catalogue"] and "own oracle" in i["detail"]
        assert i in report["drift"]  # the engine's items are drift items (exit status 1 on drift)
    from vllm.platforms import current_platform
    if not current_platform.is_cuda():
        assert "no CUDA platform" in engine["message"]
        assert all(i["status"] != "drift" for i in items)
    if not current_platform.is_cuda() and Version(vllm.__version__).release[:2] == (0, 32):
        # vLLM's CPU build: its oracles answer, and refuse each GPU layer; so does selector
        assert all(i["installed"].startswith("refuses") for i in items), items
        assert all(i["status"] == "agrees" for i in items), items


def test_doctor_deep_text_names_the_engine_check():
    got = _doctor()
    assert got.returncode in (0, 1), got.stderr[-2000:]
    assert "Traceback" not in got.stdout + got.stderr
    assert f"engine drift: vLLM {vllm.__version__}'s own oracles asked about {len(LAYERS)} " \
        "standard layers" in got.stdout


def test_a_preset_platform_is_not_compared_with_this_machines_vllm():
    got = _doctor("--format", "json", "platform=b200")
    assert got.returncode in (0, 1), got.stderr[-2000:]
    engine = json.loads(got.stdout)["engine_drift"]
    assert engine["status"] == "skipped" and engine["items"] == []
