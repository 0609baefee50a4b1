"""A checkpoint's architecture from its config.json (never the weights): the decoder layers and
every module vLLM builds for them, named as vLLM names them, with the layer fields one GPU runs.

Modules are vLLM's (vLLM 0.32.0 model_executor/models/*.py): fused projections (`qkv_proj`,
`gate_up_proj`, DeepSeek's `fused_qkv_a_proj`, Mamba's `in_proj`) under vLLM's prefixes
(Nemotron-H `backbone.` becomes `model.`, gpt-oss `self_attn` becomes `attn`), routed experts as
the one fused `experts` module, and the model's `packed_modules_mapping` and name renames (its
`hf_to_vllm_mapper`), which the quantization config applies to its patterns. Keys a config.json
leaves out take the default of the model's Hugging Face config class (HF_DEFAULTS, transformers
5.19.0), as vLLM sees them. Sizes are per GPU: `tp_size` and `ep_size` split them the way vLLM's
parallel layers do (column-parallel N / tp, row-parallel K / tp, experts / ep).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from selector.checkpoint.files import MAX_JSON_BYTES as MAX_JSON_BYTES
from selector.checkpoint.files import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from selector.checkpoint.files import _depth as _depth
from selector.checkpoint.files import read_json as read_json
from selector.core.errors import bad_input, bad_value

# Plausible sizes: the largest public configs are far below these (DeepSeek-V3: 61 layers,
# hidden 7168, 256 experts, vocab 129280); beyond them a config is refused before any work.
LIMITS = {"layers": 2048, "size": 1 << 20, "experts": 1 << 16, "vocab": 1 << 24,
          "heads": 1 << 14, "parallel": 1 << 16}
_LIMIT_OF = {"num_hidden_layers": "layers", "n_routed_experts": "experts",
             "num_experts": "experts", "num_local_experts": "experts", "vocab_size": "vocab",
             "num_attention_heads": "heads", "num_key_value_heads": "heads",
             "mamba_num_heads": "heads", "n_groups": "heads", "n_shared_experts": "experts",
             "num_experts_per_tok": "experts", "experts_per_token": "experts",
             "first_k_dense_replace": "layers", "moe_layer_freq": "layers",
             "decoder_sparse_step": "layers"}


# vLLM's even split of a parallel layer (ensure_divisibility asserts numerator % denominator)
DIVIDE = "vLLM 0.32.0 vllm/distributed/utils.py (divide, ensure_divisibility)"
HEADS = ("vLLM 0.32.0 vllm/config/model.py (ModelConfig.verify_with_parallel_config: total "
         "number of attention heads must be divisible by tensor parallel size)")


# ---------------------------------------------------------------------------------------------
# What a checkpoint is made of

@dataclass(frozen=True)
class Module:
    """One module vLLM builds (a linear layer, or one layer's routed experts), with the layer
    fields one GPU runs."""
    name: str  # vLLM's prefix, e.g. model.layers.3.mlp.experts, model.layers.0.self_attn.qkv_proj
    component: str  # routed experts | shared experts | dense MLP | attention | Mamba | LM head
    projection: str  # experts | qkv_proj | gate_up_proj | ...
    layer: Optional[int]
    fields: Tuple[Tuple[str, Any], ...]  # layer.* keys (everything but quant)
    cls: str = "RowParallelLinear"  # vLLM's class (compressed-tensors matches class names)
    expert_projs: Tuple[str, ...] = ("gate_proj", "up_proj", "down_proj")  # ckpt_*_proj_name
    problems: Tuple[str, ...] = ()  # what vLLM refuses of this module's per-rank split
    whole: Tuple[int, int] = (0, 0)  # a linear layer's whole-model (K, N)
    parts: Tuple[int, ...] = ()  # its output partitions on one GPU (vLLM output_partition_sizes)


@dataclass(frozen=True)
class Architecture:
    name: str  # the `architectures` entry, e.g. DeepseekV3ForCausalLM
    model_type: str
    num_layers: int
    layer_types: Tuple[str, ...]  # per decoder layer: MoE | dense | Mamba | attention
    modules: Tuple[Module, ...]
    notes: Tuple[str, ...] = ()
    packed: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    maps_names: bool = True  # vLLM applies the model's hf_to_vllm_mapper to the quant config
    rename_substr: Tuple[Tuple[str, str], ...] = ()
    rename_prefix: Tuple[Tuple[str, str], ...] = ()
    rename_suffix: Tuple[Tuple[str, str], ...] = ()
    defaulted: Tuple[str, ...] = ()  # keys config.json left out, filled from HF_DEFAULTS


from selector.checkpoint.hf_defaults import HF_DEFAULTS as HF_DEFAULTS  # noqa: E402

# keys a config class derives when absent: num_key_value_heads = num_attention_heads (Llama,
# Qwen2/3, DeepSeek), head_dim = hidden_size // num_attention_heads (Llama, Qwen2, gpt-oss)


class _Config:
    """config.json with typed look-ups whose errors name the key and the file; a missing key
    takes the architecture's Hugging Face default."""

    def __init__(self, data: Mapping[str, Any], path: Path, arch: str, model_type: str,
                 tp: int = 1, ep: int = 1, moe_tp: Optional[int] = None):
        self.data, self.path, self.arch = data, path, arch
        self.defaults = HF_DEFAULTS.get(model_type, {})
        self.defaulted: List[str] = []
        # dense layers run TP `tp`; the routed experts TP `moe_tp` and EP `ep` (vLLM: with
        # expert parallelism EP = TP x DP and MoE TP 1, without it MoE TP = TP x DP)
        self.tp, self.ep = tp, ep
        self.moe_tp = (1 if ep > 1 else tp) if moe_tp is None else moe_tp
        # vLLM config/parallel.py ParallelConfig.use_sequence_parallel_moe: expert parallelism
        # with TP > 1 and DP > 1 (EP = TP x DP > TP; the default all2all backend,
        # allgather_reducescatter, is one that takes it): the MoE blocks' shared experts are
        # built with disable_tp (deepseek_v2.py DeepseekV2MoE, nemotron_h.py NemotronHMoE)
        self.seq_moe = ep > 1 and tp > 1 and ep > tp
        self.pending: List[str] = []  # problems of the module being built

    def take(self) -> Tuple[str, ...]:
        """The problems found since the last module was built (they are that module's)."""
        out, self.pending = tuple(dict.fromkeys(self.pending)), []
        return out

    def _get(self, key: str) -> Any:
        v = self.data.get(key)
        if key not in self.data and key in self.defaults:  # an explicit null stays None
            if key not in self.defaulted:
                self.defaulted.append(key)
            return self.defaults[key]
        return v

    def integer(self, key: str, default: Any = ..., minimum: int = 1) -> Any:
        v = self._get(key)
        if v is None:
            if default is ...:
                raise bad_input(key, None, f"is missing; {self.arch} needs it (its Hugging Face "
                                "config class has no default for it)", where=str(self.path))
            return default
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise bad_input(key, v, f"must be an integer >= {minimum}", where=str(self.path))
        cap = LIMITS[_LIMIT_OF.get(key, "size")]
        if v > cap:
            raise bad_input(key, v, f"is implausibly large (at most {cap}); refused before "
                            "building the plan", where=str(self.path))
        return v

    def integers(self, key: str) -> Tuple[int, ...]:
        v = self._get(key) or []
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                               for x in v):
            raise bad_input(key, v, "must be a list of layer indices", where=str(self.path))
        if len(v) > LIMITS["layers"]:
            raise bad_input(key, f"{len(v)} entries", "has more entries than layers",
                            where=str(self.path))
        return tuple(v)

    def text(self, key: str, default: Any = ...) -> Any:
        v = self._get(key)
        if v is None:
            if default is ...:
                raise bad_input(key, None, f"is missing; {self.arch} needs it",
                                where=str(self.path))
            return default
        if not isinstance(v, str):
            raise bad_input(key, v, "must be a string", where=str(self.path))
        return v

    def number(self, key: str) -> Optional[float]:
        v = self._get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e30:
            raise bad_input(key, v, "must be a positive number", where=str(self.path))
        return float(v)

    # per-GPU sizes -------------------------------------------------------------------------
    def split(self, total: int, by: int, key: str, what: str, source: str = DIVIDE) -> int:
        """total / by, as vLLM's parallel layers split it; a split that does not divide is a
        problem of the module (vLLM refuses it at start-up), and the floor is shown."""
        if total % by:
            self.pending.append(f"{key} {total} is not divisible by {what} {by}: vLLM refuses "
                                f"to start ({source})")
        return max(1, total // by)


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


def _moe(cfg: _Config, name: str, layer: int, hidden: int, inter: int, experts: int, top_k: int,
         act: str, gated: bool, limit: Optional[float] = None,
         projs: Tuple[str, ...] = ("gate_proj", "up_proj", "down_proj"),
         key: str = "moe_intermediate_size") -> Module:
    if top_k > experts:
        raise bad_input("num_experts_per_tok", top_k, f"is larger than the number of experts "
                        f"({experts})", where=str(cfg.path))
    # vLLM FusedMoEParallelConfig.make: with expert parallelism each rank keeps whole experts
    # (experts / EP of them) and the MoE TP is 1; without it every expert is split by TP.
    # num_experts stays the global count (vLLM's FusedMoEConfig.num_experts).
    if cfg.ep > experts:
        cfg.pending.append(f"the expert-parallel size {cfg.ep} is larger than the number of "
                           f"experts ({experts}): a rank would hold no expert")
    inter_rank = cfg.split(inter, cfg.moe_tp, key, "the MoE tensor-parallel size")
    return Module(name, "routed experts", "experts", layer,
                  _fields(op="moe", activation=act, act_and_mul=gated, hidden_size=hidden,
                          intermediate_size=inter_rank, num_experts=experts, top_k=top_k,
                          swiglu_limit=limit, tp_size=cfg.moe_tp, ep_size=cfg.ep),
                  "RoutedExperts", projs, cfg.take())


_CLASSES = {"column": "ColumnParallelLinear", "merged": "MergedColumnParallelLinear",
            "qkv": "QKVParallelLinear", "row": "RowParallelLinear",
            "replicated": "ReplicatedLinear", "merged_replicated": "MergedColumnParallelLinear",
            "lm_head": "ParallelLMHead"}


def _linear(cfg: _Config, prefix: str, component: str, layer: Optional[int], proj: str, k: int,
            n: int, kind: str, key: str = "intermediate_size",
            split: Sequence[int] = ()) -> Module:
    """One linear layer: K inputs, N outputs (whole-model), split per GPU as vLLM splits it
    (a replicated one, ReplicatedLinear or disable_tp, keeps both on every GPU: TP 1)."""
    whole = (k, n)
    if kind in ("column", "merged"):
        n = cfg.split(n, cfg.tp, key, "the tensor-parallel size")
    elif kind == "row":
        k = cfg.split(k, cfg.tp, key, "the tensor-parallel size")
    elif kind == "lm_head":  # VocabParallelEmbedding pads the vocabulary to 64, then splits
        n = cfg.split(-(-n // 64) * 64, cfg.tp, "vocab_size (padded to 64)",
                      "the tensor-parallel size") if cfg.tp > 1 else n
    return Module(f"{prefix}.{proj}" if prefix else proj, component, proj, layer,
                  _fields(op="linear", activation="silu", act_and_mul=False, hidden_size=k,
                          intermediate_size=n, num_experts=None, top_k=None, swiglu_limit=None,
                          tp_size=1 if "replicated" in kind else cfg.tp),
                  _CLASSES[kind], problems=cfg.take(), whole=whole,
                  parts=tuple(split) if split else ((n // 2, n // 2) if kind == "merged"
                                                    else (n,)))


def _mlp(cfg: _Config, prefix: str, component: str, layer: int, hidden: int, inter: int,
         gated: bool = True, key: str = "intermediate_size",
         replicated: bool = False) -> List[Module]:
    r = "_replicated" if replicated else ""
    up = _linear(cfg, prefix, component, layer, "gate_up_proj", hidden, 2 * inter,
                 f"merged{r}", key) if gated else \
        _linear(cfg, prefix, component, layer, "up_proj", hidden, inter,
                "replicated" if replicated else "column", key)
    down = _linear(cfg, prefix, component, layer, "down_proj", inter, hidden,
                   "replicated" if replicated else "row", key)
    if replicated:  # vLLM's classes with disable_tp
        up = dataclasses.replace(up, cls="MergedColumnParallelLinear" if gated else
                                 "ColumnParallelLinear")
        down = dataclasses.replace(down, cls="RowParallelLinear")
    return [up, down]


def _qkv(cfg: _Config, prefix: str, layer: int, hidden: int) -> List[Module]:
    """QKVParallelLinear + o_proj: query heads split by TP, KV heads too (replicated when
    there are fewer than GPUs)."""
    heads = cfg.integer("num_attention_heads")
    kv = cfg.integer("num_key_value_heads", heads)
    hd = cfg.integer("head_dim", hidden // heads or 1)
    q_rank = cfg.split(heads, cfg.tp, "num_attention_heads", "the tensor-parallel size", HEADS)
    # vLLM linear.py QKVParallelLinear.__init__: with at least as many GPUs as KV heads each
    # GPU holds one KV head, replicated tp / kv times (divide(tp_size, total_num_kv_heads))
    kv_rank = cfg.split(kv, cfg.tp, "num_key_value_heads", "the tensor-parallel size") \
        if kv >= cfg.tp else 1
    if kv < cfg.tp:
        cfg.split(cfg.tp, kv, "the tensor-parallel size", "num_key_value_heads",
                  "vLLM 0.32.0 vllm/model_executor/layers/linear.py (QKVParallelLinear: "
                  "num_kv_head_replicas = divide(tp_size, total_num_kv_heads))")
    qkv = Module(f"{prefix}.qkv_proj", "attention", "qkv_proj", layer,
                 _fields(op="linear", activation="silu", act_and_mul=False, hidden_size=hidden,
                         intermediate_size=(q_rank + 2 * kv_rank) * hd, num_experts=None,
                         top_k=None, swiglu_limit=None, tp_size=cfg.tp), "QKVParallelLinear",
                 problems=cfg.take(), whole=(hidden, (heads + 2 * kv) * hd),
                 parts=(q_rank * hd, kv_rank * hd, kv_rank * hd))
    return [qkv, _linear(cfg, prefix, "attention", layer, "o_proj", heads * hd, hidden, "row",
                         "num_attention_heads")]


def _lm_head(cfg: _Config, hidden: int) -> Module:
    return _linear(cfg, "", "LM head", None, "lm_head", hidden, cfg.integer("vocab_size"),
                   "lm_head")


@dataclass
class Read:
    layers: int
    types: List[str]
    modules: List[Module]
    notes: List[str] = field(default_factory=list)
    packed: Dict[str, Tuple[str, ...]] = field(default_factory=dict)


_QKV: Dict[str, Tuple[str, ...]] = {"qkv_proj": ("q_proj", "k_proj", "v_proj")}
_GATE_UP: Dict[str, Tuple[str, ...]] = {"gate_up_proj": ("gate_proj", "up_proj")}


def _layers(cfg: _Config) -> int:
    return int(cfg.integer("num_hidden_layers"))


def _llama(cfg: _Config) -> Read:
    """Llama, Mistral, Qwen2/Qwen3 dense: every layer is attention + a gated MLP (vLLM
    llama.py, qwen2.py, qwen3.py)."""
    n, h = _layers(cfg), cfg.integer("hidden_size")
    inter = cfg.integer("intermediate_size")
    mods: List[Module] = []
    for i in range(n):
        mods += _qkv(cfg, f"model.layers.{i}.self_attn", i, h)
        mods += _mlp(cfg, f"model.layers.{i}.mlp", "dense MLP", i, h, inter)
    return Read(n, ["dense"] * n, mods + [_lm_head(cfg, h)], [], {**_QKV, **_GATE_UP})


def _deepseek(cfg: _Config) -> Read:
    """DeepSeek-V2/V3/R1 (vLLM deepseek_v2.py): layers from `first_k_dense_replace` on are MoE
    every `moe_layer_freq` layers, with `n_shared_experts` shared experts and MLA attention
    (`fused_qkv_a_proj` when there is a q_lora_rank)."""
    n, h = _layers(cfg), cfg.integer("hidden_size")
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
        # vLLM deepseek_v2.py DeepseekV2MLAAttention: fused_qkv_a_proj (q_lora_rank) and
        # kv_a_proj_with_mqa are built with disable_tp=True / ReplicatedLinear: whole on
        # every GPU
        if q_lora:
            mods.append(dataclasses.replace(
                _linear(cfg, a, "attention", i, "fused_qkv_a_proj", h, q_lora + kv_lora + rope,
                        "merged_replicated", split=(q_lora, kv_lora + rope)),
                cls="DeepSeekV2FusedQkvAProjLinear"))
            cfg.split(heads, cfg.tp, "num_attention_heads", "the tensor-parallel size", HEADS)
            mods.append(_linear(cfg, a, "attention", i, "q_b_proj", q_lora,
                                heads * (nope + rope), "column", "num_attention_heads"))
        else:
            cfg.split(heads, cfg.tp, "num_attention_heads", "the tensor-parallel size", HEADS)
            mods += [_linear(cfg, a, "attention", i, "q_proj", h, heads * (nope + rope),
                             "column", "num_attention_heads"),
                     _linear(cfg, a, "attention", i, "kv_a_proj_with_mqa", h, kv_lora + rope,
                             "replicated")]
        mods += [_linear(cfg, a, "attention", i, "kv_b_proj", kv_lora, heads * (nope + v),
                         "column", "num_attention_heads"),
                 _linear(cfg, a, "attention", i, "o_proj", heads * v, h, "row",
                         "num_attention_heads")]
        if i >= first_dense and i % freq == 0:
            types.append("MoE")
            if cfg._get("n_group") is None or cfg._get("topk_group") is None:
                # vLLM deepseek_v2.py DeepseekV2MoE builds its experts with
                # use_grouped_topk=True and num_expert_group=config.n_group
                cfg.pending.append(
                    "n_group and topk_group are missing (the config class leaves them None): "
                    "vLLM refuses to start (vLLM 0.32.0 vllm/model_executor/layers/fused_moe/"
                    "router/router_factory.py (create_fused_moe_router): num_expert_group and "
                    "topk_group must be provided when use_grouped_topk is True)")
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True,
                             limit))
            if shared:
                mods += _mlp(cfg, f"{p}.mlp.shared_experts", "shared experts", i, h,
                             moe_i * shared, key="moe_intermediate_size",
                             replicated=cfg.seq_moe)
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i)
    notes = [f"swiglu_limit {limit:g}: a model-level SwiGLU clamp on the routed experts"] \
        if limit else []
    packed: Dict[str, Tuple[str, ...]] = dict(_GATE_UP)
    if q_lora:
        packed["fused_qkv_a_proj"] = ("q_a_proj", "kv_a_proj_with_mqa")
    return Read(n, types, mods + [_lm_head(cfg, h)], notes, packed)


def _qwen3_moe(cfg: _Config) -> Read:
    """Qwen3-MoE (vLLM qwen3_moe.py): MoE every `decoder_sparse_step` layers except
    `mlp_only_layers`; no shared experts."""
    n, h = _layers(cfg), cfg.integer("hidden_size")
    # Qwen3MoeConfig.attribute_map: num_experts is num_local_experts
    experts = cfg.integer("num_local_experts") if "num_experts" not in cfg.data and \
        "num_local_experts" in cfg.data else cfg.integer("num_experts")
    top_k = cfg.integer("num_experts_per_tok")
    moe_i, dense_i = cfg.integer("moe_intermediate_size"), cfg.integer("intermediate_size")
    step = cfg.integer("decoder_sparse_step", 1)
    only_mlp = set(cfg.integers("mlp_only_layers"))
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if i not in only_mlp and (i + 1) % step == 0:
            types.append("MoE")
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True))
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i)
    # vLLM Qwen3MoeForCausalLM.__init__ adds gate_up_proj only when mlp_only_layers is set
    packed = {**_QKV, **(_GATE_UP if only_mlp else {})}
    return Read(n, types, mods + [_lm_head(cfg, h)], [], packed)


