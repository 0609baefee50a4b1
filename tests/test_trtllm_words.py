"""engine=trtllm plans by TensorRT-LLM's own rules and in its words (issue 45), each through the CLI
(`python -m selector explain ... engine=trtllm`, its exit code and its text).

- Block-FP8 experts: TensorRT-LLM has no block refinement (that is vLLM's
  refine_fp8_moe_block_shape); DeepSeekFP8BlockScalesFusedMoEMethod (fused_moe/quantization.py,
  load_expert_all_weight_scale_fp8_block_scale) asserts intermediate_size_per_partition %
  FP8_QUANT_BLOCK_SIZE (128) == 0 while loading a checkpoint's per-expert block scales: Qwen3 FP8
  at TP 8 without EP (768 / 8 = 96) is refused; with EP the experts are whole on each GPU.
- No vLLM wording: the LM head is said with TensorRT-LLM's modeling_utils.py (LMHead without a
  quant_config), the read order with ModelConfig.from_pretrained (hf_quant_config.json first),
  the MXFP4, swiglu and split texts as selector's own rule, a rank win by its rank alone.

TensorRT-LLM cannot be installed here (its PyPI package is a stub): the expectations restate the
source they cite.
"""
from __future__ import annotations

import json

import pytest
from helpers import REPO, run_cli, run_main

QWEN = "examples/qwen3-30b-a3b-fp8"
EXAMPLES = sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").iterdir()
                  if (p / "config.json").exists())
ASSERT = "intermediate_size_per_partition % FP8_QUANT_BLOCK_SIZE == 0"


