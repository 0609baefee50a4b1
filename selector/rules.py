"""Rule kinds: each a small class that compiles one RuleConf and checks it against a layer and
the platform facts, returning None (pass) or a Reason a person can act on.

A new rule kind is one class here, registered in KINDS, plus its fields in schema.RuleConf.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from . import schema
from .errors import SelectorError, bad_input, bad_value
from .versions import contains, format_capability, parse_specifier


@dataclass(frozen=True)
class Reason:
    rule: str
    message: str
    source: str
    need: str  # short phrase for the one-line summary ("need SM 10.x")
    severity: str = "error"
    key: str = ""  # the rule that produced it, e.g. catalogue.moe.marlin.rules[1]

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
    def parse(cls, key: str, text: Any, where: str) -> "DeviceSpec":
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


def _describe_devices(specs: Tuple[DeviceSpec, ...]) -> str:
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


@dataclass(frozen=True)
class Condition:
    """A rule's `when`: every given condition must hold for the rule to apply."""
    activation: Optional[frozenset] = None
    act_and_mul: Optional[bool] = None
    quant: Optional[frozenset] = None
    devices: Optional[Tuple[DeviceSpec, ...]] = None
    packages: Tuple[PackageSpec, ...] = ()
    ep: Optional[bool] = None
    min_num_experts: Optional[int] = None

    @classmethod
    def parse(cls, conf: Mapping[str, Any], key: str, where: str) -> "Condition":
        conf = conf or {}
        if not isinstance(conf, Mapping):
            raise bad_input(f"{key}.when", conf, "is not a mapping of conditions", where=where)
        for k in conf:
            if k not in WHEN_FIELDS:
                raise bad_value(f"{key}.when", k, WHEN_FIELDS, what="key", where=where)
        for k in ("act_and_mul", "ep"):  # else a typo such as 'yes' silently never holds
            if conf.get(k) is not None and not isinstance(conf[k], bool):
                raise bad_input(f"{key}.when.{k}", conf[k], "is not a boolean (true or false)",
                                where=where)
        m = conf.get("min_num_experts")
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise bad_input(f"{key}.when.min_num_experts", m, "must be an integer >= 1",
                            where=where)
        act = conf.get("activation")
        quant = conf.get("quant")
        _check_values(f"{key}.when.activation", act or [], schema.ACTIVATIONS, where)
        _check_values(f"{key}.when.quant", quant or [], schema.QUANTS, where)
        devices = conf.get("devices")
        return cls(
            activation=frozenset(act) if act is not None else None,
            act_and_mul=conf.get("act_and_mul"),
            quant=frozenset(quant) if quant is not None else None,
            devices=tuple(DeviceSpec.parse(f"{key}.when.devices", d, where) for d in devices)
            if devices is not None else None,
            packages=_package_specs(conf.get("packages") or {}, f"{key}.when.packages", where),
            ep=conf.get("ep"),
            min_num_experts=conf.get("min_num_experts"),
        )

    def holds(self, layer, facts: Facts) -> bool:
        return self.platform_holds(facts) and self.layer_holds(layer)

    @property
    def layer_attrs(self) -> Tuple[str, ...]:
        """The layer fields layer_holds() reads."""
        named = (("activation", self.activation), ("act_and_mul", self.act_and_mul),
                 ("quant", self.quant), ("ep_size", self.ep),
                 ("num_experts", self.min_num_experts))
        return tuple(attr for attr, given in named if given is not None)

    @property
    def has_layer_terms(self) -> bool:
        return (self.activation, self.act_and_mul, self.quant, self.ep,
                self.min_num_experts) != (None,) * 5

    def platform_holds(self, facts: Facts) -> bool:
        if self.devices is not None and (facts.capability is None or not any(
                d.matches(facts.capability) for d in self.devices)):
            return False
        return all(p.holds(facts) for p in self.packages)

    def layer_holds(self, layer) -> bool:
        if self.activation is not None and layer.activation not in self.activation:
            return False
        if self.act_and_mul is not None and layer.act_and_mul != self.act_and_mul:
            return False
        if self.quant is not None and layer.quant not in self.quant:
            return False
        if self.ep is not None and (layer.ep_size > 1) != self.ep:
            return False
        if self.min_num_experts is not None and (layer.num_experts is None or
                                                 layer.num_experts < self.min_num_experts):
            return False
        return True

    def describe_layer(self) -> str:
        parts = []
        if self.activation is not None:
            parts.append("/".join(sorted(self.activation)))
        if self.quant is not None:
            parts.append("/".join(sorted(self.quant)))
        return " ".join(parts)

    def describe_platform(self, facts: Facts) -> str:
        parts = [f"{p.name} {facts.version(p.name)}" for p in self.packages]
        if self.devices is not None and facts.capability is not None:
            parts.append(f"SM {format_capability(facts.capability)}")
        return ", ".join(parts)