_NEMOTRON_BLOCKS = {"M": "Mamba", "E": "MoE", "*": "attention", "-": "dense"}


def _nemotron_h(cfg: _Config) -> Read:
    """Nemotron-H (vLLM nemotron_h.py): `hybrid_override_pattern` gives each layer's block
    (M Mamba-2, E MoE, * attention, - MLP); MLPs and experts are non-gated with
    `mlp_hidden_act` (relu2)."""
    h = cfg.integer("hidden_size")
    pattern = cfg.text("hybrid_override_pattern")
    n = cfg.integer("num_hidden_layers", len(pattern) or None)
    if len(pattern) != n or set(pattern) - set(_NEMOTRON_BLOCKS):
        raise bad_input("hybrid_override_pattern", pattern, f"must have one of "
                        f"{''.join(_NEMOTRON_BLOCKS)} per layer ({n} layers)",
                        where=str(cfg.path))
    act = _activation(cfg, "mlp_hidden_act", _NON_GATED_ACTS, "relu2")
    types, mods = [], []
    for i, block in enumerate(pattern):
        p = f"model.layers.{i}.mixer"
        types.append(_NEMOTRON_BLOCKS[block])
        if block == "E":
            moe_i = cfg.integer("moe_intermediate_size")
            mods.append(_moe(cfg, f"{p}.experts", i, h, moe_i, cfg.integer("n_routed_experts"),
                             cfg.integer("num_experts_per_tok"), act, False,
                             projs=("up_proj", "None", "down_proj")))
            if cfg.integer("n_shared_experts", 1, minimum=0):
                mods += _mlp(cfg, f"{p}.shared_experts", "shared experts", i, h,
                             cfg.integer("moe_shared_expert_intermediate_size"), gated=False,
                             key="moe_shared_expert_intermediate_size",
                             replicated=cfg.seq_moe)
        elif block == "-":
            mods += _mlp(cfg, p, "dense MLP", i, h, cfg.integer("intermediate_size"),
                         gated=False)
        elif block == "*":
            mods += _qkv(cfg, p, i, h)
        else:
            heads, hd = cfg.integer("mamba_num_heads"), cfg.integer("mamba_head_dim")
            groups, state = cfg.integer("n_groups"), cfg.integer("ssm_state_size")
            inner = heads * hd
            # vLLM mamba_mixer2.py MambaMixer2.__init__: in_proj outputs [z, x, B, C, dt]
            # = 2 * inner + 2 * n_groups * ssm_state_size + heads, split by TP; n_groups
            # divisible by TP, or 1 and then replicated on every GPU
            src = ("vLLM 0.32.0 vllm/model_executor/layers/mamba/mamba_mixer2.py "
                   "(MambaMixer2.__init__)")
            cfg.split(heads, cfg.tp, "mamba_num_heads", "the tensor-parallel size", src)
            g_rank = groups if groups % cfg.tp and groups == 1 else \
                cfg.split(groups, cfg.tp, "n_groups", "the tensor-parallel size (or be 1)",
                          src)
            in_n = (2 * inner + heads) // cfg.tp + 2 * g_rank * state
            mods += [dataclasses.replace(
                _linear(cfg, p, "Mamba", i, "in_proj", h, 2 * inner + 2 * groups * state + heads,
                        "replicated", "mamba_num_heads"),
                fields=_fields(op="linear", activation="silu", act_and_mul=False, hidden_size=h,
                               intermediate_size=in_n, num_experts=None, top_k=None,
                               swiglu_limit=None, tp_size=cfg.tp),
                cls="MergedColumnParallelLinear"),
                     _linear(cfg, p, "Mamba", i, "out_proj", inner, h, "row", "mamba_num_heads")]
    return Read(n, types, mods + [_lm_head(cfg, h)], [], dict(_QKV))


