"""Why a scenario differs: SGLang 0.5.23's source line for each class of difference.

`explain(row)` names the EXPLAINED entry that accounts for a difference, or None (unexplained).
Each entry says where SGLang's code makes the difference; a class that is selector's error is
fixed in the catalogue instead (conf/backend/*/NAME.yaml `engines: sglang:` rules) and has no
entry here.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

FP8 = ("fp8_block", "fp8_tensor", "fp8_channel")
S = "SGLang 0.5.23 python/sglang/srt/"
CT = "compressed-tensors"
CTQ = S + "layers/quantization/compressed_tensors/"


def _ct(*quants: str) -> Callable[[Any], bool]:
    return lambda r: r.scenario.format == CT and r.scenario.quant in quants


def _requested_status(row: Any) -> Optional[str]:
    """selector's verdict on the backend SGLang was asked for (None: not a candidate)."""
    for name in row.requested_backends:
        c = next((c for c in row.decision.candidates if c.backend == name), None)
        if c is not None:
            return c.status
    return None


def _auto(quant: str) -> Callable[[Any], bool]:
    def match(r: Any) -> bool:
        return r.scenario.requested == "auto" and r.scenario.quant == quant \
            and r.scenario.op == "moe" and r.runner is not None and r.honored
    return match


EXPLAINED: Dict[str, Tuple[str, str, Callable[[Any], bool]]] = {
    # -- the checkpoint format: selector's layer names the scheme, not the quant method that
    # SGLang reads it with (compressed-tensors against Fp8Config / ModelOptFp4Config)
    "ct-fp8-moe-no-runner": (
        CTQ + "schemes/compressed_tensors_w8a8_fp8_moe.py:356-365 (CompressedTensorsW8A8Fp8MoE."
        "create_moe_runner builds a MoeRunner for aiter, triton, flashinfer_trtllm and "
        "flashinfer_trtllm_routed only; any other --moe-runner-backend leaves self.runner unset "
        "and apply_weights fails at the first forward)",
        "a compressed-tensors FP8 MoE layer runs Triton or FlashInfer TRT-LLM only: the runner "
        "selector names for the scheme (Fp8MoEMethod's, e.g. deep_gemm or marlin) is not built",
        lambda r: _ct(*FP8)(r) and (r.runner is None or not r.honored)
        and "builds no MoeRunner" in ((r.follow or {}).get("error") or r.sglang.get("error")
                                      or "")),
    "ct-fp8-moe-auto": (
        CTQ + "schemes/compressed_tensors_w8a8_fp8_moe.py:346-354 (create_moe_runner: auto is "
        "triton, aiter on ROCm)",
        "SGLang's automatic compressed-tensors FP8 MoE runner is Triton; selector prints its "
        "choice as an explicit --moe-runner-backend",
        lambda r: _ct(*FP8)(r) and r.scenario.requested == "auto" and r.runner == "triton"
        and r.honored),
    "ct-nvfp4-moe-cutlass": (
        CTQ + "schemes/compressed_tensors_w4a4_nvfp4_moe.py:46 and 294-310 (CompressedTensorsW4A4"
        "Nvfp4MoE: flashinfer_trtllm when --moe-runner-backend is flashinfer_trtllm, else "
        "flashinfer_cutlass, whatever was asked); arg_groups/overrides.py:1513-1518 (the SM "
        "11.x/12.x flashinfer_cutlass override is modelopt_fp4's only)",
        "SGLang runs FlashInfer's CUTLASS MoE for a compressed-tensors NVFP4 layer unless asked "
        "for flashinfer_trtllm; selector names its ranked NVFP4 backend (ModelOpt's runners)",
        lambda r: _ct("nvfp4")(r) and float(r.scenario.capability) >= 10
        and (r.runner == "flashinfer_cutlass" or (r.follow or {}).get("runner")
             == "flashinfer_cutlass")),
    "ct-nvfp4-moe-marlin": (
        CTQ + "compressed_tensors.py:959-975 (get_moe_scheme: NVFP4A16, and W4A4 NVFP4 below SM "
        "10.0, become CompressedTensorsW4A16Nvfp4MoE); schemes/compressed_tensors_w4a16_nvfp4_moe"
        ".py:159-163 (create_moe_runner: MoeRunner(MARLIN) whatever was asked)",
        "SGLang serves a compressed-tensors weight-only NVFP4 MoE layer (and a W4A4 one below SM "
        "10.0) with FP4 Marlin, whatever --moe-runner-backend says; selector ranks the NVFP4 "
        "backends for the scheme",
        lambda r: (_ct("nvfp4_w4a16")(r) or (_ct("nvfp4")(r) and float(r.scenario.capability) < 10))
        and (r.runner == "marlin" or (r.follow or {}).get("runner") == "marlin")),
    "ct-fp8-tensor-linear-torch": (
        CTQ + "schemes/compressed_tensors_w8a8_fp8.py:148-163 (process_weights_after_loading: a "
        "TENSOR-strategy layer is requantized to one max scale) and layers/quantization/"
        "fp8_utils.py:2754 (apply_fp8_linear: per-tensor weight and activation scales run "
        "torch._scaled_mm)",
        "a compressed-tensors per-tensor FP8 linear layer runs torch._scaled_mm on every SM; "
        "selector names CUTLASS, which SGLang runs for an Fp8Config per-tensor checkpoint off "
        "SM 12.x (fp8.py:1200, its scales turned channelwise); neither takes a flag",
        lambda r: _ct("fp8_tensor")(r) and r.scenario.op == "linear"
        and r.runner == "torch_scaled_mm"
        and r.selector == "cutlass"),
    # -- a model's own override
    "gpt-oss-override": (
        S + "arg_groups/model_overrides/gpt_oss.py:64-73 (GptOssForCausalLM with an MXFP4 "
        "checkpoint and --moe-runner-backend auto: flashinfer_mxfp4 on SM100 and SM120) and "
        ":106-121 (else, EP 1 and triton_kernels importable: triton_kernel, read on the pristine "
        "server args, before the checkpoint's quantization is filled in)",
        "SGLang's gpt-oss override picks the MoE runner by SM for an MXFP4 gpt-oss checkpoint; "
        "selector, which decides the layer (MXFP4, swigluoai) and not the model, prints its own "
        "choice as an explicit --moe-runner-backend, which SGLang honors",
        lambda r: r.scenario.model == "gpt_oss" and r.scenario.requested == "auto"
        and r.runner in ("flashinfer_mxfp4", "triton_kernel") and r.honored),
    "fp8-substitutes-triton": (
        S + "layers/quantization/fp8.py (Fp8MoEMethod.create_moe_runner: flashinfer_cutlass and "
        "flashinfer_cutedsl have no FP8 MoE path and are replaced by triton, logged at info)",
        "SGLang runs Triton for an FP8 MoE layer asked for flashinfer_cutlass or "
        "flashinfer_cutedsl; selector refuses or picks by its own rules",
        lambda r: r.scenario.quant in FP8 and r.scenario.op == "moe"
        and r.scenario.requested in ("flashinfer_cutlass", "flashinfer_cutedsl")
        and r.runner == "triton"),
    "mxfp8-forced-trtllm": (
        S + "arg_groups/overrides.py (_moe_runner_backend_quant_constraints: --quantization mxfp8 "
        "takes only MXFP8_MOE_RUNNER_BACKEND_CHOICES; auto and any other value become "
        "flashinfer_trtllm, whatever the device)",
        "SGLang forces flashinfer_trtllm for MXFP8 MoE on every device; selector checks the "
        "device and FlashInfer",
        lambda r: r.scenario.quant == "mxfp8" and r.runner == "flashinfer_trtllm"),
    "fp8-linear-trtllm-gap": (
        S + "layers/quantization/fp8_utils.py (_dispatch_explicit_backend: --fp8-gemm-backend "
        "flashinfer_trtllm runs flashinfer_gemm_w8a8_block_fp8_linear_with_fallback, FlashInfer's "
        "TRT-LLM groupwise FP8 GEMM, on SM 10.x with FlashInfer)",
        "a gap of the catalogue: its linear flashinfer_trtllm implements mxfp8 and nvfp4, not "
        "fp8_block, so selector names another block-FP8 GEMM, which SGLang runs when given its "
        "flag (checked: honored)",
        lambda r: r.scenario.op == "linear" and r.scenario.requested == "flashinfer_trtllm"
        and r.runner == "flashinfer_trtllm" and r.honored),
    "built-unchecked": (
        S + "layers/moe/moe_runner/runner.py (MoeRunner.__init__ builds the runner core "
        "named, with no device, activation or library check) and the quant methods' "
        "create_moe_runner; fp8_utils.py (_dispatch_explicit_backend: deep_gemm checks only "
        "ENABLE_JIT_DEEPGEMM, which holds from SM 9.0 on)",
        "SGLang accepts the requested runner at start-up and fails later (weight processing or "
        "the first forward); selector refuses it with the failed rule",
        lambda r: r.scenario.requested != "auto" and r.runner == r.scenario.requested
        and _requested_status(r) == "rejected"),
    "built-not-implemented": (
        S + "layers/quantization/modelopt_quant.py, mxfp4.py, fp8.py (create_moe_runner builds "
        "MoeRunner(requested) for triton, marlin, deep_gemm, triton_kernel and the FlashInfer "
        "runners without asking whether the runner has a path for the method's scheme)",
        "SGLang builds the requested runner for a scheme the catalogue's backend of that name does "
        "not implement (a gap of the catalogue or a start-up SGLang does not refuse); selector "
        "hands the layer to automatic selection and prints that backend's flag",
        lambda r: r.scenario.requested != "auto" and r.runner == r.scenario.requested
        and _requested_status(r) in ("not_applicable", None)),
    "sglang-raises-selector-falls-back": (
        S + "layers/quantization/mxfp4.py, modelopt_quant.py, fp8.py (create_moe_runner raises "
        "NotImplementedError / AssertionError for a runner the method has no path for); "
        "fp8_utils.py (_dispatch_explicit_backend raises RuntimeError off its devices); "
        "selector hands a requested backend that does not fit the layer to automatic "
        "selection (vLLM #49076, #56832: a global backend flag must not crash other layers)",
        "SGLang refuses to start with this flag for this layer; selector refuses the requested "
        "backend (the failed rule) and names the backend that does fit",
        lambda r: r.runner is None and r.selector is not None
        and r.selector != r.scenario.requested and r.honored),
    "auto-fp8": (
        S + "layers/quantization/fp8.py (Fp8MoEMethod.create_moe_runner: auto is deep_gemm only "
        "with a DeepEP/Mooncake/NIXL exchange, else triton)",
        "SGLang's automatic FP8 MoE runner is Triton; selector ranks by measured/preferred "
        "order and prints its choice as an explicit --moe-runner-backend",
        lambda r: r.scenario.requested == "auto" and r.scenario.quant in FP8
        and r.scenario.op == "moe" and r.runner == "triton" and r.honored),
    "auto-mxfp4": (
        S + "layers/quantization/mxfp4.py (Mxfp4MoEMethod.create_moe_runner: auto is triton "
        "without --moe-runner-backend triton_kernel; model_overrides/gpt_oss.py picks "
        "flashinfer_mxfp4 for gpt-oss only)",
        "SGLang's automatic MXFP4 MoE runner (no model override) is Triton; selector prints its "
        "choice as an explicit --moe-runner-backend",
        _auto("mxfp4")),
    "auto-nvfp4": (
        S + "layers/quantization/modelopt_quant.py (ModelOptNvFp4FusedMoEMethod."
        "create_moe_runner: auto is marlin on 8.0 <= cc < 10.0, else flashinfer_trtllm); "
        "arg_groups/overrides.py (_moe_runner_backend_quant_constraints: flashinfer_cutlass on "
        "SM 11.x and 12.x), neither checking that FlashInfer is installed",
        "SGLang's automatic NVFP4 MoE runner is chosen from the SM alone; selector prints its "
        "choice as an explicit --moe-runner-backend",
        _auto("nvfp4")),
    "auto-fp8-linear": (
        S + "layers/quantization/fp8_utils.py (initialize_fp8_gemm_config: auto is cutlass on "
        "SM 12.x, triton on SM 11.x; _dispatch_auto_backend: DeepGEMM, then FlashInfer on "
        "Blackwell, then CUTLASS on SM 12.x, then Triton)",
        "SGLang's automatic block-FP8 GEMM differs from selector's ranked choice, which selector "
        "prints as an explicit --fp8-gemm-backend",
        lambda r: r.scenario.op == "linear" and r.scenario.requested == "auto"
        and r.runner is not None and r.honored),
}


def explain(row: Any) -> Optional[str]:
    for key, (_src, _why, match) in EXPLAINED.items():
        if match(row):
            return key
    return None
