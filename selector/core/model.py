"""The typed model: composed config (plain data) -> validated, immutable objects.

Every value a user or a config file can set is checked here, once, with an error that names
the key, the value and what is accepted.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeGuard

from packaging.version import Version

from selector.core import engines, schema, validation
from selector.core.entry_points import allowed as entry_point_allowed
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.layer import LAYER_KEYS, make_layer
from selector.core.parallel import Parallel, make_parallel
from selector.core.preference import Preference, make_preference
from selector.core.rules import Facts, Reason, Rule, compile_rule
from selector.core.rules.facts import NOT_DISTRIBUTIONS
from selector.core.schema import Layer
from selector.core.versions import canonicalize_name, format_capability, parse_capability, parse_version


class DetectedEnvironment(Protocol):
    """The machine as `platform=auto` sees it (inspect/environment.Environment is one): GPU, CUDA
    runtime, installed distributions."""

    @property
    def capability(self) -> Optional[Tuple[int, int]]: ...
    @property
    def gpu_name(self) -> Optional[str]: ...
    @property
    def cuda(self) -> Optional[Version]: ...
    @property
    def packages(self) -> Dict[str, Optional[Version]]: ...
    @property
    def notes(self) -> Tuple[str, ...]: ...


# What `platform=auto` calls to look at the machine: environment.detect, or a test's stand-in.
Detect = Callable[[List[str]], DetectedEnvironment]

_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _is_int(v: object) -> TypeGuard[int]:
    """An int (not a bool) within int64: no layer dimension is larger."""
    return isinstance(v, int) and not isinstance(v, bool) and -2 ** 63 <= v < 2 ** 63


def _finite(v: Any) -> bool:
    """A finite number that converts to a float (a 401-digit int overflows)."""
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


@dataclass(frozen=True)
class Platform:
    preset: str
    capability: Optional[Tuple[int, int]]
    cuda: Optional[Version]
    gpu_name: Optional[str]
    packages: Tuple[Tuple[str, Optional[Version]], ...]  # canonical name, version; sorted
    source: str  # preset name, or "detected"
    detection: Tuple[str, ...] = ()  # how each detected value was found

    @property
    def facts(self) -> Facts:
        return Facts(self.capability, self.cuda, dict(self.packages))

    def to_dict(self) -> Dict[str, Any]:
        return {"capability": format_capability(self.capability),
                "cuda": None if self.cuda is None else str(self.cuda),
                "packages": {n: (None if v is None else str(v)) for n, v in self.packages},
                "source": self.source}


@dataclass(frozen=True)
class Policy:
    moe_backend: Tuple[str, ...]  # ("auto",) or backends in order of preference
    linear_backend: Tuple[str, ...]
    strict: bool
    allow_opt_in: Tuple[str, ...] = ()  # opt-in backends automatic selection may choose
    exclude: Tuple[str, ...] = ()  # backends never chosen (policy.exclude)
    preference: str = "auto"  # "measured": rank usable backends by a profile (core/profile.py);
    # "auto": a packaged profile of this GPU model and libraries where one matches, else static
    profile: Optional[str] = None  # the profile file; None: this machine's default one
    engine_default: bool = False  # launch plans pass no backend choice (the engine's own runs)

    def __post_init__(self) -> None:
        """One backend name given as a string is a request of one."""
        for f in ("moe_backend", "linear_backend"):
            if isinstance(getattr(self, f), str):
                object.__setattr__(self, f, (getattr(self, f),))

    def requested(self, op: str) -> Tuple[str, ...]:
        """The ordered request for an op: ('auto',), or names whose first usable one wins."""
        return self.moe_backend if op == "moe" else self.linear_backend


@dataclass(frozen=True)
class OptIn:
    """A backend never chosen automatically (unless policy.allow_opt_in names it)."""
    reason: str
    source: str


@dataclass(frozen=True)
class BackendSpec:
    """One catalogue entry: a backend of one op, its rules and preference, from its YAML."""
    name: str
    op: str
    description: str
    rank: int
    execution: str
    implements: Tuple[str, ...]
    entry_point: Optional[str]
    probes: Tuple[str, ...]
    rules: Tuple[Rule, ...]
    file: str
    opt_in: Optional[OptIn] = None
    preference: Tuple[Preference, ...] = ()
    engines: Tuple[Tuple[str, Any], ...] = ()  # (engine, selector.core.engines.EngineEntry)
    unavailable: Optional[Reason] = None  # set when the chosen engine does not offer it
    declarations: Tuple[Tuple[str, Any], ...] = ()  # schema.DeclarationsConf, set keys
    # schemes only the chosen engine's kernel runs under this name (its entry's `implements`,
    # set by engines.apply): selector's own entry_point does not implement them
    engine_implements: Tuple[str, ...] = ()

    def declared(self, key: str) -> Any:
        """A `declarations:` value of the backend file (None: not declared)."""
        return dict(self.declarations).get(key)

    def packages(self) -> List[str]:
        """Every distribution the rules and preference read (platform=auto detects these)."""
        names = [n for r in self.rules for n in r.all_packages]
        names += [p.name for pref in self.preference for p in pref.when.get("packages") or ()]
        return names


BACKEND_KEYS = tuple(f.name for f in fields(schema.BackendConf))


def make_backend(op: str, name: str, conf: Mapping[str, Any], file: str,
                 known_engines: Sequence[str] = engines.ENGINES) -> BackendSpec:
    """One backend file: its shape checked by validation.validate against schema.BackendConf,
    then its rules, preference and engine entries compiled."""
    key = f"catalogue.{op}.{name}"
    v = validation.validate(schema.BackendConf, conf, key, file)
    if not _is_int(v["rank"]):
        raise bad_input(f"{key}.rank", v["rank"], "must be an integer (lower is preferred)",
                        where=file)
    ep = v["entry_point"]
    if ep is not None and not _ENTRY_POINT.match(ep):
        raise bad_input(f"{key}.entry_point", ep, "is not a 'package.module:Class' path",
                        where=file)
    if ep is not None and not entry_point_allowed(ep):
        raise bad_input(f"{key}.entry_point", ep, "is outside the backends namespace: use "
                        "selector.backends.* or a module registered under the 'selector.backends' "
                        "entry-point group", where=file)
    compiled = tuple(compile_rule(r, f"{key}.rules[{i}]", file) for i, r in enumerate(v["rules"]))
    probes = tuple(_probe(p, f"{key}.probes[{i}]", file) for i, p in enumerate(v["probes"]))
    opt_in = OptIn(v["opt_in"]["reason"], v["opt_in"]["source"]) if v["opt_in"] else None
    decl = v["declarations"]
    return BackendSpec(name, op, v["description"], v["rank"], v["execution"],
                       tuple(v["implements"]), ep, probes, compiled, file,
                       opt_in, tuple(make_preference(p, f"{key}.preference[{i}]", file)
                                     for i, p in enumerate(v["preference"])),
                       engines.parse_entries(v["engines"], f"{key}.engines", file,
                                             known_engines),
                       declarations=tuple(sorted((k, x) for k, x in (decl or {}).items() if x)))


def _probe(item: Any, key: str, file: str) -> str:
    """One `probes:` entry: a probe name, or a declaration (schema.ProbeConf) registered in
    probe_specs under its name."""
    if isinstance(item, str):
        return item
    from selector.core.probe_specs import declare
    return declare(validation.validate(schema.ProbeConf, item, key, file), key, file).name


@dataclass(frozen=True)
class Catalogue:
    backends: Mapping[str, Tuple[BackendSpec, ...]]  # op -> backends sorted by (rank, name)

    def names(self, op: str) -> Tuple[str, ...]:
        return tuple(b.name for b in self.backends[op])

    def get(self, op: str, name: str) -> BackendSpec:
        for b in self.backends[op]:
            if b.name == name:
                return b
        raise KeyError(name)

    def packages(self) -> List[str]:
        names = set()
        for bs in self.backends.values():
            for b in bs:
                names.update(b.packages())
        return sorted(names)


def engine_name_clashes(backends: Sequence[BackendSpec], within: Optional[Any] = None
                        ) -> List[str]:
    """Two backends of one op that implement a common scheme and claim the same name in one
    engine (`engines.<e>.name`): the engine's flag would name one and run the other, and the
    engine's request of that name could not be mapped back. One message per clash, naming both
    files; with `within` (a directory), only clashes that involve a file under it."""
    from selector.core.packaged import packaged_conf_dir
    packaged = f"{packaged_conf_dir()}/"
    seen: Dict[Tuple[str, str, str], List[BackendSpec]] = {}
    out = []
    # packaged files first: a clash is reported on the file that is not packaged
    for b in sorted(backends, key=lambda b: (b.op, not b.file.startswith(packaged), b.file,
                                             b.name)):
        for engine, e in b.engines:
            if e.name is None:
                continue
            claimed = seen.setdefault((b.op, engine, e.name), [])
            # backends of disjoint schemes may share a name: each layer has one of them at
            # most (vLLM's `torch` linear backend is one kernel per FP8 scheme)
            others = [o for o in claimed if set(o.implements) & set(b.implements)]
            claimed.append(b)
            if not others:
                continue
            this, other = b, others[0]
            if within is not None:
                inside = [x for x in (this, other) if x.file.startswith(f"{within}/")]
                if not inside:
                    continue
                this, other = (inside[0], other if inside[0] is this else this)
            out.append(f"{this.file}: catalogue.{this.op}.{this.name}.engines.{engine}.name: "
                       f"{e.name!r} is also the {engine} name of catalogue.{this.op}."
                       f"{other.name} ({other.file}), which implements a scheme it implements "
                       f"too; two backends of one op cannot claim one engine name for one "
                       f"scheme (the engine's flag would run the other one): give "
                       f"{this.name} its own name, or null if {engine} has no such backend")
    return out


def make_catalogue(data: Mapping[str, Any], files: Mapping[Tuple[str, str], Any],
                   known_engines: Sequence[str] = engines.ENGINES,
                   homes: Sequence[Sequence[Any]] = ()) -> Catalogue:
    """The backend files (`data`: {op: {name: conf}}), each joined by the entries the engines'
    homes (`homes`: composer.read_engine_backends) hold for it."""
    out = {}
    for op in schema.OPS:
        confs = (data or {}).get(op) or {}
        bs = [make_backend(op, n, c, str(files.get((op, n), f"backend/{op}/{n}.yaml")),
                           known_engines) for n, c in confs.items()]
        out[op] = tuple(sorted(bs, key=lambda b: (b.rank, b.name)))
    out = engines.join_homes(out, homes)
    clashes = engine_name_clashes([b for bs in out.values() for b in bs])
    if clashes:
        first = clashes[0]
        raise SelectorError(first, where=first.partition(":")[0])
    return Catalogue(out)


def normalize_backends(op: str, value: Any, catalogue: Catalogue) -> Tuple[str, ...]:
    """`policy.<op>_backend`: 'auto', a backend of that op, or an ordered list of them (the
    first usable one wins; 'auto' in the list stands for automatic selection)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise bad_input(f"policy.{op}_backend", value, "is an empty list; accepted: auto, a "
                        "backend name, or a list of backend names")
    names = tuple(dict.fromkeys(normalize_backend(op, v, catalogue) for v in values))
    return ("auto",) if names[0] == "auto" else names


