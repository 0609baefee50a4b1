"""Engines (`engine=none|vllm|sglang`): the catalogue as one inference engine offers it.

Each backend YAML names itself in each engine under `engines.<engine>` (`name: null` when the
engine has no such backend), with the environment variables that go with it, rules that hold
only for that engine's integration (a backend vLLM wires up for fewer activations than the
kernel library offers) and the kernels the engine runs under that name (`kernels:`, the first
whose `when` holds; its `scheme` when the engine runs the layer as another quant scheme, as
vLLM's `flashinfer_cutedsl` runs a W4A4 layer with its W4A16 kernel on SM 12.x). Under
`engine=X` a backend X does not offer is `not_applicable`, X's rules join the backend's own, the
backend is judged as the scheme X's kernel runs, and a decision names the kernel, its scheme and
the flags that request the selected backend. The engine's label carries the version the
platform lists for its distribution (`stack=vllm_0_33`: "vLLM 0.33.0").

The adapters (`selector.engines.vllm`, `selector.engines.sglang`) import their engine lazily:
importing this package imports neither.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.core import schema
from selector.core.errors import bad_input, bad_value
from selector.core.rules import KINDS, Condition, Facts, Reason, Rule, compile_rule
from selector.core.schema import QUANTS

# The engines of the packaged tree (conf/engine/*.yaml). A run takes the list from its config
# tree instead (composer: data["engines"]), so a new engine is its file, not an edit here.
ENGINES = ("none", "vllm", "sglang")
ENTRY_KEYS = tuple(f.name for f in dataclasses.fields(schema.EngineEntryConf))
KERNEL_KEYS = ("kernel", "scheme", "when", "source")


@dataclass(frozen=True)
class Engine:
    """The engine a Selector answers for; `none` keeps selector's own names."""
    name: str = "none"
    label: str = ""
    flags: Tuple[Tuple[str, Optional[str]], ...] = ()  # (op, flag)
    source: str = ""
    outside: Tuple[Tuple[str, str], ...] = ()  # engine backends the catalogue omits: why
    package: str = ""  # the distribution whose version the label names (vllm, sglang)

    def flag(self, op: str) -> Optional[str]:
        return dict(self.flags).get(op)


NO_ENGINE = Engine()


@dataclass(frozen=True)
class Kernel:
    """The kernel an engine runs under a backend name, where `when` holds; `scheme`: the quant
    scheme it runs the layer as (None: the layer's own)."""
    kernel: str
    source: str
    scheme: Optional[str] = None
    when: Condition = Condition()
    key: str = ""  # catalogue.<op>.<name>.engines.<engine>.kernels[i]


@dataclass(frozen=True)
class EngineEntry:
    """One backend as one engine offers it (`name` None: the engine has no such backend)."""
    name: Optional[str]
    source: str
    env: Tuple[Tuple[str, str], ...] = ()
    rules: Tuple[Rule, ...] = ()
    kernels: Tuple[Kernel, ...] = ()
    replaces: Tuple[str, ...] = ()  # rule kinds of the backend's own that the engine's replace


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
                  tuple(sorted((str(k), str(x)) for k, x in v["outside"].items())),
                  str(v["package"] or ""))


def versioned(engine: Engine, packages: Mapping[str, Any]) -> Engine:
    """The engine labelled with the version the platform lists for its distribution (the
    configured label, the release the catalogue models, when the platform lists none)."""
    version = packages.get(engine.package) if engine.package else None
    if version is None:
        return engine
    family = engine.label.split(" ")[0]
    return dataclasses.replace(engine, label=f"{family} {version}")


