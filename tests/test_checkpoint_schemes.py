"""Issue 26: `explain --model` plans every quantized MoE and linear layer with its `layer.quant`
value, read as vLLM 0.32.0 reads each format (quantization/fp8.py, mxfp4.py, modelopt.py,
compressed_tensors/...); the launch plan checks one --moe-backend against every scheme. One unit
test per mapping, and the bad inputs. vLLM's own reading of the same files:
tests/vllm/test_checkpoint_differential.py."""
from __future__ import annotations

import copy
import json
import re

import pytest
from checkpoint_fixtures import DEEPSEEK_V3, GPT_OSS, LLAMA, QWEN3_MOE, write_checkpoint
from helpers import load, run_main
from launch_fixtures import fp8_block_dense, mixed_block_moe

from selector import SelectorError
from selector.checkpoint import arch as A
from selector.checkpoint import quant as Q
from selector.engines.vllm_flags import VLLM_LINEAR_QUANT, VLLM_MOE_ACCEPTS

SPARK = ("platform=dgx_spark", "stack=flashinfer_0_7_4")
PRO = ("engine=vllm", "platform=rtx_pro_6000", "stack=vllm_0_33")
DS = dict(DEEPSEEK_V3, num_hidden_layers=5)
QW = dict(QWEN3_MOE, num_hidden_layers=2)
LL = dict(LLAMA, num_hidden_layers=2)
GPT = dict({k: v for k, v in GPT_OSS.items() if k != "quantization_config"},
           num_hidden_layers=2)
DS_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
          "weight_block_size": [128, 128]}


def verdicts(tmp_path, config, q):
    cfg = {**config, "quantization_config": q}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = A.read_architecture(cfg, tmp_path / "config.json")
    got = Q.read_quantization(tmp_path, cfg, a)
    return {m.name: got.verdict_of(m) for m in a.modules}


def schemes(v):
    return {n: x.scheme for n, x in v.items()}


# -- quant_method fp8 (fp8.py Fp8Config) ------------------------------------------------------

def test_fp8_block_checkpoint_is_fp8_block_everywhere_but_the_lm_head(tmp_path):
    s = schemes(verdicts(tmp_path, DS, DS_FP8))
    assert s["model.layers.3.mlp.experts"] == "fp8_block"
    assert s["model.layers.0.self_attn.fused_qkv_a_proj"] == "fp8_block"
    assert s["model.layers.3.mlp.shared_experts.gate_up_proj"] == "fp8_block"
    assert s["model.layers.0.mlp.down_proj"] == "fp8_block"
    assert s["lm_head"] is None  # ParallelLMHead is not a LinearBase


@pytest.mark.parametrize("act,scheme", [("static", "fp8_tensor"),
                                        ("dynamic", "fp8_tensor_dynamic")])
def test_fp8_per_tensor_takes_the_activation_scheme(tmp_path, act, scheme):
    q = {"quant_method": "fp8", "activation_scheme": act, "ignored_layers": ["lm_head"]}
    s = schemes(verdicts(tmp_path, QW, q))
    assert s["model.layers.0.mlp.experts"] == scheme
    assert s["model.layers.1.self_attn.qkv_proj"] == scheme


def test_fp8_ignored_layers_are_exact_names_with_fused_shards(tmp_path):
    q = {**DS_FP8, "ignored_layers": ["model.layers.1.self_attn.q_a_proj",
                                      "model.layers.1.self_attn.kv_a_proj_with_mqa",
                                      "model.layers.3.mlp.experts", "*o_proj"]}
    v = verdicts(tmp_path, DS, q)
    assert v["model.layers.1.self_attn.fused_qkv_a_proj"].scheme is None
    assert "skipped by ignored_layers" in v["model.layers.1.self_attn.fused_qkv_a_proj"].why
    assert v["model.layers.3.mlp.experts"].scheme is None
    assert v["model.layers.4.mlp.experts"].scheme == "fp8_block"
    assert v["model.layers.0.self_attn.o_proj"].scheme == "fp8_block"  # exact mode: no globs
    q["ignored_layers"] = ["model.layers.1.self_attn.q_a_proj"]
    with pytest.raises(SelectorError, match="some but not all shards"):
        verdicts(tmp_path, DS, q)


