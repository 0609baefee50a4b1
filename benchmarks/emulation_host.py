"""Where the host's time goes in one eager emulation MoE call at decode (T=1, DeepSeek-V3's
expert shape, W4A16 and W4A4): the wall time of the call with and without waiting for the GPU,
and torch.profiler's CPU operators by self time. Prints; asserts nothing.

    python3 benchmarks/emulation_host.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from emulation_bench import DSV3, random_nvfp4  # noqa: E402

from backends.formats import nvfp4 as nv  # noqa: E402
from backends.reference import emulate_moe  # noqa: E402


def main():
    E, k, H, I = DSV3["num_experts"], DSV3["top_k"], DSV3["hidden"], DSV3["inter"]
    dev = torch.device("cuda")
    wg = torch.Generator(device=dev).manual_seed(0)
    w13, w2 = random_nvfp4((E, 2 * I, H), wg, dev), random_nvfp4((E, H, I), wg, dev)
    x = torch.randn(1, H, device=dev).bfloat16()
    tw, ti = torch.topk(torch.softmax(torch.randn(1, E, device=dev), -1), k)
    ti = ti.int()
    for quant in ("nvfp4_w4a16", "nvfp4"):
        a = (torch.tensor(1 / 448, device=dev), torch.full((E,), 1 / 448, device=dev)) \
            if quant == "nvfp4" else (None, None)
        W = nv.MoEWeights(w13, w2, *a)

        def fn():
            return emulate_moe(x, W, tw, ti, activation="silu", quant=quant)
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        host, full = [], []
        for _ in range(50):
            t = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t)
            torch.cuda.synchronize()
            full.append(time.perf_counter() - t)
        host.sort()
        full.sort()
        print(f"{quant}: host (returns) {host[25] * 1e3:.3f} ms, with the GPU {full[25] * 1e3:.3f} "
              "ms (medians of 50)")
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                fn()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    main()
