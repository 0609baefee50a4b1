"""Hydra/OmegaConf exceptions -> one SelectorError naming the key, the value and what is
accepted, read from the exceptions' attributes (`full_key`, `value`, `missing_cfg_file`,
`options`, `override`) along the `__cause__` chain, never from their message text."""
from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from typing import Any, Dict, List, Optional, Sequence

from selector.config.dirs import PRESET_GROUPS, ConfigTree
from selector.core import schema
from selector.core.errors import SelectorError, bad_input, bad_value

_VOCABULARIES = {"layer.op": schema.OPS, "layer.quant": schema.QUANTS,
                 "layer.activation": schema.ACTIVATIONS, "layer.dtype": schema.DTYPES,
                 "layer.all2all": schema.ALL2ALL, "probe": schema.PROBE_MODES}


def schema_keys(cls: type[Any] = schema.SelectorConf, prefix: str = "") -> Dict[str, Any]:
    """Every dotted key of the schema, mapped to its default value."""
    out: Dict[str, Any] = {}
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        default = getattr(cls(), f.name)
        out[key] = default
        if is_dataclass(default):
            out.update(schema_keys(type(default), key + "."))
    return out


def chain(exc: BaseException) -> List[BaseException]:
    """exc and what caused it (Hydra wraps OmegaConf's error as the cause or the context)."""
    out: List[BaseException] = []
    e: Optional[BaseException] = exc
    while e is not None and e not in out and len(out) < 16:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def translate(exc: BaseException, tree: ConfigTree, overrides: Sequence[str]) -> SelectorError:
    """An error Hydra raised while composing `overrides` onto the tree."""
    from hydra.errors import MissingConfigException, OverrideParseException
    for e in chain(exc):
        if isinstance(e, MissingConfigException):
            target = e.missing_cfg_file or "?"
            group, _, option = target.rpartition("/")
            if group in PRESET_GROUPS:
                return bad_value(group, option, tree.group_options(group), what="preset")
            return bad_input("config", target, "is not a config selector knows")
        if isinstance(e, OverrideParseException):
            return bad_input("override", e.override, "is malformed: overrides are key=value, "
                             "group=option, +key=value or ~key")
    return translate_omegaconf(exc, overrides=overrides)


def translate_omegaconf(exc: BaseException, prefix: str = "", where: Optional[str] = None,
                        overrides: Sequence[str] = ()) -> SelectorError:
    """An OmegaConf error (possibly wrapped): the first one in the chain with a key."""
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        ConfigTypeError,
        MissingMandatoryValue,
        OmegaConfBaseException,
    )
    for e in chain(exc):
        key = getattr(e, "full_key", None) if isinstance(e, OmegaConfBaseException) else None
        if not key:
            continue
        key = f"{prefix}.{key}" if prefix and not key.startswith(prefix + ".") else key
        if isinstance(e, (ConfigAttributeError, ConfigKeyError)):
            return unknown_key(key, where)
        if isinstance(e, MissingMandatoryValue):
            return bad_input(key, "???", "is required but missing", where=where)
        if isinstance(e, ConfigTypeError):
            return bad_input(key, f"~{key}", "cannot be deleted: every key of the schema "
                             "keeps a value; set it instead (key=value)", where=where)
        value = _override_text(overrides, key)
        if value is None:
            value = getattr(e, "value", None)
        accepted = _VOCABULARIES.get(key)
        return bad_input(key, "null" if value is None else value,
                         f"is not accepted: it must be {kind_of(key)}" +
                         (f"; accepted: {', '.join(sorted(accepted))}" if accepted else ""),
                         where=where)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return SelectorError(f"{where + ': ' if where else ''}invalid config: {first}", where=where)


def _override_text(overrides: Sequence[str], key: str) -> Optional[str]:
    """The text an override gave `key` (as the user wrote it), if one did."""
    for o in reversed(overrides):
        k, sep, v = o.lstrip("+~").partition("=")
        if sep and k.strip() == key:
            return v.strip()
    return None


def unknown_key(key: str, where: Optional[str] = None) -> SelectorError:
    """`key` is not in the schema: name its siblings (with a "did you mean")."""
    keys = schema_keys()
    parent, _, leaf = key.rpartition(".")
    if re.match(r"^catalogue\.(moe|linear)\.[a-z0-9_]+\.", key + "."):
        from selector.core.rules import WHEN_FIELDS, rule_fields
        parts = key.split(".")
        siblings = [f.name for f in fields(schema.BackendConf)] if len(parts) <= 4 else \
            list(rule_fields())
        if len(parts) > 4 and parts[-2] == "when":
            siblings = list(WHEN_FIELDS)
        return bad_value(key, leaf, siblings, what="key", where=where)
    siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == parent]
    if not siblings:
        siblings = [k for k in keys if "." not in k]
        return bad_value("override", key, siblings, what="key", where=where)
    return bad_value(parent or "config", leaf, siblings, what="key", where=where)


def kind_of(key: str) -> str:
    """What a schema key holds, in words, from its dataclass annotation."""
    node: Any = schema.SelectorConf
    hint = None
    for part in key.split("."):
        hints = {f.name: f.type for f in fields(node)} if is_dataclass(node) else {}
        hint = hints.get(part)
        node = getattr(schema, str(hint), None)
    words = {"int": "an integer", "bool": "a boolean (true or false)", "float": "a number",
             "str": "a string"}
    text = str(hint or "")
    for name, word in words.items():
        if text == name:
            return word
        if text == f"Optional[{name}]":
            return f"null or {word}"
    return "of the accepted type"
