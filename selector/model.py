"""The typed model: composed config (plain data) -> validated, immutable objects.

Every value a user or a config file can set is checked here, once, with an error that names
the key, the value and what is accepted.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeGuard

from packaging.utils import canonicalize_name
from packaging.version import Version

from . import engines, schema
from .entry_points import allowed as entry_point_allowed
from .errors import SelectorError, bad_input, bad_value
from .layer import LAYER_KEYS, make_layer
from .rules import Condition, Facts, Reason, Rule, compile_rule
from .schema import Layer
from .versions import format_capability, parse_capability, parse_version

if TYPE_CHECKING:  # pragma: no cover
    from .environment import Environment

# What `platform=auto` calls to look at the machine: environment.detect, or a test's stand-in.
Detect = Callable[[List[str]], "Environment"]

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
class Preference:
    """When `when` holds, the backend ranks at `rank` instead of its base rank."""
    rank: int
    reason: str
    source: str
    when: Condition


def _text_fields(conf: Any, key: str, file: str, names: Tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, f"is not a mapping ({', '.join(names)})", where=file)
    for k in conf:
        if k not in names:
            raise bad_value(key, k, names, what="key", where=file)
    for k in ("reason", "source"):
        if not isinstance(conf.get(k), str) or not conf[k].strip() or conf[k] == "???":
            raise bad_input(f"{key}.{k}", conf.get(k), "is required", where=file)
    return conf


def make_preference(conf: Any, key: str, file: str) -> Preference:
    conf = _text_fields(conf, key, file, tuple(f.name for f in fields(schema.PreferenceConf)))
    if not _is_int(conf.get("rank")):
        raise bad_input(f"{key}.rank", conf.get("rank"), "must be an integer (lower is "
                        "preferred)", where=file)
    return Preference(conf["rank"], conf["reason"], conf["source"],
                      Condition.parse(conf.get("when"), key, file))


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
    engines: Tuple[Tuple[str, Any], ...] = ()  # (engine, selector.engines.EngineEntry)
    unavailable: Optional[Reason] = None  # set when the chosen engine does not offer it

    def packages(self) -> List[str]:
        """Every distribution the rules and preference read (platform=auto detects these)."""
        names = [n for r in self.rules for n in r.all_packages]
        names += [p.name for pref in self.preference for p in pref.when.get("packages") or ()]
        return names


BACKEND_KEYS = tuple(f.name for f in fields(schema.BackendConf))


def make_backend(op: str, name: str, conf: Mapping[str, Any], file: str) -> BackendSpec:
    key = f"catalogue.{op}.{name}"
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, "is not a mapping (rank, rules, ...)", where=file)
    for k in conf:
        if k not in BACKEND_KEYS:
            raise bad_value(key, k, BACKEND_KEYS, what="key", where=file)
    for k in ("description", "entry_point"):
        if conf.get(k) is not None and not isinstance(conf[k], str):
            raise bad_input(f"{key}.{k}", conf[k], "is not a string", where=file)
    for k in ("implements", "probes"):
        v = conf.get(k)
        if v is not None and (not isinstance(v, list) or
                              not all(isinstance(x, str) for x in v)):
            raise bad_input(f"{key}.{k}", v, "is not a list of strings", where=file)
    rank = conf.get("rank")
    if not _is_int(rank):
        raise bad_input(f"{key}.rank", rank, "must be an integer (lower is preferred)",
                        where=file)
    execution = conf.get("execution", "native")
    if execution not in schema.EXECUTIONS:
        raise bad_value(f"{key}.execution", execution, schema.EXECUTIONS, where=file)
    implements = conf.get("implements", list(schema.NVFP4_QUANTS)) or []
    for q in implements:
        if q not in schema.QUANTS:
            raise bad_value(f"{key}.implements", q, schema.QUANTS, where=file)
    ep = conf.get("entry_point")
    if ep is not None and not (isinstance(ep, str) and _ENTRY_POINT.match(ep)):
        raise bad_input(f"{key}.entry_point", ep, "is not a 'package.module:Class' path",
                        where=file)
    if ep is not None and not entry_point_allowed(ep):
        raise bad_input(f"{key}.entry_point", ep, "is outside the backends namespace: use "
                        "selector.backends.* or a module registered under the 'selector.backends' "
                        "entry-point group", where=file)
    rules = conf.get("rules") or []
    if not isinstance(rules, list):
        raise bad_input(f"{key}.rules", rules, "is not a list of rules", where=file)
    compiled = tuple(compile_rule(r, f"{key}.rules[{i}]", file) for i, r in enumerate(rules))
    opt_in = None
    if conf.get("opt_in") is not None:
        o = _text_fields(conf["opt_in"], f"{key}.opt_in", file, ("reason", "source"))
        opt_in = OptIn(o["reason"], o["source"])
    prefs = conf.get("preference") or []
    if not isinstance(prefs, list):
        raise bad_input(f"{key}.preference", prefs, "is not a list of preference entries",
                        where=file)
    return BackendSpec(name, op, str(conf.get("description") or ""), rank, execution,
                       tuple(implements), ep, tuple(conf.get("probes") or ()), compiled, file,
                       opt_in, tuple(make_preference(p, f"{key}.preference[{i}]", file)
                                     for i, p in enumerate(prefs)),
                       engines.parse_entries(conf.get("engines"), f"{key}.engines", file))


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
    """Two backends of one op that claim the same name in one engine (`engines.<e>.name`): the
    engine's flag would name one and run the other, and the engine's request of that name could
    not be mapped back. One message per clash, naming both files; with `within` (a directory),
    only clashes that involve a file under it."""
    from .config import packaged_conf_dir
    packaged = f"{packaged_conf_dir()}/"
    seen: Dict[Tuple[str, str, str], BackendSpec] = {}
    out = []
    # packaged files first: a clash is reported on the file that is not packaged
    for b in sorted(backends, key=lambda b: (b.op, not b.file.startswith(packaged), b.file,
                                             b.name)):
        for engine, e in b.engines:
            if e.name is None:
                continue
            other = seen.setdefault((b.op, engine, e.name), b)
            if other is b:
                continue
            if within is not None:
                inside = [x for x in (b, other) if x.file.startswith(f"{within}/")]
                if not inside:
                    continue
                b, other = (inside[0], other if inside[0] is b else b)
            out.append(f"{b.file}: catalogue.{b.op}.{b.name}.engines.{engine}.name: "
                       f"{e.name!r} is also the {engine} name of catalogue.{b.op}.{other.name} "
                       f"({other.file}); two backends of one op cannot claim one engine "
                       f"name (the engine's flag would run the other one): give "
                       f"{b.name} its own name, or null if {engine} has no such backend")
    return out


def make_catalogue(data: Mapping[str, Any], files: Mapping[Tuple[str, str], Any]) -> Catalogue:
    out = {}
    for op in schema.OPS:
        confs = (data or {}).get(op) or {}
        bs = [make_backend(op, n, c, str(files.get((op, n), f"backend/{op}/{n}.yaml")))
              for n, c in confs.items()]
        out[op] = tuple(sorted(bs, key=lambda b: (b.rank, b.name)))
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
    strict = conf.get("strict", True)
    if not isinstance(strict, bool):
        raise bad_input("policy.strict", strict, "is not a boolean; accepted: true, false")
    allow = conf.get("allow_opt_in") or []
    if not isinstance(allow, (list, tuple)) or not all(isinstance(n, str) for n in allow):
        raise bad_input("policy.allow_opt_in", allow, "is not a list of backend names")
    names = {n.strip().replace("-", "_").lower() for n in allow}
    opt_in = sorted({b.name for bs in catalogue.backends.values() for b in bs if b.opt_in})
    for n in sorted(names):
        if n not in opt_in:
            raise bad_value("policy.allow_opt_in", n, opt_in, what="opt-in backend")
    exclude = conf.get("exclude") or []
    if not isinstance(exclude, (list, tuple)) or not all(isinstance(n, str) for n in exclude):
        raise bad_input("policy.exclude", exclude, "is not a list of backend names")
    every = sorted({b.name for bs in catalogue.backends.values() for b in bs})
    excluded = {n.strip().replace("-", "_").lower() for n in exclude}
    for n in sorted(excluded):
        if n not in every:
            raise bad_value("policy.exclude", n, every, what="backend")
    return Policy(normalize_backends("moe", conf.get("moe_backend", "auto"), catalogue),
                  normalize_backends("linear", conf.get("linear_backend", "auto"), catalogue),
                  strict, tuple(sorted(names)), tuple(sorted(excluded)))


def make_platform(conf: Mapping[str, Any], watched: List[str], detect: Optional[Detect] = None,
                  explicit: Tuple[str, ...] = (), present: Optional[Mapping[str, Version]] = None
                  ) -> Platform:
    """A Platform from the platform config; `platform=auto` fills what is not given by detection.

    One rule for every key under `platform=auto`: a value given explicitly (a package in
    `packages`, or a key named in `explicit` by the overrides) wins over detection, null
    included. `present`: distributions known to be installed whatever the preset says (those
    whose catalogue is loaded), used where the platform gives no version of its own.
    """
    preset = conf.get("preset") or "auto"
    given_pkgs = conf.get("packages") or {}
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
    if gpu_name is not None and not isinstance(gpu_name, str):
        raise bad_input("platform.gpu_name", gpu_name, "is not a string")
    notes: Tuple[str, ...] = ()
    if preset == "auto":
        if detect is None:
            from .environment import detect as detect_env
            detect = detect_env
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


def _known_keys(data: Mapping[str, Any], node: type[Any], key: str) -> None:
    """`+key=value` adds keys that Hydra's struct mode lets through: refuse unknown ones."""
    names = tuple(f.name for f in fields(node))
    for k in data:
        if k not in names and not (node is schema.SelectorConf and k in ("catalogue",
                                                                         "explicit")):
            raise bad_value(key or "config", k, names, what="key")


