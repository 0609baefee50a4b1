"""The `verify` rule kind (added by probe=verify): what `doctor --verify` measured wrong or
could not verify on this machine."""
from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import FrozenSet, Optional, Tuple

from selector.core.rules.base import Rule, register
from selector.core.rules.facts import Facts, Reason
from selector.core.schema import Layer


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
