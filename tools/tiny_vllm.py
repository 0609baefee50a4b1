"""Try selector's vLLM plugin on CPU: tiny random NVFP4 and FP8 checkpoints, started in vLLM.

    .venv-vllm/bin/python tools/tiny_vllm.py /tmp/tiny            # writes both, starts vLLM
    .venv-vllm/bin/python tools/tiny_vllm.py /tmp/tiny --plugin off

writes a tiny Qwen3-MoE NVFP4 checkpoint (ModelOpt) and a tiny Qwen3-MoE FP8 block checkpoint
(vLLM's `fp8` format, 128x128 blocks: the only FP8 MoE layout vLLM's CPU experts take) under
DIR, starts vLLM (`vllm.LLM`, its CPU build from tools/vllm_env.sh) on each in a process of its
own with SELECTOR_VLLM=1, generates 4 tokens from a model that loads, and prints selector's
lines from vLLM's log and one `tiny:` summary line per checkpoint. It exits 1 when a checkpoint
has no selector decision line in vLLM's log (the plugin did not act), or when vLLM fails for a
reason that is not selector's refusal; 0 otherwise. vLLM's CPU build has no NVFP4 kernel:
there the NVFP4 checkpoint is refused, with selector's explanation as vLLM's error.

The checkpoints (tests/vllm/test_e2e.py writes them all): the parameter names and shapes are
those of the published Hugging Face checkpoints of each architecture (`parameters`); every
linear weight the quantization config quantizes is written in its layout, every other one in
bfloat16:

- ModelOpt NVFP4 (`hf_quant_config.json`, or config.json `quantization_config` with quant_method
  modelopt for MIXED_PRECISION): `weight` uint8 [N, K/2], `weight_scale` float8_e4m3fn
  [N, K/16], `weight_scale_2` and (W4A4) `input_scale` float32 scalars.
- compressed-tensors NVFP4 (`quantization_config`, format nvfp4-pack-quantized):
  `weight_packed`, `weight_scale`, `weight_global_scale` [1] and (W4A4) `input_global_scale` [1].
- FP8 block (`quantization_config` quant_method fp8, weight_block_size [128, 128], dynamic
  activations, as Qwen3-30B-A3B-FP8): `weight` float8_e4m3fn [N, K], `weight_scale_inv`
  float32 [N/128, K/128].
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

NVFP4_ARGS = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
              "symmetric": True, "dynamic": False, "observer": "minmax"}

QWEN3_MOE: Dict[str, Any] = {
             "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
             "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
             "hidden_act": "silu", "num_attention_heads": 2, "num_key_value_heads": 1,
             "head_dim": 64, "vocab_size": 256, "max_position_embeddings": 256,
             "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}
LLAMA: Dict[str, Any] = {
         "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "head_dim": 64, "hidden_act": "silu", "vocab_size": 256,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16"}

# FP8 block: every quantized N and K a multiple of the 128 block (vLLM's validate_fp8_block_shape)
QWEN3_MOE_FP8: Dict[str, Any] = {**QWEN3_MOE, "hidden_size": 128, "moe_intermediate_size": 128,
                                 "intermediate_size": 256, "num_key_value_heads": 2}
FP8_BLOCK = 128

# Which modules a checkpoint quantizes: (HF module name) -> "nvfp4" | "nvfp4_w4a16" |
# "fp8_block" | None
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


def _fp8_block(shape: Tuple[int, ...]) -> Dict[str, Any]:
    """Random FP8-E4M3 weight [N, K] with one float32 scale per 128x128 block."""
    import torch
    n, k = shape
    g = torch.Generator().manual_seed(n * 137 + k)
    w = (torch.randn(n, k, generator=g) * 0.5).to(torch.float8_e4m3fn)
    scale = torch.rand(-(-n // FP8_BLOCK), -(-k // FP8_BLOCK), generator=g) * 0.01 + 0.005
    return {"weight": w, "weight_scale_inv": scale}


def _quantized(shape: Tuple[int, ...], fmt: str, scheme: str) -> Dict[str, Any]:
    if scheme == "fp8_block":
        return _fp8_block(shape)
    return _nvfp4(shape, fmt, scheme == "nvfp4_w4a16")


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
        for leaf_name, t in _quantized(shape, fmt, s).items():
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


def fp8_moe(root: Path) -> Path:
    """Qwen3-MoE, FP8 128x128 block experts (vLLM's fp8 format, as Qwen3-30B-A3B-FP8 stores
    them); attention and routers in bfloat16, listed in `ignored_layers` (every FP8 linear
    kernel of vLLM's CPU build needs AMX: `start` says so)."""
    n = QWEN3_MOE_FP8["num_hidden_layers"]
    ignored = [f"model.layers.{i}.{m}" for i in range(n)
               for m in ("mlp.gate", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                         "self_attn.o_proj")]
    q = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
         "weight_block_size": [FP8_BLOCK, FP8_BLOCK], "ignored_layers": ignored}
    return write(root, "fp8_moe", QWEN3_MOE_FP8, "fp8",
                 lambda m: None if _attn(m) else "fp8_block", q)


ALL = (modelopt_moe, ct_moe, modelopt_linear, ct_linear_w4a16, mixed, excluded)  # NVFP4
# What the command line writes and starts: NVFP4, FP8 and a control (NVFP4 declared, every
# module excluded: selector is never asked, vLLM must generate with the plugin on)
RECIPE = (modelopt_moe, fp8_moe, excluded)


