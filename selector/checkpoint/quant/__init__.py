"""A checkpoint's quantization description: which scheme vLLM builds for each module.

Which file: config.json's `quantization_config` first, then `hf_quant_config.json` (vLLM
transformers_utils/config.py get_config: "ModelOpt 0.31.0 and after saves the quantization
config in the model config file"); both present and contradicting gives a warning.

Each scheme is what vLLM 0.32.0's quantization config answers for the module's vLLM prefix,
named by selector's `layer.quant` vocabulary (schema.QUANT_SCHEMES: nvfp4, nvfp4_w4a16,
fp8_tensor, fp8_tensor_dynamic, fp8_channel, fp8_block, mxfp8, mxfp4, mxfp4_w4a4 ...):
ModelOpt (modelopt.py: `ModelOptQuantConfigBase.is_layer_excluded`, `get_quant_method`, the
`apply_vllm_mapper` split of `name*` patterns; `resolve` for each algo's QuantKey pair;
MIXED_PRECISION `_resolve_quant_algo`), compressed-tensors (compressed_tensors.py
`get_scheme_dict`, `_get_scheme_from_parts`, utils.py `should_ignore_layer`,
`find_matched_target`; compressed_tensors_moe.py `get_moe_method` for routed experts), FP8
(fp8.py `Fp8Config.from_config`, `get_quant_method`, quant_utils.py `is_layer_skipped`) and
MXFP4 (mxfp4.py `Mxfp4Config`, `GptOssMxfp4Config`). These are ports of that code, proven module
by module against it by tests/vllm/test_checkpoint_differential.py.
`re:` patterns run under a structural bound (no nested or alternated repetition, few repeats,
bounded length), so that a hostile pattern is refused by name instead of backtracking for ever.
"""
from __future__ import annotations

from selector.checkpoint.quant.common import (
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    MAX_REGEX_REPEATS,
    NVFP4_SCHEMES,
    Quantization,
    Verdict,
    _patterns,
    _star_split,
    bounded_regex,
    map_name,
)
from selector.checkpoint.quant.compressed_tensors import (
    CT_SOURCE,
    CtArgs,
    CtScheme,
    _ct_args,
    _ct_ignored,
    _ct_is_nvfp4,
    _ct_match,
    _ct_scheme,
    _ct_target,
)
from selector.checkpoint.quant.fp8 import FP8_SOURCE, MXFP4_SOURCE, fp8_block_size
from selector.checkpoint.quant.modelopt import (
    MODELOPT_SOURCE,
    _disagree,
    _is_layer_skipped,
    _modelopt_excluded,
    _resolve_quant_algo,
    _vision,
)
from selector.checkpoint.quant.reader import _method, read_quantization

__all__ = ["CT_SOURCE", "FP8_SOURCE", "MAX_PATTERNS", "MAX_PATTERN_CHARS", "MAX_REGEX_REPEATS",
           "MODELOPT_SOURCE", "MXFP4_SOURCE", "NVFP4_SCHEMES", "CtArgs", "CtScheme",
           "Quantization", "Verdict", "_ct_args", "_ct_ignored", "_ct_is_nvfp4", "_ct_match",
           "_ct_scheme", "_ct_target", "_disagree", "_is_layer_skipped", "_method",
           "_modelopt_excluded", "_patterns", "_resolve_quant_algo", "_star_split", "_vision",
           "bounded_regex", "fp8_block_size", "map_name", "read_quantization"]
