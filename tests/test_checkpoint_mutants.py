"""Cases a mutation run of the checkpoint modules showed unpinned (tools/mutate.py; see
docs/checkpoints.md "Test strength")."""
from __future__ import annotations

import dataclasses
import json

import pytest
from checkpoint_fixtures import (
    DEEPSEEK_QUANT,
    DEEPSEEK_V3,
    LLAMA,
    NEMOTRON_H,
    NVFP4_ARGS,
    QWEN3_MOE,
    compressed_tensors_nvfp4,
    nemotron_mixed_precision,
    write_checkpoint,
)
from helpers import load

from selector import SelectorError
from selector.checkpoint import arch as A
from selector.checkpoint import quant as Q

SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")


def _verdicts(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    a = A.read_architecture(config, tmp_path / "config.json")
    q = Q.read_quantization(tmp_path, config, a)
    return {m.name: q.verdict_of(m) for m in a.modules}


def test_two_character_star_patterns_are_split_as_vllm_splits_them(tmp_path):
    """`o*` becomes `o` and `o.*` (len >= 2): vLLM's substring rule then excludes every prefix
    holding an `o`."""
    assert Q._star_split(["o*"]) == ["o", "o.*"]
    assert Q._star_split(["*"]) == ["*"] and Q._star_split([".*"]) == [".*"]
    cfg = {**LLAMA, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                            "ignore": ["o*"]}}
    v = _verdicts(tmp_path, cfg)
    assert v["model.layers.0.mlp.down_proj"].scheme is None


def test_attention_only_groups_are_skipped_as_vllm_skips_them(tmp_path):
    q = compressed_tensors_nvfp4()
    q["config_groups"] = {"attn": {"targets": ["LlamaAttention"], "weights": dict(NVFP4_ARGS),
                                   "input_activations": dict(NVFP4_ARGS)},
                          "lin": {"targets": ["Linear"], "weights": {"num_bits": 8,
                                                                     "type": "float"}}}
    v = _verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})
    assert v["model.layers.0.self_attn.o_proj"].scheme is None  # the attention group: skipped
    assert v["model.layers.0.self_attn.o_proj"].other.startswith("FP8 weight-only")
    q["config_groups"]["attn"]["targets"] = ["LlamaAttention", "re:.*o_proj$"]
    v = _verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})
    assert v["model.layers.0.self_attn.o_proj"].scheme == "nvfp4"


@pytest.mark.parametrize("group", [{"targets": "Linear", "weights": {}},
                                   {"targets": ["Linear"], "weights": []},
                                   {"weights": {}}, [], "x"])
def test_malformed_groups_name_what_a_group_holds(tmp_path, group):
    q = compressed_tensors_nvfp4()
    q["config_groups"]["group_0"] = group
    with pytest.raises(SelectorError, match="group_0: .* must hold targets"):
        _verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})


def test_mixed_precision_mxfp8_linear_is_another_scheme(tmp_path):
    mp = nemotron_mixed_precision()
    mp["quantized_layers"]["backbone.layers.0.mixer.in_proj"] = {"quant_algo": "MXFP8"}
    v = _verdicts(tmp_path, {**NEMOTRON_H, "quantization_config": mp})
    assert v["model.layers.0.mixer.in_proj"].scheme == "mxfp8"
    assert v["model.layers.0.mixer.in_proj"].other is None
    assert v["model.layers.0.mixer.in_proj"].why == "quantized_layers: MXFP8"


