"""More MoE architectures as vLLM 0.32.0 builds them (model_executor/models/mixtral.py,
glm4_moe.py, minimax_m2.py, qwen3_next.py). An architecture without a reader is refused
("architecture not modelled", checkpoint/arch.py read_architecture), never planned from its
config's common keys.

Each reader gives the modules of checkpoint/modules.py, split per GPU; tests/vllm/
test_launch_shapes.py builds the same configs with vLLM's classes and compares them module by
module."""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional

from selector.checkpoint.modules import (
    _GATE_UP,
    _GATED_ACTS,
    _QKV,
    DIVIDE,
    Module,
    Read,
    _activation,
    _Config,
    _linear,
    _lm_head,
    _mlp,
    _moe,
    _qkv,
    n_group,
    routing_method,
)
from selector.core.errors import bad_input

W_PROJS = ("w1", "w3", "w2")  # Mixtral / MiniMax expert weights (gate, up, down)


def mixtral(cfg: _Config) -> Read:
    """Mixtral (mixtral.py MixtralDecoderLayer): attention + `block_sparse_moe` experts in every
    layer (w1/w3/w2 expert weights); the router (GateLinear) is not quantized."""
    return _moe_every_layer(cfg, "block_sparse_moe.experts")


def minimax_m2(cfg: _Config) -> Read:
    """MiniMax-M2 (minimax_m2.py): attention + MoE in every layer, the experts under
    `mlp.experts` (w1/w3/w2), no shared experts; TP larger than the experts is refused
    (MiniMaxM2MoE.__init__)."""
    return _moe_every_layer(cfg, "mlp.experts", _tp_over_experts, minimax=True)


def _tp_over_experts(cfg: _Config, experts: int) -> None:
    """MiniMax-M2's refusal, a problem of each layer's MoE module."""
    if cfg.tp > experts:
        cfg.pending.append(f"the tensor-parallel size {cfg.tp} is larger than the number of "
                           f"experts {experts}: vLLM refuses to start (vLLM 0.32.0 "
                           "vllm/model_executor/models/minimax_m2.py MiniMaxM2MoE.__init__)")


def _moe_every_layer(cfg: _Config, experts_path: str,
                     check: Optional[Callable[[_Config, int], None]] = None,
                     minimax: bool = False) -> Read:
    """Attention + one MoE block (w1/w3/w2 experts at `experts_path`, no shared experts) in every
    layer: Mixtral's and MiniMax-M2's shape; `check(cfg, experts)` adds the MoE module's
    problems."""
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    experts, top_k = cfg.integer("num_local_experts"), cfg.integer("num_experts_per_tok")
    inter = cfg.integer("intermediate_size")
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    if minimax:  # minimax_m2.py MiniMaxM2MoE: scoring_func, renormalize, use_routing_bias
        # MiniMaxM2DecoderLayer reads config.rotary_dim (no default in MiniMaxM2Config)
        cfg.integer("rotary_dim")
        routing = routing_method(cfg.text("scoring_func", "softmax"), True, None,
                                 cfg.flag("use_routing_bias", False))
    else:  # mixtral.py MixtralMoE: softmax, renormalize=True
        routing = routing_method("softmax", True, None, False)
    mods: List[Module] = []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if check is not None:
            check(cfg, experts)
        mods.append(_moe(cfg, f"{p}.{experts_path}", i, h, inter, experts, top_k, act, True,
                         projs=W_PROJS, key="intermediate_size", routing=routing))
    return Read(n, ["MoE"] * n, mods + [_lm_head(cfg, h)], [], dict(_QKV))


def glm4_moe(cfg: _Config) -> Read:
    """GLM-4.5 / 4.6 / 4.5-Air (glm4_moe.py): dense MLP below `first_k_dense_replace`, then MoE
    with `n_shared_experts` shared experts; attention qkv_proj / o_proj."""
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    experts, top_k = cfg.integer("n_routed_experts"), cfg.integer("num_experts_per_tok")
    moe_i, dense_i = cfg.integer("moe_intermediate_size"), cfg.integer("intermediate_size")
    first_dense = cfg.integer("first_k_dense_replace", 0, minimum=0)
    shared = cfg.integer("n_shared_experts", 0, minimum=0)
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    # glm4_moe.py Glm4MoeDecoderLayer reads config.head_dim (Glm4MoeConfig has no default: an
    # AttributeError at start-up without it)
    cfg.integer("head_dim")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if i >= first_dense:
            types.append("MoE")
            # glm4_moe.py Glm4MoE: sigmoid, a correction bias, n_group (Glm4MoeConfig's
            # default 1; null stays None), norm_topk_prob
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True,
                             routing=routing_method("sigmoid", cfg.flag("norm_topk_prob", True),
                                                    n_group(cfg, 1), True)))
            if shared:
                mods += _mlp(cfg, f"{p}.mlp.shared_experts", "shared experts", i, h,
                             moe_i * shared, key="moe_intermediate_size")
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i)
    return Read(n, types, mods + [_lm_head(cfg, h)], [], {**_QKV, **_GATE_UP})


