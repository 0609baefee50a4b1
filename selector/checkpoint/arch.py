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
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from selector.checkpoint import arch_moe
from selector.checkpoint.files import MAX_JSON_BYTES as MAX_JSON_BYTES
from selector.checkpoint.files import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from selector.checkpoint.files import _depth as _depth
from selector.checkpoint.files import read_json as read_json
from selector.checkpoint.modules import _CLASSES as _CLASSES
from selector.checkpoint.modules import _GATE_UP as _GATE_UP
from selector.checkpoint.modules import _GATED_ACTS as _GATED_ACTS
from selector.checkpoint.modules import _LIMIT_OF as _LIMIT_OF
from selector.checkpoint.modules import _NON_GATED_ACTS as _NON_GATED_ACTS
from selector.checkpoint.modules import _QKV as _QKV
from selector.checkpoint.modules import DIVIDE as DIVIDE
from selector.checkpoint.modules import HEADS as HEADS
from selector.checkpoint.modules import HF_DEFAULTS as HF_DEFAULTS
from selector.checkpoint.modules import LIMITS as LIMITS
from selector.checkpoint.modules import Architecture as Architecture
from selector.checkpoint.modules import Module as Module
from selector.checkpoint.modules import Read as Read
from selector.checkpoint.modules import _activation as _activation
from selector.checkpoint.modules import _Config as _Config
from selector.checkpoint.modules import _fields as _fields
from selector.checkpoint.modules import _linear as _linear
from selector.checkpoint.modules import _lm_head as _lm_head
from selector.checkpoint.modules import _mlp as _mlp
from selector.checkpoint.modules import _moe as _moe
from selector.checkpoint.modules import _qkv as _qkv
from selector.checkpoint.modules import n_group as n_group
from selector.checkpoint.modules import routing_method as routing_method
from selector.core.errors import bad_input, bad_value


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


_V32 = "vLLM 0.32.0 vllm/models/deepseek_v32"


def _deepseek_v32(cfg: _Config) -> Read:
    """DeepSeek-V3.2 (vLLM vllm/models/deepseek_v32/nvidia/model.py, the class a CUDA platform
    imports: DeepSeek-V3's MLA and MoE, DeepseekV32Attention (deepseek_v32/attention.py) adding
    the sparse-attention indexer (`self_attn.indexer`: wq_b, a ReplicatedLinear with the quant
    config; wk_weights_proj, disable_tp without it: not planned), and under sequence-parallel
    MoE the dense MLPs replicated (DeepseekV32DecoderLayer: DeepseekV2MLP(is_sequence_parallel=
    ...))."""
    return _deepseek(cfg, dsa=True)


def _indexer(cfg: _Config, n: int) -> Callable[[int], bool]:
    """Which layers have an indexer (deepseek_v32/attention.py DeepseekV32Attention.__init__:
    skip_topk from index_topk_pattern ('S' skips), else index_topk_freq and
    index_skip_topk_offset)."""
    cfg.integer("index_topk")  # DeepseekV32ForCausalLM.verify_and_update_config asserts it
    freq = cfg.integer("index_topk_freq", 1)
    offset = cfg.integer("index_skip_topk_offset", 2, minimum=0)
    pattern = cfg.text("index_topk_pattern", None)
    if pattern is not None:
        return lambda i: not (i < len(pattern) and pattern[i] == "S")
    return lambda i: max(i - offset + 1, 0) % freq == 0


def _mla_attention(cfg: _Config, a: str, i: int, h: int, dims: Tuple[int, Any, int, int, int, int],
                   has_indexer: Optional[Callable[[int], bool]]) -> List[Module]:
    """The linear modules of layer `i`'s MLA attention (vLLM deepseek_v2.py
    DeepseekV2MLAAttention) at prefix `a`, with DeepSeek-V3.2's indexer where it has one;
    `dims`: (heads, q_lora_rank or None, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
    v_head_dim)."""
    heads, q_lora, kv_lora, rope, nope, v = dims
    mods: List[Module] = []
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
    if has_indexer is not None and has_indexer(i):
        idx_heads, idx_dim = cfg.integer("index_n_heads"), cfg.integer("index_head_dim")
        mods.append(_linear(cfg, f"{a}.indexer", "attention", i, "wq_b", q_lora,
                            idx_heads * idx_dim, "replicated"))
    mods += [_linear(cfg, a, "attention", i, "kv_b_proj", kv_lora, heads * (nope + v),
                     "column", "num_attention_heads"),
             _linear(cfg, a, "attention", i, "o_proj", heads * v, h, "row",
                     "num_attention_heads")]
    return mods


