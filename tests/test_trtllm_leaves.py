"""TensorRT-LLM's CUTLASS MoE leaves where its versions or formats differ (issue 45), each through
the CLI as a user runs it (`python -m selector explain --model DIR platform=... engine=trtllm`,
its exit code, its text and its --format json plan).

- NVFP4 on SM 10.7: the code index holds two versions of TensorRT-LLM's
  _torch/modules/fused_moe/cutlass/nvfp4.py, TrtllmCutlassNvfp4Impl.sm_support {100, 103, 120, 121}
  in the one whose leaf defines run_moe and {100, 103, 107, 120, 121} in one without it; neither is
  tied to a release, and the earlier fused_moe_cutlass.py _QUANT_SUPPORT_TABLE lists NVFP4 in
  {100, 103, 120, 121}. selector keeps the SMs every version lists, under both stacks: an NVFP4
  MoE on SM 10.7 has no TensorRT-LLM backend (TRTLLM-gen and CuTe-DSL are SM 100/103 only), exit 1.
- Per-tensor FP8 (QDQ) experts run CUTLASS's TrtllmCutlassFp8Impl (cutlass/fp8.py,
  sm_support minimum 89; the earlier _QUANT_SUPPORT_TABLE: FP8 ("min", 89)), AUTO's own choice
  (resolve_moe_backend: CUTLASS), so main passes no moe_config.

TensorRT-LLM cannot be installed here (its PyPI package is a stub): the expectations restate the
source they cite.
"""
from __future__ import annotations

import json

import pytest
from helpers import REPO, run_cli

DS = "examples/deepseek-r1-nvfp4"
MODELOPT_FP8 = str(REPO / "tests" / "checkpoint_corpus" / "qwen3-30b-a3b-modelopt-fp8")


