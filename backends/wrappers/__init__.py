"""The entry-point classes, one module per catalogue backend (its YAML file's `entry_point`,
`selector.backends.wrappers.<module>:<Class>`, names it), on `_base` (the selector gate, the
missing-package error) and, for FlashInfer's kernels, `_flashinfer`.

A wrapper prepares its weights with ``backends.prepare`` and, where it computes the layer itself,
runs ``backends.reference`` or ``backends.kernels``.
"""
