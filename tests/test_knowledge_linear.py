"""FP8, MXFP8 and MXFP4 linear layers (issue 26): real machines and real layers decided under
`engine=vllm stack=vllm_0_32`, each row with the backend and the vLLM 0.32.0 kernel class it must
come to, and the structure of the literal expectations in tests/knowledge_cases.py (every
implemented (backend, scheme) pair has its devices pinned there).

Layer shapes, from the public config.json files: DeepSeek-V3's dense MLP (hidden_size 7168,
intermediate_size 18432: vLLM's merged gate/up projection has N 36864, K 7168; the down
projection N 7168, K 18432), Qwen3-8B-FP8's (hidden_size 4096, intermediate_size 12288, 128x128
block scales: N 24576, K 4096 and N 4096, K 12288).
"""
from __future__ import annotations

import functools

import knowledge_cases as kc
import pytest

import selector
from selector.core import schema

DSV3_GATE_UP = {"hidden_size": 7168, "intermediate_size": 36864}
DSV3_DOWN = {"hidden_size": 18432, "intermediate_size": 7168}
QWEN3_GATE_UP = {"hidden_size": 4096, "intermediate_size": 24576}
QWEN3_DOWN = {"hidden_size": 12288, "intermediate_size": 4096}
NO_FI = ["platform.packages.flashinfer-python=null"]

