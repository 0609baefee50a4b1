"""Issue 21: a checkpoint is read exactly as vLLM reads it (each case was a silent wrong plan
before), and a hostile checkpoint ends in one clean error (exit 2), never a traceback or a hang.

The engine's own answers for these configurations are checked in the vLLM environment by
tests/vllm/test_checkpoint_differential.py; here each case pins selector's plan."""
from __future__ import annotations

import copy
import json
import os

import pytest
from checkpoint_fixtures import (
    CHECKPOINTS,
    DEEPSEEK_QUANT,
    DEEPSEEK_V3,
    LLAMA,
    LLAMA_QUANT,
    NEMOTRON_H,
    NVFP4_ARGS,
    QWEN3_MOE,
    compressed_tensors_nvfp4,
    write_checkpoint,
)
from helpers import assert_clean_error, load, run_cli, run_cli_many

from selector import SelectorError

SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")


def _kind(plan, component):
    return [k for k in plan.kinds if k.component == component]


def _ct_groups(*groups):
    """compressed-tensors quantization_config with the given (name, targets, w4a16) groups."""
    return {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": {name: {"targets": targets, "weights": dict(NVFP4_ARGS),
                                     "input_activations": None if a16 else dict(NVFP4_ARGS)}
                              for name, targets, a16 in groups},
            "ignore": ["lm_head"]}


# -- 1. compressed-tensors target priority ----------------------------------------------------

@pytest.mark.parametrize("order", ["linear-first", "regex-first"])
def test_ct_regex_target_wins_over_class_name_whatever_the_group_order(tmp_path, order):
    """vLLM find_matched_target: the layer's name (exact or re:) before class names."""
    groups = [("group_0", ["Linear"], False), ("group_1", ["re:.*self_attn.*"], True)]
    if order == "regex-first":
        groups.reverse()
    d = write_checkpoint(tmp_path, order, {**QWEN3_MOE, "quantization_config":
                                           _ct_groups(*groups)})
    p = load(*SPARK).plan(d)
    (attn,) = _kind(p, "attention")
    assert attn.quant == "nvfp4_w4a16", attn.why
    (experts,) = _kind(p, "routed experts")
    assert experts.quant == "nvfp4"


def test_ct_fused_qkv_matches_by_its_shards(tmp_path):
    """q/k/v named by re: targets of another group: vLLM fuses them into qkv_proj and matches
    all three shards (the first shard's target decides)."""
    q = _ct_groups(("group_0", ["Linear"], False),
                   ("group_1", ["re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"], True))
    d = write_checkpoint(tmp_path, "qkv", {**LLAMA, "quantization_config": q})
    p = load(*SPARK).plan(d)
    (attn, *more) = [k for k in _kind(p, "attention")]
    schemes = {s.projections: k.quant for k in _kind(p, "attention") for s in k.shapes}
    assert schemes == {("qkv_proj",): "nvfp4_w4a16", ("o_proj",): "nvfp4"}, schemes


# -- 2. which file wins -----------------------------------------------------------------------