def test_fp8_modules_to_not_convert_count_only_without_ignored_layers(tmp_path):
    q = {**DS_FP8, "modules_to_not_convert": ["model.layers.3.mlp.experts"]}
    assert verdicts(tmp_path, DS, q)["model.layers.3.mlp.experts"].scheme is None
    q["ignored_layers"] = ["model.layers.4.mlp.experts"]
    v = verdicts(tmp_path, DS, q)
    assert v["model.layers.3.mlp.experts"].scheme == "fp8_block"
    assert v["model.layers.4.mlp.experts"].scheme is None


def test_fp8_store_dtype_mxfp4_makes_the_experts_mxfp4(tmp_path):
    s = schemes(verdicts(tmp_path, DS, {**DS_FP8, "store_dtype": "mxfp4"}))
    assert s["model.layers.3.mlp.experts"] == "mxfp4"
    assert s["model.layers.3.mlp.shared_experts.down_proj"] == "fp8_block"


@pytest.mark.parametrize("edit,needles", [
    ({"activation_scheme": "per_token"}, ("activation_scheme", "'per_token'",
                                          "accepted: dynamic, static", "config.json")),
    ({"activation_scheme": None}, ("activation_scheme", "accepted: dynamic, static")),
    ({"weight_block_size": [128]}, ("weight_block_size", "[128]", "2 dimensions")),
    ({"weight_block_size": [128, 128, 1]}, ("weight_block_size", "two integers")),
    ({"weight_block_size": "128x128"}, ("weight_block_size", "two integers")),
    ({"weight_block_size": [0, 128]}, ("weight_block_size", "positive integers")),
    ({"activation_scheme": "static"}, ("activation_scheme", "'static'",
                                       "dynamic activations only")),
    ({"ignored_layers": "lm_head"}, ("ignored_layers", "must be a list")),
    ({"store_dtype": 4}, ("store_dtype", "must be a string")),
])
def test_fp8_bad_configs_are_refused_naming_the_key(tmp_path, edit, needles):
    q = {**DS_FP8, **edit}
    if edit.get("activation_scheme", "") is None:
        del q["activation_scheme"]
    with pytest.raises(SelectorError) as e:
        verdicts(tmp_path, DS, q)
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


def test_fp8_blocks_other_than_128_are_read_but_have_no_layer_quant_value(tmp_path):
    """vLLM 0.32.0 loads [64, 64] blocks (a kFp8Static QuantKey of that group shape); selector's
    fp8_block is 128x128, so the layers are named and left to the engine, and a checkpoint of
    nothing else is refused naming the block shape."""
    v = verdicts(tmp_path, DS, {**DS_FP8, "weight_block_size": [64, 64]})
    x = v["model.layers.3.mlp.experts"]
    assert x.scheme is None and "FP8 64x64 blocks" in x.other
    d = write_checkpoint(tmp_path, "b64", {**DS, "quantization_config": {
        **DS_FP8, "weight_block_size": [64, 64]}})
    with pytest.raises(SelectorError, match="no module .* scheme selector plans.*64x64"):
        load(*SPARK).plan(d)


# -- quant_method mxfp4 (mxfp4.py Mxfp4Config, GptOssMxfp4Config) --------------------------

def test_mxfp4_experts_are_mxfp4_and_every_linear_layer_unquantized(tmp_path):
    v = verdicts(tmp_path, GPT, {"quant_method": "mxfp4", "modules_to_not_convert": []})
    assert v["model.layers.0.mlp.experts"].scheme == "mxfp4"
    assert v["model.layers.0.attn.qkv_proj"].scheme is None
    assert "leaves linear layers unquantized" in v["model.layers.0.attn.qkv_proj"].why
    assert v["lm_head"].scheme is None


# -- ModelOpt ---------------------------------------------------------------------------------