def normalize_backend(op: str, value: Any, catalogue: Catalogue) -> str:
    """One backend name of `policy.<op>_backend`: 'auto' or a backend of that op; '-' is
    accepted for '_'."""
    key = f"policy.{op}_backend"
    if not isinstance(value, str):
        raise bad_input(key, value, "is not a backend name")
    name = value.strip().replace("-", "_").lower()
    names = catalogue.names(op)
    if name != "auto" and name not in names:
        other = [o for o in schema.OPS if o != op and name in catalogue.names(o)]
        hint = f"{value} is a {other[0]} backend" if other else ""
        raise bad_value(key, value, ("auto",) + names, what="backend", hint=hint)
    return name


def make_policy(conf: Mapping[str, Any], catalogue: Catalogue) -> Policy:
    v = validation.validate(schema.PolicyConf, conf, "policy")
    strict, allow, exclude = v["strict"], v["allow_opt_in"], v["exclude"]
    names = {n.strip().replace("-", "_").lower() for n in allow}
    opt_in = sorted({b.name for bs in catalogue.backends.values() for b in bs if b.opt_in})
    for n in sorted(names):
        if n not in opt_in:
            raise bad_value("policy.allow_opt_in", n, opt_in, what="opt-in backend")
    every = sorted({b.name for bs in catalogue.backends.values() for b in bs})
    excluded = {n.strip().replace("-", "_").lower() for n in exclude}
    for n in sorted(excluded):
        if n not in every:
            raise bad_value("policy.exclude", n, every, what="backend")
    return Policy(normalize_backends("moe", conf.get("moe_backend", "auto"), catalogue),
                  normalize_backends("linear", conf.get("linear_backend", "auto"), catalogue),
                  strict, tuple(sorted(names)), tuple(sorted(excluded)),
                  "measured" if v.get("profile") else v["preference"], v.get("profile") or None,
                  bool(v.get("engine_default", False)))


