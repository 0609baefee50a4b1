"""Machine inspection: the environment (GPU, CUDA, installed distributions), NVML in a child
process, deep probes, `doctor --verify` and version drift. Imports core and config only.
"""
