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
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from selector.checkpoint.launch_plan import Asked, Break, Conflict, Group, LaunchPlan, Option, asked
from selector.checkpoint.launchers import Auto, Launcher, Topology, launcher
from selector.checkpoint.ranks import other_scheme
from selector.core.errors import SelectorError, bad_input
from selector.core.parallel import Parallel, make_parallel

if TYPE_CHECKING:  # pragma: no cover
    import os

    from selector.checkpoint.plan import Plan
    from selector.core.engines import Choice
    from selector.core.protocols import SelectorLike as Selector


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
    notes: List[str] = _fixed_notes(sel, launch, groups)
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
        _keyless(sel, launch, plan, op, mine, automatic)
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
        return dataclasses.replace(g, decision=d, fixed=why)
    return dataclasses.replace(g, problems=g.problems + (
        f"{launch.engine.label} runs {name} for this layer whatever is asked ({why}), and "
        f"{name} cannot run it here" + (f": {d.summary()}" if d is not None else ""),))


def _fixed_notes(sel: Selector, launch: Launcher, groups: Sequence[Group]) -> List[str]:
    """A note per group whose backend the engine fixes (Launcher.fixed) where the user asked for
    another: the request does not change what runs, so the plan names what does."""
    notes = []
    for g in groups:
        asked = sel.run_config.policy.requested(g.op)
        if not g.fixed or asked == ("auto",) or g.engine_backend in asked or g.backend in asked:
            continue
        choice = launch.engine.choice(g.op, g.scheme)
        notes.append(f"{g.kind} ({g.scheme}): {launch.engine.label} runs {g.engine_backend} "
                     f"whatever {choice.key if choice else 'is asked'} names ({g.fixed}): "
                     f"policy.{g.op}_backend={','.join(asked)} does not change what runs, so the "
                     f"plan names {g.engine_backend}")
    return notes


def _keyless(sel: Selector, launch: Launcher, plan: Plan, op: str, groups: Sequence[Group],
             automatic: List[Tuple[Group, Optional[Auto], str, bool]]) -> None:
    """The engine's own choice for planned groups whose backend no choice key of the engine
    file sets (TensorRT-LLM's block-FP8 linear GEMM), shown beside selector's with nothing passed
    (key "")."""
    for g in groups:
        if g.planned and g.engine_backend and launch.engine.choice(op, g.scheme) is None:
            if (a := launch.automatic(sel, plan, g)) is not None:
                automatic.append((g, a, "", False))


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
