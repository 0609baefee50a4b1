"""Why do tune's and an independent graph timer's times differ? The same call, timed in turn.

    python benchmarks/tune_clock.py [--cells fp8_block:5120:10240:4096,...] [--settle-ms 1000]

Per cell (scheme:K:N:tokens, the linear layer tune builds; backend torch_block_wise for
fp8_block, torch_row_wise for fp8_channel): tune's graph timer (tune_child.time_graph) with no
settle replays (as before), the independent timer of benchmarks/tune_agree.py (baselines.graph_calls_ms, 24
calls over the weight copies, 3 runs), tune's timer right after it, tune's timer after 2 s idle,
and tune's timer with its settle replays (tune_child.SETTLE_MS, the GPU's clock under sustained
load) and with ``--settle-ms`` of them, each after 2 s idle, with the SM clock and power
nvidia-smi reads after each. Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import copies_past_l2, graph_calls_ms  # noqa: E402

from selector.backends.children import tune_child  # noqa: E402

SETTLE = tune_child.SETTLE_MS
BACKEND = {"fp8_block": "torch_block_wise", "fp8_channel": "torch_row_wise"}


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"nvidia-smi: {exc}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="fp8_block:5120:10240:4096,fp8_block:8192:5120:1024,"
                    "fp8_channel:6656:16384:4096,fp8_block:5120:10240:128")
    ap.add_argument("--settle-ms", type=float, default=1000.0)
    a = ap.parse_args()
    import selector
    from selector.core.entry_points import load_entry_point
    sel = selector.load(["platform=auto"])
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}; idle: {smi()}")
    for cell in a.cells.split(","):
        quant, K, N, T = cell.split(":")
        layer = dict(op="linear", quant=quant, hidden_size=int(K), intermediate_size=int(N),
                     num_tokens=int(T), act_and_mul=False)
        b = BACKEND[quant]
        cls = load_entry_point(sel.catalogue.get("linear", b).entry_point)
        impl = cls(quant=quant, decision=sel.select(**layer))
        x, w = tune_child.build_linear(layer, dev)
        base = impl.prepare(w)
        del w
        copies = [base] + [tune_child.clone_tensors(base) for _ in
                           range(1, copies_past_l2(tune_child.tensor_bytes(base)))]
        fns = [(lambda p=p: impl.apply(x, p)) for p in copies]

        def tune_ms(settle_ms, fns=fns):
            tune_child.SETTLE_MS = settle_ms
            try:
                return statistics.median(tune_child.time_graph(fns, dev, 5, 12, 10.0))
            finally:
                tune_child.SETTLE_MS = SETTLE
        rows = []
        rows.append(("tune, no settle", tune_ms(0.0), smi()))
        rows.append(("independent", statistics.median(graph_calls_ms(fns, 24) for _ in range(3)),
                     smi()))
        rows.append(("tune, no settle, after it", tune_ms(0.0), smi()))
        time.sleep(2.0)
        rows.append(("tune, no settle, 2 s idle", tune_ms(0.0), smi()))
        time.sleep(2.0)
        rows.append((f"tune, settle {SETTLE:.0f} ms, 2 s idle", tune_ms(SETTLE), smi()))
        time.sleep(2.0)
        rows.append((f"tune, settle {a.settle_ms:.0f} ms, 2 s idle", tune_ms(a.settle_ms), smi()))
        print(f"{b} {quant} K={K} N={N} T={T} ({len(copies)} copies)")
        for name, ms, clk in rows:
            print(f"  {name:<26} {ms:9.4f} ms  x indep {ms / rows[1][1]:.3f}  [{clk}]", flush=True)
        del copies, fns, base
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
