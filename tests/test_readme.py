"""The README's and docs/examples.md's worked examples are real output of the current code;
the README's quick start comes first and its Python block runs."""
import re
import subprocess
import sys

import pytest
from readme_examples import README, all_examples, run

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

CASES = all_examples()


def test_the_three_worked_examples_are_shown():
    cmds = " ".join(c for c, _ in CASES)
    for needle in ("platform=dgx_spark", "platform=h200", "platform=b200"):
        assert needle in cmds


def test_quick_start_comes_first_and_answers_for_b200():
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:4] == ["Quick start", "Keys", "API", "Examples"], sections
    quick = text.split("\n## ")[1]
    commands = re.findall(r"```(?:bash|console)\n\$? ?([^\n]+)", quick)
    # the two commands (set up and answer for this machine; run the tests), then the B200 answer
    assert "pip install" in commands[0] and "selector explain" in commands[0], commands
    assert commands[1] == ".venv/bin/python -m pytest -q", commands
    assert "platform=b200" in commands[2], commands


def test_quick_start_python_block_runs(tmp_path):
    quick = README.read_text().split("\n## ")[1]
    code = re.search(r"```python\n(.*?)```", quick, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("command,shown", CASES, ids=[c[27:80] for c, _ in CASES])
def test_example_matches_output(command, shown):
    assert run(command) == shown, "stale: run python tests/readme_examples.py --write"
