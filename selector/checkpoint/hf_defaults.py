"""The Hugging Face config-class defaults checkpoint/arch.py reads (a key config.json leaves
out takes them, as in vLLM)."""
from __future__ import annotations

from typing import Any, Dict

# Hugging Face config-class defaults of the keys read here (transformers 5.19.0, the version
# vLLM 0.32.0's environment installs: DeepseekV3Config, DeepseekV2Config, Qwen3MoeConfig,
# NemotronHConfig, GptOssConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
# MixtralConfig, Glm4MoeConfig, MiniMaxM2Config, Qwen3NextConfig; deepseek_v32 checkpoints are
# read with DeepseekV3Config: vLLM 0.32.0 transformers_utils/config.py _CONFIG_REGISTRY).
# tests/vllm/test_checkpoint_differential.py compares every entry with the installed classes.
HF_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "deepseek_v3": {"num_hidden_layers": 61, "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "n_shared_experts": 1, "hidden_act": "silu", "num_attention_heads": 128,
                    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                    "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
                    "n_group": 8, "topk_group": 4},
    "deepseek_v2": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
                    "moe_intermediate_size": 1407, "n_routed_experts": 64,
                    "first_k_dense_replace": 0, "n_shared_experts": 2, "hidden_act": "silu",
                    "num_attention_heads": 32, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "vocab_size": 102400, "n_group": None, "topk_group": None},
    "qwen3_moe": {"num_hidden_layers": 24, "hidden_size": 2048, "intermediate_size": 6144,
                  "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                  "hidden_act": "silu", "num_attention_heads": 32, "num_key_value_heads": 4,
                  "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "nemotron_h": {"hidden_size": 4096, "intermediate_size": 21504,
                   "moe_intermediate_size": 7688, "n_routed_experts": 8,
                   "num_experts_per_tok": 2, "n_shared_experts": 1, "mlp_hidden_act": "relu2",
                   "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "vocab_size": 131072, "mamba_num_heads": 128, "mamba_head_dim": 64,
                   "n_groups": 8, "ssm_state_size": 128,
                   "moe_shared_expert_intermediate_size": 7688},
    "gpt_oss": {"num_hidden_layers": 36, "hidden_size": 2880, "intermediate_size": 2880,
                "num_local_experts": 128, "num_experts_per_tok": 4, "hidden_act": "silu",
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                "vocab_size": 201088, "swiglu_limit": 7.0},
    "llama": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
              "hidden_act": "silu", "num_attention_heads": 32, "vocab_size": 32000},
    "mistral": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                "hidden_act": "silu", "num_attention_heads": 32, "num_key_value_heads": 8,
                "head_dim": 128, "vocab_size": 32000},
    "qwen2": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 22016,
              "hidden_act": "silu", "num_attention_heads": 32, "vocab_size": 151936},
    "qwen3": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 22016,
              "hidden_act": "silu", "num_attention_heads": 32, "head_dim": 128,
              "vocab_size": 151936},
    "mixtral": {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                "num_experts_per_tok": 2, "vocab_size": 32000, "hidden_act": "silu"},
    "glm4_moe": {"num_hidden_layers": 46, "hidden_size": 4096, "intermediate_size": 10944,
                 "moe_intermediate_size": 1408, "num_attention_heads": 96,
                 "num_key_value_heads": 8, "n_routed_experts": 128, "num_experts_per_tok": 8,
                 "n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 151552,
                 "hidden_act": "silu"},
    "minimax_m2": {"num_hidden_layers": 62, "hidden_size": 3072, "intermediate_size": 1536,
                   "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
                   "num_local_experts": 256, "num_experts_per_tok": 8, "vocab_size": 200064,
                   "hidden_act": "silu"},
    "qwen3_next": {"num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 5632,
                   "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
                   "num_experts": 512, "num_experts_per_tok": 10, "hidden_act": "silu",
                   "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                   "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": [],
                   "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                   "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                   "linear_num_value_heads": 32},
}
HF_DEFAULTS["deepseek_v32"] = dict(HF_DEFAULTS["deepseek_v3"])
# Llama4TextConfig (transformers 5.19.0)
HF_DEFAULTS["llama4_text"] = {
    "num_hidden_layers": 48, "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 1, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 202048, "hidden_act": "silu"}
# Ernie4_5_MoeConfig (transformers 5.19.0; no head_dim: vLLM's attention takes hidden / heads)
HF_DEFAULTS["ernie4_5_moe"] = {
    "num_hidden_layers": 28, "hidden_size": 2560, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "moe_num_experts": 64, "moe_k": 6,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": 27,
    "moe_layer_interval": 1, "num_attention_heads": 20, "num_key_value_heads": 4,
    "vocab_size": 103424, "hidden_act": "silu"}