def test_plan_objects_are_immutable(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    p = load(*SPARK).plan(d)
    k = p.kinds[0]
    for obj, field in ((p, "kinds"), (k, "quant"), (k.shapes[0], "modules"),
                       (p.architecture, "name"), (p.architecture.modules[0], "name"),
                       (p.quantization, "format")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, None)
    v = Q.Verdict("nvfp4", "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.scheme = None  # type: ignore[misc]


def test_text_lines_stay_within_100_columns_and_a_failed_plan_says_so(tmp_path):
    d = write_checkpoint(tmp_path, "ds", DEEPSEEK_V3, DEEPSEEK_QUANT)
    ok = load(*SPARK).plan(d)
    text = str(ok)
    summary = text[text.index("summary: "):].splitlines()
    assert all(len(ln) <= 100 for ln in summary) and len(summary) > 1
    assert "no usable backend" not in text
    bad = load("platform=h100", "stack=flashinfer_0_7_4", "policy.exclude=[marlin,emulation]"
               ).plan(d)
    assert not bad.ok and "some quantized layers have no usable backend" in str(bad)


def test_pattern_and_layer_counts_at_the_limit_are_accepted(tmp_path):
    Q._patterns(["a"] * Q.MAX_PATTERNS, "k", "w", "x")
    mp = nemotron_mixed_precision()
    mp["quantized_layers"] = {f"x.{i}": {"quant_algo": "NVFP4"} for i in range(Q.MAX_PATTERNS)}
    _verdicts(tmp_path, {**NEMOTRON_H, "quantization_config": mp})
    mp["quantized_layers"]["one.more"] = {"quant_algo": "NVFP4"}
    with pytest.raises(SelectorError, match="more than"):
        _verdicts(tmp_path, {**NEMOTRON_H, "quantization_config": mp})


def test_a_suffix_rename_applies_to_the_last_occurrence_only():
    oss = A.read_architecture({**LLAMA, "architectures": ["GptOssForCausalLM"],
                               "num_local_experts": 8, "num_experts_per_tok": 2},
                              A.Path("/x/config.json"))
    assert Q.map_name(oss, "a.down_proj.b.down_proj") == "a.down_proj.b.w2_weight"


def test_two_reads_of_a_checkpoint_are_equal(tmp_path):
    cfg = {**QWEN3_MOE, "quantization_config": compressed_tensors_nvfp4()}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = A.read_architecture(cfg, tmp_path / "config.json")
    assert Q.read_quantization(tmp_path, cfg, a) == Q.read_quantization(tmp_path, cfg, a)


def test_column_parallel_layers_are_split_by_tp():
    mods = {m.name: dict(m.fields) for m in A.read_architecture(
        DEEPSEEK_V3, A.Path("/x/config.json"), 8).modules}
    assert mods["model.layers.0.self_attn.q_b_proj"]["intermediate_size"] == 128 * 192 // 8
    assert mods["model.layers.0.self_attn.kv_b_proj"]["intermediate_size"] == 128 * 256 // 8
    nem = {m.name: dict(m.fields) for m in A.read_architecture(
        {**NEMOTRON_H, "hybrid_override_pattern": "M-*E", "num_hidden_layers": 4},
        A.Path("/x/config.json"), 2).modules}
    assert nem["model.layers.1.mixer.up_proj"]["intermediate_size"] == 21504 // 2


def test_every_plan_line_but_the_headers_fits_100_columns(tmp_path):
    d = write_checkpoint(tmp_path, "nemotron_h")
    for fmt_overrides in ((), ("layer.tp_size=2",)):
        text = str(load(*SPARK, *fmt_overrides).plan(d))
        body = [ln for ln in text.splitlines() if ln.startswith(" ")]
        assert body and all(len(ln) <= 100 for ln in body), max(body, key=len)


def test_compression_config_is_read_after_hf_quant_config(tmp_path):
    """vLLM puts hf_quant_config.json in config.quantization_config, and reads the older
    compression_config only when neither is there."""
    from checkpoint_fixtures import LLAMA_QUANT
    cfg = {**LLAMA, "quantization_config": None, "compression_config":
           compressed_tensors_nvfp4()}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = A.read_architecture(cfg, tmp_path / "config.json")
    assert Q.read_quantization(tmp_path, cfg, a).format == "compressed-tensors"
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(LLAMA_QUANT))
    assert Q.read_quantization(tmp_path, cfg, a).source == "hf_quant_config.json"


def test_ct_why_names_the_group_and_the_last_projections_target(tmp_path):
    q = compressed_tensors_nvfp4(w4a16=True)
    q["config_groups"]["g1"] = {"targets": ["re:.*down_proj$"], "input_activations": None,
                                "weights": dict(NVFP4_ARGS)}
    v = _verdicts(tmp_path, {**QWEN3_MOE, "quantization_config": q})
    assert v["model.layers.0.mlp.experts"].why == "config group g1 (target 're:.*down_proj$')"
    assert v["model.layers.0.self_attn.o_proj"].why == "config group group_0 (target 'Linear')"


def test_the_documented_limits_are_the_code_limits():
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[1] / "docs" / "checkpoints.md").read_text()
    doc = " ".join(doc.split())
    assert A.MAX_JSON_BYTES == 4 * 1024 * 1024 and "at most 4 MiB" in doc
    assert f"nested at most {A.MAX_JSON_DEPTH} deep" in doc and A.MAX_JSON_DEPTH == 64
    assert A.LIMITS == {"layers": 2048, "size": 1 << 20, "experts": 1 << 16,
                        "vocab": 1 << 24, "heads": 1 << 14, "parallel": 1 << 16}
    assert "at most 2,048 layers, 65,536 experts, 2^20 for a hidden size, 2^24 for a " \
        "vocabulary" in doc
    assert (Q.MAX_REGEX_REPEATS, Q.MAX_PATTERN_CHARS) == (4, 1000)
    assert "at most 4 repetitions, at most 1,000 characters" in doc
