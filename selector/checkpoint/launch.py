"""The launch plan: a checkpoint as one engine will run it, and the exact flags to start it.

`explain --model DIR engine=vllm` (or `engine=sglang`) with `parallel.tp`, `parallel.dp` and
`parallel.ep`: every layer group of the checkpoint (checkpoint.py's plan, read only) is decided
again with its per-rank sizes (the engine's own split of tensor, data and expert parallelism),
and the decisions become the engine's flags and environment variables. The flags are then
checked against every MoE and linear layer of the checkpoint, those of other quant schemes
included: a global `--moe-backend` that suits the NVFP4 experts but that an FP8 or unquantized
MoE layer's oracle does not accept is reported with the layers it breaks and what to pass
instead (core/engine_flags.py holds the engine's tables, each with its source).
"""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.core.errors import bad_input
from selector.core.parallel import Parallel, make_parallel
from selector.core.text import join_lines

if TYPE_CHECKING:  # pragma: no cover
    import os

    from selector.api import Selector
    from selector.checkpoint.plan import Kind, Plan
    from selector.core.decision import Decision

WRAP = 100
# Projections whose input features are split by tensor parallelism (row-parallel in vLLM and
# SGLang: the second GEMM of an MLP, the attention output); every other one splits its output.
ROW_PARALLEL = ("down_proj", "o_proj", "out_proj", "dense_4h_to_h", "fc2", "w2", "wo")






@dataclass(frozen=True)
class Topology:
    """What an engine makes of the parallel sizes: the MoE layers' TP and EP, the dense
    layers' TP, and the flags that ask for it."""
    moe_tp: int
    ep: int
    linear_tp: int
    flags: Tuple[str, ...]
    source: str

    def to_dict(self) -> Dict[str, Any]:
        return {"moe_tp": self.moe_tp, "ep": self.ep, "linear_tp": self.linear_tp,
                "flags": list(self.flags), "source": self.source}


