"""TensorRT-LLM's flagship deployments plan with a command (issue 45): each is `python -m selector
explain --model examples/<checkpoint> platform=<gpu> engine=trtllm` run as a user runs it (a
subprocess; its exit code, its printed `trtllm-serve` command and its --format json plan), with no
stack (main, as the engine file's label says) and with each versioned stack
(conf/stack/trtllm_1_2.yaml, trtllm_main.yaml).

What each plan must say is TensorRT-LLM's own rule, read from its source (TensorRT-LLM cannot be
installed here: the PyPI package is a stub, so no TensorRT-LLM code runs in these tests):
- moe_config.backend AUTO: _torch/model_config.py ModelConfig.resolve_moe_backend (gpt-oss: TRTLLM
  on SM 100-119, TRITON on SM 90-99, else CUTLASS; block FP8 on SM 100f: TRTLLM; else CUTLASS);
- gpt-oss MXFP4 on SM >= 100 runs as W4A8_MXFP4_MXFP8 (ModelConfig.get_mxfp4_quant_algo), under
  CUTLASS the leaf _torch/modules/fused_moe/cutlass/w4a8_mxfp4_mxfp8.py
  TrtllmCutlassW4a8Mxfp4Mxfp8Impl (sm_support {100, 103, 107, 120, 121});
- block FP8 under CUTLASS on SM 90 is DeepGEMM (cutlass/blockscale_hopper.py
  DeepgemmCudaHopperFp8BlockScalesImpl); block-FP8 linear layers off SM 100f run
  torch.ops.trtllm.fp8_block_scaling_gemm (_torch/modules/linear.py FP8BlockScalesLinearMethod;
  cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp), no key choosing it there;
- NVFP4 linear: nvfp4_gemm_config.allowed_backends is left to its default (cutlass, cublaslt,
  cuda_core, autotuned: llmapi/llm_args.py, _torch/custom_ops/torch_custom_ops.py) unless the user
  asks for a linear backend.
"""
from __future__ import annotations

import json

import pytest
import yaml
from helpers import run_cli

DS = "examples/deepseek-r1-nvfp4"
OSS = "examples/gpt-oss-20b-mxfp4"
QWEN = "examples/qwen3-30b-a3b-fp8"
STACKS = ((), ("stack=trtllm_1_2",), ("stack=trtllm_main",))

# (checkpoint, platform, {group kind: (TensorRT-LLM name, kernel prefix)}, the YAML's moe_config)
FLAGSHIPS = [
    (DS, "b200", {"routed experts": ("TRTLLM", "TRTLLMGenFusedMoE"),
                  "dense MLP": ("cutlass", "torch.ops.trtllm.nvfp4_gemm"),
                  "shared experts": ("cutlass", "torch.ops.trtllm.nvfp4_gemm")},
     {"backend": "TRTLLM"}),
    (DS, "gb200", {"routed experts": ("TRTLLM", "TRTLLMGenFusedMoE"),
                   "dense MLP": ("cutlass", "torch.ops.trtllm.nvfp4_gemm")},
     {"backend": "TRTLLM"}),
    (OSS, "h100", {"routed experts": ("TRITON", "TritonFusedMoE")}, None),
    (OSS, "b200", {"routed experts": ("TRTLLM", "TRTLLMGenFusedMoE")}, None),
    (OSS, "rtx_pro_6000", {"routed experts": ("CUTLASS", "TrtllmCutlassW4a8Mxfp4Mxfp8Impl")},
     None),
    (QWEN, "h200", {"routed experts": ("CUTLASS", "DeepgemmCudaHopperFp8BlockScalesImpl"),
                    "attention": ("fp8_block_scaling_gemm", "fp8_block_scaling_gemm_hopper")},
     None),
]


