"""Resolve a backend's `entry_point` ('module:Class') without letting a config reach any code.

Only the project's own `selector.backends` namespace and modules that an installed distribution
registers under the `selector.backends` entry-point group may be named; anything else is
refused before it is imported (a config file is data, not a way to run code).
"""
from __future__ import annotations

import importlib
import threading
from functools import lru_cache
from typing import Any, FrozenSet

from .errors import SelectorError

GROUP = "selector.backends"


@lru_cache(maxsize=1)
def plugin_modules() -> FrozenSet[str]:
    """Modules registered by installed distributions under the `selector.backends` group (read
    by selector.catalogues.scan: regular metadata files only, bounded, malformed ones skipped)."""
    from .catalogues import entry_points
    return frozenset(value.partition(":")[0].strip() for _, value, _ in entry_points(GROUP))


def contained(exc: BaseException) -> bool:
    """Whether third-party code's exception is reported as a problem rather than propagated:
    everything, SystemExit and GeneratorExit included, except KeyboardInterrupt in the main
    thread (the operator's Ctrl-C still stops selector)."""
    return not (isinstance(exc, KeyboardInterrupt)
                and threading.current_thread() is threading.main_thread())


def allowed(path: str) -> bool:
    module = path.partition(":")[0]
    if module == "selector.backends" or module.startswith("selector.backends."):
        return True
    return any(module == m or module.startswith(m + ".") for m in plugin_modules())


def load_entry_point(path: str, key: str = "entry_point") -> Any:
    """The class an entry point names, imported only if its module is allowed."""
    if not allowed(path):
        raise SelectorError(f"{key}: {path!r} is outside the backends namespace; a backend's "
                            "implementation must live in `selector.backends.*` or in a module registered "
                            f"under the {GROUP!r} entry-point group of an installed package",
                            key=key, value=path)
    module, _, attr = path.partition(":")
    try:  # third-party code runs here: whatever it raises (SystemExit too) is reported
        mod = importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001
        if not contained(exc):
            raise
        raise SelectorError(f"{key}: {path!r} cannot be imported ({type(exc).__name__}: "
                            f"{exc})", key=key, value=path) from None
    try:
        return getattr(mod, attr)
    except BaseException as exc:  # noqa: BLE001 - a module __getattr__ is third-party code
        if not contained(exc):
            raise
        if isinstance(exc, AttributeError):
            raise SelectorError(f"{key}: module {module!r} has no attribute {attr!r}",
                                key=key, value=path) from None
        raise SelectorError(f"{key}: {path!r} cannot be looked up ({type(exc).__name__}: "
                            f"{exc})", key=key, value=path) from None
