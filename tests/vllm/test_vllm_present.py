"""Says why tests/vllm did not run (they need the real vLLM package)."""
import importlib.util

import pytest


def test_vllm_is_installed():
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed: build .venv-vllm with tools/vllm_env.sh, then "
                    ".venv-vllm/bin/python -m pytest -q tests/vllm")
    import vllm.platforms  # noqa: F401  the real package
