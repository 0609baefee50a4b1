"""vLLM's own choice against selector's over the whole space (tests/vllm/sim.py: no GPU and
SM 8.0 to 12.1, CUDA 12.6 to 13.0, EP 1 to 8, every activation and requested backend): the same
backend and the same kernel, or both refuse, or a catalogue rule (with its source) explains the
difference. docs/vllm-parity.md is this report (tools/vllm_parity.py)."""
from __future__ import annotations

import re
from pathlib import Path

import parity
import pytest
import sim

DOC = Path(__file__).resolve().parents[2] / "docs" / sim.DOC_NAME  # the installed release's
FI = sim.FLASHINFER


@pytest.fixture(scope="module")
def report():
    return parity.run()


def test_every_difference_is_explained(report):
    assert len(report.rows) == len(sim.sweep())
    lines = [f"{r.scenario.label()}: vLLM {r.vllm or 'error'} {r.vllm_kernel} "
             f"({r.vllm_error[:160]}), selector {r.selected or 'refusal'} {r.kernel}"
             for r in report.unexplained]
    assert not lines, "differences no catalogue rule explains:\n" + "\n".join(lines[:20])
    assert len(report.rows) - len(report.differ) > len(report.differ)  # parity is the rule


def test_the_sweep_covers_the_whole_space():
    space = sim.sweep()
    assert {s.capability for s in space} >= {None, "8.0", "8.6", "8.9", "9.0", "10.0", "10.3",
                                              "11.0", "12.0", "12.1"}
    assert {s.cuda for s in space} >= {None, "12.6", "12.8", "12.9", "13.0"}
    assert {s.ep_size for s in space} == {1, 2, 4, 8}
    assert {s.requested for s in space if s.op == "moe"} == set(sim.MOE_NAMES)
    assert {s.requested for s in space if s.op == "linear"} == set(sim.LINEAR_NAMES)
    from selector.core.schema import ACTIVATIONS
    assert {s.activation for s in space} == set(ACTIVATIONS)


def test_the_doc_is_this_report(report):
    """docs/vllm-parity.md is regenerated (tools/vllm_parity.py) whenever the numbers move."""
    text = DOC.read_text()
    got = {k: int(v) for k, v in re.findall(r"^\| (total|differ|agree[^|]*|differ without an "
                                            r"explanation) \| (\d+) \|$", text, re.M)}
    assert got == {"total": len(report.rows),
                   "agree (same backend and kernel, or both refuse)":
                       len(report.rows) - len(report.differ),
                   "differ": len(report.differ), "differ without an explanation": 0}, got
    assert len(re.findall(r"^### \d+\. ", text, re.M)) == len(report.clusters())


def test_machine_chooser_decides_as_the_composed_plugin_chooser():
    """The sweep's one-composition Chooser against the plugin's own (Hydra overrides)."""
    picks = [sim.Scenario(None, None, FI, None, "moe", "nvfp4", "silu", True),
             sim.Scenario("8.9", "12.6", None, None, "linear", "nvfp4", "silu", True),
             sim.Scenario("10.0", "12.8", FI, None, "moe", "nvfp4", "relu2", False, 4),
             sim.Scenario("12.0", "13.0", FI, sim.B12X, "moe", "nvfp4_w4a16", "silu", True, 2,
                          requested="flashinfer_b12x"),
             sim.Scenario("12.1", "12.9", FI, None, "linear", "nvfp4_w4a16", "silu", True,
                          requested="flashinfer_cutedsl")]
    simulation = sim.Simulation()
    try:
        for s in picks:
            with simulation.scenario(s):
                fast, composed = (parity.selector_decision(s, composed=c) for c in (False, True))
            assert (fast.selected, fast.engine, [(c.backend, c.status) for c in fast.candidates]) \
                == (composed.selected, composed.engine,
                    [(c.backend, c.status) for c in composed.candidates]), s.label()
    finally:
        simulation.close()


def _row(s):
    return parity.run([s]).rows[0]


def test_no_gpu_nothing_fits_in_vllm_with_its_reason():
    """Issue 22 item 1: vLLM has no NVFP4 path on its CPU platform; selector under engine=vllm
    answers nothing, with vLLM's reason on emulation, not emulation."""
    for s in (sim.Scenario(None, None, FI, None, "moe", "nvfp4", "silu", True),
              sim.Scenario(None, None, None, None, "linear", "nvfp4", "silu", True),
              sim.Scenario(None, None, FI, None, "linear", "nvfp4", "silu", True,
                           requested="emulation")):
        r = _row(s)
        assert r.vllm is None and r.selected is None, (s.label(), r.vllm, r.selected)
        emu = r.decision.candidate("emulation")
        assert emu.status == "rejected" and any(
            x.rule == "device" and "no GPU" in x.message and "vLLM" in x.message
            for x in emu.reasons), emu.reasons


