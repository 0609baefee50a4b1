"""Locks that a forked child gets back unlocked.

A process that forks while another of its threads holds a lock gives a child whose copy of the
lock is held forever (the thread that would release it does not exist there). selector's
locks guard only its own caches and Hydra's global state, which a child rebuilds, so the
child simply gets fresh locks.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref


class ForkSafeLock:
    """A threading.Lock that is replaced by a fresh one in a forked child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _ALL.add(self)

    def __enter__(self) -> ForkSafeLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


_ALL: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def _renew_all() -> None:
    for lock in list(_ALL):
        lock._lock = threading.Lock()
    _release_dead_imports()


def _release_dead_imports() -> None:
    """In a forked child: the imports that another thread of the parent was in the middle of
    (that thread does not exist here) are undone, so that the child imports those modules
    afresh instead of waiting for ever on the module lock that thread held.

    CPython keeps one lock per module being imported (`importlib._bootstrap._module_locks`)
    and does not reset them at fork. selector imports Hydra, OmegaConf and PyYAML (and through
    them parts of the standard library) lazily, on the first cold load, possibly in a thread;
    a fork at that moment gave a child stuck on the import lock. Each lock a vanished thread
    held is dropped, and so is the module it guarded, as Python drops a module whose import
    failed: with everything under the outermost package that was still initializing (a fresh
    package object must find its submodules fresh too)."""
    try:
        import importlib._bootstrap as bootstrap
        locks = bootstrap._module_locks  # type: ignore[attr-defined]
    except (ImportError, AttributeError):  # another interpreter: nothing to repair
        return
    me = threading.get_ident()
    dead = []
    for name, ref in list(locks.items()):
        try:
            lock = ref()
        except TypeError:  # not a weak reference in this Python
            continue
        if lock is not None and getattr(lock, "owner", None) not in (None, 0, me):
            dead.append(name)
            locks.pop(name, None)
    roots = set()
    for name in dead:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the outermost ancestor still initializing
            module = sys.modules.get(".".join(parts[:i]))
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                roots.add(".".join(parts[:i]))
                break
    doomed = [name for name in list(sys.modules)
              if any(name == r or name.startswith(r + ".") for r in roots)]
    blocked = [name for name in doomed if _not_reloadable(sys.modules.get(name))]
    for name in doomed:
        del sys.modules[name]
    for name in blocked:  # `import` of it now raises ImportError: its package's fallback runs
        sys.modules[name] = None  # type: ignore[assignment]


_STDLIB = os.path.dirname(os.__file__)


def _not_reloadable(module: object) -> bool:
    """Whether `module` is a compiled extension from outside the standard library. Such a
    module cannot be imported afresh in this process: a Cython module keeps its state in C
    statics, so a second import gives back the module object it already made, bound to the
    dropped package's classes, or, where the import was cut short by the fork, one that never
    finishes (PyYAML's `yaml._yaml` without `MappingNode`: its CParser fails with a NameError
    on the first mapping; issue 48, 1 of 50 fork trials). Its package is imported again
    without it: PyYAML falls back to its pure-Python loader; a package without a fallback
    raises ImportError, a clear error instead of a wrong answer. The standard library's own
    extensions are re-initialisable and are imported afresh."""
    external = sys.modules.get("_frozen_importlib_external")
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    if external is None or not isinstance(loader, external.ExtensionFileLoader):
        return False
    path = os.path.realpath(str(getattr(loader, "path", "")))
    parts = path.split(os.sep)
    return not path.startswith(os.path.realpath(_STDLIB) + os.sep) or \
        "site-packages" in parts or "dist-packages" in parts


os.register_at_fork(after_in_child=_renew_all)