def make_run_config(data: Mapping[str, Any], files: Mapping[Tuple[str, str], Any],
                    detect: Optional[Detect] = None) -> RunConfig:
    _known_keys(data, schema.SelectorConf, "")
    for k, node in (("platform", schema.PlatformConf), ("policy", schema.PolicyConf)):
        if isinstance(data.get(k), Mapping):
            _known_keys(data[k], node, k)
    engine = engines.make_engine(data.get("engine"))
    catalogue = engines.apply(make_catalogue(data.get("catalogue") or {}, files), engine)
    probe = data.get("probe", "none")
    if probe not in schema.PROBE_MODES:
        raise bad_value("probe", probe, schema.PROBE_MODES)
    watched = sorted(set(canonicalize_name(n) for n in schema.CORE_PACKAGES) |
                     set(catalogue.packages()))
    from .catalogues import present
    platform = make_platform(data.get("platform") or {}, watched, detect,
                             tuple(data.get("explicit") or ()), present(files.values()))
    layer = make_layer(data.get("layer") or {})
    policy = make_policy(data.get("policy") or {}, catalogue)
    return RunConfig(catalogue, platform, layer, policy, probe, engine)


__all__ = ["Layer", "Platform", "Policy", "BackendSpec", "Catalogue", "RunConfig",
           "make_run_config", "make_layer", "LAYER_KEYS", "SelectorError"]
