"""NVML's child process started early: the CLI starts it right after parsing its arguments, so
that it runs while selector imports its modules and composes the config. Imports the standard
library and selector.core.env_vars only (environment.py, which takes the child's answer, imports
packaging, importlib.metadata and the rules: starting the child after those cost a tenth of a
second of its head start).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from selector.core import env_vars

#: the NVML child started ahead of detection (start_gpu_probe): its process, the environment
#: it was started with, the starting process's id and when it started
EARLY: Dict[str, Any] = {}


def nvml_command() -> List[str]:
    """The NVML child's command line: the libraries it loads without pynvml are its
    arguments (SELECTOR_NVML_LIBRARY, SELECTOR_CUDA_LIBRARY, parsed by env_vars.library)."""
    return [sys.executable, "-S", str(Path(__file__).with_name("nvml_query.py")),
            env_vars.library("SELECTOR_NVML_LIBRARY"), env_vars.library("SELECTOR_CUDA_LIBRARY")]


def start_gpu_probe() -> None:
    """Start the NVML child now, so that it runs while selector imports its modules and composes
    the config (the CLI calls this first); environment.detect_gpu then takes its answer when the
    child's environment is still this process's (else it asks afresh, and this child is ended).
    Costs a wall-clock wait only where the answer is not ready by then; never an error
    (detect_gpu reports those). An unused child is ended at exit."""
    import atexit
    import os
    drop_early()
    try:
        env = env_vars.child_env()
        proc = subprocess.Popen(nvml_command(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                env=env)
    except Exception:  # noqa: BLE001 - detect_gpu asks again and says what is wrong
        return
    import time
    EARLY.update(proc=proc, env=env, pid=os.getpid(), started=time.monotonic())
    if not EARLY.get("atexit"):
        atexit.register(drop_early)
        EARLY["atexit"] = True


def drop_early() -> None:
    """End and reap an early NVML child nobody took (a forked copy of this process leaves its
    parent's alone)."""
    import os
    proc = EARLY.pop("proc", None)
    pid = EARLY.pop("pid", None)
    EARLY.pop("env", None)
    EARLY.pop("started", None)
    if proc is None or pid != os.getpid():
        return
    try:
        proc.kill()
        proc.communicate(timeout=5)
    except Exception:  # noqa: BLE001 - already gone
        pass


def take_early(env: Dict[str, str]) -> Optional[Any]:
    """The early child, when this process started it with this environment; else None (and a
    stale one is ended)."""
    import os
    if "proc" not in EARLY:
        return None
    if EARLY.get("pid") != os.getpid() or EARLY.get("env") != env:
        drop_early()
        return None
    proc = EARLY.pop("proc")
    for k in ("pid", "env", "started"):
        EARLY.pop(k, None)
    return proc
