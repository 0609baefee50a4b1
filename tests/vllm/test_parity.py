"""vLLM's own choice against selector's over the sweep: every difference has a catalogue rule
(with its source) that explains it."""
from __future__ import annotations

import parity
import sim


def test_every_difference_is_explained():
    report = parity.run()
    assert len(report.rows) == len(sim.sweep())
    lines = [f"{r.scenario.label()}: vLLM {r.vllm or 'error'} ({r.vllm_error[:160]}), "
             f"selector {r.selected or 'refusal'}" for r in report.unexplained]
    assert not lines, "differences no catalogue rule explains:\n" + "\n".join(lines[:20])
    assert len(report.rows) - len(report.differ) > len(report.differ)  # parity is the rule


def test_an_unexplained_difference_fails():
    """A selector choice vLLM refuses, with no rule behind it, is reported as unexplained."""
    s = sim.Scenario("10.0", "13.0", sim.FLASHINFER, None, "moe", "nvfp4", "silu", True)
    report = parity.run([s])
    row = report.rows[0]
    row.vllm, row.vllm_error = None, "simulated refusal"
    assert parity.explain(row, parity.outside()) is None


def test_a_backend_selector_rejects_is_explained_by_its_rules():
    s = sim.Scenario("12.0", "12.8", sim.FLASHINFER, None, "moe", "nvfp4", "relu2", False,
                     requested="flashinfer_b12x")
    row = parity.run([s]).rows[0]
    assert row.vllm == "flashinfer_b12x" and row.selected is None
    assert row.why is not None and any(rule == "cuda" and source for rule, source in row.why[1])


def test_a_vllm_backend_outside_the_catalogue_is_explained_by_the_engine_config():
    s = sim.Scenario("9.0", "13.0", sim.FLASHINFER, None, "moe", "nvfp4", "silu", True)
    row = parity.run([s]).rows[0]
    row.vllm = "humming"
    text, reasons = parity.explain(row, parity.outside())
    assert "outside selector's catalogue" in text and "humming" in reasons[0][1]
    row.vllm = "some_new_backend"
    assert parity.explain(row, parity.outside()) is None
