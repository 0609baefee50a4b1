"""`selector audit LOG --model DIR`: an engine's start-up log against the plan.

Log text here is of two kinds. vLLM's CPU build logs (tests/fixtures/logs/, written by vLLM
0.32.0's CPU build running tools/tiny_vllm.py's checkpoints, plugin off, default and debug level:
tests/vllm/test_audit_vllm.py writes them again and audits them in the same run). GPU-only
messages are the engines' own format strings, filled as the engine fills them, each with the
file and line that prints it (selector/commands/audit.py VLLM_SOURCES, SGLANG_SOURCES,
TRTLLM_SOURCES)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, run_main

from selector.commands import audit

MODEL = str(REPO / "examples" / "deepseek-r1-nvfp4")
FIXTURES = Path(__file__).parent / "fixtures" / "logs"
PREFIX = "(EngineCore pid=187) INFO 05-01 18:55:06 "
DEBUG = "(EngineCore pid=187) DEBUG 05-01 18:55:06 "
# vLLM 0.32.0 fused_moe/oracle/nvfp4.py lines 240-243 (_make_log_backend) with its
# AVAILABLE_BACKENDS on CUDA
BACKENDS = ("['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', "
            "'FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN', 'EMULATION']")


def nvfp4_moe(value: str) -> str:
    return (f"{PREFIX}[nvfp4.py:314] Using '{value}' NvFp4 MoE backend out of potential "
            f"backends: {BACKENDS}.")


# vLLM 0.32.0 kernels/linear/__init__.py line 1240: logger.info_once("Using %s for NVFP4 GEMM")
LINEAR = f"{PREFIX}[__init__.py:1240] Using FlashInferCuteDslNvFp4LinearKernel for NVFP4 GEMM"


def write(tmp_path: Path, *lines: str) -> str:
    p = tmp_path / "engine.log"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def run(*argv: str):
    rc, out, err = run_main(["audit", *argv])
    return rc, out, err


def test_vllm_b200_agrees(tmp_path):
    """B200, vLLM 0.32.0: selector plans flashinfer_trtllm for DeepSeek-R1's NVFP4 experts and
    FlashInfer's CuTe-DSL kernel for its NVFP4 linear layers; a log naming both agrees."""
    log = write(tmp_path, LINEAR, nvfp4_moe("FLASHINFER_TRTLLM"))
    rc, out, err = run(log, "--model", MODEL, "platform=b200", "stack=vllm_0_32",
                       "--format", "json")
    assert rc == 0, (out, err)
    rep = json.loads(out)
    assert rep["engine"] == "vllm" and rep["log_engine"] == "vllm"
    assert rep["counts"] == {"agree": 5, "differ": 0, "not_in_log": 0}
    moe = [r for r in rep["kinds"] if r["op"] == "moe"]
    assert moe[0]["selector"]["engine_backend"] == "flashinfer_trtllm"
    assert moe[0]["lines"][0]["line"] == 2


def test_vllm_edited_log_differs(tmp_path):
    """The same log edited to name FlashInfer's CUTLASS MoE: that kind differs, with both
    answers and the line; the linear kinds still agree; exit 1."""
    log = write(tmp_path, LINEAR, nvfp4_moe("FLASHINFER_CUTLASS"))
    rc, out, _ = run(log, "--model", MODEL, "platform=b200", "stack=vllm_0_32")
    assert rc == 1
    assert "routed experts experts (moe nvfp4): differ: the engine ran flashinfer_cutlass, " \
        "selector plans flashinfer_trtllm" in out
    assert "4 agree, 1 differ, 0 not in the log" in out
    assert "log line 2: " in out


def test_vllm_debug_lines(tmp_path):
    """At debug level vLLM names every backend it passed over and why (nvfp4.py lines 246-256,
    317); the audit lists them beside selector's verdict on the same backend."""
    unsupported = (f"{DEBUG}[nvfp4.py:317] NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not "
                   "support the deployment configuration since kernel does not support "
                   "current device.")
    log = write(tmp_path, unsupported, nvfp4_moe("FLASHINFER_CUTEDSL"), LINEAR)
    rc, out, _ = run(log, "--model", MODEL, "platform=b200", "stack=vllm_0_32",
                     "--format", "json")
    rep = json.loads(out)
    assert rc == 1 and rep["debug"] is True
    moe = [r for r in rep["kinds"] if r["op"] == "moe"][0]
    assert moe["verdict"] == "differ" and moe["engine"] == ["flashinfer_cutedsl"]
    passed = moe["engine_passed_over"]
    assert passed == [{"backend": "flashinfer_trtllm",
                       "reason": "kernel does not support current device", "line": 1,
                       "selector_status": "selected"}]