@pytest.mark.parametrize("algo,linear,moe", [
    ("FP8", "fp8_tensor", "fp8_tensor"),
    ("FP8_PER_CHANNEL_PER_TOKEN", "fp8_channel", "fp8_tensor"),
    ("FP8_PB_WO", "fp8_block", "fp8_tensor"),
    ("fp8_pb_wo", "fp8_block", "fp8_tensor"),
    ("MXFP8", "mxfp8", "mxfp8"),
])
def test_modelopt_uniform_algos(tmp_path, algo, linear, moe):
    q = {"quant_method": "modelopt", "quant_algo": algo, "ignore": ["lm_head", "*mlp.gate"]}
    v = verdicts(tmp_path, QW, q)
    assert v["model.layers.0.self_attn.qkv_proj"].scheme == linear
    assert v["model.layers.0.mlp.experts"].scheme == moe
    w = v["model.layers.0.mlp.experts"].warning
    assert (w is not None) == (moe != linear), w
    if w:  # vLLM's ModelOptFp8MoEMethod is per-tensor whatever the FP8 algo
        assert "ModelOptFp8MoEMethod" in w


def test_modelopt_legacy_fp8_file_and_minimax_mxfp8(tmp_path):
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.15.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                         "exclude_modules": ["lm_head"]}}))
    (tmp_path / "config.json").write_text(json.dumps(LL))
    a = A.read_architecture(LL, tmp_path / "config.json")
    q = Q.read_quantization(tmp_path, LL, a)
    assert q.verdict_of(a.modules[0]).scheme == "fp8_tensor"
    (tmp_path / "hf_quant_config.json").unlink()
    v = verdicts(tmp_path, QW, {"quant_method": "mxfp8", "ignored_layers": ["lm_head"]})
    assert v["model.layers.0.mlp.experts"].scheme == "mxfp8" and v["lm_head"].scheme is None


def _mixed(algo_experts, group_size=None, attn="FP8"):
    layers = {}
    for i in range(2):
        rec = {"quant_algo": algo_experts[i]}
        if group_size is not None:
            rec["group_size"] = group_size[i]
        layers[f"model.layers.{i}.mlp.experts"] = rec
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            layers[f"model.layers.{i}.self_attn.{p}"] = {"quant_algo": attn}
    return {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
            "quantized_layers": layers}


def test_mixed_precision_maps_every_algo(tmp_path):
    v = verdicts(tmp_path, QW, _mixed(("NVFP4", "FP8_PB_WO")))
    assert v["model.layers.0.mlp.experts"].scheme == "nvfp4"
    assert v["model.layers.1.mlp.experts"].scheme == "fp8_block"
    assert v["model.layers.0.self_attn.qkv_proj"].scheme == "fp8_tensor"
    v = verdicts(tmp_path, QW, _mixed(("FP8_BLOCK_SCALES", "MXFP8"), attn="FP8_PB_WO"))
    assert v["model.layers.0.mlp.experts"].scheme == "fp8_block"
    assert v["model.layers.1.mlp.experts"].scheme == "mxfp8"
    assert v["model.layers.0.self_attn.qkv_proj"].scheme == "fp8_block"
    # FP8_PER_CHANNEL_PER_TOKEN has no MoE method; FP8_BLOCK_SCALES no linear one
    v = verdicts(tmp_path, QW, _mixed(("FP8_PER_CHANNEL_PER_TOKEN", "FP8"),
                                      attn="FP8_BLOCK_SCALES"))
    assert v["model.layers.0.mlp.experts"].scheme is None
    assert v["model.layers.1.mlp.experts"].scheme == "fp8_tensor"
    assert v["model.layers.0.self_attn.qkv_proj"].scheme is None


def test_mixed_precision_block_group_sizes(tmp_path):
    v = verdicts(tmp_path, QW, _mixed(("FP8_PB_WO", "FP8_PB_WO"), (64, 64)))
    x = v["model.layers.0.mlp.experts"]
    assert x.scheme is None and "FP8 64x64 blocks" in x.other
    with pytest.raises(SelectorError, match="different group_size values.*one group_size"):
        verdicts(tmp_path, QW, _mixed(("FP8_PB_WO", "FP8_PB_WO"), (64, 128)))
    with pytest.raises(SelectorError, match="group_size: 'x' must be a positive integer"):
        verdicts(tmp_path, QW, _mixed(("FP8_PB_WO", "FP8_PB_WO"), ("x", 128)))


