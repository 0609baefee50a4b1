"""A checkpoint's architecture from its config.json (never the weights): the decoder layers,
each projection's checkpoint name and shape, and the layer fields of its routed experts.

The architecture's own keys give the fields (hidden and intermediate sizes, experts, top-k,
`hidden_act`/`mlp_hidden_act`, `swiglu_limit`). Module names and shapes are the checkpoint's own
projections (an engine may fuse gate/up or q/k/v, which changes N but never K).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

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

    def integer(self, key: str, default: Any = ..., minimum: int = 1) -> Any:
        v = self.data.get(key)
        if v is None:
            if default is ...:
                raise bad_input(key, None, f"is missing; {self.arch} needs it",
                                where=str(self.path))
            return default
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise bad_input(key, v, f"must be an integer >= {minimum}", where=str(self.path))
        return v

    def integers(self, key: str) -> Tuple[int, ...]:
        v = self.data.get(key) or []
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                               for x in v):
            raise bad_input(key, v, "must be a list of layer indices", where=str(self.path))
        return tuple(v)

    def text(self, key: str, default: Any = ...) -> Any:
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
    act = cfg.text(key, default)
    if act not in table:
        raise bad_value(key, act, table, where=str(cfg.path),
                        hint=f"{cfg.arch} layers with this activation are not understood")
    return table[act]


def _fields(**kw: Any) -> Tuple[Tuple[str, Any], ...]:
    return tuple(kw.items())


def _moe(name: str, layer: int, hidden: int, inter: int, experts: int, top_k: int, act: str,
         gated: bool, limit: Optional[float] = None, match: Tuple[str, ...] = (),
         linear_class: bool = True) -> Module:
    return Module(name, "routed experts", "experts", layer,
                  _fields(op="moe", activation=act, act_and_mul=gated, hidden_size=hidden,
                          intermediate_size=inter, num_experts=experts, top_k=top_k,
                          swiglu_limit=limit), match, linear_class)


def _linear(prefix: str, component: str, layer: Optional[int], proj: str, k: int, n: int
            ) -> Module:
    return Module(f"{prefix}.{proj}" if prefix else proj, component, proj, layer,
                  _fields(op="linear", activation="silu", act_and_mul=False, hidden_size=k,
                          intermediate_size=n, num_experts=None, top_k=None, swiglu_limit=None))


def _mlp(prefix: str, component: str, layer: int, hidden: int, inter: int, gated: bool = True
         ) -> List[Module]:
    ups = ("gate_proj", "up_proj") if gated else ("up_proj",)
    return [_linear(prefix, component, layer, p, hidden, inter) for p in ups] + \
        [_linear(prefix, component, layer, "down_proj", inter, hidden)]


def _expert_names(prefix: str, gated: bool = True) -> Tuple[str, ...]:
    return tuple(f"{prefix}.experts.0.{p}" for p in
                 (("gate_proj", "up_proj", "down_proj") if gated else ("up_proj", "down_proj")))


def _gqa(prefix: str, layer: int, cfg: _Config, hidden: int) -> List[Module]:
    heads = cfg.integer("num_attention_heads")
    kv = cfg.integer("num_key_value_heads", heads)
    hd = cfg.integer("head_dim", hidden // heads)
    return [_linear(prefix, "attention", layer, "q_proj", hidden, heads * hd),
            _linear(prefix, "attention", layer, "k_proj", hidden, kv * hd),
            _linear(prefix, "attention", layer, "v_proj", hidden, kv * hd),
            _linear(prefix, "attention", layer, "o_proj", heads * hd, hidden)]


def _lm_head(cfg: _Config, hidden: int) -> Module:
    return _linear("", "LM head", None, "lm_head", hidden, cfg.integer("vocab_size"))


Read = Tuple[int, List[str], List[Module], List[str]]  # layers, layer types, modules, notes


def _llama(cfg: _Config) -> Read:
    """Llama, Mistral, Qwen2/Qwen3 dense: every layer is attention + a gated MLP."""
    n, h = cfg.integer("num_hidden_layers"), cfg.integer("hidden_size")
    inter = cfg.integer("intermediate_size")
    mods: List[Module] = []
    for i in range(n):
        mods += _gqa(f"model.layers.{i}.self_attn", i, cfg, h)
        mods += _mlp(f"model.layers.{i}.mlp", "dense MLP", i, h, inter)
    return n, ["dense"] * n, mods + [_lm_head(cfg, h)], []


def _deepseek(cfg: _Config) -> Read:
    """DeepSeek-V2/V3/R1: the first `first_k_dense_replace` layers dense, then MoE every
    `moe_layer_freq` layers, with `n_shared_experts` shared experts and MLA attention."""
    n, h = cfg.integer("num_hidden_layers"), cfg.integer("hidden_size")
    experts = cfg.integer("n_routed_experts")
    top_k = cfg.integer("num_experts_per_tok")
    moe_i, dense_i = cfg.integer("moe_intermediate_size"), cfg.integer("intermediate_size")
    first_dense = cfg.integer("first_k_dense_replace", 0, minimum=0)
    freq = cfg.integer("moe_layer_freq", 1)
    shared = cfg.integer("n_shared_experts", 0, minimum=0)
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    limit = cfg.number("swiglu_limit")
    heads = cfg.integer("num_attention_heads")
    q_lora = cfg.integer("q_lora_rank", None)
    kv_lora, rope = cfg.integer("kv_lora_rank"), cfg.integer("qk_rope_head_dim")
    nope, v = cfg.integer("qk_nope_head_dim"), cfg.integer("v_head_dim")
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


def _qwen3_moe(cfg: _Config) -> Read:
    """Qwen3-MoE: MoE every `decoder_sparse_step` layers except `mlp_only_layers`; no shared
    experts."""
    n, h = cfg.integer("num_hidden_layers"), cfg.integer("hidden_size")
    experts, top_k = cfg.integer("num_experts"), cfg.integer("num_experts_per_tok")
    moe_i, dense_i = cfg.integer("moe_intermediate_size"), cfg.integer("intermediate_size")
    step = cfg.integer("decoder_sparse_step", 1)
    only_mlp = set(cfg.integers("mlp_only_layers"))
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


def _nemotron_h(cfg: _Config) -> Read:
    """Nemotron-H: `hybrid_override_pattern` gives each layer's block (M Mamba-2, E MoE,
    * attention, - MLP); MLPs and experts are non-gated with `mlp_hidden_act` (relu2)."""
    n, h = cfg.integer("num_hidden_layers"), cfg.integer("hidden_size")
    pattern = cfg.text("hybrid_override_pattern")
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
            moe_i = cfg.integer("moe_intermediate_size")
            mods.append(_moe(f"{p}.experts", i, h, moe_i, cfg.integer("n_routed_experts"),
                             cfg.integer("num_experts_per_tok"), act, False,
                             match=_expert_names(p, gated=False)))
            if cfg.integer("n_shared_experts", 1, minimum=0):
                mods += _mlp(f"{p}.shared_experts", "shared experts", i, h,
                             cfg.integer("moe_shared_expert_intermediate_size"), gated=False)
        elif block == "-":
            mods += _mlp(p, "dense MLP", i, h, cfg.integer("intermediate_size"), gated=False)
        elif block == "*":
            mods += _gqa(p, i, cfg, h)
        else:
            heads, hd = cfg.integer("mamba_num_heads"), cfg.integer("mamba_head_dim")
            groups, state = cfg.integer("n_groups"), cfg.integer("ssm_state_size")
            inner = heads * hd
            mods += [_linear(p, "Mamba", i, "in_proj", h, 2 * inner + 2 * groups * state + heads),
                     _linear(p, "Mamba", i, "out_proj", inner, h)]
    return n, types, mods + [_lm_head(cfg, h)], []


def _gpt_oss(cfg: _Config) -> Read:
    """gpt-oss: every layer MoE with swigluoai experts (vLLM `gpt_oss.py` builds them with
    activation="swigluoai"; the config's `swiglu_limit` is that activation's clamp)."""
    n, h = cfg.integer("num_hidden_layers"), cfg.integer("hidden_size")
    experts = cfg.integer("num_local_experts")
    top_k = cfg.integer("num_experts_per_tok", None) or cfg.integer("experts_per_token")
    inter = cfg.integer("intermediate_size")
    limit = cfg.number("swiglu_limit")
    mods: List[Module] = []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _gqa(f"{p}.self_attn", i, cfg, h)
        mods.append(_moe(f"{p}.mlp.experts", i, h, inter, experts, top_k, "swigluoai", True,
                         match=(f"{p}.mlp.experts.gate_up_proj", f"{p}.mlp.experts.down_proj"),
                         linear_class=False))
    notes = [(f"swiglu_limit {limit:g} is the clamp inside swigluoai (vLLM gpt_oss.py passes "
              "activation='swigluoai' and no separate swiglu_limit)")] if limit else []
    return n, ["MoE"] * n, mods + [_lm_head(cfg, h)], notes


# architectures entry -> (model_type, reader). Sources of the keys: the model cards' config.json
# files (deepseek-ai/DeepSeek-V3, Qwen/Qwen3-30B-A3B, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16,
# openai/gpt-oss-120b, meta-llama/Llama-3.1-8B-Instruct on Hugging Face).
ARCHITECTURES: Dict[str, Tuple[str, Callable[[_Config], Read]]] = {
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
