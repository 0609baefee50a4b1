"""Issue 44: the catalogue's rules on activation-scale granularity and routing method fire
where vLLM 0.32.0 refuses the backend (each rule's source names the vLLM line), and only
there."""
from __future__ import annotations

from helpers import load

B200 = ["platform=b200", "stack=vllm_0_32", "engine=vllm"]
MOE = dict(op="moe", activation="silu", act_and_mul=True, hidden_size=4096,
           intermediate_size=1536, num_experts=64, top_k=4)


def _status(d, name):
    return next(c for c in d.candidates if c.backend == name)


def _rejected_by(d, name, kind):
    c = _status(d, name)
    return any(r.rule == kind for r in c.reasons)


def test_ct_per_tensor_moe_with_dynamic_activations_runs_marlin_only():
    """compressed_tensors_moe_w8a8_fp8.py 94-105: kFp8Dynamic128Sym; only Marlin takes it."""
    sel = load(*B200)
    d = sel.select(quant="fp8_tensor_dynamic", act_scale="group_128", **MOE)
    assert _rejected_by(d, "cutlass", "act_scale") and _rejected_by(d, "triton", "act_scale")
    assert d.selected == "marlin"
    plain = sel.select(quant="fp8_tensor_dynamic", **MOE)  # fp8.py Fp8MoEMethod: per tensor
    assert not _rejected_by(plain, "cutlass", "act_scale")


def test_per_token_linear_is_never_flashinfer_or_torch_per_tensor():
    """quantization/fp8.py 274-280: per-token dynamic activations; FlashInfer's and torch's
    per-tensor kernels require per-tensor scales (kernels/linear/__init__.py 720)."""
    sel = load(*B200)
    d = sel.select(op="linear", quant="fp8_tensor_dynamic", act_scale="token",
                   hidden_size=4096, intermediate_size=4096)
    assert _rejected_by(d, "flashinfer_cutlass", "act_scale")
    assert _rejected_by(d, "torch_per_tensor", "act_scale")
    assert d.selected not in ("flashinfer_cutlass", "torch_per_tensor")
    plain = sel.select(op="linear", quant="fp8_tensor_dynamic", hidden_size=4096,
                       intermediate_size=4096)
    assert not _rejected_by(plain, "flashinfer_cutlass", "act_scale")


def test_trtllm_per_tensor_fp8_takes_its_listed_routing_methods_only():
    """experts/trtllm_fp8_moe.py 398-434 (_supports_routing_method)."""
    sel = load(*B200)
    for routing, refused in (("default", True), ("custom", True), ("renormalize_naive", False),
                             ("llama4", False), ("deepseek_v3", False)):
        d = sel.select(quant="fp8_tensor", routing=routing, **MOE)
        assert _rejected_by(d, "flashinfer_trtllm", "routing") is refused, routing


def test_cutlass_mxfp4_w4a4_is_not_offered_under_deepep_low_latency():
    sel = load(*B200)
    d = sel.select(quant="mxfp4_w4a4", ep_size=8, all2all="deepep_low_latency", **MOE)
    assert _rejected_by(d, "cutlass", "parallel")


def test_vllm_cutlass_fp8_experts_only_for_compressed_tensors():
    """oracle/fp8.py 463-473: allow_vllm_cutlass is True for CompressedTensorsW8A8Fp8MoEMethod
    only; an fp8 or ModelOpt checkpoint's experts never run vLLM's CUTLASS FP8."""
    sel = load(*["platform=h200", "stack=vllm_0_32", "engine=vllm"])
    for method, refused in (("fp8", True), ("modelopt", True), ("compressed-tensors", False),
                            (None, False)):
        d = sel.select(quant="fp8_tensor", quant_method=method, **MOE)
        assert _rejected_by(d, "cutlass", "quant_method") is refused, method


def test_trtllm_per_tensor_fp8_refuses_a_sequence_parallel_moe():
    """trtllm_fp8_moe.py 189-196: the monolithic kernel refuses is_sequence_parallel (EP over
    TP 2 x DP 2); EP over DP alone (TP 1) is not sequence parallel."""
    sel = load(*B200)
    seq = sel.select(quant="fp8_tensor", routing="renormalize", ep_size=4, dp_size=2, **MOE)
    assert _rejected_by(seq, "flashinfer_trtllm", "data_parallel")
    flat = sel.select(quant="fp8_tensor", routing="renormalize", ep_size=4, dp_size=4, **MOE)
    assert not _rejected_by(flat, "flashinfer_trtllm", "data_parallel")


def test_vllm_runs_mxfp8_experts_under_emulation_on_any_device_selector_does_not():
    """vLLM 0.32.0 fused_moe/oracle/mxfp8.py lines 72-77: EMULATION builds
    Mxfp8EmulationTritonExperts, whose _supports_current_device is True
    (experts/mxfp8_emulation_moe.py lines 89-91): on a machine without a GPU vLLM's engine runs
    MXFP8 experts under the name emulation (conf/engine/vllm.yaml backends.moe.emulation
    implements), while selector's own emulation class (its entry_point) implements NVFP4 only."""
    cpu = load("platform=cpu", "stack=vllm_0_32", "engine=vllm")
    d = cpu.select(quant="mxfp8", **MOE)
    assert d.selected == "emulation" and d.engine.kernel == "Mxfp8EmulationTritonExperts"
    assert d.entry_point is None  # not selector's EmulationMoE
    # the NVFP4 emulation keeps its device rule (TritonExperts: a CUDA-alike or XPU device)
    assert _rejected_by(cpu.select(quant="nvfp4", **MOE), "emulation", "device")
    # TritonExperts' standard activation format: not under DeepEP low-latency
    ll = cpu.select(quant="mxfp8", ep_size=8, all2all="deepep_low_latency", **MOE)
    assert _rejected_by(ll, "emulation", "parallel") and ll.selected is None
    # without vLLM, selector's reference is the emulation backend, and it runs no MXFP8
    alone = load("platform=cpu", "stack=vllm_0_32").select(quant="mxfp8", **MOE)
    assert _status(alone, "emulation").status == "not_applicable" and alone.selected is None
    nv = load("platform=cpu", "stack=vllm_0_32").select(quant="nvfp4", **MOE)
    assert nv.selected == "emulation" and nv.entry_point.endswith(":EmulationMoE")
    # on a GPU another backend comes first in vLLM's order (emulation is its last resort)
    assert load(*B200).select(quant="mxfp8", **MOE).selected == "flashinfer_trtllm"


def test_no_non_gated_mxfp8_emulation_without_a_gpu():
    """vLLM 0.32.0 fused_moe/config.py lines 1399-1404: FusedMoEConfig refuses is_act_and_mul=False
    off CUDA, ROCm and XPU, before any MXFP8 backend is asked; on a GPU the rule passes."""
    relu2 = dict(MOE, activation="relu2", act_and_mul=False)
    cpu = load("platform=cpu", "stack=vllm_0_32", "engine=vllm").select(quant="mxfp8", **relu2)
    assert _rejected_by(cpu, "emulation", "device") and cpu.selected is None
    h100 = load("platform=h100", "stack=vllm_0_32", "engine=vllm").select(quant="mxfp8", **relu2)
    assert not _rejected_by(h100, "emulation", "device")
