"""Engine adapters: vLLM (`selector.engines.vllm`, its plugin) and SGLang
(`selector.engines.sglang`). The engine registry is `selector.core.engines`.
"""
