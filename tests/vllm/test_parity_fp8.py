"""vLLM's own FP8 MoE choice (fused_moe/oracle/fp8.py select_fp8_moe_backend) against selector's
(engine=vllm) over the simulated sweep of tests/vllm/sim.py fp8_sweep: the same backend and the
same kernel class, or both refuse, or a catalogue rule (with its source) explains the difference.
The FP8 section of docs/vllm-parity.md is this report (tools/vllm_parity.py --fp8)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import parity
import pytest
import sim

from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS

DOC = Path(__file__).resolve().parents[2] / "docs" / sim.DOC_NAME  # the installed release's
FI = sim.FLASHINFER


@pytest.fixture(scope="module")
def report():
    return parity.run(sim.fp8_sweep())


def _row(s):
    return parity.run([s]).rows[0]


def _fp8(cap, quant, act="silu", gated=True, ep=1, requested="auto", cuda="12.8", fi=FI,
         **kw):
    return sim.Scenario(cap, cuda, fi, None, "moe", quant, act, gated, ep, requested=requested,
                        **kw)


def test_every_fp8_difference_is_explained(report):
    assert len(report.rows) == len(sim.fp8_sweep())
    lines = [f"{r.scenario.label()}: vLLM {r.vllm or 'error'} {r.vllm_kernel} "
             f"({r.vllm_error[:160]}), selector {r.selected or 'refusal'} {r.kernel}"
             for r in report.unexplained]
    assert not lines, "differences no catalogue rule explains:\n" + "\n".join(lines[:20])
    assert len(report.rows) - len(report.differ) > len(report.differ)  # parity is the rule
    # automatic selection agrees wherever vLLM may run its CUTLASS MoE and no env var is set
    auto = [r for r in report.rows if r.scenario.requested == "auto" and
            r.scenario.allow_cutlass and r.scenario.deep_gemm_env is None]
    assert auto and all(r.agrees for r in auto if r.scenario.capability), \
        [r.scenario.label() for r in auto if not r.agrees and r.scenario.capability][:5]


def test_the_fp8_sweep_covers_the_space():
    space = sim.fp8_sweep()
    assert {s.capability for s in space} >= {None, "8.9", "9.0", "10.0", "10.3", "11.0", "12.0",
                                              "12.1"}
    assert {s.quant for s in space} == {"fp8_tensor", "fp8_tensor_dynamic", "fp8_channel",
                                        "fp8_block"}
    from selector.core.schema import ACTIVATIONS
    assert {s.activation for s in space} == set(ACTIVATIONS)
    assert {s.act_and_mul for s in space} == {True, False}
    assert {s.ep_size for s in space} == {1, 2}
    assert {s.all2all for s in space} >= {None, "deepep_low_latency", "deepep_high_throughput",
                                          "allgather_reducescatter"}
    assert {s.allow_cutlass for s in space} == {True, False}
    assert {s.deep_gemm_env for s in space} == {None, "0", "1"}
    assert {s.flashinfer for s in space} == {FI, None}
    # every --moe-backend value vLLM's FP8 oracle maps to a CUDA backend of the catalogue
    outside = set(parity.outside()) | {"humming"}
    assert set(VLLM_MOE_ACCEPTS["fp8"]) - outside <= {s.requested for s in space}


def test_the_doc_fp8_section_is_this_report(report):
    text = DOC.read_text()
    got = {k: int(v) for k, v in re.findall(r"^\| FP8 (total|differ|agree[^|]*|differ without "
                                            r"an explanation) \| (\d+) \|$", text, re.M)}
    assert got == {"total": len(report.rows),
                   "agree (same backend and kernel, or both refuse)":
                       len(report.rows) - len(report.differ),
                   "differ": len(report.differ), "differ without an explanation": 0}, got
    assert len(re.findall(r"^### FP8-\d+\. ", text, re.M)) == len(report.clusters())


@pytest.mark.parametrize("ep, backend, kernel", [
    (1, "triton", "TritonExperts"), (2, "flashinfer_cutlass", "FlashInferExperts")])
def test_hopper_block_fp8_prefers_triton_for_tp_and_flashinfer_cutlass_for_ep(ep, backend,
                                                                               kernel):
    """vLLM 0.32.0 _get_priority_backends: the SM 9.0 block-FP8 swap, as selector preferences."""
    r = _row(_fp8("9.0", "fp8_block", ep=ep))
    assert r.agrees and (r.vllm, r.vllm_kernel) == (backend, kernel), (r.vllm, r.selected)
    # elsewhere the order is vLLM's list: FlashInfer TRT-LLM first on SM 10.x
    r = _row(_fp8("10.0", "fp8_block", ep=ep))
    assert r.agrees and r.vllm == "flashinfer_trtllm"


def test_batched_format_runs_the_batched_kernels():
    """DeepEP low-latency: vLLM's batched activation format and its BATCHED_* backends."""
    # CUDA 12.9: from vLLM 0.34.0 DeepGEMM needs nvcc >= 12.9 (utils/deep_gemm.py 118-177)
    r = _row(_fp8("9.0", "fp8_block", ep=2, all2all="deepep_low_latency", cuda="12.9"))
    assert r.agrees and r.kernel == "BatchedDeepGemmExperts"
    r = _row(_fp8("9.0", "fp8_block", act="swiglustep", ep=2, all2all="deepep_low_latency"))
    assert r.agrees and r.kernel == "BatchedTritonExperts"
    r = _row(_fp8("10.0", "fp8_channel", ep=2, all2all="deepep_low_latency",
                  requested="cutlass"))
    assert r.agrees and r.kernel == "CutlassBatchedExpertsFp8"


