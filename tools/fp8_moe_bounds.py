"""The FP8 MoE bounds from a zoo measurement (``tests/verify_zoo.py --ops moe_fp8 --json Z``):
the correct kernels' worst max, rms, gain, scale and activation errors per scheme, rounded up to
three significant digits; ``--write`` puts them into selector/inspect/verify_cases.py's
FP8_MOE_MEASURED (the bounds are MARGIN x those), then the zoo's verdicts are judged again with
them from the same measurements (a run without ``--write``, after the selector it imports has
them).

    python tools/fp8_moe_bounds.py Z.json [--write]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURES = ("max_rel_err", "rms_rel_err", "gain_err", "scale_err", "act_err")
QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")


def up3(v: float) -> float:
    """``v`` rounded up to three significant digits."""
    if v <= 0:
        return 0.0
    e = math.floor(math.log10(v)) - 2
    return math.ceil(v / 10 ** e - 1e-9) * 10 ** e


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("zoo_json")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    doc = json.loads(Path(args.zoo_json).read_text())
    correct = doc["summary"]["correct"]
    measured = {}
    for q in QUANTS:
        c = correct.get(f"moe {q}")
        if c is None:
            print(f"moe {q}: not measured")
            continue
        measured[q] = tuple(float(f"{up3(c[m]):.3g}") for m in MEASURES)
        print(f"moe {q}: {c['runs']} runs, worst (max, rms, gain, scale, act) {measured[q]}")
    if args.write:
        path = ROOT / "selector" / "inspect" / "verify_cases.py"
        text = path.read_text()
        for q, vals in measured.items():
            text, n = re.subn(rf'("{q}": )\([^)]*\)',
                              lambda m, v=vals: m.group(1) + repr(v), text, count=1)
            assert n == 1, q
        path.write_text(text)
        print(f"wrote {path}")
        return 0
    # the same measurements judged with the bounds of the selector this imports
    sys.path.insert(0, str(ROOT / "tests"))
    import verify_zoo as zoo
    s = zoo.summarize([tuple(r) for r in doc["results"]])
    print("correct kernels failing:", len(s["correct_failures"]), s["correct_failures"][:3])
    print(zoo.table(s))
    for name, m in s["mutants"].items():
        for line in m["missed"][:2]:
            print(f"MISSED {name}: {line[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