def make_platform(conf: Mapping[str, Any], watched: List[str], detect: Optional[Detect] = None,
                  explicit: Tuple[str, ...] = (), present: Optional[Mapping[str, Version]] = None
                  ) -> Platform:
    """A Platform from the platform config; `platform=auto` fills what is not given by detection.

    One rule for every key under `platform=auto`: a value given explicitly (a package in
    `packages`, or a key named in `explicit` by the overrides) wins over detection, null
    included. `present`: distributions known to be installed whatever the preset says (those
    whose catalogue is loaded), used where the platform gives no version of its own.
    """
    conf = validation.validate(schema.PlatformConf, conf, "platform")
    preset = conf.get("preset") or "auto"
    given_pkgs = conf.get("packages") or {}
    if not isinstance(given_pkgs, Mapping):
        raise bad_input("platform.packages", given_pkgs, "is not a mapping of distribution "
                        "name to version")
    packages: Dict[str, Optional[Version]] = {}
    spelled: Dict[str, str] = {}
    for name, v in given_pkgs.items():
        canon = canonicalize_name(name)
        if canon in spelled and spelled[canon] != name:
            raise bad_input(f"platform.packages.{name}", v, f"names the distribution "
                            f"{canon!r} that platform.packages.{spelled[canon]} names too; "
                            "write it once")
        spelled[canon] = name
        packages[canon] = parse_version(f"platform.packages.{name}", v)
    given_canon = set(packages)
    capability = parse_capability("platform.capability", conf.get("capability"))
    cuda = parse_version("platform.cuda", conf.get("cuda"))
    gpu_name = conf.get("gpu_name")
    notes: Tuple[str, ...] = ()
    if preset == "auto":
        if detect is None:  # the callers (api.load, check) hand in environment.detect
            raise SelectorError("platform=auto needs a detector (selector.inspect.environment.detect)")
        env = detect([n for n in watched if n not in packages])
        if conf.get("capability") is None and "platform.capability" not in explicit:
            capability = env.capability
            if "platform.gpu_name" not in explicit:
                gpu_name = env.gpu_name
        if conf.get("cuda") is None and "platform.cuda" not in explicit:
            cuda = env.cuda
        for n, v in env.packages.items():
            packages.setdefault(n, v)
        for n, v in (present or {}).items():
            if n in watched and packages.get(n) is None and n not in given_canon:
                packages[n] = v
        notes = env.notes
        source = "detected"
    else:
        source = preset
        for n, v in (present or {}).items():
            if n in watched:
                packages.setdefault(n, v)
        for n in watched:
            if n not in NOT_DISTRIBUTIONS:  # a preset that does not name nvcc (or a module
                # vLLM imports) leaves it unknown
                packages.setdefault(n, None)
    return Platform(preset, capability, cuda, gpu_name, tuple(sorted(packages.items())),
                    source, notes)


