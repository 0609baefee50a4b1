"""engine=sglang plans by SGLang 0.5.23's own rules (issue 45): its block-FP8 divisibility (no
block refinement), the runners its quant methods run whatever is asked, its automatic runner beside
selector's with a flag only where it changes it, sglang-kernel as a start condition, SGLang's
wording and sources. Each expectation restates the SGLang file and line it cites; tests/sglang
runs SGLang's own code (tools/sglang_env.sh)."""
from __future__ import annotations

import json

import pytest
from helpers import REPO, load, run_main

from selector.core.errors import SelectorError
from selector.engines.sglang import auto_linear, auto_moe

CORPUS = REPO / "tests" / "checkpoint_corpus"
SGL = ("engine=sglang", "stack=sglang_0_5_23")


def qwen3_235b_fp8(root):
    """Qwen3-235B-A22B-FP8's config.json: moe_intermediate_size 1536, Fp8Config 128x128 blocks."""
    cfg = json.loads((CORPUS / "qwen3-30b-a3b-fp8" / "config.json").read_text())
    cfg.update(hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
               num_hidden_layers=94, num_attention_heads=64)
    cfg["quantization_config"]["modules_to_not_convert"] = ["lm_head"] + [
        f"model.layers.{i}.mlp.gate" for i in range(94)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg))
    return root


def test_block_fp8_experts_sglang_refuses_at_tp8_without_ep(tmp_path):
    """1536 / 8 = 192, not a multiple of block_n 128: SGLang's Fp8MoEMethod raises ValueError
    (fp8.py 1588; no block refinement), where vLLM refines the block to 64x64."""
    model = qwen3_235b_fp8(tmp_path / "q235")
    lp = load(*SGL, "platform=h200", "parallel.tp=8").launch_plan(model)
    problems = [p for g in lp.groups for p in g.problems]
    assert not (lp.ok and lp.plan.ok)
    assert any("192" in p and "SGLang refuses" in p and "fp8.py:1588" in p for p in problems)
    rc, out, _ = run_main(["explain", "--model", str(model), *SGL, "platform=h200",
                           "parallel.tp=8"])
    assert rc == 1 and "command: none" in out
    ok = load(*SGL, "platform=h200", "parallel.tp=8", "parallel.ep=8").launch_plan(model)
    assert ok.ok and ok.plan.ok  # MoE TP 1: 1536 per GPU
    vllm = load("engine=vllm", "stack=vllm_0_33", "platform=h200", "parallel.tp=8")
    assert not any("SGLang" in p for g in vllm.launch_plan(model).groups for p in g.problems)


@pytest.mark.parametrize("tp", [1, 4, 8])
@pytest.mark.parametrize("ep", [False, True])
def test_no_sglang_plan_exits_0_with_a_command_sglang_refuses(tp, ep):
    """The corpus' block-FP8 checkpoints at TP 1/4/8 with and without EP: a plan with a command
    has every per-GPU intermediate size a multiple of 128 (SGLang's check)."""
    for model in [CORPUS / n for n in ("qwen3-30b-a3b-fp8", "qwen3-30b-a3b-ct-fp8-block",
                                       "deepseek-v3-fp8")] + sorted(
            p for p in (REPO / "examples").iterdir() if (p / "config.json").is_file()):
        over = [*SGL, "platform=h200", f"parallel.tp={tp}"] + ([f"parallel.ep={tp}"] if ep else [])
        name = model.name
        try:
            lp = load(*over).launch_plan(model)
        except SelectorError as e:  # a dense model: expert parallelism is refused
            assert ep and "no MoE layer" in str(e), (name, tp, ep, e)
            continue
        refused = [p for g in lp.groups for p in g.problems if "SGLang refuses" in p]
        assert not (lp.ok and lp.plan.ok and refused), (name, tp, ep, refused)
        for g in lp.groups:
            if g.op == "moe" and g.scheme == "fp8_block" and lp.ok and lp.plan.ok:
                inter = g.per_rank["intermediate_size"]
                assert inter % 128 == 0, (name, tp, ep, inter)


