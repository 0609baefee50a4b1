"""Engines (`engine=NAME`, one file `conf/engine/NAME.yaml` each): the catalogue as one inference
engine offers it.

An engine is one object (`Engine`) made from one file: its label and distributions, how a
backend choice is passed to it (`choices`: a command-line flag, an environment variable or a key
of a config file, per op and optionally per quant scheme), its backend names (the engine file's
`backends.<op>.<backend>` map, its home: a new engine needs no edit to the backend files, and a
new backend an engine offers is one entry there; a catalogue from another distribution may
name an engine in its own backend file's `engines.<engine>` entry instead), the backends it has
that the catalogue does not model (`outside`), its launch command and parallel rules (`launch`, read by
selector/checkpoint/launchers.py), and where its proof lives (`proof`). Nothing else in selector
branches on an engine's name: docs/engines.md is the recipe.

Each entry names the backend as the engine does (`name: null` when the engine has none), with
the environment variables that go with it, rules that hold only for that engine's integration
and the kernels the engine runs under that name (`kernels:`, the first whose `when` holds; its
`scheme` when the engine runs the layer as another quant scheme). Under `engine=X` a backend X
does not name is `not_applicable`, X's rules join the backend's own, and a decision names the
kernel, its scheme and the choice (flag, variable or config key) that requests the backend.

The adapters (`selector.engines.*`) import their engine lazily: importing this package imports
none of them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from selector.core import schema, validation
from selector.core.engine_view import EngineView
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.rules import KINDS, Condition, Facts, Reason, Rule, compile_rule
from selector.core.schema import OPS, QUANTS

# The engines of the packaged tree (conf/engine/*.yaml) when no config tree is at hand. A run
# takes the list from its config tree (composer: data["engines"]), so a new engine is its file.


def _packaged_engines() -> Tuple[str, ...]:
    from selector.core.packaged import packaged_conf_dir
    try:
        files = (packaged_conf_dir() / "engine").glob("*.yaml")
    except SelectorError:
        return ("none",)
    return ("none",) + tuple(sorted(p.stem for p in files if p.stem != "none"))


ENGINES = _packaged_engines()
ENTRY_KEYS = tuple(f.name for f in dataclasses.fields(schema.EngineEntryConf))
KERNEL_KEYS = ("kernel", "scheme", "when", "source")
CHOICE_KINDS = ("flag", "env", "config")
CHOICE_KEYS = ("op", "schemes", "source", "list") + CHOICE_KINDS
# selector behaviours an engine's own issues motivate (`cites:` in its file): under that engine
# the resolver cites them (vLLM's issues under engine=vllm only): `implements`, a requested
# backend that does not implement the layer's scheme leaves it to automatic selection;
# `weight_only`, a weight-only backend serves a W4A4 checkpoint as W4A16
CITE_KEYS = ("implements", "weight_only")


@dataclass(frozen=True)
class Choice:
    """How the engine is told the backend of one op (of some quant schemes; none: all): a
    command-line `flag`, an environment variable (`env`) or a dotted `config` key of the
    engine's config file (TensorRT-LLM's `moe_config.backend`); `list`: the key holds a list."""
    op: str
    kind: str
    key: str
    schemes: Tuple[str, ...] = ()
    source: str = ""
    list: bool = False

    def serves(self, op: str, scheme: Optional[str]) -> bool:
        return self.op == op and (not self.schemes or scheme is None or scheme in self.schemes)


@dataclass(frozen=True)
class Engine:
    """The engine a Selector answers for; `none` keeps selector's own names."""
    name: str = "none"
    label: str = ""
    choices: Tuple[Choice, ...] = ()
    source: str = ""
    outside: Tuple[Tuple[str, str], ...] = ()  # engine backends the catalogue omits: why
    package: str = ""  # the distribution whose version the label names (vllm, sglang)
    distributions: Tuple[str, ...] = ()  # every distribution that ships the engine
    proof: str = ""  # the test that runs the engine's own code against selector
    entries: Tuple[Tuple[str, str, Any], ...] = ()  # (op, backend, EngineEntry): the file's own
    launch: Tuple[Tuple[str, Any], ...] = ()  # `launch:` as given (checkpoint/launchers.py)
    cites: Tuple[Tuple[str, str], ...] = ()  # (CITE_KEYS key, the engine's source for it)
    # False: the catalogue's preference reasons tell another engine's order (vLLM's), so this
    # engine's decisions say a backend-file rank by its number alone (its own entries' reasons
    # still hold)
    rank_reasons: bool = True

    def choice(self, op: str, scheme: Optional[str] = None) -> Optional[Choice]:
        """The choice that requests `op`'s backend for a layer of `scheme` (None: any)."""
        return next((c for c in self.choices if c.serves(op, scheme)), None)

    def cite(self, key: str, default: str) -> str:
        """The engine's source for one of selector's behaviours (CITE_KEYS), else `default`."""
        return dict(self.cites).get(key, default)

    def flag(self, op: str, scheme: Optional[str] = None) -> Optional[str]:
        """The command-line flag of that choice (None: no flag, or not a flag)."""
        c = self.choice(op, scheme)
        return c.key if c is not None and c.kind == "flag" else None


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
    names: Tuple[Tuple[str, str], ...] = ()  # (scheme, name): the engine's name for one scheme
    automatic: str = ""  # source: the engine's automatic path reaches an opt-in backend
    preference: Tuple[Any, ...] = ()  # model.Preference entries of the engine's own order
    # schemes the engine runs under this name beyond the backend's own `implements` (SGLang's
    # --fp8-gemm-backend deep_gemm runs DeepGEMM's MXFP8 GEMM for an MXFP8 layer): the engine's
    # view of the catalogue implements them, checked by the backend's rules and the entry's own
    implements: Tuple[str, ...] = ()

    def name_for(self, scheme: Optional[str]) -> Optional[str]:
        """The engine's name for a layer of `scheme` (SGLang runs gpt-oss MXFP4 under
        flashinfer_mxfp4, its NVFP4 under flashinfer_trtllm)."""
        return dict(self.names).get(scheme or "", self.name) if self.name else None


