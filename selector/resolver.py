"""Decide for one layer: evaluate every backend of the op, order them, pick one, say why.

Every candidate is evaluated (as in the Kubernetes scheduler's filters); a rejected one lists
every failed rule. Ordering: preference rank, except that for a W4A4 layer a weight-only
backend ranks below every native one (vLLM #55397), and a reference implementation is last.

The platform is fixed for a Resolver, so every rule's platform part is evaluated once when it
is built; a decision then only looks at the layer.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import engines
from .decision import Candidate, Decision
from .model import LAYER_KEYS, Backend, Layer, Model
from .rules import Condition, Reason, Rule

NOT_IMPLEMENTED_SOURCE = "vLLM #49076, #56832 (a global backend flag must not crash other layers)"
WEIGHT_ONLY_SOURCE = "vLLM #55397 (fixed by #55170)"
_TIER = {"native": 0, "weight_only": 1, "reference": 2}

# A rule whose outcome depends on the layer: (the layer part of its `when` or None, the reason
# it gives when that part holds, or None when the rule itself must look at the layer, the rule)
Dynamic = Tuple[Optional[Condition], Optional[Reason], Rule]
# What a backend's rules give on this platform whatever the layer: failures, opt-in, warnings
Fixed = Tuple[Tuple[Reason, ...], Tuple[Reason, ...], Tuple[Reason, ...]]


def _split(reasons: Sequence[Reason]) -> Fixed:
    """Reasons as (failures, opt-in, warnings), each in catalogue order."""
    return (tuple(r for r in reasons if r.rule != "opt_in" and r.severity != "warning"),
            tuple(r for r in reasons if r.rule == "opt_in"),
            tuple(r for r in reasons if r.rule != "opt_in" and r.severity == "warning"))


def order(backends: Sequence[Backend], quant: str) -> List[Backend]:
    def key(b: Backend):
        tier = _TIER[b.execution]
        if b.execution == "weight_only" and quant != "nvfp4":
            tier = 0  # a weight-only kernel is the native path for a W4A16 layer
        return (tier, b.rank, b.name)
    return sorted(backends, key=key)


class Resolver:
    """Decisions for one model (catalogue, platform, policy), with optional probe findings."""

    def __init__(self, model: Model, probes: Optional[Mapping[str, Tuple[bool, str]]] = None):
        self.model = model
        facts = model.platform.facts
        self._platform = model.platform.to_dict()
        p = model.platform
        self._label = p.preset if p.source != "detected" else \
            f"detected {p.gpu_name}" if p.gpu_name else "detected"
        self._platform_notes = tuple(f"platform: {n}" for n in p.detection)
        self._fixed: Dict[Tuple[str, str], Fixed] = {}
        self._dynamic: Dict[Tuple[str, str], Tuple[Dynamic, ...]] = {}
        self._orders: Dict[Tuple[str, str], List[Backend]] = {}
        # A backend's verdict depends only on the few layer fields its rules read: memoized on
        # them, layers that differ elsewhere (num_tokens, sizes no rule checks) share it.
        self._project: Dict[Tuple[str, str], Any] = {}
        self._verdicts: Dict[Tuple[str, str, Any], Tuple[str, Tuple[Reason, ...],
                                                           Tuple[Reason, ...]]] = {}
        for op, backends in model.catalogue.backends.items():
            for b in backends:
                fixed: List[Reason] = []
                dynamic: List[Dynamic] = []
                for rule in b.rules:
                    if not rule.when.platform_holds(facts):
                        continue
                    cond = rule.when if rule.when.has_layer_terms else None
                    reason = None if rule.reads_layer else rule.evaluate(None, facts)
                    if not rule.reads_layer and reason is None:
                        continue
                    if cond is None and reason is not None:
                        fixed.append(reason)
                    else:
                        dynamic.append((cond, reason, rule))
                fixed.extend(
                    Reason("feature", f"deep probe {name} failed: {probes[name][1]}",
                           f"selector doctor --deep (probe {name})", f"fail probe {name}")
                    for name in b.probes if probes and name in probes and not probes[name][0])
                self._fixed[op, b.name] = _split(fixed)
                self._dynamic[op, b.name] = tuple(dynamic)
                attrs = {"quant"}
                for cond, _, rule in dynamic:
                    assert rule.layer_attrs or not rule.reads_layer, rule.kind  # memo key
                    attrs.update(rule.layer_attrs)
                    if cond is not None:
                        attrs.update(cond.layer_attrs)
                self._project[op, b.name] = attrgetter(*sorted(attrs))

    def platform_reasons(self, op: str, name: str) -> Fixed:
        """(failures, opt-in, warnings) of a backend on this platform whatever the layer: the
        rules without layer terms, and failed probes (`selector doctor`)."""
        return self._fixed[op, name]

    def ordered(self, op: str, quant: str) -> List[Backend]:
        key = (op, "nvfp4" if quant == "nvfp4" else "other")
        got = self._orders.get(key)
        if got is None:
            got = self._orders[key] = order(self.model.catalogue.backends[op], quant)
        return got

    def verdict(self, b: Backend, layer: Layer) -> Tuple[str, Tuple[Reason, ...],
                                                         Tuple[Reason, ...]]:
        """evaluate(), memoized on the layer fields the backend's rules read."""
        key = (b.op, b.name, self._project[b.op, b.name](layer))
        got = self._verdicts.get(key)
        if got is None:
            got = self._verdicts.setdefault(key, self.evaluate(b, layer))
        return got

    def evaluate(self, b: Backend, layer: Layer) -> Tuple[str, Tuple[Reason, ...],
                                                          Tuple[Reason, ...]]:
        """(status before selection, failures or the opt-in reason, warnings)."""
        if b.unavailable is not None:  # the engine (engine=...) does not offer it
            return "not_applicable", (b.unavailable,), ()
        if layer.quant not in b.implements:
            return "not_applicable", (Reason(
                "quant", f"implements {', '.join(b.implements)} layers, not {layer.quant}; "
                "automatic selection decides for this layer", NOT_IMPLEMENTED_SOURCE,
                f"do not implement {layer.quant}"),), ()
        failures, opt_in, warnings = self._fixed[b.op, b.name]
        dynamic = self._dynamic[b.op, b.name]
        if dynamic:
            found = [r for cond, reason, rule in dynamic
                     if cond is None or cond.layer_holds(layer)
                     for r in ((reason if reason is not None else rule.evaluate(layer, None)),)
                     if r is not None]
            if found:
                more = _split(found)
                failures, opt_in, warnings = (failures + more[0], opt_in + more[1],
                                              warnings + more[2])
        if failures:
            # A backend that does not serve the layer's quant scheme does not implement the
            # layer: an explicit request for it falls to automatic selection (CONTRACT.md).
            if any(r.rule == "quant" for r in failures):
                return "not_applicable", failures, warnings
            return "rejected", failures, warnings
        if opt_in:
            return "opt_in", opt_in, warnings
        return "eligible", (), warnings

    def decide(self, layer: Layer) -> Decision:
        model = self.model
        requested = model.policy.requested(layer.op)
        backends = self.ordered(layer.op, layer.quant)
        evaluated = {b.name: self.verdict(b, layer) for b in backends}
        notes: List[str] = []
        auto = next((b.name for b in backends if evaluated[b.name][0] == "eligible"), None)
        selected: Optional[str] = None
        key = f"policy.{layer.op}_backend"
        if requested == "auto":
            selected = auto
        else:
            status, reasons, _ = evaluated[requested]
            if status == "not_applicable":
                selected = auto
                what = reasons[0].message if reasons[0].rule == "engine" else \
                    f"does not implement {layer.quant} {layer.op} layers"
                notes.append(f"{key}={requested}: {what}; automatic selection chose "
                             f"{auto or 'nothing'} for this layer")
            elif status in ("eligible", "opt_in"):
                selected = requested
            elif model.policy.strict:
                notes.append(f"{key}={requested} was requested but fails {len(reasons)} rule(s); "
                             "policy.strict=true refuses to fall back"
                             + (f" (with policy.strict=false: {auto})" if auto else ""))
            else:
                selected = auto
                notes.append(f"{key}={requested} was requested but fails {len(reasons)} rule(s); "
                             f"policy.strict=false: fell back to {auto or 'nothing'}")

        candidates, warned = [], []
        for b in backends:
            status, reasons, warnings = evaluated[b.name]
            for w in warnings:
                notes.append(f"{b.name}: {w.message} ({w.source})")
                warned.append((b.name, w))
            candidates.append(Candidate(b.name, "selected" if b.name == selected else status,
                                        reasons, b.entry_point))
            if b.name != selected and status in ("eligible", "opt_in"):
                notes.extend(f"{b.name} could run this layer and was not selected: {h.message} "
                             f"({h.source})" for h in b.hints if h.applies(layer.num_tokens))
        notes.extend(self._closing_notes(layer, requested, selected, candidates))
        notes.extend(self._platform_notes)
        return Decision({k: getattr(layer, k) for k in LAYER_KEYS}, self._platform, requested,
                        selected, tuple(candidates), tuple(notes), self._label, tuple(warned),
                        engines.view(model.engine, model.catalogue, layer.op, selected))

    def _closing_notes(self, layer: Layer, requested: str, selected: Optional[str],
                       candidates: List[Candidate]) -> List[str]:
        if selected is None and requested == "auto":
            if all(c.status == "not_applicable" for c in candidates):
                return [f"no backend of the catalogue implements {layer.quant} {layer.op} "
                        "layers: this layer is outside selector's NVFP4 catalogue"]
            opt = [c.backend for c in candidates if c.status == "opt_in"]
            return ["no backend can be chosen automatically" +
                    (f"; opt-in only: {', '.join(opt)} (request one with "
                     f"policy.{layer.op}_backend=NAME)" if opt else "")]
        if selected is None:
            return []
        chosen = self.model.catalogue.get(layer.op, selected)
        if chosen.execution == "weight_only" and layer.quant == "nvfp4":
            return [f"{selected} is weight-only: it serves this W4A4 checkpoint as W4A16 "
                    f"(activation scales dropped), not native FP4 ({WEIGHT_ONLY_SOURCE})"]
        if chosen.execution == "reference":
            return [f"{selected} is the reference implementation (dequantize, then matmul): "
                    "correct but slow; no native NVFP4 kernel can run this layer here"]
        return []


def decide(model: Model, layer: Layer, probes: Optional[Mapping[str, Tuple[bool, str]]] = None
           ) -> Decision:
    """One decision without keeping a Resolver (tests, one-off use)."""
    return Resolver(model, probes).decide(layer)
