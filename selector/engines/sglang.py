"""selector for SGLang: a decision (made with `engine=sglang`) as SGLang server arguments.

SGLang picks one MoE runner, one FP4 GEMM and one FP8 GEMM backend per server, so the arguments
come from the decisions for the model's MoE and linear layers (`explain --model DIR
engine=sglang` checks them across a whole checkpoint):

    sel = selector.load(overrides=["engine=sglang", "platform=auto"])
    args = server_args(sel.select(op="moe", ...), sel.select(op="linear", ...))
    # ['--moe-runner-backend', 'flashinfer_cutlass', '--fp4-gemm-backend', 'flashinfer_cutlass']

Importing this module imports nothing of SGLang.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from selector.core.errors import SelectorError

if TYPE_CHECKING:
    from selector.core.decision import Decision
    from selector.core.engine_view import EngineView

# The server_args fields the flags set (SGLang 0.5.23 srt/arg_groups/fields/exec_.py cli_name)
FIELDS = {"--moe-runner-backend": "moe_runner_backend",
          "--fp4-gemm-backend": "fp4_gemm_runner_backend",
          "--fp8-gemm-backend": "fp8_gemm_runner_backend"}


def _checked(decision: Decision) -> EngineView:
    view = decision.engine
    if view is None or view.name != "sglang":
        raise SelectorError("the decision was not made for SGLang: load selector with "
                            "overrides=['engine=sglang', ...]")
    if decision.selected is None:
        raise SelectorError(f"selector refuses this {decision.layer.op} layer: "
                            f"{decision.summary()}\n{decision}")
    return view


def server_args(*decisions: Decision) -> List[str]:
    """The command-line arguments that make SGLang run each decision's backend."""
    out: List[str] = []
    for d in decisions:
        out.extend(_checked(d).flags)
    return out


def server_kwargs(*decisions: Decision) -> Dict[str, str]:
    """The same as `ServerArgs(**kwargs)` keyword arguments."""
    args = server_args(*decisions)
    return {FIELDS[flag]: value for flag, value in zip(args[::2], args[1::2])}


def environment(*decisions: Decision) -> Dict[str, str]:
    """Environment variables the selected backends need (none for SGLang 0.5.23's names)."""
    env: Dict[str, str] = {}
    for d in decisions:
        env.update(_checked(d).env)
    return env


# ---------------------------------------------------------------------------------------------
# The launch plan's SGLang rules (conf/engine/sglang.yaml `launch.hooks`): what SGLang 0.5.23 runs
# with no --moe-runner-backend (its model overrides, its quantization constraints, then its quant
# method's create_moe_runner), what its quant methods run whatever is asked, and what it needs to
# start at all. tests/sglang runs SGLang's own code on the same inputs.

from selector.checkpoint.launchers import Auto, Launcher  # noqa: E402

SRC = "SGLang 0.5.23 python/sglang/srt/"
_OVERRIDES = {
    "qwen3": SRC + "arg_groups/model_overrides/qwen3_moe.py:38-90 (SM 10.x, quantization fp8, "
                   "modelopt_fp4 or none: flashinfer_trtllm)",
    "deepseek": SRC + "arg_groups/overrides.py:745-823 (the DeepSeek family on SM 10.x, quantization "
                      "fp8, modelopt_fp8, modelopt_fp4 or none: flashinfer_trtllm)",
    "gpt_oss": SRC + "arg_groups/model_overrides/gpt_oss.py:64-119 (MXFP4: flashinfer_mxfp4 on SM "
                     "10.x and 12.x, else triton_kernel without expert parallelism)",
}
_QWEN3 = ("Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration", "Qwen3NextForCausalLM",
          "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration")
_DEEPSEEK = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
             "MistralLarge3ForCausalLM", "GlmMoeDsaForCausalLM")  # overrides.py:745 (not Longcat)


def _quantization(plan: Any, scheme: str) -> str:
    """SGLang's `quantization` for the checkpoint (get_quantization_config)."""
    fmt = str(plan.quantization.format)
    if scheme == "mxfp8":  # `quant_method: mxfp8` (the reader holds it in the ModelOpt schema):
        # SGLang's own Fp8Config(use_mxfp8) reads it (layers/quantization/fp8.py:348), not
        # ModelOptFp8Config, which runs Triton for its experts (FIXED_MODELOPT_FP8)
        return "mxfp8"
    if fmt == "ModelOpt":
        return "modelopt_fp4" if scheme.startswith("nvfp4") else "modelopt_fp8"
    return {"FP8": "fp8", "MXFP4": "mxfp4", "compressed-tensors": "compressed-tensors"}.get(
        fmt, fmt.lower())


