"""Tile sweep of the emulation's fused NVFP4 MoE kernels (``backends.nvfp4_moe_triton``) on CUDA.

    python3 benchmarks/emulation_tiles.py [--tokens 1,8,64,256]

DeepSeek-V3's expert shape (H 7168, I 2048, 256 experts, top-8; random NVFP4 checkpoint, seed 0),
W4A16; for each token count the median ms (CUDA events) of each (BLOCK_M, BLOCK_N1, BLOCK_N2,
BLOCK_K, num_warps, SPLIT) and the default's. Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import cuda_time  # noqa: E402
from emulation_bench import DSV3, random_nvfp4  # noqa: E402

from backends import nvfp4 as nv  # noqa: E402
from backends import nvfp4_moe_triton as F  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,8,64,256")
    args = ap.parse_args()
    E, k, H, I = DSV3["num_experts"], DSV3["top_k"], DSV3["hidden"], DSV3["inter"]
    dev = torch.device("cuda")
    wg = torch.Generator(device=dev).manual_seed(0)
    W = nv.MoEWeights(random_nvfp4((E, 2 * I, H), wg, dev), random_nvfp4((E, H, I), wg, dev))
    g = torch.Generator().manual_seed(0)
    for T in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(T, H, generator=g).bfloat16().to(dev)
        tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
        tw, ti = tw.to(dev), ti.int().to(dev)
        res = []

        def run(cfg):
            return F.fused_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16",
                               act_and_mul=True, config=cfg)
        ms = cuda_time(lambda: run(None))
        print(f"T={T}: default {ms:.3f} ms (BLOCK_M {F.block_m(T * k, E)})", flush=True)
        b0 = F.block_m(T * k, E)
        for split, (bn1, bn2), bk, nw in itertools.product(
                (0, 1), ((32, 64), (64, 64), (64, 128), (128, 128)), (128, 256), (4, 8)):
            cfg = dict(BLOCK_M=b0, BLOCK_N1=bn1, BLOCK_N2=bn2, BLOCK_K=bk, num_warps=nw,
                       num_stages=3, SPLIT=split)
            try:
                res.append((cuda_time(lambda: run(cfg), min_iters=5, budget_s=0.05), cfg))
                print(f"  {res[-1][0]:8.3f} ms  {cfg}", flush=True)
            except Exception as exc:  # noqa: BLE001 - a sweep prints
                print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        res.sort(key=lambda r: r[0])
        for t, cfg in res[:4]:
            print(f"  best {t:8.3f} ms  {cfg}", flush=True)


if __name__ == "__main__":
    main()
