"""`doctor --timeout` overrides SELECTOR_PROBE_TIMEOUT only when given."""
from __future__ import annotations

from selector.commands import cli
from selector.inspect import probing


def _timeout_used(monkeypatch, argv):
    seen = {}

    def fake_run_probes(names, *, timeout, ctx=None):
        seen["timeout"] = timeout
        return probing.DeepReport({n: probing.Finding(n, "ok", "fake") for n in names}, [], 0.0)
    monkeypatch.setattr(probing, "run_probes", fake_run_probes)
    monkeypatch.setattr(probing, "_CACHE", {})
    monkeypatch.setattr(probing, "_RUNS", [])
    cli.main(argv)
    return seen.get("timeout")


def test_without_timeout_the_environment_default_applies(monkeypatch):
    monkeypatch.setenv("SELECTOR_PROBE_TIMEOUT", "7.5")
    assert cli.build_parser().parse_args(["doctor"]).timeout is None
    assert _timeout_used(monkeypatch, ["doctor", "--probe", "triton.importable",
                                       "platform=cpu"]) == 7.5


def test_an_explicit_timeout_wins(monkeypatch):
    monkeypatch.setenv("SELECTOR_PROBE_TIMEOUT", "7.5")
    assert _timeout_used(monkeypatch, ["doctor", "--probe", "triton.importable", "--timeout",
                                       "3", "platform=cpu"]) == 3.0
