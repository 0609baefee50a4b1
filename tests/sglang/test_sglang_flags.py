"""Every SGLang flag selector prints is accepted by SGLang 0.5.23's own parser: ServerArgs is
built from the printed argv (`ServerArgs.add_cli_args`, `ServerArgs.from_cli_args`) and holds
the printed values in the fields selector names (selector/engines/sglang.py FIELDS)."""
from __future__ import annotations

import random
import shlex
from pathlib import Path

import pytest
import sglang_sweep as sweep
from sglang_sim import server_args

from selector.engines.sglang import FIELDS

ROOT = Path(__file__).resolve().parents[2]


def _printed_flags():
    """The flags of selector's decisions over a seeded sweep (every op, scheme, SM, request)."""
    sels = sweep.Selectors()
    rows = sweep.scenarios(1500, random.Random(sweep.seed()), sels.expressible)
    seen = set()
    for s in rows:
        d = sels.decide(s)
        if d.engine and d.engine.flags:
            seen.add(tuple(d.engine.flags))
    return sorted(seen)


def test_every_printed_flag_is_parsed_by_sglang():
    flags = _printed_flags()
    print(f"seed {sweep.seed()} ({sweep.SEED_VAR}); {len(flags)} distinct flag sets")
    assert len(flags) >= 10
    for argv in flags:
        args = server_args(["--model-path", "dummy", *argv])
        for flag, value in zip(argv[::2], argv[1::2]):
            assert getattr(args, FIELDS[flag]) == value, (argv, FIELDS[flag])


@pytest.mark.parametrize("model,extra", [
    ("qwen3-30b-a3b-fp4", ["platform=b200", "parallel.tp=4", "parallel.ep=2"]),
    ("deepseek-v3-fp8", ["platform=h200", "parallel.tp=8"]),
    ("gpt-oss-120b-mxfp4", ["platform=b200", "parallel.tp=2"]),
])
def test_the_launch_command_is_parsed_by_sglang(model, extra):
    import selector
    sel = selector.load(overrides=["engine=sglang", sweep.STACK, *extra])
    plan = sel.launch_plan(ROOT / "tests" / "checkpoint_corpus" / model)
    argv = shlex.split(plan.command())
    assert argv[:3] == ["python", "-m", "sglang.launch_server"], argv
    args = server_args(argv[3:])
    assert args.model_path.endswith(model)
    for flag, value in zip(argv[3::2], argv[4::2]):
        if flag in FIELDS:
            assert getattr(args, FIELDS[flag]) == value, (flag, value)
