"""vLLM's own FP8, MXFP8 and MXFP4 linear kernel choice (init_fp8_linear_kernel,
init_mxfp8_linear_kernel, init_mxfp4_linear_kernel) against selector's over the whole space
(tests/vllm/linear_parity.py): the same vLLM backend and kernel, or both refuse, or a catalogue
rule (with its source) explains the difference. The FP8/MXFP8/MXFP4 section of
docs/vllm-parity.md is this report (tools/vllm_parity.py --only linear)."""
from __future__ import annotations

import re
from pathlib import Path

import linear_parity as lp
import parity
import pytest
import sim

DOC = Path(__file__).resolve().parents[2] / "docs" / sim.DOC_NAME  # the installed release's
FI = sim.FLASHINFER


def _names():
    engines = (dict(b.engines).get("vllm")
               for b in parity._base_selector().catalogue.backends["linear"])
    return {e.name for e in engines if e is not None and e.name}


# vLLM's `torch` and `triton` linear backends are the FP8 torch family's files (branch h200,
# merged beside this sweep): without them the sweep cannot name vLLM's choice on selector's side
pytestmark = pytest.mark.skipif(
    not {"torch", "triton"} <= _names(),
    reason="needs the torch_* and triton_block_fp8 linear backend files (vLLM names torch, triton)")


@pytest.fixture(scope="module")
def report():
    return lp.run()


def _row(s):
    return lp.run([s]).rows[0]


def S(cap, cuda, quant, requested="auto", fi=FI, b12x=None, dtype="bfloat16",
      shape=lp.SHAPES[0]):
    return sim.Scenario(cap, cuda, fi, b12x, "linear", quant, "silu", True, requested=requested,
                        dtype=dtype, shape=shape)


def test_every_vllm_linear_name_of_the_sweep_is_a_catalogue_name():
    """Each --linear-backend value the sweep asks for names a catalogue backend (torch_*,
    triton_block_fp8 come with the FP8 torch family's files)."""
    missing = set(lp.NAMES) - {"auto"} - _names()
    assert not missing, f"no selector backend has these vLLM names: {sorted(missing)}"


def test_every_difference_is_explained(report):
    assert len(report.rows) == len(lp.sweep())
    lines = [f"{r.scenario.label()}: vLLM {r.vllm or 'error'} {r.vllm_kernel} "
             f"({r.vllm_error[:160]}), selector {r.selected or 'refusal'} {r.kernel}"
             for r in report.unexplained]
    assert not lines, "differences no catalogue rule explains:\n" + "\n".join(lines[:20])
    assert len(report.rows) - len(report.differ) > len(report.differ)  # parity is the rule


def test_the_sweep_covers_the_whole_space():
    space = lp.sweep()
    assert {s.capability for s in space} == {None, "8.0", "8.6", "8.9", "9.0", "10.0", "10.3",
                                             "11.0", "12.0", "12.1"}
    assert {s.cuda for s in space} == {None, "12.6", "12.8", "12.9", "13.0"}
    assert {s.quant for s in space} == {"fp8_tensor", "fp8_tensor_dynamic", "fp8_channel",
                                        "fp8_block", "mxfp8", "mxfp4", "mxfp4_w4a8",
                                        "mxfp4_w4a4"}
    assert {s.requested for s in space} == set(lp.NAMES)
    assert {s.dtype for s in space} == {"bfloat16", "float16"}
    assert {(s.flashinfer is None, s.b12x is None) for s in space} == {
        (True, True), (False, True), (False, False)}
    from vllm.model_executor.kernels import linear
    vllm_names = {n for n, ks in linear._LINEAR_BACKEND_KERNEL_MAP.items()
                  if any(k in ks for k in (*linear._POSSIBLE_FP8_KERNELS[sim.PlatformEnum.CUDA],
                                           *linear._POSSIBLE_FP8_BLOCK_KERNELS[
                                               sim.PlatformEnum.CUDA],
                                           *linear._POSSIBLE_MXFP8_KERNELS[sim.PlatformEnum.CUDA],
                                           *linear._POSSIBLE_MXFP4_KERNELS[
                                               sim.PlatformEnum.CUDA]))}
    # every vLLM backend with a CUDA kernel for these schemes is asked for, but humming (its
    # optional package is answered absent: vLLM never builds it here)
    assert vllm_names - set(lp.NAMES) == {"humming"}, vllm_names - set(lp.NAMES)


def test_the_doc_section_is_this_report(report):
    text = DOC.read_text()
    got = {k: int(v) for k, v in re.findall(r"^\| linear (total|agree[^|]*|differ|differ "
                                            r"without an explanation) \| (\d+) \|$", text, re.M)}
    assert got == {"total": len(report.rows),
                   "agree (same backend and kernel, or both refuse)":
                       len(report.rows) - len(report.differ),
                   "differ": len(report.differ), "differ without an explanation": 0}, got
    assert len(re.findall(r"^#### L\d+\. ", text, re.M)) == len(report.clusters())


def test_deepseek_v3_block_fp8_on_hopper_agrees():
    """SM 9.0, flashinfer present: FlashInfer's block-scale GEMM paired with DeepGEMM; absent:
    DeepGEMM; fp16: CUTLASS."""
    r = _row(S("9.0", "13.0", "fp8_block"))
    assert r.agrees and r.vllm_kernel == "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
    r = _row(S("9.0", "13.0", "fp8_block", fi=None))
    assert r.agrees and r.vllm_kernel == "DeepGemmFp8BlockScaledMMKernel"
    r = _row(S("9.0", "13.0", "fp8_block", dtype="float16"))
    assert r.agrees and r.vllm_kernel == "CutlassFp8BlockScaledMMKernel"