@dataclass(frozen=True)
class RunConfig:
    """The typed run config: everything one composed config says (catalogue, platform,
    default layer, policy, probe mode)."""
    catalogue: Catalogue
    platform: Platform
    layer: Layer
    policy: Policy
    probe: str
    engine: engines.Engine = engines.NO_ENGINE
    parallel: Parallel = Parallel()


def _known_keys(data: Mapping[str, Any], node: type[Any], key: str) -> None:
    """`+key=value` adds keys that Hydra's struct mode lets through: refuse unknown ones."""
    names = tuple(f.name for f in fields(node))
    for k in data:
        if k not in names and not (node is schema.SelectorConf and k in (
                "catalogue", "explicit", "engines", "engine_backends")):
            raise bad_value(key or "config", k, names, what="key")


def make_run_config(data: Mapping[str, Any], files: Mapping[Tuple[str, str], Any],
                    detect: Optional[Detect] = None,
                    present: Optional[Callable[[Iterable[Any]], Mapping[str, Version]]] = None) -> RunConfig:
    _known_keys(data, schema.SelectorConf, "")
    for k, node in (("platform", schema.PlatformConf), ("policy", schema.PolicyConf),
                    ("parallel", schema.ParallelConf)):
        if isinstance(data.get(k), Mapping):
            _known_keys(data[k], node, k)
    known = tuple(data.get("engines") or engines.ENGINES)  # the tree's engine files
    engine = engines.make_engine(data.get("engine"), known)
    raw = make_catalogue(data.get("catalogue") or {}, files, known,
                         data.get("engine_backends") or ())
    catalogue = engines.apply(raw, engine)
    probe = data.get("probe", "none")
    if probe not in schema.PROBE_MODES:
        raise bad_value("probe", probe, schema.PROBE_MODES)
    watched = sorted(set(canonicalize_name(n) for n in schema.CORE_PACKAGES) |
                     set(catalogue.packages()) | ({engine.package} if engine.package else set()))
    platform = make_platform(data.get("platform") or {}, watched, detect,
                             tuple(data.get("explicit") or ()),
                             present(files.values()) if present is not None else {})
    labelled = engines.versioned(engine, dict(platform.packages))
    if labelled != engine:  # the engine's reasons name the version the platform lists
        engine, catalogue = labelled, engines.apply(raw, labelled)
    layer = make_layer(data.get("layer") or {})
    policy = make_policy(data.get("policy") or {}, catalogue)
    parallel = make_parallel(data.get("parallel") or {})
    return RunConfig(catalogue, platform, layer, policy, probe, engine, parallel)


__all__ = ["Layer", "Platform", "Policy", "BackendSpec", "Catalogue", "RunConfig",
           "make_run_config", "make_layer", "LAYER_KEYS", "SelectorError"]
