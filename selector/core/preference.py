"""A backend's conditional rank (`preference:` entries of a backend file or of an engine's
entry for it): below both the catalogue model and the engine registry, which read it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selector.core import schema, validation
from selector.core.errors import bad_input
from selector.core.rules import Condition


@dataclass(frozen=True)
class Preference:
    """When `when` holds, the backend ranks at `rank` instead of its base rank."""
    rank: int
    reason: str
    source: str
    when: Condition


def make_preference(conf: Any, key: str, file: str) -> Preference:
    v = validation.validate(schema.PreferenceConf, conf, key, file)
    rank = v["rank"]
    if not (isinstance(rank, int) and not isinstance(rank, bool) and -2 ** 63 <= rank < 2 ** 63):
        raise bad_input(f"{key}.rank", rank, "must be an integer (lower is preferred)",
                        where=file)
    return Preference(rank, v["reason"], v["source"], Condition.parse(v["when"], key, file))


__all__ = ["Preference", "make_preference"]
