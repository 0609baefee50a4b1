"""selector.distributed over NCCL: 2 ranks, one process per GPU, each with its own overrides.

    PYTHONPATH=. python3 tools/nccl_agree.py [--nproc 2] [--calls 30] [--json FILE]
    PYTHONPATH=. python3 tools/nccl_agree.py --backend gloo    # the same run on CPU (a dry run)

Needs torch with CUDA and at least --nproc GPUs, and selector's own dependencies (hydra-core,
omegaconf, PyYAML, packaging). Scenarios, in order, on one NCCL process group:
  equal        every rank platform=auto (this machine as detected);
  vllm_rank1   rank 1 also claims vllm 0.32.0 installed: Marlin is usable on rank 1 only;
  strict       policy.moe_backend=marlin with vllm on rank 1 only: SelectorError on every rank;
  absent       the last rank never calls in: the others stop after the group's timeout (20 s).
Then timings: agree_all for the 100-layer model of benchmarks/distributed_bench.py, its
exchange, and a plain all_gather_object of the same fingerprint (the slowest rank's time per
round, after a barrier). Prints, per scenario, whether every rank ended with the same result,
each rank's own choice, and rank 0's explanation of the first layer.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

TIMEOUT_S = 20
MOE = {"op": "moe", "quant": "nvfp4", "activation": "silu", "act_and_mul": True}
W4A16 = {"op": "linear", "quant": "nvfp4_w4a16"}
VLLM = ["platform.packages.vllm=0.32.0"]
SCENARIOS: List[Dict[str, Any]] = [
    {"name": "equal", "overrides": {}, "layers": [MOE, W4A16]},
    {"name": "vllm_rank1", "overrides": {1: VLLM}, "layers": [MOE, W4A16]},
    {"name": "strict", "common": ["policy.moe_backend=marlin"], "overrides": {1: VLLM},
     "layers": [MOE, W4A16]},
    {"name": "absent", "overrides": {}, "layers": [MOE], "absent": "last"},
]


def scenario(s: Dict[str, Any], rank: int, world: int) -> Dict[str, Any]:
    """The engine recipe of docs/distributed.md, with this rank's overrides."""
    import selector
    from selector.distributed import agree_all

    if s.get("absent") == "last" and rank == world - 1:
        time.sleep(TIMEOUT_S + 5)
        return {"absent": True}
    overrides = ["platform=auto"] + s.get("common", []) + s["overrides"].get(rank, [])
    try:
        sel = selector.load(overrides=overrides)
        decisions: Any = [sel.select(**layer) for layer in s["layers"]]
    except Exception as e:  # still take part
        decisions = e
    t = time.perf_counter()
    try:
        agreed = agree_all(decisions)
    except selector.SelectorError as e:
        return {"error": str(e), "ms": (time.perf_counter() - t) * 1e3}
    return {"agreed": [a.to_dict() for a in agreed], "text": str(agreed[0]),
            "local": [getattr(a.local, "selected", None) for a in agreed],
            "ms": (time.perf_counter() - t) * 1e3}


def timings(rank: int, world: int, calls: int) -> Dict[str, List[float]]:
    import torch.distributed as dist
    from distributed_bench import decisions

    from selector import distributed
    from selector.distributed import agreement
    ds = decisions(["platform=auto"] + (VLLM if rank == 1 else []))
    raw = agreement.encode(ds)
    rows: Dict[str, List[float]] = {"agree_all": [], "exchange": [], "all_gather_object": []}
    steps = {"agree_all": lambda: distributed.agree_all(ds),
             "exchange": lambda: distributed._exchange(dist, None, raw),
             "all_gather_object": lambda: dist.all_gather_object([None] * world, raw)}
    for i in range(calls + 3):  # 3 warm-up rounds
        for name, fn in steps.items():
            dist.barrier()
            t = time.perf_counter()
            fn()
            if i >= 3:
                rows[name].append((time.perf_counter() - t) * 1e3)
    return rows


def worker(rank: int, world: int, calls: int, backend: str) -> None:
    import torch
    import torch.distributed as dist
    extra: Dict[str, Any] = {}
    if backend == "nccl":
        torch.cuda.set_device(rank)
        extra["device_id"] = torch.device("cuda", rank)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=TIMEOUT_S), **extra)
    gpu = torch.cuda.get_device_name(rank) if backend == "nccl" else "cpu"
    out: Dict[str, Any] = {"rank": rank, "backend": backend, "gpu": gpu, "scenarios": {}}
    for s in SCENARIOS[:-1]:
        out["scenarios"][s["name"]] = scenario(s, rank, world)
    out["timings"] = timings(rank, world, calls)
    out["scenarios"]["absent"] = scenario(SCENARIOS[-1], rank, world)
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def launch(nproc: int, calls: int, backend: str) -> List[Dict[str, Any]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(nproc),
                               "--calls", str(calls), "--backend", backend], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(nproc)]
    results = []
    for r, p in enumerate(procs):
        try:
            log, _ = p.communicate(timeout=480)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit("a rank hung for 480 s") from None
        lines = [x for x in log.splitlines() if x.startswith("RESULT ")]
        if p.returncode or not lines:
            raise SystemExit(f"rank {r} exited {p.returncode}:\n{log}")
        results.append(json.loads(lines[-1][len("RESULT "):]))
    return results


def report(results: List[Dict[str, Any]]) -> str:
    lines = [f"{results[0]['backend']}, {len(results)} ranks: "
             + ", ".join(r["gpu"] for r in results)]
    for s in SCENARIOS:
        per = [r["scenarios"][s["name"]] for r in results]
        present = [p for p in per if not p.get("absent")]
        same = all({k: v for k, v in p.items() if k not in ("local", "ms")} ==
                   {k: v for k, v in present[0].items() if k not in ("local", "ms")}
                   for p in present)
        lines += ["", f"== {s['name']}: every rank the same result: {same}"]
        for r, p in enumerate(per):
            lines.append(f"  rank {r}: " + ("never called in" if p.get("absent") else
                         f"error after {p['ms']:.1f} ms" if "error" in p else
                         f"own choice {p['local']} -> agreed "
                         f"{[a['selected'] for a in p['agreed']]} ({p['ms']:.2f} ms)"))
        first = present[0]
        lines += ["", first.get("error") or first["text"]]
    lines += ["", "== timings, 100 layers, slowest rank per round (ms): median / p90 / min"]
    for name in results[0]["timings"]:
        rounds = [max(r["timings"][name][i] for r in results)
                  for i in range(len(results[0]["timings"][name]))]
        q = sorted(rounds)
        p90 = q[int(0.9 * (len(q) - 1))]
        lines.append(f"  {name:18} {statistics.median(q):7.3f} / {p90:7.3f} / {q[0]:7.3f}  "
                     f"({len(q)} rounds)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--json", help="also write every rank's raw results here")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.calls, args.backend)
        return
    missing = [m for m in ("torch", "hydra", "omegaconf", "yaml", "packaging")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"nccl_agree: missing {', '.join(missing)}; install selector's "
                         "dependencies (pip install hydra-core omegaconf) first")
    import torch
    if args.backend == "nccl" and torch.cuda.device_count() < args.nproc:
        raise SystemExit(f"nccl_agree: needs {args.nproc} GPUs, found "
                         f"{torch.cuda.device_count()}")
    results = launch(args.nproc, args.calls, args.backend)
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
