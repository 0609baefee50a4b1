"""The small typed pieces rules are made of (device and package specs) and `when:` conditions,
table-driven: one row of WHEN per key."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple

from packaging.specifiers import SpecifierSet

from selector.core import schema
from selector.core.errors import bad_input, bad_value
from selector.core.rules.facts import Facts
from selector.core.versions import canonicalize_name, contains, format_capability, parse_specifier


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


def act_scale_of(layer: Any) -> Optional[str]:
    """A layer's activation-scale granularity: layer.act_scale, else its quant scheme's own
    (schema.SCHEME_ACT_SCALE; None for the schemes without one)."""
    return layer.act_scale or schema.SCHEME_ACT_SCALE.get(layer.quant)


def sequence_parallel(layer: Any) -> bool:
    """vLLM's sequence-parallel MoE (config/parallel.py use_sequence_parallel_moe): expert
    parallelism over TP > 1 and DP > 1 ranks (the layer's EP = TP x DP exceeds its DP)."""
    dp = layer.dp_size or 1
    return bool(dp > 1 and layer.ep_size > dp)


WHEN: Dict[str, WhenTerm] = {
    "activation": WhenTerm(_one_of(schema.ACTIVATIONS),
                           lambda v, layer, f: layer.activation in v, "activation",
                           lambda v: "/".join(sorted(v))),
    "act_and_mul": WhenTerm(_bool, lambda v, layer, f: layer.act_and_mul == v, "act_and_mul"),
    "quant": WhenTerm(_one_of(schema.QUANTS), lambda v, layer, f: layer.quant in v, "quant",
                      lambda v: "/".join(sorted(v))),
    # the activation dtype (vLLM's TRT-LLM FP8 monolithic experts refuse fp16 router logits)
    "dtype": WhenTerm(_one_of(schema.DTYPES), lambda v, layer, f: layer.dtype in v, "dtype",
                      lambda v: "/".join(sorted(v))),
    "ep": WhenTerm(_bool, lambda v, layer, f: (layer.ep_size > 1) == v, "ep_size"),
    # tensor parallelism within the layer (layer.tp_size > 1: with EP, experts split by TP too)
    "tp": WhenTerm(_bool, lambda v, layer, f: (layer.tp_size > 1) == v, "tp_size"),
    # the all2all exchange of an EP layer (vLLM's batched experts format: deepep_low_latency)
    "all2all": WhenTerm(_one_of(schema.ALL2ALL), lambda v, layer, f: layer.all2all in v,
                        "all2all", lambda v: "/".join(sorted(v))),
    # the activation scales' granularity (layer.act_scale, else the quant scheme's own)
    "act_scale": WhenTerm(_one_of(schema.ACT_SCALES),
                          lambda v, layer, f: act_scale_of(layer) in v, "act_scale",
                          lambda v: "/".join(sorted(v))),
    # the router's routing method (a layer whose routing is not known holds no term)
    "routing": WhenTerm(_one_of(schema.ROUTINGS), lambda v, layer, f: layer.routing in v,
                        "routing", lambda v: "/".join(sorted(v))),
    # data parallelism (layer.dp_size > 1), and the sequence-parallel MoE it makes with expert
    # parallelism over TP > 1 (EP = TP x DP > DP)
    "dp": WhenTerm(_bool, lambda v, layer, f: ((layer.dp_size or 1) > 1) == v, "dp_size"),
    "sequence_parallel": WhenTerm(_bool, lambda v, layer, f: sequence_parallel(layer) == v,
                                  "dp_size"),
    # the quantization method that built the layer (layer.quant_method): an engine's method
    # picks the GEMM by itself (SGLang's ModelOpt FP8 linear runs FlashInfer's bmm_fp8); a layer
    # whose method is not known is taken as the engine's own FP8 method ("fp8")
    "quant_method": WhenTerm(_one_of(schema.QUANT_METHODS),
                             lambda v, layer, f: (layer.quant_method or "fp8") in v,
                             "quant_method", lambda v: "/".join(sorted(v))),
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
