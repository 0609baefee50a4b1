"""FlashInfer's own FP8 GEMMs, called directly (no vLLM): for embedders and ``engine=none``.

- ``flashinfer_blockscale_sm90`` (:class:`BlockScaleSm90Linear`), fp8_block:
  ``flashinfer.gemm.fp8_blockscale_gemm_sm90(x_bf16, W_fp8, None, W_scale)``, FlashInfer's SM90
  block-scale GEMM (TensorRT-LLM's DeepGEMM-derived kernel, JIT-built with nvcc). It takes the
  bf16 activation and quantizes it per 1x128 group itself; the weight keeps the checkpoint's
  codes and ``[ceil(N/128), K/128]`` scales. FlashInfer switches to its swap-AB kernel below
  32 rows (``gemm/gemm_base.py``).
- ``flashinfer_bmm_fp8`` (:class:`BmmFp8Linear`) and ``flashinfer_bmm_fp8_cudnn``
  (:class:`BmmFp8CudnnLinear`), fp8_tensor / fp8_tensor_dynamic:
  ``flashinfer.bmm_fp8(A[1, M, K], B[1, K, N] column-major, A_scale, B_scale, dtype,
  backend="cublas" | "cudnn")``, with dequantization scales (FlashInfer's convention: the codes
  times the scale give the value), the activation quantized by ``backends.formats.fp8.quantize_activation``
  (one Triton launch on CUDA) and K and N padded to 16 as the torch per-tensor backend does.
- ``flashinfer_cutlass_fp8_sm90`` (:class:`CutlassFp8MoE`), fp8_tensor (static) and fp8_block:
  ``flashinfer.fused_moe.cutlass_fused_moe`` on SM 9.0 (TensorRT-LLM's CUTLASS MoE kernels in
  FlashInfer's ``fused_moe_90`` JIT module). Per-tensor: the input quantized with the static
  ``a13_scale``, ``quant_scales = [w13_scale * a13, 1 / a2, w2_scale * a2, a13]`` (vLLM 0.32.0
  ``experts/flashinfer_cutlass_moe.py`` FlashInferExperts.apply, ``oracle/fp8.py``); block: the
  bf16 input, ``quant_scales = [w13 block scales, w2 block scales]`` and
  ``use_deepseek_fp8_block_scale`` (the kernel quantizes per 1x128 group). Gated w13 goes to the
  kernel as ``[up; gate]`` (vLLM ``swap_w13_to_w31``), block scales alike.

The catalogue's ``flashinfer_cutlass`` linear entry keeps meaning what vLLM builds under
``engine=vllm`` (FlashInferFp8DeepGEMMDynamicBlockScaledKernel, which also needs vLLM's vendored
DeepGEMM); these entries have no vLLM or SGLang name. FlashInfer is imported on apply only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

from ..common import validate
from ..common.validate import output_buffer
from ..formats.fp8 import is_fp8_linear_weights, linear_input
from ._base import LinearBackend, MoEBackend
from .torch_scaled_mm import TorchFp8Prepared, TorchPerTensorLinear


class BlockScaleSm90Linear(LinearBackend):
    """Block-FP8 linear layer through ``fp8_blockscale_gemm_sm90`` (bf16 in, bf16 out)."""

    computes = ("fp8_block",)

    def prepare(self, weights):
        if not is_fp8_linear_weights(weights):
            raise ValueError(f"{type(self).__name__}.prepare: expected backends.formats.fp8."
                             f"Fp8LinearWeights, got {type(weights).__name__}")
        if weights.quant != "fp8_block" or self.quant != "fp8_block":
            raise ValueError(f"{self.backend} runs fp8_block; the weights are {weights.quant}, "
                             f"the layer {self.quant}")
        n, k = weights.out_features, weights.in_features
        if k % 128 or n % 64:  # the catalogue's shape rules say so first; never a kernel error
            raise ValueError(f"{self.backend}: K (in_features) must be a multiple of 128 and N "
                             f"(out_features) of 64; got K={k}, N={n}")
        return self.admit(TorchFp8Prepared.unpadded_block(weights))

    def apply(self, x, prepared, *, out=None):
        import torch
        p = prepared
        validate.float_input("x", x, last=p.in_features, device=p.weight.device,
                             allowed=("bfloat16",))
        lead, x2 = linear_input(x, p.in_features, p.weight.device)
        shape = lead + (p.out_features,)
        if not x2.shape[0]:
            return validate.empty_output(shape, x, out)
        from flashinfer.gemm import fp8_blockscale_gemm_sm90  # type: ignore
        buf = output_buffer(out, shape, torch.bfloat16, x.device)
        fp8_blockscale_gemm_sm90(x2, p.weight, None, p.weight_scale,
                                 out=buf.view(-1, p.out_features), out_dtype=torch.bfloat16)
        if p.bias is not None:
            buf.add_(p.bias.to(buf.dtype))
        return buf


class BmmFp8Linear(TorchPerTensorLinear):
    """Per-tensor FP8 linear layer through ``flashinfer.bmm_fp8`` (bf16 or fp16 out)."""

    computes: tuple = ("fp8_tensor", "fp8_tensor_dynamic")
    fi_backend = "cublas"

    def _gemm(self, a, a_scale, p, out_dtype):
        import flashinfer  # type: ignore
        import torch
        y = torch.empty((1, a.shape[0], p.padded_n), dtype=out_dtype, device=a.device)
        flashinfer.bmm_fp8(a.unsqueeze(0), p.weight.t().unsqueeze(0),
                           a_scale.reshape(1).float(), p.weight_scale.reshape(1).float(),
                           out_dtype, out=y, backend=self.fi_backend)
        y = y[0]
        if p.bias is not None:
            y = y[:, :p.out_features] + p.bias.to(out_dtype)
        return y

    def apply(self, x, prepared, *, out=None):
        validate.float_input("x", x, last=prepared.in_features, device=prepared.weight.device,
                             allowed=("bfloat16", "float16"))
        return super().apply(x, prepared, out=out)


class BmmFp8CudnnLinear(BmmFp8Linear):
    """The same GEMM through cuDNN's FP8 matmul graph (``bmm_fp8(..., backend="cudnn")``)."""

    fi_backend = "cudnn"


