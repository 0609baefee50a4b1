"""An engine's launch, as its file describes it: the command, the parallel rules, the config
file it reads, and the hooks of the engine's own code (docs/engines.md).

`launch:` of `conf/engine/NAME.yaml`:

    launch:
      command: [vllm, serve, "{model}"]      # {model}: the checkpoint directory
      parallel:
        rule: ep_spans_tp_dp                 # one of PARALLEL_RULES
        tp: --tensor-parallel-size           # the flag of each size (absent: the engine has none)
        dp: --data-parallel-size
        ep: --enable-expert-parallel
        source: "vLLM 0.32.0 engine/arg_utils.py ..."
      config_file: {flag: --extra_llm_api_options, name: extra_llm_api_options.yaml}
      hooks: selector.engines.vllm:VllmLauncher   # optional: a Launcher subclass

The launch plan (launch.py) asks the engine's Launcher, never the engine's name. An engine
without `launch.command` has no launch plan ("no launch command known for engine X"); a hook
that does not load is an error naming the engine file and `launch.hooks`.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.parallel import Parallel
from selector.core.text import shell_command

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.engines import Engine
    from selector.core.protocols import SelectorLike as Selector

LAUNCH_KEYS = ("command", "parallel", "config_file", "hooks")
PARALLEL_KEYS = ("rule", "tp", "dp", "ep", "source")
# the modules a config tree's engine file may name as its hooks (code a config dir cannot add)
HOOK_PACKAGE = "selector.engines"


@dataclass(frozen=True)
class Topology:
    """What an engine makes of the parallel sizes: the MoE layers' TP and EP, the dense
    layers' TP, and the flags that ask for it."""
    moe_tp: int
    ep: int
    linear_tp: int
    flags: Tuple[str, ...]
    source: str
    dp: int = 1  # the data-parallel size (layer.dp_size of the MoE layers)

    def to_dict(self) -> Dict[str, Any]:
        return {"moe_tp": self.moe_tp, "ep": self.ep, "linear_tp": self.linear_tp,
                "flags": list(self.flags), "source": self.source}


def _size_flags(conf: Mapping[str, Any], par: Parallel, label: str,
                sizes: Sequence[str] = ("tp", "dp")) -> List[str]:
    flags: List[str] = []
    for size in sizes:
        n = getattr(par, size)
        if n > 1 and not conf.get(size):
            raise bad_input(f"parallel.{size}", n, f"is not accepted by {label}: it has no "
                            f"{size} size (its launch.parallel names no {size} flag)",
                            accepted=("1",))
        if n > 1:
            flags += [str(conf[size]), str(n)]
    return flags


def ep_spans_tp_dp(conf: Mapping[str, Any], par: Parallel, label: str) -> Topology:
    """vLLM: expert parallelism is on or off (a flag), and on, the MoE layers run EP = TP x DP
    and TP 1; off, TP x DP."""
    world = par.tp * par.dp
    if par.ep not in (1, world) or (par.ep > 1 and world == 1):
        raise bad_input("parallel.ep", par.ep, f"is not accepted by {label}: with "
                        f"{conf.get('ep')} its MoE layers run expert parallelism over "
                        f"parallel.tp x parallel.dp = {world} ranks, without it none; "
                        f"accepted: 1" + (f", {world}" if world > 1 else ""),
                        accepted=("1", str(world)))
    flags = _size_flags(conf, par, label)
    if par.ep > 1:
        return Topology(1, world, par.tp, tuple(flags + [str(conf["ep"])]), conf["source"],
                        par.dp)
    return Topology(world, 1, par.tp, tuple(flags), conf["source"], par.dp)


