"""One validation path: every config node of schema.py (a backend file, its opt-in, preference and
engine entries, the platform, the policy, the engine) is checked against its dataclass by
`validate`, with one error shape (key, value, accepted values, file). Field metadata adds what a
type cannot say: `required` (the message for a missing value), `choices` (accepted values; of
each item for a list) and its `hint`, `problem` (the message for a mistyped value), `parsed`
(checked by its own parser). Rules' typed Params (rules/base.py) are checked by the same type
rules (`type_ok`, `type_name`)."""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import fields
from typing import Any, Dict, Mapping, Optional, Tuple

from selector.core.errors import bad_input, bad_value


def _unwrap(tp: Any) -> Tuple[Any, bool]:
    """(the type without None, whether None is accepted)."""
    if typing.get_origin(tp) is typing.Union:
        args = tuple(a for a in typing.get_args(tp) if a is not type(None))
        if len(args) < len(typing.get_args(tp)):
            return (args[0] if len(args) == 1 else typing.Union[args]), True
    return tp, False


#: each annotation's (typing.get_origin, typing.get_args), worked out once: a cold start checks
#: thousands of values against a few dozen annotations
_SHAPES: Dict[Any, Tuple[Any, Tuple[Any, ...]]] = {}


def type_ok(value: Any, tp: Any) -> bool:
    """Whether a plain YAML value has type `tp` (an int is never a bool)."""
    if tp is Any:
        return True
    if tp is str or tp is bool:  # the common cases first: a config load checks thousands
        return isinstance(value, tp)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    try:
        origin, args = _SHAPES[tp]
    except KeyError:
        origin, args = _SHAPES[tp] = typing.get_origin(tp), typing.get_args(tp)
    except TypeError:  # an unhashable annotation
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        return any(type_ok(value, a) for a in args)
    if tp is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (
            args[0] is Any or all(type_ok(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, Mapping) and all(
            type_ok(k, args[0]) and (args[1] is Any or type_ok(v, args[1]))
            for k, v in value.items())
    if dataclasses.is_dataclass(tp):  # plain data from a file, or the node itself (planned rules)
        return isinstance(value, (Mapping, tp if isinstance(tp, type) else ()))
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, tp)


def type_name(tp: Any) -> str:
    """'a string', 'a list of strings', 'an integer or null' ... for messages and docs."""
    base, optional = _unwrap(tp)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if origin is typing.Union:
        text = " or ".join(type_name(a) for a in args)
    elif origin in (list, tuple):
        text = "a list of " + {str: "strings", int: "integers", bool: "booleans"}.get(
            args[0], f"{type_name(args[0])} values")
    elif origin is dict or dataclasses.is_dataclass(base):
        text = "a mapping"
    else:
        text = {str: "a string", int: "an integer",
                bool: "a boolean (true or false)"}.get(base, getattr(base, "__name__", str(base)))
    return text


@functools.cache  # one entry per node class
def node_fields(node: type) -> Tuple[Tuple[dataclasses.Field[Any], Any], ...]:
    hints = typing.get_type_hints(node)
    return tuple((f, hints[f.name]) for f in fields(node))


@functools.cache  # one entry per node class: what validate needs of each field, worked out once
def _plan(node: type) -> Tuple[Tuple[str, Tuple[str, ...], Any, Any, bool], ...]:
    return tuple((f.name, tuple(n.name for n in fields(node)), f, *_unwrap(tp))
                 for f, tp in node_fields(node))


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def validate(node: type, conf: Any, key: str, where: Optional[str] = None) -> Dict[str, Any]:
    """`conf` (plain data) checked against the dataclass `node`: a mapping, no unknown key,
    every required key given, each value of its field's type and among its `choices`; nested
    nodes (a dataclass field, a list of them) likewise. Returns {field: value}, defaults
    filled (a null value of a field that does not accept null takes the default)."""
    plan = _plan(node)
    names = plan[0][1] if plan else ()
    if not isinstance(conf, Mapping):
        raise bad_input(key, conf, f"is not a mapping ({', '.join(names)})", where=where)
    for k in conf:
        if k not in names:
            raise bad_value(key or "config", k, names, what="key", where=where)
    out: Dict[str, Any] = {}
    for name, _, f, base, optional in plan:
        v = conf.get(name)
        required = f.metadata.get("required")
        if required is not None and (v is None or v == "???" or
                                     (isinstance(v, str) and not v.strip())):
            raise bad_input(f"{key}.{name}" if key else name, v, required, where=where)
        if v is None:
            out[name] = None if optional else _default(f)
        elif (base is str or base is bool) and isinstance(v, base) and \
                "choices" not in f.metadata:
            out[name] = v  # the common case, checked inline
        elif f.metadata.get("parsed"):
            out[name] = v
        else:
            out[name] = _value(f, base, v, f"{key}.{name}" if key else name, where)
    return out


def _value(f: dataclasses.Field[Any], tp: Any, v: Any, key: str, where: Optional[str]) -> Any:
    problem = f.metadata.get("problem")
    if dataclasses.is_dataclass(tp):
        return validate(tp, v, key, where)  # type: ignore[arg-type]
    if typing.get_origin(tp) in (list, tuple):
        item = typing.get_args(tp)[0]
        if not isinstance(v, (list, tuple)):
            raise bad_input(key, v, problem or f"is not {type_name(tp)}", where=where)
        if dataclasses.is_dataclass(item):
            return [validate(item, x, f"{key}[{i}]", where)  # type: ignore[arg-type]
                    for i, x in enumerate(v)]
        if not type_ok(v, tp):
            raise bad_input(key, v, problem or f"is not {type_name(tp)}", where=where)
        for x in v:
            if "choices" in f.metadata and x not in f.metadata["choices"]:
                raise bad_value(key, x, f.metadata["choices"], where=where,
                                hint=f.metadata.get("hint", ""))
        return list(v)
    if not type_ok(v, tp):
        raise bad_input(key, v, problem or f"is not {type_name(tp)}", where=where)
    if "choices" in f.metadata and v not in f.metadata["choices"]:
        raise bad_value(key, v, f.metadata["choices"], where=where)
    return dict(v) if isinstance(v, Mapping) else v
