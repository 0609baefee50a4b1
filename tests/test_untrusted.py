"""Untrusted configs: a config file or an override is data. It cannot

- import or call code: no Hydra `_target_` instantiation, no YAML python tags, an `entry_point`
  outside `backends.*` and the modules registered under the `selector.backends` entry-point
  group is refused before anything is imported (`check` included);
- read environment variables or files through interpolation: any `${...}` is refused, in
  overrides and in files (selector never enables resolvers);
- leave the config search path: presets are names, never paths; `+group=../x`, `group@pkg`,
  defaults lists with `..` and symbolic links out of a user config dir are refused.

Each refusal is proven, not assumed: a module that writes a marker file when imported (or
called) is planted on sys.path and must never leave its marker; a positive control shows the
marker does appear when the module is legitimately loaded. Environment values are canaries that
must never appear in any output or in the cache.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Sequence

import helpers
import pytest
from helpers import child_env, run_main

from selector.config import catalogues
from selector.core.entry_points import allowed, load_entry_point
from selector.core.errors import SelectorError

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

REPO = Path(__file__).resolve().parent.parent
CANARY = "canary-" + uuid.uuid4().hex


@pytest.fixture(autouse=True)
def _private(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)
    monkeypatch.setenv("SELECTOR_CANARY", CANARY)


def refused(argv: Sequence[str], *needles: str) -> str:
    return helpers.refused(argv, *needles, never=(CANARY,))


class Marker:
    """A module that leaves a marker file when imported, and another when `boom` is called."""

    def __init__(self, root: Path, monkeypatch):
        self.name = "evil_" + uuid.uuid4().hex[:12]
        self.dir = root / "pkgs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.imported = root / f"{self.name}.imported"
        self.called = root / f"{self.name}.called"
        (self.dir / f"{self.name}.py").write_text(
            "import pathlib\n"
            f"pathlib.Path({str(self.imported)!r}).write_text('imported')\n"
            "class Boom:\n"
            "    def __init__(self, *a, **k):\n"
            f"        pathlib.Path({str(self.called)!r}).write_text('called')\n"
            "def boom(*a, **k):\n"
            f"    pathlib.Path({str(self.called)!r}).write_text('called')\n"
            "    return 'boom'\n")
        monkeypatch.syspath_prepend(str(self.dir))
        importlib.invalidate_caches()
        self._monkeypatch = monkeypatch

    @property
    def fired(self) -> bool:
        return self.imported.exists() or self.called.exists()

    def cleanup(self):
        sys.modules.pop(self.name, None)


@pytest.fixture
def marker(tmp_path, monkeypatch):
    m = Marker(tmp_path, monkeypatch)
    yield m
    m.cleanup()


def user_dir(root: Path, files: dict) -> Path:
    d = root / "user"
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    d.mkdir(parents=True, exist_ok=True)
    return d


# ---------------------------------------------------------------------------------------------
# Code execution

def test_marker_positive_control(marker):
    """The marker mechanism works: importing the module leaves the marker."""
    importlib.import_module(marker.name)
    assert marker.imported.exists()


@pytest.mark.parametrize("override", [
    "+_target_={m}.boom", "layer._target_={m}.boom", "+layer._target_={m}.boom",
    "+platform._target_={m}.Boom", "++_target_={m}.boom", "+_recursive_=true",
    "+policy._target_={m}.boom", "+platform.packages._target_={m}.boom"])
def test_target_in_overrides_is_never_instantiated(marker, override):
    argv = ["explain", "--", "platform=cpu", override.format(m=marker.name)]
    rc, out, err = run_main(argv)
    assert rc in (0, 1, 2) and "Traceback" not in out + err
    assert not marker.fired


@pytest.mark.parametrize("group", ["layer", "platform", "policy"])
def test_target_in_preset_files_is_never_instantiated(tmp_path, marker, group):
    d = user_dir(tmp_path, {f"{group}/evil.yaml": f"_target_: {marker.name}.boom\n"
                                                  f"_args_: [1]\n"})
    extra = [] if group == "platform" else ["platform=cpu"]
    for command in ("explain", "check"):
        err = refused([command, "--config-dir", str(d), "--", f"{group}=evil"] + extra)
        assert "_target_" in err and "evil.yaml" in err
    assert not marker.fired


def test_target_in_backend_file_is_refused(tmp_path, marker):
    d = user_dir(tmp_path, {"backend/moe/evil.yaml": f"rank: 3\n_target_: {marker.name}.boom\n"})
    for command in ("explain", "list", "check"):
        refused([command, "--config-dir", str(d), "--", "platform=cpu"], "_target_",
                "catalogue.moe.evil")
    assert not marker.fired


@pytest.mark.parametrize("entry_point", [
    "{m}:Boom", "{m}.sub:Boom", "os:system", "subprocess:Popen", "builtins:eval",
    "importlib:import_module", "backendsx.{m}:Boom", "backends_{m}:Boom", "selector.commands.cli:main",
    "{m}:boom"])
def test_entry_point_outside_backends_is_refused_before_import(tmp_path, marker, entry_point):
    ep = entry_point.format(m=marker.name)
    d = user_dir(tmp_path, {"backend/moe/evil.yaml":
                            f"rank: 3\nentry_point: {ep}\nrules: []\n"})
    for command in ("explain", "list", "check"):
        refused([command, "--config-dir", str(d), "--", "platform=cpu"],
                "catalogue.moe.evil.entry_point", "evil.yaml")
    with pytest.raises(SelectorError, match="outside the backends namespace"):
        load_entry_point(ep)
    assert not allowed(ep)
    assert not marker.fired


@pytest.mark.parametrize("entry_point", ["selector.backends..{m}:Boom", "selector.backends.{m}:Boom",
                                         "selector.backends.children.probes.{m}:Boom", "backends.{m}:Boom"])
def test_backends_namespace_does_not_reach_sys_path(tmp_path, marker, entry_point):
    """`backends.<x>` resolves inside the project's package only, never a module of that name
    elsewhere on sys.path: `check` reports it cannot be imported."""
    ep = entry_point.format(m=marker.name)
    d = user_dir(tmp_path, {"backend/moe/evil.yaml": f"rank: 3\nentry_point: {ep}\nrules: []\n"})
    rc, out, err = run_main(["check", "--config-dir", str(d), "--", "platform=cpu"])
    assert rc == 2 and "Traceback" not in err
    assert "evil.yaml" in err
    assert not marker.fired


def _fake_plugin(root: Path, dist: str, module: str) -> Path:
    site = root / "site"
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[selector.backends]\nmine = {module}:Boom\n")
    return site


def test_registered_plugin_is_the_only_way_out(tmp_path, marker, monkeypatch):
    """A module registered under `selector.backends` by an installed distribution is allowed
    (and `check` imports it: the positive control); a module whose name merely starts with it
    is not."""
    site = _fake_plugin(tmp_path, "selector-plugin-fake", marker.name)
    monkeypatch.syspath_prepend(str(site))
    catalogues.reset()
    try:
        assert allowed(f"{marker.name}:Boom") and allowed(f"{marker.name}.sub:Boom")
        assert not allowed(f"{marker.name}x:Boom") and not allowed(f"x{marker.name}:Boom")
        d = user_dir(tmp_path, {"backend/moe/plugged.yaml":
                                f"rank: 3\nentry_point: {marker.name}:Boom\nrules: []\n"})
        rc, out, err = run_main(["check", "--config-dir", str(d)])
        assert rc == 0, err
        assert marker.imported.exists() and not marker.called.exists()  # imported, never called
    finally:
        catalogues.reset()


def test_broken_plugin_metadata_does_not_break_selector(tmp_path, monkeypatch):
    site = tmp_path / "site"
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[selector.backends\nthis is = not = valid\n\x00")
    monkeypatch.syspath_prepend(str(site))
    catalogues.reset()
    try:
        assert not allowed("this:X")
        assert allowed("selector.backends.wrappers.marlin:MarlinMoE")
        assert not allowed("backends.wrappers.marlin:MarlinMoE")
    finally:
        catalogues.reset()


@pytest.mark.parametrize("where", ["backend/moe/evil.yaml", "layer/evil.yaml"])
@pytest.mark.parametrize("tag", ["!!python/object/apply:{m}.boom []", "!!python/name:{m}.boom",
                                 "!!python/object:{m}.Boom {{}}", "!!python/module:{m}"])
def test_yaml_python_tags_are_never_constructed(tmp_path, marker, where, tag):
    text = ("rank: 3\ndescription: " if where.startswith("backend") else "activation: ") + \
        tag.format(m=marker.name) + "\n"
    d = user_dir(tmp_path, {where: text})
    argv = ["explain", "--config-dir", str(d), "--", "platform=cpu"] + \
        (["layer=evil"] if where.startswith("layer") else [])
    refused(argv, "evil.yaml")
    refused(["check", "--config-dir", str(d)], "evil.yaml")
    assert not marker.fired


def test_selector_never_instantiates():
    """No code path of selector can instantiate a config: it never calls Hydra's instantiate
    (Decision.instantiate builds a backend through the entry-point allow-list, not Hydra)."""
    hydra_instantiate = re.compile(r"hydra\.utils|_target_|utils\.instantiate|utils\.call\(")
    for f in (REPO / "selector").rglob("*.py"):
        text = f.read_text()
        assert not hydra_instantiate.search(text), f
        assert "register_new_resolver" not in text and "register_resolver" not in text, f


# ---------------------------------------------------------------------------------------------
# Interpolation: environment variables, files, other keys

INTERPOLATIONS = ["${oc.env:SELECTOR_CANARY}", "'${oc.env:SELECTOR_CANARY}'",
                  '"${oc.env:SELECTOR_CANARY}"', "${oc.env:SELECTOR_CANARY,x}",
                  "${oc.decode:${oc.env:SELECTOR_CANARY}}", "\\${oc.env:SELECTOR_CANARY}",
                  "x${oc.env:SELECTOR_CANARY}", "${layer.op}", "${now:%Y}",
                  "${hydra:runtime.cwd}", "${oc.select:layer.op,x}", "${oc.create:{a:1}}",
                  "${oc.dict.keys:layer}", "${env:SELECTOR_CANARY}"]


@pytest.mark.parametrize("key", ["layer.activation", "platform.packages.torch",
                                 "platform.capability", "policy.moe_backend",
                                 "+platform.packages.newpkg"])
@pytest.mark.parametrize("value", INTERPOLATIONS[:6])
def test_interpolation_in_overrides_is_refused(key, value):
    rc, out, err = run_main(["explain", "--format", "json", "--", "platform=cpu", f"{key}={value}"])
    assert rc == 2, (key, value, out, err)
    assert CANARY not in out + err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", INTERPOLATIONS)
def test_interpolation_forms_are_refused(value, tmp_path):
    refused(["explain", "--", "platform=cpu", f"platform.gpu_name={value}"])
    cache = Path(os.environ["SELECTOR_CACHE_DIR"])
    if cache.is_dir():  # a refused config is never cached, and no canary is ever written
        for f in cache.iterdir():
            assert CANARY not in f.read_text()


@pytest.mark.parametrize("group,text", [
    ("layer", "activation: ${oc.env:SELECTOR_CANARY}\n"),
    ("layer", "activation: '${oc.env:SELECTOR_CANARY}'\n"),
    ("platform", "preset: evil\ngpu_name: ${oc.env:SELECTOR_CANARY}\n"),
    ("platform", "preset: evil\ncapability: ${oc.env:SELECTOR_CANARY}\n"),
    ("stack", "# @package platform\npackages:\n  torch: ${oc.env:SELECTOR_CANARY}\n"),
    ("policy", "moe_backend: ${oc.decode:'\"auto\"'}\n"),
    ("layer", "activation: ${oc.env:SELECTOR_CANARY,silu}\n"),
])
def test_interpolation_in_preset_files_is_refused(tmp_path, group, text):
    d = user_dir(tmp_path, {f"{group}/evil.yaml": text})
    extra = [] if group == "platform" else ["platform=cpu"]
    refused(["explain", "--config-dir", str(d), "--", f"{group}=evil"] + extra, "${")
    rc, out, err = run_main(["check", "--config-dir", str(d), "--", f"{group}=evil"] + extra)
    assert rc == 2 and CANARY not in out + err


@pytest.mark.parametrize("text", [
    "rank: 3\ndescription: ${oc.env:SELECTOR_CANARY}\n",
    "rank: 3\nrules:\n  - {kind: clamp, source: '${oc.env:SELECTOR_CANARY}'}\n",
    "rank: 3\nrules:\n  - {kind: clamp, source: s, message: 'see ${oc.env:SELECTOR_CANARY}'}\n",
    "rank: 3\nrules:\n  - {kind: package, source: s, package: torch, "
    "specifier: '${oc.env:SELECTOR_CANARY}'}\n",
    "rank: 3\nrules:\n  - {kind: clamp, source: s, when: {packages: "
    "{torch: '${oc.env:SELECTOR_CANARY}'}}}\n",
])
def test_interpolation_in_backend_files_is_refused(tmp_path, text):
    d = user_dir(tmp_path, {"backend/moe/evil.yaml": text})
    for command in ("explain", "list", "check"):
        err = refused([command, "--config-dir", str(d), "--", "platform=cpu"], "evil.yaml")
        assert "interpolation" in err or "${" in err


def test_interpolation_in_a_key_is_never_resolved(tmp_path):
    """A `${...}` used as a mapping key is not a value OmegaConf resolves: it stays literal text
    (or is refused), and the environment is never read."""
    d = user_dir(tmp_path, {"stack/evil.yaml": "# @package platform\npackages:\n"
                                               "  '${oc.env:SELECTOR_CANARY}': '1.0'\n"})
    rc, out, err = run_main(["explain", "--format", "json", "--config-dir", str(d), "--",
                             "platform=cpu", "stack=evil"])
    assert rc in (1, 2) and CANARY not in out + err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# The config search path

@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside every config dir that, if loaded, would change the decision visibly."""
    o = tmp_path / "outside"
    o.mkdir()
    (o / "evil.yaml").write_text("# @package _global_\nlayer:\n  activation: relu2\n"
                                 f"  act_and_mul: false\nplatform:\n  gpu_name: {CANARY}\n")
    (o / "group").mkdir()
    (o / "group" / "evil.yaml").write_text(f"activation: relu2\n# {CANARY}\n")
    return o