# (id, platform preset, quant, shape, dtype, extra overrides, selected, vLLM kernel)
ROWS = [
    # SM 9.0: FlashInfer's block-scale GEMM paired with DeepGEMM first, DeepGEMM alone without
    # FlashInfer, CUTLASS for fp16 (both need bf16); per-tensor and per-channel: CUTLASS
    # (vLLM 0.32.0 kernels/linear/__init__.py _POSSIBLE_FP8_BLOCK_KERNELS, _POSSIBLE_FP8_KERNELS)
    ("h100-dsv3-gate-up-block", "h100", "fp8_block", DSV3_GATE_UP, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"),
    ("h200-dsv3-down-block", "h200", "fp8_block", DSV3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"),
    ("h200-dsv3-block-no-flashinfer", "h200", "fp8_block", DSV3_DOWN, "bfloat16", NO_FI,
     "deep_gemm", "DeepGemmFp8BlockScaledMMKernel"),
    ("h200-dsv3-block-fp16", "h200", "fp8_block", DSV3_DOWN, "float16", [],
     "cutlass", "CutlassFp8BlockScaledMMKernel"),
    ("h200-qwen3-gate-up-block", "h200", "fp8_block", QWEN3_GATE_UP, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"),
    ("h200-qwen3-down-block", "h200", "fp8_block", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"),
    ("h200-per-tensor", "h200", "fp8_tensor", QWEN3_DOWN, "bfloat16", [],
     "cutlass", "CutlassFP8ScaledMMLinearKernel"),
    ("h200-per-tensor-dynamic", "h100", "fp8_tensor_dynamic", QWEN3_DOWN, "bfloat16", [],
     "cutlass", "CutlassFP8ScaledMMLinearKernel"),
    ("h200-per-channel", "h200", "fp8_channel", QWEN3_DOWN, "bfloat16", [],
     "cutlass", "CutlassFP8ScaledMMLinearKernel"),
    ("h200-mxfp8", "h200", "mxfp8", QWEN3_DOWN, "bfloat16", [],
     "marlin", "MarlinMxfp8LinearKernel"),
    # SM 10.0: DeepGEMM for block FP8 (FlashInfer's block GEMM is SM 9.0 only), FlashInfer's
    # bmm_fp8 for per-tensor FP8, CuTe-DSL MXFP8, FlashInfer MXFP4 W4A4, Marlin for MXFP4 W4A16
    ("b200-dsv3-gate-up-block", "b200", "fp8_block", DSV3_GATE_UP, "bfloat16", [],
     "deep_gemm", "DeepGemmFp8BlockScaledMMKernel"),
    ("b200-per-tensor", "b200", "fp8_tensor", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferFP8ScaledMMLinearKernel"),
    ("b200-per-channel", "b200", "fp8_channel", QWEN3_DOWN, "bfloat16", [],
     "cutlass", "CutlassFP8ScaledMMLinearKernel"),
    ("b200-mxfp8", "b200", "mxfp8", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutedsl", "FlashInferCutedslMxfp8LinearKernel"),
    ("b200-mxfp4-w4a4", "b200", "mxfp4_w4a4", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferMxFp4LinearKernel"),
    ("b200-mxfp4-w4a16", "b200", "mxfp4", QWEN3_DOWN, "bfloat16", [],
     "marlin", "MarlinMxFp4LinearKernel"),
    # SM 12.0: DeepGEMM (support_deep_gemm admits the 12.x family; DeepGEMM PR #324 added sm120
    # kernels) before CUTLASS block FP8; FlashInfer per-tensor FP8 and CUTLASS MXFP8 (the CuTe-DSL
    # one is SM 10.x only)
    ("rtx-pro-6000-dsv3-block", "rtx_pro_6000", "fp8_block", DSV3_GATE_UP, "bfloat16", [],
     "deep_gemm", "DeepGemmFp8BlockScaledMMKernel"),
    ("rtx-pro-6000-per-tensor", "rtx_pro_6000", "fp8_tensor", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferFP8ScaledMMLinearKernel"),
    ("rtx-pro-6000-mxfp8", "rtx_pro_6000", "mxfp8", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferCutlassMxfp8LinearKernel"),
    ("dgx-spark-qwen3-block", "dgx_spark", "fp8_block", QWEN3_GATE_UP, "bfloat16", [],
     "deep_gemm", "DeepGemmFp8BlockScaledMMKernel"),
    ("dgx-spark-mxfp4-w4a16", "dgx_spark", "mxfp4", QWEN3_DOWN, "bfloat16", [],
     "marlin", "MarlinMxFp4LinearKernel"),
    ("dgx-spark-mxfp4-w4a4", "dgx_spark", "mxfp4_w4a4", QWEN3_DOWN, "bfloat16", [],
     "flashinfer_cutlass", "FlashInferMxFp4LinearKernel"),
]


@functools.cache
def _selector(preset: str, extra: tuple):
    return selector.load(overrides=[f"platform={preset}", "stack=vllm_0_32", "engine=vllm",
                                    "layer=dense_linear", *extra])


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_scenario(row):
    _, preset, quant, shape, dtype, extra, selected, kernel = row
    d = _selector(preset, tuple(extra)).select(op="linear", quant=quant, dtype=dtype, **shape)
    assert (d.selected, (d.engine.kernel if d.engine else None)) == (selected, kernel), \
        [(c.backend, c.status, [r.message for r in c.reasons][:2]) for c in d.candidates]
    assert d.engine.scheme == quant


def test_mxfp4_with_mxfp8_activations_has_no_linear_kernel():
    """vLLM 0.32.0 has no MXFP4 linear kernel for MXFP8 activations (kernels/linear/mxfp4/*
    can_implement: None or kMxfp4Dynamic only): no backend implements the layer."""
    d = _selector("dgx_spark", ()).select(op="linear", quant="mxfp4_w4a8")
    assert d.selected is None
    assert {c.status for c in d.candidates} == {schema.Status.NOT_APPLICABLE}
    assert d.notes_of("unsupported_layer")


def test_deep_gemm_on_sm12x_runs_and_warns_on_sm121():
    """vLLM 0.32.0's support_deep_gemm() admits SM 12.x and DeepGEMM has sm120 kernels (DeepGEMM
    PR #324): selected on SM 12.0; on SM 12.1 it faults (vLLM #54125, open): a warning."""
    d = _selector("rtx_pro_6000", ()).select(op="linear", quant="fp8_block", **QWEN3_GATE_UP)
    assert d.selected == "deep_gemm" and not d.candidate("deep_gemm").reasons
    d = _selector("dgx_spark", ()).select(op="linear", quant="fp8_block", **QWEN3_GATE_UP)
    c = d.candidate("deep_gemm")
    assert d.selected == "deep_gemm" and c.status == "selected"
    assert any(n.data["rule"] == "known_issue" and "#54125" in n.data["source"]
               for n in d.notes_of("rule_warning") if n.backend == "deep_gemm")


def test_a_global_linear_backend_serves_each_scheme_or_falls_back():
    """`--linear-backend deep_gemm` set for a DeepSeek-V3 FP8 model: its block-FP8 layers run
    DeepGEMM, an MXFP8 layer (which DeepGEMM does not implement) is decided automatically."""
    sel = _selector("b200", ("policy.linear_backend=deep_gemm",))
    block = sel.select(op="linear", quant="fp8_block", **DSV3_DOWN)
    assert block.selected == "deep_gemm"
    other = sel.select(op="linear", quant="mxfp8", **QWEN3_DOWN)
    assert other.selected == "flashinfer_cutedsl"
    assert other.notes_of("request_not_applicable")


def test_every_implemented_scheme_has_its_devices_pinned():
    """A linear (backend, scheme) pair the catalogue implements without a literal device
    expectation would escape the mutation run; a stated scheme list that drifts from the
    catalogue's `implements` fails here too."""
    cat = kc.base().catalogue
    for name, schemes in kc.EXPECT_LINEAR_SCHEMES.items():
        b = cat.get("linear", name.split("/")[1])
        other = set(b.implements) - set(schema.NVFP4_QUANTS)
        assert other == schemes, (name, sorted(other), sorted(schemes))
        for q in schemes:
            assert (name, q) in kc.EXPECT_SCHEME_DEVICES, (name, q)


def test_a_wrapper_says_which_schemes_it_computes():
    """flashinfer_cutlass implements fp8_tensor (vLLM builds FlashInferFP8ScaledMMLinearKernel),
    but selector's CutlassLinear computes NVFP4 only: built for an FP8 layer it says so, instead
    of handing FP8 weights to an FP4 GEMM."""
    from selector.backends.wrappers.flashinfer_cutlass import CutlassLinear
    from selector.backends.wrappers.marlin import MarlinLinear
    CutlassLinear(quant="nvfp4")
    for cls in (CutlassLinear, MarlinLinear):
        with pytest.raises(NotImplementedError, match="computes nvfp4, nvfp4_w4a16 layers, "
                                                      "not fp8_block"):
            cls(quant="fp8_block")