def _gpt_oss(cfg: _Config) -> Read:
    """gpt-oss (vLLM gpt_oss.py): every layer MoE with swigluoai experts (built with
    activation="swigluoai"; the config's `swiglu_limit` is that activation's clamp)."""
    n, h = _layers(cfg), cfg.integer("hidden_size")
    experts = cfg.integer("num_local_experts")
    top_k = cfg.integer("num_experts_per_tok")  # GptOssConfig has no experts_per_token key
    inter = cfg.integer("intermediate_size")
    limit = cfg.number("swiglu_limit")
    mods: List[Module] = []
    kv = cfg.integer("num_key_value_heads", cfg.integer("num_attention_heads"))
    for i in range(n):
        p = f"model.layers.{i}"
        if kv < cfg.tp:  # no KV-head replication in gpt-oss's attention
            cfg.pending.append(
                f"num_key_value_heads {kv} is less than the tensor-parallel size {cfg.tp}: vLLM "
                "refuses to start (vLLM 0.32.0 vllm/model_executor/models/gpt_oss.py "
                "(OAIAttention: num_local_key_value_heads = num_key_value_heads // tp_size, 0; "
                "attention.py Attention.__init__: num_heads % num_kv_heads))")
        mods += _qkv(cfg, f"{p}.attn", i, h)
        mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, inter, experts, top_k, "swigluoai",
                         True, key="intermediate_size"))
    notes = [(f"swiglu_limit {limit:g} is the clamp inside swigluoai (vLLM gpt_oss.py passes "
              "activation='swigluoai' and no separate swiglu_limit)")] if limit else []
    return Read(n, ["MoE"] * n, mods + [_lm_head(cfg, h)], notes, dict(_QKV))


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