def _rel(from_dir: Path, to: Path) -> str:
    return os.path.relpath(to, from_dir)


@pytest.mark.parametrize("override", [
    "layer=../../etc/passwd", "platform=/etc/passwd", "stack=..", "layer=./default",
    "layer=default/../default", "layer=..\\..\\x", "+layer=../x", "++layer=../x",
    "layer= ../x", "policy=../../../outside/evil", "layer=%2e%2e/x", "layer=[default,../x]",
    "layer={a:../x}"])
def test_presets_are_names_never_paths(override):
    err = refused(["explain", "--", "platform=cpu", override])
    assert "accepted" in err or "preset" in err or "override" in err


def test_new_group_override_cannot_leave_the_search_path(tmp_path, outside):
    d = user_dir(tmp_path, {"foo/ok.yaml": "# @package _global_\n"})
    for base in (REPO / "conf", d):
        rel = _rel(base / "foo", outside / "evil")
        for o in (f"+foo={rel}", f"+foo=[{rel}]", f"++foo={rel}", f"+foo@_global_={rel}",
                  f"foo={rel}", f"+foo='{rel}'", f"+foo/bar={rel}", "+layer@_global_=default"):
            refused(["explain", "--format", "json", "--config-dir", str(d), "--",
                     "platform=cpu", o], "override")


