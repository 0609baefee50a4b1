"""Every engine's automatic choice beside selector's in a launch plan (issue 45 item 3): the plan
lists, per planned group, what the engine runs with no backend choice (SGLang's default and model
overrides, vLLM's oracle order as the catalogue transcribes it, TensorRT-LLM's AUTO and its NVFP4
GEMM autotuner), passes a choice only where it changes the engine's, and passes none with
policy.engine_default=true."""
from __future__ import annotations

import json

import pytest
from helpers import REPO, load, run_main

R1 = REPO / "examples" / "deepseek-r1-nvfp4"
ENGINES = [("vllm", ("stack=vllm_0_33",), "vllm serve"),
           ("sglang", ("stack=sglang_0_5_23",), "python -m sglang.launch_server"),
           ("trtllm", ("stack=trtllm_main",), "trtllm-serve")]


@pytest.mark.parametrize("engine,stack,head", ENGINES)
def test_every_plan_shows_the_engines_choice_beside_selectors(engine, stack, head):
    rc, out, err = run_main(["explain", "--model", str(R1), f"engine={engine}", *stack,
                             "platform=b200", "--format", "json"])
    assert rc == 0, err
    launch = json.loads(out)["launch"]
    assert launch["automatic"], launch
    for row in launch["automatic"]:
        assert row["engine"] is not None and row["engine"]["names"], row
        assert row["selected"] and row["key"]
        assert row["passed"] == (row["key"] in launch["flags"] or row["key"] in launch["config"]
                                 or row["key"] in launch["env"]) or engine == "vllm"
    rc, text, _ = run_main(["explain", "--model", str(R1), f"engine={engine}", *stack,
                            "platform=b200"])
    assert "engine's own choice for routed experts (nvfp4)" in text


@pytest.mark.parametrize("engine,stack,head", ENGINES)
def test_engine_default_passes_no_backend_choice(engine, stack, head):
    lp = load(f"engine={engine}", *stack, "platform=b200",
              "policy.engine_default=true").launch_plan(R1)
    assert lp.ok and not lp.env and not lp.config, lp
    assert not any(f.endswith("-backend") or f == "--kernel-config" for f in lp.flags)
    assert all(not passed for *_, passed in lp.automatic)
    assert lp.command().startswith(head)


def test_vllm_oracle_model_is_shown_but_not_trusted_to_drop_a_flag():
    """vLLM's own choice is modelled by the catalogue's order, which docs/vllm-parity.md shows
    differs at places: the flag stays, and the plan says why."""
    lp = load("engine=vllm", "stack=vllm_0_33", "platform=b200").launch_plan(R1)
    moe = [(g, a, p) for g, a, _k, p in lp.automatic if g.op == "moe"]
    assert moe and all(p and not a.exact for g, a, p in moe)
    assert "--moe-backend" in lp.flags
