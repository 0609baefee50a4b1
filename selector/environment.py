"""Detect this machine: GPU and driver through NVML, the CUDA runtime and package versions
through distribution metadata. Nothing here imports torch or a kernel library in-process.

NVML answers in about a millisecond (FACTS.md, detection on the lent H200) where `import torch`
takes 3-6 s, so it comes first. torch is asked only when NVML is unusable yet a driver is
present, and then in a child process with a time limit, since a broken torch can hang or crash.
"""
from __future__ import annotations

import ctypes
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

_CU_LABEL = re.compile(r"^cu(\d{2,3})$")
_RUNTIME_DISTS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                  "nvidia-cuda-runtime-cu11")
TORCH_TIMEOUT_S = float(os.environ.get("SELECTOR_TORCH_PROBE_TIMEOUT", "60"))
NVML_TIMEOUT_S = float(os.environ.get("SELECTOR_NVML_TIMEOUT", "10"))


@dataclass
class Gpu:
    name: Optional[str] = None
    capability: Optional[Tuple[int, int]] = None
    driver: Optional[str] = None
    driver_cuda: Optional[Version] = None
    count: int = 0
    method: str = "none"
    notes: List[str] = field(default_factory=list)


@dataclass
class Environment:
    capability: Optional[Tuple[int, int]]
    gpu_name: Optional[str]
    cuda: Optional[Version]
    packages: Dict[str, Optional[Version]]
    gpu: Gpu
    cuda_method: str
    notes: Tuple[str, ...]


def detect(packages: Iterable[str]) -> Environment:
    pkgs = installed_versions(packages)
    notes: List[str] = []
    for name, v in pkgs.items():
        missing = None if v is None else half_installed(name)
        if missing:  # importing it would fail: a backend that needs it cannot run
            pkgs[name] = None
            notes.append(f"{name} {v} is half-installed: its metadata is present but {missing} "
                         "is missing, so it counts as not installed; reinstall it (pip install "
                         f"--force-reinstall '{name}=={v}')")
    gpu = detect_gpu()
    notes.extend(gpu.notes)
    cuda, method = cuda_runtime(pkgs)
    if cuda is None and gpu.driver_cuda is not None:
        cuda, method = gpu.driver_cuda, "driver (no CUDA runtime package found)"
    elif cuda is not None and gpu.driver_cuda is not None and \
            Version(f"{cuda.major}.{cuda.minor}") > gpu.driver_cuda:
        notes.append(f"the CUDA runtime {cuda} is newer than the driver supports "
                     f"({gpu.driver_cuda}): kernels built for it will not load")
    notes.append(f"GPU: {gpu.method}; CUDA: {method}; packages: importlib.metadata")
    return Environment(gpu.capability, gpu.name, cuda, pkgs, gpu, method, tuple(notes))


def installed_versions(names: Iterable[str]) -> Dict[str, Optional[Version]]:
    """Distribution versions from metadata alone; a malformed version counts as absent."""
    out: Dict[str, Optional[Version]] = {}
    for n in names:
        name = canonicalize_name(n)
        try:
            out[name] = Version(md.version(name))
        except md.PackageNotFoundError:
            out[name] = None
        except (InvalidVersion, TypeError, OSError, ValueError):
            out[name] = None
    return out


def half_installed(name: str) -> Optional[str]:
    """A file of the distribution's top-level package(s) that its RECORD lists but that is
    missing (metadata left behind by an interrupted install or a manual removal), or None."""
    try:
        dist = md.distribution(name)
        text = dist.read_text("RECORD") or ""
    except Exception:  # noqa: BLE001 - unreadable metadata is installed_versions' business
        return None
    found: List[str] = []
    i = text.find("/__init__.py,")
    while i != -1 and len(found) < 3:  # top-level packages: 'pkg/__init__.py' (one slash)
        start = text.rfind("\n", 0, i) + 1
        if "/" not in text[start:i] and not text[start:i].startswith("."):
            found.append(text[start:i] + "/__init__.py")
        i = text.find("/__init__.py,", i + 1)
    for rel in found:
        try:
            if not Path(str(dist.locate_file(rel))).exists():
                return rel
        except (OSError, ValueError, TypeError):
            return None
    return None


def cuda_runtime(pkgs: Dict[str, Optional[Version]]) -> Tuple[Optional[Version], str]:
    """The CUDA runtime: torch's build label (2.11.0+cu130 = 13.0), else a runtime wheel."""
    torch_v = pkgs.get("torch")
    if torch_v is None:
        torch_v = installed_versions(["torch"]).get("torch")
    if torch_v is not None and torch_v.local:
        m = _CU_LABEL.match(torch_v.local)
        if m:
            digits = m.group(1)
            return Version(f"{digits[:-1]}.{digits[-1]}"), f"torch build label +{torch_v.local}"
    if torch_v is not None:
        found = _torch_version_file()
        if found is not None:
            return found
    for dist in _RUNTIME_DISTS:
        v = installed_versions([dist]).get(canonicalize_name(dist))
        if v is not None:
            return Version(f"{v.major}.{v.minor}"), f"{dist} {v}"
    return None, "none found (no CUDA build of torch, no nvidia-cuda-runtime wheel)"


