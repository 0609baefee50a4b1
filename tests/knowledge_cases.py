"""Scenario cases that pin every catalogue rule on both sides of each boundary.

Each case is a platform (a compute capability, a CUDA runtime and installed distributions), a
layer and one backend, with the exact set of rule kinds that must fail for that backend and the
rule kinds that must warn. The expectations are literal facts with their public source, never
derived from the catalogue, so deleting a rule, moving a version boundary by one release or
dropping a listed device, activation or value makes a case fail (tools/mutate_catalogue.py
measures that). Deciding a case builds the platform directly (no Hydra composition per case).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import FrozenSet, List, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import Version

# Every distribution at a version no rule objects to (b12x 1.5.1 with its own 4.8.0 pin).
FULL = {"flashinfer-python": "0.7.4", "nvidia-cutlass-dsl": "4.8.0", "triton": "3.7.1",
        "torch": "2.13.0", "vllm": "0.33.0", "b12x": "1.5.1", "nvidia-cudnn-cu13": "9.10.2"}
W4A16 = {"quant": "nvfp4_w4a16"}
DENSE = {"op": "linear", "act_and_mul": False, "hidden_size": 4096, "intermediate_size": 4096}
DEVICES = ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0",
           "12.1")
GATED = ("silu", "gelu", "gelu_tanh", "situ", "swigluoai", "swigluoai_uninterleave",
         "swiglustep", "relu2")
NON_GATED = ("silu", "gelu", "gelu_tanh", "relu2", "situ", "swigluoai",
             "swigluoai_uninterleave", "swiglustep")


@dataclass(frozen=True)
class Case:
    id: str
    device: Optional[str]  # None: no GPU
    backend: str
    fails: FrozenSet[str] = frozenset()     # rule kinds that fail for the backend, exactly
    warns: FrozenSet[str] = frozenset()     # rule kinds that warn for the backend, exactly
    packages: Tuple[Tuple[str, Optional[str]], ...] = ()  # over FULL; None removes
    layer: Tuple[Tuple[str, object], ...] = ()
    cuda: Optional[str] = "13.0"
    status: Optional[str] = None
    only: Optional[str] = None  # check only whether this kind is among the failures
    engine: str = "none"  # decided with engine=ENGINE: its rules and names apply
    name: Optional[str] = "-"  # under an engine: the engine's name for the backend ("-": unchecked)
    kernel: Optional[str] = None  # under an engine: the kernel it runs, when the backend is chosen
    scheme: Optional[str] = None  # ... and that kernel's quant scheme


def C(id: str, device: Optional[str], backend: str, fails=(), warns=(), pk=None, layer=None,
      cuda: Optional[str] = "13.0", status=None, only=None, engine="none", name="-",
      kernel=None, scheme=None) -> Case:
    return Case(id, device, backend, frozenset(fails), frozenset(warns),
                tuple(sorted((pk or {}).items())), tuple(sorted((layer or {}).items())), cuda,
                status, only, engine, name, kernel, scheme)


MOE, LIN = "moe/", "linear/"


# ---------------------------------------------------------------------------------------------
# Expected devices, activations and quant schemes per backend (literal, with sources)

EXPECT_DEVICES = {
    # FlashInfer #3080 ([120, 121]); flashinfer 0.7.4 b12x_moe.py
    "moe/flashinfer_b12x": {"12.0", "12.1"},
    # b12x 1.5.1 _lib/gating.py is_b12x: exactly 12.0 or 12.1
    "moe/b12x": {"12.0", "12.1"}, "linear/b12x": {"12.0", "12.1"},
    # vLLM 0.32.0 trtllm_nvfp4_moe.py; flashinfer 0.7.4 (sm107 module)
    "moe/flashinfer_trtllm": {"10.0", "10.3", "10.7"},
    # flashinfer 0.7.4 cute_dsl/fused_moe.py [100, 103, 107]
    "moe/flashinfer_cutedsl": {"10.0", "10.3", "10.7"},
    # FlashInfer #3134: NVFP4 needs >= 10.0, 11.x excluded
    "moe/flashinfer_cutlass": {"10.0", "10.3", "10.7", "12.0", "12.1"},
    # vLLM 0.32.0 cutlass NVFP4 MoE (SM100/SM120 flags)
    "moe/cutlass": {"10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "moe/marlin": set(DEVICES) - {"7.0"},  # Marlin FP4: cc >= 7.5
    "moe/emulation": set(DEVICES),
    # MXFP4/MXFP8-only backends, judged on their HOME_QUANT: vLLM 0.32.0
    # gpt_oss_triton_kernels_moe.py _triton_kernel_moe_supports_current_device (9.0 <= cc < 13.0);
    # deep_gemm_moe.py DeepGemmExperts._supports_quant_scheme (MXFP8 on the 10.x family only)
    "moe/triton_kernels": {"9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "moe/triton_unfused": {"9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "moe/deep_gemm": {"10.0", "10.3", "10.7"},
    # flashinfer 0.7.4 gemm_base.py requirement lists
    "linear/flashinfer_b12x": {"12.0", "12.1"},
    "linear/flashinfer_cutedsl": {"10.0", "10.3", "10.7", "12.0", "12.1"},
    "linear/flashinfer_cutlass": {"10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "linear/flashinfer_trtllm": {"10.0", "10.3", "10.7"},
    "linear/flashinfer_cudnn": {"10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "linear/cutlass": {"10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "linear/marlin": set(DEVICES) - {"7.0"},
    "linear/emulation": set(DEVICES),
    # DeepGEMM runs on SM 9.0, 10.x and 12.x (DeepGEMM PR #324; 12.1 a known issue, vLLM #54125)
    "linear/deep_gemm": {"9.0", "10.0", "10.3", "10.7", "12.0", "12.1"},  # DeepGEMM PR #324 (sm120)
}

# (gated, non-gated) activations each MoE backend runs (vLLM 0.32.0 _supports_activation;
# FlashInfer moe_activation.py for flashinfer_b12x; selector's reference for emulation)
_APPLY = {"silu", "gelu", "gelu_tanh", "situ", "swigluoai", "swigluoai_uninterleave",
          "swiglustep"}
EXPECT_ACTIVATIONS = {
    "moe/flashinfer_b12x": ({"silu", "gelu_tanh", "swigluoai_uninterleave"}, {"relu2"}),
    "moe/b12x": ({"silu", "situ", "swigluoai_uninterleave"}, {"relu2"}),
    # selector's wrapper maps no SiTU; vLLM's integration does (engine cases below)
    "moe/flashinfer_trtllm": ({"silu", "gelu", "gelu_tanh", "swigluoai_uninterleave"},
                              {"relu2"}),
    "moe/flashinfer_cutedsl": ({"silu", "swigluoai", "swigluoai_uninterleave", "situ"},
                               {"relu2"}),
    "moe/flashinfer_cutlass": ({"silu", "gelu_tanh", "swigluoai", "swigluoai_uninterleave"},
                               {"relu2"}),
    "moe/cutlass": (_APPLY, {"silu", "gelu", "gelu_tanh", "relu2"}),
    "moe/marlin": (_APPLY, {"silu", "gelu", "gelu_tanh", "relu2"}),
    # vLLM's NVFP4 emulation runs all of _APPLY (TritonExperts); selector's reference all but situ
    "moe/emulation": (_APPLY - {"situ"}, {"silu", "gelu", "gelu_tanh", "relu2"}),
    # vLLM 0.32.0 gpt_oss_triton_kernels_moe.py (OAITritonExperts, UnfusedOAITritonExperts
    # _supports_activation; no non-gated); deep_gemm_moe.py DeepGemmExperts._supports_activation
    "moe/triton_kernels": ({"swigluoai"}, set()),
    "moe/triton_unfused": ({"silu", "gelu", "swigluoai", "swiglustep", "swigluoai_uninterleave"},
                           set()),
    "moe/deep_gemm": ({"silu", "swiglustep", "swigluoai_uninterleave"}, set()),
}
# The scheme the device and activation cases of a backend that runs no NVFP4 are judged on
# (default nvfp4): vLLM 0.32.0 oracle/mxfp4.py (TRITON, TRITON_UNFUSED: MXFP4 W4A16) and
# oracle/mxfp8.py (DEEPGEMM).
HOME_QUANT = {"moe/triton_kernels": "mxfp4", "moe/triton_unfused": "mxfp4", "moe/deep_gemm": "mxfp8"}

# The quant schemes each backend runs (W4A4 only unless W4A16 is listed).
EXPECT_W4A16 = {"moe/flashinfer_b12x", "moe/b12x", "moe/marlin", "moe/emulation",
                "linear/b12x", "linear/flashinfer_cutedsl", "linear/marlin",
                "linear/emulation"}

# FP8 backends (h200): the scheme their generated cases are decided for (under the NVFP4 default
# they would be not_applicable and pin nothing), their devices and activations.
SCHEME_OF = {"linear/torch_per_tensor": "fp8_tensor", "linear/torch_channel_wise": "fp8_channel",
             "linear/torch_row_wise": "fp8_channel", "linear/torch_block_wise": "fp8_block",
             "linear/triton_block_fp8": "fp8_block", "moe/torch_grouped_fp8": "fp8_channel",
             # selector's Triton FP8 GEMM with per-row scales (backends/wrappers/triton_fp8.py)
             "linear/triton_scaled_fp8": "fp8_channel",
             # DeepGEMM linear (linear): block FP8 only
             "linear/deep_gemm": "fp8_block",
             # FlashInfer's FP8 GEMMs called directly (backends/wrappers/flashinfer_fp8.py)
             "linear/flashinfer_blockscale_sm90": "fp8_block",
             "linear/flashinfer_bmm_fp8": "fp8_tensor", "linear/flashinfer_bmm_fp8_cudnn": "fp8_tensor",
             "moe/flashinfer_cutlass_fp8_sm90": "fp8_block"}
EXPECT_DEVICES.update({
    # vLLM 0.32.0 scaled_mm/pytorch.py _supports_torch_fp8_scaled_mm; platforms/cuda.py
    # supports_fp8 (cc >= 8.9)
    "linear/torch_per_tensor": {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "linear/torch_channel_wise": {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    # pytorch #125204 (SM90 row-wise kernel; the only one selector claims)
    "linear/torch_row_wise": {"9.0"},
    # vLLM 0.32.0 BlockWiseTorchFP8ScaledMMLinearKernel.is_supported (compute capability 90)
    "linear/torch_block_wise": {"9.0"},
    # triton backends/nvidia/compiler.py: fp8e4nv from capability 89
    "linear/triton_block_fp8": {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "linear/triton_scaled_fp8": {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    # pytorch #148531 (H100 only)
    "moe/torch_grouped_fp8": {"9.0"},
    # flashinfer 0.7.4 gemm_base.py: fp8_blockscale_gemm_sm90 _match_sm_version(['90', '90a']);
    # bmm_fp8 _cublas_bmm_fp8_requirement / _cudnn_bmm_fp8_requirement [89 .. 121]
    "linear/flashinfer_blockscale_sm90": {"9.0"}, "moe/flashinfer_cutlass_fp8_sm90": {"9.0"},
    "linear/flashinfer_bmm_fp8": {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"},
    "linear/flashinfer_bmm_fp8_cudnn": {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0",
                                        "12.1"},
})
# selector's reference activation_fn runs between the grouped GEMMs
EXPECT_ACTIVATIONS["moe/torch_grouped_fp8"] = (_APPLY - {"situ"},
                                               {"silu", "gelu", "gelu_tanh", "relu2"})
# vLLM 0.32.0 FlashInferExperts._supports_activation, less the interleaved swigluoai
EXPECT_ACTIVATIONS["moe/flashinfer_cutlass_fp8_sm90"] = (
    {"silu", "gelu_tanh", "swigluoai_uninterleave"}, {"relu2"})


def _scheme(backend: str) -> dict:
    """The layer scheme a backend's generated cases are decided for (default: nvfp4)."""
    q = SCHEME_OF.get(backend) or HOME_QUANT.get(backend)
    return {"quant": q} if q else {}


# A device on which each backend's device rule passes, for the activation and quant cases:
# the oldest of these its expected devices include (derived, so a new backend adds none).
HOME = {b: next(d for d in ("9.0", "10.0", "12.0") if d in ok) for b, ok in EXPECT_DEVICES.items()}


def _generated() -> List[Case]:
    out = []
    for backend, ok in EXPECT_DEVICES.items():
        layer = {**(DENSE if backend.startswith(LIN) else {}), **_scheme(backend)}
        for dev in DEVICES:
            out.append(C(f"{backend}-device-{dev}", dev, backend, fails={"device"} - (
                {"device"} if dev in ok else set()), layer=layer, only="device"))
    for backend, (gated, non_gated) in EXPECT_ACTIVATIONS.items():
        for act in GATED:
            out.append(C(f"{backend}-gated-{act}", HOME[backend], backend,
                         fails=() if act in gated else {"activation|act_and_mul"},
                         layer={"activation": act, "act_and_mul": True, **_scheme(backend)},
                         only="activation"))
        for act in NON_GATED:
            out.append(C(f"{backend}-nongated-{act}", HOME[backend], backend,
                         fails=() if act in non_gated else {"activation|act_and_mul"},
                         layer={"activation": act, "act_and_mul": False, **_scheme(backend)},
                         only="activation"))
    for backend in EXPECT_DEVICES:
        layer = dict(DENSE) if backend.startswith(LIN) else {}
        dev = HOME[backend]
        out.append(C(f"{backend}-w4a16", dev, backend,
                     fails=() if backend in EXPECT_W4A16 else {"quant"},
                     layer={**layer, **W4A16}, only="quant"))
    return out


# ---------------------------------------------------------------------------------------------
# Version boundaries, packages, CUDA floors, known issues, warnings (one row each side)

FI = "flashinfer-python"
DSL = "nvidia-cutlass-dsl"
B12X_MOE, B12X_LIN = "moe/flashinfer_b12x", "linear/flashinfer_b12x"
REQ_PAIR = {FI: "0.6.9", DSL: "4.4.2"}  # the first b12x release with the DSL it shipped with


def _both_libs(fi: str, dsl: str) -> dict:
    """flashinfer-python with a CuTe DSL whose libs-base and libs-cu13 wheels are both installed
    (the pair that collides on DSL 4.4-4.5.x)."""
    return {FI: fi, DSL: dsl, "nvidia-cutlass-dsl-libs-base": dsl,
            "nvidia-cutlass-dsl-libs-cu13": dsl}

