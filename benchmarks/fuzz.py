"""A longer fuzz run than CI's, with outcome counts.

Runs tests/test_fuzz.py, tests/test_fuzz_configdir.py (config-dir contents and environment
variables), tests/test_fuzz_plugins.py (installed plugins) and tests/test_properties.py with
SELECTOR_FUZZ_SCALE times CI's hypothesis examples and fresh random seeds (CI's runs are
derandomised: the same cases every time), and prints how many cases ran and how each ended.
A failure prints hypothesis's minimal example and the seed to reproduce it.

    python benchmarks/fuzz.py                 # scale 20, random seeds
    python benchmarks/fuzz.py --scale 1 --ci  # exactly what CI runs, counted
    python benchmarks/fuzz.py --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20, help="examples = CI's times this")
    ap.add_argument("--ci", action="store_true", help="CI's derandomised cases, not fresh seeds")
    ap.add_argument("--json", help="also write the counts here")
    ap.add_argument("--only", choices=("fuzz", "configdir", "plugins", "properties"),
                    help="run one of the files")
    args = ap.parse_args(argv)
    files = {"fuzz": ["tests/test_fuzz.py"], "configdir": ["tests/test_fuzz_configdir.py"],
             "plugins": ["tests/test_fuzz_plugins.py"],
             "properties": ["tests/test_properties.py"],
             None: ["tests/test_fuzz.py", "tests/test_fuzz_configdir.py",
                    "tests/test_fuzz_plugins.py", "tests/test_properties.py"]}[args.only]
    with tempfile.TemporaryDirectory(prefix="selector-fuzz-") as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ, SELECTOR_FUZZ_SCALE=str(args.scale),
                   SELECTOR_FUZZ_REPORT=str(report), SELECTOR_CACHE_DIR=str(Path(tmp) / "c"))
        env.pop("SELECTOR_NO_CACHE", None)
        if not args.ci:
            env["SELECTOR_FUZZ_RANDOM"] = "1"
        t = time.time()
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            *files], cwd=str(REPO), env=env)
        seconds = time.time() - t
        counts = json.loads(report.read_text()) if report.is_file() else {}
    total = sum(n for outcomes in counts.values() for n in outcomes.values())
    print(f"\nfuzz run: scale {args.scale}, {'CI seeds' if args.ci else 'random seeds'}, "
          f"{seconds:.0f} s, pytest exit {p.returncode}")
    for group in sorted(counts):
        outcomes = counts[group]
        parts = ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))
        print(f"  {group:34s} {sum(outcomes.values()):7d}  ({parts})")
    print(f"  {'total cases':34s} {total:7d}")
    if args.json:
        Path(args.json).write_text(json.dumps({"scale": args.scale, "random": not args.ci,
                                               "seconds": round(seconds, 1),
                                               "pytest_exit": p.returncode, "counts": counts,
                                               "total": total}, indent=2, sort_keys=True))
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
