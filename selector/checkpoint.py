"""Explain a whole checkpoint: read its config.json and quantization description (never the
weights), derive every distinct NVFP4 layer kind, and decide each one.

Users think in checkpoints, not in `layer.*` keys. The architecture's own keys give the layer
fields (hidden and intermediate sizes, experts, top-k, `hidden_act`/`mlp_hidden_act`,
`swiglu_limit`); the quantization description (ModelOpt `hf_quant_config.json` or
`quantization_config`, compressed-tensors config groups) gives each module's scheme and what is
excluded. Module names and shapes are the checkpoint's own projections (an engine may fuse
gate/up or q/k/v, which changes N but never K).
"""
from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import SelectorError, bad_input, bad_value

MAX_JSON_BYTES = 4 * 1024 * 1024  # config.json files are a few KB; weights are never read


# ---------------------------------------------------------------------------------------------
# What a checkpoint is made of

@dataclass(frozen=True)
class Module:
    """One checkpoint projection (or one layer's routed experts) with the layer fields it gets."""
    name: str  # e.g. model.layers.3.mlp.experts (the names matched against exclusions)
    component: str  # routed experts | shared experts | dense MLP | attention | Mamba | LM head
    projection: str  # experts | gate_proj | q_a_proj | ...
    layer: Optional[int]
    fields: Tuple[Tuple[str, Any], ...]  # layer.* keys (everything but quant)
    match: Tuple[str, ...] = ()  # names the quantization config sees (default: name)
    linear_class: bool = True  # an nn.Linear in the HF model (compressed-tensors target Linear)

    @property
    def names(self) -> Tuple[str, ...]:
        return self.match or (self.name,)


@dataclass(frozen=True)
class Architecture:
    name: str  # the `architectures` entry, e.g. DeepseekV3ForCausalLM
    model_type: str
    num_layers: int
    layer_types: Tuple[str, ...]  # per decoder layer: MoE | dense | Mamba | attention
    modules: Tuple[Module, ...]
    notes: Tuple[str, ...] = ()


class _Config:
    """config.json with typed look-ups whose errors name the key and the file."""

    def __init__(self, data: Mapping[str, Any], path: Path, arch: str):
        self.data, self.path, self.arch = data, path, arch

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: Any = ..., minimum: int = 1) -> Any:
        v = self.data.get(key)
        if v is None:
            if default is ...:
                raise bad_input(key, None, f"is missing; {self.arch} needs it",
                                where=str(self.path))
            return default
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise bad_input(key, v, f"must be an integer >= {minimum}", where=str(self.path))
        return v

    def ints(self, key: str) -> Tuple[int, ...]:
        v = self.data.get(key) or []
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                               for x in v):
            raise bad_input(key, v, "must be a list of layer indices", where=str(self.path))
        return tuple(v)

    def str(self, key: str, default: Any = ...) -> Any:
        v = self.data.get(key)
        if v is None:
            if default is ...:
                raise bad_input(key, None, f"is missing; {self.arch} needs it",
                                where=str(self.path))
            return default
        if not isinstance(v, str):
            raise bad_input(key, v, "must be a string", where=str(self.path))
        return v

    def number(self, key: str) -> Optional[float]:
        v = self.data.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise bad_input(key, v, "must be a positive number", where=str(self.path))
        return float(v)


# Hugging Face `hidden_act` names -> the activation vocabulary (schema.ACTIVATIONS)
_GATED_ACTS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_new": "gelu_tanh", "gelu_tanh": "gelu_tanh"}
_NON_GATED_ACTS = {"relu2": "relu2", **_GATED_ACTS}


def _activation(cfg: _Config, key: str, table: Mapping[str, str], default: Optional[str]) -> str:
    act = cfg.str(key, default)
    if act not in table:
        raise bad_value(key, act, table, where=str(cfg.path),
                        hint=f"{cfg.arch} layers with this activation are not understood")
    return table[act]


def _fields(**kw: Any) -> Tuple[Tuple[str, Any], ...]:
    return tuple(kw.items())


def _moe(name, layer, hidden, inter, experts, top_k, act, gated, limit=None, match=(),
         linear_class=True) -> Module:
    return Module(name, "routed experts", "experts", layer,
                  _fields(op="moe", activation=act, act_and_mul=gated, hidden_size=hidden,
                          intermediate_size=inter, num_experts=experts, top_k=top_k,
                          swiglu_limit=limit), match, linear_class)


