"""Rule kinds about the layer: features that need a package version, quant schemes,
activations, dtypes, gating, parallelism, clamping, shapes, and explicit-only backends."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, List, Optional, Tuple

from selector.core import schema
from selector.core.errors import bad_input, bad_value
from selector.core.rules.base import Rule, register
from selector.core.rules.facts import OPT_IN, Facts, Reason
from selector.core.rules.when import PackageSpec, _installed, _positive, check_values
from selector.core.schema import Layer, Status
from selector.core.versions import canonicalize_name, parse_specifier


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
class ActScaleRule(_ValuesRule):
    """The granularity of the layer's activation scales (layer.act_scale, else its quant
    scheme's own: a per-tensor FP8 layer vLLM quantizes per token or per 1x128 group) must be
    one of `values`; a scheme without one passes."""
    kind, attr, accepted, noun = "act_scale", "act_scale", schema.ACT_SCALES, \
        "activation scales per"

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        from selector.core.rules.when import act_scale_of
        got = act_scale_of(layer)
        if got is None or got in self.values:
            return None
        return self.reason(f"supports activation scales per {', '.join(self.values)} only; "
                           f"this layer's are per {got}",
                           f"do not support activation scales per {got}")


@register
class RoutingRule(_ValuesRule):
    """The router's routing method (layer.routing) must be one of `values`; a layer whose
    routing method is not known (a layer given without one) passes."""
    kind, attr, accepted, noun = "routing", "routing", schema.ROUTINGS, "routing method"

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        if layer.routing is None or layer.routing in self.values:
            return None
        return self.reason(f"supports routing methods {', '.join(self.values)} only; this "
                           f"layer routes {layer.routing}",
                           f"do not support routing {layer.routing}")


@register
class QuantMethodRule(_ValuesRule):
    """The vLLM quantization method that built the layer (layer.quant_method) must be one of
    `values`; a layer whose method is not known (a layer given without one) passes."""
    kind, attr, accepted, noun = "quant_method", "quant_method", schema.QUANT_METHODS, \
        "quantization method"

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        if layer.quant_method is None or layer.quant_method in self.values:
            return None
        return self.reason(f"runs layers of quantization method {', '.join(self.values)} "
                           f"only; this layer's is {layer.quant_method}",
                           f"do not run {layer.quant_method} layers")


@register
class DataParallelRule(Rule):
    """Data parallelism: `sequence_parallel: false` refuses vLLM's sequence-parallel MoE (EP
    over TP > 1 and DP > 1 ranks); `dp: false` refuses any DP > 1."""
    kind = "data_parallel"
    layer_fields = ("dp_size", "ep_size")

    @dataclass(frozen=True)
    class Params:
        dp: bool = True
        sequence_parallel: bool = True

    def setup(self, p: Params) -> None:
        if p.dp and p.sequence_parallel:
            raise bad_input(f"{self.key}", None, "refuses nothing: set dp: false or "
                            "sequence_parallel: false", where=self.where)
        self.dp, self.seq = p.dp, p.sequence_parallel

    def evaluate(self, layer: Layer, facts: Facts) -> Optional[Reason]:
        from selector.core.rules.when import sequence_parallel
        if not self.dp and (layer.dp_size or 1) > 1:
            return self.reason(f"does not run under data parallelism (dp_size "
                               f"{layer.dp_size})", "do not run under data parallelism")
        if not self.seq and sequence_parallel(layer):
            return self.reason(f"does not run a sequence-parallel MoE (expert parallelism "
                               f"{layer.ep_size} over data parallelism {layer.dp_size} and "
                               "TP > 1)", "do not run a sequence-parallel MoE")
        return None

    def describe(self) -> str:
        return "data_parallel " + ("no DP" if not self.dp else "no sequence-parallel MoE")


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
