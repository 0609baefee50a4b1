"""Does `selector tune` time what an independent CUDA-graph timer times? Per cell and backend.

    python benchmarks/tune_agree.py PROFILE.json [--tolerance 0.10] [--calls 24] [--runs 3]

For every cell of a tune profile and every backend it timed, this builds the same layer the tune
child builds (selector.backends.children.tune_child.build_linear / build_moe: the same sizes, scheme and
seed), prepares it with the backend's own `prepare`, makes `copies_past_l2` weight copies and times
the call with the benchmarks' own timer (baselines.graph_calls_ms: `--calls` calls over the copies
in one CUDA graph, its replays timed by CUDA events, median), `--runs` times, median. It prints
per cell the profile's median and p10-p90, the independent median and their ratio, and the share
of (cell, backend) pairs whose ratio lies within 1 +- --tolerance; exit 0 when every pair does.
The timer here shares no code with tune's (tune_child.time_graph): only the layer's inputs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import copies_past_l2, graph_calls_ms  # noqa: E402

from selector.backends.children import tune_child  # noqa: E402
from selector.core import profile as prof  # noqa: E402


def independent_ms(sel: Any, op: str, backend: str, layer: Dict[str, Any], calls: int,
                   runs: int) -> float:
    from selector.core.entry_points import load_entry_point
    spec = sel.catalogue.get(op, backend)
    cls = load_entry_point(spec.entry_point)
    d = sel.select(**layer)
    kwargs: Dict[str, Any] = {"quant": layer["quant"], "decision": d}
    if op == "moe":
        kwargs.update(activation=layer["activation"], act_and_mul=layer["act_and_mul"])
        if layer.get("swiglu_limit") is not None:
            kwargs["swiglu_limit"] = layer["swiglu_limit"]
    impl = cls(**kwargs)
    dev = torch.device("cuda")
    if op == "moe":
        x, w, tw, ti = tune_child.build_moe(layer, dev)
        base = impl.prepare(w)
    else:
        x, w = tune_child.build_linear(layer, dev)
        base = impl.prepare(w)
    del w
    copies = [base] + [tune_child.clone_tensors(base)
                       for _ in range(1, copies_past_l2(tune_child.tensor_bytes(base)))]
    if op == "moe":
        fns = [(lambda p=p: impl.apply(x, p, tw, ti)) for p in copies]
    else:
        fns = [(lambda p=p: impl.apply(x, p)) for p in copies]
    out = statistics.median(graph_calls_ms(fns, calls) for _ in range(runs))
    del copies, fns, base
    torch.cuda.empty_cache()
    return out


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--calls", type=int, default=24)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--override", action="append", default=[])
    a = p.parse_args(argv)
    import selector
    profile = prof.load(a.profile)
    sel = selector.load(a.override or ["platform=auto"])
    rows = []
    print(f"device: {torch.cuda.get_device_name()}; profile {a.profile} "
          f"(timer {profile.settings.get('timer')}, {profile.settings.get('weights', 'one weight')})")
    print(f"{'cell':<48} {'backend':<20} {'tune ms':>9} {'p10-p90':>17} {'graph ms':>9} "
          f"{'ratio':>6} {'eager ms':>9}")
    for c in profile.cells:
        layer = dict(c.layer, num_tokens=c.tokens)
        name = prof.describe(dict(prof.shape_of(layer))) + f" T={c.tokens}"
        for b, t in sorted(c.times.items()):
            try:
                ind = independent_ms(sel, layer["op"], b, layer, a.calls, a.runs)
            except Exception as exc:  # noqa: BLE001 - a backend that cannot run here says so
                print(f"{name:<48} {b:<20} not timed: {type(exc).__name__}: {exc}"[:200])
                continue
            r = t.median_ms / ind
            e = c.eager.get(b)
            rows.append(r)
            print(f"{name:<48} {b:<20} {t.median_ms:9.4g} {t.p10_ms:8.4g}-{t.p90_ms:<8.4g} "
                  f"{ind:9.4g} {r:6.3f} {e.median_ms if e else float('nan'):9.4g}")
    ok = [r for r in rows if abs(r - 1) <= a.tolerance]
    if rows:
        print(f"within {a.tolerance:.0%}: {len(ok)} of {len(rows)} ({len(ok) / len(rows):.1%}); "
              f"ratio tune/independent median {statistics.median(rows):.3f}, range "
              f"{min(rows):.3f}-{max(rows):.3f}")
    return 0 if rows and len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
