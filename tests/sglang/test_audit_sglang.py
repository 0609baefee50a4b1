"""`selector audit` on SGLang's own start-up line: SGLang 0.5.23 resolves its server arguments on
a simulated B200 (only the device simulated: sglang_sim.py) and prints `server_args={...}` with
its engine's own function (sglang_args_log.py); selector reads the MoE runner and FP4 GEMM
backends from it and judges DeepSeek-R1's NVFP4 plan for that machine."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from helpers import run_main  # noqa: E402

CHILD = Path(__file__).with_name("sglang_args_log.py")
MODEL = str(REPO / "examples" / "deepseek-r1-nvfp4")
PLAN = ["platform=b200", "stack=sglang_0_5_23", "engine=sglang"]


def sglang_log(tmp_path: Path, *args: str) -> Path:
    p = subprocess.run([sys.executable, str(CHILD), "10.0", "13.0", "flashinfer,deep_gemm",
                        "modelopt_fp4", *args], capture_output=True, text=True, timeout=600,
                       cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if "server_args={" in ln]
    assert len(line) == 1, p.stdout[-2000:]
    log = tmp_path / "sglang.log"
    log.write_text(p.stdout)
    return log


@pytest.mark.parametrize("moe,fp4,rc,moe_verdict,linear_verdict", [
    ("flashinfer_trtllm", "flashinfer_cutedsl", 0, "agree", "agree"),
    ("flashinfer_trtllm", "flashinfer_cudnn", 1, "agree", "differ"),
    ("flashinfer_cutlass", "auto", 1, "differ", "not_in_log"),
    ("flashinfer_trtllm", "auto", 0, "agree", "not_in_log"),
])
def test_audit_reads_sglangs_server_args(tmp_path, moe, fp4, rc, moe_verdict, linear_verdict):
    log = sglang_log(tmp_path, "--moe-runner-backend", moe, "--fp4-gemm-backend", fp4)
    text = log.read_text()
    assert f"'moe_runner_backend': '{moe}'" in text  # SGLang kept the request
    code, out, err = run_main(["audit", str(log), "--model", MODEL, *PLAN, "--format", "json"])
    rep = json.loads(out)
    assert rep["log_engine"] == "sglang", err
    verdicts = {r["op"]: r["verdict"] for r in rep["kinds"]}
    assert (code, verdicts["moe"], verdicts["linear"]) == (rc, moe_verdict, linear_verdict), out
