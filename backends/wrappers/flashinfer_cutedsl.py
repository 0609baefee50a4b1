"""``flashinfer_cutedsl``: FlashInfer's CuTe-DSL NVFP4 kernels for SM100 (FlashInfer #2398, v0.6.4).

MoE: ``flashinfer.cute_dsl_fused_moe(quant_mode="w4a4")`` with weights from
:func:`backends.prepare.prepare_cutedsl_moe` (vLLM ``prepare_nvfp4_moe_layer_for_flashinfer_cutedsl``:
``[up; gate]`` interleaved in 64-row groups, MMA-layout scales). Dense:
``flashinfer.mm_fp4(..., backend="cute-dsl")`` (never auto-selected by FlashInfer).
"""
from __future__ import annotations

from ..prepare import prepare_cutedsl_moe, prepare_fp4_linear
from ._base import LinearBackend
from ._flashinfer import FlashInferMoE


class CuteDslMoE(FlashInferMoE):
    """Both SwiGLU-OAI layouts run as ``Swiglu`` with swiglu alpha / beta / limit (vLLM's
    mapping); an interleaved ``swigluoai`` checkpoint's w13 is de-interleaved in ``prepare``."""

    deinterleaves = True

    def prepare(self, weights):
        return self.admit(prepare_cutedsl_moe(self.kernel_layout(weights)))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        import torch
        from flashinfer import cute_dsl_fused_moe  # type: ignore

        from ._flashinfer import activation_type, moe_output, pad_last, quantize_fp4, supported_kwargs, swiglu_params
        p = prepared
        buf = moe_output(out, x)
        Hp = p.padded[0]                       # H padded to 256 (vLLM pads and slices)
        kbuf = buf if Hp == x.shape[-1] else torch.empty(x.shape[0], Hp, dtype=x.dtype, device=x.device)
        # activation quantized with the shared FC1 scale; 128x4 scales (unverified on hardware)
        x_fp4, x_sf = quantize_fp4(pad_last(x, Hp), p.a1_gscale[:1])
        kwargs = dict(moe_output=kbuf, output_dtype=x.dtype, quant_mode="w4a4",
                      activation_type=activation_type(self.activation, p.geometry["act_and_mul"],
                                                      backend=self.backend,
                                                      deinterleaves=self.deinterleaves))
        kwargs.update({f"swiglu_{k}": v for k, v in
                       swiglu_params(self.activation, self.swiglu_limit).items() if v is not None})
        cute_dsl_fused_moe(x_fp4, x_sf, topk_ids.to(torch.int32), topk_weights.to(torch.float32),
                           p.w13, p.w13_sf_mma, p.g1_alphas, p.a2_gscale, p.w2, p.w2_sf_mma,
                           p.g2_alphas, p.geometry["num_experts"], int(topk_ids.shape[-1]),
                           **supported_kwargs(cute_dsl_fused_moe, **kwargs))
        if kbuf is not buf:
            buf.copy_(kbuf[:, :x.shape[-1]])
        return buf


class CuteDslLinear(LinearBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    fi_backend = "cute-dsl"

    def prepare(self, weights):
        return self.admit(prepare_fp4_linear(weights))

    def apply(self, x, prepared, *, out=None):
        from ._flashinfer import mm_fp4_apply
        return mm_fp4_apply(self.fi_backend, x, prepared, out)
