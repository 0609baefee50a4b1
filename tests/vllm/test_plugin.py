"""selector as vLLM's general plugin: loaded by vLLM's own loader, vLLM builds selector's choice
for every NVFP4 MoE and linear layer of the sweep, and a refusal carries the explanation."""
from __future__ import annotations

import importlib
import importlib.metadata as md

import parity
import pytest
import sim

from selector.engines import vllm as adapter

PLUGIN = "selector.engines.vllm_entry:register"


@pytest.fixture(scope="module")
def entry_point(tmp_path_factory):
    """selector's `vllm.general_plugins` entry point: the installed one (pip install -e .), or
    the same entry point in a throw-away distribution when selector runs from a checkout."""
    found = [e for e in md.entry_points(group="vllm.general_plugins") if e.name == "selector"]
    if found:
        assert found[0].value == PLUGIN
        yield found[0]
        return
    root = tmp_path_factory.mktemp("dist")
    info = root / "selector_checkout-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: selector-checkout\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\nselector = {PLUGIN}\n")
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(root))
    importlib.invalidate_caches()
    yield next(e for e in md.entry_points(group="vllm.general_plugins") if e.name == "selector")
    mp.undo()


def load_plugins(monkeypatch, enabled: bool) -> None:
    import vllm.plugins
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    if enabled:
        monkeypatch.setenv(adapter.ENV_ENABLE, "1")
    else:
        monkeypatch.delenv(adapter.ENV_ENABLE, raising=False)
    vllm.plugins.load_general_plugins()


@pytest.fixture
def simulation():
    s = sim.Simulation()
    yield s
    s.close()
    adapter.uninstall()


def test_plugin_is_inert_without_selector_vllm(entry_point, monkeypatch, simulation):
    load_plugins(monkeypatch, enabled=False)
    assert not adapter.installed()


def built(s: sim.Scenario):
    """What vLLM builds for scenario `s` with the plugin, through the names modelopt imported:
    (backend, error, kernel class); backend "config" when vLLM's MoE config itself refuses the
    layer on this platform (before any backend is asked)."""
    from vllm.model_executor.layers.quantization import modelopt
    if s.op == "moe":
        try:
            sim.moe_config(s, s.requested)
        except NotImplementedError as exc:
            return "config", str(exc), None
        return parity.vllm_moe(s, modelopt.select_nvfp4_moe_backend)
    kernels = importlib.import_module(adapter.LINEAR_KERNELS)
    hook = kernels._get_linear_backend
    original = hook.__selector_original__
    hook.__selector_original__ = lambda *, quantization: s.requested  # vLLM's --linear-backend
    try:
        kernel = modelopt.init_nvfp4_linear_kernel(use_a16=s.quant == "nvfp4_w4a16")
    except ValueError as exc:
        return None, str(exc).splitlines()[0], None
    finally:
        hook.__selector_original__ = original
    return parity.linear_kernel_name(kernel), "", type(kernel).__name__


def plugin_overrides(s: sim.Scenario) -> str:
    """SELECTOR_VLLM_OVERRIDES for scenario `s`: vLLM 0.32.0's stack with the machine's packages."""
    return " ".join([parity.STACK, *s.selector_overrides()])


def test_vllm_builds_selectors_choice_over_the_sweep(entry_point, monkeypatch, simulation):
    load_plugins(monkeypatch, enabled=True)
    assert adapter.installed()
    rebound = set(adapter.iter_rebound())
    assert "vllm.model_executor.layers.quantization.modelopt.select_nvfp4_moe_backend" in rebound
    assert "vllm.model_executor.layers.quantization.modelopt.init_nvfp4_linear_kernel" in rebound
    counts = {"built": 0, "refused": 0, "config": 0}
    # every fifth scenario of the whole space, sorted by machine (tests/vllm/test_parity.py
    # runs all of it against vLLM untouched)
    for s in sorted(sim.sweep(), key=lambda s: str(s.machine))[::5]:
        monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
        with simulation.scenario(s):
            d = parity.selector_decision(s)
            name, error, kernel = built(s)
        if name == "config":  # vLLM's CPU platform refuses a non-gated MoE config outright
            assert d.selected is None and s.capability is None, s.label()
            counts["config"] += 1
        elif d.selected is None:
            assert name is None and "selector refuses" in error, s.label()
            counts["refused"] += 1
        else:
            assert (name, kernel) == (d.engine.backend, d.engine.kernel), \
                (s.label(), name, kernel, error)
            counts["built"] += 1
    print(f"plugin sweep: {sum(counts.values())} scenarios, {counts['built']} built as selector "
          f"chose (backend and kernel), {counts['refused']} refused with selector's "
          f"explanation, {counts['config']} refused by vLLM's MoE config on its CPU platform")
    assert counts["built"] > 1000 and counts["refused"] > 50