def _plan(model: str, platform: str, *extra: str) -> dict:
    r = run_cli("explain", "--model", model, f"platform={platform}", "engine=trtllm", *extra,
                "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr, r.stdout[-2000:])
    return json.loads(r.stdout)["launch"]


@pytest.mark.parametrize("model,platform,want,moe_config", FLAGSHIPS,
                         ids=[f"{m.split('/')[-1]}-{p}" for m, p, *_ in FLAGSHIPS])
def test_flagship_plans_with_a_trtllm_serve_command(model, platform, want, moe_config):
    # the text a user reads: exit 0 and the command
    r = run_cli("explain", "--model", model, f"platform={platform}", "engine=trtllm")
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr, r.stdout[-2000:])
    assert f"command: trtllm-serve {model} --backend pytorch" in r.stdout
    assert "0/19" not in r.stdout and "!!" not in r.stdout
    # the preset carries no CUDA: the plan names the key and the stacks that set it
    flat = " ".join(r.stdout.split())
    assert "note: platform.cuda is not given" in flat and "stack=trtllm_main" in flat
    for stack in STACKS:
        launch = _plan(model, platform, *stack)
        assert any("platform.cuda is not given" in n for n in launch["notes"]) == (not stack)
        assert launch["ok"] and launch["command"].startswith(f"trtllm-serve {model} "), launch
        groups = {}
        for g in launch["groups"]:
            if g["engine_backend"]:
                groups.setdefault(g["kind"], (g["engine_backend"], tuple(g["kernel"])))
        for kind, (name, kernel) in want.items():
            got_name, kernels = groups[kind]
            assert got_name == name and kernels and kernels[0].startswith(kernel), (kind, groups)
        text = launch["files"].get("extra_llm_api_options.yaml")
        conf = yaml.safe_load(text) if text else {}
        # 1.2's own resolve_moe_backend is not read (main's is): under stack=trtllm_1_2 the
        # plan passes selector's MoE backend all the same, and says why
        release = stack == ("stack=trtllm_1_2",)
        want_moe = {"backend": want["routed experts"][0]} if release else moe_config
        assert conf.get("moe_config") == want_moe, (stack, conf)
        assert any("planned with main's MoE rules" in n for n in launch["notes"]) == release
        moe = [a for a in launch["automatic"] if a["key"] == "moe_config.backend"]
        assert moe and all(a["passed"] == (release or a["engine"]["names"] != [a["selected"]])
                           and a["engine"]["exact"] == (not release) for a in moe), moe
        # TensorRT-LLM's NVFP4 GEMM autotuner is never narrowed unless asked
        assert "nvfp4_gemm_config" not in conf
        # every planned group shows the engine's own choice beside selector's
        shown = {a["kind"] for a in launch["automatic"] if a["engine"] is not None}
        assert set(want) <= shown, (want, launch["automatic"])


def test_deepseek_on_b200_says_why_the_moe_key_is_passed_and_the_gemm_key_is_not():
    """AUTO runs CUTLASS for DeepSeek-R1 NVFP4 on SM 100 (resolve_moe_backend: no DeepSeek-V3 or
    NVFP4 rule), so selector's TRTLLM is passed and said to change it; the NVFP4 GEMM list stays
    TensorRT-LLM's autotuned default."""
    auto = {(a["kind"], a["key"]): a for a in _plan(DS, "b200")["automatic"]}
    moe = auto["routed experts", "moe_config.backend"]
    assert moe["passed"] and moe["engine"]["names"] == ["CUTLASS"] and moe["selected"] == "TRTLLM"
    gemm = auto["dense MLP", "nvfp4_gemm_config.allowed_backends"]
    assert not gemm["passed"] and gemm["engine"]["tuned"]
    assert gemm["engine"]["names"] == ["cutlass", "cublaslt", "cuda_core"]


def test_gpt_oss_on_hopper_prints_no_deprecated_triton_key_on_main():
    """TRITON is deprecated from 1.3 (TensorRT-LLM PR #19035: a warning, runtime selection
    unchanged): on main, gpt-oss on H100 passes no moe_config.backend (AUTO's own TRITON runs) and
    the plan warns of the deprecation; 1.2 carries no such warning, and passes TRITON (AUTO came
    with PR #11074; 1.2's own resolution is not read, and its 1.2.0rc2 docs give CUTLASS as the
    default)."""
    for stack, release in (("stack=trtllm_main", False), ("stack=trtllm_1_2", True)):
        r = run_cli("explain", "--model", OSS, "platform=h100", "engine=trtllm", stack)
        assert r.returncode == 0, r.stderr
        flat = " ".join(r.stdout.split())
        assert ("moe_config.backend=TRITON passed" in flat) == release
        assert ("backend: TRITON" in r.stdout) == release
        assert ("deprecated from TensorRT-LLM 1.3" in flat) == (not release)
        assert ("TensorRT-LLM 1.2.0 is planned with main's MoE rules" in flat) == release
        assert ("TensorRT-LLM PR #11074" in flat) == release


def test_qwen3_fp8_on_h200_shows_the_keyless_block_fp8_gemm():
    """The plan names TensorRT-LLM's block-FP8 linear GEMM by default (fp8_block_scaling_gemm on
    SM 90, where no key chooses it; DeepGEMM on SM 100f) and passes nothing for it."""
    for platform, name in (("h200", "fp8_block_scaling_gemm"), ("b200", "deep_gemm")):
        launch = _plan(QWEN, platform)
        rows = [a for a in launch["automatic"] if a["kind"] == "attention"]
        assert rows and all(a["key"] == "" and not a["passed"] and
                            a["engine"]["names"] == [name] for a in rows), rows
        assert launch["command"] == f"trtllm-serve {QWEN} --backend pytorch"
