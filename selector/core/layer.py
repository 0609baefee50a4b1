"""Validating a layer: the `layer.*` values against the field types and vocabularies of
schema.Layer, with one error naming key, value and accepted values. Used by the run config,
the embedding API and the backends alike."""
from __future__ import annotations

import math
import typing
from dataclasses import fields
from typing import Any, Dict, Mapping, Optional

from selector.core.errors import bad_input, bad_value
from selector.core.schema import Layer

MAX_INT = 2 ** 63 - 1  # no layer dimension is larger; beyond it an int is bad input
LAYER_KEYS = tuple(f.name for f in fields(Layer))
_TYPES = typing.get_type_hints(Layer)
_FIELDS = {f.name: f for f in fields(Layer)}


def _check(k: str, v: Any, where: Optional[str]) -> Any:
    key, f, tp = f"layer.{k}", _FIELDS[k], _TYPES[k]
    optional = type(None) in typing.get_args(tp)
    base = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
    if v is None and optional:
        return None
    if "choices" in f.metadata:  # a str first: a numpy array compared to one has no truth value
        if not isinstance(v, str) or v not in f.metadata["choices"]:
            hint = ("`fp8` names four schemes: fp8_tensor, fp8_tensor_dynamic, fp8_channel, "
                    "fp8_block (weight scales and activation scales)"
                    if k == "quant" and isinstance(v, str) and v == "fp8" else "")
            raise bad_value(key, v, f.metadata["choices"], where=where, hint=hint)
        return v
    if base is bool:
        if not isinstance(v, bool):
            raise bad_input(key, v, "is not a boolean; accepted: true, false", where=where)
        return v
    if base is int:
        if isinstance(v, bool) or not isinstance(v, int) or v < f.metadata.get("min", 1) or \
                v > MAX_INT:
            raise bad_input(key, v, ("must be null or an integer >= 1" if optional
                                     else "must be an integer >= 1"), where=where)
        return v
    if base is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) or v <= 0:
            raise bad_input(key, v, "must be null or a positive number", where=where)
        return float(v)
    raise TypeError(f"schema.Layer.{k}: no validation for type {tp}")  # pragma: no cover


def _finite(v: Any) -> bool:
    """A finite number that converts to a float (a 401-digit int overflows)."""
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def make_layer(values: Mapping[str, Any], where: Optional[str] = None) -> Layer:
    """A validated Layer; `values` may hold any subset of the layer keys (a Layer is one)."""
    if isinstance(values, Layer):
        return values
    for k in values:
        if k not in _FIELDS:
            raise bad_value("layer", k, LAYER_KEYS, what="key", where=where)
    out: Dict[str, Any] = {k: _check(k, v, where) for k, v in values.items()}
    return Layer(**out)
