"""Tests against SGLang 0.5.23's released code on simulated GPUs: `tools/sglang_env.sh` builds
the environment (.venv-sglang). Without SGLang only test_sglang_present.py runs, and skips with
the reason.

(`import sglang` is no test for SGLang here: this directory itself is importable as a namespace
package named `sglang`; a real package has an origin file.)"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def sglang_installed() -> bool:
    spec = importlib.util.find_spec("sglang")
    return spec is not None and spec.origin is not None


if sglang_installed():
    sys.path.insert(0, str(Path(__file__).parent))  # sglang_sim.py, sglang_sweep.py
    collect_ignore_glob: list = []
else:
    collect_ignore_glob = ["test_sglang_flags.py", "test_sglang_parity.py",
                           "test_audit_sglang.py", "test_sglang_auto.py", "test_sglang_command.py"]


def pytest_report_header(config):
    """The SGLang sweep's seed (sglang_sweep.py), chosen here once per run when
    SELECTOR_SGLANG_SEED is unset, so the header names it and a re-run can pass it."""
    import os
    import random
    env = "SELECTOR_SGLANG_SEED"
    if not os.environ.get(env):
        os.environ[env] = str(random.SystemRandom().randrange(2 ** 32))
    return f"SGLang sweep seed: {env}={os.environ[env]}"
