"""Tests written against the mutation survivors of backends/children/probes (issue 48;
docs/guarantees.md, "Every module, sharded"): the probe functions called in this process, so that
a one-token change fails here and not only in the probe child, which the mutation tool's trace
does not see. The libraries are the installed ones; where a probe reads torch's view of a GPU,
the device is simulated (torch.cuda's queries), nothing else."""
from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

from selector.backends.children.probes import _util, declarations, import_probes

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------
# _util: find_symbol, why_absent, module_version


def test_find_symbol_imports_each_parent_and_says_each_failure_once():
    cands = [("no_such_pkg_48.sub", "x"), ("no_such_pkg_48.other", "y"), ("json", "no_attr"),
             ("json", "dumps")]
    obj, at, errors = _util.find_symbol(cands)
    import json
    assert obj is json.dumps and at == "json.dumps"
    assert [name for name, _ in errors] == ["no_such_pkg_48"]  # the parent, once
    assert isinstance(errors[0][1], ImportError)


def test_find_symbol_of_a_top_level_module_and_of_nothing():
    obj, at, errors = _util.find_symbol([("os", "sep")])
    import os
    assert (obj, at, errors) == (os.sep, "os.sep", [])
    assert _util.find_symbol([("json", "no_attr")]) == (None, None, [])


def test_why_absent_names_the_first_import_failure_else_where_it_looked():
    _, _, errors = _util.find_symbol([("no_such_pkg_48", "x")])
    assert len(errors) == 1
    text = _util.why_absent([("no_such_pkg_48", "x")], errors)
    assert text.startswith("importing no_such_pkg_48 fails with ")
    assert _util.why_absent([("json", "a"), ("json", "b"), ("os", "c")], []) == \
        "not found in json, os"
    assert _util.absent_message("X", [("json", "a")], []) == "X is absent: not found in json"


def test_module_version():
    assert _util.module_version(types.SimpleNamespace(__version__=(1, 2))) == "(1, 2)"
    assert _util.module_version(types.SimpleNamespace()) is None


# ---------------------------------------------------------------------------------------------
# import_probes: triton, torch's view of the GPU (simulated), import:<module>:<attr>


def test_triton_importable_with_the_installed_triton():
    pytest.importorskip("triton")
    r = import_probes.triton_importable(None, {})
    assert r["status"] == "ok", r
    assert r["details"]["installed"] is not None and r["details"]["module_version"]


