"""engine=trtllm (issue 31 item 3): TensorRT-LLM as a config-file engine. Its backend choice is a
key of the extra_llm_api_options YAML (`moe_config.backend`, `nvfp4_gemm_config`), its AUTO value
resolves per model, SM and quant algorithm (`ModelConfig.resolve_moe_backend`), and the launch
plan prints that YAML and the `trtllm-serve` command. TensorRT-LLM cannot be installed here (the
PyPI package is a stub): each row below restates a rule of the TensorRT-LLM file it cites, and
the tests hold selector's mapping to it."""
from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers import REPO, load, refused, run_main
from packaging.version import Version

from selector.core.schema import QUANTS
from selector.engines.trtllm import QUANT_ALGO, resolve_moe_backend

CORPUS = REPO / "tests" / "checkpoint_corpus"
CUDA = ("platform.cuda=13.0",)
TRT = ("engine=trtllm",)
# TensorRT-LLM tensorrt_llm/llmapi/llm_args.py MoeConfig.backend (the release names; newer main
# adds DENSEGEMM, MARLIN, MEGAMOE_DEEPGEMM; WIDEEP is deprecated, TensorRT-LLM PR #17119)
MOE_BACKENDS = {"AUTO", "CUTLASS", "TRTLLM", "CUTEDSL", "DEEPGEMM", "TRITON", "VANILLA", "WIDEEP",
                "DENSEGEMM", "MARLIN", "MEGAMOE_DEEPGEMM", "MEGAMOE_CUTEDSL"}
# nvfp4_gemm_config.allowed_backends (llm_args.py; _torch/custom_ops/torch_custom_ops.py)
NVFP4_GEMMS = {"cutlass", "cublaslt", "cuda_core", "cutedsl", "marlin"}
# block-FP8 linear: no key passed; FP8BlockScalesLinearMethod.apply (_torch/modules/linear.py)
# runs DeepGEMM's fp8_swap_ab_gemm on SM 100f, else torch.ops.trtllm.fp8_block_scaling_gemm
FP8_BLOCK_GEMMS = {"deep_gemm", "fp8_block_scaling_gemm"}

# ModelConfig.resolve_moe_backend (TensorRT-LLM _torch/model_config.py):
# (SM, QuantAlgo, architecture) -> what AUTO becomes
AUTO = [
    (100, "NVFP4", "DeepseekV4ForCausalLM", "TRTLLM"),
    (110, "W4A16_MXFP4", "DeepseekV4ForCausalLM", "TRTLLM"),
    (90, "FP8_BLOCK_SCALES", "DeepseekV4ForCausalLM", "CUTLASS"),
    (120, "NVFP4", "DeepseekV4ForCausalLM", "CUTLASS"),
    (100, "W4A8_MXFP4_MXFP8", "GptOssForCausalLM", "TRTLLM"),
    (103, "W4A16_MXFP4", "GptOssForCausalLM", "TRTLLM"),
    (90, "W4A16_MXFP4", "GptOssForCausalLM", "TRITON"),
    (120, "W4A16_MXFP4", "GptOssForCausalLM", "CUTLASS"),
    (89, "W4A16_MXFP4", "GptOssForCausalLM", "CUTLASS"),
    (100, "FP8_BLOCK_SCALES", "DeepseekV3ForCausalLM", "TRTLLM"),
    (103, "FP8_BLOCK_SCALES", "Qwen3MoeForCausalLM", "TRTLLM"),
    (90, "FP8_BLOCK_SCALES", "DeepseekV3ForCausalLM", "CUTLASS"),
    (120, "FP8_BLOCK_SCALES", "Qwen3MoeForCausalLM", "CUTLASS"),
    (100, "NVFP4", "DeepseekV3ForCausalLM", "CUTLASS"),
    (100, "FP8", "Qwen3MoeForCausalLM", "CUTLASS"),
]


@pytest.mark.parametrize("sm,algo,arch,want", AUTO)
def test_auto_resolution_follows_resolve_moe_backend(sm, algo, arch, want):
    assert resolve_moe_backend(sm, algo, arch) == want


@pytest.mark.parametrize("version,want", [("1.2.0", "CUTLASS"), ("1.2.1", "CUTLASS"),
                                          ("1.3.0rc24", "TRTLLM"), (None, "TRTLLM")])