BOUNDARIES = [
    # FlashInfer #3051 #3080: b12x first released in 0.6.9
    C("fi-b12x-moe-0.6.8", "12.0", B12X_MOE, {"package"}, pk={FI: "0.6.8", DSL: "4.4.2"}),
    C("fi-b12x-moe-0.6.9", "12.0", B12X_MOE, pk=REQ_PAIR, status="opt_in"),
    C("fi-b12x-lin-0.6.8", "12.0", B12X_LIN, {"package"}, pk={FI: "0.6.8", DSL: "4.4.2"},
      layer=DENSE, cuda="13.0"),
    C("fi-b12x-lin-0.6.9", "12.0", B12X_LIN, pk=REQ_PAIR, layer=DENSE),
    C("fi-b12x-no-dsl", "12.0", B12X_MOE, {"package"}, pk={DSL: None}),
    C("fi-b12x-lin-no-dsl", "12.0", B12X_LIN, {"package"}, pk={DSL: None}, layer=DENSE),
    C("fi-b12x-no-triton", "12.0", B12X_MOE, {"package"}, pk={"triton": None}),
    C("fi-b12x-lin-no-triton", "12.0", B12X_LIN, pk={"triton": None}, layer=DENSE),
    C("fi-b12x-cuda-12.9", "12.0", B12X_MOE, {"cuda"}, cuda="12.9"),
    C("fi-b12x-no-cuda", "12.0", B12X_MOE, {"cuda"}, cuda=None),
    C("fi-b12x-fp16", "12.0", B12X_MOE, {"dtype"}, layer={"dtype": "float16"}),
    C("fi-b12x-clamp", "12.0", B12X_MOE, {"clamp"}, layer={"swiglu_limit": 7.0}),
    # FlashInfer #3271: W4A16 from 0.6.12
    C("fi-b12x-w4a16-0.6.11", "12.0", B12X_MOE, {"feature"}, pk={FI: "0.6.11", DSL: "4.5.0"},
      layer=W4A16),
    C("fi-b12x-w4a16-0.6.12", "12.0", B12X_MOE, pk={FI: "0.6.12", DSL: "4.5.0"}, layer=W4A16),
    C("fi-b12x-w4a4-0.6.11", "12.0", B12X_MOE, pk={FI: "0.6.11", DSL: "4.5.0"}),
    # FlashInfer #3744: gelu_tanh and swigluoai_uninterleave from 0.6.15
    C("fi-b12x-gelu-tanh-0.6.14", "12.0", B12X_MOE, {"feature"},
      pk={FI: "0.6.14", DSL: "4.5.0"}, layer={"activation": "gelu_tanh"}),
    C("fi-b12x-gelu-tanh-0.6.15", "12.0", B12X_MOE, pk={FI: "0.6.15", DSL: "4.5.0"},
      layer={"activation": "gelu_tanh"}),
    C("fi-b12x-swiglu-0.6.14", "12.0", B12X_MOE, {"feature"}, pk={FI: "0.6.14", DSL: "4.5.0"},
      layer={"activation": "swigluoai_uninterleave"}),
    C("fi-b12x-silu-0.6.14", "12.0", B12X_MOE, pk={FI: "0.6.14", DSL: "4.5.0"}),
    # FlashInfer #3302 / #4302: W4A4 EP raises; W4A16 EP from 0.7.4
    C("fi-b12x-ep-w4a4", "12.0", B12X_MOE, {"parallel"}, layer={"ep_size": 2}),
    C("fi-b12x-ep-w4a16-0.7.4", "12.0", B12X_MOE, layer={"ep_size": 2, **W4A16}),
    C("fi-b12x-ep-w4a16-0.7.3", "12.0", B12X_MOE, {"feature"}, pk={FI: "0.7.3"},
      layer={"ep_size": 2, **W4A16}),
    C("fi-b12x-ep1-w4a16-0.7.3", "12.0", B12X_MOE, pk={FI: "0.7.3"}, layer=W4A16),
    # FlashInfer #3246: 0.6.9-0.6.10 with DSL >= 4.5 fail
    C("fi-b12x-0.6.10-dsl-4.5", "12.0", B12X_MOE, {"known_issue"},
      pk={FI: "0.6.10", DSL: "4.5.0"}),
    C("fi-b12x-0.6.9-dsl-4.5", "12.0", B12X_MOE, {"known_issue"}, pk={FI: "0.6.9", DSL: "4.5.0"}),
    C("fi-b12x-0.6.11-dsl-4.5", "12.0", B12X_MOE, pk={FI: "0.6.11", DSL: "4.5.0"}),
    C("fi-b12x-0.6.10-dsl-4.4.2", "12.0", B12X_MOE, pk={FI: "0.6.10", DSL: "4.4.2"}),
    C("fi-b12x-0.6.8-dsl-4.5", "12.0", B12X_MOE, {"package"}, pk={FI: "0.6.8", DSL: "4.5.0"}),
    # CUTLASS 4.5.0 changelog / PR #3082: DSL 4.4.x rejects sm_121a
    C("fi-b12x-sm121-dsl-4.4.2", "12.1", B12X_MOE, {"known_issue"}, pk=REQ_PAIR),
    C("fi-b12x-sm121-dsl-4.4.0", "12.1", B12X_MOE, {"known_issue"}, pk={FI: "0.6.9", DSL: "4.4.0"}),
    C("fi-b12x-sm121-dsl-4.3.5", "12.1", B12X_MOE, pk={FI: "0.6.9", DSL: "4.3.5"}),
    C("fi-b12x-sm120-dsl-4.4.2", "12.0", B12X_MOE, pk=REQ_PAIR),
    C("fi-b12x-lin-sm121-dsl-4.4.2", "12.1", B12X_LIN, {"known_issue"}, pk=REQ_PAIR, layer=DENSE),
    C("fi-b12x-lin-sm120-dsl-4.4.2", "12.0", B12X_LIN, pk=REQ_PAIR, layer=DENSE),
    # FlashInfer #3246: >= 0.6.11 requires DSL >= 4.5.0
    C("fi-b12x-0.6.11-dsl-4.4.2", "12.0", B12X_MOE, {"known_issue"},
      pk={FI: "0.6.11", DSL: "4.4.2"}),
    C("fi-b12x-lin-0.6.11-dsl-4.4.2", "12.0", B12X_LIN, {"known_issue"},
      pk={FI: "0.6.11", DSL: "4.4.2"}, layer=DENSE),
    C("fi-b12x-lin-0.6.11-dsl-4.5", "12.0", B12X_LIN, pk={FI: "0.6.11", DSL: "4.5.0"},
      layer={**DENSE, "hidden_size": 4096}),
    # flashinfer 0.7.4 metadata: DSL >= 4.8.0
    C("fi-b12x-0.7.4-dsl-4.7.1", "12.0", B12X_MOE, {"known_issue"}, pk={DSL: "4.7.1"}),
    C("fi-b12x-0.7.4-dsl-4.8.0", "12.0", B12X_MOE, pk={DSL: "4.8.0"}),
    C("fi-b12x-0.7.3-dsl-4.7.1", "12.0", B12X_MOE, pk={FI: "0.7.3", DSL: "4.7.1"}),
    C("fi-b12x-lin-0.7.4-dsl-4.7.1", "12.0", B12X_LIN, {"known_issue"}, pk={DSL: "4.7.1"},
      layer=DENSE),
    # the 0.7.2 [b12x] extra's 4.7.1 pin: a warning, never a rejection
    C("fi-b12x-0.7.2.post1-dsl-4.8.0", "12.0", B12X_MOE, warns={"known_issue"},
      pk={FI: "0.7.2.post1", DSL: "4.8.0"}),
    C("fi-b12x-0.7.2-dsl-4.7.1", "12.0", B12X_MOE, pk={FI: "0.7.2", DSL: "4.7.1"}),
    C("fi-b12x-0.7.1-dsl-4.8.0", "12.0", B12X_MOE, pk={FI: "0.7.1", DSL: "4.8.0"}),
    C("fi-b12x-0.7.3-dsl-4.8.0", "12.0", B12X_MOE, pk={FI: "0.7.3", DSL: "4.8.0"}),
    C("fi-b12x-lin-0.7.2-dsl-4.8.0", "12.0", B12X_LIN, warns={"known_issue"},
      pk={FI: "0.7.2", DSL: "4.8.0"}, layer=DENSE),
    # CUTLASS #3170 #3227 #3259: libs-base and libs-cu13 together, DSL 4.4-4.5.x
    C("fi-b12x-collision-4.5", "12.0", B12X_MOE, {"known_issue"},
      pk=_both_libs("0.6.11", "4.5.0")),
    C("fi-b12x-collision-4.6", "12.0", B12X_MOE,
      pk=_both_libs("0.6.16", "4.6.0")),
    C("fi-b12x-collision-4.4.0", "12.0", B12X_MOE, {"known_issue"},
      pk=_both_libs("0.6.9", "4.4.0")),
    C("fi-b12x-collision-4.3.5", "12.0", B12X_MOE,
      pk=_both_libs("0.6.9", "4.3.5")),
    C("fi-b12x-lin-collision-4.5", "12.0", B12X_LIN, {"known_issue"}, layer=DENSE,
      pk=_both_libs("0.6.11", "4.5.0")),
    C("cutedsl-collision-4.5", "10.0", "moe/flashinfer_cutedsl", {"known_issue"},
      pk=_both_libs("0.6.11", "4.5.0")),
    # FlashInfer #3170 comment; #5446: single reports, warnings
    C("fi-b12x-0.6.18.post1-sm121", "12.1", B12X_MOE, warns={"known_issue"},
      pk={FI: "0.6.18.post1", DSL: "4.6.2"}),
    C("fi-b12x-0.6.18.post1-sm120", "12.0", B12X_MOE, pk={FI: "0.6.18.post1", DSL: "4.6.2"}),
    C("fi-b12x-0.6.18-sm121", "12.1", B12X_MOE, pk={FI: "0.6.18", DSL: "4.6.2"}),
    C("fi-b12x-512-experts", "12.0", B12X_MOE, warns={"known_issue"},
      pk={FI: "0.7.0", DSL: "4.7.0"}, layer={"num_experts": 512}),
    C("fi-b12x-511-experts", "12.0", B12X_MOE, pk={FI: "0.7.0", DSL: "4.7.0"},
      layer={"num_experts": 511}),
    C("fi-b12x-512-experts-0.7.1", "12.0", B12X_MOE, pk={FI: "0.7.1", DSL: "4.7.0"},
      layer={"num_experts": 512}),
    C("fi-b12x-512-experts-sm121", "12.1", B12X_MOE, pk={FI: "0.7.0", DSL: "4.7.0"},
      layer={"num_experts": 512}),
    # linear flashinfer_b12x: CUDA >= 12.9 from 0.7.0 (13.0 before: 0.6.18.post1's gemm_base.py
    # raises 'requires CUDA 13', 0.7.0's _MIN_B12X_CUDA_VERSION is 12.9), K multiple of 32 / 128
    C("fi-b12x-lin-cuda-12.9", "12.0", B12X_LIN, cuda="12.9", layer=DENSE),
    C("fi-b12x-lin-cuda-12.8", "12.0", B12X_LIN, {"cuda"}, cuda="12.8", layer=DENSE),
    C("fi-b12x-lin-0.7.0-cuda-12.9", "12.0", B12X_LIN, cuda="12.9", pk={FI: "0.7.0"},
      layer=DENSE),
    C("fi-b12x-lin-0.7.0.post1-cuda-12.9", "12.0", B12X_LIN, cuda="12.9",
      pk={FI: "0.7.0.post1"}, layer=DENSE),
    C("fi-b12x-lin-0.6.18.post1-cuda-12.9", "12.0", B12X_LIN, {"cuda"}, cuda="12.9",
      pk={FI: "0.6.18.post1"}, layer=DENSE),
    C("fi-b12x-lin-0.7.2-cuda-12.9", "12.0", B12X_LIN, cuda="12.9", pk={FI: "0.7.2", DSL: "4.7.1"},
      layer=DENSE),
    C("fi-b12x-lin-k32", "12.0", B12X_LIN, layer={**DENSE, "hidden_size": 4128}),
    C("fi-b12x-lin-k16", "12.0", B12X_LIN, {"shape"}, layer={**DENSE, "hidden_size": 4112}),
    C("fi-b12x-lin-k32-0.6.13", "12.0", B12X_LIN, {"shape"}, pk={FI: "0.6.13", DSL: "4.5.0"},
      layer={**DENSE, "hidden_size": 4128}),
    C("fi-b12x-lin-k32-0.6.14", "12.0", B12X_LIN, pk={FI: "0.6.14", DSL: "4.5.0"},
      layer={**DENSE, "hidden_size": 4128}),
    # FlashInfer #3922: make_fragment removed in DSL 4.6.0
    C("fi-b12x-lin-0.6.15-dsl-4.6", "12.0", B12X_LIN, {"known_issue"},
      pk={FI: "0.6.15", DSL: "4.6.0"}, layer=DENSE),
    C("fi-b12x-lin-0.6.14-dsl-4.6", "12.0", B12X_LIN, {"known_issue"},
      pk={FI: "0.6.14", DSL: "4.6.0"}, layer=DENSE),
    C("fi-b12x-lin-0.6.16-dsl-4.6", "12.0", B12X_LIN, pk={FI: "0.6.16", DSL: "4.6.0"},
      layer=DENSE),
    C("fi-b12x-lin-0.6.13-dsl-4.6", "12.0", B12X_LIN, pk={FI: "0.6.13", DSL: "4.6.0"},
      layer=DENSE),
    C("fi-b12x-lin-0.6.15-dsl-4.5.3", "12.0", B12X_LIN, pk={FI: "0.6.15", DSL: "4.5.3"},
      layer=DENSE),
    # native b12x 1.5.1 (wheel _lib/gating.py, metadata) and vLLM #52018 (>= 1.2.6)
    C("b12x-1.2.5", "12.0", "moe/b12x", {"package"}, pk={"b12x": "1.2.5"}),
    C("b12x-1.2.6", "12.0", "moe/b12x", pk={"b12x": "1.2.6"}, status="opt_in"),
    C("b12x-absent", "12.0", "moe/b12x", {"package"}, pk={"b12x": None}),
    C("b12x-dsl-4.5.3", "12.0", "moe/b12x", {"package"}, pk={"b12x": "1.5.0", DSL: "4.5.3"}),
    C("b12x-dsl-4.6.0", "12.0", "moe/b12x", pk={"b12x": "1.5.0", DSL: "4.6.0"}),
    C("b12x-torch-2.11", "12.0", "moe/b12x", {"package"}, pk={"torch": "2.11.0"}),
    C("b12x-torch-2.12", "12.0", "moe/b12x", pk={"torch": "2.12.0"}),
    C("b12x-no-triton", "12.0", "moe/b12x", {"package"}, pk={"triton": None}),
    C("b12x-lin-1.2.5", "12.0", "linear/b12x", {"package"}, pk={"b12x": "1.2.5"}, layer=DENSE),
    C("b12x-lin-dsl-4.5.3", "12.0", "linear/b12x", {"package"}, pk={"b12x": "1.5.0", DSL: "4.5.3"},
      layer=DENSE),
    C("b12x-lin-torch-2.11", "12.0", "linear/b12x", {"package"}, pk={"torch": "2.11.0"},
      layer=DENSE),
    C("b12x-lin-no-triton", "12.0", "linear/b12x", {"package"}, pk={"triton": None}, layer=DENSE),
    C("b12x-1.5.1-dsl-4.8.1", "12.0", "moe/b12x", warns={"known_issue"}, pk={DSL: "4.8.1"}),
    C("b12x-1.5.0-dsl-4.8.1", "12.0", "moe/b12x", pk={"b12x": "1.5.0", DSL: "4.8.1"}),
    C("b12x-lin-1.5.1-dsl-4.8.1", "12.0", "linear/b12x", warns={"known_issue"}, pk={DSL: "4.8.1"},
      layer=DENSE),
    C("b12x-fp16", "12.0", "moe/b12x", layer={"dtype": "float16"}),
    C("b12x-fp32", "12.0", "moe/b12x", {"dtype"}, layer={"dtype": "float32"}),
    C("b12x-lin-fp16", "12.0", "linear/b12x", layer={**DENSE, "dtype": "float16"}),
    C("b12x-lin-fp32", "12.0", "linear/b12x", {"dtype"}, layer={**DENSE, "dtype": "float32"}),
    C("b12x-swiglu-w4a4", "12.0", "moe/b12x", {"quant"},
      layer={"activation": "swigluoai_uninterleave"}),
    C("b12x-swiglu-w4a16", "12.0", "moe/b12x",
      layer={"activation": "swigluoai_uninterleave", **W4A16}),
    C("b12x-ep", "12.0", "moe/b12x", {"parallel"}, layer={"ep_size": 2}),
    C("b12x-lin-opt-in", "12.0", "linear/b12x", layer=DENSE, status="opt_in"),
    # TRT-LLM cubins: downloaded at run time from flashinfer 0.6.14 (flashinfer-cubin ends at 0.6.13)
    C("trtllm-cubin-0.6.14", "10.0", "moe/flashinfer_trtllm", warns={"known_issue"},
      pk={FI: "0.6.14", DSL: "4.5.0"}),
    C("trtllm-cubin-0.6.13", "10.0", "moe/flashinfer_trtllm", pk={FI: "0.6.13", DSL: "4.5.0"}),
    C("trtllm-cubin-sm107", "10.7", "moe/flashinfer_trtllm", warns={"known_issue"}),
    C("trtllm-cubin-sm103", "10.3", "moe/flashinfer_trtllm", warns={"known_issue"}),
    C("trtllm-cubin-sm120", "12.0", "moe/flashinfer_trtllm", {"device"}),
    C("trtllm-lin-cubin-0.7.4", "10.0", "linear/flashinfer_trtllm", warns={"known_issue"},
      layer=DENSE, status="opt_in"),
    C("trtllm-lin-cubin-0.6.13", "10.0", "linear/flashinfer_trtllm",
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer=DENSE),
    C("trtllm-lin-cubin-sm107", "10.7", "linear/flashinfer_trtllm", warns={"known_issue"},
      layer=DENSE),
    C("trtllm-lin-cubin-sm103", "10.3", "linear/flashinfer_trtllm", warns={"known_issue"},
      layer=DENSE),
    C("trtllm-lin-fp16", "10.0", "linear/flashinfer_trtllm", {"dtype"}, warns={"known_issue"},
      layer={**DENSE, "dtype": "float16"}),
    C("trtllm-no-flashinfer", "10.0", "moe/flashinfer_trtllm", {"package"}, pk={FI: None}),
    C("trtllm-lin-no-flashinfer", "10.0", "linear/flashinfer_trtllm", {"package"}, pk={FI: None},
      layer=DENSE),
    # FlashInfer CUTLASS MoE: the fast TMA tactics on 12.x need CUDA >= 12.9 (FlashInfer #2725);
    # garbage reports on GB10 (FlashInfer #3294 #2723)
    C("fi-cutlass-12.0-cuda-12.8", "12.0", "moe/flashinfer_cutlass", warns={"cuda"}, cuda="12.8"),
    C("fi-cutlass-12.0-cuda-12.9", "12.0", "moe/flashinfer_cutlass", cuda="12.9"),
    C("fi-cutlass-10.0-cuda-12.8", "10.0", "moe/flashinfer_cutlass", cuda="12.8"),
    C("fi-cutlass-gb10", "12.1", "moe/flashinfer_cutlass", warns={"known_issue"}),
    C("fi-cutlass-no-flashinfer", "10.0", "moe/flashinfer_cutlass", {"package"}, pk={FI: None}),
    # FlashInfer CuTe-DSL MoE: from 0.6.4 (FlashInfer #2398), needs the DSL
    C("cutedsl-0.6.3", "10.0", "moe/flashinfer_cutedsl", {"package"},
      pk={FI: "0.6.3", DSL: "4.3.5"}),
    C("cutedsl-0.6.4", "10.0", "moe/flashinfer_cutedsl", pk={FI: "0.6.4", DSL: "4.3.5"}),
    C("cutedsl-no-dsl", "10.0", "moe/flashinfer_cutedsl", {"package"}, pk={DSL: None}),
    C("cutedsl-0.6.11-dsl-4.4.2", "10.0", "moe/flashinfer_cutedsl", {"known_issue"},
      pk={FI: "0.6.11", DSL: "4.4.2"}),
    C("cutedsl-0.7.4-dsl-4.7.1", "10.0", "moe/flashinfer_cutedsl", {"known_issue"},
      pk={DSL: "4.7.1"}),
    # linear CuTe-DSL: 12.x only when requested, with CUDA >= 13; W4A16 on 10.0/10.3/12.x (vLLM)
    C("cutedsl-lin-12.0-opt-in", "12.0", "linear/flashinfer_cutedsl", layer=DENSE,
      status="opt_in"),
    C("cutedsl-lin-10.0-auto", "10.0", "linear/flashinfer_cutedsl", layer=DENSE,
      status="selected"),
    C("cutedsl-lin-12.0-cuda-12.9", "12.0", "linear/flashinfer_cutedsl", {"cuda"}, cuda="12.9",
      layer=DENSE),
    C("cutedsl-lin-10.0-cuda-12.9", "10.0", "linear/flashinfer_cutedsl", cuda="12.9",
      layer=DENSE),
    C("cutedsl-lin-w4a16-10.7", "10.7", "linear/flashinfer_cutedsl", {"device"},
      layer={**DENSE, **W4A16}),
    C("cutedsl-lin-w4a16-10.3", "10.3", "linear/flashinfer_cutedsl", layer={**DENSE, **W4A16},
      status="selected"),
    C("cutedsl-lin-w4a16-12.1", "12.1", "linear/flashinfer_cutedsl", layer={**DENSE, **W4A16},
      status="opt_in"),
    C("cutedsl-lin-n-mod-8", "10.0", "linear/flashinfer_cutedsl", {"shape"},
      layer={**DENSE, "intermediate_size": 4100}),
    C("cutedsl-lin-no-dsl", "10.0", "linear/flashinfer_cutedsl", {"package"}, pk={DSL: None},
      layer=DENSE),
    C("cutedsl-lin-no-flashinfer", "10.0", "linear/flashinfer_cutedsl", {"package"},
      pk={FI: None}, layer=DENSE),
    C("cutedsl-lin-0.6.11-dsl-4.4.2", "10.0", "linear/flashinfer_cutedsl", {"known_issue"},
      pk={FI: "0.6.11", DSL: "4.4.2"}, layer=DENSE),
    C("cutedsl-lin-0.7.4-dsl-4.7.1", "10.0", "linear/flashinfer_cutedsl", {"known_issue"},
      pk={DSL: "4.7.1"}, layer=DENSE),
    # linear FlashInfer CUTLASS: vLLM's FP4 build check, CUDA >= 12.8
    C("fi-cutlass-lin-cuda-12.7", "12.0", "linear/flashinfer_cutlass", {"cuda"}, cuda="12.7",
      layer=DENSE),
    C("fi-cutlass-lin-cuda-12.8", "12.0", "linear/flashinfer_cutlass", cuda="12.8", layer=DENSE),
    C("fi-cutlass-lin-no-flashinfer", "12.0", "linear/flashinfer_cutlass", {"package"},
      pk={FI: None}, layer=DENSE),
    # cuDNN GEMM needs the cuDNN library (cu13 or cu12 wheel)
    C("cudnn-none", "10.0", "linear/flashinfer_cudnn", {"package"},
      pk={"nvidia-cudnn-cu13": None}, layer=DENSE),
    C("cudnn-cu12", "10.0", "linear/flashinfer_cudnn",
      pk={"nvidia-cudnn-cu13": None, "nvidia-cudnn-cu12": "9.10.2"}, layer=DENSE),
    C("cudnn-no-flashinfer", "10.0", "linear/flashinfer_cudnn", {"package"}, pk={FI: None},
      layer=DENSE),
    # vLLM's own CUTLASS: the vllm distribution, built with CUDA >= 12.8; EP exchanges
    C("vllm-cutlass-no-vllm", "10.0", "moe/cutlass", {"package"}, pk={"vllm": None}),
    C("vllm-cutlass-cuda-12.7", "10.0", "moe/cutlass", {"cuda"}, cuda="12.7"),
    C("vllm-cutlass-cuda-12.8", "10.0", "moe/cutlass", cuda="12.8"),
    C("vllm-cutlass-ep-allgather", "10.0", "moe/cutlass",
      layer={"ep_size": 2, "all2all": "allgather_reducescatter"}),
    C("vllm-cutlass-ep-deepep-ht", "10.0", "moe/cutlass", {"parallel"},
      layer={"ep_size": 2, "all2all": "deepep_high_throughput"}),
    *[C(f"vllm-cutlass-ep-fi-nvlink-{x[-10:]}", "10.0", "moe/cutlass", {"parallel"},
        layer={"ep_size": 2, "all2all": x})
      for x in ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided")],
    # NVFP4 under DeepEP low-latency: vLLM's NVFP4 oracle has no batched CUTLASS
    # (backend_to_kernel_cls: VLLM_CUTLASS -> [CutlassExpertsFp4], the standard format)
    C("vllm-cutlass-ep-deepep-ll", "10.0", "moe/cutlass", {"parallel"},
      layer={"ep_size": 2, "all2all": "deepep_low_latency"}),
    C("vllm-cutlass-lin-no-vllm", "10.0", "linear/cutlass", {"package"}, pk={"vllm": None},
      layer=DENSE),
    C("vllm-cutlass-lin-cuda-12.7", "10.0", "linear/cutlass", {"cuda"}, cuda="12.7", layer=DENSE),
    C("vllm-cutlass-lin-cuda-12.8", "10.0", "linear/cutlass", cuda="12.8", layer=DENSE),
    # Marlin providers: vllm, sgl-kernel <= 0.3.21, sglang >= 0.5.10 (JIT, needs nvcc: a warning)
    C("marlin-none", "9.0", "moe/marlin", {"package"}, pk={"vllm": None}),
    C("marlin-vllm", "9.0", "moe/marlin"),
    C("marlin-sgl-kernel-0.3.21", "9.0", "moe/marlin", pk={"vllm": None, "sgl-kernel": "0.3.21"}),
    C("marlin-sgl-kernel-0.3.22", "9.0", "moe/marlin", {"package"},
      pk={"vllm": None, "sgl-kernel": "0.3.22"}),
    C("marlin-sglang-kernel-only", "9.0", "moe/marlin", {"package"},
      pk={"vllm": None, "sglang-kernel": "0.4.10"}),
    C("marlin-sglang-0.5.10", "9.0", "moe/marlin", warns={"known_issue"},
      pk={"vllm": None, "sglang": "0.5.10"}),
    C("marlin-sglang-0.5.9", "9.0", "moe/marlin", {"package"}, pk={"vllm": None, "sglang": "0.5.9"}),
    C("marlin-lin-none", "9.0", "linear/marlin", {"package"}, pk={"vllm": None}, layer=DENSE),
    C("marlin-lin-sgl-kernel-0.3.21", "9.0", "linear/marlin",
      pk={"vllm": None, "sgl-kernel": "0.3.21"}, layer=DENSE),
    C("marlin-lin-sgl-kernel-0.3.22", "9.0", "linear/marlin", {"package"},
      pk={"vllm": None, "sgl-kernel": "0.3.22"}, layer=DENSE),
    C("marlin-lin-sglang-0.5.10", "9.0", "linear/marlin", warns={"known_issue"},
      pk={"vllm": None, "sglang": "0.5.10"}, layer=DENSE),
    C("marlin-lin-sglang-0.5.9", "9.0", "linear/marlin", {"package"},
      pk={"vllm": None, "sglang": "0.5.9"}, layer=DENSE),
    # the reference needs no package: torch is the asking engine's own (issue 17)
    C("emulation-no-torch", "9.0", "moe/emulation", set(), pk={"torch": None}),
    C("emulation-lin-no-torch", "9.0", "linear/emulation", set(), pk={"torch": None},
      layer=DENSE),
    # opt-in backends (vLLM #40082 #52016 #52018; FlashInfer mm_fp4 heuristic)
    C("fi-b12x-opt-in", "12.0", B12X_MOE, status="opt_in"),
    C("b12x-opt-in", "12.0", "moe/b12x", status="opt_in"),
    C("trtllm-lin-opt-in", "10.0", "linear/flashinfer_trtllm", warns={"known_issue"},
      layer=DENSE, status="opt_in"),
    # the other side of each known-issue and shape boundary, for every backend that has it
    C("fi-b12x-sm121-dsl-4.5.0", "12.1", B12X_MOE, pk={FI: "0.6.11", DSL: "4.5.0"}),
    C("fi-b12x-lin-sm121-dsl-4.5.0", "12.1", B12X_LIN, pk={FI: "0.6.11", DSL: "4.5.0"},
      layer=DENSE),
    C("fi-b12x-lin-sm121-dsl-4.3.5", "12.1", B12X_LIN, pk={FI: "0.6.9", DSL: "4.3.5"},
      layer=DENSE),
    C("fi-b12x-lin-0.6.10-dsl-4.4.2", "12.0", B12X_LIN, pk={FI: "0.6.10", DSL: "4.4.2"},
      layer=DENSE),
    C("fi-b12x-lin-0.7.3-dsl-4.7.1", "12.0", B12X_LIN, pk={FI: "0.7.3", DSL: "4.7.1"},
      layer=DENSE),
    C("fi-b12x-lin-0.7.4-dsl-4.8.0", "12.0", B12X_LIN, pk={DSL: "4.8.0"}, layer=DENSE),
    C("fi-b12x-lin-collision-4.4.0", "12.0", B12X_LIN, {"known_issue"}, layer=DENSE,
      pk=_both_libs("0.6.9", "4.4.0")),
    C("fi-b12x-lin-collision-4.3.5", "12.0", B12X_LIN, layer=DENSE,
      pk=_both_libs("0.6.9", "4.3.5")),
    C("fi-b12x-lin-collision-4.6", "12.0", B12X_LIN, layer=DENSE,
      pk=_both_libs("0.6.16", "4.6.0")),
    C("fi-b12x-lin-k128-0.6.13", "12.0", B12X_LIN, pk={FI: "0.6.13", DSL: "4.5.0"},
      layer={**DENSE, "hidden_size": 4224}),
    C("fi-b12x-lin-k64-0.6.13", "12.0", B12X_LIN, {"shape"}, pk={FI: "0.6.13", DSL: "4.5.0"},
      layer={**DENSE, "hidden_size": 4160}),
    C("cutedsl-0.6.10-dsl-4.4.2", "10.0", "moe/flashinfer_cutedsl",
      pk={FI: "0.6.10", DSL: "4.4.2"}),
    C("cutedsl-0.6.11-dsl-4.5.0", "10.0", "moe/flashinfer_cutedsl",
      pk={FI: "0.6.11", DSL: "4.5.0"}),
    C("cutedsl-0.7.3-dsl-4.7.1", "10.0", "moe/flashinfer_cutedsl", pk={FI: "0.7.3", DSL: "4.7.1"}),
    C("cutedsl-0.7.4-dsl-4.8.0", "10.0", "moe/flashinfer_cutedsl", pk={DSL: "4.8.0"}),
    C("cutedsl-collision-4.4.0", "10.0", "moe/flashinfer_cutedsl", {"known_issue"},
      pk=_both_libs("0.6.9", "4.4.0")),
    C("cutedsl-collision-4.3.5", "10.0", "moe/flashinfer_cutedsl",
      pk=_both_libs("0.6.9", "4.3.5")),
    C("cutedsl-collision-4.6", "10.0", "moe/flashinfer_cutedsl",
      pk=_both_libs("0.6.16", "4.6.0")),
    C("cutedsl-lin-0.6.10-dsl-4.4.2", "10.0", "linear/flashinfer_cutedsl",
      pk={FI: "0.6.10", DSL: "4.4.2"}, layer=DENSE),
    C("cutedsl-lin-0.6.11-dsl-4.5.0", "10.0", "linear/flashinfer_cutedsl",
      pk={FI: "0.6.11", DSL: "4.5.0"}, layer=DENSE),
    C("cutedsl-lin-0.7.3-dsl-4.7.1", "10.0", "linear/flashinfer_cutedsl",
      pk={FI: "0.7.3", DSL: "4.7.1"}, layer=DENSE),
    C("cutedsl-lin-0.7.4-dsl-4.8.0", "10.0", "linear/flashinfer_cutedsl", pk={DSL: "4.8.0"},
      layer=DENSE),
    C("cutedsl-lin-n-4104", "10.0", "linear/flashinfer_cutedsl",
      layer={**DENSE, "intermediate_size": 4104}),
    C("cutedsl-lin-w4a16-10.0", "10.0", "linear/flashinfer_cutedsl", layer={**DENSE, **W4A16},
      status="selected"),
    C("b12x-lin-1.2.6", "12.0", "linear/b12x", pk={"b12x": "1.2.6"}, layer=DENSE),
    C("b12x-lin-dsl-4.6.0", "12.0", "linear/b12x", pk={"b12x": "1.5.0", DSL: "4.6.0"},
      layer=DENSE),
    C("b12x-lin-torch-2.12", "12.0", "linear/b12x", pk={"torch": "2.12.0"}, layer=DENSE),
    C("trtllm-lin-cubin-0.6.14", "10.0", "linear/flashinfer_trtllm", warns={"known_issue"},
      pk={FI: "0.6.14", DSL: "4.5.0"}, layer=DENSE),
]

# ---------------------------------------------------------------------------------------------
# Engines: each engine's name for each backend (null: the engine has none), the rules of the
# engine's own integration, and the kernel it runs under the name (engine=vllm|sglang)

ENGINE_NAMES = {
    # vLLM 0.32.0 fused_moe/oracle/nvfp4.py map_nvfp4_backend; kernels/linear/__init__.py
    # _LINEAR_BACKEND_KERNEL_MAP: vLLM offers every backend of the catalogue under its own name
    "vllm": {b: b.split("/")[1] for b in EXPECT_DEVICES},
    # SGLang 0.5.23 srt/layers/moe/utils.py MoeRunnerBackend and quantization/fp4_utils.py
    # Fp4GemmRunnerBackend (NVFP4): no b12x, no emulation, no vLLM CUTLASS kernels; its `cutlass`
    # MoE runner raises NotImplementedError for NVFP4 (quantization/modelopt_quant.py)
    "sglang": {"moe/flashinfer_trtllm": "flashinfer_trtllm",
               "moe/flashinfer_cutedsl": "flashinfer_cutedsl",
               "moe/flashinfer_cutlass": "flashinfer_cutlass", "moe/marlin": "marlin",
               "moe/flashinfer_b12x": None, "moe/b12x": None, "moe/cutlass": None,
               "moe/emulation": None,
               # MoeRunnerBackend.TRITON_KERNELS and DEEP_GEMM; no unfused triton_kernels runner
               "moe/triton_kernels": "triton_kernel", "moe/triton_unfused": None,
               "moe/deep_gemm": "deep_gemm",
               "linear/flashinfer_cudnn": "flashinfer_cudnn",
               "linear/flashinfer_cutedsl": "flashinfer_cutedsl",
               "linear/flashinfer_cutlass": "flashinfer_cutlass",
               "linear/flashinfer_trtllm": "flashinfer_trtllm", "linear/marlin": "marlin",
               "linear/flashinfer_b12x": None, "linear/b12x": None,
               # fp8_utils.py Fp8GemmRunnerBackend (--fp8-gemm-backend): cutlass, deep_gemm
               "linear/cutlass": "cutlass",
               "linear/emulation": None, "linear/deep_gemm": "deep_gemm"},
}


# vLLM 0.32.0 kernels/linear/__init__.py _LINEAR_BACKEND_KERNEL_MAP: one `torch` backend (a
# kernel per FP8 scheme), `triton`; RowWiseTorchFP8ScaledMMLinearKernel is ROCm-only; the
# grouped FP8 MoE is selector's own. SGLang 0.5.23 Fp8GemmRunnerBackend: no torch value.
ENGINE_NAMES["vllm"].update({
    "linear/torch_per_tensor": "torch", "linear/torch_channel_wise": "torch",
    "linear/torch_block_wise": "torch", "linear/torch_row_wise": None,
    "linear/triton_block_fp8": "triton", "moe/torch_grouped_fp8": None,
    # _LINEAR_BACKEND_KERNEL_MAP['triton']: Int8, FP8 block and W4A16 kernels only
    "linear/triton_scaled_fp8": None,
    "linear/flashinfer_blockscale_sm90": None, "linear/flashinfer_bmm_fp8": None,
    "linear/flashinfer_bmm_fp8_cudnn": None, "moe/flashinfer_cutlass_fp8_sm90": None})
ENGINE_NAMES["sglang"].update({b: None for b in SCHEME_OF})
# SGLang 0.5.23 fp8_utils.py Fp8GemmRunnerBackend (--fp8-gemm-backend): its block-FP8 GEMMs
ENGINE_NAMES["sglang"].update({"linear/triton_block_fp8": "triton",
                               "linear/deep_gemm": "deep_gemm", "linear/cutlass": "cutlass",
                               # apply_fp8_linear's per-tensor GEMM (no --fp8-gemm-backend value)
                               "linear/torch_per_tensor": "torch_scaled_mm",
                               # ModelOpt FP8's linear method calls it (modelopt_quant.py)
                               "linear/flashinfer_bmm_fp8": "flashinfer_bmm_fp8"})
# where a name's case runs when the backend's home device is one the engine refuses it on
# (SGLang keeps per-tensor FP8 scales per tensor on SM 12.x only: fp8.py use_sm120_fp8_pertensor)
ENGINE_HOME = {("sglang", "linear/torch_per_tensor"): "12.0"}
# vLLM 0.32.0 oracle/mxfp4.py map_mxfp4_backend: OpenAI's triton_kernels MoE is vLLM's `triton`
# for MXFP4 (its fused FP8 Triton MoE, moe/triton, is `triton` for FP8: disjoint schemes)
ENGINE_NAMES["vllm"]["moe/triton_kernels"] = "triton"


def _engine_names() -> List[Case]:
    out = []
    for engine, names in ENGINE_NAMES.items():
        for backend, name in names.items():
            layer = {**(DENSE if backend.startswith(LIN) else {}), **_scheme(backend)}
            out.append(C(f"{engine}-name-{backend}",
                         ENGINE_HOME.get((engine, backend), HOME[backend]), backend,
                         fails=() if name else {"engine"}, layer=layer, only="engine",
                         engine=engine, name=name))
    return out


# The kernel class vLLM 0.32.0 builds under each name on the backend's home device, W4A4 and
# W4A16 (fused_moe/oracle/nvfp4.py backend_to_kernel_cls; kernels/linear/__init__.py
# _LINEAR_BACKEND_KERNEL_MAP and init_nvfp4_linear_kernel's a16_kernels)
VLLM_KERNELS = {
    "moe/flashinfer_trtllm": "TrtLlmNvFp4ExpertsMonolithic",
    "moe/flashinfer_cutedsl": "FlashInferCuteDSLExperts",
    "moe/flashinfer_cutlass": "FlashInferExperts", "moe/flashinfer_b12x": "FlashInferB12xExperts",
    "moe/b12x": "B12xExperts", "moe/cutlass": "CutlassExpertsFp4", "moe/marlin": "MarlinExperts",
    "moe/emulation": "Nvfp4QuantizationEmulationTritonExperts",
    "linear/flashinfer_cutedsl": "FlashInferCuteDslNvFp4LinearKernel",
    "linear/flashinfer_cutlass": "FlashInferCutlassNvFp4LinearKernel",
    "linear/flashinfer_b12x": "FlashInferB12xNvFp4LinearKernel",
    "linear/flashinfer_trtllm": "FlashInferTrtllmNvFp4LinearKernel",
    "linear/flashinfer_cudnn": "FlashInferCudnnNvFp4LinearKernel",
    "linear/cutlass": "CutlassNvFp4LinearKernel", "linear/marlin": "MarlinNvFp4LinearKernel",
    "linear/b12x": "B12xNvFp4LinearKernel", "linear/emulation": "EmulationNvFp4LinearKernel",
}
VLLM_W4A16_KERNELS = {  # the W4A16 layers of EXPECT_W4A16 that vLLM runs (not its emulation)
    "moe/flashinfer_b12x": "FlashInferB12xExperts", "moe/b12x": "B12xExperts",
    "moe/marlin": "MarlinExperts", "linear/b12x": "B12xNvFp4W4A16LinearKernel",
    "linear/flashinfer_cutedsl": "FlashInferCuteDslNvFp4W4A16LinearKernel",
    "linear/marlin": "MarlinNvFp4LinearKernel",
}


def _vllm_kernels() -> List[Case]:
    out = []
    for quant, table in (("nvfp4", VLLM_KERNELS), ("nvfp4_w4a16", VLLM_W4A16_KERNELS)):
        for backend, kernel in table.items():
            layer = dict(DENSE) if backend.startswith(LIN) else {}
            out.append(C(f"vllm-kernel-{quant}-{backend}", HOME[backend], backend,
                         layer={**layer, "quant": quant}, engine="vllm", kernel=kernel,
                         scheme=quant, status="selected", only="device"))
    return out


# vLLM's emulation is its Triton MoE: every activation of _APPLY_MOE_ACTIVATIONS, situ included
# (fused_moe/experts/triton_moe.py TritonExperts._supports_activation), where selector's own
# reference (engine=none) has no situ
# vLLM's TRT-LLM MoE adds SiTU where FlashInfer has it (trtllm_nvfp4_moe.py _supports_activation;
# FlashInfer #4180); non-gated situ does not exist in vLLM's MoEActivation
VLLM_ACTIVATIONS = {
    "moe/emulation": (_APPLY, {"silu", "gelu", "gelu_tanh", "relu2"}),
    "moe/flashinfer_trtllm": ({"silu", "gelu", "gelu_tanh", "swigluoai_uninterleave", "situ"},
                              {"relu2", "situ"}),
}


def _vllm_emulation_activations() -> List[Case]:
    out = []
    for backend, (gated, non_gated) in VLLM_ACTIVATIONS.items():
        for act in GATED:
            out.append(C(f"vllm-{backend}-gated-{act}", HOME[backend], backend,
                         fails=() if act in gated else {"activation|act_and_mul"},
                         engine="vllm", layer={"activation": act, "act_and_mul": True},
                         only="activation"))
        for act in NON_GATED:
            out.append(C(f"vllm-{backend}-nongated-{act}", HOME[backend], backend,
                         fails=() if act in non_gated else {"activation|act_and_mul"},
                         engine="vllm", layer={"activation": act, "act_and_mul": False},
                         only="activation"))
    return out


V = "vllm"
ENGINES = [
    # vLLM has no NVFP4 path without a GPU: _POSSIBLE_NVFP4_KERNELS lists no CPU kernel;
    # TritonExperts (its MoE emulation) needs a CUDA-alike device. selector's own reference runs.
    C("vllm-emulation-moe-no-gpu", None, "moe/emulation", {"device"}, engine=V, cuda=None),
    C("vllm-emulation-lin-no-gpu", None, "linear/emulation", {"device"}, layer=DENSE, engine=V,
      cuda=None),
    C("none-emulation-moe-no-gpu", None, "moe/emulation", cuda=None, status="selected"),
    C("none-emulation-lin-no-gpu", None, "linear/emulation", layer=DENSE, cuda=None,
      status="selected"),
    C("vllm-emulation-moe-sm70", "7.0", "moe/emulation", engine=V,
      kernel="Nvfp4QuantizationEmulationTritonExperts", scheme="nvfp4"),
    # vLLM's MoE emulation is W4A4 only (nvfp4_emulation_moe.py _supports_quant_scheme); its
    # W4A16 linear path considers only weight-only kernels (init_nvfp4_linear_kernel a16_kernels)
    C("vllm-emulation-moe-w4a16", "9.0", "moe/emulation", {"quant"}, layer=W4A16, engine=V),
    C("vllm-emulation-lin-w4a16", "9.0", "linear/emulation", {"quant"}, layer={**DENSE, **W4A16},
      engine=V),
    # vLLM's FlashInfer b12x MoE: silu, gelu_tanh, relu2 only; no EP at all
    # (experts/flashinfer_b12x_moe.py _supports_activation, _supports_parallel_config)
    C("vllm-fi-b12x-swiglu-uninterleave", "12.0", B12X_MOE, {"activation"}, engine=V,
      layer={"activation": "swigluoai_uninterleave"}),
    C("vllm-fi-b12x-gelu-tanh", "12.0", B12X_MOE, engine=V, layer={"activation": "gelu_tanh"},
      status="opt_in"),
    C("vllm-fi-b12x-relu2", "12.0", B12X_MOE, engine=V,
      layer={"activation": "relu2", "act_and_mul": False}, status="opt_in"),
    C("vllm-fi-b12x-silu", "12.0", B12X_MOE, engine=V, status="opt_in"),
    C("vllm-fi-b12x-ep-w4a16", "12.0", B12X_MOE, {"parallel"}, engine=V,
      layer={"ep_size": 2, **W4A16}),
    C("vllm-fi-b12x-ep1-w4a16", "12.0", B12X_MOE, engine=V, layer=W4A16,
      name="flashinfer_b12x"),
    # vLLM's flashinfer_cutedsl linear: a W4A4 kernel for sm_10x, else its W4A16 kernel runs
    # the layer weight-only (kernels/linear/nvfp4/flashinfer.py; _LINEAR_BACKEND_KERNEL_MAP)
    C("vllm-cutedsl-lin-w4a4-sm120", "12.0", "linear/flashinfer_cutedsl", warns={"engine"},
      layer=DENSE, engine=V, kernel="FlashInferCuteDslNvFp4W4A16LinearKernel",
      scheme="nvfp4_w4a16", status="selected"),
    C("vllm-cutedsl-lin-w4a4-sm120-cuda12.8", "12.0", "linear/flashinfer_cutedsl",
      warns={"engine"}, layer=DENSE, engine=V, cuda="12.8", status="opt_in"),
    C("none-cutedsl-lin-w4a4-sm120-cuda12.8", "12.0", "linear/flashinfer_cutedsl", {"cuda"},
      layer=DENSE, cuda="12.8"),
    C("none-cutedsl-lin-w4a16-sm120-cuda12.8", "12.0", "linear/flashinfer_cutedsl",
      layer={**DENSE, **W4A16}, cuda="12.8", status="opt_in"),
    C("vllm-cutedsl-lin-w4a4-sm100", "10.0", "linear/flashinfer_cutedsl", layer=DENSE,
      engine=V, kernel="FlashInferCuteDslNvFp4LinearKernel", scheme="nvfp4",
      status="selected"),
    C("vllm-cutedsl-lin-w4a16-sm100", "10.0", "linear/flashinfer_cutedsl",
      layer={**DENSE, **W4A16}, engine=V, kernel="FlashInferCuteDslNvFp4W4A16LinearKernel",
      scheme="nvfp4_w4a16", status="selected"),
    C("vllm-b12x-lin-w4a16", "12.0", "linear/b12x", layer={**DENSE, **W4A16}, engine=V,
      kernel="B12xNvFp4W4A16LinearKernel", scheme="nvfp4_w4a16", status="selected"),
    # vLLM #52308 (open): corrupt output for non-gated relu2 on SM 10.x with TRT-LLM's MoE, a
    # warning on the choice vLLM keeps making (flashinfer 0.6.13: no cubin-download warning)
    C("trtllm-relu2-sm100", "10.0", "moe/flashinfer_trtllm", warns={"known_issue"},
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer={"activation": "relu2", "act_and_mul": False},
      status="selected"),
    C("trtllm-relu2-sm103", "10.3", "moe/flashinfer_trtllm", warns={"known_issue"},
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer={"activation": "relu2", "act_and_mul": False}),
    C("trtllm-relu2-sm107", "10.7", "moe/flashinfer_trtllm", warns={"known_issue"},
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer={"activation": "relu2", "act_and_mul": False}),
    C("trtllm-relu2-sm120", "12.0", "moe/flashinfer_trtllm", {"device"},
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer={"activation": "relu2", "act_and_mul": False}),
    C("trtllm-silu-sm100", "10.0", "moe/flashinfer_trtllm", pk={FI: "0.6.13", DSL: "4.5.0"},
      status="selected"),
    C("trtllm-gelu-nongated-sm100", "10.0", "moe/flashinfer_trtllm", {"act_and_mul"},
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer={"activation": "gelu", "act_and_mul": False}),
    C("trtllm-relu2-gated-sm100", "10.0", "moe/flashinfer_trtllm", {"act_and_mul"},
      pk={FI: "0.6.13", DSL: "4.5.0"}, layer={"activation": "relu2", "act_and_mul": True}),
    # FlashInfer #4180/#4252: SiTU in the TRT-LLM MoE from 0.6.16, which vLLM runs
    # (trtllm_nvfp4_moe.py _supports_activation) and selector's own wrapper does not
    C("vllm-trtllm-situ-0.6.15", "10.0", "moe/flashinfer_trtllm", {"feature"},
      warns={"known_issue"}, pk={FI: "0.6.15", DSL: "4.5.0"}, layer={"activation": "situ"},
      engine=V),
    C("vllm-trtllm-situ-0.6.16", "10.0", "moe/flashinfer_trtllm", warns={"known_issue"},
      pk={FI: "0.6.16", DSL: "4.5.0"}, layer={"activation": "situ"}, engine=V),
    C("vllm-trtllm-swigluoai", "10.0", "moe/flashinfer_trtllm", {"activation"},
      warns={"known_issue"}, layer={"activation": "swigluoai"}, engine=V),
    C("vllm-trtllm-swiglustep", "10.0", "moe/flashinfer_trtllm", {"activation"},
      warns={"known_issue"}, layer={"activation": "swiglustep"}, engine=V),
    C("none-trtllm-situ-0.6.16", "10.0", "moe/flashinfer_trtllm", {"activation"},
      warns={"known_issue"}, pk={FI: "0.6.16", DSL: "4.5.0"}, layer={"activation": "situ"}),
]

_FP8_MOE = {"quant": "fp8_channel", "hidden_size": 2048, "intermediate_size": 768}


def _fl(quant: str, **kw) -> dict:
    """A dense FP8 linear layer."""
    return {**DENSE, "quant": quant, **kw}


# FP8 torch / Triton backends (h200): each rule on both sides of its boundary
_FI_MOE = {"quant": "fp8_block", "hidden_size": 2048, "intermediate_size": 768}
CUDNN_FE = "nvidia-cudnn-frontend"
# selector's direct FlashInfer FP8 backends (backends/wrappers/flashinfer_fp8.py): each rule both sides
# (pinned here case by case, as FP8_TORCH: no engine builds them)
FI_DIRECT: List[Case] = [
    C("fi-block-sm90", "9.0", "linear/flashinfer_blockscale_sm90", layer=_fl("fp8_block")),
    C("fi-block-no-fi", "9.0", "linear/flashinfer_blockscale_sm90", {"package"}, pk={FI: None},
      layer=_fl("fp8_block")),
    # flashinfer v0.5.3 and v0.6.0 gemm/__init__.py: first exported in 0.6.0 (FlashInfer #2131)
    C("fi-block-0.5.3", "9.0", "linear/flashinfer_blockscale_sm90", {"package"}, pk={FI: "0.5.3"},
      layer=_fl("fp8_block")),
    C("fi-block-0.6.0", "9.0", "linear/flashinfer_blockscale_sm90", pk={FI: "0.6.0"},
      layer=_fl("fp8_block")),
    C("fi-block-cuda-12.7", "9.0", "linear/flashinfer_blockscale_sm90", {"cuda"}, cuda="12.7",
      layer=_fl("fp8_block")),
    C("fi-block-cuda-12.8", "9.0", "linear/flashinfer_blockscale_sm90", cuda="12.8",
      layer=_fl("fp8_block")),
    C("fi-block-fp16", "9.0", "linear/flashinfer_blockscale_sm90", {"dtype"},
      layer=_fl("fp8_block", dtype="float16")),
    C("fi-block-k4160", "9.0", "linear/flashinfer_blockscale_sm90", {"shape"},
      layer=_fl("fp8_block", hidden_size=4160)),
    C("fi-block-k4224", "9.0", "linear/flashinfer_blockscale_sm90",
      layer=_fl("fp8_block", hidden_size=4224)),
    C("fi-block-n4128", "9.0", "linear/flashinfer_blockscale_sm90", {"shape"},
      layer=_fl("fp8_block", intermediate_size=4128)),
    C("fi-block-n4160", "9.0", "linear/flashinfer_blockscale_sm90",
      layer=_fl("fp8_block", intermediate_size=4160)),
    C("fi-block-not-tensor", "9.0", "linear/flashinfer_blockscale_sm90", {"quant"},
      layer=_fl("fp8_tensor")),
    C("fi-block-vllm", "9.0", "linear/flashinfer_blockscale_sm90", {"engine"},
      layer=_fl("fp8_block"), engine="vllm", name=None),
    C("fi-bmm-no-fi", "9.0", "linear/flashinfer_bmm_fp8", {"package"}, pk={FI: None},
      layer=_fl("fp8_tensor")),
    C("fi-bmm-fp32", "9.0", "linear/flashinfer_bmm_fp8", {"dtype"},
      layer=_fl("fp8_tensor", dtype="float32")),
    C("fi-bmm-fp16", "9.0", "linear/flashinfer_bmm_fp8", layer=_fl("fp8_tensor", dtype="float16")),
    C("fi-bmm-dynamic", "9.0", "linear/flashinfer_bmm_fp8", layer=_fl("fp8_tensor_dynamic")),
    C("fi-bmm-not-block", "9.0", "linear/flashinfer_bmm_fp8", {"quant"}, layer=_fl("fp8_block")),
    C("fi-cudnn-no-fe", "9.0", "linear/flashinfer_bmm_fp8_cudnn", {"package"}, pk={CUDNN_FE: None},
      layer=_fl("fp8_tensor")),
    C("fi-cudnn-fe-1.31", "9.0", "linear/flashinfer_bmm_fp8_cudnn", {"package"},
      pk={CUDNN_FE: "1.31.0"}, layer=_fl("fp8_tensor")),
    C("fi-cudnn-fe-1.32", "9.0", "linear/flashinfer_bmm_fp8_cudnn", pk={CUDNN_FE: "1.32.0"},
      layer=_fl("fp8_tensor")),
    C("fi-cudnn-no-fi", "9.0", "linear/flashinfer_bmm_fp8_cudnn", {"package"},
      pk={FI: None, CUDNN_FE: "1.32.0"}, layer=_fl("fp8_tensor")),
    C("fi-cudnn-fp32", "9.0", "linear/flashinfer_bmm_fp8_cudnn", {"dtype"},
      pk={CUDNN_FE: "1.32.0"}, layer=_fl("fp8_tensor", dtype="float32")),
    C("fi-cudnn-fp16", "9.0", "linear/flashinfer_bmm_fp8_cudnn", pk={CUDNN_FE: "1.32.0"},
      layer=_fl("fp8_tensor", dtype="float16")),
    C("fi-moe-block", "9.0", "moe/flashinfer_cutlass_fp8_sm90", layer=_FI_MOE),
    C("fi-moe-tensor", "9.0", "moe/flashinfer_cutlass_fp8_sm90",
      layer={**_FI_MOE, "quant": "fp8_tensor"}),
    C("fi-moe-no-fi", "9.0", "moe/flashinfer_cutlass_fp8_sm90", {"package"}, pk={FI: None},
      layer=_FI_MOE),
    C("fi-moe-cuda-12.7", "9.0", "moe/flashinfer_cutlass_fp8_sm90", {"cuda"}, cuda="12.7",
      layer=_FI_MOE),
    C("fi-moe-cuda-12.8", "9.0", "moe/flashinfer_cutlass_fp8_sm90", cuda="12.8", layer=_FI_MOE),
    C("fi-moe-fp16", "9.0", "moe/flashinfer_cutlass_fp8_sm90", {"dtype"},
      layer={**_FI_MOE, "dtype": "float16"}),
    C("fi-moe-hidden-2112", "9.0", "moe/flashinfer_cutlass_fp8_sm90", {"shape"},
      layer={**_FI_MOE, "hidden_size": 2112}),
    C("fi-moe-hidden-2176", "9.0", "moe/flashinfer_cutlass_fp8_sm90",
      layer={**_FI_MOE, "hidden_size": 2176}),
    C("fi-moe-intermediate-832", "9.0", "moe/flashinfer_cutlass_fp8_sm90", {"shape"},
      layer={**_FI_MOE, "intermediate_size": 832}),
    C("fi-moe-intermediate-896", "9.0", "moe/flashinfer_cutlass_fp8_sm90",
      layer={**_FI_MOE, "intermediate_size": 896}),
    C("fi-moe-not-dynamic", "9.0", "moe/flashinfer_cutlass_fp8_sm90", {"quant"},
      layer={**_FI_MOE, "quant": "fp8_tensor_dynamic"}),
]
# the engine's FlashInferExperts entry needs vLLM for its FP8 layers; NVFP4 does not
FIC_VLLM: List[Case] = [
    C("fic-fp8-block-no-vllm", "9.0", "moe/flashinfer_cutlass", {"package"}, pk={"vllm": None},
      layer=_FI_MOE),
    C("fic-fp8-tensor-no-vllm", "9.0", "moe/flashinfer_cutlass", {"package"}, pk={"vllm": None},
      layer={**_FI_MOE, "quant": "fp8_tensor"}),
    C("fic-nvfp4-no-vllm", "10.0", "moe/flashinfer_cutlass", pk={"vllm": None}),
    # ... and for its MXFP4 layers (bf16 activations on SM 9.0, MXFP8 ones on SM >= 10.0)
    C("fic-mxfp4-no-vllm", "9.0", "moe/flashinfer_cutlass", {"package"}, pk={"vllm": None},
      layer={"quant": "mxfp4", "activation": "swigluoai"}),
    C("fic-mxfp4-w4a8-no-vllm", "10.0", "moe/flashinfer_cutlass", {"package"},
      pk={"vllm": None}, layer={"quant": "mxfp4_w4a8", "activation": "swigluoai"}),
]


FP8_TORCH: List[Case] = [
    # torch >= 2.5: _scaled_mm's required scales and single output (vLLM 0.32.0
    # scaled_mm/pytorch.py apply_scaled_mm; pytorch #130059)
    C("per-tensor-torch-2.4", "9.0", "linear/torch_per_tensor", {"package"},
      pk={"torch": "2.4.1"}, layer=_fl("fp8_tensor")),
    C("per-tensor-torch-2.5", "9.0", "linear/torch_per_tensor", layer=_fl("fp8_tensor"),
      pk={"torch": "2.5.0"}),
    C("per-tensor-dynamic", "8.9", "linear/torch_per_tensor", layer=_fl("fp8_tensor_dynamic")),
    C("per-tensor-not-channel", "9.0", "linear/torch_per_tensor", {"quant"},
      layer=_fl("fp8_channel")),
    C("per-tensor-no-torch", "9.0", "linear/torch_per_tensor", {"package"},
      pk={"torch": None}, layer=_fl("fp8_tensor")),
    C("channel-wise-torch-2.4", "9.0", "linear/torch_channel_wise", {"package"},
      pk={"torch": "2.4.1"}, layer=_fl("fp8_channel")),
    C("channel-wise-torch-2.5", "12.0", "linear/torch_channel_wise", pk={"torch": "2.5.0"},
      layer=_fl("fp8_channel")),
    C("channel-wise-not-tensor", "9.0", "linear/torch_channel_wise", {"quant"},
      layer=_fl("fp8_tensor")),
    C("channel-wise-fp16", "9.0", "linear/torch_channel_wise", layer=_fl("fp8_channel",
                                                                         dtype="float16")),
    # row-wise: bfloat16 output only before torch 2.11 (pytorch #125204's SM90 kernel; vLLM
    # RowWise can_implement); torch 2.11 writes float16 and float32 too (measured, docs/records/h200.md)
    C("row-wise-fp16-torch-2.10", "9.0", "linear/torch_row_wise", {"dtype"},
      pk={"torch": "2.10.0"}, layer=_fl("fp8_channel", dtype="float16")),
    C("row-wise-fp32-torch-2.10", "9.0", "linear/torch_row_wise", {"dtype"},
      pk={"torch": "2.10.0"}, layer=_fl("fp8_channel", dtype="float32")),
    C("row-wise-fp16-torch-2.11", "9.0", "linear/torch_row_wise", pk={"torch": "2.11.0"},
      layer=_fl("fp8_channel", dtype="float16")),
    C("row-wise-bf16", "9.0", "linear/torch_row_wise", layer=_fl("fp8_channel")),
    C("row-wise-torch-2.5", "9.0", "linear/torch_row_wise", pk={"torch": "2.5.0"},
      layer=_fl("fp8_channel")),
    C("row-wise-torch-2.4", "9.0", "linear/torch_row_wise", {"package"}, pk={"torch": "2.4.1"},
      layer=_fl("fp8_channel")),
    C("row-wise-not-block", "9.0", "linear/torch_row_wise", {"quant"}, layer=_fl("fp8_block")),
    # block-wise: cuBLAS 12.9 block scaling (pytorch #158037), torch 2.10 (#166752)
    C("block-wise-cuda-12.8", "9.0", "linear/torch_block_wise", {"cuda"}, cuda="12.8",
      layer=_fl("fp8_block")),
    C("block-wise-cuda-12.9", "9.0", "linear/torch_block_wise", cuda="12.9",
      layer=_fl("fp8_block")),
    C("block-wise-torch-2.9.1", "9.0", "linear/torch_block_wise", {"package"},
      pk={"torch": "2.9.1"}, layer=_fl("fp8_block")),
    C("block-wise-torch-2.10", "9.0", "linear/torch_block_wise", pk={"torch": "2.10.0"},
      layer=_fl("fp8_block")),
    # vLLM's kernel does not pad K: K/128 must be a multiple of 4 (pytorch #166752; measured on
    # torch 2.11); selector's own backend pads
    C("block-wise-vllm-k768", "9.0", "linear/torch_block_wise", {"shape"},
      layer=_fl("fp8_block", hidden_size=768), engine="vllm", name="torch"),
    C("block-wise-vllm-k1536", "9.0", "linear/torch_block_wise",
      layer=_fl("fp8_block", hidden_size=1536), engine="vllm", name="torch"),
    C("block-wise-vllm-k7168", "9.0", "linear/torch_block_wise",
      layer=_fl("fp8_block", hidden_size=7168), engine="vllm", name="torch"),
    C("block-wise-k768", "9.0", "linear/torch_block_wise", layer=_fl("fp8_block", hidden_size=768)),
    # preference: torch block-wise ahead of the Triton kernel from 128 tokens on SM 9.0 (measured
    # under CUDA graphs: docs/records/h200-runs/tune_check_2026-12-06.txt; issue #46)
    C("triton-block-eligible-128", "9.0", "linear/triton_block_fp8", status="eligible",
      layer=_fl("fp8_block", num_tokens=128)),
    C("triton-block-eligible-128-sm100-no", "10.0", "linear/torch_block_wise", {"device"},
      layer=_fl("fp8_block", num_tokens=128)),
    C("block-wise-eligible-127", "9.0", "linear/torch_block_wise", status="eligible",
      layer=_fl("fp8_block", num_tokens=127)),
    C("block-wise-sm100", "10.0", "linear/torch_block_wise", {"device"}, layer=_fl("fp8_block")),
    C("block-wise-not-tensor", "9.0", "linear/torch_block_wise", {"quant"},
      layer=_fl("fp8_tensor")),
    # Triton block FP8: triton installed, fp8e4nv from SM 8.9
    C("triton-block-no-triton", "9.0", "linear/triton_block_fp8", {"package"},
      pk={"triton": None}, layer=_fl("fp8_block")),
    C("triton-block-sm86", "8.6", "linear/triton_block_fp8", {"device"}, layer=_fl("fp8_block")),
    C("triton-block-sm120", "12.0", "linear/triton_block_fp8", layer=_fl("fp8_block")),
    C("triton-block-not-channel", "9.0", "linear/triton_block_fp8", {"quant"},
      layer=_fl("fp8_channel")),
    # Triton per-tensor / per-channel FP8 (backends/wrappers/triton_fp8.py): the same Triton rules; it
    # runs fp8_tensor, fp8_tensor_dynamic and fp8_channel, not block scales; preferred for
    # per-channel at <= 16 and >= 4096 tokens on SM 9.0 (measured: docs/records/h200.md), eligible
    # between
    C("triton-scaled-no-triton", "9.0", "linear/triton_scaled_fp8", {"package"},
      pk={"triton": None}, layer=_fl("fp8_channel")),
    C("triton-scaled-sm86", "8.6", "linear/triton_scaled_fp8", {"device"},
      layer=_fl("fp8_tensor")),
    C("triton-scaled-sm120", "12.0", "linear/triton_scaled_fp8", layer=_fl("fp8_tensor_dynamic")),
    C("triton-scaled-not-block", "9.0", "linear/triton_scaled_fp8", {"quant"},
      layer=_fl("fp8_block")),
    C("triton-scaled-decode-16", "9.0", "linear/triton_scaled_fp8", status="selected",
      layer=_fl("fp8_channel", num_tokens=16)),
    C("triton-scaled-eligible-17", "9.0", "linear/triton_scaled_fp8", status="eligible",
      layer=_fl("fp8_channel", num_tokens=17)),
    C("triton-scaled-eligible-4095", "9.0", "linear/triton_scaled_fp8", status="eligible",
      layer=_fl("fp8_channel", num_tokens=4095)),
    C("triton-scaled-prefill-4096", "9.0", "linear/triton_scaled_fp8", status="selected",
      layer=_fl("fp8_channel", num_tokens=4096)),
    C("triton-scaled-prefill-not-10.0", "10.0", "linear/triton_scaled_fp8", status="eligible",
      layer=_fl("fp8_channel", num_tokens=4096)),
    # grouped FP8 MoE: torch 2.8 (pytorch #148531), dims multiple of 16, SM 9.0, no block scales
    C("grouped-torch-2.7", "9.0", "moe/torch_grouped_fp8", {"package"}, pk={"torch": "2.7.1"},
      layer=_FP8_MOE),
    C("grouped-torch-2.8", "9.0", "moe/torch_grouped_fp8", pk={"torch": "2.8.0"}, layer=_FP8_MOE),
    C("grouped-hidden-2056", "9.0", "moe/torch_grouped_fp8", {"shape"},
      layer={**_FP8_MOE, "hidden_size": 2056}),
    C("grouped-intermediate-760", "9.0", "moe/torch_grouped_fp8", {"shape"},
      layer={**_FP8_MOE, "intermediate_size": 760}),
    C("grouped-hidden-2064", "9.0", "moe/torch_grouped_fp8", layer={**_FP8_MOE, "hidden_size": 2064}),
    C("grouped-intermediate-784", "9.0", "moe/torch_grouped_fp8",
      layer={**_FP8_MOE, "intermediate_size": 784}),
    C("grouped-tensor", "9.0", "moe/torch_grouped_fp8", layer={**_FP8_MOE, "quant": "fp8_tensor"}),
    C("grouped-not-block", "9.0", "moe/torch_grouped_fp8", {"quant"},
      layer={**_FP8_MOE, "quant": "fp8_block"}),
    C("grouped-not-nvfp4", "9.0", "moe/torch_grouped_fp8", {"quant"},
      layer={**_FP8_MOE, "quant": "nvfp4"}),
    # the kernel vLLM 0.32.0 builds under each name (kernels/linear/__init__.py
    # _LINEAR_BACKEND_KERNEL_MAP, scaled_mm/pytorch.py, scaled_mm/triton.py)
    C("vllm-kernel-per-tensor", "9.0", "linear/torch_per_tensor", layer=_fl("fp8_tensor"),
      engine="vllm", kernel="PerTensorTorchFP8ScaledMMLinearKernel", scheme="fp8_tensor",
      status="selected", only="device"),
    C("vllm-kernel-channel-wise", "9.0", "linear/torch_channel_wise", layer=_fl("fp8_channel"),
      engine="vllm", kernel="ChannelWiseTorchFP8ScaledMMLinearKernel", scheme="fp8_channel",
      status="selected", only="device"),
    C("vllm-kernel-block-wise", "9.0", "linear/torch_block_wise", layer=_fl("fp8_block"),
      engine="vllm", kernel="BlockWiseTorchFP8ScaledMMLinearKernel", scheme="fp8_block",
      status="selected", only="device"),
    C("vllm-kernel-triton-block", "9.0", "linear/triton_block_fp8", layer=_fl("fp8_block"),
      engine="vllm", kernel="TritonFp8BlockScaledMMKernel", scheme="fp8_block",
      status="selected", only="device"),
    # vLLM has no row-wise torch kernel on CUDA (RowWise...is_supported: ROCm only)
    C("vllm-no-row-wise", "9.0", "linear/torch_row_wise", {"engine"}, layer=_fl("fp8_channel"),
      engine="vllm", name=None, only="engine"),
]


# ---------------------------------------------------------------------------------------------
# FP8 MoE (vLLM 0.32.0 fused_moe/oracle/fp8.py and the experts classes it lists): literal
# expectations per backend and scheme, each from the class's _supports_* (cited per line)

FP8 = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
# The FP8 schemes of the MoE backends that run FP8 (literal, cited per line). Every other MoE
# backend of the catalogue runs none: those entries are filled from conf/backend/moe/ below
# (_no_fp8_entries), so a new NVFP4-only backend needs none here, while one that implements an
# FP8 scheme without a literal entry fails its `-implements` cases.
EXPECT_FP8_SCHEMES = {
    # trtllm_fp8_moe.py: Monolithic (per-tensor, block), Modular (block)
    "moe/flashinfer_trtllm": {"fp8_tensor", "fp8_block"},
    # flashinfer_cutlass_moe.py FlashInferExperts._supports_quant_scheme
    "moe/flashinfer_cutlass": {"fp8_tensor", "fp8_block"},
    # cutlass_moe.py CutlassExpertsFp8Base._supports_quant_scheme (no block)
    "moe/cutlass": {"fp8_tensor", "fp8_tensor_dynamic", "fp8_channel"},
    # deep_gemm_moe.py / batched_deep_gemm_moe.py: 128x128 block only
    "moe/deep_gemm": {"fp8_block"},
    # triton_moe.py TritonExperts / fused_batched_moe.py BatchedTritonExperts: every FP8 pair
    "moe/triton": set(FP8),
    # marlin_moe.py MarlinExpertsBase: by weight key (block, channel, tensor)
    "moe/marlin": set(FP8),
}
_SM10 = {"10.0", "10.3", "10.7"}
EXPECT_FP8_DEVICES = {
    # is_device_capability_family(100)
    ("moe/flashinfer_trtllm", "fp8_tensor"): _SM10, ("moe/flashinfer_trtllm", "fp8_block"): _SM10,
    # 9.0, 10.x, 12.x (SM110 excluded, FlashInfer #3134); block FP8 on 9.0 only
    ("moe/flashinfer_cutlass", "fp8_tensor"): {"9.0", "12.0", "12.1"} | _SM10,
    ("moe/flashinfer_cutlass", "fp8_block"): {"9.0"},
    # vLLM 0.32.0 _custom_ops.py cutlass_group_gemm_supported: SM 9.x and 10.x (it refuses
    # capability >= 110 before asking the CUDA build)
    **{("moe/cutlass", q): {"9.0"} | _SM10
       for q in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel")},
    # support_deep_gemm: 9.0, 10.x, 12.x
    ("moe/deep_gemm", "fp8_block"): {"9.0", "12.0", "12.1"} | _SM10,
    # supports_fp8: SM >= 8.9
    **{("moe/triton", q): {"8.9", "9.0", "11.0", "12.0", "12.1"} | _SM10 for q in FP8},
    # Marlin: cc >= 7.5
    **{("moe/marlin", q): set(DEVICES) - {"7.0"} for q in FP8},
}
# (gated, non-gated) activations per backend for FP8 (vLLM 0.32.0 _supports_activation,
# _supports_no_act_and_mul)
EXPECT_FP8_ACTIVATIONS = {
    "moe/flashinfer_trtllm": ({"silu", "swigluoai_uninterleave"}, {"relu2"}),
    "moe/flashinfer_cutlass": ({"silu", "gelu_tanh", "swigluoai", "swigluoai_uninterleave"},
                               {"relu2"}),
    "moe/cutlass": (_APPLY, set()),  # is_gated and apply_moe_activation_supported
    "moe/deep_gemm": ({"silu", "swiglustep", "swigluoai_uninterleave"}, set()),
    "moe/triton": (_APPLY, {"silu", "gelu", "gelu_tanh", "relu2"}),
    "moe/marlin": (_APPLY, {"silu", "gelu", "gelu_tanh", "relu2"}),
}
FP8_HOME = {b: next(d for d in ("9.0", "10.0", "12.0") if d in EXPECT_FP8_DEVICES[(b, q)])
            for (b, q) in EXPECT_FP8_DEVICES}
# the kernel class vLLM builds for each backend and scheme on its home device, standard format
# (oracle/fp8.py backend_to_kernel_cls; the first class whose is_supported_config holds)
VLLM_FP8_KERNELS = {
    ("moe/flashinfer_trtllm", "fp8_tensor"): "TrtLlmFp8ExpertsMonolithic",
    ("moe/flashinfer_trtllm", "fp8_block"): "TrtLlmFp8ExpertsMonolithic",
    ("moe/flashinfer_cutlass", "fp8_tensor"): "FlashInferExperts",
    ("moe/flashinfer_cutlass", "fp8_block"): "FlashInferExperts",
    **{("moe/cutlass", q): "TritonOrCutlassExperts"
       for q in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel")},
    ("moe/deep_gemm", "fp8_block"): "TritonOrDeepGemmExperts",
    **{("moe/triton", q): "TritonExperts" for q in FP8},
    **{("moe/marlin", q): "MarlinExperts" for q in FP8},
}
LL = {"ep_size": 2, "all2all": "deepep_low_latency"}  # vLLM's batched activation format
# FlashInfer's NVLink exchanges: the two-sided one (vLLM's flashinfer_all2allv) and the one-sided
NVL = {"ep_size": 2, "all2all": "flashinfer_nvlink_two_sided"}
NVL1 = {"ep_size": 2, "all2all": "flashinfer_nvlink_one_sided"}
# under DeepEP low-latency vLLM maps the name to its batched backend (select_fp8_moe_backend)
VLLM_FP8_BATCHED_KERNELS = {
    "moe/cutlass": ("fp8_channel", "CutlassBatchedExpertsFp8"),
    "moe/deep_gemm": ("fp8_block", "BatchedDeepGemmExperts"),
    "moe/triton": ("fp8_block", "BatchedTritonExperts"),
}


def _fp8_cases() -> List[Case]:
    out = []
    for backend, schemes in EXPECT_FP8_SCHEMES.items():
        for q in FP8:  # a scheme the backend does not implement: not applicable
            out.append(C(f"fp8-{backend}-{q}-implements", FP8_HOME.get(backend, "10.0"), backend,
                         fails=() if q in schemes else {"quant"}, layer={"quant": q},
                         only="quant"))
    for (backend, q), ok in EXPECT_FP8_DEVICES.items():
        for dev in DEVICES:
            out.append(C(f"fp8-{backend}-{q}-device-{dev}", dev, backend,
                         fails=() if dev in ok else {"device"}, layer={"quant": q},
                         only="device"))
    # every scheme a backend runs (a rule scoped to some schemes is pinned for each); under
    # engine=vllm too where vLLM's own activation rules replace the backend's
    for engine in ("none", "vllm"):
        for backend, (gated, non_gated) in EXPECT_FP8_ACTIVATIONS.items():
            if engine == "vllm" and backend != "moe/flashinfer_trtllm":
                continue
            for q in sorted(EXPECT_FP8_SCHEMES[backend]):
                for mul, acts, ok in ((True, GATED, gated), (False, NON_GATED, non_gated)):
                    for act in acts:
                        out.append(C(f"fp8-{engine}-{backend}-{q}-"
                                     f"{'gated' if mul else 'nongated'}-{act}",
                                     FP8_HOME[backend], backend,
                                     fails=() if act in ok else {"activation|act_and_mul"},
                                     layer={"quant": q, "activation": act, "act_and_mul": mul},
                                     only="activation", engine=engine))
    for (backend, q), kernel in VLLM_FP8_KERNELS.items():
        out.append(C(f"fp8-vllm-kernel-{backend}-{q}", FP8_HOME[backend], backend,
                     layer={"quant": q}, engine="vllm", kernel=kernel, scheme=q,
                     status="selected", only="device"))
    for backend, (q, kernel) in VLLM_FP8_BATCHED_KERNELS.items():
        out.append(C(f"fp8-vllm-batched-{backend}", FP8_HOME[backend], backend,
                     layer={"quant": q, **LL}, engine="vllm", kernel=kernel, scheme=q,
                     status="selected", only="device"))
    return out


TRT, FIC, VC = "moe/flashinfer_trtllm", "moe/flashinfer_cutlass", "moe/cutlass"
DG, TR, MA = "moe/deep_gemm", "moe/triton", "moe/marlin"
BLOCK, TENSOR, CHANNEL = {"quant": "fp8_block"}, {"quant": "fp8_tensor"}, {"quant": "fp8_channel"}
T613 = {FI: "0.6.13", DSL: "4.5.0"}  # TRT-LLM cases: before the cubin-download warning


def CT(*args, pk=None, **kw) -> Case:
    """A TRT-LLM case on flashinfer 0.6.13 (no run-time cubin download warning on SM 10.x)."""
    return C(*args, pk={**T613, **(pk or {})}, **kw)


FP8_BOUNDARIES = [
    # csrc scaled_mm_entry.cu cutlass_group_gemm_supported: SM 9.x CUDA >= 12.3, SM >= 10 >= 12.8;
    # vLLM 0.32.0 _custom_ops.py cutlass_group_gemm_supported refuses SM < 9.0 and >= 11.0 first
    C("fp8-cutlass-sm90-cuda12.2", "9.0", VC, {"cuda"}, layer=CHANNEL, cuda="12.2"),
    C("fp8-cutlass-sm90-cuda12.3", "9.0", VC, layer=CHANNEL, cuda="12.3"),
    C("fp8-cutlass-sm100-cuda12.6", "10.0", VC, {"cuda"}, layer=CHANNEL, cuda="12.6"),
    C("fp8-cutlass-sm100-cuda12.8", "10.0", VC, layer=CHANNEL, cuda="12.8"),
    C("fp8-cutlass-sm103-cuda12.8", "10.3", VC, layer=TENSOR, cuda="12.8"),
    C("fp8-cutlass-sm110-cuda12.8", "11.0", VC, {"device"}, layer=TENSOR, cuda="12.8"),
    C("fp8-cutlass-sm120-cuda12.8", "12.0", VC, {"device"}, layer=TENSOR, cuda="12.8"),
    C("fp8-cutlass-sm121-cuda13.0", "12.1", VC, {"device"}, layer=CHANNEL, cuda="13.0"),
    C("fp8-cutlass-sm89", "8.9", VC, {"device"}, layer=CHANNEL),
    C("fp8-cutlass-no-vllm", "9.0", VC, {"package"}, pk={"vllm": None}, layer=CHANNEL),
    # CutlassExpertsFp8: not DeepEP high-throughput, not FlashInfer NVLink; the batched
    # kernel takes DeepEP low-latency
    C("fp8-cutlass-deepep-ht", "9.0", VC, {"parallel"},
      layer={**CHANNEL, "ep_size": 2, "all2all": "deepep_high_throughput"}),
    C("fp8-cutlass-nvlink", "9.0", VC, {"parallel"}, layer={**CHANNEL, **NVL}),
    C("fp8-cutlass-nvlink-one-sided", "9.0", VC, {"parallel"}, layer={**CHANNEL, **NVL1}),
    C("fp8-cutlass-deepep-ll", "9.0", VC, layer={**CHANNEL, **LL}),
    # trtllm_fp8_moe.py is_supported_config: the clamp for block-scaled SwiGLU only
    CT("fp8-trtllm-tensor-clamp", "10.0", TRT, {"clamp"}, layer={**TENSOR, "swiglu_limit": 7.0}),
    CT("fp8-trtllm-block-clamp", "10.0", TRT, layer={**BLOCK, "swiglu_limit": 7.0}),
    CT("fp8-trtllm-block-relu2-clamp", "10.0", TRT, {"clamp"},
      layer={**BLOCK, "activation": "relu2", "act_and_mul": False, "swiglu_limit": 7.0}),
    CT("fp8-trtllm-block-relu2", "10.0", TRT,
      layer={**BLOCK, "activation": "relu2", "act_and_mul": False}),
    # Monolithic: no all2all kernels but AG/RS; Modular (block): also FlashInfer NVLink
    *[CT(f"fp8-trtllm-tensor-{n}", "10.0", TRT, {"parallel"}, layer={**TENSOR, **a})
      for n, a in (("nvlink", NVL), ("nvlink-one-sided", NVL1))],
    *[CT(f"fp8-trtllm-block-{n}", "10.0", TRT, layer={**BLOCK, **a}, engine="vllm",
         kernel="TrtLlmFp8ExpertsModular", scheme="fp8_block", status="selected",
         only="parallel") for n, a in (("nvlink", NVL), ("nvlink-one-sided", NVL1))],
    CT("fp8-trtllm-block-deepep-ll", "10.0", TRT, {"parallel"}, layer={**BLOCK, **LL}),
    # the monolithic block-FP8 kernel routes in-kernel for its listed methods only
    # (trtllm_fp8_moe.py 408-421: not Default, TopK, Llama4): vLLM runs the modular class
    *[CT(f"mut-fp8-trtllm-block-routing-{r}", "10.0", TRT, layer={**BLOCK, "routing": r},
         engine="vllm", kernel="TrtLlmFp8ExpertsModular", scheme="fp8_block",
         status="selected", only="routing") for r in ("default", "topk")],
    CT("fp8-trtllm-tensor-deepep-ht", "10.0", TRT, {"parallel"},
      layer={**TENSOR, "ep_size": 2, "all2all": "deepep_high_throughput"}),
    CT("fp8-trtllm-tensor-agrs", "10.0", TRT,
      layer={**TENSOR, "ep_size": 2, "all2all": "allgather_reducescatter"}),
    CT("fp8-trtllm-tensor-naive", "10.0", TRT, {"parallel"},
      layer={**TENSOR, "ep_size": 2, "all2all": "naive"}),
    # routing: at most 2048 experts
    CT("fp8-trtllm-2049-experts", "10.0", TRT, {"known_issue"},
      layer={**BLOCK, "num_experts": 2049}),
    CT("fp8-trtllm-2048-experts", "10.0", TRT, layer={**BLOCK, "num_experts": 2048}),
    CT("fp8-trtllm-no-flashinfer", "10.0", TRT, {"package"}, pk={FI: None}, layer=BLOCK),
    # FlashInferExperts: standard format only
    C("fp8-fi-cutlass-deepep-ll", "9.0", FIC, {"parallel"}, layer={**BLOCK, **LL}),
    C("fp8-fi-cutlass-nvlink", "9.0", FIC, layer={**BLOCK, **NVL}),
    # DeepGEMM: SiLU only batched; no FlashInfer NVLink; in vLLM's wheel from #37980/#41516
    C("fp8-deep-gemm-ll-swiglustep", "9.0", DG, {"activation"},
      layer={**BLOCK, **LL, "activation": "swiglustep"}),
    C("fp8-deep-gemm-ll-silu", "9.0", DG, layer={**BLOCK, **LL}),
    C("fp8-deep-gemm-swiglustep", "9.0", DG, layer={**BLOCK, "activation": "swiglustep"}),
    C("fp8-deep-gemm-nvlink", "9.0", DG, {"parallel"}, layer={**BLOCK, **NVL}),
    C("fp8-deep-gemm-nvlink-one-sided", "9.0", DG, {"parallel"}, layer={**BLOCK, **NVL1}),
    C("fp8-deep-gemm-vllm-0.20", "9.0", DG, {"package"}, pk={"vllm": "0.20.0"}, layer=BLOCK),
    C("fp8-deep-gemm-vllm-0.21", "9.0", DG, pk={"vllm": "0.21.0"}, layer=BLOCK),
    C("fp8-deep-gemm-own-package", "9.0", DG, pk={"vllm": None, "deep-gemm": "2.1.0"},
      layer=BLOCK),
    # TritonExperts: no FlashInfer NVLink; BatchedTritonExperts under DeepEP low-latency
    C("fp8-triton-nvlink", "9.0", TR, {"parallel"}, layer={**BLOCK, **NVL}),
    C("fp8-triton-nvlink-one-sided", "9.0", TR, {"parallel"}, layer={**BLOCK, **NVL1}),
    C("fp8-triton-deepep-ll", "9.0", TR, layer={**BLOCK, **LL}),
    C("fp8-triton-deepep-ht", "9.0", TR,
      layer={**BLOCK, "ep_size": 2, "all2all": "deepep_high_throughput"}),
    C("fp8-triton-no-vllm", "9.0", TR, {"package"}, pk={"vllm": None}, layer=BLOCK),
    C("fp8-triton-sglang", "9.0", TR, pk={"vllm": None, "sglang": "0.5.23"}, layer=BLOCK),
    # MarlinExperts: standard format, no two-sided FlashInfer NVLink (the one-sided one it takes:
    # marlin_moe.py MarlinExpertsBase._supports_parallel_config)
    C("fp8-marlin-deepep-ll", "9.0", MA, {"parallel"}, layer={**BLOCK, **LL}),
    C("fp8-marlin-nvlink", "9.0", MA, {"parallel"}, layer={**BLOCK, **NVL}),
    C("fp8-marlin-nvlink-one-sided", "9.0", MA, layer={**BLOCK, **NVL1}),
    C("fp8-marlin-deepep-ht", "9.0", MA,
      layer={**BLOCK, "ep_size": 2, "all2all": "deepep_high_throughput"}),
    # the NVFP4-only rules stay NVFP4's: no SM 12.1 CUTLASS report, no TRT-LLM relu2 report,
    # no CUDA 12.8 NVFP4 floor for an FP8 layer
    C("fp8-fi-cutlass-sm121", "12.1", FIC, layer=TENSOR),
    CT("fp8-trtllm-relu2-sm100", "10.0", TRT, pk={FI: "0.6.13", DSL: "4.5.0"},
      layer={**BLOCK, "activation": "relu2", "act_and_mul": False}),
    C("fp8-fi-cutlass-sm120-cuda12.8", "12.0", FIC, layer=TENSOR, cuda="12.8"),
    # the NVFP4 rules scoped to the NVFP4 pair still judge a W4A16 layer (not applicable to
    # these backends, the reasons say all of why)
    CT("w4a16-trtllm-sm120", "12.0", TRT, {"quant", "device"}, layer=W4A16),
    CT("w4a16-trtllm-situ", "10.0", TRT, {"quant", "activation"},
       layer={**W4A16, "activation": "situ"}),
    CT("w4a16-trtllm-gelu-nongated", "10.0", TRT, {"quant", "act_and_mul"},
       layer={**W4A16, "activation": "gelu", "act_and_mul": False}),
    CT("w4a16-trtllm-relu2", "10.0", TRT, {"quant"}, warns={"known_issue"},
       layer={**W4A16, "activation": "relu2", "act_and_mul": False}),
    CT("w4a16-vllm-trtllm-swigluoai", "10.0", TRT, {"quant", "activation"},
       layer={**W4A16, "activation": "swigluoai"}, engine="vllm"),
    C("w4a16-fi-cutlass-sm110", "11.0", FIC, {"quant", "device"}, layer=W4A16),
    C("w4a16-fi-cutlass-sm120-cuda12.8", "12.0", FIC, {"quant"}, warns={"cuda"}, layer=W4A16,
      cuda="12.8"),
    C("w4a16-fi-cutlass-sm121", "12.1", FIC, {"quant"}, warns={"known_issue"}, layer=W4A16),
    C("w4a16-cutlass-sm90", "9.0", VC, {"quant", "device"}, layer=W4A16),
    C("w4a16-cutlass-cuda12.6", "10.0", VC, {"quant", "cuda"}, layer=W4A16, cuda="12.6"),
    C("w4a16-cutlass-relu2-gated", "10.0", VC, {"quant", "act_and_mul"},
      layer={**W4A16, "activation": "relu2", "act_and_mul": True}),
    # engines: vLLM's and SGLang's names for the FP8-only backends
    C("fp8-vllm-name-triton", "9.0", TR, layer=BLOCK, engine="vllm", name="triton"),
    C("fp8-vllm-name-deep-gemm", "9.0", DG, layer=BLOCK, engine="vllm", name="deep_gemm"),
    # PyPI's deep-gemm 1.0.0 lacks m_grouped_fp8_gemm_nt_contiguous and shadows vLLM's bundled
    # DeepGEMM; SGLang's sgl-deep-gemm (module deep_gemm) has it
    C("fp8-deep-gemm-pypi-1.0.0", "9.0", DG, {"known_issue"}, layer=BLOCK,
      pk={"deep-gemm": "1.0.0"}),
    C("fp8-deep-gemm-pypi-1.0.0-alone", "9.0", DG, {"package", "known_issue"}, layer=BLOCK,
      pk={"deep-gemm": "1.0.0", "vllm": None}),
    C("fp8-deep-gemm-sgl-deep-gemm", "9.0", DG, layer=BLOCK,
      pk={"sgl-deep-gemm": "0.2.3.post2", "vllm": None}),
    # ... any deep-gemm after 1.0.0 is the DeepGEMM the grouped MoE calls: neither missing nor
    # the known issue
    C("fp8-deep-gemm-pypi-1.0.1-alone", "9.0", DG, layer=BLOCK,
      pk={"deep-gemm": "1.0.1", "vllm": None}),
    # vLLM #54125 (open): DeepGEMM reported supported on SM 12.1 (DGX Spark) but faults there
    C("fp8-deep-gemm-sm121", "12.1", DG, warns={"known_issue"}, layer=BLOCK),
    C("fp8-deep-gemm-sm120", "12.0", DG, layer=BLOCK),
    # SGLang's CUTLASS block-FP8 GEMM is sgl-kernel's (sglang-kernel), not vLLM's, and runs on
    # SM 12.x only (fp8_utils.py _dispatch_explicit_backend raises elsewhere; tests/sglang)
    C("fp8-sglang-cutlass-linear-sglang-kernel", "12.0", "linear/cutlass", engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"sglang-kernel": "0.4.10", "vllm": None}),
    C("fp8-sglang-cutlass-linear-sm90", "9.0", "linear/cutlass", {"device"}, engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"sglang-kernel": "0.4.10", "vllm": None}),
    C("fp8-sglang-cutlass-linear-no-sglang-kernel", "12.0", "linear/cutlass", {"package"},
      engine="sglang", layer={**DENSE, "quant": "fp8_block"},
      pk={"sglang-kernel": None, "vllm": "0.32.0"}),
    # SGLang's FP8 MoE method runs triton when asked for flashinfer_cutlass (fp8.py; tests/sglang)
    C("fp8-sglang-fi-cutlass-moe-tensor", "12.0", "moe/flashinfer_cutlass", {"quant"},
      engine="sglang", layer={"quant": "fp8_tensor"}),
    C("fp8-sglang-fi-cutlass-moe-block", "9.0", "moe/flashinfer_cutlass", {"quant"},
      engine="sglang", layer={"quant": "fp8_block"}),
    # ... and its NVFP4 MoE method does run it (modelopt_quant.py ModelOptNvFp4FusedMoEMethod)
    C("sglang-fi-cutlass-moe-nvfp4", "10.0", "moe/flashinfer_cutlass", engine="sglang",
      layer={"quant": "nvfp4"}),
    # SGLang's FlashInfer CUTLASS block-FP8 GEMM: Blackwell and FlashInfer, no vLLM
    # (fp8_utils.py _dispatch_explicit_backend, _get_flashinfer_groupwise_backend; tests/sglang)
    C("fp8-sglang-fi-cutlass-linear-sm100", "10.0", "linear/flashinfer_cutlass", engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"vllm": None}),
    C("fp8-sglang-fi-cutlass-linear-sm90", "9.0", "linear/flashinfer_cutlass", {"device"},
      engine="sglang", layer={**DENSE, "quant": "fp8_block"}, pk={"vllm": None}),
    C("fp8-sglang-fi-cutlass-linear-sm110", "11.0", "linear/flashinfer_cutlass", engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"vllm": None}),
    C("fp8-sglang-fi-cutlass-linear-no-flashinfer", "12.0", "linear/flashinfer_cutlass",
      {"package"}, engine="sglang", layer={**DENSE, "quant": "fp8_block"},
      pk={"flashinfer-python": None, "vllm": None}),
    # SGLang's --fp8-gemm-backend flashinfer_trtllm (block FP8) needs is_sm100 (fp8_utils.py:1110-1117:
    # 'requires SM100/SM103 GPUs and FlashInfer', else RuntimeError)
    *[C(f"mut-sglang-fi-trtllm-linear-block-sm{d.replace('.', '')}", d, "linear/flashinfer_trtllm",
        set() if d.startswith("10") else {"device"}, engine="sglang",
        layer={**DENSE, "quant": "fp8_block"}, pk={"vllm": None}, only="device")
      for d in ("10.0", "10.3", "12.0")],
    # SGLang's FlashInfer TRT-LLM block-FP8 GEMM: SM 100/103 with FlashInfer only
    # (fp8_utils.py 1110-1117 _dispatch_explicit_backend)
    *[C(f"fp8-sglang-fi-trtllm-linear-sm{d.replace('.', '')}", d, "linear/flashinfer_trtllm",
        warns={"known_issue"}, engine="sglang", layer={**DENSE, "quant": "fp8_block"},
        pk={"vllm": None}) for d in ("10.0", "10.3")],
    # SGLang's DeepGEMM linear is its own distribution (replaces the vLLM package rule)
    C("fp8-sglang-deep-gemm-linear-own-dist", "9.0", "linear/deep_gemm", engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"sgl-deep-gemm": "0.2.3.post2", "vllm": None}),
    C("fp8-sglang-deep-gemm-linear-pypi-1.0.0", "9.0", "linear/deep_gemm", {"package"},
      engine="sglang", layer={**DENSE, "quant": "fp8_block"},
      pk={"deep-gemm": "1.0.0", "vllm": None}),
    C("fp8-sglang-deep-gemm-linear-pypi-1.0.1", "9.0", "linear/deep_gemm", engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"deep-gemm": "1.0.1", "vllm": None}),
    # SGLang loads an MXFP8 checkpoint from SM 10.0 on (fp8.py:329-339 Fp8Config.get_min_capability:
    # 100 with use_mxfp8; model_loader/loader.py:260 raises below it)
    *[C(f"mut-sglang-deep-gemm-linear-mxfp8-sm{d.replace('.', '')}", d, "linear/deep_gemm",
        set() if d in ("10.0", "12.0") else {"device"}, engine="sglang",
        layer={**DENSE, "quant": "mxfp8"}, pk={"sgl-deep-gemm": "0.2.3.post2", "vllm": None})
      for d in ("9.0", "10.0", "11.0", "12.0")],  # SM 11.x: DeepGEMM's own device list
    C("fp8-sglang-name-triton", "9.0", TR, layer=BLOCK, engine="sglang", name="triton"),
    C("fp8-sglang-name-deep-gemm", "9.0", DG, layer=BLOCK, engine="sglang", name="deep_gemm"),
    # A per-tensor FP8 layer under SGLang: CUTLASS (scales turned channelwise) except on SM 12.x,
    # where torch._scaled_mm runs it (fp8.py Fp8LinearMethod.process_weights_after_loading:
    # use_sm120_fp8_pertensor; fp8_utils.py apply_fp8_linear)
    C("fp8-sglang-per-tensor-sm90-cutlass", "9.0", "linear/cutlass", engine="sglang",
      layer={**DENSE, "quant": "fp8_tensor"}, pk={"sglang-kernel": "0.4.10", "vllm": None},
      kernel="fp8_scaled_mm", scheme="fp8_tensor"),
    C("fp8-sglang-per-tensor-sm120-not-cutlass", "12.0", "linear/cutlass", {"device"},
      engine="sglang", layer={**DENSE, "quant": "fp8_tensor"}, pk={"sglang-kernel": "0.4.10", "vllm": None}),
    C("fp8-sglang-per-tensor-sm90-not-torch", "9.0", "linear/torch_per_tensor", {"device"},
      engine="sglang", layer={**DENSE, "quant": "fp8_tensor"}, pk={"sglang-kernel": "0.4.10", "vllm": None}),
    C("fp8-sglang-per-tensor-sm120-torch", "12.0", "linear/torch_per_tensor", engine="sglang",
      layer={**DENSE, "quant": "fp8_tensor"}, pk={"sglang-kernel": "0.4.10", "vllm": None},
      kernel="torch._scaled_mm", scheme="fp8_tensor"),
    C("fp8-sglang-block-cutlass-kernel", "12.0", "linear/cutlass", engine="sglang",
      layer={**DENSE, "quant": "fp8_block"}, pk={"sglang-kernel": "0.4.10", "vllm": None},
      kernel="cutlass_w8a8_block_fp8_linear_with_fallback", scheme="fp8_block"),
    # ... the same CUTLASS fp8_scaled_mm for dynamic per-tensor activation scales and for a
    # per-channel weight scale (apply_fp8_linear: channelwise_cutlass)
    *[C(f"fp8-sglang-{q}-sm90-cutlass", "9.0", "linear/cutlass", engine="sglang",
        layer={**DENSE, "quant": q}, pk={"sglang-kernel": "0.4.10", "vllm": None},
        kernel="fp8_scaled_mm", scheme=q) for q in ("fp8_tensor_dynamic", "fp8_channel")],
    # ... on every device but SM 12.x (SM 8.9 with CUDA >= 12.4, as cutlass_fp8_supported)
    *[C(f"fp8-sglang-per-tensor-sm{d.replace('.', '')}-cutlass", d, "linear/cutlass",
        engine="sglang", layer={**DENSE, "quant": "fp8_tensor"},
        pk={"sglang-kernel": "0.4.10", "vllm": None}) for d in ("8.9", "10.0", "11.0")],
    C("fp8-sglang-per-tensor-dynamic-sm120-not-cutlass", "12.0", "linear/cutlass", {"device"},
      engine="sglang", layer={**DENSE, "quant": "fp8_tensor_dynamic"},
      pk={"sglang-kernel": "0.4.10", "vllm": None}),
]

