"""Spawned gloo process groups for the distributed tests: one process per rank, each with its
own overrides, so that one machine simulates a heterogeneous cluster.

`run_ranks(world, scenarios)` starts `world` processes of this file and returns, per rank, the
outcome of each scenario. A scenario is a dict:
    {"name": str, "overrides": {rank: [override, ...]}, "default": [override, ...],
     "layers": [{layer keys}, ...], "absent": [rank, ...]}
An absent rank never calls agree_all (it sleeps past the group's timeout, then leaves); a dead
rank's process ends (`die_after` seconds in) without calling it; `misuse: {rank: kind}` makes
that rank pass agree_all a wrong argument (one Decision, an iterator that raises, strings).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, scenarios: Sequence[Dict[str, Any]], tmp: Path, env: Dict[str, str], *,
              timeout_s: float = 30.0, deadline_s: float = 300.0) -> List[List[Dict[str, Any]]]:
    """Per rank, the outcome of each scenario: {"agreed": [...], "text": str} or {"error": str}.

    `timeout_s` is the process group's timeout; every process is killed after `deadline_s`
    (a hang fails the test instead of blocking the suite). `env` is a child Python's
    environment (helpers.child_env(): each rank imports the selector and Hydra the caller does)."""
    plan = tmp / "plan.json"
    plan.write_text(json.dumps(list(scenarios)))
    env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "GLOO_SOCKET_IFNAME": "lo"}
    procs = [subprocess.Popen([sys.executable, str(Path(__file__)), str(r), str(world),
                               str(plan), str(tmp / f"rank{r}.json"), str(timeout_s)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    end = time.monotonic() + deadline_s
    logs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"ranks still running after {deadline_s} s: a hang") from None
        logs.append(out.decode(errors="replace"))
    results = []
    for r, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{log}"
        results.append(json.loads((tmp / f"rank{r}.json").read_text()))
    return results


def _scenario(s: Dict[str, Any], rank: int, timeout_s: float) -> Dict[str, Any]:
    """What one rank does: the engine recipe of docs/distributed.md."""
    import selector
    from selector.distributed import maybe_agree_all

    if rank in s.get("absent", ()):
        time.sleep(timeout_s + 3)
        return {"absent": True}
    overrides = s.get("overrides", {}).get(str(rank), s.get("default", []))
    try:
        sel = selector.load(overrides=overrides)
        decisions: Any = [sel.select(**layer) for layer in s["layers"]]
    except Exception as e:  # still take part: every rank then raises the same error
        decisions = e
    misuse = s.get("misuse", {}).get(str(rank))
    if misuse == "one_decision":  # agree_all(decision) instead of agree_all([decision])
        decisions = decisions[0]
    elif misuse == "raising_iterator":
        first = decisions[0]

        def gen():
            yield first
            raise RuntimeError("the engine's layer walk failed")
        decisions = gen()
    elif misuse == "strings":
        decisions = ["not a decision"]
    t0 = time.monotonic()
    try:
        agreed = maybe_agree_all(decisions)
    except selector.SelectorError as e:
        return {"error": str(e), "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - what agree_all must never raise; the rank lives on
        time.sleep(s.get("linger", 0))
        return {"other": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0}
    return {"agreed": [a.to_dict() for a in agreed], "text": str(agreed[0]),
            "local": [getattr(a.local, "selected", None) for a in agreed],
            "seconds": time.monotonic() - t0}


def main(argv: List[str]) -> None:
    rank, world, plan, out, timeout_s = (int(argv[0]), int(argv[1]), Path(argv[2]),
                                         Path(argv[3]), float(argv[4]))
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    scenarios = json.loads(plan.read_text())
    for s in scenarios:  # a rank that dies (its process ends) while the others agree
        if rank in s.get("dead", ()):
            out.write_text(json.dumps([{"dead": True}]))
            time.sleep(s.get("die_after", 1.0))
            os._exit(0)
    try:
        results = [_scenario(s, rank, timeout_s) for s in scenarios]
    finally:
        if not any(s.get("absent") or s.get("dead") for s in scenarios):
            dist.destroy_process_group()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
