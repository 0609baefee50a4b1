"""Small helpers the probe functions share: results, symbol look-ups, exception descriptions.

Nothing here imports a kernel library; the probe modules import them inside their functions.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

from selector.inspect.probe_child import describe_exc, dist_version, missing_module_hint, raised_at

__all__ = ["describe_exc", "dist_version", "missing_module_hint", "raised_at", "find_symbol",
           "ok", "warning", "failed", "skipped", "result"]


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
