"""How long `selector fleet` takes on a fleet file (default: examples/fleet.yaml, 5 machines x
4 checkpoints x 3 engines = 60 plans), with and without --what-if; prints the seconds.

    .venv/bin/python benchmarks/fleet_time.py [FLEET.yaml] [--what-if stack=vllm_0_33]

Each run is a fresh `python -m selector fleet` process (start-up and composition included);
selector's on-disk cache (SELECTOR_CACHE_DIR) is kept as it is unless --cold empties it first
(a temporary directory)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fleet", nargs="?", default=str(REPO / "examples" / "fleet.yaml"))
    ap.add_argument("--what-if", nargs="+", default=[])
    ap.add_argument("--cold", action="store_true", help="start with an empty selector cache")
    args = ap.parse_args()
    env = dict(os.environ)
    tmp = None
    if args.cold:
        tmp = tempfile.TemporaryDirectory()
        env["SELECTOR_CACHE_DIR"] = tmp.name
    cmd = [sys.executable, "-m", "selector", "fleet", args.fleet, "--format", "json"]
    if args.what_if:
        cmd += ["--what-if", *args.what_if]
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if p.returncode not in (0, 1):
        print(p.stderr, file=sys.stderr)
        return 2
    import json
    rep = json.loads(p.stdout)
    print(f"fleet_time: {args.fleet}: {rep['counts']['plans']} plans"
          f"{' (and again with ' + ' '.join(args.what_if) + ')' if args.what_if else ''} in "
          f"{seconds:.1f} s wall ({rep['seconds']:.1f} s inside selector; cache "
          f"{'cold' if args.cold else 'as found'}); exit {p.returncode}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
