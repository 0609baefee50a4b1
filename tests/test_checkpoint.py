"""`explain --model DIR` and `Selector.plan(DIR)`: each fixture checkpoint (config.json and its
quantization description with the real key names; see checkpoint_fixtures.py for the sources)
gives its distinct NVFP4 layer kinds, a decision for each and the one-line summary; bad
checkpoints exit 2 naming the missing or unknown key."""
from __future__ import annotations

import copy
import json

import pytest
from checkpoint_fixtures import (
    CHECKPOINTS,
    DEEPSEEK_QUANT,
    DEEPSEEK_V3,
    GPT_OSS,
    LLAMA,
    LLAMA_QUANT,
    QWEN3_MOE,
    compressed_tensors_nvfp4,
    write_checkpoint,
)
from helpers import assert_clean_error, load, run_cli_many
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selector import SelectorError

SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
SUMMARIES = {
    "deepseek_v3": "61 layers: 58 MoE -> flashinfer_cutlass, 3 dense; 122 linear -> "
                   "flashinfer_cutlass; not planned: 244 attention, 1 LM head; flashinfer_b12x "
                   "available with policy.moe_backend=flashinfer_b12x; flashinfer_cutedsl "
                   "available with policy.linear_backend=flashinfer_cutedsl",
    "qwen3_moe": "48 layers: 48 MoE -> flashinfer_cutlass; 96 linear -> flashinfer_cutlass; "
                 "not planned: 48 router, 1 LM head; flashinfer_b12x available with "
                 "policy.moe_backend=flashinfer_b12x; flashinfer_cutedsl available with "
                 "policy.linear_backend=flashinfer_cutedsl",
    "nemotron_h": "52 layers: 23 MoE -> flashinfer_cutlass, 23 Mamba, 6 attention; 58 linear "
                  "-> flashinfer_cutlass; not planned: 46 Mamba, 1 LM head; "
                  "flashinfer_b12x available with policy.moe_backend=flashinfer_b12x; "
                  "flashinfer_cutedsl available with policy.linear_backend=flashinfer_cutedsl",
    # gpt-oss uses vLLM's interleaved swigluoai layout, which flashinfer_b12x does not take.
    "gpt_oss": "36 layers: 36 MoE -> flashinfer_cutlass; not planned: 72 attention, 1 LM head",
    "llama": "32 layers: 32 dense; 128 linear -> flashinfer_cutlass; not planned: 1 LM head; "
             "flashinfer_cutedsl available with policy.linear_backend=flashinfer_cutedsl",
}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: write_checkpoint(root, name) for name in CHECKPOINTS}


def _plan(ckpts, name, *overrides):
    return load(*SPARK, *overrides).plan(ckpts[name])


def _kind(plan, component, quant="any"):
    return next(k for k in plan.kinds if k.component == component and
                (quant == "any" or k.quant == quant))


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_summary_line(ckpts, name):
    p = _plan(ckpts, name)
    assert p.summary() == SUMMARIES[name]
    assert p.ok


def test_deepseek_kinds(ckpts):
    p = _plan(ckpts, "deepseek_v3")
    experts = _kind(p, "routed experts")
    assert experts.layers == tuple(range(3, 61)) and experts.quant == "nvfp4"
    (s,) = experts.shapes
    assert s.fields == {"quant": "nvfp4", "op": "moe", "activation": "silu",
                        "act_and_mul": True, "hidden_size": 7168, "intermediate_size": 2048,
                        "num_experts": 256, "top_k": 8, "swiglu_limit": None,
                        "tp_size": 1, "ep_size": 1, "dtype": "bfloat16",
                        "routing": "deepseek_v3", "quant_method": "modelopt"}
    # the same decision as the hand-written DeepSeek layer preset
    preset = load(*SPARK, "layer=deepseek_moe").default()
    assert s.decision.to_dict()["candidates"] == preset.to_dict()["candidates"]
    dense = _kind(p, "dense MLP")
    assert dense.layers == (0, 1, 2) and dense.modules == 6
    assert {(x.fields["hidden_size"], x.fields["intermediate_size"]) for x in dense.shapes} == \
        {(7168, 2 * 18432), (18432, 7168)}
    shared = _kind(p, "shared experts")
    assert shared.modules == 116 and {x.fields["intermediate_size"] for x in shared.shapes} == \
        {4096, 7168}
    attention = _kind(p, "attention")
    assert attention.quant is None and attention.modules == 244
    assert "exclude_modules 'model.layers.0.self_attn*'" in attention.why


def test_qwen3_compressed_tensors_w4a4_and_w4a16(ckpts):
    p = _plan(ckpts, "qwen3_moe")
    assert _kind(p, "attention").quant == "nvfp4"
    assert _kind(p, "LM head").why == "ignored by 'lm_head'"
    assert {k.component for k in p.kinds} == {"attention", "routed experts", "router",
                                              "LM head"}
    assert _kind(p, "router").quant is None  # the fixture's ignore names mlp.gate
    w = load("platform=h100", "stack=vllm_0_32").plan(ckpts["qwen3_moe_w4a16"])
    assert {k.quant for k in w.kinds} == {"nvfp4_w4a16", None}
    for d in w.decisions():
        assert d.layer.quant == "nvfp4_w4a16" and d.selected == "marlin"


