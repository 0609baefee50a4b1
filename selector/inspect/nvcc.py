"""The nvcc a JIT-compiling kernel library would run (DeepGEMM under vLLM 0.34.0), found the way
the library finds it, and its release: `platform.packages.nvcc` of the detected platform."""
from __future__ import annotations

import re
import subprocess
from typing import Optional, Tuple

from packaging.version import Version

from selector.core import env_vars

_DEFAULT_CUDA_HOME = "/usr/local/cuda"
_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def nvcc_path() -> Tuple[Optional[str], str]:
    """The nvcc DeepGEMM's JIT would run, and how it was found: CUDA_HOME, CUDA_PATH, the nvcc
    on PATH, /usr/local/cuda; DG_JIT_NVCC_COMPILER (or DJ_JIT_NVCC_COMPILER) names the compiler
    itself (vLLM 0.34.0 utils/deep_gemm.py _deep_gemm_nvcc_path, lines 118-135)."""
    import os
    import shutil
    home, how = env_vars.cuda_home()
    if not home:
        found = shutil.which("nvcc")
        home = os.path.dirname(os.path.dirname(found)) if found else _DEFAULT_CUDA_HOME
        how = "PATH" if found else _DEFAULT_CUDA_HOME
    if not os.path.exists(home):
        return None, f"no CUDA toolkit ({how}: {home} does not exist)"
    named = env_vars.nvcc_compiler()
    nvcc = shutil.which(named or os.path.join(home, "bin", "nvcc"))
    if nvcc is None:
        return None, f"no nvcc in {named or os.path.join(home, 'bin')} ({how})"
    return nvcc, how


def nvcc_version() -> Tuple[Optional[Version], Optional[str], str]:
    """(version, path, how): the nvcc release `nvcc --version` reports. version None and path
    None: no nvcc; version None with a path: found but its version unreadable (unknown)."""
    path, how = nvcc_path()
    if path is None:
        return None, None, how
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    m = _NVCC_RELEASE.search(out or "")
    return (Version(f"{m[1]}.{m[2]}") if m else None), path, how


__all__ = ["nvcc_path", "nvcc_version"]
