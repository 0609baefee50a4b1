"""Probes that import one library: triton, torch's view of CUDA, and the generic
`import:<module>[:<attr>]` probe (run in a child process per library group)."""
from __future__ import annotations

import importlib
import os
from typing import Any, Dict, Optional

from ._util import describe_exc, dist_version, failed, ok


def _origin(mod: Any) -> str:
    path = getattr(mod, "__file__", None) or ""
    return os.path.dirname(path) if path.endswith("__init__.py") else path


def triton_importable(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    installed = dist_version("triton")
    try:
        triton = importlib.import_module("triton")
    except BaseException as exc:  # noqa: BLE001 - SystemExit from an import is a finding too
        return failed(f"triton {installed} is installed but `import triton` fails with "
                      f"{describe_exc(exc, 'triton', hint=False)}: kernels that import triton "
                      "(flashinfer's b12x MoE) are absent", installed=installed)
    version = getattr(triton, "__version__", None)
    details = {"installed": installed, "module_version": version, "path": _origin(triton)}
    if installed and version and str(version).split("+")[0] != installed.split("+")[0]:
        return failed(f"`import triton` loads version {version} from {_origin(triton)}, but the "
                      f"installed distribution is triton {installed}: a stale or shadowing copy "
                      "is first on sys.path", **details)
    if not callable(getattr(triton, "jit", None)):
        return failed(f"`import triton` works ({_origin(triton)}) but triton.jit is missing",
                      **details)
    return ok(f"import triton works (triton {version}, {_origin(triton)})", **details)


def torch_cuda(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    """torch's CUDA build and the GPU it sees, compared with what NVML saw (ctx['nvml'])."""
    try:
        torch = importlib.import_module("torch")
    except BaseException as exc:  # noqa: BLE001
        return failed(f"torch {dist_version('torch')} is installed but `import torch` fails "
                      f"with {describe_exc(exc, 'torch')}")
    build = getattr(getattr(torch, "version", None), "cuda", None)
    details: Dict[str, Any] = {"torch": str(torch.__version__), "cuda_build": build,
                               "available": False, "count": 0}
    try:
        available = bool(torch.cuda.is_available())
        details["available"] = available
        if available:
            details["count"] = int(torch.cuda.device_count())
            details["capability"] = list(torch.cuda.get_device_capability(0))
            details["name"] = str(torch.cuda.get_device_name(0))
    except Exception as exc:  # noqa: BLE001
        return failed(f"torch {torch.__version__} raised while querying CUDA: "
                      f"{describe_exc(exc, 'torch')}", **details)
    nvml = ctx.get("nvml") or {}
    seen = f"torch {torch.__version__} (CUDA build {build or 'none'})"
    if details["available"]:
        cap = details["capability"]
        text = (f"{seen} sees {details['count']} GPU(s); GPU 0 {details['name']}, SM "
                f"{cap[0]}.{cap[1]}")
        want = nvml.get("capability")
        if want and list(want) != cap:
            return failed(f"{text}, but NVML reports SM {want[0]}.{want[1]} for GPU 0: "
                          "CUDA_VISIBLE_DEVICES or the device order differs", **details)
        return ok(text, **details)
    if nvml.get("capability"):
        why = ("a CPU-only build of torch" if not build else
               "torch.cuda.is_available() is False (driver too old for the CUDA build, or no "
               "device visible)")
        return failed(f"{seen} cannot use the GPU NVML sees ({nvml.get('name') or 'GPU 0'}): "
                      f"{why}; kernel libraries built on torch cannot run", **details)
    return ok(f"{seen}; no GPU visible to torch (NVML sees none either)", **details)


def import_attr(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    """`import:<module>[:<attr>]`: the module imports and has the (dotted) attribute."""
    module, _, attr = (arg or "").partition(":")
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001
        return failed(f"import {module} failed: {describe_exc(exc, module.split('.')[0])}")
    if not attr:
        return ok(f"import {module} works ({_origin(mod)})")
    obj: Any = mod
    for i, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            got = ".".join([module] + attr.split(".")[:i])
            return failed(f"{got} has no attribute {part!r}")
        except BaseException as exc:  # noqa: BLE001
            return failed(f"getting {module}.{attr} raised {describe_exc(exc)}")
    kind = type(obj).__name__
    return ok(f"{module}.{attr} present ({kind})")


__all__ = ["triton_importable", "torch_cuda", "import_attr"]
