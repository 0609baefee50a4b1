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

from bisect import bisect
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from packaging.version import InvalidVersion, Version

from selector.core import engines
from selector.core.decision import Candidate, Decision
from selector.core.model import BackendSpec, RunConfig
from selector.core.notes import Note, note
from selector.core.preference import Preference
from selector.core.rules import (
    Condition,
    EngineRule,
    ExcludeRule,
    ImplementsRule,
    OptInRule,
    ProbeRule,
    Reason,
    Rule,
    VerifyFailure,
    VerifyRule,
    VerifyVerdict,
)
from selector.core.schema import Layer, Status

if TYPE_CHECKING:  # pragma: no cover - only a profile's run imports the profile model
    from selector.core.profile import Measured

MEMO_SIZE = 4096  # verdicts kept; a full memo starts over (bounded memory)
# selector's own behaviours; an engine whose issues motivate them cites those under it instead
# (its file's `cites:`, core/engines.CITE_KEYS: vLLM's issues under engine=vllm only)
NOT_IMPLEMENTED_SOURCE = "policy.*_backend (a requested backend serves the layers it implements)"
WEIGHT_ONLY_SOURCE = "the backend's execution: weight_only (activation scales dropped)"


EXCLUDE_SOURCE = "policy.exclude (this run's configuration)"
_ELIGIBLE, _OPT_IN, _SELECTED = Status.ELIGIBLE, Status.OPT_IN, Status.SELECTED
_WEIGHT = {s: i for i, s in enumerate(Status)}  # the stronger failure status wins
_UNSET: Any = object()


class Verdict(NamedTuple):
    """A backend's filter outcome for one layer: status before selection, the failures (or
    the opt-in reason), warnings."""
    status: Status
    reasons: Tuple[Reason, ...]
    warnings: Tuple[Reason, ...]


class _Plan(NamedTuple):
    """A backend's rules for this run, in evaluation order: the rules that read no layer field
    are decided once, when the run is planned (a failing one is kept as its Reason, a passing
    one dropped), and the rest read the layer."""
    steps: Tuple[Union[Reason, Rule], ...]
    platform: Tuple[Reason, ...]  # the platform-decided failures and warnings
    preference: Tuple[Preference, ...]  # platform part holds; the layer decides
    project: Callable[[Layer], Any]  # the layer fields the steps read: the memo key


def _nothing(layer: Layer) -> None:
    return None


def projector(rules: Sequence[Rule], prefs: Sequence[Preference],
              kernels: Sequence[Condition] = ()) -> Callable[[Layer], Any]:
    """The memo key of a backend's verdict and rank: the values of the layer fields its rules
    read (Rule.layer_fields, and `when` terms that test a value), and for a field that only
    threshold terms read (min_num_tokens, max_num_tokens, ...) the interval between the
    thresholds it falls in, so that layers differing there (num_tokens 5 and 7 below a
    threshold of 64) share the verdict."""
    conds = [r.when for r in rules] + [p.when for p in prefs] + list(kernels)
    raw = set().union(*(r.layer_fields for r in rules), *(c.plain_fields for c in conds))
    if kernels:  # the engine's kernel may replace the layer's scheme
        raw.add("quant")
    cuts: Dict[str, set[int]] = {}
    for c in conds:
        for f, bound in c.cuts:
            cuts.setdefault(f, set()).add(bound)
    bucketed = tuple((f, tuple(sorted(bounds))) for f, bounds in sorted(cuts.items())
                     if f not in raw)
    get = attrgetter(*sorted(raw)) if raw else _nothing
    if not bucketed:
        return get

    def project(layer: Layer) -> Any:
        return get(layer), tuple([None if (v := getattr(layer, f)) is None else bisect(b, v)
                                  for f, b in bucketed])
    return project