def test_allow_vllm_cutlass_is_policy_exclude():
    """The quant method's allow_vllm_cutlass=False (fp8, modelopt) reaches selector through
    the plugin's fp8_moe_switches as policy.exclude=[cutlass]: automatic selection agrees, an
    explicit cutlass is refused by both."""
    s = _fp8("10.0", "fp8_channel")
    assert _row(s).agrees and _row(s).vllm == "cutlass"
    r = _row(replace(s, allow_cutlass=False))
    assert r.agrees and (r.vllm, r.selected) == ("triton", "triton")
    assert r.decision.candidate("cutlass").reasons[0].rule == "exclude"
    r = _row(replace(s, allow_cutlass=False, requested="cutlass"))
    assert r.agrees and r.vllm is None and r.selected is None
    assert "disabled for this configuration" in r.vllm_error


def test_deep_gemm_env_var_is_policy():
    r = _row(_fp8("9.0", "fp8_block", ep=2, deep_gemm_env="1", cuda="12.9"))  # nvcc 12.9
    assert r.agrees and r.vllm == "deep_gemm"
    if sim.RELEASE not in ("0.32", "0.33"):  # vLLM 0.34.0 utils/deep_gemm.py 151-177: no nvcc
        r = _row(_fp8("9.0", "fp8_block", ep=2, deep_gemm_env="1"))  # >= 12.9, no DeepGEMM
        assert "deep_gemm" not in (r.vllm, r.selected) and (r.agrees or r.why), \
            (r.vllm, r.selected)
    r = _row(_fp8("12.0", "fp8_block", deep_gemm_env="0"))
    assert r.agrees and r.vllm == "triton" and r.decision.candidate("deep_gemm").status == \
        "rejected"


def test_an_unexplained_fp8_difference_fails():
    row = _row(_fp8("10.0", "fp8_block"))
    assert row.agrees
    row.vllm, row.vllm_error = None, "simulated refusal"
    assert parity.explain(row, parity.outside()) is None
    row = _row(_fp8("10.0", "fp8_tensor"))
    row.vllm_kernel = "TrtLlmFp8ExpertsModular"  # same backend name, another kernel
    assert not row.agrees and parity.explain(row, parity.outside()) is None


@pytest.mark.parametrize("cap, cuda, expect", [
    ("9.0", "12.3", True), ("9.0", "12.2", False), ("10.0", "12.8", True), ("10.0", "12.6", False),
    ("11.0", "13.0", False), ("12.0", "13.0", False), ("12.1", "13.0", False)])
def test_the_simulation_answers_the_cuda_build_not_vllms_guards(cap, cuda, expect):
    """The simulation replaces the CUDA build's C++ op (`torch.ops._C`), never vLLM's Python
    support function: `_custom_ops.cutlass_group_gemm_supported` stays vLLM's own object and its
    guard (capability >= 110 refused before the op is asked) decides SM 11.0 and 12.x."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.quantization.utils import w8a8_utils
    shipped = (ops.cutlass_group_gemm_supported, w8a8_utils.cutlass_group_gemm_supported)
    simulation = sim.Simulation()
    try:
        with simulation.scenario(_fp8(cap, "fp8_channel", cuda=cuda)):
            assert (ops.cutlass_group_gemm_supported, w8a8_utils.cutlass_group_gemm_supported) \
                == shipped
            assert w8a8_utils.cutlass_group_gemm_supported() is expect
    finally:
        simulation.close()
    import torch
    assert not hasattr(torch.ops._C, "cutlass_group_gemm_supported")  # removed again


def test_fp8_cutlass_moe_on_sm12x_is_refused_by_both():
    """vLLM 0.32.0 _custom_ops.py cutlass_group_gemm_supported: False for capability >= 110, so
    CutlassExpertsFp8 refuses SM 12.x; selector's device rule says the same with its source."""
    r = _row(_fp8("12.0", "fp8_channel", requested="cutlass"))
    assert r.agrees and r.vllm is None and r.selected is None
    reasons = r.decision.candidate("cutlass").reasons
    assert any(x.rule == "device" and "cutlass_group_gemm_supported" in x.source for x in reasons)
    r = _row(_fp8("12.0", "fp8_channel"))
    assert r.agrees and r.vllm != "cutlass"
