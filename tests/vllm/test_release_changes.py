"""The answers that changed between vLLM releases (issue 43), proven on the installed release's
own code: each scenario's vLLM answer is the one its release gives, and selector (engine=vllm,
the release's stack) agrees. Runs in any tools/vllm_env.sh environment; pytest's header names
the release."""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Optional, Tuple

import parity
import pytest
import sim
from packaging.version import Version

FI = sim.FLASHINFER
NEW = Version(sim.VLLM) >= Version("0.34.0")
S = sim.Scenario
GPT_OSS = dict(oracle="mxfp4", triton_kernels=True, deep_gemm=True)
# scenario -> (vLLM 0.32/0.33's answer, vLLM 0.34's answer); None: vLLM raises
CASES: Dict[str, Tuple[S, Optional[str], Optional[str]]] = {
    # experts/cutlass_moe.py 724-730 (0.34.0): SM 11.x out of the CUTLASS NVFP4 MoE
    "sm110-nvfp4-auto": (S("11.0", "12.8", FI, None, "moe", "nvfp4", "silu", True),
                         "cutlass", "marlin"),
    "sm110-nvfp4-cutlass": (S("11.0", "12.8", FI, None, "moe", "nvfp4", "silu", True,
                              requested="cutlass"), "cutlass", None),
    "sm100-nvfp4-cutlass": (S("10.0", "12.8", FI, None, "moe", "nvfp4", "silu", True,
                              requested="cutlass"), "cutlass", "cutlass"),
    # experts/trtllm_nvfp4_moe.py 253-265 (0.34.0): SwiGLU-step on the TRT-LLM NVFP4 MoE
    "sm100-swiglustep": (S("10.0", "12.8", FI, None, "moe", "nvfp4", "swiglustep", True),
                         "cutlass", "flashinfer_trtllm"),
    # oracle/mxfp4.py 445-457 (0.34.0): gpt-oss MXFP4 on SM 11.x runs Marlin before Triton
    "sm110-gpt-oss": (S("11.0", "12.9", FI, None, "moe", "mxfp4", "swigluoai", True,
                        **GPT_OSS), "triton_kernels", "marlin"),
    "sm120-gpt-oss": (S("12.0", "12.9", FI, None, "moe", "mxfp4", "swigluoai", True,
                        **GPT_OSS), "marlin", "marlin"),
    # utils/deep_gemm.py 118-177 (0.34.0): DeepGEMM needs nvcc >= 12.9 (the scenario's toolkit)
    "sm90-deepgemm-cuda12.8": (S("9.0", "12.8", FI, None, "moe", "fp8_block", "silu", True,
                                 requested="deep_gemm"), "deep_gemm", None),
    "sm90-deepgemm-cuda13.0": (S("9.0", "13.0", FI, None, "moe", "fp8_block", "silu", True,
                                 requested="deep_gemm"), "deep_gemm", "deep_gemm"),
}


@pytest.fixture(scope="module")
def rows():
    scenarios = [s for s, _, _ in CASES.values()]
    return {r.scenario: r for r in parity.run(scenarios).rows}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_release_answers_and_selector_agrees(rows, name):
    s, old, new = CASES[name]
    r = rows[s]
    want = new if NEW else old
    assert (r.vllm or None) == want, (sim.VLLM, name, r.vllm, r.vllm_error[:200])
    assert r.agrees, (sim.VLLM, name, r.vllm, r.selected, r.why)


def test_the_stack_is_the_releases():
    assert parity.STACK == f"stack={sim.STACK_PRESET}"
    assert sim.STACK_PRESET == "vllm_" + sim.RELEASE.replace(".", "_")
    d = parity.selector_decision(replace(CASES["sm110-nvfp4-auto"][0]))
    assert d.platform["packages"]["vllm"] == sim.VLLM
