"""Tests written against the api shard's mutation survivors (issue #36; docs/guarantees.md,
"Every module, sharded"): the import locks a forked child gets back (selector.core.locks),
entry points and distribution metadata (selector.core.entry_points), and a Selector built
without its config tree. Quick; the fork tests bound their wait (a hang guard, not a speed
limit)."""
from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap
import threading
import time
import types

import pytest
from helpers import load

import selector.core.locks  # noqa: F401 - registers the at-fork repair
from selector.core import entry_points
from selector.core.errors import SelectorError

# ---------------------------------------------------------------------------------------------
# A fork while another thread is importing (selector.core.locks._release_dead_imports)

GUARD_S = 120.0  # a hang guard for the child, never a speed limit


def _wait(pid: int) -> int:
    """The child's exit status; a child still running after GUARD_S is killed (-1: it hung)."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -1


@pytest.fixture
def gate(tmp_path, monkeypatch):
    """A module the test's thread imports and that stops half-way (in this process only)
    until released: `mutgate_pkg` imports `mutgate_pkg.inner`, whose body waits."""
    g = types.ModuleType("mutgate")
    g.PARENT, g.entered, g.release = os.getpid(), threading.Event(), threading.Event()
    monkeypatch.setitem(sys.modules, "mutgate", g)
    pkg = tmp_path / "mutgate_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from mutgate_pkg import inner\nVALUE = inner.VALUE + 1\n")
    (pkg / "inner.py").write_text(textwrap.dedent("""\
        import os, mutgate
        if os.getpid() == mutgate.PARENT:
            mutgate.entered.set()
            mutgate.release.wait()
        VALUE = 41
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield g
    g.release.set()
    for name in [m for m in sys.modules if m.split(".")[0] == "mutgate_pkg"]:
        del sys.modules[name]


def _fork_while_importing(g, child) -> int:
    t = threading.Thread(target=importlib.import_module, args=("mutgate_pkg",), daemon=True)
    t.start()
    assert g.entered.wait(GUARD_S)
    pid = os.fork()
    if pid == 0:  # the child: the importing thread does not exist here
        code = 9
        try:
            code = child()
        finally:
            os._exit(code)
    try:
        return _wait(pid)
    finally:
        g.release.set()
        t.join(GUARD_S)


def test_a_child_forked_during_an_import_imports_the_package_afresh(gate):
    """The import the vanished thread was in (the package and its submodule) is undone in the
    child, which imports the whole package again; every other module stays as it was."""
    def child() -> int:
        before = sys.modules.get("json")
        import mutgate_pkg  # hangs for ever on the dead thread's module lock without the repair
        if mutgate_pkg.VALUE != 42 or mutgate_pkg.inner.VALUE != 41:
            return 3
        return 0 if sys.modules.get("json") is before is not None else 4
    import json as _json  # noqa: F401 - present before the fork
    assert _fork_while_importing(gate, child) == 0


def test_a_package_that_is_no_import_in_progress_stays(gate, tmp_path):
    """Only the modules of the interrupted import are dropped: a package object made at run time
    (no spec) whose submodule the thread was importing stays, and so does the import hook's
    work that made it."""
    made = types.ModuleType("mutgate_made")
    made.__path__ = [str(tmp_path / "made")]
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "sub.py").write_text(textwrap.dedent("""\
        import os, mutgate
        if os.getpid() == mutgate.PARENT:
            mutgate.entered.set()
            mutgate.release.wait()
        VALUE = 7
        """))
    sys.modules["mutgate_made"] = made
    try:
        t = threading.Thread(target=importlib.import_module, args=("mutgate_made.sub",),
                             daemon=True)
        t.start()
        assert gate.entered.wait(GUARD_S)
        pid = os.fork()
        if pid == 0:
            code = 9
            try:
                ok = sys.modules.get("mutgate_made") is made
                from mutgate_made import sub
                code = 0 if ok and sub.VALUE == 7 else 3
            finally:
                os._exit(code)
        try:
            assert _wait(pid) == 0
        finally:
            gate.release.set()
            t.join(GUARD_S)
    finally:
        sys.modules.pop("mutgate_made.sub", None)
        sys.modules.pop("mutgate_made", None)


