"""Issue 22 item 9: overrides anywhere after the command; one boolean parser for every
environment flag; SELECTOR_VLLM_OVERRIDES checked when the vLLM plugin registers."""
from __future__ import annotations

import pytest
from helpers import run_main

import selector
from selector.core import env_vars
from selector.engines import vllm as adapter


@pytest.mark.parametrize("argv", [
    ["explain", "--why", "cutlass", "platform=b200", "--format", "line", "stack=vllm_0_32"],
    ["explain", "platform=b200", "--format", "json", "stack=vllm_0_32", "--why", "cutlass"],
    ["explain", "--format", "line", "platform=b200", "--why", "cutlass", "stack=vllm_0_32"],
])
def test_overrides_after_why_and_format(argv):
    """Every override counts wherever it stands (before the fix: 'unrecognized arguments')."""
    rc, out, err = run_main(argv)
    assert rc == 0, err
    assert "cutlass" in out and "eligible" in out  # stack=vllm_0_32 reached the decision


def test_overrides_keep_their_order():
    """A later override wins, also across an option between them."""
    rc, out, _ = run_main(["explain", "platform=b200", "--format", "line", "platform=cpu"])
    assert "-> emulation" in out or "-> none" in out
    rc2, out2, _ = run_main(["explain", "platform=cpu", "--format", "line", "platform=b200",
                             "stack=vllm_0_32"])
    assert rc2 == 0 and "flashinfer_trtllm" in out2


def test_unknown_option_after_overrides_is_still_refused():
    rc, out, err = run_main(["explain", "platform=b200", "--bogus", "layer.ep_size=2"])
    assert rc == 2 and "unrecognized arguments: --bogus" in err and "Traceback" not in err


def test_matrix_overrides_after_options():
    rc, out, err = run_main(["matrix", "--op", "moe", "layer=nemotron_moe", "--format", "json",
                             "layer.ep_size=2"])
    assert rc == 0, err


@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("yes", True), ("on", True),
                                      ("TRUE", True), (" Yes ", True), ("0", False),
                                      ("false", False), ("no", False), ("off", False),
                                      ("", False)])
def test_selector_vllm_accepts_every_boolean_spelling(monkeypatch, value, on):
    """SELECTOR_VLLM=true/yes/on turn the plugin on (before the fix only "1" did)."""
    calls = []
    monkeypatch.setattr(adapter, "install", lambda: calls.append(1))
    monkeypatch.setenv(adapter.ENV_ENABLE, value)
    monkeypatch.delenv(adapter.ENV_OVERRIDES, raising=False)
    adapter.register()
    assert bool(calls) is on


@pytest.mark.parametrize("value", ["2", "enable", "ture", "1 1"])
def test_selector_vllm_unknown_value_is_an_error_naming_it(monkeypatch, value):
    calls = []
    monkeypatch.setattr(adapter, "install", lambda: calls.append(1))
    monkeypatch.setenv(adapter.ENV_ENABLE, value)
    with pytest.raises(selector.SelectorError) as e:
        adapter.register()
    assert "SELECTOR_VLLM" in str(e.value) and repr(value) in str(e.value)
    assert "1/true/yes/on" in str(e.value)
    assert not calls


@pytest.mark.parametrize("name", ["SELECTOR_NO_CACHE", "SELECTOR_VLLM"])
def test_one_boolean_parser(monkeypatch, name):
    """Every boolean variable reads through env_vars.flag: the same spellings, the same error."""
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(selector.SelectorError, match=name):
        env_vars.flag(name)


@pytest.mark.parametrize("text", ["policy.strict=false 'stack=vllm_0_32",
                                  'platform.packages.vllm="0.32.0', "a=b\\"])
def test_unbalanced_quote_in_overrides_is_named_at_register(monkeypatch, text):
    """Before the fix: a bare ValueError('No closing quotation') at the first NVFP4 layer."""
    calls = []
    monkeypatch.setattr(adapter, "install", lambda: calls.append(1))
    monkeypatch.setenv(adapter.ENV_ENABLE, "1")
    monkeypatch.setenv(adapter.ENV_OVERRIDES, text)
    with pytest.raises(selector.SelectorError) as e:
        adapter.register()
    assert str(e.value).startswith("SELECTOR_VLLM_OVERRIDES: ")
    assert not calls


def test_overrides_words(monkeypatch):
    monkeypatch.setenv(adapter.ENV_OVERRIDES, "stack=vllm_0_32 'policy.exclude=[a, b]'")
    assert env_vars.words(adapter.ENV_OVERRIDES) == ["stack=vllm_0_32", "policy.exclude=[a, b]"]
