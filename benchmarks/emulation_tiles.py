"""Tile sweep of the emulation's fused NVFP4 MoE kernels (``backends.kernels.nvfp4_moe_triton``) on CUDA.

    python3 benchmarks/emulation_tiles.py [--tokens 1,8,64,256] [--quick]

DeepSeek-V3's expert shape (H 7168, I 2048, 256 experts, top-8; random NVFP4 checkpoint, seed 0),
W4A16; for each token count the median ms (CUDA events) of each configuration (BLOCK_M by the
rows an expert gets; BLOCK_N1, BLOCK_N2, BLOCK_K, num_warps, num_stages; SPLIT: even and odd
columns as two GEMMs) beside the default's, and each one's output against the default's
(max |diff| / max |y|: a wrong tiling shows here). Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import cuda_time  # noqa: E402
from emulation_bench import DSV3, random_nvfp4  # noqa: E402

from backends.formats import nvfp4 as nv  # noqa: E402
from backends.kernels import nvfp4_moe_triton as F  # noqa: E402


def configs(quick: bool):
    tiles = ((64, 64), (128, 128)) if quick else ((32, 64), (64, 64), (128, 128))
    ks = (128,) if quick else (128, 256)
    ws = ((4, 3), (8, 3))
    for split, (bn1, bn2), bk, (nw, ns) in itertools.product((0, 1), tiles, ks, ws):
        yield dict(BLOCK_N1=bn1, BLOCK_N2=bn2, BLOCK_K=bk, num_warps=nw, num_stages=ns,
                   SPLIT=split)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,8,64,256")
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    args = ap.parse_args()
    E, k, H, I = DSV3["num_experts"], DSV3["top_k"], DSV3["hidden"], DSV3["inter"]
    dev = torch.device("cuda")
    wg = torch.Generator(device=dev).manual_seed(0)
    W = nv.MoEWeights(random_nvfp4((E, 2 * I, H), wg, dev), random_nvfp4((E, H, I), wg, dev))
    g = torch.Generator().manual_seed(0)
    best = None
    for T in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(T, H, generator=g).bfloat16().to(dev)
        tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
        tw, ti = tw.to(dev), ti.int().to(dev)
        res = []

        def run(cfg):
            return F.fused_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16",
                               act_and_mul=True, config=cfg)
        ref = run(None)
        ms = cuda_time(lambda: run(None))
        print(f"T={T}: default {ms:.3f} ms (BLOCK_M {F.block_m(T * k, E)})", flush=True)
        for cfg in configs(args.quick):
            try:
                y = run(cfg)
                d = float((y - ref).abs().max() / ref.abs().max())
                res.append((cuda_time(lambda: run(cfg), min_iters=5, budget_s=0.05), cfg, d))
                print(f"  {res[-1][0]:8.3f} ms  diff {d:.1e}  {cfg}", flush=True)
            except Exception as exc:  # noqa: BLE001 - a sweep prints
                print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        res.sort(key=lambda r: r[0])
        for t, cfg, d in res[:4]:
            print(f"  best {t:8.3f} ms  diff {d:.1e}  {cfg}", flush=True)
        if res:
            best = res[0][1]
    if best is not None:  # the last token count's fastest (the largest: the hardest)
        print("BEST " + json.dumps(best))


if __name__ == "__main__":
    main()
