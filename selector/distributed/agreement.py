"""One decision for every rank, computed without torch from what each rank contributed.

A rank contributes a fingerprint: its platform and, per layer, every candidate's status and
reasons (`fingerprint.encode`). Ranks with byte-identical fingerprints form one group and are compared once
(`agree` works per group, and per distinct combination of group verdicts). A backend is usable
everywhere only if it is usable on every rank; the preference order is the lowest rank's. The
result names the ranks and hosts where a backend failed. `selector/distributed/__init__.py` moves the
bytes over torch.distributed.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from selector.core.decision import candidate_table, find_candidate
from selector.core.engine_view import EngineView
from selector.core.errors import SelectorError
from selector.core.layer import make_layer
from selector.distributed.fingerprint import VERSION

USABLE = ("eligible", "opt_in")
WRAP = 100
_MAX_HOSTS = 4  # hosts named in one place before "and N more"


# -- the agreed result -------------------------------------------------------------------------
class Group(NamedTuple):
    """Ranks whose fingerprints are byte-identical (one comparison for all of them)."""
    ranks: Tuple[int, ...]
    hosts: Tuple[str, ...]  # aligned with ranks
    body: Dict[str, Any]


class Reason(NamedTuple):
    rule: str
    message: str  # prefixed with the ranks when it holds on some ranks only
    source: str
    ranks: Tuple[int, ...]
    need: str = ""  # the short phrase of the summary ("need SM 10.x")
    severity: str = "error"

    def to_dict(self) -> Dict[str, Any]:
        return {"rule": self.rule, "message": self.message, "source": self.source,
                "ranks": list(self.ranks)}


class Candidate(NamedTuple):
    backend: str
    status: str
    reasons: Tuple[Reason, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {"backend": self.backend, "status": self.status,
                "reasons": [r.to_dict() for r in self.reasons]}


class RankGroup(NamedTuple):
    ranks: Tuple[int, ...]
    hosts: Tuple[str, ...]  # distinct, in rank order
    platform: Dict[str, Any]
    where: str  # "ranks 4-7 (host b)"

    def to_dict(self) -> Dict[str, Any]:
        return {"ranks": list(self.ranks), "hosts": list(self.hosts), "platform": self.platform}


@dataclass(frozen=True)
class AgreedDecision:
    """The decision every rank of the group takes, with the interface of a Decision:
    `selected`, `ok`, `outcome`, `candidates`/`candidate(name)`, `notes`, `warnings`,
    `entry_point`, `summary()`, `log_line()`, `instantiate(**options)`, `to_dict()`, `str()`;
    plus `ranks` (one entry per distinct platform) and `local` (this rank's own decision,
    which may differ: build with `instantiate()`, not `local.instantiate()`)."""
    layer: Dict[str, Any]
    requested: str
    selected: Optional[str]
    candidates: Tuple[Candidate, ...]
    notes: Tuple[str, ...]
    ranks: Tuple[RankGroup, ...]
    local: Any = field(default=None, compare=False, repr=False)
    warnings: Tuple[Tuple[str, Reason], ...] = ()  # (backend, reason); reasons name their ranks
    hint: str = ""

    def candidate(self, backend: str) -> Candidate:
        return find_candidate(self.candidates, backend, self.layer)

    @property
    def ok(self) -> bool:
        return self.selected is not None

    @property
    def platform(self) -> Dict[str, Any]:
        """This rank's platform (the lowest rank's without a local decision)."""
        if self.local is not None:
            return dict(self.local.platform)
        return dict(self.ranks[0].platform) if self.ranks else {}

    def platform_json(self) -> Dict[str, Any]:
        """The `platform` object of the decision's JSON (a copy), as Decision.platform_json."""
        out: Dict[str, Any] = json.loads(json.dumps(self.platform))
        return out

    @property
    def entry_point(self) -> Optional[str]:
        """The selected backend's implementation, read from this rank's catalogue."""
        if self.selected is None or self.local is None:
            return None
        return getattr(self.local.candidate(self.selected), "entry_point", None)

    def as_decision(self) -> Any:
        """The agreed verdict as a selector.Decision of this rank (its catalogue's entry
        points, its platform): what `outcome`, `summary`, `log_line` and `instantiate` read, so
        an agreed decision answers them exactly as a Decision would."""
        from selector.core.decision import Candidate as OwnCandidate
        from selector.core.decision import Decision
        from selector.core.notes import note, text
        from selector.core.rules import Reason as OwnReason
        from selector.core.schema import Status

        def own(r: Reason) -> OwnReason:
            return OwnReason(r.rule, r.message, r.source, r.need or r.message, r.severity)

        def entry_point(name: str) -> Optional[str]:
            if self.local is None:
                return None
            try:
                return getattr(self.local.candidate(name), "entry_point", None)
            except KeyError:
                return None

        # the warnings' notes keep their structure (severity, backend): marks and log lines read it
        warned = {text(n): n for n in getattr(self.local, "note_data", ())}  # this rank's own
        for b, r in self.warnings:
            w = note("rule_warning", b, rule=r.rule, message=r.message, source=r.source)
            warned[text(w)] = w
        engine = None
        if self.local is not None and getattr(self.local, "engine", None) is not None and \
                self.local.selected == self.selected:
            engine = self.local.engine
        return Decision(make_layer(self.layer), self.platform, self.requested, self.selected,
                        tuple(OwnCandidate(c.backend, Status(c.status),
                                           tuple(own(r) for r in c.reasons),
                                           entry_point(c.backend))
                              for c in self.candidates),
                        ((note("no_packages", text=self.hint),) if self.hint else ())
                        + tuple(warned.get(n) or note("agreement", text=n) for n in self.notes),
                        getattr(self.local, "platform_label", ""),
                        tuple((b, own(r)) for b, r in self.warnings), engine)

    @property
    def platform_label(self) -> str:
        return str(getattr(self.local, "platform_label", "") or "")

    @property
    def engine(self) -> Optional[EngineView]:
        """The engine's name and flags for the agreed backend (this rank's, when it chose the
        same backend; None otherwise or without an engine)."""
        view: Optional[EngineView] = self.as_decision().engine
        return view

    @property
    def outcome(self) -> str:
        """As Decision.outcome, for the agreed verdict."""
        return str(self.as_decision().outcome)

    def summary(self) -> str:
        return str(self.as_decision().summary())

    @property
    def guard(self) -> str:
        """As Decision.guard: the unproven-release line, or ''."""
        return str(self.as_decision().guard)

    @property
    def note_data(self) -> Tuple[Any, ...]:
        """As Decision.note_data: the agreed notes as structured records ('agreement' notes, and
        the no-packages hint)."""
        return tuple(self.as_decision().note_data)

    def notes_of(self, kind: str) -> Tuple[Any, ...]:
        """As Decision.notes_of."""
        return tuple(self.as_decision().notes_of(kind))

    @property
    def marks(self) -> Tuple[str, ...]:
        """As Decision.marks, for the agreed verdict."""
        return tuple(self.as_decision().marks)

    def log_line(self) -> str:
        """As Decision.log_line, for the agreed verdict (reasons name the ranks they hold on)."""
        return str(self.as_decision().log_line())

    def instantiate(self, **options: Any) -> Any:
        """The agreed backend's object, built from this rank's catalogue (as
        Decision.instantiate; the object's gate checks the agreed verdict). Needs this rank's
        own decision (`local`): agree() and agree_all() pass it."""
        if self.selected is not None and self.local is None:
            raise SelectorError("nothing to instantiate from: this agreed decision has no local "
                                "decision (pass this rank's decisions to agree())")
        return self.as_decision().instantiate(**options)

    def to_dict(self) -> Dict[str, Any]:
        return {"layer": dict(self.layer), "requested": self.requested,
                "selected": self.selected, "candidates": [c.to_dict() for c in self.candidates],
                "notes": list(self.notes), "ranks": [g.to_dict() for g in self.ranks],
                "outcome": self.outcome, "summary": self.summary(),
                "warnings": [dict(r.to_dict(), backend=b) for b, r in self.warnings]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def __str__(self) -> str:
        return render_text(self)


def agree(groups: Sequence[Group], local: Union[Sequence[Any], BaseException, None] = None
          ) -> List[AgreedDecision]:
    """The agreed decision per layer, identical on every rank, or one SelectorError, identical
    on every rank (a rank could not decide, ranks decide different layers or under different
    policies or catalogues, or policy.strict=true refuses)."""
    hosts = {r: h for g in groups for r, h in zip(g.ranks, g.hosts)}
    world = len(hosts)
    versions = [f"{where(g.ranks, hosts)} sent fingerprint version {g.body.get('v')!r}"
                for g in groups if g.body.get("v") != VERSION]
    if versions:
        raise SelectorError("selector.distributed: no agreement, every rank stops: "
                            + "; ".join(versions) + f", this selector reads version {VERSION}: "
                            "run the same selector release on every rank")
    failed = [f"{where(g.ranks, hosts)} could not decide: {g.body['error']}"
              for g in groups if g.body.get("error") is not None]
    if failed:
        raise SelectorError("selector.distributed: no agreement, every rank stops: "
                            + "; ".join(failed))
    _check_comparable(groups, hosts)
    rank_groups = tuple(RankGroup(g.ranks, tuple(dict.fromkeys(g.hosts)), g.body["platform"],
                                  where(g.ranks, hosts)) for g in groups)
    lead = groups[0].body
    out: List[AgreedDecision] = []
    merged: Dict[Tuple[int, ...], Tuple[str, Optional[str], Tuple[Candidate, ...],
                                        Tuple[str, ...], bool,
                                        Tuple[Tuple[str, Reason], ...]]] = {}
    refused: Dict[str, List[int]] = {}
    local_list = None if local is None or isinstance(local, BaseException) else list(local)
    columns = zip(*[[v for _, v in g.body["per_layer"]] for g in groups])
    for i, key in enumerate(columns):
        layer = lead["layers"][lead["per_layer"][i][0]]
        got = merged.get(key)
        if got is None:  # once per distinct combination of verdicts, not per layer or rank
            got = merged[key] = _merge(
                [(g, g.body["verdicts"][v]) for g, v in zip(groups, key)], layer, hosts, world)
        requested, selected, candidates, notes, refuse, warnings = got
        d = AgreedDecision(layer, requested, selected, candidates, notes, rank_groups,
                           local=local_list[i] if local_list is not None else None,
                           warnings=warnings)
        if refuse:
            refused.setdefault(str(d), []).append(i)
        out.append(d)
    if refused:
        raise SelectorError("selector.distributed: policy.strict=true refuses on every rank: "
                            + "\n\n".join(f"layer(s) {spans(idx)}:\n{table}"
                                          for table, idx in refused.items()))
    return out


def _check_comparable(groups: Sequence[Group], hosts: Dict[int, str]) -> None:
    """Ranks must decide the same layers in the same order under the same catalogue."""
    lead = groups[0]
    problems = []
    for g in groups[1:]:
        a, b = lead.body, g.body
        if len(a["per_layer"]) != len(b["per_layer"]):
            problems.append(f"{where(lead.ranks, hosts)} decided {len(a['per_layer'])} layers, "
                            f"{where(g.ranks, hosts)} {len(b['per_layer'])}")
            continue
        pa, pb = a["per_layer"], b["per_layer"]
        pairs = [tuple(x + y) for x, y in zip(pa, pb)] if pa != pb else None
        # each distinct pair of entries is compared once, in layer order
        for key in dict.fromkeys(pairs or (tuple(x + x) for x in pa)):
            problem = _differ(a, b, *key)
            if problem:
                at = (pairs or [tuple(x + x) for x in pa]).index(key)
                problems.append(f"layer {at}: {where(lead.ranks, hosts)} and "
                                f"{where(g.ranks, hosts)} {problem}")
                break
    if problems:
        raise SelectorError("selector.distributed: no agreement, every rank stops: "
                            + "; ".join(problems)
                            + ". Every rank must decide the same layers, in the same order, "
                            "with the same policy and catalogue")


def _differ(a: Dict[str, Any], b: Dict[str, Any], la: int, va: int, lb: int, vb: int
            ) -> Optional[str]:
    """How two ranks' entries for one layer differ in what must be equal, or None."""
    x, y = a["layers"][la], b["layers"][lb]
    if x != y:
        return "decide different layers: " + ", ".join(
            f"{k} {x.get(k)!r} vs {y.get(k)!r}" for k in sorted(set(x) | set(y))
            if x.get(k) != y.get(k))
    ra, rb = a["verdicts"][va]["requested"], b["verdicts"][vb]["requested"]
    if ra != rb:
        return f"decide under different policies: requested {ra} vs {rb}"
    na = {c[0] for c in a["verdicts"][va]["candidates"]}
    nb = {c[0] for c in b["verdicts"][vb]["candidates"]}
    if na != nb:
        return f"decide under different catalogues: {', '.join(sorted(na ^ nb))}"
    return None


def _merge(verdicts: List[Tuple[Group, Dict[str, Any]]], layer: Dict[str, Any],
           hosts: Dict[int, str], world: int
           ) -> Tuple[Any, Optional[str], Tuple[Candidate, ...], Tuple[str, ...], bool,
                      Tuple[Tuple[str, Reason], ...]]:
    """(requested, selected, candidates, notes, strict refusal, warnings) for one layer over
    all groups."""
    op = layer.get("op")
    lead = verdicts[0][1]
    requested = lead["requested"]
    by_name = [{c[0]: c for c in v["candidates"]} for _, v in verdicts]
    merged: Dict[str, Tuple[str, Tuple[Reason, ...], Tuple[int, ...]]] = {}
    notes: List[str] = []
    for name in (c[0] for c in lead["candidates"]):  # the lowest rank's preference order
        per = [(g, table[name]) for (g, _), table in zip(verdicts, by_name)]
        statuses = [c[1] for _, c in per]
        if all(s in USABLE for s in statuses):
            status = "opt_in" if "opt_in" in statuses else "eligible"
            failing = [(g, c) for g, c in per if c[1] == "opt_in"]
        else:
            status = "rejected" if "rejected" in statuses else "not_applicable"
            failing = [(g, c) for g, c in per if c[1] not in USABLE]
        reasons = _reasons(failing, hosts, world)
        bad = tuple(sorted(r for g, _ in failing for r in g.ranks))
        merged[name] = (status, reasons, bad)
        if status not in USABLE and len(bad) < world:
            notes.append(f"{name} {status.replace('_', ' ')} on {where(bad, hosts)}: "
                         + "; ".join(dict.fromkeys(r[1] for _, c in failing for r in c[2])))
    auto = next((n for n, m in merged.items() if m[0] == "eligible"), None)
    selected, refuse = auto, False
    if requested != "auto":
        selected, refuse = _requested(verdicts, by_name, merged, str(op), requested, auto,
                                      hosts, notes)
    own = [(g, v["selected"]) for g, v in verdicts if v["selected"] != selected]
    notes.extend(f"{where(g.ranks, hosts)} alone would have chosen {sel or 'nothing'}; "
                 f"every rank runs {selected or 'nothing'}" for g, sel in own)
    if not own:  # every rank chose this alone: the notes all ranks share still hold
        shared = [n for n in lead["notes"] if all(n in v["notes"] for _, v in verdicts)]
        notes = shared + notes
    candidates = tuple(Candidate(n, "selected" if n == selected else m[0], m[1])
                       for n, m in merged.items())
    warned: Dict[str, List[Tuple[Group, Sequence[str]]]] = {}
    for g, v in verdicts:
        for w in v.get("warnings") or ():
            warned.setdefault(w[0], []).append((g, w[1:]))
    warnings = tuple((b, r) for b, items in warned.items()
                     for r in _with_ranks(items, hosts, world))
    return requested, selected, candidates, tuple(notes), refuse, warnings


def _requested(verdicts: List[Tuple[Group, Dict[str, Any]]], by_name: List[Dict[str, Any]],
               merged: Dict[str, Tuple[str, Tuple[Reason, ...], Tuple[int, ...]]], op: str,
               requested: str, auto: Optional[str], hosts: Dict[int, str], notes: List[str]
               ) -> Tuple[Optional[str], bool]:
    """(selected, strict refusal) for an explicit request over all groups, its note added to
    `notes`: the requested backend where it is usable everywhere, else automatic selection's
    (`auto`), or nothing where policy.strict=true refuses on a rank it fails on."""
    key = f"policy.{op}_backend={requested}"
    status, _, bad = merged[requested]
    if status in USABLE:
        return requested, False
    if status == "not_applicable":
        notes.append(f"{key} does not implement this layer on {where(bad, hosts)}; "
                     f"automatic selection chose {auto or 'nothing'} for every rank")
        return auto, False
    if any(v["strict"] for (_, v), table in zip(verdicts, by_name)
           if table[requested][1] == "rejected"):
        notes.append(f"{key} was requested but fails on {where(bad, hosts)}; "
                     "policy.strict=true refuses to fall back on every rank"
                     + (f" (with policy.strict=false: {auto})" if auto else ""))
        return None, True
    notes.append(f"{key} was requested but fails on {where(bad, hosts)}; "
                 f"policy.strict=false: every rank fell back to {auto or 'nothing'}")
    return auto, False


def _reasons(failing: List[Tuple[Group, Any]], hosts: Dict[int, str], world: int
             ) -> Tuple[Reason, ...]:
    """Reasons of the failing groups, one entry per distinct reason, with the ranks it holds on;
    prefixed with them unless it holds on every rank."""
    return _with_ranks([(g, r) for g, c in failing for r in c[2]], hosts, world)


def _with_ranks(items: List[Tuple[Group, Sequence[str]]], hosts: Dict[int, str], world: int
                ) -> Tuple[Reason, ...]:
    """One Reason per distinct [rule, message, source(, need, severity)], with the ranks of
    the groups it came from."""
    ranks_of: Dict[Tuple[str, ...], List[int]] = {}
    for g, r in items:
        ranks_of.setdefault(tuple(r), []).extend(g.ranks)
    out = []
    for fields, ranks in ranks_of.items():
        rule, message, source = fields[:3]
        need, severity = (fields[3], fields[4]) if len(fields) == 5 else ("", "error")
        ranks_t = tuple(sorted(ranks))
        text = message if len(ranks_t) == world else f"{where(ranks_t, hosts)}: {message}"
        out.append(Reason(rule, text, source, ranks_t, need or message, severity))
    return tuple(out)


def where(ranks: Sequence[int], hosts: Dict[int, str]) -> str:
    """'rank 5 (host b)', 'ranks 0-3, 8 (host a), ranks 4-7 (host b)'."""
    by_host: Dict[str, List[int]] = {}
    for r in sorted(ranks):
        by_host.setdefault(hosts.get(r, "?"), []).append(r)
    parts = [f"{'rank' if len(rs) == 1 else 'ranks'} {spans(rs)} (host {h})"
             for h, rs in list(by_host.items())[:_MAX_HOSTS]]
    rest = list(by_host.items())[_MAX_HOSTS:]
    if rest:
        parts.append(f"{sum(len(rs) for _, rs in rest)} more ranks on {len(rest)} more hosts")
    return ", ".join(parts)


def spans(values: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3, 8'."""
    out: List[str] = []
    start = prev = None
    for v in sorted(values):
        if prev is not None and v == prev + 1:
            prev = v
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = v
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)


# -- text --------------------------------------------------------------------------------------
def render_text(d: AgreedDecision) -> str:
    lay = d.layer
    what = f"{lay.get('op')} layer: {lay.get('quant')}"
    if lay.get("op") == "moe":
        what += f", {lay.get('activation')}, " + ("gated" if lay.get("act_and_mul") else
                                                   "non-gated")
    world = sum(len(g.ranks) for g in d.ranks)
    lines = [what, f"agreed over {world} rank(s), {len(d.ranks)} distinct platform(s):"]
    lines.extend(f"  {g.where}: {_platform_text(g.platform)}" for g in d.ranks)
    lines += [f"requested: {d.requested}", f"selected: {d.selected or 'none'}", ""]
    lines += candidate_table(d.candidates, "passes every rule on every rank")
    if d.notes:
        lines += ["", "notes:"]
        for n in d.notes:
            lines.extend(textwrap.wrap(n, width=WRAP, initial_indent="  - ",
                                       subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(lines)


def _platform_text(p: Dict[str, Any]) -> str:
    cap = f"SM {p['capability']}" if p.get("capability") else "no GPU"
    cuda = f"CUDA {p['cuda']}" if p.get("cuda") else "no CUDA"
    pk = ", ".join(f"{n} {v}" for n, v in (p.get("packages") or {}).items() if v is not None)
    return f"{cap}, {cuda}; {pk or 'no kernel packages'}"
