"""How a packaged profile picks on shapes it did not time: leave one shape out.

    python tools/packaged_check.py PROFILE.json [--tolerance 0.05] [--min-tokens 128]

For each layer shape of PROFILE (a `selector tune` profile), the packaged profile is PROFILE
without that shape's cells, and each of its cells is decided as a machine that matches
PROFILE's key decides it under `policy.preference=auto` (the nearest other cell,
`profile.Measured.near_cell`), and under the static order (`policy.preference=static`, the
resolver on a simulated platform with PROFILE's GPU, CUDA and library versions). The cost of a
pick is its median in the left-out cell over the fastest median there. Prints every cell and,
per preference, the share of cells with at least --min-tokens tokens within 1 + --tolerance of
the fastest and the worst (issue #46: packaged >= 95%, static >= 85% and worst <= 1.3x).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

from packaging.version import Version

import selector
from selector.core import profile as prof
from selector.inspect.environment import Environment, Gpu


def detector(key: Dict[str, Any]) -> Any:
    cap = tuple(key["capability"])
    pkgs = {n: Version(v) for n, v in key["packages"].items() if v is not None}

    def detect(names: List[str]) -> Environment:
        got = {n: pkgs.get(n) for n in names}
        return Environment(cap, key["gpu"], Version(key["cuda"]), got, Gpu(key["gpu"], cap),
                           "simulated", ())
    return detect


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--min-tokens", type=int, default=128)
    a = p.parse_args(argv)
    whole = prof.load(a.profile)
    det = detector(whole.key)
    static = {}
    rows = []
    shapes = sorted({c.key[0] for c in whole.cells})
    for shape in shapes:
        rest = prof.Profile(whole.key, tuple(c for c in whole.cells if c.key[0] != shape))
        m = prof.Measured("left-out", rest, (), packaged=str(whole.key["gpu"]))
        for cell in (c for c in whole.cells if c.key[0] == shape and c.times):
            L = cell.layer
            q = L["quant"]
            if q not in static:
                static[q] = selector.load(["platform=auto", "layer=dense_linear",
                                           f"layer.quant={q}", "policy.preference=static"],
                                          detect=det)
            layer = {"op": L["op"], "quant": q, "hidden_size": L["hidden_size"],
                     "intermediate_size": L["intermediate_size"], "num_tokens": cell.tokens}
            d = static[q].select(**layer)
            usable = [c.backend for c in d.candidates if str(c.status) in ("selected", "eligible")]
            timed = [b for b in usable if b in cell.times]
            near = m.near_cell(static[q].layer(**layer), timed)
            fastest = min(cell.times, key=lambda b: cell.times[b].median_ms)
            best = cell.times[fastest].median_ms
            if near is not None:
                pk = min(timed, key=lambda b: near.times[b].median_ms)
                how = prof.describe(dict(near.key[0]), near.key[1])
            else:
                pk, how = d.selected, "no cell near: static"
            row = {"cell": prof.describe(dict(cell.key[0]), cell.key[1]), "tokens": cell.tokens,
                   "fastest": fastest, "static": d.selected, "packaged": pk, "near": how,
                   "static_cost": cell.times[d.selected].median_ms / best
                   if d.selected in cell.times else None,
                   "packaged_cost": cell.times[pk].median_ms / best if pk in cell.times else None}
            rows.append(row)
            sc = "-" if row["static_cost"] is None else f"{row['static_cost']:.3f}x"
            pc = "-" if row["packaged_cost"] is None else f"{row['packaged_cost']:.3f}x"
            print(f"{row['cell']:<62} {cell.tokens:>5}: fastest {fastest}; static {d.selected} "
                  f"{sc}; packaged {pk} {pc} (from {how})")
    for which in ("packaged", "static"):
        large = [r for r in rows if r["tokens"] >= a.min_tokens and r[f"{which}_cost"]]
        ok = [r for r in large if r[f"{which}_cost"] <= 1 + a.tolerance]
        worst = max(large, key=lambda r: r[f"{which}_cost"], default=None)
        small = [r for r in rows if r["tokens"] < a.min_tokens and r[f"{which}_cost"]]
        sok = [r for r in small if r[f"{which}_cost"] <= 1 + a.tolerance]
        print(f"{which}: cells with >= {a.min_tokens} tokens within {a.tolerance:.0%} of the "
              f"fastest: {len(ok)}/{len(large)}" + (f" ({len(ok) / len(large):.1%})" if large
                                                  else "") +
              f"; smaller cells {len(sok)}/{len(small)}" +
              (f"; worst {worst[f'{which}_cost']:.3f}x: {worst['cell']}, {worst[which]} where "
               f"{worst['fastest']} is fastest" if worst else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