def _explain(*args: str):
    r = run_cli("explain", *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize("platform", ["h200", "b200"])
def test_block_fp8_experts_trtllm_refuses_at_tp8_without_ep(platform):
    r = _explain("--model", QWEN, f"platform={platform}", "engine=trtllm", "parallel.tp=8")
    flat = " ".join(r.stdout.split())
    assert r.returncode == 1, (r.returncode, r.stdout[-2000:])
    assert "command: none" in flat and "trtllm-serve" not in flat
    assert ("intermediate_size 96 on one GPU is not a multiple of the FP8 block 128: "
            "TensorRT-LLM refuses to load it") in flat
    assert ASSERT in flat and "fused_moe/quantization.py" in flat
    assert "refine_fp8_moe_block_shape" not in flat and "vLLM" not in flat
    # with EP the MoE TP is 1: 768 per GPU, a command
    ok = _explain("--model", QWEN, f"platform={platform}", "engine=trtllm", "parallel.tp=8",
                  "parallel.ep=8")
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert f"command: trtllm-serve {QWEN} --backend pytorch --tp_size 8 --ep_size 8" in ok.stdout
    # vLLM's plan of the same keeps vLLM's own rule (the refinement): engine-scoped
    vllm = _explain("--model", QWEN, f"platform={platform}", "engine=vllm", "parallel.tp=8")
    assert "refine_fp8_moe_block_shape" in " ".join(vllm.stdout.split())


def test_qwen3_235b_fp8_at_tp8_is_refused_and_at_tp4_plans(tmp_path):
    """Qwen3-235B-A22B-FP8: moe_intermediate_size 1536; TP 8: 192 per GPU (refused), TP 4: 384
    (a multiple of 128)."""
    cfg = json.loads((REPO / QWEN / "config.json").read_text())
    cfg.update(hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
               num_hidden_layers=94, num_attention_heads=64)
    cfg["quantization_config"]["modules_to_not_convert"] = ["lm_head"] + [
        f"model.layers.{i}.mlp.gate" for i in range(94)]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = _explain("--model", str(tmp_path), "platform=h200", "engine=trtllm", "parallel.tp=8")
    assert r.returncode == 1 and "intermediate_size 192 on one GPU" in r.stdout
    assert "command: none" in r.stdout
    r4 = _explain("--model", str(tmp_path), "platform=h200", "engine=trtllm", "parallel.tp=4")
    assert r4.returncode == 0 and "command: trtllm-serve" in r4.stdout, r4.stdout[-2000:]


def test_the_gpt_oss_plan_cites_trtllm_for_the_lm_head_and_its_read_order():
    r = _explain("--model", "examples/gpt-oss-20b-mxfp4", "platform=b200", "engine=trtllm")
    flat = " ".join(r.stdout.split())
    assert r.returncode == 0 and "vLLM" not in flat
    assert ("LM head: 1 module: not planned, TensorRT-LLM builds the LM head without the "
            "quantization config (TensorRT-LLM tensorrt_llm/_torch/models/modeling_utils.py") in flat
    assert ("(TensorRT-LLM's order: hf_quant_config.json, then config.json quantization_config: "
            "TensorRT-LLM tensorrt_llm/_torch/model_config.py ModelConfig.from_pretrained)") in flat
    assert "the checkpoint's MXFP4 config quantizes its experts only" in flat
    # the vLLM plan keeps vLLM's words
    v = _explain("--model", "examples/gpt-oss-20b-mxfp4", "platform=b200", "engine=vllm")
    assert "vLLM's MXFP4 config leaves linear layers unquantized" in " ".join(v.stdout.split())


def test_a_split_refusal_is_selectors_rule_in_a_trtllm_plan():
    """TP 3 does not divide the heads: the reader refuses it as its own rule, not as vLLM."""
    r = _explain("--model", QWEN, "platform=h200", "engine=trtllm", "parallel.tp=3")
    flat = " ".join(r.stdout.split())
    assert r.returncode == 1 and "command: none" in flat
    assert "selector's checkpoint reader (selector/checkpoint/modules.py" in flat
    assert "vLLM" not in flat


def _vllm_strings(x, path=""):
    """(path, text) of every string of a JSON plan that names vLLM."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _vllm_strings(v, f"{path}.{k}")
    elif isinstance(x, list):
        for v in x:
            yield from _vllm_strings(v, path)
    elif isinstance(x, str) and "vLLM" in x:
        yield path, x


@pytest.mark.parametrize("platform", ["h100", "h200", "b200", "gb200", "rtx_pro_6000",
                                      "dgx_spark"])
@pytest.mark.parametrize("par", [("parallel.tp=1",), ("parallel.tp=8",),
                                 ("parallel.tp=8", "parallel.ep=8")],
                         ids=["tp1", "tp8", "tp8-ep8"])
def test_no_vllm_text_in_any_trtllm_plan_of_the_examples(platform, par):
    """Every examples/ checkpoint planned for TensorRT-LLM names no vLLM at all: not in the
    text a user reads, not anywhere in the JSON plan (the decisions' candidate reasons, notes
    and rank reasons included: the catalogue's rank reasons tell vLLM's order, so a TensorRT-LLM
    plan says a rank by its number, conf/engine/trtllm.yaml rank_reasons: false; a backend rule
    scoped to schemes or GPUs TensorRT-LLM's entry refuses is moot there,
    selector/core/engines.py moot_under)."""
    seen = []
    for model in EXAMPLES:
        argv = ["explain", "--model", str(REPO / model), f"platform={platform}",
                "engine=trtllm", *par]
        rc, out, err = run_main(argv)
        if rc == 2 and "has no MoE layer to split by experts" in err:  # EP of a dense model
            continue
        assert rc in (0, 1) and "Traceback" not in err, (model, rc, err)
        seen += [f"{model}: {line.strip()}" for line in out.splitlines() if "vLLM" in line]
        rc, js, err = run_main([*argv, "--format", "json"])
        assert rc in (0, 1), (model, rc, err)
        seen += [f"{model} (json {where}): {text[:160]}"
                 for where, text in _vllm_strings(json.loads(js))]
    assert not seen, "\n".join(seen[:20])


@pytest.mark.parametrize("engine,said", [("trtllm", False), ("vllm", True)])
def test_a_rank_win_is_said_by_its_rank_in_a_trtllm_plan(engine, said):
    """gpt-oss on H100: triton_kernels (TensorRT-LLM's TRITON) outranks flashinfer_cutlass
    (CUTLASS W4A16). The catalogue's reason is vLLM's oracle order (fused_moe/oracle/mxfp4.py):
    a vLLM plan says it, in text and JSON; a TensorRT-LLM plan says the rank alone, in both."""
    model = "examples/gpt-oss-20b-mxfp4"
    stack = "stack=vllm_0_32" if engine == "vllm" else "stack=trtllm_main"
    r = _explain("--model", model, "platform=h100", f"engine={engine}", stack, "--format", "json")
    assert r.returncode == 0, r.stdout[-2000:]
    plan = json.loads(r.stdout)
    beats = [g["beat"] for g in plan["launch"]["groups"] if g["beat"] and
             g["beat"]["winner"] == "triton_kernels"]
    assert beats and beats[0]["next"] == "flashinfer_cutlass", plan["launch"]["groups"]
    assert beats[0]["by"] == ("preference" if said else "rank"), beats
    assert ("vLLM tries the OpenAI Triton MXFP4 kernels" in beats[0]["text"]) == said
    prefs = [n for k in plan["kinds"] for s in k["shapes"] if s.get("decision")
             for n in s["decision"]["notes_data"] if n["kind"] == "preference"]
    assert prefs and all(bool(n["data"]["reason"]) == said for n in prefs), prefs
    text = _explain("--model", model, "platform=h100", f"engine={engine}", stack)
    flat = " ".join(text.stdout.split())
    assert ("triton_kernels outranks flashinfer_cutlass (rank 30 < 40) in the catalogue's "
            "preference order" in flat) == (not said)


def test_contradicting_files_say_trtllm_reads_hf_quant_config():
    """config.json and hf_quant_config.json disagree: TensorRT-LLM reads hf_quant_config.json
    (ModelConfig.from_pretrained), the reader config.json: the plan says it is not what
    TensorRT-LLM runs, without vLLM's words."""
    model = REPO / "tests" / "checkpoint_corpus" / "llama-3.1-8b-both-contradicting"
    r = _explain("--model", str(model), "platform=b200", "engine=trtllm")
    flat = " ".join(r.stdout.split())
    assert r.returncode in (0, 1) and "vLLM" not in flat
    assert "TensorRT-LLM reads hf_quant_config.json's" in flat
    assert "it is not the quantization TensorRT-LLM runs" in flat
