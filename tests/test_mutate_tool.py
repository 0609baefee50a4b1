"""tools/mutate.py's shards of backends/ are found on disk, not listed (issue 48): every module
of backends/ with a mutation site is in exactly one shard, a module moved into a sub-package
stays covered, and a shard's tests are the files that name its modules."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def mutate(monkeypatch):
    spec = importlib.util.spec_from_file_location("mutate_tool", REPO / "tools" / "mutate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mutate_tool", mod)
    spec.loader.exec_module(mod)
    return mod


def test_every_backends_module_with_a_site_is_in_exactly_one_shard(mutate):
    groups = mutate.backends_groups()
    mods = [m for ms in groups.values() for m in ms]
    want = [m for m in mutate.all_modules("backends") if mutate.has_sites(m)]
    assert sorted(mods) == sorted(want) and len(mods) == len(set(mods))
    assert all(0 < len(ms) <= mutate.BACKENDS_SHARD for ms in groups.values())
    assert set(groups) <= set(mutate.group_names())
    # the selector/ shards name no backends/ module: nothing is run twice or listed by hand
    assert not [p for ps, _ in mutate.GROUPS.values() for p in ps if "backends" in p]


def test_a_shards_tests_are_the_files_naming_its_modules(mutate):
    mods, tests = mutate.group_modules("backends-prepare")
    assert "backends/prepare/marlin.py" in mods
    assert "tests/test_prepare.py" in tests
    # a package's __init__ is named by its own dotted name, not by its submodules'
    init = mutate.tests_for("backends/__init__.py")
    assert "tests/test_nvfp4.py" not in init  # names selector.backends.formats.nvfp4 only
    assert "tests/test_layers.py" in init  # from selector.backends import FLOORS
    # a test importing the checkout's top-level `backends` names the module too
    assert "tests/test_activations.py" in mutate.tests_for("backends/wrappers/flashinfer_b12x.py")


def test_a_module_moved_into_a_sub_package_is_still_sharded(mutate, tmp_path, monkeypatch):
    """The tree another engineer may make: a wrappers module moved one package down, a new
    floor; the shards follow the files."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "backends", root / "backends")
    (root / "tests").mkdir()
    (root / "selector").mkdir()
    moved = root / "backends" / "wrappers" / "fp8" / "torch_scaled_mm.py"
    moved.parent.mkdir()
    (moved.parent / "__init__.py").write_text("")
    (root / "backends" / "wrappers" / "torch_scaled_mm.py").rename(moved)
    new = root / "backends" / "extra" / "thing.py"
    new.parent.mkdir()
    new.write_text("def f(x):\n    return x < 1\n")
    (root / "tests" / "test_thing.py").write_text(
        "from selector.backends.extra.thing import f\n\n\ndef test_f():\n    assert f(0)\n")
    monkeypatch.setattr(mutate, "ROOT", root)
    groups = mutate.backends_groups()
    flat = {m: g for g, ms in groups.items() for m in ms}
    assert flat["backends/wrappers/fp8/torch_scaled_mm.py"].startswith("backends-wrappers")
    assert "backends/wrappers/torch_scaled_mm.py" not in flat
    assert groups["backends-extra"] == ["backends/extra/thing.py"]
    assert mutate.group_modules("backends-extra")[1] == ["tests/test_thing.py"]
