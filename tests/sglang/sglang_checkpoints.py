"""Checkpoint directories for the SGLang command sweep: config.json of the architectures users
run (Qwen3-MoE, DeepSeek-V3, gpt-oss, Llama, GLM-4.5), each under the quantization configs the
tools that make such checkpoints write (Fp8Config, ModelOpt FP8 / NVFP4, llm-compressor's
compressed-tensors, MXFP4, MXFP8). Four layers each (the sizes of the published models): both
selector and SGLang read the same directory.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sglang_sim import ct_config

LAYERS = 4

# the published configs (Qwen/Qwen3-30B-A3B, deepseek-ai/DeepSeek-V3, openai/gpt-oss-20b,
# meta-llama/Llama-3.1-8B-Instruct, zai-org/GLM-4.5-Air), depth cut to LAYERS
ARCHS: Dict[str, Dict[str, Any]] = {
    "qwen3_moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                  "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                  "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
                  "mlp_only_layers": [], "norm_topk_prob": True, "vocab_size": 151936,
                  "hidden_act": "silu", "max_position_embeddings": 40960,
                  "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
                  "torch_dtype": "bfloat16"},
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                    "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "hidden_act": "silu", "num_attention_heads": 128, "num_key_value_heads": 128,
                    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
                    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
                    "norm_topk_prob": True, "num_nextn_predict_layers": 1,
                    "max_position_embeddings": 163840, "rms_norm_eps": 1e-06,
                    "torch_dtype": "bfloat16"},
    "gpt_oss": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
                "hidden_size": 2880, "intermediate_size": 2880, "num_local_experts": 32,
                "num_experts_per_tok": 4, "experts_per_token": 4, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "swiglu_limit": 7.0,
                "hidden_act": "silu", "sliding_window": 128, "vocab_size": 201088,
                "layer_types": ["sliding_attention", "full_attention"] * (LAYERS // 2),
                "torch_dtype": "bfloat16"},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 128256, "hidden_act": "silu", "max_position_embeddings": 131072,
              "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16"},
    "glm4_moe": {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
                 "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                 "first_k_dense_replace": 1, "num_attention_heads": 96,
                 "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 128,
                 "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1,
                 "topk_group": 1, "vocab_size": 151552, "partial_rotary_factor": 0.5,
                 "attention_bias": True, "hidden_act": "silu", "norm_topk_prob": True,
                 "routed_scaling_factor": 1.0, "max_position_embeddings": 131072,
                 "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16"},
}

# the MoE layer and one quantized linear layer SGLang's quant config is asked about
MOE_PREFIX = {"qwen3_moe": "model.layers.0.mlp.experts", "deepseek_v3": "model.layers.1.mlp.experts",
              "gpt_oss": "model.layers.0.mlp.experts", "glm4_moe": "model.layers.1.mlp.experts"}
# the routing method each model class passes its FusedMoE (ModelOptFp8MoEMethod.create_moe_runner
# reads it: modelopt_quant.py:1357-1363): models/qwen3_moe.py:273, deepseek_v2.py:762-763,
# glm4_moe.py:445; gpt_oss.py passes none
ROUTING = {"qwen3_moe": "Renormalize", "deepseek_v3": "DeepSeekV3", "glm4_moe": "DeepSeekV3"}
LINEAR_PREFIX = {"deepseek_v3": "model.layers.0.mlp.gate_up_proj"}  # else self_attn.qkv_proj

_GATES = [f"model.layers.{i}.mlp.gate" for i in range(LAYERS)]
_MODELOPT = {"kv_cache_scheme": None, "producer": {"name": "modelopt", "version": "0.37.0"},
             "ignore": ["lm_head", "*mlp.gate"]}


def quantization_config(fmt: str) -> Dict[str, Any]:
    """The checkpoint's `quantization_config` for a format key."""
    if fmt == "fp8_block":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", *_GATES]}
    if fmt == "fp8_tensor":
        return {"quant_method": "fp8", "activation_scheme": "static",
                "modules_to_not_convert": ["lm_head", *_GATES]}
    if fmt == "modelopt_fp8":
        return {"quant_method": "modelopt", "quant_algo": "FP8", **_MODELOPT}
    if fmt == "modelopt_fp4":
        return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                **_MODELOPT}
    if fmt.startswith("ct_"):
        cfg = ct_config(fmt[3:])
        cfg["ignore"] = ["lm_head", "re:.*mlp.gate$"]
        return cfg
    if fmt == "mxfp4":
        return {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"]}
    if fmt == "mxfp8":
        return {"quant_method": "mxfp8", "activation_scheme": "dynamic",
                "ignored_layers": ["lm_head", *_GATES]}
    raise ValueError(fmt)


# the checkpoints swept: (architecture, format)
CHECKPOINTS: Tuple[Tuple[str, str], ...] = tuple(
    [("qwen3_moe", f) for f in ("fp8_block", "fp8_tensor", "modelopt_fp8", "modelopt_fp4",
                                "ct_fp8_channel", "ct_fp8_block", "ct_nvfp4", "ct_nvfp4_w4a16",
                                "mxfp8")]
    + [("deepseek_v3", f) for f in ("fp8_block", "modelopt_fp8", "modelopt_fp4", "ct_nvfp4")]
    + [("gpt_oss", "mxfp4")]
    + [("llama", f) for f in ("fp8_block", "fp8_tensor", "modelopt_fp8", "modelopt_fp4",
                              "ct_fp8_tensor", "ct_fp8_channel", "ct_nvfp4", "mxfp8")]
    + [("glm4_moe", f) for f in ("fp8_block", "modelopt_fp4")])


def write(root: Path, arch: str, fmt: str) -> Path:
    d = root / f"{arch}-{fmt}"
    d.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(ARCHS[arch])
    cfg["num_hidden_layers"] = LAYERS
    cfg["quantization_config"] = quantization_config(fmt)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


def moe_question(arch: str, tp: int, ep: int) -> Optional[Dict[str, Any]]:
    """The MoE layer's sizes on one rank (SGLang's MoE TP is tp / ep) for create_moe_runner."""
    if arch not in MOE_PREFIX:
        return None
    c = ARCHS[arch]
    experts = c.get("num_experts") or c.get("n_routed_experts") or c.get("num_local_experts")
    inter = c.get("moe_intermediate_size") or c["intermediate_size"]
    return {"prefix": MOE_PREFIX[arch], "experts": experts, "local_experts": experts // ep,
            "hidden": c["hidden_size"], "inter": inter // max(tp // ep, 1),
            "top_k": c["num_experts_per_tok"], "activation": c["hidden_act"],
            "moe_tp": max(tp // ep, 1), "routing": ROUTING.get(arch)}


def _mlp_checks(name: str, h: int, inter: int, tp: int) -> List[Tuple]:
    """A gated MLP's two linears as SGLang builds them under TP: gate_up_proj a
    MergedColumnParallelLinear of two intermediate/TP partitions, down_proj a
    RowParallelLinear of intermediate/TP input."""
    return [(f"{name}.gate_up_proj", h, h, 2 * inter, 2 * inter // tp, [inter // tp] * 2),
            (f"{name}.down_proj", inter, inter // tp, h, h, [h])]


def _attention_checks(c: Dict[str, Any], tp: int) -> List[Tuple]:
    """The attention linears under TP: for MLA (DeepseekV2AttentionMLA) q_b_proj and kv_b_proj
    ColumnParallelLinear, o_proj RowParallelLinear (fused_qkv_a_proj is replicated, which the
    check skips); else QKVParallelLinear (KV heads replicated where TP exceeds them,
    layers/linear.py QKVParallelLinear) and o_proj RowParallelLinear."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    if c.get("kv_lora_rank"):
        qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        kv = c["qk_nope_head_dim"] + c["v_head_dim"]
        return [("self_attn.q_b_proj", c["q_lora_rank"], c["q_lora_rank"], heads * qk,
                 heads * qk // tp, [heads * qk // tp]),
                ("self_attn.kv_b_proj", c["kv_lora_rank"], c["kv_lora_rank"], heads * kv,
                 heads * kv // tp, [heads * kv // tp]),
                ("self_attn.o_proj", heads * c["v_head_dim"], heads * c["v_head_dim"] // tp,
                 h, h, [h])]
    hd = c.get("head_dim") or h // heads
    kv_heads = c["num_key_value_heads"]
    q, kv = heads // tp * hd, max(kv_heads // tp, 1) * hd
    return [("self_attn.qkv_proj", h, h, (heads + 2 * kv_heads) * hd, q + 2 * kv, [q, kv, kv]),
            ("self_attn.o_proj", heads * hd, heads * hd // tp, h, h, [h])]


def linear_question(arch: str, tp: int = 1) -> Dict[str, Any]:
    """The linear layer asked about, and the per-rank sizes SGLang's block-FP8 check
    (Fp8LinearMethod.validate_block_quant_shapes) reads for every TP linear of the model: the
    attention projections, the dense MLP (LlamaMLP, Glm4MoeMLP, DeepseekV2MLP) and the shared
    experts (DeepseekV2MoE / Glm4MoeSparseMoeBlock: a TP MLP of moe_intermediate_size x
    n_shared_experts without an all-to-all backend, deepseek_v2.py:874-897, glm4_moe.py:
    471-486)."""
    c = ARCHS[arch]
    dense = arch == "llama" or c.get("first_k_dense_replace")
    inter, h = c["intermediate_size"], c["hidden_size"]
    checks = _attention_checks(c, tp)
    if dense:
        checks += _mlp_checks("mlp", h, inter, tp)
    if c.get("n_shared_experts"):
        checks += _mlp_checks("mlp.shared_experts", h,
                              c["moe_intermediate_size"] * c["n_shared_experts"], tp)
    return {"prefix": LINEAR_PREFIX.get(arch, "model.layers.0.self_attn.qkv_proj"), "tp": tp,
            "checks": checks}
