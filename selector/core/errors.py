"""The one exception type selector raises for bad input (CLI exit code 2)."""
from __future__ import annotations

from typing import Iterable, Optional


class SelectorError(ValueError):
    """Bad input: an unknown key, value, preset or backend, a malformed version or config file.

    The message names the key, the value and the accepted values, with a "did you mean" where
    one is close, so that a person can fix the input without reading a traceback.
    """

    exit_code = 2

    def __init__(self, message: str, *, key: Optional[str] = None, value: object = None,
                 accepted: Optional[Iterable[str]] = None, where: Optional[str] = None):
        self.key = key
        self.value = value
        self.accepted = sorted(accepted) if accepted is not None else None
        self.where = where
        super().__init__(message)


def bad_value(key: str, value: object, accepted: Iterable[str], *, what: str = "value",
              where: Optional[str] = None, hint: str = "") -> SelectorError:
    """An error for `key=value` where value is not one of `accepted`."""
    accepted = sorted({str(a) for a in accepted})
    text = f"{_prefix(where)}{key}: unknown {what} {show(value)}; accepted: {', '.join(accepted)}"
    close = did_you_mean(str(value), accepted)
    if close:
        text += f" (did you mean {close!r}?)"
    if hint:
        text += f". {hint}"
    return SelectorError(text, key=key, value=value, accepted=accepted, where=where)


def bad_input(key: str, value: object, problem: str, *, accepted: Optional[Iterable[str]] = None,
              where: Optional[str] = None) -> SelectorError:
    """An error for a value of the right kind that is malformed (a version, a size, a type)."""
    text = f"{_prefix(where)}{key}: {show(value)} {problem}"
    return SelectorError(text, key=key, value=value, accepted=accepted, where=where)


def did_you_mean(value: str, choices: Iterable[str]) -> Optional[str]:
    """The closest accepted spelling, treating '-' and '_' alike."""
    norm = {c.replace("-", "_").lower(): c for c in choices}
    import difflib  # only on bad input: `import selector` stays light
    hits = difflib.get_close_matches(value.replace("-", "_").lower(), list(norm), n=1, cutoff=0.6)
    return norm[hits[0]] if hits else None


def show(value: object, limit: int = 200) -> str:
    """repr(value) for a message: bounded, and never failing (a 5,000-digit int has no repr
    under Python's digit limit; a hostile object's __repr__ may raise)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the message must still be written
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _prefix(where: Optional[str]) -> str:
    return f"{where}: " if where else ""