def test_vllm_no_backend(tmp_path):
    """vLLM's NotImplementedError (nvfp4.py line 321) means no backend: it differs from a plan
    that selects one."""
    log = write(tmp_path, LINEAR, "NotImplementedError: No NvFp4 MoE backend supports the "
                "deployment configuration.")
    rc, out, _ = run(log, "--model", MODEL, "platform=b200", "stack=vllm_0_32",
                     "--format", "json")
    moe = [r for r in json.loads(out)["kinds"] if r["op"] == "moe"][0]
    assert rc == 1 and moe["engine"] == ["none (the engine found no backend)"]


def test_selector_lines_are_not_the_engine(tmp_path):
    """The plugin's own lines (a decision, an observe line) are selector's, not vLLM's: a log
    holding only those names no engine choice."""
    line = (f"{PREFIX}[vllm.py:226] selector: moe quant=nvfp4 -> flashinfer_trtllm [selected] "
            "[vLLM: --moe-backend flashinfer_trtllm]")
    log = write(tmp_path, line, "selector: observe: moe nvfp4 #1: vLLM FLASHINFER_TRTLLM")
    rc, _, err = run(log, "--model", MODEL, "platform=b200")
    assert rc == 2 and "names no backend choice of vLLM, SGLang or TensorRT-LLM" in err


# SGLang 0.5.23 srt/entrypoints/engine.py line 311: logger.info(f"server_args={...}") with the
# resolved values (server_args.py resolved_dict); the format of SGLang's log handler.
def sglang_args(moe: str, fp4: str) -> str:
    return ("[2026-12-07 03:00:00] server_args={'model_path': '/models/DeepSeek-R1-FP4', "
            f"'tp_size': 8, 'quantization': 'modelopt_fp4', 'moe_runner_backend': '{moe}', "
            f"'fp4_gemm_runner_backend': '{fp4}', 'fp8_gemm_runner_backend': 'auto'}}")


@pytest.mark.parametrize("moe,fp4,rc,counts", [
    ("flashinfer_trtllm", "flashinfer_cutedsl", 0, {"agree": 5, "differ": 0, "not_in_log": 0}),
    ("flashinfer_cutlass", "flashinfer_cutedsl", 1, {"agree": 4, "differ": 1, "not_in_log": 0}),
    ("flashinfer_trtllm", "auto", 0, {"agree": 1, "differ": 0, "not_in_log": 4}),
])
def test_sglang_server_args(tmp_path, moe, fp4, rc, counts):
    log = write(tmp_path, sglang_args(moe, fp4))
    code, out, err = run(log, "--model", MODEL, "platform=b200", "stack=sglang_0_5_23",
                         "--format", "json")
    rep = json.loads(out)
    assert (code, rep["engine"], rep["counts"]) == (rc, "sglang", counts), err


def test_sglang_model_override(tmp_path):
    """SGLang 0.5.23 srt/arg_groups/overrides.py line 830: the model override that sets the MoE
    runner for DeepSeek V3/R1 on SM 10.0."""
    line = ("[2026-12-07 03:00:00] Use flashinfer_trtllm as MoE runner backend on sm100 for "
            "DeepseekV3ForCausalLM")
    rc, out, _ = run(write(tmp_path, line), "--model", MODEL, "platform=b200",
                     "stack=sglang_0_5_23")
    assert rc == 0 and "routed experts experts (moe nvfp4): agree: flashinfer_trtllm" in out


def test_trtllm_fallback(tmp_path):
    """TensorRT-LLM's get_moe_cls (create_moe.py lines 75-78) falls back to CutlassFusedMoE for
    a quant mode TRTLLMGenFusedMoE lacks: selector's TRTLLM plan differs; its linear layers are
    not in the log (TensorRT-LLM does not name its NVFP4 GEMM)."""
    line = ("[12/07/2026-03:00:00] [TRT-LLM] [W] TRTLLMGenFusedMoE only supports "
            "fp8_block_scales, nvfp4, w4a16_mxfp4, w4a8_nvfp4_fp8, w4a8_mxfp4_fp8, and "
            "w4a8_mxfp4_mxfp8. Check out details in quant_config: QuantConfig(). Using "
            "CutlassFusedMoE instead.")
    rc, out, _ = run(write(tmp_path, line), "--model", MODEL, "platform=b200",
                     "stack=sglang_0_5_23", "engine=trtllm", "--format", "json")
    rep = json.loads(out)
    assert rc == 1 and rep["counts"] == {"agree": 0, "differ": 1, "not_in_log": 4}
    moe = [r for r in rep["kinds"] if r["op"] == "moe"][0]
    assert moe["engine"] == ["CUTLASS / CutlassFusedMoE"]
    assert moe["selector"]["engine_backend"] == "TRTLLM"


