"""Decide for one layer: filter (every rule of every backend of the op), order the usable ones
by preference, pick one, say why.

Filtering evaluates every candidate (as the Kubernetes scheduler's filters do); a rejected one
lists every failed rule. Ordering is the preference step: a backend's rank, or the rank of the
first of its YAML `preference:` entries whose `when` holds for this layer and platform. Opt-in
(the backend's `opt_in:` field) keeps a usable backend out of automatic selection unless
`policy.allow_opt_in` names it.

The platform is fixed for a Resolver, so every rule's platform part is evaluated once when it
is built; a decision then evaluates only the rules that read the layer. The decision is made
once per layer at load time: an engine that wants per-batch switching asks once per shape
bucket (num_tokens) and keeps the answers.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from . import engines
from .decision import Candidate, Decision
from .layer import LAYER_KEYS
from .model import BackendSpec, Preference, RunConfig
from .rules import OPT_IN, Reason, Rule, VerifyFailure, VerifyRule, VerifyVerdict
from .schema import Layer, Status

MEMO_SIZE = 4096  # verdicts kept; a full memo starts over (bounded memory)
NOT_IMPLEMENTED_SOURCE = "vLLM #49076, #56832 (a global backend flag must not crash other layers)"
WEIGHT_ONLY_SOURCE = "vLLM #55397 (fixed by #55170)"


EXCLUDED = Reason("exclude", "policy.exclude names it: never chosen",
                  "policy.exclude (this run's configuration)", "are excluded by policy.exclude")
_ELIGIBLE, _OPT_IN, _SELECTED = Status.ELIGIBLE, Status.OPT_IN, Status.SELECTED


class Verdict(NamedTuple):
    """A backend's filter outcome for one layer: status before selection, the failures (or
    the opt-in reason), warnings."""
    status: Status
    reasons: Tuple[Reason, ...]
    warnings: Tuple[Reason, ...]


class _Plan(NamedTuple):
    """What a backend's rules give on this platform whatever the layer, and what is left."""
    failures: Tuple[Reason, ...]
    warnings: Tuple[Reason, ...]
    layer_rules: Tuple[Rule, ...]  # platform part holds; the layer decides
    preference: Tuple[Preference, ...]  # platform part holds; the layer decides
    opt_in: Tuple[Reason, ...]
    project: Callable[[Layer], Any]  # the layer fields the above read: the memo key


def no_packages_hint(platform: Any, stacks: Sequence[str]) -> str:
    """The one line a hardware preset without software gets: which `stack=` presets (the
    newest of each family) or `platform.packages.<dist>=` overrides would describe it."""
    if platform.source == "detected" or any(v is not None for _, v in platform.packages):
        return ""
    newest: Dict[str, Tuple[Any, str]] = {}
    for name in stacks:
        family, _, ver = name.partition("_")
        if name == "none" or not ver:
            continue
        mine = (tuple(int(p) if p.isdigit() else -1 for p in ver.split("_")), name)
        newest[family] = max(newest.get(family, mine), mine)  # ties: the greater name
    engines = sorted(newest, key=lambda f: (f not in ("vllm", "sglang"), f))
    adds = [f"stack={newest[f][1]}" for f in engines]
    return ("this platform lists no packages, so every backend that needs one is rejected: add "
            + ", ".join(adds) + " or platform.packages.<dist>=VERSION")


def _not_implemented(layer: Layer, reasons: Tuple[Reason, ...]) -> str:
    """Why a requested backend does not serve this layer: the engine's own reason, or the op
    and quant scheme."""
    if reasons and reasons[0].rule == "engine":
        return f": {reasons[0].message}"
    return f": does not implement {layer.quant} {layer.op} layers"


def opt_in_reason(b: BackendSpec) -> Tuple[Reason, ...]:
    if b.opt_in is None:
        return ()
    return (Reason(OPT_IN, b.opt_in.reason, b.opt_in.source, "are opt-in", "error",
                   f"catalogue.{b.op}.{b.name}.opt_in"),)


