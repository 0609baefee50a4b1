"""The launch plan's parts and its text: the layer groups of a checkpoint as one engine runs
them (`Group`), the choices passed to the engine (`Asked`, `Option`), the layers a choice breaks
(`Break`, `Conflict`), the plan itself (`LaunchPlan`, its JSON object) and `render`, the plan
as text. checkpoint/launch.py makes the plan.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.checkpoint.beat import beat, beat_text
from selector.checkpoint.launchers import Auto, Launcher, Topology
from selector.core.parallel import Parallel
from selector.core.text import join_lines, shell_assignment, shell_word

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.plan import Plan
    from selector.core.decision import Decision
    from selector.core.engines import Choice

WRAP = 100


# ---------------------------------------------------------------------------------------------
# Layer groups

@dataclass(frozen=True)
class Group:
    """One layer group (a kind of the checkpoint, and one per-rank shape of it)."""
    kind: str
    op: str
    scheme: str  # a layer.quant value (nvfp4, fp8_block, mxfp4 ...) | unquantized | int | unknown
    layers: Tuple[int, ...]
    modules: int
    projections: Tuple[str, ...]
    per_rank: Dict[str, Any]  # the layer fields one rank runs (sizes per rank)
    decision: Optional[Decision] = None
    problems: Tuple[str, ...] = ()
    why: str = ""  # for a group selector does not plan: the quantization config's rule
    # the engine runs this group's backend whatever is asked (Launcher.fixed): why, with source
    fixed: str = ""

    @property
    def planned(self) -> bool:
        """selector decides the group: it has a layer.quant value some backend implements (else
        the engine's own oracle decides it, checked against the flags by its tables)."""
        from selector.checkpoint.plan_text import planned
        return planned(self.decision)

    @property
    def backend(self) -> Optional[str]:
        return self.decision.selected if self.decision is not None else None

    @property
    def engine_backend(self) -> Optional[str]:
        d = self.decision
        if d is None or d.engine is None:
            return None
        return d.engine.backend

    def kernels(self, launch: Launcher) -> Tuple[str, ...]:
        """The engine's kernel for the selected backend: the decision's own word when it names
        one (`engine.kernel`), else the engine's table (its Launcher)."""
        d = self.decision
        if d is None or d.selected is None:
            return ()
        if d.engine is not None and d.engine.kernel:
            return (d.engine.kernel,)
        return launch.kernels(self.op, self.scheme, self.engine_backend)

    def to_dict(self, launch: Launcher) -> Dict[str, Any]:
        from selector.checkpoint.plan_text import selected_warnings
        d = self.decision
        return {"kind": self.kind, "op": self.op, "scheme": self.scheme,
                "layers": list(self.layers), "modules": self.modules,
                "projections": list(self.projections), "per_rank": dict(self.per_rank),
                "selected": self.backend, "engine_backend": self.engine_backend,
                "kernel": list(self.kernels(launch)),
                "outcome": d.outcome if d is not None else None,
                "summary": d.summary() if d is not None else None,
                "problems": list(self.problems), "why": self.why,
                "warnings": [w.removeprefix("warning: ") for w in selected_warnings(d)]
                if d is not None else [],
                "beat": b.to_dict() if (b := beat(d)) is not None else None}


# ---------------------------------------------------------------------------------------------
# Choices (flags, environment variables, config keys)

@dataclass(frozen=True)
class Break:
    """Layers a choice breaks: the group, the engine's reason, its source."""
    group: Group
    message: str
    source: str

    def to_dict(self) -> Dict[str, Any]:
        g = self.group
        return {"kind": g.kind, "scheme": g.scheme, "layers": list(g.layers),
                "message": self.message, "source": self.source}


@dataclass(frozen=True)
class Option:
    """What to pass instead: flags, variables and config keys, and why it holds."""
    flags: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...]
    why: str
    config: Tuple[Tuple[str, Any], ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"flags": list(self.flags), "env": dict(self.env), "why": self.why,
                "config": dict(self.config)}