WHEN_FIELDS = tuple(f for f in schema.WhenConf.__dataclass_fields__)


def _check_values(key: str, values, accepted, where: str) -> None:
    if not isinstance(values, (list, tuple)):
        raise bad_input(key, values, "is not a list", where=where)
    for v in values:
        if v not in accepted:
            raise bad_value(key, v, accepted, where=where)


def _package_specs(packages: Mapping[str, Any], key: str, where: str) -> Tuple[PackageSpec, ...]:
    if not isinstance(packages, Mapping):
        raise bad_input(key, packages, "is not a mapping of distribution name to specifier",
                        where=where)
    return tuple(PackageSpec(canonicalize_name(n), parse_specifier(f"{key}.{n}", s, where=where))
                 for n, s in sorted(packages.items()))


# --------------------------------------------------------------------------------------------
# Rule kinds

class Rule:
    kind: ClassVar[str]
    reads_layer: ClassVar[bool] = False  # evaluate() reads the layer (else facts only)

    @property
    def layer_attrs(self) -> Tuple[str, ...]:
        """The layer fields evaluate() reads (the resolver keys its memo on them)."""
        return ()
    reads: ClassVar[Tuple[str, ...]] = ()  # RuleConf fields this kind uses beside the common ones

    def __init__(self, conf: Mapping[str, Any], key: str, where: str):
        self.key, self.where = key, where
        self.source = conf["source"]
        self.message = conf.get("message")
        self.severity = conf.get("severity", "error")
        self.when = Condition.parse(conf.get("when") or {}, key, where)
        self.parse(conf)

    def parse(self, conf: Mapping[str, Any]) -> None:
        """Compile this kind's fields."""

    def check(self, layer, facts: Facts) -> Optional[Reason]:
        if not self.when.holds(layer, facts):
            return None
        return self.evaluate(layer, facts)

    def evaluate(self, layer, facts: Facts) -> Optional[Reason]:
        raise NotImplementedError

    def reason(self, message: str, need: str) -> Reason:
        if self.message and self.kind not in ("known_issue", "opt_in"):
            message = f"{message}: {self.message}"
        return Reason(self.kind, message, self.source, need, self.severity, self.key)

    def describe(self) -> str:
        """The rule as one line of the catalogue listing."""
        return self.kind


class DeviceRule(Rule):
    kind, reads = "device", ("devices",)

    def parse(self, conf):
        if not conf.get("devices"):
            raise bad_input(f"{self.key}.devices", conf.get("devices"), "must list at least "
                            "one device spec such as '12.x'", where=self.where)
        self.devices = tuple(DeviceSpec.parse(f"{self.key}.devices", d, self.where)
                             for d in conf["devices"])

    def evaluate(self, layer, facts):
        want = _describe_devices(self.devices)
        if facts.capability is None:
            return self.reason(f"needs a GPU of {want}; this platform has no GPU", f"need {want}")
        if any(d.matches(facts.capability) for d in self.devices):
            return None
        return self.reason(f"needs {want}; this GPU is SM {format_capability(facts.capability)}",
                           f"need {want}")

    def describe(self):
        return f"device {_describe_devices(self.devices)}"


class CudaRule(Rule):
    kind, reads = "cuda", ("specifier",)

    def parse(self, conf):
        self.spec = parse_specifier(f"{self.key}.specifier", conf.get("specifier"), where=self.where)

    def evaluate(self, layer, facts):
        if facts.cuda is None:
            return self.reason(f"needs CUDA {self.spec}; this platform has no CUDA runtime",
                               f"need CUDA {self.spec}")
        if contains(self.spec, facts.cuda):
            return None
        return self.reason(f"needs CUDA {self.spec}; this platform has CUDA {facts.cuda}",
                           f"need CUDA {self.spec}")

    def describe(self):
        return f"cuda {self.spec}"


