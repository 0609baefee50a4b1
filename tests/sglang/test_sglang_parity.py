"""SGLang 0.5.23's own choice against selector's (engine=sglang) over the seeded sweep
(sglang_sweep.py; SELECTOR_SGLANG_SEED picks the seed, SELECTOR_SGLANG_SCENARIOS the count,
5,000 by default): every difference has an explanation with SGLang's source line."""
from __future__ import annotations

import sglang_sweep as sweep


def test_every_difference_is_explained():
    report = sweep.run()
    print(f"seed {report.seed} ({sweep.SEED_VAR}): {len(report.rows)} scenarios, "
          f"{len(report.differ)} differ, {len(report.unexplained)} unexplained")
    assert len(report.rows) >= int(__import__("os").environ.get(sweep.COUNT_VAR, "5000"))
    assert len(report.rows) - len(report.differ) > len(report.rows) // 4  # the harness agrees
    bad = [f"{r.scenario.label()}: SGLang {r.runner or r.sglang.get('error')}, selector "
           f"{r.selector or 'refuses'}" for r in report.unexplained]
    assert not bad, "\n".join(bad[:40])