class Resolver:
    """Decisions for one run config (catalogue, platform, policy), with optional probe
    findings and verification failures ((op, backend) -> failed cases: a `verify` rule each)."""

    def __init__(self, run: RunConfig, probes: Optional[Mapping[str, Tuple[bool, str]]] = None,
                 verify: Optional[Mapping[Tuple[str, str],
                                         Union[Tuple[VerifyFailure, ...], VerifyVerdict]]] = None,
                 stacks: Sequence[str] = ()):
        self.run = run
        self._hint = no_packages_hint(run.platform, stacks)
        facts = run.platform.facts
        self._facts = facts
        self._platform = run.platform.to_dict()
        p = run.platform
        self._label = p.preset if p.source != "detected" else \
            f"detected {p.gpu_name}" if p.gpu_name else "detected"
        self._platform_notes = tuple(f"platform: {n}" for n in p.detection)
        self._plans: Dict[Tuple[str, str], _Plan] = {}
        self._specs = {(b.op, b.name): b for bs in run.catalogue.backends.values() for b in bs}
        for op, backends in run.catalogue.backends.items():
            for b in backends:
                fixed: List[Reason] = []
                layered: List[Rule] = []
                for rule in b.rules:
                    if not rule.when.platform_holds(facts):
                        continue
                    if rule.all_layer_fields:
                        layered.append(rule)
                        continue
                    reason = rule.evaluate(None, facts)
                    if reason is not None:
                        fixed.append(reason)
                explicit = tuple(r for r in fixed if r.rule == OPT_IN)  # explicit_only rules
                fixed = [r for r in fixed if r.rule != OPT_IN]
                fixed.extend(
                    Reason("feature", f"deep probe {name} failed: {probes[name][1]}",
                           f"selector doctor --deep (probe {name})", f"fail probe {name}")
                    for name in b.probes if probes and name in probes and not probes[name][0])
                if verify and verify.get((op, b.name)):
                    layered.append(VerifyRule.measured(op, b.name, verify[op, b.name]))
                prefs = tuple(pr for pr in b.preference if pr.when.platform_holds(facts))
                read = {"quant"}.union(*(r.all_layer_fields for r in layered),
                                       *(pr.when.layer_fields for pr in prefs))
                self._plans[op, b.name] = _Plan(
                    tuple(r for r in fixed if r.severity != "warning"),
                    tuple(r for r in fixed if r.severity == "warning"), tuple(layered),
                    prefs, opt_in_reason(b) + explicit, attrgetter(*sorted(read)))
        # A backend's verdict and rank depend only on the layer fields its rules and preference
        # declare they read (Rule.layer_fields, `when` terms): memoized on those, layers that
        # differ elsewhere (num_tokens, sizes no rule checks) share them.
        self._memo: Dict[Tuple[str, str, Any], Tuple[Verdict, Tuple[int, Optional[Preference]]]
                         ] = {}

    def platform_reasons(self, op: str, name: str
                         ) -> Tuple[Tuple[Reason, ...], Tuple[Reason, ...], Tuple[Reason, ...]]:
        """(failures, opt-in, warnings) of a backend on this platform whatever the layer: the
        rules without layer terms, and failed probes (`selector doctor`)."""
        plan = self._plans[op, name]
        return plan.failures, plan.opt_in, plan.warnings

    def evaluate(self, b: BackendSpec, layer: Layer) -> Verdict:
        """Filter: the backend's status for this layer, with every failed rule."""
        if b.unavailable is not None:  # the engine (engine=...) does not offer it
            return Verdict(Status.NOT_APPLICABLE, (b.unavailable,), ())
        if layer.quant not in b.implements:
            return Verdict(Status.NOT_APPLICABLE, (Reason(
                "quant", f"implements {', '.join(b.implements)} layers, not {layer.quant}; "
                "automatic selection decides for this layer", NOT_IMPLEMENTED_SOURCE,
                f"do not implement {layer.quant}"),), ())
        plan = self._plans[b.op, b.name]
        failures, warnings = plan.failures, plan.warnings
        found = [r for rule in plan.layer_rules if rule.when.layer_holds(layer)
                 for r in (rule.evaluate(layer, self._facts),) if r is not None]
        if found:
            failures += tuple(r for r in found if r.severity != "warning")
            warnings += tuple(r for r in found if r.severity == "warning")
        if b.name in self.run.policy.exclude:
            failures = (EXCLUDED,) + failures
        if failures:
            # A backend that does not serve the layer's quant scheme does not implement the
            # layer: an explicit request for it falls to automatic selection (CONTRACT.md).
            if any(r.rule == "quant" for r in failures):
                return Verdict(Status.NOT_APPLICABLE, failures, warnings)
            return Verdict(Status.REJECTED, failures, warnings)
        if plan.opt_in and b.name not in self.run.policy.allow_opt_in:
            return Verdict(Status.OPT_IN, plan.opt_in, warnings)
        return Verdict(Status.ELIGIBLE, (), warnings)

    def preference(self, b: BackendSpec, layer: Layer) -> Tuple[int, Optional[Preference]]:
        """Order: the rank of the first preference entry that holds, else the base rank."""
        for pref in self._plans[b.op, b.name].preference:
            if pref.when.layer_holds(layer):
                return pref.rank, pref
        return b.rank, None

    def judged(self, b: BackendSpec, layer: Layer
               ) -> Tuple[Verdict, Tuple[int, Optional[Preference]]]:
        """(evaluate(), preference()), memoized on the layer fields they read."""
        key = (b.op, b.name, self._plans[b.op, b.name].project(layer))
        got = self._memo.get(key)
        if got is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            got = self._memo.setdefault(key, (self.evaluate(b, layer), self.preference(b, layer)))
        return got

    def decide(self, layer: Layer) -> Decision:
        run = self.run
        requested = run.policy.requested(layer.op)
        judge = self.judged
        ranked = sorted([(j[1][0], b.name, j, b) for b in run.catalogue.backends[layer.op]
                         for j in (judge(b, layer),)])
        backends = [row[3] for row in ranked]
        prefs = {name: j[1] for _, name, j, _ in ranked}
        evaluated = {name: j[0] for _, name, j, _ in ranked}
        auto = next((name for _, name, j, _ in ranked if j[0].status is _ELIGIBLE), None)
        selected, notes = self._requested(layer, requested, evaluated, auto)
        candidates, warned = [], []
        for b in backends:
            status, reasons, warnings = evaluated[b.name]
            for w in warnings:
                notes.append(f"{b.name}: {w.message} ({w.source})")
                warned.append((b.name, w))
            candidates.append(Candidate(b.name, _SELECTED if b.name == selected else status,
                                        reasons, b.entry_point))
        if selected is not None and selected == auto:
            notes.extend(self._preference_notes(layer, selected, candidates, prefs))
        notes.extend(self._closing_notes(layer, requested, selected, candidates))
        notes.extend(self._platform_notes)
        values = layer.__dict__
        return Decision({k: values[k] for k in LAYER_KEYS}, self._platform, ",".join(requested),
                        selected, tuple(candidates), tuple(notes), self._label, tuple(warned),
                        engines.view(run.engine, run.catalogue, layer.op, selected),
                        hint=self._hint)

    def _requested(self, layer: Layer, requested: Tuple[str, ...],
                   evaluated: Dict[str, Verdict], auto: Optional[str]
                   ) -> Tuple[Optional[str], List[str]]:
        """Apply `policy.<op>_backend`: the first usable backend of the ordered request wins;
        one that does not implement the layer is skipped; none usable is refused under strict,
        else automatic selection decides."""
        key = f"policy.{layer.op}_backend"
        notes: List[str] = []
        failing: List[Tuple[str, int]] = []  # (backend, failed rules)
        for name in requested:
            if name == "auto":
                return auto, notes
            status, reasons, _ = evaluated[name]
            if status == Status.NOT_APPLICABLE:
                notes.append(f"{key}: {name}{_not_implemented(layer, reasons)}; skipped")
            elif status in (Status.ELIGIBLE, Status.OPT_IN):
                return name, notes
            else:
                failing.append((name, len(reasons)))
        asked = f"{key}={','.join(requested)}"
        if not failing:  # nothing requested implements this layer: automatic selection decides
            what = (_not_implemented(layer, evaluated[requested[0]].reasons)
                    if len(requested) == 1 else
                    f": does not implement {layer.quant} {layer.op} layers")
            notes[:] = [f"{asked}{what}; automatic selection chose {auto or 'nothing'} for "
                        "this layer"]
            return auto, notes
        what = (f"{asked} was requested but fails {failing[0][1]} rule(s)"
                if len(requested) == 1 else f"{asked} was requested but each fails: "
                + ", ".join(f"{name} {n} rule(s)" for name, n in failing))
        if self.run.policy.strict:
            notes.append(what + "; policy.strict=true refuses to fall back"
                         + (f" (with policy.strict=false: {auto})" if auto else ""))
            return None, notes
        notes.append(f"{what}; policy.strict=false: fell back to {auto or 'nothing'}")
        return auto, notes

    def _preference_notes(self, layer: Layer, selected: str, candidates: List[Candidate],
                          prefs: Dict[str, Tuple[int, Optional[Preference]]]) -> List[str]:
        """Why the winner outranked the other usable candidates (the preference step)."""
        out = []
        chosen = self._specs[layer.op, selected]
        if chosen.opt_in is not None:
            out.append(f"{selected} is opt-in ({chosen.opt_in.reason}); "
                       "policy.allow_opt_in admits it to automatic selection")
        rank = prefs[selected][0]
        others = [c.backend for c in candidates
                  if c.backend != selected and c.status is _ELIGIBLE]
        if others:
            pref = prefs[selected][1]
            why = f": {pref.reason} ({pref.source})" if pref else ""
            out.append(f"preference: {selected} (rank {rank}{why}) outranks "
                       + ", ".join(f"{n} (rank {prefs[n][0]})" for n in others))
        for c in candidates:  # a preference that would have won, were the backend admitted
            pref = prefs[c.backend][1]
            if pref is not None and c.status is _OPT_IN and \
                    (prefs[c.backend][0], c.backend) < (rank, selected):  # the ranking's order
                out.append(f"{c.backend} could run this layer and was not selected: it is "
                           f"opt-in, and would rank first ({pref.reason}; {pref.source}); "
                           f"admit it with policy.allow_opt_in=[{c.backend}]")
        return out

    def _closing_notes(self, layer: Layer, requested: Tuple[str, ...], selected: Optional[str],
                       candidates: List[Candidate]) -> List[str]:
        if selected is None and requested == ("auto",):
            if all(c.status == Status.NOT_APPLICABLE for c in candidates):
                return [f"no backend of the catalogue implements {layer.quant} {layer.op} "
                        "layers: this layer is outside selector's NVFP4 catalogue"]
            opt = [c.backend for c in candidates if c.status == Status.OPT_IN]
            return ["no backend can be chosen automatically" +
                    (f"; opt-in only: {', '.join(opt)} (request one with "
                     f"policy.{layer.op}_backend=NAME, or admit it with "
                     f"policy.allow_opt_in=[NAME])" if opt else "")]
        if selected is None:
            return []
        chosen = self._specs[layer.op, selected]
        if chosen.execution == "weight_only" and layer.quant == "nvfp4":
            return [f"{selected} is weight-only: it serves this W4A4 checkpoint as W4A16 "
                    f"(activation scales dropped), not native FP4 ({WEIGHT_ONLY_SOURCE})"]
        if chosen.execution == "reference":
            return [f"{selected} is the reference implementation (dequantize, then matmul): "
                    "correct but slow; no native NVFP4 kernel can run this layer here"]
        return []

