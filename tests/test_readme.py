"""The README's worked examples are real output of the current code."""
import pytest
from readme_examples import README, examples, run

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

CASES = examples(README.read_text())


def test_readme_has_the_three_worked_examples():
    cmds = " ".join(c for c, _ in CASES)
    for needle in ("platform=dgx_spark", "platform=h200", "platform=b200"):
        assert needle in cmds


@pytest.mark.parametrize("command,shown", CASES, ids=[c[27:80] for c, _ in CASES])
def test_readme_example_matches_output(command, shown):
    assert run(command) == shown, "README is stale: run python tests/readme_examples.py --write"