def sweep_through_plugin(monkeypatch, simulation, space, built, what):
    """Each scenario of `space` through the loaded plugin: `built(s)` is vLLM's (backend,
    error, kernel) from its own oracle (the rebound name); vLLM builds selector's choice, or
    selector refused and vLLM's error carries the refusal. Returns the counts."""
    counts = {"built": 0, "refused": 0, "config": 0}
    for s in space:
        monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
        with simulation.scenario(s):
            try:
                sim.moe_config(s, s.requested)
            except NotImplementedError:
                counts["config"] += 1
                continue
            d = parity.selector_decision(s)
            name, error, kernel = built(s)
        if d.selected is None:
            assert name is None and "selector refuses" in error, (s.label(), name, error)
            counts["refused"] += 1
        else:
            assert (name, kernel) == (d.engine.backend, d.engine.kernel), \
                (s.label(), name, kernel, error)
            counts["built"] += 1
    print(f"plugin {what} sweep: {len(space)} scenarios, {counts['built']} built as selector "
          f"chose, {counts['refused']} refused with selector's explanation, {counts['config']} "
          "refused by vLLM's MoE config on its CPU platform")
    return counts


def test_vllm_builds_selectors_choice_for_fp8_moe(entry_point, monkeypatch, simulation):
    """select_fp8_moe_backend through the names vLLM's FP8 quant method imported: vLLM builds
    selector's choice (backend and kernel class) or both refuse, over a sample of the FP8
    sweep, with allow_vllm_cutlass and VLLM_MOE_USE_DEEP_GEMM as the scenario sets them."""
    load_plugins(monkeypatch, enabled=True)
    from vllm.model_executor.layers.quantization import fp8 as fp8_method
    rebound = set(adapter.iter_rebound())
    assert "vllm.model_executor.layers.quantization.fp8.select_fp8_moe_backend" in rebound
    assert "vllm.model_executor.layers.fused_moe.oracle.fp8.select_fp8_moe_backend" in rebound
    space = sorted(sim.fp8_sweep(), key=lambda s: str(s.machine))[::23]
    counts = sweep_through_plugin(monkeypatch, simulation, space, lambda s: parity.vllm_moe(
        s, fp8_method.select_fp8_moe_backend), "FP8")
    assert counts["built"] > 500 and counts["refused"] > 20
    assert {s.allow_cutlass for s in space} == {True, False}
    assert {s.deep_gemm_env for s in space} == {None, "0", "1"}


def test_fp8_switches_reach_selector_and_its_refusal(entry_point, monkeypatch, simulation):
    """allow_vllm_cutlass=False (the fp8 quant method's) keeps vLLM's CUTLASS MoE out: asked
    for explicitly, vLLM's error is selector's refusal naming the switch."""
    load_plugins(monkeypatch, enabled=True)
    from vllm.model_executor.layers.quantization import fp8 as fp8_method
    s = sim.Scenario("10.0", "12.8", sim.FLASHINFER, None, "moe", "fp8_channel", "silu", True,
                     requested="cutlass", allow_cutlass=False)
    monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
    wk, ak = sim.quant_keys(s)
    with simulation.scenario(s), pytest.raises(ValueError) as exc:  # keywords, as Fp8MoEMethod
        fp8_method.select_fp8_moe_backend(config=sim.moe_config(s, s.requested), weight_key=wk,
                                          activation_key=ak, allow_vllm_cutlass=False)
    text = str(exc.value)
    assert text.startswith("selector refuses moe_backend='cutlass' for this layer")
    assert "[exclude]" in text and "excluded: cutlass" in text and "allow_vllm_cutlass" in text
    with simulation.scenario(s):
        backend, experts = fp8_method.select_fp8_moe_backend(
            sim.moe_config(s, s.requested), *sim.quant_keys(s), allow_vllm_cutlass=True)
    assert (backend.value, experts.__name__) == ("VLLM_CUTLASS", "TritonOrCutlassExperts")