def make_engine(conf: Optional[Mapping[str, Any]], known: Sequence[str] = ENGINES,
                file: str = "") -> Engine:
    """The chosen engine from its config file (`conf/engine/<name>.yaml`); `known`: the
    engine files of the config tree (their names are the engines backend files may name)."""
    v = validation.validate(schema.EngineConf, conf or {}, "engine", file or None)
    name = v["name"]
    accepted = tuple(dict.fromkeys(("none",) + tuple(known)))
    if name not in accepted:
        raise bad_value("engine", name, accepted, what="engine")
    if name == "none":
        return NO_ENGINE
    import json
    return Engine(name, str(v["label"] or name), _choices(v, file), str(v["source"]),
                  tuple(sorted((str(k), str(x)) for k, x in v["outside"].items())),
                  str(v["package"] or ""), tuple(str(d) for d in v["distributions"]),
                  str(v["proof"] or ""), _own_entries(v["backends"], file),
                  tuple(sorted((str(k), json.dumps(x, sort_keys=True, default=str))
                               for k, x in v["launch"].items())), _cites(v["cites"], file),
                  bool(v["rank_reasons"]))


def _cites(conf: Mapping[str, Any], file: str) -> Tuple[Tuple[str, str], ...]:
    """`cites:`, each key one of CITE_KEYS and each value a non-empty source."""
    for k, x in conf.items():
        if k not in CITE_KEYS:
            raise bad_value("engine.cites", k, CITE_KEYS, what="key", where=file or None)
        if not isinstance(x, str) or not x.strip():
            raise bad_input(f"engine.cites.{k}", x, "is not a source (a non-empty string)",
                            where=file or None)
    return tuple(sorted((str(k), str(x)) for k, x in conf.items()))


