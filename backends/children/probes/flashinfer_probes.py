"""Probes of flashinfer's NVFP4 entry points (run in the child process, after `import flashinfer`).

Symbol names are those of flashinfer-python 0.7.4, with the older layouts that
FlashInfer's history records: the b12x dense GEMM kernel was
`flashinfer.gemm.kernels.dense_blockscaled_gemm_sm120.Sm120BlockScaledDenseGemmKernel` in 0.6.9
and is `...dense_blockscaled_gemm_sm120_b12x.Sm120B12xBlockScaledDenseGemmKernel` from 0.6.10
(#3128); the MoE entry points are exported from `flashinfer`, `flashinfer.fused_moe` and
`flashinfer.fused_moe.cute_dsl` (which flashinfer imports inside `suppress(ImportError)`, so a
missing dependency such as triton makes them silently absent: the probe imports the defining
module to say why).
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._util import absent_message, describe_exc, dist_version, failed, find_symbol, ok, warning, why_absent

PKG = "flashinfer"
MM_FP4_BACKENDS = ("cudnn", "trtllm", "cutlass", "cute-dsl", "b12x")
CAPABILITIES = (75, 80, 86, 89, 90, 100, 103, 107, 110, 120, 121)


def _cands(attr: str, *modules: str) -> List[Tuple[str, str]]:
    return [(m, attr) for m in modules]


def _symbols(wanted: Sequence[Tuple[str, List[Tuple[str, str]]]]
             ) -> Tuple[Dict[str, Any], Dict[str, Optional[str]], List[str]]:
    """Look up each wanted symbol; (objects, where found, absence messages)."""
    objs, where, problems = {}, {}, []
    absent: Dict[str, List[str]] = {}  # why -> names, so one cause is said once
    for name, cands in wanted:
        obj, at, errors = find_symbol(cands)
        if obj is None:
            why = why_absent(cands, errors, PKG)
            absent.setdefault(why, []).append(name)
        elif not callable(obj):
            problems.append(f"flashinfer {name} at {at} is not callable ({type(obj).__name__})")
        else:
            objs[name], where[name] = obj, at
    for why, names in absent.items():
        verb = "is" if len(names) == 1 else "are"
        problems.insert(0, f"flashinfer {' and '.join(names)} {verb} absent: {why}")
    return objs, where, problems


def _defined_in(obj: Any) -> str:
    return getattr(obj, "__module__", None) or "?"


def _ccs(fn: Any) -> Optional[List[int]]:
    ccs = getattr(fn, "_supported_ccs", None)
    try:
        return sorted(int(c) for c in ccs) if ccs is not None else None
    except (TypeError, ValueError):
        return None


def _finish(what: str, objs, where, problems, extra: str = "", **details):
    details["found"] = where
    if problems:
        return failed("; ".join(problems), **details)
    found = ", ".join(sorted(set(where.values())))
    defined = ", ".join(sorted({_defined_in(o) for o in objs.values()}))
    return ok(f"{what} importable (found as {found}; defined in {defined}){extra}", **details)


# ---------------------------------------------------------------------------------------------

def b12x_moe(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    mods = (PKG, f"{PKG}.fused_moe", f"{PKG}.fused_moe.cute_dsl",
            f"{PKG}.fused_moe.cute_dsl.b12x_moe")
    objs, where, problems = _symbols([("b12x_fused_moe", _cands("b12x_fused_moe", *mods)),
                                      ("B12xMoEWrapper", _cands("B12xMoEWrapper", *mods))])
    ccs = _ccs(objs.get("b12x_fused_moe"))
    extra = f"; declared capabilities {', '.join(map(str, ccs))}" if ccs else ""
    return _finish("b12x_fused_moe and B12xMoEWrapper", objs, where, problems, extra,
                   capabilities=ccs)


_REMOVED_DSL_APIS = (
    # (pattern in the kernel's source, attribute of cutlass.cute, what happened, source)
    (re.compile(r"\bcute\.make_fragment\s*\("), "make_fragment",
     "nvidia-cutlass-dsl 4.6.0 removed cute.make_fragment",
     "FlashInfer #3922 (flashinfer 0.6.14-0.6.15.post1; fixed in 0.6.16)"),
)


def _removed_api_calls(kernel: Any) -> List[str]:
    """DSL APIs the kernel's source calls that the installed cutlass.cute lacks."""
    mod = sys.modules.get(_defined_in(kernel))
    path = getattr(mod, "__file__", None)
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return []
    hits = [(p, attr, what, src) for p, attr, what, src in _REMOVED_DSL_APIS if p.search(text)]
    if not hits:
        return []
    try:
        cute = importlib.import_module("cutlass.cute")
    except Exception:  # noqa: BLE001 - the DSL itself is probed elsewhere
        return []
    dsl = dist_version("nvidia-cutlass-dsl") or "?"
    return [f"{_defined_in(kernel)} calls cute.{attr}(), but the installed nvidia-cutlass-dsl "
            f"{dsl} has no cute.{attr} ({what}): the kernel raises AttributeError when it "
            f"compiles ({src}); use flashinfer-python>=0.6.16 or nvidia-cutlass-dsl<4.6"
            for _, attr, what, src in hits if not hasattr(cute, attr)]