@dataclass(frozen=True)
class Conflict:
    """A choice one op needs that does not suit every layer of that op."""
    op: str
    flag: Tuple[str, ...]  # what the planned layers alone would ask for (may be empty)
    problem: str
    breaks: Tuple[Break, ...]
    instead: Tuple[Option, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "flag": list(self.flag), "problem": self.problem,
                "breaks": [b.to_dict() for b in self.breaks],
                "instead": [o.to_dict() for o in self.instead]}


@dataclass
class Asked:
    """What the plan passes to the engine: flags, environment variables, config keys."""
    flags: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    config: Dict[str, Any] = field(default_factory=dict)

    def add(self, choice: Choice, value: str) -> None:
        if choice.kind == "flag":
            self.flags += [choice.key, value]
        elif choice.kind == "env":
            self.env[choice.key] = value
        else:
            self.config[choice.key] = [value] if choice.list else value

    def without(self, key: str) -> Asked:
        """This request less one flag (and its value), variable or config key."""
        flags: List[str] = []
        for i in range(0, len(self.flags), 2):  # Asked.add adds a flag and its value
            if self.flags[i] != key:
                flags += self.flags[i:i + 2]
        return Asked(flags, {k: v for k, v in self.env.items() if k != key},
                     {k: v for k, v in self.config.items() if k != key})

    def option(self, why: str) -> Option:
        return Option(tuple(self.flags), tuple(sorted(self.env.items())), why,
                      tuple(sorted(self.config.items())))


def asked(choice: Choice, value: str, env: Mapping[str, str] = ()) -> Asked:  # type: ignore[assignment]
    a = Asked(env=dict(env))
    a.add(choice, value)
    return a


@dataclass(frozen=True)
class LaunchPlan:
    plan: Plan
    engine: str
    label: str
    parallel: Parallel
    topology: Topology
    groups: Tuple[Group, ...]
    flags: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...]
    conflicts: Tuple[Conflict, ...] = ()
    notes: Tuple[str, ...] = field(default=())
    config: Tuple[Tuple[str, Any], ...] = ()  # keys of the engine's config file
    launch: Launcher = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    # per planned group: (group, the engine's own choice or None, the choice key, passed?)
    automatic: Tuple[Tuple[Group, Optional[Auto], str, bool], ...] = ()
    problems: Tuple[str, ...] = ()  # why the engine does not start here at all

    @property
    def ok(self) -> bool:
        """Every planned group has a backend, every size splits, and no conflict is left
        without an answer."""
        return not self.problems and \
            all(not g.planned or g.decision.selected  # type: ignore[union-attr]
                for g in self.groups) and \
            not any(g.problems for g in self.groups) and \
            all(c.instead for c in self.conflicts)

    @property
    def runs(self) -> bool:
        """The plan has a command: `ok`, and the checkpoint's plan decided every layer, except
        where the engine runs its own backend whatever is asked (a group with `fixed`: a
        request refused there does not change what runs, and the group names what does)."""
        if not self.ok:
            return False
        if self.plan.ok:
            return True
        if self.plan.problems():
            return False
        from selector.checkpoint.plan_text import planned
        fixed = {(g.kind, g.projections) for g in self.groups if g.fixed}
        return all(s.decision.selected or not planned(s.decision) or
                   (k.component, s.projections) in fixed
                   for k in self.plan.kinds if k.quant for s in k.shapes)

    def command(self) -> str:
        return self.launch.command(self.plan.model_dir, self.flags, self.env, self.config)

    def files(self) -> Dict[str, str]:
        """The config files the command reads (TensorRT-LLM's extra_llm_api_options)."""
        return self.launch.files(self.config)

    def to_dict(self) -> Dict[str, Any]:
        return {"engine": self.engine, "label": self.label,
                "parallel": self.parallel.to_dict(), "topology": self.topology.to_dict(),
                "groups": [g.to_dict(self.launch) for g in self.groups],
                "flags": list(self.flags), "env": dict(self.env), "config": dict(self.config),
                "files": self.files(),
                "command": self.command() if self.runs else None,
                "conflicts": [c.to_dict() for c in self.conflicts],
                "automatic": [{"kind": g.kind, "scheme": g.scheme, "layers": list(g.layers),
                               "selected": g.engine_backend, "key": key, "passed": passed,
                               "engine": a.to_dict() if a is not None else None}
                              for g, a, key, passed in self.automatic],
                "problems": list(self.problems), "notes": list(self.notes), "ok": self.ok}

    def __str__(self) -> str:
        return render(self)


