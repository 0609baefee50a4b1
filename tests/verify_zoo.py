"""The mutant zoo's measurement (tests/test_verify_zoo.py, docs/verify.md's bounds and detection
table): each simulated correct kernel and each mutant of `tests/mutant_backends` (a plugin
registered under `selector.backends`) run on `doctor --verify`'s problems, measured and judged
by `selector.inspect.verify` exactly as the verify child does it (in this process, many at a time).

    python tests/verify_zoo.py [--seeds 30] [--mutant-seeds 3] [--jobs N] [--json OUT]
                               [--ops moe,linear,moe_fp8]

prints the measured errors of the correct kernels (the basis of `selector.inspect.verify.BOUNDS`) and the
detection table (markdown).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

SITE = Path(__file__).resolve().parent / "mutant_backends" / "site"


def _zoo():
    if str(SITE) not in sys.path:
        sys.path.insert(0, str(SITE))
    import mutantkernels
    return mutantkernels


_CASES: Dict[str, list] = {}


#: the FP8 MoE schemes the zoo runs (verify's FP8 MoE problems: backends/children/verify_problems.py)
FP8_MOE_QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")


def fp8_cases() -> list:
    """The FP8 MoE cases verify gives a backend that accepts every activation the reference
    implements (selector.inspect.verify_cases.cases_for's order), for each FP8 scheme."""
    from dataclasses import replace

    from selector.inspect import verify_cases as vcs
    out = []
    for q in FP8_MOE_QUANTS:
        for gated in (True, False):
            first = True
            for act in vcs.ACTIVATIONS[gated]:
                if act not in vcs._reference_activations(gated):
                    continue
                c = vcs.Case("moe", q, act, gated, q)
                out.append(c)
                if gated and act in vcs.LIMITED_ACTIVATIONS:
                    out.append(replace(c, swiglu_limit=vcs.LIMIT))
                if first:
                    out.append(replace(c, size="odd"))
                    first = False
    return out


def cases(op: str) -> list:
    """Every verify case the emulation backend gets on this machine's default catalogue (the
    simulated kernels accept what emulation accepts), unverified ones left out; "moe_fp8": the
    FP8 MoE cases (``fp8_cases``)."""
    if op == "moe_fp8":
        if op not in _CASES:
            _CASES[op] = fp8_cases()
        return _CASES[op]
    if op not in _CASES:
        import selector
        from selector.inspect import verify
        sel = selector.load([])
        cs, _ = verify.cases_for(sel, op, sel.catalogue.get(op, "emulation"))
        _CASES[op] = [c for c in cs if not c.unverified]
    return _CASES[op]


def run(op: str, cls, case, seed: int) -> Dict[str, Any]:
    """The verify child's measurement of one kernel class on one case and seed."""
    from selector.backends.children import verify_child as vc
    real = cls.__module__.startswith("selector.")  # a real kernel (torch_grouped_fp8), not a sim
    spec = {"op": case.op, "backend": "torch_grouped_fp8" if real else "emulation",
            "entry_point": f"{cls.__module__}:{cls.__name__}", "overrides": [],
            "config_dirs": []}
    try:
        return dict(vc.run_case(spec, case.spec(seed), cls=cls), outcome="measured")
    except Exception as exc:  # noqa: BLE001 - a mutant may raise: that is a FAIL too
        return {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"}


_PROBLEMS: Dict[Any, Any] = {}


def _cached_problems() -> None:
    """The verify child's problems (with their references) memoized in this process: the kernels
    of one case and seed share them (the tasks come grouped so)."""
    from selector.backends.children import verify_child as vc
    if getattr(vc.problem, "_zoo_cached", False):
        return
    original = vc.problem

    def problem(spec, case):
        key = json.dumps([spec.get("op"), spec.get("backend"), case], sort_keys=True)
        if key not in _PROBLEMS:
            if len(_PROBLEMS) >= 4:
                _PROBLEMS.pop(next(iter(_PROBLEMS)))
            _PROBLEMS[key] = original(spec, case)
        return _PROBLEMS[key]
    problem._zoo_cached = True  # type: ignore[attr-defined]
    vc.problem = problem


def _task(args: Tuple[str, str, str, int, int]) -> Tuple[str, str, str, int, int, Dict[str, Any]]:
    kind, name, op, ci, seed = args
    _cached_problems()
    zoo = _zoo()
    cls = zoo.CORRECT[op][name] if kind == "correct" else zoo.MUTANTS[name][1]
    import torch
    torch.set_num_threads(1)
    return kind, name, op, ci, seed, run(op, cls, cases(op)[ci], seed)


def tasks(seeds: int, mutant_seeds: int, mutants=None, case_filter=None) -> List[tuple]:
    zoo = _zoo()
    out = []
    for op in ("moe", "linear", "moe_fp8"):
        for name, cls in zoo.CORRECT[op].items():
            computes = getattr(cls, "computes", None) or ()
            for ci, c in enumerate(cases(op)):
                if op == "moe_fp8" and c.quant not in computes:
                    continue
                if op == "moe_fp8" and name == "torch_grouped_fp8" and c.quant == "fp8_block":
                    continue  # its file does not implement it
                if case_filter is None or case_filter(c):
                    out += [("correct", name, op, ci, s) for s in range(seeds)]
    for name, (op, _, pred, _) in zoo.MUTANTS.items():
        if mutants is not None and name not in mutants:
            continue
        for ci, c in enumerate(cases(op)):
            if pred(c) and (case_filter is None or case_filter(c)):
                out += [("mutant", name, op, ci, s) for s in range(mutant_seeds)]
    # grouped by problem (op, case, seed): a process builds each problem once
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


def measure(todo: List[tuple], jobs: int = 1) -> List[tuple]:
    if jobs <= 1:
        return [_task(t) for t in todo]
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(jobs) as pool:
        return pool.map(_task, todo, chunksize=16)


def summarize(results: List[tuple]) -> Dict[str, Any]:
    """Per (op, quant): the correct kernels' worst errors; per mutant: its weakest detection."""
    from selector.inspect import verify
    zoo = _zoo()
    correct: Dict[str, Dict[str, float]] = {}
    judged_ok: List[str] = []
    mutants: Dict[str, Dict[str, Any]] = {}
    for kind, name, op, ci, seed, ev in results:
        case = cases(op)[ci]
        r = verify.judge(name, case, ev)
        if kind == "correct":
            key = f"{case.op} {case.quant}"
            c = correct.setdefault(key, dict.fromkeys(MEASURES, 0.0) | {"runs": 0})
            for m in MEASURES:
                c[m] = max(c[m], float(ev.get(m) or 0.0))
            c["runs"] += 1
            if r.status != "OK":
                judged_ok.append(f"{name} {op} {case.id} seed {seed}: {r.detail}")
        else:
            m = mutants.setdefault(name, {"op": op, "kind": zoo.MUTANTS[name][3], "runs": 0,
                                          "caught": 0, "missed": [], "quants": {}})
            m["runs"] += 1
            q = m["quants"].setdefault(case.quant, {"runs": 0, "caught": 0, "min_ratio": None,
                                                    "why": {}, "seeds": {}})
            q["seeds"].setdefault(str(seed), False)
            q["runs"] += 1
            if r.status == "FAIL":
                m["caught"] += 1
                q["caught"] += 1
                q["seeds"][str(seed)] = True
                ratio = _ratio(r, verify.BOUNDS[case.op, case.quant])
                q["min_ratio"] = ratio if q["min_ratio"] is None else min(q["min_ratio"], ratio)
                w = _why(r, verify.BOUNDS[case.op, case.quant])
                q["why"][w] = q["why"].get(w, 0) + 1
            else:
                m["missed"].append(f"{case.id} seed {seed}: {r.detail}")
    return {"correct": correct, "correct_failures": judged_ok, "mutants": mutants}


#: every measure verify judges (selector.inspect.verify.Bound), and its short name in the table
MEASURES = ("max_rel_err", "rms_rel_err", "gain_err", "scale_err", "tile_err", "act_err")
SHORT = {"max_rel_err": "max", "rms_rel_err": "rms", "gain_err": "gain", "scale_err": "scale",
         "tile_err": "tile", "act_err": "act"}


def _ratio(r, b) -> float:
    """How far past its bound a caught mutant is (the largest of the ratios)."""
    if r.max_rel_err is None or r.rms_rel_err is None:
        return float("inf")
    return max((getattr(r, m) or 0.0) / getattr(b, m) for m in MEASURES)


def _why(r, b) -> str:
    if r.max_rel_err is None:
        return "error" if r.detail.startswith("raised") else "non-finite"
    return "+".join(SHORT[m] for m in MEASURES if (getattr(r, m) or 0.0) > getattr(b, m))


def verdicts(summary: Dict[str, Any]) -> Dict[Tuple[str, str], Tuple[int, int]]:
    """(mutant, quant) -> (seeds on which verify FAILs the backend, seeds): a backend is refused
    for a scheme when any of its cases of that scheme fails."""
    return {(name, q): (sum(s["seeds"].values()), len(s["seeds"]))
            for name, m in summary["mutants"].items() for q, s in m["quants"].items()}


def table(summary: Dict[str, Any]) -> str:
    """docs/verify.md's detection table: per scheme, the seeds on which the backend FAILs (any
    case), then the cases that FAIL, with which measure and how far past the bound."""
    v = verdicts(summary)
    fp8 = [n for n, m in summary["mutants"].items() if m["op"] == "moe_fp8"]
    rows = []
    for names, quants in (([n for n in summary["mutants"] if n not in fp8],
                           ("nvfp4_w4a16", "nvfp4")), (fp8, FP8_MOE_QUANTS)):
        if names:
            rows += (["", "| mutant | kind | " + " | ".join(quants) + " |",
                      "|---|---|" + "---|" * len(quants)])
        rows += _rows(summary, v, names, quants)
    return "\n".join(rows).strip("\n")


def _rows(summary: Dict[str, Any], v, names, quants) -> List[str]:
    rows = []
    for name in names:
        m = summary["mutants"][name]
        cells = []
        for q in quants:
            s = m["quants"].get(q)
            if not s:
                cells.append("-")
                continue
            caught, seeds = v[name, q]
            head = ("**refused**" if caught == seeds else "**missed**" if not caught
                    else "**partly**") + f" {caught}/{seeds} seeds"
            tail = f"; cases {s['caught']}/{s['runs']}"
            if s["caught"]:
                tail += f" ({', '.join(sorted(s['why']))}; >= {s['min_ratio']:.3g}x bound)"
            cells.append(head + tail)
        rows.append(f"| {name} | {m['kind']} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--mutant-seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json")
    ap.add_argument("--ops", default="moe,linear,moe_fp8",
                    help="comma list of moe, linear, moe_fp8 (the FP8 MoE cases)")
    args = ap.parse_args()
    ops = set(args.ops.split(","))
    todo = [t for t in tasks(args.seeds, args.mutant_seeds) if t[2] in ops]
    print(f"{len(todo)} runs on {args.jobs} processes", flush=True)
    results = measure(todo, args.jobs)
    s = summarize(results)
    print(json.dumps({k: s[k] for k in ("correct", "correct_failures")}, indent=1))
    print(table(s))
    for name, m in s["mutants"].items():
        for line in m["missed"][:3]:
            print(f"MISSED {name}: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "results": results}))


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed selector
    main()