def _deepseek(cfg: _Config, dsa: bool = False) -> Read:
    """DeepSeek-V2/V3/R1 (vLLM deepseek_v2.py): layers from `first_k_dense_replace` on are MoE
    every `moe_layer_freq` layers, with `n_shared_experts` shared experts and MLA attention
    (`fused_qkv_a_proj` when there is a q_lora_rank); `dsa`: DeepSeek-V3.2's (_deepseek_v32)."""
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
    if dsa and not q_lora:
        raise bad_input("q_lora_rank", q_lora, "must be set: DeepSeek-V3.2's indexer projects "
                        f"the q_lora_rank query ({_V32}/attention.py DeepseekV32Indexer: wq_b)",
                        where=str(cfg.path))
    has_indexer = _indexer(cfg, n) if dsa else None
    # deepseek_v2.py DeepseekV2MoE: scoring_func (default softmax), norm_topk_prob, n_group,
    # and a score-correction bias with topk_method noaux_tc
    # (DeepseekV3Config's norm_topk_prob defaults to True, DeepseekV2Config's to False)
    routing = routing_method(cfg.text("scoring_func", "softmax"),
                             cfg.flag("norm_topk_prob", cfg.model_type != "deepseek_v2"),
                             n_group(cfg, None),
                             cfg.text("topk_method", "") == "noaux_tc")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _mla_attention(cfg, f"{p}.self_attn", i, h, (heads, q_lora, kv_lora, rope, nope, v),
                               has_indexer)
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
                             limit, routing=routing))
            if shared:
                mods += _mlp(cfg, f"{p}.mlp.shared_experts", "shared experts", i, h,
                             moe_i * shared, key="moe_intermediate_size",
                             replicated=cfg.seq_moe)
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i,
                         replicated=dsa and cfg.seq_moe)
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
            # qwen3_moe.py Qwen3MoeSparseMoeBlock: softmax, renormalize=norm_topk_prob
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True,
                             routing=routing_method("softmax", cfg.flag("norm_topk_prob", False),
                                                    None, False)))
            # the router: qwen3_moe.py Qwen3MoeSparseMoeBlock builds GateLinear (a
            # ReplicatedLinear) with the quant config: vLLM quantizes it unless excluded
            mods.append(_linear(cfg, f"{p}.mlp", "router", i, "gate", h, experts, "replicated"))
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i)
    # vLLM Qwen3MoeForCausalLM.__init__ adds gate_up_proj only when mlp_only_layers is set
    packed = {**_QKV, **(_GATE_UP if only_mlp else {})}
    return Read(n, types, mods + [_lm_head(cfg, h)], [], packed)


_NEMOTRON_BLOCKS = {"M": "Mamba", "E": "MoE", "*": "attention", "-": "dense"}


def _mamba_mixer(cfg: _Config, p: str, i: int, h: int) -> List[Module]:
    """The linear modules of layer `i`'s Mamba-2 mixer (vLLM mamba_mixer2.py MambaMixer2) at
    prefix `p`: in_proj and out_proj."""
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
    return [dataclasses.replace(
        _linear(cfg, p, "Mamba", i, "in_proj", h, 2 * inner + 2 * groups * state + heads,
                "replicated", "mamba_num_heads"),
        fields=_fields(op="linear", activation="silu", act_and_mul=False, hidden_size=h,
                       intermediate_size=in_n, num_experts=None, top_k=None,
                       swiglu_limit=None, tp_size=cfg.tp),
        cls="MergedColumnParallelLinear",
        # mamba_mixer2.py 358-366: with n_groups divisible by TP, five outputs [z, x,
        # B, C, dt] each split by TP (the block-FP8 check reads each partition); else
        # one ColumnParallelLinear output
        parts=(inner // cfg.tp, inner // cfg.tp, g_rank * state, g_rank * state,
               heads // cfg.tp) if groups % cfg.tp == 0 else (in_n,)),
            _linear(cfg, p, "Mamba", i, "out_proj", inner, h, "row", "mamba_num_heads")]


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
                             projs=("up_proj", "None", "down_proj"),
                             # nemotron_h.py NemotronHMoE: sigmoid with a correction bias
                             # NemotronHConfig's n_group defaults to 1 (null stays None)
                             routing=routing_method("sigmoid", cfg.flag("norm_topk_prob", True),
                                                    n_group(cfg, 1), True)))
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
            mods += _mamba_mixer(cfg, p, i, h)
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
                         True, key="intermediate_size",
                         routing=routing_method("softmax", True, None, False)))  # renormalize
    notes = [(f"swiglu_limit {limit:g} is the clamp inside swigluoai (vLLM gpt_oss.py passes "
              "activation='swigluoai' and no separate swiglu_limit)")] if limit else []
    head = dataclasses.replace(_lm_head(cfg, h), unquantized=(
        "vLLM builds the LM head without the quantization config (vLLM 0.32.0 "
        "vllm/model_executor/models/gpt_oss.py GptOssForCausalLM.__init__: "
        "ParallelLMHead(vocab_size, hidden_size, prefix=...))"))
    return Read(n, ["MoE"] * n, mods + [head], notes, dict(_QKV))