# ---------------------------------------------------------------------------------------------
# The plan as text

def _sizes(g: Group, topo: Topology) -> str:
    f = g.per_rank
    if not f:
        return "-"
    if g.op == "moe":
        e = f.get("num_experts")  # the global count: each rank holds e / EP of them
        local = f"{-(-e // topo.ep)} of {e} experts" if e and topo.ep > 1 else f"{e} experts"
        return f"{local}, H {f.get('hidden_size')}, I {f.get('intermediate_size')}"
    return f"K {f.get('hidden_size')}, N {f.get('intermediate_size')}"


def _projections_text(projections: Sequence[str]) -> str:
    names = [p.rsplit(".", 1)[-1] for p in projections]
    return "/".join(names) if len(names) <= 2 else f"{'/'.join(names[:2])}/+{len(names) - 2}"


def _table(lp: LaunchPlan) -> List[str]:
    """One row per layer group: its layers, scheme, per-rank sizes, backend and kernel."""
    from selector.checkpoint.plan_text import _layers_text
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
    from selector.checkpoint.plan_text import selected_warnings
    whys: Dict[str, List[str]] = {}  # why the winner beat the next usable backend
    for g, r in zip(lp.groups, rows[1:]):
        if g.planned and g.backend:
            # a TensorRT-LLM plan: the catalogue's rank alone (its reasons tell vLLM's order)
            whys.setdefault(beat_text(g.decision, lp.engine != "trtllm"), []).append(r[0])
    for reason, labels in whys.items():
        lines.extend(textwrap.wrap(f"why {', '.join(labels)}: {reason}", width=WRAP,
                                   initial_indent="  ", subsequent_indent="     "))
    for g in lp.groups:
        lines.extend(f"  !! {g.kind}: {p}" for p in g.problems)
        for w in selected_warnings(g.decision) if g.decision is not None else ():
            lines.extend(textwrap.wrap(f"{g.kind}: {w}", width=WRAP, initial_indent="  ",
                                       subsequent_indent="     "))
        if g.planned and g.decision is not None and not g.decision.selected:
            lines.extend(textwrap.wrap(f"!! {g.kind}: {g.decision.summary()}", width=WRAP,
                                       initial_indent="  ", subsequent_indent="     "))
            missing = _missing_cuda(g.decision)
            if missing:
                lines.extend(textwrap.wrap(f"!! {g.kind}: {missing}", width=WRAP,
                                           initial_indent="  ", subsequent_indent="     "))
    return lines


def _missing_cuda(d: Decision) -> str:
    """The one key to set when a backend was rejected only for a CUDA the platform does not
    give (a hardware preset carries none; a stack= preset does)."""
    if d.platform.get("cuda") is not None:
        return ""
    by_cuda = [c.backend for c in d.candidates if str(c.status) == "rejected"
               and any(r.rule == "cuda" for r in c.reasons)]
    if not by_cuda:
        return ""
    return (f"platform.cuda is not set ({', '.join(by_cuda)} "
            f"{'needs' if len(by_cuda) == 1 else 'need'} a CUDA version, among other "
            "reasons): add a "
            "stack= preset, which carries the CUDA its software ships with, or "
            "platform.cuda=VERSION")


