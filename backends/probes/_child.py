"""The probe child process: import the group's libraries (timed), run its probes, report.

Started by selector.probing as `python -c "...; from backends.probes._child import main; main()"`
with a JSON spec on stdin: {"path": [...], "steps": [["import", "torch"], ["probe", "name"],
...], "ctx": {...}}. Every step is reported as it starts and ends, one JSON line per event on
a private copy of the original stdout (prefixed by MARK); whatever the libraries print goes to
stderr. So when the process hangs or dies, the parent knows which step it was in.
"""
from __future__ import annotations

import faulthandler
import importlib
import json
import os
import sys
import time
from typing import Any, Dict, TextIO

MARK = "@@selector-probe@@ "


def _emit(out: TextIO, **event: Any) -> None:
    out.write(MARK + json.dumps(event, default=str) + "\n")
    out.flush()


def _run_import(out: TextIO, module: str) -> None:
    _emit(out, event="import", phase="start", library=module)
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a library too
        from ._util import describe_exc
        _emit(out, event="import", phase="end", library=module, ok=False,
              seconds=time.perf_counter() - t0, error=describe_exc(exc, module.split(".")[0]))
        return
    _emit(out, event="import", phase="end", library=module, ok=True,
          seconds=time.perf_counter() - t0, version=getattr(mod, "__version__", None),
          path=getattr(mod, "__file__", None))


def _run_probe(out: TextIO, name: str, ctx: Dict[str, Any]) -> None:
    _emit(out, event="probe", phase="start", name=name)
    t0 = time.perf_counter()
    try:
        from . import resolve
        from ._util import describe_exc
        spec = resolve(name)
        if spec is None:
            raise LookupError(f"unknown probe {name!r}")
        mod_name, _, fn_name = spec.func.partition(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        res = fn(spec.arg, ctx)
        if not isinstance(res, dict) or res.get("status") not in ("ok", "warning", "failed",
                                                                    "skipped"):
            raise TypeError(f"probe {name} returned {res!r}, not a result dict")
    except BaseException as exc:  # noqa: BLE001 - a probe that raises is a finding
        from ._util import describe_exc
        res = {"status": "failed", "message": f"the probe raised {describe_exc(exc)}",
               "details": {"exception": type(exc).__name__}}
    _emit(out, event="probe", phase="end", name=name, seconds=time.perf_counter() - t0, **res)


def main() -> None:
    # A private channel for the report; fd 1 becomes stderr, so library prints cannot corrupt it.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()  # a crash leaves a Python traceback on stderr
    spec = json.loads(sys.stdin.read() or "{}")
    path = [p for p in spec.get("path") or [] if isinstance(p, str)]
    sys.path[:] = path + [p for p in sys.path if p not in path]
    _emit(out, event="start", pid=os.getpid(), python=sys.version.split()[0])
    ctx = spec.get("ctx") or {}
    for kind, arg in spec.get("steps") or []:
        if kind == "import":
            _run_import(out, arg)
        elif kind == "probe":
            _run_probe(out, arg, ctx)
    _emit(out, event="done")
    out.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: with torch and flashinfer loaded it takes a second or more,
    # and every result has been reported.
    os._exit(0)
