"""Installed into .venv-sglang by tools/sglang_env.sh (with a .pth line that imports it).

The PyPI torchvision wheel's C++ extension (torchvision/_C.so) links libtorch_cuda.so and
libc10_cuda.so, which a CPU torch does not have, so it does not load; torchvision then fails on
import at `torch.library.register_fake("torchvision::nms")` (and `::qnms`) in
`_meta_registrations.py` ("operator torchvision::nms does not exist"). SGLang 0.5.23 imports
torchvision unguarded (srt/multimodal/internvl_utils.py, reached from srt/configs).

This stand-in declares those two operator schemas (as torchvision's csrc/ops/nms.cpp does) the
first time torchvision is imported, so that torchvision's own Python code imports; no kernel is
registered: calling a torchvision C++ op raises, as it would with no extension at all.
Importing this module imports nothing; torch is imported only when torchvision is.
"""
import importlib.abc
import sys

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


class _DeclareOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        if not hasattr(torch.ops.torchvision, "nms"):
            lib = torch.library.Library("torchvision", "FRAGMENT")
            for schema in _SCHEMAS:
                lib.define(schema)
            _LIBS.append(lib)  # a Library deregisters its ops when collected
        return None  # the ordinary finders import the real torchvision


_LIBS: list = []
sys.meta_path.insert(0, _DeclareOps())
