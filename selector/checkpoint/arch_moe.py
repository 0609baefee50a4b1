"""More MoE architectures as vLLM 0.32.0 builds them (model_executor/models/mixtral.py,
glm4_moe.py, minimax_m2.py), and any other architecture read from its config's standard keys
(with a note: its module names are the common ones, not checked against a vLLM model class).

Each reader gives the modules of checkpoint/modules.py, split per GPU; tests/vllm/
test_launch_shapes.py builds the same configs with vLLM's classes and compares them module by
module."""
from __future__ import annotations

from typing import Callable, List, Optional

from selector.checkpoint.modules import (
    _GATE_UP,
    _GATED_ACTS,
    _QKV,
    Module,
    Read,
    _activation,
    _Config,
    _lm_head,
    _mlp,
    _moe,
    _qkv,
)

W_PROJS = ("w1", "w3", "w2")  # Mixtral / MiniMax expert weights (gate, up, down)


def _experts_key(cfg: _Config) -> str:
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if key in cfg.data:
            return key
    return "num_local_experts"


def mixtral(cfg: _Config) -> Read:
    """Mixtral (mixtral.py MixtralDecoderLayer): attention + `block_sparse_moe` experts in every
    layer (w1/w3/w2 expert weights); the router (GateLinear) is not quantized."""
    return _moe_every_layer(cfg, "block_sparse_moe.experts")


def minimax_m2(cfg: _Config) -> Read:
    """MiniMax-M2 (minimax_m2.py): attention + MoE in every layer, the experts under
    `mlp.experts` (w1/w3/w2), no shared experts; TP larger than the experts is refused
    (MiniMaxM2MoE.__init__)."""
    return _moe_every_layer(cfg, "mlp.experts", _tp_over_experts)


def _tp_over_experts(cfg: _Config, experts: int) -> None:
    """MiniMax-M2's refusal, a problem of each layer's MoE module."""
    if cfg.tp > experts:
        cfg.pending.append(f"the tensor-parallel size {cfg.tp} is larger than the number of "
                           f"experts {experts}: vLLM refuses to start (vLLM 0.32.0 "
                           "vllm/model_executor/models/minimax_m2.py MiniMaxM2MoE.__init__)")


def _moe_every_layer(cfg: _Config, experts_path: str,
                     check: Optional[Callable[[_Config, int], None]] = None) -> Read:
    """Attention + one MoE block (w1/w3/w2 experts at `experts_path`, no shared experts) in every
    layer: Mixtral's and MiniMax-M2's shape; `check(cfg, experts)` adds the MoE module's
    problems."""
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    experts, top_k = cfg.integer("num_local_experts"), cfg.integer("num_experts_per_tok")
    inter = cfg.integer("intermediate_size")
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    mods: List[Module] = []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if check is not None:
            check(cfg, experts)
        mods.append(_moe(cfg, f"{p}.{experts_path}", i, h, inter, experts, top_k, act, True,
                         projs=W_PROJS, key="intermediate_size"))
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
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if i >= first_dense:
            types.append("MoE")
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, moe_i, experts, top_k, act, True))
            if shared:
                mods += _mlp(cfg, f"{p}.mlp.shared_experts", "shared experts", i, h,
                             moe_i * shared, key="moe_intermediate_size")
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, dense_i)
    return Read(n, types, mods + [_lm_head(cfg, h)], [], {**_QKV, **_GATE_UP})


def standard(cfg: _Config) -> Read:
    """An architecture selector has no reader for: the common decoder of vLLM's models
    (`model.layers.N.self_attn.qkv_proj` / `o_proj`, then `mlp.experts` when the config names
    an expert count, else `mlp.gate_up_proj` / `down_proj`), with a note saying so."""
    n, h = int(cfg.integer("num_hidden_layers")), cfg.integer("hidden_size")
    key = _experts_key(cfg)
    experts = cfg.integer(key, 0, minimum=0)
    act = _activation(cfg, "hidden_act", _GATED_ACTS, "silu")
    types, mods = [], []
    for i in range(n):
        p = f"model.layers.{i}"
        mods += _qkv(cfg, f"{p}.self_attn", i, h)
        if experts:
            types.append("MoE")
            inter_key = "moe_intermediate_size" if "moe_intermediate_size" in cfg.data \
                else "intermediate_size"
            mods.append(_moe(cfg, f"{p}.mlp.experts", i, h, cfg.integer(inter_key), experts,
                             cfg.integer("num_experts_per_tok"), act, True, key=inter_key))
        else:
            types.append("dense")
            mods += _mlp(cfg, f"{p}.mlp", "dense MLP", i, h, cfg.integer("intermediate_size"))
    note = (f"{cfg.arch} has no reader in selector: planned from its config's standard keys "
            "(num_hidden_layers, hidden_size, attention heads, "
            f"{key if experts else 'intermediate_size'}) and vLLM's common module names "
            "(self_attn.qkv_proj, o_proj, mlp." + ("experts" if experts else
                                                    "gate_up_proj, down_proj") +
            "); modules of its own (shared experts, other attention) are not in the plan")
    return Read(n, types, mods + [_lm_head(cfg, h)], [note], {**_QKV, **_GATE_UP})