def test_engine_override_against_another_engines_log(tmp_path):
    """engine=sglang on a vLLM log: nothing of SGLang is in it; exit 1 (nothing agrees)."""
    log = write(tmp_path, nvfp4_moe("FLASHINFER_TRTLLM"))
    rc, out, _ = run(log, "--model", MODEL, "platform=b200", "engine=sglang",
                     "--format", "json")
    rep = json.loads(out)
    assert rc == 1 and rep["log_engine"] == "vllm" and rep["counts"]["not_in_log"] == 5


@pytest.mark.parametrize("argv,needle", [
    (["/nonexistent/engine.log", "--model", MODEL], "LOG: cannot read"),
    (["LOGFILE"], "--model: audit needs the checkpoint directory"),
    (["LOGFILE", "--model", MODEL, "engine=tgi"], "engine"),
    (["LOGFILE", "--model", "/nonexistent/ckpt", "engine=vllm"], "--model"),
])
def test_bad_input(tmp_path, argv, needle):
    log = write(tmp_path, nvfp4_moe("MARLIN"))
    argv = [log if a == "LOGFILE" else a for a in argv]
    rc, out, err = run(*argv)
    assert rc == 2 and needle in err and out == "" and "Traceback" not in err, err


def test_vllm_names():
    """vLLM's enum values -> its --moe-backend names (the inverse of map_nvfp4_backend and
    map_fp8_backend, vLLM 0.32.0 oracle/nvfp4.py lines 163-182, oracle/fp8.py lines 267-285)."""
    assert audit.vllm_name("VLLM_CUTLASS") == "cutlass"
    assert audit.vllm_name("FLASHINFER_CUTEDSL_BATCHED") == "flashinfer_cutedsl"
    assert audit.vllm_name("DEEPGEMM") == "deep_gemm"
    assert audit.vllm_name("FLASHINFER_TRTLLM_MXFP4_MXFP8") == "flashinfer_trtllm"
    assert audit.vllm_name("MARLIN") == "marlin"


CASES = json.loads((FIXTURES / "expected.json").read_text()) if FIXTURES.is_dir() else []


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['log']}:{' '.join(c['overrides'])}")
def test_cpu_build_logs(case):
    """The vLLM CPU build's own logs (plugin off, default and debug level; fixtures/logs/
    README.md): read as vLLM's and audited against the tiny checkpoint they ran, on the CPU
    (both say none: agree) and on an H100 with vLLM 0.32's software (selector plans a GPU
    backend: differ); the verdicts recorded when they were captured."""
    rc, out, err = run(str(FIXTURES / case["log"]), "--model", str(FIXTURES / case["model"]),
                       "--format", "json", *case["overrides"])
    rep = json.loads(out)
    assert rep["log_engine"] == "vllm", err
    assert (rc, rep["counts"], rep["debug"]) == (case["rc"], case["counts"], case["debug"]), out
    moe = [r for r in rep["kinds"] if r["op"] == "moe"][0]
    assert moe["engine"] == ["none (the engine found no backend)"]
    assert bool(moe["engine_passed_over"]) == case["debug"]


def test_edited_cpu_build_log_differs(tmp_path):
    """vLLM's own FP8 log edited to name the backend its oracle logs on a GPU (oracle/fp8.py
    lines 415-420): the kind differs from selector's CPU plan (none); exit 1."""
    text = (FIXTURES / "fp8_moe.off.log").read_text()
    assert "Unsupported FP8 MoE backend: NONE" in text
    log = write(tmp_path, text.replace("Unsupported FP8 MoE backend: NONE",
                                       "Using TRITON Fp8 MoE backend out of potential backends: "
                                       "['TRITON']."))
    rc, out, _ = run(log, "--model", str(FIXTURES / "fp8_moe"), "engine=vllm", "platform=cpu")
    assert rc == 1 and "differ: the engine ran triton, selector plans none" in out
