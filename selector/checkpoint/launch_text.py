"""The launch plan as text (`explain --model DIR engine=NAME`): the group table, the choices,
the conflicts and their answers, the engine's config files and the command."""
from __future__ import annotations

import shlex
import textwrap
from typing import TYPE_CHECKING, List, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.launch import Group, LaunchPlan
    from selector.checkpoint.launchers import Topology

WRAP = 100


def _sizes(g: Group, topo: Topology) -> str:
    f = g.per_rank
    if not f:
        return "-"
    if g.op == "moe":
        e = f.get("num_experts")
        local = f"{e // topo.ep} of {e} experts" if e and topo.ep > 1 and not e % topo.ep \
            else f"{e} experts"
        return f"{local}, H {f.get('hidden_size')}, I {f.get('intermediate_size')}"
    return f"K {f.get('hidden_size')}, N {f.get('intermediate_size')}"


def _projections_text(projections: Sequence[str]) -> str:
    names = [p.rsplit(".", 1)[-1] for p in projections]
    return "/".join(names) if len(names) <= 2 else f"{'/'.join(names[:2])}/+{len(names) - 2}"


def _table(lp: LaunchPlan) -> List[str]:
    """One row per layer group: its layers, scheme, per-rank sizes, backend and kernel."""
    from selector.checkpoint.plan import _layers_text
    rows = [("group", "layers", "scheme", "per rank", "backend", "kernel")]
    for g in lp.groups:
        what = g.kind if g.op == "moe" or not g.projections else \
            f"{g.kind} {_projections_text(g.projections)}"
        if g.decision is None:
            backend = "(not planned: the engine decides)"
        elif not g.planned:
            backend = f"(no backend implements {g.scheme}: the engine decides)"
        elif g.backend:
            backend = g.backend if g.engine_backend in (None, g.backend) else \
                f"{g.backend} ({lp.engine}: {g.engine_backend})"
        else:
            backend = f"none: {g.decision.outcome}"
        rows.append((what, _layers_text(g.layers) or "-", g.scheme, _sizes(g, lp.topology),
                     backend, ", else ".join(g.kernels(lp.launch)) or "-"))
    width = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  " + "  ".join(c.ljust(width[i]) for i, c in enumerate(r[:5])) + f"  {r[5]}"
             for r in rows]
    for g in lp.groups:
        lines.extend(f"  !! {g.kind}: {p}" for p in g.problems)
        if g.planned and g.decision is not None and not g.decision.selected:
            lines.extend(textwrap.wrap(f"!! {g.kind}: {g.decision.summary()}", width=WRAP,
                                       initial_indent="  ", subsequent_indent="     "))
    return lines


def _conflicts(lp: LaunchPlan) -> List[str]:
    """Each conflict: the layers it breaks and what to pass instead."""
    from selector.checkpoint.plan import _layers_text
    lines: List[str] = []
    for c in lp.conflicts:
        lines.extend(textwrap.wrap(f"!! {c.problem}", width=WRAP, subsequent_indent="   "))
        for b in c.breaks:
            lines.extend(textwrap.wrap(
                f"breaks {b.group.kind} ({b.group.scheme}, layers "
                f"{_layers_text(b.group.layers) or '-'}): {b.message} ({b.source})",
                width=WRAP, initial_indent="   - ", subsequent_indent="     "))
        for i, o in enumerate(c.instead):
            what = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in o.env),
                             *(shlex.quote(f) for f in o.flags),
                             *(f"{k}={v}" for k, v in o.config)])
            lines.extend(textwrap.wrap(f"{'instead (in the flags above)' if i == 0 else 'or'}: "
                                       f"{what or '(no flag)'}: {o.why}",
                                       width=WRAP, initial_indent="   ",
                                       subsequent_indent="     "))
        if not c.instead:
            lines.append(f"   no single value serves every layer: {lp.launch.no_answer()}")
    return lines


def render(lp: LaunchPlan) -> str:
    topo, par = lp.topology, lp.parallel
    lines = [f"launch plan for {lp.label}: tp {par.tp}, dp {par.dp}, ep {par.ep} "
             f"(MoE layers: TP {topo.moe_tp}, EP {topo.ep}; dense layers: TP {topo.linear_tp})"]
    lines += _table(lp)
    lines.append("")
    lines.append(f"flags: {' '.join(shlex.quote(f) for f in lp.flags) or '(none)'}")
    if lp.config:
        lines.append("config: " + " ".join(f"{k}={v}" for k, v in lp.config))
    lines.append("env: " + (" ".join(f"{k}={shlex.quote(v)}" for k, v in lp.env) or "(none)"))
    lines += _conflicts(lp)
    for n in lp.notes:
        lines.extend(textwrap.wrap(f"note: {n}", width=WRAP, subsequent_indent="  "))
    for name, text in lp.files().items():
        lines.append(f"{name} (the config file the command reads):")
        lines.extend(f"  {line}" for line in text.splitlines())
    lines.append(f"command: {lp.command()}")
    return "\n".join(lines)


__all__ = ["render"]
