"""Issue 44: every architecture of vLLM's model registry (registry_walk.py) is planned exactly,
module by module at TP 1, TP 8, TP 8 + EP and TP 2 x DP 4 + EP against vLLM's own classes, or
refused as "architecture not modelled" with the list selector models; none is planned from a
config's common keys. The counts are printed (-s)."""
from __future__ import annotations

from collections import Counter

import pytest
import registry_walk as rw

from selector.checkpoint.arch import ARCHITECTURES


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return rw.walk(tmp_path_factory.mktemp("registry"))


def test_every_registered_architecture_is_planned_exactly_or_refused(outcomes):
    counts = Counter(o.answer for o in outcomes)
    print("registry walk:", len(outcomes), "architectures;", dict(sorted(counts.items())))
    print("planned:", sorted(o.arch for o in outcomes if o.answer == "planned"))
    assert len(outcomes) > 300  # vLLM 0.32.0 registers 391
    assert counts["refused"] + counts["planned"] > 100
    wrong = [f"{o.arch}: {o.answer}: {o.detail}" for o in outcomes
             if o.answer in ("refused otherwise", "planned without a reader")]
    assert not wrong, "\n".join(wrong[:20])
    differ = [f"{o.arch} {k}: {d}" for o in outcomes for k, ds in o.differences.items()
              for d in ds]
    assert not differ, f"{len(differ)} unexplained module differences:\n" + "\n".join(differ[:30])


def test_every_modelled_architecture_is_in_vllms_registry_and_planned(outcomes):
    by_arch = {o.arch: o for o in outcomes}
    for arch in ARCHITECTURES:
        assert arch in by_arch, f"{arch} is not an architecture vLLM registers"
        assert by_arch[arch].answer in ("planned", "refused as vLLM refuses"), \
            (arch, by_arch[arch].answer, by_arch[arch].detail)
    # the config classes without a default for a key the model class reads (DeepseekV2Config
    # num_experts_per_tok, Glm4MoeConfig head_dim, MiniMaxM2Config rotary_dim, ...): refused
    # by both; the others planned
    assert sum(o.answer == "planned" for o in outcomes) >= len(ARCHITECTURES) - 5


def test_the_refusal_names_the_modelled_architectures(outcomes):
    refused = next(o for o in outcomes if o.answer == "refused")
    assert rw.NOT_MODELLED in refused.detail and "DeepseekV3ForCausalLM" in refused.detail


# Held-out architectures whose configs carry keys that change the layout vLLM builds and that the
# standard keys miss (issue 44): Jamba (layers_block_type / expert_layer_period: attention on a
# few layers, experts on every other one), dots.llm1 (first_k_dense_replace; vLLM 0.32.0 builds
# it through its Transformers backend), the Qwen3-VL-MoE text model (text_config), Hunyuan-A13B
# (per-layer lists), Phi-3.5-MoE (its own router), and the MoE families selector has no reader
# for (OLMoE, Qwen2-MoE, Granite MoE). Through the user's door, `explain --model` at every
# layout of the walk: refused as not modelled (exit 2), never planned from the standard keys.
HELD_OUT = {"JambaForCausalLM": "jamba", "Dots1ForCausalLM": "dots1",
            "Qwen3VLMoeForConditionalGeneration": "qwen3_vl_moe",
            "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe", "PhimoeForCausalLM": "phimoe",
            "OlmoeForCausalLM": "olmoe", "Qwen2MoeForCausalLM": "qwen2_moe",
            "GraniteMoeForCausalLM": "granitemoe"}


@pytest.mark.parametrize("arch", sorted(HELD_OUT))
def test_held_out_moe_architectures_are_refused_as_not_modelled_at_every_layout(arch, tmp_path):
    import json

    from helpers import run_main
    from transformers import CONFIG_MAPPING
    config = rw.small_config(CONFIG_MAPPING[HELD_OUT[arch]], arch)
    if arch == "HunYuanMoEV1ForCausalLM":  # Hunyuan-A13B's public config: per-layer lists
        n = config["num_hidden_layers"]
        config["moe_intermediate_size"] = [3072] * n
        config["moe_topk"] = [8] * n
    (tmp_path / "config.json").write_text(json.dumps(config, default=str))
    for tp, dp, ep in rw.LAYOUTS:
        rc, out, err = run_main(["explain", "--model", str(tmp_path), "engine=vllm",
                                 "platform=b200", "stack=vllm_0_32", f"parallel.tp={tp}",
                                 f"parallel.dp={dp}", f"parallel.ep={tp * dp if ep else 1}"])
        assert rc == 2, (arch, tp, dp, ep, out[:300])
        assert rw.NOT_MODELLED in err and arch in err, err[:400]
