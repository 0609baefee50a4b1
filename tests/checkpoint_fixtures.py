"""Small checkpoint directories (config.json and the quantization description, no weights) with
the real key names and values of public model cards, written by the tests.

Sources (the model cards' config files on Hugging Face):
- DeepSeek-V3/R1: deepseek-ai/DeepSeek-V3 and deepseek-ai/DeepSeek-R1 `config.json`; the NVFP4
  export layout (hf_quant_config.json with quant_algo, group_size, kv_cache_quant_algo,
  exclude_modules) of nvidia/DeepSeek-R1-0528-FP4.
- Qwen3-MoE: Qwen/Qwen3-30B-A3B `config.json`; compressed-tensors NVFP4 `quantization_config`
  (format nvfp4-pack-quantized, config_groups, ignore) as written by llm-compressor, e.g.
  RedHatAI/Qwen3-30B-A3B-NVFP4.
- Nemotron-H: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 `config.json` (hybrid_override_pattern,
  mlp_hidden_act relu2, moe_shared_expert_intermediate_size); ModelOpt MIXED_PRECISION layout
  (quantized_layers) as vLLM's modelopt.py reads it.
- gpt-oss: openai/gpt-oss-120b `config.json` (num_local_experts, swiglu_limit 7.0); ModelOpt
  `quantization_config` with quant_method modelopt and `ignore`.
- Llama: meta-llama/Llama-3.1-8B-Instruct `config.json`; nvidia/Llama-3.1-8B-Instruct-FP4
  hf_quant_config.json.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, Optional

NVFP4_ARGS = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
              "symmetric": True, "dynamic": False, "observer": "minmax"}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "hidden_act": "silu", "num_attention_heads": 128, "num_key_value_heads": 128,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "topk_method": "noaux_tc", "n_group": 8,
    "topk_group": 4, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "norm_topk_prob": True, "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_QUANT = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                     "exclude_modules": ["lm_head"] + [f"model.layers.{i}.self_attn*"
                                                       for i in range(61)]},
}

QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    "hidden_act": "silu", "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "torch_dtype": "bfloat16",
}


def compressed_tensors_nvfp4(w4a16: bool = False) -> Dict[str, Any]:
    return {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "weights": dict(NVFP4_ARGS),
                "input_activations": None if w4a16 else {**NVFP4_ARGS, "dynamic": "local"},
                "output_activations": None}},
            "ignore": ["lm_head", "re:.*mlp.gate$"]}


NEMOTRON_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hidden_size": 2688, "num_hidden_layers": 52, "hybrid_override_pattern": NEMOTRON_PATTERN,
    "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 6,
    "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712,
    "mlp_hidden_act": "relu2", "num_attention_heads": 32, "num_key_value_heads": 2,
    "head_dim": 128, "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128,
    "n_groups": 8, "conv_kernel": 4, "vocab_size": 131072, "routed_scaling_factor": 2.5,
    "torch_dtype": "bfloat16",
}


MODELOPT = {"name": "modelopt", "version": "0.29.0"}


def nemotron_mixed_precision() -> Dict[str, Any]:
    """Experts and shared experts NVFP4, attention FP8, Mamba mixers left in BF16."""
    layers: Dict[str, Any] = {}
    for i, block in enumerate(NEMOTRON_PATTERN):
        p = f"backbone.layers.{i}.mixer"
        if block == "E":
            for e in range(128):
                for proj in ("up_proj", "down_proj"):
                    layers[f"{p}.experts.{e}.{proj}"] = {"quant_algo": "NVFP4", "group_size": 16}
            for proj in ("up_proj", "down_proj"):
                layers[f"{p}.shared_experts.{proj}"] = {"quant_algo": "NVFP4", "group_size": 16}
        elif block == "*":
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                layers[f"{p}.{proj}"] = {"quant_algo": "FP8"}
    # ModelOpt >= 0.31 writes config.json's quantization_config (vLLM 0.32.0 refuses
    # MIXED_PRECISION in a legacy hf_quant_config.json: "Unknown ModelOpt quant algo")
    return {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
            "kv_cache_scheme": {"type": "float", "num_bits": 8}, "ignore": ["lm_head"],
            "quantized_layers": layers}


GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "hidden_size": 2880, "intermediate_size": 2880, "num_local_experts": 128,
    "num_experts_per_tok": 4, "experts_per_token": 4, "num_hidden_layers": 36,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "swiglu_limit": 7.0,
    "hidden_act": "silu", "sliding_window": 128, "vocab_size": 201088,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                            "kv_cache_scheme": None,
                            "ignore": ["lm_head", "model.layers.*.self_attn*",
                                       "model.layers.*.mlp.router"]},
}

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
    "vocab_size": 128256, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}
LLAMA_QUANT = {"producer": {"name": "modelopt", "version": "0.23.0"},
               "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                                "group_size": 16, "exclude_modules": ["lm_head"]}}

# name -> (config.json, hf_quant_config.json or None)
CHECKPOINTS = {
    "deepseek_v3": (DEEPSEEK_V3, DEEPSEEK_QUANT),
    "qwen3_moe": ({**QWEN3_MOE, "quantization_config": compressed_tensors_nvfp4()}, None),
    "qwen3_moe_w4a16": ({**QWEN3_MOE, "quantization_config": compressed_tensors_nvfp4(True)},
                        None),
    "nemotron_h": ({**NEMOTRON_H, "quantization_config": nemotron_mixed_precision()}, None),
    "gpt_oss": (GPT_OSS, None),
    "llama": (LLAMA, LLAMA_QUANT),
}


def write_checkpoint(root: Path, name: str, config: Optional[Dict[str, Any]] = None,
                     quant: Optional[Dict[str, Any]] = None) -> Path:
    """A checkpoint directory: config.json and, for ModelOpt exports, hf_quant_config.json."""
    base_config, base_quant = CHECKPOINTS.get(name, ({}, None))
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config if config is not None
                                              else copy.deepcopy(base_config), indent=2))
    q = quant if quant is not None else base_quant
    if q is not None:
        (d / "hf_quant_config.json").write_text(json.dumps(q, indent=2))
    return d