def _linear(prefix: str, component: str, layer: Optional[int], proj: str, k: int, n: int
            ) -> Module:
    return Module(f"{prefix}.{proj}" if prefix else proj, component, proj, layer,
                  _fields(op="linear", activation="silu", act_and_mul=False, hidden_size=k,
                          intermediate_size=n, num_experts=None, top_k=None, swiglu_limit=None))


def _mlp(prefix, component, layer, hidden, inter, gated=True) -> List[Module]:
    ups = ("gate_proj", "up_proj") if gated else ("up_proj",)
    return [_linear(prefix, component, layer, p, hidden, inter) for p in ups] + \
        [_linear(prefix, component, layer, "down_proj", inter, hidden)]


def _expert_names(prefix: str, gated: bool = True) -> Tuple[str, ...]:
    return tuple(f"{prefix}.experts.0.{p}" for p in
                 (("gate_proj", "up_proj", "down_proj") if gated else ("up_proj", "down_proj")))


def _gqa(prefix, layer, cfg: _Config, hidden) -> List[Module]:
    heads = cfg.int("num_attention_heads")
    kv = cfg.int("num_key_value_heads", heads)
    hd = cfg.int("head_dim", hidden // heads)
    return [_linear(prefix, "attention", layer, "q_proj", hidden, heads * hd),
            _linear(prefix, "attention", layer, "k_proj", hidden, kv * hd),
            _linear(prefix, "attention", layer, "v_proj", hidden, kv * hd),
            _linear(prefix, "attention", layer, "o_proj", heads * hd, hidden)]


def _lm_head(cfg: _Config, hidden: int) -> Module:
    return _linear("", "LM head", None, "lm_head", hidden, cfg.int("vocab_size"))


def _llama(cfg: _Config) -> Tuple[int, List[str], List[Module], List[str]]:
    """Llama, Mistral, Qwen2/Qwen3 dense: every layer is attention + a gated MLP."""
    n, h = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    inter = cfg.int("intermediate_size")
    mods: List[Module] = []
    for i in range(n):
        mods += _gqa(f"model.layers.{i}.self_attn", i, cfg, h)
        mods += _mlp(f"model.layers.{i}.mlp", "dense MLP", i, h, inter)
    return n, ["dense"] * n, mods + [_lm_head(cfg, h)], []


def _deepseek(cfg: _Config):
    """DeepSeek-V2/V3/R1: the first `first_k_dense_replace` layers dense, then MoE every
    `moe_layer_freq` layers, with `n_shared_experts` shared experts and MLA attention."""
    n, h = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    experts = cfg.int("n_routed_experts")
    top_k = cfg.int("num_experts_per_tok")
    moe_i, dense_i = cfg.int("moe_intermediate_size"), cfg.int("intermediate_size")
    first_dense = cfg.int("first_k_dense_replace", 0, minimum=0)
    freq = cfg.int("moe_layer_freq", 1)
    shared = cfg.int("n_shared_experts", 0, minimum=0)
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    limit = cfg.number("swiglu_limit")
    heads = cfg.int("num_attention_heads")
    q_lora = cfg.int("q_lora_rank", None)
    kv_lora, rope = cfg.int("kv_lora_rank"), cfg.int("qk_rope_head_dim")
    nope, v = cfg.int("qk_nope_head_dim"), cfg.int("v_head_dim")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        if q_lora:
            mods += [_linear(a, "attention", i, "q_a_proj", h, q_lora),
                     _linear(a, "attention", i, "q_b_proj", q_lora, heads * (nope + rope))]
        else:
            mods.append(_linear(a, "attention", i, "q_proj", h, heads * (nope + rope)))
        mods += [_linear(a, "attention", i, "kv_a_proj_with_mqa", h, kv_lora + rope),
                 _linear(a, "attention", i, "kv_b_proj", kv_lora, heads * (nope + v)),
                 _linear(a, "attention", i, "o_proj", heads * v, h)]
        if i >= first_dense and i % freq == 0:
            types.append("MoE")
            mods.append(_moe(f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True, limit,
                             _expert_names(f"{p}.mlp")))
            if shared:
                mods += _mlp(f"{p}.mlp.shared_experts", "shared experts", i, h, moe_i * shared)
        else:
            types.append("dense")
            mods += _mlp(f"{p}.mlp", "dense MLP", i, h, dense_i)
    notes = [f"swiglu_limit {limit}: a model-level SwiGLU clamp on the routed experts"] \
        if limit else []
    return n, types, mods + [_lm_head(cfg, h)], notes


def _qwen3_moe(cfg: _Config):
    """Qwen3-MoE: MoE every `decoder_sparse_step` layers except `mlp_only_layers`; no shared
    experts."""
    n, h = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    experts, top_k = cfg.int("num_experts"), cfg.int("num_experts_per_tok")
    moe_i, dense_i = cfg.int("moe_intermediate_size"), cfg.int("intermediate_size")
    step = cfg.int("decoder_sparse_step", 1)
    only_mlp = set(cfg.ints("mlp_only_layers"))
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _gqa(f"{p}.self_attn", i, cfg, h)
        if i not in only_mlp and (i + 1) % step == 0:
            types.append("MoE")
            mods.append(_moe(f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True,
                             match=_expert_names(f"{p}.mlp")))
        else:
            types.append("dense")
            mods += _mlp(f"{p}.mlp", "dense MLP", i, h, dense_i)
    return n, types, mods + [_lm_head(cfg, h)], []


_NEMOTRON_BLOCKS = {"M": "Mamba", "E": "MoE", "*": "attention", "-": "dense"}


def _nemotron_h(cfg: _Config):
    """Nemotron-H: `hybrid_override_pattern` gives each layer's block (M Mamba-2, E MoE,
    * attention, - MLP); MLPs and experts are non-gated with `mlp_hidden_act` (relu2)."""
    n, h = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    pattern = cfg.str("hybrid_override_pattern")
    if len(pattern) != n or set(pattern) - set(_NEMOTRON_BLOCKS):
        raise bad_input("hybrid_override_pattern", pattern, f"must have one of "
                        f"{''.join(_NEMOTRON_BLOCKS)} per layer ({n} layers)",
                        where=str(cfg.path))
    act = _activation(cfg, "mlp_hidden_act", _NON_GATED_ACTS, "relu2")
    types, mods = [], []
    for i, block in enumerate(pattern):
        p = f"backbone.layers.{i}.mixer"
        types.append(_NEMOTRON_BLOCKS[block])
        if block == "E":
            moe_i = cfg.int("moe_intermediate_size")
            mods.append(_moe(f"{p}.experts", i, h, moe_i, cfg.int("n_routed_experts"),
                             cfg.int("num_experts_per_tok"), act, False,
                             match=_expert_names(p, gated=False)))
            if cfg.int("n_shared_experts", 1, minimum=0):
                mods += _mlp(f"{p}.shared_experts", "shared experts", i, h,
                             cfg.int("moe_shared_expert_intermediate_size"), gated=False)
        elif block == "-":
            mods += _mlp(p, "dense MLP", i, h, cfg.int("intermediate_size"), gated=False)
        elif block == "*":
            mods += _gqa(p, i, cfg, h)
        else:
            heads, hd = cfg.int("mamba_num_heads"), cfg.int("mamba_head_dim")
            groups, state = cfg.int("n_groups"), cfg.int("ssm_state_size")
            inner = heads * hd
            mods += [_linear(p, "Mamba", i, "in_proj", h, 2 * inner + 2 * groups * state + heads),
                     _linear(p, "Mamba", i, "out_proj", inner, h)]
    return n, types, mods + [_lm_head(cfg, h)], []


def _gpt_oss(cfg: _Config):
    """gpt-oss: every layer MoE with swigluoai experts (vLLM `gpt_oss.py` builds them with
    activation="swigluoai"; the config's `swiglu_limit` is that activation's clamp)."""
    n, h = cfg.int("num_hidden_layers"), cfg.int("hidden_size")
    experts = cfg.int("num_local_experts")
    top_k = cfg.int("num_experts_per_tok", None) or cfg.int("experts_per_token")
    inter = cfg.int("intermediate_size")
    limit = cfg.number("swiglu_limit")
    mods: List[Module] = []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _gqa(f"{p}.self_attn", i, cfg, h)
        mods.append(_moe(f"{p}.mlp.experts", i, h, inter, experts, top_k, "swigluoai", True,
                         match=(f"{p}.mlp.experts.gate_up_proj", f"{p}.mlp.experts.down_proj"),
                         linear_class=False))
    notes = [f"swiglu_limit {limit:g} is the clamp inside swigluoai (vLLM gpt_oss.py passes "
             "activation='swigluoai' and no separate swiglu_limit)"] if limit else []
    return n, ["MoE"] * n, mods + [_lm_head(cfg, h)], notes


# architectures entry -> (model_type, reader). Sources of the keys: the model cards' config.json
# files (deepseek-ai/DeepSeek-V3, Qwen/Qwen3-30B-A3B, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16,
# openai/gpt-oss-120b, meta-llama/Llama-3.1-8B-Instruct on Hugging Face).
ARCHITECTURES: Dict[str, Tuple[str, Callable]] = {
    "DeepseekV3ForCausalLM": ("deepseek_v3", _deepseek),
    "DeepseekV2ForCausalLM": ("deepseek_v2", _deepseek),
    "Qwen3MoeForCausalLM": ("qwen3_moe", _qwen3_moe),
    "NemotronHForCausalLM": ("nemotron_h", _nemotron_h),
    "GptOssForCausalLM": ("gpt_oss", _gpt_oss),
    "LlamaForCausalLM": ("llama", _llama),
    "MistralForCausalLM": ("mistral", _llama),
    "Qwen2ForCausalLM": ("qwen2", _llama),
    "Qwen3ForCausalLM": ("qwen3", _llama),
}
_BY_MODEL_TYPE = {mt: arch for arch, (mt, _) in ARCHITECTURES.items()}
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def read_json(path: Path) -> Dict[str, Any]:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise SelectorError(f"{path}: too large for a config file ({path.stat().st_size} "
                                f"bytes; at most {MAX_JSON_BYTES})", where=str(path))
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SelectorError(f"{path}: no such file", where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectorError(f"{path}: cannot read: {exc}", where=str(path)) from None
    except ValueError as exc:
        raise SelectorError(f"{path}: malformed JSON: {exc}", where=str(path)) from None
    if not isinstance(data, dict):
        raise SelectorError(f"{path}: must hold a JSON object, not {type(data).__name__}",
                            where=str(path))
    return data


def read_architecture(config: Mapping[str, Any], path: Path) -> Architecture:
    archs = config.get("architectures")
    name = None
    if isinstance(archs, list):
        name = next((a for a in archs if isinstance(a, str) and a in ARCHITECTURES), None)
    model_type = config.get("model_type")
    if archs is None and isinstance(model_type, str) and model_type in _BY_MODEL_TYPE:
        name = _BY_MODEL_TYPE[model_type]
    if name is None:
        given = archs if archs is not None else config.get("model_type")
        key = "architectures" if archs is not None else "model_type"
        if given is None:
            raise bad_input("architectures", None, "is missing (and so is model_type): "
                            "config.json must name the model's architecture", where=str(path))
        accepted = ARCHITECTURES if key == "architectures" else _BY_MODEL_TYPE
        raise bad_value(key, given, accepted, what="architecture", where=str(path))
    model_type, reader = ARCHITECTURES[name]
    n, types, mods, notes = reader(_Config(config, path, name))
    return Architecture(name, str(config.get("model_type") or model_type), n, tuple(types),
                        tuple(mods), tuple(notes))


def checkpoint_dtype(config: Mapping[str, Any], path: Path) -> Optional[str]:
    key = "torch_dtype" if "torch_dtype" in config else "dtype"
    v = config.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or v not in _DTYPES:
        raise bad_value(key, v, _DTYPES, where=str(path))
    return _DTYPES[v]


# ---------------------------------------------------------------------------------------------
# The quantization description: which scheme each module has

@dataclass(frozen=True)
class Quantization:
    format: str  # "ModelOpt" | "compressed-tensors"
    source: str  # the file and key it came from
    algo: str  # NVFP4 | W4A16_NVFP4 | MIXED_PRECISION | compressed-tensors format
    scheme_of: Callable[[Tuple[str, ...], bool], Tuple[Optional[str], str]] = field(compare=False)
    excluded: Tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.format} {self.algo} ({self.source})"


_MODELOPT_ALGOS = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4_w4a16"}
_MODELOPT_OTHER = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "MXFP8")


