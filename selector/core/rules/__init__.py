"""Rule kinds (the package face): a registry of small classes, each compiling one `rules[i]`
entry of a backend file and evaluating it against a layer and the platform facts (None = pass, else a Reason).

The package: facts.py (Facts, Reason), when.py (`when:` conditions and the specs rules are made
of), base.py (Rule, the registry, compile_rule), and one module per kind family: kinds_machine
(device, cuda, package, known_issue), kinds_layer (the layer's fields), kinds_verify and
kinds_planned (the kinds the resolver adds).

How to add a rule kind (one class in a kinds module, or in a module imported before a catalogue
is read):

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
import typing
from typing import Tuple, Type

# the kinds register in the order of these imports: the order of KINDS, `selector list` and
# docs/rules.md
# isort: off
from selector.core.rules import kinds_machine  # noqa: F401
from selector.core.rules import kinds_layer  # noqa: F401
from selector.core.rules import kinds_verify  # noqa: F401
from selector.core.rules import kinds_planned  # noqa: F401
# isort: on
from selector.core.rules.base import (
    COMMON_FIELDS,
    KINDS,
    Rule,
    _param_fields,
    _params,
    _type_name,
    _type_ok,
    compile_rule,
    kind_fields,
    register,
)
from selector.core.rules.facts import OPT_IN, Facts, Reason
from selector.core.rules.kinds_layer import (
    ActAndMulRule,
    ActivationRule,
    ClampRule,
    DtypeRule,
    ExplicitOnlyRule,
    FeatureRule,
    ParallelRule,
    QuantRule,
    ShapeRule,
)
from selector.core.rules.kinds_machine import CudaRule, DeviceRule, KnownIssueRule, PackageRule
from selector.core.rules.kinds_planned import EngineRule, ExcludeRule, ImplementsRule, OptInRule, ProbeRule
from selector.core.rules.kinds_verify import VerifyFailure, VerifyKey, VerifyRule, VerifyVerdict
from selector.core.rules.when import (
    WHEN,
    WHEN_FIELDS,
    Condition,
    DeviceSpec,
    Explained,
    PackageSpec,
    WhenTerm,
    _explained,
    check_values,
    describe_devices,
    package_specs,
)

__all__ = [
    "_explained",
    "_param_fields",
    "_params",
    "_type_name",
    "_type_ok",
    "ActAndMulRule",
    "ActivationRule",
    "check_values",
    "ClampRule",
    "COMMON_FIELDS",
    "compile_rule",
    "Condition",
    "CudaRule",
    "describe_devices",
    "DeviceRule",
    "DeviceSpec",
    "DtypeRule",
    "EngineRule",
    "ExcludeRule",
    "Explained",
    "ExplicitOnlyRule",
    "Facts",
    "FeatureRule",
    "ImplementsRule",
    "kind_fields",
    "KINDS",
    "KnownIssueRule",
    "OPT_IN",
    "OptInRule",
    "package_specs",
    "PackageRule",
    "PackageSpec",
    "ParallelRule",
    "ProbeRule",
    "QuantRule",
    "Reason",
    "register",
    "Rule",
    "ShapeRule",
    "VerifyFailure",
    "VerifyKey",
    "VerifyRule",
    "VerifyVerdict",
    "WHEN",
    "WHEN_FIELDS",
    "WhenTerm",
]


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


def rule_fields() -> Tuple[str, ...]:
    """Every field some rule kind accepts."""
    return tuple(dict.fromkeys(COMMON_FIELDS + tuple(
        f for cls in KINDS.values() if cls.declared for f in kind_fields(cls))))


def reason_rules() -> Tuple[str, ...]:
    """Every `rule` a reason may carry: the registered kinds, and opt_in."""
    return tuple(KINDS) + (OPT_IN,)
