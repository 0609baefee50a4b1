"""selector's printed SGLang command started by SGLang 0.5.23's own code (sglang_command.py): a
real checkpoint directory per scenario, ServerArgs from exactly the printed argv, SGLang's whole
resolution pipeline with its model overrides and hooks, the loader's quantization config, the
quant method's create_weights checks, runner / GEMM. Every printed command is honored (SGLang
runs what selector names); every other difference has an explanation with SGLang's source line.

SELECTOR_SGLANG_SEED picks the seed (pytest's header prints it). Each machine is one SGLang child
(its start is most of the time: about 10 CPU-seconds, then about 25 ms a question; selector's
plan about 10 ms a scenario; 5,000 scenarios on all 56 machines: about 16 CPU-minutes), so by
default the sweep is CI's share:
CI_COUNT scenarios on CI_MACHINES machines drawn by the seed. SELECTOR_SGLANG_COMMANDS=N runs N
scenarios on every machine (56: by hand), SELECTOR_SGLANG_MACHINES=K on K of them;
SELECTOR_SGLANG_SHARD=K/N (K from 0) runs only the scenarios on the K-th of N balanced sets of
the draw's machines (N runs of one seed cover it), SELECTOR_SGLANG_WORKERS the children at once
(2)."""
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
    k, of = sweep.shard()
    part = f" (shard {k}/{of} of {n})" if of > 1 else ""
    print(f"seed {report.seed} ({sweep.SEED_VAR}): {len(report.rows)} scenarios{part} on "
          f"{len({r.scenario.machine for r in report.rows})} machines, {len(printed)} printed a "
          f"command, {len(honored)} honored, {len(report.differ)} differ, "
          f"{len(report.unexplained)} unexplained")
    assert len(report.rows) >= n or of > 1
    # the sweep reaches printed commands (SGLang starts nowhere without sglang-kernel)
    assert printed or not any(r.scenario.kernel for r in report.rows)
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


def test_the_shards_cover_the_sweep_once(monkeypatch):
    """SELECTOR_SGLANG_SHARD=K/N: the N shards of one draw split it by machine, each scenario in
    exactly one; a value that is not K/N with 0 <= K < N stops with one line naming it."""
    import random
    rows = sweep.scenarios(600, random.Random(5), sweep.parser_choices())
    parts = [sweep.in_shard(rows, k, 4) for k in range(4)]
    assert sum(len(p) for p in parts) == len(rows) and all(parts)
    assert max(map(len, parts)) - min(map(len, parts)) <= max(
        sum(s.machine == m for s in rows) for m in {s.machine for s in rows})
    machines = [{s.machine for s in p} for p in parts]
    assert all(not (a & b) for i, a in enumerate(machines) for b in machines[i + 1:])
    assert sweep.in_shard(rows, 0, 1) == rows
    for bad in ("4/4", "1", "x/2"):
        monkeypatch.setenv(sweep.SHARD_VAR, bad)
        try:
            sweep.shard()
        except SystemExit as e:
            assert sweep.SHARD_VAR in str(e) and repr(bad) in str(e)
        else:
            raise AssertionError(bad)


def test_a_row_is_explained_layer_by_layer_only_when_each_layer_is():
    """each-layer-explained: the MoE request built by SGLang and refused by selector, the
    linear GEMM SGLang's automatic one where the plan prints another: explained; the same row
    with a linear layer whose printed flag SGLang does not honor is not."""
    from sglang_command_explain import explain
    s = sweep.Scenario("11.0", False, True, True, "glm4_moe", "modelopt_fp4", 4, 1, "deep_gemm",
                       "auto")
    argv = ["--model-path", "d", "--moe-runner-backend", "marlin", "--fp4-gemm-backend",
            "marlin"]
    planned = sweep.Planned(argv, "marlin", "marlin", (), "", ("marlin",))
    ran = {"start": "", "moe": {"runner": "marlin", "error": ""},
           "linear": {"runner": "marlin", "error": ""}}
    asked = {"start": "", "moe": {"runner": "deep_gemm", "error": ""},
             "linear": {"runner": "flashinfer_cutlass", "error": ""}}
    row = sweep.Row(s, planned, ran, asked)
    assert row.honored and explain(row) == "each-layer-explained"
    wrong = dict(ran, linear={"runner": "flashinfer_cutlass", "error": ""})
    assert explain(sweep.Row(s, planned, wrong, asked)) is None  # not honored
    other = dict(asked, moe={"runner": "triton", "error": ""})  # the request substituted,
    assert explain(sweep.Row(s, planned, ran, other)) == "each-layer-explained"  # not printed
    printed = sweep.Planned(argv[:2] + ["--moe-runner-backend", "deep_gemm"] + argv[4:],
                            "marlin", "marlin", (), "", ("marlin",))
    assert explain(sweep.Row(s, printed, ran, other)) is None  # asked name printed, not run
