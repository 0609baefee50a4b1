"""selector for TensorRT-LLM: its automatic MoE backend (`moe_config.backend: AUTO`) and its
launch plan (`trtllm-serve` with an `extra_llm_api_options` YAML).

TensorRT-LLM reads a backend choice from its LLM-API config (conf/engine/trtllm.yaml `choices`:
`moe_config.backend`, `nvfp4_gemm_config.allowed_backends`), not from flags. Its AUTO value is
resolved per model, SM and quant algorithm by `ModelConfig.resolve_moe_backend`; the rules below
transcribe it (tests/test_trtllm.py holds them to a scenario table). TensorRT-LLM cannot be
installed here (its PyPI package is a stub), so nothing of it is imported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

from packaging.version import Version

from selector.checkpoint.launchers import Auto, Launcher

if TYPE_CHECKING:  # pragma: no cover
    from selector.core.protocols import SelectorLike as Selector

RESOLVE_SOURCE = "TensorRT-LLM tensorrt_llm/_torch/model_config.py (ModelConfig.resolve_moe_backend)"
# selector's quant scheme -> TensorRT-LLM's QuantAlgo (tensorrt_llm/quantization/mode.py)
QUANT_ALGO = {"nvfp4": "NVFP4", "fp8_block": "FP8_BLOCK_SCALES", "fp8_tensor": "FP8",
              "fp8_channel": "FP8_PER_CHANNEL_PER_TOKEN", "mxfp4": "W4A16_MXFP4",
              "mxfp4_w4a8": "W4A8_MXFP4_MXFP8", "mxfp8": "MXFP8"}
SM_100F = (100, 103)  # is_sm_100f: the SM 10.0 family


# resolve_moe_backend's block-FP8 rule came with TensorRT-LLM PR #14282 (merged 2026-05-19),
# after the newest 1.2 release (1.2.1, tagged by 2026-04-16: tensorrtllm_backend PR #853): a
# 1.2 release runs CUTLASS there under AUTO
FP8_BLOCK_AUTO_SINCE = Version("1.3.0rc0")
FP8_BLOCK_AUTO_SOURCE = "TensorRT-LLM PR #14282 (resolve_moe_backend: FP8_BLOCK_SCALES on SM 100f)"


def resolve_moe_backend(sm: int, quant_algo: Optional[str], architecture: str = "",
                        version: Optional[Version] = None) -> str:
    """What `moe_config.backend: AUTO` becomes (ModelConfig.resolve_moe_backend): DeepSeek-V4
    on SM 100-119 TRTLLM; gpt-oss SM 100-119 TRTLLM, SM 90-99 TRITON, else CUTLASS; block FP8
    on SM 100f TRTLLM (main; not in a release before 1.3: `version`, None for main);
    everything else CUTLASS."""
    arch = architecture.lower()
    if "deepseekv4" in arch and 100 <= sm < 120:
        return "TRTLLM"
    if "gptoss" in arch:
        if 100 <= sm < 120:
            return "TRTLLM"
        return "TRITON" if 90 <= sm < 100 else "CUTLASS"
    if quant_algo == "FP8_BLOCK_SCALES" and sm in SM_100F and (
            version is None or version >= FP8_BLOCK_AUTO_SINCE):
        return "TRTLLM"
    return "CUTLASS"


# TensorRT-LLM 1.2's own ModelConfig.resolve_moe_backend is not read: the code index holds main's
# _torch/model_config.py only (one version), and the repository's history (2.5 GB) is more than
# the reading tools bring. AUTO itself came with TensorRT-LLM PR #11074 (opened 2026-01-28, after
# the 1.2 release candidates of late 2025, whose GPT-OSS deployment guide says "The default moe
# backend is CUTLASS"): whether a 1.2 release resolves AUTO as main does is not known, so under a
# 1.2 stack the plan shows main's rule and passes moe_config.backend all the same
RELEASE_1_2_UNREAD = ("TensorRT-LLM 1.2's own resolve_moe_backend is not modelled: its release "
                      "files were not read, main's were; AUTO came with TensorRT-LLM PR #11074, "
                      "and the 1.2.0rc2 GPT-OSS deployment guide gives CUTLASS as the default")
RELEASE_1_2_SOURCE = ("TensorRT-LLM PR #11074 (AUTO MoE backend selection); TensorRT-LLM "
                      "1.2.0rc2.post2 docs deployment-guide/deployment-guide-for-gpt-oss-on-"
                      "trtllm.html ('The default moe backend is CUTLASS')")


def release_1_2(version: Optional[Version]) -> bool:
    """A TensorRT-LLM release before main's 1.3 line (stack=trtllm_1_2); None: main."""
    return version is not None and version < FP8_BLOCK_AUTO_SINCE


