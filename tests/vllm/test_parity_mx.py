"""vLLM's own MXFP4 and MXFP8 MoE choice against selector's (tests/vllm/sim.py sweep_mx):
select_mxfp4_moe_backend (gpt-oss, compressed-tensors, Quark, INC: the layer's activation key),
select_deepseek_v4_mxfp4_moe_backend (quant_method mxfp4 outside gpt-oss) and
select_mxfp8_moe_backend, run untouched on the simulated GPU. vLLM's backend enum names the
activation precision (..._MXFP4_BF16 / _MXFP4_MXFP8 / _MXFP4_MXFP4); in selector that is the
layer's quant (mxfp4 / mxfp4_w4a8 / mxfp4_w4a4), so a scenario agrees when both name the same
backend, the same kernel class and the same scheme, or both refuse. docs/vllm-parity.md's MXFP4
section is this report (tools/vllm_parity.py)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import parity
import pytest
import sim

DOC = Path(__file__).resolve().parents[2] / "docs" / sim.DOC_NAME  # the installed release's
FI = sim.FLASHINFER


@pytest.fixture(scope="module")
def mx_report():
    return parity.run(sim.sweep_mx())


def test_every_mx_difference_is_explained(mx_report):
    assert len(mx_report.rows) == len(sim.sweep_mx())
    lines = [f"{r.scenario.label()}: vLLM {r.vllm or 'error'} {r.vllm_kernel} {r.vllm_quant} "
             f"({r.vllm_error[:160]}), selector {r.selected or 'refusal'} {r.kernel} {r.scheme}"
             for r in mx_report.unexplained]
    assert not lines, "differences no rule or vLLM source explains:\n" + "\n".join(lines[:20])
    assert len(mx_report.rows) - len(mx_report.differ) > len(mx_report.differ)
    auto = [r for r in mx_report.rows if r.scenario.requested == "auto"]
    assert sum(r.agrees for r in auto) > 0.8 * len(auto)  # vLLM's automatic choice, mostly agreed


def test_the_mx_sweep_covers_the_whole_space():
    space = sim.sweep_mx()
    assert {s.capability for s in space} >= {None, "8.9", "9.0", "10.0", "10.3", "11.0",
                                              "12.0", "12.1"}
    assert {s.oracle for s in space} == {"mxfp4", "dsv4", "mxfp8"}
    assert {s.quant for s in space if s.oracle == "mxfp4"} == set(sim.MXFP4_QUANTS)
    assert {s.requested for s in space if s.oracle != "mxfp8"} == set(sim.MXFP4_NAMES)
    assert {s.requested for s in space if s.oracle == "mxfp8"} == set(sim.MXFP8_NAMES)
    assert {(s.triton_kernels, s.deep_gemm) for s in space} == {(True, True), (False, False)}
    assert {s.flashinfer for s in space} == {FI, None} and {s.b12x for s in space} == {sim.B12X,
                                                                                        None}
    assert {s.force_a16 for s in space} == {True, False} and {s.ep_size for s in space} == {1, 2}
    assert {s.cuda for s in space if s.capability == "10.0"} == {"12.8", "13.0"}
    assert {(s.activation, s.act_and_mul) for s in space} == {(a, g) for a, g, _ in
                                                              sim.MX_LAYERS}


def test_the_doc_has_the_mx_report(mx_report):
    """docs/vllm-parity.md's MXFP4/MXFP8 section is regenerated (tools/vllm_parity.py)."""
    text = DOC.read_text()
    got = {k: int(v) for k, v in re.findall(r"^\| MXFP4/MXFP8 (total|differ|agree[^|]*|differ "
                                            r"without an explanation) \| (\d+) \|$", text, re.M)}
    assert got == {"total": len(mx_report.rows),
                   "agree (same backend, kernel and scheme, or both refuse)":
                       len(mx_report.rows) - len(mx_report.differ),
                   "differ": len(mx_report.differ), "differ without an explanation": 0}, got
    assert len(re.findall(r"^### MX-\d+\. ", text, re.M)) == len(mx_report.clusters())


def _row(s):
    return parity.run([s]).rows[0]


def _mx(cap, quant="mxfp4", act="swigluoai", requested="auto", oracle="mxfp4", cuda="13.0",
        fi=FI, b12x=None, **kw):
    return sim.Scenario(cap, cuda, fi, b12x, "moe", quant, act, True, requested=requested,
                        oracle=oracle, **kw)


@pytest.mark.parametrize("cap, quant, backend, kernel, scheme", [
    ("9.0", "mxfp4", "triton_kernels", "OAITritonMxfp4ExpertsMonolithic", "mxfp4"),  # H100
    ("10.0", "mxfp4", "flashinfer_trtllm", "TrtLlmMxfp4ExpertsMonolithic", "mxfp4"),  # B200
    ("10.0", "mxfp4_w4a8", "flashinfer_trtllm", "TrtLlmMxfp4ExpertsMonolithic", "mxfp4_w4a8"),
    ("12.0", "mxfp4", "marlin", "MarlinExperts", "mxfp4"),  # RTX 5090 / Pro 6000: Triton after it
    ("12.0", "mxfp4_w4a8", "flashinfer_cutlass", "FlashInferExperts", "mxfp4_w4a8"),
    ("12.1", "mxfp4", "marlin", "MarlinExperts", "mxfp4"),  # DGX Spark
])
def test_gpt_oss_on_each_gpu_agrees(cap, quant, backend, kernel, scheme):
    r = _row(_mx(cap, quant))
    assert (r.vllm, r.vllm_kernel, r.vllm_quant) == (backend, kernel, scheme), r.vllm_error
    assert r.agrees and (r.selected, r.kernel, r.scheme) == (backend, kernel, scheme)


