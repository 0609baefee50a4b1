"""Checkpoints (config files only) for the launch plan: a MoE whose experts are NVFP4 in some
layers and FP8 in others, and a dense model with W4A4 MLPs and W4A16 attention (the mixes the
review of vLLM PR #40082 and vLLM's linear_backend_per_quant are about)."""
from __future__ import annotations

from pathlib import Path

from checkpoint_fixtures import LLAMA, NVFP4_ARGS, QWEN3_MOE, write_checkpoint


def mixed_moe(root: Path, layers: int = 4, fp8_from: int = 2) -> Path:
    """Qwen3-MoE, ModelOpt MIXED_PRECISION in config.json's quantization_config (vLLM 0.32.0
    reads it from there; an hf_quant_config.json with producer modelopt and MIXED_PRECISION
    stops its transformers_utils/model_arch_config_convertor.py with 'Unknown ModelOpt quant
    algo'): experts of layers < fp8_from NVFP4, the rest FP8; attention FP8."""
    quantized = {}
    for i in range(layers):
        quantized[f"model.layers.{i}.mlp.experts"] = {
            "quant_algo": "NVFP4" if i < fp8_from else "FP8"}
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            quantized[f"model.layers.{i}.self_attn.{p}"] = {"quant_algo": "FP8"}
    q = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
         "quantized_layers": quantized}
    return write_checkpoint(root, "mixed_moe", dict(QWEN3_MOE, num_hidden_layers=layers,
                                                    quantization_config=q))


def mixed_linear(root: Path, layers: int = 2) -> Path:
    """Llama, compressed-tensors: MLP W4A4 NVFP4, attention W4A16 NVFP4."""
    cfg = dict(LLAMA, num_hidden_layers=layers, quantization_config={
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {
            "mlp": {"targets": ["re:.*mlp.*"], "weights": dict(NVFP4_ARGS),
                    "input_activations": {**NVFP4_ARGS, "dynamic": "local"}},
            "attn": {"targets": ["re:.*self_attn.*"], "weights": dict(NVFP4_ARGS),
                     "input_activations": None}},
        "ignore": ["lm_head"]})
    return write_checkpoint(root, "mixed_linear", cfg)


def mixed_block_moe(root: Path, layers: int = 4, nvfp4_below: int = 2) -> Path:
    """Qwen3-MoE, ModelOpt MIXED_PRECISION: experts of layers < nvfp4_below NVFP4, the rest
    FP8_PB_WO (128x128 block FP8: vLLM builds Fp8MoEMethod for them), attention FP8_PB_WO."""
    quantized = {}
    for i in range(layers):
        quantized[f"model.layers.{i}.mlp.experts"] = {
            "quant_algo": "NVFP4" if i < nvfp4_below else "FP8_PB_WO"}
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            quantized[f"model.layers.{i}.self_attn.{p}"] = {"quant_algo": "FP8_PB_WO"}
    q = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
         "quantized_layers": quantized}
    return write_checkpoint(root, "mixed_block_moe", dict(QWEN3_MOE, num_hidden_layers=layers,
                                                          quantization_config=q))


def fp8_block_dense(root: Path, layers: int = 2) -> Path:
    """Llama, `quant_method: fp8` with 128x128 blocks (the DeepSeek-V3 / Qwen3-FP8 layout)."""
    cfg = dict(LLAMA, num_hidden_layers=layers, quantization_config={
        "quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
        "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]})
    return write_checkpoint(root, "fp8_block_dense", cfg)
