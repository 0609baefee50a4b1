"""A checkpoint plan's decisions in words: each group's fields and layers, and a decision in
three short lines (selected, what else could run, what could not and why) with what a profile
did for it and the selected backend's warnings. Used by plan.py and launch_plan.py."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.decision import Candidate, Decision


def planned(d: Any) -> bool:
    """Whether a decision is selector's to make: some backend implements its scheme (outcome
    'unsupported_layer': none does, and the engine's own oracle decides the layer)."""
    return d is not None and d.outcome != "unsupported_layer"


def _fields_text(f: Mapping[str, Any]) -> str:
    if f["op"] == "moe":
        gate = "gated" if f["act_and_mul"] else "non-gated"
        text = (f"{f['activation']} {gate}, hidden_size {f['hidden_size']}, intermediate_size "
                f"{f['intermediate_size']}, {f['num_experts']} experts, top_k {f['top_k']}")
        if f.get("swiglu_limit") is not None:
            text += f", swiglu_limit {f['swiglu_limit']:g}"
        if f.get("routing") is not None:
            text += f", routing {f['routing']}"
        if f.get("act_scale") is not None:
            text += f", activation scales per {f['act_scale']}"
        return text
    text = f"K {f['hidden_size']}, N {f['intermediate_size']}"
    if f.get("act_scale") is not None:
        text += f", activation scales per {f['act_scale']}"
    return text


def _layers_text(layers: Sequence[int]) -> str:
    if not layers:
        return ""
    runs, start, prev = [], layers[0], layers[0]
    for i in list(layers[1:]) + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    text = ",".join(runs)
    return text if len(text) <= 40 else text[:37] + "..."


def _needs(c: Candidate) -> List[str]:
    return list(dict.fromkeys(r.need for r in c.reasons if r.severity == "error"))


def _verdict(d: Decision) -> List[str]:
    """A decision in three short lines: selected, what else could run, what could not and why."""
    if not planned(d):
        return [f"selected: none: no backend of the catalogue implements {d.layer.quant} "
                f"{d.layer.op} layers; the engine's own oracle decides"]
    usable = [c.backend for c in d.candidates if c.status == "eligible"]
    opt = [c.backend for c in d.candidates if c.status == "opt_in"]
    rejected = [f"{c.backend} ({'; '.join(_needs(c))})" for c in d.candidates
                if c.status == "rejected"]
    na = [c.backend for c in d.candidates if c.status == "not_applicable"]
    head = f"selected: {d.selected or 'none'}"
    if d.requested != "auto":
        head += f" (requested {d.requested})"
    lines = [head]
    if usable or opt:
        lines.append("usable: " + ", ".join(usable + [f"{b} (opt-in)" for b in opt]))
    if rejected:
        lines.append("rejected: " + ", ".join(rejected))
    if na:
        lines.append("does not implement this scheme: " + ", ".join(na))
    return lines + profile_lines(d) + selected_warnings(d)


def profile_lines(d: Decision) -> List[str]:
    """What a profile did for the decision (`selector tune`'s, or a packaged one): the
    measurement that ranked the usable backends, or a warning that it has no time for the
    layer's cell, naming the nearest cell it has: a plan never leaves a layer silently
    unmeasured (issue #46)."""
    from selector.core.notes import text
    return [text(n) for n in d.notes_of("measured")] + \
        [f"warning: {text(n)}" for n in d.notes_of("profile_unmeasured")]


def selected_warnings(d: Decision) -> List[str]:
    """'warning: ...' for each warning-severity note about the selected backend (the same
    notes `--format line` marks), so that every format of the plan carries them."""
    from selector.core.notes import text
    return list(dict.fromkeys(f"warning: {text(n)}" for n in d.note_data
                              if n.severity == "warning" and n.backend == d.selected
                              and d.selected is not None))
