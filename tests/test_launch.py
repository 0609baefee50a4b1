"""The launch plan (issue 22): `explain --model DIR engine=vllm|sglang` with parallel sizes
prints per layer group the backend, kernel and per-rank sizes, and the launch flags, checked
against every MoE and linear layer of the checkpoint."""
from __future__ import annotations

import json
import shlex

import pytest
from helpers import REPO, load, run_main
from launch_fixtures import mixed_linear, mixed_moe

import selector
from selector.core.engine_flags import VLLM_MOE_ACCEPTS

R1 = str(REPO / "examples" / "deepseek-r1-nvfp4")
B200 = ("engine=vllm", "platform=b200", "stack=vllm_0_32")
PRO = ("engine=vllm", "platform=rtx_pro_6000", "stack=vllm_0_33")
SPARK = ("engine=vllm", "platform=dgx_spark", "stack=vllm_0_33")


def launch(*overrides, model=R1):
    return load(*overrides).launch_plan(model)


def group(lp, kind, scheme=None, projection=None):
    return next(g for g in lp.groups if g.kind == kind and (scheme is None or g.scheme == scheme)
                and (projection is None or any(p.endswith(projection) for p in g.projections)))


def test_deepseek_r1_on_b200_tp4_dp2_ep():
    """vLLM's split: with --enable-expert-parallel the experts run EP = TP x DP = 8 and MoE TP 1;
    dense layers TP 4 (column-parallel N / 4, row-parallel K / 4)."""
    lp = launch(*B200, "parallel.tp=4", "parallel.dp=2", "parallel.ep=8")
    assert (lp.topology.moe_tp, lp.topology.ep, lp.topology.linear_tp) == (1, 8, 4)
    experts = group(lp, "routed experts")
    assert experts.per_rank["ep_size"] == 8 and experts.per_rank["tp_size"] == 1
    assert experts.per_rank["intermediate_size"] == 2048 and experts.per_rank["num_experts"] == 256
    assert experts.decision.layer["ep_size"] == 8  # decided with the per-rank fields
    assert experts.backend == "flashinfer_trtllm"
    assert experts.kernels("vllm")[0] == "TrtLlmNvFp4ExpertsMonolithic"
    up = group(lp, "dense MLP", projection="gate_up_proj")
    down = group(lp, "dense MLP", projection="down_proj")
    # the fused gate_up_proj (vLLM's module) has N = 2 x I, split over TP
    assert (up.per_rank["hidden_size"], up.per_rank["intermediate_size"]) == (7168, 2 * 18432 // 4)
    assert (down.per_rank["hidden_size"], down.per_rank["intermediate_size"]) == (18432 // 4, 7168)
    assert lp.flags == ("--tensor-parallel-size", "4", "--data-parallel-size", "2",
                        "--enable-expert-parallel", "--moe-backend", "flashinfer_trtllm",
                        "--linear-backend", "flashinfer_cutedsl")
    assert lp.ok and not lp.conflicts
    assert lp.command() == ("vllm serve " + shlex.quote(R1) + " " + " ".join(lp.flags))


def test_without_expert_parallelism_the_experts_split_by_tp_times_dp():
    lp = launch(*B200, "parallel.tp=2", "parallel.dp=2")
    experts = group(lp, "routed experts")
    assert experts.per_rank["intermediate_size"] == 2048 // 4
    assert experts.per_rank["ep_size"] == 1 and experts.per_rank["tp_size"] == 4
    assert "--enable-expert-parallel" not in lp.flags


def test_mixed_moe_global_flag_that_breaks_fp8_experts(tmp_path):
    """The #40082 review: --moe-backend flashinfer_b12x fits the NVFP4 experts, and vLLM's FP8
    oracle refuses it for the FP8 experts; the plan names those layers and passes instead the
    first backend every MoE layer takes."""
    lp = launch(*PRO, "policy.moe_backend=flashinfer_b12x", model=mixed_moe(tmp_path))
    assert group(lp, "routed experts", "nvfp4").backend == "flashinfer_b12x"
    (c,) = lp.conflicts
    assert c.flag == ("--moe-backend", "flashinfer_b12x")
    (b,) = c.breaks
    assert b.group.scheme == "fp8_tensor" and b.group.layers == (2, 3)
    assert "map_fp8_backend" in b.source and "flashinfer_b12x" in b.message
    assert c.instead[0].flags == ("--moe-backend", "flashinfer_cutlass")
    assert "flashinfer_cutlass" in VLLM_MOE_ACCEPTS["fp8_tensor"]
    assert "--moe-backend" in lp.flags and "flashinfer_b12x" not in lp.flags
    assert lp.ok
    rc, out, err = run_main(["explain", "--model", str(tmp_path / "mixed_moe"), *PRO,
                             "policy.moe_backend=flashinfer_b12x"])
    assert rc == 0, err
    assert "breaks routed experts (fp8_tensor, layers 2-3)" in out
    assert "instead (in the flags above): --moe-backend flashinfer_cutlass" in out


def test_mixed_moe_flag_every_layer_takes_has_no_conflict(tmp_path):
    """flashinfer_cutlass (the DGX Spark's automatic choice) is taken by vLLM's FP8 oracle."""
    lp = launch(*SPARK, model=mixed_moe(tmp_path))
    i = lp.flags.index("--moe-backend")
    assert not lp.conflicts and lp.flags[i + 1] == "flashinfer_cutlass"


def test_w4a4_and_w4a16_linear_get_one_backend_each(tmp_path):
    """Different backends per linear scheme: vLLM's linear_backend_per_quant, one JSON value."""
    lp = launch(*SPARK, "parallel.tp=2", model=mixed_linear(tmp_path))
    assert group(lp, "dense MLP", "nvfp4").engine_backend == "flashinfer_cutlass"
    assert group(lp, "attention", "nvfp4_w4a16").engine_backend == "marlin"
    i = lp.flags.index("--kernel-config")
    assert json.loads(lp.flags[i + 1]) == {"linear_backend_per_quant": {
        "nvfp4_w4a4": "flashinfer_cutlass", "nvfp4_w4a16": "marlin"}}
    qkv = group(lp, "attention", projection="qkv_proj")  # vLLM's fused q, k, v: 4096 + 2 x 1024
    o = group(lp, "attention", projection="o_proj")
    assert qkv.per_rank["intermediate_size"] == (4096 + 2 * 1024) // 2
    assert o.per_rank["hidden_size"] == 2048


def test_one_linear_backend_for_every_scheme_is_one_flag(tmp_path):
    lp = launch(*B200, model=mixed_linear(tmp_path))
    assert lp.flags == ("--linear-backend", "flashinfer_cutedsl")


def test_sglang_flags():
    lp = launch("engine=sglang", "platform=b200", "stack=sglang_0_5_23", "parallel.tp=8",
                "parallel.ep=4")
    assert (lp.topology.moe_tp, lp.topology.ep) == (2, 4)
    assert group(lp, "routed experts").per_rank["intermediate_size"] == 1024
    assert lp.flags[:4] == ("--tp-size", "8", "--ep-size", "4")
    assert "--moe-runner-backend" in lp.flags
    assert lp.command().startswith("python -m sglang.launch_server --model-path ")


def test_sglang_plan_passes_fp8_gemm_backend_with_per_rank_sizes(tmp_path):
    """Issue 31 item 4: SGLang's FP8 linear layers get --fp8-gemm-backend (fields/exec_.py
    cli_name), its NVFP4 and FP8 experts one --moe-runner-backend, each group decided with its
    per-rank sizes (MoE TP = tp / ep: entrypoints/engine.py)."""
    from launch_fixtures import mixed_block_moe
    model = mixed_block_moe(tmp_path)
    lp = load("engine=sglang", "platform=b200", "stack=sglang_0_5_23", "parallel.tp=4",
              "parallel.ep=2").launch_plan(model)
    assert (lp.topology.moe_tp, lp.topology.ep, lp.topology.linear_tp) == (2, 2, 4)
    experts = [g for g in lp.groups if g.op == "moe" and g.planned]
    assert {g.scheme for g in experts} == {"nvfp4", "fp8_block"}
    assert all(g.per_rank["tp_size"] == 2 and g.per_rank["ep_size"] == 2 for g in experts)
    linear = [g for g in lp.groups if g.op == "linear" and g.planned]
    assert linear and all(g.scheme == "fp8_block" and g.per_rank["tp_size"] == 4
                          for g in linear)
    flags = list(lp.flags)
    i = flags.index("--fp8-gemm-backend")
    assert flags[i + 1] == linear[0].engine_backend
    assert flags.count("--moe-runner-backend") == 1 and "--fp4-gemm-backend" not in flags
    assert "--fp8-gemm-runner-backend" not in lp.command()


def test_json_and_text(tmp_path):
    rc, out, err = run_main(["explain", "--model", R1, *B200, "parallel.tp=8", "parallel.ep=8",
                             "--format", "json"])
    assert rc == 0, err
    data = json.loads(out)
    assert data["launch"]["flags"][-4:] == ["--moe-backend", "flashinfer_trtllm",
                                            "--linear-backend", "flashinfer_cutedsl"]
    assert data["launch"]["topology"] == {"moe_tp": 1, "ep": 8, "linear_tp": 8,
                                          "flags": ["--tensor-parallel-size", "8",
                                                    "--enable-expert-parallel"],
                                          "source": data["launch"]["topology"]["source"]}
    kinds = {g["kind"] for g in data["launch"]["groups"]}
    assert {"routed experts", "shared experts", "dense MLP", "attention", "LM head"} <= kinds
    assert data["kinds"]  # the checkpoint plan is still there
    rc, text, _ = run_main(["explain", "--model", R1, *B200, "parallel.tp=8", "parallel.ep=8"])
    assert rc == 0 and "launch plan for vLLM" in text and "\nflags: " in text
    assert "32 of 256 experts" in text and "command: vllm serve " in text


@pytest.mark.parametrize("overrides,needle", [
    (("parallel.tp=4", "parallel.ep=2"), "parallel.ep: 2 is not accepted by vLLM"),
    (("parallel.ep=2",), "parallel.ep: 2 is not accepted by vLLM"),
    (("parallel.tp=0",), "parallel.tp"),
    (("parallel.dp=abc",), "parallel.dp"),
    (("parallel.pp=2",), "parallel"),
    (("layer.ep_size=8",), "layer.ep_size: 8 is derived per layer by the launch plan"),
])
def test_bad_parallel_sizes_exit_2(overrides, needle):
    rc, out, err = run_main(["explain", "--model", R1, *B200, *overrides])
    assert rc == 2 and needle in err and "Traceback" not in err, err


def test_expert_parallelism_needs_experts(tmp_path):
    """Found by tests/vllm/test_launch_flags.py: vLLM's ModelConfig refuses
    --enable-expert-parallel for a model without experts."""
    with pytest.raises(selector.SelectorError, match="parallel.ep: 8 is not accepted: this "
                       "checkpoint has no MoE layer"):
        launch(*B200, "parallel.tp=8", "parallel.ep=8", model=mixed_linear(tmp_path))


def test_sglang_ep_must_divide_tp():
    with pytest.raises(selector.SelectorError, match="divides the tensor-parallel size"):
        launch("engine=sglang", "platform=b200", "stack=sglang_0_5_23", "parallel.tp=6",
               "parallel.ep=4")


def test_size_that_does_not_split_is_a_problem():
    """moe_intermediate_size 2048 over MoE TP 3: exit 1 with the reason."""
    lp = launch(*B200, "parallel.tp=3")
    experts = group(lp, "routed experts")
    assert any("moe_intermediate_size 2048 is not divisible by the MoE tensor-parallel size 3"
               in p for p in experts.problems)
    assert not lp.ok
    rc, out, _ = run_main(["explain", "--model", R1, *B200, "parallel.tp=3"])
    assert rc == 1 and "!! routed experts: moe_intermediate_size 2048 is not divisible" in out
    assert "command: vllm" not in out and "command: none" in out  # nothing to copy


def test_no_engine_no_launch_plan():
    with pytest.raises(selector.SelectorError, match="engine=vllm"):
        launch("platform=b200", "stack=vllm_0_32")
    rc, out, _ = run_main(["explain", "--model", R1, "platform=b200", "stack=vllm_0_32"])
    assert rc == 0 and "launch plan" not in out


def test_nothing_fits_is_exit_1():
    """No GPU: every NVFP4 group under vLLM has no backend (or emulation, whatever the catalogue
    says today); a group without a backend gives no flag and exit 1."""
    lp = launch("engine=vllm", "platform=cpu", "stack=vllm_0_32", "policy.exclude=[emulation]")
    assert all(g.backend is None for g in lp.groups if g.decision is not None)
    assert not lp.ok and "--moe-backend" not in lp.flags