@pytest.fixture
def gpu(monkeypatch):
    """torch sees two simulated GPUs: GPU 0 an SM 9.0 part, GPU 1 another."""
    torch = pytest.importorskip("torch")
    caps = {0: (9, 0), 1: (12, 1)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: caps[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: f"GPU-{i}")
    return torch


def test_torch_cuda_reports_gpu_0_and_compares_it_with_nvml(gpu):
    r = import_probes.torch_cuda(None, {"nvml": {"capability": [9, 0]}})
    assert r["status"] == "ok", r
    assert r["details"]["count"] == 2 and r["details"]["capability"] == [9, 0]
    assert r["details"]["name"] == "GPU-0"
    assert r["message"].endswith("sees 2 GPU(s); GPU 0 GPU-0, SM 9.0"), r["message"]
    r = import_probes.torch_cuda(None, {"nvml": {"capability": [10, 3]}})
    assert r["status"] == "failed"
    assert "SM 9.0, but NVML reports SM 10.3 for GPU 0" in r["message"], r["message"]
    assert import_probes.torch_cuda(None, {})["status"] == "ok"  # no NVML finding


def test_torch_cuda_without_a_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    r = import_probes.torch_cuda(None, {})
    assert r["status"] == "ok" and r["details"]["count"] == 0 and not r["details"]["available"]
    build = torch.version.cuda
    assert f"(CUDA build {build or 'none'})" in r["message"]
    r = import_probes.torch_cuda(None, {"nvml": {"capability": [9, 0], "name": "H100"}})
    assert r["status"] == "failed" and "cannot use the GPU NVML sees (H100)" in r["message"]


def test_import_attr():
    assert import_probes.import_attr("json:decoder.JSONDecoder", {})["status"] == "ok"
    r = import_probes.import_attr("json:decoder.Nope", {})
    assert r["status"] == "failed" and r["message"] == "json.decoder has no attribute 'Nope'"
    assert import_probes.import_attr("no_such_pkg_48", {})["status"] == "failed"


# ---------------------------------------------------------------------------------------------
# declarations: what FlashInfer declares, read in this process


def _catalogue_capabilities() -> set:
    """Every exact SM a device rule of the catalogue names ("10.7", ">=8.9"), as 107, 89."""
    found = set()
    for f in (REPO / "conf" / "backend").rglob("*.yaml"):
        for lst in re.findall(r"devices: \[([^\]]*)\]", f.read_text()):
            for m in re.finditer(r"(\d+)\.(\d+)\b", lst):
                found.add(int(m.group(1)) * 10 + int(m.group(2)))
    return found


def test_the_probe_universe_holds_every_sm_the_catalogue_names():
    """drift.py compares the catalogue's device rules with the library's declarations over the
    probe's universe: a capability missing from it is never compared."""
    named = _catalogue_capabilities()
    assert {89, 90, 100, 103, 107, 120, 121} <= named  # the parse reads the rules
    assert named - {75} <= set(declarations.CAPABILITIES)
    assert list(declarations.CAPABILITIES) == sorted(set(declarations.CAPABILITIES))


def test_flashinfer_declarations_read_in_process():
    pytest.importorskip("flashinfer")
    r = declarations.flashinfer_declarations(None, {})
    assert r["status"] == "ok", r["message"]
    d = r["details"]
    assert d["universe"] == list(declarations.CAPABILITIES)
    mm = importlib.import_module("flashinfer").mm_fp4
    checks = _checks(mm)
    assert d["mm_fp4_backends"] == sorted(checks)
    for b, fn in checks.items():  # its own list where it declares one, else asked per SM
        declared = getattr(fn, "_supported_ccs", None)
        want = sorted(int(c) for c in declared) if declared is not None else \
            [c for c in declarations.CAPABILITIES if mm.is_backend_supported(b, c)]
        assert d["capabilities"][f"mm_fp4:{b}"] == want, b
    assert "mm_fp4:cutlass" in d["capabilities"]
    for name, (mod, attr) in declarations._MOE.items():
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except Exception:  # noqa: BLE001 - said among the errors, not read
            assert f"moe:{name}" not in d["capabilities"]
            assert any(e.startswith(f"{mod}.{attr}: ") for e in d["errors"])
            continue
        assert d["capabilities"][f"moe:{name}"] == sorted(int(c) for c in fn._supported_ccs)
    assert not any(k.startswith("moe:cute_dsl") for k in d["min_cuda"])
    if "moe:b12x_fused_moe" in d["capabilities"]:
        src = importlib.import_module(declarations._MOE["b12x_fused_moe"][0])
        guard = declarations._CUDA_GUARD.search(__import__("inspect").getsource(src))
        assert d["min_cuda"].get("moe:b12x_fused_moe") == (f"{guard.group(1)}.0" if guard
                                                            else None)


def _checks(mm):  # type: ignore[no-untyped-def]
    import inspect
    return inspect.getclosurevars(mm.is_backend_supported).nonlocals["backend_checks"]


def test_flashinfer_declarations_without_flashinfer(monkeypatch):
    monkeypatch.setattr(declarations, "dist_version", lambda name: None)
    r = declarations.flashinfer_declarations(None, {})
    assert r["status"] == "skipped" and "not installed" in r["message"]


# ---------------------------------------------------------------------------------------------
# flashinfer_probes: symbol look-ups, the b12x GEMM, the CuTe-DSL MoE, mm_fp4, with the installed
# FlashInfer; metadata_probes: a built-in module


def test_symbols_sorts_found_absent_and_not_callable():
    from selector.backends.children.probes import flashinfer_probes as F
    objs, where, problems = F._symbols([("dumps", [("json", "dumps")]),
                                        ("nope", [("json", "nope")]),
                                        ("sep", [("os", "sep")])])
    import json
    assert objs == {"dumps": json.dumps} and where == {"dumps": "json.dumps"}
    assert problems[0] == "flashinfer nope is absent: not found in json"
    assert problems[1].startswith("flashinfer sep at os.sep is not callable")


def test_mm_fp4_lists_the_registered_backends():
    pytest.importorskip("flashinfer")
    from selector.backends.children.probes import flashinfer_probes as F
    mm = importlib.import_module("flashinfer").mm_fp4
    r = F.mm_fp4(None, {})
    assert r["status"] == "ok", r["message"]
    if callable(getattr(mm, "has_backend", None)):
        assert "importable; backends: " in r["message"], r["message"]
        want = [b for b in F.MM_FP4_BACKENDS if mm.has_backend(b)]
        assert list(r["details"]["backends"]) == want


def test_b12x_gemm_and_cute_dsl_moe_agree_with_the_library():
    pytest.importorskip("flashinfer")
    from selector.backends.children.probes import flashinfer_probes as F
    kernel, at, _ = _util.find_symbol([
        ("flashinfer.gemm", "Sm120B12xBlockScaledDenseGemmKernel"),
        ("flashinfer.gemm.kernels.dense_blockscaled_gemm_sm120_b12x",
         "Sm120B12xBlockScaledDenseGemmKernel"),
        ("flashinfer.gemm", "Sm120BlockScaledDenseGemmKernel"),
        ("flashinfer.gemm.kernels.dense_blockscaled_gemm_sm120", "Sm120BlockScaledDenseGemmKernel")])
    r = F.b12x_gemm(None, {})
    if kernel is None:
        assert r["status"] == "failed" and "is absent" in r["message"]
    else:
        assert r["details"]["found"]["kernel"] == at, r
        mm = importlib.import_module("flashinfer").mm_fp4
        if callable(getattr(mm, "has_backend", None)) and mm.has_backend("b12x"):
            assert "has no backend 'b12x'" not in r["message"], r["message"]
    avail, why = F._cute_dsl_available()
    r = F.cute_dsl_moe(None, {})
    assert r["details"]["cute_dsl_available"] == avail
    if avail is False:  # said first, before the symbols' own problems
        assert r["status"] == "failed" and r["message"].startswith(why), r["message"]
    else:  # nothing said of it: no empty problem either
        assert "" not in r["message"].split("; ") and "is_cute_dsl_available" not in \
            r["message"], r["message"]


def test_module_shadowing_of_a_built_in_module():
    from selector.backends.children.probes import metadata_probes as M
    r = M.module_shadowing("sys", {})
    assert r["status"] == "warning" and "'sys'" in r["message"], r


def test_flashinfer_declarations_with_nothing_readable_is_a_failure(monkeypatch):
    """Every FlashInfer module failing to import (a broken install): no declaration read, the
    errors are the finding."""
    real = importlib.import_module

    def broken(name, *a, **k):  # type: ignore[no-untyped-def]
        if name.split(".")[0] == "flashinfer":
            raise ImportError(f"no {name} here")
        return real(name, *a, **k)
    monkeypatch.setattr(declarations, "dist_version", lambda name: "0.0.1")
    monkeypatch.setattr(declarations.importlib, "import_module", broken)
    r = declarations.flashinfer_declarations(None, {})
    assert r["status"] == "failed", r["message"]
    assert r["details"]["errors"] and "no flashinfer" in r["message"]