def _modelopt_excluded(names: Sequence[str], patterns: Sequence[str]) -> Optional[str]:
    for n in names:
        for p in patterns:
            if n == p or n.startswith(p + ".") or fnmatch.fnmatchcase(n, p):
                return p
    return None


def _modelopt(q: Mapping[str, Any], source: str, where: str, exclude_key: str) -> Quantization:
    algo = str(q.get("quant_algo") or "").upper()
    excluded = q.get(exclude_key) or []
    if not isinstance(excluded, list) or not all(isinstance(x, str) for x in excluded):
        raise bad_input(exclude_key, excluded, "must be a list of module name patterns",
                        where=where)
    accepted = sorted([*_MODELOPT_ALGOS, "MIXED_PRECISION"])
    if algo == "MIXED_PRECISION":
        layers = q.get("quantized_layers")
        if not isinstance(layers, dict) or not layers:
            raise bad_input("quantized_layers", layers, "must map module names to "
                            "{quant_algo: ...} for MIXED_PRECISION", where=where)
        recipes = {}
        for prefix, recipe in layers.items():
            a = str((recipe or {}).get("quant_algo") or "").upper() \
                if isinstance(recipe, dict) else ""
            if a not in _MODELOPT_ALGOS and a not in _MODELOPT_OTHER:
                raise bad_value(f"quantized_layers.{prefix}.quant_algo", a or None,
                                [*_MODELOPT_ALGOS, *_MODELOPT_OTHER], where=where)
            recipes[prefix] = a

        def scheme_of(names, linear_class):
            hit = _modelopt_excluded(names, excluded)
            if hit:
                return None, f"excluded by {exclude_key} {hit!r}"
            for n in names:
                for prefix, a in recipes.items():
                    if n == prefix or n.startswith(prefix + "."):
                        return _MODELOPT_ALGOS.get(a), f"quantized_layers: {a}"
            return None, "not in quantized_layers (left unquantized)"
        return Quantization("ModelOpt", source, algo, scheme_of, tuple(excluded))
    if algo not in _MODELOPT_ALGOS:
        raise bad_value("quant_algo", q.get("quant_algo"), accepted, where=where,
                        hint="only NVFP4 checkpoints are explained")
    scheme = _MODELOPT_ALGOS[algo]

    def scheme_of(names, linear_class):
        hit = _modelopt_excluded(names, excluded)
        return (None, f"excluded by {exclude_key} {hit!r}") if hit else (scheme, algo)
    return Quantization("ModelOpt", source, algo, scheme_of, tuple(excluded))


