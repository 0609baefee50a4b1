"""tools/vllm_env.sh takes the vLLM release to prove (issue 43): the releases tests/vllm knows,
and a clear refusal of any other before anything is built."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "vllm_env.sh"


def test_an_unknown_release_is_refused_before_anything_is_built(tmp_path):
    venv = tmp_path / "venv"
    r = subprocess.run(["bash", str(SCRIPT), str(venv), "0.99.0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == ("vllm_env.sh: VERSION: 0.99.0 is not a release tests/vllm "
                                "proves; accepted: 0.32.0, 0.33.0, 0.34.0")
    assert not venv.exists()


def test_the_script_and_the_simulation_know_the_same_releases():
    text = SCRIPT.read_text()
    cases = re.findall(r"^  ([0-9.|]+)\)", text, re.M)  # the script's `case "$version"` arms
    script = {v.rsplit(".", 1)[0] for arm in cases for v in arm.split("|")}
    sim = (REPO / "tests" / "vllm" / "sim.py").read_text()
    known = set(re.findall(r'"(\d+\.\d+)": \("vllm_0_\d+"', sim))
    assert known == {"0.32", "0.33", "0.34"} and script == known
    for release in known:  # each has its stack preset
        assert (REPO / "conf" / "stack" / f"vllm_{release.replace('.', '_')}.yaml").exists()
