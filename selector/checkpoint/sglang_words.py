"""The checkpoint reader's words in SGLang's (issue 45): a refusal, why or note the reader
words after vLLM's code, said with SGLang's source where SGLang's code makes the same check, else
as selector's own rule, so that an SGLang plan never says vLLM refuses."""
from __future__ import annotations

import re

from selector.checkpoint.modules import DIVIDE, HEADS

# vLLM's split refusals as SGLang words them, where SGLang's code makes the same check
_SGLANG_SPLITS = (
    (DIVIDE, "SGLang 0.5.23 srt/distributed/utils.py:68-78 (divide, ensure_divisibility)"),
    (HEADS, "SGLang 0.5.23 srt/models/llama.py:183, qwen3_moe.py:506 (the attention's "
            "total_num_heads % tp_size assert)"))
# the checkpoint reader's words about vLLM's classes, as SGLang's code says the same
_SGLANG_TEXTS = (
    ("the LM head (vLLM's Fp8Config quantizes LinearBase and RoutedExperts layers only)",
     "the LM head (SGLang 0.5.23 srt/layers/quantization/fp8.py:389-414: Fp8Config."
     "get_quant_method quantizes LinearBase and FusedMoE layers only)"),
    ("vLLM's MXFP4 config leaves linear layers unquantized (mxfp4.py Mxfp4Config."
     "get_quant_method)",
     "SGLang's MXFP4 config leaves linear layers unquantized (SGLang 0.5.23 srt/layers/"
     "quantization/mxfp4.py:356-372: Mxfp4Config.get_quant_method gives a LinearBase no "
     "method)"),
    ("vLLM builds the LM head without the quantization config (vLLM 0.32.0 "
     "vllm/model_executor/models/gpt_oss.py GptOssForCausalLM.__init__: "
     "ParallelLMHead(vocab_size, hidden_size, prefix=...))",
     "SGLang builds the LM head without the quantization config (SGLang 0.5.23 srt/models/"
     "gpt_oss.py:768-774: ParallelLMHead(..., prefix=...), its quant_config argument "
     "commented out)"),
    ("(vLLM gpt_oss.py passes activation='swigluoai' and no separate swiglu_limit)",
     "(the checkpoint reader's model of gpt-oss's experts, swigluoai)"),
)
# a refusal of vLLM's that SGLang's code has not been shown to make: said as selector's rule
_VLLM_REFUSES = re.compile(r"vLLM (refuses (?:to start|to load it|this checkpoint)|would refuse)")


def sglang_wording(problem: str) -> str:
    """A reader's refusal, why or note (vLLM's words and source) in SGLang's, where SGLang's
    code makes the same check or choice; else said as the reader's rule selector applies (its
    source stays vLLM's, named as the rule's origin): an SGLang plan never says vLLM refuses."""
    for vllm, sglang in _SGLANG_SPLITS:
        if vllm in problem:
            return problem.replace(vllm, sglang).replace("vLLM refuses", "SGLang refuses")
    for vllm, sglang in _SGLANG_TEXTS:
        problem = problem.replace(vllm, sglang)
    return _VLLM_REFUSES.sub("selector refuses it (a rule its checkpoint reader ports from "
                             "vLLM)", problem)


__all__ = ["sglang_wording"]
