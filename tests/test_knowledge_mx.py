"""MXFP4 and MXFP8 MoE on real platform presets: gpt-oss (interleaved swigluoai), DeepSeek V4
(SiLU with a clamp) and a generic MXFP8 layer on H100 (SM 9.0), B200 (10.0), RTX 5090 and RTX Pro
6000 (12.0) and DGX Spark (12.1), under vLLM 0.32.0 as installed (`stack=vllm_0_32
engine=vllm`): the backend, the kernel vLLM runs and its scheme. Each row is vLLM 0.32.0's own
answer (fused_moe/oracle/mxfp4.py select_mxfp4_moe_backend, _get_priority_backends_for_gpt_oss;
oracle/mxfp8.py select_mxfp8_moe_backend), checked against vLLM's code on a simulated GPU in
tests/vllm/test_parity_mx.py; the rule boundaries themselves are tests/knowledge_cases.py
MX_CASES."""
from __future__ import annotations

import pytest

import selector

H100, B200, RTX, PRO, DGX = ("platform=h100", "platform=b200", "platform=rtx_5090",
                             "platform=rtx_pro_6000", "platform=dgx_spark")
BASE = ["stack=vllm_0_32", "engine=vllm"]
NO_FI = "platform.packages.flashinfer-python=null"

ROWS = [
    # gpt-oss as vLLM loads it: no activation key, the _BF16 variants (layer.quant=mxfp4)
    ("gpt-oss-h100", [H100], "gpt_oss_moe", "mxfp4", "triton_kernels",
     "OAITritonMxfp4ExpertsMonolithic", "mxfp4"),
    ("gpt-oss-b200", [B200], "gpt_oss_moe", "mxfp4", "flashinfer_trtllm",
     "TrtLlmMxfp4ExpertsMonolithic", "mxfp4"),
    ("gpt-oss-rtx5090", [RTX], "gpt_oss_moe", "mxfp4", "marlin", "MarlinExperts", "mxfp4"),
    ("gpt-oss-pro6000", [PRO], "gpt_oss_moe", "mxfp4", "marlin", "MarlinExperts", "mxfp4"),
    ("gpt-oss-dgx-spark", [DGX], "gpt_oss_moe", "mxfp4", "marlin", "MarlinExperts", "mxfp4"),
    # gpt-oss with MXFP8 activations (--quantization-config '{"moe": {"activation": "mxfp8"}}')
    ("gpt-oss-w4a8-b200", [B200], "gpt_oss_moe", "mxfp4_w4a8", "flashinfer_trtllm",
     "TrtLlmMxfp4ExpertsMonolithic", "mxfp4_w4a8"),
    ("gpt-oss-w4a8-rtx5090", [RTX], "gpt_oss_moe", "mxfp4_w4a8", "flashinfer_cutlass",
     "FlashInferExperts", "mxfp4_w4a8"),
    ("gpt-oss-w4a8-dgx-spark", [DGX], "gpt_oss_moe", "mxfp4_w4a8", "flashinfer_cutlass",
     "FlashInferExperts", "mxfp4_w4a8"),
    # no MXFP8-activation kernel on SM 9.0: Marlin, weight-only (vLLM falls back to the bf16
    # Triton kernels instead: docs/vllm-parity.md)
    ("gpt-oss-w4a8-h100", [H100], "gpt_oss_moe", "mxfp4_w4a8", "marlin", "MarlinExperts",
     "mxfp4"),
    # MXFP4 activations (compressed-tensors W4A4 MXFP4): vLLM's CUTLASS on SM 10.x
    ("w4a4-b200", [B200], "default", "mxfp4_w4a4", "cutlass", "CutlassExpertsMxfp4",
     "mxfp4_w4a4"),
    ("w4a4-rtx5090", [RTX], "default", "mxfp4_w4a4", "marlin", "MarlinExperts", "mxfp4"),
    # DeepSeek V4 layers with MXFP8 activations (what vLLM's DeepSeek V4 path runs on SM 10.x)
    ("dsv4-w4a8-b200", [B200], "deepseek_v4_moe", "mxfp4_w4a8", "flashinfer_trtllm",
     "TrtLlmMxfp4ExpertsMonolithic", "mxfp4_w4a8"),
    # MXFP8: TRT-LLM, then DeepGEMM (vendored in vLLM's wheel), then Marlin
    ("mxfp8-b200", [B200], "default", "mxfp8", "flashinfer_trtllm", "TrtLlmFp8ExpertsMonolithic",
     "mxfp8"),
    ("mxfp8-b200-no-flashinfer", [B200, NO_FI], "default", "mxfp8", "deep_gemm",
     "DeepGemmExperts", "mxfp8"),
    ("mxfp8-h100", [H100], "default", "mxfp8", "marlin", "MarlinExperts", "mxfp8"),
    ("mxfp8-dgx-spark", [DGX], "default", "mxfp8", "marlin", "MarlinExperts", "mxfp8"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_mx_scenario(row):
    _, platform, layer, quant, backend, kernel, scheme = row
    d = selector.load([*BASE, *platform, f"layer={layer}", f"layer.quant={quant}"]).default()
    assert d.selected == backend, d.summary()
    assert (d.engine.kernel, d.engine.scheme) == (kernel, scheme)
    if d.engine.no_flag:  # vLLM reaches it automatically, but its scheme's oracle has no value
        # for it (vLLM 0.32.0 oracle/mxfp4.py map_mxfp4_backend: no `cutlass` for MXFP4 W4A4)
        assert d.engine.flags == () and f"moe_backend='{d.engine.backend}'" in d.engine.no_flag
        assert (quant, backend) == ("mxfp4_w4a4", "cutlass"), d.engine.no_flag
    else:
        assert d.engine.flags[-2:] == ("--moe-backend", d.engine.backend)  # vLLM's name


def test_triton_ranks_after_marlin_on_consumer_blackwell_and_says_why():
    """vLLM 0.32.0 _get_priority_backends_for_gpt_oss moves TRITON after BATCHED_MARLIN on the
    12.x family; on SM 11.0 (no TRT-LLM cubins, FlashInfer CUTLASS MXFP4 x bf16 only on 9.0)
    Triton is first."""
    d = selector.load([*BASE, RTX, "layer=gpt_oss_moe", "layer.quant=mxfp4"]).default()
    assert d.candidate("triton_kernels").status == "eligible"
    pref = [n for n in d.note_data if n.kind == "preference"]
    assert pref and pref[0].backend == "marlin"
    d = selector.load([*BASE, "platform=b200", "platform.capability=11.0", "layer=gpt_oss_moe",
                       "layer.quant=mxfp4"]).default()
    assert d.selected == "triton_kernels"


def test_explicit_b12x_refuses_gpt_oss_interleaved_swigluoai():
    """vLLM 0.32.0 fused_moe/b12x.py _supports_activation has swigluoai_uninterleave, not the
    interleaved gpt-oss layout; with b12x installed the request is refused, naming the rule."""
    d = selector.load([*BASE, DGX, "platform.packages.b12x=1.5.1", "layer=gpt_oss_moe",
                       "layer.quant=mxfp4", "policy.moe_backend=b12x"]).default()
    assert d.selected is None
    assert "activation" in {r.rule for r in d.candidate("b12x").reasons}


def test_an_mx_layer_is_not_applicable_to_nvfp4_only_backends():
    d = selector.load([*BASE, B200, "layer.quant=mxfp4"]).default()
    for name in ("flashinfer_cutedsl", "flashinfer_b12x", "emulation"):
        assert d.candidate(name).status == "not_applicable", name


def test_the_nvfp4_wrappers_refuse_to_prepare_an_mx_layer():
    """The catalogue's flashinfer_trtllm implements MXFP4 (vLLM runs it), but this project's
    TrtllmMoE prepares NVFP4 weights only: it says so instead of running an NVFP4 kernel."""
    from selector.backends.wrappers.flashinfer_trtllm import TrtllmMoE
    from selector.backends.wrappers.marlin import MarlinMoE
    for cls in (TrtllmMoE, MarlinMoE):
        with pytest.raises(NotImplementedError, match="computes nvfp4, nvfp4_w4a16 layers, not mxfp4"):
            cls(quant="mxfp4")
