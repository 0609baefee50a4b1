"""The probe child process: import the group's libraries (timed), run its probes, report.

Started by selector.inspect.probing as `python -c "...; from selector.inspect.probe_child import main; main()"`
with a JSON spec on stdin: {"path": [...], "steps": [["import", "torch"], ["probe", "name"],
...], "ctx": {...}}. Every step is reported as it starts and ends, one JSON line per event on
a private copy of the original stdout (prefixed by MARK); whatever the libraries print goes to
stderr. So when the process hangs or dies, the parent knows which step it was in.
"""
from __future__ import annotations

import faulthandler
import importlib
import importlib.metadata as md
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, NoReturn, Optional, TextIO, Tuple

# The protocol markers: selector.inspect.probing and selector.inspect.verify read the JSON after them.
MARK = "@@selector-probe@@ "
VERIFY_MARK = "@@selector-verify@@ "  # selector.backends.children.verify_child's reports


def _probe_dirs() -> Tuple[str, ...]:
    """The directories of the probe functions already imported (frames there are ours)."""
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                 for name, m in list(sys.modules.items())
                 if name.endswith(".probes") and m.__file__ is not None)


def dist_version(name: str) -> Optional[str]:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - malformed metadata reads as absent
        return None


def _short(path: str) -> str:
    """A file path relative to the sys.path entry that holds it (flashinfer/gemm/x.py)."""
    best = path
    for entry in sys.path:
        if entry and path.startswith(entry.rstrip(os.sep) + os.sep):
            rel = path[len(entry.rstrip(os.sep)) + 1:]
            if len(rel) < len(best):
                best = rel
    return best


def raised_at(exc: BaseException, prefer: Optional[str] = None) -> Optional[str]:
    """'flashinfer/x.py:12': the deepest frame of the traceback, outside importlib and the
    probes; with `prefer`, the deepest frame inside that package (None if it has none)."""
    skip = (os.path.dirname(importlib.__file__) + os.sep,  # the stdlib's importlib
            os.path.dirname(os.path.abspath(__file__)) + os.sep) + _probe_dirs()  # ours
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<frozen") and not f.filename.startswith(skip) and
              os.path.basename(f.filename) not in ("sitecustomize.py", "usercustomize.py")]
    if prefer:
        frames = [f for f in frames if f"{os.sep}{prefer}{os.sep}" in f.filename or
                  os.path.basename(f.filename) == f"{prefer}.py"]
    if not frames:
        return None
    f = frames[-1]
    return f"{_short(f.filename)}:{f.lineno}"


#: import names whose distribution is named otherwise (what `pip install` needs): the kernel
#: libraries' own imports (PyPI metadata: nvidia-cutlass-dsl's top-level `cutlass`, the cuDNN
#: frontend's `cudnn`, apache-tvm-ffi's `tvm_ffi`, cuda-tile's `cuda.tile`, sgl-kernel's `sgl_kernel`)
INSTALL_NAMES = {"cutlass": "nvidia-cutlass-dsl", "cudnn": "nvidia-cudnn-frontend",
                 "tvm_ffi": "apache-tvm-ffi", "flashinfer": "flashinfer-python",
                 "sgl_kernel": "sgl-kernel", "pynvml": "nvidia-ml-py",
                 "yaml": "PyYAML", "cuda": "cuda-python"}


def missing_module_hint(exc: BaseException) -> str:
    """For `No module named 'x'`: whether a distribution providing x is installed."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not name:
        return ""
    top = name.split(".")[0]
    try:
        dists = md.packages_distributions().get(top) or []
    except Exception:  # noqa: BLE001
        dists = []
    dists = sorted(set(dists))
    if not dists and dist_version(top) is not None:
        dists = [top]
    if dists:
        found = ", ".join(f"{d} {dist_version(d)}" for d in dists)
        return f"{found} is installed but `import {top}` fails"
    return f"no installed distribution provides `{top}`: pip install {INSTALL_NAMES.get(top, top)}"


def describe_exc(exc: BaseException, prefer: Optional[str] = None, hint: bool = True) -> str:
    """'ModuleNotFoundError: No module named 'triton' (at flashinfer/x.py:5; hint)'."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, SystemExit):
        text = f"sys.exit({exc.code!r}) was called"
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    extra = [p for p in (f"raised at {raised_at(exc, prefer)}" if raised_at(exc, prefer) else "",
                         missing_module_hint(exc) if hint else "") if p]
    if extra:
        out += f" ({'; '.join(extra)})"
    return out


def emit(out: TextIO, mark: str, **event: Any) -> None:
    """One protocol event: a JSON line after `mark` on the report channel."""
    out.write(mark + json.dumps(event, default=str) + "\n")
    out.flush()


def _emit(out: TextIO, **event: Any) -> None:
    emit(out, MARK, **event)


def open_channel(mark: str) -> Tuple[TextIO, Dict[str, Any]]:
    """The head of every selector child (probes, verify): (report channel, spec from stdin).

    The channel is a private copy of fd 1; fd 1 becomes stderr, so library prints cannot corrupt
    the report. The spec's "path" goes first on sys.path; the "start" event is sent."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()  # a crash leaves a Python traceback on stderr
    spec = json.loads(sys.stdin.read() or "{}")
    path = [p for p in spec.get("path") or [] if isinstance(p, str)]
    sys.path[:] = path + [p for p in sys.path if p not in path]
    emit(out, mark, event="start", pid=os.getpid(), python=sys.version.split()[0])
    return out, spec


def close_channel(out: TextIO, mark: str) -> NoReturn:
    """The tail: the "done" event, then exit without interpreter teardown (with torch and
    kernel libraries loaded it takes a second or more, and every result has been reported)."""
    emit(out, mark, event="done")
    out.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_import(out: TextIO, module: str) -> None:
    _emit(out, event="import", phase="start", library=module)
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a library too
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
        from selector.core.probe_specs import resolve
        spec = resolve(name)
        declared = (ctx.get("declared_probes") or {}).get(name)  # a backend file's own probe
        if spec is None and not (isinstance(declared, str) and
                                 declared.startswith("selector.backends.children.probes.")):
            raise LookupError(f"unknown probe {name!r}")
        mod_name, _, fn_name = (spec.func if spec is not None else str(declared)).partition(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        res = fn(spec.arg if spec is not None else None, ctx)
        if not isinstance(res, dict) or res.get("status") not in ("ok", "warning", "failed",
                                                                    "skipped"):
            raise TypeError(f"probe {name} returned {res!r}, not a result dict")
    except BaseException as exc:  # noqa: BLE001 - a probe that raises is a finding
        res = {"status": "failed", "message": f"the probe raised {describe_exc(exc)}",
               "details": {"exception": type(exc).__name__}}
    _emit(out, event="probe", phase="end", name=name, seconds=time.perf_counter() - t0, **res)


def main() -> None:
    out, spec = open_channel(MARK)
    ctx = spec.get("ctx") or {}
    for kind, arg in spec.get("steps") or []:
        if kind == "import":
            _run_import(out, arg)
        elif kind == "probe":
            _run_probe(out, arg, ctx)
    close_channel(out, MARK)
