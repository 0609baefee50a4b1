"""Why the winner of a decision beat the next usable backend (issue 32: a plan a user can act
on): the next-ranked backend that could also run the layer, and the rule or order that put it
behind, from the decision's own data (its candidates in rank order and its notes: request,
fallback, measured, preference; selector.core.notes).

`by` is one of:
- `request`: policy.<op>_backend asked for the winner (an ordered request lists it first);
- `measured`: policy.preference=measured and the profile's medians ordered the two;
- `opt_in`: the next one passes every rule but is opt-in (its opt-in rule and source);
- `preference`: a `preference:` entry of the winner's file gave it a better rank (reason, source);
- `rank`: the catalogue's preference order (each backend file's `rank:`, lower runs first);
- `only`: no other backend could run the layer.
A fallback (policy.strict=false after a refused request) says so before its rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.decision import Decision

USABLE = ("eligible", "opt_in")
BY = ("request", "measured", "opt_in", "preference", "rank", "only")


@dataclass(frozen=True)
class Beat:
    winner: str
    next: Optional[str]  # the next-ranked usable backend (None: the only one)
    next_status: Optional[str]  # eligible | opt_in
    by: str  # one of BY
    text: str
    source: str = ""
    fallback: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"winner": self.winner, "next": self.next, "next_status": self.next_status,
                "by": self.by, "text": self.text, "source": self.source,
                "fallback": self.fallback}


def _note(d: Decision, kind: str) -> Optional[Any]:
    found = d.notes_of(kind)
    return found[0] if found else None


def _measured(d: Decision, win: str, name: str, status: str, prefix: str,
              fell: bool) -> Optional[Beat]:
    """The winner beat `name` by the profile's measurement, or None (no measurement of it)."""
    measured = _note(d, "measured")
    if measured is None or status != "eligible":
        return None
    times = {t["backend"]: t["median_ms"] for t in measured.data["times"]}
    if win not in times:
        return None
    theirs = f"{name} {times[name]:.3g} ms" if name in times else f"{name} not measured (static order)"
    return Beat(win, name, status, "measured",
                f"{prefix}measured: {win} {times[win]:.3g} ms vs {theirs} at "
                f"{measured.data['tokens']} tokens", f"profile {measured.data['profile']}", fell)


def beat(d: Optional[Decision], reasons: bool = True) -> Optional[Beat]:
    """The reason `d.selected` beat the next usable backend, or None when nothing was
    selected. `reasons` False: a preference is said by its rank alone, without the catalogue's
    reason (which tells vLLM's order: not said in another engine's plan)."""
    if d is None or d.selected is None:
        return None
    win, op = d.selected, d.layer.op
    key = f"policy.{op}_backend"
    names = [c.backend for c in d.candidates]
    others = [c for c in d.candidates if c.backend != win and str(c.status) in USABLE]
    fell = _note(d, "fallback")
    prefix = (f"policy.strict=false fell back to automatic selection ({key}={d.requested} "
              "fails its rules); " if fell is not None else "")
    if not others:
        rejected = sum(str(c.status) == "rejected" for c in d.candidates)
        return Beat(win, None, None, "only", f"{prefix}{win} is the only backend that can run "
                    f"this layer ({rejected} rejected, the others do not implement "
                    f"{d.layer.quant})", fallback=fell is not None)
    nxt = others[0]
    name, status = nxt.backend, str(nxt.status)
    requested = [r for r in d.requested.split(",") if r and r != "auto"]
    if fell is None and win in requested:
        if name in requested and requested.index(name) > requested.index(win):
            why = f"{key}={d.requested} lists {win} before {name}"
        elif names.index(name) < names.index(win):
            why = (f"{win} was requested ({key}={d.requested}); automatic selection would "
                   f"choose {name}, which ranks first")
        else:
            why = f"{win} was requested ({key}={d.requested}); {name} ranks next"
        return Beat(win, name, status, "request", why)
    by_time = _measured(d, win, name, status, prefix, fell is not None)
    if by_time is not None:
        return by_time
    if status == "opt_in":
        r = nxt.reasons[0] if nxt.reasons else None
        why = r.message if r is not None else "opt-in"
        where = "ranks before" if names.index(name) < names.index(win) else "ranks next after"
        return Beat(win, name, status, "opt_in",
                    f"{prefix}{name} {where} {win} but is opt-in ({why}); admit it with "
                    f"policy.allow_opt_in=[{name}] or request it with {key}={name}",
                    r.source if r is not None else "", fell is not None)
    pref = next((n for n in d.notes_of("preference") if n.backend == win), None)
    rank = pref.data["rank"] if pref is not None else None
    their = next((o["rank"] for o in pref.data["outranks"] if o["backend"] == name), None) \
        if pref is not None else None
    ranks = f" (rank {rank} < {their})" if rank is not None and their is not None else ""
    if pref is not None and pref.data.get("reason") and reasons:
        return Beat(win, name, status, "preference",
                    f"{prefix}{win} outranks {name}{ranks}: {pref.data['reason']}",
                    str(pref.data.get("source") or ""), fell is not None)
    return Beat(win, name, status, "rank",
                f"{prefix}{win} outranks {name}{ranks} in the catalogue's preference order",
                f"the rank: of conf/backend/{op}/*.yaml, lower runs first",
                fell is not None)


def beat_text(d: Optional[Decision], reasons: bool = True) -> str:
    b = beat(d, reasons)
    if b is None:
        return ""
    return b.text + (f" ({b.source})" if b.source else "")
