"""The building blocks of checkpoint/arch.py: the modules vLLM builds (linear layers, routed
experts) with the layer fields one GPU runs, and config.json look-ups whose errors name the key
and the file. Sizes are split as vLLM's parallel layers split them (vllm/model_executor/layers/
linear.py, fused_moe/layer.py); a split vLLM refuses is a problem of the module."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

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
             "decoder_sparse_step": "layers", "moe_num_experts": "experts", "moe_k": "experts",
             "moe_num_shared_experts": "experts", "moe_layer_start_index": "layers",
             "moe_layer_end_index": "layers", "moe_layer_interval": "layers",
             "interleave_moe_layer_step": "layers"}


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
    # why vLLM builds it without the quantization config (quant_config=None), if it does
    unquantized: str = ""


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
    rename_prefix: Tuple[Tuple[str, Optional[str]], ...] = ()  # None: vLLM drops the name
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
        self.data, self.path, self.arch, self.model_type = data, path, arch, model_type
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

    def flag(self, key: str, default: bool) -> bool:
        """A boolean key (a missing or null one: `default`, the value the model's vLLM class
        reads then)."""
        v = self._get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise bad_input(key, v, "must be true or false", where=str(self.path))
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


def n_group(cfg: _Config, default: Optional[int]) -> Optional[int]:
    """config.n_group as a model class reads it: an explicit null stays None, a missing key
    takes the config class's default (HF_DEFAULTS, else `default`)."""
    if "n_group" in cfg.data and cfg.data["n_group"] is None:
        return None
    got: Optional[int] = cfg.integer("n_group", default, minimum=0)
    return got


def routing_method(scoring: str, renormalize: bool, groups: Optional[int], bias: bool) -> str:
    """vLLM's routing method for a router (vLLM 0.32.0 fused_moe/config.py
    get_routing_method_type, which every router but a custom one advertises; router_factory.py
    keeps it when a degenerate grouping falls through to FusedTopKRouter), as layer.routing."""
    if scoring == "sqrtsoftplus":
        return "deepseek_v4" if renormalize else "unspecified"
    if bias:
        if scoring != "sigmoid" or not renormalize:
            return "unspecified"
        return "deepseek_v3" if (groups or 0) > 0 else "minimax2"
    if scoring == "sigmoid":
        return "sigmoid_renorm" if renormalize else "sigmoid"
    if scoring == "softmax":
        return "renormalize_naive" if renormalize else "default"
    return "unspecified"


def _moe(cfg: _Config, name: str, layer: int, hidden: int, inter: int, experts: int, top_k: int,
         act: str, gated: bool, limit: Optional[float] = None,
         projs: Tuple[str, ...] = ("gate_proj", "up_proj", "down_proj"),
         key: str = "moe_intermediate_size", routing: Optional[str] = None) -> Module:
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
                          swiglu_limit=limit, tp_size=cfg.moe_tp, ep_size=cfg.ep,
                          routing=routing),
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


def _qkv(cfg: _Config, prefix: str, layer: int, hidden: int, q_mult: int = 1) -> List[Module]:
    """QKVParallelLinear + o_proj: query heads split by TP, KV heads too (replicated when
    there are fewer than GPUs); `q_mult` 2: each query head comes with its output gate
    (Qwen3-Next's attn_output_gate: QKVParallelLinear of num_attention_heads * 2 heads)."""
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
                         intermediate_size=(q_mult * q_rank + 2 * kv_rank) * hd,
                         num_experts=None, top_k=None, swiglu_limit=None, tp_size=cfg.tp),
                 "QKVParallelLinear", problems=cfg.take(),
                 whole=(hidden, (q_mult * heads + 2 * kv) * hd),
                 parts=(q_mult * q_rank * hd, kv_rank * hd, kv_rank * hd))
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
