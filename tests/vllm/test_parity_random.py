"""Seeded random scenarios from the whole space (tests/vllm/random_sweep.py) against vLLM's
untouched FP8, MXFP4/MXFP8 and NVFP4 MoE oracles and its FP8/MX linear kernel choice: every
difference is explained or the test fails, naming the seed and the scenarios. The seed is in
pytest's header (conftest.py); SELECTOR_PARITY_SEED=<seed> replays a run."""
from __future__ import annotations

import linear_parity as lp
import parity
import pytest
import random_sweep as rs
import sim

FAMILIES = ("fp8", "mx", "linear", "nvfp4")


def _run(family, scenarios):
    return (lp.run if family == "linear" else parity.run)(scenarios)


def _failure(family, report) -> str:
    lines = [f"{r.scenario.label()}: vLLM {r.vllm or 'error'} {r.vllm_kernel} "
             f"{getattr(r, 'vllm_quant', None) or ''} ({r.vllm_error[:140]}), selector "
             f"{r.selected or 'refusal'} {r.kernel}" for r in report.unexplained]
    return (f"{len(lines)} unexplained differences in the {family} random sweep, seed "
            f"{rs.seed()} (replay: {rs.ENV_SEED}={rs.seed()}):\n" + "\n".join(lines[:30]))


@pytest.mark.parametrize("family", FAMILIES)
def test_random_scenarios_agree_or_are_explained(family):
    scenarios = rs.draw(family)
    print(f"\n{family}: {len(scenarios)} random scenarios, seed {rs.seed()}")
    report = _run(family, scenarios)
    assert len(report.rows) == len(scenarios)
    assert not report.unexplained, _failure(family, report)
    assert len(report.rows) - len(report.differ) > len(report.differ)  # parity is the rule


def test_ci_runs_at_least_20000_fp8_and_mx_scenarios(monkeypatch):
    monkeypatch.delenv(rs.ENV_SCALE, raising=False)
    assert sum(rs.count(f) for f in ("fp8", "mx", "linear")) >= 20000


def test_the_draws_follow_the_seed_and_reach_the_whole_space():
    a, b = rs.draw("fp8", 7, 400), rs.draw("fp8", 7, 400)
    assert a == b and a != rs.draw("fp8", 8, 400)
    fp8 = rs.draw("fp8", 7, 3000)
    assert {s.capability for s in fp8} == set(rs.CAPABILITIES)
    assert {s.method for s in fp8} == {"fp8", "modelopt", "compressed-tensors"}
    assert {s.dtype for s in fp8} == {"bfloat16", "float16"}
    assert {s.all2all for s in fp8} == {None, *rs.ALL2ALL}
    assert {(s.triton_kernels, s.deep_gemm) for s in fp8} == {(True, True), (True, False),
                                                               (False, True), (False, False)}
    mx = rs.draw("mx", 7, 3000)
    assert {s.oracle for s in mx} == {"mxfp4", "dsv4", "mxfp8"}
    assert {s.requested for s in mx if s.oracle == "mxfp8"} == set(sim.MXFP8_NAMES)
    assert {s.force_a16 for s in mx} == {True, False} and {s.all2all for s in mx} > {None}
    linear = rs.draw("linear", 7, 3000)
    assert {s.quant for s in linear} == set(lp.SCHEMES)
    assert {s.model_type for s in linear} == set(rs.MODEL_TYPES)
    assert {s.method for s in linear if s.quant == "fp8_channel"} == {"modelopt",
                                                                      "compressed-tensors"}


def test_a_quant_methods_keys_are_its_own():
    """compressed-tensors FP8 MoE with per-tensor weights and dynamic activations passes vLLM's
    oracle a 1x128 activation key (ct2vllm_act); the `fp8` method passes per-tensor dynamic.
    selector describes the first as fp8_tensor_dynamic with act_scale group_128, which only
    Marlin runs (compressed_tensors_moe_w8a8_fp8.py 94-105), and agrees with vLLM on both."""
    base = sim.Scenario("9.0", "12.8", sim.FLASHINFER, None, "moe", "fp8_tensor_dynamic",
                        "silu", True)
    ct = parity.run([sim.Scenario(**{**base.__dict__, "method": "compressed-tensors"})]).rows[0]
    assert ct.agrees and ct.vllm == "marlin", (ct.vllm, ct.selected)
    assert ct.decision.layer.act_scale == "group_128"
    fp8 = parity.run([sim.Scenario(**{**base.__dict__, "method": "fp8",
                                      "allow_cutlass": False})]).rows[0]
    assert fp8.agrees and fp8.scheme == "fp8_tensor_dynamic", (fp8.vllm, fp8.selected)


