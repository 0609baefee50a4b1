"""selector: which quantized kernel backend (NVFP4, FP8, MXFP8, MXFP4, ...) should run this layer
on this machine, and why not the others.

    sel = selector.load(overrides=["platform=auto"])
    d = sel.select(op="moe", quant="nvfp4", activation="relu2", act_and_mul=False)
    d.selected, d.to_dict(), str(d)

Importing this package loads no torch, Hydra or kernel library: the heavy parts are imported
on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The at-fork repair (a forked child gets fresh locks, and the imports another thread was in
# the middle of are undone) is registered here, by `import selector` itself: the first
# `selector.load` imports the API and Hydra, maybe in a thread, and a fork then must not give a
# child waiting for ever on a module import lock (selector/core/locks.py; standard library only).
import selector.core.locks  # noqa: F401  (registers os.register_at_fork)
from selector.core.errors import SelectorError
from selector.core.version import __version__

__all__ = ["load", "Selector", "Decision", "SelectorError", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from selector.api import Selector, load
    from selector.core.decision import Decision


def __getattr__(name: str) -> Any:
    if name in ("load", "Selector"):
        from selector import api
        return getattr(api, name)
    if name == "Decision":
        from selector.core.decision import Decision
        return Decision
    raise AttributeError(f"module 'selector' has no attribute {name!r}")
