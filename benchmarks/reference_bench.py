"""Time the reference NVFP4 linear layer and fused MoE (the ``emulation`` backend) next to bf16.

    PYTHONUNBUFFERED=1 python3 benchmarks/reference_bench.py [--quick] [--memory-only]

Runs on CUDA when a GPU is visible, else on CPU. For each shape it prints the reference time
(what ``EmulationLinear``/``EmulationMoE.apply`` run: the routed experts expanded to bf16 per
call, bf16 GEMMs; benchmarks/emulation_bench.py has the DeepSeek-V3-shape figures and the
memory), a bf16 matmul of the same shape, and their ratio. With a GPU it also runs the same inputs
on the CPU and prints how far the CUDA results are from the CPU ones.

It first measures the peak memory of ``quantize`` and ``dequantize`` of an 8192 x 8192 float32
matrix, as a multiple of that matrix's size (CUDA: ``max_memory_allocated``; CPU: the process's
peak resident set, reset through ``/proc/self/clear_refs`` once the input exists, each operation in
a fresh process).

The reference never uses FP4 tensor cores (SM 9.0 has none; SM100/SM120 kernels are FlashInfer's
and are not run here): its times say what the emulation fallback costs, nothing about FP4 kernels.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from backends.formats import nvfp4 as nv  # noqa: E402
from backends.reference import route  # noqa: E402
from backends.wrappers.emulation import EmulationLinear, EmulationMoE  # noqa: E402

LINEAR_NK = (4096, 4096)                                 # out_features N, in_features K
MOE = dict(num_experts=64, top_k=8, hidden=2048, inter=768)   # a Qwen3-30B-A3B-sized expert layer
DECODE_TOKENS = (1, 16, 64)
PREFILL_TOKENS = (512, 2048)


def random_nvfp4(shape, gen, scale_2=2e-3, global_dims=0):
    """Valid NVFP4 weights without a quantization pass: random codes, random E4M3 block scales."""
    *lead, K = shape
    packed = torch.randint(0, 256, tuple(lead) + (K // 2,), dtype=torch.uint8, generator=gen)
    bs = nv.to_e4m3(torch.rand(tuple(lead) + (K // 16,), generator=gen) * 440 + 8)
    s2 = torch.full(tuple(lead[:global_dims]), scale_2) if global_dims else torch.tensor(scale_2)
    return nv.NVFP4Tensor(packed, bs, s2)


def timeit(fn, device, iters):
    for _ in range(2):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


MEMORY_SHAPE = (8192, 8192)


def _status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(op: str, device: str) -> None:
    """One measurement in this (fresh) process: prints the peak extra bytes of ``op``."""
    dev = torch.device(device)
    x = torch.randn(MEMORY_SHAPE, generator=torch.Generator().manual_seed(0)).to(dev)
    q = nv.quantize(x) if op == "dequantize" else None
    if dev.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y = nv.quantize(x) if op == "quantize" else q.dequantize()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        Path("/proc/self/clear_refs").write_text("5")      # reset the peak RSS (VmHWM) to now
        base = _status_kib("VmRSS")
        y = nv.quantize(x) if op == "quantize" else q.dequantize()
        peak = (max(_status_kib("VmHWM"), _status_kib("VmRSS")) - base) * 1024
    del y
    print(peak)


def memory_figures(device: str):
    """``[(op, peak extra bytes, peak / tensor bytes)]``, each op in a fresh process."""
    size = MEMORY_SHAPE[0] * MEMORY_SHAPE[1] * 4
    rows = []
    for op in ("quantize", "dequantize"):
        # glibc: every buffer >= 64 KiB its own mapping, unmapped when freed, so the kernel's
        # peak-RSS bookkeeping (updated at each unmap) sees every transient peak
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        out = subprocess.run([sys.executable, __file__, "--memory-child", op, "--device", device],
                             capture_output=True, text=True, check=True, env=env)
        peak = int(out.stdout.strip().splitlines()[-1])
        rows.append((op, peak, peak / size))
    return rows


def compare(gpu_out, cpu_out):
    d = (gpu_out.double().cpu() - cpu_out.double()).abs()
    ref = cpu_out.double().abs().max().item()
    far = (d > 1e-3 * ref).double().mean().item()
    return d.max().item(), d.max().item() / ref, far


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small shapes (a CPU smoke run)")
    ap.add_argument("--no-cpu-check", action="store_true")
    ap.add_argument("--memory-only", action="store_true", help="only the memory figures")
    ap.add_argument("--memory-child", choices=("quantize", "dequantize"), help=argparse.SUPPRESS)
    ap.add_argument("--device", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.device)
        return
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mb = MEMORY_SHAPE[0] * MEMORY_SHAPE[1] * 4 / 2 ** 20
    print(f"peak memory on {dev.type}, {MEMORY_SHAPE[0]}x{MEMORY_SHAPE[1]} float32 ({mb:.0f} MiB), "
          "beyond the input:")
    for op, peak, ratio in memory_figures(dev.type):
        print(f"  {op:11} {peak / 2 ** 20:8.1f} MiB = {ratio:.2f}x the tensor")
    if args.memory_only:
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(max(1, torch.get_num_threads()))
    gen = torch.Generator().manual_seed(0)

    print(f"torch {torch.__version__}; device {dev}", end="")
    if dev.type == "cuda":
        cc = torch.cuda.get_device_capability()
        print(f" = {torch.cuda.get_device_name()} (SM {cc[0]}.{cc[1]}; CUDA {torch.version.cuda})")
        if cc < (10, 0):
            print(f"SM {cc[0]}.{cc[1]} has no FP4 tensor cores: every NVFP4 number below is the reference "
                  "(dequantize + fp32 matmul); no FP4 kernel ran")
    else:
        print(f" ({torch.get_num_threads()} threads)")
    print("float32 matmuls with TF32 off; times are medians in ms\n")

    N, K = (512, 1024) if args.quick else LINEAR_NK
    cfg = dict(num_experts=8, top_k=2, hidden=256, inter=128) if args.quick else MOE
    tokens = ((1, 16), (128,)) if args.quick else (DECODE_TOKENS, PREFILL_TOKENS)
    iters_for = (lambda m: 3) if (args.quick or dev.type == "cpu") else (lambda m: 20 if m <= 64 else 8)
    check = dev.type == "cuda" and not args.no_cpu_check

    rows, errs = [], []
    # ---------------------------------------------------------------- linear
    w = random_nvfp4((N, K), gen)
    for quant in ("nvfp4", "nvfp4_w4a16"):
        lw_cpu = nv.LinearWeights(w, torch.tensor(1.0 / 448) if quant == "nvfp4" else None)
        lw = nv.LinearWeights(w.to(dev), None if lw_cpu.input_scale is None else lw_cpu.input_scale.to(dev))
        emu = EmulationLinear(quant=quant)
        prep = emu.prepare(lw)
        w_bf16 = lw.weight.dequantize(torch.bfloat16)
        prep_cpu = emu.prepare(lw_cpu) if check else None
        for phase, ms in zip(("decode", "prefill"), tokens):
            for m in ms:
                x_cpu = torch.randn(m, K, generator=gen).bfloat16()
                x = x_cpu.to(dev)
                out = torch.empty(m, N, dtype=x.dtype, device=dev)
                t_ref = timeit(lambda: emu.apply(x, prep, out=out), dev, iters_for(m))
                t_bf = timeit(lambda: x @ w_bf16.T, dev, iters_for(m))
                rows.append(("linear", quant, phase, f"M={m} N={N} K={K}", t_ref, t_bf))
                if check:  # float32 copies of the bf16 inputs (same values), float32 outputs
                    y_gpu = emu.apply(x.float(), prep)
                    y_cpu = emu.apply(x_cpu.float(), prep_cpu)
                    errs.append(("linear", quant, f"M={m}") + compare(y_gpu, y_cpu))

    # ---------------------------------------------------------------- MoE
    E, k, Hd, In = cfg["num_experts"], cfg["top_k"], cfg["hidden"], cfg["inter"]
    w13 = random_nvfp4((E, 2 * In, Hd), gen, global_dims=1)
    w2 = random_nvfp4((E, Hd, In), gen, global_dims=1)
    for quant in ("nvfp4", "nvfp4_w4a16"):
        a = (torch.tensor(1.0 / 448), torch.tensor(40.0 / 2688)) if quant == "nvfp4" else (None, None)
        W_cpu = nv.MoEWeights(w13, w2, *a)
        W = nv.MoEWeights(w13.to(dev), w2.to(dev), *(None if s is None else s.to(dev) for s in a))
        emu = EmulationMoE(quant=quant, activation="silu")
        prep = emu.prepare(W)
        bf13, bf2 = W.w13.dequantize(torch.bfloat16), W.w2.dequantize(torch.bfloat16)
        prep_cpu = emu.prepare(W_cpu) if check else None

        def bf16_moe(x, tw, ti):
            """The same expert loop with bf16 weights and no quantization."""
            y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            ids = ti.long()
            for e in torch.unique(ids).tolist():
                tok, slot = torch.nonzero(ids == e, as_tuple=True)
                h = x[tok] @ bf13[e].T
                act = torch.nn.functional.silu(h[:, :In]) * h[:, In:]
                y.index_add_(0, tok, (act @ bf2[e].T).float() * tw[tok, slot].unsqueeze(-1))
            return y

        for phase, ts in zip(("decode", "prefill"), tokens):
            for t in ts:
                x_cpu = torch.randn(t, Hd, generator=gen).bfloat16()
                tw_cpu, ti_cpu = route(torch.randn(t, E, generator=gen), k)
                x, tw, ti = x_cpu.to(dev), tw_cpu.to(dev), ti_cpu.to(dev)
                out = torch.empty(t, Hd, dtype=x.dtype, device=dev)
                t_ref = timeit(lambda: emu.apply(x, prep, tw, ti, out=out), dev, iters_for(t))
                t_bf = timeit(lambda: bf16_moe(x, tw, ti), dev, iters_for(t))
                rows.append(("moe", quant, phase, f"T={t} E={E} k={k} H={Hd} I={In}", t_ref, t_bf))
                if check:
                    y_gpu = emu.apply(x.float(), prep, tw, ti)
                    y_cpu = emu.apply(x_cpu.float(), prep_cpu, tw_cpu, ti_cpu)
                    errs.append(("moe", quant, f"T={t}") + compare(y_gpu, y_cpu))

    hdr = f"{'op':7}{'quant':13}{'phase':9}{'shape':34}{'reference ms':>13}{'bf16 ms':>10}{'ratio':>8}"
    print(hdr)
    print("-" * len(hdr))
    for op, q, ph, shape, tr, tb in rows:
        print(f"{op:7}{q:13}{ph:9}{shape:34}{tr:13.3f}{tb:10.3f}{tr / tb:8.1f}")
    print("\nbf16 column: linear = x_bf16 @ W_bf16.T; moe = the same expert loop with bf16 weights "
          "and no activation quantization")
    if errs:
        print("\nCUDA vs CPU (float32 outputs; rel = max|diff| / max|cpu|; far = share of elements "
              "with |diff| > 1e-3 max|cpu|)")
        print(f"{'op':7}{'quant':13}{'shape':10}{'max abs':>12}{'max rel':>12}{'far':>10}")
        for op, q, shape, ab, rel, far in errs:
            print(f"{op:7}{q:13}{shape:10}{ab:12.3e}{rel:12.3e}{far:10.2e}")
    elif dev.type != "cuda":
        print("\nno CUDA device: the CUDA-vs-CPU comparison did not run")


if __name__ == "__main__":
    main()