def _ct_is_nvfp4(args: Any) -> bool:
    """vLLM's `_is_nvfp4_format`: 4-bit float, tensor_group strategy, group size 16, symmetric."""
    return isinstance(args, dict) and args.get("num_bits") == 4 and \
        args.get("type") == "float" and args.get("strategy") == "tensor_group" and \
        args.get("group_size") == 16 and args.get("symmetric", True) is True


def _ct_match(name: str, target: str, linear_class: bool) -> bool:
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return name == target or (target == "Linear" and linear_class)


def _compressed_tensors(q: Mapping[str, Any], source: str, where: str) -> Quantization:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise bad_input("quantization_config.config_groups", groups, "must map group names to "
                        "{targets, weights, input_activations}", where=where)
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(x, str) for x in ignore):
        raise bad_input("quantization_config.ignore", ignore, "must be a list of module names "
                        "or 're:' patterns", where=where)
    parsed = []
    for gname, g in groups.items():
        key = f"quantization_config.config_groups.{gname}"
        if not isinstance(g, dict) or not isinstance(g.get("targets"), list) or \
                not isinstance(g.get("weights"), dict):
            raise bad_input(key, g, "must hold targets (a list) and weights (a mapping)",
                            where=where)
        w, a = g["weights"], g.get("input_activations")
        if _ct_is_nvfp4(w):
            if a is None:
                scheme = "nvfp4_w4a16"
            elif _ct_is_nvfp4(a):
                scheme = "nvfp4"
            else:
                raise bad_input(f"{key}.input_activations", a, "is neither NVFP4 nor null: "
                                "NVFP4 weights need NVFP4 activations (W4A4) or none (W4A16)",
                                where=where)
        else:
            scheme = f"{w.get('type', '?')}{w.get('num_bits', '?')}"
            if a is None:
                scheme += " weight-only"
        parsed.append((gname, [str(t) for t in g["targets"]], scheme))
    if not any(s in ("nvfp4", "nvfp4_w4a16") for _, _, s in parsed):
        raise bad_input("quantization_config.config_groups", sorted(groups), "has no NVFP4 "
                        "group (weights: num_bits 4, type float, strategy tensor_group, "
                        "group_size 16)", where=where)

    def scheme_of(names, linear_class):
        for n in names:
            for t in ignore:
                if _ct_match(n, t, False):
                    return None, f"ignored by {t!r}"
        for n in names:
            for gname, targets, scheme in parsed:
                if any(_ct_match(n, t, linear_class) for t in targets):
                    if scheme in ("nvfp4", "nvfp4_w4a16"):
                        return scheme, f"config group {gname}"
                    return None, f"config group {gname} ({scheme})"
        return None, "matched by no config group (left unquantized)"
    fmt = str(q.get("format") or "compressed-tensors")
    return Quantization("compressed-tensors", source, fmt, scheme_of, tuple(ignore))