# -- compressed-tensors -----------------------------------------------------------------------

W_CH = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
        "dynamic": False}
A_TOK = {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
         "dynamic": True}
W_T = {**W_CH, "strategy": "tensor"}
A_T = {**W_CH, "strategy": "tensor"}
W_B = {**W_CH, "strategy": "block", "block_structure": [128, 128]}
A_G = {**A_TOK, "strategy": "group", "group_size": 128}
MX4 = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
       "symmetric": True, "dynamic": False}
MX8 = {**MX4, "num_bits": 8, "scale_dtype": "torch.uint8"}


def ct(w, a, fmt="float-quantized"):
    return {"quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"g": {"targets": ["Linear"], "weights": w,
                                    "input_activations": a}},
            "ignore": ["lm_head", "re:.*mlp.gate$"]}


@pytest.mark.parametrize("w,a,fmt,linear,moe", [
    (W_CH, A_TOK, "float-quantized", "fp8_channel", "fp8_channel"),
    (W_T, A_T, "float-quantized", "fp8_tensor", "fp8_tensor"),
    (W_T, {**A_T, "dynamic": True}, "float-quantized", "fp8_tensor_dynamic",
     "fp8_tensor_dynamic"),
    (W_B, A_G, "float-quantized", "fp8_block", "fp8_block"),
    (W_B, A_G, "naive-quantized", "fp8_block", "fp8_block"),
    (MX4, {**MX4, "dynamic": True}, "mxfp4-pack-quantized", "mxfp4_w4a4", "mxfp4_w4a4"),
    (MX4, None, "mxfp4-pack-quantized", "mxfp4_w4a4", "mxfp4_w4a4"),
    (MX8, {**MX8, "dynamic": True}, "mxfp8-quantized", "mxfp8", "mxfp8"),
])
def test_ct_schemes(tmp_path, w, a, fmt, linear, moe):
    v = verdicts(tmp_path, QW, ct(w, a, fmt))
    assert v["model.layers.0.self_attn.qkv_proj"].scheme == linear
    assert v["model.layers.0.mlp.experts"].scheme == moe


@pytest.mark.parametrize("w,a,other", [
    (W_CH, None, "FP8 weight-only"),
    (W_CH, A_T, "static per-tensor activations"),
    ({**W_B, "block_structure": [64, 64]}, A_G, "FP8 64x64 blocks"),
    (MX4, A_TOK, "MXFP4 weights, dynamic FP8 activations"),
])
def test_ct_schemes_without_a_layer_quant_value(tmp_path, w, a, other):
    v = verdicts(tmp_path, LL, ct(w, a))
    x = v["model.layers.0.self_attn.qkv_proj"]
    assert x.scheme is None and other in x.other


@pytest.mark.parametrize("w,a,fmt,needle", [
    (W_T, A_TOK, "float-quantized", "per-tensor FP8 weights take per-tensor activations"),
    (W_CH, A_T, "float-quantized", "per-channel FP8 weights take dynamic per-token"),
    (W_B, A_G, "pack-quantized", "not an activation quantization format"),
    ({**W_CH, "dynamic": True, "strategy": "tensor"}, A_TOK, "float-quantized",
     "no compressed-tensors scheme takes FP8 weights"),
])
def test_ct_layers_vllm_refuses(tmp_path, w, a, fmt, needle):
    with pytest.raises(SelectorError, match=needle):
        verdicts(tmp_path, QW, ct(w, a, fmt))