def no_packages_hint(platform: Any, stacks: Any, engines: Sequence[str] = engines.ENGINES
                     ) -> Optional[Note]:
    """The note a hardware preset without software gets: which `stack=` presets (the newest
    of each family, engines' families first) or `platform.packages.<dist>=` overrides would
    describe it. `stacks`: (name, {family, version, ...}) of each stack preset (the presets'
    own `stack:` data), or a callable giving them (read only when the hint is due)."""
    if platform.source == "detected" or any(v is not None for _, v in platform.packages):
        return None
    newest: Dict[str, Tuple[Any, str]] = {}
    for name, meta in (stacks() if callable(stacks) else stacks):
        try:
            ver: Any = Version(meta["version"])
        except InvalidVersion:
            ver = Version("0")
        mine = (ver, name)
        newest[meta["family"]] = max(newest.get(meta["family"], mine), mine)  # ties: the name
    families = sorted(newest, key=lambda f: (f not in engines, f))
    return note("no_packages", add=tuple(f"stack={newest[f][1]}" for f in families))


def unproven_note(platform: Any, proven: Any) -> Optional[Note]:
    """The version guard: one note when the platform's engine or library (detected or given) is
    newer than the newest release selector has proven (`proven`: (distribution, name, version)
    of each family, or a callable giving them; config.presets.proven_releases). The answer
    stays the newest proven release's: rules bounded by a release (`when: packages`) hold for
    every later one."""
    pkgs = dict(platform.packages)
    if not any(v is not None for v in pkgs.values()):
        return None
    newer = []
    for dist, name, version in (proven() if callable(proven) else proven):
        have = pkgs.get(dist)
        if have is not None and _release(have) > _release(Version(version)):
            newer.append({"package": dist, "name": name, "proven": version,
                          "installed": str(have)})
    return note("unproven_release", releases=tuple(newer)) if newer else None


def _release(v: Version) -> Version:
    """The release a version names, for the guard: its pre-release kept (TensorRT-LLM's proven
    main is 1.3.0rc24: rc24 itself is proven, rc25 and 1.3.0 are newer), a local build tag
    (0.34.0+cpu), a post-release and a development build of a release counted as that release."""
    pre = "".join(str(x) for x in v.pre) if v.pre and not v.dev else ""
    return Version(v.base_version + pre)


def _reason(r: Reason) -> Dict[str, str]:
    """A reason as note data."""
    return {"rule": r.rule, "message": r.message, "source": r.source}


def planned_rules(b: BackendSpec, run: RunConfig,
                  probes: Optional[Mapping[str, Tuple[bool, str]]],
                  verify: Optional[Mapping[Tuple[str, str],
                                           Union[Tuple[VerifyFailure, ...], VerifyVerdict]]]
                  ) -> Tuple[Rule, ...]:
    """A backend's rules for this run, in evaluation order: the engine's availability and
    `implements` (each final), `policy.exclude`, the backend's opt-in (unless
    policy.allow_opt_in admits it), its declared rules, failed deep probes, failed
    verification."""
    key = f"catalogue.{b.op}.{b.name}"
    if b.unavailable is not None:  # the engine (engine=...) does not offer it: nothing else
        u = b.unavailable
        return (EngineRule.planned(f"{key}.engines", b.file, u.source, why=u.message,
                                   need=u.need),)
    out: List[Rule] = [ImplementsRule.planned(
        f"{key}.implements", b.file, run.engine.cite("implements", NOT_IMPLEMENTED_SOURCE),
        values=b.implements)]
    policy = run.policy
    if b.name in policy.exclude:
        out.append(ExcludeRule.planned("policy.exclude", "policy", EXCLUDE_SOURCE))
    admitted = b.name in policy.allow_opt_in
    if b.opt_in is not None and not admitted:
        out.append(OptInRule.planned(f"{key}.opt_in", b.file, b.opt_in.source,
                                     message=b.opt_in.reason))
    out.extend(r for r in b.rules if not (admitted and r.status is _OPT_IN))
    out.extend(ProbeRule.planned(f"{key}.probes", "selector doctor --deep",
                                 f"selector doctor --deep (probe {name})", probe=name,
                                 finding=probes[name][1])
               for name in b.probes if probes and name in probes and not probes[name][0])
    if verify and verify.get((b.op, b.name)):
        out.append(VerifyRule.measured(b.op, b.name, verify[b.op, b.name]))
    return tuple(out)


