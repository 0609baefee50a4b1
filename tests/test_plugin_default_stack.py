"""A plugin stack marked `stack: {default: true}` (issue 36): it passed `check`, then `matrix`
exited 2 for every user who installed the plugin ("exactly one must be marked"). The matrix's
default is the project's reference (docs/matrix.md is generated with it): only the packaged
tree's mark counts, so the plugin's mark is harmless and its stack stays reachable by name."""
from __future__ import annotations

import sys

import pytest
from helpers import run_main
from plugin_site import make_site

from selector.commands.matrix import default_stack
from selector.config import catalogues
from selector.core.packaged import packaged_conf_dir

PLUGIN_STACK = (packaged_conf_dir() / "stack" / "flashinfer_0_7_4.yaml").read_text().replace(
    'stack: {family: flashinfer, version: "0.7.4"}',
    'stack: {family: flashinfer, version: "0.7.4", default: true}')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path / "cache"))
    site = make_site(tmp_path, {"stack/fast_stack.yaml": PLUGIN_STACK})
    monkeypatch.syspath_prepend(str(site))
    catalogues.reset()
    yield
    catalogues.reset()
    for name in [m for m in sys.modules if m.split(".")[0] == "fast_kernels"]:
        del sys.modules[name]


def test_a_plugin_default_mark_does_not_take_the_matrix_default(plugin):
    assert "default: true" in PLUGIN_STACK
    rc, out, err = run_main(["check"])
    assert rc == 0, err
    assert default_stack() == "vllm_0_32"  # raised SelectorError (two marked) before the fix
    rc, out, err = run_main(["explain", "platform=b200", "stack=fast_stack"])
    assert rc in (0, 1) and "selected:" in out, err


def test_a_config_dir_default_mark_is_ignored_too(tmp_path):
    d = tmp_path / "user" / "stack"
    d.mkdir(parents=True)
    (d / "mine.yaml").write_text(PLUGIN_STACK)
    assert default_stack([str(tmp_path / "user")]) == "vllm_0_32"