def topology(engine: str, par: Parallel) -> Topology:
    from selector.core.engine_flags import SGLANG_PARALLEL_SOURCE, VLLM_PARALLEL_SOURCE
    if engine == "vllm":
        world = par.tp * par.dp
        if par.ep not in (1, world) or (par.ep > 1 and world == 1):
            raise bad_input("parallel.ep", par.ep, f"is not accepted by vLLM: with "
                            f"--enable-expert-parallel its MoE layers run expert parallelism "
                            f"over parallel.tp x parallel.dp = {world} ranks, without it none; "
                            f"accepted: 1" + (f", {world}" if world > 1 else ""),
                            accepted=("1", str(world)))
        flags: List[str] = []
        if par.tp > 1:
            flags += ["--tensor-parallel-size", str(par.tp)]
        if par.dp > 1:
            flags += ["--data-parallel-size", str(par.dp)]
        if par.ep > 1:
            flags += ["--enable-expert-parallel"]
            return Topology(1, world, par.tp, tuple(flags), VLLM_PARALLEL_SOURCE)
        return Topology(world, 1, par.tp, tuple(flags), VLLM_PARALLEL_SOURCE)
    if par.tp % par.ep:
        raise bad_input("parallel.ep", par.ep, f"is not accepted by SGLang: the expert-parallel "
                        f"size divides the tensor-parallel size (parallel.tp={par.tp}); its MoE "
                        "layers run TP = tp / ep")
    flags = []
    if par.tp > 1:
        flags += ["--tp-size", str(par.tp)]
    if par.ep > 1:
        flags += ["--ep-size", str(par.ep)]
    if par.dp > 1:
        flags += ["--dp-size", str(par.dp)]
    return Topology(par.tp // par.ep, par.ep, par.tp, tuple(flags), SGLANG_PARALLEL_SOURCE)


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
        name: Optional[str] = d.engine.get("backend")
        return name

    def kernels(self, engine: str) -> Tuple[str, ...]:
        """The engine's kernel for the selected backend: the decision's own word when it names
        one (`engine.kernel`), else the engine's table (core/engine_flags.py)."""
        d = self.decision
        if d is None or d.selected is None:
            return ()
        if d.engine is not None and d.engine.get("kernel"):
            k = d.engine["kernel"]
            return tuple(k) if isinstance(k, (list, tuple)) else (str(k),)
        if engine == "vllm":
            from selector.core.engine_flags import vllm_kernels
            return vllm_kernels(self.op, self.scheme, self.engine_backend)
        return ()

    def to_dict(self, engine: str) -> Dict[str, Any]:
        d = self.decision
        return {"kind": self.kind, "op": self.op, "scheme": self.scheme,
                "layers": list(self.layers), "modules": self.modules,
                "projections": list(self.projections), "per_rank": dict(self.per_rank),
                "selected": self.backend, "engine_backend": self.engine_backend,
                "kernel": list(self.kernels(engine)),
                "outcome": d.outcome if d is not None else None,
                "summary": d.summary() if d is not None else None,
                "problems": list(self.problems), "why": self.why}


def other_scheme(k: Kind) -> str:
    """The scheme of a group selector does not plan (no layer.quant value: unquantized, or a
    scheme the vocabulary lacks), from the rule of the quantization config that decided it
    (checkpoint/quant.py's words)."""
    why = k.why
    if re.search(r"excluded|ignored|skipped|unquantized|not in quantized_layers|LM head", why):
        return "unquantized"
    if re.search(r"\bint\d", why):
        return "int"
    return "unknown"


def _row_parallel(projection: str) -> bool:
    return projection.rsplit(".", 1)[-1] in ROW_PARALLEL


def _split(fields: Dict[str, Any], key: str, by: int, what: str, problems: List[str]) -> None:
    v = fields.get(key)
    if by == 1 or v is None:
        return
    if v % by:
        problems.append(f"{what} {v} is not divisible by {by}: the engine cannot split it")
        return
    fields[key] = v // by


def per_rank_fields(fields: Mapping[str, Any], projections: Sequence[str], topo: Topology
                    ) -> List[Tuple[Tuple[str, ...], Dict[str, Any], Tuple[str, ...]]]:
    """[(projections, per-rank fields, problems)]: MoE experts split by EP (count) and MoE TP
    (intermediate size); a linear projection splits its output (column-parallel) or its input
    (row-parallel) by TP."""
    base = {k: v for k, v in fields.items() if k != "quant"}
    if fields["op"] == "moe":
        f = dict(base)
        problems: List[str] = []
        _split(f, "intermediate_size", topo.moe_tp, "intermediate_size", problems)
        if topo.ep > 1 and f.get("num_experts") is not None and f["num_experts"] % topo.ep:
            problems.append(f"num_experts {f['num_experts']} is not divisible by the "
                            f"expert-parallel size {topo.ep}")
        f["ep_size"], f["tp_size"] = topo.ep, topo.moe_tp
        return [(tuple(projections), f, tuple(problems))]
    out = []
    for row in (False, True):
        projs = tuple(p for p in projections if _row_parallel(p) == row)
        if not projs:
            continue
        f = dict(base)
        problems = []
        _split(f, "hidden_size" if row else "intermediate_size", topo.linear_tp,
               "K" if row else "N", problems)
        f["tp_size"] = topo.linear_tp
        f.pop("ep_size", None)
        out.append((projs, f, tuple(problems)))
    return out


# ---------------------------------------------------------------------------------------------
# Flags

@dataclass(frozen=True)
class Break:
    """Layers a flag breaks: the group, the engine's reason, its source."""
    group: Group
    message: str
    source: str

    def to_dict(self) -> Dict[str, Any]:
        g = self.group
        return {"kind": g.kind, "scheme": g.scheme, "layers": list(g.layers),
                "message": self.message, "source": self.source}


@dataclass(frozen=True)
class Option:
    """What to pass instead: flags and variables, and why it holds."""
    flags: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...]
    why: str

    def to_dict(self) -> Dict[str, Any]:
        return {"flags": list(self.flags), "env": dict(self.env), "why": self.why}


