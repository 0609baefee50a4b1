"""Kernel backends that a selector decision names (catalogue ``entry_point`` strings "module:Class").

The package is built in floors, bottom to top (:data:`FLOORS`); a module imports only its own
sub-package and the floors below it, never one above (tests/test_layers.py checks it, imports
inside functions included):

- ``common``: constants several floors share and the one input check (``validate``);
- ``kernels``: the project's own Triton kernels;
- ``formats``: the NVFP4 and FP8 number formats, quantizers and checkpoint containers;
- ``prepare``: each backend's weight preparation, pure functions;
- ``reference``: the reference linear layer and fused MoE (the oracle, and the ``emulation``
  backend's computation);
- ``wrappers``: the entry-point classes, one module per catalogue backend;
- ``children``: the child-process entry points (``tune``, ``doctor --verify``, deep probes).

Importing this package or any of those modules imports neither torch nor flashinfer: they are
imported inside the functions that use them, so that ``import selector`` stays cheap and the
catalogue may resolve entry points.
"""

#: the floors of ``backends``, bottom to top: each sub-package imports only its own modules and
#: the floors below it (the one list tests/test_layers.py checks and docs/architecture.md shows)
FLOORS = ("common", "kernels", "formats", "prepare", "reference", "wrappers", "children")