def _choices(v: Mapping[str, Any], file: str) -> Tuple[Choice, ...]:
    """`choices:` (or the shorthand `moe_flag:` / `linear_flag:`), each checked."""
    out = [Choice(op, "flag", str(v[f"{op}_flag"]), source=str(v["source"]))
           for op in OPS if v.get(f"{op}_flag")]
    for i, c in enumerate(v["choices"]):
        key = f"engine.choices[{i}]"
        if not isinstance(c, Mapping):
            raise bad_input(key, c, "is not a mapping {op, flag|env|config, schemes, source}",
                            where=file or None)
        for f in c:
            if f not in CHOICE_KEYS:
                raise bad_value(key, f, CHOICE_KEYS, what="key", where=file or None)
        kinds = [k for k in CHOICE_KINDS if c.get(k)]
        if c.get("op") not in OPS:
            raise bad_value(f"{key}.op", c.get("op"), OPS, where=file or None)
        if len(kinds) != 1 or not isinstance(c[kinds[0]], str):
            raise bad_input(key, dict(c), "names exactly one of flag, env or config (a string):"
                            " how the engine is told the backend", where=file or None)
        schemes = c.get("schemes") or []
        if not isinstance(schemes, list) or any(s not in QUANTS for s in schemes):
            raise bad_value(f"{key}.schemes", schemes, QUANTS, where=file or None)
        if kinds[0] == "env":
            _env_name(f"{key}.env", c["env"], file)
        if kinds[0] == "config":
            _config_key(f"{key}.config", c["config"], [o.key for o in out
                                                       if o.kind == "config"], file)
        out.append(Choice(c["op"], kinds[0], c[kinds[0]], tuple(schemes),
                          str(c.get("source") or v["source"]), bool(c.get("list"))))
    return tuple(out)


def _env_name(key: str, name: Any, file: str) -> None:
    """An environment variable's name, as a shell takes it in `NAME=value command` (a launch
    plan prints it unquoted: core/text.py)."""
    from selector.core.text import is_shell_name
    if not is_shell_name(name):
        raise bad_input(key, name, "is not an environment variable name: letters, digits and "
                        "_, not starting with a digit ([A-Za-z_][A-Za-z0-9_]*)",
                        where=file or None)


def _config_key(key: str, dotted: str, others: Sequence[str], file: str) -> None:
    """A dotted config key: non-empty parts, and neither a section of another choice's key nor
    under one (`moe_config` and `moe_config.backend` cannot both be set)."""
    if not all(p.strip() for p in dotted.split(".")):
        raise bad_input(key, dotted, "is not a dotted config key (a.b, no empty part)",
                        where=file or None)
    for o in others:
        if o != dotted and (o.startswith(dotted + ".") or dotted.startswith(o + ".")):
            raise bad_input(key, dotted, f"collides with the config key {o!r} of another "
                            "choice: one key cannot hold both a value and a section",
                            where=file or None)


def _own_entries(conf: Any, file: str) -> Tuple[Tuple[str, str, Any], ...]:
    """The engine file's `backends.<op>.<backend>` entries (its names for catalogue backends
    whose files do not name it)."""
    if not isinstance(conf, Mapping):
        raise bad_input("engine.backends", conf, "is not a mapping of op to {catalogue backend: "
                        "engine entry}", where=file or None)
    out = []
    for op, entries in conf.items():
        if op not in OPS:
            raise bad_value("engine.backends", op, OPS, what="op", where=file or None)
        if not isinstance(entries, Mapping):
            raise bad_input(f"engine.backends.{op}", entries, "is not a mapping of catalogue "
                            "backend to {name, source, env, rules, kernels}", where=file or None)
        for backend, raw in entries.items():
            out.append((op, str(backend), _entry(raw, f"engine.backends.{op}.{backend}", file)))
    return tuple(out)


def versioned(engine: Engine, packages: Mapping[str, Any]) -> Engine:
    """The engine labelled with the version the platform lists for its distribution (the
    first of `package` and `distributions` it lists; else the configured label, the release
    the catalogue models)."""
    names = ([engine.package] if engine.package else []) + list(engine.distributions)
    version = next((packages[n] for n in names if packages.get(n) is not None), None)
    if version is None:
        return engine
    family = engine.label.rsplit(" ", 1)[0] if " " in engine.label else engine.label
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


