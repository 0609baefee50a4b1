"""Why verify's fp8_block problem differs by ~1.6% between every GPU kernel and the reference:
the activation codes quantized on the GPU against the CPU's, a float64 product of the GPU's
codes, and the Triton / torch block-wise kernels fed the CPU's codes."""
import torch

from selector.backends.children import verify_child as C
from selector.backends.formats import fp8
from selector.backends.reference import reference_fp8_linear
from selector.backends.wrappers.torch_scaled_mm import TorchBlockWiseLinear
from selector.backends.wrappers.triton_fp8 import block_fp8_matmul

shape = {"num_tokens": 67, "hidden_size": 256, "out_features": 256}
x, w = C.build_fp8_linear(shape, "fp8_block", 0)
ref = reference_fp8_linear(x.double(), w, compute_dtype=torch.float64)
a_cpu, s_cpu = fp8.quantize_activation(x, "fp8_block")
a_gpu, s_gpu = fp8.quantize_activation(x.cuda(), "fp8_block")
print("codes equal:", torch.equal(a_cpu.view(torch.uint8), a_gpu.cpu().view(torch.uint8)),
      "scales equal:", torch.equal(s_cpu, s_gpu.cpu()),
      "max scale diff:", float((s_cpu - s_gpu.cpu()).abs().max()))
wg = w.to("cuda")


def emul(a, s, dev):
    y = torch.zeros(67, 256, dtype=torch.float64, device=dev)
    for b in range(2):
        y += ((a[:, b * 128:(b + 1) * 128].double() @ w.weight.to(dev)[:, b * 128:(b + 1) * 128]
               .double().T) * s[:, b:b + 1].double()
              * w.weight_scale.to(dev)[:, b].double().repeat_interleave(128)[None, :256])
    return y


for name, y in (("float64 emulation of the GPU codes (on the GPU)", emul(a_gpu, s_gpu, "cuda")),
                ("float64 emulation of the CPU codes (on the GPU)",
                 emul(a_cpu.cuda(), s_cpu.cuda(), "cuda")),
                ("triton on the CPU's codes", block_fp8_matmul(
                    a_cpu.cuda(), s_cpu.cuda(), wg.weight, wg.weight_scale, torch.float32)),
                ("triton on the GPU's codes", block_fp8_matmul(
                    a_gpu, s_gpu, wg.weight, wg.weight_scale, torch.float32))):
    r = C.measure(y.float().cpu(), ref, None)
    print(f"{name}: max {r['max_rel_err']:.4g} rms {r['rms_rel_err']:.4g} worst {r['worst']}")
# the dominant product: one K=32 chunk's partial sums at the worst element, exact vs in fp32
i, j = 11, 164
prod = a_cpu[i, :32].double() * w.weight[j, :32].double()
print("worst element's first 32 products (codes): max", float(prod.abs().max()), "sum",
      float(prod.sum()), "sum of the others", float(prod.sum() - prod[prod.abs().argmax()]))
impl = TorchBlockWiseLinear(quant="fp8_block", selector_overrides=["platform=auto"])
p = impl.prepare(wg)
r = C.measure(impl.apply(x.cuda(), p).cpu(), ref, None)
print(f"torch block-wise: max {r['max_rel_err']:.4g} worst {r['worst']}")
