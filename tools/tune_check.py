"""Check the picks a `selector tune` profile makes against an independent measurement.

    python tools/tune_check.py DECIDE.json CHECK.json [--tolerance 0.05] [--min-tokens 128]

DECIDE is the profile the resolver ranks by (policy.profile=DECIDE); CHECK is a second `selector
tune` run of the same cells on the same machine (another process, later). For each cell both
measured, the pick is DECIDE's fastest among the backends CHECK timed (what policy.preference=
measured selects when they are usable), and its cost is CHECK's median of the pick over CHECK's
fastest median. A cell with at least --min-tokens tokens passes when the cost is at most
1 + --tolerance; a smaller one when the pick's CHECK median lies within the fastest backend's
p10-p90 spread. With --resolver the pick is instead what selector itself selects for the cell
(``selector.load([*overrides, "policy.preference=measured", "policy.profile=DECIDE"])``, then a
plain ``select()`` with only the keys a user gives for that op: for a linear layer op, quant,
dtype, hidden_size, intermediate_size and the bucket's token count, every other key the
configured layer's default, as an embedder's call inherits them): the resolver's whole path, rules,
the cell lookup and the profile's key check included. Prints every cell, the share that passes,
the worst cell; exit 0 when at least
--share (0.95) of the large cells and every small one pass, 1 otherwise, 2 on a bad file
(issue #34's acceptance: "within 5% of the fastest measured backend in at least 95% of cells with
128 or more tokens, and the worst cell is reported; at fewer tokens, within the measured spread").
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List

from selector.core import profile as prof
from selector.core.errors import SelectorError


def check(decide: prof.Profile, against: prof.Profile, tolerance: float = 0.05,
          min_tokens: int = 128, select: Any = None) -> List[Dict[str, Any]]:
    """One row per cell both profiles measured (with at least one common backend). ``select``:
    ``layer dict -> backend name`` (the resolver's pick), else DECIDE's fastest."""
    rows = []
    ref = against.index()
    for key, cell in decide.index().items():
        other = ref.get(key)
        if other is None:
            continue
        common = [b for b in cell.times if b in other.times]
        if not common:
            continue
        pick = min(common, key=lambda b: (cell.times[b].median_ms, b))
        if select is not None:
            pick = select({**{k: cell.layer[k] for k in prof.keys_of(cell.layer["op"])},
                           "num_tokens": cell.tokens})
            if pick not in other.times:
                raise SystemExit(f"tune_check: the resolver picked {pick!r} for {cell.layer} at "
                                 f"{cell.tokens} tokens, which CHECK did not time")
        fastest = min(other.times, key=lambda b: (other.times[b].median_ms, b))
        cost = other.times[pick].median_ms / other.times[fastest].median_ms
        large = cell.tokens >= min_tokens
        ok = cost <= 1 + tolerance if large else \
            other.times[pick].median_ms <= other.times[fastest].p90_ms
        layer = cell.layer
        rows.append({"op": layer["op"], "quant": layer["quant"], "hidden_size":
                     layer["hidden_size"], "intermediate_size": layer["intermediate_size"],
                     "tokens": cell.tokens, "pick": pick, "fastest": fastest,
                     "cost": round(cost, 4), "large": large, "ok": ok})
    return rows


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("decide")
    p.add_argument("check")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--min-tokens", type=int, default=128)
    p.add_argument("--share", type=float, default=0.95)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--resolver", action="store_true",
                   help="the pick from selector's resolver with policy.profile=DECIDE")
    p.add_argument("--override", action="append", default=[],
                   help="a Hydra override for --resolver (default: platform=auto)")
    p.add_argument("--config-dir", action="append", default=[],
                   help="a config tree for --resolver (as `selector tune --config-dir`)")
    a = p.parse_args(argv)
    try:
        decide, against = prof.load(a.decide), prof.load(a.check)
    except SelectorError as e:
        print(f"tune_check: error: {e}", file=sys.stderr)
        return 2
    if decide.key != against.key:
        print("tune_check: error: the two profiles were measured on different machines or "
              "stacks: " + "; ".join(prof.key_difference(decide.key, against.key)),
              file=sys.stderr)
        return 2
    select = None
    if a.resolver:
        import selector
        sel = selector.load([*(a.override or ["platform=auto"]), "policy.preference=measured",
                             f"policy.profile={a.decide}"], config_dirs=a.config_dir)

        def select(layer: Dict[str, Any]) -> str:
            return str(sel.select(**layer).selected)
    rows = check(decide, against, a.tolerance, a.min_tokens, select)
    large = [r for r in rows if r["large"]]
    small = [r for r in rows if not r["large"]]
    share = sum(r["ok"] for r in large) / len(large) if large else 1.0
    worst = max(rows, key=lambda r: r["cost"]) if rows else None
    ok = bool(rows) and share >= a.share and all(r["ok"] for r in small)
    if a.format == "json":
        print(json.dumps({"cells": rows, "share_large_ok": share, "worst": worst, "ok": ok},
                         indent=2))
        return 0 if ok else 1
    for r in rows:
        print(f"{r['op']} {r['quant']} K={r['hidden_size']} N={r['intermediate_size']} "
              f"{r['tokens']:>6} tokens: pick {r['pick']}, fastest {r['fastest']}, "
              f"{r['cost']:.3f}x {'ok' if r['ok'] else 'MISS'}")
    print(f"cells with >= {a.min_tokens} tokens within {a.tolerance:.0%} of the fastest: "
          f"{sum(r['ok'] for r in large)}/{len(large)} ({share:.1%}); smaller cells within the "
          f"fastest's p10-p90: {sum(r['ok'] for r in small)}/{len(small)}")
    if worst is not None:
        print(f"worst: {worst['op']} {worst['quant']} K={worst['hidden_size']} "
              f"N={worst['intermediate_size']} at {worst['tokens']} tokens, {worst['pick']} "
              f"{worst['cost']:.3f}x {worst['fastest']}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