class Resolver:
    """Decisions for one run config (catalogue, platform, policy), with optional probe
    findings and verification failures ((op, backend) -> failed cases: a `verify` rule each)."""

    def __init__(self, run: RunConfig, probes: Optional[Mapping[str, Tuple[bool, str]]] = None,
                 verify: Optional[Mapping[Tuple[str, str],
                                          Union[Tuple[VerifyFailure, ...], VerifyVerdict]]] = None,
                 stacks: Any = (), profile: Optional[Measured] = None, proven: Any = ()):
        self.run = run
        self._measured = profile if profile is not None and profile.active else None
        self._hint = no_packages_hint(run.platform, stacks)
        self._guard = unproven_note(run.platform, proven)
        facts = run.platform.facts
        self._facts = facts
        self._platform = run.platform.to_dict()
        p = run.platform
        self._label = p.preset if p.source != "detected" else \
            f"detected {p.gpu_name}" if p.gpu_name else "detected"
        self._platform_notes = tuple(note("platform", detail=n) for n in p.detection) + (
            profile.notes() if profile is not None else ())
        self._plans: Dict[Tuple[str, str], _Plan] = {}
        self._specs = {(b.op, b.name): b for bs in run.catalogue.backends.values() for b in bs}
        for op, backends in run.catalogue.backends.items():
            for b in backends:
                steps: List[Union[Reason, Rule]] = []
                fixed: List[Reason] = []
                layered: List[Rule] = []
                for rule in planned_rules(b, run, probes, verify):
                    if not rule.when.platform_holds(facts):
                        continue
                    if rule.all_layer_fields:
                        layered.append(rule)
                        continue
                    reason = rule.evaluate(None, facts)
                    if reason is not None:
                        fixed.append(reason)
                # order: final rules first (a failure is the only reason), then what the
                # platform decided, then the layer's rules
                first = [r for r in layered if r.final]
                steps = [*first, *fixed, *(r for r in layered if not r.final)]
                if any(r.final for r in fixed):  # the engine does not offer it
                    steps = [next(r for r in fixed if r.final)]
                prefs = tuple(pr for pr in b.preference if pr.when.platform_holds(facts))
                e = engines.entry(b, run.engine.name)
                kernel_conds = tuple(k.when for k in (e.kernels if e else ()))
                self._plans[op, b.name] = _Plan(tuple(steps), tuple(fixed), prefs, projector(
                    [r for r in steps if isinstance(r, Rule)], prefs, kernel_conds))
        # A backend's verdict and rank depend only on the layer fields its rules and preference
        # declare they read (Rule.layer_fields, `when` terms): memoized on those, layers that
        # differ elsewhere (num_tokens, sizes no rule checks) share them.
        self._memo: Dict[Tuple[str, str, Any], Tuple[Verdict, Tuple[int, Optional[Preference]]]
                         ] = {}
        # A decision depends on the layer only through what its backends' verdicts and ranks
        # read (the projections above; `quant` always): memoized on all of them, a layer that
        # differs elsewhere (tp_size, num_tokens, sizes no rule checks) costs the projections,
        # one lookup and the Decision object.
        self._projections = {op: tuple(self._plans[op, b.name].project for b in bs)
                             for op, bs in run.catalogue.backends.items()}
        self._decisions: Dict[Tuple[Any, ...], Tuple[Any, ...]] = {}

    def platform_reasons(self, op: str, name: str
                         ) -> Tuple[Tuple[Reason, ...], Tuple[Reason, ...], Tuple[Reason, ...]]:
        """(failures, opt-in, warnings) of a backend on this platform whatever the layer: the
        rules without layer terms, and failed probes (`selector doctor`)."""
        fixed = self._plans[op, name].platform
        return (tuple(r for r in fixed if r.severity != "warning" and r.status is not _OPT_IN),
                tuple(r for r in fixed if r.severity != "warning" and r.status is _OPT_IN),
                tuple(r for r in fixed if r.severity == "warning"))

    def evaluate(self, b: BackendSpec, layer: Layer) -> Verdict:
        """Filter: one loop over the backend's planned rules. Each failure carries the status
        its rule kind gives; the strongest one is the backend's (not_applicable over rejected
        over opt_in), with every failed rule of that standing; a final failure ends the loop
        as the only reason. Warnings never fail a backend."""
        facts = self._facts
        # the engine's kernel for this backend may run another scheme (its warning says so)
        layer, ran_as = engines.runs_as(self.run.engine, b, layer, facts)
        failures: List[Reason] = []
        warnings: List[Reason] = [ran_as] if ran_as is not None else []
        for step in self._plans[b.op, b.name].steps:
            if isinstance(step, Reason):  # decided when the run was planned
                r = step
            elif step.when.layer_holds(layer):
                got = step.evaluate(layer, facts)
                if got is None:
                    continue
                r = got
            else:
                continue
            if r.severity == "warning":
                warnings.append(r)
            elif r.final:
                return Verdict(r.status, (r,), ())
            else:
                failures.append(r)
        if not failures:
            return Verdict(_ELIGIBLE, (), tuple(warnings))
        status = max((r.status for r in failures), key=_WEIGHT.__getitem__)
        if status is not _OPT_IN:  # opt-in matters only to a backend that could run
            failures = [r for r in failures if r.status is not _OPT_IN]
        return Verdict(status, tuple(failures), tuple(warnings))

    def preference(self, b: BackendSpec, layer: Layer) -> Tuple[int, Optional[Preference]]:
        """Order: the rank of the first preference entry that holds, else the base rank."""
        for pref in self._plans[b.op, b.name].preference:
            if pref.when.layer_holds(layer):
                return pref.rank, pref
        return b.rank, None

    def judged(self, b: BackendSpec, layer: Layer, projected: Any = _UNSET
               ) -> Tuple[Verdict, Tuple[int, Optional[Preference]]]:
        """(evaluate(), preference()), memoized on the layer fields they read (`projected`:
        the backend's projection of the layer, when the caller has it)."""
        if projected is _UNSET:
            projected = self._plans[b.op, b.name].project(layer)
        key = (b.op, b.name, projected)
        got = self._memo.get(key)
        if got is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            got = self._memo.setdefault(key, (self.evaluate(b, layer), self.preference(b, layer)))
        return got

    def decide(self, layer: Layer) -> Decision:
        """The decision for `layer`: filter, order, pick, and the notes that say why."""
        projected = tuple([project(layer) for project in self._projections[layer.op]])
        key = (layer.op, layer.quant, projected,
               self._measured.memo_key(layer) if self._measured else None)
        rest = self._decisions.get(key)
        if rest is None:
            if len(self._decisions) >= MEMO_SIZE:
                self._decisions.clear()
            rest = self._decisions.setdefault(key, self._decide(layer, projected))
        return Decision(layer, *rest)

    def _decide(self, layer: Layer, projected: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """Every field of the decision but the layer (Decision's order)."""
        run = self.run
        requested = run.policy.requested(layer.op)
        judge = self.judged
        ranked = sorted([(j[1][0], b.name, j, b) for b, p in
                         zip(run.catalogue.backends[layer.op], projected)
                         for j in (judge(b, layer, p),)])
        measured = self._measured.order(layer, [t[1] for t in ranked], [
            t[1] for t in ranked if t[2][0].status is _ELIGIBLE]) if self._measured else None
        if measured is not None:  # policy.preference=measured: the profile's order first
            ranked.sort(key=lambda t: measured[0].index(t[1]))
        prefs = {name: j[1] for _, name, j, _ in ranked}
        evaluated = {name: j[0] for _, name, j, _ in ranked}
        auto = next((name for _, name, j, _ in ranked if j[0].status is _ELIGIBLE), None)
        selected, notes = self._requested(layer, requested, evaluated, auto)
        candidates, warned = [], []
        for _, name, (verdict, _), b in ranked:
            status, reasons, warnings = verdict
            for w in warnings:
                notes.append(note("rule_warning", name, **_reason(w)))
                warned.append((name, w))
            # a scheme only the engine's kernel runs under this name: selector's own class
            # (the entry_point) does not implement it, so the candidate names none
            candidates.append(Candidate(name, _SELECTED if name == selected else status,
                                        reasons, None if layer.quant in b.engine_implements
                                        else b.entry_point))
        if selected is not None and selected == auto:
            notes.extend(n for n in self._preference_notes(layer, selected, candidates, prefs)
                         if measured is None or measured[1].kind != "measured"
                         or n.kind != "preference")
            notes.extend([measured[1]] if measured is not None else [])
        notes.extend(self._closing_notes(layer, requested, selected, candidates))
        notes.extend(self._platform_notes)
        if self._hint is not None:
            notes.insert(0, self._hint)
        if self._guard is not None:
            notes.insert(0, self._guard)
        return (self._platform, ",".join(requested), selected, tuple(candidates), tuple(notes),
                self._label, tuple(warned),
                engines.view(run.engine, run.catalogue, layer.op, selected, layer, self._facts))

    def _requested(self, layer: Layer, requested: Tuple[str, ...],
                   evaluated: Dict[str, Verdict], auto: Optional[str]
                   ) -> Tuple[Optional[str], List[Note]]:
        """Apply `policy.<op>_backend`: the first usable backend of the ordered request wins;
        one that does not implement the layer is skipped; none usable is refused under strict,
        else automatic selection decides."""
        key = f"policy.{layer.op}_backend"
        notes: List[Note] = []
        failing: List[Dict[str, Any]] = []  # {backend, failed rules}
        for name in requested:
            if name == "auto":
                return auto, notes
            status, reasons, _ = evaluated[name]
            if status == Status.NOT_APPLICABLE:
                notes.append(note("request_skipped", name, key=key, reason=_reason(reasons[0])))
            elif status in (Status.ELIGIBLE, Status.OPT_IN):
                return name, notes
            else:
                failing.append({"backend": name, "failed": len(reasons)})
        asked = {"key": key, "requested": requested}
        if not failing:  # nothing requested implements this layer: automatic selection decides
            first = evaluated[requested[0]].reasons
            return auto, [note("request_not_applicable", None, **asked, chose=auto,
                               reason=_reason(first[0]) if len(requested) == 1 else None,
                               quant=layer.quant, op=layer.op)]
        if self.run.policy.strict:
            notes.append(note("request_refused", failing[0]["backend"], **asked,
                              failing=tuple(failing), fallback=auto))
            return None, notes
        notes.append(note("fallback", failing[0]["backend"], **asked, failing=tuple(failing), chose=auto))
        return auto, notes

    def _preference_notes(self, layer: Layer, selected: str, candidates: List[Candidate],
                          prefs: Dict[str, Tuple[int, Optional[Preference]]]) -> List[Note]:
        """Why the winner outranked the other usable candidates (the preference step)."""
        out = []
        chosen = self._specs[layer.op, selected]
        if chosen.opt_in is not None:
            out.append(note("opt_in_admitted", selected, reason=chosen.opt_in.reason,
                            source=chosen.opt_in.source))
        rank = prefs[selected][0]
        others = [c.backend for c in candidates
                  if c.backend != selected and c.status is _ELIGIBLE]
        if others:
            pref = prefs[selected][1]
            out.append(note("preference", selected, rank=rank,  # "": said by its rank alone
                            reason=(pref.reason or None) if pref else None,
                            source=(pref.source or None) if pref else None,
                            outranks=tuple({"backend": n, "rank": prefs[n][0]} for n in others)))
        for c in candidates:  # a preference that would have won, were the backend admitted
            pref = prefs[c.backend][1]
            if pref is not None and c.status is _OPT_IN and \
                    (prefs[c.backend][0], c.backend) < (rank, selected):  # the ranking's order
                out.append(note("opt_in_would_win", c.backend, reason=pref.reason,
                                source=pref.source, rank=prefs[c.backend][0]))
        return out

    def _closing_notes(self, layer: Layer, requested: Tuple[str, ...], selected: Optional[str],
                       candidates: List[Candidate]) -> List[Note]:
        if selected is None and requested == ("auto",):
            if all(c.status == Status.NOT_APPLICABLE for c in candidates):
                return [note("unsupported_layer", None, quant=layer.quant, op=layer.op)]
            return [note("nothing_automatic", None, op=layer.op, opt_in=tuple(
                c.backend for c in candidates if c.status == Status.OPT_IN))]
        if selected is None:
            return []
        chosen = self._specs[layer.op, selected]
        if chosen.execution == "weight_only" and layer.quant == "nvfp4":
            return [note("weight_only", selected,
                         source=self.run.engine.cite("weight_only", WEIGHT_ONLY_SOURCE))]
        if chosen.execution == "reference":
            return [note("reference", selected)]
        return []
