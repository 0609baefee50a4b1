"""tools/regen.py rewrites every generated file; the tree must be what it writes, and --check
must say which file is stale and how."""
from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO, cli_env
from readme_examples import PAGES

pytestmark = pytest.mark.slow  # runs `matrix` in subprocesses


def _regen():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import regen
    finally:
        sys.path.remove(str(REPO / "tools"))
    return regen


def test_the_tree_is_what_regen_writes():
    """Every generated file but the example pages, whose blocks test_readme.py re-runs one
    test each (the same render as regen's), is byte for byte what regen writes."""
    regen = _regen()
    pages = {str(p.relative_to(REPO)) for p in PAGES}
    assert pages <= set(regen.GENERATED)
    outputs = {n: fn() for n, fn in regen.GENERATED.items() if n not in pages}
    assert not regen.stale(outputs), "stale: python tools/regen.py\n" + "\n".join(
        regen.excerpt(n, outputs[n]) for n in regen.stale(outputs))


def test_regen_check_runs_clean_in_a_subprocess():
    """`tools/regen.py --check` as .ci/run runs it (the example pages left out: above)."""
    r = subprocess.run([sys.executable, "-c", (
        "import sys; sys.argv[0] = 'regen'; sys.path.insert(0, 'tools'); import regen; "
        "from readme_examples import PAGES; "
        "[regen.GENERATED.pop(str(p.relative_to(regen.ROOT))) for p in PAGES]; "
        "sys.exit(regen.main(['--check']))")],
        capture_output=True, text=True, cwd=REPO, env=cli_env(), timeout=600)
    assert r.returncode == 0, f"generated files are stale: python tools/regen.py\n{r.stdout}{r.stderr}"
    assert "generated files are current" in r.stdout


def test_check_names_a_stale_file_with_a_diff(monkeypatch, capsys):
    regen = _regen()
    real = (REPO / "docs" / "rules.md").read_text()
    monkeypatch.setattr(regen, "GENERATED", {"docs/rules.md": lambda: real + "a new line\n"})
    assert regen.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "- docs/rules.md" in out and "+a new line" in out
    assert (REPO / "docs" / "rules.md").read_text() == real  # --check writes nothing
    monkeypatch.setattr(regen, "GENERATED", {"docs/rules.md": lambda: real})
    assert regen.main(["--check"]) == 0


def test_interface_backend_names_block_is_filled():
    regen = _regen()
    with pytest.raises(SystemExit, match="unknown generated block 'regen:nope'"):
        regen.fill_blocks("<!-- regen:nope -->\nx\n<!-- /regen:nope -->", {})
    assert regen.fill_blocks("a\n<!-- regen:b -->\nold\n<!-- /regen:b -->\n", {"b": lambda: "new\n"}) \
        == "a\n<!-- regen:b -->\nnew\n<!-- /regen:b -->\n"