def auto_moe(sm: int, arch: str, quantization: str, scheme: str, ep: int,
             passed: bool = True) -> Tuple[str, str]:
    """SGLang 0.5.23's MoE runner for `--moe-runner-backend auto` (no a2a backend, CUDA):
    (the runner, why with its source). `passed`: the command line passes `--quantization`
    (a launch plan's command does not: SGLang's quantization constraints then see none, and
    the checkpoint's quantization reaches only the quant method)."""
    major = sm // 10
    if arch in _QWEN3 and major == 10 and quantization in ("fp8", "modelopt_fp4"):
        return "flashinfer_trtllm", _OVERRIDES["qwen3"]
    if arch in _DEEPSEEK and major == 10 and quantization in (
            "fp8", "modelopt_fp8", "modelopt_fp4"):
        return "flashinfer_trtllm", _OVERRIDES["deepseek"]
    if arch == "GptOssForCausalLM" and quantization == "mxfp4":
        if major in (10, 12):
            return "flashinfer_mxfp4", _OVERRIDES["gpt_oss"]
        if ep == 1:
            return "triton_kernel", _OVERRIDES["gpt_oss"]
    if passed and quantization == "modelopt_fp4" and major in (11, 12):
        return "flashinfer_cutlass", (SRC + "arg_groups/overrides.py:1513-1521 "
                                      "(_moe_runner_backend_quant_constraints: modelopt_fp4 on "
                                      "SM 11.x/12.x)")
    if quantization == "modelopt_fp4":
        return ("marlin" if 80 <= sm < 100 else "flashinfer_trtllm"), (
            SRC + "layers/quantization/modelopt_quant.py:3117-3123 "
            "(ModelOptNvFp4FusedMoEMethod.create_moe_runner: auto)")
    if quantization == "compressed-tensors" and scheme == "nvfp4":
        if sm < 100:  # W4A4 needs SM >= 10.0: served weight-only by FP4 Marlin
            return "marlin", CT_NVFP4_FALLBACK
        return "flashinfer_cutlass", FIXED_CT_NVFP4
    if scheme.startswith("fp8"):
        return "triton", (SRC + "layers/quantization/fp8.py:2961-2971 (Fp8MoEMethod."
                          "create_moe_runner: auto without a DeepEP a2a backend); "
                          "compressed_tensors_w8a8_fp8_moe.py:341-355; modelopt_quant.py:1343-1355")
    if scheme.startswith("mxfp4"):
        return "triton", (SRC + "layers/quantization/mxfp4.py:1443-1451 (Mxfp4MoEMethod."
                          "create_moe_runner: auto)")
    return "", ""


FLAG_OF = {"nvfp4": "fp4-gemm-backend", "nvfp4_w4a16": "fp4-gemm-backend",
           "fp8_block": "fp8-gemm-backend", "mxfp8": "fp8-gemm-backend"}
# FlashInfer's CuTe-DSL MXFP8 GEMM: mm_mxfp8's cute-dsl backend lists SM 100, 103 and 107
MXFP8_CUTEDSL_SMS = (100, 103, 107)