def test_vllm_builds_selectors_choice_for_mxfp8_moe(entry_point, monkeypatch, simulation):
    """select_mxfp8_moe_backend through the name ModelOpt's MXFP8 method imported: vLLM builds
    selector's choice or both refuse, over the MXFP8 scenarios of the MX sweep."""
    load_plugins(monkeypatch, enabled=True)
    rebound = set(adapter.iter_rebound())
    assert "vllm.model_executor.layers.quantization.modelopt.select_mxfp8_moe_backend" in rebound
    assert "vllm.model_executor.layers.fused_moe.oracle.mxfp8.select_mxfp8_moe_backend" in rebound
    # vLLM's wheel bundles DeepGEMM and triton_kernels (the sweep's builds without them are
    # parity questions: selector's packages do not describe vLLM's vendored copies)
    space = sorted((s for s in sim.sweep_mx() if s.oracle == "mxfp8" and s.deep_gemm and
                    s.triton_kernels), key=lambda s: str(s.machine))[::2]
    counts = sweep_through_plugin(monkeypatch, simulation, space,
                                  lambda s: parity.vllm_mx(s)[:3], "MXFP8")  # the rebound name
    assert counts["built"] > 50 and counts["refused"] > 10


def test_strict_refusal_raises_vllms_error_with_the_explanation(entry_point, monkeypatch,
                                                                  simulation):
    load_plugins(monkeypatch, enabled=True)
    from vllm.model_executor.layers.quantization import modelopt
    s = sim.Scenario("12.0", "12.8", sim.FLASHINFER, None, "moe", "nvfp4", "relu2", False,
                     requested="flashinfer_b12x")
    monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s))
    with simulation.scenario(s), pytest.raises(ValueError) as exc:
        modelopt.select_nvfp4_moe_backend(sim.moe_config(s, s.requested), *sim.quant_keys(s))
    text = str(exc.value)
    assert "policy.moe_backend=flashinfer_b12x was requested but fails 1 rule(s)" in text
    assert "[cuda]" in text and "CUDA 13" in text and "flashinfer_cutlass" in text


def test_lenient_policy_falls_back_and_vllm_builds_it(entry_point, monkeypatch, simulation):
    load_plugins(monkeypatch, enabled=True)
    from vllm.model_executor.layers.quantization import modelopt
    s = sim.Scenario("12.0", "12.8", sim.FLASHINFER, None, "moe", "nvfp4", "relu2", False,
                     requested="flashinfer_b12x")
    monkeypatch.setenv(adapter.ENV_OVERRIDES, plugin_overrides(s) + " policy.strict=false")
    with simulation.scenario(s):
        backend, _ = modelopt.select_nvfp4_moe_backend(sim.moe_config(s, s.requested),
                                                       *sim.quant_keys(s))
    assert backend.value == "FLASHINFER_CUTLASS"


@pytest.mark.parametrize("value", ["true", "yes", "ON"])
def test_any_true_spelling_turns_the_plugin_on(entry_point, monkeypatch, simulation, value):
    """Issue 22 item 9: SELECTOR_VLLM=true/yes/on, through vLLM's own plugin loader."""
    import vllm.plugins
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.setenv(adapter.ENV_ENABLE, value)
    vllm.plugins.load_general_plugins()
    assert adapter.installed()


@pytest.mark.parametrize("env", [{"SELECTOR_VLLM": "enable"},
                                 {"SELECTOR_VLLM": "1", "SELECTOR_VLLM_OVERRIDES": "a='b"}])
def test_bad_plugin_variables_stop_vllm_naming_them(entry_point, monkeypatch, simulation, env):
    import vllm.plugins

    import selector
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(selector.SelectorError, match=sorted(env)[-1]):
        vllm.plugins.load_general_plugins()
    assert not adapter.installed()