def test_sglang_plan_has_sglang_read_order_and_refusals():
    rc, out, _ = run_main(["explain", "--model", str(CORPUS / "qwen3-30b-a3b-fp8"), *SGL,
                           "platform=h200", "parallel.tp=3"])
    read = next(line for line in out.splitlines() if line.startswith("read: "))
    assert "SGLang's order" in read and "vLLM" not in read
    refusals = [line for line in out.splitlines() if "refuses" in line]
    assert refusals and not any("vLLM" in line for line in refusals)
    flat = " ".join(out.split())
    assert "SGLang refuses to start (SGLang 0.5.23 srt/distributed/utils.py:68-78" in flat


def test_without_sglang_kernel_sglang_does_not_start():
    model = CORPUS / "qwen3-30b-a3b-fp4"
    lp = load(*SGL, "platform=b200", "platform.packages.sglang-kernel=null").launch_plan(model)
    assert not lp.ok and "without sglang-kernel" in lp.problems[0]
    assert "compressed_tensors_w8a8_int8.py:30" in lp.problems[0]
    rc, out, _ = run_main(["explain", "--model", str(model), "engine=sglang", "platform=b200"])
    assert "!! SGLang does not start without sglang-kernel" in out and "command: none" in out


def test_compressed_tensors_nvfp4_experts_run_flashinfer_cutlass_whatever_is_asked():
    """compressed_tensors.py 959-975: CompressedTensorsW4A4Nvfp4MoE; the plan names it (no
    flag), and refuses the layer where FlashInfer's CUTLASS MoE cannot run."""
    model = CORPUS / "qwen3-30b-a3b-ct-w4a4"
    lp = load(*SGL, "platform=b200", "policy.moe_backend=flashinfer_trtllm").launch_plan(model)
    g = next(g for g in lp.groups if g.kind == "routed experts")
    assert g.backend == "flashinfer_cutlass" and "--moe-runner-backend" not in lp.flags
    lp = load(*SGL, "platform=b200", "platform.packages.flashinfer-python=null").launch_plan(model)
    g = next(g for g in lp.groups if g.kind == "routed experts")
    assert not lp.ok and any("whatever is asked" in p for p in g.problems)


def test_modelopt_fp8_experts_run_triton_or_the_trtllm_moe_for_a_declared_router():
    """ModelOptFp8MoEMethod.create_moe_runner (modelopt_quant.py 1343-1367) keeps a Triton
    runner, and runs FlashInfer's TRT-LLM per-tensor FP8 MoE for flashinfer_trtllm where the
    model declares its routing method (Qwen3-MoE: qwen3_moe.py 273, Renormalize)."""
    model = CORPUS / "qwen3-30b-a3b-modelopt-fp8"
    lp = load(*SGL, "platform=h200").launch_plan(model)
    g = next(g for g in lp.groups if g.kind == "routed experts")
    assert g.backend == "triton" and "--moe-runner-backend" not in lp.flags
    lp = load(*SGL, "platform=b200").launch_plan(model)
    g = next(g for g in lp.groups if g.kind == "routed experts")
    assert g.engine_backend == "flashinfer_trtllm" and not g.fixed and lp.runs
    assert lp.flags[-2:] == ("--moe-runner-backend", "flashinfer_trtllm")  # auto: Triton


def test_modelopt_fp8_trtllm_request_refused_off_sm100_is_refused():
    """SGLang builds the TRT-LLM per-tensor path for the request on SM 11.0 too (no device
    check): selector refuses it there and prints no command."""
    model = CORPUS / "qwen3-30b-a3b-modelopt-fp8"
    over = [*SGL, "platform=b300", "platform.capability=11.0",
            "policy.moe_backend=flashinfer_trtllm"]
    lp = load(*over).launch_plan(model)
    assert not lp.runs
    rc, out, _ = run_main(["explain", "--model", str(model), *over])
    assert rc == 1 and "command: none" in out


