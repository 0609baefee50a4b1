"""The console examples of the README, docs/examples.md and docs/integration.md: run each
`$ python -m selector ...` block and compare.

    python tools/regen.py    # refreshes these outputs with every other generated file
    python tests/readme_examples.py --write   # these pages only

tests/test_readme.py fails when a page shows output that the code no longer prints. A block
whose output ends with a line `...` shows the first lines of the output only.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

README = Path(__file__).resolve().parent.parent / "README.md"
PAGES = (README, README.parent / "docs" / "examples.md", README.parent / "docs" / "integration.md")
BLOCK = re.compile(r"```console\n\$ ((?:\.venv/bin/)?python -m selector [^\n]*)\n(.*?)```", re.S)


def examples(text: str) -> List[Tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def all_examples() -> List[Tuple[str, str]]:
    return [e for page in PAGES if page.is_file() for e in examples(page.read_text())]


def run(command: str) -> str:
    argv = shlex.split(command)
    assert argv[0] in ("python", ".venv/bin/python") and argv[1:3] == ["-m", "selector"], command
    r = subprocess.run([sys.executable, "-m", "selector", *argv[3:]], capture_output=True,
                       text=True, cwd=README.parent, timeout=120)
    assert r.returncode in (0, 1), (command, r.returncode, r.stderr)
    return r.stdout


MORE = "...\n"  # a block whose shown output ends with this line shows the output's first lines


def shown(output: str, block: str) -> str:
    """What a block shows of `output`: all of it, or (a block ending in `...`) as many first
    lines as the block shows, then `...`."""
    if not block.endswith("\n" + MORE) and block != MORE:
        return output
    n = block.count("\n") - 1
    return "".join(output.splitlines(keepends=True)[:n]) + MORE


def render(text: str) -> str:
    """`text` with each console block's output replaced by what its command prints now."""
    return BLOCK.sub(lambda m: f"```console\n$ {m.group(1)}\n"
                     f"{shown(run(m.group(1)), m.group(2))}```", text)


def write() -> None:
    for page in PAGES:
        if page.is_file():
            page.write_text(render(page.read_text()))


if __name__ == "__main__":
    if "--write" in sys.argv:
        write()
    for cmd, _ in all_examples():
        print(cmd)