def test_block_fp8_auto_rule_is_main_only(version, want):
    """resolve_moe_backend's FP8_BLOCK_SCALES-on-SM-100f rule came with TensorRT-LLM PR #14282
    (merged 2026-05-19), after the newest 1.2 release (1.2.1, April 2026): a 1.2 stack's AUTO runs
    CUTLASS there, so the plan passes selector's TRTLLM and says it changes AUTO's choice."""
    v = Version(version) if version else None
    assert resolve_moe_backend(100, "FP8_BLOCK_SCALES", "Qwen3MoeForCausalLM", v) == want
    assert resolve_moe_backend(90, "FP8_BLOCK_SCALES", "Qwen3MoeForCausalLM", v) == "CUTLASS"
    stack = "stack=trtllm_1_2" if version == "1.2.0" else "stack=trtllm_main"
    if version in ("1.2.0", "1.3.0rc24"):
        lp = load(*TRT, "platform=b200", stack).launch_plan(
            str(REPO / "examples" / "qwen3-30b-a3b-fp8"))
        (g, auto, key, passed), = [r for r in lp.automatic if r[0].op == "moe"]
        assert (auto.names, g.engine_backend, passed) == ((want,), "TRTLLM", want != "TRTLLM")
        assert dict(lp.config).get("moe_config.backend") == ("TRTLLM" if passed else None)


def test_engine_file_names_only_trtllm_values_and_cites_trtllm_sources():
    """Every backend name the engine file gives is a value of the config key its choice sets,
    every outside entry too, and every entry cites a TensorRT-LLM source file."""
    conf = yaml.safe_load((REPO / "conf" / "engine" / "trtllm.yaml").read_text())
    cited = re.compile(r"TensorRT-LLM ((1\.2 )?(tensorrt_llm/|_torch/|cpp/)[\w/]+\.(py|cpp)|PR #\d+)")
    for op, entries in conf["backends"].items():
        for backend, e in entries.items():
            assert e["name"] in (MOE_BACKENDS if op == "moe" else NVFP4_GEMMS | FP8_BLOCK_GEMMS), \
                (op, backend, e["name"])
            assert cited.search(e["source"]), (op, backend)
            for r in e.get("rules", []):
                assert cited.search(r["source"]), (op, backend, r)
    assert set(conf["outside"]) <= MOE_BACKENDS | NVFP4_GEMMS
    assert set(QUANT_ALGO) <= set(QUANTS)


# (layer overrides, platform, backend, engine name, config key and value)
LAYERS = [
    (("layer=qwen_moe",), "b200", "flashinfer_trtllm", "TRTLLM",
     {"moe_config.backend": "TRTLLM"}),
    (("layer=qwen_moe", "layer.quant=fp8_block"), "h100", "flashinfer_cutlass", "CUTLASS",
     {"moe_config.backend": "CUTLASS"}),
    (("layer=qwen_moe", "layer.quant=fp8_block"), "b200", "flashinfer_trtllm", "TRTLLM",
     {"moe_config.backend": "TRTLLM"}),
    (("layer=gpt_oss_moe", "layer.quant=mxfp4"), "b200", "flashinfer_trtllm", "TRTLLM",
     {"moe_config.backend": "TRTLLM"}),
    (("layer=gpt_oss_moe", "layer.quant=mxfp4"), "h100", "triton_kernels", "TRITON",
     {"moe_config.backend": "TRITON"}),
    (("layer=dense_linear",), "b200", "flashinfer_cutlass", "cutlass",
     {"nvfp4_gemm_config.allowed_backends": ["cutlass"]}),
    (("layer=dense_linear", "layer.quant=fp8_block"), "b200", "deep_gemm", "deep_gemm", {}),
]


@pytest.mark.parametrize("over,platform,backend,name,config", LAYERS)
def test_nvfp4_fp8_mxfp4_layers_answer_with_trtllm_names_and_keys(over, platform, backend, name,
                                                                  config):
    d = load(*TRT, f"platform={platform}", *CUDA, *over).default()
    assert d.selected == backend, d.summary()
    assert d.engine.backend == name and d.engine.config == config
    assert d.engine.flags == ()  # a config-file engine takes no flag


def test_a_backend_trtllm_does_not_name_is_not_applicable_once():
    d = load(*TRT, "platform=rtx_pro_6000", *CUDA, "layer=qwen_moe").default()
    marlin = d.candidate("marlin")
    assert marlin.status == "not_applicable"
    assert "names no marlin backend" in str(marlin.reasons[0].message)