HT = {"ep_size": 2, "all2all": "deepep_high_throughput"}
NAIVE = {"ep_size": 2, "all2all": "naive"}
AGRS = {"ep_size": 2, "all2all": "allgather_reducescatter"}


def _fp8_scheme_boundaries() -> List[Case]:
    """The boundaries of scheme-scoped rules, once for each scheme the backend runs."""
    out = []

    def each(backend, cases):
        for q in sorted(EXPECT_FP8_SCHEMES[backend]):
            for tag, dev, fails, layer, kw in cases(q):
                maker = CT if backend == TRT else C
                out.append(maker(f"fp8-{backend}-{q}-{tag}", dev, backend, fails,
                                 layer={"quant": q, **layer}, **kw))
    # vLLM's CUTLASS grouped GEMM: CUDA floors; the batched kernel under DeepEP low-latency
    each(VC, lambda q: [("sm90-cuda12.2", "9.0", {"cuda"}, {}, {"cuda": "12.2"}),
                        ("sm100-cuda12.6", "10.0", {"cuda"}, {}, {"cuda": "12.6"}),
                        ("sm100-cuda12.7", "10.0", {"cuda"}, {}, {"cuda": "12.7"}),
                        ("sm100-cuda12.8", "10.0", (), {}, {"cuda": "12.8"}),
                        ("batched", "10.0", (), LL, {"engine": "vllm", "status": "selected",
                                                     "kernel": "CutlassBatchedExpertsFp8",
                                                     "scheme": q})])
    # FlashInferExperts and MarlinExperts: the standard format only
    each(FIC, lambda q: [("deepep-ll", "9.0", {"parallel"}, LL, {}),
                         ("agrs", "9.0", (), AGRS, {})])
    each(MA, lambda q: [("deepep-ll", "9.0", {"parallel"}, LL, {}),
                        ("nvlink", "9.0", {"parallel"}, NVL, {}),
                        ("nvlink-one-sided", "9.0", (), NVL1, {}),
                        ("agrs", "9.0", (), AGRS, {})])
    # TRT-LLM: neither kernel takes DeepEP or the naive exchange; 2048 experts at most
    each(TRT, lambda q: [("deepep-ll", "10.0", {"parallel"}, LL, {}),
                         ("deepep-ht", "10.0", {"parallel"}, HT, {}),
                         ("naive", "10.0", {"parallel"}, NAIVE, {}),
                         ("agrs", "10.0", (), AGRS, {}),
                         ("2049-experts", "10.0", {"known_issue"}, {"num_experts": 2049}, {})])
    return out


