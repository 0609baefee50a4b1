"""selector/inspect/nvml_query.py in-process: the raw answers it reports for a fake
libnvidia-ml and a fake pynvml (tests/test_faults.py runs it as the child process it is)."""
import ctypes
import sys
import types

import pytest

from selector.inspect import nvml_query as nq


class Lib:
    """A fake libnvidia-ml: every call returns 0 (success) unless overridden; calls are kept."""

    def __init__(self, **overrides):
        self.overrides, self.calls = overrides, []

    def __getattr__(self, name):
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append(name)
            fn = self.overrides.get(name)
            return 0 if fn is None else fn(*args)
        return call


def _set(*values):
    def f(*refs):
        for ref, v in zip([r for r in refs if hasattr(r, "_obj")], values):
            ref._obj.value = v
        return 0
    return f


def _name(text):
    def f(*args):  # (handle, buffer, size) or, for the driver version, (buffer, size)
        *_, buf, n = args
        assert n == len(buf) == 96  # the size passed is the buffer's
        buf.value = text
        return 0
    return f


GOOD = dict(nvmlDeviceGetCount_v2=_set(2), nvmlSystemGetCudaDriverVersion=_set(13000),
            nvmlDeviceGetCudaComputeCapability=_set(12, 1),
            nvmlDeviceGetName=_name(b"NVIDIA GB10"),
            nvmlSystemGetDriverVersion=_name(b"580.95.05"))


def test_ctypes_good_answer_has_no_failure():
    lib = Lib(**GOOD)
    assert nq.query_ctypes(lib) == {
        "via": "libnvidia-ml", "failed": [], "count": 2, "driver": {"bytes": b"580.95.05".hex()},
        "cuda_driver": 13000, "capability": [12, 1], "name": {"bytes": b"NVIDIA GB10".hex()}}
    assert lib.calls[0] == "nvmlInit_v2" and lib.calls[-1] == "nvmlShutdown"


def test_ctypes_no_gpu_asks_no_handle():
    lib = Lib(**{**GOOD, "nvmlDeviceGetCount_v2": _set(0)})
    out = nq.query_ctypes(lib)
    assert out["count"] == 0 and "capability" not in out and "name" not in out
    assert "nvmlDeviceGetHandleByIndex_v2" not in lib.calls


def test_ctypes_values_the_library_did_not_write_stay_zero():
    out = nq.query_ctypes(Lib(nvmlDeviceGetCount_v2=lambda ref: 0,
                              nvmlSystemGetCudaDriverVersion=lambda ref: 0))
    assert out["count"] == 0 and out["cuda_driver"] == 0 and out["failed"] == []


def test_ctypes_each_failed_call_is_named_with_its_code():
    out = nq.query_ctypes(Lib(**{**GOOD, "nvmlSystemGetDriverVersion": lambda *a: 3,
                                 "nvmlDeviceGetName": lambda *a: 999}))
    assert out["failed"] == ["nvmlSystemGetDriverVersion returned 3",
                             "nvmlDeviceGetName returned 999"]
    assert "driver" not in out and "name" not in out and out["capability"] == [12, 1]
    out = nq.query_ctypes(Lib(nvmlInit_v2=lambda: 9))
    assert out == {"via": "libnvidia-ml", "failed": [], "init_error": "nvmlInit_v2 returned 9"}
    out = nq.query_ctypes(Lib(**{**GOOD, "nvmlDeviceGetHandleByIndex_v2": lambda *a: 5}))
    assert out["failed"] == ["nvmlDeviceGetHandleByIndex_v2 returned 5"]
    assert "capability" not in out


def test_plain_values():
    assert nq.plain(None) is None and nq.plain(True) is True and nq.plain(3) == 3
    assert nq.plain(1.5) == 1.5 and nq.plain("x") == "x"
    assert nq.plain(b"\xff") == {"bytes": "ff"}
    assert nq.plain((1, [b"a", None])) == [1, [{"bytes": "61"}, None]]
    assert nq.plain({1}) == {"repr": "{1}"}
    assert nq.plain("y" * 300) == "y" * 300  # strings are kept whole
    assert nq.plain(ctypes.c_int(7))["repr"].startswith("c_int(7)")

    class Bad:
        def __repr__(self):
            raise RuntimeError

    assert nq.plain(Bad()) == {"repr": "Bad"}
    assert len(nq.plain(type("Long", (), {"__repr__": lambda s: "z" * 500})())["repr"]) == 200


def _pynvml(monkeypatch, **fns):
    mod = types.ModuleType("pynvml")
    base = dict(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                nvmlDeviceGetCount=lambda: 1, nvmlSystemGetDriverVersion=lambda: "580.95.05",
                nvmlSystemGetCudaDriverVersion=lambda: 13000,
                nvmlDeviceGetHandleByIndex=lambda i: "h0",
                nvmlDeviceGetCudaComputeCapability=lambda h: (12, 0),
                nvmlDeviceGetName=lambda h: "NVIDIA RTX PRO 6000")
    for k, v in {**base, **fns}.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