def test_explain_model_prints_the_yaml_and_trtllm_serve():
    model = CORPUS / "qwen3-30b-a3b-fp4"
    rc, out, err = run_main(["explain", "--model", str(model), *TRT, "platform=b200", *CUDA,
                             "parallel.tp=4", "parallel.ep=2"])
    assert rc in (0, 1) and "Traceback" not in err, err
    assert "extra_llm_api_options.yaml (the config file the command reads):" in out
    assert "  moe_config:\n    backend: TRTLLM" in out
    assert (f"command: trtllm-serve {model} --backend pytorch --tp_size 4 --ep_size 2 "
            "--extra_llm_api_options extra_llm_api_options.yaml") in out
    # NVFP4 on SM 100: AUTO runs CUTLASS, so the TRTLLM key is passed, saying it changes AUTO
    flat = " ".join(out.split())  # the plan's lines are wrapped
    assert "alone runs CUTLASS (moe_config.backend AUTO on SM 100" in flat
    assert "moe_config.backend=TRTLLM passed: it changes that choice" in flat
    assert "sglang" not in out.lower() and "vllm serve" not in out
    rc, out, _ = run_main(["explain", "--model", str(model), *TRT, "platform=b200", *CUDA,
                           "--format", "json"])
    launch = json.loads(out)["launch"]
    text = launch["files"]["extra_llm_api_options.yaml"]
    assert yaml.safe_load(text)["moe_config"] == {"backend": "TRTLLM"}
    assert launch["config"]["moe_config.backend"] == "TRTLLM"
    assert launch["command"].startswith("trtllm-serve ")


def test_gpt_oss_under_trtllm_on_hopper_and_blackwell():
    """gpt-oss: AUTO is TRITON on SM 90, TRTLLM on SM 100 and CUTLASS on SM 120, where
    TensorRT-LLM runs MXFP4 as W4A8_MXFP4_MXFP8 (get_mxfp4_quant_algo; the CUTLASS leaf
    TrtllmCutlassW4a8Mxfp4Mxfp8Impl): selector agrees, so the config file names no backend."""
    model = str(CORPUS / "gpt-oss-120b-mxfp4")
    for platform, want, kernel in (("h100", "TRITON", "TritonFusedMoE"),
                                   ("b200", "TRTLLM", "TRTLLMGenFusedMoE"),
                                   ("rtx_pro_6000", "CUTLASS", "TrtllmCutlassW4a8Mxfp4Mxfp8Impl")):
        lp = load(*TRT, f"platform={platform}", *CUDA).launch_plan(model)
        assert lp.ok and dict(lp.config) == {}, lp
        (g, auto, key, passed), = lp.automatic
        assert (g.engine_backend, auto.names, key, passed) == (
            want, (want,), "moe_config.backend", False)
        assert g.kernels(lp.launch) == (kernel,)
        if platform == "rtx_pro_6000":
            assert g.decision.engine.scheme == "mxfp4_w4a8"


def test_trtllm_has_no_data_parallel_size():
    refused(["explain", "--model", str(CORPUS / "qwen3-30b-a3b-fp4"), *TRT, "platform=b200",
             "parallel.dp=2"], "parallel.dp", "TensorRT-LLM")


@pytest.mark.parametrize("platform,backend,name,kernel", [
    ("h100", "flashinfer_blockscale_sm90", "fp8_block_scaling_gemm", "fp8_block_scaling_gemm_hopper"),
    ("rtx_pro_6000", "flashinfer_blockscale_sm90", "fp8_block_scaling_gemm",
     "fp8_block_scale_gemm_blackwell_geforce"),
    ("b200", "deep_gemm", "deep_gemm", "torch.ops.trtllm.fp8_swap_ab_gemm"),
    ("dgx_spark", None, None, None)])
