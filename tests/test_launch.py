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
from selector.engines.vllm_flags import VLLM_MOE_ACCEPTS

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
    assert experts.decision.layer.ep_size == 8  # decided with the per-rank fields
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
    # SGLang's DeepSeek override already runs flashinfer_trtllm on SM 10.x: no flag for it
    assert "--moe-runner-backend" not in lp.flags
    (g, auto, key, passed), = [a for a in lp.automatic if a[0].op == "moe"]
    assert (g.engine_backend, auto.names, key, passed) == (
        "flashinfer_trtllm", ("flashinfer_trtllm",), "--moe-runner-backend", False)
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


# -- issue 32: per-GPU sizes as vLLM's model classes build them ------------------------------
# (tests/vllm/test_launch_shapes.py compares every module with vLLM's own classes)

CORPUS = REPO / "tests" / "checkpoint_corpus"
H200 = ("engine=vllm", "platform=h200", "stack=vllm_0_32")


def test_deepseek_fused_qkv_a_proj_is_replicated_under_tp():
    """vLLM deepseek_v2.py builds fused_qkv_a_proj with disable_tp: N 2112 on every GPU (the
    plan split it to 264 before)."""
    lp = launch(*H200, "parallel.tp=8", model=CORPUS / "deepseek-v3-fp8")
    g = group(lp, "attention", projection="fused_qkv_a_proj")
    assert (g.per_rank["hidden_size"], g.per_rank["intermediate_size"]) == (7168, 2112)
    assert g.per_rank["tp_size"] == 1 and g.projections == ("fused_qkv_a_proj",)
    lite = launch(*B200, "parallel.tp=16", model=CORPUS / "deepseek-v2-lite-ct-w4a4")
    kv_a = group(lite, "attention", projection="kv_a_proj_with_mqa")
    assert kv_a.per_rank["intermediate_size"] == 576 and kv_a.per_rank["tp_size"] == 1


def test_llama_kv_heads_are_replicated_when_tp_exceeds_them():
    """8 KV heads over 16 GPUs: each holds one (QKVParallelLinear num_kv_head_replicas 2):
    qkv_proj N (32 / 16 + 2 x 1) x 128 = 512 (the plan said 384 before)."""
    lp = launch(*H200, "parallel.tp=16", model=CORPUS / "llama-3.1-8b-modelopt-fp8")
    assert group(lp, "attention", projection="qkv_proj").per_rank["intermediate_size"] == 512


def test_per_gpu_fp8_block_size_vllm_refuses_is_exit_1_without_a_command():
    """Qwen3-30B-A3B compressed-tensors FP8 block at tp 8: intermediate 768 / 8 = 96, not a
    multiple of the 128 block: vLLM's validate_fp8_block_shape_moe refuses it."""
    d = CORPUS / "qwen3-30b-a3b-ct-fp8-block"
    lp = launch(*H200, "parallel.tp=8", model=d)
    assert not lp.ok or not lp.plan.ok
    assert any("validate_fp8_block_shape_moe" in p for p in lp.plan.problems())
    rc, out, _ = run_main(["explain", "--model", str(d), *H200, "parallel.tp=8"])
    assert rc == 1 and "command: vllm" not in out and "validate_fp8_block_shape_moe" in out
    # quant_method fp8 (Fp8MoEMethod) refines the block to 32x32 instead: not refused, and
    # not fp8_block (no layer.quant value)
    fp8 = launch(*H200, "parallel.tp=8", model=CORPUS / "qwen3-30b-a3b-fp8")
    experts = [g for g in fp8.groups if g.kind == "routed experts"]
    assert experts and all(g.scheme != "fp8_block" for g in experts)
    assert "refine_fp8_moe_block_shape" in experts[0].why


def test_tp_larger_than_the_heads_is_refused_per_layer():
    rc, out, _ = run_main(["explain", "--model", str(CORPUS / "llama-3.1-8b-modelopt-fp8"),
                           *H200, "parallel.tp=128"])
    assert rc == 1 and "num_attention_heads 32 is not divisible" in out
    assert "verify_with_parallel_config" in out and "command: vllm" not in out