def auto_linear(sm: int, scheme: str, packages: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """SGLang 0.5.23's FP4 GEMM (NVFP4), block-FP8 and MXFP8 GEMM with their flag at `auto`
    (None: SGLang has none there, or selector does not model it)."""
    major = sm // 10
    if scheme in ("nvfp4", "nvfp4_w4a16"):
        name = ("flashinfer_cutedsl" if major == 10 else "marlin" if 80 <= sm < 100 else
                "flashinfer_cutlass")
        return name, SRC + "layers/quantization/fp4_utils.py:149-161 (initialize_fp4_gemm_config)"
    if scheme == "mxfp8":
        src = (SRC + "layers/quantization/fp8_utils.py:834-889 (resolve_mxfp8_dense_gemm_backend "
               "at auto: on Blackwell with FlashInfer its CuTe-DSL GEMM where mm_mxfp8 has it "
               "(SM 100/103/107), else its CUTLASS GEMM; else DeepGEMM where JIT DeepGEMM is on; "
               "else none); flashinfer-python gemm/gemm_base.py (_cute_dsl_gemm_mxfp8_requirement"
               ": SM 100, 103, 107)")
        if major in (10, 11, 12) and packages.get("flashinfer-python") is not None:
            return ("flashinfer_cutedsl" if sm in MXFP8_CUTEDSL_SMS else
                    "flashinfer_cutlass"), src
        if sm >= 90 and packages.get("sgl-deep-gemm") is not None:
            return "deep_gemm", src
        return None
    if scheme != "fp8_block":
        return None
    src = (SRC + "layers/quantization/fp8_utils.py:1207-1217 (initialize_fp8_gemm_config: "
           "auto is cutlass on SM 12.x, triton on SM 11.x), 1170-1186 (_dispatch_auto_backend: "
           "DeepGEMM when sgl-deep-gemm imports, FlashInfer's TRT-LLM GEMM on Blackwell, "
           "else Triton)")
    if major == 12:
        return "cutlass", src
    if major == 11:
        return "triton", src
    if sm >= 90 and packages.get("sgl-deep-gemm") is not None:
        return "deep_gemm", src
    if major == 10 and packages.get("flashinfer-python") is not None:
        return "flashinfer_trtllm", src
    return "triton", src


FIXED_CT_NVFP4 = (SRC + "layers/quantization/compressed_tensors/compressed_tensors.py:959-975 "
                  "(CompressedTensorsW4A4Nvfp4MoE runs FlashInfer's CUTLASS MoE whatever "
                  "--moe-runner-backend says)")
CT_NVFP4_FALLBACK = (SRC + "layers/quantization/compressed_tensors/compressed_tensors.py:962-975 "
                     "(below SM 10.0 an NVFP4 W4A4 MoE is served weight-only: "
                     "CompressedTensorsW4A16Nvfp4MoE, FP4 Marlin)")
FIXED_MODELOPT_FP8 = (SRC + "layers/quantization/modelopt_quant.py:1343-1367 "
                      "(ModelOptFp8MoEMethod.create_moe_runner: flashinfer_cutlass when asked; "
                      "flashinfer_trtllm when asked for a model that declares its routing "
                      "method; else Triton)")
# Architectures whose FusedMoE declares a routing method TopK hands to TRT-LLM's router
# (BYPASSED top-k, layers/moe/topk.py:613-650 _can_bypass_trtllm_routing): ModelOpt FP8 experts
# then run FlashInfer's TRT-LLM per-tensor FP8 MoE under --moe-runner-backend flashinfer_trtllm
# (modelopt_quant.py:1357-1363, 1378-1400); any other architecture's keep Triton
ROUTED = {"Qwen3MoeForCausalLM": SRC + "models/qwen3_moe.py:273 (RoutingMethodType.Renormalize)",
          "Glm4MoeForCausalLM": SRC + "models/glm4_moe.py:445 (RoutingMethodType.DeepSeekV3)",
          "DeepseekV3ForCausalLM": SRC + "models/deepseek_v2.py:762-763 "
                                   "(RoutingMethodType.DeepSeekV3)"}
START = (SRC + "layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a8_int8.py:30 "
         "(imports sgl_kernel unguarded, on SGLang's import path)")


class SglangLauncher(Launcher):
    """SGLang's automatic MoE runner beside selector's, the quant methods that ignore
    --moe-runner-backend, and the package SGLang does not start without."""

    def _sm(self, sel: Any) -> int:
        cap = sel.run_config.platform.capability
        return -1 if cap is None else cap[0] * 10 + cap[1]

    def fixed(self, sel: Any, plan: Any, group: Any) -> Optional[Tuple[str, str]]:
        if group.op != "moe":
            return None
        q = _quantization(plan, group.scheme)
        if q == "compressed-tensors" and group.scheme == "nvfp4" and self._sm(sel) >= 100:
            return "flashinfer_cutlass", FIXED_CT_NVFP4
        if q == "modelopt_fp8":
            # the runners the method honors; a refused request for one of them is refused (SGLang
            # builds it whatever selector says), any other request changes nothing
            honored = {"flashinfer_cutlass"} | (
                {"flashinfer_trtllm"} if plan.architecture.name in ROUTED else set())
            name = group.engine_backend
            if name in honored or (name is None and honored & set(
                    sel.run_config.policy.requested("moe"))):
                return None
            return "triton", FIXED_MODELOPT_FP8
        return None

    def automatic(self, sel: Any, plan: Any, group: Any) -> Optional[Auto]:
        sm = self._sm(sel)
        if sm < 0:
            return None
        if group.op == "linear":
            got = auto_linear(sm, group.scheme, dict(sel.run_config.platform.packages))
            return Auto((got[0],), f"--{FLAG_OF[group.scheme]} auto", got[1]) if got else None
        if group.op != "moe":
            return None
        name, why = auto_moe(sm, plan.architecture.name, _quantization(plan, group.scheme),
                             group.scheme, sel.run_config.parallel.ep, passed=False)
        if not name:
            return None
        return Auto((name,), "--moe-runner-backend auto", why)

    def start_problems(self, sel: Any) -> List[str]:
        pk = dict(sel.run_config.platform.packages)
        if pk.get("sglang-kernel") is not None or pk.get("sgl-kernel") is not None:
            return []
        return ["SGLang does not start without sglang-kernel (" + START + "): add "
                "stack=sglang_0_5_23 or platform.packages.sglang-kernel=VERSION"]


__all__ = ["server_args", "server_kwargs", "environment", "SglangLauncher", "auto_moe"]