_GPT_OSS_SUFFIX = tuple((f".{a}", f".{b}") for a, b in (
    ("embed_tokens.weight", "embedding.weight"), ("gate_up_proj_blocks", "w13_weight"),
    ("down_proj_blocks", "w2_weight"), ("gate_up_proj_scales", "w13_weight_scale"),
    ("down_proj_scales", "w2_weight_scale"), ("gate_up_proj", "w13_weight"),
    ("down_proj", "w2_weight"), ("gate_up_proj_bias", "w13_bias"), ("down_proj_bias", "w2_bias"),
    ("gate_up_proj.weight", "w13_weight"), ("gate_up_proj.weight_scale", "w13_weight_scale"),
    ("gate_up_proj.bias", "w13_bias"), ("gate_up_proj.input_scale", "w13_input_scale"),
    ("down_proj.weight", "w2_weight"), ("down_proj.weight_scale", "w2_weight_scale"),
    ("down_proj.bias", "w2_bias"), ("down_proj.input_scale", "w2_input_scale")))
# vLLM's hf_to_vllm_mapper.get_rename_mapper() per model: (substr, prefix, suffix) renames;
# None: the model has no mapper, and vLLM leaves the quantization config's names alone
RENAMES: Dict[str, Optional[Tuple[Tuple[Tuple[str, str], ...], ...]]] = {
    "deepseek_v3": None, "deepseek_v2": None,
    "nemotron_h": ((("A_log", "A"), ("embeddings", "embed_tokens")), (("backbone", "model"),),
                   ()),
    "gpt_oss": (((".self_attn.", ".attn."),), (), _GPT_OSS_SUFFIX),
}


