"""Locks that a forked child gets back unlocked.

A process that forks while another of its threads holds a lock gives a child whose copy of the
lock is held forever (the thread that would release it does not exist there). selector's
locks guard only its own caches and Hydra's global state, which a child rebuilds, so the
child simply gets fresh locks.
"""
from __future__ import annotations

import os
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


os.register_at_fork(after_in_child=_renew_all)
