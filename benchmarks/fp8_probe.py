"""What torch's block-scaled ``_scaled_mm`` wants and what Triton's FP8 accumulation costs, on a GPU.

    python benchmarks/fp8_probe.py

1. Block-wise ``_scaled_mm`` (1x128 activations x 128x128 weights): the weight scale given three
   ways (``[K/128, N/128]`` the transpose of a contiguous ``[N/128, K/128]``, as vLLM 0.32.0
   passes it; the same with its K/128 columns padded to a multiple of 4, as pytorch #166752
   describes cuBLASLt's layout, full and sliced), for K/128 = 2, 3, 4, 6, 56: each one's max
   relative error against ``backends.reference.reference_fp8_linear``.
2. The Triton block-FP8 kernel with ``tl.dot``'s ``max_num_imprecise_acc`` = default, 0, 32, 64:
   error and time on DeepSeek-V3's down_proj (N 7168, K 18432) at 1024 tokens.
3. The grouped FP8 MoE at one token: the whole ``apply`` against its two grouped GEMMs alone.
"""
from __future__ import annotations

import statistics

import torch

from selector.backends.formats import fp8
from selector.backends.reference import reference_fp8_linear


def rel(y, ref) -> float:
    y, ref = y.double(), ref.double()
    return float((y - ref).abs().max() / ref.abs().max())


def ms(fn, n=50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def block_layouts() -> None:
    dev = "cuda"
    for kb in (2, 3, 4, 6, 56):
        K, N, M = 128 * kb, 256, 68
        g = torch.Generator(device=dev).manual_seed(kb)
        w = fp8.make_linear_weights(torch.randn(N, K, generator=g, device=dev) *
                                    torch.exp2(torch.randint(-3, 3, (N, K), generator=g,
                                                             device=dev).float()), "fp8_block")
        x = torch.randn(M, K, generator=g, device=dev).bfloat16()
        ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
        a, sa = fp8.quantize_activation(x, "fp8_block")
        sa_cm = sa.t().contiguous().t()  # [M, kb] column-major
        s = w.weight_scale
        l4 = -(-kb // 4) * 4
        pad = torch.ones(s.shape[0], l4, device=dev)
        pad[:, :kb] = s
        variants = {"vLLM: Bs.t() of [N/128, K/128]": s.t(),
                    "L4-padded [N/128, L4].t() (full)": pad.t(),
                    "L4-padded [N/128, L4].t()[:K/128]": pad.t()[:kb]}
        for name, sb in variants.items():
            try:
                y = torch._scaled_mm(a, w.weight.t(), scale_a=sa_cm, scale_b=sb,
                                     out_dtype=torch.bfloat16)
                torch.cuda.synchronize()
                r = f"max rel err {rel(y, ref):.3g}"
            except Exception as exc:  # noqa: BLE001
                r = f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"
            print(f"block-wise K/128={kb:3d}  {name:36s} {r}", flush=True)


def triton_imprecise() -> None:
    from selector.backends.wrappers.triton_fp8 import block_fp8_matmul
    dev = "cuda"
    N, K, M = 7168, 18432, 1024
    g = torch.Generator(device=dev).manual_seed(0)
    w = fp8.make_linear_weights(torch.randn(N, K, generator=g, device=dev) / K ** 0.5,
                                "fp8_block")
    x = torch.randn(M, K, generator=g, device=dev).bfloat16()
    ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
    a, sa = fp8.quantize_activation(x, "fp8_block")
    for mi in ("default", 0, 32, 64, 128):
        def f(mi=mi):
            return block_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16, None,
                                    max_imprecise=None if mi == "default" else mi)
        try:
            y = f()
            print(f"triton max_num_imprecise_acc={mi!s:8s} max rel err {rel(y, ref):.3g}  "
                  f"{ms(f):.4f} ms", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"triton max_num_imprecise_acc={mi}: {type(exc).__name__}: {exc}", flush=True)


def grouped_overhead() -> None:
    from selector.backends.reference import route
    from selector.backends.wrappers.torch_grouped_fp8 import TorchGroupedFp8MoE
    dev = "cuda"
    E, H, I, K = 128, 2048, 768, 8
    g = torch.Generator(device=dev).manual_seed(0)
    w = fp8.make_moe_weights(torch.randn(E, 2 * I, H, generator=g, device=dev) / 45,
                             torch.randn(E, H, I, generator=g, device=dev) / 27, "fp8_channel")
    impl = TorchGroupedFp8MoE(quant="fp8_channel", activation="silu",
                              selector_overrides=["platform=auto"])
    p = impl.prepare(w)
    for T in (1, 128):
        x = torch.randn(T, H, generator=g, device=dev).bfloat16()
        tw, ti = route(torch.randn(T, E, generator=g, device=dev), K)
        whole = ms(lambda: impl.apply(x, p, tw, ti))
        rows = 16 * len(torch.unique(ti))
        a1 = torch.zeros(rows, H, device=dev).to(torch.float8_e4m3fn)
        offs = torch.cumsum(torch.full((E,), 0, device=dev).index_fill_(
            0, torch.unique(ti).long(), 16), 0).to(torch.int32)
        s1 = torch.ones(rows, device=dev)
        a2 = torch.zeros(rows, I, device=dev).to(torch.float8_e4m3fn)
        gemms = ms(lambda: (torch._scaled_grouped_mm(a1, p.w13.transpose(-2, -1), s1,
                                                     p.w13_scale, offs=offs,
                                                     out_dtype=torch.bfloat16),
                            torch._scaled_grouped_mm(a2, p.w2.transpose(-2, -1), s1,
                                                     p.w2_scale, offs=offs,
                                                     out_dtype=torch.bfloat16)))
        print(f"grouped MoE T={T}: apply {whole:.4f} ms, its two grouped GEMMs alone "
              f"{gemms:.4f} ms", flush=True)


if __name__ == "__main__":
    block_layouts()
    triton_imprecise()
    grouped_overhead()