def test_vllm_refuses_ep_for_flashinfer_b12x_and_so_does_selector():
    """Issue 22 item 2: W4A16 with EP 2 on flashinfer 0.7.4 (which has W4A16 EP)."""
    s = sim.Scenario("12.0", "13.0", "0.7.4", None, "moe", "nvfp4_w4a16", "silu", True, 2,
                     requested="flashinfer_b12x")
    r = _row(s)
    assert r.vllm is None and "does not support" in r.vllm_error
    assert r.selected is None
    assert "parallel" in {x.rule for x in r.decision.candidate("flashinfer_b12x").reasons}


def test_a_decision_names_the_kernel_vllm_runs():
    """Issue 22 item 3: an explicit flashinfer_cutedsl on a W4A4 linear layer on SM 12.x: vLLM
    runs its W4A16 CuTe-DSL kernel, and selector says so (kernel and scheme)."""
    for cuda in ("13.0", "12.8"):
        r = _row(sim.Scenario("12.0", cuda, FI, None, "linear", "nvfp4", "silu", True,
                              requested="flashinfer_cutedsl"))
        assert r.vllm_kernel == "FlashInferCuteDslNvFp4W4A16LinearKernel"
        assert r.agrees and r.decision.engine.scheme == "nvfp4_w4a16"
        assert any("W4A16" in n or "nvfp4_w4a16" in n for n in r.decision.notes)
    r = _row(sim.Scenario("10.0", "13.0", FI, None, "linear", "nvfp4", "silu", True,
                          requested="flashinfer_cutedsl"))
    assert r.agrees and r.kernel == "FlashInferCuteDslNvFp4LinearKernel"


def test_explicit_linear_backend_without_a_w4a16_kernel_is_explained_by_vllms_fallback():
    """Issue 22 item 4a: vLLM's _resolve_backend_kernels walks the unfiltered list."""
    r = _row(sim.Scenario("12.0", "13.0", FI, None, "linear", "nvfp4_w4a16", "silu", True,
                          requested="flashinfer_cutlass"))
    assert r.vllm == "flashinfer_cutedsl" and r.selected == "marlin"
    assert r.vllm_auto == ("marlin", "MarlinNvFp4LinearKernel")
    text, reasons = r.why
    assert "fallback" in text and any("_resolve_backend_kernels" in src for _, src in reasons)
    assert not any(rule in ("opt_in", "cuda") for rule, _ in reasons)


def test_w4a16_cutedsl_has_no_cuda_13_rule_and_cudnn_comes_with_vllm():
    """Issue 22 items 4b and 4c: mm_bf16_fp4 has no CUDA-13 check; vLLM 0.32.0's torch brings
    nvidia-cudnn-cu13, so its cuDNN GEMM is installed under stack=vllm_0_32."""
    r = _row(sim.Scenario("12.0", "12.8", FI, None, "linear", "nvfp4_w4a16", "silu", True,
                          requested="flashinfer_cutedsl"))
    assert r.agrees and r.selected == "flashinfer_cutedsl", r.why
    r = _row(sim.Scenario("10.0", "13.0", FI, None, "linear", "nvfp4", "silu", True,
                          requested="flashinfer_cudnn"))
    assert r.agrees and r.kernel == "FlashInferCudnnNvFp4LinearKernel"


def test_an_unexplained_difference_fails():
    """A selector choice vLLM refuses, with no rule behind it, is reported as unexplained."""
    s = sim.Scenario("10.0", "13.0", FI, None, "moe", "nvfp4", "silu", True)
    row = _row(s)
    row.vllm, row.vllm_error = None, "simulated refusal"
    assert parity.explain(row, parity.outside()) is None
    row = _row(s)
    row.vllm_kernel = "SomeOtherExperts"  # same backend name, another kernel
    assert not row.agrees and parity.explain(row, parity.outside()) is None


def test_a_backend_selector_rejects_is_explained_by_its_rules():
    s = sim.Scenario("12.0", "12.8", FI, None, "moe", "nvfp4", "relu2", False,
                     requested="flashinfer_b12x")
    row = _row(s)
    assert row.vllm == "flashinfer_b12x" and row.selected is None
    assert row.why is not None and any(rule == "cuda" and source for rule, source in row.why[1])


def test_a_vllm_backend_outside_the_catalogue_is_explained_by_the_engine_config():
    s = sim.Scenario("9.0", "13.0", FI, None, "moe", "nvfp4", "silu", True)
    row = _row(s)
    row.vllm = "humming"
    text, reasons = parity.explain(row, parity.outside())
    assert "outside selector's catalogue" in text and "humming" in reasons[0][1]
    row.vllm = "some_new_backend"
    assert parity.explain(row, parity.outside()) is None