def llama4(cfg: _Config) -> Read:
    """Llama-4 text (Scout, Maverick; vLLM llama4.py Llama4ForCausalLM): attention
    (qkv_proj, o_proj) in every layer; `feed_forward` is Llama4MoE every
    `interleave_moe_layer_step` layers (routed `experts` of `intermediate_size`, top-k
    `num_experts_per_tok`, Llama-4's own router function: routing llama4; a `shared_expert`
    LlamaMLP, replicated under sequence-parallel MoE; the `router` GateLinear is built without
    the quantization config), else a dense LlamaMLP of `intermediate_size_mlp`."""
    given = cfg.data.get("model_type")
    if given not in (None, "llama4_text"):
        # vLLM reads the config with the class of its model_type: Llama4Config (llama4) keeps
        # the text keys under text_config, and llama4.py Llama4Model reads num_local_experts
        # from the top level (AttributeError)
        raise bad_input("model_type", given, "is not llama4_text: Llama4ForCausalLM reads the "
                        "text model's keys at the top level (vLLM 0.32.0 vllm/model_executor/"
                        "models/llama4.py Llama4Model.__init__); a multimodal checkpoint "
                        "(model_type llama4, text_config) names Llama4ForConditionalGeneration",
                        where=str(cfg.path), accepted=("llama4_text",))
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    experts, top_k = cfg.integer("num_local_experts"), cfg.integer("num_experts_per_tok")
    moe_i, dense_i = cfg.integer("intermediate_size"), cfg.integer("intermediate_size_mlp")
    step = cfg.integer("interleave_moe_layer_step", 1, minimum=0)
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if step > 0 and (i + 1) % step == 0:
            types.append("MoE")
            # Llama4MoE: custom_routing_function=Llama4MoE.custom_routing_function, which
            # CustomRoutingRouter advertises as RoutingMethodType.Llama4
            # (router/custom_routing_router.py)
            mods.append(_moe(cfg, f"{p}.feed_forward.experts", i, h, moe_i, experts, top_k,
                             "silu", True, key="intermediate_size", routing="llama4"))
            mods += _mlp(cfg, f"{p}.feed_forward.shared_expert", "shared experts", i, h,
                         moe_i, replicated=cfg.seq_moe)
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.feed_forward", "dense MLP", i, h, dense_i,
                         key="intermediate_size_mlp")
    return Read(n, types, mods + [_lm_head(cfg, h)], [], {**_QKV, **_GATE_UP})


def llama4_multimodal(cfg: _Config) -> Read:
    """Llama-4 Scout / Maverick as published (vLLM 0.32.0 mllama4.py
    Llama4ForConditionalGeneration.__init__): the vision tower (`vision_model`) and the
    `multi_modal_projector` are built with quant_config=None, the language model is
    Llama4ForCausalLM on `text_config` under the prefix `language_model` (initialize_model(...,
    prefix="language_model", model_class=Llama4ForCausalLM)). The class has no
    hf_to_vllm_mapper: the quantization config's names are the checkpoint's."""
    text = cfg.data.get("text_config", {})
    if not isinstance(text, dict):
        raise bad_input("text_config", text, "must be a mapping of the text model's keys",
                        where=str(cfg.path))
    if text.get("model_type") not in (None, "llama4_text"):
        raise bad_input("text_config.model_type", text.get("model_type"), "is not llama4_text "
                        "(Llama4Config's text_config is a Llama4TextConfig)",
                        where=str(cfg.path), accepted=("llama4_text",))
    sub = _Config(text, cfg.path, cfg.arch, "llama4_text", cfg.tp, cfg.ep, cfg.moe_tp)
    r = llama4(sub)
    cfg.defaulted += [f"text_config.{k}" for k in sub.defaulted]
    mods = [dataclasses.replace(m, name=f"language_model.{m.name}") for m in r.modules]
    return Read(r.layers, r.types, mods, r.notes + [
        "the vision tower and multi_modal_projector are built unquantized (vLLM 0.32.0 "
        "mllama4.py Llama4ForConditionalGeneration: quant_config=None): not planned"], r.packed)