def b12x_gemm(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    new, old = "Sm120B12xBlockScaledDenseGemmKernel", "Sm120BlockScaledDenseGemmKernel"
    kernels = f"{PKG}.gemm.kernels"
    cands = [(f"{PKG}.gemm", new), (f"{kernels}.dense_blockscaled_gemm_sm120_b12x", new),
             (f"{PKG}.gemm", old), (f"{kernels}.dense_blockscaled_gemm_sm120", old)]
    kernel, at, errors = find_symbol(cands)
    if kernel is None or at is None:
        return failed(absent_message(f"the b12x dense GEMM kernel ({new}, or {old} in 0.6.9)",
                                     cands, errors, PKG))
    details: Dict[str, Any] = {"found": {"kernel": at}}
    problems = _removed_api_calls(kernel)
    mm, mm_at, mm_errors = find_symbol([(PKG, "mm_fp4"), (f"{PKG}.gemm", "mm_fp4")])
    has = getattr(mm, "has_backend", None)
    if mm is None:
        problems.append(absent_message("flashinfer mm_fp4", [(PKG, "mm_fp4")], mm_errors, PKG))
    elif callable(has):
        try:
            if not has("b12x"):
                problems.append("flashinfer mm_fp4 has no backend 'b12x' (has_backend('b12x') "
                                "is False)")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"mm_fp4.has_backend('b12x') raised {describe_exc(exc, PKG)}")
    if problems:
        return failed("; ".join(problems), **details)
    return ok(f"{at.rsplit('.', 1)[-1]} importable (found as {at}; defined in "
              f"{_defined_in(kernel)}); mm_fp4 backend 'b12x' registered", **details)