@pytest.mark.parametrize("w,a,needles", [
    ({**W_CH, "strategy": "blok"}, A_TOK, ("g.weights.strategy", "'blok'", "did you mean "
                                           "'block'")),
    ({**W_B, "block_structure": None}, A_G, ("g.weights", "needs block_structure")),
    ({**W_B, "block_structure": "128xx"}, A_G, ("g.weights.block_structure", "'128xx'",
                                               "two positive integers")),
    ({**W_B, "block_structure": [128, 128, 1]}, A_G, ("block_structure", "[rows, cols]")),
    (W_CH, {**A_TOK, "dynamic": False}, ("g.input_activations", "static token")),
    (W_CH, {**A_TOK, "dynamic": "global"}, ("g.input_activations.dynamic", "'global'")),
    ({**W_CH, "group_size": 128}, A_TOK, ("g.weights", "needs strategy group")),
    ({**W_CH, "strategy": "group"}, A_TOK, ("g.weights", "positive group_size")),
    ({**W_CH, "block_structure": [128, 128]}, A_TOK, ("block_structure needs strategy block",)),
    ({**W_CH, "group_size": "x"}, A_TOK, ("g.weights.group_size", "must be an integer")),
    (W_CH, [1], ("g.input_activations", "must be a mapping")),
])
def test_ct_malformed_fp8_groups_are_refused_naming_the_key(tmp_path, w, a, needles):
    with pytest.raises(SelectorError) as e:
        verdicts(tmp_path, QW, ct(w, a))
    for n in needles:
        assert n in str(e.value), (n, str(e.value))
    assert "config.json" in str(e.value)


def test_ct_block_structure_string_form_is_read(tmp_path):
    v = verdicts(tmp_path, QW, ct({**W_B, "block_structure": "128x128"}, A_G))
    assert v["model.layers.0.mlp.experts"].scheme == "fp8_block"


# -- the plan and the launch plan -------------------------------------------------------------

def test_plan_of_an_fp8_checkpoint(tmp_path):
    """DeepSeek-V3 FP8 block: every kind is planned as fp8_block. Without an engine installed
    (FlashInfer alone) its FP8 MoE kernels are vLLM's or SGLang's, so the experts have none."""
    d = write_checkpoint(tmp_path, "ds", {**DS, "quantization_config": DS_FP8})
    p = load(*SPARK).plan(d)
    assert {k.quant for k in p.kinds} >= {"fp8_block"}
    text = " ".join(str(p).split())
    assert "routed experts: 2 layers (3-4): moe fp8_block" in text
    assert not p.ok and "triton (need vllm or sglang)" in text
    p = load("platform=dgx_spark", "stack=vllm_0_32").plan(d)
    assert p.ok, str(p)
    for k in p.kinds:
        for s in k.shapes:
            assert s.decision is None or s.decision.selected, (k, str(p))


def test_a_backend_kernel_does_not_relabel_a_scheme_the_backend_lacks():
    """Regression: flashinfer_cutedsl's vLLM W4A16 kernel (no `when`) turned an fp8_tensor
    linear layer into nvfp4_w4a16 (engines.runs_as), which made it opt-in instead of not
    implemented on SM 12.x."""
    sel = load(*PRO)
    d = sel.select(op="linear", quant="fp8_tensor", hidden_size=2048, intermediate_size=5120)
    runs = {b.name for b in sel.catalogue.backends["linear"] if "fp8_tensor" in b.implements
            and dict(b.engines)["vllm"].name is not None}  # engine=vllm: the ones vLLM names
    assert "flashinfer_cutedsl" not in runs
    for c in d.candidates:
        assert (c.status == "not_applicable") == (c.backend not in runs), c.backend


def test_launch_plan_breaks_fp8_block_experts_with_a_b12x_flag(tmp_path):
    lp = load(*PRO, "policy.moe_backend=flashinfer_b12x").launch_plan(mixed_block_moe(tmp_path))
    (c,) = lp.conflicts
    assert c.flag == ("--moe-backend", "flashinfer_b12x")
    (b,) = c.breaks
    assert b.group.scheme == "fp8_block" and b.group.layers == (2, 3)
    assert "map_fp8_backend" in b.source and "fp8_block MoE oracle" in b.message
    assert c.instead and c.instead[0].flags[1] in VLLM_MOE_ACCEPTS["fp8_block"]
    assert "flashinfer_b12x" not in lp.flags
    rc, out, err = run_main(["explain", "--model", str(tmp_path / "mixed_block_moe"), *PRO,
                             "policy.moe_backend=flashinfer_b12x"])
    assert rc == 0, err
    assert "breaks routed experts (fp8_block, layers 2-3)" in out