@pytest.mark.parametrize("asked, extra", [
    ("deep_gemm", ("platform.packages.sgl-deep-gemm=null",)),  # refused: no sgl-deep-gemm
    ("deep_gemm", ("platform.packages.sgl-deep-gemm=null", "platform.capability=11.0")),
    ("deep_gemm", ("platform.packages.sgl-deep-gemm=null", "platform.capability=10.3")),
])
def test_modelopt_fp8_experts_refused_request_prints_what_sglang_runs(asked, extra):
    """ModelOptFp8MoEMethod.create_moe_runner (modelopt_quant.py 1343-1367) builds Triton for
    any runner but flashinfer_cutlass and (a declared router) flashinfer_trtllm: another request
    selector refuses changes nothing SGLang runs, so the plan prints SGLang's command (no flag
    for the ignored request) and says why."""
    model = CORPUS / "qwen3-30b-a3b-modelopt-fp8"
    over = [*SGL, "platform=h200", f"policy.moe_backend={asked}", *extra]
    lp = load(*over).launch_plan(model)
    g = next(g for g in lp.groups if g.kind == "routed experts")
    assert lp.runs and g.backend == "triton" and g.fixed
    assert asked not in lp.flags and "--moe-runner-backend" not in lp.flags
    rc, out, _ = run_main(["explain", "--model", str(model), *over])
    flat = " ".join(out.split())
    assert rc == 0 and "command: python -m sglang.launch_server" in out
    assert f"policy.moe_backend={asked} does not change what runs" in flat
    assert "modelopt_quant.py:1343-1367" in flat


@pytest.mark.parametrize("name, platform, extra, want", [
    # ModelOptFp8LinearMethod (modelopt_quant.py 546-690): FlashInfer's bmm_fp8 on SM 9.x, 10.x
    # and 12.x with FlashInfer (fp8_utils.py 528-531), else CUTLASS on channelwise scales
    ("llama-3.1-8b-modelopt-fp8", "h200", (), "flashinfer_bmm_fp8"),
    ("llama-3.1-8b-modelopt-fp8", "b200", (), "flashinfer_bmm_fp8"),
    ("llama-3.1-8b-modelopt-fp8", "rtx_pro_6000", (), "flashinfer_bmm_fp8"),
    ("llama-3.1-8b-modelopt-fp8", "h200", ("platform.packages.flashinfer-python=null",),
     "cutlass"),
    ("llama-3.1-8b-modelopt-fp8", "rtx_pro_6000", ("platform.packages.flashinfer-python=null",),
     "cutlass"),
    ("llama-3.1-8b-modelopt-fp8", "h200", ("platform.capability=8.9",), "cutlass"),
    # CompressedTensorsW8A8Fp8 TENSOR strategy (compressed_tensors_w8a8_fp8.py 147-164): one
    # max weight scale, torch._scaled_mm on every SM
    ("llama-3.1-8b-ct-fp8-static", "h200", (), "torch_per_tensor"),
    ("llama-3.1-8b-ct-fp8-static", "b200", (), "torch_per_tensor"),
    # Fp8LinearMethod: channelwise CUTLASS off SM 12.x, per-tensor torch._scaled_mm on it
    ("llama-3.1-8b-fp8-static", "h200", (), "cutlass"),
    ("llama-3.1-8b-fp8-static", "rtx_pro_6000", (), "torch_per_tensor"),
])
def test_per_tensor_fp8_linear_runs_its_quant_methods_gemm(name, platform, extra, want):
    """A per-tensor FP8 linear layer's GEMM is its SGLang quant method's (no flag chooses it):
    the plan names that GEMM and passes no --fp8-gemm-backend."""
    lp = load(*SGL, f"platform={platform}", *extra).launch_plan(CORPUS / name)
    linear = [g for g in lp.groups if g.op == "linear" and g.scheme == "fp8_tensor"]
    assert linear and lp.ok and lp.plan.ok
    assert {g.backend for g in linear} == {want}, (name, platform, extra)
    assert "--fp8-gemm-backend" not in lp.flags


