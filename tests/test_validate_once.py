"""``backends.common.validate.once``: per-call checks of a layer's persistent tensors are cached on the
tensor's identity and version, so an in-place change is checked again and a freed tensor leaves
nothing behind."""
from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from selector.backends.common import validate  # noqa: E402
from selector.backends.reference.nvfp4 import _check_scale_arg  # noqa: E402


def test_computed_once_per_version_and_dropped_with_the_tensor():
    t = torch.ones(3)
    calls = []
    box = [t]

    def fn():
        calls.append(1)
        return float(box[0].sum())
    assert validate.once(t, "k", fn) == 3.0 and validate.once(t, "k", fn) == 3.0
    assert len(calls) == 1
    assert validate.once(t, "other", fn) == 3.0 and len(calls) == 2  # keys apart
    t.mul_(2)  # an in-place write bumps the version: computed again
    assert validate.once(t, "k", fn) == 6.0 and len(calls) == 3
    u = torch.ones(3)  # another tensor, equal values: its own entry
    assert validate.once(u, "k", fn) == 6.0 and len(calls) == 4
    tid = id(t)
    box.clear()
    del t
    gc.collect()
    assert tid not in validate._ONCE


def test_a_checked_scale_made_bad_in_place_is_refused_on_the_next_call():
    s = torch.full((4,), 0.5)
    assert _check_scale_arg(s, "fc2_input_scale", 4) is s
    assert _check_scale_arg(s, "fc2_input_scale", 4) is s  # cached: no second check
    s[2] = float("nan")
    with pytest.raises(ValueError, match="fc2_input_scale must be finite and > 0"):
        _check_scale_arg(s, "fc2_input_scale", 4)
    bad = torch.tensor(-1.0)
    for _ in range(2):  # a bad scale is never cached as checked
        with pytest.raises(ValueError, match="finite and > 0"):
            _check_scale_arg(bad, "fc1_input_scale", 4)
