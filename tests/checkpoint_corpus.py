"""The checkpoint corpus (issue 21): the key layouts of public NVFP4 checkpoints, config files
only, and a generator of variants that real checkpoints use.

`python tests/checkpoint_corpus.py` rewrites tests/checkpoint_corpus/<name>/ from CORPUS (the
files are committed; a test checks they match). Sources of the layouts (Hugging Face model
cards' config.json / hf_quant_config.json):
- ModelOpt <= 0.29 exports: hf_quant_config.json {"producer": {"name": "modelopt"},
  "quantization": {"quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules"}}:
  nvidia/DeepSeek-R1-FP4, nvidia/DeepSeek-R1-0528-FP4, nvidia/DeepSeek-V3-0324-FP4,
  nvidia/Llama-3.1-8B-Instruct-FP4, nvidia/Llama-3.3-70B-Instruct-FP4,
  nvidia/Llama-3.1-405B-Instruct-FP4, nvidia/Qwen3-30B-A3B-FP4, nvidia/Qwen3-8B-FP4.
- ModelOpt >= 0.31 exports: config.json quantization_config {"quant_method": "modelopt",
  "quant_algo", "ignore", "config_groups", "producer"} (and the same in hf_quant_config.json):
  nvidia/Qwen3-235B-A22B-FP4, nvidia/DeepSeek-V3.1-NVFP4, nvidia/Kimi-K2-Thinking-NVFP4,
  nvidia/gpt-oss-120b-NVFP4-style exports, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4
  (MIXED_PRECISION with quantized_layers).
- llm-compressor (compressed-tensors) exports: {"quant_method": "compressed-tensors",
  "format": "nvfp4-pack-quantized", "config_groups", "ignore"}: RedHatAI/Qwen3-30B-A3B-NVFP4,
  RedHatAI/Qwen3-30B-A3B-NVFP4A16, RedHatAI/Meta-Llama-3.1-8B-Instruct-NVFP4,
  RedHatAI/Qwen3-32B-NVFP4, RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-NVFP4 (text part),
  RedHatAI/Qwen2.5-7B-Instruct-NVFP4 layouts.
- FP8, MXFP8 and MXFP4 exports (issue 26): `quant_method: fp8` with `weight_block_size` [128, 128]
  and dynamic activations (deepseek-ai/DeepSeek-V3, deepseek-ai/DeepSeek-R1, Qwen/Qwen3-8B-FP8,
  Qwen/Qwen3-30B-A3B-FP8 with `modules_to_not_convert`), per-tensor with static activations and
  `ignored_layers` (AutoFP8: neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8 style); `quant_method:
  mxfp4` with `modules_to_not_convert` (openai/gpt-oss-120b, openai/gpt-oss-20b); ModelOpt FP8
  (nvidia/Llama-3.1-8B-Instruct-FP8 hf_quant_config.json; config.json quantization_config with
  quant_algo FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, MXFP8), MIXED_PRECISION mixing NVFP4, FP8
  and FP8_PB_WO experts; compressed-tensors FP8 as llm-compressor writes it (format
  float-quantized: FP8_DYNAMIC channel weights and dynamic token activations,
  RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic; FP8 static tensor/tensor,
  RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8; FP8_BLOCK 128x128 weights and dynamic group-128
  activations, RedHatAI/Qwen3-30B-A3B-FP8-BLOCK), MXFP4 (format mxfp4-pack-quantized) and MXFP8
  (format mxfp8-quantized, uint8 scales) presets.
Architecture keys are those of the base models' config.json files (deepseek-ai/DeepSeek-V3,
deepseek-ai/DeepSeek-V2-Lite, moonshotai/Kimi-K2-Instruct, Qwen/Qwen3-30B-A3B,
Qwen/Qwen3-235B-A22B, Qwen/Qwen3-Coder-480B-A35B-Instruct, nvidia/Nemotron-H-8B-Base-8K,
nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, openai/gpt-oss-120b, openai/gpt-oss-20b,
meta-llama/Llama-3.1-8B-Instruct, ..-70B, ..-405B, mistralai/Mistral-Small-24B-Base-2501,
Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-8B, Qwen/Qwen3-32B).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from checkpoint_fixtures import (
    DEEPSEEK_V3,
    GPT_OSS,
    LLAMA,
    NEMOTRON_H,
    NVFP4_ARGS,
    QWEN3_MOE,
    nemotron_mixed_precision,
)

HERE = Path(__file__).resolve().parent / "checkpoint_corpus"
Entry = Tuple[Dict[str, Any], Optional[Dict[str, Any]]]  # config.json, hf_quant_config.json


def legacy(exclude, version="0.23.0", algo="NVFP4", kv=None) -> Dict[str, Any]:
    return {"producer": {"name": "modelopt", "version": version},
            "quantization": {"quant_algo": algo, "kv_cache_quant_algo": kv, "group_size": 16,
                             "exclude_modules": list(exclude)}}


def modelopt_config(ignore, algo="NVFP4", a16=False, version="0.37.0") -> Dict[str, Any]:
    act = None if a16 else {"dynamic": False, "num_bits": 4, "type": "float",
                            "group_size": 16}
    return {"config_groups": {"group_0": {
        "input_activations": act,
        "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
        "targets": ["Linear"]}},
        "ignore": list(ignore), "quant_algo": algo, "kv_cache_scheme": None,
        "producer": {"name": "modelopt", "version": version}, "quant_method": "modelopt"}


def ct(ignore, a16=False, groups=None) -> Dict[str, Any]:
    act = None if a16 else {**NVFP4_ARGS, "dynamic": "local"}
    return {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "quantization_status": "compressed", "version": "0.12.2",
            "config_groups": groups or {"group_0": {
                "targets": ["Linear"], "weights": dict(NVFP4_ARGS), "input_activations": act,
                "output_activations": None, "format": "nvfp4-pack-quantized"}},
            "ignore": list(ignore), "kv_cache_scheme": None, "sparsity_config": {},
            "transform_config": {}, "global_compression_ratio": None}


ATTN_61 = [f"model.layers.{i}.self_attn*" for i in range(61)]
DS_LEGACY_EXCLUDE = ["lm_head"] + ATTN_61
KIMI = {**DEEPSEEK_V3, "n_routed_experts": 384, "first_k_dense_replace": 1,
        "num_attention_heads": 64, "num_key_value_heads": 64, "n_group": 1, "topk_group": 1,
        "vocab_size": 163840, "routed_scaling_factor": 2.827, "model_type": "kimi_k2",
        "architectures": ["DeepseekV3ForCausalLM"]}
DS_V2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
              "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
              "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
              "num_hidden_layers": 27, "first_k_dense_replace": 1, "moe_layer_freq": 1,
              "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": None,
              "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
              "v_head_dim": 128, "vocab_size": 102400, "hidden_act": "silu",
              "topk_method": "greedy", "torch_dtype": "bfloat16"}
QWEN3_235B = {**QWEN3_MOE, "hidden_size": 4096, "intermediate_size": 12288,
              "moe_intermediate_size": 1536, "num_hidden_layers": 94,
              "num_attention_heads": 64, "num_key_value_heads": 4}
QWEN3_CODER = {**QWEN3_MOE, "hidden_size": 6144, "intermediate_size": 8192,
               "moe_intermediate_size": 2560, "num_experts": 160, "num_hidden_layers": 62,
               "num_attention_heads": 96, "num_key_value_heads": 8}
QWEN3_SPARSE = {**QWEN3_MOE, "decoder_sparse_step": 2, "mlp_only_layers": [0, 47]}
NEMOTRON_H_8B = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                 "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 52,
                 "hybrid_override_pattern":
                     "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                 "mlp_hidden_act": "relu2", "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128,
                 "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
                 "conv_kernel": 4, "vocab_size": 131072, "torch_dtype": "bfloat16"}
GPT_OSS_BASE = {k: v for k, v in GPT_OSS.items() if k != "quantization_config"}
GPT_OSS_20B = {**GPT_OSS_BASE, "num_hidden_layers": 24, "num_local_experts": 32}
LLAMA_70B = {**LLAMA, "hidden_size": 8192, "intermediate_size": 28672,
             "num_hidden_layers": 80, "num_attention_heads": 64}
LLAMA_405B = {**LLAMA, "hidden_size": 16384, "intermediate_size": 53248,
              "num_hidden_layers": 126, "num_attention_heads": 128}
MISTRAL_SMALL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                 "hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "vocab_size": 131072, "hidden_act": "silu", "torch_dtype": "bfloat16"}
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
             "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
             "hidden_act": "silu", "torch_dtype": "bfloat16"}
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "vocab_size": 151936, "hidden_act": "silu", "torch_dtype": "bfloat16"}
QWEN3_32B = {**QWEN3_8B, "hidden_size": 5120, "intermediate_size": 25600,
             "num_hidden_layers": 64, "num_attention_heads": 64}
QWEN_GATE = ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in range(48)]


def fp8(block=True, act="dynamic", key="modules_to_not_convert", skip=()) -> Dict[str, Any]:
    q: Dict[str, Any] = {"activation_scheme": act, "fmt": "e4m3", "quant_method": "fp8"}
    if block:
        q["weight_block_size"] = [128, 128]
    if skip:
        q[key] = list(skip)
    return q


def modelopt_fp8(ignore, algo="FP8", version="0.37.0") -> Dict[str, Any]:
    return {"quant_method": "modelopt", "quant_algo": algo, "ignore": list(ignore),
            "kv_cache_scheme": None, "producer": {"name": "modelopt", "version": version}}


FP8_W_CHANNEL = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                 "dynamic": False, "observer": "minmax"}
FP8_A_TOKEN = {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
               "dynamic": True, "observer": None}
FP8_W_TENSOR = {**FP8_W_CHANNEL, "strategy": "tensor"}
FP8_A_TENSOR = {**FP8_W_CHANNEL, "strategy": "tensor"}
FP8_W_BLOCK = {**FP8_W_CHANNEL, "strategy": "block", "block_structure": [128, 128]}
FP8_A_GROUP = {**FP8_A_TOKEN, "strategy": "group", "group_size": 128}
MX_W = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
        "symmetric": True, "dynamic": False, "scale_dtype": "torch.uint8"}
MX_A = {**MX_W, "dynamic": True}
MX8_W = {**MX_W, "num_bits": 8}
MX8_A = {**MX8_W, "dynamic": True}


def ct_args(ignore, weights, acts, fmt="float-quantized") -> Dict[str, Any]:
    return {"quant_method": "compressed-tensors", "format": fmt,
            "quantization_status": "compressed", "version": "0.12.2",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(weights),
                                          "input_activations": acts and dict(acts),
                                          "output_activations": None, "format": fmt}},
            "ignore": list(ignore), "kv_cache_scheme": None}


QWEN_MOE_FP8_SKIP = ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in range(48)]


def mixed_fp8(layers=48) -> Dict[str, Any]:
    """Qwen3-MoE MIXED_PRECISION: NVFP4 experts in the first third, FP8 per-tensor in the
    second, FP8_PB_WO block experts in the last; attention FP8, shared names unfused."""
    q: Dict[str, Any] = {}
    for i in range(layers):
        algo = "NVFP4" if i < layers // 3 else "FP8" if i < 2 * layers // 3 else "FP8_PB_WO"
        for e in range(2):
            for p in ("gate_proj", "up_proj", "down_proj"):
                q[f"model.layers.{i}.mlp.experts.{e}.{p}"] = {"quant_algo": algo,
                                                              "group_size": 16 if algo ==
                                                              "NVFP4" else 128}
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            q[f"model.layers.{i}.self_attn.{p}"] = {"quant_algo": "FP8"}
    return {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
            "kv_cache_scheme": None, "ignore": ["lm_head", "*mlp.gate"],
            "quantized_layers": q, "producer": {"name": "modelopt", "version": "0.39.0"}}


def _with(config: Dict[str, Any], q: Dict[str, Any]) -> Dict[str, Any]:
    return {**config, "quantization_config": q}


CORPUS: Dict[str, Entry] = {
    # DeepSeek-V3/R1 and Kimi-K2 (DeepseekV3ForCausalLM)
    "deepseek-r1-fp4": (DEEPSEEK_V3, legacy(DS_LEGACY_EXCLUDE)),
    "deepseek-r1-0528-fp4": (DEEPSEEK_V3, legacy(DS_LEGACY_EXCLUDE, "0.29.0")),
    "deepseek-v3-0324-fp4": (DEEPSEEK_V3, legacy(["lm_head", "*self_attn*"], "0.27.0")),
    "deepseek-v3.1-nvfp4": (_with(DEEPSEEK_V3, modelopt_config(["lm_head", "*self_attn*",
                                                                "*mlp.gate"])),
                            legacy(["lm_head", "*self_attn*", "*mlp.gate"], "0.37.0")),
    "deepseek-r1-ct-w4a4": (_with(DEEPSEEK_V3, ct(["lm_head", "re:.*self_attn.*",
                                                   "re:.*mlp.gate$"])), None),
    "deepseek-v2-lite-ct-w4a4": (_with(DS_V2_LITE, ct(["lm_head", "re:.*mlp.gate$"])), None),
    "kimi-k2-nvfp4": (_with(KIMI, modelopt_config(["lm_head", "*self_attn*", "*mlp.gate",
                                                   "model.layers.0.mlp*"])), None),
    "kimi-k2-nvfp4-w4a16": (_with(KIMI, modelopt_config(["lm_head", "*self_attn*"],
                                                        "W4A16_NVFP4", a16=True)), None),
    # Qwen3-MoE
    "qwen3-30b-a3b-fp4": (QWEN3_MOE, legacy(QWEN_GATE, "0.29.0")),
    "qwen3-235b-a22b-fp4": (_with(QWEN3_235B, modelopt_config(["lm_head", "*mlp.gate"])),
                            None),
    "qwen3-coder-480b-fp4": (_with(QWEN3_CODER, modelopt_config(["lm_head", "*mlp.gate",
                                                                 "*self_attn*"])), None),
    "qwen3-30b-a3b-ct-w4a4": (_with(QWEN3_MOE, ct(["lm_head", "re:.*mlp.gate$"])), None),
    "qwen3-30b-a3b-ct-w4a16": (_with(QWEN3_MOE, ct(["lm_head", "re:.*mlp.gate$"], a16=True)),
                               None),
    "qwen3-moe-sparse-ct": (_with(QWEN3_SPARSE, ct(["lm_head", "re:.*mlp.gate$"])), None),
    "qwen3-30b-a3b-ct-attn-w4a16": (_with(QWEN3_MOE, ct(["lm_head", "re:.*mlp.gate$"],
                                                         groups={
        "group_0": {"targets": ["Linear"], "weights": dict(NVFP4_ARGS),
                    "input_activations": dict(NVFP4_ARGS)},
        "group_1": {"targets": ["re:.*self_attn.*"], "weights": dict(NVFP4_ARGS),
                    "input_activations": None}})), None),
    # Nemotron-H
    "nemotron-3-nano-30b-nvfp4": (_with(NEMOTRON_H, nemotron_mixed_precision()), None),
    "nemotron-h-8b-fp4": (_with(NEMOTRON_H_8B, modelopt_config(
        ["lm_head", "*mixer.in_proj*", "*mixer.out_proj*", "*conv1d*"])), None),
    "nemotron-3-nano-ct-w4a16": (_with(NEMOTRON_H, ct(["lm_head", "re:.*mixer.gate$",
                                                      "re:.*in_proj$", "re:.*out_proj$"],
                                                     a16=True)), None),
    # gpt-oss
    "gpt-oss-120b-nvfp4": (GPT_OSS, None),
    "gpt-oss-20b-nvfp4": (_with(GPT_OSS_20B, modelopt_config(
        ["lm_head", "model.layers.*.self_attn*", "model.layers.*.mlp.router"])), None),
    # dense
    "llama-3.1-8b-fp4": (LLAMA, legacy(["lm_head"])),
    "llama-3.3-70b-fp4": (LLAMA_70B, legacy(["lm_head"], "0.27.0")),
    "llama-3.1-405b-fp4": (LLAMA_405B, legacy(["lm_head"], "0.23.0")),
    "llama-3.1-8b-ct-w4a4": (_with(LLAMA, ct(["lm_head"])), None),
    "llama-3.1-8b-ct-w4a16": (_with(LLAMA, ct(["lm_head"], a16=True)), None),
    "llama-3.1-8b-modelopt-w4a16": (_with(LLAMA, modelopt_config(["lm_head"], "W4A16_NVFP4",
                                                                 a16=True)), None),
    "llama-3.1-8b-modelopt-implied-w4a16": (_with(LLAMA, modelopt_config(["lm_head"],
                                                                         a16=True)), None),
    "mistral-small-24b-ct-w4a4": (_with(MISTRAL_SMALL, ct(["lm_head"])), None),
    "qwen2.5-7b-ct-w4a4": (_with(QWEN25_7B, ct(["lm_head"])), None),
    "qwen3-8b-fp4": (QWEN3_8B, legacy(["lm_head"], "0.29.0")),
    "qwen3-32b-ct-w4a4": (_with(QWEN3_32B, ct(["lm_head"])), None),
    # both files: a stale hf_quant_config.json beside config.json's quantization_config
    "llama-3.1-8b-both-contradicting": (_with(LLAMA, ct(["lm_head"], a16=True)),
                                        legacy(["lm_head"])),
    # FP8 (quant_method fp8), MXFP4, ModelOpt FP8/MXFP8/mixed, compressed-tensors FP8/MX
    "deepseek-v3-fp8": (_with(DEEPSEEK_V3, fp8()), None),
    "deepseek-r1-fp8": (_with(DEEPSEEK_V3, fp8()), None),
    "kimi-k2-fp8": (_with(KIMI, fp8()), None),
    "qwen3-8b-fp8": (_with(QWEN3_8B, fp8(skip=["lm_head"])), None),
    "qwen3-30b-a3b-fp8": (_with(QWEN3_MOE, fp8(skip=QWEN_MOE_FP8_SKIP)), None),
    "llama-3.1-8b-fp8-static": (_with(LLAMA, fp8(False, "static", "ignored_layers",
                                                  ["lm_head"])), None),
    "qwen3-30b-a3b-fp8-tensor-dynamic": (_with(QWEN3_MOE, fp8(False, skip=QWEN_MOE_FP8_SKIP)),
                                         None),
    "gpt-oss-120b-mxfp4": (_with(GPT_OSS_BASE, {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"}), None),
    "gpt-oss-20b-mxfp4": (_with(GPT_OSS_20B, {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"}), None),
    "llama-3.1-8b-modelopt-fp8": (LLAMA, {
        "producer": {"name": "modelopt", "version": "0.15.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                         "exclude_modules": ["lm_head"]}}),
    "qwen3-30b-a3b-modelopt-fp8": (_with(QWEN3_MOE, modelopt_fp8(["lm_head", "*mlp.gate"])),
                                   None),
    "llama-3.1-8b-modelopt-fp8-pcpt": (_with(LLAMA, modelopt_fp8(
        ["lm_head"], "FP8_PER_CHANNEL_PER_TOKEN")), None),
    "deepseek-v3-modelopt-fp8-pb-wo": (_with(DEEPSEEK_V3, modelopt_fp8(
        ["lm_head", "*mlp.gate"], "FP8_PB_WO")), None),
    "qwen3-30b-a3b-modelopt-mxfp8": (_with(QWEN3_MOE, modelopt_fp8(["lm_head", "*mlp.gate"],
                                                                   "MXFP8")), None),
    "qwen3-30b-a3b-mixed-nvfp4-fp8": (_with(QWEN3_MOE, mixed_fp8()), None),
    "llama-3.1-8b-ct-fp8-dynamic": (_with(LLAMA, ct_args(["lm_head"], FP8_W_CHANNEL,
                                                         FP8_A_TOKEN)), None),
    "llama-3.1-8b-ct-fp8-static": (_with(LLAMA, ct_args(["lm_head"], FP8_W_TENSOR,
                                                        FP8_A_TENSOR)), None),
    "qwen3-30b-a3b-ct-fp8-dynamic": (_with(QWEN3_MOE, ct_args(["lm_head", "re:.*mlp.gate$"],
                                                              FP8_W_CHANNEL, FP8_A_TOKEN)),
                                     None),
    "qwen3-30b-a3b-ct-fp8-block": (_with(QWEN3_MOE, ct_args(["lm_head", "re:.*mlp.gate$"],
                                                            FP8_W_BLOCK, FP8_A_GROUP)), None),
    "qwen3-30b-a3b-ct-mxfp4": (_with(QWEN3_MOE, ct_args(["lm_head", "re:.*mlp.gate$"], MX_W,
                                                        MX_A, "mxfp4-pack-quantized")), None),
    "llama-3.1-8b-ct-mxfp8": (_with(LLAMA, ct_args(["lm_head"], MX8_W, MX8_A,
                                                   "mxfp8-quantized")), None),
    # vLLM 0.32.0 refuses MIXED_PRECISION in a legacy hf_quant_config.json
    "nemotron-3-nano-legacy-mixed": (NEMOTRON_H, {
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quantization": {k: v for k, v in nemotron_mixed_precision().items()
                         if k not in ("quant_method", "ignore", "kv_cache_scheme")} |
        {"exclude_modules": ["lm_head"], "kv_cache_quant_algo": "FP8"}}),
}


def write(root: Path, name: str, entry: Entry) -> Path:
    config, quant = entry
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    if quant is not None:
        (d / "hf_quant_config.json").write_text(json.dumps(quant, indent=1) + "\n")
    elif (d / "hf_quant_config.json").exists():
        (d / "hf_quant_config.json").unlink()
    return d


def read(d: Path) -> Entry:
    config = json.loads((d / "config.json").read_text())
    hf = d / "hf_quant_config.json"
    return config, (json.loads(hf.read_text()) if hf.exists() else None)


# ---------------------------------------------------------------------------------------------
# Variants real checkpoints use

def _qcfg(entry: Entry) -> Tuple[Dict[str, Any], str]:
    """The quantization description vLLM reads, and where it lives ('config' or 'hf')."""
    config, quant = entry
    if "quantization_config" in config:
        return config["quantization_config"], "config"
    assert quant is not None
    return quant, "hf"


Put = Callable[[Dict[str, Any]], Entry]


def _fp8_mxfp4_variants(name: str, q: Dict[str, Any], put: Put) -> Iterator[Tuple[str, Entry]]:
    """An fp8 or mxfp4 description: exclusion styles, and for fp8 its block and activation
    keys."""
    key = "ignored_layers" if "ignored_layers" in q else "modules_to_not_convert"
    for label, names in (("skip-fused-qkv", ["model.layers.1.self_attn.qkv_proj"]),
                         ("skip-q-proj-only", ["model.layers.1.self_attn.q_proj"]),
                         ("skip-qkv-shards", [f"model.layers.1.self_attn.{p}_proj"
                                              for p in "qkv"]),
                         ("skip-experts", ["model.layers.1.mlp.experts"]),
                         ("skip-expert-0-down", ["model.layers.1.mlp.experts.0.down_proj"]),
                         ("skip-down-proj-glob", ["*down_proj"]),
                         ("skip-layer-1-mlp", ["model.layers.1.mlp"])):
        yield f"{name}+{label}", put({**q, key: list(q.get(key) or []) + names})
    if q.get("quant_method") == "fp8":
        yield f"{name}+static-block", put({**q, "activation_scheme": "static"})
        yield f"{name}+block-64", put({**q, "weight_block_size": [64, 64],
                                       "activation_scheme": "dynamic"})
        yield f"{name}+block-3d", put({**q, "weight_block_size": [128, 128, 1]})
        yield f"{name}+no-block", put({k: v for k, v in q.items()
                                       if k != "weight_block_size"})
        yield f"{name}+unknown-activation", put({**q, "activation_scheme": "per_token"})
        yield f"{name}+mxfp4-experts", put({**q, "store_dtype": "mxfp4"})


def _ct_variants(name: str, q: Dict[str, Any], groups: Dict[str, Any],
                 put: Put) -> Iterator[Tuple[str, Entry]]:
    """A compressed-tensors description: group order, an attention group first or last,
    class and name targets, ignore patterns."""
    items = list(groups.items())
    if len(items) > 1:
        yield f"{name}+reversed-groups", put({**q, "config_groups": dict(reversed(items))})
    w4a16 = {"targets": ["re:.*self_attn.*"], "weights": dict(NVFP4_ARGS),
             "input_activations": None}
    for label, order in (("attn-group-last", items + [("group_attn", w4a16)]),
                         ("attn-group-first", [("group_attn", w4a16)] + items)):
        yield f"{name}+{label}", put({**q, "config_groups": dict(order)})
    yield f"{name}+class-and-name", put({**q, "config_groups": {
        "group_0": {**items[0][1], "targets": ["Linear"]},
        "group_1": {**items[0][1], "input_activations": None,
                    "targets": ["re:.*down_proj$", "re:.*o_proj$"]}}})
    for label, ign in (("ignore-experts-regex", r"re:.*mlp\.experts$"),
                       ("ignore-experts-proj", r"re:.*experts\.\d+\.down_proj$"),
                       ("ignore-all-experts", r"re:.*experts.*"),
                       ("ignore-q-proj", r"re:.*q_proj$"),
                       ("ignore-attn-fused", r"re:.*self_attn\.qkv_proj$"),
                       ("ignore-unfused-qkv", r"re:.*(q|k|v)_proj$")):
        yield f"{name}+{label}", put({**q, "ignore": list(q.get("ignore", [])) + [ign]})


def _modelopt_variants(name: str, q: Dict[str, Any], where: str,
                       put: Put) -> Iterator[Tuple[str, Entry]]:
    """A ModelOpt description (hf_quant_config.json's `quantization`, or the config's own):
    exclusion globs and, in config.json, W4A16 NVFP4."""
    key = "exclude_modules" if "quantization" in q else "ignore"
    inner = q["quantization"] if "quantization" in q else q
    for label, pats in (("exclude-down-proj", ["*down_proj"]),
                        ("exclude-fused-experts", ["*mlp.experts*"]),
                        ("exclude-expert-0-names", ["*experts.0.down_proj"]),
                        ("exclude-layer-1-prefix", ["model.layers.1.self_attn"]),
                        ("exclude-fused-qkv", ["*qkv_proj"]),
                        ("exclude-q-proj", ["*q_proj"]),
                        ("exclude-gate-up", ["*gate_up_proj*"]),
                        ("exclude-shared", ["*shared_experts*"]),
                        ("exclude-mlp-star", ["model.layers.*.mlp*"])):
        newinner = {**inner, key: list(inner.get(key) or []) + pats}
        yield f"{name}+{label}", put({**q, "quantization": newinner}
                                     if "quantization" in q else newinner)
    if inner.get("quant_algo") == "NVFP4" and where == "config":
        yield f"{name}+w4a16", put({**q, "quant_algo": "W4A16_NVFP4"})


def variants(name: str, entry: Entry) -> Iterator[Tuple[str, Entry]]:
    """Group order, exclusion styles (globs, `re:`, fused and unfused names), mixed precision,
    both files present and contradicting, keys left to Hugging Face defaults."""
    config, quant = entry
    q, where = _qcfg(entry)

    def put(newq: Dict[str, Any]) -> Entry:
        c, h = copy.deepcopy(config), copy.deepcopy(quant)
        if where == "config":
            c["quantization_config"] = newq
        else:
            h = newq
        return c, h

    groups = q.get("config_groups")
    if q.get("quant_method") in ("fp8", "mxfp4"):
        yield from _fp8_mxfp4_variants(name, q, put)
    elif q.get("quant_method") == "compressed-tensors" and isinstance(groups, dict):
        yield from _ct_variants(name, q, groups, put)
    else:
        yield from _modelopt_variants(name, q, where, put)
    # both files, contradicting: the other one stale
    if where == "config":
        yield f"{name}+stale-hf-file", (copy.deepcopy(config), legacy(["lm_head", "*"]))
    else:
        yield f"{name}+config-wins", ({**config, "quantization_config": ct(["lm_head"],
                                                                          a16=True)}, quant)
    # keys left to the Hugging Face config class defaults
    for key in ("first_k_dense_replace", "num_key_value_heads", "head_dim", "mamba_num_heads",
                "n_shared_experts", "moe_intermediate_size", "decoder_sparse_step",
                "num_experts_per_tok"):
        if key in config:
            c = {k: v for k, v in config.items() if k != key}
            yield f"{name}-{key}", (c, copy.deepcopy(quant))


if __name__ == "__main__":
    for n, e in CORPUS.items():
        write(HERE, n, e)
    print(f"{len(CORPUS)} checkpoints in {HERE}")
