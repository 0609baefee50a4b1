"""The emulation as a fallback for a real model: memory, speed against a bf16 baseline, quantize.

    PYTHONUNBUFFERED=1 python3 benchmarks/emulation_bench.py [--quick] [--tokens 1,8,64,256]

Prints, on CUDA when a GPU is visible (else the CPU, with a smaller shape unless --full):

1. ``quantize`` of a 4096 x 7168 float32 matrix on the CPU, this code against the implementation
   it replaced (``quantize_before``, commit 6e5197d: chunks of 2^20 elements, encode then pack), in
   microseconds per element, with torch's default threads and with one thread.
2. The ``emulation`` MoE (``backends.reference.emulate_moe``, what ``EmulationMoE.apply`` runs) on
   the DeepSeek-V3 expert shape (H 7168, I 2048, 256 experts, top-8; random NVFP4 checkpoint), W4A16
   and W4A4, for each token count, against a dequantize-once bf16 baseline: the same expert loop
   (tokens grouped by expert once, per routed expert two bf16 GEMMs and the activation) on bf16
   weights dequantized ahead of time (3.6x the checkpoint), and (CUDA) the fair baseline: a
   grouped bf16 MoE, one ``torch._grouped_mm`` for FC1 and one for FC2 over the same weights and
   routing (``benchmarks/baselines.py``; its output checked against the loop's). Median times in
   ms (CUDA events), the ratio to the grouped baseline, and the memory-bound limit (the routed
   experts' NVFP4 bytes over the measured copy bandwidth) and compute-bound one (bf16 rate).
   On CUDA the emulation runs grouped (batched GEMMs over groups of routed experts, the default
   there); "loop ms" is the per-expert loop it replaced (``grouped=False``), same results.
3. Its memory: the checkpoint's bytes, and the peak allocated during a call beyond the checkpoint
   and the inputs (CUDA: ``max_memory_allocated``), as a multiple of the checkpoint. The emulation
   it replaced cached the weights dequantized to float32: 7.1x the checkpoint (computed, not run).

SM 9.0 has no FP4 tensor cores: nothing here is an FP4 kernel; it is what the fallback costs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after an installed selector

import torch  # noqa: E402

try:  # baselines.py imports selector.backends: the installed package, or this checkout's
    import selector.backends  # noqa: F401, E402
except ImportError:
    import backends as _backends  # noqa: E402
    sys.modules["selector.backends"] = _backends

from backends import reference as R  # noqa: E402
from backends.formats import nvfp4 as nv  # noqa: E402
from backends.reference import activation_fn, emulate_moe  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baselines import (  # noqa: E402
    ceilings,
    check_grouped,
    cuda_time,
    grouped_bf16_moe,
    limits,
    moe_bytes_flops,
    print_ceilings,
)
from baselines import graph_ms as _graph_ms  # noqa: E402

DSV3 = dict(num_experts=256, top_k=8, hidden=7168, inter=2048)
CPU_SHAPE = dict(num_experts=32, top_k=8, hidden=1024, inter=512)
#: --model: the routed experts of one layer at TP 1 (issue #46's shapes)
MODELS = {"dsv3": DSV3, "qwen3": dict(num_experts=128, top_k=8, hidden=2048, inter=768),
          "gptoss": dict(num_experts=128, top_k=4, hidden=2880, inter=2880),
          "mixtral": dict(num_experts=8, top_k=2, hidden=4096, inter=14336)}


def quantize_before(x, scale_2=None):
    """The quantizer as of commit 6e5197d (same results; for the speed comparison only)."""
    K = x.shape[-1]
    amax = nv.amax_checked(x)
    s2 = nv.scale_2_from_amax(amax) if scale_2 is None else torch.as_tensor(scale_2)
    rows = x.numel() // K
    x2 = x.reshape(rows, K)
    packed = torch.empty(rows, K // 2, dtype=torch.uint8)
    bs = torch.empty(rows, K // 16, dtype=torch.float8_e4m3fn)
    step = max(1, (1 << 20) // K)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        blocks = x2[r0:r1].float().reshape(r1 - r0, K // 16, 16)
        bsc = nv.to_e4m3(blocks.abs().amax(-1) / (6.0 * s2))
        denom = (bsc.float() * s2).unsqueeze(-1)
        scaled = torch.where(denom > 0, blocks / torch.where(denom > 0, denom, 1.0), 0.0)
        packed[r0:r1] = nv.pack_e2m1(nv.encode_e2m1(scaled).reshape(r1 - r0, K))
        bs[r0:r1] = bsc
    return packed, bs


def quantize_figures():
    x = torch.randn(4096, 7168, generator=torch.Generator().manual_seed(0))
    n = x.numel()
    rows = []
    threads = torch.get_num_threads()
    for nthreads in dict.fromkeys((threads, 1)):
        torch.set_num_threads(nthreads)
        t = time.perf_counter()
        q = nv.quantize(x)
        new = time.perf_counter() - t
        t = time.perf_counter()
        p, b = quantize_before(x)
        old = time.perf_counter() - t
        assert torch.equal(p, q.packed) and torch.equal(b.view(torch.uint8),
                                                       q.block_scale.view(torch.uint8))
        rows.append((nthreads, new, old))
    torch.set_num_threads(threads)
    print(f"quantize, 4096 x 7168 float32 on the CPU ({n / 1e6:.1f} M elements; results "
          "bit-identical):")
    for nthreads, new, old in rows:
        print(f"  {nthreads:2d} thread(s): {new:7.3f} s = {new / n * 1e6:.4f} us/element;  "
              f"before: {old:7.3f} s = {old / n * 1e6:.4f} us/element;  {old / new:.1f}x")


def random_nvfp4(shape, gen, device, scale_2=2e-3):
    """A valid NVFP4 checkpoint tensor: random codes, random normal E4M3 block scales."""
    *lead, K = shape
    packed = torch.randint(0, 256, (*lead, K // 2), dtype=torch.uint8, generator=gen,
                           device=device)
    bs = nv.to_e4m3(torch.rand((*lead, K // 16), generator=gen, device=device) * 440 + 8)
    return nv.NVFP4Tensor(packed, bs,
                          torch.full(tuple(lead[:1]), scale_2, device=device))


def timeit(fn, device, iters):
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def bf16_baseline(x, w13, w2, tw, ti, inter):
    """The same expert loop as emulate_moe on bf16 weights dequantized once (W4A16)."""
    E = w13.shape[0]
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    k = ti.shape[1]
    ids = ti.reshape(-1).long()
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids, minlength=E).tolist()
    start = 0
    for e, n in enumerate(counts):
        if not n:
            continue
        sel = order[start:start + n]
        start += n
        tok, slot = sel // k, sel % k
        h = (x[tok] @ w13[e].T).float()
        a = activation_fn(h, "silu", True).to(x.dtype)
        y.index_add_(0, tok, (a @ w2[e].T).float() * tw[tok, slot].unsqueeze(-1))
    return y.to(x.dtype)


def _kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def cpu_peak(fn):
    """Peak resident bytes ``fn`` adds (Linux: VmHWM reset through /proc/self/clear_refs; glibc
    maps every buffer >= 64 KiB on its own, see main(), so each transient peak is seen)."""
    Path("/proc/self/clear_refs").write_text("5")
    base = _kib("VmRSS")
    y = fn()
    peak = (max(_kib("VmHWM"), _kib("VmRSS")) - base) * 1024
    del y
    return peak


def moe_figures(cfg, tokens, device, iters, loop=False):
    E, k, H, I = cfg["num_experts"], cfg["top_k"], cfg["hidden"], cfg["inter"]
    wgen = torch.Generator(device=device).manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    w13 = random_nvfp4((E, 2 * I, H), wgen, device)
    w2 = random_nvfp4((E, H, I), wgen, device)
    ckpt = sum(t.packed.numel() + t.block_scale.numel() + 4 * t.scale_2.numel() for t in (w13, w2))
    print(f"\nMoE E={E} top-{k} H={H} I={I} on {device}; checkpoint {ckpt / 2 ** 30:.2f} GiB "
          f"(the emulation before cached float32 weights: "
          f"{E * 3 * I * H * 4 / ckpt:.1f}x = {E * 3 * I * H * 4 / 2 ** 30:.1f} GiB)")
    b13 = torch.stack([nv.dequantize(w13.packed[e], w13.block_scale[e], w13.scale_2[e],
                                     torch.bfloat16) for e in range(E)])
    b2 = torch.stack([nv.dequantize(w2.packed[e], w2.block_scale[e], w2.scale_2[e],
                                    torch.bfloat16) for e in range(E)])
    print(f"expert groups: at most {R.EXPERT_GROUP_BYTES / 2 ** 20:.0f} MiB of expanded FC1 "
          f"weights each")
    cuda = device.type == "cuda"
    if cuda:
        c = ceilings()
        print_ceilings(c)
        xg = torch.randn(64, H, generator=gen).bfloat16().to(device)
        lg = torch.randn(64, E, generator=gen)
        twg, tig = torch.topk(torch.softmax(lg, -1), k)
        print(check_grouped(xg, b13, b2, (twg / twg.sum(-1, keepdim=True)).to(device),
                            tig.int().to(device)))
    print("columns: fused = the emulation now (fused Triton kernels on CUDA); graph = the fused "
          "kernels alone (nvfp4_moe_triton.fused_moe, no argument checks) replayed from a CUDA "
          "graph; apply graph = the whole default call (emulate_moe, as apply() runs it) captured "
          "in a CUDA graph and replayed (nan: the capture failed, printed); grouped emu = the "
          "emulation before (batched GEMMs over expanded weights); loop = "
          "its per-expert loop (--loop); bf16 loop / grouped bf16 = the baselines on bf16 "
          "weights (grp graph: the grouped bf16 MoE replayed from a CUDA graph); fused/emu x grp = ms "
          "over grouped bf16 (graph x grp graph: both from graphs); mem / cmp lim = memory- and "
          "compute-bound limits; ckpt x = peak memory during a call (checkpoint + extra) over the "
          "checkpoint; check = fused vs grouped emu outputs")
    print(f"{'T':>5} {'quant':12} {'fused ms':>9} {'graph ms':>9} {'apply graph':>11} "
          f"{'grouped emu':>11} {'loop ms':>8} "
          f"{'bf16 loop':>9} {'grouped bf16':>12} {'grp graph':>9} {'fused x grp':>9} "
          f"{'graph x grp graph':>9} {'emu x grp':>9} "
          f"{'mem lim':>8} {'cmp lim':>8} {'fused ckpt x':>11} {'emu ckpt x':>11}  check")
    for T in tokens:
        x = torch.randn(T, H, generator=gen).bfloat16().to(device)
        logits = torch.randn(T, E, generator=gen)
        tw, ti = torch.topk(torch.softmax(logits, -1), k)
        tw, ti = (tw / tw.sum(-1, keepdim=True)).to(device), ti.int().to(device)
        t_bf = timeit(lambda: bf16_baseline(x, b13, b2, tw, ti, I), device, iters(T))
        t_gr, t_grg, mem, comp = float("nan"), float("nan"), float("nan"), float("nan")
        if cuda:
            t_gr = cuda_time(lambda: grouped_bf16_moe(x, b13, b2, tw, ti))
            t_grg = graph_ms(lambda: grouped_bf16_moe(x, b13, b2, tw, ti))
            per_expert = 3 * I * H // 2 + 3 * I * H // 16  # FP4 codes and E4M3 block scales
            nbytes, flops, _ = moe_bytes_flops(T, k, E, H, I, ti, per_expert)
            mem, comp = limits(nbytes, flops, c, fp8=False)
        for quant in ("nvfp4_w4a16", "nvfp4"):
            a = (torch.tensor(1 / 448, device=device), torch.full((E,), 1 / 448, device=device)) \
                if quant == "nvfp4" else (None, None)
            W = nv.MoEWeights(w13, w2, *a)

            def run(fused=None, grouped=None):
                return emulate_moe(x, W, tw, ti, activation="silu", quant=quant, fused=fused,
                                   grouped=grouped)
            t_em, t_gem, t_loop, t_graph, peak, t_apg = (float("nan"),) * 6
            check = "-"
            if cuda:
                try:  # the fused Triton path (the default on CUDA)
                    t_em = cuda_time(lambda: run(fused=True))
                    check = compare_text(run(fused=True), run(fused=False))
                    peak = cuda_peak(lambda: run(fused=True))
                    t_graph = graph_time(x, W, tw, ti, quant)
                    t_apg = graph_ms(lambda: run())
                except Exception as exc:  # noqa: BLE001 - a benchmark prints, never stops
                    print(f"  fused Triton path FAILED at T={T} {quant}: {type(exc).__name__}: "
                          f"{str(exc)[:2000]}", flush=True)
                    traceback.print_exc()
                t_gem = cuda_time(lambda: run(fused=False))
                peak_g = cuda_peak(lambda: run(fused=False))
                if loop:
                    t_loop = timeit(lambda: run(fused=False, grouped=False), device, iters(T))
            else:
                t_em = timeit(run, device, iters(T))
                peak = peak_g = cpu_peak(run)
            print(f"{T:5d} {quant:12} {t_em:9.3f} {t_graph:9.3f} {t_apg:11.3f} {t_gem:11.3f} {t_loop:8.3f} {t_bf:9.3f} "
                  f"{t_gr:12.3f} {t_grg:9.3f} {t_em / t_gr:9.2f} {t_graph / t_grg:9.2f} "
                  f"{t_gem / t_gr:9.2f} {mem:8.3f} {comp:8.3f} "
                  f"{1 + peak / ckpt:11.3f} {1 + peak_g / ckpt:11.3f}  {check}", flush=True)


def graph_time(x, W, tw, ti, quant):
    """Median ms of the fused kernels (``fused_moe``: the sort, both GEMMs, the W4A4 quantizers)
    captured once in a CUDA graph and replayed: no launch overhead, no host sync (NaN, with the
    error printed, if the capture fails)."""
    from backends.kernels.nvfp4_moe_triton import fused_moe
    s1 = W.a13_scale if quant == "nvfp4" else None
    s2 = W.a2_scale if quant == "nvfp4" else None

    def fn():
        return fused_moe(x, W, tw, ti, activation="silu", quant=quant, act_and_mul=True, s1=s1,
                         s2=s2)
    return graph_ms(fn)


def graph_ms(fn):
    """Median ms of ``fn`` captured once in a CUDA graph and replayed (NaN, with the error
    printed, if the capture fails)."""
    try:
        return _graph_ms(fn)
    except Exception as exc:  # noqa: BLE001 - a benchmark prints
        print(f"  CUDA graph capture failed: {type(exc).__name__}: {str(exc)[:500]}")
        return float("nan")


def cuda_peak(fn):
    """Peak bytes allocated during ``fn()`` beyond what was allocated before it."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del y
    return peak