def read_quantization(model_dir: Path, config: Mapping[str, Any]) -> Quantization:
    """ModelOpt's hf_quant_config.json first (as vLLM reads it), else quantization_config."""
    hf = model_dir / "hf_quant_config.json"
    if hf.is_file():
        data = read_json(hf)
        q = data.get("quantization")
        if not isinstance(q, dict):
            raise bad_input("quantization", q, "is missing: hf_quant_config.json holds "
                            "{\"quantization\": {\"quant_algo\": ...}}", where=str(hf))
        return _modelopt(q, "hf_quant_config.json", str(hf), "exclude_modules")
    where = str(model_dir / "config.json")
    q = config.get("quantization_config")
    if q is None:
        raise bad_input("quantization_config", None, "is missing, and there is no "
                        "hf_quant_config.json: this is not a quantized checkpoint (NVFP4 "
                        "checkpoints come from ModelOpt or compressed-tensors)", where=where)
    if not isinstance(q, dict):
        raise bad_input("quantization_config", q, "must be a mapping", where=where)
    method = q.get("quant_method")
    if method == "modelopt":
        return _modelopt(q, "config.json quantization_config", where, "ignore")
    if method == "compressed-tensors":
        return _compressed_tensors(q, "config.json quantization_config", where)
    raise bad_value("quantization_config.quant_method", method, ("modelopt",
                    "compressed-tensors"), where=where,
                    hint="only NVFP4 checkpoints (ModelOpt or compressed-tensors) are explained")


