"""The checkpoint reader's words and split rules in TensorRT-LLM's (issue 45): an `engine=trtllm`
plan applies TensorRT-LLM's own block-FP8 MoE check (no block refinement: that is vLLM's) and says
a refusal, why or note the reader words after vLLM's code with TensorRT-LLM's source where its code
makes the same check, else as selector's own rule, so that a TensorRT-LLM plan never names vLLM.

TensorRT-LLM cannot be installed here (its PyPI package is a stub); the sources below are read from
NVIDIA/TensorRT-LLM main."""
from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Optional, Tuple

from selector.checkpoint.modules import DIVIDE, HEADS

if TYPE_CHECKING:  # pragma: no cover
    from selector.checkpoint.arch import Module
    from selector.checkpoint.quant.common import Quantization, Verdict

FP8_QUANT_BLOCK_SIZE = 128
# DeepSeekFP8BlockScalesFusedMoEMethod (FP8_QUANT_BLOCK_SIZE = 128; its DeepGEMM subclass
# DeepSeekFP8BlockScalesFusedMoEMethodDeepGemm inherits the loader) asserts, loading the per-expert
# w1/w3 block scales of a checkpoint (MoEWeightLoadingMode.VANILLA: Qwen3-MoE, DeepSeek), that
# the per-rank intermediate size is a multiple of the block; it has no block refinement
TRTLLM_MOE_SOURCE = ("TensorRT-LLM tensorrt_llm/_torch/modules/fused_moe/quantization.py "
                     "(DeepSeekFP8BlockScalesFusedMoEMethod.load_expert_all_weight_scale_fp8_"
                     "block_scale: assert intermediate_size_per_partition % FP8_QUANT_BLOCK_SIZE "
                     "== 0)")
SELECTOR_RULE = ("selector refuses it (a rule of selector's checkpoint reader, selector/checkpoint/"
                 "splits.py; TensorRT-LLM's own check here is not modelled)")


def trtllm_problems(m: Module, scheme: Optional[str]) -> Tuple[str, ...]:
    """What TensorRT-LLM refuses of a block-FP8 MoE module's per-GPU sizes: the per-rank
    intermediate size (moe_tp_size splits it; EP does not) not a multiple of 128 fails the
    loader's assert. Linear layers: (); the plan keeps the reader's own split rules for them."""
    if scheme != "fp8_block":
        return ()
    f = dict(m.fields)
    if f["op"] != "moe":
        return ()
    inter = f["intermediate_size"]
    if inter % FP8_QUANT_BLOCK_SIZE:
        return (f"intermediate_size {inter} on one GPU is not a multiple of the FP8 block "
                f"{FP8_QUANT_BLOCK_SIZE}: TensorRT-LLM refuses to load it (AssertionError; it "
                f"has no block refinement) ({TRTLLM_MOE_SOURCE})",)
    return ()


# ModelOpt FP8_PB_WO: vLLM builds a uniform checkpoint's experts with ModelOptFp8MoEMethod
# (per-tensor FP8, the reader's verdict and warning); TensorRT-LLM canonicalizes the algo to
# FP8_BLOCK_SCALES for the whole model, so its experts are block FP8
# (DeepSeekFP8BlockScalesFusedMoEMethod)
PB_WO_SOURCE = ("TensorRT-LLM tensorrt_llm/quantization/modelopt_config.py "
                "(parse_modelopt_quant_config: 'Canonicalize the fp8_pb_wo alias' to "
                "FP8_BLOCK_SCALES); tensorrt_llm/_torch/model_config.py (the model's one "
                "quant_algo, experts included)")


def trtllm_verdict(m: Module, v: Verdict, quant: Quantization) -> Verdict:
    """The reader's verdict of one module as TensorRT-LLM builds it where its reading differs
    from vLLM's: a uniform ModelOpt FP8_PB_WO checkpoint's experts are block FP8."""
    if m.cls == "RoutedExperts" and quant.format == "ModelOpt" and \
            quant.algo.upper() == "FP8_PB_WO" and v.scheme == "fp8_tensor":
        return dataclasses.replace(
            v, scheme="fp8_block", warning=None,
            why=f"{v.why}: TensorRT-LLM reads FP8_PB_WO as FP8_BLOCK_SCALES for every layer, "
                f"its experts too ({PB_WO_SOURCE})")
    return v


# the reader's words about vLLM's classes and checks, as TensorRT-LLM's code says the same or as
# selector's own rule
_LM_HEAD = ("TensorRT-LLM builds the LM head without the quantization config (TensorRT-LLM "
            "tensorrt_llm/_torch/models/modeling_utils.py DecoderModelForCausalLM.__init__: "
            "LMHead(vocab_size, hidden_size, ...) with no quant_config, 'lm_head Linear will not "
            "accept QuantConfig')")
_TRTLLM_TEXTS = (
    (DIVIDE, "selector's checkpoint reader (selector/checkpoint/modules.py: a split must divide "
             "evenly; TensorRT-LLM's own check is not modelled)"),
    (HEADS, "selector's checkpoint reader (selector/checkpoint/modules.py: the attention heads "
            "must divide by the tensor-parallel size; TensorRT-LLM's own check is not "
            "modelled)"),
    ("the LM head (vLLM's Fp8Config quantizes LinearBase and RoutedExperts layers only)",
     _LM_HEAD),
    ("vLLM's MXFP4 config leaves linear layers unquantized (mxfp4.py Mxfp4Config."
     "get_quant_method)",
     "the checkpoint's MXFP4 config quantizes its experts only (selector's checkpoint reader, "
     "selector/checkpoint/quant/fp8.py)"),
    ("vLLM builds the LM head without the quantization config (vLLM 0.32.0 "
     "vllm/model_executor/models/gpt_oss.py GptOssForCausalLM.__init__: "
     "ParallelLMHead(vocab_size, hidden_size, prefix=...))", _LM_HEAD),
    ("vLLM reads config.json's, and so does this plan",
     "TensorRT-LLM reads hf_quant_config.json's (tensorrt_llm/_torch/model_config.py "
     "ModelConfig.from_pretrained: the file is authoritative, a differing config.json only "
     "warns); this plan reads config.json's, as selector's reader does: it is not the "
     "quantization TensorRT-LLM runs"),
    ("(vLLM gpt_oss.py passes activation='swigluoai' and no separate swiglu_limit)",
     "(the checkpoint reader's model of gpt-oss's experts, swigluoai)"),
)
# a refusal of vLLM's that TensorRT-LLM's code has not been shown to make, with its vLLM source:
# said as selector's rule, the source being selector's reader
_VLLM_REFUSES = re.compile(r"vLLM (?:refuses (?:to start|to load it|to load the [\w ]+ weights|"
                           r"this checkpoint)|would refuse)(?: \(vLLM [^()]*(?:\([^()]*\)[^()]*)*"
                           r"\))?")


def trtllm_wording(problem: str) -> str:
    """A reader's refusal, why or note (vLLM's words and source) in TensorRT-LLM's, where
    TensorRT-LLM's code makes the same check or choice; else said as selector's own rule."""
    for vllm, trtllm in _TRTLLM_TEXTS:
        problem = problem.replace(vllm, trtllm)
    return _VLLM_REFUSES.sub(SELECTOR_RULE, problem)


READ_ORDER = ("TensorRT-LLM's order: hf_quant_config.json, then config.json quantization_config: "
              "TensorRT-LLM tensorrt_llm/_torch/model_config.py ModelConfig.from_pretrained")

__all__ = ["READ_ORDER", "TRTLLM_MOE_SOURCE", "trtllm_problems", "trtllm_verdict",
           "trtllm_wording"]
