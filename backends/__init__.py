"""Kernel backends that a selector decision names (catalogue ``entry_point`` strings "module:Class").

``backends.nvfp4`` (NVFP4 quantize/dequantize and scale layouts), ``backends.reference`` (the
reference linear layer and fused MoE: the ``emulation`` backend and the oracle for the others) and
``backends.prepare`` (each backend's weight preparation, pure functions) hold the shared code; one
module per catalogue backend holds its entry-point classes. Importing this package or any of those
modules imports neither torch nor flashinfer: they are imported inside the functions that use them,
so that ``import selector`` stays cheap and the catalogue may resolve entry points.
"""