def _conflicts(lp: LaunchPlan) -> List[str]:
    """Each conflict: the layers it breaks and what to pass instead."""
    from selector.checkpoint.plan_text import _layers_text
    lines: List[str] = []
    for c in lp.conflicts:
        lines.extend(textwrap.wrap(f"!! {c.problem}", width=WRAP, subsequent_indent="   "))
        for b in c.breaks:
            lines.extend(textwrap.wrap(
                f"breaks {b.group.kind} ({b.group.scheme}, layers "
                f"{_layers_text(b.group.layers) or '-'}): {b.message} ({b.source})",
                width=WRAP, initial_indent="   - ", subsequent_indent="     "))
        for i, o in enumerate(c.instead):
            what = " ".join([*(shell_assignment(k, v) for k, v in o.env),
                             *(shell_word(f) for f in o.flags),
                             *(f"{k}={v}" for k, v in o.config)])
            lines.extend(textwrap.wrap(f"{'instead (in the flags above)' if i == 0 else 'or'}: "
                                       f"{what or '(no flag)'}: {o.why}",
                                       width=WRAP, initial_indent="   ",
                                       subsequent_indent="     "))
        if not c.instead:
            lines.append(f"   no single value serves every layer: {lp.launch.no_answer()}")
    return lines


def _automatic(lp: LaunchPlan) -> List[str]:
    """The engine's own choice beside selector's, one line per choice key and answer, and
    whether the plan passes the key (only where it changes the engine's choice)."""
    said: Dict[Tuple[Any, ...], List[str]] = {}
    for g, a, key, passed in lp.automatic:
        said.setdefault((key, g.engine_backend, passed, a), [])
        kinds = said[key, g.engine_backend, passed, a]
        if f"{g.kind} ({g.scheme})" not in kinds:
            kinds.append(f"{g.kind} ({g.scheme})")
    lines: List[str] = []
    for (key, name, passed, a), kinds in said.items():
        own = (f"{lp.label} alone runs {a.text()} ({a.why}: {a.source})" if a is not None else
               f"selector does not model {lp.label}'s own choice here")
        if not key:  # no choice key of the engine file sets it (TensorRT-LLM's block-FP8 GEMM)
            act = ("nothing passed: that is selector's " + name if a is not None and
                   name in a.names else f"nothing passed: selector names {name}")
        elif passed and a is not None and not a.exact:
            act = (f"{key}={name} passed: selector's model of that choice is not exact "
                   f"({a.differs or a.source.split(' (')[0] + ' lists where it differs'})")
        elif passed:
            act = f"{key}={name} passed" + (": it changes that choice (why: the why line above)"
                                             if a is not None else "")
        elif a is not None and name in a.names:
            act = (f"{key} not passed: it would only narrow that choice to selector's {name}"
                   if a.tuned else f"{key} not passed: that is selector's {name}")
        else:
            act = f"{key} not passed (policy.engine_default): selector would pass {name}"
        lines.extend(textwrap.wrap(f"engine's own choice for {', '.join(kinds)}: {own}; {act}",
                                   width=WRAP, subsequent_indent="  "))
    return lines


def render(lp: LaunchPlan) -> str:
    topo, par = lp.topology, lp.parallel
    lines = [f"launch plan for {lp.label}: tp {par.tp}, dp {par.dp}, ep {par.ep} "
             f"(MoE layers: TP {topo.moe_tp}, EP {topo.ep}; dense layers: TP {topo.linear_tp})"]
    lines += _table(lp)
    lines.append("")
    lines.append(f"flags: {' '.join(shell_word(f) for f in lp.flags) or '(none)'}")
    if lp.config:
        lines.append("config: " + " ".join(f"{k}={v}" for k, v in lp.config))
    lines.append("env: " + (" ".join(shell_assignment(k, v) for k, v in lp.env) or "(none)"))
    lines += _conflicts(lp)
    lines += [f"!! {p}" for p in lp.problems]
    lines += _automatic(lp)
    for n in lp.notes:
        lines.extend(textwrap.wrap(f"note: {n}", width=WRAP, subsequent_indent="  "))
    for name, text in lp.files().items():
        lines.append(f"{name} (the config file the command reads):")
        lines.extend(f"  {line}" for line in text.splitlines())
    if lp.runs:
        lines.append(f"command: {lp.command()}")
    else:  # an impossible plan gives no command to copy
        lines.append("command: none: the plan has refused or unserved layers (marked !! above)")
    return join_lines(lines)  # the engine label and file-given names: escaped
