"""Expected structured notes (selector.core.notes) for tests: assert on a note's kind, backend and
data, not on its rendered prose."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Tuple


class Has(str):
    """A note's text field that contains this (a citation inside a source, say)."""


class Sub(dict):
    """A note's mapping field that holds at least these keys and values."""


class Includes(tuple):
    """A note's list field that holds these items in this order, others between them allowed
    (a backend the catalogue gains later does not break the expectation)."""


def _subsequence(want, got) -> bool:
    it = iter(got)
    return all(any(g == w for g in it) for w in want)


def _plain(v):
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass(frozen=True)
class N:
    """An expected structured note (selector.core.notes): its kind, the backend it is about (None:
    any) and the data fields it must have."""
    kind: str
    backend: Optional[str] = None
    data: Tuple[Tuple[str, object], ...] = ()

    def __init__(self, kind: str, backend: Optional[str] = None, **data: object):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "backend", backend)
        object.__setattr__(self, "data", tuple(data.items()))

    def matches(self, note) -> bool:
        if note.kind != self.kind or (self.backend is not None and note.backend != self.backend):
            return False
        got = note.to_dict()["data"]
        for k, want in self.data:
            if k not in got:
                return False
            if isinstance(want, Has):
                if not (isinstance(got[k], str) and want in got[k]):
                    return False
            elif isinstance(want, Includes):
                if not (isinstance(got[k], list) and _subsequence(_plain(want), got[k])):
                    return False
            elif isinstance(want, Sub):
                if not (isinstance(got[k], dict) and
                        all(got[k].get(a) == _plain(b) for a, b in want.items())):
                    return False
            elif got[k] != _plain(want):
                return False
        return True


def has_note(notes: Iterable[Any], kind: str, backend: Optional[str] = None, **data: object) -> bool:
    """Whether some note of `notes` (Decision.note_data) matches."""
    want = N(kind, backend, **data)
    return any(want.matches(n) for n in notes)
