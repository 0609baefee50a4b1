"""Does the emulation's fused Triton MoE compile at every shape it is offered? Per shape, on CUDA.

    PYTHONUNBUFFERED=1 python3 benchmarks/emulation_shapes.py [--shapes qwen3:1024,mixtral:256,...]

For each (model, tokens) it builds a random NVFP4 checkpoint of the model's expert shape (W4A16),
calls the emulation as the backend does by default (``emulate_moe``: the fused kernels, a tile
config that does not compile replaced by the next of ``nvfp4_moe_triton.tile_ladder``, a shape
whose every config fails run grouped), and prints which path ran, the tile configs that failed
with the reason (``TILE_FAILED``), the shapes that fell back (``fused_failures``), the largest
difference from the grouped emulation relative to its largest output, and the median time of the
default call and of the grouped one (CUDA events, eager). Issue #46 saw `PassManager::run failed`
at Qwen3-30B-A3B T=1024 and Mixtral-8x7B T=256 and 1024 on an H100, after which the whole process
ran grouped.
"""
from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from baselines import cuda_time  # noqa: E402

import selector.backends.kernels.nvfp4_moe_triton as F  # noqa: E402
from selector.backends import reference as R  # noqa: E402
from selector.backends.formats import nvfp4 as nv  # noqa: E402

#: (experts, top_k, hidden, intermediate): the routed experts of one layer at TP 1
MODELS = {"qwen3": (128, 8, 2048, 768), "mixtral": (8, 2, 4096, 14336),
          "gptoss": (128, 4, 2880, 2880)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="qwen3:256,qwen3:1024,mixtral:64,mixtral:256,mixtral:1024")
    a = p.parse_args()
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}; triton fused kernels: {F.available()}")
    made = {}
    for item in a.shapes.split(","):
        model, _, t = item.partition(":")
        E, k, H, I = MODELS[model]
        T = int(t)
        g = torch.Generator(device=dev).manual_seed(0)
        if model not in made:
            made.clear()
            torch.cuda.empty_cache()
            w13 = nv.quantize(torch.randn(E, 2 * I, H, generator=g, device=dev) / H ** 0.5,
                              global_dims=1)
            w2 = nv.quantize(torch.randn(E, H, I, generator=g, device=dev) / I ** 0.5,
                             global_dims=1)
            made[model] = nv.MoEWeights(w13, w2)
        W = made[model]
        x = torch.randn(T, H, generator=g, device=dev).bfloat16()
        tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g, device=dev), -1), k)
        ti = ti.int()
        kw = dict(quant="nvfp4_w4a16")
        shape = R.fused_shape(x, W, ti, "silu", "nvfp4_w4a16", True)
        before = dict(F.TILE_FAILED)
        try:
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                y = R.emulate_moe(x, W, tw, ti, **kw)
            ref = R.emulate_moe(x, W, tw, ti, fused=False, grouped=True, **kw)
            diff = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
            path = "grouped (fell back)" if shape in R._FUSED_FAILED else "fused"
            t_def = cuda_time(lambda: R.emulate_moe(x, W, tw, ti, **kw))
            t_grp = cuda_time(lambda: R.emulate_moe(x, W, tw, ti, fused=False, grouped=True,
                                                    **kw))
            print(f"{model} T={T} ({R.describe_shape(shape)}): {path}; max |diff| / max |y| "
                  f"{diff:.2e}; default {t_def:.3f} ms, grouped {t_grp:.3f} ms")
            for key, why in F.TILE_FAILED.items():
                if key not in before:
                    print(f"    tile did not compile: {dict(key[1])}: {why}")
            for w in got:
                print(f"    warning: {str(w.message)[:400]}")
        except Exception:  # noqa: BLE001 - the shape's failure is the finding
            print(f"{model} T={T}: raised\n{traceback.format_exc()[-1500:]}")
    print(f"shapes on the grouped path: {R.fused_failures() or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
