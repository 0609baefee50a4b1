"""A `selector tune` profile inside vLLM: the plugin's NVFP4 linear hook passes the layer's sizes
(from vLLM's own ModelOpt path) and decides over the token range vLLM runs, so a measured
preference changes what vLLM builds (issue #46: the hook passed only op and quant, and no profile
could apply). vLLM's real `select_linear_kernel` and `init_nvfp4_linear_kernel` run on a
simulated SM 8.0 GPU, where selector's static order picks Marlin and emulation is usable too."""
from __future__ import annotations

import types

import parity
import pytest
import sim
import torch

from selector.core import profile as prof
from selector.engines import vllm as adapter
from selector.inspect import tuning

K, N = 4096, 6144
_CONFIGS: dict = {}


def _scenario() -> sim.Scenario:
    for s in sim.sweep():
        if (s.op, s.quant, s.requested, s.capability, s.flashinfer) == \
                ("linear", "nvfp4", "auto", "8.0", None):
            return s
    raise AssertionError("no SM 8.0 NVFP4 linear scenario in the sweep")


def _build(layer_sizes, max_tokens):
    """vLLM's ModelOpt path for one W4A4 NVFP4 linear layer: create_weights has set the layer's
    per-partition sizes, then select_linear_kernel(spec, layer, rt) asks for a kernel, under a
    vLLM config with `max_tokens` as max_num_batched_tokens."""
    from vllm.config import CompilationConfig, SchedulerConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization import modelopt
    from vllm.model_executor.layers.quantization.utils import quant_utils as q
    layer = torch.nn.Module()
    if layer_sizes:
        layer.input_size_per_partition, layer.output_size_per_partition = layer_sizes
    spec = types.SimpleNamespace(weight=q.kNvfp4Static, activation=q.kNvfp4DynamicToken)
    if max_tokens not in _CONFIGS:  # building one takes seconds
        _CONFIGS[max_tokens] = VllmConfig(
            scheduler_config=SchedulerConfig(max_num_batched_tokens=max_tokens,
                                             max_model_len=max_tokens, max_num_seqs=min(128, max_tokens),
                                             is_encoder_decoder=False),
            compilation_config=CompilationConfig())
    with set_current_vllm_config(_CONFIGS[max_tokens]):
        assert adapter.token_buckets()[-1] == max_tokens
        return parity.linear_kernel_name(modelopt.select_linear_kernel(spec, layer, None))


@pytest.fixture
def on_sm80(monkeypatch, tmp_path):
    s = _scenario()
    simulation = sim.Simulation()
    extra = [parity.STACK, *s.selector_overrides()]
    monkeypatch.setenv(adapter.ENV_ENABLE, "1")
    monkeypatch.setenv(adapter.ENV_OVERRIDES, " ".join(extra))
    with simulation.scenario(s):
        adapter.install()
        try:
            yield s, extra, tmp_path
        finally:
            adapter.uninstall()
            simulation.close()


def _profile(path, key, fast_until: int):
    """Emulation timed 2x faster than Marlin at the buckets up to `fast_until`, 4x slower above, for
    the linear layer K x N (a cell keyed the way `tune layer=dense_linear` writes it)."""
    layer = dict(op="linear", quant="nvfp4", activation="silu", act_and_mul=False, ep_size=1,
                 tp_size=1, dtype="bfloat16", hidden_size=K, intermediate_size=N,
                 swiglu_limit=None, num_experts=None, top_k=None, all2all=None)
    cells = []
    for b in (1 << i for i in range(14)):
        emu, mar = (0.5, 1.0) if b <= fast_until else (2.0, 0.5)
        cells.append(prof.Cell(dict(layer, num_tokens=b), b, {
            "emulation": prof.Timing(emu, emu * 0.9, emu * 1.1, 8),
            "marlin": prof.Timing(mar, mar * 0.9, mar * 1.1, 8)}, {}))
    path.write_text(prof.Profile(key, tuple(cells), {}, "now").dumps())
    return path


def test_the_plugin_builds_the_measured_fastest_linear_kernel(on_sm80, monkeypatch, caplog):
    s, extra, tmp = on_sm80
    chooser = adapter.Chooser(extra=extra)
    assert _build((K, N), 8192) == "marlin"  # the static order, no profile
    base = chooser._base(tuple(chooser.overrides()))
    key = tuning.machine_key(base.run_config)
    p = _profile(tmp / "p.json", key, fast_until=8192)
    monkeypatch.setenv(adapter.ENV_OVERRIDES, " ".join(extra + [f"policy.profile={p}"]))
    with caplog.at_level("INFO", logger="vllm.selector"):
        assert _build((K, N), 8192) == "emulation"
    line = [r.getMessage() for r in caplog.records if "at 14 token buckets up to 8192" in r.getMessage()]
    assert line, [r.getMessage() for r in caplog.records]
    # emulation fastest only up to 64 tokens: over 1..8192 Marlin costs less on average
    p2 = _profile(tmp / "p2.json", key, fast_until=64)
    monkeypatch.setenv(adapter.ENV_OVERRIDES, " ".join(extra + [f"policy.profile={p2}"]))
    assert _build((K, N), 8192) == "marlin"
    # ...but a vLLM that schedules at most 64 tokens runs emulation
    assert _build((K, N), 64) == "emulation"


def test_without_the_layers_sizes_the_profile_says_it_has_no_cell(on_sm80, monkeypatch, caplog):
    """compressed-tensors chooses its kernel before the layer exists: no sizes, the static
    order, and the decision's warning names the nearest cell."""
    s, extra, tmp = on_sm80
    chooser = adapter.Chooser(extra=extra)
    key = tuning.machine_key(chooser._base(tuple(chooser.overrides())).run_config)
    p = _profile(tmp / "p.json", key, fast_until=8192)
    monkeypatch.setenv(adapter.ENV_OVERRIDES, " ".join(extra + [f"policy.profile={p}"]))
    chooser = adapter.Chooser(extra=extra + [f"policy.profile={p}"])
    with caplog.at_level("INFO", logger="vllm.selector"):
        d = chooser.decide(adapter.linear_layer(False, None), "auto")
    assert d.selected == "marlin"
    # said as a warning beside vLLM's own lines, naming the nearest cell (never silently)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("linear nvfp4 unmeasured" in w and "the layer gives no layer.num_tokens" in w and
               f"nearest measured cell: linear nvfp4 bfloat16 K={K} N={N}" in w
               for w in warned), warned
    (n,) = d.notes_of("profile_unmeasured")
    assert n.severity == "warning" and n.data["nearest"].startswith(
        f"linear nvfp4 bfloat16 K={K} N={N}")
    assert adapter.linear_layer(False, (K, N)) == {"op": "linear", "quant": "nvfp4",
                                                    "hidden_size": K, "intermediate_size": N}
