"""A validator for the subset of JSON Schema (2020-12) that docs/schemas/ uses: `type` (one or a
list), `properties`, `required`, `additionalProperties` (a boolean or a schema), `items`, `enum`,
`const`, `anyOf` and local `$ref` (`#/$defs/NAME`). A keyword outside this subset is an error,
so a schema cannot lean on a rule this validator would silently skip. (The `jsonschema` package
is not in the project's environment; this is the part the schemas need.)"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"
_ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "enum", "const",
             "anyOf", "$ref"} | _ANNOTATIONS
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def load(name: str) -> Dict[str, Any]:
    schema: Dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return schema


def _is(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[t])


def errors(value: Any, schema: Any, root: Dict[str, Any], path: str = "$") -> List[str]:
    """Every way `value` breaks `schema` (empty: valid)."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"schema keyword(s) {sorted(unknown)} at {path} are outside the "
                         "subset tests/json_schema.py validates")
    out: List[str] = []
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"{path}: only local #/$defs/ references are supported: {ref}")
        out += errors(value, root["$defs"][ref[len("#/$defs/"):]], root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, t) for t in types):
            return out + [f"{path}: {type(value).__name__} {value!r:.80} is not {types}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r:.80} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        out.append(f"{path}: {value!r:.80} is not {schema['const']!r}")
    if "anyOf" in schema:
        tries = [errors(value, s, root, path) for s in schema["anyOf"]]
        if all(tries):
            out.append(f"{path}: matches none of anyOf: {tries}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                out.append(f"{path}: missing required key {k!r}")
        for k, v in value.items():
            if k in props:
                out += errors(v, props[k], root, f"{path}.{k}")
            elif "additionalProperties" in schema:
                out += errors(v, schema["additionalProperties"], root, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += errors(v, schema["items"], root, f"{path}[{i}]")
    return out


def validate(value: Any, name: str) -> None:
    """AssertionError listing the first problems when `value` breaks docs/schemas/NAME."""
    schema = load(name)
    found = errors(value, schema, schema)
    assert not found, f"{name}.schema.json: " + "; ".join(found[:8])