def ep_divides_tp(conf: Mapping[str, Any], par: Parallel, label: str) -> Topology:
    """SGLang, TensorRT-LLM: an expert-parallel size that divides the tensor-parallel size;
    the MoE layers run TP = tp / ep."""
    if par.tp % par.ep:
        raise bad_input("parallel.ep", par.ep, f"is not accepted by {label}: the "
                        f"expert-parallel size divides the tensor-parallel size "
                        f"(parallel.tp={par.tp}); its MoE layers run TP = tp / ep")
    flags = _size_flags(conf, par, label, ("tp", "ep", "dp"))
    return Topology(par.tp // par.ep, par.ep, par.tp, tuple(flags), conf["source"], par.dp)


PARALLEL_RULES: Dict[str, Callable[[Mapping[str, Any], Parallel, str], Topology]] = {
    "ep_spans_tp_dp": ep_spans_tp_dp, "ep_divides_tp": ep_divides_tp}


def set_key(tree: Dict[str, Any], dotted: str, value: Any) -> None:
    """tree[a][b] = value for `a.b`; a key that is both a value and a section (`moe_config`
    and `moe_config.backend`) is an error naming both (`check` refuses such an engine file:
    core/engines.py)."""
    *path, last = dotted.split(".")
    for i, p in enumerate(path):
        tree = tree.setdefault(p, {})
        if not isinstance(tree, dict):
            raise bad_input("engine.choices", dotted, f"collides with the config key "
                            f"{'.'.join(path[:i + 1])!r}: one key cannot hold a value and "
                            "a section")
    if isinstance(tree.get(last), dict):
        raise bad_input("engine.choices", dotted, "collides with a config key under it: one "
                        "key cannot hold a value and a section")
    tree[last] = value


def config_text(config: Sequence[Tuple[str, Any]]) -> str:
    """The config file's YAML (dotted keys nested: `moe_config.backend`)."""
    import yaml
    tree: Dict[str, Any] = {}
    for k, v in config:
        set_key(tree, k, v)
    return str(yaml.safe_dump(tree, sort_keys=True, default_flow_style=False))


@dataclass(frozen=True)
class Auto:
    """What the engine runs for a layer group when the plan passes no backend choice: one name,
    or several it picks among at run time (an autotuner: `tuned`), how it decides, the source."""
    names: Tuple[str, ...]
    why: str
    source: str
    tuned: bool = False
    exact: bool = True  # False: selector's model of the engine's choice is known to differ at
    # places (its parity document), so the plan passes selector's choice all the same
    differs: str = ""  # with exact False: why the model is not exact (default: the source's
    # first part lists where it differs)

    def text(self) -> str:
        return (f"{'/'.join(self.names)} (tuned at run time)" if self.tuned else
                self.names[0] if self.names else "nothing")

    def to_dict(self) -> Dict[str, Any]:
        return {"names": list(self.names), "why": self.why, "source": self.source,
                "tuned": self.tuned, "exact": self.exact, "differs": self.differs}


class Launcher:
    """An engine's launch plan rules. The base reads the engine file's `launch:`; an engine
    whose code says more (vLLM's per-scheme MoE oracles) subclasses it in its own module
    (`selector.engines.<name>`) and names the class in `launch.hooks`."""

    def __init__(self, engine: Engine, conf: Mapping[str, Any], file: str):
        self.engine, self.conf, self.file = engine, conf, file
        self.parallel: Mapping[str, Any] = conf["parallel"]

    def topology(self, par: Parallel) -> Topology:
        return PARALLEL_RULES[self.parallel["rule"]](self.parallel, par, self.engine.label)

    def refuses(self, op: str, scheme: str, value: str) -> Optional[Tuple[str, str]]:
        """(message, source) when the engine refuses `value` for every layer of `op` for a
        layer of `scheme` (a global flag the scheme's own code does not take); None: takes it
        or no table says."""
        return None

    def unchecked(self, op: str, schemes: Sequence[str]) -> List[str]:
        """Notes for schemes whose acceptance of a global value no table here says."""
        return []

    def kernels(self, op: str, scheme: str, name: Optional[str]) -> Tuple[str, ...]:
        """The engine's kernels for one of its backend names (empty: unknown)."""
        return ()

    def linear(self, names: Mapping[str, str], others: Sequence[str], notes: List[str]
               ) -> Optional[Tuple[List[str], str]]:
        """The engine's own way to pass per-scheme linear backends ((flags, problem): flags,
        or a problem when they cannot be passed); None: one value per choice key."""
        return None

    def options(self, sel: Selector, op: str, nv: Sequence[Any]) -> List[Any]:
        """More answers to a flag conflict than a backend every layer takes."""
        return []

    def notes(self, sel: Selector, plan: Any, groups: Sequence[Any]) -> List[str]:
        """The engine's word on the plan."""
        return []

    def fixed(self, sel: Selector, plan: Any, group: Any) -> Optional[Tuple[str, str]]:
        """(the engine's backend name, why with its source) when the engine's code for this
        group runs that backend whatever is asked (its quant method ignores the choice); the
        plan then names it, or refuses the group where it cannot run (None: the choice is
        honoured)."""
        return None

    def start_problems(self, sel: Selector) -> List[str]:
        """Why the engine does not start at all on this platform (a package it imports
        unguarded is missing); a plan with one prints no command."""
        return []

    def automatic(self, sel: Selector, plan: Any, group: Any) -> Optional[Auto]:
        """The engine's own choice for a planned group when no backend choice is passed
        (None: selector does not model it). The plan passes a choice only where it changes
        this one (checkpoint/launch.py)."""
        return None

    def no_answer(self) -> str:
        """What to do when no single value serves every layer."""
        return "requantize the layers that refuse it, or serve them apart"

    def no_experts(self) -> str:
        """What the engine says of expert parallelism for a model without experts."""
        return ""

    def command(self, model_dir: str, flags: Sequence[str], env: Sequence[Tuple[str, str]],
                config: Sequence[Tuple[str, Any]]) -> str:
        head = [c.replace("{model}", model_dir) for c in self.conf["command"]]  # --model={model}
        cf = self.conf.get("config_file")
        extra = [str(cf["flag"]), str(cf["name"])] if cf and config else []
        try:  # every name checked, every value and word quoted (core/text.py)
            return shell_command(env, head + list(flags) + extra)
        except ValueError as exc:
            raise bad_input("engine.env", [k for k, _ in env], f"is not accepted: {exc}",
                            where=self.file) from None

    def files(self, config: Sequence[Tuple[str, Any]]) -> Dict[str, str]:
        """The config files the command reads: {name: text}."""
        cf = self.conf.get("config_file")
        return {str(cf["name"]): config_text(config)} if cf and config else {}


def _file_of(sel: Selector, engine: Engine) -> str:
    tree = sel.tree
    path = tree.presets.get("engine", {}).get(engine.name) if tree is not None else None
    return str(path) if path is not None else f"conf/engine/{engine.name}.yaml"


def _checked(conf: Mapping[str, Any], file: str, label: str) -> Dict[str, Any]:
    """`launch:` checked: each key named, with the file."""
    for k in conf:
        if k not in LAUNCH_KEYS:
            raise bad_value("engine.launch", k, LAUNCH_KEYS, what="key", where=file)
    cmd = conf.get("command")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) and c for c in cmd):
        raise bad_input("engine.launch.command", cmd, "is not a list of strings (the engine's "
                        "command, `{model}` where the checkpoint goes)", where=file)
    par = conf.get("parallel")
    if not isinstance(par, Mapping):
        raise bad_input("engine.launch.parallel", par, "is not a mapping {rule, tp, dp, ep, "
                        "source}: the engine's parallel rules", where=file)
    for k in par:
        if k not in PARALLEL_KEYS:
            raise bad_value("engine.launch.parallel", k, PARALLEL_KEYS, what="key", where=file)
    if par.get("rule") not in PARALLEL_RULES:
        raise bad_value("engine.launch.parallel.rule", par.get("rule"), tuple(PARALLEL_RULES),
                        where=file)
    if not isinstance(par.get("source"), str) or not par["source"].strip():
        raise bad_input("engine.launch.parallel.source", par.get("source"), "is required: "
                        "cite the engine file that says how it splits the layers", where=file)
    cf = conf.get("config_file")
    if cf is not None and (not isinstance(cf, Mapping) or set(cf) != {"flag", "name"}):
        raise bad_input("engine.launch.config_file", cf, "is not a mapping {flag, name}: the "
                        "flag that passes the engine's config file, and the file's name",
                        where=file)
    return dict(conf)