def compare_text(y, ref):
    """``fused vs grouped``: how many outputs differ, max |diff| / max |ref| and the RMS ratio."""
    a, b = y.float(), ref.float()
    d = (a - b).abs()
    return (f"{int((d > 0).sum())}/{d.numel()} differ, max {float(d.max() / b.abs().max()):.2e}, "
            f"rms {float(d.norm() / b.norm()):.2e}")


def check_cases(device):
    """The fused path against the grouped emulation on small odd shapes (H 272, I 144, 8 experts,
    top-2, 37 tokens: the masked tile edges), every activation the emulation implements, W4A16
    and W4A4 with a scalar, per-expert and dynamic activation scale, both w13 orders."""
    from backends.reference import GATED_ACTIVATIONS, NON_GATED_ACTIVATIONS
    E, k, H, I, T = 8, 2, 272, 144, 37
    g = torch.Generator().manual_seed(1)
    print(f"\ncorrectness: fused vs grouped emulation, E={E} top-{k} H={H} I={I} T={T} "
          f"(seed 1; one slot unrouted)")
    x = torch.randn(T, H, generator=g).bfloat16().to(device)
    tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
    ti = ti.int()
    ti[0, 1] = -1
    tw, ti = tw.to(device), ti.to(device)
    worst = 0.0
    for gated in (True, False):
        w13 = nv.quantize(torch.randn(E, (2 if gated else 1) * I, H, generator=g), global_dims=1)
        w2 = nv.quantize(torch.randn(E, H, I, generator=g), global_dims=1)
        w13, w2 = w13.to(device), w2.to(device)
        for act in (GATED_ACTIVATIONS if gated else NON_GATED_ACTIVATIONS):
            for quant, scales in (("nvfp4_w4a16", (None, None)),
                                  ("nvfp4", (torch.tensor(0.004), torch.full((E,), 0.002))),
                                  ("nvfp4", (torch.rand(E) * 0.01 + 1e-3, torch.tensor(0.002))),
                                  ("nvfp4", (None, None))):
                orders = ("gate_up", "up_gate") if gated and act != "swigluoai" else ("gate_up",)
                for order in orders:
                    W = nv.MoEWeights(w13, w2, *[None if s is None else s.to(device)
                                                 for s in scales])
                    kw = dict(activation=act, quant=quant, w13_order=order,
                              swiglu_limit=5.0 if act == "silu" and gated else None)
                    label = (f"{'gated' if gated else 'plain'} {act:22} {quant:12} {order:8} "
                             f"scales {'dynamic' if scales[0] is None else tuple(s.dim() for s in scales)}")
                    if quant != "nvfp4":
                        label = label.rsplit(" scales", 1)[0]
                    try:
                        ref = emulate_moe(x, W, tw, ti, fused=False, **kw)
                        y = emulate_moe(x, W, tw, ti, fused=True, **kw)
                        d = (y.float() - ref.float()).abs()
                        rel = float(d.max() / ref.float().abs().max())
                        worst = max(worst, rel)
                        print(f"  {label}: {compare_text(y, ref)}", flush=True)
                    except Exception as exc:  # noqa: BLE001
                        print(f"  {label}: FAILED {type(exc).__name__}: {str(exc)[:500]}",
                              flush=True)
    print(f"  worst max |diff| / max |y|: {worst:.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a small MoE shape, no quantize figure")
    ap.add_argument("--full", action="store_true", help="the DeepSeek-V3 shape on the CPU too")
    ap.add_argument("--tokens", default="1,8,64,256")
    ap.add_argument("--skip-quantize", action="store_true", help="no CPU quantize figure")
    ap.add_argument("--loop", action="store_true", help="also time the per-expert loop (slow)")
    ap.add_argument("--no-check", action="store_true", help="no fused-vs-grouped check cases")
    ap.add_argument("--model", default="dsv3", choices=sorted(MODELS),
                    help="the expert shape on CUDA (default DeepSeek-V3)")
    ap.add_argument("--tiles", default="", help="JSON: the fused kernels' tiles for this run "
                    "(nvfp4_moe_triton.TILES keys; emulation_tiles.py prints the best as JSON)")
    args = ap.parse_args()
    if args.tiles:
        import json

        from backends.kernels import nvfp4_moe_triton
        nvfp4_moe_triton.TILES.update(json.loads(args.tiles))
        print(f"tiles: {nvfp4_moe_triton.TILES}")
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536" and not torch.cuda.is_available():
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
    tokens = [int(t) for t in args.tokens.split(",")]
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"torch {torch.__version__}; device {dev}"
          + (f" = {torch.cuda.get_device_name()}" if dev.type == "cuda" else
             f" ({torch.get_num_threads()} threads)"))
    if not args.quick and not args.skip_quantize:
        quantize_figures()
    cfg = MODELS[args.model] if (dev.type == "cuda" or args.full) and not args.quick \
        else CPU_SHAPE
    if args.quick:
        cfg = dict(num_experts=16, top_k=4, hidden=256, inter=128)
    iters = (lambda t: 10 if t <= 64 else 5) if dev.type == "cuda" else (lambda t: 3)
    if dev.type == "cuda" and not args.no_check:
        check_cases(dev)
    moe_figures(cfg, tokens, dev, iters, loop=args.loop)
    if dev.type == "cpu":
        print("\n(CPU memory: peak resident set added during one call)")


if __name__ == "__main__":
    main()
