"""Deliberately wrong NVFP4 backends for `selector doctor --verify` (tests/test_verify.py,
tools/h200_verify.sh), registered under the `selector.backends` entry-point group by the
dist-info next to this package, as a third-party package would register its backends."""
import ctypes
import os
import subprocess
import time

import torch

from selector.backends.formats.nvfp4 import LinearWeights, NVFP4Tensor
from selector.backends.wrappers.emulation import EmulationLinear, EmulationMoE


class FlipSignMoE(EmulationMoE):
    """Returns -y: a sign error in a kernel's epilogue."""
    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        return -super().apply(x, prepared, topk_weights, topk_ids, out=out)


class DropScaleLinear(EmulationLinear):
    """Forgets the weight's global scale (weight_scale_2) in its weight preparation."""
    def prepare(self, weights):
        w = weights.weight
        return super().prepare(LinearWeights(NVFP4Tensor(w.packed, w.block_scale,
                                                         torch.ones_like(w.scale_2)),
                                             weights.input_scale, weights.bias))


class CrashMoE(EmulationMoE):
    """Reads address 0: a kernel's illegal memory access kills the process (SIGSEGV)."""
    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        ctypes.string_at(0)


class DeviceAssertLinear(EmulationLinear):
    """Indexes out of bounds on the device: a CUDA device-side assert (IndexError on the CPU)."""
    def apply(self, x, prepared, *, out=None):
        y = super().apply(x, prepared, out=out)
        return y + torch.zeros(4, device=y.device)[torch.tensor([1 << 20], device=y.device)]


class HangLinear(EmulationLinear):
    """Starts a helper process and never returns."""
    def apply(self, x, prepared, *, out=None):
        helper = subprocess.Popen(["sleep", "3600"])
        with open(os.environ["WRONG_HELPER_PID"], "w") as fh:
            fh.write(str(helper.pid))
        time.sleep(3600)