def test_nemotron_relu2_non_gated_mixed_precision(ckpts):
    p = _plan(ckpts, "nemotron_h")
    (s,) = _kind(p, "routed experts").shapes
    assert (s.fields["activation"], s.fields["act_and_mul"]) == ("relu2", False)
    assert (s.fields["num_experts"], s.fields["top_k"], s.fields["intermediate_size"]) == \
        (128, 6, 1856)
    assert _kind(p, "attention").quant == "fp8_tensor" and _kind(p, "attention").why == \
        "quantized_layers: FP8"
    assert _kind(p, "Mamba").why == "not in quantized_layers (left unquantized)"
    shared = _kind(p, "shared experts")
    assert [x.projections for x in shared.shapes] == [("up_proj",), ("down_proj",)]
    assert p.architecture.layer_types.count("MoE") == 23


def test_gpt_oss_swigluoai_with_its_clamp(ckpts):
    p = _plan(ckpts, "gpt_oss")
    (s,) = _kind(p, "routed experts").shapes
    assert (s.fields["activation"], s.fields["act_and_mul"]) == ("swigluoai", True)
    assert s.fields["swiglu_limit"] is None  # the clamp is part of swigluoai in vLLM
    assert any("swiglu_limit 7" in n for n in p.architecture.notes)
    assert _kind(p, "attention").why == "excluded by ignore 'model.layers.*.self_attn*'"


def test_deepseek_v4_style_swiglu_limit_reaches_the_layer(tmp_path):
    d = write_checkpoint(tmp_path, "ds4", {**DEEPSEEK_V3, "swiglu_limit": 10.0},
                         DEEPSEEK_QUANT)
    p = load(*SPARK).plan(d)
    (s,) = _kind(p, "routed experts").shapes
    assert s.fields["swiglu_limit"] == 10.0
    c = s.decision.candidate("flashinfer_b12x")
    assert c.status == "rejected" and any(r.rule == "clamp" for r in c.reasons)


def test_config_keys_the_checkpoint_does_not_fix(ckpts):
    p = _plan(ckpts, "deepseek_v3", "layer.ep_size=8")
    (s,) = _kind(p, "routed experts").shapes
    assert s.decision.layer.ep_size == 8
    assert s.decision.candidate("flashinfer_b12x").status == "rejected"
    req = _plan(ckpts, "llama", "policy.linear_backend=flashinfer_b12x")
    assert {d.selected for d in req.decisions()} == {"flashinfer_b12x"}


