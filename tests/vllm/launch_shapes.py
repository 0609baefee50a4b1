"""selector's per-GPU plan of a checkpoint against vLLM's own model classes (model_shapes.py),
module by module (issue 32), and the seeded random cases of (architecture, TP, DP, EP).

selector's side is what its launch plan reads (checkpoint/plan.py with the launch plan's
Topology): checkpoint/arch.py's modules under vLLM's topology (selector's own
`ep_spans_tp_dp`: with expert parallelism EP = TP x DP and MoE TP 1, without it MoE TP = TP x DP)
and checkpoint/quant's verdict for each. Compared per module: per-GPU K and N (routed experts:
hidden and intermediate size), the TP the module runs (1: replicated), the global expert count,
the quant scheme; every module vLLM quantizes must be one selector plans; and a checkpoint vLLM
refuses at these sizes must have a refused module in selector's plan (and the other way round).
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import model_shapes

from selector.checkpoint.arch import read_architecture, read_json
from selector.checkpoint.launchers import ep_spans_tp_dp
from selector.checkpoint.quant import read_quantization
from selector.checkpoint.splits import refined_block, scheme_problems
from selector.core.errors import SelectorError
from selector.core.parallel import Parallel

VLLM_PARALLEL = {"tp": "--tensor-parallel-size", "dp": "--data-parallel-size",
                 "ep": "--enable-expert-parallel", "source": "conf/engine/vllm.yaml"}


@dataclass
class Mine:
    """selector's view of one case: per module (k, n, tp, scheme, global experts)."""
    # per module (k, n, tp, scheme, global experts, routing)
    modules: Dict[str, Tuple[int, int, int, str, Optional[int], Optional[str]]] = \
        field(default_factory=dict)
    problems: List[str] = field(default_factory=list)
    refused: str = ""  # a SelectorError reading the checkpoint


def selector_view(d: Path, tp: int, dp: int, ep: bool) -> Mine:
    out = Mine()
    try:
        topo = ep_spans_tp_dp(VLLM_PARALLEL, Parallel(tp=tp, dp=dp, ep=tp * dp if ep else 1),
                              "vLLM")
        config = read_json(d / "config.json")
        arch = read_architecture(config, d / "config.json", topo.linear_tp, topo.ep,
                                 topo.moe_tp)
        quant = read_quantization(d, config, arch)
    except SelectorError as exc:
        out.refused = str(exc)
        return out
    for m in arch.modules:
        f = dict(m.fields)
        v = quant.verdict_of(m)
        scheme = (f"{v.scheme}/{v.act_scale}" if v.scheme and v.act_scale else
                  v.scheme or ("other" if v.other else model_shapes.UNQUANTIZED))
        r = refined_block(m, v.scheme, quant.format != "compressed-tensors")
        out.modules[m.name] = (f["hidden_size"], f["intermediate_size"], f["tp_size"],
                               "other" if r else scheme, f["num_experts"], f.get("routing"))
        out.problems += [f"{m.name}: {p}" for p in m.problems +
                         scheme_problems(m, v.scheme, topo.linear_tp, r, quant.format)]
    if ep and not any(m.cls == "RoutedExperts" for m in arch.modules):
        # selector/checkpoint/launch.py launch_plan refuses parallel.ep (exit 2) for a model
        # without experts (tests/test_launch.py test_expert_parallelism_needs_experts)
        out.refused = "parallel.ep is not accepted: this checkpoint has no MoE layer"
    return out


def differences(v: model_shapes.Model, s: Mine) -> List[str]:
    """Every difference of one case, as text."""
    if v.refused or s.refused or s.problems:
        vr, sr = bool(v.refused), bool(s.refused or s.problems)
        if vr == sr:
            return []
        return [f"vLLM {'refuses: ' + v.refused if vr else 'builds it'}; selector "
                f"{'refuses: ' + (s.refused or s.problems[0]) if sr else 'plans it'}"]
    out = []
    for name, (k, n, tp, scheme, experts, routing) in s.modules.items():
        b = v.modules.get(name)
        if b is None:
            out.append(f"{name}: selector plans a module vLLM does not build")
            continue
        mine = (k, n, tp, scheme, experts)
        theirs = (b.k, b.n, b.tp, b.scheme, b.experts[0] if b.experts else None)
        if mine != theirs and not padded(b, mine):
            out.append(f"{name}: vLLM {b.cls} (K/H, N/I, tp, scheme, experts) {theirs}, "
                       f"selector {mine}")
        if b.experts and routing != b.routing:
            out.append(f"{name}: vLLM routes {b.routing}, selector's layer.routing {routing}")
    for name, b in v.modules.items():
        if name not in s.modules and b.scheme != model_shapes.UNQUANTIZED:
            out.append(f"{name}: vLLM quantizes this {b.cls} ({b.scheme}); selector does not "
                       "plan it")
    return out