_ERNIE = "vLLM 0.32.0 vllm/model_executor/models/ernie45_moe.py"


def ernie45_moe(cfg: _Config) -> Read:
    """ERNIE-4.5 MoE (ernie45_moe.py Ernie4_5_MoeDecoderLayer): attention (qkv_proj, o_proj);
    `mlp` is Ernie4_5_MoeMoE where `use_moe` (default: moe_num_experts > 0), (i + 1) %
    `moe_layer_interval` == 0 and `moe_layer_start_index` <= i <= `moe_layer_end_index`
    (routed `experts`: moe_num_experts of moe_intermediate_size, top-k moe_k, softmax with a
    score-correction bias and renormalize; `shared_experts` of moe_intermediate_size *
    moe_num_shared_experts; the `gate` GateLinear unquantized), else a dense MLP of
    intermediate_size."""
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    experts = cfg.integer("moe_num_experts", 0, minimum=0)
    start = cfg.integer("moe_layer_start_index", 0, minimum=0)
    end = cfg.integer("moe_layer_end_index", n - 1, minimum=0)
    every = cfg.integer("moe_layer_interval", 1)
    use_moe = cfg.flag("use_moe", experts > 0)
    shared = cfg.integer("moe_num_shared_experts", 0, minimum=0)
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if use_moe and (i + 1) % every == 0 and start <= i <= end:
            types.append("MoE")
            moe_i, top_k = cfg.integer("moe_intermediate_size"), cfg.integer("moe_k")
            if cfg.tp > experts:
                cfg.pending.append(f"the tensor-parallel size {cfg.tp} is larger than the "
                                   f"number of experts {experts}: vLLM refuses to start "
                                   f"({_ERNIE} Ernie4_5_MoeMoE.__init__)")
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True,
                             routing=routing_method("softmax", True, None, True)))
            if shared:
                mods += _mlp(cfg, f"{p}.mlp.shared_experts", "shared experts", i, h,
                             moe_i * shared, key="moe_intermediate_size")
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, cfg.integer("intermediate_size"))
    return Read(n, types, mods + [_lm_head(cfg, h)], [], {**_QKV, **_GATE_UP})


_QWEN3_NEXT = "vLLM 0.32.0 vllm/model_executor/models/qwen3_next.py"
_GDN = "vLLM 0.32.0 vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py"
_LAYER_TYPES = ("linear_attention", "full_attention")


def _one_output(m: Module) -> Module:
    """A MergedColumnParallelLinear of one output (qwen_gdn_linear_attn.py create_qkvz_proj /
    create_ba_proj with gqa_interleaved_layout: one shard keeps the interleaved layout)."""
    return dataclasses.replace(m, parts=(dict(m.fields)["intermediate_size"],))


def _qwen3_next_layer_types(cfg: _Config, n: int) -> List[str]:
    """Qwen3NextConfig.__post_init__: `layer_types`, else every `full_attention_interval`-th
    layer (default 4) full attention and the others linear attention."""
    given = cfg.data.get("layer_types")
    if given is None:
        every = cfg.integer("full_attention_interval", 4)
        return ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                for i in range(n)]
    if not isinstance(given, list) or len(given) != n or set(given) - set(_LAYER_TYPES):
        raise bad_input("layer_types", given, f"must name one of {', '.join(_LAYER_TYPES)} "
                        f"per layer ({n} layers)", where=str(cfg.path))
    return list(given)