def test_fp8_block_linear_runs_trtllm_fp8_block_scaling_gemm_off_sm100(platform, backend, name,
                                                                       kernel):
    """TensorRT-LLM runs block-FP8 linear layers with its fp8_block_scaling_gemm on SM 89/90/120
    (FP8BlockScalesLinearMethod.apply; thop/fp8BlockScalingGemm.cpp's SM switch), DeepGEMM on
    SM 100f, and raises on any other SM (SM 121: 'Unsupported SM version'). No key is passed."""
    d = load(*TRT, f"platform={platform}", "layer=dense_linear", "layer.quant=fp8_block",
             "layer.hidden_size=4096", "layer.intermediate_size=2048").default()
    assert d.selected == backend, d.summary()
    if backend is None:
        cand = d.candidate("flashinfer_blockscale_sm90")
        assert cand.status == "rejected" and "SM 89, 90 and 120" in str(cand.reasons[0].message)
        return
    assert d.engine.backend == name and d.engine.config == {} and d.engine.flags == ()
    assert d.engine.kernel.startswith(kernel)
    # TensorRT-LLM's own shape check, not FlashInfer's N % 64
    d = load(*TRT, f"platform={platform}", "layer=dense_linear", "layer.quant=fp8_block",
             "layer.hidden_size=4096", "layer.intermediate_size=2064").default()
    if backend == "flashinfer_blockscale_sm90":
        assert d.selected == backend, d.summary()
        d = load(*TRT, f"platform={platform}", "layer=dense_linear", "layer.quant=fp8_block",
                 "layer.hidden_size=4096", "layer.intermediate_size=2056").default()
        cand = d.candidate(backend)
        assert cand.status == "rejected" and "multiple of 16" in str(cand.reasons[0].message)


def test_flagship_deepseek_r1_nvfp4_on_b200_plans_without_a_cuda_key():
    """DeepSeek-R1 NVFP4 on B200 plans with a command with no stack given: TensorRT-LLM's own
    FP4 GEMM is not gated on vLLM's CUDA build check; the NVFP4 GEMM autotuner is not narrowed
    (nvfp4_gemm_config is not written) unless the user asks for a linear backend."""
    model = str(REPO / "examples" / "deepseek-r1-nvfp4")
    rc, out, err = run_main(["explain", "--model", model, *TRT, "platform=b200"])
    assert rc == 0 and "Traceback" not in err, out + err
    assert f"command: trtllm-serve {model} --backend pytorch" in out
    assert "nvfp4_gemm_config" not in out.split("extra_llm_api_options.yaml (the config")[1]
    assert "it would only narrow that choice to selector's cutlass" in " ".join(out.split())
    lp = load(*TRT, "platform=b200", "policy.linear_backend=flashinfer_cutlass").launch_plan(model)
    assert dict(lp.config)["nvfp4_gemm_config.allowed_backends"] == ["cutlass"]
    lp = load(*TRT, "platform=b200", "policy.engine_default=true").launch_plan(model)
    assert lp.ok and dict(lp.config) == {} and all(not p for *_, p in lp.automatic)
    assert lp.command().endswith("--backend pytorch")


@pytest.mark.parametrize("platform,kernel", [
    ("h100", "DeepgemmCudaHopperFp8BlockScalesImpl"),
    ("rtx_pro_6000", "TrtllmTritonFp8BlockScalesImpl"),
    ("dgx_spark", None)])
def test_block_fp8_under_cutlass_is_deepgemm_on_sm90_and_triton_on_sm120(platform, kernel):
    d = load(*TRT, f"platform={platform}", *CUDA, "layer=qwen_moe",
             "layer.quant=fp8_block").default()
    if kernel is None:  # SM 121: neither leaf's sm_support
        assert d.candidate("flashinfer_cutlass").status == "rejected"
        return
    assert d.selected == "flashinfer_cutlass" and d.engine.backend == "CUTLASS"
    assert d.engine.kernel.startswith(kernel)


@pytest.mark.parametrize("stack,label,cuda", [("trtllm_1_2", "TensorRT-LLM 1.2.0", "13.0"),
                                              ("trtllm_main", "TensorRT-LLM 1.3.0rc24", "13.2")])
def test_versioned_stacks_carry_the_cuda_of_their_build(stack, label, cuda):
    sel = load(*TRT, "platform=h100", f"stack={stack}")
    assert sel.run_config.engine.label == label
    assert str(sel.run_config.platform.cuda) == cuda
    d = sel.select(op="moe", quant="mxfp4", activation="swigluoai", act_and_mul=True,
                   hidden_size=2880, intermediate_size=2880, num_experts=128, top_k=4)
    assert d.selected == "triton_kernels"
    deprecated = [n for n in d.notes if "deprecated" in str(n)]
    assert bool(deprecated) == (stack == "trtllm_main"), d.notes


def test_megamoe_names_are_main_backends_outside_the_catalogue():
    conf = yaml.safe_load((REPO / "conf" / "engine" / "trtllm.yaml").read_text())
    assert {"MEGAMOE_CUTEDSL", "MEGAMOE_DEEPGEMM"} <= set(conf["outside"])