class PackageRule(Rule):
    """A distribution must be installed in a version range; `any_of` accepts any of several."""
    kind, reads = "package", ("package", "any_of", "specifier")

    def parse(self, conf):
        any_of = conf.get("any_of") or []
        if not isinstance(any_of, list) or not all(isinstance(n, str) for n in any_of) or \
                not isinstance(conf.get("package") or "", str):
            raise bad_input(f"{self.key}.any_of" if any_of else f"{self.key}.package",
                            any_of or conf.get("package"), "is not a distribution name (or, for "
                            "any_of, a list of them)", where=self.where)
        names = list(any_of) + ([conf["package"]] if conf.get("package") else [])
        if not names:
            raise bad_input(f"{self.key}.package", None, "is required (or any_of: [...])",
                            where=self.where)
        self.names = tuple(canonicalize_name(n) for n in names)
        self.spec = parse_specifier(f"{self.key}.specifier", conf.get("specifier") or "",
                                    where=self.where)

    def evaluate(self, layer, facts):
        if any(PackageSpec(n, self.spec).holds(facts) for n in self.names):
            return None
        spec = f" {self.spec}" if str(self.spec) else ""
        if len(self.names) == 1:
            n = self.names[0]
            hint = f"pip install '{n}{self.spec}'" if str(self.spec) else f"pip install {n}"
            return self.reason(f"needs {n}{spec} ({_installed(facts, n)}; {hint})",
                               f"need {n}{spec}")
        found = ", ".join(f"{n} {_installed(facts, n)}" for n in self.names)
        return self.reason(f"needs one of {' or '.join(self.names)}{spec} ({found})",
                           f"need {' or '.join(self.names)}{spec}")

    def describe(self):
        return f"package {' | '.join(self.names)} {self.spec}".rstrip()


class KnownIssueRule(Rule):
    """A combination known to break: fails whenever its `when` holds."""
    kind = "known_issue"

    def parse(self, conf):
        if not conf.get("message"):
            raise bad_input(f"{self.key}.message", None, "is required for a known_issue rule: "
                            "say what breaks and how to avoid it", where=self.where)
        if not self.when.packages and self.when.devices is None:
            raise bad_input(f"{self.key}.when", {}, "must name packages or devices for a "
                            "known_issue rule", where=self.where)

    def evaluate(self, layer, facts):
        seen = self.when.describe_platform(facts)
        return self.reason(f"{self.message} (this platform: {seen})" if seen else self.message,
                           "hit a known issue")

    def describe(self):
        parts = [p.describe() for p in self.when.packages]
        if self.when.devices is not None:
            parts.append(_describe_devices(self.when.devices))
        return f"known_issue when {', '.join(parts)}"


class FeatureRule(Rule):
    """A layer feature (the `when`) that needs a package version (the requirement)."""
    kind, reads = "feature", ("package", "specifier")

    def parse(self, conf):
        if not conf.get("package"):
            raise bad_input(f"{self.key}.package", None, "is required for a feature rule",
                            where=self.where)
        self.req = PackageSpec(canonicalize_name(conf["package"]),
                               parse_specifier(f"{self.key}.specifier", conf.get("specifier")
                                               or "", where=self.where))

    def evaluate(self, layer, facts):
        if self.req.holds(facts):
            return None
        what = self.when.describe_layer() or "this layer"
        return self.reason(f"{what} needs {self.req.describe()} "
                           f"({_installed(facts, self.req.name)})",
                           f"need {self.req.describe()} for {what}")

    def describe(self):
        return f"feature {self.when.describe_layer()} needs {self.req.describe()}"


class _ValuesRule(Rule):
    reads_layer = True

    @property
    def layer_attrs(self):
        return (self.attr,)
    reads = ("values",)
    attr: ClassVar[str]
    accepted: ClassVar[Tuple[str, ...]]
    noun: ClassVar[str]

    def parse(self, conf):
        vals = conf.get("values") or []
        if not vals:
            raise bad_input(f"{self.key}.values", vals, "must list at least one value",
                            where=self.where)
        _check_values(f"{self.key}.values", vals, self.accepted, self.where)
        self.values = tuple(vals)

    def evaluate(self, layer, facts):
        got = getattr(layer, self.attr)
        if got in self.values:
            return None
        return self.reason(f"supports {self.noun} {', '.join(self.values)} only; this layer "
                           f"uses {got}", f"do not support {self.noun} {got}")

    def describe(self):
        return f"{self.kind} in {', '.join(self.values)}"


