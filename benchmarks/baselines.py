"""What every benchmark here measures against (issue 35): the strongest simple baseline on the same
data, and the hardware's limits, measured on the machine the benchmark runs on.

- ``ceilings()``: the GPU's copy bandwidth (a 4 GiB device-to-device copy, bytes read plus
  written over its median time), its bf16 matrix rate (an 8192^3 ``torch.matmul`` on random data)
  and its FP8 one (``torch._scaled_mm``, per-tensor scales, same size).
- ``limits(bytes, flops, c, fp8)``: the memory-bound time (the fewest bytes the layer must move over
  the copy bandwidth) and the compute-bound one (its FLOPs over the matrix rate).
- ``cuda_time(fn)``: median milliseconds by CUDA events, after warm-up.
- ``graph_ms(fn)``: a CUDA graph of one call, replayed; ``graph_calls_ms(fns)``: milliseconds a
  call inside one CUDA graph of many calls, cycling over
  weight copies that do not fit the L2 together (``copies_past_l2``); ``stream_calls_ms(fns)``:
  the same calls queued from Python with no sync between them.
- ``grouped_bf16_moe``: a bf16 fused MoE with one ``torch._grouped_mm`` for FC1 and one for FC2
  over all routed rows (sorted by expert on the device, no host sync), the activation in float32,
  the top-k weighted sum in float32; ``loop_bf16_moe``: the per-expert loop it is checked against.

Imports torch at import: benchmarks only.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List, Tuple

import torch


def cuda_time(fn: Callable[[], Any], min_iters: int = 10, budget_s: float = 0.2,
              max_iters: int = 200) -> float:
    """Median milliseconds of ``fn()`` over repeated CUDA-event timed runs (after warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times: List[float] = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_iters or (time.perf_counter() < t_end and len(times) < max_iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def copies_past_l2(nbytes: int, cap: int = 8) -> int:
    """How many copies of an ``nbytes`` weight a run must cycle through so that no copy is
    still in the GPU's L2 when its turn comes again (the rest hold at least twice the L2):
    an engine's next layer has other weights. The one count `selector tune` uses too
    (selector.backends.children.tune_child.copies_past_l2)."""
    from selector.backends.children.tune_child import copies_past_l2 as count
    return count(nbytes, cap)


def graph_calls_ms(fns: List[Callable[[], Any]], calls: int = 24) -> float:
    """Median milliseconds per call of ``fns`` run in turn (``calls`` in all) inside one CUDA
    graph, timed by CUDA events around its replays: the GPU's time a call, the graph launch's
    own few microseconds spread over ``calls``, as an engine's graph of a whole forward pass
    spreads them. ``fns`` are the same call on different weight copies (``copies_past_l2``)."""
    order = [fns[i % len(fns)] for i in range(max(calls, len(fns)))]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns + fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in order:
            fn()
    ms = cuda_time(graph.replay)
    del graph
    return ms / len(order)


def graph_ms(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn`` captured once in a CUDA graph and replayed (the graph's
    launch included: ``graph_calls_ms`` spreads it over many calls)."""
    return graph_calls_ms([fn], calls=1)


def stream_calls_ms(fns: List[Callable[[], Any]], calls: int = 24, repeats: int = 7) -> float:
    """Median milliseconds per call of ``fns`` called in turn, ``calls`` in all, from Python
    with no sync between them (CUDA events around the whole run): an eager engine's steady
    state, where the host's cost hides behind the GPU's work when the GPU is the slower."""
    order = [fns[i % len(fns)] for i in range(max(calls, len(fns)))]
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for fn in order:
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / len(order))
    return statistics.median(times)


_CEILINGS: Dict[str, float] = {}


def ceilings() -> Dict[str, float]:
    """``{"bandwidth_GBps", "bf16_TFLOPs", "fp8_TFLOPs"}`` measured here (memoized)."""
    if not _CEILINGS:
        _measure()
        torch.cuda.empty_cache()
    return _CEILINGS


def _measure() -> None:
    n = 1 << 31  # 2 GiB each way
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = cuda_time(lambda: dst.copy_(src), budget_s=0.3)
    _CEILINGS["bandwidth_GBps"] = 2 * n / ms / 1e6
    m = 8192
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, m, generator=g, device="cuda").bfloat16()
    b = torch.randn(m, m, generator=g, device="cuda").bfloat16()
    ms = cuda_time(lambda: torch.matmul(a, b), budget_s=0.5)
    _CEILINGS["bf16_TFLOPs"] = 2 * m ** 3 / ms / 1e9
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    ms = cuda_time(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                            out_dtype=torch.bfloat16), budget_s=0.5)
    _CEILINGS["fp8_TFLOPs"] = 2 * m ** 3 / ms / 1e9


def limits(nbytes: float, flops: float, c: Dict[str, float], fp8: bool) -> Tuple[float, float]:
    """(memory-bound ms, compute-bound ms) of moving ``nbytes`` and doing ``flops``."""
    rate = c["fp8_TFLOPs"] if fp8 else c["bf16_TFLOPs"]
    return nbytes / c["bandwidth_GBps"] / 1e6, flops / rate / 1e9


def print_ceilings(c: Dict[str, float]) -> None:
    print(f"ceilings measured here: copy {c['bandwidth_GBps']:.0f} GB/s (read + write), bf16 "
          f"matmul {c['bf16_TFLOPs']:.0f} TFLOP/s, FP8 _scaled_mm {c['fp8_TFLOPs']:.0f} TFLOP/s "
          f"(8192^3, random data)", flush=True)


def _route_sorted(ti, E: int):
    """(order of the routed rows by expert, token of each sorted row, offs int32 [E])."""
    K = ti.shape[1]
    ids = ti.reshape(-1).long()
    order = torch.argsort(ids, stable=True)
    # scatter_add, not bincount: bincount reads its maximum on the host (no CUDA graph)
    counts = torch.zeros(E, dtype=torch.long, device=ids.device).scatter_add_(
        0, ids, torch.ones_like(ids))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return order, order // K, offs


def grouped_bf16_moe(x, w13, w2, tw, ti, activation: str = "silu"):
    """``[T, H]`` bf16: a gated MoE on bf16 weights ``w13 [E, 2I, H]``, ``w2 [E, H, I]`` with two
    ``torch._grouped_mm`` calls (B is the weights' transposed view, column-major per expert)."""
    from selector.backends.reference import activation_fn
    E = w13.shape[0]
    order, tok, offs = _route_sorted(ti, E)
    a = x[tok]
    h = torch._grouped_mm(a, w13.transpose(-2, -1), offs=offs)
    act = activation_fn(h.float(), activation, True).to(x.dtype)
    y = torch._grouped_mm(act, w2.transpose(-2, -1), offs=offs)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y.float() * tw.reshape(-1)[order].float()[:, None])
    return out.to(x.dtype)


def loop_bf16_moe(x, w13, w2, tw, ti, activation: str = "silu"):
    """The same computation, one expert at a time (the check of ``grouped_bf16_moe``)."""
    from selector.backends.reference import activation_fn
    E = w13.shape[0]
    K = ti.shape[1]
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    ids = ti.reshape(-1).long()
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids, minlength=E).tolist()
    start = 0
    for e, n in enumerate(counts):
        if not n:
            continue
        sel = order[start:start + n]
        start += n
        tok, slot = sel // K, sel % K
        h = (x[tok] @ w13[e].T).float()
        a = activation_fn(h, activation, True).to(x.dtype)
        y.index_add_(0, tok, (a @ w2[e].T).float() * tw[tok, slot].float().unsqueeze(-1))
    return y.to(x.dtype)


def check_grouped(x, w13, w2, tw, ti) -> str:
    """The grouped baseline against the loop: max |diff| / max |y| and RMS (bf16 rounding is
    2^-8 relative per element)."""
    a = grouped_bf16_moe(x, w13, w2, tw, ti).float()
    b = loop_bf16_moe(x, w13, w2, tw, ti).float()
    d = (a - b).abs()
    mx, rms = float(d.max() / b.abs().max()), float(d.norm() / b.norm())
    ok = mx <= 2.0 ** -6 and rms <= 2.0 ** -8
    return (f"grouped bf16 MoE vs the per-expert loop: max |diff| / max |y| {mx:.3g}, RMS "
            f"{rms:.3g} ({'within' if ok else 'NOT within'} bf16 rounding)")


def moe_bytes_flops(T: int, K: int, E: int, H: int, I: int, ti, weight_bytes_per_expert: float,
                    act_bytes: int = 2) -> Tuple[float, float, int]:
    """(fewest bytes, FLOPs, experts routed to): each routed expert's weights read once, the
    input and output once."""
    active = int(torch.unique(ti).numel())
    nbytes = active * weight_bytes_per_expert + 2 * T * H * act_bytes
    flops = 2.0 * T * K * (2 * I * H + H * I)
    return nbytes, flops, active


__all__ = ["cuda_time", "ceilings", "limits", "print_ceilings", "grouped_bf16_moe",
           "loop_bf16_moe", "check_grouped", "moe_bytes_flops"]
