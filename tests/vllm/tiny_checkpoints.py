"""Tiny random checkpoints with real NVFP4 tensors, as ModelOpt and compressed-tensors export them.

The parameter names and shapes are those of the published Hugging Face checkpoints of each
architecture (`parameters`); every linear weight the quantization config quantizes is written
in its NVFP4 layout (packed E2M1 pairs, FP8-E4M3 block scales of 16, FP32 global scales), every
other one in bfloat16:

- ModelOpt (`hf_quant_config.json`, or config.json `quantization_config` with quant_method
  modelopt for MIXED_PRECISION): `weight` uint8 [N, K/2], `weight_scale` float8_e4m3fn
  [N, K/16], `weight_scale_2` and (W4A4) `input_scale` float32 scalars.
- compressed-tensors (`quantization_config`, format nvfp4-pack-quantized): `weight_packed`,
  `weight_scale`, `weight_global_scale` [1] and (W4A4) `input_global_scale` [1].
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

NVFP4_ARGS = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
              "symmetric": True, "dynamic": False, "observer": "minmax"}

QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
             "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
             "hidden_act": "silu", "num_attention_heads": 2, "num_key_value_heads": 1,
             "head_dim": 64, "vocab_size": 256, "max_position_embeddings": 256,
             "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "head_dim": 64, "hidden_act": "silu", "vocab_size": 256,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16"}

# Which modules a checkpoint quantizes: (HF module name) -> "nvfp4" | "nvfp4_w4a16" | None
Scheme = Callable[[str], Optional[str]]


def parameters(cfg: Dict[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """Every parameter of the Hugging Face checkpoint (Llama, Qwen3-MoE with one tensor per
    expert, as the published checkpoints store them), name -> shape."""
    h, v, n = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    hd, q, kv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out: Dict[str, Tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for i in range(n):
        p = f"model.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (h,)
        out[f"{p}.post_attention_layernorm.weight"] = (h,)
        out[f"{p}.self_attn.q_proj.weight"] = (q * hd, h)
        out[f"{p}.self_attn.k_proj.weight"] = (kv * hd, h)
        out[f"{p}.self_attn.v_proj.weight"] = (kv * hd, h)
        out[f"{p}.self_attn.o_proj.weight"] = (h, q * hd)
        if cfg["model_type"] == "qwen3_moe":
            out[f"{p}.self_attn.q_norm.weight"] = (hd,)
            out[f"{p}.self_attn.k_norm.weight"] = (hd,)
            im, e = cfg["moe_intermediate_size"], cfg["num_experts"]
            out[f"{p}.mlp.gate.weight"] = (e, h)
            for x in range(e):
                out[f"{p}.mlp.experts.{x}.gate_proj.weight"] = (im, h)
                out[f"{p}.mlp.experts.{x}.up_proj.weight"] = (im, h)
                out[f"{p}.mlp.experts.{x}.down_proj.weight"] = (h, im)
        else:
            i_ = cfg["intermediate_size"]
            out[f"{p}.mlp.gate_proj.weight"] = (i_, h)
            out[f"{p}.mlp.up_proj.weight"] = (i_, h)
            out[f"{p}.mlp.down_proj.weight"] = (h, i_)
    out["model.norm.weight"] = (h,)
    out["lm_head.weight"] = (v, h)
    return out


def _nvfp4(shape: Tuple[int, ...], fmt: str, w4a16: bool) -> Dict[str, Any]:
    """Random NVFP4 tensors for a [N, K] weight in the layout of `fmt`."""
    import torch
    n, k = shape
    g = torch.Generator().manual_seed(n * 131 + k)
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g)
    scale = (torch.rand(n, k // 16, generator=g) * 2 + 0.5).to(torch.float8_e4m3fn)
    if fmt == "modelopt":
        out = {"weight": packed, "weight_scale": scale,
               "weight_scale_2": torch.tensor(0.01, dtype=torch.float32)}
        if not w4a16:
            out["input_scale"] = torch.tensor(0.02, dtype=torch.float32)
        return out
    out = {"weight_packed": packed, "weight_scale": scale,
           "weight_global_scale": torch.tensor([100.0], dtype=torch.float32)}
    if not w4a16:
        out["input_global_scale"] = torch.tensor([50.0], dtype=torch.float32)
    return out


def write(root: Path, name: str, config: Dict[str, Any], fmt: str, scheme: Scheme,
          quant: Dict[str, Any], hf_quant_file: bool = False) -> Path:
    """Write config.json (with `quant` as quantization_config unless `hf_quant_file`), the
    quantization file, and model.safetensors with random weights."""
    import torch
    from safetensors.torch import save_file
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    cfg = dict(config)
    if hf_quant_file:
        (d / "hf_quant_config.json").write_text(json.dumps(quant, indent=2))
    else:
        cfg["quantization_config"] = quant
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    tensors: Dict[str, Any] = {}
    g = torch.Generator().manual_seed(1)
    for pname, shape in parameters(cfg).items():
        module, _, leaf = pname.rpartition(".")
        s = scheme(module) if leaf == "weight" and len(shape) == 2 and \
            not module.endswith(("embed_tokens", "lm_head", "mlp.gate")) else None
        if s is None:
            t = torch.ones(shape) if "norm" in leaf or "norm" in module else \
                torch.randn(shape, generator=g) * 0.02
            tensors[pname] = t.to(torch.bfloat16)
            continue
        for leaf_name, t in _nvfp4(shape, fmt, s == "nvfp4_w4a16").items():
            tensors[f"{module}.{leaf_name}"] = t
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"))
    return d


# -- the checkpoints ---------------------------------------------------------------------------
def _attn(m: str) -> bool:
    return ".self_attn." in m


def modelopt_moe(root: Path) -> Path:
    """Qwen3-MoE, ModelOpt NVFP4 (hf_quant_config.json), attention and router excluded."""
    q = {"producer": {"name": "modelopt", "version": "0.37.0"},
         "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                          "exclude_modules": ["lm_head", "model.layers.*.self_attn*",
                                              "model.layers.*.mlp.gate"]}}
    return write(root, "modelopt_moe", QWEN3_MOE, "modelopt",
                 lambda m: None if _attn(m) else "nvfp4", q, hf_quant_file=True)


def ct_moe(root: Path) -> Path:
    """Qwen3-MoE, compressed-tensors NVFP4 (W4A4) on every Linear but the router."""
    q = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
         "quantization_status": "compressed",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(NVFP4_ARGS),
                                       "input_activations": {**NVFP4_ARGS, "dynamic": "local"},
                                       "output_activations": None}},
         "ignore": ["lm_head", "re:.*mlp.gate$"]}
    return write(root, "ct_moe", QWEN3_MOE, "compressed-tensors", lambda m: "nvfp4", q)


def modelopt_linear(root: Path) -> Path:
    """Llama, ModelOpt NVFP4 on every linear layer (hf_quant_config.json)."""
    q = {"producer": {"name": "modelopt", "version": "0.23.0"},
         "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                          "exclude_modules": ["lm_head"]}}
    return write(root, "modelopt_linear", LLAMA, "modelopt", lambda m: "nvfp4", q,
                 hf_quant_file=True)


def ct_linear_w4a16(root: Path) -> Path:
    """Llama, compressed-tensors NVFP4 weight-only (W4A16)."""
    q = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
         "quantization_status": "compressed",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(NVFP4_ARGS),
                                       "input_activations": None, "output_activations": None}},
         "ignore": ["lm_head"]}
    return write(root, "ct_linear_w4a16", LLAMA, "compressed-tensors",
                 lambda m: "nvfp4_w4a16", q)


def mixed(root: Path) -> Path:
    """Qwen3-MoE, ModelOpt MIXED_PRECISION: layer 0's experts NVFP4, layer 1's left in
    bfloat16, attention W4A16 NVFP4."""
    layers: Dict[str, Any] = {}
    for i in range(QWEN3_MOE["num_hidden_layers"]):
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            layers[f"model.layers.{i}.self_attn.{p}"] = {"quant_algo": "W4A16_NVFP4",
                                                         "group_size": 16}
    for e in range(QWEN3_MOE["num_experts"]):
        for p in ("gate_proj", "up_proj", "down_proj"):
            layers[f"model.layers.0.mlp.experts.{e}.{p}"] = {"quant_algo": "NVFP4",
                                                             "group_size": 16}
    q = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
         "quantized_layers": layers}

    def scheme(m: str) -> Optional[str]:
        if _attn(m):
            return "nvfp4_w4a16"
        return "nvfp4" if m.startswith("model.layers.0.mlp.experts.") else None
    return write(root, "mixed", QWEN3_MOE, "modelopt", scheme, q)


def excluded(root: Path) -> Path:
    """Qwen3-MoE declared ModelOpt NVFP4 with every module excluded: no NVFP4 layer."""
    q = {"producer": {"name": "modelopt", "version": "0.37.0"},
         "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                          "exclude_modules": ["lm_head", "model.layers.*"]}}
    return write(root, "excluded", QWEN3_MOE, "modelopt", lambda m: None, q,
                 hf_quant_file=True)


ALL = (modelopt_moe, ct_moe, modelopt_linear, ct_linear_w4a16, mixed, excluded)