def test_deepseek_fused_qkv_a_proj_is_one_partition_in_sglang():
    """SGLang builds DeepSeek's fused_qkv_a_proj as one ReplicatedLinear (deepseek_v2.py
    2070-2076: one output partition of 2112, not vLLM's 1536 + 576), which
    validate_block_quant_shapes (fp8.py 593-609) does not check: DeepSeek-V3 FP8 plans."""
    for tp in (1, 4, 8):
        lp = load(*SGL, "platform=h200", f"parallel.tp={tp}").launch_plan(CORPUS / "deepseek-v3-fp8")
        assert lp.ok and lp.plan.ok, (tp, [p for g in lp.groups for p in g.problems])
        assert not any("576" in p for g in lp.groups for p in g.problems)


def test_deep_gemm_is_never_printed_for_compressed_tensors_fp8_experts():
    """compressed_tensors_w8a8_fp8_moe.py 341-365: runners for aiter, triton and
    flashinfer_trtllm only; Fp8Config's Fp8MoEMethod takes deep_gemm."""
    ct = load(*SGL, "platform=h200", "policy.moe_backend=deep_gemm").launch_plan(
        CORPUS / "qwen3-30b-a3b-ct-fp8-block")
    assert "deep_gemm" not in ct.flags and not (ct.ok and ct.plan.ok)
    g = next(g for g in ct.groups if g.kind == "routed experts")
    assert "a runner that does not" in str(g.decision) and "[quant_method]" in str(g.decision)
    fp8 = load(*SGL, "platform=h200", "policy.moe_backend=deep_gemm").launch_plan(
        CORPUS / "qwen3-30b-a3b-fp8")
    g = next(g for g in fp8.groups if g.kind == "routed experts")
    assert g.backend == "deep_gemm"


def test_per_tensor_fp8_experts_run_deep_gemm_when_asked():
    """fp8.py 3251-3275: Fp8MoEMethod runs per-tensor FP8 experts on DeepGEMM, its scales
    repeated into 128x128 blocks; selector names it when asked, Triton otherwise."""
    model = CORPUS / "qwen3-30b-a3b-fp8-tensor-dynamic"
    lp = load(*SGL, "platform=h200", "policy.moe_backend=deep_gemm").launch_plan(model)
    g = next(g for g in lp.groups if g.kind == "routed experts")
    assert lp.ok and g.backend == "deep_gemm" and "deep_gemm" in lp.flags
    g = next(g for g in load(*SGL, "platform=h200").launch_plan(model).groups
             if g.kind == "routed experts")
    assert g.backend == "triton"


def test_explicit_marlin_is_never_printed_for_fp8_experts():
    """fp8.py 2985-2999, 3227: Fp8MoEMethod builds no marlin runner."""
    d = load(*SGL, "platform=h200", "layer=qwen_moe", "layer.quant=fp8_block",
             "policy.strict=false", "policy.moe_backend=marlin").default()
    assert d.selected != "marlin"
    c = d.candidate("marlin")
    assert c.status in ("rejected", "not_applicable")
    assert any("no marlin runner" in str(r.message) for r in c.reasons)


@pytest.mark.parametrize("platform,name,kernel", [
    ("rtx_pro_6000", "flashinfer_mxfp4", "FlashInfer cutlass_fused_moe (MXFP8 x MXFP4"),
    ("b200", "flashinfer_mxfp4", None)])
def test_gpt_oss_mxfp4_is_sglangs_own_choice_and_passes_no_flag(platform, name, kernel):
    """gpt_oss.py 64-75: flashinfer_mxfp4 on SM 10.x and 12.x; on SM 12.x it is FlashInfer's
    CUTLASS MXFP8 x MXFP4 MoE (mxfp4.py 420-441)."""
    lp = load(*SGL, f"platform={platform}").launch_plan(CORPUS / "gpt-oss-120b-mxfp4")
    (g, auto, key, passed), = lp.automatic
    assert (g.engine_backend, auto.names, passed) == (name, (name,), False)
    assert "--moe-runner-backend" not in lp.flags
    if kernel:
        assert g.kernels(lp.launch)[0].startswith(kernel)