class QuantRule(_ValuesRule):
    kind, attr, accepted, noun = "quant", "quant", schema.QUANTS, "quant scheme"


class ActivationRule(_ValuesRule):
    kind, attr, accepted, noun = "activation", "activation", schema.ACTIVATIONS, "activation"


class DtypeRule(_ValuesRule):
    kind, attr, accepted, noun = "dtype", "dtype", schema.DTYPES, "dtype"


class ActAndMulRule(Rule):
    """Which activations run gated (act_and_mul) and which non-gated."""
    reads_layer = True
    layer_attrs = ("activation", "act_and_mul")
    kind, reads = "act_and_mul", ("gated", "non_gated")

    def parse(self, conf):
        self.gated = tuple(conf.get("gated") or [])
        self.non_gated = tuple(conf.get("non_gated") or [])
        _check_values(f"{self.key}.gated", self.gated, schema.ACTIVATIONS, self.where)
        _check_values(f"{self.key}.non_gated", self.non_gated, schema.ACTIVATIONS, self.where)

    def evaluate(self, layer, facts):
        act = layer.activation
        if act not in self.gated + self.non_gated:
            return None  # an unknown activation is the activation rule's to report
        if (act in self.gated) if layer.act_and_mul else (act in self.non_gated):
            return None
        mode = "gated (act_and_mul=true)" if layer.act_and_mul else "non-gated (act_and_mul=false)"
        other = "non-gated" if layer.act_and_mul else "gated"
        return self.reason(f"runs {act} only {other}; this layer is {mode}",
                           f"do not run {act} {mode.split(' ')[0]}")

    def describe(self):
        return (f"act_and_mul gated: {', '.join(self.gated) or '-'}; "
                f"non-gated: {', '.join(self.non_gated) or '-'}")


class ParallelRule(Rule):
    """Expert parallelism (ep_size > 1) and the all2all exchanges it works with."""
    reads_layer = True
    layer_attrs = ("ep_size", "all2all")
    kind, reads = "parallel", ("ep", "all2all_exclude")

    def parse(self, conf):
        self.ep = conf.get("ep")
        if self.ep is not None and not isinstance(self.ep, bool):
            raise bad_input(f"{self.key}.ep", self.ep, "is not a boolean (true or false)",
                            where=self.where)
        self.exclude = tuple(conf.get("all2all_exclude") or [])
        _check_values(f"{self.key}.all2all_exclude", self.exclude, schema.ALL2ALL, self.where)
        if self.ep is None and not self.exclude:
            raise bad_input(f"{self.key}.ep", None, "is required: say whether expert "
                            "parallelism is supported (ep: true/false)", where=self.where)

    def evaluate(self, layer, facts):
        if layer.ep_size <= 1:
            return None
        if self.ep is False:
            return self.reason(f"does not support expert parallelism; this layer has ep_size "
                               f"{layer.ep_size} (use ep_size=1)", "do not support EP")
        if layer.all2all in self.exclude:
            return self.reason(f"does not support EP with the {layer.all2all} all2all exchange",
                               f"do not support EP with {layer.all2all}")
        return None

    def describe(self):
        text = "parallel ep" if self.ep is not False else "parallel no EP"
        return text + (f", not with {', '.join(self.exclude)}" if self.exclude else "")


class ClampRule(Rule):
    """The backend does not apply a model-level SwiGLU clamp (swiglu_limit)."""
    reads_layer = True
    layer_attrs = ("swiglu_limit",)
    kind = "clamp"

    def evaluate(self, layer, facts):
        if layer.swiglu_limit is None:
            return None
        return self.reason(f"does not apply the SwiGLU clamp; this layer sets swiglu_limit="
                           f"{layer.swiglu_limit}", "do not apply swiglu_limit")

    def describe(self):
        return "clamp unsupported"


class ShapeRule(Rule):
    reads_layer = True

    @property
    def layer_attrs(self):
        return (self.dim,)
    kind, reads = "shape", ("dim", "multiple_of")

    def parse(self, conf):
        dim = conf.get("dim")
        if dim not in schema.SHAPE_DIMS:
            raise bad_value(f"{self.key}.dim", dim, schema.SHAPE_DIMS, where=self.where)
        m = conf.get("multiple_of")
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise bad_input(f"{self.key}.multiple_of", m, "must be an integer >= 1",
                            where=self.where)
        self.dim, self.multiple = dim, m

    def evaluate(self, layer, facts):
        got = getattr(layer, self.dim)
        if got is None or got % self.multiple == 0:
            return None
        return self.reason(f"needs {self.dim} % {self.multiple} == 0; this layer has "
                           f"{self.dim} {got}", f"need {self.dim} % {self.multiple} == 0")

    def describe(self):
        return f"shape {self.dim} % {self.multiple} == 0"