@dataclass(frozen=True)
class Conflict:
    """A flag one op needs that does not suit every layer of that op."""
    op: str
    flag: Tuple[str, ...]  # what the NVFP4 layers alone would ask for (may be empty)
    problem: str
    breaks: Tuple[Break, ...]
    instead: Tuple[Option, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {"op": self.op, "flag": list(self.flag), "problem": self.problem,
                "breaks": [b.to_dict() for b in self.breaks],
                "instead": [o.to_dict() for o in self.instead]}


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

    @property
    def ok(self) -> bool:
        """Every NVFP4 group has a backend, every size splits, and no flag conflict is left
        without an answer."""
        return all(not g.planned or g.decision.selected  # type: ignore[union-attr]
                   for g in self.groups) and \
            not any(g.problems for g in self.groups) and \
            all(c.instead for c in self.conflicts)

    def command(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env]
        head = ["vllm", "serve"] if self.engine == "vllm" else \
            ["python", "-m", "sglang.launch_server", "--model-path"]
        return " ".join(env + [shlex.join(head + [self.plan.model_dir] + list(self.flags))])

    def to_dict(self) -> Dict[str, Any]:
        return {"engine": self.engine, "label": self.label,
                "parallel": self.parallel.to_dict(), "topology": self.topology.to_dict(),
                "groups": [g.to_dict(self.engine) for g in self.groups],
                "flags": list(self.flags), "env": dict(self.env), "command": self.command(),
                "conflicts": [c.to_dict() for c in self.conflicts],
                "notes": list(self.notes), "ok": self.ok}

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


def _accepts(engine: str, op: str, g: Group, value: str, planned: bool = False
             ) -> Optional[Break]:
    """The break a global MoE value causes on a group selector does not plan (the engine's
    oracle for its scheme decides it; with `planned`, on any group), or None."""
    from selector.core.engine_flags import VLLM_MOE_ACCEPTS, VLLM_MOE_SOURCES
    if engine != "vllm" or op != "moe" or (g.planned and not planned):
        return None
    accepted = VLLM_MOE_ACCEPTS.get(g.scheme)
    if accepted is None or value in accepted:
        return None
    return Break(g, f"vLLM's {g.scheme} MoE oracle does not take moe_backend={value!r} "
                    f"(accepted: {', '.join(accepted)}): the layer raises ValueError when "
                    "it is built", VLLM_MOE_SOURCES[g.scheme])


def _unchecked(engine: str, op: str, groups: Sequence[Group]) -> List[str]:
    from selector.core.engine_flags import VLLM_MOE_ACCEPTS
    if engine != "vllm" or op != "moe":
        return []
    return [f"{g.kind} ({g.scheme}): selector has no table of what vLLM's {g.scheme} MoE "
            "oracle accepts; check --moe-backend against it yourself"
            for g in groups if not g.planned and g.scheme not in VLLM_MOE_ACCEPTS]


def _moe_flags(sel: Selector, engine: str, flag: str, groups: Sequence[Group],
               notes: List[str]) -> Tuple[List[str], Dict[str, str], Optional[Conflict]]:
    """The engine's MoE backend flag for every MoE group, or a conflict with options: one
    value for the groups selector plans, whatever their scheme, that the oracle of every other
    group's scheme accepts."""
    nv = [g for g in groups if g.planned]
    if not nv or any(not g.engine_backend for g in nv):
        return [], {}, None
    wanted = list(dict.fromkeys(str(g.engine_backend) for g in nv))
    others = [g for g in groups if not g.planned]
    what = _schemes_text(nv)
    notes.extend(_unchecked(engine, "moe", groups))
    breaks: List[Break] = []
    if len(wanted) == 1:
        breaks = [b for g in others for b in (_accepts(engine, "moe", g, wanted[0]),)
                  if b is not None]
        if not breaks:
            return [flag, wanted[0]], _env(nv), None
        problem = (f"{flag} {wanted[0]} suits every {what} MoE layer but breaks "
                   f"{len(breaks)} MoE layer group(s) of other schemes")
    else:
        problem = (f"the {what} MoE groups need different backends ({', '.join(wanted)}); "
                   f"{flag} is one value for every MoE layer")
        # the backend the user asked for, passed to the engine as is: the layers whose
        # scheme's oracle refuses it (vLLM #40082's review: the FP8 oracle and b12x)
        asked = _requested_engine_name(sel, engine, "moe")
        if asked is not None:
            breaks = [b for g in groups for b in (_accepts(engine, "moe", g, asked, True),)
                      if b is not None]
            if breaks:
                return [], {}, Conflict("moe", (flag, asked), problem, tuple(breaks),
                                        tuple(_options(sel, engine, "moe", flag, nv, others)))
    return [], {}, Conflict("moe", (flag, wanted[0]) if len(wanted) == 1 else (),
                            problem, tuple(breaks),
                            tuple(_options(sel, engine, "moe", flag, nv, others)))


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


def _options(sel: Selector, engine: str, op: str, flag: str, nv: Sequence[Group],
             others: Sequence[Group]) -> List[Option]:
    """What to pass instead: (1) the first backend, in the preference order of the first NVFP4
    group, that every NVFP4 group can run when asked for it and every other group's oracle
    accepts; (2) vLLM: no flag, and selector's plugin deciding the NVFP4 layers (the others
    keep vLLM's automatic choice), when the plugin's choice equals this plan's."""
    out: List[Option] = []
    first = nv[0].decision
    assert first is not None
    for c in first.candidates:
        if str(c.status) not in ("selected", "eligible", "opt_in"):
            continue
        asked = _with_policy(sel, op, [c.backend])
        ds = [asked.select(**g.per_rank) for g in nv]
        if not all(d.selected == c.backend for d in ds):
            continue
        names = {d.engine.get("backend") for d in ds if d.engine is not None}
        if len(names) != 1 or None in names:
            continue
        name = str(next(iter(names)))
        if any(_accepts(engine, op, g, name) for g in others):
            continue
        out.append(Option((flag, name), tuple(sorted(_env_of(ds).items())),
                          f"{name} is the first backend every {_schemes_text(nv)} {op} group "
                          "can run and "
                          f"every other {op} group accepts"
                          + ("" if c.backend == first.selected else
                             f" (selector prefers {first.selected} for "
                             f"{nv[0].kind}, which the others refuse)")))
        break
    if engine == "vllm":
        plugin = _plugin_option(sel, op, nv)
        if plugin is not None:
            out.append(plugin)
    return out


def _plugin_option(sel: Selector, op: str, nv: Sequence[Group]) -> Optional[Option]:
    """No flag for `op`; SELECTOR_VLLM=1 makes selector decide every NVFP4 layer inside vLLM
    (vLLM's request, auto, as the policy; SELECTOR_VLLM_OVERRIDES for opt-in backends)."""
    opt_in = sorted({str(g.backend) for g in nv
                     if sel.catalogue.get(op, str(g.backend)).opt_in is not None})
    auto = _with_policy(sel, op, ["auto"], opt_in)
    if any(auto.select(**g.per_rank).selected != g.backend for g in nv):
        return None
    env = [("SELECTOR_VLLM", "1")]
    extra = [f"policy.allow_opt_in=[{','.join(sorted(set(sel.run_config.policy.allow_opt_in) | set(opt_in)))}]"] \
        if opt_in or sel.run_config.policy.allow_opt_in else []
    if sel.run_config.policy.exclude:
        extra.append(f"policy.exclude=[{','.join(sel.run_config.policy.exclude)}]")
    if extra:
        env.append(("SELECTOR_VLLM_OVERRIDES", " ".join(extra)))
    return Option((), tuple(env), f"no --{op}-backend flag: selector's vLLM plugin picks the "
                  f"same backend for every {_schemes_text(nv)} {op} layer, and vLLM's "
                  "automatic selection decides the layers selector does not plan")


def _env_of(ds: Sequence[Any]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for d in ds:
        if d is not None and d.engine is not None:
            env.update(d.engine.get("env") or {})
    return env


def _env(groups: Sequence[Group]) -> Dict[str, str]:
    return _env_of([g.decision for g in groups])


def _linear_flags(sel: Selector, engine: str, flag: str, groups: Sequence[Group],
                  notes: List[str]) -> Tuple[List[str], Dict[str, str], Optional[Conflict]]:
    nv = [g for g in groups if g.planned]
    if not nv or any(not g.engine_backend for g in nv):
        return [], {}, None
    by_scheme: Dict[str, List[str]] = {}
    for g in nv:
        by_scheme.setdefault(g.scheme, [])
        if g.engine_backend not in by_scheme[g.scheme]:
            by_scheme[g.scheme].append(str(g.engine_backend))
    split = {s: names for s, names in by_scheme.items() if len(names) > 1}
    if split:
        s, several = next(iter(split.items()))
        problem = (f"the {s} linear groups need different backends "
                   f"({', '.join(several)}); "
                   f"{flag} is one value per scheme")
        others = [g for g in groups if not g.planned]
        return [], {}, Conflict("linear", (), problem, (),
                                tuple(_options(sel, engine, "linear", flag, nv, others)))
    names = {s: v[0] for s, v in by_scheme.items()}
    quantized_others = [g for g in groups if not g.planned and g.scheme != "unquantized"]
    if engine == "vllm" and (len(set(names.values())) > 1 or quantized_others):
        from selector.core.engine_flags import VLLM_LINEAR_QUANT
        per_key: Dict[str, Dict[str, str]] = {}  # vLLM's key -> {scheme: backend}
        for s_, n in sorted(names.items()):
            per_key.setdefault(VLLM_LINEAR_QUANT.get(s_, s_), {})[s_] = n
        clash = {k: v for k, v in per_key.items() if len(set(v.values())) > 1}
        if clash:
            k, v = next(iter(clash.items()))
            problem = (f"the {'/'.join(v)} linear groups need different backends "
                       f"({', '.join(f'{s_}: {n}' for s_, n in v.items())}), and vLLM keys "
                       f"them all as {k!r} in linear_backend_per_quant: one value for them "
                       "all")
            return [], {}, Conflict("linear", (), problem, (), ())
        per = {k: next(iter(v.values())) for k, v in per_key.items()}
        if quantized_others:
            planned_schemes = ", ".join(sorted(names))
            notes.append(f"--linear-backend would also filter the kernels of the "
                         f"{', '.join(sorted({g.scheme for g in quantized_others}))} linear "
                         f"layers: linear_backend_per_quant keeps it to the {planned_schemes} "
                         "ones")
        return ["--kernel-config", json.dumps({"linear_backend_per_quant": per},
                                              separators=(",", ":"))], _env(nv), None
    if len(set(names.values())) > 1:  # SGLang: one FP4 GEMM backend per server
        problem = (f"the {_schemes_text(nv)} linear schemes need different backends "
                   f"({', '.join(f'{s}: {n}' for s, n in names.items())}); {flag} is one "
                   "value for every FP4 linear layer")
        return [], {}, Conflict("linear", (), problem, (), ())
    return [flag, next(iter(names.values()))], _env(nv), None


def launch_plan(sel: Selector, model_dir: os.PathLike[str] | str) -> LaunchPlan:
    """The launch plan of a checkpoint under the selector's engine and `parallel.*`."""
    run = sel.run_config
    engine = run.engine
    if engine.name == "none":
        raise bad_input("engine", "none", "has no launch flags: add engine=vllm or "
                        "engine=sglang", accepted=("vllm", "sglang"))
    if run.layer.ep_size != 1 or run.layer.tp_size != 1:
        key = "layer.ep_size" if run.layer.ep_size != 1 else "layer.tp_size"
        raise bad_input(key, getattr(run.layer, key.split(".")[1]), "is derived per layer by "
                        "the launch plan: give parallel.tp, parallel.dp and parallel.ep instead")
    topo = topology(engine.name, run.parallel)
    plan = sel.plan(model_dir)
    if run.parallel.ep > 1 and not any(k.op == "moe" for k in plan.kinds):
        raise bad_input("parallel.ep", run.parallel.ep, "is not accepted: this checkpoint has "
                        "no MoE layer to split by experts" + (
                            " (vLLM refuses --enable-expert-parallel for a model without "
                            "experts: vLLM 0.32.0 config/model.py, ModelConfig)"
                            if engine.name == "vllm" else ""), where=plan.model_dir)
    groups: List[Group] = []
    for k in plan.kinds:
        if not k.quant:
            op = k.op
            groups.append(Group(k.component, op, other_scheme(k), k.layers, k.modules,
                                tuple(p for s in k.shapes for p in s.projections), {},
                                why=k.why))
            continue
        for s in k.shapes:
            for projs, fields, problems in per_rank_fields(s.fields, s.projections, topo):
                d = sel.select(quant=k.quant, **fields)
                groups.append(Group(k.component, k.op, k.quant, k.layers,
                                    s.modules if k.op == "moe" else
                                    s.modules * len(projs) // max(1, len(s.projections)),
                                    projs, {"quant": k.quant, **fields}, d, problems))
    flags: List[str] = list(topo.flags)
    env: Dict[str, str] = {}
    conflicts: List[Conflict] = []
    notes: List[str] = []
    for op, make in (("moe", _moe_flags), ("linear", _linear_flags)):
        flag = engine.flag(op)
        if not flag:
            continue
        got, e, conflict = make(sel, engine.name, flag, [g for g in groups if g.op == op],
                                notes)
        flags += got
        env.update(e)
        if conflict is not None:
            conflicts.append(conflict)
            if conflict.instead:  # the flags printed are the ones to run: the first answer
                flags += conflict.instead[0].flags
                env.update(conflict.instead[0].env)
    return LaunchPlan(plan, engine.name, engine.label, run.parallel, topo, tuple(groups),
                      tuple(flags), tuple(sorted(env.items())), tuple(conflicts),
                      tuple(dict.fromkeys(notes)))


# ---------------------------------------------------------------------------------------------
# Text

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


def render(lp: LaunchPlan) -> str:
    from selector.checkpoint.plan import _layers_text
    topo, par = lp.topology, lp.parallel
    lines = [f"launch plan for {lp.label}: tp {par.tp}, dp {par.dp}, ep {par.ep} "
             f"(MoE layers: TP {topo.moe_tp}, EP {topo.ep}; dense layers: TP {topo.linear_tp})"]
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
        rows.append((what, _layers_text(g.layers) or "-", g.scheme, _sizes(g, topo), backend,
                     ", else ".join(g.kernels(lp.engine)) or "-"))
    width = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(width[i]) for i, c in enumerate(r[:5])) +
                     f"  {r[5]}")
    for g in lp.groups:
        for p in g.problems:
            lines.append(f"  !! {g.kind}: {p}")
        if g.planned and g.decision is not None and not g.decision.selected:
            lines.extend(textwrap.wrap(f"!! {g.kind}: {g.decision.summary()}", width=WRAP,
                                       initial_indent="  ", subsequent_indent="     "))
    lines.append("")
    lines.append(f"flags: {' '.join(shlex.quote(f) for f in lp.flags) or '(none)'}")
    lines.append("env: " + (" ".join(f"{k}={shlex.quote(v)}" for k, v in lp.env) or "(none)"))
    for c in lp.conflicts:
        lines.extend(textwrap.wrap(f"!! {c.problem}", width=WRAP, subsequent_indent="   "))
        for b in c.breaks:
            lines.extend(textwrap.wrap(
                f"breaks {b.group.kind} ({b.group.scheme}, layers "
                f"{_layers_text(b.group.layers) or '-'}): {b.message} ({b.source})",
                width=WRAP, initial_indent="   - ", subsequent_indent="     "))
        for i, o in enumerate(c.instead):
            what = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in o.env),
                             *(shlex.quote(f) for f in o.flags)])
            lines.extend(textwrap.wrap(f"{'instead (in the flags above)' if i == 0 else 'or'}: "
                                       f"{what or '(no flag)'}: {o.why}",
                                       width=WRAP, initial_indent="   ",
                                       subsequent_indent="     "))
        if not c.instead:
            lines.append("   no single flag serves every layer: run with selector's plugin "
                         "(SELECTOR_VLLM=1) or requantize")
    for n in lp.notes:
        lines.extend(textwrap.wrap(f"note: {n}", width=WRAP, subsequent_indent="  "))
    lines.append(f"command: {lp.command()}")
    return join_lines(lines)  # the engine label and file-given names: escaped


__all__ = ["Parallel", "make_parallel", "Topology", "topology", "Group", "LaunchPlan",
           "launch_plan", "per_rank_fields", "other_scheme"]