def cutlass_moe(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    objs, where, problems = _symbols([("cutlass_fused_moe", _cands(
        "cutlass_fused_moe", PKG, f"{PKG}.fused_moe", f"{PKG}.fused_moe.core"))])
    return _finish("cutlass_fused_moe", objs, where, problems)


def trtllm_moe(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    objs, where, problems = _symbols([("trtllm_fp4_block_scale_moe", _cands(
        "trtllm_fp4_block_scale_moe", PKG, f"{PKG}.fused_moe", f"{PKG}.fused_moe.core"))])
    return _finish("trtllm_fp4_block_scale_moe", objs, where, problems)


def _cute_dsl_available() -> Tuple[Optional[bool], str]:
    fn, _, errors = find_symbol([(f"{PKG}.cute_dsl", "is_cute_dsl_available"),
                                 (f"{PKG}.cute_dsl.availability", "is_cute_dsl_available")])
    if fn is None:
        return None, ""
    try:
        avail = bool(fn())
    except Exception as exc:  # noqa: BLE001
        return False, f"is_cute_dsl_available() raised {describe_exc(exc)}"
    if avail:
        return True, ""
    try:
        importlib.import_module("cutlass.cute")
        why = ""
    except Exception as exc:  # noqa: BLE001
        why = f": import cutlass.cute fails with {describe_exc(exc)}"
    return False, f"flashinfer.cute_dsl.is_cute_dsl_available() is False{why}"


def cute_dsl_moe(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    mods = (PKG, f"{PKG}.fused_moe", f"{PKG}.fused_moe.cute_dsl",
            f"{PKG}.fused_moe.cute_dsl.fused_moe")
    objs, where, problems = _symbols([
        ("cute_dsl_fused_moe_nvfp4", _cands("cute_dsl_fused_moe_nvfp4", *mods)),
        ("CuteDslMoEWrapper", _cands("CuteDslMoEWrapper", *mods))])
    avail, why = _cute_dsl_available()
    if avail is False:
        problems.insert(0, why)
    return _finish("cute_dsl_fused_moe_nvfp4 and CuteDslMoEWrapper", objs, where, problems,
                   cute_dsl_available=avail)


def mm_fp4(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    cands = [(PKG, "mm_fp4"), (f"{PKG}.gemm", "mm_fp4")]
    fn, at, errors = find_symbol(cands)
    if fn is None:
        return failed(absent_message("flashinfer mm_fp4", cands, errors, PKG))
    if not callable(fn):
        return failed(f"flashinfer mm_fp4 at {at} is not callable")
    has, supported = getattr(fn, "has_backend", None), getattr(fn, "is_backend_supported", None)
    backends: Dict[str, Optional[List[int]]] = {}
    if callable(has):
        for b in MM_FP4_BACKENDS + ((arg,) if arg and arg not in MM_FP4_BACKENDS else ()):
            try:
                present = bool(has(b))
            except Exception:  # noqa: BLE001
                present = False
            if not present:
                continue
            ccs: Optional[List[int]] = None
            if callable(supported):
                ccs = []
                for cc in CAPABILITIES:
                    try:
                        if supported(b, cc):
                            ccs.append(cc)
                    except Exception:  # noqa: BLE001 - raises for capabilities it refuses
                        pass
            backends[b] = ccs
    listing = ", ".join(f"{b} (SM {', '.join(map(str, c))})" if c else b
                        for b, c in backends.items())
    details = {"found": at, "backends": backends}
    if arg:
        if not callable(has):
            return warning(f"flashinfer mm_fp4 (found as {at}) predates has_backend(): cannot "
                           f"tell whether backend {arg!r} is registered", **details)
        if arg not in backends:
            return failed(f"flashinfer mm_fp4 has no backend {arg!r} (registered: "
                          f"{', '.join(backends) or 'none'})", **details)
        return ok(f"flashinfer mm_fp4 backend {arg!r} registered (SM "
                  f"{', '.join(map(str, backends[arg] or [])) or '?'})", **details)
    if not callable(has):
        return ok(f"flashinfer mm_fp4 importable (found as {at}; no has_backend() in this "
                  "version)", **details)
    return ok(f"flashinfer mm_fp4 importable; backends: {listing or 'none'}", **details)


def cute_dsl_sf_layout(arg: Optional[str], ctx: Dict[str, Any]) -> Dict[str, Any]:
    cands = [(f"{PKG}.cute_dsl", "convert_sf_to_mma_layout"),
             (f"{PKG}.cute_dsl.utils", "convert_sf_to_mma_layout")]
    fn, at, errors = find_symbol(cands)
    if fn is None:
        msg = absent_message("flashinfer.cute_dsl.convert_sf_to_mma_layout", cands, errors, PKG)
        avail, why = _cute_dsl_available()
        return failed(f"{msg}; {why}" if avail is False else msg)
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    if params[:3] and params[:3] != ["sf", "m", "k"]:
        return failed(f"convert_sf_to_mma_layout (found as {at}) takes ({', '.join(params)}), "
                      "not (sf, m, k, ...): the helper changed its signature", found=at)
    # One call on a CPU tensor: 128 rows x 64 columns of FP4 = a (128, 4) swizzled SF tile,
    # which must come back as the 6-D MMA view (32, 4, m_tiles=1, 4, k_tiles=1, groups=1).
    try:
        import torch
        out = fn(torch.zeros(128, 4, dtype=torch.uint8), m=128, k=64)
        shape = tuple(int(s) for s in out.shape)
    except Exception as exc:  # noqa: BLE001
        return failed(f"convert_sf_to_mma_layout (found as {at}) raised on a (128, 4) uint8 CPU "
                      f"tensor: {describe_exc(exc, PKG)}", found=at)
    want = (32, 4, 1, 4, 1, 1)
    if shape != want:
        return warning(f"convert_sf_to_mma_layout (found as {at}) returned shape {shape} for "
                       f"m=128, k=64; the documented 6-D MMA view is {want}", found=at,
                       shape=list(shape))
    return ok(f"convert_sf_to_mma_layout importable (found as {at}); m=128, k=64 gives the "
              f"6-D MMA view {want}", found=at, shape=list(shape))
