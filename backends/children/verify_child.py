"""The verify child process: run one backend on small NVFP4 and FP8 problems and compare with the reference.

Started by ``selector.inspect.verify`` (``selector doctor --verify``, ``explain probe=verify``) with a
JSON spec on stdin: ``{"path": [...], "overrides": [...], "config_dirs": [...], "backend": name,
"op": "moe"|"linear", "entry_point": "module:Class", "cases": [{"id", "layer": {...},
"shape": {...}, "seed"}]}``. For each case it builds a seeded problem (random weights quantized
to NVFP4 as ModelOpt does, calibrated activation scales), prepares the weights with the
backend's own ``prepare``, runs its ``apply`` on the device (CUDA when torch sees one), and
compares the output with ``selector.backends.reference`` run in float64 on the CPU. It reports numbers;
the parent applies the error bounds.

Each case is reported as it starts and ends, one JSON line per event on a private copy of the
original stdout (prefixed by MARK); library output goes to stderr. A case that raises ends the
process after its report, so a CUDA error cannot poison the next case (the parent starts a fresh
child for the rest); a crash or a hang is the parent's to name, from the last "start" event.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, Optional, Tuple

from selector.inspect.probe_child import VERIFY_MARK as MARK
from selector.inspect.probe_child import close_channel, emit, open_channel

from .verify_measures import (  # noqa: F401 - the child's names, as tests and tools use them
    _gain_fields,
    activation_alternatives,
    activation_fit,
    column_gains,
    compare,
    dense_parts,
    global_gain,
    moe_gains,
    tile_fit,
    tile_regressors,
)
from .verify_problems import (  # noqa: F401 - the child's names, as tests and tools use them
    _linear_to,
    _moe_to,
    balanced_routing,
    build_fp8_linear,
    build_fp8_moe,
    build_linear,
    build_moe,
    pow2_scale,
)

# Reference settings a backend's documented semantics need (else the reference's defaults apply).
# FlashInfer b12x re-quantizes FC2's input per 16-element block with global scale 1 instead of
# the checkpoint's a2_scale (vLLM #40082; backends/prepare/b12x.py prepare_b12x_moe).
# FlashInfer's CUTLASS, CuTe-DSL and TRT-LLM MoE take one FC2 activation scale for all experts,
# the max of the checkpoint's (vLLM amax_for_moe_activation_quant; backends/prepare/swizzled.py
# _static_scales): "max" is that, computed from the problem's per-expert a2.
REFERENCE_SETTINGS: Dict[Tuple[str, str, str], Dict[str, Any]] = {
    ("moe", "flashinfer_b12x", "nvfp4"): {"fc2_input_scale": 1.0},
    ("moe", "flashinfer_cutlass", "nvfp4"): {"fc2_input_scale": "max"},
    ("moe", "flashinfer_cutedsl", "nvfp4"): {"fc2_input_scale": "max"},
    ("moe", "flashinfer_trtllm", "nvfp4"): {"fc2_input_scale": "max"}}


# ---------------------------------------------------------------------------------------------
# One case

def _device():
    import torch
    if torch.cuda.is_available():
        i = torch.cuda.current_device()
        return torch.device("cuda", i), f"cuda:{i} ({torch.cuda.get_device_name(i)})"
    return torch.device("cpu"), "cpu"


_SELECTORS: Dict[str, Any] = {}


def _decision(spec: Dict[str, Any], op: str, layer: Dict[str, Any]):
    """The selector's decision for the case's layer, built the way the parent built it."""
    import selector
    key = json.dumps([spec.get("overrides"), spec.get("config_dirs")])
    if key not in _SELECTORS:
        _SELECTORS[key] = selector.load(list(spec.get("overrides") or []),
                                        config_dirs=list(spec.get("config_dirs") or []))
    return _SELECTORS[key].select(op=op, **layer)



def moe_extras(x, w, tw, ti, kw: Dict[str, Any]) -> Dict[str, Any]:
    """What the finer MoE measures compare with, besides the float64 reference: the kernel-model
    reference (FC1's output rounded to bf16, and W4A16's FC2 input: what a kernel with a bf16
    intermediate computes, up to accumulation order), the tile regressors, and the reference with
    each other activation of the gating."""
    import torch

    from ..reference import reference_moe
    x64 = x.to(torch.float64)
    refs = [reference_moe(x64, w, tw, ti, compute_dtype=torch.float64,
                          intermediate_dtype=torch.bfloat16, **kw)]
    tiles = tile_regressors(x, w, tw, ti, **kw)
    alts = {a: reference_moe(x64, w, tw, ti, compute_dtype=torch.float64,
                             **dict(kw, activation=a))
            for a in activation_alternatives(kw["activation"], w.act_and_mul)}
    return {"refs": refs, "tiles": tiles, "alternatives": alts}


def fp8_moe_problem(shape: Dict[str, int], layer: Dict[str, Any], seed: int):
    """``problem`` for an FP8 MoE: the float64 reference (``reference_fp8_moe``) with its
    per-expert parts, the kernel-model reference (FC1's output rounded to bf16, as the grouped
    GEMM writes it) and the reference with each other activation of the gating (no tile fit:
    FP8 block scales are plain float32, the gains and errors see a wrong one)."""
    import torch

    from ..reference import reference_fp8_moe
    limit, act = layer.get("swiglu_limit"), layer["activation"]
    x, w, tw, ti = build_fp8_moe(shape, layer["quant"], layer["act_and_mul"], act, seed, limit)
    x64, f64 = x.to(torch.float64), torch.float64
    parts: Dict[int, Any] = {}
    ref = reference_fp8_moe(x64, w, tw, ti, activation=act, swiglu_limit=limit,
                            compute_dtype=f64, parts=parts)
    extras = {"refs": [reference_fp8_moe(x64, w, tw, ti, activation=act, swiglu_limit=limit,
                                         compute_dtype=f64, fc1_output_dtype=torch.bfloat16)],
              "tiles": [],
              "alternatives": {a: reference_fp8_moe(x64, w, tw, ti, activation=a,
                                                    swiglu_limit=limit, compute_dtype=f64)
                               for a in activation_alternatives(act, w.act_and_mul)}}
    return ((x, w, tw, ti), ref, dense_parts(parts, w.num_experts, tuple(ref.shape)), {},
            extras)


def problem(spec: Dict[str, Any], case: Dict[str, Any]):
    """The case's inputs and reference: ``(inputs, ref, parts or None, settings, extras or
    None)`` on the CPU (extras: ``moe_extras``).

    inputs: ``(x, weights, topk_weights, topk_ids)`` (MoE) or ``(x, weights)`` (linear)."""
    import torch

    from ..reference import reference_linear, reference_moe
    op, backend = spec["op"], spec["backend"]
    layer, shape, seed = case["layer"], case["shape"], int(case.get("seed", 0))
    quant = layer["quant"]
    ref_quant = case.get("reference_layer", layer)["quant"]  # W4A16 for a weight-only backend
    settings = REFERENCE_SETTINGS.get((op, backend, quant), {})
    from ..formats.fp8 import FP8_QUANTS
    if op == "moe" and quant in FP8_QUANTS:
        return fp8_moe_problem(shape, layer, seed)
    if op == "moe":
        limit = layer.get("swiglu_limit")
        x, w, tw, ti = build_moe(shape, quant, layer["act_and_mul"], layer["activation"], seed,
                                 limit)
        ref_settings = dict(settings)
        if ref_settings.get("fc2_input_scale") == "max":
            ref_settings["fc2_input_scale"] = (
                None if w.a2_scale is None or ref_quant != "nvfp4" else w.a2_scale.max())
            if ref_settings["fc2_input_scale"] is None:
                del ref_settings["fc2_input_scale"]
        kw = dict(activation=layer["activation"], quant=ref_quant, swiglu_limit=limit,
                  **ref_settings)
        # x's bf16 values are exact in float64: the float64 input gives a float64 output
        parts: Dict[int, Any] = {}
        ref = reference_moe(x.to(torch.float64), w, tw, ti, compute_dtype=torch.float64,
                            parts=parts, **kw)
        return ((x, w, tw, ti), ref, dense_parts(parts, w.num_experts, tuple(ref.shape)),
                settings, moe_extras(x, w, tw, ti, kw))
    build = build_fp8_linear if quant in FP8_QUANTS else build_linear
    x, w = build(shape, quant, seed, bool(case.get("bias")))
    ref = reference_linear(x.to(torch.float64), w, quant=ref_quant, compute_dtype=torch.float64,
                           **settings)
    return (x, w), ref, None, settings, None


def measure(y, ref, parts, extras: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``compare`` plus the gains (per expert for an MoE, per 32 output columns for a linear) and
    ``scale_err``, ``|gain - 1|`` of the whole output; an MoE also ``tile_err`` (``tile_fit``)
    and ``act_err`` (``activation_fit``). The last three are each the smaller of the measure
    against the float64 reference and against the kernel-model one (``moe_extras``): a kernel
    with a bf16 intermediate and one with a float32 one are each judged against their own."""
    res = compare(y, ref)
    if res.get("nonfinite"):
        return res
    import torch
    y64 = y.detach().to("cpu", torch.float64)
    g = moe_gains(y64, parts) if parts is not None else column_gains(y64, ref)
    res.update(_gain_fields(g))
    refs = [ref] + list((extras or {}).get("refs", []))
    res["scale_err"] = min(abs(global_gain(y64, r) - 1) for r in refs)
    if extras:
        tiles = [tile_fit(y64, r, extras["tiles"], parts) for r in refs]
        acts = [activation_fit(y64, r, extras["alternatives"]) for r in refs]
        t = min(tiles, key=lambda v: v[0])
        a = min(acts, key=lambda v: v[0])
        res.update(tile_err=t[0], tile_worst=t[1], act_err=a[0], act_worst=a[1])
    return res


