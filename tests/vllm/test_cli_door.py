"""Issue 44: the CLI door (cli_door.py). A seeded random sweep of checkpoints read by
`explain --model` as a user runs it and by vLLM 0.32.0's own code; the printed flags fed back to
vLLM's argument parser and model build. SELECTOR_CLI_DOOR_SEED picks the seed (unset: one drawn
per run and printed), SELECTOR_CLI_DOOR_CASES the count (default 60 here; the issue's sweep is
5,000: run it with the variable set). Target: 0 unexplained differences. Seeds 9001 (1,200
checkpoints) and 31337 (600) had none on 2026-12-07; every printed flag set built
(docs/checkpoints.md)."""
from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import cli_door
import pytest

COUNT = int(os.environ.get("SELECTOR_CLI_DOOR_CASES", "60"))
# SELECTOR_CLI_DOOR_SHARD=K/N: only the cases K, K+N, K+2N, ... of the seed's sweep (the same
# checkpoints drawn in every shard), so one large sweep runs as N processes side by side
SHARD = tuple(int(x) for x in os.environ.get("SELECTOR_CLI_DOOR_SHARD", "0/1").split("/"))
# (substring of a difference, why)
EXPLAINED = [
    ("parallel.ep: ", "selector refuses parallel.ep for a model without MoE layers (exit 2); "
     "vLLM 0.32.0 config/model.py counts the experts of the config class, and NemotronHConfig "
     "defaults n_routed_experts to 8 for Nemotron-H-8B, which has none (as in "
     "test_launch_shapes.py EXPLAINED)"),
    ("has a scheme selector plans", "a checkpoint none of whose modules has a layer.quant "
     "value (an MXFP4 config on a dense model: every linear layer unquantized, mxfp4.py "
     "Mxfp4Config.get_quant_method; FP8 per-channel weights with static activations): "
     "`explain --model` has nothing to plan and says so (exit 2); vLLM loads it"),
]


@pytest.fixture(scope="module")
def seed():
    return cli_door.seed()


def test_printed_flags_build_and_every_module_is_read_as_vllm_reads_it(seed, tmp_path):
    t = time.time()
    cases = cli_door.make_cases(seed, COUNT, tmp_path)[SHARD[0]::SHARD[1]]
    # SELECTOR_CLI_DOOR_FROM=I: the shard's cases from its I-th on (a slow shard's tail run
    # beside it)
    cases = cases[int(os.environ.get("SELECTOR_CLI_DOOR_FROM", "0")):]
    log = os.environ.get("SELECTOR_CLI_DOOR_LOG")  # one JSON line per finished case
    cli_door.run(cases, Path(log) if log else None)
    rcs = Counter(c.rc for c in cases)
    diffs = [f"{c.label} {c.platform} tp{c.tp} dp{c.dp}{' ep' if c.ep else ''}: {d}"
             for c in cases for d in c.differences]
    explained = [d for d in diffs if any(key in d for key, _ in EXPLAINED)]
    unexplained = [d for d in diffs if d not in explained]
    print(f"CLI door: SELECTOR_CLI_DOOR_SEED={seed}, shard {SHARD[0]}/{SHARD[1]}, "
          f"{len(cases)} checkpoints, selector exit "
          f"codes {dict(sorted(rcs.items()))}, vLLM alone refused "
          f"{sum(bool(c.vllm_alone) for c in cases)}, printed flag sets built "
          f"{sum(c.rc == 0 and not c.vllm_flags for c in cases)} of {rcs[0]}, differences "
          f"{len(diffs)}, explained {len(explained)}, unexplained {len(unexplained)}, not "
          f"compared (vLLM's registry could not inspect the class) "
          f"{sum(bool(c.harness_error) for c in cases)} "
          f"({time.time() - t:.0f} s)")
    assert rcs[0] > len(cases) // 3
    for d in unexplained:
        print("UNEXPLAINED", d)
    assert not unexplained, "\n".join(unexplained[:30])