def _explain(*args: str):
    r = run_cli("explain", *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def _groups(plan: dict) -> dict:
    return {g["kind"]: g for g in plan["launch"]["groups"]}


@pytest.mark.parametrize("stack", ["stack=trtllm_main", "stack=trtllm_1_2"])
def test_nvfp4_experts_on_sm107_have_no_trtllm_backend(stack):
    args = ("--model", DS, "platform=b200", "platform.capability=10.7", "engine=trtllm", stack)
    r = _explain(*args)
    flat = " ".join(r.stdout.split())
    assert r.returncode == 1, r.stdout[-2000:]
    assert "command: none" in flat and "!! routed experts" in flat
    js = _explain(*args, "--format", "json")
    plan = json.loads(js.stdout)
    shape = next(s for k in plan["kinds"] if k["kind"] == "routed experts" for s in k["shapes"])
    cands = {c["backend"]: c for c in shape["decision"]["candidates"]}
    cutlass = cands["flashinfer_cutlass"]
    assert cutlass["status"] == "rejected", cutlass
    (why,) = [x for x in cutlass["reasons"] if x["rule"] == "device"]
    assert "SM 10.7" in why["message"] and "also lists SM 107" in why["message"]
    assert "cutlass/nvfp4.py" in why["source"] and "{100, 103, 107, 120, 121}" in why["source"]
    for other in ("flashinfer_trtllm", "flashinfer_cutedsl"):
        assert cands[other]["status"] == "rejected" and any(
            x["rule"] == "device" for x in cands[other]["reasons"]), cands[other]
    # the same checkpoint on SM 10.0 and 12.0 plans (the SMs every version lists)
    for platform in ("b200", "rtx_pro_6000"):
        ok = _explain("--model", DS, f"platform={platform}", "engine=trtllm", stack)
        assert ok.returncode == 0 and f"command: trtllm-serve {DS}" in ok.stdout, ok.stdout[-2000:]


@pytest.mark.parametrize("platform", ["h100", "b200", "rtx_pro_6000"])
def test_per_tensor_fp8_experts_run_the_cutlass_qdq_leaf(platform):
    r = _explain("--model", MODELOPT_FP8, f"platform={platform}", "engine=trtllm",
                 "stack=trtllm_main", "--format", "json")
    assert r.returncode == 0, r.stdout[-2000:]
    plan = json.loads(r.stdout)
    experts = _groups(plan)["routed experts"]
    assert experts["scheme"] == "fp8_tensor" and experts["engine_backend"] == "CUTLASS", experts
    assert experts["kernel"] and experts["kernel"][0].startswith("TrtllmCutlassFp8Impl"), experts
    # AUTO runs CUTLASS for it (resolve_moe_backend): nothing passed on main
    assert "moe_config" not in (plan["launch"]["files"].get("extra_llm_api_options.yaml") or "")
    auto = [a for a in plan["launch"]["automatic"] if a["kind"] == "routed experts"]
    assert auto and auto[0]["engine"]["names"] == ["CUTLASS"] and not auto[0]["passed"], auto


def test_per_tensor_fp8_experts_need_sm89():
    """SM 8.0 (A100): the QDQ leaf's sm_support minimum is 89: nothing runs the experts."""
    args = ("--model", MODELOPT_FP8, "platform=h100", "platform.capability=8.0",
            "engine=trtllm", "stack=trtllm_main")
    r = _explain(*args)
    flat = " ".join(r.stdout.split())
    assert r.returncode == 1 and "command: none" in flat, r.stdout[-2000:]
    assert "!! routed experts" in flat and "need SM >= 8.9" in flat
    plan = json.loads(_explain(*args, "--format", "json").stdout)
    shape = next(s for k in plan["kinds"] if k["kind"] == "routed experts" for s in k["shapes"])
    (cutlass,) = [c for c in shape["decision"]["candidates"]
                  if c["backend"] == "flashinfer_cutlass"]
    assert cutlass["status"] == "rejected" and [x["message"] for x in cutlass["reasons"]] == [
        "needs SM >= 8.9; this GPU is SM 8.0: TensorRT-LLM's CUTLASS per-tensor FP8 (QDQ) MoE "
        "leaf runs on SM >= 8.9"], cutlass
    assert "cutlass/fp8.py" in cutlass["reasons"][0]["source"]


def test_modelopt_fp8_pb_wo_experts_are_block_fp8_in_trtllm():
    """A uniform ModelOpt FP8_PB_WO checkpoint: vLLM builds its experts with
    ModelOptFp8MoEMethod (per-tensor FP8, with the reader's warning); TensorRT-LLM canonicalizes
    the algo to FP8_BLOCK_SCALES for the whole model (quantization/modelopt_config.py
    parse_modelopt_quant_config), so its experts are block FP8: on SM 90 CUTLASS's DeepGEMM leaf,
    never the per-tensor QDQ leaf."""
    model = str(REPO / "tests" / "checkpoint_corpus" / "deepseek-v3-modelopt-fp8-pb-wo")
    r = _explain("--model", model, "platform=h200", "engine=trtllm", "stack=trtllm_main",
                 "--format", "json")
    assert r.returncode == 0, r.stdout[-2000:]
    plan = json.loads(r.stdout)
    experts = _groups(plan)["routed experts"]
    assert experts["scheme"] == "fp8_block" and experts["engine_backend"] == "CUTLASS", experts
    assert experts["kernel"][0].startswith("DeepgemmCudaHopperFp8BlockScalesImpl"), experts
    assert "vLLM" not in r.stdout and "modelopt_config.py" in r.stdout
    text = _explain("--model", model, "platform=h200", "engine=trtllm", "stack=trtllm_main")
    flat = " ".join(text.stdout.split())
    assert "routed experts: 58 layers (3-60): moe fp8_block (FP8_PB_WO: TensorRT-LLM reads " \
           "FP8_PB_WO as FP8_BLOCK_SCALES" in flat and "vLLM" not in flat
    # vLLM's plan keeps vLLM's reading (per-tensor experts, its warning)
    v = _explain("--model", model, "platform=h200", "engine=vllm", "stack=vllm_0_32")
    assert "moe fp8_tensor" in v.stdout and "ModelOptFp8MoEMethod" in " ".join(v.stdout.split())
