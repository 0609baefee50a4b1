"""The sweep half of the release recipe (tools/new_release.py runs it in each release's
environment; tools/vllm_env.sh builds them). It runs that vLLM release's own selection code on
the simulated GPUs of tests/vllm/sim.py over the parity grids and writes what vLLM answered:

    VENV/bin/python tools/release_sweep.py answers OUT.json [--families nvfp4,fp8,mx,linear]
        [--capabilities 9.0,11.0,none]
    VENV/bin/python tools/release_sweep.py detail IN.json OUT.json

`answers`: {key: [family, label, backend, kernel, scheme, error]} for every scenario (key: the
scenario's label with the FlashInfer version left out, so two releases' keys meet). `detail`
(IN: {"scenarios": [[family, label], ...], "examples": [...], "changed": {file: [lines]}}): for
each scenario selector's answer under SELECTOR_VLLM_STACK (the previous release's stack preset:
its decision through the parity harness, agreeing or not, with its explanation), and for each
example the changed lines of vLLM's selection files (the new release's numbering) its own code
executed deciding it, and the line an error was raised at. Exit 2 on bad input.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "vllm")]

FAMILIES = ("nvfp4", "fp8", "mx", "linear")


def fail(msg: str) -> None:
    print(f"release_sweep.py: {msg}", file=sys.stderr)
    raise SystemExit(2)


def key(label: str) -> str:
    """A scenario's label without the FlashInfer version (each release pins its own)."""
    return re.sub(r"flashinfer [^,)]+", "flashinfer", label)


def grid(family: str) -> List[Any]:
    import linear_parity
    import sim
    return {"nvfp4": sim.sweep, "fp8": sim.fp8_sweep, "mx": sim.sweep_mx,
            "linear": linear_parity.sweep}[family]()


def _linear_config() -> None:
    """linear_parity's VllmConfig carries the model config's quantization_config, which vLLM
    0.34.0's activation override reads (config/quantization.py user_activation_override)."""
    import linear_parity
    made = linear_parity.vllm_config
    if getattr(made, "__release_sweep__", False):
        return

    def config(s: Any) -> Any:
        cfg = made(s)
        if not hasattr(cfg.model_config, "quantization_config"):
            cfg.model_config.quantization_config = None
        return cfg
    config.__release_sweep__ = True  # type: ignore[attr-defined]
    linear_parity.vllm_config = config


@contextlib.contextmanager
def current_config() -> Iterator[None]:
    """vLLM 0.34.0's FP8 MoE oracle reads the current VllmConfig's model config
    (fused_moe/oracle/fp8.py select_fp8_moe_backend): one without a model, as the parity
    harness gives the MXFP4 oracle (made on a simulated CUDA platform: vLLM's CPU build infers
    no device for it otherwise)."""
    import sim
    from vllm.config import VllmConfig, set_current_vllm_config
    simulation = sim.Simulation()
    try:
        with simulation.scenario(sim.Scenario("10.0", "12.8", None, None, "moe", "nvfp4",
                                              "silu", True)):
            config = VllmConfig()
    finally:
        simulation.close()
    with set_current_vllm_config(config):
        yield


def vllm_answer(family: str, s: Any) -> Tuple[Optional[str], Optional[str], Optional[str], str]:
    """(backend, kernel, scheme, error) vLLM's own code gives scenario `s`."""
    import linear_parity
    import parity
    if family == "linear":
        v, err, kern = linear_parity.vllm_choice(s)
        return v, kern, None, err
    if s.oracle != "nvfp4":
        v, err, kern, quant = parity.vllm_mx(s)
        return v, kern, quant, err
    v, err, kern = parity.vllm_choice(s)
    return v, kern, None, err


def answers(out: Path, families: List[str], capabilities: Optional[Set[Optional[str]]]) -> None:
    import sim
    _linear_config()
    rows: Dict[str, List[Any]] = {}
    with current_config():
        simulation = sim.Simulation()
        try:
            for family in families:
                todo = [s for s in grid(family)
                        if capabilities is None or s.capability in capabilities]
                for s in sorted(todo, key=lambda s: str(s.machine)):
                    with simulation.scenario(s):
                        v, kern, quant, err = vllm_answer(family, s)
                    rows[key(s.label())] = [family, s.label(), v, kern, quant, err]
        finally:
            simulation.close()
    out.write_text(json.dumps({"vllm": sim.VLLM, "rows": rows}))


def traced(fn: Callable[[], Any], changed: Dict[str, Set[int]], root: Path
           ) -> Tuple[List[Tuple[str, int]], Optional[Tuple[str, int]]]:
    """Run fn() and return the changed lines of vLLM's files it executed ((file, line), the
    file relative to site-packages) and where the last exception inside vLLM was raised."""
    files = {str(root / f): f for f in changed}
    hits: Set[Tuple[str, int]] = set()
    raised: List[Tuple[str, int]] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        name = files.get(frame.f_code.co_filename)
        if name is None:
            return local
        if event == "line" and frame.f_lineno in changed[name]:
            hits.add((name, frame.f_lineno))
        elif event == "exception":
            raised.append((name, frame.f_lineno))
        return local

    def start(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename in files else None

    sys.settrace(start)
    try:
        fn()
    finally:
        sys.settrace(None)
    return sorted(hits), (raised[0] if raised else None)


def detail(inp: Path, out: Path) -> None:
    import linear_parity
    import parity
    import sim
    import vllm
    _linear_config()
    spec = json.loads(inp.read_text())
    changed = {f: set(lines) for f, lines in spec["changed"].items()}
    root = Path(vllm.__file__).resolve().parent.parent
    by_family: Dict[str, List[Any]] = {}
    for family, label in spec["scenarios"]:
        by_family.setdefault(family, []).append(sim.Scenario.parse(label))
    selector: Dict[str, List[Any]] = {}
    with current_config():
        for family, todo in by_family.items():
            report = (linear_parity.run if family == "linear" else parity.run)(todo)
            for r in report.rows:
                why = r.why[0] if r.why else None
                mine = getattr(r, "engine_name", r.selected) if family == "linear" else \
                    r.selected
                selector[key(r.scenario.label())] = [mine, r.kernel, r.agrees, why]
    lines: Dict[str, Any] = {}
    for family, label in spec["examples"]:
        s = sim.Scenario.parse(label)
        simulation = sim.Simulation()  # a fresh machine: vLLM's cached probes recomputed
        try:
            with current_config(), simulation.scenario(s):
                hits, raised = traced(functools.partial(vllm_answer, family, s), changed, root)
        finally:
            simulation.close()
        lines[key(label)] = {"executed": hits, "raised": raised}
    out.write_text(json.dumps({"vllm": sim.VLLM, "stack": sim.STACK_PRESET,
                               "selector": selector, "lines": lines}))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("answers")
    a.add_argument("out", type=Path)
    a.add_argument("--families", default=",".join(FAMILIES))
    a.add_argument("--capabilities", default=None)
    d = sub.add_parser("detail")
    d.add_argument("inp", type=Path)
    d.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if args.what == "answers":
        fams = args.families.split(",")
        for f in fams:
            if f not in FAMILIES:
                fail(f"--families: {f}: accepted: {', '.join(FAMILIES)}")
        caps = None if args.capabilities is None else {
            None if c == "none" else c for c in args.capabilities.split(",")}
        answers(args.out, fams, caps)
    else:
        detail(args.inp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
