"""The environment variables selector reads, each parsed in one place with one error form.

A value that is not accepted is bad input (exit 2) naming the variable, the value and what
is accepted, never a traceback and never a silent default.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, Optional

from selector.core.errors import bad_input

TIMEOUT_RANGE = (0.001, 86_400.0)  # one millisecond to one day
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

# name -> default seconds
TIMEOUTS = {"SELECTOR_NVML_TIMEOUT": 10.0, "SELECTOR_TORCH_PROBE_TIMEOUT": 60.0,
            "SELECTOR_PROBE_TIMEOUT": 120.0,
            "SELECTOR_VERIFY_TIMEOUT": 120.0,  # each verify child (inspect/verify.py)
            "SELECTOR_TUNE_TIMEOUT": 300.0}  # each timing child (inspect/tuning.py)


def parse_timeout(name: str, value: object) -> float:
    """A finite number of seconds in TIMEOUT_RANGE, from text or a number."""
    lo, hi = TIMEOUT_RANGE
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan  # type: ignore
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    if not (math.isfinite(seconds) and lo <= seconds <= hi):
        raise bad_input(name, value, f"is not accepted: a timeout is a number of seconds from "
                        f"{lo:g} to {hi:g}")
    return seconds


def timeout(name: str) -> float:
    """The timeout an environment variable sets, else its default."""
    text = os.environ.get(name)
    return TIMEOUTS[name] if text is None else parse_timeout(name, text)


def flag(name: str) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off (or empty, or unset: false)."""
    text = os.environ.get(name)
    if text is None or text.strip().lower() in _FALSE:
        return False
    if text.strip().lower() in _TRUE:
        return True
    raise bad_input(name, text, "is not accepted: use 1/true/yes/on or 0/false/no/off")


def words(name: str) -> list[str]:
    """A variable holding shell-quoted words (SELECTOR_VLLM_OVERRIDES): split as a shell would;
    an unbalanced quote is bad input naming the variable."""
    import shlex
    text = os.environ.get(name, "")
    try:
        return shlex.split(text)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise bad_input(name, text, f"is not accepted: {str(exc).lower()}; quote each value "
                        "as a shell would (key='a b')") from None


def cache_dir() -> Optional[Path]:
    """SELECTOR_CACHE_DIR, else $XDG_CACHE_HOME/selector, else ~/.cache/selector; None when
    SELECTOR_NO_CACHE is true. `~` is expanded; a relative XDG_CACHE_HOME is ignored (as the
    XDG spec says); a relative SELECTOR_CACHE_DIR is refused."""
    if flag("SELECTOR_NO_CACHE"):
        return None
    given = os.environ.get("SELECTOR_CACHE_DIR")
    if given:
        p = Path(given).expanduser()
        if not p.is_absolute():
            raise bad_input("SELECTOR_CACHE_DIR", given, "is not an absolute path")
        return p
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "selector"
    try:
        return Path.home() / ".cache" / "selector"
    except (RuntimeError, KeyError):  # no HOME and no password entry: run without a cache
        return None


def child_env() -> Dict[str, str]:
    """The environment for a child Python: this one, with this process's import path passed
    on through PYTHONPATH (an embedding process or a `--target` install may have put
    packages on sys.path that the child would otherwise not find)."""
    import sys
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in sys.path:
        if p and p not in parts and os.path.isdir(p):
            parts.append(p)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env