def _kernels(conf: Any, key: str, file: str) -> Tuple[Kernel, ...]:
    if conf is None:
        return ()
    if not isinstance(conf, list):
        raise bad_input(key, conf, "is not a list of {kernel, source, scheme, when}", where=file)
    out = []
    for i, k in enumerate(conf):
        where = f"{key}[{i}]"
        if not isinstance(k, Mapping):
            raise bad_input(where, k, "is not a mapping (kernel, source, scheme, when)",
                            where=file)
        for f in k:
            if f not in KERNEL_KEYS:
                raise bad_value(where, f, KERNEL_KEYS, what="key", where=file)
        for f in ("kernel", "source"):
            if not isinstance(k.get(f), str) or not k[f].strip():
                raise bad_input(f"{where}.{f}", k.get(f), "is required (a non-empty string)",
                                where=file)
        scheme = k.get("scheme")
        if scheme is not None and scheme not in QUANTS:
            raise bad_value(f"{where}.scheme", scheme, QUANTS, where=file)
        out.append(Kernel(k["kernel"], k["source"], scheme,
                          Condition.parse(k.get("when"), where, file), where))
    return tuple(out)


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
        kernels = _kernels(v["kernels"], f"{where}.kernels", file)
        for kind in v["replaces"]:
            if kind not in KINDS:
                raise bad_value(f"{where}.replaces", kind, tuple(KINDS), what="rule kind",
                                where=file)
        out.append((engine, EngineEntry(v["name"], v["source"], tuple(
            (k, str(x)) for k, x in sorted(v["env"].items())), compiled, kernels,
            tuple(v["replaces"]))))
    return tuple(out)


def entry(backend: Any, engine: str) -> Optional[EngineEntry]:
    return dict(backend.engines).get(engine)


def kernel(engine: Engine, backend: Any, layer: Any, facts: Facts) -> Optional[Kernel]:
    """The kernel `engine` runs for `backend` on this layer and platform (None: not known)."""
    if engine.name == "none":
        return None
    e = entry(backend, engine.name)
    if e is None:
        return None
    return next((k for k in e.kernels if k.when.holds(layer, facts)), None)


def runs_as(engine: Engine, backend: Any, layer: Any, facts: Facts
            ) -> Tuple[Any, Optional[Reason]]:
    """The layer as the engine's kernel for `backend` runs it (its quant scheme replaced where
    the kernel runs another), with the warning that says so; else (layer, None). A layer of a
    scheme the backend does not implement is never run as another one: its `implements` rule
    answers first (an NVFP4 W4A16 kernel does not serve an FP8 layer)."""
    if layer.quant not in backend.implements:
        return layer, None
    k = kernel(engine, backend, layer, facts)
    if k is None or k.scheme is None or k.scheme == layer.quant:
        return layer, None
    return dataclasses.replace(layer, quant=k.scheme), Reason(
        "engine", f"{engine.label} runs {k.kernel} for this {layer.quant} layer under the "
        f"name {backend.name}: it serves the layer as {k.scheme}", k.source,
        f"run as {k.scheme}", "warning", k.key)


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
            else:  # the engine's kernel checks its own `replaces` kinds instead of the backend's
                own = tuple(r for r in b.rules if r.kind not in e.replaces)
                changed.append(dataclasses.replace(b, rules=own + e.rules))
        out[op] = tuple(changed)
    return dataclasses.replace(catalogue, backends=out)


def view(engine: Engine, catalogue: Any, op: str, selected: Optional[str],
         layer: Any = None, facts: Optional[Facts] = None) -> Optional[Dict[str, Any]]:
    """What the decision means to the engine: its name for the backend, the kernel it runs and
    that kernel's quant scheme, and the flags (and environment variables) that request it;
    None without an engine."""
    if engine.name == "none":
        return None
    name, env, flags, kern, scheme = None, {}, [], None, None
    if selected is not None:
        b = catalogue.get(op, selected)
        e = entry(b, engine.name)
        if e is not None and e.name is not None:
            name, env = e.name, dict(e.env)
            flag = engine.flag(op)
            flags = [flag, name] if flag else []
            k = kernel(engine, b, layer, facts) if layer is not None and facts is not None \
                else None
            if k is not None:
                kern, scheme = k.kernel, k.scheme or layer.quant
    return {"name": engine.name, "label": engine.label, "backend": name, "kernel": kern,
            "scheme": scheme, "flags": flags, "env": env}


def command_line(v: Mapping[str, Any]) -> str:
    """`VAR=1 --flag value`: the text form of view()."""
    parts = [f"{k}={val}" for k, val in v["env"].items()] + list(v["flags"])
    return " ".join(parts) if parts else "(none: automatic selection)"


__all__ = ["Engine", "EngineEntry", "Kernel", "NO_ENGINE", "ENGINES", "make_engine",
           "parse_entries", "apply", "view", "command_line", "kernel", "runs_as", "versioned"]