# architectures entry -> (model_type, reader). Sources of the keys: the model cards' config.json
# files (deepseek-ai/DeepSeek-V3, Qwen/Qwen3-30B-A3B, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16,
# openai/gpt-oss-120b, meta-llama/Llama-3.1-8B-Instruct on Hugging Face).
ARCHITECTURES: Dict[str, Tuple[str, Callable[[_Config], Read]]] = {
    "DeepseekV3ForCausalLM": ("deepseek_v3", _deepseek),
    "DeepseekV2ForCausalLM": ("deepseek_v2", _deepseek),
    "DeepseekV32ForCausalLM": ("deepseek_v32", _deepseek_v32),
    "Qwen3NextForCausalLM": ("qwen3_next", arch_moe.qwen3_next),
    "Qwen3MoeForCausalLM": ("qwen3_moe", _qwen3_moe),
    "NemotronHForCausalLM": ("nemotron_h", _nemotron_h),
    "GptOssForCausalLM": ("gpt_oss", _gpt_oss),
    "LlamaForCausalLM": ("llama", _llama),
    "MistralForCausalLM": ("mistral", _llama),
    "Qwen2ForCausalLM": ("qwen2", _llama),
    "Qwen3ForCausalLM": ("qwen3", _llama),
    "MixtralForCausalLM": ("mixtral", arch_moe.mixtral),
    "Glm4MoeForCausalLM": ("glm4_moe", arch_moe.glm4_moe),
    "MiniMaxM2ForCausalLM": ("minimax_m2", arch_moe.minimax_m2),
    "Llama4ForCausalLM": ("llama4_text", arch_moe.llama4),
    "Llama4ForConditionalGeneration": ("llama4", arch_moe.llama4_multimodal),
    "Ernie4_5_MoeForCausalLM": ("ernie4_5_moe", arch_moe.ernie45_moe),
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
_Pairs = Tuple[Tuple[str, str], ...]
RENAMES: Dict[str, Optional[Tuple[_Pairs, Tuple[Tuple[str, Optional[str]], ...], _Pairs]]] = {
    "deepseek_v3": None, "deepseek_v2": None, "deepseek_v32": None,
    # qwen3_next: its hf_to_vllm_mapper only drops `mtp.` (orig_to_new_prefix None), which
    # get_rename_mapper() leaves out: no rename
    "nemotron_h": ((("A_log", "A"), ("embeddings", "embed_tokens")), (("backbone", "model"),),
                   ()),
    "gpt_oss": (((".self_attn.", ".attn."),), (), _GPT_OSS_SUFFIX),
    "mixtral": (((".gate_proj.", ".w1."), (".up_proj.", ".w3."), (".down_proj.", ".w2.")), (),
                ()),
    "glm4_moe": None,
    "llama4": None,  # mllama4.py Llama4ForConditionalGeneration has no hf_to_vllm_mapper
    "ernie4_5_moe": None,  # its mapper is Ernie4_5_MoeModel's, not the CausalLM class's
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
        # issue 44: an architecture without a reader is never planned from the "standard"
        # keys: its own keys (moe_num_experts, layers_block_type, first_k_dense_replace,
        # per-layer lists, ...) change the layout vLLM builds, and a plan from the common
        # ones would be silently wrong
        raise bad_value(key, given, accepted, what="architecture", where=str(path),
                        hint="architecture not modelled: selector plans the architectures "
                        "listed, each read as vLLM 0.32.0's model class builds it "
                        "(tests/vllm/test_registry_walk.py walks vLLM's model registry)")
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
