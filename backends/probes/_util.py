"""Small helpers the probe functions share: results, symbol look-ups, exception descriptions.

Nothing here imports a kernel library; the probe modules import them inside their functions.
"""
from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import sys
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple


def result(status: str, message: str, **details: Any) -> Dict[str, Any]:
    return {"status": status, "message": message, "details": details}


def ok(message: str, **details: Any) -> Dict[str, Any]:
    return result("ok", message, **details)


def warning(message: str, **details: Any) -> Dict[str, Any]:
    return result("warning", message, **details)


def failed(message: str, **details: Any) -> Dict[str, Any]:
    return result("failed", message, **details)


def skipped(message: str, **details: Any) -> Dict[str, Any]:
    return result("skipped", message, **details)


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
            os.path.dirname(os.path.abspath(__file__)) + os.sep)  # the probes themselves
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
    return f"no installed distribution provides `{top}`: pip install {top}"


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


def find_symbol(candidates: Sequence[Tuple[str, str]]
                ) -> Tuple[Any, Optional[str], List[Tuple[str, BaseException]]]:
    """The first (module, attribute) that imports and has the attribute.

    Returns (object, "module.attr" where found, [(module, import error) for modules that
    failed to import]); (None, None, errors) when no candidate has it.
    """
    errors: List[Tuple[str, BaseException]] = []
    for mod_name, attr in candidates:
        # Import every parent package first: when a package's __init__ fails half-way, the
        # submodules it had finished stay in sys.modules, and import_module would hand back
        # such a stale module although no fresh `from pkg.sub import x` could succeed.
        parts = mod_name.split(".")
        mod = None
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            try:
                mod = importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any import failure is a finding
                if not any(e[0] == name for e in errors):
                    errors.append((name, exc))
                mod = None
                break
        if mod is None:
            continue
        try:
            obj = getattr(mod, attr)
        except AttributeError:
            continue
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ that raises
            errors.append((f"{mod_name}.{attr}", exc))
            continue
        if obj is not None:
            return obj, f"{mod_name}.{attr}", errors
    return None, None, errors


def why_absent(candidates: Sequence[Tuple[str, str]],
               errors: List[Tuple[str, BaseException]], prefer: Optional[str] = None) -> str:
    """Why find_symbol found nothing: the first import error, else where it looked."""
    if errors:
        mod, exc = errors[0]
        return f"importing {mod} fails with {describe_exc(exc, prefer)}"
    return f"not found in {', '.join(dict.fromkeys(m for m, _ in candidates))}"


def absent_message(what: str, candidates: Sequence[Tuple[str, str]],
                   errors: List[Tuple[str, BaseException]], prefer: Optional[str] = None) -> str:
    return f"{what} is absent: {why_absent(candidates, errors, prefer)}"


def module_version(mod: Any) -> Optional[str]:
    v = getattr(mod, "__version__", None)
    return str(v) if v is not None else None
