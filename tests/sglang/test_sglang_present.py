"""Says why tests/sglang did not run (they need the real SGLang package)."""
import importlib.util

import pytest


def test_sglang_is_installed():
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("SGLang is not installed: build .venv-sglang with tools/sglang_env.sh, then "
                    ".venv-sglang/bin/python -m pytest -q tests/sglang")
    import sglang.srt.server_args  # noqa: F401  the real package