# nvfp4_gemm_config.allowed_backends' default: the AutoTuner profiles each per token bucket
NVFP4_GEMM_DEFAULT = ("cutlass", "cublaslt", "cuda_core")
NVFP4_GEMM_SOURCE = ("TensorRT-LLM tensorrt_llm/llmapi/llm_args.py (nvfp4_gemm_config."
                     "allowed_backends default); _torch/custom_ops/torch_custom_ops.py (the "
                     "AutoTuner profiles the allowed backends per token bucket)")


FP8_BLOCK_LINEAR_SOURCE = ("TensorRT-LLM _torch/modules/linear.py (FP8BlockScalesLinearMethod."
                           "apply); cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp "
                           "(fp8_block_scaling_gemm: its SM switch)")


def fp8_block_linear(sm: int) -> Auto:
    """What a block-FP8 linear layer runs by default: FP8BlockScalesLinearMethod.apply calls
    DeepGEMM's fp8_swap_ab_gemm on SM 100f (unless the layer's use_cute_dsl_blockscaling_mm,
    an llm-api key, default false, or disable_deep_gemm is set), else
    torch.ops.trtllm.fp8_block_scaling_gemm, which has kernels for SM 89, 90 and 120 and raises
    on any other SM; off SM 100f no key chooses it. selector passes no key for it."""
    if sm in SM_100F:
        return Auto(("deep_gemm",), f"FP8BlockScalesLinearMethod on SM {sm}",
                    FP8_BLOCK_LINEAR_SOURCE)
    if sm in (89, 90, 120):
        return Auto(("fp8_block_scaling_gemm",), f"FP8BlockScalesLinearMethod on SM {sm}",
                    FP8_BLOCK_LINEAR_SOURCE)
    return Auto((), f"fp8_block_scaling_gemm has no SM {sm} kernel", FP8_BLOCK_LINEAR_SOURCE)


class TrtllmLauncher(Launcher):
    """TensorRT-LLM's launch plan: the base's config file; what `moe_config.backend: AUTO`
    and the NVFP4 GEMM autotuner run when the config file names no backend."""

    def automatic(self, sel: Selector, plan: Any, group: Any) -> Optional[Auto]:
        cap = sel.run_config.platform.capability
        sm = cap[0] * 10 + cap[1] if cap is not None else None
        if group.op == "linear":
            if group.scheme == "fp8_block" and sm is not None:
                return fp8_block_linear(sm)
            if group.scheme != "nvfp4":
                return None
            return Auto(NVFP4_GEMM_DEFAULT, "nvfp4_gemm_config's default list, autotuned",
                        NVFP4_GEMM_SOURCE, tuned=True)
        if sm is None:
            return None
        version = dict(sel.run_config.platform.packages).get("tensorrt-llm")
        algo = QUANT_ALGO.get(group.scheme)
        auto = resolve_moe_backend(sm, algo, plan.architecture.name, version)
        source, why = RESOLVE_SOURCE, f"moe_config.backend AUTO on SM {sm}"
        if algo == "FP8_BLOCK_SCALES" and sm in SM_100F:
            source += "; " + FP8_BLOCK_AUTO_SOURCE
            if auto != "TRTLLM":
                why += f" in TensorRT-LLM {version}, older than its block-FP8 TRTLLM rule"
        if release_1_2(version):  # main's rule shown; the key passed all the same
            return Auto((auto,), why + " (main's rule)", source, exact=False,
                        differs=f"{RELEASE_1_2_UNREAD}: {RELEASE_1_2_SOURCE}")
        return Auto((auto,), why, source)

    def notes(self, sel: Selector, plan: Any, groups: Any) -> List[str]:
        """Without a CUDA version: TensorRT-LLM's wheels bring their own CUDA build, so no rule
        of this plan is kept waiting on one; the stack presets name the CUDA each release ships."""
        platform = sel.run_config.platform
        version = dict(platform.packages).get("tensorrt-llm")
        out = [f"TensorRT-LLM {version} is planned with main's MoE rules (its own "
               "model_config.py and MoE files were not read): AUTO's choice and the CUTLASS "
               "leaves' SM sets are main's, so the plan passes moe_config.backend for every MoE "
               "group"] if release_1_2(version) and any(
                   g.op == "moe" and g.planned for g in groups) else []
        if platform.cuda is not None or platform.capability is None:
            return out
        return out + ["platform.cuda is not given: TensorRT-LLM's own kernels (its MoE leaves, "
                "nvfp4_gemm, fp8_block_scaling_gemm) are planned without it; stack=trtllm_main "
                "or stack=trtllm_1_2 sets the CUDA that release's wheel is built with "
                "(conf/stack/trtllm_*.yaml)"]

    def no_answer(self) -> str:
        return ("moe_config.backend is one value for every MoE layer: requantize the layers "
                "that refuse it")


__all__ = ["resolve_moe_backend", "fp8_block_linear", "TrtllmLauncher", "QUANT_ALGO",
           "NVFP4_GEMM_DEFAULT", "release_1_2"]