def test_fp8_linear_dynamic_activations_are_per_token_where_cutlass_runs():
    """`quant_method: fp8` with dynamic activations: vLLM quantizes per token when
    cutlass_fp8_supported() (its own function, on the simulated CUDA build), so the layer is
    selector's fp8_tensor_dynamic with act_scale token there (quantization/fp8.py 274-280), and
    the choice agrees; on SM 8.0 it stays per-tensor."""
    import methods
    s = sim.Scenario("9.0", "12.8", sim.FLASHINFER, None, "linear", "fp8_tensor_dynamic",
                     "silu", True, method="fp8", shape=lp.SHAPES[0])
    r = lp.run([s]).rows[0]
    assert r.agrees and r.vllm == "cutlass", (r.vllm, r.selected)
    assert r.decision.layer.act_scale == "token"
    simulation = sim.Simulation()
    try:
        with simulation.scenario(s):
            assert str(methods.vllm_keys(s)[1]).endswith(str(sim.quant_keys(
                sim.Scenario(**{**s.__dict__, "method": None, "quant": "fp8_channel"}))[1]))
    finally:
        simulation.close()


@pytest.mark.parametrize("quant, kernel", [("fp8_block", "TrtLlmFp8ExpertsModular"),
                                           ("mxfp8", "TrtLlmFp8ExpertsModular"),
                                           ("nvfp4", "TrtLlmNvFp4ExpertsModular")])
def test_fp16_trtllm_moe_is_the_modular_kernel(quant, kernel):
    """vLLM's monolithic TRT-LLM FP8/NVFP4 experts refuse fp16 router logits: an fp16 layer on
    SM 10.0 runs the modular class, and selector names it."""
    oracle = "mxfp8" if quant == "mxfp8" else "nvfp4"
    s = sim.Scenario("10.0", "12.8", sim.FLASHINFER, None, "moe", quant, "silu", True,
                     requested="flashinfer_trtllm", dtype="float16", oracle=oracle)
    r = parity.run([s]).rows[0]
    assert r.agrees and r.vllm_kernel == kernel, (r.vllm, r.vllm_kernel, r.kernel)
    bf16 = parity.run([sim.Scenario(**{**s.__dict__, "dtype": "bfloat16"})]).rows[0]
    assert bf16.agrees and bf16.vllm_kernel.endswith("Monolithic")
    fp16_tensor = parity.run([sim.Scenario(**{**s.__dict__, "quant": "fp8_tensor",
                                              "oracle": "nvfp4"})]).rows[0]
    assert fp16_tensor.vllm is None and fp16_tensor.selected is None  # no modular per-tensor


def test_mxfp4_all2all_picks_the_modular_or_batched_class():
    """DP x EP: the monolithic TRT-LLM and Triton MXFP4 classes refuse all2all kernels; DeepEP
    low-latency's batched format runs Batched Marlin."""
    def row(cap, requested, a2a, quant="mxfp4"):
        return parity.run([sim.Scenario(cap, "12.8", sim.FLASHINFER, None, "moe", quant,
                                        "swigluoai", True, 2, requested=requested,
                                        all2all=a2a, oracle="mxfp4")]).rows[0]
    for cap, req, a2a, kernel in (
            ("10.0", "flashinfer_trtllm", "allgather_reducescatter", "TrtLlmMxfp4ExpertsModular"),
            ("9.0", "triton", "deepep_high_throughput", "OAITritonExperts"),
            ("9.0", "marlin", "deepep_low_latency", "BatchedMarlinExperts")):
        r = row(cap, req, a2a)
        assert r.agrees and r.vllm_kernel == kernel, (cap, req, a2a, r.vllm_kernel, r.kernel)
    r = row("10.0", "flashinfer_trtllm", "deepep_low_latency")
    assert r.agrees and r.vllm is None and r.selected is None


def test_the_doc_reports_a_random_run_without_unexplained_differences():
    """docs/vllm-parity.md's random section (tools/vllm_parity.py --only random): a seed, every
    family at its CI count, 0 unexplained."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / sim.DOC_NAME).read_text()
    assert re.search(rf"`{rs.ENV_SEED}=\d+ ", text), "no seed in the random section"
    rows = {f: tuple(map(int, rest)) for f, *rest in re.findall(
        r"^\| random (\w+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M)}
    assert set(rows) == set(rs.COUNTS), rows
    for family, (total, agree, differ, _, unexplained) in rows.items():
        assert total == rs.COUNTS[family] and agree + differ == total and unexplained == 0, \
            (family, rows[family])
