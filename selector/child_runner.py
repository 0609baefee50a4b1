"""The parent side of selector's child processes (probes, verify): start one, feed it a JSON
spec, stop it at a time limit, and read back its report.

A kernel library can hang or kill the interpreter that imports it, so probes and verification run
in a child with this interpreter, this process's sys.path and a session of its own (a hang is
killed with everything it started). The child reports one JSON event per line after a marker
(selector.probe_child's protocol); anything else it prints is ignored.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

# (events, exit status (None: not started), timed out, stderr)
ChildOutcome = Tuple[List[Dict[str, Any]], Optional[int], bool, str]


def parent_path() -> List[str]:
    """This process's sys.path, absolute and without repeats: the child's import path."""
    return list(dict.fromkeys(os.path.abspath(p) if p else os.getcwd() for p in sys.path))


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started (its own session/process group, by id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError, AttributeError):  # no killpg: Windows
        try:
            proc.kill()
        except OSError:
            pass


def exit_text(rc: Optional[int], timed_out: bool, timeout: float, what: str) -> str:
    """How the `what` ("probe", "verify") process ended, for a finding."""
    if timed_out:
        return f"timed out after {timeout:g} s (the {what} process was killed)"
    if rc is None:
        return f"the {what} process could not be started"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"the {what} process was killed by {name} (exit status {rc})"
    return f"the {what} process exited with status {rc}"


def last_line(text: str, limit: int = 300) -> str:
    """The line of stderr that says what went wrong, shortened to `limit` characters."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    # a faulthandler dump names the crash first ("Fatal Python error: Segmentation fault")
    fatal = [ln for ln in lines if ln.startswith("Fatal Python error")]
    last = fatal[0] if fatal else lines[-1]
    return last if len(last) <= limit else last[:limit] + "..."


def run_child(boot: str, payload: Mapping[str, Any], timeout: float, mark: str) -> ChildOutcome:
    """Run `python -c boot` with `payload` (plus "path": this sys.path) as JSON on stdin; the
    events are the JSON objects after `mark` on its stdout lines."""
    env = dict(os.environ)  # the child gets sys.path in its payload
    env.setdefault("PYTHONFAULTHANDLER", "1")
    try:
        proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
    except OSError as exc:
        return [], None, False, f"{sys.executable}: {exc}"
    timed_out = False
    data = json.dumps(dict(payload, path=parent_path())).encode()
    try:
        out, err = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill(proc)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a grandchild holds the pipes open
            out, err = b"", b""
    events: List[Dict[str, Any]] = []
    for line in out.decode("utf-8", "replace").splitlines():
        at = line.find(mark)
        if at < 0:
            continue
        try:
            events.append(json.loads(line[at + len(mark):]))
        except ValueError:
            continue
    return events, proc.returncode, timed_out, err.decode("utf-8", "replace")
