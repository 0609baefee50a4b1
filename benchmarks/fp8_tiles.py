"""The Triton block-FP8 GEMM's tile sizes at decode, against the bf16 matmul and the limits.

    python benchmarks/fp8_tiles.py [--scaled [--quick] | --decode | --large | --quant]

For DeepSeek-V3's dense gate_up (N 36864, K 7168) and down (7168 x 18432) and Qwen3-8B's
gate_up (24576 x 4096) at T = 1 and 16: ``backends.wrappers.triton_fp8.block_fp8_matmul`` (the GEMM alone,
its activation already quantized) for each tile configuration, its quantizer
(``backends.kernels.fp8_act_quant``) alone, and a bf16 ``torch.matmul`` of the same shape, each replayed
from a CUDA graph (the GPU's time; medians of CUDA events); the memory-bound limit (FP8 weight
over the measured copy bandwidth). The shipped choice is ``triton_fp8.tile_config``.
``--scaled``: the per-channel GEMM (``triton_fp8.scaled_fp8_matmul``, fp8_channel) on Llama-3.1-8B's
down (4096 x 14336) and gate_up (28672 x 4096) projections, over split-K counts and K steps
(``--quick``: the down projection, over split-K counts only).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import ceilings, graph_ms, print_ceilings  # noqa: E402

SHAPES = [("DeepSeek-V3 gate_up", 36864, 7168), ("DeepSeek-V3 down", 7168, 18432),
          ("Qwen3-8B gate_up", 24576, 4096)]
CONFIGS = [dict(BLOCK_M=16, BLOCK_N=n, num_warps=w, num_stages=s)
           for n in (32, 64, 128) for w in (4,) for s in (3, 4, 6)] + [
    dict(BLOCK_M=16, BLOCK_N=128, num_warps=8, num_stages=4)] + [
    dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4, SPLIT_K=k) for k in (1, 2, 3, 4, 6)]


SCALED_SHAPES = [("Llama-3.1-8B down", 4096, 14336), ("Llama-3.1-8B gate_up", 28672, 4096)]
SCALED_CONFIGS = [dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4, SPLIT_K=k)
                  for k in (1, 2, 3, 4, 6, 8, 12)] + [
    dict(BLOCK_M=16, BLOCK_N=n, num_warps=4, num_stages=4, SPLIT_K=k)
    for n in (32, 128) for k in (2, 4, 8)] + [
    dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3, SPLIT_K=k)
    for k in (2, 4, 8)]


def scaled() -> None:
    from selector.backends.formats.fp8 import make_linear_weights
    from selector.backends.kernels.fp8_act_quant import quantize_activation
    from selector.backends.wrappers.triton_fp8 import _sm_count, scaled_fp8_matmul, split_k, tile_config
    c = ceilings()
    print_ceilings(c)
    gen = torch.Generator(device="cuda").manual_seed(0)
    quick = "--quick" in sys.argv[1:]
    for name, n, k in SCALED_SHAPES[:1] if quick else SCALED_SHAPES:
        w = make_linear_weights(torch.randn(n, k, generator=gen, device="cuda") / k ** 0.5,
                                "fp8_channel")
        wbf = w.dequantize(torch.float32).bfloat16()
        for t in (1, 16):
            x = torch.randn(t, k, generator=gen, device="cuda").bfloat16()
            a, sa = quantize_activation(x, "fp8_channel")
            ref = scaled_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16)
            bf = graph_ms(lambda: torch.matmul(x, wbf.t()))
            q = graph_ms(lambda: quantize_activation(x, "fp8_channel"))
            shipped = graph_ms(lambda: scaled_fp8_matmul(a, sa, w.weight, w.weight_scale,
                                                         torch.bfloat16))
            mem = (n * k + 2 * t * (n + k)) / c["bandwidth_GBps"] / 1e6
            print(f"\n{name} [{n}, {k}] T={t}: bf16 graph {bf:.4f} ms, quantize {q:.4f} ms, "
                  f"memory limit {mem:.4f} ms; shipped {tile_config(t)}, split-K "
                  f"{split_k(t, n, -(-k // 128), tile_config(t)['BLOCK_N'], _sm_count(x.device))}"
                  f": {shipped:.4f} ms, +quantize {(shipped + q) / bf:.2f}x bf16")
            for cfg in SCALED_CONFIGS[:7] if quick else SCALED_CONFIGS:
                try:
                    y = scaled_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16,
                                          cfg=cfg)
                    same = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
                    ms = graph_ms(lambda cfg=cfg: scaled_fp8_matmul(
                        a, sa, w.weight, w.weight_scale, torch.bfloat16, cfg=cfg))
                    print(f"  {cfg}: {ms:.4f} ms, +quantize {(ms + q) / bf:.2f}x bf16, "
                          f"{mem / ms:.0%} of the memory limit; diff {same:.2g}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:100]}")


def decode() -> None:
    """``--decode``: Llama-3.1-8B's per-channel down_proj at T = 1 and 16, each piece's GPU time
    a call inside one CUDA graph of 24 calls over weight copies past the L2
    (``baselines.graph_calls_ms``): the bf16 matmul, the quantizer, the GEMM over tile choices,
    and the whole ``triton_scaled_fp8`` call."""
    from baselines import copies_past_l2, graph_calls_ms

    from selector.backends.formats.fp8 import make_linear_weights
    from selector.backends.kernels.fp8_act_quant import quantize_activation
    from selector.backends.wrappers.triton_fp8 import TritonScaledFp8Linear, scaled_fp8_matmul
    c = ceilings()
    print_ceilings(c)
    gen = torch.Generator(device="cuda").manual_seed(0)
    n, k = 4096, 14336
    r8, r16 = copies_past_l2(n * k), copies_past_l2(2 * n * k)
    ws = [make_linear_weights(torch.randn(n, k, generator=gen, device="cuda") / k ** 0.5,
                              "fp8_channel") for _ in range(r8)]
    wbf = [ws[i % r8].dequantize(torch.float32).bfloat16() for i in range(r16)]
    impl = TritonScaledFp8Linear(quant="fp8_channel")
    preps = [impl.prepare(w) for w in ws]
    print(f"Llama-3.1-8B down [{n}, {k}] fp8_channel: {r8} FP8 and {r16} bf16 weight copies")
    for t in (1, 16):
        x = torch.randn(t, k, generator=gen, device="cuda").bfloat16()
        a, sa = quantize_activation(x, "fp8_channel")
        mem = (n * k + 2 * t * (n + k)) / c["bandwidth_GBps"] / 1e6
        bf = graph_calls_ms([lambda w=w: torch.matmul(x, w.t()) for w in wbf])
        q = graph_calls_ms([lambda: quantize_activation(x, "fp8_channel")])
        whole = graph_calls_ms([lambda p=p: impl.apply(x, p) for p in preps])
        print(f"T={t}: a call in a graph of 24: bf16 {bf:.4f} ms ({2 * n * k / bf / 1e6:.0f} "
              f"GB/s), quantize {q:.4f} ms, triton_scaled_fp8 {whole:.4f} ms = "
              f"{whole / bf:.2f}x bf16; memory limit {mem:.4f} ms", flush=True)
        cfgs = [None] + [dict(BLOCK_M=16, BLOCK_N=bn, num_warps=4, num_stages=st, SPLIT_K=sk)
                         for bn, st, sk in ((64, 4, 1), (64, 4, 2), (64, 4, 4), (64, 4, 8),
                                            (32, 4, 2), (32, 4, 4), (128, 4, 4), (64, 6, 4),
                                            (64, 3, 4))] + [
            dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3, SPLIT_K=sk)
            for sk in (2, 4)]
        for cfg in cfgs:
            try:
                ms = graph_calls_ms([lambda w=w, cfg=cfg: scaled_fp8_matmul(
                    a, sa, w.weight, w.weight_scale, torch.bfloat16, cfg=cfg) for w in ws])
                print(f"  GEMM {cfg or 'shipped'}: {ms:.4f} ms, {mem / ms:.0%} of the memory "
                      f"limit, +quantize {(ms + q) / bf:.2f}x bf16", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"  GEMM {cfg}: {type(exc).__name__}: {str(exc)[:100]}")


LARGE_CONFIGS = [
    dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),  # tile_config(m > 64) before
    dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=4),
    dict(BLOCK_M=256, BLOCK_N=128, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=256, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=5),
]


def large() -> None:
    """``--large``: triton_scaled_fp8's GEMM at 4096 and 16384 tokens on Llama-3.1-8B's down
    (4096 x 14336) and gate_up (28672 x 4096) projections over tile choices, beside torch's
    row-wise ``_scaled_mm`` on the same codes and the bf16 matmul; each a call inside a CUDA
    graph of 8 over weight copies past the L2 (the activation already quantized)."""
    from baselines import copies_past_l2, graph_calls_ms

    from selector.backends.formats.fp8 import make_linear_weights
    from selector.backends.kernels.fp8_act_quant import quantize_activation
    from selector.backends.wrappers.triton_fp8 import scaled_fp8_matmul
    c = ceilings()
    print_ceilings(c)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, n, k in SCALED_SHAPES:
        r8, r16 = copies_past_l2(n * k), copies_past_l2(2 * n * k)
        ws = [make_linear_weights(torch.randn(n, k, generator=gen, device="cuda") / k ** 0.5,
                                  "fp8_channel") for _ in range(r8)]
        wbf = [ws[i % r8].dequantize(torch.float32).bfloat16() for i in range(r16)]
        wts = [w.weight.t() for w in ws]
        sws = [w.weight_scale.reshape(1, -1).float() for w in ws]
        for t in (4096, 16384):
            x = torch.randn(t, k, generator=gen, device="cuda").bfloat16()
            a, sa = quantize_activation(x, "fp8_channel")
            fl = 2.0 * t * n * k
            bf = graph_calls_ms([lambda w=w: torch.matmul(x, w.t()) for w in wbf], calls=8)
            q = graph_calls_ms([lambda: quantize_activation(x, "fp8_channel")], calls=8)
            rw = graph_calls_ms([lambda wt=wt, sw=sw: torch._scaled_mm(
                a, wt, scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)
                for wt, sw in zip(wts, sws)], calls=8)
            print(f"\n{name} [{n}, {k}] T={t}: bf16 {bf:.4f} ms ({fl / bf / 1e9:.0f} TFLOP/s), "
                  f"quantize {q:.4f} ms, torch row-wise _scaled_mm {rw:.4f} ms "
                  f"({fl / rw / 1e9:.0f} TFLOP/s), +quantize {(rw + q) / bf:.2f}x bf16",
                  flush=True)
            ref = scaled_fp8_matmul(a, sa, ws[0].weight, ws[0].weight_scale, torch.bfloat16)
            for cfg in LARGE_CONFIGS:
                try:
                    y = scaled_fp8_matmul(a, sa, ws[0].weight, ws[0].weight_scale,
                                          torch.bfloat16, cfg=cfg)
                    same = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
                    ms = graph_calls_ms([lambda w=w, cfg=cfg: scaled_fp8_matmul(
                        a, sa, w.weight, w.weight_scale, torch.bfloat16, cfg=cfg) for w in ws],
                        calls=8)
                    print(f"  {cfg}: {ms:.4f} ms ({fl / ms / 1e9:.0f} TFLOP/s), +quantize "
                          f"{(ms + q) / bf:.2f}x bf16; diff {same:.2g}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
            torch.cuda.empty_cache()


def quant() -> None:
    """``--quant``: the activation quantizer's kernels at prefill sizes (4,096 tokens) over their
    launch choices, as GB/s of bytes read and written against the copy bandwidth: per token on
    Llama-3.1-8B's down_proj input (K 14,336) and gate_up input (K 4,096), per 1x128 group on
    Qwen3-8B's down_proj input (K 12,288), per tensor (dynamic: amax, then codes) on K 14,336.
    Each a call inside a CUDA graph of 8 (``baselines.graph_calls_ms``); the shipped choice first."""
    from baselines import graph_calls_ms

    from selector.backends.kernels import fp8_act_quant as aq
    c = ceilings()
    print_ceilings(c)
    per_token, per_group, tensor_amax, per_tensor = aq._kernels()
    gen = torch.Generator(device="cuda").manual_seed(0)
    m = 4096

    def report(what, nbytes, fn):
        try:
            ms = graph_calls_ms([fn], calls=8)
            print(f"  {what}: {ms:.4f} ms, {nbytes / ms / 1e6:.0f} GB/s "
                  f"({nbytes / ms / 1e6 / c['bandwidth_GBps']:.0%} of copy)", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"  {what}: {type(exc).__name__}: {str(exc)[:100]}", flush=True)

    for k in (14336, 4096):
        x = torch.randn(m, k, generator=gen, device="cuda").bfloat16()
        q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty((m, 1), dtype=torch.float32, device="cuda")
        nbytes = 3 * m * k
        print(f"\nper token, [{m}, {k}]:")
        report("shipped", nbytes, lambda x=x: aq.quantize_activation(x, "fp8_channel"))
        for chunk in (aq._next_pow2(min(k, 16384)), 4096, 2048):
            for warps in (4, 8, 16):
                if chunk // (32 * warps) < 1:
                    continue
                report(f"CHUNK {chunk} warps {warps}", nbytes,
                       lambda x=x, q=q, s=s, chunk=chunk, warps=warps: per_token[(m,)](
                           x, q, s, k, x.stride(0), q.stride(0), CHUNK=chunk,
                           ONE_CHUNK=k <= chunk, num_warps=warps))
    k = 12288
    kb = k // 128
    x = torch.randn(m, k, generator=gen, device="cuda").bfloat16()
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty((m, kb), dtype=torch.float32, device="cuda")
    print(f"\nper 1x128 group, [{m}, {k}]:")
    report("shipped", 3 * m * k, lambda: aq.quantize_activation(x, "fp8_block"))
    for rows in (1, 4, 8):
        for groups in (4, 8, 16):
            for warps in (4,):
                grid = (-(-m // rows), -(-kb // groups))
                report(f"ROWS {rows} GROUPS {groups} warps {warps}", 3 * m * k,
                       lambda rows=rows, groups=groups, warps=warps, grid=grid: per_group[grid](
                           x, q, s, m, k, kb, x.stride(0), q.stride(0), s.stride(0),
                           ROWS=rows, GROUPS=groups, num_warps=warps))
    k = 14336
    x = torch.randn(m, k, generator=gen, device="cuda").bfloat16()
    print(f"\nper tensor, dynamic, [{m}, {k}] (the amax pass, then the codes):")
    report("shipped", 5 * m * k, lambda: aq.quantize_activation(x, "fp8_tensor_dynamic"))
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="cuda")
    amax = torch.zeros((), dtype=torch.float32, device="cuda")
    so = torch.empty((), dtype=torch.float32, device="cuda")
    n = m * k
    for block in (2048, 8192):
        for warps in (4, 8):
            grid = (-(-n // block),)
            report(f"BLOCK_N {block} warps {warps}", 5 * m * k,
                   lambda block=block, warps=warps, grid=grid: (
                       tensor_amax[grid](x, amax, n, BLOCK_N=block, num_warps=warps),
                       per_tensor[grid](x, q, amax, so, n, DYNAMIC=True, BLOCK_N=block,
                                        num_warps=warps)))


def main() -> None:
    if "--quant" in sys.argv[1:]:
        return quant()
    if "--large" in sys.argv[1:]:
        return large()
    if "--decode" in sys.argv[1:]:
        return decode()
    if "--scaled" in sys.argv[1:]:
        return scaled()
    from selector.backends.formats.fp8 import make_linear_weights
    from selector.backends.kernels.fp8_act_quant import quantize_activation
    from selector.backends.wrappers.triton_fp8 import _sm_count, block_fp8_matmul, split_k, tile_config
    c = ceilings()
    print_ceilings(c)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, n, k in SHAPES:
        w = make_linear_weights(torch.randn(n, k, generator=gen, device="cuda") / k ** 0.5,
                                "fp8_block")
        wbf = w.dequantize(torch.float32).bfloat16()
        for t in (1, 16):
            x = torch.randn(t, k, generator=gen, device="cuda").bfloat16()
            a, sa = quantize_activation(x, "fp8_block")
            ref = block_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16)
            bf = graph_ms(lambda: torch.matmul(x, wbf.t()))
            q = graph_ms(lambda: quantize_activation(x, "fp8_block"))
            mem = (n * k + 2 * t * (n + k)) / c["bandwidth_GBps"] / 1e6
            print(f"\n{name} [{n}, {k}] T={t}: bf16 graph {bf:.4f} ms, quantize {q:.4f} ms, "
                  f"memory limit {mem:.4f} ms; shipped {tile_config(t)}, split-K "
                  f"{split_k(t, n, -(-k // 128), tile_config(t)['BLOCK_N'], _sm_count(x.device))}")
            for cfg in CONFIGS:
                try:
                    y = block_fp8_matmul(a, sa, w.weight, w.weight_scale, torch.bfloat16, cfg=cfg)
                    same = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
                    ms = graph_ms(lambda cfg=cfg: block_fp8_matmul(
                        a, sa, w.weight, w.weight_scale, torch.bfloat16, cfg=cfg))
                    print(f"  {cfg}: {ms:.4f} ms, +quantize {ms + q:.4f} = "
                          f"{(ms + q) / bf:.2f}x bf16, {mem / ms:.0%} of the memory limit"
                          f"; max |diff| to the shipped tiles {same:.2g} of max |y|",
                          flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:100]}")


if __name__ == "__main__":
    main()