@pytest.mark.parametrize("defaults", [
    "  - ../../outside/evil", "  - /../outside/evil", "  - /foo: ../../outside/evil",
    "  - /foo@_global_: ../../outside/evil", "  - override /layer: ../outside/group/evil",
    "  - optional /foo: ../../x", "  - ${oc.env:SELECTOR_CANARY}",
    "  - /foo: ${oc.env:SELECTOR_CANARY}", "  - group: ..\\..\\outside\\evil"])
def test_defaults_lists_cannot_leave_the_search_path(tmp_path, outside, defaults):
    d = user_dir(tmp_path, {"layer/evil.yaml": f"defaults:\n{defaults}\n  - _self_\n"
                                               "activation: silu\n"})
    err = refused(["explain", "--format", "json", "--config-dir", str(d), "--", "platform=cpu",
                   "layer=evil"], "evil.yaml line 2", "defaults")
    assert "relu2" not in err
    refused(["check", "--config-dir", str(d)], "evil.yaml")


def test_defaults_list_inside_the_search_path_is_fine(tmp_path):
    d = user_dir(tmp_path, {"layer/mine.yaml": "defaults:\n  - nemotron_moe\n  - _self_\n"
                                               "ep_size: 2\n"})
    rc, out, err = run_main(["explain", "--format", "json", "--config-dir", str(d), "--",
                             "platform=cpu", "layer=mine"])
    assert rc in (0, 1), err
    layer = json.loads(out)["layer"]
    assert layer["activation"] == "relu2" and layer["ep_size"] == 2


