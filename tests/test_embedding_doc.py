"""docs/embedding.md runs as written: its Python blocks, in order, from an empty directory
outside the checkout, print what its text blocks show ('...' elides)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "embedding.md"


def blocks(kind: str):
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def test_walkthrough_has_sixty_layers_two_platforms_and_a_strict_refusal():
    code = "\n".join(blocks("python"))
    assert "assert len(LAYERS) == 60" in code
    assert "platform=b200" in code and "platform=dgx_spark" in code
    assert 'd.outcome == "refused_explicit"' in code


def test_walkthrough_runs_and_prints_what_it_shows(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", "\n".join(blocks("python"))], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for block in blocks("text"):
        for line in block.strip().splitlines():
            pattern = re.compile(".*".join(re.escape(p) for p in line.split("...")) + "$")
            assert any(pattern.match(o) for o in out), (line, r.stdout)