def _entry(raw: Any, where: str, file: str) -> EngineEntry:
    """One engine entry, validated against schema.EngineEntryConf."""
    v = validation.validate(schema.EngineEntryConf, raw, where, file)
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
    for k in v["env"]:
        _env_name(f"{where}.env", k, file)
    for scheme, n in v["names"].items():
        if scheme not in QUANTS:
            raise bad_value(f"{where}.names", scheme, QUANTS, what="quant scheme", where=file)
        if not isinstance(n, str) or not n.strip():
            raise bad_input(f"{where}.names.{scheme}", n, "is not a backend name", where=file)
    automatic = v["automatic"]
    if automatic is not None and (not isinstance(automatic, str) or not automatic.strip()):
        raise bad_input(f"{where}.automatic", automatic, "is not a source (the engine file "
                        "whose automatic path reaches the backend)", where=file)
    from selector.core.preference import make_preference
    preference = tuple(make_preference(p, f"{where}.preference[{i}]", file)
                       for i, p in enumerate(v["preference"]))
    for i, scheme in enumerate(v["implements"]):
        if scheme not in QUANTS:
            raise bad_value(f"{where}.implements[{i}]", scheme, QUANTS, what="quant scheme",
                            where=file)
        if v["name"] is None:
            raise bad_input(f"{where}.implements", v["implements"], "needs a name: the engine "
                            "has no such backend (name: null)", where=file)
    return EngineEntry(v["name"], v["source"], tuple(
        (k, str(x)) for k, x in sorted(v["env"].items())), compiled, kernels,
        tuple(v["replaces"]), tuple(sorted((str(k), str(x)) for k, x in v["names"].items())),
        automatic or "", preference, tuple(dict.fromkeys(str(q) for q in v["implements"])))


def parse_entries(conf: Any, key: str, file: str, known: Sequence[str] = ENGINES
                  ) -> Tuple[Tuple[str, EngineEntry], ...]:
    """A backend file's `engines:` section: ((engine, entry), ...). `known`: the engines of
    the config tree."""
    if conf is None:
        return ()
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, "is not a mapping of engine name to entry", where=file)
    accepted = tuple(e for e in known if e != "none")
    out: List[Tuple[str, EngineEntry]] = []
    for engine, raw in conf.items():
        if engine not in accepted:
            raise bad_value(key, engine, accepted, what="engine", where=file)
        out.append((engine, _entry(raw, f"{key}.{engine}", file)))
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


def join_homes(backends: Mapping[str, Sequence[Any]], homes: Sequence[Sequence[Any]]
               ) -> Dict[str, Tuple[Any, ...]]:
    """Each engine's home entries (`homes`: [[engine, file, {op: {backend: entry}}], ...], the
    engine files' `backends:`) joined to the backends they name, beside the entries of the
    backend files themselves (a catalogue from another distribution names the engines in its
    own files): every run sees every engine's names, whichever engine it answers for. A name
    the catalogue lacks, or a backend named in both places, is refused naming the file."""
    out = {op: list(bs) for op, bs in backends.items()}
    for engine, file, conf in homes:
        for op, name, e in _own_entries(conf or {}, file):
            names = [b.name for b in out.get(op, ())]
            key = f"engine.backends.{op}.{name}"
            if name not in names:
                raise bad_value(f"engine.backends.{op}", name, names, what=f"{op} backend",
                                where=file, hint=f"engine={engine} names a backend the "
                                "catalogue lacks")
            i = names.index(name)
            b = out[op][i]
            if entry(b, engine) is not None:
                raise bad_input(key, e.name, f"is also named in {b.file} (engines.{engine}): "
                                "name a backend in one place", where=file)
            out[op][i] = dataclasses.replace(b, engines=b.engines + ((engine, e),))
    return {op: tuple(bs) for op, bs in out.items()}


# every capability a `devices` term could name (DeviceSpec.matches is tried on each)
_CAPABILITIES = tuple((major, minor) for major in range(5, 16) for minor in range(10))


def _sms(specs: Any) -> FrozenSet[Tuple[int, int]]:
    return frozenset(c for c in _CAPABILITIES if any(d.matches(c) for d in specs))


