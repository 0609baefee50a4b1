"""selector's printed SGLang command started by SGLang 0.5.23's own code (sglang_command.py): a
real checkpoint directory per scenario, ServerArgs from exactly the printed argv, SGLang's whole
resolution pipeline with its model overrides and hooks, the loader's quantization config, the
quant method's create_weights checks, runner / GEMM. Every printed command is honored (SGLang
runs what selector names); every other difference has an explanation with SGLang's source line.

SELECTOR_SGLANG_SEED picks the seed (pytest's header prints it). Each machine is one SGLang child
(its start is most of the time: about 15 CPU-seconds), so by default the sweep is CI's share:
CI_COUNT scenarios on CI_MACHINES machines drawn by the seed. SELECTOR_SGLANG_COMMANDS=N runs N
scenarios on every machine (56: by hand), SELECTOR_SGLANG_MACHINES=K on K of them."""
from __future__ import annotations

import os

import sglang_command as sweep

CI_COUNT, CI_MACHINES = 300, 4


def test_every_printed_command_is_honored_and_every_difference_explained():
    by_hand = bool(os.environ.get(sweep.COUNT_VAR))
    n = int(os.environ.get(sweep.COUNT_VAR) or CI_COUNT)
    machines = int(os.environ.get(sweep.MACHINES_VAR) or (0 if by_hand else CI_MACHINES))
    report = sweep.run(n, machines=machines or None)
    printed = report.printed
    honored = [r for r in printed if r.honored]
    print(f"seed {report.seed} ({sweep.SEED_VAR}): {len(report.rows)} scenarios on "
          f"{len({r.scenario.machine for r in report.rows})} machines, {len(printed)} printed a "
          f"command, {len(honored)} honored, {len(report.differ)} differ, "
          f"{len(report.unexplained)} unexplained")
    assert len(report.rows) >= n
    assert printed  # the sweep reaches printed commands
    bad = [f"{r.scenario.label()}: selector prints {r.planned.argv and r.planned.argv[2:]} "
           f"naming moe {r.planned.moe}, linear {r.planned.linear}; SGLang from it: "
           f"{r.follow}; asked: {r.asked}" for r in report.unexplained]
    assert not bad, "\n".join(bad[:30])
    assert len(honored) == len(printed), [r.scenario.label() for r in printed if not r.honored]


def test_the_requested_names_are_the_parsers_choices():
    """Every name SGLang's parser accepts for the three backend flags is requested (taken from
    the parser, so a release that adds one sweeps it)."""
    import random
    choices = sweep.parser_choices()
    assert {"triton", "deep_gemm", "flashinfer_trtllm", "marlin"} <= set(choices["moe"])
    rows = sweep.scenarios(4000, random.Random(1), choices)
    assert {s.moe for s in rows if s.has_moe} == set(choices["moe"]) | {"auto"}
    for flag in ("fp8", "fp4"):
        asked = {s.gemm for s in rows if s.linear[1] == flag}
        assert asked == set(choices[flag]) | {"auto"}, flag
