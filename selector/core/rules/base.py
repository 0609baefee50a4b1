"""The registry of rule kinds and their base class: Reason (a failed rule), Facts (what the
platform offers), Rule, and compile_rule (one `rules[i]` entry of a backend file to a typed rule).
The recipe for a new kind is in selector/core/rules/__init__.py."""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple, Type

from selector.core import schema, validation
from selector.core.errors import SelectorError, bad_input, bad_value
from selector.core.rules.facts import OPT_IN, Facts, Reason
from selector.core.rules.when import Condition, _explained
from selector.core.schema import Status

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


# A kind's Params are checked like every config node (validation.validate's type rules).
_type_ok = validation.type_ok
_type_name = validation.type_name


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
