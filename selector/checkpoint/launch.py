"""The launch plan: a checkpoint as one engine will run it, and the exact command to start it.

`explain --model DIR engine=NAME` with `parallel.tp`, `parallel.dp` and `parallel.ep`: every
layer group of the checkpoint (checkpoint/plan.py's plan, read only) is decided again with its
per-rank sizes (the engine's own split of tensor, data and expert parallelism), and the
decisions become the engine's choices: flags, environment variables or keys of its config file
(the engine's `choices`). The choices are then checked against every MoE and linear layer of the
checkpoint, those of other quant schemes included: a global `--moe-backend` that suits the NVFP4
experts but that an FP8 or unquantized MoE layer's oracle does not accept is reported with the
layers it breaks and what to pass instead. What is engine-specific (the command, the parallel
rules, the engine's tables) is the engine's Launcher (checkpoint/launchers.py): nothing here
branches on an engine's name.
"""
from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.checkpoint.beat import beat, beat_text
from selector.checkpoint.launchers import Auto, Launcher, Topology, launcher
from selector.checkpoint.ranks import other_scheme
from selector.core.errors import SelectorError, bad_input
from selector.core.parallel import Parallel, make_parallel
from selector.core.text import join_lines, shell_assignment, shell_word

if TYPE_CHECKING:  # pragma: no cover
    import os

    from selector.checkpoint.plan import Plan
    from selector.core.decision import Decision
    from selector.core.engines import Choice
    from selector.core.protocols import SelectorLike as Selector

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

    @property
    def planned(self) -> bool:
        """selector decides the group: it has a layer.quant value some backend implements (else
        the engine's own oracle decides it, checked against the flags by its tables)."""
        from selector.checkpoint.plan import planned
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
        from selector.checkpoint.plan import selected_warnings
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
                "command": self.command() if self.ok and self.plan.ok else None,
                "conflicts": [c.to_dict() for c in self.conflicts],
                "automatic": [{"kind": g.kind, "scheme": g.scheme, "layers": list(g.layers),
                               "selected": g.engine_backend, "key": key, "passed": passed,
                               "engine": a.to_dict() if a is not None else None}
                              for g, a, key, passed in self.automatic],
                "problems": list(self.problems), "notes": list(self.notes), "ok": self.ok}

    def __str__(self) -> str:
        return render(self)


def _with_policy(sel: Selector, op: str, request: Sequence[str],
                 allow_opt_in: Sequence[str] = ()) -> Selector:
    """`sel` with another request for one op (the run config is immutable: cheap)."""
    run = sel.run_config
    changes: Dict[str, Any] = {f"{op}_backend": tuple(request), "allow_opt_in": tuple(
        sorted(set(run.policy.allow_opt_in) | set(allow_opt_in)))}
    policy = dataclasses.replace(run.policy, **changes)
    return type(sel)(dataclasses.replace(run, policy=policy), sel.tree, sel.probes)


def _accepts(launch: Launcher, op: str, g: Group, value: str, planned: bool = False
             ) -> Optional[Break]:
    """The break a global value causes on a group selector does not plan (the engine's code
    for its scheme decides it; with `planned`, on any group), or None."""
    if g.planned and not planned:
        return None
    said = launch.refuses(op, g.scheme, value)
    return Break(g, said[0], said[1]) if said is not None else None


