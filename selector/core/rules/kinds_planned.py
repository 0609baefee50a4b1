"""Kinds the resolver adds when it plans a run (never written in a backend file): the engine
does not offer the backend, `implements`, `policy.exclude`, opt-in, failed deep probes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from selector.core.rules.base import Rule, register
from selector.core.rules.facts import OPT_IN, Facts, Reason
from selector.core.rules.kinds_layer import QuantRule, _ValuesRule
from selector.core.rules.when import check_values
from selector.core.schema import Layer, Status


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
