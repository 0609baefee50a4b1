"""The verify child process: run one backend on small NVFP4 problems and compare with the reference.

Started by ``selector.verify`` (``selector doctor --verify``, ``explain probe=verify``) with a
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
import math
import time
from typing import Any, Dict, List, Optional, Tuple

from selector.probe_child import VERIFY_MARK as MARK
from selector.probe_child import close_channel, emit, open_channel

# Reference settings a backend's documented semantics need (else the reference's defaults apply).
# FlashInfer b12x re-quantizes FC2's input per 16-element block with global scale 1 instead of
# the checkpoint's a2_scale (vLLM #40082; backends/prepare.py prepare_b12x_moe).
REFERENCE_SETTINGS: Dict[Tuple[str, str, str], Dict[str, Any]] = {
    ("moe", "flashinfer_b12x", "nvfp4"): {"fc2_input_scale": 1.0}}


# ---------------------------------------------------------------------------------------------
# Problems

def pow2_scale(amax):
    """The smallest power of two >= ModelOpt's scale amax / (6 * 448) (elementwise).

    A power-of-two global scale makes every exact rescaling a kernel's preparation may do (b12x
    folds the weight scale into the E4M3 block scales; kernels take 1 / input_scale) exact, so
    the comparison measures the kernel, not float rounding in the scales (which
    ``backends.prepare`` checks and reports on its own).
    """
    import torch

    from .nvfp4 import E2M1_MAX, E4M3_MAX
    amax = torch.as_tensor(amax, dtype=torch.float32)
    ratio = torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))
    return torch.exp2(torch.ceil(torch.log2(ratio)))


def build_moe(shape: Dict[str, int], quant: str, act_and_mul: bool, activation: str, seed: int):
    """(x bf16 [T, H], MoEWeights, topk_weights, topk_ids), on the CPU, from ``seed``.

    Unit-scale weights keep every block scale an E4M3 normal number; global scales are powers of
    two (``pow2_scale``), one per expert. W4A4 activation scales are calibrated the same way: FC1's
    from x, FC2's per expert from the activation output of every token.
    """
    import torch

    from .nvfp4 import MoEWeights, quantize, quantize_dequantize
    from .reference import activation_fn, route
    T, H, I = shape["num_tokens"], shape["hidden_size"], shape["intermediate_size"]
    E, K = shape["num_experts"], shape["top_k"]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).bfloat16()
    w13 = torch.randn(E, (2 if act_and_mul else 1) * I, H, generator=g)
    w2 = torch.randn(E, H, I, generator=g)
    topk_weights, topk_ids = route(torch.randn(T, E, generator=g), K)
    q13 = quantize(w13, pow2_scale(w13.abs().amax(dim=(1, 2))))
    q2 = quantize(w2, pow2_scale(w2.abs().amax(dim=(1, 2))))
    a13 = a2 = None
    if quant == "nvfp4":
        a13 = pow2_scale(x.float().abs().amax())
        h = torch.einsum("th,erh->etr", quantize_dequantize(x.float(), a13), q13.dequantize())
        a2 = pow2_scale(activation_fn(h, activation, act_and_mul).abs().amax(dim=(1, 2)))
    return x, MoEWeights(q13, q2, a13, a2), topk_weights, topk_ids


def build_linear(shape: Dict[str, int], quant: str, seed: int):
    """(x bf16 [T, K], LinearWeights) on the CPU, from ``seed``; scales as in ``build_moe``."""
    import torch

    from .nvfp4 import LinearWeights, quantize
    T, K, N = shape["num_tokens"], shape["hidden_size"], shape["out_features"]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=g).bfloat16()
    w = torch.randn(N, K, generator=g)
    scale = pow2_scale(x.float().abs().amax()) if quant == "nvfp4" else None
    return x, LinearWeights(quantize(w, pow2_scale(w.abs().amax())), scale)


def _moe_to(w, device):
    from .nvfp4 import MoEWeights

    def mv(t):
        return None if t is None else t.to(device)
    return MoEWeights(w.w13.to(device), w.w2.to(device), mv(w.a13_scale), mv(w.a2_scale))


def _linear_to(w, device):
    from .nvfp4 import LinearWeights
    return LinearWeights(w.weight.to(device), None if w.input_scale is None else
                         w.input_scale.to(device), None if w.bias is None else w.bias.to(device))


# ---------------------------------------------------------------------------------------------
# Comparison

def compare(y, ref) -> Dict[str, Any]:
    """Errors of ``y`` against ``ref``, relative to the reference's scale (both moved to float64).

    max_rel_err = max |y - ref| / max |ref|; rms_rel_err = ||y - ref|| / ||ref||; worst = the
    element with the largest |y - ref|. Non-finite outputs are counted, not compared.
    """
    import torch
    y = y.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    if tuple(y.shape) != tuple(ref.shape):
        raise ValueError(f"output has shape {tuple(y.shape)}, expected {tuple(ref.shape)}")
    bad = ~torch.isfinite(y)
    if bool(bad.any()):
        first = [int(i) for i in torch.nonzero(bad)[0]]
        return {"max_rel_err": None, "rms_rel_err": None, "nonfinite": int(bad.sum()),
                "worst": {"index": first, "got": str(float(y[tuple(first)])),
                          "expected": float(ref[tuple(first)])}}
    err = (y - ref).abs()
    scale = float(ref.abs().max())
    norm = float(ref.norm())
    flat = int(torch.argmax(err))
    index: List[int] = []
    for n in reversed(err.shape):
        flat, i = divmod(flat, int(n))
        index.insert(0, i)
    return {"max_rel_err": float(err.max()) / scale if scale > 0 else math.inf,
            "rms_rel_err": float((y - ref).norm()) / norm if norm > 0 else math.inf,
            "nonfinite": 0,
            "worst": {"index": index, "got": float(y[tuple(index)]),
                      "expected": float(ref[tuple(index)])}}


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


def run_case(spec: Dict[str, Any], case: Dict[str, Any]) -> Dict[str, Any]:
    """Build, prepare, apply, compare: the measurements of one case (raises on failure)."""
    import torch

    from selector.entry_points import load_entry_point

    from .reference import reference_linear, reference_moe
    op, backend = spec["op"], spec["backend"]
    layer, shape, seed = case["layer"], case["shape"], int(case.get("seed", 0))
    quant = layer["quant"]
    ref_quant = case.get("reference_layer", layer)["quant"]  # W4A16 for a weight-only backend
    cls = load_entry_point(spec["entry_point"])
    device, device_text = _device()
    kwargs: Dict[str, Any] = {"quant": quant, "decision": _decision(spec, op, layer)}
    if op == "moe":
        kwargs.update(activation=layer["activation"], act_and_mul=layer["act_and_mul"])
    impl = cls(**kwargs)
    settings = REFERENCE_SETTINGS.get((op, backend, quant), {})
    if op == "moe":
        x, w, tw, ti = build_moe(shape, quant, layer["act_and_mul"], layer["activation"], seed)
        # x's bf16 values are exact in float64: the float64 input gives a float64 output
        ref = reference_moe(x.to(torch.float64), w, tw, ti, activation=layer["activation"],
                            quant=ref_quant, compute_dtype=torch.float64, **settings)
        t0 = time.perf_counter()
        prepared = impl.prepare(_moe_to(w, device))
        y = impl.apply(x.to(device), prepared, tw.to(device), ti.to(device))
    else:
        x, w = build_linear(shape, quant, seed)
        ref = reference_linear(x.to(torch.float64), w, quant=ref_quant,
                               compute_dtype=torch.float64, **settings)
        t0 = time.perf_counter()
        prepared = impl.prepare(_linear_to(w, device))
        y = impl.apply(x.to(device), prepared)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a kernel's asynchronous CUDA error surfaces here
    seconds = time.perf_counter() - t0
    if y is None:
        raise TypeError(f"{spec['entry_point']}.apply returned None, not a tensor")
    res = compare(y, ref)
    res.update(device=device_text, kernel_seconds=seconds,
               reference=", ".join(f"{k}={v}" for k, v in settings.items()))
    return res


def _unavailable(exc: BaseException) -> bool:
    """The entry point says it cannot run the kernel here (not that the kernel is wrong)."""
    if isinstance(exc, NotImplementedError):
        return True
    try:
        from ._base import BackendUnavailable
    except Exception:  # noqa: BLE001
        return False
    return isinstance(exc, BackendUnavailable)


def _describe(exc: BaseException) -> str:
    from selector.probe_child import describe_exc
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
