"""What the fuzz and property tests share: example budgets, seeds, the outcome report.

benchmarks/fuzz.py sets SELECTOR_FUZZ_SCALE (more examples), SELECTOR_FUZZ_RANDOM (fresh seeds)
and SELECTOR_FUZZ_REPORT (a JSON file the outcome counts are added to).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck

SCALE = max(1, int(os.environ.get("SELECTOR_FUZZ_SCALE", "1")))
RANDOM = bool(os.environ.get("SELECTOR_FUZZ_RANDOM"))
SETTINGS = dict(deadline=None, derandomize=not RANDOM, database=None,
                suppress_health_check=list(HealthCheck))


def add_to_report(outcomes: Counter) -> None:
    """Add (group, outcome) -> count to the report file, when one is asked for."""
    path = os.environ.get("SELECTOR_FUZZ_REPORT")
    if not path:
        return
    import fcntl
    with open(f"{path}.lock", "w") as lock:  # pytest-xdist workers add to one report
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = json.loads(Path(path).read_text()) if Path(path).is_file() else {}
        for (group, outcome), count in outcomes.items():
            old.setdefault(group, {}).setdefault(outcome, 0)
            old[group][outcome] += count
        Path(path).write_text(json.dumps(old, indent=2, sort_keys=True))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each fuzz/property module decides with a cache of its own, never the user's."""
    monkeypatch.setenv("SELECTOR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fuzz-cache"))
    monkeypatch.delenv("SELECTOR_NO_CACHE", raising=False)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    """Add the module's OUTCOMES counter to the report once its tests are done."""
    yield
    add_to_report(getattr(request.module, "OUTCOMES", Counter()))
