"""selector for TensorRT-LLM: its automatic MoE backend (`moe_config.backend: AUTO`) and its
launch plan (`trtllm-serve` with an `extra_llm_api_options` YAML).

TensorRT-LLM reads a backend choice from its LLM-API config (conf/engine/trtllm.yaml `choices`:
`moe_config.backend`, `nvfp4_gemm_config.allowed_backends`), not from flags. Its AUTO value is
resolved per model, SM and quant algorithm by `ModelConfig.resolve_moe_backend`; the rules below
transcribe it (tests/test_trtllm.py holds them to a scenario table). TensorRT-LLM cannot be
installed here (its PyPI package is a stub), so nothing of it is imported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from selector.checkpoint.launchers import Launcher

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.protocols import SelectorLike as Selector

RESOLVE_SOURCE = "TensorRT-LLM tensorrt_llm/_torch/model_config.py (ModelConfig.resolve_moe_backend)"
# selector's quant scheme -> TensorRT-LLM's QuantAlgo (tensorrt_llm/quantization/mode.py)
QUANT_ALGO = {"nvfp4": "NVFP4", "fp8_block": "FP8_BLOCK_SCALES", "fp8_tensor": "FP8",
              "fp8_channel": "FP8_PER_CHANNEL_PER_TOKEN", "mxfp4": "W4A16_MXFP4",
              "mxfp4_w4a8": "W4A8_MXFP4_MXFP8", "mxfp8": "MXFP8"}
SM_100F = (100, 103)  # is_sm_100f: the SM 10.0 family


def resolve_moe_backend(sm: int, quant_algo: Optional[str], architecture: str = "") -> str:
    """What `moe_config.backend: AUTO` becomes (ModelConfig.resolve_moe_backend): DeepSeek-V4
    on SM 100-119 TRTLLM; gpt-oss SM 100-119 TRTLLM, SM 90-99 TRITON, else CUTLASS; block FP8
    on SM 100f TRTLLM; everything else CUTLASS."""
    arch = architecture.lower()
    if "deepseekv4" in arch and 100 <= sm < 120:
        return "TRTLLM"
    if "gptoss" in arch:
        if 100 <= sm < 120:
            return "TRTLLM"
        return "TRITON" if 90 <= sm < 100 else "CUTLASS"
    if quant_algo == "FP8_BLOCK_SCALES" and sm in SM_100F:
        return "TRTLLM"
    return "CUTLASS"


class TrtllmLauncher(Launcher):
    """TensorRT-LLM's launch plan: the base's config file, and a note saying what AUTO would
    pick for each MoE group beside what the plan asks for."""

    def notes(self, sel: Selector, plan: Any, groups: Sequence[Any]) -> List[str]:
        cap = sel.run_config.platform.capability
        if cap is None:
            return []
        sm = cap[0] * 10 + cap[1]
        arch = plan.architecture.name
        for g in groups:
            if g.op != "moe" or g.decision is None or not g.planned:
                continue
            auto = resolve_moe_backend(sm, QUANT_ALGO.get(g.scheme), arch)
            asked = g.engine_backend or "no backend"
            return [f"moe_config.backend AUTO would resolve to {auto} for the {g.scheme} MoE "
                    f"layers on SM {sm} ({RESOLVE_SOURCE}); the plan asks for {asked}"
                    + ("" if auto == asked else ": pass it, AUTO picks otherwise")]
        return []

    def no_answer(self) -> str:
        return ("moe_config.backend is one value for every MoE layer: requantize the layers "
                "that refuse it")


__all__ = ["resolve_moe_backend", "TrtllmLauncher", "QUANT_ALGO"]