def padded(b: model_shapes.Built, mine: Tuple[Any, ...]) -> bool:
    """MXFP4 experts whose hidden and intermediate sizes vLLM pads for the kernel it picked
    (vLLM 0.32.0 fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size:
    to 128 / 256 for TRT-LLM, CUTLASS, Marlin, DeepGEMM, the intermediate size to 64 otherwise;
    called by
    quantization/mxfp4.py Mxfp4MoEMethod.create_weights): the kernel's padding, chosen after the
    backend, not the per-GPU sizes the backend is chosen for."""
    k, n, tp, scheme, experts = mine
    if b.experts is None or not scheme.startswith("mxfp4") or (b.tp, b.scheme, b.experts[0]) \
            != (tp, scheme, experts):
        return False
    # the default branch (Triton's kernels, e.g. on SM 9.0) rounds the intermediate size up
    # to 64 and keeps the hidden size
    return any(b.k == -(-k // a) * a and b.n == -(-n // c) * c for a in (1, 128, 256)
               for c in (32, 64, 128)) and (b.k, b.n) != (k, n)


# ---------------------------------------------------------------------------------------------
# Architectures beyond the corpus: config.json keys of the public checkpoints (Hugging Face
# model cards), block-FP8 as their FP8 exports write it

FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
             "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}
MORE: Dict[str, Dict[str, Any]] = {
    # mistralai/Mixtral-8x7B-Instruct-v0.1
    "mixtral-8x7b-fp8": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                         "hidden_size": 4096, "intermediate_size": 14336,
                         "num_hidden_layers": 32, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "num_local_experts": 8,
                         "num_experts_per_tok": 2, "vocab_size": 32000, "hidden_act": "silu",
                         "torch_dtype": "bfloat16"},
    # zai-org/GLM-4.5-Air-FP8
    "glm-4.5-air-fp8": {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
                        "hidden_size": 4096, "intermediate_size": 10944,
                        "moe_intermediate_size": 1408, "num_hidden_layers": 46,
                        "first_k_dense_replace": 1, "num_attention_heads": 96,
                        "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 128,
                        "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1,
                        "topk_group": 1, "vocab_size": 151552, "partial_rotary_factor": 0.5,
                        "attention_bias": True, "hidden_act": "silu", "norm_topk_prob": True,
                        "torch_dtype": "bfloat16"},
    # MiniMaxAI/MiniMax-M2
    "minimax-m2-fp8": {"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
                       "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
                       "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
                       "num_local_experts": 256, "num_experts_per_tok": 8,
                       "vocab_size": 200064, "hidden_act": "silu", "rotary_dim": 64,
                       "use_qk_norm": True, "qk_norm_type": "per_layer",
                       "scoring_func": "sigmoid", "use_routing_bias": True,
                       "torch_dtype": "bfloat16"},
    # Qwen/Qwen3-235B-A22B-FP8: the routers (mlp.gate) are FP8 too
    "qwen3-235b-a22b-fp8": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                            "hidden_size": 4096, "intermediate_size": 12288,
                            "moe_intermediate_size": 1536, "num_hidden_layers": 94,
                            "num_attention_heads": 64, "num_key_value_heads": 4,
                            "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                            "vocab_size": 151936, "hidden_act": "silu",
                            "decoder_sparse_step": 1, "mlp_only_layers": [],
                            "torch_dtype": "bfloat16"},
    # Qwen/Qwen3-Next-80B-A3B-Instruct-FP8: hybrid Gated DeltaNet / gated attention layers
    # (full_attention_interval 4), 512 experts and a shared expert
    "qwen3-next-80b-a3b-fp8": {"architectures": ["Qwen3NextForCausalLM"],
                               "model_type": "qwen3_next", "hidden_size": 2048,
                               "intermediate_size": 5120, "moe_intermediate_size": 512,
                               "shared_expert_intermediate_size": 512, "num_hidden_layers": 48,
                               "full_attention_interval": 4, "num_attention_heads": 16,
                               "num_key_value_heads": 2, "head_dim": 256,
                               "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                               "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                               "linear_num_value_heads": 32, "num_experts": 512,
                               "num_experts_per_tok": 10, "decoder_sparse_step": 1,
                               "mlp_only_layers": [], "norm_topk_prob": True,
                               "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                               "max_position_embeddings": 262144, "vocab_size": 151936,
                               "hidden_act": "silu", "tie_word_embeddings": False,
                               "torch_dtype": "bfloat16"},
    # deepseek-ai/DeepSeek-V3.2-Exp: DeepSeek-V3 plus the sparse-attention indexer
    "deepseek-v3.2-exp-fp8": {"architectures": ["DeepseekV32ForCausalLM"],
                              "model_type": "deepseek_v32", "hidden_size": 7168,
                              "intermediate_size": 18432, "moe_intermediate_size": 2048,
                              "num_hidden_layers": 61, "first_k_dense_replace": 3,
                              "moe_layer_freq": 1, "n_routed_experts": 256,
                              "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8,
                              "topk_group": 4, "topk_method": "noaux_tc",
                              "scoring_func": "sigmoid", "norm_topk_prob": True,
                              "routed_scaling_factor": 2.5, "num_attention_heads": 128,
                              "num_key_value_heads": 128, "q_lora_rank": 1536,
                              "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                              "qk_nope_head_dim": 128, "v_head_dim": 128,
                              "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048,
                              "vocab_size": 129280, "hidden_act": "silu",
                              "max_position_embeddings": 163840, "rope_theta": 10000,
                              "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                               "mscale": 1.0, "mscale_all_dim": 1.0,
                                               "original_max_position_embeddings": 4096,
                                               "type": "yarn"},
                              "torch_dtype": "bfloat16"},
}