def test_num_experts_is_the_global_count_under_ep():
    """layer.num_experts is the global count in the launch plan as in explain: 256 experts,
    ep_size 8 (32 on each GPU)."""
    lp = launch(*B200, "parallel.tp=8", "parallel.ep=8")
    e = group(lp, "routed experts")
    assert (e.per_rank["num_experts"], e.per_rank["ep_size"]) == (256, 8)
    d = load(*B200, "layer=deepseek_moe", "layer.ep_size=8").default()
    assert e.decision.selected == d.selected
    # explain --model with layer.ep_size: the same meaning (it said 32 before)
    p = load(*B200, "layer.tp_size=8", "layer.ep_size=8").plan(R1)
    (k,) = [k for k in p.kinds if k.component == "routed experts"]
    assert k.shapes[0].fields["num_experts"] == 256 and k.shapes[0].fields["ep_size"] == 8


def test_warnings_line_sizes_and_why_in_every_format():
    """Issue 32 item 4: the DGX Spark warning is in the text plan and the JSON groups (it was
    only in --format line); --format line under parallel.tp gives per-GPU sizes; --why works
    with --model and engine= (it was ignored)."""
    rc, out, _ = run_main(["explain", "--model", R1, *SPARK])
    assert "routed experts: warning: flashinfer_cutlass: users report garbage output" in \
        " ".join(out.split())
    rc, js, _ = run_main(["explain", "--model", R1, *SPARK, "--format", "json"])
    groups = json.loads(js)["launch"]["groups"]
    assert any("garbage output" in w for g in groups for w in g["warnings"])
    rc, line, _ = run_main(["explain", "--model", R1, *B200, "parallel.tp=8", "--format",
                            "line"])
    assert rc == 0 and "intermediate_size=256 num_experts=256 top_k=8 tp_size=8" in line
    rc, why, _ = run_main(["explain", "--model", R1, *B200, "parallel.tp=8", "--why",
                           "flashinfer_b12x"])
    assert "routed experts experts: flashinfer_b12x: rejected [device]" in why


def test_modelopt_fp8_pb_wo_input_features_off_the_block_are_refused(tmp_path):
    """ModelOpt FP8_PB_WO linear layers need K % 128 on every GPU, replicated ones too (vLLM
    0.32.0 modelopt.py:2232 KFp8Block128.create_weights): DeepSeek-V3 with an expert
    intermediate of 1344 at tp 2, dp 2, ep 4 keeps the shared experts' down_proj whole (K 1344;
    vLLM refuses "FP8_PB_WO requires in divisible by 128, got 1344"; selector planned it before:
    SELECTOR_SHAPES_SEED=5 of tests/vllm/test_launch_shapes.py)."""
    import checkpoint_corpus as corpus
    config, hf = corpus.read(CORPUS / "deepseek-v3-modelopt-fp8-pb-wo")
    d = corpus.write(tmp_path, "ds", ({**config, "moe_intermediate_size": 1344}, hf))
    args = (*H200, "parallel.tp=2", "parallel.dp=2", "parallel.ep=4")
    lp = launch(*args, model=d)
    down = group(lp, "shared experts", projection="down_proj")
    assert (down.per_rank["hidden_size"], down.per_rank["tp_size"]) == (1344, 1)
    assert any("modelopt.py:2232" in p for p in down.problems)
    assert not lp.ok
    rc, out, _ = run_main(["explain", "--model", str(d), *args])
    assert rc == 1 and "command: vllm" not in out and "modelopt.py:2232" in out
    # the same checkpoint with 2048 (16 blocks) is planned
    d2 = corpus.write(tmp_path, "ok", ({**config, "moe_intermediate_size": 2048}, hf))
    assert launch(*args, model=d2).ok


# -- issue 32: why the winner beat the next usable backend, in every format ------------------

def _beat(lp, kind, projection=None):
    return group(lp, kind, projection=projection).to_dict(lp.launch)["beat"]


