"""The emulation's block table on CUDA: the one-program Triton form against the torch form
(``backends.kernels.nvfp4_moe_triton.route_blocks``), seeded random routings up to 4,096 tokens x top-8
over 256 experts; prints the mismatches (0 expected) and each form's median time.

    python3 benchmarks/route_check.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import cuda_time  # noqa: E402

from backends.kernels.nvfp4_moe_triton import route_blocks  # noqa: E402


def main():
    dev = torch.device("cuda")
    bad = 0
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        E = (8, 64, 128, 256, 300)[seed % 5]
        T = int(torch.randint(1, 4097, (1,), generator=g))
        k = min(E, 8)
        bm = (16, 32, 64)[seed % 3]
        ids = torch.topk(torch.rand(T, E, generator=g), k).indices.int()
        ids[torch.rand(T, k, generator=g) < 0.05] = -1
        ids = ids.to(dev)
        a = route_blocks(ids, E, bm, kernel=False)
        b = route_blocks(ids, E, bm, kernel=True)
        used = a[1] >= 0
        bad += not (torch.equal(a[0], b[0]) and torch.equal(a[4], b[4]) and torch.equal(a[1], b[1])
                    and torch.equal(a[2][used], b[2][used]) and torch.equal(a[3][used], b[3][used]))
    print(f"route_blocks: Triton table vs torch table, 40 seeded routings: {bad} mismatches")
    ids = torch.topk(torch.rand(1, 256), 8).indices.int().to(dev)
    for kernel in (False, True):
        ms = cuda_time(lambda: route_blocks(ids, 256, 16, kernel=kernel))
        print(f"  T=1, 256 experts, top-8: {'Triton' if kernel else 'torch'} form {ms:.3f} ms "
              "(eager, host included)")


if __name__ == "__main__":
    main()
