"""Before/after: run benchmarks/bench.py of two checkouts in one session, print them side by side.

    git archive <before-commit> | tar -x -C /tmp/before
    python tools/bench_compare.py /tmp/before [--repeat 7]

Each tree's bench runs in its own process with that tree first on sys.path; the rows are matched
by name (a row only one side has shows '-' on the other).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench import fmt  # noqa: E402


def run(tree: Path, repeat: int) -> dict:
    out = Path(tempfile.mkdtemp()) / "r.json"
    # the tree first; what PYTHONPATH already holds (dependencies installed with --target) after
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)}
    subprocess.run([sys.executable, str(tree / "benchmarks" / "bench.py"), "--repeat", str(repeat),
                    "--json", str(out)], cwd=tree, env=env, stdout=subprocess.DEVNULL, check=False)
    return {r["what"]: r for r in json.loads(out.read_text())["rows"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    before, after = run(args.before.resolve(), args.repeat), run(ROOT, args.repeat)
    print("| what | before (median) | after (median) | target | after meets it |")
    print("|---|---|---|---|---|")
    for what in dict.fromkeys(list(before) + list(after)):
        b, a = before.get(what), after.get(what)
        r = a or b
        print(f"| {what} | {fmt(b['median'], b['unit']) if b else '-'} | "
              f"{fmt(a['median'], a['unit']) if a else '-'} | "
              f"{'< ' + fmt(r['target'], r['unit']) if r['target'] is not None else '-'} | "
              f"{ {True: 'yes', False: 'NO', None: '-'}[a['ok']] if a else '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