def test_deep_gemm_on_sm12x_agrees_and_warns_on_sm121():
    """vLLM 0.32.0 builds DeepGEMM on SM 12.x (support_deep_gemm admits the 120 family); so does
    selector. On SM 12.1 (DGX Spark) it faults (vLLM #54125): selector still agrees with vLLM's
    choice and carries a warning that cites the issue; SM 12.0 gets no such warning."""
    r = _row(S("12.0", "13.0", "fp8_block"))
    assert r.agrees and r.kernel == "DeepGemmFp8BlockScaledMMKernel", (r.vllm_kernel, r.kernel)
    assert not any("#54125" in w.source for _, w in r.decision.warnings)
    r = _row(S("12.1", "13.0", "fp8_block"))
    assert r.agrees and r.kernel == "DeepGemmFp8BlockScaledMMKernel", (r.vllm_kernel, r.kernel)
    assert any(b == "deep_gemm" and "#54125" in w.source for b, w in r.decision.warnings), \
        r.decision.warnings


def test_torch_names_the_kernel_of_the_layers_scheme():
    """`--linear-backend torch` holds one kernel per FP8 scheme: per-tensor, channel-wise and
    (SM 9.0) block-wise; selector maps it to the backend of the layer's scheme."""
    for quant, kernel in (("fp8_tensor", "PerTensorTorchFP8ScaledMMLinearKernel"),
                          ("fp8_channel", "ChannelWiseTorchFP8ScaledMMLinearKernel"),
                          ("fp8_block", "BlockWiseTorchFP8ScaledMMLinearKernel")):
        r = _row(S("9.0", "13.0", quant, requested="torch"))
        assert r.agrees and r.vllm_kernel == kernel, (quant, r.vllm_kernel, r.kernel, r.why)


def test_a_linear_backend_without_a_kernel_for_the_scheme_falls_back_in_both():
    """--linear-backend=flashinfer_cudnn (NVFP4 only) on an FP8 layer: vLLM's
    _resolve_backend_kernels falls back to automatic selection, and so does selector."""
    r = _row(S("10.0", "13.0", "fp8_tensor", requested="flashinfer_cudnn"))
    assert r.agrees and r.vllm_kernel == "FlashInferFP8ScaledMMLinearKernel"


def test_an_unexplained_linear_difference_fails():
    row = _row(S("10.0", "13.0", "fp8_tensor"))
    row.vllm, row.vllm_error = None, "simulated refusal"
    assert lp.explain(row, parity.outside()) is None
    row = _row(S("10.0", "13.0", "fp8_tensor"))
    row.vllm_kernel = "SomeOtherKernel"
    assert not row.agrees and lp.explain(row, parity.outside()) is None


def test_vllms_per_quant_key_is_the_one_selector_names(monkeypatch):
    """The requested backend reaches vLLM as KernelConfig.linear_backend_per_quant under
    selector's VLLM_LINEAR_QUANT key: a wrong key (vLLM's block-FP8 layers read
    'fp8_block_w8a8', not 'fp8_w8a8') leaves vLLM on its automatic path, and the row differs."""
    s = S("9.0", "13.0", "fp8_block", requested="cutlass")
    assert _row(s).agrees and _row(s).vllm_kernel == "CutlassFp8BlockScaledMMKernel"
    monkeypatch.setitem(lp.VLLM_LINEAR_QUANT, "fp8_block", "fp8_w8a8")
    row = _row(s)
    assert row.vllm_kernel == "FlashInferFp8DeepGEMMDynamicBlockScaledKernel" and not row.agrees


def test_block_fp8_flashinfer_without_vendored_deep_gemm_is_cutlass_in_vllm():
    """Seed 4242's case: block-FP8 on SM 9.0 with FlashInfer, a vLLM build without its vendored
    DeepGEMM, N 64 K 4096, flashinfer_b12x requested (vLLM has no block-FP8 kernel under that
    name and selects automatically). vLLM's FlashInferFp8DeepGEMMDynamicBlockScaledKernel needs
    both halves supported (Fp8BlockScaledDynamicMMLinearKernel.is_supported), so vLLM builds
    CUTLASS's; with DeepGEMM it builds the dynamic kernel selector names."""
    s = sim.Scenario("9.0", "12.9", FI, None, "linear", "fp8_block", "silu", True,
                     requested="flashinfer_b12x", shape=(64, 4096), deep_gemm=False)
    assert lp.runs_deep_gemm("FlashInferFp8DeepGEMMDynamicBlockScaledKernel")
    assert lp.runs_deep_gemm("DeepGemmFp8BlockScaledMMKernel")
    assert not lp.runs_deep_gemm("CutlassFp8BlockScaledMMKernel")
    for requested in ("flashinfer_b12x", "auto", "flashinfer_cutlass"):
        r = _row(sim.Scenario(**{**s.__dict__, "requested": requested}))
        assert r.vllm == ("cutlass" if requested != "flashinfer_cutlass" else None), r.vllm
        assert r.vllm_kernel in ("CutlassFp8BlockScaledMMKernel", None)
        assert (r.selected, r.kernel) == ("flashinfer_cutlass",
                                          "FlashInferFp8DeepGEMMDynamicBlockScaledKernel")
        assert r.vllm_with_deep_gemm == ("flashinfer_cutlass",
                                         "FlashInferFp8DeepGEMMDynamicBlockScaledKernel")
        assert r.why is not None and "vendored DeepGEMM" in r.why[0], r.why
        assert any("BlockScaledMMLinearKernel.py:172-190" in src for _, src in r.why[1])
    r = _row(sim.Scenario(**{**s.__dict__, "deep_gemm": True}))
    assert r.agrees and r.kernel == "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
