"""`explain --why BACKEND`: one backend's verdict and every reason for it, nothing else."""
from __future__ import annotations

import json
from typing import Tuple

from selector.core.decision import Decision
from selector.core.errors import bad_value
from selector.core.schema import USABLE
from selector.core.text import join_lines, printable


def why(d: Decision, backend: str, fmt: str) -> Tuple[str, bool]:
    """(the rendering, whether the backend could run the layer). Bad name: exit 2 naming the
    op's backends."""
    name = backend.strip().replace("-", "_").lower()
    names = [c.backend for c in d.candidates]
    if name not in names:
        raise bad_value("--why", backend, names, what=f"{d.layer.op} backend")
    c = d.candidate(name)
    usable = c.status in USABLE
    if fmt == "json":
        return json.dumps({**c.to_dict(), "selected": d.selected, "outcome": d.outcome},
                          indent=2), usable
    if fmt == "line":
        first = f" [{c.reasons[0].rule}] {c.reasons[0].message}" if c.reasons else ""
        return printable(f"{c.backend}: {c.status}{first}"), usable
    lines = [f"{c.backend}: {c.status}" + ("" if c.reasons else " (passes every rule)")]
    lines += [f"  [{r.rule}] {r.message} ({r.source})" for r in c.reasons]
    lines.append(f"selected for this layer: {d.selected or 'none'} ({d.outcome})")
    return join_lines(lines), usable  # messages and sources come from files: escaped
