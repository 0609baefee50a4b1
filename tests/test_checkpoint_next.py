"""Issue 32: Qwen3-Next and DeepSeek-V3.2 read as vLLM 0.32.0 builds them, per rank. The expected
shapes are checked by hand against vLLM's source (named at each assertion); tests/vllm/
test_launch_shapes.py compares the same architectures with vLLM's own classes (launch_shapes.MORE
and its random cases)."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import run_main

from selector.checkpoint.arch import read_architecture
from selector.checkpoint.quant import read_quantization

FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
       "weight_block_size": [128, 128]}
# Qwen/Qwen3-Next-80B-A3B-Instruct-FP8's keys, 4 layers (3 Gated DeltaNet, 1 full attention)
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
              "hidden_size": 2048, "intermediate_size": 5120, "moe_intermediate_size": 512,
              "shared_expert_intermediate_size": 512, "num_hidden_layers": 4,
              "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
              "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_num_key_heads": 16,
              "linear_num_value_heads": 32, "num_experts": 512, "num_experts_per_tok": 10,
              "vocab_size": 151936, "hidden_act": "silu", "torch_dtype": "bfloat16",
              "quantization_config": {**FP8, "modules_to_not_convert": [
                  "lm_head"] + [f"model.layers.{i}.{m}" for i in range(4) for m in (
                      "linear_attn.in_proj_ba", "mlp.gate", "mlp.shared_expert_gate")]}}
# deepseek-ai/DeepSeek-V3.2-Exp's keys, 4 layers (3 dense, 1 MoE)
DEEPSEEK_V32 = {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
                "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                "num_hidden_layers": 4, "first_k_dense_replace": 3, "n_routed_experts": 256,
                "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
                "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
                "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048,
                "vocab_size": 129280, "hidden_act": "silu", "torch_dtype": "bfloat16",
                "quantization_config": {**FP8, "modules_to_not_convert": ["lm_head"]}}
P = Path("config.json")


def per_rank(config, tp=1, ep=1, moe_tp=None):
    a = read_architecture(config, P, tp, ep, moe_tp)
    return a, {m.name: m for m in a.modules}


def kn(m):
    f = dict(m.fields)
    return f["hidden_size"], f["intermediate_size"], f["tp_size"]


def test_qwen3_next_per_rank_modules_at_tp2():
    a, m = per_rank(QWEN3_NEXT, 2)
    assert a.layer_types == ("MoE",) * 4
    la = "model.layers.0.linear_attn"
    # qwen_gdn_linear_attn.py create_qkvz_proj: one output of 2 * key_dim + 2 * value_dim
    # (key_dim 128 * 16, value_dim 128 * 32), split by TP
    assert kn(m[f"{la}.in_proj_qkvz"]) == (2048, (2 * 2048 + 2 * 4096) // 2, 2)
    assert m[f"{la}.in_proj_qkvz"].cls == "MergedColumnParallelLinear"
    assert m[f"{la}.in_proj_qkvz"].parts == (6144,)
    # create_ba_proj: [num_v_heads * 2], TP-split (maybe_disable_tp is False: interleaved)
    assert kn(m[f"{la}.in_proj_ba"]) == (2048, 32, 2)
    assert kn(m[f"{la}.out_proj"]) == (4096 // 2, 2048, 2)  # RowParallelLinear(value_dim)
    assert f"{la}.conv1d" not in m  # ColumnParallelLinear without the quant config
    # qwen3_next.py Qwen3NextAttention: QKVParallelLinear(heads * (1 + attn_output_gate))
    qkv = m["model.layers.3.self_attn.qkv_proj"]
    assert kn(qkv) == (2048, (2 * 8 + 2 * 1) * 256, 2) and qkv.parts == (4096, 256, 256)
    assert kn(m["model.layers.3.self_attn.o_proj"]) == (16 * 256 // 2, 2048, 2)
    assert "model.layers.3.linear_attn.in_proj_qkvz" not in m
    # Qwen3NextSparseMoeBlock: experts, shared_expert (Qwen2MoeMLP); gate and
    # shared_expert_gate built without the quant config
    e = dict(m["model.layers.0.mlp.experts"].fields)
    assert (e["num_experts"], e["top_k"], e["intermediate_size"]) == (512, 10, 256)
    assert kn(m["model.layers.0.mlp.shared_expert.gate_up_proj"]) == (2048, 512, 2)
    assert kn(m["model.layers.0.mlp.shared_expert.down_proj"]) == (256, 2048, 2)
    assert not any(k.endswith(("mlp.gate", "shared_expert_gate")) for k in m)
    assert a.packed["in_proj_qkvz"] == ("in_proj_qkvz",) and a.rename_prefix == ()
    q = read_quantization(P.parent, QWEN3_NEXT, a)
    assert q.verdict_of(m["lm_head"]).scheme is None
    assert q.verdict_of(m[f"{la}.in_proj_ba"]).scheme is None  # modules_to_not_convert
    assert q.verdict_of(m[f"{la}.in_proj_qkvz"]).scheme == "fp8_block"
    # sequence-parallel MoE (EP 4 over TP 2 x DP 2): the shared expert is built with disable_tp
    _, sp = per_rank(QWEN3_NEXT, 2, 4)
    assert kn(sp["model.layers.0.mlp.shared_expert.down_proj"]) == (512, 2048, 1)


def test_qwen3_next_refusals_and_layer_types():
    _, m = per_rank(QWEN3_NEXT, 64)  # linear_num_value_heads 32: A_log divide(32, 64)
    assert any("linear_num_value_heads 32 is not divisible" in p
               for p in m["model.layers.0.linear_attn.in_proj_qkvz"].problems)
    a, m = per_rank({**QWEN3_NEXT, "layer_types": ["full_attention"] * 4,
                     "attn_output_gate": False})
    assert "model.layers.0.self_attn.qkv_proj" in m and kn(
        m["model.layers.0.self_attn.qkv_proj"])[1] == (16 + 2 * 2) * 256


def test_deepseek_v32_per_rank_modules():
    a, m = per_rank(DEEPSEEK_V32, 2)
    assert a.layer_types == ("dense",) * 3 + ("MoE",)
    at = "model.layers.0.self_attn"
    # deepseek_v32/attention.py DeepseekV32Indexer: wq_b ReplicatedLinear(q_lora_rank,
    # index_head_dim * index_n_heads) with the quant config; wk_weights_proj without it
    assert kn(m[f"{at}.indexer.wq_b"]) == (1536, 128 * 64, 1)
    assert m[f"{at}.indexer.wq_b"].cls == "ReplicatedLinear"
    assert f"{at}.indexer.wk_weights_proj" not in m
    assert kn(m[f"{at}.fused_qkv_a_proj"]) == (7168, 1536 + 512 + 64, 1)
    assert kn(m[f"{at}.q_b_proj"]) == (1536, 128 * 192 // 2, 2)
    assert kn(m[f"{at}.kv_b_proj"]) == (512, 128 * 256 // 2, 2)
    assert kn(m[f"{at}.o_proj"]) == (128 * 128 // 2, 7168, 2)
    assert kn(m["model.layers.3.mlp.experts"])[1] == 1024
    q = read_quantization(P.parent, DEEPSEEK_V32, a)
    assert q.verdict_of(m[f"{at}.indexer.wq_b"]).scheme == "fp8_block"
    # nvidia/model.py DeepseekV32DecoderLayer: the dense MLPs under sequence-parallel MoE are
    # built with is_sequence_parallel (disable_tp), unlike DeepSeek-V3's
    _, sp = per_rank(DEEPSEEK_V32, 2, 4)
    assert kn(sp["model.layers.0.mlp.down_proj"]) == (18432, 7168, 1)
    # index_topk_freq 2, offset 2: skip_topk = max(i - 2 + 1, 0) % 2 != 0, layer 2 only
    _, f = per_rank({**DEEPSEEK_V32, "index_topk_freq": 2})
    assert [f"model.layers.{i}.self_attn.indexer.wq_b" in f for i in range(4)] == \
        [True, True, False, True]


def test_explain_model_on_both(tmp_path):
    for name, config in (("qwen3-next", QWEN3_NEXT), ("deepseek-v3.2", DEEPSEEK_V32)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        rc, out, err = run_main(["explain", "--model", str(d), "engine=vllm", "platform=b200",
                                 "stack=vllm_0_32", "parallel.tp=2", "--format", "json"])
        assert rc in (0, 1), (name, rc, err)
        data = json.loads(out)
        assert data["launch"]["topology"]["linear_tp"] == 2, name
        assert "has no reader" not in out, name
