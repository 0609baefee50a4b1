"""agree_all for a 100-layer model on 2, 4 and 8 spawned gloo ranks (issue 13's budget: under
5 ms at 8 ranks), beside a plain all_gather_object of the same fingerprint, measured in one run.

    python benchmarks/distributed_bench.py [--ranks 2 4 8] [--calls 40] [--json FILE]

Each rank builds its selector and decides 100 layers (50 MoE layers of one shape, 50 linear
layers of 5 shapes: what a decoder stack asks), then runs `--calls` rounds, each after a
barrier: agree_all, its phases (arrival through the store, exchange, agreement), and the
baseline. A round's time is the slowest rank's. With --mixed the last rank has another
flashinfer (two distinct fingerprints). Also printed: bytes per rank, and the agreement's CPU
cost for 1,024 ranks on 2 and 128 platforms, computed in this process from real fingerprints.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import zlib
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASE = ["platform=rtx_pro_6000", "stack=flashinfer_0_7_4"]
OLD = ["platform=rtx_pro_6000", "stack=flashinfer_0_6_10"]
MOE = dict(op="moe", quant="nvfp4", activation="silu", act_and_mul=True, hidden_size=4096,
           intermediate_size=1536, num_experts=128, top_k=8, ep_size=8)
LINEAR = [dict(op="linear", quant="nvfp4", hidden_size=h, intermediate_size=i)
          for h, i in ((4096, 6144), (4096, 4096), (4096, 1024), (1024, 4096), (4096, 512))]


def layers() -> List[Dict[str, Any]]:
    """100 layers: 50 blocks of (MoE, one linear projection), five linear shapes."""
    out = []
    for b in range(50):
        out += [MOE, LINEAR[b % len(LINEAR)]]
    return out


def decisions(overrides: List[str]):
    import selector
    sel = selector.load(overrides=overrides)
    return [sel.select(**x) for x in layers()]


# -- one rank ----------------------------------------------------------------------------------
def worker(rank: int, world: int, calls: int, mixed: bool) -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from selector import distributed
    from selector.distributed import agreement
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    ds = decisions(OLD if mixed and rank == world - 1 else BASE)
    pg = c10d._get_default_group()
    raw = agreement.encode(ds)
    # "exchange" includes "arrive"
    rows: Dict[str, List[float]] = {k: [] for k in ("agree_all", "arrive", "exchange",
                                                     "encode", "agree", "all_gather_object")}

    def timed(name, fn):
        dist.barrier()
        t = time.perf_counter()
        out = fn()
        rows[name].append(time.perf_counter() - t)
        return out

    for _ in range(calls + 3):  # 3 warm-up rounds, dropped below
        timed("agree_all", lambda: distributed.agree_all(ds))
        timed("encode", lambda: agreement.encode(ds))
        timed("arrive", lambda: distributed._arrive(c10d._get_process_group_store(pg), pg, rank,
                                                     world, timedelta(seconds=60)))
        groups = timed("exchange", lambda: distributed._exchange(dist, None, raw))
        timed("agree", lambda g=groups: agreement.agree(g, ds))
        timed("all_gather_object", lambda: dist.all_gather_object([None] * world, raw))
    mine = {k: v[3:] for k, v in rows.items()}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        slowest = {k: [max(r[k][i] for r in everyone) for i in range(calls)] for k in mine}
        wire = len(zlib.compress(raw))
        print(json.dumps({"ranks": world, "mixed": mixed, "layers": len(ds),
                          "fingerprints": len(groups), "raw_bytes": len(raw),
                          "wire_bytes": wire, "record_bytes": distributed._RECORD.size,
                          "ms": {k: _stats(v) for k, v in slowest.items()}}))
    dist.destroy_process_group()


def _stats(samples: List[float]) -> Dict[str, float]:
    ms = sorted(s * 1e3 for s in samples)
    return {"median": round(statistics.median(ms), 3), "p90": round(ms[int(0.9 * (len(ms) - 1))],
                                                                     3),
            "min": round(ms[0], 3)}


def spawn(world: int, calls: int, mixed: bool) -> Dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(world),
                               "--calls", str(calls)] + (["--mixed"] if mixed else []),
                              env=env, stdout=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed at {world} ranks")
    return json.loads(outs[0].strip().splitlines()[-1])


# -- 1,024 ranks, on paper and in this process ---------------------------------------------------
def at_scale(world: int = 1024, per_host: int = 8) -> Dict[str, Any]:
    """The agreement's CPU cost for `world` ranks, from real fingerprints: 2 platforms (one
    node with another flashinfer), and one fingerprint per node (every node differs)."""
    from selector.distributed import agreement
    from selector.distributed.agreement import Group
    base, old = decisions(BASE), decisions(OLD)
    out: Dict[str, Any] = {}
    nodes = world // per_host
    for label, distinct in (("2_platforms", 2), (f"{nodes}_platforms", nodes)):
        groups = []
        for k in range(distinct):  # 2: the last node differs; nodes: every node differs
            members = [n for n in range(nodes) if (n == nodes - 1) == (k == distinct - 1)] \
                if distinct == 2 else [k]
            ranks = [r for r in range(world) if r // per_host in members]
            body = json.loads(agreement.encode(old if k == distinct - 1 else base))
            body["platform"]["packages"]["torch"] = f"2.11.0+node{k}"
            groups.append(Group(tuple(ranks), tuple(f"node{r // per_host}" for r in ranks),
                                body))
        samples = []
        for _ in range(7):
            t = time.perf_counter()
            agreement.agree(groups, base)
            samples.append(time.perf_counter() - t)
        out[label] = _stats(samples)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", nargs=2, type=int)
    ap.add_argument("--ranks", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--mixed", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.calls, args.mixed)
        return
    results = {"runs": [spawn(w, args.calls, m) for m in (False, True) for w in args.ranks],
               "agreement_at_1024_ranks_ms": at_scale()}
    print(f"{'ranks':>5} {'fps':>3} {'agree_all':>10} {'p90':>7} {'arrive':>7} {'exchange':>8} "
          f"{'agree':>6} {'encode':>6} {'all_gather_object':>17} {'wire B':>6}  budget")
    for r in results["runs"]:
        ms = r["ms"]
        verdict = "" if r["ranks"] != 8 else \
            ("met" if ms["agree_all"]["median"] < 5 else "MISSED") + " (<5 ms at 8)"
        print(f"{r['ranks']:>5} {r['fingerprints']:>3} {ms['agree_all']['median']:>10.3f} "
              f"{ms['agree_all']['p90']:>7.3f} {ms['arrive']['median']:>7.3f} "
              f"{ms['exchange']['median']:>8.3f} {ms['agree']['median']:>6.3f} "
              f"{ms['encode']['median']:>6.3f} {ms['all_gather_object']['median']:>17.3f} "
              f"{r['wire_bytes']:>6}  {verdict}")
    print("agreement CPU cost at 1,024 ranks (ms):", json.dumps(
        results["agreement_at_1024_ranks_ms"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
