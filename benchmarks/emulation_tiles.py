"""Tile sweep of the emulation's fused NVFP4 MoE kernels (``backends.kernels.nvfp4_moe_triton``) on CUDA.

    python3 benchmarks/emulation_tiles.py [--model dsv3] [--tokens 1,8,64,256] [--quick]
        [--block-m 32,64,128] [--jobs 8] [--graph]

An expert shape of ``emulation_bench.MODELS`` (default DeepSeek-V3: H 7168, I 2048, 256 experts,
top-8; random NVFP4 checkpoint, seed 0), W4A16; for each token count the median ms of each
configuration (BLOCK_M: the default by the rows an expert gets, or each of ``--block-m``;
BLOCK_N1, BLOCK_N2, BLOCK_K, num_warps, num_stages; SPLIT: even and odd columns as two GEMMs)
beside the default's, and each one's output against the default's (max |diff| / max |y|: a
wrong tiling shows here). Times: CUDA events around eager calls, or (``--graph``) around replays
of a CUDA graph of one call (no host time). ``--jobs N``: N child processes compile every
configuration first (Triton's on-disk cache), so the timed pass only loads them. A configuration
that does not compile prints its error. Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import cuda_time  # noqa: E402
from baselines import graph_ms as _graph_ms  # noqa: E402
from emulation_bench import MODELS, random_nvfp4  # noqa: E402

from backends.formats import nvfp4 as nv  # noqa: E402
from backends.kernels import nvfp4_moe_triton as F  # noqa: E402


def configs(quick: bool, block_ms):
    tiles = ((64, 64), (128, 128)) if quick else ((32, 64), (64, 64), (128, 128))
    ks = (128,) if quick else (128, 256)
    ws = ((4, 3), (8, 3))
    for bm, split, (bn1, bn2), bk, (nw, ns) in itertools.product(block_ms, (0, 1), tiles, ks, ws):
        c = dict(BLOCK_N1=bn1, BLOCK_N2=bn2, BLOCK_K=bk, num_warps=nw, num_stages=ns,
                 SPLIT=split)
        if bm:
            c["BLOCK_M"] = bm
        yield c


def build(model: str, dev):
    m = MODELS[model]
    E, k, H, I = m["num_experts"], m["top_k"], m["hidden"], m["inter"]
    wg = torch.Generator(device=dev).manual_seed(0)
    W = nv.MoEWeights(random_nvfp4((E, 2 * I, H), wg, dev), random_nvfp4((E, H, I), wg, dev))
    return E, k, H, W


def inputs(T, E, k, H, dev, g):
    x = torch.randn(T, H, generator=g).bfloat16().to(dev)
    tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
    return x, tw.to(dev), ti.int().to(dev)


def compile_only(args, cfgs):
    """Compile each of `cfgs` (one small call each): fills Triton's on-disk cache."""
    dev = torch.device("cuda")
    E, k, H, W = build(args.model, dev)
    x, tw, ti = inputs(64, E, k, H, dev, torch.Generator().manual_seed(0))
    for cfg in cfgs:
        try:
            F.fused_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16", act_and_mul=True,
                        config=cfg)
        except Exception:  # noqa: BLE001 - the timed pass prints the error
            pass
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="dsv3", choices=sorted(MODELS))
    ap.add_argument("--tokens", default="1,8,64,256")
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    ap.add_argument("--block-m", default="", help="BLOCK_M values to sweep (default: by shape)")
    ap.add_argument("--jobs", type=int, default=0, help="compile in N child processes first")
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays")
    ap.add_argument("--part", default="", help=argparse.SUPPRESS)  # i/n: a compile child
    args = ap.parse_args()
    block_ms = [int(b) for b in args.block_m.split(",") if b] or [0]
    cfgs = list(configs(args.quick, block_ms))
    if args.part:
        i, n = (int(v) for v in args.part.split("/"))
        compile_only(args, cfgs[i::n])
        return
    if args.jobs:
        kids = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--part",
                                  f"{i}/{args.jobs}"], env=os.environ)
                for i in range(args.jobs)]
        for p in kids:
            p.wait()
    dev = torch.device("cuda")
    E, k, H, W = build(args.model, dev)
    g = torch.Generator().manual_seed(0)
    timer = (lambda fn: _graph_ms(fn)) if args.graph else (
        lambda fn: cuda_time(fn, min_iters=5, budget_s=0.05))
    best = None
    for T in [int(t) for t in args.tokens.split(",")]:
        x, tw, ti = inputs(T, E, k, H, dev, g)
        res = []

        def run(cfg):
            return F.fused_moe(x, W, tw, ti, activation="silu", quant="nvfp4_w4a16",
                               act_and_mul=True, config=cfg)
        ref = None
        try:
            ref = run(None)
            ms = timer(lambda: run(None))
            print(f"{args.model} T={T}: default {ms:.3f} ms (BLOCK_M "
                  f"{F.block_m(T * k, E)}, {F.TILES})", flush=True)
        except Exception as exc:  # noqa: BLE001 - a sweep prints
            print(f"{args.model} T={T}: default failed: {type(exc).__name__}: {str(exc)[:200]}")
        for cfg in cfgs:
            try:
                y = run(cfg)
                d = float((y - ref).abs().max() / ref.abs().max()) if ref is not None else 0.0
                res.append((timer(lambda: run(cfg)), cfg, d))
                print(f"  {res[-1][0]:8.3f} ms  diff {d:.1e}  {cfg}", flush=True)
            except Exception as exc:  # noqa: BLE001 - a sweep prints
                print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
        res.sort(key=lambda r: r[0])
        for t, cfg, d in res[:4]:
            print(f"  best {t:8.3f} ms  diff {d:.1e}  {cfg}", flush=True)
        if res:
            best = res[0][1]
            print(f"BEST {args.model} T={T} {res[0][0]:.3f} ms " + json.dumps(best), flush=True)


if __name__ == "__main__":
    main()
