"""doctor --deep's engine drift (selector/engines/vllm_drift.py): the comparison of vLLM's
own answers with selector's, on canned vLLM answers and selector's real decisions; the check's
failure paths (no traceback ever). The real vLLM run is tests/vllm/test_engine_drift.py."""
from __future__ import annotations

import pytest

import selector
from selector.engines import vllm_drift as engine_drift
from selector.engines.vllm_drift import LAYERS, compare

GPU = {"version": "0.32.0", "platform": "CudaPlatform", "cuda": True, "capability": "10.0"}
CPU = {"version": "0.32.0", "platform": "CpuPlatform", "cuda": False, "capability": None}
NVFP4_MOE = {"op": "moe", "quant": "nvfp4", "activation": "silu", "act_and_mul": True,
             "dtype": "bfloat16", "hidden_size": 2048, "intermediate_size": 1024,
             "num_experts": 64, "top_k": 8, "ep_size": 1, "tp_size": 1}


def _answer(kernel, backend="VLLM_CUTLASS", error=None, layer=NVFP4_MOE):
    return {"name": "NVFP4 MoE, SiLU, bf16", "oracle": "nvfp4_moe", "layer": layer,
            "requested": "auto", "exclude": [], "backend": backend, "kernel": kernel,
            "error": error}


def test_same_kernel_agrees_a_different_one_is_a_drift_item_naming_both():
    ours = {"NVFP4 MoE, SiLU, bf16": ("cutlass", "CutlassExpertsFp4", "")}
    same = compare(GPU, [_answer("CutlassExpertsFp4")], ours)
    assert [i.status for i in same] == ["agrees"]
    [item] = compare(GPU, [_answer("MarlinExperts", "MARLIN")], ours)
    assert item.status == "drift"
    assert item.backend == "vllm/NVFP4 MoE, SiLU, bf16"
    assert item.installed == "MARLIN (MarlinExperts)"
    assert item.catalogue == "cutlass (CutlassExpertsFp4)"
    assert "vLLM 0.32.0's own oracle (nvfp4_moe) on CudaPlatform" in item.detail


def test_refusals_on_both_sides_agree_one_sided_refusal_drifts():
    refused = _answer(None, None, "NotImplementedError: no NVFP4 MoE backend")
    assert compare(GPU, [refused], {"NVFP4 MoE, SiLU, bf16": (None, None, "none runs")}
                   )[0].status == "agrees"
    [item] = compare(GPU, [refused], {"NVFP4 MoE, SiLU, bf16": ("cutlass", "CutlassExpertsFp4",
                                                                 "")})
    assert item.status == "drift"
    assert item.installed == "refuses (NotImplementedError: no NVFP4 MoE backend)"


def test_without_a_cuda_platform_differences_are_explained_not_drift():
    [item] = compare(CPU, [_answer("CPUExperts", "CPU")],
                     {"NVFP4 MoE, SiLU, bf16": (None, None, "no GPU")})
    assert item.status == "explained"
    assert engine_drift.NO_GPU_SOURCE in item.detail


@pytest.mark.parametrize(("capability", "expected"), [("10.0", "flashinfer_trtllm"),
                                                    ("12.0", "flashinfer_cutlass"),
                                                    ("9.0", "marlin")])
def test_selector_side_is_selectors_real_decision(capability, expected):
    """selector's answer for the standard NVFP4 MoE layer on a given device, and the drift it
    makes against vLLM's answer: agreeing when vLLM's kernel is selector's, drift otherwise."""
    sel = selector.load(["engine=vllm", "platform=b200", "stack=vllm_0_32",
                         f"platform.capability={capability}"])
    backend, kernel, why = engine_drift._selector_answer(sel, _answer(None))
    direct = sel.select(**NVFP4_MOE)
    assert backend == direct.selected == expected and kernel
    assert (why == "") == (backend is not None)
    name = "NVFP4 MoE, SiLU, bf16"
    ours = {name: (backend, kernel, why)}
    vllm_same = _answer(kernel, backend) if kernel else _answer(None, None, "refused")
    assert compare(GPU, [vllm_same], ours)[0].status == "agrees"
    assert compare(GPU, [_answer("SomeOtherExperts", "OTHER")], ours)[0].status == "drift"


def test_standard_layers_cover_moe_and_linear():
    assert {o for _, o, _ in LAYERS} == {"nvfp4_moe", "fp8_moe", "nvfp4_linear"}
    assert len({n for n, _, _ in LAYERS}) == len(LAYERS)


@pytest.mark.skipif(engine_drift.vllm_importable(), reason="vllm is installed here")
def test_without_vllm_the_check_is_skipped_with_a_line():
    got = engine_drift.check()
    assert got.status == "skipped" and got.items == []
    assert "vllm is not importable" in got.message


@pytest.mark.skipif(engine_drift.vllm_importable(), reason="vllm is installed here")
def test_a_child_that_cannot_import_vllm_reports_one_line():
    """The child's failure comes back as one line (here: no vLLM to import), never raised."""
    platform, answers, error = engine_drift.ask_vllm(timeout=60)
    assert platform == {} and answers == []
    assert error.startswith("ModuleNotFoundError") and "\n" not in error
    assert "Traceback" not in error