def test_plan_json_and_text(ckpts):
    p = _plan(ckpts, "deepseek_v3")
    data = json.loads(json.dumps(p.to_dict()))
    assert data["summary"] == SUMMARIES["deepseek_v3"]
    assert data["checkpoint"]["quantization"]["format"] == "ModelOpt"
    assert data["checkpoint"]["layer_types"] == {"dense": 3, "MoE": 58}
    kinds = {k["kind"]: k for k in data["kinds"]}
    assert kinds["routed experts"]["shapes"][0]["decision"]["selected"] == "flashinfer_cutlass"
    assert kinds["attention"]["shapes"][0]["decision"] is None
    text = str(p)
    assert "routed experts: 58 layers (3-60): moe nvfp4" in text
    assert "summary: 61 layers: 58 MoE -> flashinfer_cutlass" in text


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    no_config = root / "empty"
    no_config.mkdir()
    malformed = root / "malformed"
    malformed.mkdir()
    (malformed / "config.json").write_text("{\"architectures\": [")
    drop = copy.deepcopy(CHECKPOINTS["nemotron_h"][0])
    del drop["hybrid_override_pattern"]
    cases = {
        "missing-dir": (str(root / "nope"), ("--model", "is not a directory")),
        "no-config": (str(no_config), ("--model", "has no config.json")),
        "malformed": (str(malformed), ("malformed JSON",)),
        # an unknown architecture is refused as not modelled (issue 44)
        "unknown-arch": (write_checkpoint(root, "foo", {"architectures": ["FooForCausalLM"],
                                                        "model_type": "foo"}, LLAMA_QUANT),
                         ("architectures", "FooForCausalLM", "DeepseekV3ForCausalLM")),
        "missing-key": (write_checkpoint(root, "nemotron_h", drop),
                        ("hybrid_override_pattern", "is missing", "NemotronHForCausalLM")),
        "unknown-act": (write_checkpoint(root, "tanh", {**QWEN3_MOE, "hidden_act": "tanh",
                        "quantization_config": compressed_tensors_nvfp4()}),
                        ("hidden_act", "'tanh'", "silu")),
        "not-quantized": (write_checkpoint(root, "bf16", LLAMA),
                          ("quantization_config", "is missing", "hf_quant_config.json")),
        "awq": (write_checkpoint(root, "awq", {**GPT_OSS, "quantization_config": {
            "quant_method": "awq"}}), ("quantization_config.quant_method", "'awq'",
                                       "compressed-tensors, fp8, modelopt, mxfp4, mxfp8")),
        "fp8": (write_checkpoint(root, "fp8", {**LLAMA, "quantization_config": {
            "quant_method": "fp8", "activation_scheme": "staticc"}}),
                ("activation_scheme", "'staticc'", "dynamic, static", "did you mean 'static'")),
        "fp8-block": (write_checkpoint(root, "fp8b", {**LLAMA, "quantization_config": {
            "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128]}}),
                      ("weight_block_size", "[128]", "two integers", "2 dimensions")),
        "int4": (write_checkpoint(root, "int4", {**QWEN3_MOE, "quantization_config": {
            "quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
                                                   "strategy": "group", "group_size": 128},
                "input_activations": None}}}}), ("no module", "layer.quant", "int4")),
        "pattern": (write_checkpoint(root, "nem", {**CHECKPOINTS["nemotron_h"][0],
                                                   "hybrid_override_pattern": "ME*"}),
                    ("hybrid_override_pattern", "'ME*'", "52 layers")),
        "all-excluded": (write_checkpoint(root, "allx", LLAMA, {
            "producer": {"name": "modelopt"}, "quantization": {
                "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                "exclude_modules": ["*"]}}), ("no module", "scheme selector plans")),
    }
    argvs = [("explain", "--model", str(d), *SPARK) for d, _ in cases.values()]
    return {k: (r, cases[k][1]) for k, r in zip(cases, run_cli_many(argvs))}


@pytest.mark.parametrize("case", ["missing-dir", "no-config", "malformed", "unknown-arch",
                                  "missing-key", "unknown-act", "not-quantized", "awq", "fp8",
                                  "fp8-block", "int4", "pattern", "all-excluded"])
def test_bad_checkpoints_exit_2_naming_the_key(bad, case):
    r, needles = bad[case]
    assert_clean_error(r, *needles)


@pytest.mark.slow
def test_cli_explain_model(ckpts):
    argvs = [("explain", "--model", str(ckpts[n]), *SPARK) for n in sorted(SUMMARIES)]
    argvs += [("explain", "--format", "json", "--model", str(ckpts["nemotron_h"]), *SPARK),
              ("explain", "--model", str(ckpts["llama"]), "platform=cpu")]
    *texts, js, cpu = run_cli_many(argvs)
    for name, r in zip(sorted(SUMMARIES), texts):
        assert r.returncode == 0, r.stderr
        flat = " ".join(r.stdout.split())
        assert f"summary: {SUMMARIES[name]}" in flat
    assert js.returncode == 0 and js.json["summary"] == SUMMARIES["nemotron_h"]
    # a bare preset: the reference, which needs no package (issue 17)
    assert cpu.returncode == 0 and "-> emulation" in cpu.stdout, cpu.stdout


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10 ** 6) |
                     st.floats(allow_nan=False) | st.text(max_size=12),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                         max_size=3),
                     max_leaves=6)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(SUMMARIES)), data=st.data())
def test_any_config_edit_gives_a_plan_or_one_clear_error(tmp_path_factory, name, data):
    """Drop or replace any key of config.json (or the quantization file): a plan or a
    SelectorError, never another exception."""
    config, quant = copy.deepcopy(CHECKPOINTS[name])
    target = quant["quantization"] if quant and data.draw(st.booleans()) else config
    key = data.draw(st.sampled_from(sorted(target)))
    if data.draw(st.booleans()):
        del target[key]
    else:
        target[key] = data.draw(_JSON)
    d = write_checkpoint(tmp_path_factory.mktemp("edit"), name, config, quant)
    try:
        load(*SPARK).plan(d)
    except SelectorError as exc:
        assert str(exc) and "\n" not in str(exc)


def test_readme_example_checkpoint_is_the_fixture(tmp_path, repo):
    """examples/deepseek-r1-nvfp4 (the README's example) is what the fixture writes."""
    written = write_checkpoint(tmp_path, "deepseek_v3")
    example = repo / "examples" / "deepseek-r1-nvfp4"
    for name in ("config.json", "hf_quant_config.json"):
        assert (example / name).read_text() == (written / name).read_text()


def test_modelopt_w4a16(tmp_path):
    """W4A16_NVFP4, and NVFP4 whose config groups quantize no activations (vLLM serves both as
    weight-only NVFP4)."""
    explicit = write_checkpoint(tmp_path, "w4a16", {**LLAMA, "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "W4A16_NVFP4", "group_size": 16,
        "ignore": ["lm_head"]}})
    implied = write_checkpoint(tmp_path, "implied", {**LLAMA, "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                      "weights": {"num_bits": 4, "type": "float",
                                                  "group_size": 16}}}}})
    sel = load("platform=h100", "stack=vllm_0_32")
    for d in (explicit, implied):
        p = sel.plan(d)
        assert {k.quant for k in p.kinds} == {"nvfp4_w4a16", None}
        assert {x.selected for x in p.decisions()} == {"marlin"}