def test_pynvml_good_answer(monkeypatch):
    handles = []
    _pynvml(monkeypatch, nvmlDeviceGetHandleByIndex=lambda i: handles.append(i) or f"h{i}")
    assert nq.query_pynvml() == {"via": "pynvml", "failed": [], "count": 1,
                                 "driver": "580.95.05", "cuda_driver": 13000,
                                 "capability": [12, 0], "name": "NVIDIA RTX PRO 6000"}
    assert handles == [0]  # GPU 0, the one selector decides for


def test_pynvml_no_gpu_or_a_failed_call_asks_no_handle(monkeypatch):
    asked = []
    _pynvml(monkeypatch, nvmlDeviceGetCount=lambda: 0,
            nvmlDeviceGetHandleByIndex=lambda i: asked.append(i))
    out = nq.query_pynvml()
    assert out["count"] == 0 and "capability" not in out and asked == []

    def boom():
        raise RuntimeError("driver mismatch")
    _pynvml(monkeypatch, nvmlSystemGetDriverVersion=boom,
            nvmlDeviceGetHandleByIndex=lambda i: asked.append(i))
    out = nq.query_pynvml()
    assert out["failed"] == ["nvmlSystemGetDriverVersion: driver mismatch"]
    assert out["driver"] is None and "capability" not in out and asked == []
    _pynvml(monkeypatch, nvmlDeviceGetHandleByIndex=lambda i: None)
    assert "capability" not in nq.query_pynvml()


def test_pynvml_init_errors(monkeypatch):
    class NVMLError_LibraryNotFound(Exception):
        pass

    def missing():
        raise NVMLError_LibraryNotFound("libnvidia-ml.so.1")
    _pynvml(monkeypatch, nvmlInit=missing)
    assert nq.query_pynvml() is None  # then libnvidia-ml and libcuda are asked

    def broken():
        raise RuntimeError("x" * 400)
    _pynvml(monkeypatch, nvmlInit=broken)
    out = nq.query_pynvml()
    assert out["via"] == "pynvml" and out["init_error"] == ("RuntimeError: " + "x" * 400)[:300]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert nq.query_pynvml() is None


@pytest.mark.parametrize("cuda_found, want", [(True, True), (False, False)])
def test_query_without_nvml_says_whether_a_driver_is_there(monkeypatch, cuda_found, want):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    tried = []

    def cdll(name):
        tried.append(name)
        if name == "libcuda-test.so" and cuda_found:
            return object()
        raise OSError(name)
    monkeypatch.setattr(nq.ctypes, "CDLL", cdll)
    assert nq.query("libnvml-test.so", "libcuda-test.so") == {"via": None, "driver_present": want}
    assert tried == ["libnvml-test.so", "libcuda-test.so"]
    tried.clear()
    nq.query()
    assert tried == [nq.NVML_LIBRARY, nq.CUDA_LIBRARY] == ["libnvidia-ml.so.1", "libcuda.so.1"]


def test_query_uses_the_library_it_loads(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    lib = Lib(**GOOD)
    monkeypatch.setattr(nq.ctypes, "CDLL", lambda name: lib)
    assert nq.query()["capability"] == [12, 1]


def test_ctypes_asks_gpu_0_and_reports_unwritten_capability_as_zero():
    asked = []

    def handle(index, ref):
        asked.append(index)
        return 0
    out = nq.query_ctypes(Lib(**{**GOOD, "nvmlDeviceGetHandleByIndex_v2": handle,
                                 "nvmlDeviceGetCudaComputeCapability": lambda *a: 0}))
    assert asked == [0] and out["capability"] == [0, 0]  # the parent refuses SM 0.0


def test_ctypes_without_a_count_asks_no_handle():
    lib = Lib(**{**GOOD, "nvmlDeviceGetCount_v2": lambda ref: 1})
    out = nq.query_ctypes(lib)
    assert "count" not in out and out["failed"] == ["nvmlDeviceGetCount_v2 returned 1"]
    assert "nvmlDeviceGetHandleByIndex_v2" not in lib.calls


def test_long_error_texts_are_cut_at_300_characters(monkeypatch):
    def boom(*a):
        raise RuntimeError("e" * 500)
    out = nq.query_ctypes(Lib(**{**GOOD, "nvmlDeviceGetCount_v2": boom}))
    assert out["failed"] == [("RuntimeError: " + "e" * 500)[:300]]
    out = nq.query_ctypes(Lib(nvmlInit_v2=boom))
    assert out["init_error"] == ("RuntimeError: " + "e" * 500)[:300]
    _pynvml(monkeypatch, nvmlDeviceGetCount=lambda: (_ for _ in ()).throw(OSError("o" * 500)))
    assert nq.query_pynvml()["failed"] == [("nvmlDeviceGetCount: " + "o" * 500)[:300]]
