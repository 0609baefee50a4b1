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
