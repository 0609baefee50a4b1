"""The tune child process: time one backend's ``apply`` on a layer's real sizes, per token count.

Started by ``selector.inspect.tuning`` (``selector tune``) with a JSON spec on stdin:
``{"path": [...], "overrides": [...], "config_dirs": [...], "backend": name, "op":
"moe"|"linear", "entry_point": "module:Class", "warmup": int, "repeats": int, "budget_s": float,
"memory_bytes": int, "cases": [{"id", "layer": {...}}]}`` (the layer's ``num_tokens`` is the
token count to run). For each case it builds random weights of the layer's sizes (quantized to
the layer's scheme as a checkpoint holds them) and an activation, on the device (CUDA when torch
sees one), prepares them with the backend's own ``prepare``, runs ``apply`` ``warmup`` times, then
``repeats`` times. On CUDA (``"timer": "graph"``, the default) the call is captured into a CUDA
graph, several times over when it is short, and each replay is timed between two CUDA events: the
GPU's time without Python's and the launches' (eager calls below ~1,024 tokens measure the host,
which differs up to 1.9x between two processes: docs/records/h200.md); a call that cannot be captured is
timed eagerly, and the timer's name says why. ``"timer": "events"`` times each eager call between
two CUDA events; on the CPU ``time.perf_counter`` times each call. It reports the samples
(milliseconds per call); the parent computes the median and the spread. Correctness is not judged
here: only backends that passed ``selector doctor --verify`` are timed.

The protocol is verify's (``selector.backends.children.verify_child``): one JSON line per event on a
private copy of stdout after TUNE_MARK; a case that raises ends the process after its report (the
parent starts a fresh child for the rest). On the CPU the process's address space is bounded
(``memory_bytes`` plus the interpreter's own); on CUDA a case whose weights would not fit in the
free device memory is refused before anything is allocated.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Tuple

from selector.inspect.probe_child import close_channel, emit, open_channel
from selector.inspect.tuning import TUNE_MARK as MARK

from .verify_child import _decision, _device, _unavailable, balanced_routing

#: bytes the interpreter, torch and a kernel library take beyond the problem (the CPU bound)
BASE_BYTES = 6 << 30


class TooLarge(RuntimeError):
    """The case's tensors would not fit in the bound (reported as `too_large`, not an error)."""


def estimate_bytes(op: str, layer: Dict[str, Any]) -> int:
    """About the peak bytes of building and running the case (float32 master weights, their
    quantized copy, the activation and the output; a backend's workspace beyond that is its own).
    Mirrored by selector.inspect.tuning.estimate_bytes (the parent refuses before starting)."""
    from selector.inspect.tuning import estimate_bytes as parent_estimate
    return parent_estimate(op, layer)


def _limit_memory(memory_bytes: int, device) -> None:
    if device.type != "cpu" or memory_bytes <= 0:
        return
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    limit = memory_bytes + BASE_BYTES
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        pass


def _check_fits(op: str, layer: Dict[str, Any], device, memory_bytes: int) -> None:
    need = estimate_bytes(op, layer)
    if memory_bytes > 0 and need > memory_bytes:
        raise TooLarge(f"needs about {need / 2**30:.1f} GiB, over the bound of "
                       f"{memory_bytes / 2**30:.1f} GiB (--max-memory)")
    if device.type == "cuda":
        import torch
        free, _ = torch.cuda.mem_get_info(device)
        if need > 0.9 * free:
            raise TooLarge(f"needs about {need / 2**30:.1f} GiB of device memory, "
                           f"{free / 2**30:.1f} GiB free")


def _x(g, T: int, H: int, device):
    import torch
    return torch.randn(T, H, generator=g, device=device).bfloat16()


def build_linear(layer: Dict[str, Any], device, seed: int = 0):
    """(x bf16 [T, K], weights) for a linear layer: K = hidden_size, N = intermediate_size."""
    import torch

    from ..formats.fp8 import FP8_MAX, FP8_QUANTS, make_linear_weights
    from ..formats.nvfp4 import activation_scale_from_amax, quantize_linear
    T, K, N = layer["num_tokens"], layer["hidden_size"], layer["intermediate_size"]
    g = torch.Generator(device=device).manual_seed(seed)
    x = _x(g, T, K, device)
    w = torch.randn(N, K, generator=g, device=device) / math.sqrt(K)
    quant = layer["quant"]
    if quant in FP8_QUANTS:
        scale = (x.float().abs().amax() / FP8_MAX) if quant == "fp8_tensor" else None
        return x, make_linear_weights(w, quant, input_scale=scale)
    scale = activation_scale_from_amax(x.float()) if quant == "nvfp4" else None
    return x, quantize_linear(w, scale)