class OptInRule(Rule):
    """Never chosen automatically; only when requested by name."""
    kind = "opt_in"

    def evaluate(self, layer, facts):
        return Reason(self.kind, self.message or "never chosen automatically", self.source,
                      "are opt-in", "error", self.key)

    def describe(self):
        return "opt_in"


@dataclass(frozen=True)
class VerifyFailure:
    """One case that `selector doctor --verify` measured wrong (or saw crash) on this machine."""
    quant: str
    act_and_mul: Optional[bool]  # None: whatever the layer's (a linear layer)
    text: str  # the case and what was measured


class VerifyRule(Rule):
    """The backend computed wrong numbers on this machine. Never declared in a backend file:
    under `probe=verify` the resolver adds one to each backend that failed verification, and it
    rejects the layers of the failed quant scheme (and, for an MoE, gating)."""
    kind = "verify"
    reads_layer = True
    layer_attrs = ("quant", "act_and_mul")
    SOURCE = ("selector doctor --verify, measured on this machine (kernels that load yet compute "
              "wrong output: FlashInfer #3294, #2723)")

    def parse(self, conf):
        raise bad_input(f"{self.key}.kind", "verify", "is not declared in a backend file: "
                        "probe=verify adds it to a backend that failed `selector doctor --verify` "
                        "on this machine", where=self.where)

    @classmethod
    def measured(cls, op: str, backend: str, failures: Tuple[VerifyFailure, ...]) -> "VerifyRule":
        rule = cls.__new__(cls)
        rule.key, rule.where = f"catalogue.{op}.{backend}.verify", "selector doctor --verify"
        rule.source, rule.message, rule.severity = cls.SOURCE, None, "error"
        rule.when = Condition()
        rule.failures = tuple(failures)
        return rule

    def evaluate(self, layer, facts):
        hits = [f.text for f in self.failures if f.quant == layer.quant and
                f.act_and_mul in (None, layer.act_and_mul)]
        if not hits:
            return None
        return self.reason("failed verification on this machine: " + "; ".join(hits),
                           "fail verification here")

    def describe(self):
        return f"verify: {len(self.failures)} failed case(s) on this machine"


KINDS: Dict[str, type] = {cls.kind: cls for cls in (
    DeviceRule, CudaRule, PackageRule, KnownIssueRule, FeatureRule, QuantRule, ActivationRule,
    ActAndMulRule, ParallelRule, ClampRule, DtypeRule, ShapeRule, OptInRule, VerifyRule)}
assert tuple(sorted(KINDS)) == tuple(sorted(schema.RULE_KINDS))

_COMMON = ("kind", "source", "message", "severity", "when")
_DEFAULTS = {f.name: getattr(schema.RuleConf(), f.name) for f in fields(schema.RuleConf)}


def compile_rule(conf: Mapping[str, Any], key: str, where: str) -> Rule:
    """A typed rule from one rules[i] entry, with errors naming the file and key."""
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, "is not a rule mapping (kind, source, ...)", where=where)
    kind = conf.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:  # a list or mapping is unhashable
        raise bad_value(f"{key}.kind", kind, KINDS, what="rule kind", where=where)
    source = conf.get("source")
    if not isinstance(source, str) or not source.strip() or source == "???":
        raise bad_input(f"{key}.source", source, "is required: cite the PR, issue or release "
                        "that the rule comes from", where=where)
    if conf.get("severity", "error") not in schema.SEVERITIES:
        raise bad_value(f"{key}.severity", conf.get("severity"), schema.SEVERITIES, where=where)
    cls = KINDS[kind]
    for f, v in conf.items():
        if f in _COMMON or f in cls.reads:
            continue
        if f in _DEFAULTS and v == _DEFAULTS[f]:
            continue
        raise bad_value(f"{key}.{f}", f, _COMMON + cls.reads, what=f"field for rule kind {kind!r}",
                        where=where)
    try:
        return cls(conf, key, where)
    except SelectorError:
        raise
    except (TypeError, ValueError, AttributeError) as exc:
        raise bad_input(key, dict(conf), f"is malformed: {exc}", where=where) from None
