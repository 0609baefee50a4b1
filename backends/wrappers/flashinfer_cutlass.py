"""``flashinfer_cutlass``: FlashInfer's CUTLASS NVFP4 kernels (SM100 and SM120 families).

MoE: ``flashinfer.fused_moe.cutlass_fused_moe`` with the six NVFP4 ``quant_scales``
(FlashInfer ``fused_moe/core.py``): [a1_gscale, w13 block scales, g1_alphas, a2_gscale,
w2 block scales, g2_alphas]; gated w13 as ``[up; gate]``. Weights from
:func:`backends.prepare.prepare_swizzled_moe` (vLLM ``prepare_nvfp4_moe_layer_for_fi_or_cutlass``).
Dense: ``flashinfer.mm_fp4(..., backend="cutlass")``.
"""
from __future__ import annotations

from ..prepare import prepare_fp4_linear, prepare_swizzled_moe
from ._base import LinearBackend
from ._flashinfer import FlashInferMoE


class CutlassMoE(FlashInferMoE):
    """Both SwiGLU-OAI layouts run as ``Swiglu`` with per-expert swiglu alpha / beta / limit
    (vLLM's mapping); an interleaved ``swigluoai`` checkpoint's w13 is de-interleaved in ``prepare``."""
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels

    deinterleaves = True

    def prepare(self, weights):
        return self.admit(prepare_swizzled_moe(self.kernel_layout(weights), backend="flashinfer_cutlass"))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        import torch
        from flashinfer.fused_moe import cutlass_fused_moe  # type: ignore

        from ._flashinfer import activation_type, moe_output, supported_kwargs, swiglu_params
        buf = moe_output(out, x)
        p = prepared
        quant_scales = [p.a1_gscale, p.w13_sf.view(torch.int32), p.g1_alphas, p.a2_gscale,
                        p.w2_sf.view(torch.int32), p.g2_alphas]
        gated = p.geometry["act_and_mul"]
        kwargs = dict(output=buf, activation_type=activation_type(
            self.activation, gated, backend=self.backend, deinterleaves=self.deinterleaves))
        E = p.geometry["num_experts"]
        kwargs.update({f"swiglu_{k}": torch.full((E,), v, dtype=torch.float32, device=x.device)
                       for k, v in swiglu_params(self.activation, self.swiglu_limit).items()
                       if v is not None})
        cutlass_fused_moe(x, topk_ids.to(torch.int32), topk_weights.to(torch.float32),
                          p.w13.view(torch.int64), p.w2.view(torch.int64), x.dtype, quant_scales,
                          **supported_kwargs(cutlass_fused_moe, **kwargs))
        return buf


class CutlassLinear(LinearBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    fi_backend = "cutlass"

    def prepare(self, weights):
        return self.admit(prepare_fp4_linear(weights))

    def apply(self, x, prepared, *, out=None):
        from ._flashinfer import mm_fp4_apply
        return mm_fp4_apply(self.fi_backend, x, prepared, out)
