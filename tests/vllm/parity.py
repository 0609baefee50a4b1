"""vLLM's untouched choice against selector's (engine=vllm), over the simulated sweep.

Every difference is explained by the catalogue or it is not: vLLM picked a backend selector
rejects (its failed rules, with sources), a backend outside selector's catalogue (the engine
config's `outside` list, with sources), one selector ranks below its choice (the weight-only
rule), or an explicit backend that does not implement the layer, which selector hands to
automatic selection (CONTRACT). Anything else is unexplained.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import sim

from selector.engines import vllm as adapter

WEIGHT_ONLY_SOURCE = "vLLM #55397 (fixed by #55170)"
POLICY_SOURCE = "vLLM #49076, #56832 (a global backend flag must not crash other layers)"


@dataclass
class Row:
    scenario: sim.Scenario
    vllm: Optional[str]  # vLLM's backend (its name) or None when vLLM raised
    vllm_error: str
    decision: Any
    why: Optional[Tuple[str, Tuple[Tuple[str, str], ...]]] = None  # (cluster text, reasons)

    @property
    def selected(self) -> Optional[str]:
        return self.decision.selected

    @property
    def agrees(self) -> bool:
        return self.vllm == self.selected


@dataclass
class Report:
    rows: List[Row] = field(default_factory=list)

    @property
    def differ(self) -> List[Row]:
        return [r for r in self.rows if not r.agrees]

    @property
    def unexplained(self) -> List[Row]:
        return [r for r in self.differ if r.why is None]

    def clusters(self) -> OrderedDict[Tuple, List[Row]]:
        out: OrderedDict[Tuple, List[Row]] = OrderedDict()
        for r in self.differ:
            key = (r.vllm or "error", r.selected or "refusal",
                   r.why if r.why is not None else ("UNEXPLAINED", ()))
            out.setdefault(key, []).append(r)
        return out


# -- vLLM untouched ----------------------------------------------------------------------------
_MOE_NAMES = {"VLLM_CUTLASS": "cutlass", "FLASHINFER_CUTEDSL_BATCHED": "flashinfer_cutedsl"}


def vllm_moe(s: sim.Scenario, select: Any) -> Tuple[Optional[str], str]:
    try:
        backend, _ = select(sim.moe_config(s, s.requested), *sim.quant_keys(s))
    except (ValueError, NotImplementedError) as exc:
        return None, str(exc).splitlines()[0]
    return _MOE_NAMES.get(backend.value, backend.value.lower()), ""


def linear_kernel_name(kernel: Any) -> str:
    from vllm.model_executor.kernels import linear
    for name, classes in linear._LINEAR_BACKEND_KERNEL_MAP.items():
        if type(kernel) in classes:
            return name
    return type(kernel).__name__


def vllm_linear(s: sim.Scenario, init: Any) -> Tuple[Optional[str], str]:
    from vllm.model_executor.kernels import linear
    saved = linear._get_linear_backend
    linear._get_linear_backend = lambda *, quantization: s.requested
    try:
        kernel = init(use_a16=s.quant == "nvfp4_w4a16")
    except ValueError as exc:
        return None, str(exc).splitlines()[0]
    finally:
        linear._get_linear_backend = saved
    return linear_kernel_name(kernel), ""


def vllm_choice(s: sim.Scenario) -> Tuple[Optional[str], str]:
    """vLLM's own choice (its backend name), or None and its error's first line."""
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.fused_moe.oracle import nvfp4
    if s.op == "moe":
        fn = nvfp4.select_nvfp4_moe_backend
        return vllm_moe(s, getattr(fn, "__selector_original__", fn))
    fn = linear.init_nvfp4_linear_kernel
    return vllm_linear(s, getattr(fn, "__selector_original__", fn))


# -- selector ---------------------------------------------------------------------------------
def selector_layer(s: sim.Scenario) -> Dict[str, Any]:
    if s.op == "linear":
        return adapter.linear_layer(s.quant == "nvfp4_w4a16")
    return adapter.moe_layer(sim.moe_config(s), *sim.quant_keys(s))


_CHOOSERS: Dict[Tuple[str, ...], adapter.Chooser] = {}


def selector_decision(s: sim.Scenario) -> Any:
    extra = tuple(s.selector_overrides())
    chooser = _CHOOSERS.setdefault(extra, adapter.Chooser(extra=list(extra)))
    return chooser.decide(selector_layer(s), s.requested)


def outside(decision_or_none: Any = None) -> Dict[str, str]:
    """vLLM backends outside selector's catalogue, with the source that says why."""
    import selector
    sel = selector.load(overrides=["engine=vllm", "platform=cpu"])
    return dict(sel.run_config.engine.outside)


# -- explaining a difference ------------------------------------------------------------------
def explain(r: Row, outside_names: Dict[str, str]) -> Optional[Tuple[str, Tuple]]:
    d = r.decision
    names = {c.backend for c in d.candidates}
    if r.vllm is not None and r.vllm not in names:
        src = outside_names.get(r.vllm)
        return None if src is None else \
            (f"vLLM's {r.vllm} is outside selector's catalogue", (("engine", src),))
    if r.vllm is not None:
        c = d.candidate(r.vllm)
        if c.status in ("rejected", "not_applicable", "opt_in"):
            return (f"selector: {r.vllm} {c.status}", _why(c))
        if r.selected is not None and c.status == "eligible" and \
                r.scenario.quant == "nvfp4" and _execution(d, r.vllm) == "weight_only" and \
                _execution(d, r.selected) == "native":
            return (f"selector ranks native {r.selected} above weight-only {r.vllm} for a W4A4 "
                    "layer", (("preference", WEIGHT_ONLY_SOURCE),))
        return None
    # vLLM raised and selector chose a backend
    if r.scenario.requested != "auto" and \
            d.candidate(r.scenario.requested).status == "not_applicable":
        c = d.candidate(r.scenario.requested)
        return (f"explicit {r.scenario.requested} does not implement the layer: selector "
                "decides it automatically", _why(c) + (("policy", POLICY_SOURCE),))
    return None


def _why(c: Any) -> Tuple[Tuple[str, str], ...]:
    """The (rule, source) pairs that make a candidate what it is: for not_applicable only the
    rules that make it so (quant, engine), the others say nothing more."""
    reasons = [x for x in c.reasons if c.status != "not_applicable" or
               x.rule in ("quant", "engine")]
    return tuple(dict.fromkeys((x.rule, x.source) for x in reasons))


def _execution(d: Any, name: str) -> str:
    import selector
    sel = selector.load(overrides=["engine=vllm", "platform=cpu"])
    return sel.catalogue.get(d.layer["op"], name).execution


def run(scenarios: Optional[List[sim.Scenario]] = None) -> Report:
    report = Report()
    names = outside()
    simulation = sim.Simulation()
    try:
        for s in scenarios if scenarios is not None else sim.sweep():
            with simulation.scenario(s):
                v, err = vllm_choice(s)
                d = selector_decision(s)
            row = Row(s, v, err, d)
            if not row.agrees:
                row.why = explain(row, names)
            report.rows.append(row)
    finally:
        simulation.close()
    return report
