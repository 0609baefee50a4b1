"""tools/new_release.py replays vLLM 0.33.0 -> 0.34.0 from the released wheels and finds the
changes issue 43 lists, each at its 0.34.0 file and line, and the pin the index lacks."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "new_release.py"


def _run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          timeout=900, cwd=REPO)


def _hunks(out: str):
    """(file, first, last, body) of each printed hunk."""
    found = []
    for m in re.finditer(r"^(\S+\.py) lines (\d+)-(\d+)\n((?:    .*\n)*)", out, re.M):
        found.append((m[1], int(m[2]), int(m[3]), m[4]))
    return found


@pytest.mark.slow
def test_replays_0_33_to_0_34_and_finds_each_change(tmp_path):
    # SELECTOR_RELEASE_WHEELS: a directory already holding both wheels (else downloaded here)
    wheels = Path(os.environ.get("SELECTOR_RELEASE_WHEELS") or tmp_path)
    r = _run("vllm", "0.34.0", "--previous", "0.33.0", "--wheels", str(wheels),
             "--max-lines", "400")
    assert r.returncode == 0, r.stderr
    hunks = _hunks(r.stdout)

    def where(file: str, text: str):
        return [(a, b) for f, a, b, body in hunks if f.endswith(file) and text in body]

    # SM 11.x out of vLLM's CUTLASS NVFP4 MoE (experts/cutlass_moe.py 724-730)
    assert any(a <= 728 <= b for a, b in where("experts/cutlass_moe.py", "SM110 excluded"))
    # TRT-LLM NVFP4 MoE takes swiglustep (253-265) with per-tensor scales (56-70)
    assert any(a <= 258 <= b for a, b in where("experts/trtllm_nvfp4_moe.py",
                                               "has_flashinfer_swiglustep_activation()"))
    assert where("experts/trtllm_nvfp4_moe.py", "SWIGLUSTEP requires per-tensor NVFP4")
    assert where("quantization/utils/flashinfer_utils.py",
                 "def has_flashinfer_swiglustep_activation")
    # gpt-oss MXFP4 on SM 11.x: Marlin before Triton (oracle/mxfp4.py 445-457)
    assert any(a <= 446 <= b for a, b in where("oracle/mxfp4.py",
                                               "is_device_capability_family(110)"))
    # DeepGEMM needs nvcc >= 12.9 (utils/deep_gemm.py 118-177)
    assert any(a <= 168 <= b for a, b in where("utils/deep_gemm.py", "version < (12, 9)"))
    # VLLM_MARLIN_INPUT_DTYPE removed (envs.py)
    assert where("envs.py", "VLLM_MARLIN_INPUT_DTYPE")
    # the draft preset and the pin the index lacks
    assert 'stack: {family: vllm, version: "0.34"}' in r.stdout
    assert 'flashinfer-python: "0.7.3"' in r.stdout
    assert "the index lacks flashinfer-python==0.7.3" in r.stdout


@pytest.mark.parametrize("args, line", [
    (("sglang", "0.6.0"), "new_release.py: engine: sglang: only vllm has released wheels to "
                          "read; accepted: vllm"),
    (("vllm", "latest"), "new_release.py: version: latest: is not a release version such as "
                         "0.35.0"),
])
def test_bad_input_is_one_line_and_exit_2(args, line):
    r = _run(*args)
    assert r.returncode == 2 and r.stderr.strip() == line