# -- the recipe: start vLLM on each checkpoint ---------------------------------------------------
DECISION = "] selector: "  # vLLM's log prefix ends with "]"; the plugin's lines start "selector: "
PROMPT = [1, 2, 3, 4]     # token ids: the tiny checkpoints have no tokenizer
TOKENS = 4


def child(model: str) -> None:
    """In a fresh process: start vLLM on `model`, generate TOKENS tokens, print `RESULT {json}`
    (loaded, generated token ids, or the exception vLLM raised)."""
    from vllm import LLM, SamplingParams
    t = time.time()
    res: Dict[str, Any] = {"model": model}
    try:
        llm = LLM(model=model, skip_tokenizer_init=True, enforce_eager=True, max_model_len=64,
                  max_num_seqs=1, max_num_batched_tokens=64, dtype="bfloat16")
        res["loaded"] = True
        out = llm.generate([{"prompt_token_ids": PROMPT}],
                           SamplingParams(max_tokens=TOKENS, temperature=0.0,
                                          detokenize=False), use_tqdm=False)
        res["tokens"] = list(out[0].outputs[0].token_ids)
    except Exception as exc:  # noqa: BLE001  the outcome is what the recipe reports
        res.update(loaded=res.get("loaded", False), error=type(exc).__name__,
                   message=str(exc))
    res["seconds"] = round(time.time() - t, 1)
    res["selector"] = selector_dir()  # the selector vLLM's plugin loader imported
    print("RESULT " + json.dumps(res), flush=True)


def selector_dir() -> Optional[str]:
    """The directory of the `selector` package this process imports (None: not importable)."""
    import importlib.util
    spec = importlib.util.find_spec("selector")
    return str(Path(spec.origin).resolve().parent) if spec and spec.origin else None


def vllm_env(plugin: bool, mode: str = "1") -> Dict[str, str]:
    """The environment for vLLM: the plugin on (SELECTOR_VLLM=`mode`: 1, or observe) or off,
    one process (no engine-core subprocess), 1 GiB of KV cache."""
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("VLLM_PLUGINS", None)
    # the child imports the selector this process imports: a checkout run from its root (the
    # tests) is found through the working directory, which the child (a script: sys.path[0] is
    # tools/) does not search, and the environment's editable install may point at another
    # checkout (a venv copied with cp -a whose bin/pip installed into the original)
    here = selector_dir()
    if here is not None and (Path(here).parent / "conf" / "config.yaml").is_file():
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(here).parent)] + [p for p in [env.get("PYTHONPATH")] if p])
    if plugin:
        env["SELECTOR_VLLM"] = mode
    else:
        env.pop("SELECTOR_VLLM", None)
    return env


def start(model: Path, plugin: bool, timeout: float = 600, mode: str = "1",
          env: Optional[Dict[str, str]] = None, log: Optional[Path] = None) -> Dict[str, Any]:
    """Start vLLM on `model` in a process of its own (SELECTOR_VLLM=`mode` when `plugin`; `env`
    adds variables); the RESULT, with `log` (what vLLM printed, also written to `log`, by default
    <model>.log) and `selector_log` (selector's lines in it)."""
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(model)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env={**vllm_env(plugin, mode), **(env or {})}, timeout=timeout)
    Path(log or f"{model}.log").write_text(p.stdout)
    lines = p.stdout.splitlines()
    found = [ln for ln in lines if ln.startswith("RESULT ")]
    res: Dict[str, Any] = json.loads(found[-1][7:]) if found else {
        "model": str(model), "loaded": False, "error": f"exit {p.returncode}",
        "message": "\n".join(lines[-20:])}
    res["log"] = [ln for ln in lines if not ln.startswith("RESULT ")]
    res["selector_log"] = [ln for ln in res["log"] if DECISION in ln]
    return res


def decided(res: Dict[str, Any]) -> List[str]:
    """selector's decision lines (one per distinct layer) in vLLM's log."""
    return [ln for ln in res["selector_log"] if " -> " in ln]


def verdict(res: Dict[str, Any], plugin: bool) -> Tuple[Optional[str], str]:
    """(what is wrong or None, the outcome in one line). With the plugin on, a checkpoint with a
    layer selector decides has selector's decision line in vLLM's log and either generates or
    is refused with selector's explanation; one without such a layer generates. With the
    plugin off selector logs nothing."""
    msg = res.get("message", "")
    outcome = (f"generated {res['tokens']}" if res.get("tokens") else
               f"{res.get('error')}: {msg.splitlines()[0] if msg else ''}")
    if plugin and res.get("selector", selector_dir()) != selector_dir():
        return (f"vLLM imported selector from {res.get('selector')}, this process from "
                f"{selector_dir()}"), outcome
    if not plugin:
        return ("selector logged with the plugin off" if res["selector_log"] else None), outcome
    if msg.startswith("selector refuses "):
        return (None if decided(res) else "no selector decision line in vLLM's log"), outcome
    if not res.get("tokens"):
        return "vLLM failed, and not with selector's refusal", outcome
    return None, outcome


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="where the checkpoints (and vLLM's logs) go")
    ap.add_argument("--plugin", choices=("on", "off"), default="on")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(str(args.dir))
        return 0
    plugin, failed = args.plugin == "on", 0
    for make in RECIPE:
        model = make(args.dir)
        res = start(model, plugin)
        wrong, outcome = verdict(res, plugin)
        for ln in res["selector_log"]:
            print(ln)
        print(f"tiny: {model.name}: plugin {args.plugin}: {outcome} ({res.get('seconds')} s)")
        if wrong:
            failed += 1
            print(f"tiny: {model.name}: FAILED: {wrong} (vLLM's log: {model}.log)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
