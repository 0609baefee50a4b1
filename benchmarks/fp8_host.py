"""Where an eager FP8 linear call spends its time at decode: the host's cost of each piece.

    python benchmarks/fp8_host.py [--layer N,K] [--tokens 1,16]

An eager call is timed with CUDA events around one call from an idle GPU (``cuda_time``, as
``benchmarks/fp8_h200.py`` does), so the host's work before the last launch is in the figure.
This prints, for the layer (Llama-3.1-8B's down_proj, 4096 x 14336, fp8_channel, by default):

* **host us**: microseconds of host time per call, from 200 calls queued back to back with no
  sync between them (the launch queue absorbs the GPU's time: this is the Python, dispatcher
  and launch cost) for each piece of ``triton_scaled_fp8``'s ``apply`` and for the bf16
  ``torch.matmul`` baseline;
* **eager ms / graph ms**: the whole call timed eagerly and replayed from a CUDA graph, for the
  bf16 matmul, ``triton_scaled_fp8`` and ``torch_row_wise`` (``_scaled_mm``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import cuda_time, graph_ms  # noqa: E402


def host_us(fn, calls: int = 200) -> float:
    """Host microseconds per call of ``fn`` queued ``calls`` times without a sync."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def _empty_kernel():
    import triton
    global _EMPTY
    if _EMPTY is None:
        @triton.jit
        def empty(x_ptr, y_ptr, m, k):
            pass
        _EMPTY = empty
    return _EMPTY


_EMPTY = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="4096,14336", help="N,K of the layer")
    ap.add_argument("--tokens", default="1,16")
    ap.add_argument("--quant", default="fp8_channel")
    args = ap.parse_args()
    n, k = (int(v) for v in args.layer.split(","))
    from selector.backends.common import validate
    from selector.backends.formats.fp8 import linear_input, make_linear_weights, quantize_activation
    from selector.backends.kernels import fp8_act_quant
    from selector.backends.wrappers import triton_fp8
    from selector.backends.wrappers.torch_scaled_mm import TorchRowWiseLinear
    from selector.backends.wrappers.triton_fp8 import TritonScaledFp8Linear, scaled_fp8_matmul

    gen = torch.Generator(device="cuda").manual_seed(0)
    w = make_linear_weights(torch.randn(n, k, generator=gen, device="cuda") / k ** 0.5,
                            args.quant)
    wbf = w.dequantize(torch.float32).bfloat16()
    impls = {"triton_scaled_fp8": TritonScaledFp8Linear(quant=args.quant)}
    try:
        impls["torch_row_wise"] = TorchRowWiseLinear(quant=args.quant)
    except Exception as exc:  # noqa: BLE001
        print(f"(torch _scaled_mm: {type(exc).__name__}: {exc})")
    preps = {b: i.prepare(w) for b, i in impls.items()}
    tri, p = impls["triton_scaled_fp8"], preps["triton_scaled_fp8"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; layer N={n} K={k} "
          f"{args.quant}")
    for t in (int(v) for v in args.tokens.split(",")):
        x = torch.randn(t, k, generator=gen, device="cuda").bfloat16()
        a, sa = fp8_act_quant.quantize_activation(x, args.quant)
        pieces = {
            "bf16 torch.matmul": lambda: torch.matmul(x, wbf.t()),
            "torch.empty (one)": lambda: torch.empty((t, n), dtype=torch.bfloat16,
                                                     device="cuda"),
            "validate.float_input": lambda: validate.float_input("x", x, last=k,
                                                                 device=p.weight.device),
            "linear_input": lambda: linear_input(x, k, p.weight.device),
            "fp8.quantize_activation": lambda: quantize_activation(x, args.quant),
            "fp8_act_quant (the launch)": lambda: fp8_act_quant.quantize_activation(
                x, args.quant),
            "scaled_fp8_matmul": lambda: scaled_fp8_matmul(a, sa, p.weight, p.weight_scale,
                                                           torch.bfloat16),
            "split_k + tile_config": lambda: triton_fp8.split_k(
                t, n, -(-k // 128), triton_fp8.tile_config(t)["BLOCK_N"],
                triton_fp8._sm_count(x.device)),
            "triton launch, empty kernel": lambda: _empty_kernel()[(1,)](x, a, t, k),
            "triton_scaled_fp8.apply": lambda: tri.apply(x, p),
        }
        if "torch_row_wise" in impls:
            pieces["torch_row_wise.apply"] = lambda: impls["torch_row_wise"].apply(
                x, preps["torch_row_wise"])
        # Triton's launcher against a launch of the compiled kernel it returned (no argument
        # binding or specialization key): what a launch cache could save
        ek = _empty_kernel()[(1,)](x, a, t, k)
        cfg1 = dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4)
        c1 = torch.empty((t, n), dtype=torch.bfloat16, device="cuda")
        sa1, sw1 = sa.reshape(-1), p.weight_scale
        gemm_args = (a, p.weight, c1, sa1, sw1, c1, c1, c1, t, n, k, -(-k // 128), a.stride(0),
                     p.weight.stride(0), c1.stride(0), 1, 1)
        gemm_kw = dict(HAS_BIAS=False, BLOCK_K=128, GROUP_M=8, MAX_IMPRECISE=None, SPLIT_K=1,
                       OUTER=True)
        grid = (-(-n // 64), 1)
        ck = triton_fp8._kernel()[grid](*gemm_args, **gemm_kw, **cfg1)
        every = gemm_args + (False, 16, 64, 128, 8, None, 1, True)
        pieces["triton launch, GEMM (JIT path)"] = lambda: triton_fp8._kernel()[grid](
            *gemm_args, **gemm_kw, **cfg1)
        pieces["compiled launch, empty kernel"] = lambda: ek[(1, 1, 1)](x, a, t, k)
        pieces["compiled launch, GEMM"] = lambda: ck[(grid[0], 1, 1)](*every)
        print(f"\nT={t}: host microseconds per call (200 queued calls, no sync between)")
        for name, fn in pieces.items():
            try:
                print(f"  {name:30s} {host_us(fn):8.1f}")
            except Exception as exc:  # noqa: BLE001 - an internal Triton API may differ
                print(f"  {name:30s} {type(exc).__name__}: {str(exc)[:100]}")
        print(f"T={t}: whole calls (CUDA events, medians)")
        print(f"  {'':30s} {'eager ms':>9} {'graph ms':>9}")
        whole = {"bf16 torch.matmul": pieces["bf16 torch.matmul"]}
        whole.update({b: (lambda b=b: impls[b].apply(x, preps[b])) for b in impls})
        base = None
        for name, fn in whole.items():
            e, g = cuda_time(fn), graph_ms(fn)
            base = base or (e, g)
            print(f"  {name:30s} {e:9.4f} {g:9.4f}   x bf16 {e / base[0]:.2f} / "
                  f"{g / base[1]:.2f}")


if __name__ == "__main__":
    main()