def _moe_flags(sel: Selector, launch: Launcher, choice: Choice, groups: Sequence[Group],
               notes: List[str]) -> Tuple[Optional[Asked], Optional[Conflict]]:
    """The engine's MoE backend choice for every MoE group, or a conflict with options: one
    value for the groups selector plans, whatever their scheme, that the engine's code for
    every other group's scheme accepts."""
    nv = [g for g in groups if g.planned]
    if not nv or any(not g.engine_backend for g in nv):
        return None, None
    wanted = list(dict.fromkeys(str(g.engine_backend) for g in nv))
    others = [g for g in groups if not g.planned]
    what, key = _schemes_text(nv), choice.key
    notes.extend(launch.unchecked("moe", [g.scheme for g in others]))
    breaks: List[Break] = []
    if len(wanted) == 1:
        breaks = [b for g in others for b in (_accepts(launch, "moe", g, wanted[0]),)
                  if b is not None]
        if not breaks:
            return asked(choice, wanted[0], _env(nv)), None
        problem = (f"{key} {wanted[0]} suits every {what} MoE layer but breaks "
                   f"{len(breaks)} MoE layer group(s) of other schemes")
    else:
        problem = (f"the {what} MoE groups need different backends ({', '.join(wanted)}); "
                   f"{key} is one value for every MoE layer")
        # the backend the user asked for, passed to the engine as is: the layers whose
        # scheme's oracle refuses it (vLLM #40082's review: the FP8 oracle and b12x)
        request = _requested_engine_name(sel, launch.engine.name, "moe")
        if request is not None:
            breaks = [b for g in groups for b in (_accepts(launch, "moe", g, request, True),)
                      if b is not None]
            if breaks:
                return None, Conflict("moe", (key, request), problem, tuple(breaks),
                                      tuple(_options(sel, launch, "moe", choice, nv, others)))
    return None, Conflict("moe", (key, wanted[0]) if len(wanted) == 1 else (),
                          problem, tuple(breaks),
                          tuple(_options(sel, launch, "moe", choice, nv, others)))


def _requested_engine_name(sel: Selector, engine: str, op: str) -> Optional[str]:
    """The engine's name for the one backend the policy requests for `op`, or None (auto,
    several, or a backend the engine does not name)."""
    request = sel.run_config.policy.requested(op)
    if len(request) != 1 or request[0] == "auto":
        return None
    try:
        b = sel.catalogue.get(op, request[0])
    except KeyError:
        return None
    entry = dict(b.engines).get(engine)
    return None if entry is None or entry.name is None else str(entry.name)


def _schemes_text(groups: Sequence[Group]) -> str:
    """'NVFP4' when every group is NVFP4 (W4A4 or W4A16), else the schemes by name."""
    schemes = list(dict.fromkeys(g.scheme for g in groups))
    if all(s.startswith("nvfp4") for s in schemes):
        return "NVFP4"
    return "/".join(schemes)


def _options(sel: Selector, launch: Launcher, op: str, choice: Choice, nv: Sequence[Group],
             others: Sequence[Group]) -> List[Option]:
    """What to pass instead: (1) the first backend, in the preference order of the first
    planned group, that every planned group can run when asked for it and every other group
    accepts; (2) the engine's own answers (vLLM: selector's plugin)."""
    out: List[Option] = []
    first = nv[0].decision
    assert first is not None
    for c in first.candidates:
        if str(c.status) not in ("selected", "eligible", "opt_in"):
            continue
        with_c = _with_policy(sel, op, [c.backend])
        ds = [with_c.select(**g.per_rank) for g in nv]
        if not all(d.selected == c.backend for d in ds):
            continue
        names = {d.engine.backend for d in ds if d.engine is not None}
        if len(names) != 1 or None in names:
            continue
        name = str(next(iter(names)))
        if any(_accepts(launch, op, g, name) for g in others):
            continue
        out.append(asked(choice, name, _env_of(ds)).option(
            f"{name} is the first backend every {_schemes_text(nv)} {op} group can run and "
            f"every other {op} group accepts" + ("" if c.backend == first.selected else
                                                 f" (selector prefers {first.selected} for "
                                                 f"{nv[0].kind}, which the others refuse)")))
        break
    return out + list(launch.options(sel, op, nv))