_TORCH_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+\.\d+)['\"]", re.M)


def _torch_version_file() -> Optional[Tuple[Version, str]]:
    """torch/version.py read as text, not imported: `cuda = '13.0'` in a CUDA build.

    Some installs record the version without its +cuXYZ label in the metadata (seen on the lent
    H200: metadata 2.11.0, torch.__version__ 2.11.0+cu130), so the label alone is not enough.
    """
    try:
        path = md.distribution("torch").locate_file("torch/version.py")
        m = _TORCH_CUDA_LINE.search(Path(str(path)).read_text())
    except (md.PackageNotFoundError, OSError, ValueError, TypeError):
        return None
    return (Version(m.group(1)), "torch/version.py (read, not imported)") if m else None


def detect_gpu() -> Gpu:
    """GPU 0 through NVML (pynvml, else the driver's libnvidia-ml directly), else torch."""
    gpu = _bounded(_nvml_pynvml, "nvml (pynvml)")
    if gpu is not None:
        return gpu
    gpu = _bounded(_nvml_ctypes, "nvml (libnvidia-ml)")
    if gpu is not None:
        return gpu
    if _driver_present():
        return _torch_child()
    return Gpu(method="none: no NVIDIA driver (libnvidia-ml and libcuda not loadable)")


def _bounded(fn: Callable[[], Optional[Gpu]], what: str) -> Optional[Gpu]:
    """fn() in a daemon thread with NVML_TIMEOUT_S: a hung driver call (or a binding that hangs
    on import) must not hang the caller. A binding that raises anything is unusable: None."""
    box: Dict[str, Optional[Gpu]] = {}

    def run() -> None:
        try:
            box["gpu"] = fn()
        except BaseException:  # noqa: BLE001 - even SystemExit from a broken binding
            box["gpu"] = None
    t = threading.Thread(target=run, name=f"selector {what}", daemon=True)
    t.start()
    t.join(NVML_TIMEOUT_S)
    if t.is_alive():
        return Gpu(method=what, notes=[f"{what} did not answer within {NVML_TIMEOUT_S:g} s "
                                       "(a hung driver?): no GPU detected"])
    return box.get("gpu")


def _nvml_pynvml() -> Optional[Gpu]:
    try:
        import pynvml  # nvidia-ml-py
    except Exception:  # noqa: BLE001 - a broken binding is simply not usable
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        return None if "LibraryNotFound" in type(exc).__name__ or "not found" in str(exc).lower() \
            else Gpu(method="nvml", notes=[f"NVML failed to initialise: {exc}"])
    try:
        count = pynvml.nvmlDeviceGetCount()
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        dcuda = pynvml.nvmlSystemGetCudaDriverVersion()
        if count == 0:
            return Gpu(driver=driver, driver_cuda=_cuda_int(dcuda), method="nvml (pynvml)",
                       notes=["NVML sees a driver but no GPU"])
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        return Gpu(_text(pynvml.nvmlDeviceGetName(h)), (int(major), int(minor)), driver,
                   _cuda_int(dcuda), count, "nvml (pynvml)", _count_note(count))
    except Exception as exc:  # noqa: BLE001
        return Gpu(method="nvml (pynvml)", notes=[f"NVML query failed: {exc}"])
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _nvml_ctypes() -> Optional[Gpu]:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            return Gpu(method="nvml (libnvidia-ml)", notes=["NVML failed to initialise"])
        count = ctypes.c_uint(0)
        lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        buf = ctypes.create_string_buffer(96)
        lib.nvmlSystemGetDriverVersion(buf, 96)
        driver = buf.value.decode()
        dcuda = ctypes.c_int(0)
        lib.nvmlSystemGetCudaDriverVersion(ctypes.byref(dcuda))
        if count.value == 0:
            return Gpu(driver=driver, driver_cuda=_cuda_int(dcuda.value),
                       method="nvml (libnvidia-ml)", notes=["NVML sees a driver but no GPU"])
        h = ctypes.c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(major), ctypes.byref(minor))
        lib.nvmlDeviceGetName(h, buf, 96)
        return Gpu(buf.value.decode(), (major.value, minor.value), driver,
                   _cuda_int(dcuda.value), count.value, "nvml (libnvidia-ml)",
                   _count_note(count.value))
    except Exception as exc:  # noqa: BLE001 - ctypes.ArgumentError, a bad decode, ...
        return Gpu(method="nvml (libnvidia-ml)", notes=[f"NVML query failed: {exc}"])
    finally:
        try:
            lib.nvmlShutdown()
        except (OSError, AttributeError):
            pass


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


_TORCH_SNIPPET = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "out = {'count': torch.cuda.device_count() if ok else 0, 'cuda': torch.version.cuda}\n"
    "if ok:\n"
    "    out['capability'] = list(torch.cuda.get_device_capability(0))\n"
    "    out['name'] = torch.cuda.get_device_name(0)\n"
    "print(json.dumps(out))\n")


def _torch_child() -> Gpu:
    try:
        r = subprocess.run([sys.executable, "-c", _TORCH_SNIPPET], capture_output=True,
                           text=True, timeout=TORCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Gpu(method="torch", notes=[f"torch did not answer within {TORCH_TIMEOUT_S:.0f} s"])
    except OSError as exc:
        return Gpu(method="torch", notes=[f"could not run torch: {exc}"])
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return Gpu(method="torch", notes=[f"torch failed: {last}"])
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Gpu(method="torch", notes=["torch printed no answer"])
    cap = out.get("capability") if isinstance(out, dict) else None
    if not isinstance(out, dict) or (cap is not None and not (
            isinstance(cap, list) and len(cap) == 2 and
            all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 100 for x in cap))):
        return Gpu(method="torch", notes=[f"torch gave a malformed answer: {str(out)[:200]}"])
    name, count = out.get("name"), out.get("count", 0)
    return Gpu(name if isinstance(name, str) else None, tuple(cap) if cap else None, None, None,
               count if isinstance(count, int) and not isinstance(count, bool) else 0,
               "torch (in a child process; NVML unavailable)")


def _cuda_int(v: int) -> Optional[Version]:
    return Version(f"{v // 1000}.{(v % 1000) // 10}") if v and v > 0 else None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _count_note(count: int) -> List[str]:
    return [f"{count} GPUs; deciding for GPU 0"] if count > 1 else []