def moot_under(rule: Rule, e: EngineEntry) -> bool:
    """A backend rule whose `when` names only schemes (GPUs) the entry's unconditional `quant`
    (`device`) rule refuses: never the reason under that engine, its words another engine's
    (TensorRT-LLM's NVFP4-only `cutlass` GEMM vs FlashInfer's block-FP8 rules)."""
    for own in e.rules:
        if own.when.terms:
            continue
        quants = rule.when.get("quant")
        if own.kind == "quant" and quants is not None and \
                not set(quants) & set(getattr(own, "values", ())):
            return True
        devices = rule.when.get("devices")
        if own.kind == "device" and devices is not None and \
                not _sms(devices) & _sms(getattr(own, "devices", ())):
            return True
    return False


def apply(catalogue: Any, engine: Engine) -> Any:
    """The catalogue as `engine` offers it: backends it does not name carry their
    not_applicable reason, named ones gain the engine's rules (its entries are joined to the
    backends when the catalogue is made: join_homes)."""
    if engine.name == "none":
        return catalogue
    out: Dict[str, Tuple[Any, ...]] = {}
    for op, backends in catalogue.backends.items():
        changed = []
        for b in backends:
            e = entry(b, engine.name)
            if e is None or e.name is None:
                source = e.source if e is not None else (engine.source or b.file)
                why = (f"{engine.label} has no {b.name} backend" if e is not None else
                       f"{engine.label} names no {b.name} backend: its engine file lists the "
                       "backends it has" if engine.entries else
                       f"{b.name} has no engines.{engine.name} entry in {b.file}")
                changed.append(dataclasses.replace(b, unavailable=Reason(
                    "engine", why, source, f"not offered by {engine.label}")))
            else:  # the engine's kernel checks its own `replaces` kinds instead of the backend's
                kept = tuple(r for r in b.rules if r.kind not in e.replaces
                             and not moot_under(r, e))
                # an opt-in backend the engine reaches automatically is not opt-in under it, and
                # the engine's own order comes before the backend's
                own = b.preference if engine.rank_reasons else tuple(
                    dataclasses.replace(p, reason="", source="") for p in b.preference)
                changed.append(dataclasses.replace(
                    b, rules=kept + e.rules, preference=e.preference + own,
                    opt_in=None if e.automatic else b.opt_in,
                    implements=tuple(dict.fromkeys(b.implements + e.implements)),
                    engine_implements=tuple(q for q in e.implements if q not in b.implements)))
        out[op] = tuple(changed)
    return dataclasses.replace(catalogue, backends=out)


def view(engine: Engine, catalogue: Any, op: str, selected: Optional[str],
         layer: Any = None, facts: Optional[Facts] = None) -> Optional[EngineView]:
    """What the decision means to the engine: its name for the backend, the kernel it runs and
    that kernel's quant scheme, and how to request it (flags, environment variables, config
    keys); None without an engine."""
    if engine.name == "none":
        return None
    if selected is None:
        return EngineView(engine.name, engine.label)
    b = catalogue.get(op, selected)
    e = entry(b, engine.name)
    if e is None or e.name is None:
        return EngineView(engine.name, engine.label)
    quant = layer.quant if layer is not None else None
    name, env = e.name_for(quant) or e.name, dict(e.env)
    flags: Tuple[str, ...] = ()
    config: Dict[str, Any] = {}
    c = engine.choice(op, quant)
    if c is not None and c.kind == "flag":  # one the engine's code refuses for the layer's
        flags = (c.key, name)  # scheme is withheld above core (api.Selector.decide)
    elif c is not None and c.kind == "env":
        env[c.key] = name
    elif c is not None:
        config[c.key] = [name] if c.list else name
    k = kernel(engine, b, layer, facts) if layer is not None and facts is not None else None
    return EngineView(engine.name, engine.label, name, k.kernel if k is not None else None,
                      (k.scheme or layer.quant) if k is not None else None, flags, env, config)


def command_line(v: EngineView) -> str:
    """`VAR=1 --flag value` (and `config key: value` for an engine's config file): the text
    form of view()."""
    return v.command_line()


__all__ = ["Engine", "EngineEntry", "EngineView", "Kernel", "Choice", "NO_ENGINE", "ENGINES",
           "make_engine", "parse_entries", "apply", "view", "command_line", "kernel", "runs_as",
           "versioned", "join_homes"]
