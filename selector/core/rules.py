"""Rule kinds: a registry of small classes, each compiling one `rules[i]` entry of a backend
file and evaluating it against a layer and the platform facts (None = pass, else a Reason).

How to add a rule kind (one class, here or in a module imported before a catalogue is read):

    @register
    class ToolkitRule(Rule):
        '''Why the kind exists (one line); it is shown in docs/rules.md.'''
        kind = "toolkit"                      # the YAML `kind:` value

        @dataclass(frozen=True)
        class Params:                         # the kind's own YAML fields, typed
            specifier: str                    # no default = required
            package: str = "nvidia-cuda-nvcc" # a default = optional

        def setup(self, p: Params) -> None:   # optional: check and convert the params
            self.spec = parse_specifier(f"{self.key}.specifier", p.specifier, where=self.where)

        @property
        def packages(self) -> Tuple[str, ...]:   # distributions it reads (platform=auto
            return (canonicalize_name(self.params.package),)   # detects exactly these)

        layer_fields = ()                     # layer fields evaluate() reads (property if
                                              # it depends on the params)
        def evaluate(self, layer, facts) -> Optional[Reason]:  # the one verb
            ...
            return self.reason("needs ...", "need ...")

        def describe(self) -> str:            # one line of `selector list`
            return f"toolkit {self.spec}"

The registry gives the list of kinds (KINDS), the field check of backend files (unknown,
missing and mistyped fields name the key and the accepted ones) and the kinds section of
docs/rules.md. Add a test showing the kind fire (tests/test_rules.py). `when:` conditions are
the WHEN table below: one row per key.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, FrozenSet, List, Mapping, Optional, Tuple, Type

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from selector.core import schema
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.schema import Layer, Status
from selector.core.versions import contains, format_capability, parse_specifier

#: the `rule` of the reason an opt-in backend gives (opt-in is a backend field, not a kind)
OPT_IN = "opt_in"


@dataclass(frozen=True)
class Reason:
    """A failed rule: what it says, and the outcome its kind gives (Rule.status, Rule.final).

    status: the candidate status this failure gives its backend (REJECTED, NOT_APPLICABLE,
    OPT_IN), declared by the rule kind; the resolver never reads it from `rule`'s name.
    final: the failure ends the evaluation of the backend and is its only reason (the backend
    does not serve the layer at all: the engine lacks it, or it does not implement the layer).
    """
    rule: str
    message: str
    source: str
    need: str  # short phrase for the one-line summary ("need SM 10.x")
    severity: str = "error"
    key: str = ""  # the rule that produced it, e.g. catalogue.moe.marlin.rules[1]
    status: Status = Status.REJECTED
    final: bool = False

    def to_dict(self) -> Dict[str, str]:
        return {"rule": self.rule, "message": self.message, "source": self.source}


@dataclass(frozen=True)
class Facts:
    """What a platform offers: compute capability, CUDA runtime, installed distributions."""
    capability: Optional[Tuple[int, int]]
    cuda: Optional[Version]
    packages: Mapping[str, Optional[Version]]  # canonical name -> version, None = absent

    def version(self, package: str) -> Optional[Version]:
        return self.packages.get(canonicalize_name(package))


# --------------------------------------------------------------------------------------------
# Small typed pieces rules are made of

@dataclass(frozen=True)
class DeviceSpec:
    """'12.x' (a family), '12.0' (one capability) or '>=7.5' (a minimum)."""
    text: str
    major: int
    minor: Optional[int]
    at_least: bool

    @classmethod
    def parse(cls, key: str, text: Any, where: str) -> DeviceSpec:
        if not isinstance(text, str):
            raise bad_input(key, text, "is not a device spec such as '12.x', '10.0' or '>=7.5'",
                            where=where)
        t = text.replace(" ", "")
        at_least = t.startswith(">=")
        body = t[2:] if at_least else t
        major, _, minor = body.partition(".")
        if not major.isdigit() or not (minor.isdigit() or (minor == "x" and not at_least)):
            raise bad_input(key, text, "is not a device spec such as '12.x', '10.0' or '>=7.5'",
                            where=where)
        return cls(text, int(major), None if minor == "x" else int(minor), at_least)

    def matches(self, cap: Tuple[int, int]) -> bool:
        if self.at_least:
            return cap >= (self.major, self.minor or 0)
        return cap[0] == self.major and (self.minor is None or cap[1] == self.minor)

    def describe(self) -> str:
        if self.at_least:
            return f"SM >= {self.major}.{self.minor}"
        return f"SM {self.major}.{'x' if self.minor is None else self.minor}"


def describe_devices(specs: Tuple[DeviceSpec, ...]) -> str:
    return " or ".join(s.describe() for s in specs)


@dataclass(frozen=True)
class PackageSpec:
    name: str  # canonical
    spec: SpecifierSet

    def holds(self, facts: Facts) -> bool:
        v = facts.packages.get(self.name)
        return v is not None and contains(self.spec, v)

    def describe(self) -> str:
        return f"{self.name} {self.spec}".strip() if str(self.spec) else self.name


def _installed(facts: Facts, name: str) -> str:
    v = facts.packages.get(name)
    return "not installed" if v is None else f"installed: {v}"


def check_values(key: str, values: Any, accepted: Tuple[str, ...], where: str) -> None:
    if not isinstance(values, (list, tuple)):
        raise bad_input(key, values, "is not a list", where=where)
    for v in values:
        if v not in accepted:
            raise bad_value(key, v, accepted, where=where)


def package_specs(packages: Any, key: str, where: str) -> Tuple[PackageSpec, ...]:
    if not isinstance(packages, Mapping):
        raise bad_input(key, packages, "is not a mapping of distribution name to specifier",
                        where=where)
    return tuple(PackageSpec(canonicalize_name(n), parse_specifier(f"{key}.{n}", s, where=where))
                 for n, s in sorted(packages.items()))


# --------------------------------------------------------------------------------------------
# `when:` conditions, table-driven: one row per key

@dataclass(frozen=True)
class WhenTerm:
    """One `when:` key: how its value is parsed, what it tests, which layer field it reads
    (None: a platform term, decided once per platform)."""
    parse: Callable[[Any, str, str], Any]
    holds: Callable[[Any, Any, Facts], bool]  # (parsed value, layer, facts)
    layer_field: Optional[str]
    describe: Callable[[Any], str] = lambda v: ""
    # a threshold term (">=": field >= value, "<=": field <= value; a None field never holds):
    # layers whose field falls between the same thresholds get the same answer (memo keys)
    threshold: Optional[str] = None


def _bool(v: Any, key: str, where: str) -> bool:
    if not isinstance(v, bool):  # else a typo such as 'yes' silently never holds
        raise bad_input(key, v, "is not a boolean (true or false)", where=where)
    return v


def _positive(v: Any, key: str, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise bad_input(key, v, "must be an integer >= 1", where=where)
    return v


def _one_of(accepted: Tuple[str, ...]) -> Callable[[Any, str, str], FrozenSet[str]]:
    def parse(v: Any, key: str, where: str) -> FrozenSet[str]:
        check_values(key, v, accepted, where)
        return frozenset(v)
    return parse


def _devices(v: Any, key: str, where: str) -> Tuple[DeviceSpec, ...]:
    if not isinstance(v, (list, tuple)):
        raise bad_input(key, v, "is not a list of device specs such as ['12.x']", where=where)
    return tuple(DeviceSpec.parse(key, d, where) for d in v)


WHEN: Dict[str, WhenTerm] = {
    "activation": WhenTerm(_one_of(schema.ACTIVATIONS),
                           lambda v, layer, f: layer.activation in v, "activation",
                           lambda v: "/".join(sorted(v))),
    "act_and_mul": WhenTerm(_bool, lambda v, layer, f: layer.act_and_mul == v, "act_and_mul"),
    "quant": WhenTerm(_one_of(schema.QUANTS), lambda v, layer, f: layer.quant in v, "quant",
                      lambda v: "/".join(sorted(v))),
    "ep": WhenTerm(_bool, lambda v, layer, f: (layer.ep_size > 1) == v, "ep_size"),
    # the all2all exchange of an EP layer (vLLM's batched experts format: deepep_low_latency)
    "all2all": WhenTerm(_one_of(schema.ALL2ALL), lambda v, layer, f: layer.all2all in v,
                        "all2all", lambda v: "/".join(sorted(v))),
    "min_num_experts": WhenTerm(_positive, lambda v, layer, f: layer.num_experts is not None
                                and layer.num_experts >= v, "num_experts", threshold=">="),
    "min_num_tokens": WhenTerm(_positive, lambda v, layer, f: layer.num_tokens is not None
                               and layer.num_tokens >= v, "num_tokens", threshold=">="),
    "max_num_tokens": WhenTerm(_positive, lambda v, layer, f: layer.num_tokens is not None
                               and layer.num_tokens <= v, "num_tokens", threshold="<="),
    "devices": WhenTerm(_devices, lambda v, layer, f: f.capability is not None and any(
        d.matches(f.capability) for d in v), None),
    "packages": WhenTerm(package_specs, lambda v, layer, f: all(p.holds(f) for p in v), None),
}
WHEN_FIELDS = tuple(WHEN)


@dataclass(frozen=True)
class Condition:
    """A `when:` mapping: every given term must hold."""
    terms: Tuple[Tuple[str, Any], ...] = ()  # (WHEN key, parsed value), in WHEN order

    def __post_init__(self) -> None:  # the terms split once, as (test, value) pairs
        split: Dict[bool, List[Tuple[Callable[..., bool], Any]]] = {True: [], False: []}
        for k, v in self.terms:
            split[WHEN[k].layer_field is not None].append((WHEN[k].holds, v))
        object.__setattr__(self, "_layer", tuple(split[True]))
        object.__setattr__(self, "_platform", tuple(split[False]))

    @classmethod
    def parse(cls, conf: Any, key: str, where: str) -> Condition:
        conf = conf or {}
        if not isinstance(conf, Mapping):
            raise bad_input(f"{key}.when", conf, "is not a mapping of conditions", where=where)
        for k in conf:
            if k not in WHEN:
                raise bad_value(f"{key}.when", k, WHEN_FIELDS, what="key", where=where)
        return cls(tuple((k, WHEN[k].parse(conf[k], f"{key}.when.{k}", where))
                         for k in WHEN if conf.get(k) is not None and
                         not (k == "packages" and not conf[k])))

    def get(self, name: str) -> Any:
        return next((v for k, v in self.terms if k == name), None)

    @property
    def layer_fields(self) -> Tuple[str, ...]:
        return tuple(f for f in (WHEN[k].layer_field for k, _ in self.terms) if f)

    @property
    def plain_fields(self) -> Tuple[str, ...]:
        """The layer fields of the terms that are not thresholds (their values decide)."""
        return tuple(f for f in (WHEN[k].layer_field for k, _ in self.terms
                                 if WHEN[k].threshold is None) if f)

    @property
    def cuts(self) -> Tuple[Tuple[str, int], ...]:
        """(field, boundary) of each threshold term: the term holds for field >= boundary
        (`>=` terms) or field < boundary (`<=` terms, boundary = value + 1)."""
        out = []
        for k, v in self.terms:
            term = WHEN[k]
            if term.threshold is not None and term.layer_field is not None:
                out.append((term.layer_field, v if term.threshold == ">=" else v + 1))
        return tuple(out)

    def platform_holds(self, facts: Facts) -> bool:
        return all(test(v, None, facts) for test, v in self._platform)  # type: ignore[attr-defined]

    def layer_holds(self, layer: Any) -> bool:
        for test, v in self._layer:  # type: ignore[attr-defined]
            if not test(v, layer, None):
                return False
        return True

    def holds(self, layer: Any, facts: Facts) -> bool:
        return self.platform_holds(facts) and self.layer_holds(layer)

    def describe_layer(self) -> str:
        return " ".join(p for p in (WHEN[k].describe(v) for k, v in self.terms
                                    if WHEN[k].layer_field) if p)

    def describe_platform_spec(self) -> str:
        """The platform terms as written: 'SM 12.x', 'flashinfer-python >=0.7'."""
        parts = [p.describe() for p in self.get("packages") or ()]
        if self.get("devices") is not None:
            parts.append(describe_devices(self.get("devices")))
        return ", ".join(parts)

    def describe_platform(self, facts: Facts) -> str:
        parts = [f"{p.name} {facts.version(p.name)}" for p in self.get("packages") or ()]
        if self.get("devices") is not None and facts.capability is not None:
            parts.append(f"SM {format_capability(facts.capability)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Explained:
    """A deliberate difference between a rule and what an installed library declares about
    itself (`doctor --deep` drift report): which claim, why, and the public source."""
    claim: str
    reason: str
    source: str


def _explained(items: Any, key: str, where: str) -> Tuple[Explained, ...]:
    if not isinstance(items, (list, tuple)):
        raise bad_input(key, items, "is not a list of {claim, reason, source}", where=where)
    out = []
    for i, e in enumerate(items):
        if not isinstance(e, Mapping) or set(e) != {"claim", "reason", "source"} or \
                not all(isinstance(v, str) and v.strip() for v in e.values()):
            raise bad_input(f"{key}[{i}]", e, "must have exactly the keys claim, reason and "
                            "source, each a non-empty string", where=where)
        out.append(Explained(e["claim"], e["reason"], e["source"]))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# The registry

KINDS: Dict[str, Type[Rule]] = {}
COMMON_FIELDS = ("kind", "source", "message", "severity", "when", "explained")


def register(cls: Type[Rule]) -> Type[Rule]:
    """Class decorator: make `cls.kind` a rule kind backend files may use."""
    if cls.kind in KINDS or cls.kind == OPT_IN:
        raise ValueError(f"rule kind {cls.kind!r} is already taken")
    KINDS[cls.kind] = cls
    return cls


def kind_fields(cls: Type[Rule]) -> Tuple[str, ...]:
    """The YAML fields of a kind beside the common ones."""
    return tuple(f.name for f in dataclasses.fields(cls.Params))


class Rule:
    """Base of every rule kind: see the recipe at the top of this module.

    A kind owns the outcome of its failure (as Kubernetes' framework plugins return a Status
    code): `status` is the candidate status a failure gives (REJECTED by default;
    NOT_APPLICABLE for a layer the backend does not implement; OPT_IN for a backend that runs
    only on request), and `final` says the failure ends the backend's evaluation. Kinds with
    `declared = False` are never written in a backend file: the resolver adds them when a run
    is planned (the engine does not offer the backend, `implements`, `policy.exclude`, opt-in,
    failed deep probes and verification), so a decision is one loop over rules.
    """
    kind: ClassVar[str]
    status: ClassVar[Status] = Status.REJECTED
    final: ClassVar[bool] = False
    declared: ClassVar[bool] = True
    added_by: ClassVar[str] = ""  # an undeclared kind: when the resolver adds it

    @dataclass(frozen=True)
    class Params:
        pass

    def __init__(self, conf: Mapping[str, Any], key: str, where: str):
        self.key, self.where = key, where
        self.source: str = conf["source"]
        self.message: Optional[str] = conf.get("message")
        self.severity: str = conf.get("severity", "error")
        self.when = Condition.parse(conf.get("when"), key, where)
        self.explained = _explained(conf.get("explained") or [], f"{key}.explained", where)
        self.params = _params(type(self), conf, key, where)
        self.setup(self.params)

    @classmethod
    def planned(cls, key: str, where: str, source: str, message: Optional[str] = None,
                **params: Any) -> Any:
        """A rule the resolver adds when it plans a run (a kind with declared = False), built
        and checked like a declared one."""
        conf: Dict[str, Any] = {"kind": cls.kind, "source": source, **params}
        if message is not None:
            conf["message"] = message
        return cls(conf, key, where)

    def setup(self, p: Any) -> None:
        """Check and convert the typed params (vocabularies, specifiers)."""

    @property
    def layer_fields(self) -> Tuple[str, ...]:
        """The layer fields evaluate() reads (a kind that reads any overrides this)."""
        return ()

    @property
    def packages(self) -> Tuple[str, ...]:
        """Canonical names of the distributions this rule reads (beside its `when`)."""
        return ()

    def evaluate(self, layer: Any, facts: Facts) -> Optional[Reason]:
        """None if the rule passes for this layer on this platform, else the Reason. `layer` is
        a Layer, or None for a rule that reads no layer field (decided once per platform)."""
        raise NotImplementedError

    def reason(self, message: str, need: str) -> Reason:
        if self.message and self.appends_message:
            message = f"{message}: {self.message}"
        return Reason(self.kind, message, self.source, need, self.severity, self.key,
                      self.status, self.final)

    #: the YAML `message` is appended to the reason's own text (False: the message is the text)
    appends_message: ClassVar[bool] = True

    def describe(self) -> str:
        """The rule as one line of the catalogue listing."""
        return self.kind

    @property
    def all_packages(self) -> Tuple[str, ...]:
        return self.packages + tuple(p.name for p in self.when.get("packages") or ())

    @property
    def all_layer_fields(self) -> Tuple[str, ...]:
        return tuple(self.layer_fields) + self.when.layer_fields


# A kind's Params are checked like every config node (schema.validate's type rules).
_type_ok = schema.type_ok
_type_name = schema.type_name


@functools.cache  # one entry per registered kind
def _param_fields(params: type) -> Tuple[Tuple[dataclasses.Field[Any], Any], ...]:
    hints = typing.get_type_hints(params)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(params))


def _params(cls: Type[Rule], conf: Mapping[str, Any], key: str, where: str) -> Any:
    values = {}
    for f, tp in _param_fields(cls.Params):
        if f.name not in conf or (conf[f.name] is None and
                                  f.default is not dataclasses.MISSING):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise bad_input(f"{key}.{f.name}", None, f"is required for a {cls.kind} rule",
                                where=where)
            continue
        v = conf[f.name]
        if not _type_ok(v, tp):
            raise bad_input(f"{key}.{f.name}", v, f"is not {_type_name(tp)}",
                            where=where)
        values[f.name] = tuple(v) if isinstance(v, list) else v
    return cls.Params(**values)


def compile_rule(conf: Any, key: str, where: str) -> Rule:
    """A typed rule from one rules[i] entry, with errors naming the file and key."""
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, "is not a rule mapping (kind, source, ...)", where=where)
    kind = conf.get("kind")
    if kind == OPT_IN:
        raise bad_input(f"{key}.kind", kind, "is a backend field now, not a rule: write "
                        "`opt_in: {reason: ..., source: ...}` at the top of the backend file",
                        where=where)
    if not isinstance(kind, str) or kind not in KINDS:  # a list or mapping is unhashable
        raise bad_value(f"{key}.kind", kind, KINDS, what="rule kind", where=where)
    source = conf.get("source")
    if not isinstance(source, str) or not source.strip() or source == "???":
        raise bad_input(f"{key}.source", source, "is required: cite the PR, issue or release "
                        "that the rule comes from", where=where)
    if conf.get("severity", "error") not in schema.SEVERITIES:
        raise bad_value(f"{key}.severity", conf.get("severity"), schema.SEVERITIES, where=where)
    if conf.get("message") is not None and not isinstance(conf["message"], str):
        raise bad_input(f"{key}.message", conf["message"], "is not a string", where=where)
    cls = KINDS[kind]
    if not cls.declared:
        raise bad_input(f"{key}.kind", kind, f"is not declared in a backend file: {cls.added_by}",
                        where=where)
    accepted = COMMON_FIELDS + kind_fields(cls)
    for f in conf:
        if f not in accepted:
            raise bad_value(f"{key}.{f}", f, accepted, what=f"field for rule kind {kind!r}",
                            where=where)
    try:
        return cls(conf, key, where)
    except SelectorError:
        raise
    except (TypeError, ValueError, AttributeError) as exc:
        raise bad_input(key, dict(conf), f"is malformed: {exc}", where=where) from None


def _outcome(cls: Type[Rule]) -> str:
    """What a failure of the kind gives its backend, as docs/rules.md says it."""
    return f"`{cls.status}`" + (" (ends the evaluation)" if cls.final else "")


def kinds_markdown() -> str:
    """The kinds section of docs/rules.md, derived from the registry."""
    lines = ["## Rule kinds", "",
             "Every rule has `kind`, `source` (required), `message`, `severity` "
             "(error|warning) and `when` (keys: " + ", ".join(f"`{k}`" for k in WHEN) + "). "
             "Each kind declares the status its failure gives its backend (a `warning` "
             "severity never fails a backend: it becomes a note).",
             "", "| kind | fields | what it checks | a failure gives |", "|---|---|---|---|"]
    planned = []
    for kind, cls in KINDS.items():
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        if not cls.declared:
            planned.append(f"| `{kind}` | {cls.added_by} | {doc} | {_outcome(cls)} |")
            continue
        hints = typing.get_type_hints(cls.Params)
        fs = ", ".join(f"`{f.name}`: {_type_name(hints[f.name])}" +
                       ("" if f.default is dataclasses.MISSING and
                        f.default_factory is dataclasses.MISSING else " (optional)")
                       for f in dataclasses.fields(cls.Params)) or "-"
        lines.append(f"| `{kind}` | {fs} | {doc} | {_outcome(cls)} |")
    lines += ["", "Kinds the resolver adds when it plans a run (never written in a backend file; "
              "a backend's `implements:` list and `opt_in:` field are planned the same way, "
              "as a final `quant` rule and an `opt_in` rule):", "",
              "| kind | added when | what it checks | a failure gives |", "|---|---|---|---|",
              *planned]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The kinds

@register
class DeviceRule(Rule):
    """The GPU's compute capability must match one of `devices`."""
    kind = "device"

    @dataclass(frozen=True)
    class Params:
        devices: Tuple[str, ...]

    def setup(self, p: Params) -> None:
        if not p.devices:
            raise bad_input(f"{self.key}.devices", list(p.devices), "must list at least one "
                            "device spec such as '12.x'", where=self.where)
        self.devices = _devices(p.devices, f"{self.key}.devices", self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        want = describe_devices(self.devices)
        if facts.capability is None:
            return self.reason(f"needs a GPU of {want}; this platform has no GPU", f"need {want}")
        if any(d.matches(facts.capability) for d in self.devices):
            return None
        return self.reason(f"needs {want}; this GPU is SM {format_capability(facts.capability)}",
                           f"need {want}")

    def describe(self) -> str:
        return f"device {describe_devices(self.devices)}"


@register
class CudaRule(Rule):
    """The CUDA runtime version must satisfy `specifier`."""
    kind = "cuda"

    @dataclass(frozen=True)
    class Params:
        specifier: str

    def setup(self, p: Params) -> None:
        self.spec = parse_specifier(f"{self.key}.specifier", p.specifier, where=self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        if facts.cuda is None:
            return self.reason(f"needs CUDA {self.spec}; this platform has no CUDA runtime",
                               f"need CUDA {self.spec}")
        if contains(self.spec, facts.cuda):
            return None
        return self.reason(f"needs CUDA {self.spec}; this platform has CUDA {facts.cuda}",
                           f"need CUDA {self.spec}")

    def describe(self) -> str:
        return f"cuda {self.spec}"


@register
class PackageRule(Rule):
    """A distribution must be installed in a version range; `any_of` accepts any of several,
    each a name or a requirement with its own range ("sgl-kernel<=0.3.21")."""
    kind = "package"

    @dataclass(frozen=True)
    class Params:
        package: Optional[str] = None
        any_of: Tuple[str, ...] = ()
        specifier: str = ""

    def setup(self, p: Params) -> None:
        self.spec = parse_specifier(f"{self.key}.specifier", p.specifier, where=self.where)
        reqs = [_requirement(f"{self.key}.any_of", e, self.spec, self.where) for e in p.any_of]
        if p.package:
            reqs.append(PackageSpec(canonicalize_name(p.package), self.spec))
        if not reqs:
            raise bad_input(f"{self.key}.package", None, "is required (or any_of: [...])",
                            where=self.where)
        self.reqs = tuple(reqs)
        self.names = tuple(r.name for r in reqs)

    @property
    def packages(self) -> Tuple[str, ...]:
        return self.names

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        if any(r.holds(facts) for r in self.reqs):
            return None
        if len(self.reqs) == 1:
            r = self.reqs[0]
            spec = f" {r.spec}" if str(r.spec) else ""
            hint = f"pip install '{r.name}{r.spec}'" if str(r.spec) else f"pip install {r.name}"
            return self.reason(f"needs {r.name}{spec} ({_installed(facts, r.name)}; {hint})",
                               f"need {r.name}{spec}")
        want = " or ".join(r.describe() for r in self.reqs)
        found = ", ".join(f"{r.name} {_installed(facts, r.name)}" for r in self.reqs)
        return self.reason(f"needs one of {want} ({found})", f"need {want}")

    def describe(self) -> str:
        return f"package {' | '.join(r.describe() for r in self.reqs)}"


def _requirement(key: str, text: str, spec: SpecifierSet, where: str) -> PackageSpec:
    """'name' or 'name<spec>' (PEP 508 without extras or markers), and the rule's own range."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        req = None
    if req is None or req.extras or req.marker or req.url:
        raise bad_input(key, text, "is not a distribution name with an optional version range "
                        "such as 'sgl-kernel<=0.3.21'", where=where)
    return PackageSpec(canonicalize_name(req.name), req.specifier & spec)


@register
class KnownIssueRule(Rule):
    """A combination known to break: fails whenever its `when` holds (`message` required)."""
    kind = "known_issue"
    appends_message = False  # the message is the whole reason

    def setup(self, p: Any) -> None:
        if not self.message:
            raise bad_input(f"{self.key}.message", None, "is required for a known_issue rule: "
                            "say what breaks and how to avoid it", where=self.where)
        if self.when.get("packages") is None and self.when.get("devices") is None:
            raise bad_input(f"{self.key}.when", {}, "must name packages or devices for a "
                            "known_issue rule", where=self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        seen = self.when.describe_platform(facts)
        assert self.message is not None
        return self.reason(f"{self.message} (this platform: {seen})" if seen else self.message,
                           "hit a known issue")

    def describe(self) -> str:
        parts = [p.describe() for p in self.when.get("packages") or ()]
        if self.when.get("devices") is not None:
            parts.append(describe_devices(self.when.get("devices")))
        return f"known_issue when {', '.join(parts)}"


@register
class FeatureRule(Rule):
    """A layer feature (the `when`) that needs a package version."""
    kind = "feature"

    @dataclass(frozen=True)
    class Params:
        package: str
        specifier: str = ""

    def setup(self, p: Params) -> None:
        if not p.package:
            raise bad_input(f"{self.key}.package", None, "is required for a feature rule",
                            where=self.where)
        self.req = PackageSpec(canonicalize_name(p.package), parse_specifier(
            f"{self.key}.specifier", p.specifier, where=self.where))

    @property
    def packages(self) -> Tuple[str, ...]:
        return (self.req.name,)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        if self.req.holds(facts):
            return None
        what = self.when.describe_layer() or "this layer"
        return self.reason(f"{what} needs {self.req.describe()} "
                           f"({_installed(facts, self.req.name)})",
                           f"need {self.req.describe()} for {what}")

    def describe(self) -> str:
        return f"feature {self.when.describe_layer()} needs {self.req.describe()}"


class _ValuesRule(Rule):
    attr: ClassVar[str]
    accepted: ClassVar[Tuple[str, ...]]
    noun: ClassVar[str]

    @dataclass(frozen=True)
    class Params:
        values: Tuple[str, ...]

    @property
    def layer_fields(self) -> Tuple[str, ...]:
        return (self.attr,)

    def setup(self, p: Params) -> None:
        if not p.values:
            raise bad_input(f"{self.key}.values", list(p.values), "must list at least one value",
                            where=self.where)
        check_values(f"{self.key}.values", p.values, self.accepted, self.where)
        self.values = p.values

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        got = getattr(layer, self.attr)
        if got in self.values:
            return None
        return self.reason(f"supports {self.noun} {', '.join(self.values)} only; this layer "
                           f"uses {got}", f"do not support {self.noun} {got}")

    def describe(self) -> str:
        return f"{self.kind} in {', '.join(self.values)}"


@register
class QuantRule(_ValuesRule):
    """The layer's quant scheme must be one of `values` (else the backend does not implement
    the layer)."""
    kind, attr, accepted, noun = "quant", "quant", schema.QUANTS, "quant scheme"
    status = Status.NOT_APPLICABLE


@register
class ActivationRule(_ValuesRule):
    """The layer's activation must be one of `values`."""
    kind, attr, accepted, noun = "activation", "activation", schema.ACTIVATIONS, "activation"


@register
class DtypeRule(_ValuesRule):
    """The layer's activation dtype must be one of `values`."""
    kind, attr, accepted, noun = "dtype", "dtype", schema.DTYPES, "dtype"


@register
class ActAndMulRule(Rule):
    """Which activations run gated (act_and_mul) and which non-gated."""
    kind = "act_and_mul"
    layer_fields = ("activation", "act_and_mul")

    @dataclass(frozen=True)
    class Params:
        gated: Tuple[str, ...] = ()
        non_gated: Tuple[str, ...] = ()

    def setup(self, p: Params) -> None:
        check_values(f"{self.key}.gated", p.gated, schema.ACTIVATIONS, self.where)
        check_values(f"{self.key}.non_gated", p.non_gated, schema.ACTIVATIONS, self.where)
        self.gated, self.non_gated = p.gated, p.non_gated

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        act = layer.activation
        if act not in self.gated + self.non_gated:
            return None  # an unknown activation is the activation rule's to report
        if (act in self.gated) if layer.act_and_mul else (act in self.non_gated):
            return None
        mode = "gated (act_and_mul=true)" if layer.act_and_mul else "non-gated (act_and_mul=false)"
        other = "non-gated" if layer.act_and_mul else "gated"
        return self.reason(f"runs {act} only {other}; this layer is {mode}",
                           f"do not run {act} {mode.split(' ')[0]}")

    def describe(self) -> str:
        return (f"act_and_mul gated: {', '.join(self.gated) or '-'}; "
                f"non-gated: {', '.join(self.non_gated) or '-'}")


@register
class ParallelRule(Rule):
    """Expert parallelism (ep_size > 1) and the all2all exchanges it works with."""
    kind = "parallel"
    layer_fields = ("ep_size", "all2all")

    @dataclass(frozen=True)
    class Params:
        ep: Optional[bool] = None
        all2all_exclude: Tuple[str, ...] = ()

    def setup(self, p: Params) -> None:
        check_values(f"{self.key}.all2all_exclude", p.all2all_exclude, schema.ALL2ALL,
                     self.where)
        if p.ep is None and not p.all2all_exclude:
            raise bad_input(f"{self.key}.ep", None, "is required: say whether expert "
                            "parallelism is supported (ep: true/false)", where=self.where)
        self.ep, self.exclude = p.ep, p.all2all_exclude

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        if layer.ep_size <= 1:
            return None
        if self.ep is False:
            return self.reason(f"does not support expert parallelism; this layer has ep_size "
                               f"{layer.ep_size} (use ep_size=1)", "do not support EP")
        if layer.all2all in self.exclude:
            return self.reason(f"does not support EP with the {layer.all2all} all2all exchange",
                               f"do not support EP with {layer.all2all}")
        return None

    def describe(self) -> str:
        text = "parallel ep" if self.ep is not False else "parallel no EP"
        return text + (f", not with {', '.join(self.exclude)}" if self.exclude else "")


@register
class ClampRule(Rule):
    """The backend does not apply a model-level SwiGLU clamp (swiglu_limit)."""
    kind = "clamp"
    layer_fields = ("swiglu_limit",)

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        if layer.swiglu_limit is None:
            return None
        return self.reason(f"does not apply the SwiGLU clamp; this layer sets swiglu_limit="
                           f"{layer.swiglu_limit}", "do not apply swiglu_limit")

    def describe(self) -> str:
        return "clamp unsupported"


@register
class ShapeRule(Rule):
    """A layer dimension must be a multiple of `multiple_of` and at least `min` (either or
    both; a dimension the layer does not give passes)."""
    kind = "shape"

    @dataclass(frozen=True)
    class Params:
        dim: str
        multiple_of: int = 1
        min: int = 1

    @property
    def layer_fields(self) -> Tuple[str, ...]:
        return (self.params.dim,)

    def setup(self, p: Params) -> None:
        if p.dim not in schema.SHAPE_DIMS:
            raise bad_value(f"{self.key}.dim", p.dim, schema.SHAPE_DIMS, where=self.where)
        _positive(p.multiple_of, f"{self.key}.multiple_of", self.where)
        _positive(p.min, f"{self.key}.min", self.where)
        if p.multiple_of == 1 and p.min == 1:
            raise bad_input(f"{self.key}.multiple_of", p.multiple_of, "a shape rule needs "
                            "multiple_of or min (an integer >= 2); this one checks nothing",
                            where=self.where)
        self.dim, self.multiple, self.min = p.dim, p.multiple_of, p.min

    def _needs(self) -> List[str]:
        out = [f"{self.dim} % {self.multiple} == 0"] if self.multiple > 1 else []
        return out + ([f"{self.dim} >= {self.min}"] if self.min > 1 else [])

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        got = getattr(layer, self.dim)
        if got is None or (got % self.multiple == 0 and got >= self.min):
            return None
        need = " and ".join(self._needs())
        return self.reason(f"needs {need}; this layer has {self.dim} {got}", f"need {need}")

    def describe(self) -> str:
        return f"shape {' and '.join(self._needs())}"


@register
class ExplicitOnlyRule(Rule):
    """Opt-in only where its `when` holds (devices, packages): never chosen automatically there."""
    kind = "explicit_only"
    status = Status.OPT_IN

    def setup(self, p: Any) -> None:
        if self.when.layer_fields or not self.when.terms:
            raise bad_input(f"{self.key}.when", {}, "must name devices or packages only (the "
                            "platform where the backend runs only when requested)",
                            where=self.where)
        if not self.message:
            raise bad_input(f"{self.key}.message", None, "is required: say why and how to "
                            "request the backend", where=self.where)

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        assert self.message is not None
        return Reason(OPT_IN, self.message, self.source, "are opt-in", "error", self.key,
                      self.status)

    def describe(self) -> str:
        return f"explicit_only where {self.when.describe_platform_spec()}"


def rule_fields() -> Tuple[str, ...]:
    """Every field some rule kind accepts."""
    return tuple(dict.fromkeys(COMMON_FIELDS + tuple(
        f for cls in KINDS.values() if cls.declared for f in kind_fields(cls))))


@dataclass(frozen=True)
class VerifyFailure:
    """One case that `selector doctor --verify` measured wrong (or saw crash) on this machine."""
    quant: str
    act_and_mul: Optional[bool]  # None: whatever the layer's (a linear layer)
    text: str  # the case and what was measured
    activation: Optional[str] = None  # None: whatever the layer's
    limited: Optional[bool] = None  # whether the case set swiglu_limit; None: either


#: (quant, act_and_mul, activation, swiglu_limit set): what a verify case covers (a linear
#: layer's key is (quant, None, None, None))
VerifyKey = Tuple[Optional[str], Optional[bool], Optional[str], Optional[bool]]


@dataclass(frozen=True)
class VerifyVerdict:
    """One backend's `selector doctor --verify` outcome on this machine, for probe=verify: the
    failed cases, the keys of the cases verified OK, and why the others are unverified."""
    failures: Tuple[VerifyFailure, ...] = ()
    verified: FrozenSet[VerifyKey] = frozenset()
    unverified: Tuple[Tuple[Optional[VerifyKey], str], ...] = ()  # (case key or None = all, why)


@register
class VerifyRule(Rule):
    """Added by `probe=verify`, never declared: `doctor --verify` here failed or did not verify it.

    A failed case rejects layers of its quant scheme, gating, activation and clamp with the
    measured error. A layer no case verified OK (an activation, clamp or scheme that was not run,
    or could not be) is rejected as unverified: only what ran is trusted."""
    kind = "verify"
    declared = False
    added_by = ("probe=verify adds it to a backend that failed `selector doctor --verify` on "
                "this machine, or whose verification did not cover the layer")
    layer_fields = ("quant", "act_and_mul", "activation", "swiglu_limit")
    SOURCE = ("selector doctor --verify, measured on this machine (kernels that load yet compute "
              "wrong output: FlashInfer #3294, #2723)")
    failures: Tuple[VerifyFailure, ...] = ()
    verdict: Optional[VerifyVerdict] = None

    @dataclass(frozen=True)
    class Params:
        failures: Tuple[VerifyFailure, ...]
        verdict: Optional[VerifyVerdict] = None
        op: str = ""

    def setup(self, p: Params) -> None:
        self.failures = tuple(p.failures)
        self.verdict = p.verdict
        self.op = p.op

    @classmethod
    def measured(cls, op: str, backend: str,
                 failures: typing.Union[Tuple[VerifyFailure, ...], VerifyVerdict]) -> VerifyRule:
        verdict, failed = ((failures, failures.failures) if isinstance(failures, VerifyVerdict)
                           else (None, tuple(failures)))
        rule: VerifyRule = cls.planned(f"catalogue.{op}.{backend}.verify",
                                       "selector doctor --verify", cls.SOURCE,
                                       failures=failed, verdict=verdict, op=op)
        return rule

    def _layer_key(self, layer: Layer) -> VerifyKey:
        if self.op == "linear":
            return (layer.quant, None, None, None)
        return (layer.quant, layer.act_and_mul, getattr(layer, "activation", None),
                getattr(layer, "swiglu_limit", None) is not None)

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        key = self._layer_key(layer)
        hits = [f.text for f in self.failures if f.quant == layer.quant and
                f.act_and_mul in (None, layer.act_and_mul)
                and f.activation in (None, key[2]) and f.limited in (None, key[3])]
        if hits:
            return self.reason("failed verification on this machine: " + "; ".join(hits),
                               "fail verification here")
        v = self.verdict
        if v is None or key in v.verified:
            return None
        what = (f"{key[0]}" if self.op == "linear" else
                f"{key[0]} {'gated' if key[1] else 'non-gated'} {key[2]}"
                + (" with swiglu_limit" if key[3] else ""))
        why = "; ".join(t for k, t in v.unverified if k is None or k == key) or (
            "no verification case ran this combination")
        return self.reason(f"not verified on this machine (unverified: {what}): {why}",
                           "be verified here")

    def describe(self) -> str:
        return f"verify: {len(self.failures)} failed case(s) on this machine"


# --------------------------------------------------------------------------------------------
# Kinds the resolver adds when it plans a run (never written in a backend file)

@register
class EngineRule(Rule):
    """The chosen engine (`engine=`) does not offer the backend: not applicable, nothing else
    is checked."""
    kind = "engine"
    declared = False
    added_by = "engine= adds it to a backend the engine does not offer (engines.<engine>)"
    status, final = Status.NOT_APPLICABLE, True

    @dataclass(frozen=True)
    class Params:
        why: str
        need: str

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        return self.reason(self.params.why, self.params.need)

    def describe(self) -> str:
        return f"engine: {self.params.why}"


class ImplementsRule(QuantRule):
    """The backend's `implements:` list: a layer of another quant scheme is not applicable and
    nothing else is checked (the reason's rule is `quant`)."""
    declared = False
    final = True

    def setup(self, p: _ValuesRule.Params) -> None:  # an empty list implements nothing
        check_values(f"{self.key}.values", p.values, self.accepted, self.where)
        self.values = p.values

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        if layer.quant in self.values:
            return None
        return self.reason(f"implements {', '.join(self.values)} layers, not {layer.quant}; "
                           "automatic selection decides for this layer",
                           f"do not implement {layer.quant}")


@register
class ExcludeRule(Rule):
    """`policy.exclude` names the backend: never chosen."""
    kind = "exclude"
    declared = False
    added_by = "policy.exclude=[NAME] adds it"

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        return self.reason("policy.exclude names it: never chosen", "are excluded by "
                           "policy.exclude")

    def describe(self) -> str:
        return "excluded by policy.exclude"


class OptInRule(Rule):
    """The backend's `opt_in:` field: it passes its rules yet runs only when requested (or
    admitted by policy.allow_opt_in)."""
    kind = OPT_IN
    declared = False
    status = Status.OPT_IN
    appends_message = False

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        assert self.message is not None
        return self.reason(self.message, "are opt-in")

    def describe(self) -> str:
        return "opt-in"


@register
class ProbeRule(Rule):
    """A deep probe of the backend failed on this machine (`probe=deep`)."""
    kind = "probe"
    declared = False
    added_by = "probe=deep adds it to a backend whose deep probe failed (`selector doctor --deep`)"

    @dataclass(frozen=True)
    class Params:
        probe: str
        finding: str

    def evaluate(self, layer: Optional[Layer], facts: Facts) -> Optional[Reason]:
        p = self.params
        return self.reason(f"deep probe {p.probe} failed: {p.finding}", f"fail probe {p.probe}")

    def describe(self) -> str:
        return f"deep probe {self.params.probe} failed"


def reason_rules() -> Tuple[str, ...]:
    """Every `rule` a reason may carry: the registered kinds, and opt_in."""
    return tuple(KINDS) + (OPT_IN,)
