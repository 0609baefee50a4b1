"""Session set-up for selector's tests (helpers live in tests/helpers.py).

Every test session (its xdist workers and every CLI subprocess they start) uses one fresh
composed-config cache directory, set through SELECTOR_CACHE_DIR before any test runs: runs never read or pollute the
user's ~/.cache/selector, and repeated inputs compose once per session. SELECTOR_TEST_CACHE_DIR
names a directory to use (and keep) instead, shared by several sessions (tools/mutate.py).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

_CACHE_DIR: Optional[str] = None


def pytest_configure(config):
    """One cache dir for the whole session, set before collection imports anything.

    Under pytest-xdist (`-n N`) the controller makes it and every worker uses the same one
    (handed over in `workerinput`, below): a config composed by one worker is a hit for the
    others, as in a single process. The cache writes atomically (a private file, then rename).
    """
    global _CACHE_DIR
    shared = os.environ.get("SELECTOR_TEST_CACHE_DIR")
    from_controller = getattr(config, "workerinput", {}).get("selector_cache_dir")
    if shared:
        os.environ["SELECTOR_CACHE_DIR"] = shared
    elif from_controller:
        os.environ["SELECTOR_CACHE_DIR"] = from_controller  # the controller removes it
    else:
        _CACHE_DIR = tempfile.mkdtemp(prefix="selector-test-cache-")
        os.environ["SELECTOR_CACHE_DIR"] = _CACHE_DIR
    os.environ.pop("SELECTOR_NO_CACHE", None)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, in the controller: each worker gets the session's cache dir."""
    node.workerinput["selector_cache_dir"] = os.environ["SELECTOR_CACHE_DIR"]


def pytest_unconfigure(config):
    if _CACHE_DIR:
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    return Path(os.environ["SELECTOR_CACHE_DIR"])


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO

