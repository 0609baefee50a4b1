"""Can ``EmulationMoE.apply`` (the emulation backend's MoE call) be captured in a CUDA graph?

    python3 benchmarks/emulation_capture.py [--models qwen3,mixtral] [--tokens 1,64,1024]

For each expert shape (``emulation_bench.MODELS``, random NVFP4 checkpoint), scheme (W4A16; W4A4
with the checkpoint's scales; W4A4 with ``fc2_input_scale=1.0``, a constructor override) and token
count: one warm-up call (it compiles), then ``apply`` captured in a CUDA graph (a host sync or a
host-to-device copy in the call ends the capture with an error) and replayed on new inputs copied
into the captured ones; the replay's output against an eager call on those inputs (max |diff| /
max |y|: FC2's float32 atomic adds make the sum order vary, so a few bf16 roundings may flip).
Prints one line per case, ``ok`` or the error; exit 1 if any case fails. CUDA only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from emulation_bench import MODELS, random_nvfp4  # noqa: E402

from backends.formats import nvfp4 as nv  # noqa: E402
from backends.wrappers.emulation import EmulationMoE  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="qwen3,mixtral")
    ap.add_argument("--tokens", default="1,64,1024")
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    failed = 0
    for model in a.models.split(","):
        m = MODELS[model]
        E, k, H, I = m["num_experts"], m["top_k"], m["hidden"], m["inter"]
        wg = torch.Generator(device=dev).manual_seed(0)
        w13, w2 = random_nvfp4((E, 2 * I, H), wg, dev), random_nvfp4((E, H, I), wg, dev)
        cases = [("nvfp4_w4a16", {}, (None, None)),
                 ("nvfp4", {}, (torch.tensor(1 / 448, device=dev),
                                torch.full((E,), 1 / 448, device=dev))),
                 ("nvfp4", {"fc2_input_scale": 1.0}, (torch.tensor(1 / 448, device=dev), None))]
        for quant, kw, scales in cases:
            impl = EmulationMoE(quant=quant, activation="silu", act_and_mul=True, **kw)
            prep = impl.prepare(nv.MoEWeights(w13, w2, *scales))
            for T in (int(t) for t in a.tokens.split(",")):
                g = torch.Generator().manual_seed(T)
                name = f"{model} {quant}{' ' + str(kw) if kw else ''} T={T}"

                def make():
                    x = torch.randn(T, H, generator=g).bfloat16().to(dev)
                    tw, ti = torch.topk(torch.softmax(torch.randn(T, E, generator=g), -1), k)
                    return x, tw.to(dev), ti.int().to(dev)
                x, tw, ti = make()
                try:
                    impl.apply(x, prep, tw, ti)  # compiles
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        impl.apply(x, prep, tw, ti)
                    torch.cuda.current_stream().wait_stream(side)
                    with torch.cuda.graph(graph):
                        y = impl.apply(x, prep, tw, ti)
                    x2, tw2, ti2 = make()
                    x.copy_(x2)
                    tw.copy_(tw2)
                    ti.copy_(ti2)
                    graph.replay()
                    ref = impl.apply(x2, prep, tw2, ti2)
                    torch.cuda.synchronize()
                    d = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
                    flips = int((y != ref).sum())
                    ok = d <= 1e-2
                    failed += not ok
                    print(f"{name}: {'ok' if ok else 'WRONG'}: captured, replayed "
                          f"on new inputs: max |diff| / max |y| {d:.1e}, {flips}/{y.numel()} "
                          f"outputs differ", flush=True)
                except Exception as exc:  # noqa: BLE001 - a check prints
                    failed += 1
                    print(f"{name}: FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