def test_config_json_quantization_config_wins_over_hf_quant_config(tmp_path):
    d = write_checkpoint(tmp_path, "both", {**QWEN3_MOE, "quantization_config":
                                            compressed_tensors_nvfp4(w4a16=True)},
                         {"producer": {"name": "modelopt"}, "quantization": {
                             "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}})
    p = load(*SPARK).plan(d)
    assert {k.quant for k in p.kinds} == {"nvfp4_w4a16", None}
    assert p.quantization.format == "compressed-tensors"
    assert p.quantization.where.endswith("config.json")
    assert any("contradicts" in w for w in p.quantization.warnings)
    text = str(p)
    assert f"read: {d / 'config.json'}" in text
    assert "warning: hf_quant_config.json (modelopt NVFP4) contradicts" in text


def test_hf_quant_config_alone_is_read(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    p = load(*SPARK).plan(d)
    assert p.quantization.where.endswith("hf_quant_config.json") and not p.quantization.warnings


# -- 3. ModelOpt MIXED_PRECISION experts whose projections disagree ---------------------------

def _nemotron_mixed(first, second):
    layers = {}
    for i, block in enumerate(NEMOTRON_H["hybrid_override_pattern"]):
        if block == "E":
            p = f"backbone.layers.{i}.mixer.experts"
            for e in range(2):
                layers[f"{p}.{e}.up_proj"] = {"quant_algo": first}
                layers[f"{p}.{e}.down_proj"] = {"quant_algo": second}
    return {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
            "quantized_layers": layers}


@pytest.mark.parametrize("first,second,scheme", [("NVFP4", "FP8", "nvfp4"),
                                                 ("W4A16_NVFP4", "NVFP4", "nvfp4_w4a16"),
                                                 ("FP8", "NVFP4", "fp8_tensor")])
def test_mixed_precision_experts_disagreeing_follow_vllm_and_say_so(tmp_path, first, second,
                                                                     scheme):
    """vLLM _resolve_quant_algo: the first quantized_layers entry under the experts prefix
    decides the one fused MoE method; the plan says the projections disagree."""
    d = write_checkpoint(tmp_path, f"mix{first}", {**NEMOTRON_H, "quantization_config":
                                                   _nemotron_mixed(first, second)})
    sel = load(*SPARK)
    p = sel.plan(d)
    (experts,) = _kind(p, "routed experts")
    assert experts.quant == scheme
    assert experts.warnings and "disagree" in experts.warnings[0]
    assert f"up_proj {first}" in experts.warnings[0] and f"down_proj {second}" in \
        experts.warnings[0]
    assert "warning: quantized_layers disagree" in str(p)


# -- 4. exclusions on MoE ---------------------------------------------------------------------

def test_modelopt_unfused_exclusion_does_not_exclude_the_fused_experts(tmp_path):
    """vLLM matches exclusions against the fused prefix (…mlp.experts): `*down_proj` does not
    match it, so vLLM builds an NVFP4 MoE."""
    q = copy.deepcopy(DEEPSEEK_QUANT)
    q["quantization"]["exclude_modules"] = ["lm_head", "*down_proj"]
    d = write_checkpoint(tmp_path, "x", DEEPSEEK_V3, q)
    p = load(*SPARK).plan(d)
    (experts,) = _kind(p, "routed experts")
    assert experts.quant == "nvfp4"
    # the dense and shared down_proj are excluded
    assert any(k.quant is None and "*down_proj" in k.why for k in _kind(p, "dense MLP"))


def test_modelopt_fused_exclusion_excludes_the_experts(tmp_path):
    q = copy.deepcopy(DEEPSEEK_QUANT)
    q["quantization"]["exclude_modules"] = ["lm_head", "*mlp.experts*"]
    d = write_checkpoint(tmp_path, "x", DEEPSEEK_V3, q)
    p = load(*SPARK).plan(d)
    (experts,) = _kind(p, "routed experts")
    assert experts.quant is None and "*mlp.experts*" in experts.why


def test_ct_ignore_is_applied_to_the_experts_projection_names(tmp_path):
    """compressed-tensors checks ignore against each expert projection name
    (…experts.0.gate_proj); an `re:` pattern that names them excludes the MoE."""
    q = compressed_tensors_nvfp4()
    q["ignore"] = ["lm_head", r"re:.*mlp\.experts\..*"]
    d = write_checkpoint(tmp_path, "x", {**QWEN3_MOE, "quantization_config": q})
    p = load(*SPARK).plan(d)
    (experts,) = _kind(p, "routed experts")
    assert experts.quant is None and "ignored by" in experts.why


# -- 5. overrides under --model ---------------------------------------------------------------

@pytest.mark.parametrize("override", ["layer.quant=nvfp4_w4a16", "layer.op=linear",
                                      "layer.num_experts=8", "layer.hidden_size=1024",
                                      "layer.intermediate_size=64", "layer.quant=nvfp4",
                                      "layer=deepseek_moe"])
def test_overrides_the_checkpoint_fixes_are_refused(tmp_path, override):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    r = run_cli("explain", "--model", str(d), *SPARK, override)
    assert_clean_error(r, "cannot be combined with --model")


def test_api_override_that_the_checkpoint_fixes_is_refused(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    with pytest.raises(SelectorError, match="layer.num_experts.*cannot be combined"):
        load(*SPARK, "layer.num_experts=8").plan(d)


def test_why_under_model(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    bad, good = run_cli_many([("explain", "--model", str(d), *SPARK, "--why", "NO_SUCH"),
                              ("explain", "--model", str(d), *SPARK, "--why",
                               "flashinfer_cutlass")])
    assert_clean_error(bad, "--why", "NO_SUCH")
    assert good.returncode == 0, good.stderr
    assert "routed experts experts: flashinfer_cutlass: selected" in good.stdout


# -- 6. Hugging Face defaults -----------------------------------------------------------------

def test_nemotron_without_mamba_num_heads_takes_the_hf_default(tmp_path):
    cfg = {k: v for k, v in CHECKPOINTS["nemotron_h"][0].items() if k != "mamba_num_heads"}
    d = write_checkpoint(tmp_path, "nemotron_h", cfg)
    p = load(*SPARK).plan(d)
    in_proj = next(s for k in _kind(p, "Mamba") for s in k.shapes if "in_proj" in s.projections)
    # HF NemotronHConfig default mamba_num_heads 128: 2*128*64 + 2*8*128 + 128
    assert in_proj.fields["intermediate_size"] == 2 * 128 * 64 + 2 * 8 * 128 + 128
    assert any("mamba_num_heads" in n for n in p.architecture.notes)


def test_deepseek_v3_first_k_dense_replace_defaults_to_3(tmp_path):
    cfg = {k: v for k, v in DEEPSEEK_V3.items() if k != "first_k_dense_replace"}
    p = load(*SPARK).plan(write_checkpoint(tmp_path, "ds", cfg, DEEPSEEK_QUANT))
    assert p.architecture.layer_types[:4] == ("dense", "dense", "dense", "MoE")


def test_no_nvfp4_module_names_the_excluding_pattern(tmp_path):
    d = write_checkpoint(tmp_path, "allx", LLAMA, {"producer": {"name": "modelopt"},
                                                   "quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
        "exclude_modules": ["model.layers*", "lm_head"]}})
    with pytest.raises(SelectorError, match="excluded by exclude_modules 'model.layers"):
        load(*SPARK).plan(d)


# -- 7. per-GPU sizes -------------------------------------------------------------------------

def test_tp_and_ep_split_the_sizes(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    (e1,) = _kind(load(*SPARK).plan(d), "routed experts")
    (e_tp,) = _kind(load(*SPARK, "layer.tp_size=8").plan(d), "routed experts")
    (e_ep,) = _kind(load(*SPARK, "layer.tp_size=8", "layer.ep_size=8").plan(d),
                    "routed experts")
    f1, ftp, fep = (k.shapes[0].fields for k in (e1, e_tp, e_ep))
    assert (f1["intermediate_size"], f1["num_experts"]) == (2048, 256)
    assert (ftp["intermediate_size"], ftp["num_experts"]) == (256, 256)
    # issue 32: layer.num_experts is the global count (vLLM's FusedMoEConfig.num_experts and
    # the README); the rank holds num_experts / ep_size of them
    assert (fep["intermediate_size"], fep["num_experts"], fep["ep_size"]) == (2048, 256, 8)
    dense = load(*SPARK, "layer.tp_size=8").plan(d)
    shapes = {s.projections: (s.fields["hidden_size"], s.fields["intermediate_size"])
              for k in _kind(dense, "dense MLP") for s in k.shapes}
    assert shapes == {("gate_up_proj",): (7168, 2 * 18432 // 8), ("down_proj",): (18432 // 8,
                                                                                  7168)}


def test_tp_that_does_not_divide_is_refused(tmp_path):
    """A split vLLM refuses is a problem of the modules it concerns: the plan is not ok."""
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    p = load(*SPARK, "layer.tp_size=3").plan(d)
    assert not p.ok
    assert any("num_attention_heads 128 is not divisible by the tensor-parallel size 3" in x
               and "verify_with_parallel_config" in x for x in p.problems())
    assert any("not divisible by the MoE tensor-parallel size 3" in x for x in p.problems())


# -- hostile checkpoints ----------------------------------------------------------------------

def test_checkpoint_strings_cannot_forge_lines(tmp_path):
    q = compressed_tensors_nvfp4()
    q["format"] = "nvfp4\nselected: flashinfer_trtllm\x1b[2J"
    q["config_groups"]["grp\nselected: x"] = q["config_groups"].pop("group_0")
    d = write_checkpoint(tmp_path, "forge", {**QWEN3_MOE, "quantization_config": q})
    r = run_cli("explain", "--model", str(d), *SPARK)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout
    assert not any(ln.startswith("selected:") for ln in r.stdout.splitlines())
    assert "\\x1b[2J" in r.stdout


@pytest.mark.parametrize("pattern,needle", [("re:(.|.)*!", "alternatives inside a repetition"),
                                            ("re:(a*)*!", "a repetition inside a repetition"),
                                            ("re:.*.*.*.*.*!", "repetitions"),
                                            ("re:[unclosed", "is not a regular expression")])
def test_hostile_regex_is_refused_by_name_in_time(tmp_path, pattern, needle):
    q = compressed_tensors_nvfp4()
    q["ignore"] = ["lm_head", pattern]
    d = write_checkpoint(tmp_path, "re", {**QWEN3_MOE, "quantization_config": q})
    with pytest.raises(SelectorError) as exc:  # refused by name: never run
        load(*SPARK).plan(d)
    assert needle in str(exc.value) and pattern in str(exc.value)
    assert "quantization_config.ignore" in str(exc.value)


def test_deep_and_huge_configs_are_refused_fast(tmp_path):
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    big = write_checkpoint(tmp_path, "big", {**LLAMA, "num_hidden_layers": 10 ** 8},
                           LLAMA_QUANT)
    topk = write_checkpoint(tmp_path, "topk", {**DEEPSEEK_V3, "num_experts_per_tok": 300},
                            DEEPSEEK_QUANT)
    many = write_checkpoint(tmp_path, "many", {**DEEPSEEK_V3, "n_routed_experts": 10 ** 12},
                            DEEPSEEK_QUANT)
    rs = run_cli_many([("explain", "--model", str(x), *SPARK) for x in (deep, big, topk, many)])
    assert_clean_error(rs[0], "config.json")
    assert_clean_error(rs[1], "num_hidden_layers", "100000000", "config.json")
    assert_clean_error(rs[2], "num_experts_per_tok", "300", "larger than")
    assert_clean_error(rs[3], "n_routed_experts", "implausibly large")


def test_ep_size_override_larger_than_experts_is_refused(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    p = load(*SPARK, "layer.ep_size=1024").plan(d)
    assert not p.ok and any("expert-parallel size 1024 is larger than the number of experts"
                            in x for x in p.problems())


@pytest.mark.parametrize("arg,needle", [("~nosuchuser_xyz/x", "cannot be expanded"),
                                        ("x" * 5000, "not a usable path"),
                                        ("", "is empty")])
def test_bad_model_paths(arg, needle):
    assert_clean_error(run_cli("explain", "--model", arg, *SPARK), "--model", needle)


@pytest.mark.parametrize("value", [None, b"/tmp", 3, 2.5, ["a"]])
def test_plan_of_a_non_path_is_a_clean_error(value):
    with pytest.raises(SelectorError, match="--model"):
        load(*SPARK).plan(value)


def test_config_json_that_is_not_a_file(tmp_path):
    d = tmp_path / "fifo"
    d.mkdir()
    os.mkfifo(d / "config.json")
    with pytest.raises(SelectorError, match="not a regular file"):  # a hang: never returns
        load(*SPARK).plan(d)


def test_checkpoint_value_is_blamed_on_the_checkpoint_key(tmp_path):
    """`swiglu_limit: NaN` in config.json: the error names config.json and its key, not a
    `layer.*` key the user never wrote."""
    d = write_checkpoint(tmp_path, "ds", {**DEEPSEEK_V3, "swiglu_limit": float("nan")},
                         DEEPSEEK_QUANT)
    r = run_cli("explain", "--model", str(d), *SPARK)
    line = assert_clean_error(r, "config.json", "swiglu_limit", "nan")
    assert "layer.swiglu_limit" not in line


def test_json_output_has_the_file_and_warnings(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    data = json.loads(json.dumps(load(*SPARK).plan(d).to_dict()))
    assert data["checkpoint"]["quantization"]["file"].endswith("hf_quant_config.json")
    assert data["checkpoint"]["quantization"]["warnings"] == []


# -- the corpus -------------------------------------------------------------------------------

def test_corpus_files_are_the_corpus_and_each_one_plans(tmp_path):
    """tests/checkpoint_corpus/ holds what checkpoint_corpus.py writes (>= 30 checkpoints), and
    selector plans each one or refuses it as vLLM does (vLLM's answers: tests/vllm)."""
    import checkpoint_corpus as corpus
    assert len(corpus.CORPUS) >= 30
    assert sorted(p.name for p in corpus.HERE.iterdir()) == sorted(corpus.CORPUS)
    sel = load(*SPARK)
    for name, entry in corpus.CORPUS.items():
        assert list(corpus.read(corpus.HERE / name)) == json.loads(json.dumps(entry)), name
        if name == "nemotron-3-nano-legacy-mixed":
            with pytest.raises(SelectorError, match="Unknown ModelOpt quant algo"):
                sel.plan(corpus.HERE / name)
            continue
        assert sel.plan(corpus.HERE / name).kinds, name
    assert sum(1 for n, e in corpus.CORPUS.items() for _ in corpus.variants(n, e)) >= 400