def _not_converted(name: str, c: Dict[str, Any]) -> List[str]:
    """modules_to_not_convert as the FP8 exports write it: lm_head, and for Qwen3-Next each
    layer's in_proj_ba (vLLM's block-FP8 cannot split it: qwen_gdn_linear_attn.py "ba_proj
    doesn't support blockwise fp8 quantization"), router and shared-expert gate."""
    if not name.startswith("qwen3-next"):
        return ["lm_head"]
    return ["lm_head"] + [f"model.layers.{i}.{m}" for i in range(c["num_hidden_layers"])
                          for m in ("linear_attn.in_proj_ba", "mlp.gate",
                                    "mlp.shared_expert_gate")]


def more_entries() -> Dict[str, Any]:
    """name -> (config.json with its block-FP8 quantization_config, None)."""
    return {n: ({**c, "quantization_config": {**FP8_BLOCK, "modules_to_not_convert":
                                              _not_converted(n, c)}}, None)
            for n, c in MORE.items()}


# ---------------------------------------------------------------------------------------------
# Random cases: a corpus checkpoint cut to a few layers, sizes changed, parallel sizes drawn

TPS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)


def _layers_kept(c: Dict[str, Any]) -> int:
    """Enough layers for every layer type the architecture has."""
    pattern = c.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return max(pattern.index(ch) for ch in set(pattern)) + 1
    n = int(c.get("first_k_dense_replace") or 0) + 2
    if c.get("model_type") == "qwen3_next":  # a full-attention layer too
        n = max(n, int(c.get("full_attention_interval") or 4))
    if c.get("mlp_only_layers"):
        n = max(n, max(c["mlp_only_layers"]) + 2)
    return min(n, int(c.get("num_hidden_layers", n)))


def shortened(config: Dict[str, Any], rng: random.Random) -> Dict[str, Any]:
    c = copy.deepcopy(config)
    n = _layers_kept(c)
    old = int(c.get("num_hidden_layers") or n)
    for k, v in list(c.items()):  # per-layer lists (gpt-oss layer_types, the Nemotron pattern)
        if isinstance(v, (list, str)) and len(v) == old and k != "architectures":
            c[k] = v[:n]
    c["num_hidden_layers"] = n
    heads = c.get("num_attention_heads")
    if isinstance(heads, int) and "num_key_value_heads" in c and rng.random() < 0.5:
        c["num_key_value_heads"] = rng.choice([h for h in (1, 2, 4, 8, 16) if heads % h == 0])
    for key in ("moe_intermediate_size", "intermediate_size"):
        if key in c and rng.random() < 0.3:
            c[key] = rng.choice((768, 1408, 1536, 2048, 2880, 3072, 1344))
    return c


def random_cases(rng: random.Random, names: List[str], n: int
                 ) -> List[Tuple[str, Any, int, int, bool]]:
    """(corpus name, (changed config.json, hf_quant_config.json), tp, dp, ep) x n."""
    import checkpoint_corpus as corpus
    more = more_entries()
    out = []
    for _ in range(n):
        name = rng.choice(names + sorted(more))
        config, hf = more[name] if name in more else corpus.read(corpus.HERE / name)
        tp = rng.choice(TPS)
        dp = rng.choice((1, 1, 2, 3, 4))
        ep = rng.random() < 0.5 and tp * dp > 1
        out.append((name, (shortened(config, rng), hf), tp, dp, ep))
    return out
