"""The cold start of `python -m selector explain`: a new interpreter per run, as an operator types it.

    python benchmarks/cold_start.py [--runs 5] [--args "explain"] [--importtime] [--flashinfer]

Each run is a fresh `python -m selector <args>` process, timed from its start to its exit (wall
clock, `time.perf_counter` around `subprocess.run`); the figure is the **median of --runs** (5).
Before the timed runs one untimed run fills what a second run of the same command finds on any
machine: the bytecode of selector's modules (written under a private PYTHONPYCACHEPREFIX, so the
checkout stays clean and a PYTHONDONTWRITEBYTECODE in the environment does not make every run
compile selector again) and the composed-config cache (a private SELECTOR_CACHE_DIR).
`--importtime` adds one `-X importtime` run and prints the modules of the largest own import time;
`--flashinfer` times `python -c "import flashinfer"` as many times beside it (the scale of an
import every engine pays; issue #46 compared the two). Also prints the machine's load average: on
a shared machine the figure moves with it.

`--against OLD_CHECKOUT` times another checkout's `selector` in the same sitting, **interleaved**
(old, new, old, new, ...: both trees' runs see the same load, which moves 2x within a minute on
a shared machine), and prints both medians, wall and CPU, and their ratio:

    python benchmarks/cold_start.py --runs 15 --against /tmp/base
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]


CPU: List[float] = []  # the CPU seconds (user + system) of each timed run and its children


def timed_runs(cmd: List[str], env: Dict[str, str], runs: int) -> List[float]:
    """Wall seconds of each run; its CPU seconds (with the NVML child's) go to CPU."""
    import resource
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        out.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if r.returncode not in (0, 1):
            raise SystemExit(f"cold_start: {shlex.join(cmd)} exited {r.returncode}: "
                             f"{r.stderr.strip()[-400:]}")
    return out


def import_table(cmd: List[str], env: Dict[str, str], top: int = 12) -> List[str]:
    r = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, cwd=REPO,
                       capture_output=True, text=True)
    rows = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, total, name = line[len("import time:"):].split("|", 2)
        rows.append((int(own), int(total), name.strip()))
    rows.sort(reverse=True)
    whole = sum(r[0] for r in rows)
    return [f"imports in all: {whole / 1e3:.1f} ms own time, {len(rows)} modules"] + [
        f"  {own / 1e3:7.1f} ms own {total / 1e3:7.1f} ms with its imports  {name}"
        for own, total, name in rows[:top]]


def main(argv: List[str] | None = None) -> int:
    global REPO
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--args", default="explain", help="the selector command line (default: "
                   "explain)")
    p.add_argument("--importtime", action="store_true")
    p.add_argument("--flashinfer", action="store_true")
    p.add_argument("--repo", default=str(REPO), help="run from this checkout (its `selector` "
                   "package first on the path: an older tree's figure beside this one's)")
    p.add_argument("--against", metavar="OLD_CHECKOUT", help="time this checkout too, its runs "
                   "interleaved with --repo's, and print both medians")
    a = p.parse_args(argv)
    REPO = Path(a.repo).resolve()
    if a.against:
        return interleaved(Path(a.against).resolve(), REPO, a.runs, a.args)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SELECTOR_CACHE_DIR=str(Path(tmp) / "cache"),
                   PYTHONPYCACHEPREFIX=str(Path(tmp) / "pyc"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        os.makedirs(env["SELECTOR_CACHE_DIR"], mode=0o700)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        where = subprocess.run([sys.executable, "-c", "import selector; print(selector.__file__)"],
                               env=env, cwd=REPO, capture_output=True, text=True).stdout.strip()
        print(f"selector from {where}")
        cmd = [sys.executable, "-m", "selector", *shlex.split(a.args)]
        timed_runs(cmd, env, 1)  # bytecode and the composed-config cache, as a second run has
        CPU.clear()
        times = timed_runs(cmd, env, a.runs)
        cpu = statistics.median(CPU)
        bare = timed_runs([sys.executable, "-c", "pass"], env, a.runs)
        print(f"python -m selector {a.args}: median {statistics.median(times) * 1e3:.0f} ms "
              f"over {a.runs} runs (min {min(times) * 1e3:.0f}, max {max(times) * 1e3:.0f}; CPU "
              f"time median {cpu * 1e3:.0f} ms); "
              f"a bare interpreter {statistics.median(bare) * 1e3:.0f} ms; load average "
              f"{os.getloadavg()[0]:.2f}")
        if a.flashinfer:
            fi = timed_runs([sys.executable, "-c", "import flashinfer"], env, a.runs)
            print(f"import flashinfer: median {statistics.median(fi) * 1e3:.0f} ms; explain is "
                  f"{statistics.median(times) / statistics.median(fi):.2f} of it")
        if a.importtime:
            print("\n".join(import_table(cmd, env)))
    return 0


def interleaved(old: Path, new: Path, runs: int, args: str) -> int:
    """`--against`: the two trees' runs alternate (old first), each tree with its own cache and
    bytecode directory filled by one untimed run; the medians of wall and CPU time (the NVML
    child's included), and the ratio new / old."""
    import resource
    with tempfile.TemporaryDirectory() as tmp:
        envs = {}
        for label, repo in (("old", old), ("new", new)):
            env = dict(os.environ, SELECTOR_CACHE_DIR=str(Path(tmp) / label / "cache"),
                       PYTHONPYCACHEPREFIX=str(Path(tmp) / label / "pyc"))
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            os.makedirs(env["SELECTOR_CACHE_DIR"], mode=0o700)
            env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep)
            envs[label] = (env, repo)
        cmd = [sys.executable, "-m", "selector", *shlex.split(args)]
        outputs = {}
        for label, (env, repo) in envs.items():  # bytecode and the cache, as a second run has
            r = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True)
            if r.returncode not in (0, 1):
                raise SystemExit(f"cold_start: {label} ({repo}) exited {r.returncode}: "
                                 f"{r.stderr.strip()[-400:]}")
            outputs[label] = r.stdout
        wall: Dict[str, List[float]] = {"old": [], "new": []}
        cpu: Dict[str, List[float]] = {"old": [], "new": []}
        loads = []
        for _ in range(runs):
            for label, (env, repo) in envs.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                r = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True)
                wall[label].append(time.perf_counter() - t)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[label].append(after.ru_utime - before.ru_utime + after.ru_stime -
                                  before.ru_stime)
                if r.returncode not in (0, 1):
                    raise SystemExit(f"cold_start: {label} exited {r.returncode}")
            loads.append(os.getloadavg()[0])
        med = {k: (statistics.median(wall[k]) * 1e3, statistics.median(cpu[k]) * 1e3)
               for k in wall}
        print(f"python -m selector {args}: {runs} runs of each tree, interleaved; load average "
              f"{min(loads):.2f}-{max(loads):.2f} during them")
        for label, (_, repo) in envs.items():
            w, c = med[label]
            print(f"  {label} {repo}: median {w:.0f} ms wall (min {min(wall[label]) * 1e3:.0f}, "
                  f"max {max(wall[label]) * 1e3:.0f}), CPU time median {c:.0f} ms")
        print(f"  new / old: wall {med['new'][0] / med['old'][0]:.2f}, CPU "
              f"{med['new'][1] / med['old'][1]:.2f}; the same output: "
              f"{'yes' if outputs['old'] == outputs['new'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
