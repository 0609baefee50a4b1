"""The suite is hermetic: a child Python started through `child_env` imports the selector this
process tests and finds what this process found (Hydra included), even where both were put on
the import path by `pip install --target` and PYTHONPATH rather than installed in site-packages
(the layout of tools/h200_suite.sh), and even when a checkout sits in the child's cwd."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO, child_env

pytestmark = pytest.mark.slow  # subprocess suite: `pytest -m "not slow"` skips it

_CODE = """
import json, sys
import hydra, omegaconf, selector
print(json.dumps({"selector": selector.__file__, "hydra": hydra.__file__,
                  "safe_path": bool(getattr(sys.flags, "safe_path", False))}))
"""


def test_a_child_imports_the_selector_and_hydra_tested_here():
    import hydra

    import selector
    p = subprocess.run([sys.executable, "-c", _CODE], cwd=str(REPO), env=child_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["selector"] == selector.__file__
    assert got["hydra"] == hydra.__file__
    assert got["safe_path"] == bool(getattr(sys.flags, "safe_path", False))