def _routing(g, T: int, E: int, K: int, device):
    import torch
    if E % K == 0:
        tw, ti = balanced_routing(g, T, E, K)  # on the CPU generator's device
        return tw.to(device), ti.to(device)
    logits = torch.randn(T, E, generator=g, device=g.device)
    w, ids = torch.topk(torch.softmax(logits, dim=-1), K, dim=-1)
    return (w / w.sum(dim=-1, keepdim=True)).to(device), ids.to(torch.int32).to(device)


def build_moe(layer: Dict[str, Any], device, seed: int = 0):
    """(x, weights, topk_weights, topk_ids) for an MoE layer as one rank runs it: num_experts /
    ep_size local experts, intermediate_size / tp_size, every token routed to top_k of them."""
    import torch

    from ..formats.fp8 import FP8_QUANTS, make_moe_weights
    from ..formats.nvfp4 import activation_scale_from_amax, quantize_moe
    T, H = layer["num_tokens"], layer["hidden_size"]
    E = max(1, layer["num_experts"] // max(1, layer.get("ep_size") or 1))
    I = max(1, layer["intermediate_size"] // max(1, layer.get("tp_size") or 1))
    K = min(layer["top_k"], E)
    rows = (2 if layer.get("act_and_mul", True) else 1) * I
    g = torch.Generator(device=device).manual_seed(seed)
    x = _x(g, T, H, device)
    w13 = torch.randn(E, rows, H, generator=g, device=device) / math.sqrt(H)
    w2 = torch.randn(E, H, I, generator=g, device=device) / math.sqrt(I)
    tw, ti = _routing(torch.Generator().manual_seed(seed), T, E, K, device)
    quant = layer["quant"]
    if quant in FP8_QUANTS:
        a13 = x.float().abs().amax() / 448.0 if quant == "fp8_tensor" else None
        a2 = torch.full((E,), 8.0 / 448.0, device=device) if quant == "fp8_tensor" else None
        return x, make_moe_weights(w13, w2, quant, a13_scale=a13, a2_scale=a2), tw, ti
    a13 = activation_scale_from_amax(x.float()) if quant == "nvfp4" else None
    a2 = torch.full((E,), 8.0 / (6 * 448), device=device) if quant == "nvfp4" else None
    return x, quantize_moe(w13, w2, a13, a2), tw, ti


#: copies of a weight at most (a small weight needs many to fill twice the L2)
MAX_COPIES = 8


def copies_past_l2(nbytes: int, cap: int = MAX_COPIES, device=None) -> int:
    """How many copies of an ``nbytes`` weight a run must cycle through so that no copy is
    still in the GPU's L2 when its turn comes again (the rest hold at least twice the L2): an
    engine's next layer has other weights, so a kernel never finds its weight in the L2. The
    project's benchmarks (benchmarks/baselines.py) and tune use this one count."""
    import torch
    dev = torch.cuda.current_device() if device is None else device
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 << 20))
    return max(2, min(cap, -(-2 * l2 // max(1, nbytes)) + 1))


def tensor_bytes(obj: Any, seen: Optional[set] = None) -> int:
    """Bytes of the distinct tensor storages in a prepared weight (dicts, lists, tuples,
    dataclasses and plain objects searched)."""
    import torch
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.device.type)
        if key in seen:
            return 0
        seen.add(key)
        return int(obj.untyped_storage().nbytes())
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__"):
        return sum(tensor_bytes(v, seen) for v in vars(obj).values())
    return 0


def clone_tensors(obj: Any) -> Any:
    """A copy of a prepared weight with every tensor cloned into new memory (the structure, its
    other values and its type kept): one more weight copy for the L2 rotation."""
    import copy
    import dataclasses

    import torch
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return type(obj)((k, clone_tensors(v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
        return type(obj)(*(clone_tensors(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone_tensors(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, clone_tensors(getattr(obj, f.name)))
        return new
    if hasattr(obj, "__dict__") and any(isinstance(v, torch.Tensor) for v in vars(obj).values()):
        new = copy.copy(obj)
        for k, v in vars(obj).items():
            object.__setattr__(new, k, clone_tensors(v))
        return new
    return obj


#: GPU time one timed graph replay should span at least (ms): short calls are captured several
#: times into one graph so that the two events' resolution (~0.5 us) and the replay's own launch
#: are small beside it
GRAPH_TARGET_MS = 1.0
#: calls captured into one graph at most
GRAPH_MAX_CALLS = 64
#: GPU time (ms) of untimed back-to-back replays right before the timed ones: the GPU's clock
#: under sustained load, as in an engine's forward pass. Timed from idle, a short burst runs at
#: the boost clock: on an H100 tune's times of compute-bound cells ran up to 15% below those of
#: an independent timer that replays for ~0.2 s (benchmarks/tune_clock.py, docs/tuning.md)
SETTLE_MS = 200.0
#: settle replays at most (a graph of very short calls)
SETTLE_MAX_REPLAYS = 4000


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _warm(fn, device, warmup: int) -> float:
    """Seconds per eager call over `warmup` untimed calls (host time: the budget's estimate)."""
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / max(1, warmup)


def _count(per_call_s: float, repeats: int, budget_s: float) -> int:
    """`repeats`, or fewer (at least 3) when that many calls of `per_call_s` exceed the budget."""
    n = repeats if per_call_s * repeats <= budget_s else max(3, int(budget_s / max(per_call_s,
                                                                                     1e-9)))
    return min(n, repeats)


def _capture(fns, calls: int):
    """A CUDA graph of `calls` back-to-back calls, the `fns` in turn (one call on each weight
    copy; torch's recipe: a side stream warmed first, then the capture on it)."""
    import torch
    fns = fns if isinstance(fns, (list, tuple)) else [fns]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    return graph


def _replays(graph, n: int) -> List[float]:
    """Milliseconds of each of `n` replays of `graph`, each between two CUDA events."""
    import torch
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(n)]
    for start, end in pairs:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [float(start.elapsed_time(end)) for start, end in pairs]


def time_graph(fn, device, warmup: int, repeats: int, budget_s: float) -> List[float]:
    """Milliseconds per call from CUDA-graph replays: the GPU's time without the host's (as an
    engine runs decode). `fn` is one call or a list of them (the same call on each weight copy,
    run in turn: copies_past_l2). One round over the copies is captured and replayed to
    measure a call; then as many calls as make a replay span GRAPH_TARGET_MS (at most
    GRAPH_MAX_CALLS, at least one per copy) are captured into one graph, and each of the
    `repeats` replays, timed between two events, gives one sample (its time over the calls it
    holds), right after SETTLE_MS of untimed replays (the clock under sustained load).
    Raises when a call cannot be captured (a host synchronisation, an allocation the
    capture refuses): the caller falls back to eager events."""
    fns = list(fn) if isinstance(fn, (list, tuple)) else [fn]
    _warm(fns[0], device, warmup)
    one = _capture(fns, len(fns))
    probe = _replays(one, 3)
    per_call_ms = max(min(probe) / len(fns), 1e-4)
    calls = max(len(fns), min(GRAPH_MAX_CALLS, math.ceil(GRAPH_TARGET_MS / per_call_ms)))
    graph = one if calls == len(fns) else _capture(fns, calls)
    if graph is not one:
        del one
    n = _count(per_call_ms * calls / 1e3, repeats, budget_s)
    _replays(graph, 2)  # the first replays upload the graph
    settle = min(SETTLE_MAX_REPLAYS, math.ceil(SETTLE_MS / max(per_call_ms * calls, 1e-3)))
    for _ in range(settle):  # queued with no sync: the timed replays follow them at once
        graph.replay()
    return [t / calls for t in _replays(graph, n)]


def time_calls(fn, device, warmup: int, repeats: int, budget_s: float) -> List[float]:
    """Milliseconds of each of `repeats` eager calls after `warmup` untimed ones, each alone
    between two CUDA events (on CUDA) or `time.perf_counter` (on the CPU); fewer (at least 3)
    when the warm-up shows that `repeats` would not fit in `budget_s`. `fn`: one call or a
    list of them, run in turn (the weight copies)."""
    import torch
    fns = list(fn) if isinstance(fn, (list, tuple)) else [fn]
    n = _count(_warm(fns[0], device, warmup), repeats, budget_s)
    if device.type == "cuda":
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(n)]
        for i, (start, end) in enumerate(pairs):
            start.record()
            fns[i % len(fns)]()
            end.record()
        _sync(device)
        return [float(start.elapsed_time(end)) for start, end in pairs]
    out = []
    for i in range(n):
        t = time.perf_counter()
        fns[i % len(fns)]()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def timed(fn, device, spec: Dict[str, Any]) -> Tuple[List[float], str]:
    """(samples in ms, the timer's name) as `spec["timer"]` asks: "graph" (the default) times
    CUDA-graph replays on CUDA and falls back to eager CUDA events, naming why, when the call
    cannot be captured; "events" times each eager call between CUDA events. On the CPU both are
    `time.perf_counter` around each call. `fn`: one call or the list over the weight copies."""
    args = (int(spec.get("warmup", 5)), int(spec.get("repeats", 24)),
            float(spec.get("budget_s", 10.0)))
    if device.type != "cuda":
        return time_calls(fn, device, *args), "perf_counter"
    if str(spec.get("timer") or "graph") == "graph":
        try:
            return time_graph(fn, device, *args), "cuda_graph"
        except Exception as exc:  # noqa: BLE001 - not capturable: eager events say so
            import torch
            torch.cuda.synchronize(device)  # a device error (not a capture refusal) raises here
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:120]
            return time_calls(fn, device, *args), f"cuda_events (graph capture failed: {why})"
    return time_calls(fn, device, *args), "cuda_events"


def weight_copies(prepared: Any, device, spec: Dict[str, Any]) -> List[Any]:
    """The prepared weight and as many clones as copies_past_l2 asks for on CUDA (one on the
    CPU, where no L2 rotation is modelled); `spec["copies"]` (an int) overrides the count, 1
    turns the rotation off. A clone that does not fit is not made: the copies made are timed,
    and their number is reported."""
    if device.type != "cuda":
        return [prepared]
    want = spec.get("copies")
    n = int(want) if isinstance(want, int) and want > 0 else copies_past_l2(
        tensor_bytes(prepared), device=device)
    out = [prepared]
    import torch
    for _ in range(1, n):
        try:
            out.append(clone_tensors(prepared))
        except torch.cuda.OutOfMemoryError:
            break
    return out


def run_case(spec: Dict[str, Any], case: Dict[str, Any], cls=None) -> Dict[str, Any]:
    """Build, prepare, time: the samples of one case (raises on failure)."""
    from selector.core.entry_points import load_entry_point
    op = spec["op"]
    layer = case["layer"]
    device, device_text = _device()
    _check_fits(op, layer, device, int(spec.get("memory_bytes") or 0))
    cls = cls or load_entry_point(spec["entry_point"])
    kwargs: Dict[str, Any] = {"quant": layer["quant"], "decision": _decision(
        spec, op, {k: v for k, v in layer.items() if k != "op"})}
    if op == "moe":
        kwargs.update(activation=layer["activation"], act_and_mul=layer["act_and_mul"])
        if layer.get("swiglu_limit") is not None:
            kwargs["swiglu_limit"] = layer["swiglu_limit"]
    impl = cls(**kwargs)
    if op == "moe":
        x, w, tw, ti = build_moe(layer, device)
        prepared = impl.prepare(w)
        del w
        copies = weight_copies(prepared, device, spec)
        calls = [(lambda p=p: impl.apply(x, p, tw, ti)) for p in copies]
    else:
        x, w = build_linear(layer, device)
        prepared = impl.prepare(w)
        del w
        copies = weight_copies(prepared, device, spec)
        calls = [(lambda p=p: impl.apply(x, p)) for p in copies]
    if calls[0]() is None:
        raise TypeError(f"{spec['entry_point']}.apply returned None, not a tensor")
    samples, timer = timed(calls, device, spec)
    out = {"samples_ms": samples, "device": device_text, "timer": timer, "copies": len(copies),
           "weight_bytes": tensor_bytes(prepared)}
    if device.type == "cuda" and timer == "cuda_graph" and spec.get("eager", True):
        # the eager spread beside the graph's: what the host adds (docs/tuning.md)
        out["eager_samples_ms"] = time_calls(calls, device, int(spec.get("warmup", 5)),
                                             int(spec.get("repeats", 24)),
                                             float(spec.get("budget_s", 10.0)))
    return out


def main() -> None:
    out, spec = open_channel(MARK)
    device: Optional[Any] = None
    try:
        device, _ = _device()
        _limit_memory(int(spec.get("memory_bytes") or 0), device)
    except Exception:  # noqa: BLE001 - the cases report what is wrong
        pass
    for case in spec.get("cases") or []:
        emit(out, MARK, event="case", phase="start", id=case.get("id"))
        t0 = time.perf_counter()
        try:
            result = dict(run_case(spec, case), outcome="measured")
        except TooLarge as exc:
            result = {"outcome": "too_large", "error": str(exc)}
        except MemoryError:
            result = {"outcome": "too_large", "error": "ran out of memory (the bound is "
                      f"{int(spec.get('memory_bytes') or 0) / 2**30:.1f} GiB, --max-memory)"}
        except BaseException as exc:  # noqa: BLE001 - whatever the kernel raises is the finding
            from selector.inspect.probe_child import describe_exc
            result = {"outcome": "unavailable" if _unavailable(exc) else "error",
                      "error": describe_exc(exc)}
            if "out of memory" in str(exc).lower():
                result["outcome"] = "too_large"
        emit(out, MARK, event="case", phase="end", id=case.get("id"),
             seconds=time.perf_counter() - t0, **result)
        if result["outcome"] == "error":
            break  # a fresh process runs the rest: the device may be left in an error state
    close_channel(out, MARK)