# ---------------------------------------------------------------------------------------------
# The plan: each distinct layer kind and its decision

@dataclass(frozen=True)
class Shape:
    """One distinct set of layer fields within a kind, and the decision for it."""
    projections: Tuple[str, ...]
    fields: Dict[str, Any]
    modules: int
    decision: Any  # selector.Decision


@dataclass(frozen=True)
class Kind:
    component: str
    quant: Optional[str]  # nvfp4 | nvfp4_w4a16 | None (not NVFP4)
    why: str  # the rule of the quantization config that decided the scheme
    layers: Tuple[int, ...]
    modules: int
    shapes: Tuple[Shape, ...]

    @property
    def op(self) -> str:
        return self.shapes[0].fields["op"] if self.shapes else "linear"

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.component, "op": self.op, "quant": self.quant, "why": self.why,
                "layers": list(self.layers), "modules": self.modules,
                "shapes": [{"projections": list(s.projections), "modules": s.modules,
                            "fields": dict(s.fields),
                            "decision": s.decision.to_dict() if s.decision else None}
                           for s in self.shapes]}


@dataclass(frozen=True)
class Plan:
    model_dir: str
    architecture: Architecture
    quantization: Quantization
    kinds: Tuple[Kind, ...]
    requested: Dict[str, str]  # op -> policy (auto or a backend)

    @property
    def ok(self) -> bool:
        return all(s.decision.selected for k in self.kinds if k.quant for s in k.shapes)

    def decisions(self) -> List[Any]:
        return [s.decision for k in self.kinds if k.quant for s in k.shapes]

    def summary(self) -> str:
        """'61 layers: 58 MoE -> flashinfer_cutlass, 3 dense; 189 linear -> ...; ...'."""
        arch = self.architecture
        counts = Counter(arch.layer_types)
        moe = [k for k in self.kinds if k.op == "moe"]
        moe_sel = _selected_counts([(s, len(k.layers)) for k in moe if k.quant
                                    for s in k.shapes])
        parts = []
        for t in ("MoE", "dense", "Mamba", "attention"):
            if not counts[t]:
                continue
            text = f"{counts[t]} {t}"
            if t == "MoE" and moe_sel:
                text += " -> " + ", ".join(f"{sel}" if n == counts[t] else f"{n} {sel}"
                                           for sel, n in moe_sel.items())
            parts.append(text)
        head = f"{arch.num_layers} layers: {', '.join(parts)}"
        lin = _selected_counts([(s, s.modules) for k in self.kinds if k.quant and
                                k.op == "linear" for s in k.shapes])
        total = sum(lin.values())
        if total:
            head += f"; {total} linear -> " + ", ".join(
                sel if n == total else f"{n} {sel}" for sel, n in lin.items())
        off = Counter()
        for k in self.kinds:
            if not k.quant:
                off[k.component] += k.modules
        if off:
            head += "; not NVFP4: " + ", ".join(f"{n} {c}" for c, n in off.items())
        extra = []
        for op in ("moe", "linear"):
            opt = OrderedDict()
            for d in self.decisions():
                if d.layer["op"] == op:
                    for c in d.candidates:
                        if c.status == "opt_in":
                            opt[c.backend] = True
            extra += [f"{b} available with policy.{op}_backend={b}" for b in opt]
        return head + (f"; {'; '.join(extra)}" if extra else "")

    def to_dict(self) -> Dict[str, Any]:
        arch, q = self.architecture, self.quantization
        ds = self.decisions()
        return {"checkpoint": {"path": self.model_dir, "architecture": arch.name,
                               "model_type": arch.model_type, "num_layers": arch.num_layers,
                               "layer_types": dict(Counter(arch.layer_types)),
                               "quantization": {"format": q.format, "algo": q.algo,
                                                "source": q.source,
                                                "excluded": list(q.excluded)},
                               "notes": list(arch.notes)},
                "platform": ds[0].to_dict()["platform"] if ds else None,
                "kinds": [k.to_dict() for k in self.kinds],
                "ok": self.ok, "summary": self.summary()}

    def __str__(self) -> str:
        return render_plan(self)


