"""A `selector tune` profile inside a started vLLM (its CPU build, `vllm.LLM` in a process of its
own, tools/tiny_vllm.py): vLLM's own ModelOpt path creates each NVFP4 linear layer and asks for its
kernel; the plugin passes the layer's per-GPU sizes and decides over the token buckets of the
scheduler vLLM built (max_num_batched_tokens=64), so a profile whose cells match the layers ranks
the backends and the decision line in vLLM's log names the measurement; a profile with no cell for
these layers leaves the static order and a warning in vLLM's log naming the nearest cell (issue
#46: "0 cells silently unmeasured").

Only the device is simulated: vLLM runs on this CPU, selector is told an SM 8.0 GPU with CUDA 12.8
(SELECTOR_VLLM_OVERRIDES), where its catalogue can run Marlin and the emulation backend on these
layers. vLLM's CPU build has no NVFP4 linear kernel, so it then cannot build the chosen kernel and
stops with selector's decision in its error: the decision, not the kernel, is what is shown here.
About 40 s per start on 2 cores."""
from __future__ import annotations

from pathlib import Path

import parity
import pytest
import tiny_vllm

import selector
from selector.core import profile as prof
from selector.engines import vllm as adapter
from selector.inspect import tuning

pytestmark = pytest.mark.slow

EXTRA = [parity.STACK, "platform.capability=8.0", "platform.cuda=12.8"]
# the tiny Llama's NVFP4 linear layers as vLLM builds them (tools/tiny_vllm.py LLAMA, TP 1):
# qkv_proj and gate_up_proj K 64 N 256, o_proj and down_proj K 128 N 64
SHAPES = ((64, 256), (128, 64))
BUCKETS = tuple(1 << i for i in range(14))


def _profile(path: Path, shapes) -> Path:
    """emulation timed 2x faster than Marlin at every bucket, for the linear layers `shapes`
    (K, N), keyed to this machine as the plugin's selector sees it."""
    key = tuning.machine_key(selector.load(adapter.Chooser(extra=EXTRA).overrides()).run_config)
    cells = []
    for k, n in shapes:
        layer = dict(op="linear", quant="nvfp4", dtype="bfloat16", hidden_size=k,
                     intermediate_size=n, ep_size=1, tp_size=1)
        for b in BUCKETS:
            cells.append(prof.Cell(dict(layer, num_tokens=b), b, {
                "emulation": prof.Timing(0.5, 0.45, 0.55, 8),
                "marlin": prof.Timing(1.0, 0.9, 1.1, 8)}, {}))
    path.write_text(prof.Profile(key, tuple(cells), {}, "now").dumps())
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_vllm.modelopt_linear(tmp_path_factory.mktemp("started"))


def _start(model: Path, profile: Path):
    words = " ".join(EXTRA + [f"policy.profile={profile}"])
    res = tiny_vllm.start(model, True, timeout=900, env={adapter.ENV_OVERRIDES: words},
                          log=profile.with_suffix(".log"))
    return res, tiny_vllm.decided(res)


def test_the_static_order_without_a_profile():
    """What the started vLLM's selector decides without a profile (asked here, with the same
    overrides): Marlin, ranked above the emulation backend."""
    sel = selector.load(adapter.Chooser(extra=EXTRA).overrides())
    for k, n in SHAPES:
        assert sel.select(op="linear", quant="nvfp4", hidden_size=k, intermediate_size=n,
                          num_tokens=64).selected == "marlin"


def test_a_matching_profile_ranks_the_layer_inside_vllm(model, tmp_path):
    res, lines = _start(model, _profile(tmp_path / "match.json", SHAPES))
    assert lines, res["log"][-40:]
    first = lines[0]
    # the sizes came from vLLM's layer, the range from the scheduler vLLM built
    assert "linear quant=nvfp4 dtype=bfloat16 hidden_size=64 intermediate_size=256 " \
        "num_tokens=64 -> emulation" in first, first
    assert "token buckets up to 64]" in first, first
    assert "[measured: emulation 0.5 ms vs marlin 1 ms at 64 tokens, profile " in first, first
    assert not [ln for ln in res["selector_log"] if "unmeasured" in ln or "ignored" in ln]
    # vLLM's CPU build has no NVFP4 linear kernel: it stops with selector's choice in its error
    assert "vLLM cannot build selector's choice emulation" in res.get("message", ""), res


def test_a_profile_without_the_layers_cell_warns_inside_vllm(model, tmp_path):
    res, lines = _start(model, _profile(tmp_path / "other.json", ((4096, 6144),)))
    assert lines and " -> marlin " in lines[0], (lines, res["log"][-40:])
    assert "measured:" not in lines[0]
    warned = [ln for ln in res["selector_log"] if "WARNING" in ln and "unmeasured" in ln]
    assert warned, res["log"][-40:]
    assert "linear nvfp4 unmeasured at 7 of 7 token buckets (1, 2, 4, 8, 16, 32, 64)" in warned[0]
    assert "no cell for linear nvfp4 bfloat16 K=64 N=256 at the 64-token bucket; nearest " \
        "measured cell: linear nvfp4 bfloat16 K=4096 N=6144" in warned[0], warned[0]
