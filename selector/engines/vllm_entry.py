"""vLLM's general-plugin entry point (pyproject.toml's `vllm.general_plugins`): with
SELECTOR_VLLM=observe the shadow mode (selector/engines/vllm_observe.py: vLLM decides, selector's
choice is logged beside its own); otherwise the plugin proper (selector/engines/vllm.py), which
acts only with SELECTOR_VLLM=1. Its own module so that neither of the two imports the other's
dispatch."""
from __future__ import annotations


def register() -> None:
    from selector.engines import vllm, vllm_observe
    if vllm_observe.requested():
        vllm_observe.register()
        return
    vllm.register()