def test_a_fork_inside_an_import_keeps_the_childs_own_import(tmp_path, monkeypatch):
    """A module whose body forks: the child is itself in the middle of that import (its module
    lock is its own, not a vanished thread's), which completes there as in the parent."""
    (tmp_path / "mutfork_mod.py").write_text("import os\nPID = os.fork()\nVALUE = 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parent = os.getpid()
    try:
        import mutfork_mod
    except BaseException:
        if os.getpid() != parent:
            os._exit(3)
        raise
    if os.getpid() != parent:  # the child: its import completed
        os._exit(0 if sys.modules.get("mutfork_mod") is mutfork_mod and mutfork_mod.VALUE == 5
                 else 4)
    try:
        assert mutfork_mod.PID > 0 and _wait(mutfork_mod.PID) == 0
    finally:
        sys.modules.pop("mutfork_mod", None)


# ---------------------------------------------------------------------------------------------
# entry points and distribution metadata

def test_an_entry_point_whose_module_lacks_the_class_is_bad_input():
    with pytest.raises(SelectorError, match="module 'selector.backends.wrappers.emulation' has no "
                                            "attribute 'NoSuchKernel'"):
        entry_points.load_entry_point("selector.backends.wrappers.emulation:NoSuchKernel", "k.entry_point")


def _dist(tmp_path, dirname: str, files: dict) -> entry_points.Dist:
    d = tmp_path / dirname
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    return entry_points.Dist(d, ())


def test_an_egg_info_distribution_is_named_by_its_pkg_info(tmp_path):
    egg = _dist(tmp_path, "fast_kernels.egg-info",
                {"PKG-INFO": "Metadata-Version: 2.1\nName: Fast-Kernels\nVersion: 1.2\n"})
    assert egg.name_version() == ("Fast-Kernels", "1.2")
    wheel = _dist(tmp_path, "fast_kernels-0.9.dist-info",
                  {"METADATA": "Metadata-Version: 2.1\nName: fast-kernels\nVersion: 0.9.1\n"})
    assert wheel.name_version() == ("fast-kernels", "0.9.1")
    bare = _dist(tmp_path, "slow_kernels-0.3.dist-info", {})
    assert bare.name_version() == ("slow_kernels", "0.3")


def test_a_metadata_file_of_at_most_1_mib_is_read_and_a_larger_one_refused(tmp_path):
    """docs/guarantees.md: plugin metadata is read only if it is a regular file of at most
    1 MiB."""
    head = "Metadata-Version: 2.1\nName: big\nVersion: 1.0\n"
    at = _dist(tmp_path, "big-1.0.dist-info", {"METADATA": head + "x" * ((1 << 20) - len(head))})
    assert (at.path / "METADATA").stat().st_size == 1 << 20
    assert entry_points.read_metadata(at.path, "METADATA").startswith(head)
    over = _dist(tmp_path, "bigger-1.0.dist-info",
                 {"METADATA": head + "x" * ((1 << 20) + 1 - len(head))})
    with pytest.raises(entry_points._Malformed):
        entry_points.read_metadata(over.path, "METADATA")


# ---------------------------------------------------------------------------------------------
# a Selector without its config tree

def test_a_selector_without_its_tree_decides_the_same_and_hints_without_stack_presets():
    sel = load("platform=b200")
    d = sel.default()
    assert "stack=" in d.hint  # the tree's stack presets that would make a backend usable
    from selector.api import Selector
    bare = Selector(sel.run_config)
    b = bare.default()
    assert (b.selected, b.outcome) == (d.selected, d.outcome)
    assert "stack=" not in b.hint
    assert json.loads(json.dumps(b.to_dict()))["selected"] == d.selected


def test_load_verifies_only_under_probe_verify(monkeypatch):
    """Only `probe=verify` runs the kernels (each verify child loads a selector itself: one
    that verified too would start children without end)."""
    import selector
    from selector.inspect import verify
    calls = []

    def fake(sel, overrides, config_dirs, **kw):
        calls.append(list(overrides))
        return verify.Report([], "fake", None, 0.0)
    monkeypatch.setattr(verify, "verify_once", fake)
    selector.load(["platform=b200"])
    selector.load(["platform=b200", "probe=none"])
    assert calls == []
    selector.load(["platform=b200", "probe=verify"])
    assert calls == [["platform=b200", "probe=verify"]]
