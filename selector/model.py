"""The typed model: composed config (plain data) -> validated, immutable objects.

Every value a user or a config file can set is checked here, once, with an error that names
the key, the value and what is accepted.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields, make_dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import Version

from . import schema
from .entry_points import allowed as entry_point_allowed
from .errors import SelectorError, bad_input, bad_value
from .rules import Facts, Rule, compile_rule
from .versions import format_capability, parse_capability, parse_version

_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


_LAYER_FIELDS = tuple(f.name for f in fields(schema.LayerConf))


def _layer_to_dict(self) -> Dict[str, Any]:
    return asdict(self)


def _layer_post_init(self) -> None:
    object.__setattr__(self, "_hash", hash(tuple(self.__dict__[k] for k in _LAYER_FIELDS)))


def _layer_hash(self) -> int:
    """Computed once at construction: a kept Layer costs one dict lookup a decision."""
    return self._hash


# One layer to decide for: the fields of schema.LayerConf (the `layer.*` keys), frozen so that
# it is hashable and can key the decision cache. Derived, so the two cannot drift apart.
Layer = make_dataclass(
    "Layer", [(f.name, f.type, field(default=f.default)) for f in fields(schema.LayerConf)],
    frozen=True, namespace={"to_dict": _layer_to_dict, "__hash__": _layer_hash,
                            "__post_init__": _layer_post_init, "__module__": __name__})


LAYER_KEYS = tuple(f.name for f in fields(Layer))
_CHOICES = {"op": schema.OPS, "quant": schema.QUANTS, "activation": schema.ACTIVATIONS,
            "dtype": schema.DTYPES}
_POSITIVE_INTS = ("ep_size", "tp_size")
_OPTIONAL_INTS = ("num_tokens", "hidden_size", "intermediate_size", "num_experts", "top_k")


def make_layer(values: Mapping[str, Any], where: Optional[str] = None) -> Layer:
    """A validated Layer; `values` may hold any subset of the layer keys."""
    for k in values:
        if k not in LAYER_KEYS:
            raise bad_value("layer", k, LAYER_KEYS, what="key", where=where)
    out: Dict[str, Any] = {}
    for k, v in values.items():
        key = f"layer.{k}"
        if k in _CHOICES:
            if not isinstance(v, str) or v not in _CHOICES[k]:
                hint = ("other schemes are layers NVFP4 backends do not implement"
                        if k == "quant" else "")
                raise bad_value(key, v, _CHOICES[k], where=where, hint=hint)
        elif k == "act_and_mul":
            if not isinstance(v, bool):
                raise bad_input(key, v, "is not a boolean; accepted: true, false", where=where)
        elif k in _POSITIVE_INTS:
            if not _is_int(v) or v < 1:
                raise bad_input(key, v, "must be an integer >= 1", where=where)
        elif k in _OPTIONAL_INTS:
            if v is not None and (not _is_int(v) or v < 1):
                raise bad_input(key, v, "must be null or an integer >= 1", where=where)
        elif k == "swiglu_limit":
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                        not _finite(v) or v <= 0:
                    raise bad_input(key, v, "must be null or a positive number", where=where)
                v = float(v)
        elif k == "all2all":
            if v is not None and (not isinstance(v, str) or v not in schema.ALL2ALL):
                raise bad_value(key, v, schema.ALL2ALL, where=where)
        out[k] = v
    return Layer(**out)


def _is_int(v: Any) -> bool:
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
    moe_backend: str
    linear_backend: str
    strict: bool

    def requested(self, op: str) -> str:
        return self.moe_backend if op == "moe" else self.linear_backend


@dataclass(frozen=True)
class Hint:
    message: str
    source: str
    min_num_tokens: Optional[int]
    max_num_tokens: Optional[int]

    def applies(self, num_tokens: Optional[int]) -> bool:
        return num_tokens is not None and \
            (self.min_num_tokens is None or num_tokens >= self.min_num_tokens) and \
            (self.max_num_tokens is None or num_tokens <= self.max_num_tokens)


HINT_KEYS = tuple(f.name for f in fields(schema.HintConf))


def make_hint(conf: Any, key: str, file: str) -> Hint:
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, "is not a mapping (message, source, max_num_tokens)",
                        where=file)
    for k in conf:
        if k not in HINT_KEYS:
            raise bad_value(key, k, HINT_KEYS, what="key", where=file)
    for k in ("message", "source"):
        if not isinstance(conf.get(k), str) or not conf[k].strip():
            raise bad_input(f"{key}.{k}", conf.get(k), "is required", where=file)
    for k in ("min_num_tokens", "max_num_tokens"):
        if conf.get(k) is not None and (not _is_int(conf[k]) or conf[k] < 1):
            raise bad_input(f"{key}.{k}", conf[k], "must be null or an integer >= 1",
                            where=file)
    return Hint(conf["message"], conf["source"], conf.get("min_num_tokens"),
                conf.get("max_num_tokens"))


@dataclass(frozen=True)
class Backend:
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
    hints: Tuple[Hint, ...] = ()

    @property
    def opt_in(self) -> bool:
        return any(r.kind == "opt_in" for r in self.rules)

    def packages(self) -> List[str]:
        names = []
        for r in self.rules:
            names.extend(getattr(r, "names", ()))
            req = getattr(r, "req", None)
            if req is not None:
                names.append(req.name)
            names.extend(p.name for p in r.when.packages)
        return names


BACKEND_KEYS = tuple(f.name for f in fields(schema.BackendConf))


def make_backend(op: str, name: str, conf: Mapping[str, Any], file: str) -> Backend:
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
                        "backends.* or a module registered under the 'selector.backends' "
                        "entry-point group", where=file)
    rules = conf.get("rules") or []
    if not isinstance(rules, list):
        raise bad_input(f"{key}.rules", rules, "is not a list of rules", where=file)
    compiled = tuple(compile_rule(r, f"{key}.rules[{i}]", file) for i, r in enumerate(rules))
    hints = conf.get("hints") or []
    if not isinstance(hints, list):
        raise bad_input(f"{key}.hints", hints, "is not a list of hints", where=file)
    return Backend(name, op, str(conf.get("description") or ""), rank, execution,
                   tuple(implements), ep, tuple(conf.get("probes") or ()), compiled, file,
                   tuple(make_hint(h, f"{key}.hints[{i}]", file) for i, h in enumerate(hints)))


@dataclass(frozen=True)
class Catalogue:
    backends: Mapping[str, Tuple[Backend, ...]]  # op -> backends sorted by (rank, name)

    def names(self, op: str) -> Tuple[str, ...]:
        return tuple(b.name for b in self.backends[op])

    def get(self, op: str, name: str) -> Backend:
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


def make_catalogue(data: Mapping[str, Any], files: Mapping[Tuple[str, str], Any]) -> Catalogue:
    out = {}
    for op in schema.OPS:
        confs = (data or {}).get(op) or {}
        bs = [make_backend(op, n, c, str(files.get((op, n), f"backend/{op}/{n}.yaml")))
              for n, c in confs.items()]
        out[op] = tuple(sorted(bs, key=lambda b: (b.rank, b.name)))
    return Catalogue(out)


def normalize_backend(op: str, value: Any, catalogue: Catalogue) -> str:
    """`policy.<op>_backend`: 'auto' or a backend of that op; '-' is accepted for '_'."""
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
    return Policy(normalize_backend("moe", conf.get("moe_backend", "auto"), catalogue),
                  normalize_backend("linear", conf.get("linear_backend", "auto"), catalogue),
                  strict)


def make_platform(conf: Mapping[str, Any], watched: List[str], presets: List[str],
                  detect=None, explicit: Tuple[str, ...] = ()) -> Platform:
    """A Platform from the platform config; `platform=auto` fills what is not given by detection.

    One rule for every key under `platform=auto`: a value given explicitly (a package in
    `packages`, or a key named in `explicit` by the overrides) wins over detection, null
    included.
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
        notes = env.notes
        source = "detected"
    else:
        source = preset
        for n in watched:
            packages.setdefault(n, None)
    return Platform(preset, capability, cuda, gpu_name, tuple(sorted(packages.items())),
                    source, notes)


@dataclass(frozen=True)
class Model:
    """Everything one composed config says: catalogue, platform, default layer, policy."""
    catalogue: Catalogue
    platform: Platform
    layer: Layer
    policy: Policy
    probe: str


def _known_keys(data: Mapping[str, Any], node, key: str) -> None:
    """`+key=value` adds keys that Hydra's struct mode lets through: refuse unknown ones."""
    names = tuple(f.name for f in fields(node))
    for k in data:
        if k not in names and not (node is schema.SelectorConf and k in ("catalogue",
                                                                         "explicit")):
            raise bad_value(key or "config", k, names, what="key")


def make_model(data: Mapping[str, Any], files: Mapping[Tuple[str, str], Any],
               presets: List[str], detect=None) -> Model:
    _known_keys(data, schema.SelectorConf, "")
    for k, node in (("platform", schema.PlatformConf), ("policy", schema.PolicyConf)):
        if isinstance(data.get(k), Mapping):
            _known_keys(data[k], node, k)
    catalogue = make_catalogue(data.get("catalogue") or {}, files)
    probe = data.get("probe", "none")
    if probe not in schema.PROBE_MODES:
        raise bad_value("probe", probe, schema.PROBE_MODES)
    watched = sorted(set(canonicalize_name(n) for n in schema.CORE_PACKAGES) |
                     set(catalogue.packages()))
    platform = make_platform(data.get("platform") or {}, watched, presets, detect,
                             tuple(data.get("explicit") or ()))
    layer = make_layer(data.get("layer") or {})
    policy = make_policy(data.get("policy") or {}, catalogue)
    return Model(catalogue, platform, layer, policy, probe)


__all__ = ["Layer", "Platform", "Policy", "Backend", "Catalogue", "Model", "make_model",
           "make_layer", "LAYER_KEYS", "SelectorError"]