def _env_of(ds: Sequence[Any]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for d in ds:
        if d is not None and d.engine is not None:
            env.update(d.engine.env)
    return env


def _env(groups: Sequence[Group]) -> Dict[str, str]:
    return _env_of([g.decision for g in groups])


def _linear_flags(sel: Selector, launch: Launcher, groups: Sequence[Group], notes: List[str]
                  ) -> Tuple[Optional[Asked], Optional[Conflict]]:
    """One value per choice key of the engine (SGLang: one FP4 and one FP8 GEMM backend per
    server), or the engine's own per-scheme form (vLLM's linear_backend_per_quant)."""
    engine = launch.engine
    choice: Dict[str, Choice] = {}
    for g in groups:
        c = engine.choice("linear", g.scheme)
        if g.planned and c is not None:
            choice[g.scheme] = c
    nv = [g for g in groups if g.scheme in choice and g.planned]
    if not nv or any(not g.engine_backend for g in nv):
        return None, None
    by_scheme: Dict[str, List[str]] = {}
    for g in nv:
        several = by_scheme.setdefault(g.scheme, [])
        if g.engine_backend not in several:
            several.append(str(g.engine_backend))
    split = {s: v for s, v in by_scheme.items() if len(v) > 1}
    if split:
        s, several = next(iter(split.items()))
        problem = (f"the {s} linear groups need different backends ({', '.join(several)}); "
                   f"{choice[s].key} is one value per scheme")
        others = [g for g in groups if not g.planned]
        return None, Conflict("linear", (), problem, (), tuple(_options(
            sel, launch, "linear", choice[s], nv, others)))
    names = {s: v[0] for s, v in by_scheme.items()}
    quantized = [g.scheme for g in groups if not g.planned and g.scheme != "unquantized"]
    own = launch.linear(names, quantized, notes)
    if own is not None:
        flags, problem = own
        if problem:
            return None, Conflict("linear", (), problem, (), ())
        return Asked(flags=flags, env=_env(nv)), None
    out = Asked(env=_env(nv))
    per_choice: Dict[Choice, Dict[str, str]] = {}
    for s, n in names.items():
        per_choice.setdefault(choice[s], {})[s] = n
    for c, values in per_choice.items():
        if len(set(values.values())) > 1:
            problem = (f"the {'/'.join(values)} linear schemes need different backends "
                       f"({', '.join(f'{s}: {n}' for s, n in values.items())}); {c.key} is "
                       f"one value for every {'/'.join(c.schemes) or 'linear'} layer")
            return None, Conflict("linear", (), problem, (), ())
        out.add(c, next(iter(values.values())))
    return out, None


def _groups(plan: Plan) -> List[Group]:
    """Every layer group of the checkpoint: the plan's kinds and shapes, read and decided with
    one GPU's sizes (checkpoint/arch.py splits each module as vLLM builds it)."""
    groups: List[Group] = []
    for k in plan.kinds:
        if not k.quant:
            groups.append(Group(k.component, k.op, other_scheme(k), k.layers, k.modules,
                                tuple(p for s in k.shapes for p in s.projections), {},
                                why=k.why))
            continue
        for s in k.shapes:
            groups.append(Group(k.component, k.op, k.quant, k.layers, s.modules,
                                s.projections, dict(s.fields), s.decision, s.problems))
    return groups


def _checked_run(sel: Selector) -> None:
    run = sel.run_config
    if run.engine.name == "none":
        known = tuple(e for e in (sel.tree.group_options("engine") if sel.tree else ())
                      if e != "none")
        raise bad_input("engine", "none", "has no launch command: add "
                        + (", ".join(f"engine={e}" for e in known) or "engine=NAME"),
                        accepted=known)
    if run.layer.ep_size != 1 or run.layer.tp_size != 1:
        key = "layer.ep_size" if run.layer.ep_size != 1 else "layer.tp_size"
        raise bad_input(key, getattr(run.layer, key.split(".")[1]), "is derived per layer by "
                        "the launch plan: give parallel.tp, parallel.dp and parallel.ep instead")


def launch_plan(sel: Selector, model_dir: os.PathLike[str] | str) -> LaunchPlan:
    """The launch plan of a checkpoint under the selector's engine and `parallel.*`."""
    _checked_run(sel)
    run = sel.run_config
    engine = run.engine
    launch = launcher(sel, engine)
    topo = launch.topology(run.parallel)
    from selector.checkpoint.plan import plan as read_plan
    plan = read_plan(sel, model_dir, topo)
    if run.parallel.ep > 1 and not any(k.op == "moe" for k in plan.kinds):
        raise bad_input("parallel.ep", run.parallel.ep, "is not accepted: this checkpoint has "
                        "no MoE layer to split by experts" + launch.no_experts(),
                        where=plan.model_dir)
    groups = [_fixed(sel, launch, plan, g) for g in _groups(plan)]
    out = Asked(flags=list(topo.flags))
    conflicts: List[Conflict] = []
    notes: List[str] = []
    automatic: List[Tuple[Group, Optional[Auto], str, bool]] = []
    for op in ("moe", "linear"):
        mine = [g for g in groups if g.op == op]
        choice = engine.choice(op)
        if choice is None:
            continue
        got, conflict = (_moe_flags(sel, launch, choice, mine, notes) if op == "moe" else
                         _linear_flags(sel, launch, mine, notes))
        if got is not None:
            got = _against_engine(sel, launch, plan, op, mine, got, automatic)
        for a in [got] if got is not None else []:
            out.flags += a.flags
            out.env.update(a.env)
            out.config.update(a.config)
        if conflict is not None:
            conflicts.append(conflict)
            if conflict.instead:  # what is printed is what to run: the first answer
                first = conflict.instead[0]
                out.flags += first.flags
                out.env.update(first.env)
                out.config.update(first.config)
    notes += launch.notes(sel, plan, groups)
    return LaunchPlan(plan, engine.name, engine.label, run.parallel, topo, tuple(groups),
                      tuple(out.flags), tuple(sorted(out.env.items())), tuple(conflicts),
                      tuple(dict.fromkeys(notes)), tuple(sorted(out.config.items())), launch,
                      tuple(automatic), tuple(launch.start_problems(sel)))


def _fixed(sel: Selector, launch: Launcher, plan: Plan, g: Group) -> Group:
    """The group as the engine runs it where its quant method ignores the backend choice
    (Launcher.fixed): decided again for the backend the engine runs, or refused with why."""
    if not g.planned or g.decision is None:
        return g
    said = launch.fixed(sel, plan, g)
    if said is None or said[0] == g.engine_backend:
        return g
    name, why = said
    from selector.core.engines import entry
    backends = [b.name for b in sel.catalogue.backends.get(g.op, ())
                if (e := entry(b, launch.engine.name)) is not None and
                e.name_for(g.scheme) == name]
    try:
        d = _with_policy(sel, g.op, backends).select(**g.per_rank) if backends else None
    except SelectorError as exc:  # strict: the backend the engine runs is refused here
        d, why = None, f"{why}; {exc}"
    if d is not None and d.selected is not None:
        return dataclasses.replace(g, decision=d)
    return dataclasses.replace(g, problems=g.problems + (
        f"{launch.engine.label} runs {name} for this layer whatever is asked ({why}), and "
        f"{name} cannot run it here" + (f": {d.summary()}" if d is not None else ""),))


def _against_engine(sel: Selector, launch: Launcher, plan: Plan, op: str,
                    groups: Sequence[Group], got: Asked,
                    automatic: List[Tuple[Group, Optional[Auto], str, bool]]) -> Asked:
    """`got` less each choice that does not change what the engine runs by itself: a key is
    passed only where the engine's own choice (its Launcher's `automatic`) differs from
    selector's for some group, or is unknown, or is an autotuner's set the user asked to
    narrow (policy.<op>_backend); with policy.engine_default none is passed."""
    policy = sel.run_config.policy
    asked_for = policy.requested(op) != ("auto",)
    by_key: Dict[str, List[Tuple[Group, Optional[Auto]]]] = {}
    for g in groups:
        c = launch.engine.choice(op, g.scheme)
        if not g.planned or not g.engine_backend or c is None:
            continue
        by_key.setdefault(c.key, []).append((g, launch.automatic(sel, plan, g)))
    for key, rows in by_key.items():
        passed = not policy.engine_default and any(
            a is None or not a.exact or g.engine_backend not in a.names or
            (a.tuned and asked_for)
            for g, a in rows)
        if not passed:
            got = got.without(key)
        automatic.extend((g, a, key, passed) for g, a in rows)
    return got


__all__ = ["Parallel", "make_parallel", "Topology", "Group", "LaunchPlan",
           "launch_plan", "other_scheme"]


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
    from selector.checkpoint.plan import selected_warnings
    whys: Dict[str, List[str]] = {}  # why the winner beat the next usable backend
    for g, r in zip(lp.groups, rows[1:]):
        if g.planned and g.backend:
            whys.setdefault(beat_text(g.decision), []).append(r[0])
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
        if passed and a is not None and not a.exact:
            act = (f"{key}={name} passed: selector's model of that choice is not exact "
                   f"({a.source.split(' (')[0]} lists where it differs)")
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
    if lp.ok and lp.plan.ok:
        lines.append(f"command: {lp.command()}")
    else:  # an impossible plan gives no command to copy
        lines.append("command: none: the plan has refused or unserved layers (marked !! above)")
    return join_lines(lines)  # the engine label and file-given names: escaped


__all__ = ["render"]