def test_a_flag_is_printed_only_where_it_changes_sglangs_choice():
    """Block FP8 on SM 12.0: SGLang's auto FP8 GEMM is cutlass (fp8_utils.py 1207-1217) and its
    FP8 MoE runner triton; selector's other choices are passed, saying so; with
    policy.engine_default=true none is."""
    model = CORPUS / "qwen3-30b-a3b-fp8"
    lp = load(*SGL, "platform=rtx_pro_6000").launch_plan(model)
    for g, auto, key, passed in lp.automatic:
        assert passed == (g.engine_backend not in auto.names), (g.kind, auto, g.engine_backend)
        assert (key in lp.flags) == passed
    rc, out, _ = run_main(["explain", "--model", str(model), *SGL, "platform=rtx_pro_6000"])
    assert "engine's own choice for routed experts (fp8_block): SGLang 0.5.23 alone runs " \
           "triton" in " ".join(out.split())
    lp = load(*SGL, "platform=rtx_pro_6000", "policy.engine_default=true").launch_plan(model)
    assert not any(f.startswith("--") and f.endswith("-backend") for f in lp.flags)
    assert lp.command() == f"python -m sglang.launch_server --model-path {model}"


@pytest.mark.parametrize("sm,arch,quantization,scheme,ep,want", [
    (100, "Qwen3MoeForCausalLM", "fp8", "fp8_block", 1, "flashinfer_trtllm"),
    (90, "Qwen3MoeForCausalLM", "fp8", "fp8_block", 1, "triton"),
    (100, "Qwen3MoeForCausalLM", "modelopt_fp8", "fp8_tensor", 1, "triton"),
    (100, "DeepseekV3ForCausalLM", "modelopt_fp4", "nvfp4", 4, "flashinfer_trtllm"),
    (120, "DeepseekV3ForCausalLM", "modelopt_fp4", "nvfp4", 1, "flashinfer_cutlass"),
    (90, "LlamaForCausalLM", "modelopt_fp4", "nvfp4", 1, "marlin"),
    (120, "GptOssForCausalLM", "mxfp4", "mxfp4", 1, "flashinfer_mxfp4"),
    (121, "GptOssForCausalLM", "mxfp4", "mxfp4", 1, "flashinfer_mxfp4"),
    (90, "GptOssForCausalLM", "mxfp4", "mxfp4", 1, "triton_kernel"),
    (90, "GptOssForCausalLM", "mxfp4", "mxfp4", 2, "triton"),
    (100, "Qwen3MoeForCausalLM", "compressed-tensors", "nvfp4", 1, "flashinfer_cutlass"),
    (90, "Qwen3MoeForCausalLM", "compressed-tensors", "nvfp4", 1, "marlin")])
def test_sglang_auto_moe_runner(sm, arch, quantization, scheme, ep, want):
    assert auto_moe(sm, arch, quantization, scheme, ep)[0] == want


def test_the_printed_command_passes_no_quantization():
    """overrides.py 1513-1521 picks flashinfer_cutlass for modelopt_fp4 on SM 11.x/12.x from
    `--quantization` only; the printed command passes none, so SGLang's own runner there is
    ModelOptNvFp4FusedMoEMethod's auto (flashinfer_trtllm, SM 10.x only) and the plan passes
    --moe-runner-backend flashinfer_cutlass."""
    args = (120, "Qwen3MoeForCausalLM", "modelopt_fp4", "nvfp4", 1)
    assert auto_moe(*args)[0] == "flashinfer_cutlass"
    assert auto_moe(*args, passed=False)[0] == "flashinfer_trtllm"
    lp = load(*SGL, "platform=rtx_pro_6000").launch_plan(CORPUS / "qwen3-30b-a3b-fp4")
    assert lp.flags[-2:] == ("--moe-runner-backend", "flashinfer_cutlass")


