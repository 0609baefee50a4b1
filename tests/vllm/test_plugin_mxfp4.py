"""selector deciding vLLM's MXFP4 MoE (select_mxfp4_moe_backend) as vLLM's loaded plugin: vLLM
builds selector's choice (backend and kernel class), or selector refused and vLLM's error carries
the refusal; where selector refuses quantized activations the plugin decides the layer with bf16
activations, as vLLM's own BF16 fallback does, so no layer that vLLM alone builds fails to load
for want of a W4A8/W4A4 kernel."""
from __future__ import annotations

from dataclasses import replace

import parity
import pytest
import random_sweep as rs
import sim
from test_plugin import entry_point, load_plugins, plugin_overrides, simulation  # noqa: F401

from selector.engines import vllm as adapter


def expected(s: sim.Scenario):
    """selector's decision as the plugin makes it: the layer as asked, else with bf16
    activations (vLLM's BF16 fallback, engines/vllm.py select_mxfp4_moe)."""
    d = parity.selector_decision(s)
    if d.selected is None and s.quant != "mxfp4":
        d = parity.selector_decision(replace(s, quant="mxfp4"))
    return d


def _space():
    """The gpt-oss-path (select_mxfp4_moe_backend) scenarios of the MX grid and of a random
    draw, on vLLM's CUDA wheel (vendored DeepGEMM and triton_kernels present: their absence is a
    parity question, tests/vllm/test_parity_mx.py), named by selector's vocabulary (an `_afp8`
    alias is vLLM's alone: engines/vllm.py requested_names) and without
    VLLM_B12X_MOE_FP4_FORCE_A16 (the plugin does not read it)."""
    grid = sorted(sim.sweep_mx(), key=lambda s: str(s.machine))[::14]
    drawn = rs.draw("mx", n=800)
    return [s for s in grid + drawn if s.oracle == "mxfp4" and s.triton_kernels and
            s.deep_gemm and s.requested not in parity.AFP8 and not s.force_a16]


def test_vllm_builds_selectors_choice_for_mxfp4_moe(entry_point, monkeypatch,  # noqa: F811
                                                    simulation):  # noqa: F811
    load_plugins(monkeypatch, enabled=True)
    # quant methods imported after the plugin get the rebound name from the oracle module
    from vllm.model_executor.layers.quantization import mxfp4 as mxfp4_method
    assert hasattr(mxfp4_method.select_mxfp4_moe_backend, "__selector_original__")
    rebound = set(adapter.iter_rebound())
    assert "vllm.model_executor.layers.fused_moe.oracle.mxfp4.select_mxfp4_moe_backend" in rebound
    counts = {"built": 0, "refused": 0, "fallback": 0, "config": 0, "outside": 0}
    space = sorted(_space(), key=lambda s: str(s.machine))
    for s in space:
        monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
        with simulation.scenario(s):
            try:  # vLLM's CPU platform refuses a non-gated MoE config before any backend
                sim.moe_config(s, s.requested)
            except NotImplementedError:
                counts["config"] += 1
                continue
            d = expected(s)
            name, error, kernel, _ = parity.vllm_mx(s)  # the rebound name
        if d.selected is None and name is not None:  # vLLM's own pick, outside the catalogue
            assert name in parity.outside() and s.requested == "auto", (s.label(), name)
            counts["outside"] += 1
        elif d.selected is None:
            assert name is None and "selector refuses" in error, (s.label(), name, error)
            counts["refused"] += 1
        elif name is None and d.selected == "cutlass":  # built from vLLM's automatic list
            assert "automatic list only" in error, (s.label(), error)
            counts["refused"] += 1
        else:
            # parity.vllm_mx names vLLM's pick in selector's names (mx_pick)
            assert (name, kernel) == (d.selected, d.engine.kernel), \
                (s.label(), name, kernel, error, d.selected)
            counts["built"] += 1
            counts["fallback"] += d.layer.quant != s.quant
    print(f"plugin MXFP4 sweep: {len(space)} scenarios, {counts['built']} built as selector "
          f"chose ({counts['fallback']} with bf16 activations after selector refused the "
          f"quantized ones), {counts['refused']} refused with selector's explanation, "
          f"{counts['config']} refused by vLLM's MoE config on its CPU platform, "
          f"{counts['outside']} built as vLLM alone chose outside selector's catalogue")
    assert counts["built"] > 300 and counts["refused"] > 20 and counts["fallback"] > 5