#: activations FlashInfer's CUTLASS MoE runs for vLLM's FP8 path (vLLM 0.32.0
#: experts/flashinfer_cutlass_moe.py FlashInferExperts._supports_activation), by act_and_mul;
#: the interleaved swigluoai is left out: this wrapper does not de-interleave w13
FP8_MOE_ACTIVATIONS = {True: ("silu", "gelu_tanh", "swigluoai_uninterleave"), False: ("relu2",)}


@dataclass(frozen=True)
class CutlassFp8MoEPrepared:
    quant: str
    w13: Any
    w2: Any
    quant_scales: Any
    a13_scale: Any
    act_and_mul: bool
    geometry: Dict[str, Any] = field(default_factory=dict)


def _swap_halves(t):
    """``[E, 2R, ...]`` with its two row halves exchanged (``[gate; up]`` -> ``[up; gate]``)."""
    import torch
    half = t.shape[1] // 2
    return torch.cat([t[:, half:], t[:, :half]], dim=1).contiguous()


class CutlassFp8MoE(MoEBackend):
    """FP8 fused MoE through FlashInfer's CUTLASS ``cutlass_fused_moe`` on SM 9.0."""

    computes = ("fp8_tensor", "fp8_block")

    def prepare(self, weights):
        import torch

        from ._flashinfer import check_activation
        if type(weights).__name__ != "Fp8MoEWeights":
            raise ValueError(f"CutlassFp8MoE.prepare: expected backends.formats.fp8.Fp8MoEWeights, got "
                             f"{type(weights).__name__}")
        if weights.quant != self.quant or self.quant not in self.computes:
            raise ValueError(f"{self.backend} runs {', '.join(self.computes)}; the weights are "
                             f"{weights.quant}, the layer {self.quant}")
        gated = weights.act_and_mul
        check_activation(self.backend, self.activation, gated, FP8_MOE_ACTIVATIONS[gated])
        E, H, I = weights.num_experts, weights.hidden_size, weights.intermediate_size
        if H % 128 or I % 128:
            raise ValueError(f"{self.backend}: hidden_size and intermediate_size must be "
                             f"multiples of 128; got {H} and {I}")
        w13, s13 = weights.w13, weights.w13_scale.float()
        if gated:
            w13 = _swap_halves(w13)
            if self.quant == "fp8_block":
                s13 = _swap_halves(s13)
        if self.quant == "fp8_tensor":
            a13 = weights.a13_scale.float().reshape(1)
            a2 = weights.a2_scale.float().reshape(-1).max().reshape(1)  # vLLM: one a2 scale
            scales = [(s13.reshape(E) * a13).contiguous(), (1.0 / a2).reshape(()),
                      (weights.w2_scale.float().reshape(E) * a2).contiguous(), a13.reshape(())]
        else:
            a13 = None
            scales = [s13.contiguous(), weights.w2_scale.float().contiguous()]
        prepared = CutlassFp8MoEPrepared(
            quant=self.quant, w13=w13.contiguous(), w2=weights.w2.contiguous(),
            quant_scales=scales, a13_scale=a13, act_and_mul=gated,
            geometry={"num_experts": E, "hidden_size": H, "intermediate_size": I,
                      "act_and_mul": gated})
        del torch
        return self.admit(prepared)

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        import torch

        from ..formats.fp8 import quantize_activation
        from ._flashinfer import activation_type, moe_output, supported_kwargs, swiglu_params
        p = prepared
        E, H = p.geometry["num_experts"], p.geometry["hidden_size"]
        validate.float_input("x", x, last=H, dim=2, device=p.w13.device, allowed=("bfloat16",))
        validate.routing(topk_weights, topk_ids, x.shape[0], E, p.w13.device)
        if not x.shape[0]:
            return validate.empty_output((0, H), x, out)
        from flashinfer.fused_moe import cutlass_fused_moe  # type: ignore
        buf = moe_output(out, x)
        kwargs = dict(output=buf, activation_type=activation_type(
            self.activation, p.act_and_mul, backend=self.backend, deinterleaves=False))
        kwargs.update({f"swiglu_{k}": torch.full((E,), v, dtype=torch.float32, device=x.device)
                       for k, v in swiglu_params(self.activation, self.swiglu_limit).items()
                       if v is not None})
        if p.quant == "fp8_tensor":
            xin, _ = quantize_activation(x.contiguous(), "fp8_tensor", p.a13_scale)
        else:
            xin = x.contiguous()
            kwargs["use_deepseek_fp8_block_scale"] = True
        cutlass_fused_moe(xin, topk_ids.to(torch.int32).contiguous(),
                          topk_weights.to(torch.float32).contiguous(), p.w13, p.w2, x.dtype,
                          p.quant_scales, **supported_kwargs(cutlass_fused_moe, **kwargs))
        return buf


__all__ = ["BlockScaleSm90Linear", "BmmFp8Linear", "BmmFp8CudnnLinear", "CutlassFp8MoE"]
