"""Helpers the tests import (`from helpers import load, run_cli, ...`).

- `load(*overrides)` is `selector.load` memoised per override list (a Selector is immutable).
- `run_cli(...)` runs `python -m selector` as a subprocess; `run_cli_many(...)` runs several at
  once (the machine has few cores and most of a CLI run is interpreter start-up and Hydra).
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# In-process API

@functools.cache
def _load(overrides: tuple, config_dirs: tuple):
    import selector
    return selector.load(list(overrides), config_dirs=list(config_dirs))


def load(*overrides: str, config_dirs: Sequence[os.PathLike] = ()):
    """`selector.load(list(overrides))`, memoised: presets never detect, so this is pure."""
    return _load(tuple(overrides), tuple(str(d) for d in config_dirs))


def warm(override_lists: Iterable[Sequence[str]], config_dirs: Sequence[os.PathLike] = (),
         helpers: int = 1) -> None:
    """Compose each override list into the session cache (bad ones are skipped).

    `helpers` extra processes compose part of the lists beside this one (composition is most
    of the cost of a scenario and the machine has more than one core); whatever this process
    loads itself is memoised by `load`. Purely an optimisation: a list that is not warmed is
    composed when a test loads it.
    """
    import json

    import selector
    todo: List[Tuple[str, ...]] = []
    for o in override_lists:
        t = tuple(o)
        if t not in todo:
            todo.append(t)
    procs = []
    dirs = [str(d) for d in config_dirs]
    if helpers > 0 and len(todo) > 4:
        parts = [todo[i::helpers + 1] for i in range(helpers + 1)]
        todo = parts[0]
        for part in parts[1:]:
            p = subprocess.Popen([sys.executable, "-c", _WARM], cwd=str(REPO), env=cli_env(),
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True)
            p.stdin.write(json.dumps({"lists": part, "dirs": dirs}))
            p.stdin.close()
            procs.append(p)
    for t in todo:
        try:
            load(*t, config_dirs=config_dirs)
        except selector.SelectorError:
            pass
    for p in procs:
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()


_WARM = """
import json, sys
import selector
job = json.load(sys.stdin)
for overrides in job["lists"]:
    try:
        selector.load(list(overrides), config_dirs=job["dirs"])
    except selector.SelectorError:
        pass
"""


# ---------------------------------------------------------------------------------------------
# The command line as a subprocess

@dataclass(frozen=True)
class CliResult:
    args: tuple
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self):
        import json
        return json.loads(self.stdout)


def child_env(*first: os.PathLike, **extra: str) -> Dict[str, str]:
    """This process's environment for a child Python, with `first` and the repository ahead
    of this process's whole import path (passed through PYTHONPATH: on a machine where the
    project and its dependencies are installed with `pip install --target`, sys.path is the
    only place they are named). A parent started with -P passes PYTHONSAFEPATH on, so that a
    checkout in the child's working directory cannot shadow the selector tested here."""
    import selector
    env = dict(os.environ)
    if getattr(sys.flags, "safe_path", False):  # -P (Python 3.11+)
        env["PYTHONSAFEPATH"] = "1"
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    here = str(Path(selector.__file__).resolve().parent.parent)  # the selector tested here
    paths = [str(p) for p in first] + [here] + inherited + \
        [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra)
    return env


def cli_env(*first: os.PathLike, **extra: str) -> Dict[str, str]:
    """`child_env` for a CLI run: `first` ahead of the import path, the session's cache."""
    env = child_env(*first)
    env.pop("SELECTOR_NO_CACHE", None)
    env.update(extra)
    return env


def run_cli(*args: str, env: Optional[Dict[str, str]] = None, timeout: float = 600) -> CliResult:
    """`python -m selector ARGS...` in the repository root; never raises on a non-zero exit.
    ``timeout`` is a hang guard, many times a run's expected time (a cold `matrix` composes every
    preset: about a minute alone on the 2-core machine, several under two suites at once)."""
    p = subprocess.run([sys.executable, "-m", "selector", *args], cwd=str(REPO),
                       capture_output=True, text=True, env=env or cli_env(), timeout=timeout)
    return CliResult(tuple(args), p.returncode, p.stdout, p.stderr)


def run_cli_many(argvs: Iterable[Sequence[str]], env: Optional[Dict[str, str]] = None,
                 workers: Optional[int] = None) -> List[CliResult]:
    """Several CLI runs concurrently, results in the order given."""
    argvs = [tuple(a) for a in argvs]
    workers = workers or max(2, min(4, (os.cpu_count() or 2) + 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda a: run_cli(*a, env=env), argvs))


def assert_clean_error(r: CliResult, *needles: str) -> str:
    """Exit code 2, one `selector: error:` message on stderr containing needles, no traceback."""
    assert r.returncode == 2, (r.args, r.returncode, r.stdout, r.stderr)
    err = r.stderr
    assert "Traceback" not in err, err
    assert "Traceback" not in r.stdout, r.stdout
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one message line, got: {err!r}"
    assert lines[0].startswith("selector: error: "), err
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


# ---------------------------------------------------------------------------------------------
# The CLI in-process

def run_main(argv: Sequence[str]) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of `selector.commands.cli.main(argv)` run in this process."""
    import contextlib
    import io

    from selector.commands.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def refused(argv: Sequence[str], *needles: str, never: Sequence[str] = ()) -> str:
    """Exit 2 with a message (one line, or check's list) containing every needle, without a
    traceback or any of `never` in the output."""
    rc, out, err = run_main(argv)
    assert rc == 2, (argv, rc, out, err)
    assert "Traceback" not in out + err
    for s in never:
        assert s not in out + err
    for n in needles:
        assert n in err, (n, err)
    return err


def cpu_row_wise_scaled_mm() -> bool:
    """Whether torch's CPU `_scaled_mm` takes row-wise scales (torch 2.13 does; 2.11 has
    per-tensor scales only)."""
    import torch
    a = torch.zeros(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16),
                         out_dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True