def test_the_bf16_fallback_loads_where_vllm_alone_loads(entry_point, monkeypatch,  # noqa: F811
                                                        simulation):  # noqa: F811
    """SM 9.0, a W4A8 gpt-oss layer: no backend runs MXFP8 activations there; vLLM alone falls
    back to a BF16 kernel, and so does the plugin (selector's mxfp4 choice) instead of failing
    the load."""
    load_plugins(monkeypatch, enabled=True)
    s = sim.Scenario("9.0", "13.0", sim.FLASHINFER, None, "moe", "mxfp4_w4a8", "swigluoai",
                     True, oracle="mxfp4")
    monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
    with simulation.scenario(s):
        assert parity.selector_decision(s).selected == "marlin"  # selector's W4A8 answer
        name, error, kernel, quant = parity.vllm_mx(s)
        d = expected(s)
    assert (name, kernel, quant) == (d.selected, d.engine.kernel, "mxfp4"), error


@pytest.mark.parametrize("quant", ["mxfp4", "mxfp4_w4a8"])
def test_a_strict_refusal_carries_the_explanation(entry_point, monkeypatch,  # noqa: F811
                                                   simulation, quant):  # noqa: F811
    """No GPU: no MXFP4 backend; the plugin raises vLLM's error type with selector's
    explanation, after trying bf16 activations for the W4A8 layer."""
    load_plugins(monkeypatch, enabled=True)
    s = sim.Scenario("8.0", "12.8", None, None, "moe", quant, "swigluoai", True,
                     requested="flashinfer_trtllm", oracle="mxfp4")
    monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
    with simulation.scenario(s):
        name, error, _, _ = parity.vllm_mx(s)
    assert name is None and error.startswith("selector refuses moe_backend='flashinfer_trtllm'")


@pytest.mark.parametrize("s", [
    # issue 44: SELECTOR_PARITY_SEED=186699048's scenario, and the FP8 oracle's twin
    sim.Scenario.parse("no GPU (flashinfer 0.7.0.post1, b12x 1.5.1); moe mxfp4_w4a4 swigluoai "
                       "ep8 [mxfp4 oracle] float16 method=online; requested auto"),
    sim.Scenario(None, None, None, None, "moe", "fp8_block", "silu", True, method="fp8",
                 allow_cutlass=False)], ids=["mxfp4_w4a4", "fp8_block"])
def test_no_gpu_loads_vllms_cpu_experts_where_selector_refuses(entry_point, monkeypatch,  # noqa: F811
                                                               simulation, s):  # noqa: F811
    """No GPU: selector's catalogue (NVIDIA GPU kernels) refuses every backend, even with bf16
    activations, while vLLM 0.32.0 alone builds its CPU experts (fused_moe/oracle/mxfp4.py:437-438
    and 692-711; fused_moe/oracle/fp8.py:137-141), a backend outside selector's catalogue
    (engine.outside cpu): the plugin lets that pick stand, as an explicit --moe-backend cpu is
    vLLM's alone, instead of failing a load vLLM alone makes (issue 44)."""
    adapter.uninstall()
    with simulation.scenario(s):
        alone = parity.vllm_choice(s)
    load_plugins(monkeypatch, enabled=True)
    simulation._machine = None
    monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
    with simulation.scenario(s):
        d = parity.selector_decision(s)
        if s.quant == "mxfp4_w4a4":
            assert expected(s).selected is None  # the BF16 fallback is refused too
        assert d.selected is None
        name, error, kernel = parity.vllm_choice(s)
    assert alone[0] == "cpu" and "cpu" in parity.outside()
    assert (name, kernel) == (alone[0], alone[2]), error
