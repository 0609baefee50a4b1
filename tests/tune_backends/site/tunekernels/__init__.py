"""A correct but deliberately slow NVFP4 linear backend (tests/test_tune.py): selector's
emulation, then a fixed sleep, so that a measurement must rank it after emulation."""
import time

from selector.backends.wrappers.emulation import EmulationLinear

SLEEP_S = 0.25


class SlowEmulationLinear(EmulationLinear):
    def apply(self, x, prepared, *, out=None):
        y = super().apply(x, prepared, out=out)
        time.sleep(SLEEP_S)
        return y