def _symlink(link: Path, target: Path):
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


@pytest.mark.parametrize("case", ["backend file", "preset file", "group dir", "backend dir",
                                  "broken link", "relative link"])
def test_symlinks_out_of_a_config_dir_are_refused(tmp_path, outside, case):
    d = tmp_path / "user"
    d.mkdir()
    real_backend = outside / "x.yaml"
    real_backend.write_text(f"rank: 3\ndescription: {CANARY}\nrules: []\n")
    link = {"backend file": d / "backend" / "moe" / "x.yaml",
            "preset file": d / "layer" / "x.yaml",
            "group dir": d / "layer",
            "backend dir": d / "backend" / "moe",
            "broken link": d / "layer" / "gone.yaml",
            "relative link": d / "layer" / "x.yaml"}[case]
    target = {"backend file": real_backend, "preset file": outside / "group" / "evil.yaml",
              "group dir": outside / "group", "backend dir": outside,
              "broken link": outside / "missing.yaml",
              "relative link": Path(_rel(d / "layer", outside / "group" / "evil.yaml"))}[case]
    _symlink(link, target)
    for argv in (["explain", "--config-dir", str(d), "--", "platform=cpu"],
                 ["explain", "--config-dir", str(d), "--", "platform=cpu", "layer=x"],
                 ["list", "--config-dir", str(d)], ["check", "--config-dir", str(d)]):
        err = refused(argv, "symbolic link", str(link))
        assert "relu2" not in err


