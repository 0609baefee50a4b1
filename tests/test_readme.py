"""The README a newcomer reads in five minutes: under 250 lines, the two commands first, one
example per entry point, each console example real output of the current code (as are
docs/examples.md's and docs/integration.md's), its Python block runs, and its backend YAML
passes `check` as written."""
import re
import subprocess
import sys

import pytest
from helpers import cli_env
from readme_examples import MORE, README, all_examples, run, shown

pytestmark = pytest.mark.slow  # subprocess / fuzz suite: `pytest -m "not slow"` skips it

CASES = all_examples()
TEXT = README.read_text()


def _section(title: str) -> str:
    return TEXT.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_short_and_in_order():
    assert len(TEXT.splitlines()) < 250, len(TEXT.splitlines())
    sections = re.findall(r"^## (.+)$", TEXT, re.M)
    assert sections == ["Quick start", "One example per entry point", "Adding a backend",
                        "Where to read on"], sections
    entry = re.findall(r"^### (.+)$", _section("One example per entry point"), re.M)
    for needle in ("`explain`", "Overrides", "`list`", "`check`", "`doctor`", "`matrix`",
                   "`explain --model DIR`", "Python API", "vLLM plugin"):
        assert any(needle in e for e in entry), (needle, entry)
    assert "Migration" not in TEXT  # CHANGELOG.md holds them


def test_the_three_worked_examples_are_shown():
    cmds = " ".join(c for c, _ in CASES)
    for needle in ("platform=dgx_spark", "platform=h200", "platform=b200"):
        assert needle in cmds


def test_quick_start_has_the_two_commands_then_the_b200_answer():
    commands = re.findall(r"```(?:bash|console)\n\$? ?([^\n]+)", _section("Quick start"))
    assert "pip install" in commands[0] and "selector explain" in commands[0], commands
    assert commands[1].startswith(".venv/bin/python -m pytest -q"), commands
    assert "platform=b200" in commands[2], commands
    # .ci/run runs exactly these two commands
    ci = (README.parent / ".ci" / "run").read_text()
    assert commands[0] in ci and commands[1] in ci


def test_python_block_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", _section("One example per entry point"), re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "flashinfer_trtllm selected", r.stdout


def test_the_backend_yaml_passes_check_as_written(tmp_path):
    """Issue 36: the example once took a rank another backend has."""
    yaml = re.search(r"```yaml\n(.*?)```", _section("Adding a backend"), re.S).group(1)
    conf = tmp_path / "my_conf" / "backend" / "moe"
    conf.mkdir(parents=True)
    (conf / "my_moe.yaml").write_text(yaml)
    r = subprocess.run([sys.executable, "-m", "selector", "check", "--config-dir",
                        str(tmp_path / "my_conf")], capture_output=True, text=True,
                       env=cli_env(), cwd=README.parent, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok: "), r.stdout + r.stderr
    assert "warning" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "selector", "explain", "--format", "json",
                        "--config-dir", str(tmp_path / "my_conf"), "platform=rtx_5090",
                        "stack=flashinfer_0_7_4", "policy.allow_opt_in=[my_moe]", "layer.num_tokens=8"],
                       capture_output=True, text=True, env=cli_env(), cwd=README.parent,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert '"selected": "my_moe"' in r.stdout  # its preference rank 5 wins on SM 12.x


def test_a_truncated_block_shows_the_first_lines():
    assert shown("a\nb\nc\n", "x\n" + MORE) == "a\n" + MORE
    assert shown("a\nb\n", "old\n") == "a\nb\n"


@pytest.mark.parametrize("command,block", CASES, ids=[c[27:80] for c, _ in CASES])
def test_example_matches_output(command, block):
    assert shown(run(command), block) == block, "stale: run python tools/regen.py"
