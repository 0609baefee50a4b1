"""What the installed kernel libraries declare about themselves, for the drift report.

Run in the deep-probe child process (after `import flashinfer`); selector/inspect/drift.py compares the
result with the catalogue's claims without importing anything. Each value is read from the
library's own declarations, never from selector's tables:
- FlashInfer: the `@supported_compute_capability` lists of its MoE entry points, the per-backend
  requirement lists of `mm_fp4` (`@backend_requirement`), its minimum-CUDA constant and guard for
  b12x, the b12x MoE activation sets and the TRT-LLM `ActivationType` enum, and the
  nvidia-cutlass-dsl range its distribution metadata requires;
- native b12x (distribution `b12x`, when installed): the module-level constants of its gating
  module (device set, minimum versions) and its distribution requirements.
"""
from __future__ import annotations

import importlib
import importlib.metadata as md
import inspect
import re
from typing import Any, Dict, List, Optional

from packaging.requirements import InvalidRequirement, Requirement

from ._util import describe_exc, dist_version, failed, ok, skipped

# Capabilities asked of `is_backend_supported` / `is_compute_capability_supported`.
CAPABILITIES = (75, 80, 86, 87, 89, 90, 100, 103, 107, 110, 120, 121)
_MOE = {  # name in the report -> (module, attribute)
    "b12x_fused_moe": ("flashinfer.fused_moe.cute_dsl.b12x_moe", "b12x_fused_moe"),
    "cute_dsl_fused_moe_nvfp4": ("flashinfer.fused_moe.cute_dsl.fused_moe",
                                 "cute_dsl_fused_moe_nvfp4"),
}
_CUDA_GUARD = re.compile(r"get_cuda_version\(\)\.major\s*<\s*(\d+)")


def _requires(dist: str) -> Dict[str, str]:
    """{requirement name: specifier} of a distribution's unconditional Requires-Dist."""
    out: Dict[str, str] = {}
    for text in md.requires(dist) or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None:
            out[req.name.lower()] = str(req.specifier)
    return out


def _ccs(fn: Any) -> Optional[List[int]]:
    ccs = getattr(fn, "_supported_ccs", None)
    return None if ccs is None else sorted(int(c) for c in ccs)


def _mm_fp4(errors: List[str]) -> Dict[str, Any]:
    try:
        mm = importlib.import_module("flashinfer").mm_fp4
        checks = inspect.getclosurevars(mm.is_backend_supported).nonlocals.get("backend_checks")
    except Exception as exc:  # noqa: BLE001
        errors.append(f"mm_fp4: {describe_exc(exc, 'flashinfer')}")
        return {}
    if not isinstance(checks, dict):
        errors.append("mm_fp4: its backend_requirement table was not found")
        return {}
    backends = {}
    for name, fn in checks.items():
        backends[name] = _ccs(fn) if _ccs(fn) is not None else \
            [cc for cc in CAPABILITIES if mm.is_backend_supported(name, cc)]
    return {"backends": backends,
            "experimental": sorted(getattr(mm, "experimental_backends", ()) or ())}


def flashinfer_declarations(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    version = dist_version("flashinfer-python")
    if version is None:
        return skipped("flashinfer-python is not installed")
    errors: List[str] = []
    out: Dict[str, Any] = {"library": "flashinfer-python", "version": version,
                           "universe": list(CAPABILITIES), "capabilities": {}, "min_cuda": {},
                           "activations": {}}
    for name, (mod, attr) in _MOE.items():
        try:
            m = importlib.import_module(mod)
            out["capabilities"][f"moe:{name}"] = _ccs(getattr(m, attr))
        except Exception as exc:  # noqa: BLE001 - e.g. no triton: said, then compared as absent
            errors.append(f"{mod}.{attr}: {describe_exc(exc, 'flashinfer')}")
            continue
        if name == "b12x_fused_moe":
            guard = _CUDA_GUARD.search(inspect.getsource(m))
            if guard:
                out["min_cuda"][f"moe:{name}"] = f"{guard.group(1)}.0"
    mm = _mm_fp4(errors)
    for backend, ccs in mm.get("backends", {}).items():
        out["capabilities"][f"mm_fp4:{backend}"] = ccs
    out["mm_fp4_backends"] = sorted(mm.get("backends", {}))
    out["mm_fp4_experimental"] = mm.get("experimental", [])
    try:
        gb = importlib.import_module("flashinfer.gemm.gemm_base")
        if hasattr(gb, "_MIN_B12X_CUDA_VERSION"):
            out["min_cuda"]["mm_fp4:b12x"] = str(gb._MIN_B12X_CUDA_VERSION)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"flashinfer.gemm.gemm_base: {describe_exc(exc, 'flashinfer')}")
    try:
        act = importlib.import_module(
            "flashinfer.fused_moe.cute_dsl.blackwell_sm12x.moe_activation")
        out["activations"]["b12x_moe"] = sorted(act.SUPPORTED_MOE_ACTIVATIONS)
        out["activations"]["b12x_moe_gated"] = sorted(act.GATED_MOE_ACTIVATIONS)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"b12x MoE activations: {describe_exc(exc, 'flashinfer')}")
    try:
        enum = importlib.import_module("flashinfer.tllm_enums").ActivationType
        out["activations"]["ActivationType"] = [m.name for m in enum]
    except Exception as exc:  # noqa: BLE001
        errors.append(f"flashinfer.tllm_enums.ActivationType: {describe_exc(exc, 'flashinfer')}")
    out["requires"] = _requires("flashinfer-python")
    out["errors"] = errors
    n = sum(len(v) for v in (out["capabilities"], out["min_cuda"], out["activations"]))
    if errors and n == 0:
        return failed("; ".join(errors), **out)
    note = f" ({len(errors)} not readable: {'; '.join(errors)})" if errors else ""
    return ok(f"flashinfer-python {version}: {n} declarations read{note}", **out)


def b12x_declarations(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    version = dist_version("b12x")
    if version is None:
        return skipped("the b12x distribution is not installed (a top-level `b12x` module from "
                       "flashinfer-python proves nothing)")
    out: Dict[str, Any] = {"library": "b12x", "version": version, "requires": _requires("b12x")}
    try:
        gating = importlib.import_module("b12x._lib.gating")
    except Exception as exc:  # noqa: BLE001
        return ok(f"b12x {version}: gating module not importable ({describe_exc(exc)}); "
                  "requirements only", **out)
    consts = {name: value for name, value in vars(gating).items()
              if name.isupper() and isinstance(value, (str, int))}
    out["constants"] = consts
    out["universe"] = list(CAPABILITIES)
    out["devices"] = _b12x_devices(gating)
    return ok(f"b12x {version}: gating read ({', '.join(f'{k}={v}' for k, v in consts.items())}"
              f"; devices {out['devices']})", **out)


def _b12x_devices(gating: Any) -> Optional[List[int]]:
    """The capabilities b12x's own `is_b12x` accepts, asked with each capability in turn (its
    device query is swapped for the duration: no GPU needed)."""
    ask, query = getattr(gating, "is_b12x", None), getattr(gating, "get_compute_capability", None)
    if not callable(ask) or not callable(query):
        return None
    found = []
    try:
        for cc in CAPABILITIES:
            gating.get_compute_capability = lambda device=None, cc=cc: (cc // 10, cc % 10)
            if ask():
                found.append(cc)
    finally:
        gating.get_compute_capability = query
    return found