def _hooks(path: Any, file: str) -> type:
    """The Launcher subclass `launch.hooks` names (only under selector.engines)."""
    key = "engine.launch.hooks"
    module, _, attr = str(path).partition(":")
    if not isinstance(path, str) or not attr or not (
            module == HOOK_PACKAGE or module.startswith(HOOK_PACKAGE + ".")):
        raise bad_input(key, path, f"is not 'module:Class' with the module under "
                        f"{HOOK_PACKAGE} (an engine's code is selector's)", where=file)
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise bad_input(key, path, f"does not load ({type(exc).__name__}: {exc})",
                        where=file) from None
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise bad_input(key, path, "is not a Launcher subclass "
                        "(selector.checkpoint.launchers.Launcher)", where=file)
    return cls


def check_launch(engine: Engine, file: str) -> Optional[Launcher]:
    """`check`'s view of an engine's launch: None without `launch:` (no launch plan), else
    its Launcher; a broken one raises, naming the file and key."""
    if not engine.launch:
        return None
    return _launcher(engine, file)


def launcher(sel: Selector, engine: Engine) -> Launcher:
    """The engine's Launcher, from its file's `launch:`."""
    return _launcher(engine, _file_of(sel, engine))


def refused_value(sel: Selector, op: str, scheme: Optional[str], value: str
                  ) -> Optional[Tuple[str, str]]:
    """(message, source) when `sel`'s engine's code refuses `value` of `op`'s backend choice
    for a layer of `scheme` (its launch hooks' table: vLLM's per-scheme MoE oracles); None: it
    takes it, or the engine has no launch rules or no table says. A one-layer `explain` prints
    no flag the launch plan would refuse; a broken `launch:` names the engine's own file."""
    engine = sel.run_config.engine
    if not engine.launch or scheme is None:
        return None
    return launcher(sel, engine).refuses(op, scheme, value)


def _launcher(engine: Engine, file: str) -> Launcher:
    conf = {k: json.loads(v) for k, v in engine.launch}
    if not conf.get("command"):
        raise SelectorError(f"{file}: engine.launch.command: no launch command known for "
                            f"engine {engine.name}: its file has no launch.command, so "
                            "selector prints no launch plan for it (docs/engines.md)",
                            key="engine.launch.command", where=file)
    conf = _checked(conf, file, engine.label)
    cls = _hooks(conf["hooks"], file) if conf.get("hooks") else Launcher
    made: Launcher = cls(engine, conf, file)
    return made


__all__ = ["Auto", "Topology", "Launcher", "launcher", "check_launch", "refused_value",
           "PARALLEL_RULES", "config_text"]
