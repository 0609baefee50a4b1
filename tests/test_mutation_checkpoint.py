"""Issue 36: cases the mutation run of the checkpoint shards (tools/mutate.py --group checkpoint,
launch, quant) showed unpinned: each test fails on one recorded surviving mutant and passes on
the real code (docs/mutation.json lists the survivors; docs/guarantees.md renders them)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_fixtures import (
    LLAMA,
    NEMOTRON_H,
    NVFP4_ARGS,
    QWEN3_MOE,
    compressed_tensors_nvfp4,
    nemotron_mixed_precision,
    write_checkpoint,
)
from helpers import REPO, load
from test_checkpoint_next import QWEN3_NEXT

from selector import SelectorError
from selector.checkpoint import arch as A
from selector.checkpoint import quant as Q
from selector.checkpoint.beat import beat
from selector.checkpoint.launchers import _checked
from selector.checkpoint.splits import scheme_problems

P = Path("/x/config.json")
R1 = str(REPO / "examples" / "deepseek-r1-nvfp4")
PRO = ("engine=vllm", "platform=rtx_pro_6000", "stack=vllm_0_33")


def arch(config, tp=1, ep=1):
    return A.read_architecture(config, P, tp, ep)


def mods(config, tp=1, ep=1):
    return {m.name: m for m in arch(config, tp, ep).modules}


# -- arch.py: vLLM's Mixtral rename (mixtral.py hf_to_vllm_mapper) ----------------------------

def test_mixtral_names_map_gate_up_down_to_w1_w3_w2():
    """A quantization config naming Mixtral's experts the Hugging Face way (gate_proj, up_proj,
    down_proj) means the modules vLLM names w1, w3, w2."""
    mix = arch({**LLAMA, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "num_local_experts": 8, "num_experts_per_tok": 2})
    base = "model.layers.3.block_sparse_moe.experts.0"
    assert mix.maps_names
    assert [Q.map_name(mix, f"{base}.{p}.weight") for p in ("gate_proj", "up_proj", "down_proj")] \
        == [f"{base}.{w}.weight" for w in ("w1", "w3", "w2")]


# -- arch.py: an architecture selector has no reader for is refused, never planned from its
# config's common keys (issue 44) ---------------------------------------------------------

FOO = {**LLAMA, "architectures": ["FooForCausalLM"], "model_type": "foo", "num_hidden_layers": 2}


@pytest.mark.parametrize("extra", [{}, {"num_experts": 16, "num_experts_per_tok": 2},
                                   {"moe_num_experts": 64, "moe_k": 6},
                                   {"layers_block_type": ["attention", "mamba"]},
                                   {"first_k_dense_replace": 1, "n_routed_experts": 8}])
def test_an_unmodelled_architecture_is_refused_with_the_modelled_list(extra):
    with pytest.raises(SelectorError, match="architecture not modelled") as exc:
        arch({**FOO, **extra})
    assert "FooForCausalLM" in str(exc.value) and "DeepseekV3ForCausalLM" in str(exc.value)
    assert exc.value.key == "architectures"


def test_qwen3_next_explicit_layer_types_are_read():
    kinds = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    m = mods({**QWEN3_NEXT, "layer_types": kinds})
    assert "model.layers.0.linear_attn.in_proj_qkvz" in m
    assert "model.layers.1.self_attn.qkv_proj" in m and "model.layers.1.linear_attn.out_proj" \
        not in m
    assert "model.layers.2.linear_attn.out_proj" in m


def test_qwen3_next_with_one_expert_still_builds_the_moe_block():
    """qwen3_next.py Qwen3NextDecoderLayer: a sparse MoE block when num_experts > 0."""
    m = mods({**QWEN3_NEXT, "num_experts": 1, "num_experts_per_tok": 1})
    assert dict(m["model.layers.0.mlp.experts"].fields)["num_experts"] == 1
    assert "model.layers.0.mlp.gate_up_proj" not in m


# -- modules.py: list look-ups and vLLM's merged output partitions ---------------------------

@pytest.mark.parametrize("bad", [[1, "x"], ["2"], [True], 5, {"1": 1}])
def test_layer_index_lists_must_hold_integers(bad):
    with pytest.raises(SelectorError, match="mlp_only_layers"):
        arch({**QWEN3_MOE, "num_hidden_layers": 4, "mlp_only_layers": bad})


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_merged_gate_up_splits_into_two_equal_partitions(tp):
    """MergedColumnParallelLinear(output_sizes=[inter, inter]): each GPU holds inter / tp of
    the gate and of the up projection."""
    gate_up = mods(LLAMA, tp)["model.layers.0.mlp.gate_up_proj"]
    inter = LLAMA["intermediate_size"] // tp
    assert gate_up.parts == (inter, inter)
    assert dict(gate_up.fields)["intermediate_size"] == 2 * inter


# -- beat.py: why the winner beat the next usable backend ------------------------------------

def test_the_only_backend_counts_the_rejected_ones():
    d = load("platform=cpu", "layer=dense_linear").default()
    rejected = [c.backend for c in d.candidates if str(c.status) == "rejected"]
    others = len(d.candidates) - len(rejected)
    assert rejected and others > 1 and others != len(rejected)  # some of each, told apart
    b = beat(d)
    assert b.by == "only" and f"({len(rejected)} rejected," in b.text


def _group(lp, kind, projection=None):
    return next(g for g in lp.groups if g.kind == kind and
                (projection is None or any(p.endswith(projection) for p in g.projections)))


def test_a_request_that_was_honoured_is_no_fallback():
    lp = load("engine=vllm", "platform=b200", "stack=vllm_0_32",
              "policy.moe_backend=flashinfer_cutedsl").launch_plan(R1)
    b = _group(lp, "routed experts").to_dict(lp.launch)["beat"]
    assert (b["winner"], b["by"]) == ("flashinfer_cutedsl", "request")
    assert b["fallback"] is False and not b["text"].startswith("policy.strict=false")


def test_an_opt_in_beat_quotes_the_opt_in_rule():
    lp = load(*PRO).launch_plan(R1)
    g = _group(lp, "dense MLP", "down_proj")
    b = g.to_dict(lp.launch)["beat"]
    (nxt,) = [c for c in g.decision.candidates if c.backend == b["next"]]
    assert b["by"] == "opt_in" and nxt.reasons
    assert f"is opt-in ({nxt.reasons[0].message})" in b["text"]


# -- launchers.py: the engine file's launch rules --------------------------------------------

VLLM = ("engine=vllm", "platform=b200", "stack=vllm_0_32")


@pytest.mark.parametrize("tp", [1, 2])
def test_without_expert_parallelism_vllm_runs_the_experts_tp_x_dp(tp):
    """vLLM without --enable-expert-parallel: the MoE layers run TP = tp x dp and EP 1, and the
    command asks for no expert parallelism."""
    lp = load(*VLLM, f"parallel.tp={tp}").launch_plan(R1)
    assert (lp.topology.moe_tp, lp.topology.ep, lp.topology.linear_tp) == (tp, 1, tp)
    assert "--enable-expert-parallel" not in lp.topology.flags
    assert "--enable-expert-parallel" not in lp.command()


@pytest.mark.parametrize("tp,accepted", [(1, "accepted: 1"), (4, "accepted: 1, 4")])
def test_a_bad_expert_parallel_size_lists_the_sizes_vllm_takes(tp, accepted):
    """On one rank only EP 1; on TP 4, EP 1 (off) or 4 (= TP x DP)."""
    with pytest.raises(SelectorError) as exc:
        load(*VLLM, f"parallel.tp={tp}", "parallel.ep=2").launch_plan(R1)
    assert str(exc.value).endswith(f"without it none; {accepted}")


def _launch_conf(**parallel):
    return {"command": ["srv", "{model}"],
            "parallel": {"rule": "ep_divides_tp", "tp": "--tp", **parallel}}


@pytest.mark.parametrize("source", [None, "", "   ", 5])
def test_an_engine_launch_needs_a_source_for_its_parallel_rules(source):
    conf = _launch_conf(**({} if source is None else {"source": source}))
    with pytest.raises(SelectorError, match="engine.launch.parallel.source"):
        _checked(conf, "e.yaml", "E")
    assert _checked(_launch_conf(source="srv/args.py"), "e.yaml", "E")["parallel"]["source"]


@pytest.mark.parametrize("cf", [{"flag": "--cfg"}, {"flag": "--cfg", "name": "c.yaml", "x": 1},
                                "c.yaml"])
def test_an_engine_config_file_is_a_flag_and_a_name(cf):
    with pytest.raises(SelectorError, match="engine.launch.config_file"):
        _checked({**_launch_conf(source="s"), "config_file": cf}, "e.yaml", "E")
    ok = {**_launch_conf(source="s"), "config_file": {"flag": "--cfg", "name": "c.yaml"}}
    assert _checked(ok, "e.yaml", "E")["config_file"] == {"flag": "--cfg", "name": "c.yaml"}


# -- launch.py: one scheme's linear groups that need different backends ----------------------

def test_one_scheme_s_linear_groups_needing_two_backends_is_a_conflict(tmp_path):
    """Llama W4A4 with head_dim 127: the fused qkv_proj's N (36 x 127 = 4572) is not a multiple
    of 8, which flashinfer_cutedsl (the B200's first choice) needs; its other linear layers run
    flashinfer_cutedsl. --linear-backend is one value: the plan says so and offers the backend
    every group can run."""
    cfg = dict(LLAMA, num_hidden_layers=1, num_key_value_heads=2, head_dim=127,
               quantization_config={
                   "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                   "config_groups": {"all": {"targets": ["Linear"], "weights": dict(NVFP4_ARGS),
                                             "input_activations": {**NVFP4_ARGS,
                                                                   "dynamic": "local"}}},
                   "ignore": ["lm_head"]})
    lp = load(*VLLM).launch_plan(write_checkpoint(tmp_path, "odd", cfg))
    backends = {g.projections: g.engine_backend for g in lp.groups if g.scheme == "nvfp4"}
    assert backends[("qkv_proj",)] == "flashinfer_cutlass"
    assert backends[("o_proj",)] == "flashinfer_cutedsl"
    (conflict,) = [c for c in lp.conflicts if c.op == "linear"]
    assert "nvfp4 linear groups need different backends (flashinfer_cutlass, " \
        "flashinfer_cutedsl)" in conflict.problem
    assert any("flashinfer_cutlass is the first backend every" in o.why
               for o in conflict.instead)


# -- splits.py: vLLM's block-FP8 output-partition check (validate_fp8_block_shape) -----------

def _partition_problems(config, tp, name):
    m = mods(config, tp)[name]
    return scheme_problems(m, "fp8_block", tp, 0, "compressed-tensors")


def test_a_merged_layer_off_the_fp8_block_is_refused_on_one_gpu():
    (p,) = _partition_problems({**LLAMA, "intermediate_size": 14400}, 1,
                               "model.layers.0.mlp.gate_up_proj")
    assert p.startswith("output partition 14400 on one GPU is not a multiple of the FP8 block")
    assert _partition_problems(LLAMA, 1, "model.layers.0.mlp.gate_up_proj") == ()


def test_the_fp8_block_problem_names_the_partition_off_the_block():
    """q of 4096 fits the 128 block, k and v of 64 do not: the problem names 64."""
    (p,) = _partition_problems({**LLAMA, "num_attention_heads": 64, "num_key_value_heads": 1,
                                "head_dim": 64}, 1, "model.layers.0.self_attn.qkv_proj")
    assert p.startswith("output partition 64 on one GPU")


def test_a_tensor_parallel_column_layer_off_the_fp8_block_is_refused():
    """Qwen3-Next's in_proj_qkvz (one output) at TP 4: 10496 / 4 = 2624, not a multiple of 128;
    at TP 2 (5248 = 41 x 128) it loads."""
    cfg = {**QWEN3_NEXT, "linear_key_head_dim": 72}
    name = "model.layers.0.linear_attn.in_proj_qkvz"
    (p,) = _partition_problems(cfg, 4, name)
    assert p.startswith("output partition 2624 on one GPU")
    assert _partition_problems(cfg, 2, name) == ()


# -- quant: the ModelOpt exclusion named, vLLM's prefix rename, a group's format -------------

def test_modelopt_names_the_pattern_that_excludes_the_module():
    """An unrelated experts pattern listed first is not the one that excluded o_proj."""
    ex = Q._modelopt_excluded
    assert ex("m.o_proj", ["x.mlp.experts", "m.o_proj"], {}, "w") == "m.o_proj"
    assert ex("m.mlp.experts", ["a.mlp.experts.0.w1", "m.mlp.experts.0.down_proj"], {}, "w") \
        == "m.mlp.experts.0.down_proj"
    # vLLM's language_model. prefix rule: a pattern inside the rest of the name, no other
    lm = "language_model.model.layers.0.self_attn.o_proj"
    assert ex(lm, ["model.layers.0.self_attn"], {}, "w") == "model.layers.0.self_attn"
    assert ex(lm, ["model.lm_head"], {}, "w") is None


def test_a_prefix_rename_renames_the_prefix_only():
    """WeightsMapper's orig_to_new_prefix: Nemotron-H's `backbone.` becomes `model.` at the
    start of a name, not where it recurs inside it."""
    nem = arch({**NEMOTRON_H, "quantization_config": nemotron_mixed_precision()})
    assert Q.map_name(nem, "backbone.layers.0.backbone.x") == "model.layers.0.backbone.x"


def test_a_compressed_tensors_group_format_must_be_a_string(tmp_path):
    q = compressed_tensors_nvfp4()
    gname = next(iter(q["config_groups"]))
    q["config_groups"][gname]["format"] = 5
    cfg = {**QWEN3_MOE, "num_hidden_layers": 2, "quantization_config": q}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SelectorError, match=f"config_groups.{gname}.format"):
        Q.read_quantization(tmp_path, cfg, arch(cfg))


def test_a_bounded_repeat_of_a_repetition_is_refused():
    """`{2}` runs its body twice: a repetition, so one inside it is refused as `*` is."""
    with pytest.raises(SelectorError, match="inside a repetition"):
        Q.bounded_regex("(a*){2}", "k", "w")
    with pytest.raises(SelectorError, match="5 repetitions"):
        Q.bounded_regex("a{2}b{2}c{2}d{2}e{2}", "k", "w")


def _read(tmp_path, cfg):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = arch(cfg)
    return a, Q.read_quantization(tmp_path, cfg, a)


def test_the_unknown_method_refusal_lists_exactly_the_methods_read(tmp_path):
    """vLLM's method names: those selector reads (a refusal of their own keys, or a plan) and
    those it refuses by name; the refusal of an unknown one lists the first kind."""
    read, refused = set(), set()
    for method in ("awq", "gptq", "bitsandbytes", "modelopt", "compressed-tensors", "fp8",
                   "mxfp4", "mxfp8"):
        cfg = {**LLAMA, "num_hidden_layers": 1, "quantization_config": {"quant_method": method}}
        try:
            _read(tmp_path, cfg)
            read.add(method)
        except SelectorError as exc:
            (refused if "quantization_config.quant_method: unknown value" in str(exc)
             else read).add(method)
            if method == "awq":
                listed = str(exc).split("accepted: ", 1)[1].split(".", 1)[0]
    assert refused == {"awq", "gptq", "bitsandbytes"}
    assert listed.split(", ") == sorted(read)


def test_fp8_names_the_ignore_entry_that_skips_the_experts(tmp_path):
    """vLLM's is_layer_skipped for experts: an entry under the experts module skips it; the
    plan names that entry, not another layer's."""
    q = {"quant_method": "fp8", "activation_scheme": "dynamic",
         "modules_to_not_convert": ["model.layers.1.mlp.experts.0.w1",
                                    "model.layers.0.mlp.experts.0.down_proj"]}
    a, got = _read(tmp_path, {**QWEN3_MOE, "num_hidden_layers": 2, "quantization_config": q})
    m = {x.name: x for x in a.modules}
    v = got.verdict_of(m["model.layers.0.mlp.experts"])
    assert v.scheme is None
    assert v.why == "skipped by modules_to_not_convert 'model.layers.0.mlp.experts.0.down_proj'"


def test_fp8_blocks_are_named_rows_by_columns(tmp_path):
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [64, 128]}
    a, got = _read(tmp_path, {**LLAMA, "num_hidden_layers": 1, "quantization_config": q})
    v = got.verdict_of(next(m for m in a.modules if m.name.endswith("o_proj")))
    assert "block 64x128" in v.why and "FP8 64x128 blocks" in v.other


def test_a_quant_method_mxfp8_config_with_a_modelopt_section_keeps_its_exclusions(tmp_path):
    """`quant_method: mxfp8` with a ModelOpt `quantization` section is read as that section
    says (its exclude_modules), not as the MiniMax form (`ignored_layers`)."""
    q = {"quant_method": "mxfp8", "quantization": {
        "quant_algo": "MXFP8", "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}}
    a, got = _read(tmp_path, {**LLAMA, "num_hidden_layers": 1, "quantization_config": q})
    m = {x.name: x for x in a.modules}
    assert got.verdict_of(m["model.layers.0.self_attn.o_proj"]).scheme is None
    assert got.verdict_of(m["model.layers.0.mlp.down_proj"]).scheme == "mxfp8"