def _join_whys(whys: List[str]) -> str:
    """"excluded by exclude_modules 'a', 'b' and 59 more" from the reasons of each module."""
    head = re.match(r"^(.*?)'", whys[0])
    if head and all(w.startswith(head.group(1) + "'") for w in whys):
        items = [w[len(head.group(1)):] for w in whys]
        prefix = head.group(1)
    else:
        items, prefix = whys, ""
    return prefix + ", ".join(items[:2]) + (f" and {len(items) - 2} more" if len(items) > 2
                                            else "")


def _selected_counts(items) -> "OrderedDict[str, int]":
    out: "OrderedDict[str, int]" = OrderedDict()
    for s, n in items:
        sel = s.decision.selected or "none"
        out[sel] = out.get(sel, 0) + n
    return out


def plan(selector, model_dir) -> Plan:
    """Every distinct NVFP4 layer kind of a checkpoint, decided by `selector` (a Selector).

    Layer fields the checkpoint does not fix (ep_size, tp_size, num_tokens, all2all) come from
    the selector's config and overrides.
    """
    root = Path(model_dir).expanduser()
    if not root.is_dir():
        raise bad_input("--model", str(model_dir), "is not a directory (a checkpoint directory "
                        "holds config.json)")
    config_path = root / "config.json"
    if not config_path.is_file():
        raise bad_input("--model", str(model_dir), "has no config.json")
    config = read_json(config_path)
    arch = read_architecture(config, config_path)
    quant = read_quantization(root, config)
    dtype = checkpoint_dtype(config, config_path)
    # group modules by (component, scheme): layers, module counts, distinct field sets
    groups: "OrderedDict[Tuple[str, Optional[str], str], Dict[str, Any]]" = OrderedDict()
    for m in arch.modules:
        scheme, why = quant.scheme_of(m.names, m.linear_class)
        g = groups.setdefault((m.component, scheme), {"layers": [], "modules": 0, "why": {},
                                                      "shapes": OrderedDict()})
        g["why"][why] = True
        if m.layer is not None and m.layer not in g["layers"]:
            g["layers"].append(m.layer)
        g["modules"] += 1
        shape = g["shapes"].setdefault(m.fields, {"projections": [], "modules": 0})
        if m.projection not in shape["projections"]:
            shape["projections"].append(m.projection)
        shape["modules"] += 1
    kinds = []
    for (component, scheme), g in groups.items():
        shapes = []
        for fields, s in g["shapes"].items():
            f = dict(fields)
            if dtype:
                f["dtype"] = dtype
            d = selector.select(quant=scheme, **f) if scheme else None
            shapes.append(Shape(tuple(s["projections"]), {"quant": scheme, **f}, s["modules"],
                                d))
        why = _join_whys(list(g["why"]))
        kinds.append(Kind(component, scheme, why, tuple(g["layers"]), g["modules"],
                          tuple(shapes)))
    if not any(k.quant for k in kinds):
        raise SelectorError(f"{root}: no module of this {arch.name} checkpoint is NVFP4 under "
                            f"{quant.describe()}; every module is excluded or another scheme",
                            where=str(root))
    requested = {}
    for d in (s.decision for k in kinds for s in k.shapes if s.decision):
        requested[d.layer["op"]] = d.requested
    return Plan(str(root), arch, quant, tuple(kinds), requested)


