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
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

_CU_LABEL = re.compile(r"^cu(\d{2,3})$")
_RUNTIME_DISTS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                  "nvidia-cuda-runtime-cu11")
TORCH_TIMEOUT_S = float(os.environ.get("SELECTOR_TORCH_PROBE_TIMEOUT", "60"))


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
    for dist in _RUNTIME_DISTS:
        v = installed_versions([dist]).get(canonicalize_name(dist))
        if v is not None:
            return Version(f"{v.major}.{v.minor}"), f"{dist} {v}"
    return None, "none found (no CUDA build of torch, no nvidia-cuda-runtime wheel)"


def detect_gpu() -> Gpu:
    """GPU 0 through NVML (pynvml, else the driver's libnvidia-ml directly), else torch."""
    gpu = _nvml_pynvml()
    if gpu is not None:
        return gpu
    gpu = _nvml_ctypes()
    if gpu is not None:
        return gpu
    if _driver_present():
        return _torch_child()
    return Gpu(method="none: no NVIDIA driver (libnvidia-ml and libcuda not loadable)")


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
    except (OSError, AttributeError, ValueError) as exc:
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
        last = (r.stderr.strip().splitlines() or ["exit code %d" % r.returncode])[-1]
        return Gpu(method="torch", notes=[f"torch failed: {last}"])
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Gpu(method="torch", notes=["torch printed no answer"])
    cap = out.get("capability")
    return Gpu(out.get("name"), tuple(cap) if cap else None, None, None, out.get("count", 0),
               "torch (in a child process; NVML unavailable)")


def _cuda_int(v: int) -> Optional[Version]:
    return Version(f"{v // 1000}.{(v % 1000) // 10}") if v and v > 0 else None


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _count_note(count: int) -> List[str]:
    return [f"{count} GPUs; deciding for GPU 0"] if count > 1 else []