def read_architecture(config: Mapping[str, Any], path: Path, tp_size: int = 1,
                      ep_size: int = 1, moe_tp: Optional[int] = None) -> Architecture:
    """The architecture as vLLM builds it on one GPU: dense layers split by `tp_size`, routed
    experts by `moe_tp` (default: 1 with expert parallelism, else `tp_size`) and `ep_size`."""
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
    for key, v in (("layer.tp_size", tp_size), ("layer.ep_size", ep_size)):
        if v > LIMITS["parallel"]:
            raise bad_input(key, v, f"is implausibly large (at most {LIMITS['parallel']})")
    cfg = _Config(config, path, name, model_type, tp_size, ep_size, moe_tp)
    r = reader(cfg)
    renames = RENAMES.get(model_type, ((), (), ()))
    notes = list(r.notes)
    if cfg.defaulted:
        notes.append(f"config.json leaves out {', '.join(cfg.defaulted)}: the defaults of "
                     f"{name}'s Hugging Face config class apply (transformers 5.19.0), as in "
                     "vLLM")
    substr, prefix, suffix = renames or ((), (), ())
    return Architecture(name, str(config.get("model_type") or model_type), r.layers,
                        tuple(r.types), tuple(r.modules), tuple(notes), r.packed,
                        maps_names=renames is not None, rename_substr=substr,
                        rename_prefix=prefix, rename_suffix=suffix,
                        defaulted=tuple(cfg.defaulted))


def checkpoint_dtype(config: Mapping[str, Any], path: Path) -> Optional[str]:
    key = "torch_dtype" if "torch_dtype" in config else "dtype"
    v = config.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or v not in _DTYPES:
        raise bad_value(key, v, _DTYPES, where=str(path))
    return _DTYPES[v]