def test_symlinks_inside_a_config_dir_are_followed(tmp_path):
    d = tmp_path / "user"
    (d / "real").mkdir(parents=True)
    (d / "real" / "mine.yaml").write_text("activation: relu2\nact_and_mul: false\n")
    _symlink(d / "layer" / "mine.yaml", Path("../real/mine.yaml"))
    _symlink(d / "notes.txt", tmp_path / "elsewhere.txt")  # not a config file: ignored
    rc, out, err = run_main(["explain", "--format", "json", "--config-dir", str(d), "--",
                             "platform=cpu", "layer=mine"])
    assert rc in (0, 1), err
    assert json.loads(out)["layer"]["activation"] == "relu2"


def test_config_dir_given_through_a_symlink_is_fine(tmp_path):
    real = tmp_path / "real"
    (real / "layer").mkdir(parents=True)
    (real / "layer" / "mine.yaml").write_text("activation: gelu\n")
    (tmp_path / "alias").symlink_to(real)
    rc, out, err = run_main(["explain", "--format", "json", "--config-dir",
                             str(tmp_path / "alias"), "--", "platform=cpu", "layer=mine"])
    assert rc in (0, 1), err


# ---------------------------------------------------------------------------------------------
# The same, through a real process (the interpreter's own sys.path handling included)

def test_subprocess_refusals(tmp_path, marker, outside):
    d = user_dir(tmp_path, {
        "backend/moe/evil.yaml": f"rank: 3\nentry_point: {marker.name}:Boom\nrules: []\n"})
    env = child_env(marker.dir, SELECTOR_CACHE_DIR=str(tmp_path / "cache2"))
    cases = [["check", "--config-dir", str(d)],
             ["explain", "--config-dir", str(d), "platform=cpu"],
             ["explain", "platform=cpu", "layer.activation=${oc.env:SELECTOR_CANARY}"],
             ["explain", "platform=cpu", f"+foo={_rel(REPO / 'conf' / 'foo', outside / 'evil')}"]]
    for argv in cases:
        p = subprocess.run([sys.executable, "-m", "selector", *argv], capture_output=True,
                           text=True, env=env, cwd=str(marker.dir), timeout=120)
        assert p.returncode == 2, (argv, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and CANARY not in p.stdout + p.stderr
        assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) <= 2
    assert not marker.fired


def test_symlink_loops_are_bad_input_not_a_crash(tmp_path):
    d = tmp_path / "user"
    (d / "layer").mkdir(parents=True)
    (d / "layer" / "a.yaml").symlink_to(d / "layer" / "b.yaml")
    (d / "layer" / "b.yaml").symlink_to(d / "layer" / "a.yaml")
    (d / "backend").mkdir()
    (d / "backend" / "moe").symlink_to(d / "backend")  # a directory loop inside the dir
    for command in ("explain", "check"):
        refused([command, "--config-dir", str(d), "--", "platform=cpu"], "symbolic link")