# ---------------------------------------------------------------------------------------------
# MXFP4 (W4A16 `mxfp4`, W4A8 `mxfp4_w4a8`, W4A4 `mxfp4_w4a4`) and MXFP8 MoE: every device, version,
# activation and scheme boundary of the MXFP4/MXFP8 blocks. Sources: vLLM 0.32.0
# fused_moe/oracle/mxfp4.py and oracle/mxfp8.py, and each experts class's is_supported_config /
# _supports_* (trtllm_mxfp4_moe.py, trtllm_fp8_moe.py, flashinfer_cutlass_moe.py, b12x.py,
# cutlass_moe.py, marlin_moe.py, gpt_oss_triton_kernels_moe.py, deep_gemm_moe.py); vLLM
# csrc/quantization/fp4/mxfp4_experts_quant.cu.
MX4, MX48, MX44, MX8 = ({"quant": q} for q in ("mxfp4", "mxfp4_w4a8", "mxfp4_w4a4", "mxfp8"))
OLD_FI = {FI: "0.6.13", DSL: "4.5.0"}  # no cubin-download warning (flashinfer-cubin 0.6.13)
TRT, FIC, B12, CUT, MAR = ("moe/flashinfer_trtllm", "moe/flashinfer_cutlass", "moe/b12x",
                           "moe/cutlass", "moe/marlin")
