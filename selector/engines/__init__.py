"""Engines (`engine=none|vllm|sglang`): the catalogue as one inference engine offers it.

Each backend YAML names itself in each engine under `engines.<engine>` (`name: null` when the
engine has no such backend), with the environment variables that go with it and rules that hold
only for that engine's integration (a backend vLLM wires up for fewer activations than the
kernel library offers). Under `engine=X` a backend X does not offer is `not_applicable`, X's
rules join the backend's own, and a decision names the flags that request the selected backend.

The adapters (`selector.engines.vllm`, `selector.engines.sglang`) import their engine lazily:
importing this package imports neither.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import schema
from ..errors import bad_input, bad_value
from ..rules import Reason, Rule, compile_rule

# The engines of the packaged tree (conf/engine/*.yaml). A run takes the list from its config
# tree instead (composer: data["engines"]), so a new engine is its file, not an edit here.
ENGINES = ("none", "vllm", "sglang")
ENTRY_KEYS = tuple(f.name for f in dataclasses.fields(schema.EngineEntryConf))


@dataclass(frozen=True)
class Engine:
    """The engine a Selector answers for; `none` keeps selector's own names."""
    name: str = "none"
    label: str = ""
    flags: Tuple[Tuple[str, Optional[str]], ...] = ()  # (op, flag)
    source: str = ""
    outside: Tuple[Tuple[str, str], ...] = ()  # engine backends the catalogue omits: why

    def flag(self, op: str) -> Optional[str]:
        return dict(self.flags).get(op)


NO_ENGINE = Engine()


@dataclass(frozen=True)
class EngineEntry:
    """One backend as one engine offers it (`name` None: the engine has no such backend)."""
    name: Optional[str]
    source: str
    env: Tuple[Tuple[str, str], ...] = ()
    rules: Tuple[Rule, ...] = ()


def make_engine(conf: Optional[Mapping[str, Any]], known: Sequence[str] = ENGINES) -> Engine:
    """The chosen engine from its config file (`conf/engine/<name>.yaml`); `known`: the
    engine files of the config tree (their names are the engines backend files may name)."""
    v = schema.validate(schema.EngineConf, conf or {}, "engine")
    name = v["name"]
    accepted = tuple(dict.fromkeys(("none",) + tuple(known)))
    if name not in accepted:
        raise bad_value("engine", name, accepted, what="engine")
    if name == "none":
        return NO_ENGINE
    return Engine(name, str(v["label"] or name),
                  (("moe", v["moe_flag"]), ("linear", v["linear_flag"])), str(v["source"]),
                  tuple(sorted((str(k), str(x)) for k, x in v["outside"].items())))


def parse_entries(conf: Any, key: str, file: str, known: Sequence[str] = ENGINES
                  ) -> Tuple[Tuple[str, EngineEntry], ...]:
    """A backend file's `engines:` section, validated against schema.EngineEntryConf:
    ((engine, entry), ...). `known`: the engines of the config tree."""
    if conf is None:
        return ()
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, "is not a mapping of engine name to entry", where=file)
    accepted = tuple(e for e in known if e != "none")
    out: List[Tuple[str, EngineEntry]] = []
    for engine, raw in conf.items():
        if engine not in accepted:
            raise bad_value(key, engine, accepted, what="engine", where=file)
        where = f"{key}.{engine}"
        v = schema.validate(schema.EngineEntryConf, raw, where, file)
        if v["name"] is not None and not v["name"].strip():
            raise bad_input(f"{where}.name", v["name"], "is not a backend name (or null: the "
                            "engine has no such backend)", where=file)
        compiled = tuple(compile_rule(r, f"{where}.rules[{i}]", file)
                         for i, r in enumerate(v["rules"]))
        out.append((engine, EngineEntry(v["name"], v["source"], tuple(
            (k, str(x)) for k, x in sorted(v["env"].items())), compiled)))
    return tuple(out)


def entry(backend: Any, engine: str) -> Optional[EngineEntry]:
    return dict(backend.engines).get(engine)


def apply(catalogue: Any, engine: Engine) -> Any:
    """The catalogue as `engine` offers it: absent backends carry their not_applicable reason,
    offered ones gain the engine's rules."""
    if engine.name == "none":
        return catalogue
    out: Dict[str, Tuple[Any, ...]] = {}
    for op, backends in catalogue.backends.items():
        changed = []
        for b in backends:
            e = entry(b, engine.name)
            if e is None or e.name is None:
                source = e.source if e is not None else b.file
                why = (f"{engine.label} has no {b.name} backend" if e is not None else
                       f"{b.name} has no engines.{engine.name} entry in {b.file}")
                changed.append(dataclasses.replace(b, unavailable=Reason(
                    "engine", why, source, f"not offered by {engine.label}")))
            else:
                changed.append(dataclasses.replace(b, rules=b.rules + e.rules))
        out[op] = tuple(changed)
    return dataclasses.replace(catalogue, backends=out)


def view(engine: Engine, catalogue: Any, op: str, selected: Optional[str]
         ) -> Optional[Dict[str, Any]]:
    """What the decision means to the engine: its name for the backend and the flags (and
    environment variables) that request it; None without an engine."""
    if engine.name == "none":
        return None
    name, env, flags = None, {}, []
    if selected is not None:
        e = entry(catalogue.get(op, selected), engine.name)
        if e is not None and e.name is not None:
            name, env = e.name, dict(e.env)
            flag = engine.flag(op)
            flags = [flag, name] if flag else []
    return {"name": engine.name, "label": engine.label, "backend": name, "flags": flags,
            "env": env}


def command_line(v: Mapping[str, Any]) -> str:
    """`VAR=1 --flag value`: the text form of view()."""
    parts = [f"{k}={val}" for k, val in v["env"].items()] + list(v["flags"])
    return " ".join(parts) if parts else "(none: automatic selection)"


__all__ = ["Engine", "EngineEntry", "NO_ENGINE", "ENGINES", "make_engine", "parse_entries",
           "apply", "view", "command_line"]