def run_case(spec: Dict[str, Any], case: Dict[str, Any], cls=None) -> Dict[str, Any]:
    """Build, prepare, apply, compare: the measurements of one case (raises on failure)."""
    import torch

    from selector.core.entry_points import load_entry_point
    op = spec["op"]
    layer = case["layer"]
    cls = cls or load_entry_point(spec["entry_point"])
    device, device_text = _device()
    kwargs: Dict[str, Any] = {"quant": layer["quant"], "decision": _decision(spec, op, layer)}
    if op == "moe":
        kwargs.update(activation=layer["activation"], act_and_mul=layer["act_and_mul"])
        if layer.get("swiglu_limit") is not None:
            kwargs["swiglu_limit"] = layer["swiglu_limit"]
    impl = cls(**kwargs)
    inputs, ref, parts, settings, extras = problem(spec, case)
    t0 = time.perf_counter()
    if op == "moe":
        x, w, tw, ti = inputs
        prepared = impl.prepare(_moe_to(w, device))
        y = impl.apply(x.to(device), prepared, tw.to(device), ti.to(device))
    else:
        x, w = inputs
        prepared = impl.prepare(_linear_to(w, device))
        y = impl.apply(x.to(device), prepared)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a kernel's asynchronous CUDA error surfaces here
    seconds = time.perf_counter() - t0
    if y is None:
        raise TypeError(f"{spec['entry_point']}.apply returned None, not a tensor")
    res = measure(y, ref, parts, extras)
    res.update(device=device_text, kernel_seconds=seconds,
               reference=", ".join(f"{k}={v}" for k, v in settings.items()))
    return res


def _unavailable(exc: BaseException) -> bool:
    """The entry point says it cannot run the kernel here (not that the kernel is wrong)."""
    if isinstance(exc, NotImplementedError):
        return True
    try:
        from ..wrappers._base import BackendUnavailable
    except Exception:  # noqa: BLE001
        return False
    return isinstance(exc, BackendUnavailable)


def _describe(exc: BaseException) -> str:
    from selector.inspect.probe_child import describe_exc
    return describe_exc(exc)


def main() -> None:
    out, spec = open_channel(MARK)
    for case in spec.get("cases") or []:
        emit(out, MARK, event="case", phase="start", id=case.get("id"))
        t0 = time.perf_counter()
        result: Optional[Dict[str, Any]]
        try:
            result = dict(run_case(spec, case), outcome="measured")
        except BaseException as exc:  # noqa: BLE001 - whatever the kernel raises is the finding
            outcome = "unavailable" if _unavailable(exc) else "error"
            result = {"outcome": outcome, "error": _describe(exc)}
        emit(out, MARK, event="case", phase="end", id=case.get("id"),
              seconds=time.perf_counter() - t0, **result)
        if result["outcome"] == "error":
            break  # a fresh process runs the rest: the device may be left in an error state
    close_channel(out, MARK)
