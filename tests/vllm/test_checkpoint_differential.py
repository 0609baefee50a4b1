"""Issue 21: selector reads every checkpoint of the corpus and its variants exactly as vLLM's own
quantization-config code does, module by module (ckpt_diff.py). Each difference is one of the
explained ones listed in docs/checkpoints.md with the vLLM source behind it; any other fails."""
from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import ckpt_diff
import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
import checkpoint_corpus as corpus  # noqa: E402

DOC = TESTS.parent / "docs" / "checkpoints.md"


def _explained(diff) -> str | None:
    """The id (docs/checkpoints.md) of an explained difference, else None."""
    prefix, vllm, sel = diff
    if prefix == "*" and vllm.startswith("loads") and "is missing;" in sel and \
            "num_experts_per_tok" in sel:
        return "D1"
    if prefix == "*" and vllm.startswith("loads") and "is refused:" in sel and "re:" in sel:
        return "D2"
    return None


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    items = []
    for name in sorted(corpus.CORPUS):
        items.append((name, corpus.HERE / name))
        for vname, entry in corpus.variants(name, corpus.read(corpus.HERE / name)):
            items.append((vname, corpus.write(root, vname, entry)))
    out = ckpt_diff.run(items)
    shutil.rmtree(root, ignore_errors=True)
    return out


def test_every_module_as_vllm_reads_it(cases):
    counts = {"cases": len(cases), "modules": sum(len(c.vllm) for c in cases),
              "vllm refused": sum(bool(c.vllm_error) for c in cases), "differences": 0,
              "explained": 0}
    unexplained = []
    for c in cases:
        for d in c.differences():
            counts["differences"] += 1
            if _explained(d):
                counts["explained"] += 1
            else:
                unexplained.append(f"{c.name}: {d[0]}: vLLM {d[1]!r}, selector {d[2]!r}")
    print("checkpoint differential:", ", ".join(f"{k} {v}" for k, v in counts.items()))
    per_scheme = Counter(v for c in cases for v in c.vllm.values())
    print("modules by vLLM's scheme:", dict(sorted(per_scheme.items())))
    assert counts["cases"] >= 800 and counts["modules"] > 150_000
    # issue 26: every scheme a checkpoint can declare is met, in agreement, in the corpus
    assert {"nvfp4", "nvfp4_w4a16", "fp8_tensor", "fp8_tensor_dynamic", "fp8_channel",
            "fp8_block", "mxfp8", "mxfp4", "mxfp4_w4a4", "other", "unquantized"} <= set(per_scheme)
    assert not unexplained, f"{len(unexplained)} unexplained differences:\n" + \
        "\n".join(unexplained[:30])


def test_explained_differences_are_documented_with_their_vllm_source():
    text = DOC.read_text()
    for ident in ("D1", "D2"):
        row = next((ln for ln in text.splitlines() if ln.startswith(f"| {ident} |")), None)
        assert row is not None, f"{ident} is not listed in docs/checkpoints.md"
        assert re.search(r"vllm/\S+\.py", row), row


def test_an_unexplained_difference_fails(cases):
    """A selector verdict that differs from vLLM's, with no listed reason, is unexplained."""
    c = next(c for c in cases if c.vllm and not c.selector_error)
    prefix = next(iter(c.vllm))
    c2 = ckpt_diff.Case(c.name, dict(c.vllm), {**c.selector, prefix: "nvfp4_w4a16"
                                                if c.vllm[prefix] != "nvfp4_w4a16" else "nvfp4"})
    (d,) = c2.differences()
    assert _explained(d) is None


def test_hf_defaults_are_the_config_classes_defaults():
    """selector's table of Hugging Face defaults against the installed transformers classes."""
    import transformers

    from selector.checkpoint.arch import HF_DEFAULTS
    classes = {"deepseek_v3": "DeepseekV3Config", "deepseek_v2": "DeepseekV2Config",
               "qwen3_moe": "Qwen3MoeConfig", "nemotron_h": "NemotronHConfig",
               "gpt_oss": "GptOssConfig", "llama": "LlamaConfig", "mistral": "MistralConfig",
               "qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "mixtral": "MixtralConfig",
               "glm4_moe": "Glm4MoeConfig", "minimax_m2": "MiniMaxM2Config",
               # vLLM 0.32.0 transformers_utils/config.py _CONFIG_REGISTRY: deepseek_v32 is
               # read with DeepseekV3Config
               "qwen3_next": "Qwen3NextConfig", "deepseek_v32": "DeepseekV3Config",
               "llama4_text": "Llama4TextConfig", "ernie4_5_moe": "Ernie4_5_MoeConfig"}
    assert transformers.__version__ == "5.19.0"
    for model_type, table in HF_DEFAULTS.items():
        made = getattr(transformers, classes[model_type])()
        for key, value in table.items():
            assert getattr(made, key) == value, (model_type, key, getattr(made, key), value)


def test_name_mappings_are_the_model_classes():
    """selector's packed mappings and renames against the vLLM model classes' own."""
    from vllm.model_executor.models import (
        deepseek_v2,
        ernie45_moe,
        glm4_moe,
        gpt_oss,
        llama,
        llama4,
        minimax_m2,
        mixtral,
        nemotron_h,
        qwen2,
        qwen3,
        qwen3_moe,
        qwen3_next,
    )
    from vllm.models import deepseek_v32  # the platform's class (CUDA: nvidia/model.py)

    from selector.checkpoint.arch import ARCHITECTURES, RENAMES
    classes = {"DeepseekV3ForCausalLM": deepseek_v2, "DeepseekV2ForCausalLM": deepseek_v2,
               "Qwen3MoeForCausalLM": qwen3_moe, "NemotronHForCausalLM": nemotron_h,
               "GptOssForCausalLM": gpt_oss, "LlamaForCausalLM": llama,
               "MistralForCausalLM": llama, "Qwen2ForCausalLM": qwen2,
               "Qwen3ForCausalLM": qwen3, "MixtralForCausalLM": mixtral,
               "Glm4MoeForCausalLM": glm4_moe, "MiniMaxM2ForCausalLM": minimax_m2,
               "Qwen3NextForCausalLM": qwen3_next, "DeepseekV32ForCausalLM": deepseek_v32,
               "Llama4ForCausalLM": llama4, "Ernie4_5_MoeForCausalLM": ernie45_moe}
    for arch, (model_type, _) in ARCHITECTURES.items():
        if arch == "Llama4ForConditionalGeneration":  # mllama4.py imports torchvision, which has
            continue  # no build beside the CPU torch; its language model is Llama4ForCausalLM's
        cls = getattr(classes[arch], arch if arch != "MistralForCausalLM" else
                      "LlamaForCausalLM")
        mapper = getattr(cls, "hf_to_vllm_mapper", None)
        mine = RENAMES.get(model_type, ((), (), ()))
        if mapper is None:
            assert mine is None, arch
            continue
        r = mapper.get_rename_mapper()
        assert mine is not None and (tuple(r.orig_to_new_substr.items()),
                                     tuple(r.orig_to_new_prefix.items()),
                                     tuple(r.orig_to_new_suffix.items())) == mine, arch
        assert not r.orig_to_new_regex and not r.orig_to_new_renaming, arch
