"""Shadow mode on simulated GPUs: vLLM's own NVFP4 MoE oracle and linear kernel initializer
(vLLM 0.32.0's code, only the device simulated: sim.py), wrapped by SELECTOR_VLLM=observe, over a
sample of the parity sweep. vLLM's answer must be exactly its answer without the wrapper, the
recorded backend and kernel class must be vLLM's, and each verdict must be the comparison of
that answer with selector's decision for the same scenario (the plugin's Chooser)."""
from __future__ import annotations

import importlib

import parity
import pytest
import sim

from selector.engines import vllm as adapter
from selector.engines import vllm_observe


@pytest.fixture
def simulation():
    s = sim.Simulation()
    vllm_observe.install()
    yield s
    vllm_observe.uninstall()
    s.close()


def test_observe_records_vllms_choice_beside_selectors(monkeypatch, simulation):
    from vllm.model_executor.layers.quantization import modelopt
    assert vllm_observe.installed()
    kernels = importlib.import_module(adapter.LINEAR_KERNELS)
    moe, init = modelopt.select_nvfp4_moe_backend, modelopt.init_nvfp4_linear_kernel
    assert getattr(moe, "__selector_observe__", False)
    counts = {"agree": 0, "differ": 0, "kernels": set()}
    for s in sorted(sim.sweep(), key=lambda s: str(s.machine))[::40]:
        obs = vllm_observe.Observer(parity.MachineChooser(s))
        monkeypatch.setattr(vllm_observe, "OBSERVER", obs)
        with simulation.scenario(s):
            if s.op == "moe":
                try:
                    sim.moe_config(s, s.requested)
                except NotImplementedError:  # vLLM's MoE config refuses before any oracle
                    continue
                plain = parity.vllm_moe(s, moe.__selector_original__)
                seen = parity.vllm_moe(s, moe)
            else:
                plain = parity.vllm_linear(s, kernels.init_nvfp4_linear_kernel
                                           .__selector_original__)
                seen = parity.vllm_linear(s, init)
            d = parity.selector_decision(s)
        assert seen == plain, s.label()  # observing changes nothing
        assert len(obs.layers) == 1, s.label()
        e = obs.layers[0]
        name, error, kernel = plain
        assert e["vllm"]["kernel"] == kernel and bool(e["vllm"]["error"]) == bool(error)
        if kernel:
            assert e["vllm"]["backend"] == name, (s.label(), e["vllm"], plain)
            counts["kernels"].add(kernel)
        mine = d.engine.backend if d.selected else None
        assert e["selector"]["engine_backend"] == mine, s.label()
        want = "agree" if (e["vllm"]["backend"] or None) == mine else "differ"
        assert e["verdict"] == want, (s.label(), e)
        counts[want] += 1
    print(f"observe sweep: {counts['agree']} agree, {counts['differ']} differ, "
          f"{len(counts['kernels'])} kernel classes")
    assert counts["agree"] > 20 and counts["differ"] > 0 and len(counts["kernels"]) >= 4
