"""tools/vllm_env.sh takes the vLLM release to prove (issue 43): 0.32.0 (the CPU wheel) or any
released CUDA wheel from 0.33.0 (tools/new_release.py builds a new one with it), and a clear
refusal of anything else before anything is built."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "vllm_env.sh"
ACCEPTED = "accepted: 0.32.0 (the CPU wheel) or a vllm release >= 0.33.0 such as 0.35.0"


def _run(venv: Path, version: str):
    return subprocess.run(["bash", str(SCRIPT), str(venv), version], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("version, why", [
    ("latest", "is not a release version such as 0.35.0"),
    ("0.34", "is not a release version such as 0.35.0"),
    ("0.31.0", "is before 0.33.0 and is not the CPU wheel's 0.32.0 (no wheel of it runs here)"),
])
def test_a_version_no_wheel_serves_is_refused_before_anything_is_built(tmp_path, version, why):
    venv = tmp_path / "venv"
    r = _run(venv, version)
    assert r.returncode == 2
    assert r.stderr.strip() == f"vllm_env.sh: VERSION: {version} {why}; {ACCEPTED}"
    assert not venv.exists()


def test_a_release_the_index_lacks_is_refused_before_anything_is_built(tmp_path):
    idx = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"],
                         capture_output=True, text=True, timeout=120)
    m = re.search(r"^Available versions: (.*)$", idx.stdout, re.M)
    if not m:
        pytest.skip("the package index did not answer `pip index versions vllm`")
    newest = m[1].split(",")[0].strip()
    venv = tmp_path / "venv"
    r = _run(venv, "99.0.0")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"vllm_env.sh: VERSION: 99.0.0 is not on the package index "
                                f"(newest vllm: {newest}); {ACCEPTED}")
    assert not venv.exists()


def test_every_release_the_simulation_knows_has_its_stack_preset_and_the_newest_is_proven():
    sim = (REPO / "tests" / "vllm" / "sim.py").read_text()
    known = set(re.findall(r'"(\d+\.\d+)": \("vllm_0_\d+"', sim))
    assert {"0.32", "0.33", "0.34"} <= known
    for release in known:  # each has its stack preset
        assert (REPO / "conf" / "stack" / f"vllm_{release.replace('.', '_')}.yaml").exists()
    from selector import load
    from selector.config.presets import proven_releases
    tree = load(["platform=cpu"]).tree
    newest = next(v for d, _, v in proven_releases(tree) if d == "vllm")
    # the version guard's newest proven vLLM is the newest release tests/vllm proves
    assert ".".join(newest.split(".")[:2]) == max(known, key=lambda v: tuple(map(int, v.split("."))))