def test_the_plan_says_why_the_winner_beat_the_next_backend_in_every_format():
    """The catalogue's order: flashinfer_trtllm (rank 10) over flashinfer_cutedsl (rank 20) for
    the R1 experts on a B200; text (a `why` line per group, equal reasons joined), JSON (each
    group's `beat`) and `--format line` (` | why: ` after each decision's line)."""
    args = (*B200, "parallel.tp=4", "parallel.dp=2", "parallel.ep=8")
    lp = launch(*args)
    b = _beat(lp, "routed experts")
    assert (b["winner"], b["next"], b["next_status"], b["by"]) == \
        ("flashinfer_trtllm", "flashinfer_cutedsl", "eligible", "rank")
    assert "rank 10 < 20" in b["text"] and "rank:" in b["source"]
    assert _beat(lp, "dense MLP", "down_proj")["next"] == "flashinfer_cutlass"
    assert all(g.to_dict(lp.launch)["beat"] is None for g in lp.groups if not g.planned)
    text = str(lp)
    assert "why routed experts: flashinfer_trtllm outranks flashinfer_cutedsl (rank 10 < 20)" \
        in " ".join(text.split())
    assert sum(line.startswith("  why ") for line in text.splitlines()) == 2  # linear ones joined
    rc, out, _ = run_main(["explain", "--model", R1, *args, "--format", "json"])
    groups = json.loads(out)["launch"]["groups"]
    assert rc == 0 and [g["beat"]["next"] for g in groups if g["kind"] == "routed experts"] == \
        ["flashinfer_cutedsl"]
    rc, out, _ = run_main(["explain", "--model", R1, *args, "--format", "line"])
    lines = out.splitlines()
    assert rc == 0 and lines and all(" | why: " in line for line in lines)
    assert any("-> flashinfer_trtllm" in line and "outranks flashinfer_cutedsl" in line
               for line in lines)


def test_beat_names_the_preference_entry_the_request_and_the_opt_in():
    # a preference entry of the winner's file: FI CUTLASS first for block FP8 + EP on Hopper
    d = CORPUS / "deepseek-v3-fp8"
    lp = launch(*H200, "parallel.tp=8", "parallel.ep=8", model=d)
    b = _beat(lp, "routed experts")
    assert (b["winner"], b["by"]) == ("flashinfer_cutlass", "preference")
    assert "oracle/fp8.py" in b["source"] and "rank 5 <" in b["text"]
    # an ordered request: the first usable entry wins, the next one is behind by the request
    lp = launch(*H200, "parallel.tp=8", "parallel.ep=8",
                "policy.moe_backend=[triton,flashinfer_cutlass]", model=d)
    b = _beat(lp, "routed experts")
    assert (b["winner"], b["next"], b["by"]) == ("triton", "flashinfer_cutlass", "request")
    assert "lists triton before flashinfer_cutlass" in b["text"]
    # an opt-in backend that ranks first: CuTe-DSL FP4 GEMM on SM 12.x is explicit-only
    lp = launch(*PRO)
    b = _beat(lp, "dense MLP", "down_proj")
    assert (b["next"], b["next_status"], b["by"]) == ("flashinfer_cutedsl", "opt_in", "opt_in")
    assert "policy.allow_opt_in=[flashinfer_cutedsl]" in b["text"] and b["source"]
    # a fallback says so before its rule
    lp = launch("engine=vllm", "platform=h200", "stack=vllm_0_32",
                "policy.moe_backend=flashinfer_trtllm", "policy.strict=false")
    b = _beat(lp, "routed experts")
    assert b["fallback"] and b["text"].startswith("policy.strict=false fell back")


def test_beat_of_the_only_usable_backend_and_of_a_measured_order():
    import dataclasses

    from selector.checkpoint.beat import beat
    from selector.core.notes import Note
    d = load("platform=cpu").default()
    b = beat(d)
    assert (b.winner, b.next, b.by) == ("emulation", None, "only")
    lp = launch(*B200)
    e = group(lp, "routed experts").decision
    times = ({"backend": "flashinfer_cutlass", "median_ms": 0.5},
             {"backend": "flashinfer_trtllm", "median_ms": 0.7})
    m = Note("measured", "info", "flashinfer_cutlass",
             {"times": times, "tokens": 16, "profile": "p.json", "unmeasured": ()})
    cands = tuple(c._replace(status="selected" if c.backend == "flashinfer_cutlass" else
                             "eligible" if str(c.status) == "selected" else c.status)
                  for c in e.candidates)
    cands = tuple(sorted(cands, key=lambda c: c.backend != "flashinfer_cutlass"))
    measured = dataclasses.replace(e, selected="flashinfer_cutlass", candidates=cands,
                                   note_data=(m,))
    b = beat(measured)
    assert (b.next, b.by) == ("flashinfer_trtllm", "measured") and "0.5 ms vs" in b.text
    assert beat(dataclasses.replace(e, selected=None)) is None