def test_a_gpt_oss_user_asks_for_mxfp8_activations_as_the_key_does():
    """vLLM 0.32.0 GptOssMxfp4MoEMethod passes no activation key; `--quantization-config
    '{"moe": {"activation": "mxfp8"}}'` is how a gpt-oss user asks for W4A8: it decides as the
    key kMxfp8Dynamic does (oracle/mxfp4.py _resolve_activation_key), i.e. layer.quant=mxfp4_w4a8."""
    import types

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.config.quantization import QuantizationConfigArgs
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4
    simulation = sim.Simulation()
    seen = set()
    try:
        for cap in ("9.0", "10.0", "12.0"):
            s = _mx(cap, "mxfp4_w4a8")
            with simulation.scenario(s):
                by_key = parity.vllm_mx(s)
                vc = VllmConfig()
                object.__setattr__(vc, "model_config", types.SimpleNamespace(
                    quantization_config=QuantizationConfigArgs(moe={"activation": "mxfp8"})))
                with set_current_vllm_config(vc):
                    backend, experts = mxfp4.select_mxfp4_moe_backend(sim.moe_config(s))
            assert (parity.mx_pick(backend)[0], experts.__name__, parity.mx_pick(backend)[1]) \
                == (by_key[0], by_key[2], by_key[3]), cap
            seen.add(by_key[3])
    finally:
        simulation.close()
    assert seen == {"mxfp4", "mxfp4_w4a8"}  # SM 9.0 falls back to bf16 activations


def test_an_afp8_alias_is_the_w4a8_layer():
    r = _row(_mx("10.0", "mxfp4", "silu", requested="flashinfer_cutlass_afp8"))
    assert (r.vllm, r.vllm_quant) == ("flashinfer_cutlass", "mxfp4_w4a8") and r.agrees


def test_the_bf16_fallback_is_explained_only_by_selectors_own_mxfp4_answer():
    s = _mx("9.0", "mxfp4_w4a8")  # no MXFP8-activation kernel on SM 9.0
    r = _row(s)
    assert (r.vllm, r.vllm_quant, r.selected) == ("triton_kernels", "mxfp4", "marlin")
    assert r.selector_mxfp4 == ("triton_kernels", "OAITritonMxfp4ExpertsMonolithic")
    text, reasons = r.why
    assert "bf16" in text and "_filter_by_activation" in reasons[0][1]
    r.selector_mxfp4 = ("marlin", "MarlinExperts")  # had selector answered otherwise
    assert parity.explain_mx(r, parity.outside()) is None


def test_the_deepseek_v4_path_picks_the_activation_precision():
    r = _row(_mx("10.0", act="silu", oracle="dsv4"))
    assert (r.vllm, r.vllm_quant) == ("flashinfer_trtllm", "mxfp4_w4a8") and r.agrees
    r = _row(_mx("10.0", act="silu", oracle="dsv4", fi=None))  # DeepGEMM: FP8 activations
    assert (r.vllm, r.vllm_kernel, r.vllm_quant) == ("deep_gemm", "DeepGemmFP4Experts",
                                                      parity.FP8_ACT)
    assert r.why and "vocabulary" in r.why[0]
    r = _row(_mx("9.0", act="silu", oracle="dsv4"))  # no FlashInfer CUTLASS on this path
    assert (r.vllm, r.selected) == ("marlin", "flashinfer_cutlass")
    assert r.why and "_get_priority_backends" in r.why[1][0][1]


def test_explicit_b12x_runs_w4a8_for_a_w4a16_layer_unless_forced():
    base = _mx("12.0", "mxfp4", "silu", requested="b12x", b12x=sim.B12X)
    r = _row(base)
    assert (r.vllm, r.vllm_quant, r.scheme) == ("b12x", "mxfp4_w4a8", "mxfp4_w4a8") and r.agrees
    r = _row(replace(base, force_a16=True))
    assert (r.vllm, r.vllm_quant, r.scheme) == ("b12x", "mxfp4", "mxfp4_w4a8")
    assert r.why and "FORCE_A16" in r.why[0]


def test_cutlass_w4a4_needs_cuda_12_9_and_sm_10_or_11():
    for cap, cuda, want in (("10.0", "13.0", "cutlass"), ("11.0", "13.0", "cutlass"),
                            ("10.0", "12.8", "flashinfer_trtllm"), ("12.0", "13.0", "marlin")):
        r = _row(_mx(cap, "mxfp4_w4a4", "silu", cuda=cuda))
        assert r.vllm == want, (cap, cuda, r.vllm)
        assert r.agrees or r.why, (cap, cuda)
    r = _row(_mx("10.0", "mxfp4_w4a4", "silu", requested="cutlass"))
    assert r.vllm is None and "not supported for MXFP4" in r.vllm_error and r.why


def test_mxfp8_order_is_trtllm_deep_gemm_marlin():
    for cap, fi, want in (("10.0", FI, "flashinfer_trtllm"), ("10.0", None, "deep_gemm"),
                          ("9.0", FI, "marlin")):
        r = _row(_mx(cap, "mxfp8", "silu", oracle="mxfp8", fi=fi))
        assert r.vllm == want and r.agrees, (cap, fi, r.vllm, r.selected)


def test_an_unexplained_mx_difference_fails():
    r = _row(_mx("10.0"))
    assert r.agrees
    r.vllm_quant = "mxfp4_w4a8"  # same backend and kernel, another activation precision
    assert not r.agrees and parity.explain_mx(r, parity.outside()) is None
    r = _row(_mx("10.0"))
    r.vllm = "some_new_backend"
    assert parity.explain_mx(r, parity.outside()) is None
