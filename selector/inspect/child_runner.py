"""The parent side of selector's child processes (probes, verify): start one, feed it a JSON
spec, stop it at a time limit, and read back its report.

A kernel library can hang or kill the interpreter that imports it, so probes and verification run
in a child with this interpreter, this process's sys.path and a session of its own (a hang is
killed with everything it started). The child reports one JSON event per line after a marker
(selector.inspect.probe_child's protocol); anything else it prints is ignored.
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


MAX_OUTPUT = 8 << 20  # bytes kept of each of a child's stdout and stderr
TRUNCATED = "selector: output truncated:"  # the line run_child adds to stderr when it cut one


def truncated(stderr: str) -> bool:
    """Whether run_child stopped a child for writing more than MAX_OUTPUT bytes."""
    return TRUNCATED in stderr


def run_child(boot: str, payload: Mapping[str, Any], timeout: float, mark: str) -> ChildOutcome:
    """Run `python -c boot` with `payload` (plus "path": this sys.path) as JSON on stdin; the
    events are the JSON objects after `mark` on its stdout lines. At most MAX_OUTPUT bytes of
    each stream are kept: a child that writes more is killed (with everything it started), and
    its stderr ends with a TRUNCATED line saying so (its result is a failure, not a verdict)."""
    env = dict(os.environ)  # the child gets sys.path in its payload
    env.setdefault("PYTHONFAULTHANDLER", "1")
    try:
        proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
    except OSError as exc:
        return [], None, False, f"{sys.executable}: {exc}"
    data = json.dumps(dict(payload, path=parent_path())).encode()
    out, err, timed_out, over = _communicate(proc, data, timeout)
    events: List[Dict[str, Any]] = []
    for line in out.decode("utf-8", "replace").splitlines():
        at = line.find(mark)
        if at < 0:
            continue
        try:
            events.append(json.loads(line[at + len(mark):]))
        except ValueError:
            continue
    text = err.decode("utf-8", "replace")
    if over:
        text += (f"\n{TRUNCATED} the child process wrote more than {MAX_OUTPUT >> 20} MiB to "
                 f"{' and '.join(over)}; it was stopped and only the first {MAX_OUTPUT >> 20} "
                 "MiB were read\n")
    return events, proc.returncode, timed_out, text


def _communicate(proc: subprocess.Popen[bytes], data: bytes, timeout: float
                 ) -> Tuple[bytes, bytes, bool, List[str]]:
    """(stdout, stderr, timed out, the streams that went over MAX_OUTPUT): the payload written
    and both streams read at once, never more than MAX_OUTPUT bytes of each kept."""
    import selectors
    import time
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    ofd, efd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs: Dict[int, bytearray] = {ofd: bytearray(), efd: bytearray()}
    names = {ofd: "stdout", efd: "stderr"}
    over: List[str] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(left, 1.0)):
                if key.fileobj is proc.stdin:
                    try:
                        n = os.write(key.fd, view[:1 << 16])
                    except BlockingIOError:
                        continue
                    except OSError:  # the child closed its stdin
                        n = len(view)
                    view = view[n:]
                    if not view:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.fd]
                if len(buf) + len(chunk) > MAX_OUTPUT:
                    over.append(names[key.fd])
                buf += chunk[:MAX_OUTPUT - len(buf)]
            if over:
                break
    _finish(proc, stop=timed_out or bool(over))
    return bytes(bufs[ofd]), bytes(bufs[efd]), timed_out, over


def _finish(proc: subprocess.Popen[bytes], stop: bool) -> None:
    """The child stopped (`stop`: killed with its process group), its pipes closed and the
    child reaped."""
    if stop:
        kill(proc)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()  # type: ignore[union-attr]
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # unkillable (D state): leave it to the system
        pass
