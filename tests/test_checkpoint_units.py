"""The checkpoint reader's pieces, each pinned to what vLLM 0.32.0's code does (fast: no
decisions). The whole path is checked against vLLM itself by
tests/vllm/test_checkpoint_differential.py; these make each rule's mutation visible here."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from checkpoint_fixtures import (
    DEEPSEEK_QUANT,
    DEEPSEEK_V3,
    GPT_OSS,
    LLAMA,
    LLAMA_QUANT,
    NEMOTRON_H,
    NVFP4_ARGS,
    QWEN3_MOE,
    compressed_tensors_nvfp4,
    nemotron_mixed_precision,
)

from selector import SelectorError
from selector.checkpoint import arch as A
from selector.checkpoint import quant as Q
from selector.checkpoint.plan import _join_whys, checkpoint_root
from selector.checkpoint.plan_text import _layers_text

P = Path("/x/config.json")


def arch(config, tp=1, ep=1):
    return A.read_architecture(config, P, tp, ep)


def mods(config, tp=1, ep=1):
    return {m.name: m for m in arch(config, tp, ep).modules}


def quant(tmp_path, config, hf=None):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if hf is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(hf))
    a = arch(config)
    return a, Q.read_quantization(tmp_path, config, a)


def verdicts(tmp_path, config, hf=None):
    a, q = quant(tmp_path, config, hf)
    return {m.name: q.verdict_of(m) for m in a.modules}


# -- bounded regexes --------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", [".*", r".*mlp\.experts$", ".*(q|k|v)_proj$", "a{1}b",
                                     "[0-9]+x", "(?:ab)?c", ".*.*.*.*", "x(?=y)", "(a|b)c*",
                                     "a{0,1}"])
def test_safe_patterns_compile(pattern):
    assert Q.bounded_regex(pattern, "k", "w").pattern == pattern


@pytest.mark.parametrize("pattern,needle", [("(.|.)*!", "alternatives"), ("(a*)*", "inside a rep"),
                                            ("(a+)+", "inside a rep"), ("(a{2,3})*", "inside"),
                                            (".*.*.*.*.*", "5 repetitions"),
                                            ("(a)\\1", "back-reference"),
                                            ("(a)(?(1)a|b)", "back-reference"),
                                            ("(?>a*)*", "inside a rep"),
                                            ("(?=a*)*", "inside a rep"),
                                            ("[", "not a regular expression"),
                                            ("a" * 1001, "1001 characters")])
def test_hostile_patterns_are_refused(pattern, needle):
    with pytest.raises(SelectorError, match=needle.replace("(", r"\(")) as exc:
        Q.bounded_regex(pattern, "quantization_config.ignore", "/x/config.json")
    assert "quantization_config.ignore" in str(exc.value) and "/x/config.json" in str(exc.value)


def test_exactly_four_repeats_pass_and_a_single_repeat_of_one_is_no_repeat():
    Q.bounded_regex("a*b*c*d*", "k", "w")
    Q.bounded_regex("(a*){1}", "k", "w")  # {1}: the body runs once, not a repetition
    Q.bounded_regex("(a*)?", "k", "w")


def test_pattern_lists(tmp_path):
    assert Q._patterns(None, "k", "w", "x") == []
    with pytest.raises(SelectorError, match="must be a list"):
        Q._patterns("lm_head", "k", "w", "x")
    with pytest.raises(SelectorError, match="must be a list"):
        Q._patterns([1], "k", "w", "x")
    with pytest.raises(SelectorError, match="more than"):
        Q._patterns(["a"] * (Q.MAX_PATTERNS + 1), "k", "w", "x")
    with pytest.raises(SelectorError, match="1001 characters"):
        Q._patterns(["a" * 1001], "k", "w", "x")
    Q._patterns(["a" * 1000], "k", "w", "x")
    with pytest.raises(SelectorError, match="not a regular"):
        Q._patterns(["re:("], "k", "w", "x")


# -- vLLM's name mapping ----------------------------------------------------------------------

def test_star_split_and_renames():
    assert Q._star_split(["a.b*", "a.*", "*", "lm_head"]) == ["a.b", "a.b.*", "a.*", "*",
                                                              "lm_head"]
    nem = arch({**NEMOTRON_H, "quantization_config": nemotron_mixed_precision()})
    assert Q.map_name(nem, "backbone.layers.0.mixer.A_log") == "model.layers.0.mixer.A"
    oss = arch(GPT_OSS)
    assert Q.map_name(oss, "model.layers.1.self_attn.q_proj") == "model.layers.1.attn.q_proj"
    assert Q.map_name(oss, "model.layers.1.mlp.experts.down_proj") == \
        "model.layers.1.mlp.experts.w2_weight"
    assert Q.map_name(oss, "x.self_attn") == "x.self_attn"  # no trailing dot: no rename
    ds = arch(DEEPSEEK_V3)
    assert not ds.maps_names and Q.map_name(ds, "backbone.x") == "backbone.x"


# -- ModelOpt exclusions ----------------------------------------------------------------------

PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def test_is_layer_skipped_exact_fused_and_experts():
    skip = Q._is_layer_skipped
    assert skip("a.qkv_proj", ["a.qkv_proj"], PACKED, "w")
    assert skip("a.qkv_proj", ["a.q_proj", "a.k_proj", "a.v_proj"], PACKED, "w")
    assert not skip("a.qkv_proj", [], PACKED, "w")
    with pytest.raises(SelectorError, match="some but not all shards"):
        skip("a.qkv_proj", ["a.q_proj"], PACKED, "w")
    assert skip("m.experts", ["m.experts.0.down_proj"], {}, "w")
    assert not skip("m.experts", ["m.gate"], {}, "w")
    assert skip("m.o_proj", ["m.o_proj"], {}, "w") and not skip("m.o_proj", ["m"], {}, "w")


def test_modelopt_excluded_order():
    ex = Q._modelopt_excluded
    assert ex("x.o_proj", [], {}, "w") is None
    assert ex("model.layers.10.self_attn.o_proj", ["model.layers.1"], {}, "w") == \
        "model.layers.1"  # vLLM's substring rule
    assert ex("model.layers.10.self_attn.o_proj", ["model.layers.1.self_attn"], {}, "w") is None
    assert ex("language_model.model.lm_head", ["model.lm_head"], {}, "w") == "model.lm_head"
    assert ex("model.layers.3.mlp.experts", ["*down_proj"], {}, "w") is None
    assert ex("model.layers.3.mlp.down_proj", ["*down_proj"], {}, "w") == "*down_proj"
    assert ex("model.layers.3.mlp.experts", ["*mlp.experts*"], {}, "w") == "*mlp.experts*"
    assert ex("a.qkv_proj", ["a.q_proj", "a.k_proj", "a.v_proj"], PACKED, "w") == "a.q_proj"
    assert ex("a.o_proj", ["a.o_proj"], {}, "w") == "a.o_proj"
    assert ex("A.o_proj", ["a.*"], {}, "w") is None  # case-sensitive


def test_modelopt_uniform(tmp_path):
    v = verdicts(tmp_path, DEEPSEEK_V3, DEEPSEEK_QUANT)
    assert v["model.layers.3.mlp.experts"].scheme == "nvfp4"
    assert v["model.layers.3.self_attn.o_proj"].scheme is None
    assert "model.layers.3.self_attn*" in v["model.layers.3.self_attn.o_proj"].why
    assert v["lm_head"].scheme is None
    q = copy.deepcopy(LLAMA_QUANT)
    q["quantization"]["exclude_modules"] = []
    v = verdicts(tmp_path, LLAMA, q)
    assert v["lm_head"].scheme == "nvfp4"
    assert v["model.layers.0.self_attn.qkv_proj"].why == "NVFP4"


def test_modelopt_config_json_forms(tmp_path):
    cfg = {**LLAMA, "quantization_config": {"quant_method": "modelopt", "quant_algo": "nvfp4",
                                            "ignore": ["lm_head", "*.mlp*"], "group_size": 16}}
    v = verdicts(tmp_path, cfg)
    assert v["model.layers.0.mlp.gate_up_proj"].scheme is None
    assert "'*.mlp*'" in v["model.layers.0.mlp.gate_up_proj"].why
    assert v["model.layers.0.self_attn.qkv_proj"].scheme == "nvfp4"
    cfg["quantization_config"]["quant_algo"] = "W4A16_NVFP4"
    assert verdicts(tmp_path, cfg)["model.layers.0.self_attn.o_proj"].scheme == "nvfp4_w4a16"
    cfg["quantization_config"].update(quant_algo="NVFP4", config_groups={
        "g": {"input_activations": None, "weights": {}}})
    assert verdicts(tmp_path, cfg)["model.layers.0.self_attn.o_proj"].scheme == "nvfp4_w4a16"
    cfg["quantization_config"]["config_groups"]["h"] = {"input_activations": {"x": 1}}
    assert verdicts(tmp_path, cfg)["model.layers.0.self_attn.o_proj"].scheme == "nvfp4"
    cfg["quantization_config"]["config_groups"] = {}
    assert verdicts(tmp_path, cfg)["model.layers.0.self_attn.o_proj"].scheme == "nvfp4"
    cfg["quantization_config"]["ignore"] = ["model.layers.0.vision_tower"]
    assert verdicts(tmp_path, cfg)["lm_head"].scheme == "nvfp4"


def test_vision_modules_are_left_unquantized():
    assert Q._vision("a.vision_tower.b") and Q._vision("vision_model.x") and \
        Q._vision("x.vit_large_projector") and not Q._vision("model.layers.0.mlp")


# -- MIXED_PRECISION --------------------------------------------------------------------------

def test_resolve_quant_algo():
    r = Q._resolve_quant_algo
    layers = {"m.l.0.q_proj": "FP8", "m.l.0.k_proj": "FP8", "m.l.0.v_proj": "FP8",
              "m.l.1.experts.0.up_proj": "NVFP4", "m.l.1.experts.0.down_proj": "FP8",
              "m.l.2.gate_proj": "NVFP4", "m.l.2.up_proj": "NVFP4", "lm_head": "NVFP4",
              "m.l.3.shared.down_proj": "W4A16_NVFP4", "m.l.4.mixer.gate_proj": "NVFP4"}
    assert r("m.l.0.q_proj", layers, PACKED, "w") == ("FP8", "m.l.0.q_proj", None)
    assert r("m.l.0.qkv_proj", layers, PACKED, "w")[:2] == ("FP8", "m.l.0.q_proj")
    assert r("m.l.0.qkv_proj", layers, {}, "w")[:2] == ("FP8", "m.l.0.q_proj")  # step 4
    a, key, warning = r("m.l.1.experts", layers, PACKED, "w")
    assert (a, key) == ("NVFP4", "m.l.1.experts.0.up_proj")
    assert "up_proj NVFP4" in warning and "down_proj FP8" in warning
    assert r("m.l.2.gate_up_proj", layers, PACKED, "w")[:2] == ("NVFP4", "m.l.2.gate_proj")
    assert r("x.lm_head", layers, PACKED, "w")[:2] == ("NVFP4", "lm_head")
    assert r("m.l.3.shared", layers, PACKED, "w")[:2] == ("W4A16_NVFP4",
                                                         "m.l.3.shared.down_proj")
    assert r("m.l.4.mixer.experts", layers, PACKED, "w")[:2] == ("NVFP4",
                                                                "m.l.4.mixer.gate_proj")
    assert r("m.l.9.o_proj", layers, PACKED, "w") == (None, "", None)
    bad = {"m.q_proj": "FP8", "m.k_proj": "NVFP4", "m.v_proj": "FP8"}
    with pytest.raises(SelectorError, match="Mixed quant_algo within fused layer"):
        r("m.qkv_proj", bad, PACKED, "w")
    with pytest.raises(SelectorError, match="Mixed quant_algo within fused layer"):
        r("m.qkv_proj", bad, {}, "w")


def test_disagree_names_the_first_entry():
    assert Q._disagree("p", [("p.0.up_proj", "NVFP4"), ("p.1.up_proj", "NVFP4")]) is None
    w = Q._disagree("p", [("p.0.up_proj", "NVFP4"), ("p.0.down_proj", "FP8")])
    assert "'p.0.up_proj' (NVFP4)" in w and "up_proj NVFP4; down_proj FP8" in w


def test_mixed_precision_verdicts(tmp_path):
    cfg = {**NEMOTRON_H, "quantization_config": nemotron_mixed_precision()}
    v = verdicts(tmp_path, cfg)
    assert v["model.layers.1.mixer.experts"].scheme == "nvfp4"
    assert v["model.layers.1.mixer.experts"].warning is None
    assert v["model.layers.5.mixer.qkv_proj"].scheme == "fp8_tensor"  # modelopt.py resolve
    assert v["model.layers.5.mixer.qkv_proj"].other is None
    assert v["model.layers.0.mixer.in_proj"].why == "not in quantized_layers (left unquantized)"
    assert v["lm_head"].why == "excluded by ignore 'lm_head'"
    q = cfg["quantization_config"]
    q["quantized_layers"]["backbone.layers.0.mixer.in_proj"] = {"quant_algo": "MIXED_PRECISION"}
    with pytest.raises(SelectorError, match="quantized_layers.backbone.layers.0.mixer.in_proj"):
        verdicts(tmp_path, cfg)
    q["quantized_layers"]["backbone.layers.0.mixer.in_proj"] = "NVFP4"
    with pytest.raises(SelectorError, match="quant_algo"):
        verdicts(tmp_path, cfg)
    q["quantized_layers"]["backbone.layers.0.mixer.in_proj"] = {"quant_algo": "fp8_pb_wo"}
    assert verdicts(tmp_path, cfg)["model.layers.0.mixer.in_proj"].scheme == "fp8_block"
    q["quantized_layers"]["backbone.layers.1.mixer.experts.0.up_proj"] = {
        "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"}
    v = verdicts(tmp_path, cfg)["model.layers.1.mixer.experts"]
    assert v.scheme is None and "no such RoutedExperts method" in v.why
    q["quantized_layers"] = {}
    with pytest.raises(SelectorError, match="quantized_layers"):
        verdicts(tmp_path, cfg)


# -- compressed-tensors -----------------------------------------------------------------------

def test_ct_is_nvfp4():
    assert Q._ct_is_nvfp4(dict(NVFP4_ARGS))
    for k, bad in (("num_bits", 8), ("type", "int"), ("strategy", "group"), ("group_size", 32),
                   ("symmetric", False)):
        assert not Q._ct_is_nvfp4({**NVFP4_ARGS, k: bad})
    assert Q._ct_is_nvfp4({k: v for k, v in NVFP4_ARGS.items() if k != "symmetric"})
    assert not Q._ct_is_nvfp4(None)


def test_ct_match_and_target_order():
    assert Q._ct_match("model.x", "re:model") and not Q._ct_match("amodel", "re:model")
    assert Q._ct_match("QKVParallelLinear", "Linear", contains=True)
    assert not Q._ct_match("QKVParallelLinear", "Linear")
    assert Q._ct_match("a", "a") and not Q._ct_match("a", "b")
    t = Q._ct_target
    assert t("m.self_attn.o_proj", "RowParallelLinear", ["Linear", "re:.*self_attn.*"],
             PACKED) == "re:.*self_attn.*"
    assert t("m.self_attn.qkv_proj", "QKVParallelLinear",
             ["Linear", "re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"], PACKED) == \
        "re:.*v_proj$"  # qkv_proj itself ends with v_proj: the name matches first
    assert t("m.self_attn.qkv_proj", "QKVParallelLinear",
             ["Linear", "re:.*q_proj$", "re:.*k_proj$", "re:.*\\.v_proj$"], PACKED) == \
        "re:.*q_proj$"  # all shards match: the first shard's target
    assert t("m.self_attn.qkv_proj", "QKVParallelLinear", ["Linear", "re:.*q_proj$"],
             PACKED) == "Linear"
    assert t("m.lm_head", "ParallelLMHead", ["Linear"], PACKED) is None
    assert t("m.o_proj", "RowParallelLinear", ["m.o_proj", "Linear"], {}) == "m.o_proj"


def test_ct_ignored():
    ig = Q._ct_ignored
    assert ig("m.lm_head", ["lm_head"], {}, "w") is None
    assert ig("lm_head", ["lm_head"], {}, "w") == "lm_head"
    assert ig("m.qkv_proj", ["re:.*_proj$"], PACKED, "w") == "re:.*_proj$"
    assert ig("m.qkv_proj", ["re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"], PACKED, "w") == \
        "re:.*v_proj$"
    assert ig("m.qkv_proj", ["re:.*q_proj$", "re:.*k_proj$", "re:.*\\.v_proj$"], PACKED,
              "w") == "re:.*q_proj$"
    with pytest.raises(SelectorError, match="some but not all"):
        ig("m.qkv_proj", ["re:.*q_proj$"], PACKED, "w")
    assert ig("m.o_proj", ["re:.*q_proj$"], PACKED, "w") is None


def test_ct_verdicts(tmp_path):
    v = verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": compressed_tensors_nvfp4()})
    assert v["model.layers.0.mlp.experts"].scheme == "nvfp4"
    assert v["model.layers.0.self_attn.qkv_proj"].scheme == "nvfp4"
    assert v["lm_head"].scheme is None and v["lm_head"].why == "ignored by 'lm_head'"
    q = compressed_tensors_nvfp4(True)
    q["config_groups"]["group_0"]["targets"] = ["re:.*self_attn.*"]
    v = verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})
    assert v["model.layers.0.self_attn.o_proj"].scheme == "nvfp4_w4a16"
    assert v["model.layers.0.mlp.experts"].why == "matched by no config group (left " \
        "unquantized)"
    q["config_groups"]["group_0"]["targets"] = ["lm_head"]
    q["ignore"] = []
    assert verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})["lm_head"].scheme == \
        "nvfp4_w4a16"
    q = compressed_tensors_nvfp4()
    q["config_groups"]["g1"] = {"targets": ["re:.*down_proj$"], "input_activations": None,
                                "weights": dict(NVFP4_ARGS)}
    with pytest.raises(SelectorError, match="All MoE projections"):
        verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})
    q = compressed_tensors_nvfp4()
    q["config_groups"]["g1"] = {"targets": ["re:.*o_proj$"], "input_activations": {"x": 1},
                                "weights": {"num_bits": 8, "type": "float"}}
    v = verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})
    # input activations of no type: not _is_fp8_w8a8, but _is_fp8_w8a16 (W8A16Fp8)
    assert v["model.layers.0.self_attn.o_proj"].other.startswith("FP8 weight-only")
    q["config_groups"]["g1"]["input_activations"] = None
    assert verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})[
        "model.layers.0.self_attn.o_proj"].other.startswith("FP8 weight-only")
    q["config_groups"]["g1"] = {"targets": ["LlamaAttention"], "weights": {"num_bits": 8}}
    assert verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})[
        "model.layers.0.self_attn.o_proj"].scheme == "nvfp4"


@pytest.mark.parametrize("edit,needle", [
    (lambda q: q.update(config_groups={}), "config_groups"),
    (lambda q: q.update(config_groups=[]), "config_groups"),
    (lambda q: q["config_groups"].update(group_0={"targets": "Linear", "weights": {}}),
     "group_0"),
    (lambda q: q["config_groups"]["group_0"].update(input_activations={"num_bits": 8}),
     "input_activations"),
    (lambda q: q["config_groups"]["group_0"].update(weights={"num_bits": 8, "type": "float",
                                                             "strategy": "blok"}),
     "group_0.weights.strategy: unknown value 'blok'.*did you mean 'block'"),
    (lambda q: q.update(format=3), "format"),
    (lambda q: q.update(ignore="lm_head"), "ignore")])
def test_ct_bad_descriptions(tmp_path, edit, needle):
    q = compressed_tensors_nvfp4()
    edit(q)
    with pytest.raises(SelectorError, match=needle):
        verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})


# -- which file and which method --------------------------------------------------------------

def test_method_detection():
    m = Q._method
    assert m({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "nvfp4"}},
             "w") == "modelopt_fp4"
    assert m({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}},
             "w") == "modelopt"
    assert m({"quantization": {"modelopt_quant_config": {}, "quant_algo": "NVFP4"}},
             "w") == "modelopt_fp4"
    with pytest.raises(SelectorError, match="Unknown ModelOpt quant algo"):
        m({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A16_NVFP4"}}, "w")
    assert m({"quantization": {"quant_algo": "NVFP4"}}, "w") == ""
    assert m({"quant_method": "Compressed_Tensors"}, "w") == "compressed-tensors"
    assert m({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, "w") == \
        "modelopt_mixed"
    assert m({"quant_method": "modelopt", "quant_algo": "w4a16_nvfp4"}, "w") == "modelopt_fp4"
    assert m({"quant_method": "modelopt", "quant_algo": "MXFP8"}, "w") == "modelopt_mxfp8"
    assert m({"quant_method": "modelopt", "quant_algo": "FP8"}, "w") == "modelopt"
    assert m({"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4"}}, "w") == \
        "modelopt_fp4"
    assert m({"producer": {"name": "modelopt"}, "quantization": {}}, "w") == ""
    with pytest.raises(SelectorError, match="must be a string"):
        m({"quant_method": 3}, "w")


def test_file_order_and_warnings(tmp_path):
    cfg = {**LLAMA, "quantization_config": compressed_tensors_nvfp4()}
    a, q = quant(tmp_path, cfg, LLAMA_QUANT)
    assert q.format == "compressed-tensors" and q.warnings and q.where.endswith("config.json")
    a, q = quant(tmp_path / "..", LLAMA, None) if False else (None, None)
    d = tmp_path / "legacy"
    d.mkdir()
    a, q = quant(d, LLAMA, LLAMA_QUANT)
    assert q.source == "hf_quant_config.json" and not q.warnings
    same = tmp_path / "same"
    same.mkdir()
    mo = {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"]}
    a, q = quant(same, {**LLAMA, "quantization_config": mo}, LLAMA_QUANT)
    assert not q.warnings
    a, q = quant(same, {**LLAMA, "quantization_config": {**mo, "ignore": []}}, LLAMA_QUANT)
    assert q.warnings
    cc = tmp_path / "cc"
    cc.mkdir()
    a, q = quant(cc, {**LLAMA, "compression_config": compressed_tensors_nvfp4()})
    assert q.source == "config.json compression_config"


@pytest.mark.parametrize("config,hf,needle", [
    (LLAMA, None, "is missing, and there is no"),
    ({**LLAMA, "quantization_config": []}, None, "must be a mapping"),
    ({**LLAMA, "quantization_config": {"quant_method": "fp8"}}, None,
     "activation_scheme: None is missing"),
    ({**LLAMA, "quantization_config": {"quant_method": "awq"}}, None, "reads it as awq"),
    ({**LLAMA, "quantization_config": {"quant_algo": "NVFP4"}}, None, "unquantized"),
    (LLAMA, {"producer": {"name": "modelopt"}}, "quantization"),
    (LLAMA, {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}},
     "group_size, kv_cache_quant_algo, exclude_modules"),
    ({**LLAMA, "quantization_config": {"quant_method": "modelopt",
                                       "quant_algo": "MIXED_PRECISION"}}, None,
     "quantized_layers"),
    ({**LLAMA, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP9"}}, None,
     "quant_algo: unknown value 'FP9'"),
    ({**LLAMA, "quantization_config": {"quant_method": "modelopt", "quantization": 3}}, None,
     "quantization")])
def test_quantization_refusals(tmp_path, config, hf, needle):
    with pytest.raises(SelectorError, match=needle):
        quant(tmp_path, config, hf)


# -- config files -----------------------------------------------------------------------------

def test_read_json_limits(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"a": [[[1]]]}))
    assert A.read_json(f) == {"a": [[[1]]]}
    f.write_text('{"a": ' + "[" * A.MAX_JSON_DEPTH + "]" * A.MAX_JSON_DEPTH + "}")
    with pytest.raises(SelectorError, match="nested too deeply"):
        A.read_json(f)
    nest: dict = {}
    cur = nest
    for _ in range(A.MAX_JSON_DEPTH - 1):
        cur["a"] = {}
        cur = cur["a"]
    f.write_text(json.dumps(nest))
    assert A.read_json(f) == nest
    cur["a"] = {}
    f.write_text(json.dumps(nest))
    with pytest.raises(SelectorError, match="nested too deeply"):
        A.read_json(f)
    f.write_text(json.dumps({"a": [0] * 10}))
    assert A._depth({"a": [0]}) == 3 and A._depth({}) == 1 and A._depth([[]]) == 2
    with open(f, "wb") as fh:
        fh.truncate(A.MAX_JSON_BYTES + 1)
    with pytest.raises(SelectorError, match="too large"):
        A.read_json(f)
    f.write_text(" " * (A.MAX_JSON_BYTES - 2) + "{}")
    assert A.read_json(f) == {}
    f.write_text("[]")
    with pytest.raises(SelectorError, match="JSON object, not list"):
        A.read_json(f)
    f.write_bytes(b"\xff")
    with pytest.raises(SelectorError, match="cannot read"):
        A.read_json(f)
    with pytest.raises(SelectorError, match="no such file"):
        A.read_json(tmp_path / "none.json")
    with pytest.raises(SelectorError, match="not a regular file"):
        A.read_json(tmp_path)


# -- architectures ----------------------------------------------------------------------------

def test_config_lookups():
    c = A._Config({"a": 3, "b": True, "t": "x", "n": 0.5, "big": 10 ** 9, "l": [1, 2],
                   "z": None}, P, "Arch", "llama")
    assert c.integer("a") == 3 and c.integer("missing", 7) == 7
    assert c.integer("vocab_size") == 32000 and c.defaulted == ["vocab_size"]
    assert c.integer("z", 5) == 5 and "z" not in c.defaulted  # an explicit null stays None
    for key, needle in (("b", ">= 1"), ("big", "implausibly large"), ("t", ">= 1"),
                        ("missing", "is missing")):
        with pytest.raises(SelectorError, match=needle):
            c.integer(key)
    assert c.integer("a", minimum=3) == 3
    with pytest.raises(SelectorError, match=">= 4"):
        c.integer("a", minimum=4)
    assert c.integers("l") == (1, 2) and c.integers("missing") == ()
    with pytest.raises(SelectorError, match="layer indices"):
        c.integers("t")
    assert c.text("t") == "x" and c.text("missing", "d") == "d"
    with pytest.raises(SelectorError, match="must be a string"):
        c.text("a")
    with pytest.raises(SelectorError, match="is missing"):
        c.text("missing")
    assert c.number("n") == 0.5 and c.number("missing") is None and c.number("a") == 3.0
    for bad in ("b", "t"):
        with pytest.raises(SelectorError, match="positive number"):
            c.number(bad)
    for v in (0, -1, float("nan"), float("inf"), 1e30):
        with pytest.raises(SelectorError, match="positive number"):
            A._Config({"x": v}, P, "A", "llama").number("x")
    assert c.split(8, 2, "k", "w") == 4
    assert c.split(8, 3, "k", "w") == 2 and "k 8 is not divisible by w 3" in c.take()[0]
    assert c.take() == ()  # a problem belongs to the one module built next
    edge = A._Config({"num_hidden_layers": A.LIMITS["layers"], "e": A.LIMITS["experts"]}, P,
                     "A", "x")
    assert edge.integer("num_hidden_layers") == A.LIMITS["layers"]
    assert A._Config({"num_experts": A.LIMITS["experts"] + 1}, P, "A", "x").integer(
        "hidden_size", 1) == 1
    with pytest.raises(SelectorError, match="implausibly"):
        A._Config({"num_experts": A.LIMITS["experts"] + 1}, P, "A", "x").integer("num_experts")
    with pytest.raises(SelectorError, match="more entries"):
        A._Config({"l": [0] * (A.LIMITS["layers"] + 1)}, P, "A", "x").integers("l")


def test_llama_modules_and_tp():
    m = mods(LLAMA)
    assert len(m) == 32 * 4 + 1
    qkv = dict(m["model.layers.0.self_attn.qkv_proj"].fields)
    assert (qkv["hidden_size"], qkv["intermediate_size"]) == (4096, (32 + 2 * 8) * 128)
    assert m["model.layers.0.self_attn.qkv_proj"].cls == "QKVParallelLinear"
    gu = dict(m["model.layers.0.mlp.gate_up_proj"].fields)
    assert gu["intermediate_size"] == 2 * 14336 and gu["op"] == "linear"
    assert dict(m["lm_head"].fields)["intermediate_size"] == 128256
    m8 = mods(LLAMA, tp=8)
    assert dict(m8["model.layers.0.self_attn.qkv_proj"].fields)["intermediate_size"] == \
        (4 + 2 * 1) * 128
    assert dict(m8["model.layers.0.self_attn.o_proj"].fields)["hidden_size"] == 512
    assert dict(m8["model.layers.0.mlp.down_proj"].fields)["hidden_size"] == 14336 // 8
    assert dict(m8["model.layers.0.mlp.gate_up_proj"].fields)["intermediate_size"] == \
        2 * 14336 // 8
    assert dict(m8["lm_head"].fields)["intermediate_size"] == 128256 // 8
    m16 = mods(LLAMA, tp=16)  # 8 KV heads over 16 GPUs: replicated, one per GPU
    assert dict(m16["model.layers.0.self_attn.qkv_proj"].fields)["intermediate_size"] == \
        (2 + 2 * 1) * 128
    odd = mods({**LLAMA, "vocab_size": 100}, tp=2)
    assert dict(odd["lm_head"].fields)["intermediate_size"] == 64
    assert dict(mods({**LLAMA, "vocab_size": 100})["lm_head"].fields)["intermediate_size"] == 100
    nohd = {k: v for k, v in LLAMA.items() if k not in ("head_dim", "num_key_value_heads")}
    assert dict(mods(nohd)["model.layers.0.self_attn.qkv_proj"].fields)[
        "intermediate_size"] == 3 * 4096
    a = arch(LLAMA)
    assert a.packed == {"qkv_proj": ("q_proj", "k_proj", "v_proj"),
                        "gate_up_proj": ("gate_proj", "up_proj")}
    assert a.maps_names and a.layer_types == ("dense",) * 32


def test_deepseek_modules():
    a = arch(DEEPSEEK_V3)
    m = {x.name: x for x in a.modules}
    assert a.layer_types[:4] == ("dense",) * 3 + ("MoE",)
    fused = m["model.layers.0.self_attn.fused_qkv_a_proj"]
    assert dict(fused.fields)["intermediate_size"] == 1536 + 512 + 64
    assert fused.cls == "DeepSeekV2FusedQkvAProjLinear"
    assert dict(m["model.layers.0.self_attn.q_b_proj"].fields)["intermediate_size"] == \
        128 * 192
    assert dict(m["model.layers.0.self_attn.kv_b_proj"].fields)["intermediate_size"] == \
        128 * 256
    assert dict(m["model.layers.0.self_attn.o_proj"].fields)["hidden_size"] == 128 * 128
    e = dict(m["model.layers.3.mlp.experts"].fields)
    assert (e["num_experts"], e["top_k"], e["intermediate_size"]) == (256, 8, 2048)
    assert dict(m["model.layers.3.mlp.shared_experts.gate_up_proj"].fields)[
        "intermediate_size"] == 2 * 2048
    assert dict(m["model.layers.0.mlp.gate_up_proj"].fields)["intermediate_size"] == 2 * 18432
    assert a.packed["fused_qkv_a_proj"] == ("q_a_proj", "kv_a_proj_with_mqa")
    no_q = mods({**DEEPSEEK_V3, "q_lora_rank": None})
    assert "model.layers.0.self_attn.q_proj" in no_q and \
        "model.layers.0.self_attn.kv_a_proj_with_mqa" in no_q
    assert dict(no_q["model.layers.0.self_attn.kv_a_proj_with_mqa"].fields)[
        "intermediate_size"] == 576
    assert "fused_qkv_a_proj" not in arch({**DEEPSEEK_V3, "q_lora_rank": None}).packed
    freq = arch({**DEEPSEEK_V3, "moe_layer_freq": 2, "first_k_dense_replace": 0})
    assert freq.layer_types[:4] == ("MoE", "dense", "MoE", "dense")
    noshared = mods({**DEEPSEEK_V3, "n_shared_experts": 0})
    assert not any("shared" in k for k in noshared)
    lim = arch({**DEEPSEEK_V3, "swiglu_limit": 10})
    assert dict(next(x for x in lim.modules if x.cls == "RoutedExperts").fields)[
        "swiglu_limit"] == 10.0 and "swiglu_limit 10" in lim.notes[0]
    tp = mods(DEEPSEEK_V3, tp=8)
    assert dict(tp["model.layers.3.mlp.experts"].fields)["intermediate_size"] == 256
    assert dict(tp["model.layers.0.self_attn.fused_qkv_a_proj"].fields)[
        "intermediate_size"] == 2112  # replicated
    ep = mods(DEEPSEEK_V3, tp=8, ep=8)  # issue 32: num_experts is the global count
    assert dict(ep["model.layers.3.mlp.experts"].fields)["num_experts"] == 256
    assert dict(ep["model.layers.3.mlp.experts"].fields)["ep_size"] == 8
    assert "larger than the number of experts" in \
        mods(DEEPSEEK_V3, ep=257)["model.layers.3.mlp.experts"].problems[0]
    assert not mods(DEEPSEEK_V3, ep=256)["model.layers.3.mlp.experts"].problems
    with pytest.raises(SelectorError, match="larger than the number of experts"):
        arch({**DEEPSEEK_V3, "num_experts_per_tok": 257})
    assert arch({**DEEPSEEK_V3, "num_experts_per_tok": 256}).modules
    assert any("num_attention_heads 128" in p for m in arch(DEEPSEEK_V3, tp=3).modules
               for p in m.problems)
    with pytest.raises(SelectorError, match="implausibly large"):
        arch(DEEPSEEK_V3, tp=A.LIMITS["parallel"] + 1)
    with pytest.raises(SelectorError, match="hidden_act"):
        arch({**DEEPSEEK_V3, "hidden_act": "relu2"})
    assert not arch(DEEPSEEK_V3).maps_names


def test_deepseek_defaults():
    base = {k: v for k, v in DEEPSEEK_V3.items() if k in ("architectures", "model_type")}
    a = arch(base)
    assert a.num_layers == 61 and a.layer_types[:4] == ("dense",) * 3 + ("MoE",)
    assert "first_k_dense_replace" in a.defaulted and a.notes
    v2 = arch({"architectures": ["DeepseekV2ForCausalLM"], "num_experts_per_tok": 6})
    assert v2.num_layers == 32 and v2.layer_types[0] == "MoE"
    assert not arch(DEEPSEEK_V3).defaulted


def test_qwen3_moe_modules():
    a = arch(QWEN3_MOE)
    assert a.layer_types == ("MoE",) * 48 and a.packed == {"qkv_proj": ("q_proj", "k_proj",
                                                                        "v_proj")}
    sparse = arch({**QWEN3_MOE, "decoder_sparse_step": 2, "mlp_only_layers": [1]})
    assert sparse.layer_types[:4] == ("dense", "dense", "dense", "MoE")
    assert "gate_up_proj" in sparse.packed
    m = {x.name: x for x in sparse.modules}
    assert dict(m["model.layers.0.mlp.gate_up_proj"].fields)["intermediate_size"] == 2 * 6144
    assert dict(m["model.layers.3.mlp.experts"].fields)["num_experts"] == 128
    alias = {k: v for k, v in QWEN3_MOE.items() if k != "num_experts"}
    alias["num_local_experts"] = 64
    assert dict(next(x for x in arch(alias).modules if x.cls == "RoutedExperts").fields)[
        "num_experts"] == 64
    assert arch({k: v for k, v in QWEN3_MOE.items() if k != "num_experts"}).modules


def test_nemotron_modules():
    cfg = {**NEMOTRON_H}
    a = arch(cfg)
    m = {x.name: x for x in a.modules}
    inp = dict(m["model.layers.0.mixer.in_proj"].fields)
    assert inp["intermediate_size"] == 2 * 64 * 64 + 2 * 8 * 128 + 64
    assert dict(m["model.layers.0.mixer.out_proj"].fields)["hidden_size"] == 64 * 64
    e = m["model.layers.1.mixer.experts"]
    assert e.expert_projs == ("up_proj", "None", "down_proj")
    assert (dict(e.fields)["activation"], dict(e.fields)["act_and_mul"]) == ("relu2", False)
    assert dict(m["model.layers.1.mixer.shared_experts.up_proj"].fields)[
        "intermediate_size"] == 3712
    assert "model.layers.5.mixer.qkv_proj" in m
    dense = arch({**cfg, "hybrid_override_pattern": "M-*E", "num_hidden_layers": 4})
    assert dense.layer_types == ("Mamba", "dense", "attention", "MoE")
    assert dict({x.name: x for x in dense.modules}["model.layers.1.mixer.up_proj"].fields)[
        "intermediate_size"] == 21504
    assert arch({**cfg, "hybrid_override_pattern": "M*", "num_hidden_layers": 2}).num_layers == 2
    nolayers = {k: v for k, v in cfg.items() if k != "num_hidden_layers"}
    assert arch(nolayers).num_layers == 52
    with pytest.raises(SelectorError, match="hybrid_override_pattern"):
        arch({**cfg, "hybrid_override_pattern": "MX" + "M" * 50})
    noshared = arch({**cfg, "n_shared_experts": 0})
    assert not any("shared" in x.name for x in noshared.modules)
    tp = {x.name: x for x in arch(cfg, tp=2).modules}
    assert dict(tp["model.layers.0.mixer.in_proj"].fields)["intermediate_size"] == \
        (2 * 64 * 64 + 2 * 8 * 128 + 64) // 2
    assert a.rename_prefix == (("backbone", "model"),)


def test_gpt_oss_modules():
    a = arch(GPT_OSS)
    m = {x.name: x for x in a.modules}
    e = dict(m["model.layers.0.mlp.experts"].fields)
    assert (e["activation"], e["num_experts"], e["top_k"], e["swiglu_limit"]) == \
        ("swigluoai", 128, 4, None)
    assert "model.layers.0.attn.qkv_proj" in m and "swiglu_limit 7" in a.notes[0]
    assert a.rename_substr == ((".self_attn.", ".attn."),)
    alt = {k: v for k, v in GPT_OSS.items() if k != "num_experts_per_tok"}
    alt["experts_per_token"] = 2  # not a GptOssConfig key: its num_experts_per_tok default
    assert dict({x.name: x for x in arch(alt).modules}["model.layers.0.mlp.experts"].fields)[
        "top_k"] == 4
    assert not arch({k: v for k, v in GPT_OSS.items() if k != "swiglu_limit"} |
                    {"swiglu_limit": None}).notes


def test_architecture_lookup():
    assert arch({**LLAMA, "architectures": None, "model_type": "qwen3"}).name == \
        "Qwen3ForCausalLM"
    assert arch({**LLAMA, "architectures": ["Foo", "MistralForCausalLM"]}).name == \
        "MistralForCausalLM"
    assert arch({k: v for k, v in LLAMA.items() if k != "model_type"}).model_type == "llama"
    # issue 32: Mixtral is read as vLLM builds it; issue 44: an unknown architecture is
    # refused as not modelled, never planned from its config's common keys
    mix = arch({**LLAMA, "architectures": ["MixtralForCausalLM"]})
    assert any(m.name == "model.layers.0.block_sparse_moe.experts" for m in mix.modules)
    with pytest.raises(SelectorError, match="architecture not modelled"):
        arch({**LLAMA, "architectures": ["FooForCausalLM"]})
    with pytest.raises(SelectorError, match="architectures"):
        arch({"architectures": ["FooForCausalLM"]})  # no standard keys: nothing to read
    with pytest.raises(SelectorError, match="model_type"):
        arch({"model_type": "foo"})
    with pytest.raises(SelectorError, match="is missing"):
        arch({})
    assert A.checkpoint_dtype({"dtype": "float16"}, P) == "float16"
    assert A.checkpoint_dtype({}, P) is None
    assert A.checkpoint_dtype({"torch_dtype": "bfloat16", "dtype": "x"}, P) == "bfloat16"
    with pytest.raises(SelectorError, match="torch_dtype"):
        A.checkpoint_dtype({"torch_dtype": "int8"}, P)


# -- plan helpers -----------------------------------------------------------------------------

def test_plan_helpers(tmp_path):
    assert _layers_text([]) == "" and _layers_text([3]) == "3"
    assert _layers_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert _layers_text(list(range(0, 100, 2))).endswith("...") and \
        len(_layers_text(list(range(0, 100, 2)))) == 40
    assert _join_whys(["x 'a'", "x 'b'", "x 'c'"]) == "x 'a', 'b' and 1 more"
    assert _join_whys(["x 'a'", "x 'b'"]) == "x 'a', 'b'"
    assert _join_whys(["a", "b"]) == "a, b"
    assert _join_whys(["x 'a'", "y 'b'"]) == "x 'a', y 'b'"
    (tmp_path / "config.json").write_text("{}")
    assert checkpoint_root(str(tmp_path)) == tmp_path
    assert checkpoint_root(tmp_path) == tmp_path
    for bad, needle in ((None, "not NoneType"), (b"x", "not bytes"), ("", "is empty"),
                        (" ", "is empty"), ("a\0b", "NUL"), ("x" * 4097, "not a usable"),
                        (str(tmp_path / "none"), "is not a directory"),
                        (str(tmp_path / "config.json"), "is not a directory")):
        with pytest.raises(SelectorError, match=needle):
            checkpoint_root(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SelectorError, match="has no config.json"):
        checkpoint_root(empty)
    assert checkpoint_root("x" * 4096 if False else str(tmp_path)) == tmp_path


# -- issue 44: Llama-4 text, ERNIE-4.5 MoE, routing and activation scales -----------------------

# meta-llama/Llama-4-Scout-17B-16E text_config (Maverick: interleave_moe_layer_step 2, 128 experts)
LLAMA4 = {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
          "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
          "num_hidden_layers": 4, "num_attention_heads": 40, "num_key_value_heads": 8,
          "head_dim": 128, "num_local_experts": 128, "num_experts_per_tok": 1,
          "interleave_moe_layer_step": 2, "vocab_size": 202048}
# baidu/ERNIE-4.5-21B-A3B-PT
ERNIE = {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
         "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536,
         "num_hidden_layers": 4, "num_attention_heads": 20, "num_key_value_heads": 4,
         "moe_num_experts": 64, "moe_k": 6, "moe_num_shared_experts": 2,
         "moe_layer_start_index": 1, "moe_layer_interval": 1, "vocab_size": 103424}


def test_llama4_interleaves_moe_layers_with_a_shared_expert_and_llama4_routing():
    m = mods(LLAMA4)
    assert "model.layers.0.feed_forward.gate_up_proj" in m  # dense: intermediate_size_mlp
    assert dict(m["model.layers.0.feed_forward.gate_up_proj"].fields)["intermediate_size"] \
        == 2 * 16384
    experts = dict(m["model.layers.1.feed_forward.experts"].fields)
    assert (experts["num_experts"], experts["top_k"], experts["intermediate_size"],
            experts["routing"]) == (128, 1, 8192, "llama4")
    assert "model.layers.1.feed_forward.shared_expert.gate_up_proj" in m
    assert "model.layers.1.feed_forward.router" not in m  # GateLinear without quant config


def test_llama4_multimodal_checkpoint_plans_its_language_model_under_its_prefix(tmp_path):
    """meta-llama/Llama-4-Scout-17B-16E-Instruct as published: Llama4ForConditionalGeneration,
    the text model's keys under text_config (vLLM mllama4.py: Llama4ForCausalLM under the
    prefix language_model; the vision tower and projector unquantized, not planned)."""
    text = {k: v for k, v in LLAMA4.items() if k != "architectures"}
    cfg = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
           "text_config": text, "vision_config": {"hidden_size": 1408}}
    a = arch(cfg)
    m = {x.name: x for x in a.modules}
    assert a.layer_types == arch(LLAMA4).layer_types
    assert sorted(m) == sorted(f"language_model.{x.name}" for x in arch(LLAMA4).modules)
    assert dict(m["language_model.model.layers.1.feed_forward.experts"].fields)["routing"] \
        == "llama4"
    assert not any("vision" in n or "projector" in n for n in m)
    # the text model's defaults are text_config's (Llama4TextConfig), named as such
    short = {**cfg, "text_config": {k: v for k, v in text.items() if k != "head_dim"}}
    assert "text_config.head_dim" in arch(short).defaulted
    with pytest.raises(SelectorError, match="text_config"):
        arch({**cfg, "text_config": [1]})


def test_ernie_moe_layers_start_at_moe_layer_start_index():
    a = arch(ERNIE)
    assert a.layer_types == ("dense", "MoE", "MoE", "MoE")
    m = {x.name: x for x in a.modules}
    f = dict(m["model.layers.1.mlp.experts"].fields)
    assert (f["num_experts"], f["top_k"], f["routing"]) == (64, 6, "unspecified")
    assert dict(m["model.layers.1.mlp.shared_experts.gate_up_proj"].fields)[
        "intermediate_size"] == 2 * 2 * 1536
    assert "model.layers.0.mlp.gate_up_proj" in m
    assert arch({**ERNIE, "use_moe": False}).layer_types == ("dense",) * 4


def test_fp8_dynamic_linear_activations_are_per_token_and_ct_experts_per_group(tmp_path):
    fp8 = {**QWEN3_MOE, "num_hidden_layers": 2,
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    (tmp_path / "fp8").mkdir()
    v = verdicts(tmp_path / "fp8", fp8)
    assert v["model.layers.0.self_attn.qkv_proj"].act_scale == "token"
    assert v["model.layers.0.mlp.experts"].scheme == "fp8_tensor_dynamic"
    assert v["model.layers.0.mlp.experts"].act_scale is None  # Fp8MoEMethod: per tensor
    ct = {**QWEN3_MOE, "num_hidden_layers": 2, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"g": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
            "dynamic": False}, "input_activations": {"num_bits": 8, "type": "float",
                                                     "strategy": "tensor", "symmetric": True,
                                                     "dynamic": True}}}}}
    (tmp_path / "ct").mkdir()
    w = verdicts(tmp_path / "ct", ct)
    assert w["model.layers.0.self_attn.qkv_proj"].act_scale == "token"
    assert w["model.layers.0.mlp.experts"].act_scale == "group_128"


def test_modelopt_flat_exclude_modules_is_read_from_vllm_0_33_on(tmp_path):
    cfg = {**LLAMA, "num_hidden_layers": 2, "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "producer": {"name": "modelopt"}, "exclude_modules": ["lm_head", "*self_attn*"]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = arch(cfg)
    old = Q.read_quantization(tmp_path, cfg, a, "0.32.0")
    new = Q.read_quantization(tmp_path, cfg, a, "0.33.0")
    qkv = next(m for m in a.modules if m.name.endswith("self_attn.qkv_proj"))
    assert old.verdict_of(qkv).scheme == "nvfp4" and old.release == "0.32.0"
    assert any("exclude_modules is not read by vLLM 0.32.0" in w for w in old.warnings)
    assert new.verdict_of(qkv).scheme is None and new.release == "0.33.0"
    assert not new.warnings
    assert Q.read_quantization(tmp_path, cfg, a, "0.34.0rc1").release == "0.33.0"
    assert Q.read_quantization(tmp_path, cfg, a).release == "0.32.0"


def test_the_plans_read_line_names_the_stacks_vllm_release(tmp_path):
    from helpers import run_main
    cfg = {**LLAMA, "num_hidden_layers": 2, "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "producer": {"name": "modelopt"}, "exclude_modules": ["lm_head", "*self_attn*"]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for stack, release, attention in (("vllm_0_32", "0.32.0", "linear nvfp4"),
                                      ("vllm_0_33", "0.33.0", "not planned")):
        rc, out, err = run_main(["explain", "--model", str(tmp_path), "platform=b200",
                                 f"stack={stack}"])
        assert rc in (0, 1), err
        assert f"as vLLM {release} reads it" in out
        line = next(ln for ln in out.splitlines() if ln.startswith("attention:"))
        assert attention in line, (stack, line)