# ---------------------------------------------------------------------------------------------
# Text

def _fields_text(f: Mapping[str, Any]) -> str:
    if f["op"] == "moe":
        gate = "gated" if f["act_and_mul"] else "non-gated"
        text = (f"{f['activation']} {gate}, hidden_size {f['hidden_size']}, intermediate_size "
                f"{f['intermediate_size']}, {f['num_experts']} experts, top_k {f['top_k']}")
        if f.get("swiglu_limit") is not None:
            text += f", swiglu_limit {f['swiglu_limit']:g}"
        return text
    return f"K {f['hidden_size']}, N {f['intermediate_size']}"


def _layers_text(layers: Sequence[int]) -> str:
    if not layers:
        return ""
    runs, start, prev = [], layers[0], layers[0]
    for i in list(layers[1:]) + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    text = ",".join(runs)
    return text if len(text) <= 40 else text[:37] + "..."


def _verdict(d) -> List[str]:
    """A decision in three short lines: selected, what else could run, what could not and why."""
    usable = [c.backend for c in d.candidates if c.status == "eligible"]
    opt = [c.backend for c in d.candidates if c.status == "opt_in"]
    rejected = [f"{c.backend} ({'; '.join(dict.fromkeys(r.need for r in c.reasons if r.severity == 'error'))})"
                for c in d.candidates if c.status == "rejected"]
    na = [c.backend for c in d.candidates if c.status == "not_applicable"]
    head = f"selected: {d.selected or 'none'}"
    if d.requested != "auto":
        head += f" (requested {d.requested})"
    lines = [head]
    if usable or opt:
        lines.append("usable: " + ", ".join(usable + [f"{b} (opt-in)" for b in opt]))
    if rejected:
        lines.append("rejected: " + ", ".join(rejected))
    if na:
        lines.append("does not implement this scheme: " + ", ".join(na))
    return lines


def render_plan(p: Plan) -> str:
    import textwrap
    arch, q = p.architecture, p.quantization
    ds = p.decisions()
    lines = [f"checkpoint: {p.model_dir}",
             f"model: {arch.name} ({arch.model_type}), {arch.num_layers} layers; "
             f"quantization: {q.describe()}"]
    if ds:
        first = str(ds[0]).splitlines()
        lines.append(next(ln for ln in first if ln.startswith("platform: ")))
    for n in arch.notes:
        lines.append(f"note: {n}")
    lines.append("")
    for k in p.kinds:
        where = _layers_text(k.layers)
        count = (f"{len(k.layers)} layer{'s' if len(k.layers) > 1 else ''} ({where})"
                 if k.layers else "1 module")
        mods = f", {k.modules} modules" if k.op == "linear" and k.layers else ""
        if not k.quant:
            lines.append(f"{k.component}: {count}{mods}: not NVFP4, {k.why}")
            continue
        lines.append(f"{k.component}: {count}{mods}: {k.op} {k.quant}")
        # shapes with the same verdict are shown together
        by_verdict: "OrderedDict[Tuple[str, ...], List[Shape]]" = OrderedDict()
        for s in k.shapes:
            by_verdict.setdefault(tuple(_verdict(s.decision)), []).append(s)
        for verdict, shapes in by_verdict.items():
            shown = "; ".join(f"{'/'.join(s.projections)} {_fields_text(s.fields)}"
                              if s.fields["op"] == "linear" else _fields_text(s.fields)
                              for s in shapes)
            lines.extend(textwrap.wrap(shown, width=100, initial_indent="    ",
                                       subsequent_indent="      "))
            for v in verdict:
                lines.extend(textwrap.wrap(v, width=100, initial_indent="      ",
                                           subsequent_indent="        ",
                                           break_on_hyphens=False))
    lines.append("")
    lines.extend(textwrap.wrap(f"summary: {p.summary()}", width=100, subsequent_indent="  ",
                               break_on_hyphens=False))
    if not p.ok:
        lines.append("some NVFP4 layers have no usable backend: --format json lists every "
                     "reason")
    return "\n".join(lines)
