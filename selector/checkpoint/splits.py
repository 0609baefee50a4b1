"""What vLLM refuses (or changes) of a module's per-GPU sizes under its quant scheme: the
block-FP8, MXFP8 and NVFP4 weight checks of vLLM's quant methods' create_weights, and the FP8
MoE block refinement."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.arch import Module


FP8_BLOCK_SOURCE = ("vLLM 0.32.0 vllm/model_executor/layers/quantization/utils/fp8_utils.py "
                    "(validate_fp8_block_shape{})")


def refined_block(m: Module, scheme: Optional[str], refines: bool) -> int:
    """The finer FP8 block vLLM's Fp8MoEMethod (quant_method fp8, ModelOpt FP8_PB_WO; not
    compressed-tensors, `refines` False) gives 128x128 block experts whose per-GPU
    intermediate size the block does not divide: gcd(128, intermediate, hidden) when >= 32
    (vLLM 0.32.0 fused_moe/oracle/fp8.py refine_fp8_moe_block_shape); 0: none."""
    import math
    f = dict(m.fields)
    if scheme != "fp8_block" or f["op"] != "moe" or not refines:
        return 0
    inter = f["intermediate_size"]
    if inter % 128 == 0:
        return 0
    r = math.gcd(128, inter, f["hidden_size"])
    return r if r >= 32 else 0


MODELOPT_PB_WO_SOURCE = ("vLLM 0.32.0 vllm/model_executor/layers/quantization/modelopt.py:2232 "
                         "(KFp8Block128.create_weights: FP8_PB_WO requires in divisible by 128)")

REFINED = ("vLLM refines the 128x128 FP8 blocks of these experts to {r}x{r} for the per-GPU "
           "intermediate size {i} (vLLM 0.32.0 fused_moe/oracle/fp8.py "
           "refine_fp8_moe_block_shape): a block shape without a layer.quant value; only "
           "Triton-based kernels take it")


SGLANG_MOE_SOURCE = ("SGLang 0.5.23 srt/layers/quantization/fp8.py:1588 "
                     "(Fp8MoEMethod.create_fp8_moe_weight_); compressed_tensors/schemes/"
                     "compressed_tensors_w8a8_fp8_moe.py:109")
SGLANG_LINEAR_SOURCE = ("SGLang 0.5.23 srt/layers/quantization/fp8.py:593-609 "
                        "(Fp8LinearMethod.validate_block_quant_shapes)")


# fused modules SGLang builds as one ReplicatedLinear (a single output partition, not split over
# TP ranks): validate_block_quant_shapes checks neither their parts nor their width. DeepSeek's
# fused_qkv_a_proj (q_lora_rank + kv_lora_rank + qk_rope_head_dim: 1536 + 576 in DeepSeek-V3),
# which vLLM builds as a merged layer of two partitions.
SGLANG_REPLICATED = {"fused_qkv_a_proj": (
    "SGLang 0.5.23 srt/models/deepseek_v2.py:2070-2076 (fused_qkv_a_proj_with_mqa = "
    "ReplicatedLinear); layers/linear.py:325-333 (ReplicatedLinear.create_weights: one output "
    "partition)")}


def sglang_problems(m: Module, scheme: Optional[str], fmt: str = "") -> Tuple[str, ...]:
    """What SGLang refuses of a block-FP8 module's per-GPU sizes: its FP8 MoE methods (Fp8Config
    and compressed-tensors) raise ValueError when block_n does not divide the per-GPU
    intermediate size (and block_k, with MoE TP > 1), with no block refinement; its FP8 linear
    method checks every output partition of a split or fused layer, with no exception for fused
    layers. ModelOpt's FP8 is per-tensor in SGLang: not checked here."""
    if scheme != "fp8_block" or fmt == "ModelOpt":
        return ()
    block_n = block_k = 128
    f = dict(m.fields)
    if f["op"] == "moe":
        inter, tp = f["intermediate_size"], f.get("tp_size", 1)
        if inter % block_n or (tp > 1 and inter % block_k):
            return (f"intermediate_size {inter} on one GPU is not divisible by the FP8 block_n "
                    f"{block_n}: SGLang refuses to load it (ValueError; it has no block "
                    f"refinement) ({SGLANG_MOE_SOURCE})",)
        return ()
    k_rank, layer_tp = f["hidden_size"], f.get("tp_size", 1)
    k, n = m.whole
    out = []
    if layer_tp > 1 and k // k_rank == layer_tp and k_rank % block_k:
        out.append(f"K {k_rank} on one GPU is not divisible by the FP8 block_k {block_k}: "
                   f"SGLang refuses to load it ({SGLANG_LINEAR_SOURCE})")
    parts = m.parts or (f["intermediate_size"],)
    if m.projection in SGLANG_REPLICATED:  # one output partition in SGLang's model
        parts = (sum(parts),)
    if (layer_tp > 1 and n // max(1, sum(parts)) == layer_tp) or len(parts) > 1:
        bad = [p for p in parts if p % block_n]
        if bad:
            out.append(f"output partition {bad[0]} on one GPU is not divisible by the FP8 "
                       f"block_n {block_n}: SGLang refuses to load it ({SGLANG_LINEAR_SOURCE})")
    return tuple(out)


def scheme_problems(m: Module, scheme: Optional[str], tp: int,
                    refined: int = 0, fmt: str = "") -> Tuple[str, ...]:
    """What vLLM refuses of a module's per-GPU sizes under its quant scheme: a 128x128
    block-FP8 layer whose split is not a multiple of the block (vLLM's FP8 linear and MoE
    methods call validate_fp8_block_shape / validate_fp8_block_shape_moe in create_weights).
    `tp` is the tensor-parallel size of the engine (the MoE check reads it)."""
    if scheme == "mxfp8" and fmt == "ModelOpt" and dict(m.fields)["op"] == "moe" and \
            dict(m.fields)["intermediate_size"] % 32:
        return (f"intermediate_size {dict(m.fields)['intermediate_size']} on one GPU is not "
                "a multiple of the MXFP8 block 32: vLLM refuses to load it (vLLM 0.32.0 "
                "vllm/model_executor/layers/quantization/modelopt.py "
                "(ModelOptMxFp8FusedMoE.create_weights))",)
    if scheme in ("nvfp4", "nvfp4_w4a16") and fmt == "ModelOpt" and \
            dict(m.fields)["op"] == "linear" and dict(m.fields)["hidden_size"] % 16:
        return (f"K {dict(m.fields)['hidden_size']} on one GPU is not a multiple of 16: vLLM "
                "refuses to load the NVFP4 weights (vLLM 0.32.0 vllm/model_executor/layers/"
                "quantization/modelopt.py (KNvfp4Static.create_weights: in features size is "
                "not multiple of 16))",)
    if scheme != "fp8_block":
        return ()
    block_n, block_k = 128, 128
    f = dict(m.fields)
    if f["op"] == "moe":
        inter = f["intermediate_size"]
        if (inter % block_n or (tp > 1 and inter % block_k)) and not refined:
            return (f"intermediate_size {inter} on one GPU is not a multiple of the FP8 block "
                    f"{block_n}: vLLM refuses to load it "
                    f"({FP8_BLOCK_SOURCE.format('_moe')})",)
        return ()
    k_rank, layer_tp = f["hidden_size"], f.get("tp_size", 1)
    k, n = m.whole
    out = []
    if fmt == "ModelOpt":
        # ModelOpt FP8_PB_WO linear layers (ModelOptLinearMethod with KFp8Block128) check the
        # input features each GPU holds, split or replicated (a replicated shared-expert
        # down_proj of 1344 too), and pad a partial last output block (_Fp8PbWoPartialBlock):
        # validate_fp8_block_shape is not called
        if k_rank % block_k:
            out.append(f"K {k_rank} on one GPU is not a multiple of the FP8 block {block_k}: "
                       f"vLLM refuses to load it ({MODELOPT_PB_WO_SOURCE})")
        return tuple(out)
    if layer_tp > 1 and k // k_rank == layer_tp and k_rank % block_k:
        out.append(f"K {k_rank} on one GPU is not a multiple of the FP8 block {block_k}: vLLM "
                   f"refuses to load it ({FP8_BLOCK_SOURCE.format('')})")
    parts = m.parts or (f["intermediate_size"],)
    if fmt == "FP8" and len(parts) > 1 and any(p % block_n for p in parts) and \
            m.cls != "ReplicatedLinear":
        # vLLM 0.32.0 linear.py ColumnParallelLinear._maybe_allow_fp8_block_shape_mismatch: a
        # fused layer of Fp8Config (it has weight_block_size) with a partition off the block
        # skips validate_fp8_block_shape altogether
        return ()
    tp_split = layer_tp > 1 and n // max(1, sum(parts)) == layer_tp
    if tp_split or len(parts) > 1:
        checked = parts if tp_split else parts[:-1]
        bad = [p for p in checked if p % block_n]
        if bad:
            out.append(f"output partition {bad[0]} on one GPU is not a multiple of the FP8 "
                       f"block {block_n}: vLLM refuses to load it "
                       f"({FP8_BLOCK_SOURCE.format('')})")
    return tuple(out)
