"""The parent side of selector's child processes, in-process: how an ending is worded, which
stderr line is shown, how output beyond the limit is cut (tests/test_faults.py runs real
children that crash, hang and flood)."""
import os
import signal
import sys
import time

import pytest

from selector.inspect import child_runner as cr


@pytest.mark.parametrize("rc, timed_out, want", [
    (None, True, "timed out after 2.5 s (the probe process was killed)"),
    (0, True, "timed out after 2.5 s (the probe process was killed)"),
    (None, False, "the probe process could not be started"),
    (-int(signal.SIGSEGV), False, "the probe process was killed by SIGSEGV (exit status -11)"),
    (-int(signal.SIGKILL), False, "the probe process was killed by SIGKILL (exit status -9)"),
    (-200, False, "the probe process was killed by signal 200 (exit status -200)"),
    (0, False, "the probe process exited with status 0"),
    (1, False, "the probe process exited with status 1"),
])
def test_exit_text(rc, timed_out, want):
    assert cr.exit_text(rc, timed_out, 2.5, "probe") == want


def test_last_line_prefers_a_fatal_error_and_cuts_at_the_limit():
    assert cr.last_line("") == "" and cr.last_line("\n  \n") == ""
    assert cr.last_line("first\n  second  \n\n") == "second"
    dump = ("Fatal Python error: Segmentation fault\n\nCurrent thread:\n  File x\n"
            "Fatal Python error: Aborted\nlast words\n")
    assert cr.last_line(dump) == "Fatal Python error: Segmentation fault"
    assert cr.last_line("a" * 300) == "a" * 300  # at the limit: whole
    assert cr.last_line("a" * 301) == "a" * 300 + "..."
    assert cr.last_line("abcdef", limit=3) == "abc..."
    assert cr.last_line("abc", limit=3) == "abc"


def test_run_child_reads_events_after_the_mark_and_keeps_stderr():
    boot = ("import json, sys\nspec = json.loads(sys.stdin.read())\n"
            "print('noise'); print('xx@@' + json.dumps({'got': spec['k'], 'path': "
            "spec['path'] == list(dict.fromkeys(spec['path']))}))\n"
            "print('@@{not json'); print('@@' + json.dumps([1]))\n"
            "sys.stderr.write('warned\\n'); sys.exit(3)\n")
    events, rc, timed_out, err = cr.run_child(boot, {"k": 7}, 60.0, "@@")
    assert events == [{"got": 7, "path": True}, [1]]
    assert (rc, timed_out) == (3, False) and err.strip() == "warned"
    assert not cr.truncated(err)


def test_run_child_stops_a_hang_and_a_flood(monkeypatch):
    events, rc, timed_out, err = cr.run_child("import time\ntime.sleep(60)\n", {}, 0.5, "@@")
    assert timed_out and events == [] and rc is not None and rc < 0
    monkeypatch.setattr(cr, "MAX_OUTPUT", 1 << 20)
    flood = "import sys\nsys.stdout.write('@@' + 'x' * (3 << 20))\nsys.stdout.flush()\n"
    events, rc, timed_out, err = cr.run_child(flood, {}, 60.0, "@@")
    assert cr.truncated(err) and "more than 1 MiB to stdout" in err and events == []
    assert "only the first 1 MiB were read" in err


def test_run_child_that_cannot_start(monkeypatch):
    monkeypatch.setattr(cr.sys, "executable", "/nonexistent/python")
    events, rc, timed_out, err = cr.run_child("pass", {}, 5.0, "@@")
    assert (events, rc, timed_out) == ([], None, False)
    assert err.startswith("/nonexistent/python: ")


def test_parent_path_is_absolute_and_without_repeats(monkeypatch):
    monkeypatch.setattr(cr.sys, "path", ["", "rel", "/abs", "rel", "/abs"])
    got = cr.parent_path()
    assert got[0] == cr.os.getcwd() and len(got) == len(set(got)) == 3
    assert all(p.startswith("/") for p in got)


def test_the_child_gets_this_interpreter():
    events, rc, _, _ = cr.run_child("import sys, json\nprint('@@' + json.dumps(sys.executable))",
                                    {}, 60.0, "@@")
    assert events == [sys.executable] and rc == 0


def test_output_of_exactly_the_limit_is_kept_whole(monkeypatch):
    monkeypatch.setattr(cr, "MAX_OUTPUT", 1 << 20)
    body = "x" * ((1 << 20) - 4)  # '@@' + two quotes: exactly MAX_OUTPUT bytes
    boot = f"import sys\nsys.stdout.write('@@\"' + 'x' * {len(body)} + '\"')\n"
    events, rc, timed_out, err = cr.run_child(boot, {}, 60.0, "@@")
    assert events == [body] and rc == 0 and not cr.truncated(err)



def test_a_timed_out_child_is_killed_with_what_it_started(tmp_path):
    """The child runs in a session of its own: on a time limit its whole process group goes,
    grandchildren included (a kernel library's helper process must not outlive the probe)."""
    pidfile = tmp_path / "grandchild.pid"
    boot = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)\n")
    _, rc, timed_out, _ = cr.run_child(boot, {}, 3.0, "@@")
    assert timed_out and rc is not None and rc < 0
    pid = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once killed: gone from the process table
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if _zombie(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the grandchild outlived the timed-out child")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_a_large_payload_and_a_large_output_do_not_deadlock():
    """The payload is written without blocking while the child's output is read: a child that
    answers each 4 KiB of its 1 MiB input with 16 KiB of output finishes (a blocking write of
    the payload would wait for the child, which waits for its full stdout to be read)."""
    boot = ("import sys\nn = 0\n"
            "while True:\n"
            "    chunk = sys.stdin.buffer.read(4096)\n"
            "    if not chunk:\n        break\n"
            "    n += len(chunk)\n"
            "    sys.stdout.write('x' * 16384 + '\\n')\n    sys.stdout.flush()\n"
            "print('@@' + str(n))\n")
    events, rc, timed_out, err = cr.run_child(boot, {"blob": "y" * (1 << 20)}, 20.0, "@@")
    assert not timed_out and rc == 0 and events and events[0] > 1 << 20, err[-300:]
