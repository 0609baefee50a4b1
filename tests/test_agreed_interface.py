"""Issue 22 item 7: an AgreedDecision answers with the interface of a Decision (instantiate(),
outcome, log_line(), warnings, summary(), to_json(), ...), so an engine that switches on
selector.distributed needs no second code path, and `instantiate()` builds what the ranks
agreed on, not this rank's own choice."""
from __future__ import annotations

import inspect
import json

import pytest
from helpers import load

import selector
from selector.core.decision import Decision
from selector.distributed import agreement, fingerprint
from selector.distributed.agreement import AgreedDecision, Group

MOE = {"op": "moe", "quant": "nvfp4", "activation": "relu2", "act_and_mul": False,
       "hidden_size": 256, "intermediate_size": 128, "num_experts": 8, "top_k": 2}
LINEAR = {"op": "linear", "quant": "nvfp4", "hidden_size": 256, "intermediate_size": 128}
FP8 = {"op": "linear", "quant": "int8"}
SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
CPU = ("platform=cpu",)


def groups_of(per_rank):
    by = {}
    for r, decisions in enumerate(per_rank):
        raw = fingerprint.encode(decisions)
        by.setdefault(fingerprint.digest(raw), (raw, []))[1].append(r)
    return [Group(tuple(ranks), ("h",) * len(ranks), json.loads(raw))
            for raw, ranks in by.values()]


def agreed(per_rank, local_rank=0):
    return agreement.agree(groups_of(per_rank), per_rank[local_rank])


def public(cls):
    names = {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
    return names | {f for f in getattr(cls, "__dataclass_fields__", {}) if not f.startswith("_")}


def test_one_interface():
    """Every public name of Decision exists on AgreedDecision (before: no instantiate,
    outcome, log_line, warnings, summary, to_json, engine, hint, platform)."""
    missing = public(Decision) - public(AgreedDecision)
    assert not missing, missing


@pytest.mark.parametrize("layer", [MOE, LINEAR, FP8])
@pytest.mark.parametrize("overrides", [SPARK, CPU, ("platform=b200", "stack=vllm_0_32",
                                                    "engine=vllm")])
def test_agreed_alone_answers_as_the_decision(layer, overrides):
    """One rank (or ranks that agree): every answer equals the rank's own Decision's."""
    d = load(*overrides).select(**layer)
    a = agreed([[d], [d]])[0]
    assert a.selected == d.selected and a.ok == d.ok
    assert a.outcome == d.outcome
    assert a.summary() == d.summary()
    assert a.log_line() == d.log_line()
    assert a.warnings == tuple((b, agreement.Reason(r.rule, r.message, r.source, (0, 1),
                                                    r.need, r.severity))
                               for b, r in d.warnings)
    assert a.entry_point == d.entry_point
    assert a.engine == d.engine
    assert json.loads(a.to_json())["outcome"] == d.outcome


def test_instantiate_builds_the_agreed_backend_not_the_local_one():
    """The DGX Spark rank alone picks flashinfer_cutlass; the CPU rank only emulation: every
    rank runs emulation, and instantiate() on the Spark rank builds it."""
    pytest.importorskip("torch")
    spark = load(*SPARK).select(**MOE)
    cpu = load(*CPU).select(**MOE)
    assert spark.selected == "flashinfer_cutlass" and cpu.selected == "emulation"
    a = agreed([[spark], [cpu]], local_rank=0)[0]
    assert a.selected == "emulation" and a.local is spark
    built = a.instantiate()
    assert type(built).__name__ == "EmulationMoE"
    assert built.decision.selected == "emulation"
    assert a.outcome == "selected"
    assert "-> emulation [selected]" in a.log_line()


def test_instantiate_without_agreement_names_the_outcome():
    spark = load(*SPARK).select(**FP8)
    a = agreed([[spark], [spark]])[0]
    assert a.outcome == "unsupported_layer"
    with pytest.raises(selector.SelectorError, match="unsupported_layer"):
        a.instantiate()


def test_instantiate_needs_the_local_decision():
    spark = load(*SPARK).select(**MOE)
    a = agreement.agree(groups_of([[spark], [spark]]))[0]
    with pytest.raises(selector.SelectorError, match="no local decision"):
        a.instantiate()


def test_warnings_name_the_ranks_they_hold_on():
    """The GB10 CUTLASS warning holds on the Spark rank only: the agreed warning says so."""
    spark = load(*SPARK).select(**MOE)
    b200 = load("platform=b200", "stack=flashinfer_0_7_4").select(**MOE)
    own = [b for b, _ in spark.warnings]
    assert "flashinfer_cutlass" in own
    a = agreed([[spark], [b200]])[0]
    got = [(b, r) for b, r in a.warnings if b == "flashinfer_cutlass"]
    assert got and all(r.ranks == (0,) and r.message.startswith("rank 0 (host h): ")
                       for _, r in got)
    assert json.loads(a.to_json())["warnings"][0]["ranks"] == [0]


def test_nothing_fits_outcome_and_log_line():
    """No backend usable on every rank: outcome nothing_fits and the log line says so (the
    summary counts what each rank needs)."""
    spark = load(*SPARK, "policy.exclude=[emulation]").select(**MOE)
    cpu = load(*CPU, "policy.exclude=[emulation]").select(**MOE)
    a = agreed([[spark], [cpu]])[0]
    assert a.selected is None and a.outcome == "nothing_fits"
    assert "-> none [nothing_fits]" in a.log_line()
    n_moe = len(load(*CPU).catalogue.backends["moe"])  # the packaged MoE backends, all counted
    assert f"0/{n_moe} backends usable" in a.summary()