def _gdn_attention(cfg: _Config, a: str, i: int, h: int, nv: int, key_dim: int,
                   value_dim: int) -> List[Module]:
    """The quantized linear modules of layer `i`'s Gated DeltaNet attention at prefix `a`
    (qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention: in_proj_qkvz, in_proj_ba, out_proj),
    after checking its TP splits."""
    # conv1d: ColumnParallelLinear(conv_kernel, 2 * key_dim + value_dim), no quant
    # config; A_log: divide(linear_num_value_heads, tp)
    cfg.split(2 * key_dim + value_dim, cfg.tp, "the GDN conv dimension (2 * "
              "linear_key_head_dim * linear_num_key_heads + linear_value_head_dim * "
              "linear_num_value_heads)", "the tensor-parallel size")
    cfg.split(nv, cfg.tp, "linear_num_value_heads", "the tensor-parallel size",
              f"{_GDN} (QwenGatedDeltaNetAttention.__init__: A_log, {DIVIDE})")
    return [_one_output(_linear(cfg, a, "attention", i, "in_proj_qkvz", h,
                                2 * key_dim + 2 * value_dim, "merged",
                                "linear_num_value_heads")),
            _one_output(_linear(cfg, a, "attention", i, "in_proj_ba", h, 2 * nv,
                                "merged", "linear_num_value_heads")),
            _linear(cfg, a, "attention", i, "out_proj", value_dim, h, "row",
                    "linear_value_head_dim * linear_num_value_heads")]


def qwen3_next(cfg: _Config) -> Read:
    """Qwen3-Next (qwen3_next.py): each layer Gated DeltaNet linear attention (`linear_attn`:
    in_proj_qkvz, in_proj_ba, out_proj; qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention) or
    gated full attention (`self_attn`: qkv_proj with a gate per query head, o_proj), then a MoE
    block (Qwen3NextSparseMoeBlock: experts, `shared_expert`; the router `mlp.gate` and
    `shared_expert_gate` are built without the quantization config) or, for `mlp_only_layers`,
    a dense MLP. Built unquantized and so not planned: linear_attn.conv1d, mlp.gate,
    mlp.shared_expert_gate; the LM head is built without the quantization config too."""
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    kinds = _qwen3_next_layer_types(cfg, n)
    experts = cfg.integer("num_experts", 0, minimum=0)
    top_k = cfg.integer("num_experts_per_tok")
    moe_i, dense_i = cfg.integer("moe_intermediate_size"), cfg.integer("intermediate_size")
    shared_i = cfg.integer("shared_expert_intermediate_size", 0, minimum=0)
    step = cfg.integer("decoder_sparse_step", 1)
    only_mlp = set(cfg.integers("mlp_only_layers"))
    # qwen2_moe.py Qwen2MoeMLP (Qwen3NextMLP): "Only silu is supported for now"
    act = _activation(cfg, "hidden_act", {"silu": "silu", "swish": "silu"}, "silu")
    gate = cfg.data.get("attn_output_gate", True)  # Qwen3NextAttention: getattr(..., True)
    if not isinstance(gate, bool):
        raise bad_input("attn_output_gate", gate, "must be true or false", where=str(cfg.path))
    nk, nv = cfg.integer("linear_num_key_heads"), cfg.integer("linear_num_value_heads")
    dk, dv = cfg.integer("linear_key_head_dim"), cfg.integer("linear_value_head_dim")
    key_dim, value_dim = dk * nk, dv * nv
    types, mods = [], []
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        if kind == "linear_attention":
            mods += _gdn_attention(cfg, f"{p}.linear_attn", i, h, nv, key_dim, value_dim)
        else:
            mods += _qkv(cfg, f"{p}.self_attn", i, h, 2 if gate else 1)
        if i not in only_mlp and experts > 0 and (i + 1) % step == 0:
            types.append("MoE")
            if cfg.tp > experts:
                cfg.pending.append(
                    f"the tensor-parallel size {cfg.tp} is larger than the number of experts "
                    f"{experts}: vLLM refuses to start ({_QWEN3_NEXT} "
                    "Qwen3NextSparseMoeBlock.__init__)")
            # Qwen3NextSparseMoeBlock: softmax, renormalize=norm_topk_prob (default True)
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True,
                             routing=routing_method("softmax", cfg.flag("norm_topk_prob", True),
                                                    None, False)))
            if shared_i:
                # Qwen2MoeMLP(disable_tp=... or is_sequence_parallel)
                mods += _mlp(cfg, f"{p}.mlp.shared_expert", "shared experts", i, h, shared_i,
                             key="shared_expert_intermediate_size", replicated=cfg.seq_moe)
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i)
    head = dataclasses.replace(_lm_head(cfg, h), unquantized=(
        f"vLLM builds the LM head without the quantization config ({_QWEN3_NEXT} "
        "Qwen3NextForCausalLM.__init__: ParallelLMHead(vocab_size, hidden_size, prefix=...))"))
    packed = {**_QKV, **_GATE_UP, "in_proj_qkvz": ("in_proj_qkvz",),
              "in_proj_ba": ("in_proj_ba",)}
    return Read(n, types, mods + [head], [], packed)
