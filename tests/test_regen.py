"""tools/regen.py rewrites every generated file; the tree must be what it writes, and --check
must say which file is stale and how."""
from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO, cli_env

pytestmark = pytest.mark.slow  # runs the README's and docs/examples.md's commands


def test_the_tree_is_what_regen_writes():
    r = subprocess.run([sys.executable, str(REPO / "tools" / "regen.py"), "--check"],
                       capture_output=True, text=True, cwd=REPO, env=cli_env(), timeout=600)
    assert r.returncode == 0, f"generated files are stale: python tools/regen.py\n{r.stdout}{r.stderr}"
    assert "generated files are current" in r.stdout


def test_check_names_a_stale_file_with_a_diff(monkeypatch, capsys):
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import regen
    finally:
        sys.path.remove(str(REPO / "tools"))
    real = (REPO / "docs" / "rules.md").read_text()
    monkeypatch.setattr(regen, "GENERATED", {"docs/rules.md": lambda: real + "a new line\n"})
    assert regen.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "- docs/rules.md" in out and "+a new line" in out
    assert (REPO / "docs" / "rules.md").read_text() == real  # --check writes nothing
    monkeypatch.setattr(regen, "GENERATED", {"docs/rules.md": lambda: real})
    assert regen.main(["--check"]) == 0


def test_interface_backend_names_block_is_filled():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import regen
    finally:
        sys.path.remove(str(REPO / "tools"))
    with pytest.raises(SystemExit, match="unknown generated block 'regen:nope'"):
        regen.fill_blocks("<!-- regen:nope -->\nx\n<!-- /regen:nope -->", {})
    assert regen.fill_blocks("a\n<!-- regen:b -->\nold\n<!-- /regen:b -->\n", {"b": lambda: "new\n"}) \
        == "a\n<!-- regen:b -->\nnew\n<!-- /regen:b -->\n"
