"""Ask NVML about GPU 0, in a child process of its own (run as a script by environment.py).

NVML is a C library: a broken driver can crash (SIGSEGV, abort) or hang inside it, so selector
never calls it in-process. This file imports only the standard library (and pynvml when
installed), prints one JSON line of raw answers, and leaves every judgement to the parent:
what a call returned, and which calls failed with which return code or error.
"""
from __future__ import annotations

import ctypes
import json
from typing import Any, Callable, Dict, List, Optional

NVML_LIBRARY = "libnvidia-ml.so.1"
CUDA_LIBRARY = "libcuda.so.1"


def plain(v: Any) -> Any:
    """A value as JSON can carry it; bytes as hex, anything unexpected as its repr."""
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    try:
        return {"repr": repr(v)[:200]}
    except Exception:  # noqa: BLE001
        return {"repr": type(v).__name__}


def query_pynvml() -> Optional[Dict[str, Any]]:
    """Raw answers through pynvml (nvidia-ml-py); None when the binding or library is absent."""
    try:
        import pynvml
    except BaseException:  # noqa: BLE001 - a broken binding (even sys.exit) is not usable
        return None
    try:
        pynvml.nvmlInit()
    except BaseException as exc:  # noqa: BLE001
        if "LibraryNotFound" in type(exc).__name__:
            return None
        return {"via": "pynvml", "init_error": f"{type(exc).__name__}: {exc}"[:300]}
    out: Dict[str, Any] = {"via": "pynvml", "failed": []}
    try:
        def call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
            try:
                return fn(*args)
            except Exception as exc:  # noqa: BLE001
                out["failed"].append(f"{name}: {exc}"[:300])
                return None
        out["count"] = plain(call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))
        out["driver"] = plain(call("nvmlSystemGetDriverVersion",
                                   pynvml.nvmlSystemGetDriverVersion))
        out["cuda_driver"] = plain(call("nvmlSystemGetCudaDriverVersion",
                                        pynvml.nvmlSystemGetCudaDriverVersion))
        if isinstance(out["count"], int) and out["count"] > 0 and not out["failed"]:
            h = call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, 0)
            if h is not None:
                out["capability"] = plain(call("nvmlDeviceGetCudaComputeCapability",
                                               pynvml.nvmlDeviceGetCudaComputeCapability, h))
                out["name"] = plain(call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, h))
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return out


def query_ctypes(lib: Any) -> Dict[str, Any]:
    """Raw answers from libnvidia-ml itself; every call's return code is checked."""
    out: Dict[str, Any] = {"via": "libnvidia-ml", "failed": []}
    failed: List[str] = out["failed"]

    def ok(name: str, rc: Any) -> bool:
        if rc != 0:
            failed.append(f"{name} returned {rc!r}")
        return bool(rc == 0)
    try:
        if not ok("nvmlInit_v2", lib.nvmlInit_v2()):
            out["init_error"] = failed.pop()
            return out
    except Exception as exc:  # noqa: BLE001 - ctypes.ArgumentError, a missing symbol, ...
        out["init_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return out
    try:
        count = ctypes.c_uint(0)
        if ok("nvmlDeviceGetCount_v2", lib.nvmlDeviceGetCount_v2(ctypes.byref(count))):
            out["count"] = count.value
        buf = ctypes.create_string_buffer(96)
        if ok("nvmlSystemGetDriverVersion", lib.nvmlSystemGetDriverVersion(buf, 96)):
            out["driver"] = plain(buf.value)
        dcuda = ctypes.c_int(0)
        if ok("nvmlSystemGetCudaDriverVersion",
              lib.nvmlSystemGetCudaDriverVersion(ctypes.byref(dcuda))):
            out["cuda_driver"] = dcuda.value
        if out.get("count", 0) > 0:
            h = ctypes.c_void_p()
            if ok("nvmlDeviceGetHandleByIndex_v2",
                  lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))):
                major, minor = ctypes.c_int(0), ctypes.c_int(0)
                if ok("nvmlDeviceGetCudaComputeCapability",
                      lib.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(major),
                                                             ctypes.byref(minor))):
                    out["capability"] = [major.value, minor.value]
                name = ctypes.create_string_buffer(96)
                if ok("nvmlDeviceGetName", lib.nvmlDeviceGetName(h, name, 96)):
                    out["name"] = plain(name.value)
    except Exception as exc:  # noqa: BLE001
        failed.append(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return out


def query(nvml_library: str = NVML_LIBRARY, cuda_library: str = CUDA_LIBRARY) -> Dict[str, Any]:
    """pynvml, else libnvidia-ml, else whether a CUDA driver (libcuda) is there at all. The
    parent passes the libraries as this script's arguments (SELECTOR_NVML_LIBRARY and
    SELECTOR_CUDA_LIBRARY, parsed there by selector/core/env_vars.py)."""
    found = query_pynvml()
    if found is not None:
        return found
    try:
        lib = ctypes.CDLL(nvml_library)
    except OSError:
        lib = None
    if lib is not None:
        return query_ctypes(lib)
    try:
        ctypes.CDLL(cuda_library)
        return {"via": None, "driver_present": True}
    except OSError:
        return {"via": None, "driver_present": False}


if __name__ == "__main__":
    import sys
    print("\n" + json.dumps(query(*sys.argv[1:3])))