TRI, TRU, DG = "moe/triton_kernels", "moe/triton_unfused", "moe/deep_gemm"
SWO = {"activation": "swigluoai"}
MX_CASES = [
    # SGLang replaces marlin by flashinfer_trtllm for MXFP8 MoE (overrides.py; tests/sglang)
    C("mx-sglang-marlin-mxfp8", "12.0", MAR, {"quant"}, engine="sglang", layer=MX8),
    # SGLang's flashinfer_mxfp4 is FlashInfer's CUTLASS MoE on SM 9.0 (W4A16) and 12.x (MXFP8 x
    # MXFP4), its TRT-LLM MoE on SM 10.x (mxfp4.py 412-441)
    # SGLang #34340: trtllm-gen MXFP4 MoE with SiTU hangs on SM 10.3
    C("mx-sglang-trtllm-situ-sm103", "10.3", TRT, {"known_issue"}, engine="sglang",
      pk=OLD_FI, layer={**MX48, "activation": "situ"}),
    C("mx-sglang-trtllm-situ-sm100", "10.0", TRT, engine="sglang", pk=OLD_FI,
      layer={**MX48, "activation": "situ"}),
    C("mx-sglang-trtllm-silu-sm103", "10.3", TRT, engine="sglang", pk=OLD_FI, layer=MX48),
    C("mx-sglang-trtllm-mxfp4-situ-sm103", "10.3", TRT, {"known_issue"}, engine="sglang",
      pk=OLD_FI, layer={**MX4, "activation": "situ"}),
    C("mx-sglang-fic-w4a8-sm100", "10.0", FIC, {"device"}, engine="sglang", layer=MX48),
    C("mx-sglang-fic-w4a8-sm120", "12.0", FIC, engine="sglang", layer=MX48, pk={"vllm": None},
      name="flashinfer_mxfp4"),
    C("mx-sglang-fic-mxfp4-sm120", "12.0", FIC, engine="sglang", layer={**MX4, **SWO},
      pk={"vllm": None}, warns={"engine"}, name="flashinfer_mxfp4", scheme="mxfp4_w4a8",
      kernel="FlashInfer cutlass_fused_moe (MXFP8 x MXFP4, SGLang's cutlass_sm120 path)"),
    C("mx-sglang-fic-mxfp4-sm121", "12.1", FIC, engine="sglang", layer={**MX4, **SWO},
      warns={"engine"}, name="flashinfer_mxfp4", scheme="mxfp4_w4a8"),
    C("mx-sglang-fic-mxfp4-sm100", "10.0", FIC, {"device"}, engine="sglang",
      layer={**MX4, **SWO}),
    C("mx-sglang-fic-mxfp4-sm90", "9.0", FIC, engine="sglang", layer={**MX4, **SWO},
      pk={FI: "0.6.11"}, name="flashinfer_mxfp4", scheme="mxfp4",
      kernel="FlashInfer cutlass_fused_moe (W4A16, SGLang's cutlass_sm90 path)"),
    C("mx-sglang-fic-mxfp4-sm90-fi-0.6.10", "9.0", FIC, {"package"}, engine="sglang",
      layer={**MX4, **SWO}, pk={FI: "0.6.10"}),
    C("mx-sglang-fic-mxfp4-no-fi", "12.0", FIC, {"package"}, engine="sglang",
      layer={**MX4, **SWO}, pk={FI: None}, warns={"engine"}),
    C("mx-sglang-fic-nvfp4-sm120-no-vllm", "12.0", FIC, engine="sglang", pk={"vllm": None},
      layer={"quant": "nvfp4"}),
    # SGLang's flashinfer_cutlass / flashinfer_cutedsl MoE runners take --ep-size 1 or the TP
    # size only (arg_groups/moe_hook.py 80-105): EP 2 with MoE TP 4 (--tp-size 8) is refused
    C("sglang-fic-nvfp4-ep2-tp4", "12.0", FIC, {"parallel"}, engine="sglang",
      pk={"vllm": None}, layer={"quant": "nvfp4", "ep_size": 2, "tp_size": 4}),
    C("sglang-fic-nvfp4-ep8-tp1", "12.0", FIC, engine="sglang", pk={"vllm": None},
      layer={"quant": "nvfp4", "ep_size": 8, "tp_size": 1}),
    C("sglang-fic-nvfp4-ep1-tp8", "12.0", FIC, engine="sglang", pk={"vllm": None},
      layer={"quant": "nvfp4", "ep_size": 1, "tp_size": 8}),
    C("sglang-cutedsl-nvfp4-ep2-tp4", "10.0", "moe/flashinfer_cutedsl", {"parallel"},
      engine="sglang", pk={"vllm": None}, layer={"quant": "nvfp4", "ep_size": 2, "tp_size": 4}),
    C("sglang-cutedsl-nvfp4-ep8-tp1", "10.0", "moe/flashinfer_cutedsl", engine="sglang",
      pk={"vllm": None}, layer={"quant": "nvfp4", "ep_size": 8, "tp_size": 1}),
    # SGLang's FP8 MoE methods build no marlin runner (fp8.py 2985-2999, 3227;
    # compressed_tensors_w8a8_fp8_moe.py 356-365; modelopt_quant.py 1343-1367)
    *[C(f"fp8-sglang-marlin-moe-{q}", "9.0", MAR, {"quant"}, engine="sglang", layer={"quant": q})
      for q in ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")],
    C("mx-sglang-marlin-mxfp4", "9.0", MAR, engine="sglang", layer=MX4),
    # TRT-LLM MXFP4 (bf16 or MXFP8 activations): SM 10.x, swigluoai/silu/situ, gated only
    C("mx-trtllm-mxfp4-swigluoai-sm100", "10.0", TRT, pk=OLD_FI, layer={**MX4, **SWO},
      status="selected"),
    C("mx-trtllm-w4a8-silu-sm103", "10.3", TRT, pk=OLD_FI, layer=MX48, status="selected"),
    C("mx-trtllm-mxfp4-sm90", "9.0", TRT, {"device"}, pk=OLD_FI, layer={**MX4, **SWO}),
    C("mx-trtllm-mxfp4-sm120", "12.0", TRT, {"device"}, pk=OLD_FI, layer={**MX4, **SWO}),
    C("mx-trtllm-w4a8-sm90", "9.0", TRT, {"device"}, pk=OLD_FI, layer={**MX48, **SWO}),
    C("mx-trtllm-w4a8-sm120", "12.0", TRT, {"device"}, pk=OLD_FI, layer={**MX48, **SWO}),
    C("mx-trtllm-mxfp4-gelu", "10.0", TRT, {"activation"}, pk=OLD_FI,
      layer={**MX4, "activation": "gelu"}),
    C("mx-trtllm-mxfp4-silu-nongated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX4, "act_and_mul": False}),
    C("mx-trtllm-mxfp4-situ", "10.0", TRT, pk=OLD_FI, layer={**MX4, "activation": "situ"}),
    C("mx-trtllm-mxfp4-relu2", "10.0", TRT, {"activation"}, pk=OLD_FI,
      layer={**MX4, "activation": "relu2", "act_and_mul": False}),
    C("mx-trtllm-mxfp4-no-fi", "10.0", TRT, {"package"}, pk={FI: None}, layer={**MX4, **SWO}),
    C("mx-vllm-trtllm-mxfp4-swigluoai", "10.0", TRT, pk=OLD_FI, layer={**MX4, **SWO},
      engine=V, kernel="TrtLlmMxfp4ExpertsMonolithic", scheme="mxfp4"),
    C("mx-vllm-trtllm-w4a8-silu", "10.0", TRT, pk=OLD_FI, layer=MX48, engine=V,
      kernel="TrtLlmMxfp4ExpertsMonolithic", scheme="mxfp4_w4a8"),
    C("mx-vllm-trtllm-mxfp4-gelu", "10.0", TRT, {"activation"}, pk=OLD_FI,
      layer={**MX4, "activation": "gelu"}, engine=V),
    C("mx-vllm-trtllm-w4a8-situ-0.6.15", "10.0", TRT, {"feature"}, warns={"known_issue"},
      pk={FI: "0.6.15", DSL: "4.5.0"},
      layer={**MX48, "activation": "situ"}, engine=V),
    C("mx-vllm-trtllm-w4a8-situ-0.6.16", "10.0", TRT, warns={"known_issue"},
      pk={FI: "0.6.16", DSL: "4.5.0"}, layer={**MX48, "activation": "situ"}, engine=V),
    C("mx-trtllm-w4a8-gelu", "10.0", TRT, {"activation"}, pk=OLD_FI,
      layer={**MX48, "activation": "gelu"}),
    C("mx-vllm-trtllm-w4a8-gelu", "10.0", TRT, {"activation"}, pk=OLD_FI,
      layer={**MX48, "activation": "gelu"}, engine=V),
    C("mx-trtllm-mxfp4-swigluoai-nongated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX4, **SWO, "act_and_mul": False}),
    C("mx-trtllm-mxfp4-situ-nongated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX4, "activation": "situ", "act_and_mul": False}),
    C("mx-trtllm-w4a8-silu-nongated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX48, "act_and_mul": False}),
    C("mx-vllm-b12x-mxfp4-situ", "12.0", B12, warns={"engine"}, layer={**MX4, "activation": "situ"},
      engine=V, kernel="B12xExperts", scheme="mxfp4_w4a8"),
    # TRT-LLM FP8 experts on MXFP8: silu, swigluoai_uninterleave gated, relu2 non-gated
    C("mx-trtllm-mxfp8-swiglu-uninterleave", "10.0", TRT, pk=OLD_FI,
      layer={**MX8, "activation": "swigluoai_uninterleave"}),
    C("mx-trtllm-mxfp8-silu-nongated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX8, "act_and_mul": False}),
    C("mx-trtllm-mxfp8-swiglu-uninterleave-nongated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX8, "activation": "swigluoai_uninterleave", "act_and_mul": False}),
    C("mx-vllm-trtllm-mxfp8-swiglu-uninterleave", "10.0", TRT, pk=OLD_FI,
      layer={**MX8, "activation": "swigluoai_uninterleave"}, engine=V),
    C("mx-vllm-trtllm-mxfp8-relu2", "10.0", TRT, pk=OLD_FI,
      layer={**MX8, "activation": "relu2", "act_and_mul": False}, engine=V),
    C("mx-trtllm-mxfp8-silu", "10.0", TRT, pk=OLD_FI, layer=MX8, status="selected"),
    C("mx-trtllm-mxfp8-relu2", "10.0", TRT, pk=OLD_FI,
      layer={**MX8, "activation": "relu2", "act_and_mul": False}),
    C("mx-trtllm-mxfp8-relu2-gated", "10.0", TRT, {"act_and_mul"}, pk=OLD_FI,
      layer={**MX8, "activation": "relu2"}),
    C("mx-trtllm-mxfp8-swigluoai", "10.0", TRT, {"activation"}, pk=OLD_FI, layer={**MX8, **SWO}),
    C("mx-trtllm-mxfp8-sm90", "9.0", TRT, {"device"}, pk=OLD_FI, layer=MX8),
    C("mx-vllm-trtllm-mxfp8-silu", "10.0", TRT, pk=OLD_FI, layer=MX8, engine=V,
      kernel="TrtLlmFp8ExpertsMonolithic", scheme="mxfp8"),
    C("mx-vllm-trtllm-mxfp8-swigluoai", "10.0", TRT, {"activation"}, pk=OLD_FI,
      layer={**MX8, **SWO}, engine=V),
    # FlashInfer CUTLASS: MXFP4 x bf16 on SM 9.0 only; MXFP4 x MXFP8 on 10.x and 12.x (not 11.x)
    C("mx-fic-mxfp4-sm90", "9.0", FIC, layer={**MX4, **SWO}),
    C("mx-fic-mxfp4-sm100", "10.0", FIC, {"device"}, layer={**MX4, **SWO}),
    C("mx-fic-mxfp4-sm120", "12.0", FIC, {"device"}, layer={**MX4, **SWO}),
    C("mx-fic-w4a8-sm90", "9.0", FIC, {"device"}, layer={**MX48, **SWO}),
    C("mx-fic-w4a8-sm100", "10.0", FIC, layer={**MX48, **SWO}),
    C("mx-fic-w4a8-sm110", "11.0", FIC, {"device"}, layer={**MX48, **SWO}),
    C("mx-fic-w4a8-sm120-cuda12.8", "12.0", FIC, layer={**MX48, **SWO}, cuda="12.8",
      status="selected"),
    C("mx-fic-w4a8-sm121", "12.1", FIC, layer={**MX48, **SWO}, status="selected"),
    C("mx-fic-w4a8-gelu", "10.0", FIC, {"activation"}, layer={**MX48, "activation": "gelu"}),
    C("mx-fic-w4a4", "10.0", FIC, {"quant"}, layer=MX44),
    C("mx-vllm-fic-mxfp4-sm90", "9.0", FIC, layer={**MX4, **SWO}, engine=V,
      kernel="FlashInferExperts", scheme="mxfp4"),
    # native b12x (opt-in): MXFP4 W4A16 or W4A8 (silu/situ only; hidden % 256, intermediate % 32)
    C("mx-b12x-mxfp4-silu", "12.0", B12, layer=MX4, status="opt_in"),
    C("mx-b12x-mxfp4-swiglu-uninterleave", "12.0", B12,
      layer={**MX4, "activation": "swigluoai_uninterleave"}, status="opt_in"),
    C("mx-b12x-w4a8-swiglu-uninterleave", "12.0", B12, {"activation"},
      layer={**MX48, "activation": "swigluoai_uninterleave"}),
    C("mx-b12x-w4a8-relu2", "12.0", B12, {"activation"},
      layer={**MX48, "activation": "relu2", "act_and_mul": False}),
    C("mx-b12x-w4a8-situ", "12.0", B12, layer={**MX48, "activation": "situ"}, status="opt_in"),
    C("mx-b12x-w4a8-hidden-2880", "12.0", B12, {"shape"}, layer={**MX48, "hidden_size": 2880}),
    C("mx-b12x-w4a8-hidden-2048", "12.0", B12, layer={**MX48, "hidden_size": 2048},
      status="opt_in"),
    C("mx-b12x-mxfp4-hidden-2880", "12.0", B12, layer={**MX4, "hidden_size": 2880},
      status="opt_in"),
    C("mx-b12x-mxfp4-inter-1000", "12.0", B12, {"shape"}, layer={**MX4, "intermediate_size": 1000}),
    C("mx-b12x-w4a8-hidden-2304", "12.0", B12, layer={**MX48, "hidden_size": 2304},
      status="opt_in"),
    C("mx-b12x-w4a8-hidden-2176", "12.0", B12, {"shape"}, layer={**MX48, "hidden_size": 2176}),
    C("mx-b12x-mxfp4-inter-1040", "12.0", B12, {"shape"}, layer={**MX4, "intermediate_size": 1040}),
    C("mx-b12x-mxfp4-inter-1056", "12.0", B12, layer={**MX4, "intermediate_size": 1056},
      status="opt_in"),
    C("mx-b12x-w4a8-inter-1000", "12.0", B12, {"shape"}, layer={**MX48, "intermediate_size": 1000}),
    C("mx-b12x-mxfp4-inter-1024", "12.0", B12, layer={**MX4, "intermediate_size": 1024},
      status="opt_in"),
    C("mx-b12x-mxfp4-sm100", "10.0", B12, {"device"}, layer=MX4),
    C("mx-b12x-mxfp4-ep2", "12.0", B12, {"parallel"}, layer={**MX4, "ep_size": 2}),
    C("mx-b12x-w4a4", "12.0", B12, {"quant"}, layer=MX44),
    C("mx-vllm-b12x-mxfp4-silu", "12.0", B12, warns={"engine"}, layer=MX4, engine=V,
      kernel="B12xExperts", scheme="mxfp4_w4a8"),
    C("mx-vllm-b12x-mxfp4-swiglu-uninterleave", "12.0", B12,
      layer={**MX4, "activation": "swigluoai_uninterleave"}, engine=V, kernel="B12xExperts",
      scheme="mxfp4"),
    C("mx-vllm-b12x-w4a8-situ", "12.0", B12, layer={**MX48, "activation": "situ"}, engine=V,
      kernel="B12xExperts", scheme="mxfp4_w4a8"),
    # vLLM CUTLASS MXFP4 x MXFP4: SM 10.x and 11.x, built with CUDA >= 12.9
    C("mx-cutlass-w4a4-sm100-cuda12.9", "10.0", CUT, layer=MX44, cuda="12.9", status="selected"),
    C("mx-cutlass-w4a4-sm100-cuda12.8", "10.0", CUT, {"cuda"}, layer=MX44, cuda="12.8"),
    C("mx-cutlass-w4a4-sm110", "11.0", CUT, layer=MX44, status="selected"),
    C("mx-cutlass-w4a4-sm120", "12.0", CUT, {"device"}, layer=MX44),
    C("mx-cutlass-w4a4-sm90", "9.0", CUT, {"device"}, layer=MX44),
    C("mx-cutlass-w4a4-ep-deepep-ht", "10.0", CUT, {"parallel"},
      layer={**MX44, "ep_size": 2, "all2all": "deepep_high_throughput"}),
    C("mx-cutlass-mxfp4", "10.0", CUT, {"quant"}, layer=MX4),
    # CutlassExpertsMxfp4._supports_activation: apply_moe_activation_supported (no gated relu2)
    C("mx-cutlass-w4a4-relu2-gated", "10.0", CUT, {"act_and_mul"},
      layer={**MX44, "activation": "relu2", "act_and_mul": True}),
    C("mx-cutlass-w4a4-relu2", "10.0", CUT,
      layer={**MX44, "activation": "relu2", "act_and_mul": False}),
    C("mx-vllm-cutlass-w4a4", "10.0", CUT, layer=MX44, engine=V, kernel="CutlassExpertsMxfp4",
      scheme="mxfp4_w4a4"),
    # Marlin: MXFP4 and MXFP8 weights with bf16 activations, SM >= 7.5
    C("mx-marlin-mxfp4-sm75", "7.5", MAR, layer={**MX4, **SWO}, status="selected"),
    C("mx-marlin-mxfp4-sm70", "7.0", MAR, {"device"}, layer={**MX4, **SWO}),
    C("mx-marlin-w4a8-sm90", "9.0", MAR, layer={**MX48, **SWO}, status="selected"),
    C("mx-marlin-w4a4-sm90", "9.0", MAR, layer=MX44, status="selected"),
    C("mx-marlin-mxfp8-sm90", "9.0", MAR, layer={**MX8, **SWO}, status="selected"),
    C("mx-vllm-marlin-mxfp8", "9.0", MAR, layer=MX8, engine=V, kernel="MarlinExperts",
      scheme="mxfp8"),
    C("mx-vllm-marlin-mxfp4", "12.0", MAR, layer=MX4, engine=V, kernel="MarlinExperts",
      scheme="mxfp4"),
    C("mx-vllm-marlin-w4a8", "9.0", MAR, warns={"engine"}, layer=MX48, engine=V,
      kernel="MarlinExperts", scheme="mxfp4"),
    C("mx-vllm-marlin-w4a4", "12.0", MAR, warns={"engine"}, layer=MX44, engine=V,
      kernel="MarlinExperts", scheme="mxfp4"),
    # OpenAI triton_kernels (vLLM's TRITON): swigluoai only; after Marlin on SM 12.x
    C("mx-triton-sm90", "9.0", TRI, layer={**MX4, **SWO}, status="selected"),
    C("mx-triton-sm89", "8.9", TRI, {"device"}, layer={**MX4, **SWO}),
    C("mx-triton-sm121", "12.1", TRI, layer={**MX4, **SWO}, status="eligible"),
    C("mx-triton-sm110", "11.0", TRI, layer={**MX4, **SWO}, status="selected"),
    C("mx-triton-silu", "9.0", TRI, {"activation"}, layer=MX4),
    C("mx-triton-nongated", "9.0", TRI, {"act_and_mul"}, layer={**MX4, **SWO, "act_and_mul": False}),
    C("mx-triton-no-vllm", "9.0", TRI, {"package"}, pk={"vllm": None}, layer={**MX4, **SWO}),
    C("mx-triton-standalone-triton-kernels", "9.0", TRI, pk={"vllm": None, "triton-kernels": "1.0"},
      layer={**MX4, **SWO}, status="selected"),
    C("mx-triton-no-triton", "9.0", TRI, {"package"}, pk={"triton": None}, layer={**MX4, **SWO}),
    C("mx-triton-w4a8", "9.0", TRI, {"quant"}, layer={**MX48, **SWO}),
    C("mx-vllm-triton-sm90", "9.0", TRI, layer={**MX4, **SWO}, engine=V,
      kernel="OAITritonMxfp4ExpertsMonolithic", scheme="mxfp4"),
    C("mx-triton-unfused-silu", "9.0", TRU, layer=MX4, status="opt_in"),
    C("mx-triton-unfused-gelu-tanh", "9.0", TRU, {"activation"},
      layer={**MX4, "activation": "gelu_tanh"}),
    C("mx-triton-unfused-sm89", "8.9", TRU, {"device"}, layer=MX4),
    C("mx-triton-unfused-no-vllm", "9.0", TRU, {"package"}, pk={"vllm": None}, layer=MX4),
    C("mx-vllm-triton-unfused", "9.0", TRU, layer=MX4, engine=V, kernel="UnfusedOAITritonExperts",
      scheme="mxfp4"),
    # DeepGEMM MXFP8 (1x32): SM 10.x, silu/swiglustep/swigluoai_uninterleave, not FlashInfer NVLink
    C("mx-deep-gemm-mxfp8-sm100", "10.0", DG, pk=OLD_FI, layer=MX8),
    C("mx-deep-gemm-mxfp8-sm90", "9.0", DG, {"device"}, layer=MX8),
    C("mx-deep-gemm-mxfp8-sm120", "12.0", DG, {"device"}, layer=MX8),
    C("mx-deep-gemm-mxfp8-no-vllm", "10.0", DG, {"package"}, pk={"vllm": None}, layer=MX8),
    C("mx-deep-gemm-mxfp8-deep-gemm", "10.0", DG, pk={"vllm": None, "deep-gemm": "2.1.0"},
      layer=MX8),
    C("mx-deep-gemm-mxfp8-gelu", "10.0", DG, {"activation"}, layer={**MX8, "activation": "gelu"}),
    C("mx-deep-gemm-mxfp8-nongated", "10.0", DG, {"act_and_mul"},
      layer={**MX8, "act_and_mul": False}),
    *[C(f"mx-deep-gemm-mxfp8-ep-nvlink-{x[-10:]}", "10.0", DG, {"parallel"},
        layer={**MX8, "ep_size": 2, "all2all": x})
      for x in ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided")],
    C("mx-deep-gemm-mxfp8-ep", "10.0", DG, layer={**MX8, "ep_size": 2}),
    C("mx-deep-gemm-w4a8", "10.0", DG, {"quant"}, layer=MX48),
    C("mx-vllm-deep-gemm-mxfp8", "10.0", DG, layer=MX8, engine=V, kernel="DeepGemmExperts",
      scheme="mxfp8"),
]

# ---------------------------------------------------------------------------------------------
# FP8, MXFP8 and MXFP4 linear layers (issue 26): the schemes each linear backend implements, the
# devices each (backend, scheme) runs on, their boundaries and the kernel vLLM 0.32.0 builds

_SM89_UP = {"8.9", "9.0", "10.0", "10.3", "10.7", "11.0", "12.0", "12.1"}
_SM100_UP = {"10.0", "10.3", "10.7", "11.0", "12.0", "12.1"}
_SM10X = {"10.0", "10.3", "10.7"}
_SM12X = {"12.0", "12.1"}
_FP8_PT = ("fp8_tensor", "fp8_tensor_dynamic")
_FP8_ALL = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
_MX = ("mxfp8", "mxfp4", "mxfp4_w4a8", "mxfp4_w4a4")
# The non-NVFP4 schemes each linear backend of this file implements (torch_* and
# triton_block_fp8 are pinned with their own files), with the vLLM 0.32.0 kernel lists that say so
# (kernels/linear/__init__.py _LINEAR_BACKEND_KERNEL_MAP and _POSSIBLE_*_KERNELS[CUDA])
EXPECT_LINEAR_SCHEMES = {
    "linear/flashinfer_cutlass": {"fp8_tensor", "fp8_tensor_dynamic", "fp8_block", "mxfp8",
                                  "mxfp4_w4a4"},
    "linear/flashinfer_cutedsl": {"mxfp8"},
    "linear/flashinfer_trtllm": {"mxfp8"},
    "linear/flashinfer_cudnn": set(), "linear/flashinfer_b12x": set(),
    "linear/cutlass": set(_FP8_ALL),
    "linear/b12x": {"fp8_tensor", "fp8_block", "mxfp8", "mxfp4_w4a4"},
    "linear/marlin": set(_FP8_ALL) | {"mxfp8", "mxfp4", "mxfp4_w4a4"},
    "linear/deep_gemm": {"fp8_block"},
    "linear/emulation": set(),  # selector's reference computes NVFP4 only
}
# (backend, scheme) -> the devices it runs on
EXPECT_SCHEME_DEVICES = {
    # vLLM 0.32.0 scaled_mm/flashinfer.py FlashInferFP8ScaledMMLinearKernel: cc >= 100
    **{("linear/flashinfer_cutlass", q): _SM100_UP for q in _FP8_PT},
    # utils/flashinfer.py has_flashinfer_fp8_blockscale_gemm: is_device_capability(90)
    ("linear/flashinfer_cutlass", "fp8_block"): {"9.0"},
    # mxfp8/flashinfer.py, mxfp4/flashinfer.py: has_device_capability(100)
    ("linear/flashinfer_cutlass", "mxfp8"): _SM100_UP,
    ("linear/flashinfer_cutlass", "mxfp4_w4a4"): _SM100_UP,
    # csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu: FP8 >= 89, block FP8 >= 90
    **{("linear/cutlass", q): _SM89_UP for q in _FP8_ALL[:3]},
    ("linear/cutlass", "fp8_block"): _SM89_UP - {"8.9"},
    # support_deep_gemm 9.0, 10.x, 12.x; DeepGEMM PR #324 (sm120); 12.1 known issue vLLM #54125
    ("linear/deep_gemm", "fp8_block"): {"9.0", "10.0", "10.3", "10.7", "12.0", "12.1"},
    # marlin_utils_fp8.py is_fp8_marlin_supported, marlin_utils_fp4.py: cc >= 75
    **{("linear/marlin", q): set(DEVICES) - {"7.0"} for q in _FP8_ALL + ("mxfp8", "mxfp4",
                                                                         "mxfp4_w4a4")},
    # mxfp8/flashinfer.py CuTe-DSL and TRT-LLM MXFP8: is_device_capability_family(100)
    ("linear/flashinfer_cutedsl", "mxfp8"): _SM10X,
    ("linear/flashinfer_trtllm", "mxfp8"): _SM10X,
    # scaled_mm/b12x.py, mxfp8/b12x.py, mxfp4/b12x.py: is_device_capability_family(120)
    **{("linear/b12x", q): _SM12X for q in ("fp8_tensor", "fp8_block", "mxfp8", "mxfp4_w4a4")},
}
# A device and a shape where every other rule of the (backend, scheme) passes
SCHEME_HOME = {k: next(d for d in ("9.0", "10.0", "12.0", "8.9") if d in ok)
               for k, ok in EXPECT_SCHEME_DEVICES.items()}
DSV3 = {"op": "linear", "act_and_mul": False, "hidden_size": 7168, "intermediate_size": 18432}


def _scheme_cases() -> List[Case]:
    out = []
    for (backend, quant), ok in EXPECT_SCHEME_DEVICES.items():
        for dev in DEVICES:
            out.append(C(f"{backend}-{quant}-device-{dev}", dev, backend,
                         fails={"device"} - ({"device"} if dev in ok else set()),
                         layer={**DSV3, "quant": quant}, only="device"))
    for backend, schemes in EXPECT_LINEAR_SCHEMES.items():
        for quant in _FP8_ALL + _MX:
            dev = SCHEME_HOME.get((backend, quant), HOME[backend])
            out.append(C(f"{backend}-implements-{quant}", dev, backend,
                         fails=() if quant in schemes else {"quant"},
                         layer={**DSV3, "quant": quant}, only="quant"))
    return out


FCUT, CUT, DG, MAR, B12 = ("linear/flashinfer_cutlass", "linear/cutlass", "linear/deep_gemm",
                           "linear/marlin", "linear/b12x")
FCD, FTR = "linear/flashinfer_cutedsl", "linear/flashinfer_trtllm"


def _lin(quant, **kw):
    return {**DSV3, "quant": quant, **kw}


def _cutlass_cuda() -> List[Case]:
    """scaled_mm_entry.cu cutlass_scaled_mm_supports_fp8: SM 8.9 needs CUDA 12.4 and SM >= 9.0
    CUDA 12.0 (every FP8 scheme but block on 8.9); supports_block_fp8: SM >= 10.0 CUDA 12.8."""
    out = []
    for q in _FP8_ALL[:3]:
        out += [C(f"cutlass-{q}-sm89-cuda-12.3", "8.9", CUT, {"cuda"}, layer=_lin(q),
                  cuda="12.3"),
                C(f"cutlass-{q}-sm89-cuda-12.4", "8.9", CUT, layer=_lin(q), cuda="12.4")]
    for q in _FP8_ALL:
        out += [C(f"cutlass-{q}-sm90-cuda-11.8", "9.0", CUT, {"cuda"}, layer=_lin(q),
                  cuda="11.8"),
                C(f"cutlass-{q}-sm90-cuda-12.0", "9.0", CUT, layer=_lin(q), cuda="12.0")]
    return out


def _marlin_vllm_only() -> List[Case]:
    """Marlin's FP8, MXFP8 and MXFP4 GEMMs are vLLM's (kernels/linear/scaled_mm/marlin.py,
    mxfp8/marlin.py, mxfp4/marlin.py): with SGLang alone (whose JIT Marlin is NVFP4's) they
    are missing, the NVFP4 one is not."""
    sgl = {"vllm": None, "sglang": "0.5.23"}
    return [C(f"marlin-{q}-sglang-only", "9.0", MAR, set() if q.startswith("nvfp4") else
              {"package"}, warns={"known_issue"}, layer=_lin(q), pk=sgl)
            for q in ("nvfp4",) + _FP8_ALL + ("mxfp8", "mxfp4", "mxfp4_w4a4")]


SCHEME_BOUNDARIES = _cutlass_cuda() + _marlin_vllm_only() + [
    # ... cutlass_scaled_mm_supports_block_fp8: SM >= 10.0 needs CUDA 12.8, SM 9.0 12.0
    C("cutlass-block-sm100-cuda-12.6", "10.0", CUT, {"cuda"}, layer=_lin("fp8_block"),
      cuda="12.6"),
    C("cutlass-block-sm100-cuda-12.7", "10.0", CUT, {"cuda"}, layer=_lin("fp8_block"),
      cuda="12.7"),
    C("cutlass-block-sm100-cuda-12.8", "10.0", CUT, layer=_lin("fp8_block"), cuda="12.8"),
    C("cutlass-block-sm90-cuda-12.0", "9.0", CUT, layer=_lin("fp8_block"), cuda="12.0"),
    # the NVFP4 CUDA-12.8 rule holds for NVFP4 only
    C("cutlass-fp8-sm100-cuda-12.6", "10.0", CUT, layer=_lin("fp8_tensor"), cuda="12.6"),
    C("fi-cutlass-fp8-sm100-cuda-12.6", "10.0", FCUT, layer=_lin("fp8_tensor"), cuda="12.6"),
    C("fi-cutlass-fp8-no-flashinfer", "10.0", FCUT, {"package"}, layer=_lin("fp8_tensor"),
      pk={FI: None}),
    # utils/flashinfer.py should_use_flashinfer_for_blockscale_fp8_gemm: bf16, N % 64, K % 128
    C("fi-cutlass-block-fp16", "9.0", FCUT, {"dtype"}, layer=_lin("fp8_block", dtype="float16")),
    C("fi-cutlass-block-n4160", "9.0", FCUT, layer=_lin("fp8_block", intermediate_size=4160)),
    C("fi-cutlass-block-n4128", "9.0", FCUT, {"shape"},
      layer=_lin("fp8_block", intermediate_size=4128)),
    C("fi-cutlass-block-k4160", "9.0", FCUT, {"shape"}, layer=_lin("fp8_block", hidden_size=4160)),
    C("fi-cutlass-block-k4224", "9.0", FCUT, layer=_lin("fp8_block", hidden_size=4224)),
    C("fi-cutlass-block-no-vllm", "9.0", FCUT, {"package"}, layer=_lin("fp8_block"),
      pk={"vllm": None}),
    # mxfp8/flashinfer.py _check_mm_mxfp8_shape (K % 32) and N % 32 on SM 12.x only
    C("fi-cutlass-mxfp8-k4112", "10.0", FCUT, {"shape"}, layer=_lin("mxfp8", hidden_size=4112)),
    C("fi-cutlass-mxfp8-k4128", "10.0", FCUT, layer=_lin("mxfp8", hidden_size=4128)),
    C("fi-cutlass-mxfp8-n4112-sm120", "12.0", FCUT, {"shape"},
      layer=_lin("mxfp8", intermediate_size=4112)),
    C("fi-cutlass-mxfp8-n4112-sm100", "10.0", FCUT, layer=_lin("mxfp8", intermediate_size=4112)),
    C("fi-cutlass-mxfp8-n4128-sm120", "12.0", FCUT, layer=_lin("mxfp8", intermediate_size=4128)),
    # _check_mm_mxfp8_shape: K >= 128 and N >= 128 (shape rules with `min`), both FlashInfer
    # MXFP8 GEMMs of vLLM
    C("fi-cutlass-mxfp8-k96", "10.0", FCUT, {"shape"}, layer=_lin("mxfp8", hidden_size=96)),
    C("fi-cutlass-mxfp8-k128", "10.0", FCUT, layer=_lin("mxfp8", hidden_size=128)),
    C("fi-cutlass-mxfp8-n127", "10.0", FCUT, {"shape"},
      layer=_lin("mxfp8", intermediate_size=127)),
    C("fi-cutlass-mxfp8-n128", "10.0", FCUT, layer=_lin("mxfp8", intermediate_size=128)),
    C("fi-cutedsl-mxfp8-k96", "10.0", "linear/flashinfer_cutedsl", {"shape"},
      layer=_lin("mxfp8", hidden_size=96)),
    C("fi-cutedsl-mxfp8-k128", "10.0", "linear/flashinfer_cutedsl",
      layer=_lin("mxfp8", hidden_size=128)),
    C("fi-cutedsl-mxfp8-n64", "10.0", "linear/flashinfer_cutedsl", {"shape"},
      layer=_lin("mxfp8", intermediate_size=64)),
    C("fi-cutedsl-mxfp8-n128", "10.0", "linear/flashinfer_cutedsl",
      layer=_lin("mxfp8", intermediate_size=128)),
    # mxfp4/flashinfer.py: has_flashinfer_cutedsl
    C("fi-cutlass-mxfp4-no-dsl", "10.0", FCUT, {"package"}, layer=_lin("mxfp4_w4a4"),
      pk={DSL: None}),
    C("fi-cutlass-mxfp4-dsl", "10.0", FCUT, layer=_lin("mxfp4_w4a4")),
    # deep_gemm.py can_implement: bf16 out; should_use_deepgemm_for_fp8_linear: N % 64, K % 128
    C("deep-gemm-fp16", "9.0", DG, {"dtype"}, layer=_lin("fp8_block", dtype="float16")),
    C("deep-gemm-n4160", "9.0", DG, layer=_lin("fp8_block", intermediate_size=4160)),
    C("deep-gemm-n4128", "10.0", DG, {"shape"}, layer=_lin("fp8_block", intermediate_size=4128)),
    C("deep-gemm-k4160", "10.0", DG, {"shape"}, layer=_lin("fp8_block", hidden_size=4160)),
    C("deep-gemm-k4224", "10.0", DG, layer=_lin("fp8_block", hidden_size=4224)),
    C("deep-gemm-no-vllm", "9.0", DG, {"package"}, layer=_lin("fp8_block"), pk={"vllm": None}),
    # vLLM #54125 (open): reported supported on SM 12.1 (DGX Spark) but faults there
    C("deep-gemm-sm121", "12.1", DG, warns={"known_issue"}, layer=_lin("fp8_block")),
    C("deep-gemm-sm120", "12.0", DG, layer=_lin("fp8_block")),
    # mxfp8/marlin.py K % 32; marlin FP8/MX needs vLLM's kernels
    C("marlin-mxfp8-k4112", "9.0", MAR, {"shape"}, layer=_lin("mxfp8", hidden_size=4112)),
    C("marlin-mxfp8-k4128", "9.0", MAR, layer=_lin("mxfp8", hidden_size=4128)),
    C("marlin-fp8-no-vllm", "9.0", MAR, {"package"}, layer=_lin("fp8_block"),
      pk={"vllm": None}),
    # scaled_mm/b12x.py: block FP8 K % 128 and N % 128, tensor FP8 K % 32
    C("b12x-block-n4160", "12.0", B12, {"shape"}, layer=_lin("fp8_block", intermediate_size=4160),
      status="rejected"),
    C("b12x-block-k4224", "12.0", B12, layer=_lin("fp8_block", hidden_size=4224),
      status="opt_in"),
    C("b12x-block-k4160", "12.0", B12, {"shape"}, layer=_lin("fp8_block", hidden_size=4160)),
    C("b12x-block-n4224", "12.0", B12, layer=_lin("fp8_block", intermediate_size=4224)),
    C("b12x-tensor-k4112", "12.0", B12, {"shape"}, layer=_lin("fp8_tensor", hidden_size=4112)),
    C("b12x-tensor-k4128", "12.0", B12, layer=_lin("fp8_tensor", hidden_size=4128)),
    # mxfp8/flashinfer.py TRT-LLM: K % 256 (at weight loading); its NVFP4 bf16-only rule does not
    # hold for MXFP8
    C("fi-trtllm-mxfp8-k4224", "10.0", FTR, {"shape"}, warns={"known_issue"},
      layer=_lin("mxfp8", hidden_size=4224)),
    C("fi-trtllm-mxfp8-k4096-fp16", "10.0", FTR, warns={"known_issue"},
      layer=_lin("mxfp8", hidden_size=4096, dtype="float16")),
    C("fi-cutedsl-mxfp8-k4112", "10.0", FCD, {"shape"}, layer=_lin("mxfp8", hidden_size=4112)),
    C("fi-cutedsl-mxfp8-k4128", "10.0", FCD, layer=_lin("mxfp8", hidden_size=4128)),
    C("fi-trtllm-mxfp8-k4352", "10.0", FTR, warns={"known_issue"},
      layer=_lin("mxfp8", hidden_size=4352)),
    # flashinfer gemm_base.py _cute_dsl_gemm_fp4_requirement N % 8, W4A4 and W4A16 alike
    C("fi-cutedsl-w4a16-n4100", "10.0", FCD, {"shape"},
      layer=_lin("nvfp4_w4a16", intermediate_size=4100)),
    C("fi-cutedsl-w4a16-n4104", "10.0", FCD, layer=_lin("nvfp4_w4a16", intermediate_size=4104)),
    C("fi-cutedsl-mxfp8-n4104", "10.0", FCD, layer=_lin("mxfp8", intermediate_size=4104)),
]

# The kernel vLLM 0.32.0 builds under each name for each scheme (kernels/linear/__init__.py
# _LINEAR_BACKEND_KERNEL_MAP, _POSSIBLE_FP8_KERNELS, _POSSIBLE_FP8_BLOCK_KERNELS,
# _POSSIBLE_MXFP8_KERNELS, _POSSIBLE_MXFP4_KERNELS)
VLLM_SCHEME_KERNELS = {
    (FCUT, "fp8_tensor"): "FlashInferFP8ScaledMMLinearKernel",
    (FCUT, "fp8_tensor_dynamic"): "FlashInferFP8ScaledMMLinearKernel",
    (FCUT, "fp8_block"): "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
    (FCUT, "mxfp8"): "FlashInferCutlassMxfp8LinearKernel",
    (FCUT, "mxfp4_w4a4"): "FlashInferMxFp4LinearKernel",
    (CUT, "fp8_tensor"): "CutlassFP8ScaledMMLinearKernel",
    (CUT, "fp8_tensor_dynamic"): "CutlassFP8ScaledMMLinearKernel",
    (CUT, "fp8_channel"): "CutlassFP8ScaledMMLinearKernel",
    (CUT, "fp8_block"): "CutlassFp8BlockScaledMMKernel",
    (DG, "fp8_block"): "DeepGemmFp8BlockScaledMMKernel",
    **{(MAR, q): "MarlinFP8ScaledMMLinearKernel" for q in _FP8_ALL},
    (MAR, "mxfp8"): "MarlinMxfp8LinearKernel",
    (MAR, "mxfp4"): "MarlinMxFp4LinearKernel", (MAR, "mxfp4_w4a4"): "MarlinMxFp4LinearKernel",
    (FCD, "mxfp8"): "FlashInferCutedslMxfp8LinearKernel",
    (FTR, "mxfp8"): "FlashInferTrtllmMxfp8LinearKernel",
    (B12, "fp8_tensor"): "B12xTensorFP8ScaledMMLinearKernel",
    (B12, "fp8_block"): "B12xFp8BlockScaledMMKernel",
    (B12, "mxfp8"): "B12xMxfp8LinearKernel", (B12, "mxfp4_w4a4"): "B12xMxFp4LinearKernel",
}


def _vllm_scheme_kernels() -> List[Case]:
    return [C(f"vllm-kernel-{quant}-{backend}", SCHEME_HOME[(backend, quant)], backend,
              layer=_lin(quant), engine=V, kernel=kernel, scheme=quant, status="selected",
              only="device")
            for (backend, quant), kernel in VLLM_SCHEME_KERNELS.items()]


# SGLang 0.5.23's --fp4-gemm-backend (fp4_utils.py Fp4GemmRunnerBackend) chooses NVFP4 GEMMs
# only; its FP8 GEMMs are --fp8-gemm-backend's (fp8_utils.py dispatch_w8a8_block_fp8_linear)
SGLANG_LINEAR = [
    C(f"sglang-{b.split('/')[1]}-{q}", dev, b, fails={"quant"} if bad else (),
      layer=_lin(q), only="quant", engine="sglang")
    for b, q, dev, bad in (
        (FCUT, "nvfp4", "10.0", False), (FCUT, "fp8_tensor", "10.0", True),
        (FCUT, "mxfp8", "10.0", False), (CUT, "nvfp4", "10.0", True),
        (FCD, "nvfp4", "10.0", False), (FCD, "nvfp4_w4a16", "10.0", False),
        (FCD, "mxfp8", "10.0", False), (MAR, "nvfp4", "9.0", False),
        (FTR, "nvfp4", "10.0", False), (FTR, "mxfp8", "10.0", False),
        (MAR, "nvfp4_w4a16", "9.0", False), (MAR, "fp8_block", "9.0", True),
        (MAR, "mxfp4", "9.0", True))]

LINEAR_SCHEME_CASES = (_scheme_cases() + SCHEME_BOUNDARIES + _vllm_scheme_kernels() +
                       SGLANG_LINEAR)

def _no_fp8_entries() -> None:
    """EXPECT_FP8_SCHEMES: the empty set for each MoE backend file of the packaged catalogue
    without a literal entry (selector's own torch FP8 backends are pinned in FP8_TORCH)."""
    from selector.core.packaged import packaged_conf_dir
    torch = {c.backend for c in FP8_TORCH + FI_DIRECT}
    for path in sorted((packaged_conf_dir() / "backend" / "moe").glob("*.yaml")):
        name = f"moe/{path.stem}"
        if name not in torch:
            EXPECT_FP8_SCHEMES.setdefault(name, set())


_no_fp8_entries()
# ---------------------------------------------------------------------------------------------
# vLLM's experts class per parallel configuration and dtype (found by the random parity sweeps,
# tests/vllm/test_parity_random.py): the monolithic TRT-LLM classes refuse fp16 router logits
# and all2all kernels, DeepEP low-latency's batched format is refused by the standard-format
# classes, and Batched Marlin / batched CuTe-DSL run it

def _a2a(x: str) -> dict:
    return {"ep_size": 2, "all2all": x}


MX4S, NV4, FP16 = {"quant": "mxfp4", **SWO}, {"quant": "nvfp4"}, {"dtype": "float16"}
EXCHANGES = ("allgather_reducescatter", "deepep_high_throughput", "flashinfer_nvlink_one_sided",
             "flashinfer_nvlink_two_sided", "naive")


def _vk(id: str, device: str, backend: str, layer: dict, kernel: str, scheme: str, **kw) -> Case:
    """Under engine=vllm the backend is chosen and vLLM runs `kernel` for `scheme`."""
    return C(id, device, backend, layer=layer, engine=V, kernel=kernel, scheme=scheme,
             status="selected", only="parallel", **kw)


PARALLEL_CASES = [
    _vk("vllm-trtllm-block-fp16", "10.0", TRT, {**BLOCK, **FP16}, "TrtLlmFp8ExpertsModular",
        "fp8_block", pk=T613),
    _vk("vllm-trtllm-mxfp8-fp16", "10.0", TRT, {"quant": "mxfp8", **FP16},
        "TrtLlmFp8ExpertsModular", "mxfp8", pk=T613),
    _vk("vllm-trtllm-mxfp8-bf16", "10.0", TRT, {"quant": "mxfp8"}, "TrtLlmFp8ExpertsMonolithic",
        "mxfp8", pk=T613),
    *[_vk(f"vllm-trtllm-mxfp8-{n}", "10.0", TRT, {"quant": "mxfp8", **a},
          "TrtLlmFp8ExpertsModular", "mxfp8", pk=T613)
      for n, a in (("nvlink", NVL), ("nvlink-one-sided", NVL1))],
    _vk("vllm-trtllm-tensor-bf16", "10.0", TRT, TENSOR, "TrtLlmFp8ExpertsMonolithic",
        "fp8_tensor", pk=T613),
    CT("vllm-trtllm-tensor-fp16", "10.0", TRT, {"dtype"}, layer={**TENSOR, **FP16}, engine=V,
       only="dtype"),
    CT("vllm-trtllm-tensor-f32", "10.0", TRT, layer={**TENSOR, "dtype": "float32"}, engine=V,
       only="dtype"),
    CT("vllm-trtllm-block-fp16-dtype", "10.0", TRT, layer={**BLOCK, **FP16}, engine=V,
       only="dtype"),
    CT("vllm-trtllm-mxfp8-relu2-clamp", "10.0", TRT, {"clamp"}, engine=V, only="clamp",
       layer={"quant": "mxfp8", "activation": "relu2", "act_and_mul": False,
              "swiglu_limit": 7.0}),
    *[CT(f"vllm-trtllm-mxfp8-{x}", "10.0", TRT, {"parallel"}, engine=V, only="parallel",
         layer={"quant": "mxfp8", **_a2a(x)})
      for x in ("deepep_high_throughput", "deepep_low_latency", "naive")],
    *[_vk(f"vllm-trtllm-{q}-{x}", "10.0", TRT, {**MX4S, "quant": q, **_a2a(x)},
          "TrtLlmMxfp4ExpertsModular", q, pk=T613)
      for q in ("mxfp4", "mxfp4_w4a8") for x in EXCHANGES],
    *[CT(f"vllm-trtllm-{q}-ll", "10.0", TRT, {"parallel"}, engine=V, only="parallel",
         layer={**MX4S, "quant": q, **LL}) for q in ("mxfp4", "mxfp4_w4a8")],
    *[_vk(f"vllm-trtllm-nvfp4-{x}", "10.0", TRT, {**NV4, **_a2a(x)},
          "TrtLlmNvFp4ExpertsModular", "nvfp4", pk=T613) for x in EXCHANGES],
    _vk("vllm-trtllm-nvfp4-fp16", "10.0", TRT, {**NV4, **FP16}, "TrtLlmNvFp4ExpertsModular",
        "nvfp4", pk=T613),
    CT("vllm-trtllm-nvfp4-ll", "10.0", TRT, {"parallel"}, layer={**NV4, **LL}, engine=V,
       only="parallel"),
    # Marlin: MarlinExperts refuses FlashInfer's two-sided NVLink and (but for MXFP4, whose
    # oracle turns MARLIN into BATCHED_MARLIN) DeepEP low-latency
    *[C(f"vllm-marlin-{q}-ll", "9.0", MA, {"parallel"}, layer={"quant": q, **LL},
        only="parallel") for q in ("nvfp4", "nvfp4_w4a16", "mxfp8")],
    *[C(f"vllm-marlin-{q}-nvlink", "9.0", MA, {"parallel"}, layer={"quant": q, **NVL},
        only="parallel") for q in ("mxfp4", "mxfp4_w4a8", "mxfp4_w4a4")],
    # ... and takes the one-sided one (MarlinExpertsBase._supports_parallel_config)
    *[C(f"vllm-marlin-{q}-nvlink-one-sided", "9.0", MA, layer={"quant": q, **NVL1},
        only="parallel") for q in ("nvfp4", "nvfp4_w4a16", "mxfp8", "mxfp4", "mxfp4_w4a8",
                                   "mxfp4_w4a4")],
    _vk("vllm-marlin-mxfp4-ll", "9.0", MA, {**MX4S, **LL}, "BatchedMarlinExperts", "mxfp4"),
    *[_vk(f"vllm-marlin-{q}-ll", "9.0", MA, {**MX4S, "quant": q, **LL},
          "BatchedMarlinExperts", "mxfp4") for q in ("mxfp4_w4a8", "mxfp4_w4a4")],
    _vk("vllm-marlin-w4a8-agrs", "9.0", MA, {**MX4S, "quant": "mxfp4_w4a8",
                                              **_a2a("allgather_reducescatter")},
        "MarlinExperts", "mxfp4"),
    # the standard-format classes under DeepEP low-latency
    *[C(f"vllm-fi-cutlass-{q}-ll", "10.0", FIC, {"parallel"}, layer={**MX4S, "quant": q, **LL},
        only="parallel") for q in ("mxfp4", "mxfp4_w4a8", "nvfp4", "nvfp4_w4a16")],
    C("vllm-triton-unfused-ll", "9.0", "moe/triton_unfused", {"parallel"},
      layer={**MX4S, **LL}, only="parallel"),
    C("vllm-triton-kernels-ll", "9.0", "moe/triton_kernels", {"parallel"},
      layer={**MX4S, **LL}, only="parallel"),
    *[_vk(f"vllm-triton-kernels-{x}", "9.0", "moe/triton_kernels", {**MX4S, **_a2a(x)},
          "OAITritonExperts", "mxfp4") for x in EXCHANGES],
    *[C(f"vllm-deep-gemm-mxfp8-{n}", "10.0", "moe/deep_gemm", {"parallel"}, only="parallel",
        layer={"quant": "mxfp8", **a}) for n, a in (("ll", LL), ("nvlink", NVL), ("nvlink-one-sided", NVL1))],
    C("vllm-cutlass-nvfp4-ll", "10.0", VC, {"parallel"}, layer={**NV4, **LL}, only="parallel"),
    # vLLM 0.32.0 oracle/mxfp4.py (CUTLASS_MXFP4_MXFP4 -> [CutlassExpertsMxfp4]) and
    # experts/cutlass_moe.py (CutlassExpertsMxfp4.activation_format: Standard): no DeepEP
    # low-latency (its batched format)
    C("mut-vllm-cutlass-mxfp4-w4a4-ll", "10.0", VC, {"parallel"},
      layer={"quant": "mxfp4_w4a4", **LL}, only="parallel"),
    *[C(f"vllm-emulation-nvfp4-{n}", "10.0", "moe/emulation", {"parallel"}, engine=V,
        only="parallel", layer={**NV4, **a}) for n, a in (("ll", LL), ("nvlink", NVL), ("nvlink-one-sided", NVL1))],
    C("vllm-cutedsl-ll-swigluoai", "10.0", "moe/flashinfer_cutedsl", {"activation"}, engine=V,
      only="activation", layer={**NV4, **SWO, **LL}),
    C("vllm-cutedsl-ll-clamp", "10.0", "moe/flashinfer_cutedsl", {"clamp"}, engine=V,
      only="clamp", layer={**NV4, **LL, "swiglu_limit": 7.0}),
    C("vllm-cutedsl-clamp", "10.0", "moe/flashinfer_cutedsl", engine=V, only="clamp",
      layer={**NV4, "swiglu_limit": 7.0}),
    _vk("vllm-cutedsl-ll", "10.0", "moe/flashinfer_cutedsl", {**NV4, **LL},
        "FlashInferCuteDSLBatchedExperts", "nvfp4"),
]


# ---------------------------------------------------------------------------------------------
# vLLM 0.34.0 against 0.33.0 (FULL's vllm): each change on both sides of the release

V33, V34 = {"vllm": "0.33.0"}, {"vllm": "0.34.0"}
GPT_OSS = {"quant": "mxfp4", "activation": "swigluoai"}
NO_CUBIN_WARN = {FI: "0.6.13", DSL: "4.5.0"}  # flashinfer 0.6.13: no cubin-download warning
_FP8B_MOE = {"quant": "fp8_block", "hidden_size": 2048, "intermediate_size": 768}
V34_CASES = [
    # vLLM 0.34.0 experts/cutlass_moe.py 724-730: SM 11.x out of the CUTLASS NVFP4 MoE
    C("v34-cutlass-nvfp4-sm110", "11.0", "moe/cutlass", {"device"}, pk=V34, engine=V),
    C("v33-cutlass-nvfp4-sm110", "11.0", "moe/cutlass", pk=V33, engine=V, status="selected",
      kernel="CutlassExpertsFp4", scheme="nvfp4"),
    C("v34-cutlass-nvfp4-sm100", "10.0", "moe/cutlass", pk=V34, engine=V, status="eligible"),
    C("v34-cutlass-nvfp4-sm120", "12.0", "moe/cutlass", pk=V34, engine=V, status="selected"),
    C("v34-cutlass-nvfp4-sm110-none", "11.0", "moe/cutlass", {"device"}, pk=V34),
    # ... for a weight-only layer too: CutlassExpertsFp4._supports_current_device reads the
    # device family alone (0.34.0 cutlass_moe.py 724-730); W4A16 is refused besides (its
    # _supports_quant_scheme: NVFP4 weights with NVFP4 activations)
    C("mut-v34-cutlass-nvfp4-w4a16-sm110", "11.0", "moe/cutlass", {"device", "quant"}, pk=V34,
      layer=W4A16),
    # vLLM 0.34.0 experts/trtllm_nvfp4_moe.py 253-265 (SWIGLUSTEP when FlashInfer has
    # ActivationType.SwigluStep: flashinfer-python 0.6.13 tllm_enums.py, not 0.6.12)
    C("v34-trtllm-swiglustep", "10.0", "moe/flashinfer_trtllm", pk={**V34, **NO_CUBIN_WARN},
      layer={"activation": "swiglustep"}, engine=V, status="selected",
      kernel="TrtLlmNvFp4ExpertsMonolithic", scheme="nvfp4"),
    C("v33-trtllm-swiglustep", "10.0", "moe/flashinfer_trtllm", {"activation"},
      pk={**V33, **NO_CUBIN_WARN}, layer={"activation": "swiglustep"}, engine=V),
    C("v34-trtllm-swiglustep-fi-0.6.12", "10.0", "moe/flashinfer_trtllm", {"feature"},
      pk={**V34, FI: "0.6.12", DSL: "4.5.0"}, layer={"activation": "swiglustep"}, engine=V),
    # the same probe for a weight-only NVFP4 layer (the feature rule's when.quant lists both)
    C("v34-trtllm-swiglustep-w4a16-fi-0.6.12", "10.0", "moe/flashinfer_trtllm", {"feature"},
      only="feature",
      pk={**V34, FI: "0.6.12", DSL: "4.5.0"},
      layer={"activation": "swiglustep", "quant": "nvfp4_w4a16"}, engine=V),
    C("v34-trtllm-swiglustep-nongated", "10.0", "moe/flashinfer_trtllm", {"act_and_mul"},
      pk={**V34, **NO_CUBIN_WARN}, layer={"activation": "swiglustep", "act_and_mul": False},
      engine=V),
    # the activation rules of vLLM's TRT-LLM NVFP4 integration hold for a weight-only layer too
    # (trtllm_nvfp4_moe.py _supports_activation reads no scheme; W4A16 is refused besides by
    # _supports_quant_scheme): 0.34.0 lines 253-265 have no interleaved swigluoai, 0.33.0 no
    # SwiGLU-step, and SwiGLU-step is gated only (activation.py)
    CT("mut-v34-trtllm-w4a16-swigluoai", "10.0", TRT, {"quant", "activation"}, pk=V34,
       layer={**W4A16, "activation": "swigluoai"}, engine=V),
    CT("mut-v33-trtllm-w4a16-swiglustep", "10.0", TRT, {"quant", "activation"}, pk=V33,
       layer={**W4A16, "activation": "swiglustep"}, engine=V),
    CT("mut-v34-trtllm-w4a16-swiglustep-nongated", "10.0", TRT, {"quant", "act_and_mul"},
       pk=V34, layer={**W4A16, "activation": "swiglustep", "act_and_mul": False}, engine=V),
    C("v34-trtllm-swiglustep-none", "10.0", "moe/flashinfer_trtllm", {"activation"},
      pk={**V34, **NO_CUBIN_WARN}, layer={"activation": "swiglustep"}),
    C("v34-trtllm-swigluoai", "10.0", "moe/flashinfer_trtllm", {"activation"},
      pk={**V34, **NO_CUBIN_WARN}, layer={"activation": "swigluoai"}, engine=V),
    # vLLM 0.34.0 oracle/mxfp4.py 231-246, experts/trtllm_mxfp4_moe.py 502-515: the modular
    # TRT-LLM MXFP4 kernel of MXFP8 activations is a class of its own (0.33: one modular class)
    *[_vk(f"v34-trtllm-mxfp4-w4a8-{x}", "10.0", TRT, {**MX4S, "quant": "mxfp4_w4a8", **_a2a(x)},
          "TrtLlmMxfp4Mxfp8ExpertsModular", "mxfp4_w4a8", pk={**T613, **V34})
      for x in ("naive", "deepep_high_throughput")],
    _vk("v33-trtllm-mxfp4-w4a8-naive", "10.0", TRT, {**MX4S, "quant": "mxfp4_w4a8",
                                                    **_a2a("naive")},
        "TrtLlmMxfp4ExpertsModular", "mxfp4_w4a8", pk={**T613, **V33}),
    _vk("v34-trtllm-mxfp4-naive", "10.0", TRT, {**MX4S, "quant": "mxfp4", **_a2a("naive")},
        "TrtLlmMxfp4ExpertsModular", "mxfp4", pk={**T613, **V34}),
    # the monolithic TRT-LLM MXFP4 kernel takes no all2all kernel, no data parallelism and the
    # routing methods DeepSeekV3, Renormalize, RenormalizeNaive only (0.34.0
    # trtllm_mxfp4_moe.py 178-197, 0.32.0 173-192): elsewhere vLLM runs the modular class, from
    # 0.34.0 its MXFP8-activation class for W4A8 (oracle/mxfp4.py 231-246)
    *[_vk(f"mut-v34-trtllm-mxfp4-w4a8-{x}", "10.0", TRT,
          {**MX4S, "quant": "mxfp4_w4a8", **_a2a(x)}, "TrtLlmMxfp4Mxfp8ExpertsModular",
          "mxfp4_w4a8", pk={**T613, **V34})
      for x in ("allgather_reducescatter", "flashinfer_nvlink_one_sided",
                "flashinfer_nvlink_two_sided")],
    *[_vk(f"mut-{v}-trtllm-{q}-{n}", "10.0", TRT, {**MX4S, "quant": q, **extra}, kernel, q,
          pk={**T613, **pk})
      for n, extra in (("dp", {"dp_size": 2}), ("routing-topk", {"routing": "topk"}))
      for v, pk, q, kernel in (
          ("v34", V34, "mxfp4_w4a8", "TrtLlmMxfp4Mxfp8ExpertsModular"),
          ("v33", V33, "mxfp4_w4a8", "TrtLlmMxfp4ExpertsModular"),
          ("v34", V34, "mxfp4", "TrtLlmMxfp4ExpertsModular"))],
    # vLLM 0.34.0 oracle/mxfp4.py 445-457: gpt-oss MXFP4 on SM 11.x runs Marlin before Triton
    C("v34-gpt-oss-sm110-triton", "11.0", "moe/triton_kernels", pk=V34, layer=GPT_OSS,
      engine=V, status="eligible"),
    C("v33-gpt-oss-sm110-marlin", "11.0", "moe/marlin", pk=V33, layer=GPT_OSS, engine=V,
      status="eligible"),
    C("v34-gpt-oss-sm100-marlin", "10.0", "moe/marlin", pk=V34, layer=GPT_OSS, engine=V,
      status="eligible"),
    C("v34-gpt-oss-sm90-marlin", "9.0", "moe/marlin", pk=V34, layer=GPT_OSS, engine=V,
      status="eligible"),
    # vLLM 0.34.0 utils/deep_gemm.py 118-177: DeepGEMM needs nvcc >= 12.9 at run time
    # (vLLM's own gate: engines.vllm.rules, so under engine=vllm only)
    C("v34-deepgemm-moe-nvcc-12.8", "9.0", "moe/deep_gemm", {"nvcc"},
      pk={**V34, "nvcc": "12.8"}, layer=_FP8B_MOE, engine=V),
    C("v34-deepgemm-moe-nvcc-12.9", "9.0", "moe/deep_gemm", pk={**V34, "nvcc": "12.9"},
      layer=_FP8B_MOE, engine=V),
    C("v34-deepgemm-moe-no-nvcc", "9.0", "moe/deep_gemm", {"nvcc"}, pk={**V34, "nvcc": None},
      layer=_FP8B_MOE, engine=V),
    # SGLang and TensorRT-LLM run DeepGEMM through their own integration: vllm 0.34.0 installed
    # beside them puts no nvcc rule (nor its unknown-version warning) on their answer
    C("v34-deepgemm-moe-nvcc-sglang", "9.0", "moe/deep_gemm",
      pk={**V34, "nvcc": None, "sgl-deep-gemm": "0.2.3.post2"}, layer=_FP8B_MOE,
      engine="sglang"),
    C("v34-deepgemm-moe-nvcc-unknown-sglang", "9.0", "moe/deep_gemm",
      pk={**V34, "sgl-deep-gemm": "0.2.3.post2"}, layer=_FP8B_MOE, engine="sglang"),
    C("v34-deepgemm-moe-nvcc-none", "9.0", "moe/deep_gemm", pk={**V34, "nvcc": None},
      layer=_FP8B_MOE),
    C("v34-deepgemm-lin-nvcc-sglang", "9.0", "linear/deep_gemm",
      pk={**V34, "nvcc": "12.8", "sgl-deep-gemm": "0.2.3.post2"},
      layer={**DENSE, "quant": "fp8_block"}, engine="sglang"),
    # vLLM 0.34.0 scaled_mm/flashinfer.py 151-172: the dynamic block-FP8 kernel needs DeepGEMM
    C("v34-fi-blockfp8-lin-nvcc-12.8", "9.0", "linear/flashinfer_cutlass", {"nvcc"},
      pk={**V34, "nvcc": "12.8"}, layer={**DENSE, "quant": "fp8_block"}, engine=V),
    C("v34-fi-blockfp8-lin-nvcc-12.9", "9.0", "linear/flashinfer_cutlass",
      pk={**V34, "nvcc": "12.9"}, layer={**DENSE, "quant": "fp8_block"}, engine=V),
    C("v33-fi-blockfp8-lin-nvcc-12.8", "9.0", "linear/flashinfer_cutlass",
      pk={**V33, "nvcc": "12.8"}, layer={**DENSE, "quant": "fp8_block"}, engine=V),
    C("v34-deepgemm-moe-nvcc-unknown", "9.0", "moe/deep_gemm", warns={"nvcc"}, pk=V34,
      layer=_FP8B_MOE, engine=V, status="selected"),
    C("v33-deepgemm-moe-nvcc-12.8", "9.0", "moe/deep_gemm", pk={**V33, "nvcc": "12.8"},
      layer=_FP8B_MOE, engine=V),
    C("v34-deepgemm-lin-nvcc-12.8", "9.0", "linear/deep_gemm", {"nvcc"},
      pk={**V34, "nvcc": "12.8"}, layer={**DENSE, "quant": "fp8_block"}, engine=V),
    C("v34-deepgemm-lin-nvcc-13.0", "9.0", "linear/deep_gemm", pk={**V34, "nvcc": "13.0"},
      layer={**DENSE, "quant": "fp8_block"}, engine=V),
    C("mut-v34-deepgemm-lin-nvcc-12.9", "9.0", "linear/deep_gemm", pk={**V34, "nvcc": "12.9"},
      layer={**DENSE, "quant": "fp8_block"}, engine=V),
    C("v33-deepgemm-lin-no-nvcc", "9.0", "linear/deep_gemm", pk={**V33, "nvcc": None},
      layer={**DENSE, "quant": "fp8_block"}, engine=V),
]


_T8_MOE = {"quant": "fp8_tensor", "hidden_size": 2048, "intermediate_size": 768}
_CUDNN_FE = {"nvidia-cudnn-frontend": "1.32.0"}
_SGL_KERNEL = {"sglang-kernel": "0.4.10"}
# What decides an engine's choice that the scheme alone does not carry (issue 44): the
# activation scales' granularity, the quantization method, the routing method, data parallelism.
# vLLM 0.32.0-0.34.0 kernels/linear/__init__.py: every b12x linear kernel is on vLLM's automatic
# lists (0.34.0 lines 463, 502, 574, 605-606, 631): under engine=vllm b12x is not opt-in, and it
# comes where vLLM tries it: FP8 right after CUTLASS (before Marlin), MXFP4 W4A4 after Marlin
_B12X_FP16_BLOCK = _fl("fp8_block", dtype="float16")  # DeepGEMM: bf16 only; CUTLASS: CUDA 12.8
B12X_VLLM_CASES = [
    C("vllm-b12x-lin-fp8-block-auto", "12.0", "linear/b12x", layer=_B12X_FP16_BLOCK, engine=V,
      cuda="12.6", status="selected", kernel="B12xFp8BlockScaledMMKernel", scheme="fp8_block"),
    C("none-b12x-lin-fp8-block-opt-in", "12.0", "linear/b12x", layer=_B12X_FP16_BLOCK,
      cuda="12.6", status="opt_in"),
    C("vllm-b12x-lin-fp8-block-cutlass-first", "12.0", "linear/cutlass", layer=_B12X_FP16_BLOCK,
      engine=V, cuda="12.8", status="selected"),
    C("vllm-b12x-lin-mxfp4-w4a4-after-marlin", "12.0", "linear/marlin",
      layer=_fl("mxfp4_w4a4"), engine=V, pk={"flashinfer-python": None}, status="selected"),
    C("vllm-b12x-lin-mxfp4-w4a4-eligible", "12.0", "linear/b12x", layer=_fl("mxfp4_w4a4"),
      engine=V, pk={"flashinfer-python": None}, status="eligible"),
]

READER_CASES = [
    # flashinfer-python 0.7.4 gemm/gemm_base.py (bmm_fp8: A_scale a scalar tensor)
    C("act-scale-bmm-fp8-token", "10.0", "linear/flashinfer_bmm_fp8", {"act_scale"},
      layer=_fl("fp8_tensor_dynamic", act_scale="token")),
    C("act-scale-bmm-fp8-tensor", "10.0", "linear/flashinfer_bmm_fp8",
      layer=_fl("fp8_tensor_dynamic", act_scale="tensor")),
    C("act-scale-bmm-fp8-cudnn-token", "10.0", "linear/flashinfer_bmm_fp8_cudnn", {"act_scale"},
      pk=_CUDNN_FE, layer=_fl("fp8_tensor_dynamic", act_scale="token")),
    C("act-scale-bmm-fp8-cudnn-tensor", "10.0", "linear/flashinfer_bmm_fp8_cudnn", pk=_CUDNN_FE,
      layer=_fl("fp8_tensor_dynamic", act_scale="tensor")),
    # vLLM 0.32.0 kernels/linear/scaled_mm/flashinfer.py (per-tensor activation and weight
    # scales); quantization/fp8.py 274-280 (dynamic activations quantized per token)
    C("act-scale-fi-cutlass-fp8-token", "10.0", "linear/flashinfer_cutlass", {"act_scale"},
      layer=_fl("fp8_tensor_dynamic", act_scale="token")),
    C("act-scale-fi-cutlass-fp8-tensor", "10.0", "linear/flashinfer_cutlass",
      layer=_fl("fp8_tensor_dynamic", act_scale="tensor")),
    # vLLM 0.32.0 kernels/linear/scaled_mm/pytorch.py 84-92 (PerTensorTorch: per-tensor only)
    C("act-scale-torch-per-tensor-token", "9.0", "linear/torch_per_tensor", {"act_scale"},
      layer=_fl("fp8_tensor_dynamic", act_scale="token")),
    C("act-scale-torch-per-tensor-tensor", "9.0", "linear/torch_per_tensor",
      layer=_fl("fp8_tensor_dynamic", act_scale="tensor")),
    # ... each of these GEMMs takes one activation scale whatever the scheme's name: a static
    # per-tensor layer given per-token activation scales is refused the same way (flashinfer
    # gemm_base.py bmm_fp8: A_scale a scalar; vLLM scaled_mm/flashinfer.py and pytorch.py 84-92)
    *[C(f"mut-act-scale-{b.split('/')[1]}-fp8-tensor-token", d, b, {"act_scale"}, pk=pk,
        layer=_fl("fp8_tensor", act_scale="token"))
      for b, d, pk in (("linear/flashinfer_bmm_fp8", "10.0", None),
                       ("linear/flashinfer_bmm_fp8_cudnn", "10.0", _CUDNN_FE),
                       ("linear/flashinfer_cutlass", "10.0", None),
                       ("linear/torch_per_tensor", "9.0", None))],
    # vLLM 0.32.0 fused_moe/oracle/fp8.py 463-473: vLLM's CUTLASS FP8 experts for
    # compressed-tensors only (Fp8MoEMethod passes allow_vllm_cutlass=False, quantization/fp8.py:522)
    C("quant-method-cutlass-fp8-moe-fp8", "9.0", "moe/cutlass", {"quant_method"},
      layer={**_T8_MOE, "quant_method": "fp8"}),
    C("quant-method-cutlass-fp8-moe-ct", "9.0", "moe/cutlass",
      layer={**_T8_MOE, "quant_method": "compressed-tensors"}),
    # SGLang's DeepGEMM MoE runner is built by Fp8MoEMethod (fp8.py:2986-2996): a
    # compressed-tensors FP8 MoE builds none (compressed_tensors_w8a8_fp8_moe.py:341-365), and
    # ModelOpt's per-tensor FP8 MoE method builds Triton whatever is asked (modelopt_quant.py:
    # 1343-1359: a warning; the launch plan names Triton), its block-FP8 algorithms go to
    # Fp8MoEMethod (1080-1087)
    *[C(f"mut-sglang-deep-gemm-moe-{q}-{m}", "9.0", "moe/deep_gemm",
        {"quant_method"} if m == "compressed-tensors" else set(),
        warns={"known_issue"} if (m, q) == ("modelopt", "fp8_tensor") else set(),
        engine="sglang", pk={"sgl-deep-gemm": "0.2.3.post2"},
        layer={**_T8_MOE, "quant": q, "quant_method": m})
      for q, methods in (("fp8_block", ("fp8", "modelopt", "compressed-tensors")),
                         ("fp8_tensor", ("fp8", "modelopt", "compressed-tensors")),
                         ("fp8_tensor_dynamic", ("fp8", "compressed-tensors")))
      for m in methods],
    # ... the same for the dynamic per-tensor and the per-channel schemes (Fp8MoEMethod passes
    # allow_vllm_cutlass=False whatever its scheme, quantization/fp8.py:522)
    *[C(f"mut-quant-method-cutlass-{q}-moe-fp8", "9.0", "moe/cutlass", {"quant_method"},
        layer={**_T8_MOE, "quant": q, "quant_method": "fp8"})
      for q in ("fp8_tensor_dynamic", "fp8_channel")],
    # SGLang 0.5.23 per-tensor FP8 linear layers by quant method: compressed_tensors_w8a8_fp8.py
    # 147-164 (torch._scaled_mm, never channelwise); modelopt_quant.py 546-630 and 611-615
    # (ModelOptFp8LinearMethod: FlashInfer bmm_fp8 where fp8_utils.py 528-531 supports it and K, N
    # are multiples of 16, else CUTLASS on channelwise scales)
    C("sglang-cutlass-fp8-tensor-ct", "9.0", "linear/cutlass", {"quant_method"}, engine="sglang",
      pk=_SGL_KERNEL, layer=_fl("fp8_tensor", quant_method="compressed-tensors")),
    C("sglang-cutlass-fp8-tensor-fp8", "9.0", "linear/cutlass", engine="sglang", pk=_SGL_KERNEL,
      layer=_fl("fp8_tensor", quant_method="fp8")),
    C("sglang-cutlass-fp8-tensor-modelopt-flashinfer", "9.0", "linear/cutlass", {"known_issue"},
      engine="sglang", pk=_SGL_KERNEL, layer=_fl("fp8_tensor", quant_method="modelopt")),
    C("sglang-cutlass-fp8-tensor-modelopt-no-flashinfer", "9.0", "linear/cutlass", engine="sglang",
      pk={**_SGL_KERNEL, "flashinfer-python": None}, layer=_fl("fp8_tensor", quant_method="modelopt")),
    # ... on SM 10.x and 12.x too (utils/common.py 297-336: is_sm100, is_sm120 by major), not on
    # SM 11.x, where ModelOpt's method turns the scales channelwise for CUTLASS
    *[C(f"mut-sglang-cutlass-fp8-tensor-modelopt-sm{d.replace('.', '')}", d, "linear/cutlass",
        set() if d == "11.0" else {"known_issue"}, engine="sglang", pk=_SGL_KERNEL,
        layer=_fl("fp8_tensor", quant_method="modelopt")) for d in ("10.0", "11.0", "12.0")],
    C("sglang-torch-per-tensor-modelopt", "12.0", "linear/torch_per_tensor", {"quant_method"},
      engine="sglang", layer=_fl("fp8_tensor", quant_method="modelopt")),
    C("sglang-torch-per-tensor-ct", "12.0", "linear/torch_per_tensor", engine="sglang",
      layer=_fl("fp8_tensor", quant_method="compressed-tensors")),
    # Fp8LinearMethod keeps a per-tensor checkpoint's scales per tensor on SM 12.x
    # (fp8.py process_weights_after_loading: use_sm120_fp8_pertensor) and runs torch._scaled_mm
    C("mut-sglang-torch-per-tensor-fp8-sm120", "12.0", "linear/torch_per_tensor", engine="sglang",
      layer=_fl("fp8_tensor", quant_method="fp8")),
    C("sglang-bmm-fp8-fp8", "9.0", "linear/flashinfer_bmm_fp8", {"quant_method"}, engine="sglang",
      layer=_fl("fp8_tensor", quant_method="fp8")),
    C("sglang-bmm-fp8-modelopt", "9.0", "linear/flashinfer_bmm_fp8", engine="sglang",
      layer=_fl("fp8_tensor", quant_method="modelopt")),
    *[C(f"sglang-bmm-fp8-modelopt-sm{d.replace('.', '')}", d, "linear/flashinfer_bmm_fp8",
        set() if d[:2] in ("9.", "10", "12") else {"device"}, engine="sglang",
        layer=_fl("fp8_tensor", quant_method="modelopt"))
      for d in ("8.9", "10.0", "11.0", "12.0", "12.1")],
    C("sglang-bmm-fp8-k-not-16", "9.0", "linear/flashinfer_bmm_fp8", {"shape"}, engine="sglang",
      layer=_fl("fp8_tensor", quant_method="modelopt", hidden_size=4104)),
    C("sglang-bmm-fp8-n-not-16", "9.0", "linear/flashinfer_bmm_fp8", {"shape"}, engine="sglang",
      layer=_fl("fp8_tensor", quant_method="modelopt", intermediate_size=4104)),
    # ... a multiple of 16 that is not one of 32 passes (modelopt_quant.py:611-615: % 16), and the
    # GEMM SGLang calls is FlashInfer's bmm_fp8 (fp8_utils.py:534-560)
    *[C(f"mut-sglang-bmm-fp8-{dim}-4112", "9.0", "linear/flashinfer_bmm_fp8", engine="sglang",
        layer=_fl("fp8_tensor", quant_method="modelopt", **{dim: 4112}))
      for dim in ("hidden_size", "intermediate_size")],
    C("mut-sglang-bmm-fp8-kernel", "9.0", "linear/flashinfer_bmm_fp8", engine="sglang",
      layer=_fl("fp8_tensor", quant_method="modelopt"), status="selected",
      kernel="flashinfer.bmm_fp8", scheme="fp8_tensor"),
    # vLLM 0.32.0 fused_moe/config.py (is_act_and_mul=False on CUDA, ROCm and XPU only): an MXFP8
    # non-gated layer on a machine without a GPU is refused before vLLM's emulation is asked
    C("vllm-emulation-mxfp8-non-gated-no-gpu", None, "moe/emulation", {"device"}, engine="vllm",
      layer={"quant": "mxfp8", "act_and_mul": False, "activation": "relu2"}),
    C("vllm-emulation-mxfp8-gated-no-gpu", None, "moe/emulation", engine="vllm",
      layer={"quant": "mxfp8", "act_and_mul": True, "activation": "silu"}),
    # ... and the class it runs there is vLLM's MXFP8 emulation (oracle/mxfp8.py 72-77:
    # EMULATION -> Mxfp8EmulationTritonExperts), on a GPU too
    *[C(f"mut-vllm-emulation-mxfp8-kernel-{d or 'cpu'}", d, "moe/emulation", engine="vllm",
        layer={"quant": "mxfp8"}, status="selected", kernel="Mxfp8EmulationTritonExperts",
        scheme="mxfp8") for d in (None, "9.0")],
    # vLLM's NVFP4 emulation is TritonExperts (triton_moe.py _supports_current_device: a
    # CUDA-alike or XPU device) for a weight-only layer as well; it is refused W4A16 besides
    # (nvfp4_emulation_moe.py _supports_quant_scheme)
    C("mut-vllm-emulation-w4a16-no-gpu", None, "moe/emulation", {"device", "quant"},
      engine="vllm", cuda=None, layer=W4A16),
    # compressed_tensors_moe_w8a8_fp8.py 94-105: per-tensor experts with dynamic activations are
    # quantized per 1x128 group (kFp8Dynamic128Sym), which CUTLASS and Triton refuse
    # (experts/cutlass_moe.py 318-328; experts/triton_moe.py 157-177)
    C("act-scale-cutlass-fp8-moe-group", "9.0", "moe/cutlass", {"act_scale"},
      layer={**_T8_MOE, "quant": "fp8_tensor_dynamic", "act_scale": "group_128"}),
    # ... whatever the weights' scheme calls its activations: experts/cutlass_moe.py 318-328
    # (SUPPORTED_W_A pairs per-tensor weights with per-tensor activation scales only)
    C("mut-act-scale-cutlass-fp8-tensor-moe-group", "9.0", "moe/cutlass", {"act_scale"},
      layer={**_T8_MOE, "act_scale": "group_128"}),
    C("act-scale-triton-fp8-moe-group", "9.0", "moe/triton", {"act_scale"},
      layer={**_T8_MOE, "quant": "fp8_tensor_dynamic", "act_scale": "group_128"}),
    C("act-scale-triton-fp8-moe-token", "9.0", "moe/triton",
      layer={**_T8_MOE, "quant": "fp8_tensor_dynamic", "act_scale": "token"}),
    # vLLM 0.32.0 experts/trtllm_fp8_moe.py 189-196 (no sequence-parallel MoE) and 398-434
    # (the routing methods the monolithic per-tensor kernel lists)
    C("dp-trtllm-fp8-sequence-parallel", "10.0", "moe/flashinfer_trtllm", {"data_parallel"},
      pk=NO_CUBIN_WARN, layer={**_T8_MOE, "dp_size": 2, "ep_size": 4}),
    C("dp-trtllm-fp8-ep-equals-dp", "10.0", "moe/flashinfer_trtllm", pk=NO_CUBIN_WARN,
      layer={**_T8_MOE, "dp_size": 2, "ep_size": 2}),
    C("routing-trtllm-fp8-default", "10.0", "moe/flashinfer_trtllm", {"routing"},
      pk=NO_CUBIN_WARN, layer={**_T8_MOE, "routing": "default"}),
    C("routing-trtllm-fp8-renormalize", "10.0", "moe/flashinfer_trtllm", pk=NO_CUBIN_WARN,
      layer={**_T8_MOE, "routing": "renormalize"}),
    # ... and every other routing method of the per-tensor list (trtllm_fp8_moe.py 422-433, the
    # kFp8StaticTensorSym pair), not TopK (line 405: 'TopK routing could also be enabled, but
    # need to validate models')
    *[C(f"mut-routing-trtllm-fp8-{r}", "10.0", "moe/flashinfer_trtllm", pk=NO_CUBIN_WARN,
        layer={**_T8_MOE, "routing": r})
      for r in ("deepseek_v3", "llama4", "renormalize_naive", "sigmoid_renorm", "sigmoid",
                "minimax2", "simulated")],
    C("mut-routing-trtllm-fp8-topk", "10.0", "moe/flashinfer_trtllm", {"routing"},
      pk=NO_CUBIN_WARN, layer={**_T8_MOE, "routing": "topk"}),
]

# The optional kernel modules vLLM imports (kind: vllm_module): DeepGEMM and triton_kernels, an
# installed package or the copy vLLM's CUDA wheels bundle (utils/import_utils.py has_deep_gemm,
# has_triton_kernels); a vLLM build without them (its CPU build, a source build) refuses the
# backends that need them. Unknown on a platform naming vLLM: its CUDA wheel, which has both.
_FP8B_LIN = {**DENSE, "quant": "fp8_block"}
_NO_DG, _DG = {"vllm-deep-gemm": None}, {"vllm-deep-gemm": "0.32.0"}
_NO_TK, _TK = {"vllm-triton-kernels": None}, {"vllm-triton-kernels": "0.32.0"}
VLLM_MODULE_CASES = [
    C("vllm-module-deep-gemm-moe-absent", "9.0", "moe/deep_gemm", {"vllm_module"}, pk=_NO_DG,
      layer=_FP8B_MOE, engine=V),
    C("vllm-module-deep-gemm-moe-present", "9.0", "moe/deep_gemm", pk=_DG, layer=_FP8B_MOE,
      engine=V, status="selected"),
    C("vllm-module-deep-gemm-moe-unknown-wheel", "9.0", "moe/deep_gemm", layer=_FP8B_MOE,
      engine=V, status="selected"),
    C("vllm-module-deep-gemm-moe-unknown-no-vllm", "9.0", "moe/deep_gemm", {"package"},
      {"vllm_module"}, pk={"vllm": None}, layer=_FP8B_MOE, engine=V),
    C("vllm-module-deep-gemm-moe-no-engine", "9.0", "moe/deep_gemm", pk=_NO_DG,
      layer=_FP8B_MOE),
    C("vllm-module-deep-gemm-linear-absent", "9.0", "linear/deep_gemm", {"vllm_module"},
      pk=_NO_DG, layer=_FP8B_LIN, engine=V),
    C("vllm-module-deep-gemm-linear-present", "9.0", "linear/deep_gemm", pk=_DG,
      layer=_FP8B_LIN, engine=V),
    C("vllm-module-fi-cutlass-block-fallback-absent", "9.0", "linear/flashinfer_cutlass",
      {"vllm_module"}, pk=_NO_DG, layer=_FP8B_LIN, engine=V, only="vllm_module"),
    C("vllm-module-fi-cutlass-block-fallback-present", "9.0", "linear/flashinfer_cutlass",
      pk=_DG, layer=_FP8B_LIN, engine=V, only="vllm_module"),
    C("vllm-module-triton-kernels-absent", "9.0", "moe/triton_kernels", {"vllm_module"},
      pk=_NO_TK, layer=GPT_OSS, engine=V),
    C("vllm-module-triton-kernels-present", "9.0", "moe/triton_kernels", pk=_TK, layer=GPT_OSS,
      engine=V, status="selected"),
    C("vllm-module-triton-unfused-absent", "9.0", "moe/triton_unfused", {"vllm_module"},
      pk=_NO_TK, layer=GPT_OSS, engine=V, only="vllm_module"),
    C("vllm-module-triton-unfused-present", "9.0", "moe/triton_unfused", pk=_TK,
      layer=GPT_OSS, engine=V, only="vllm_module"),
]


CASES: List[Case] = (_generated() + BOUNDARIES + _engine_names() + _vllm_kernels() +
                     _vllm_emulation_activations() + ENGINES + _fp8_cases() + FP8_BOUNDARIES +
                     _fp8_scheme_boundaries() + FP8_TORCH + FI_DIRECT + FIC_VLLM + MX_CASES +
                     LINEAR_SCHEME_CASES + PARALLEL_CASES + V34_CASES + B12X_VLLM_CASES +
                     READER_CASES + VLLM_MODULE_CASES)


# ---------------------------------------------------------------------------------------------
# Deciding a case

@functools.cache
def base():
    import selector
    return selector.load(["platform=cpu"])


@functools.cache
def engine(name: str):
    """The Engine of `engine=NAME` (its label, flags), from the packaged config."""
    import selector
    return selector.load(["platform=cpu", f"engine={name}"]).run_config.engine


def platform_for(case: Case):
    from selector.core.versions import parse_capability
    sel = base()
    pk = dict(FULL)
    pk.update(dict(case.packages))
    packages = {canonicalize_name(n): (None if v is None else Version(v)) for n, v in pk.items()}
    for n, _ in sel.run_config.platform.packages:
        packages.setdefault(n, None)
    return replace(sel.run_config.platform, preset="case", source="case",
                   capability=(None if case.device is None else
                               parse_capability("case.device", case.device)),
                   cuda=None if case.cuda is None else Version(case.cuda),
                   packages=tuple(sorted(packages.items())))


def decide(case: Case, catalogue=None):
    """The case's decision; `catalogue`: a catalogue as read (no engine applied) to use."""
    from selector.api import Selector
    from selector.core import engines
    sel = base()
    eng = engine(case.engine)
    cat = engines.apply(catalogue or sel.run_config.catalogue, eng)
    model = replace(sel.run_config, platform=platform_for(case), catalogue=cat, engine=eng)
    if case.status == "selected" or case.kernel:  # ask for it: its engine view is the decision's
        op, name = case.backend.split("/")
        policy = replace(model.policy, **{f"{op}_backend": (name,)})
        model = replace(model, policy=policy)
    return Selector(model).select(**dict(case.layer))


def problem(case: Case, catalogue=None) -> Optional[str]:
    """Why the case does not hold (None: it holds)."""
    op, name = case.backend.split("/")
    d = decide(case, catalogue)
    if d.layer.op != op:
        return f"the case's layer is a {d.layer.op} layer, not {op}"
    cand = next((c for c in d.candidates if c.backend == name), None)
    if cand is None:
        return f"{case.backend} is not in the decision"
    kinds = {r.rule for r in cand.reasons if r.severity != "warning"} - {"opt_in"}
    warns = {w.rule for b, w in d.warnings if b == name}
    want = set(case.fails)
    if case.name != "-":
        from selector.core import engines
        e = engines.entry((catalogue or base().catalogue).get(op, name), case.engine)
        named = e.name_for(d.layer.quant) if e is not None else None  # its name per scheme
        if named != case.name:
            return f"{case.backend}: {case.engine} names it {named!r}, expected " \
                   f"{case.name!r}"
    if case.kernel is not None:
        got = (d.engine.kernel, d.engine.scheme) if d.engine is not None else (None, None)
        if d.selected != name or got != (case.kernel, case.scheme):
            return f"{case.backend}: {case.engine} runs {got} (selected {d.selected}), " \
                   f"expected {(case.kernel, case.scheme)}"
    if case.only is not None:
        related = {"activation", "act_and_mul"} if case.only == "activation" else {case.only}
        got = bool(kinds & related)
        if got != bool(want):
            return f"{case.backend}: expected {case.only} to {'fail' if want else 'pass'}; " \
                   f"failing kinds {sorted(kinds)}"
        return None
    if kinds != want:
        return f"{case.backend}: failing kinds {sorted(kinds)}, expected {sorted(want)} " \
               f"({[r.message for r in cand.reasons][:3]})"
    if warns != set(case.warns):
        return f"{case.backend}: warning kinds {sorted(warns)}, expected {sorted(case.warns)}"
    if case.status is not None and cand.status != case.status:
        return f"{case.backend}: status {cand.status}, expected {case.status}"
    return None
