"""Resolve a backend's `entry_point` ('module:Class') without letting a config reach any code.

Only the project's own `selector.backends` namespace and modules that an installed distribution
registers under the `selector.backends` entry-point group may be named; anything else is
refused before it is imported (a config file is data, not a way to run code).
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, FrozenSet

from .errors import SelectorError

GROUP = "selector.backends"


@lru_cache(maxsize=1)
def plugin_modules() -> FrozenSet[str]:
    """Modules registered by installed distributions under the `selector.backends` group."""
    import importlib.metadata as md
    try:
        eps = md.entry_points(group=GROUP)
    except Exception:  # noqa: BLE001 - broken metadata elsewhere must not break selector
        return frozenset()
    return frozenset(ep.value.partition(":")[0] for ep in eps)


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
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        raise SelectorError(f"{key}: {path!r} cannot be imported ({type(exc).__name__}: {exc})",
                            key=key, value=path) from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise SelectorError(f"{key}: module {module!r} has no attribute {attr!r}",
                            key=key, value=path) from None