def test_launch_plan_mxfp4_experts_break_on_a_flag_vllm_s_mxfp4_mapper_refuses(tmp_path):
    """gpt-oss MXFP4 experts on an RTX Pro 6000: selector plans them as vLLM does (Marlin before
    the OpenAI Triton kernels on SM 12.x) and prints that one flag; vLLM's mxfp4 mapper refuses
    flashinfer_b12x (map_mxfp4_backend), so requesting it breaks those layers."""
    d = write_checkpoint(tmp_path, "gpt", {**GPT, "quantization_config": {
        "quant_method": "mxfp4"}})
    lp = load(*PRO).launch_plan(d)
    (g,) = [g for g in lp.groups if g.op == "moe"]
    assert g.scheme == "mxfp4" and g.planned
    assert lp.flags[lp.flags.index("--moe-backend") + 1] == g.engine_backend == "marlin"
    assert "flashinfer_b12x" not in VLLM_MOE_ACCEPTS["mxfp4"]
    assert "b12x" in VLLM_MOE_ACCEPTS["mxfp4"]


def test_linear_quant_keys_cover_every_planned_scheme():
    from selector.core.schema import QUANT_SCHEMES
    assert set(VLLM_LINEAR_QUANT) == {s for s in QUANT_SCHEMES
                                      if s not in ("int8", "int4", "unquantized")}
    assert VLLM_LINEAR_QUANT["fp8_block"] == "fp8_block_w8a8"
    assert VLLM_LINEAR_QUANT["fp8_tensor"] == VLLM_LINEAR_QUANT["fp8_channel"] == "fp8_w8a8"


def test_fp8_block_dense_launch_plan(tmp_path):
    lp = load(*PRO).launch_plan(fp8_block_dense(tmp_path))
    assert lp.ok and not lp.conflicts
    assert {g.scheme for g in lp.groups} == {"fp8_block", "unquantized"}
    if "--linear-backend" in lp.flags:  # the one the fp8_block group's choice runs as in vLLM
        block = next(g for g in lp.groups if g.scheme == "fp8_block")
        assert lp.flags[lp.flags.index("--linear-backend") + 1] == block.engine_backend
    js = lp.to_dict()
    assert set(js) == {"engine", "label", "parallel", "topology", "groups", "flags", "env",
                       "config", "files", "command", "conflicts", "notes", "ok", "automatic",
                       "problems"}
    assert js["groups"][0]["scheme"] == "fp8_block"


def test_the_same_config_twice_is_the_same_plan(tmp_path):
    q = copy.deepcopy(DS_FP8)
    a = verdicts(tmp_path, DS, q)
    assert q == DS_FP8 and a == verdicts(tmp_path, DS, q)


def test_why_with_model_judges_only_the_kinds_some_backend_implements(tmp_path):
    """Nemotron-3 Nano MIXED_PRECISION: NVFP4 experts and FP8 attention; --why judges the kinds
    some backend implements: the NVFP4 experts, and the fp8_tensor attention (FP8 linear
    backends implement it; flashinfer_cutlass's verdict there is its own)."""
    from checkpoint_fixtures import NEMOTRON_H, nemotron_mixed_precision
    d = write_checkpoint(tmp_path, "nem", {**NEMOTRON_H,
                                           "quantization_config": nemotron_mixed_precision()})
    rc, out, err = run_main(["explain", "--model", str(d), "--why", "flashinfer_cutlass",
                             "platform=b200", "stack=vllm_0_32"])
    assert "routed experts" in out and "attention" in out, (out, err)
    # exit 1 when the backend cannot run one of the kinds judged, as for one layer
    assert rc == (1 if re.search(r": (not_applicable|rejected)\b", out) else 0), (rc, out, err)


@pytest.mark.parametrize("a", [None, {"num_bits": 8, "type": "int", "strategy": "token",
                                      "dynamic": True, "symmetric": True}])
def test_ct_int_groups_are_named_but_not_read_as_the_int_values(tmp_path, a):
    """vLLM builds CompressedTensorsW8A8Int8 / WNA16 for them, whose keys selector does not
    read into int8/int4 (tests/vllm's differential classifies them "other")."""
    w = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True,
         "dynamic": False}
    x = verdicts(tmp_path, LL, ct(w, a, "int-quantized"))["model.layers.0.self_attn.qkv_proj"]
    assert x.scheme is None and x.other.startswith("int8")