@pytest.mark.parametrize("sm,scheme,packages,want", [
    (120, "fp8_block", {"sgl-deep-gemm": "x"}, "cutlass"),
    (110, "fp8_block", {"sgl-deep-gemm": "x"}, "triton"),
    (90, "fp8_block", {"sgl-deep-gemm": "x"}, "deep_gemm"),
    (100, "fp8_block", {"flashinfer-python": "x"}, "flashinfer_trtllm"),
    (90, "fp8_block", {}, "triton"),
    (100, "nvfp4", {}, "flashinfer_cutedsl"),
    (90, "nvfp4", {}, "marlin"),
    (120, "nvfp4", {}, "flashinfer_cutlass"),
    # resolve_mxfp8_dense_gemm_backend (fp8_utils.py 834-889)
    (100, "mxfp8", {"flashinfer-python": "x", "sgl-deep-gemm": "x"}, "flashinfer_cutedsl"),
    (103, "mxfp8", {"flashinfer-python": "x"}, "flashinfer_cutedsl"),
    (120, "mxfp8", {"flashinfer-python": "x"}, "flashinfer_cutlass"),
    (110, "mxfp8", {"flashinfer-python": "x"}, "flashinfer_cutlass"),
    (100, "mxfp8", {"sgl-deep-gemm": "x"}, "deep_gemm"),
    (100, "mxfp8", {}, None)])
def test_sglang_auto_gemms(sm, scheme, packages, want):
    got = auto_linear(sm, scheme, packages)
    assert (got and got[0]) == want


def test_a_plan_names_the_missing_cuda_key():
    """A hardware preset carries no CUDA: where a backend is rejected for it, the plan names
    platform.cuda (and the stack= presets that carry one) instead of only counting."""
    rc, out, _ = run_main(["explain", "--model", str(CORPUS / "qwen3-30b-a3b-fp4"),
                           "engine=sglang", "platform=b200",
                           "platform.packages.sglang-kernel=0.4.10", "policy.exclude=[emulation]"])
    flat = " ".join(out.split())
    assert "platform.cuda is not set (flashinfer_cutlass needs a CUDA version" in flat
    rc, out, _ = run_main(["explain", "--model", str(CORPUS / "qwen3-30b-a3b-fp4"), *SGL,
                           "platform=b200"])
    assert "platform.cuda is not set" not in out


# what vLLM says, never in an SGLang plan (issue 45): a refusal, the read order, vLLM's classes
VLLM_WORDS = ("vLLM refuses", "vLLM would refuse", "vLLM's order", "vLLM's Fp8Config",
              "vLLM's MXFP4 config", "vLLM builds", "vLLM gpt_oss.py passes")


@pytest.mark.parametrize("tp,ep", [(1, False), (8, False), (8, True)])
def test_no_vllm_wording_in_any_sglang_plan_of_the_corpus(tp, ep):
    """Every checkpoint of the corpus, planned for SGLang (text and JSON): what vLLM refuses
    or builds is said in SGLang's words with SGLang's source, or as selector's own rule."""
    over = [*SGL, "platform=b200", f"parallel.tp={tp}"] + ([f"parallel.ep={tp}"] if ep else [])
    sel = load(*over)
    seen = []
    for model in sorted(p for p in CORPUS.iterdir() if (p / "config.json").exists()):
        try:
            lp = sel.launch_plan(model)
        except Exception as exc:  # a checkpoint the reader refuses as bad input
            text = str(exc)
        else:
            text = str(lp) + json.dumps(lp.to_dict()) + json.dumps(lp.plan.to_dict())
        seen += [f"{model.name}: {w}" for w in VLLM_WORDS if w in text]
    assert not seen, "\n".join(seen[:20])


def test_the_gpt_oss_plan_cites_sglang_for_what_it_leaves_unquantized():
    lp = load(*SGL, "platform=b200").launch_plan(CORPUS / "gpt-oss-120b-mxfp4")
    text = str(lp.plan)
    assert "SGLang 0.5.23 srt/layers/quantization/mxfp4.py:356-372" in " ".join(text.split())
    assert "SGLang 0.5.23 srt/models/gpt_oss.py:768-774" in " ".join(text.split())
    vllm = str(load("engine=vllm", "stack=vllm_0_33", "platform=b200").launch_plan(
        CORPUS / "gpt-oss-120b-mxfp4").plan)
    assert "vLLM's MXFP4 config leaves linear layers unquantized" in " ".join(vllm.split())
