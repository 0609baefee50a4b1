"""``flashinfer_b12x``: FlashInfer's b12x CuTe-DSL kernels for SM120/SM121 (RTX 50xx, RTX Pro 6000,
DGX Spark).

MoE: ``flashinfer.b12x_fused_moe`` (FlashInfer #3080, v0.6.9; W4A16 ``quant_mode`` #3271 v0.6.12;
gelu_tanh / swigluoai_uninterleave #3744 v0.6.15; ``input_global_scale`` #3932 v0.6.17). bf16 in and out; the
kernel quantizes activations itself. Weights from :func:`backends.prepare.prepare_b12x_moe`.
Dense: ``flashinfer.mm_fp4(..., backend="b12x")`` (FlashInfer #3051, v0.6.9).
"""
from __future__ import annotations

from ..prepare import FOLD_MAX_REL_ERROR, prepare_b12x_moe, prepare_fp4_linear
from ._base import LinearBackend, MoEBackend


class B12xMoE(MoEBackend):
    """``prepare`` folds the weight global scales into the block scales (checked), sets the FC2
    input scale to 1 in a new tensor, converts scales to the MMA layout once, then passes the
    selector gate; ``apply`` calls ``b12x_fused_moe`` into the caller's ``out`` (reused, never
    reallocated). ``fold_mode="none"`` skips the fold (alpha = the global scale; exact; FlashInfer >= 0.6.17)."""


    def __init__(self, *, fold_mode: str = "full", max_fold_rel_error: float = FOLD_MAX_REL_ERROR,
                 swiglu_alpha=None, swiglu_beta=None, **kw):
        super().__init__(**kw)
        self.fold_mode = fold_mode
        self.max_fold_rel_error = max_fold_rel_error
        self.swiglu_alpha, self.swiglu_beta = swiglu_alpha, swiglu_beta

    @classmethod
    def activations(cls, gated: bool):
        """The activations ``b12x_fused_moe`` takes (gated or not); the catalogue must agree."""
        from ._flashinfer import B12X_ACTIVATIONS, B12X_GATED
        return tuple(a for a in B12X_ACTIVATIONS if (a in B12X_GATED) == bool(gated))

    def prepare(self, weights):
        return self.admit(prepare_b12x_moe(weights, quant=self.quant, fold_mode=self.fold_mode,
                                           max_rel_error=self.max_fold_rel_error))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        import flashinfer  # type: ignore
        import torch

        from ._flashinfer import check_activation, moe_output, supported_kwargs
        gated = prepared.geometry["act_and_mul"]
        check_activation(self.backend, self.activation, gated, self.activations(gated))
        buf = moe_output(out, x)
        kwargs = dict(
            w1_alpha=prepared.w1_alpha, w2_alpha=prepared.w2_alpha,
            fc2_input_scale=prepared.fc2_input_scale, output=buf,
            output_dtype=torch.bfloat16, activation=self.activation,
            quant_mode=prepared.quant_mode)
        if prepared.input_global_scale is not None:
            kwargs["input_global_scale"] = prepared.input_global_scale
        if self.activation == "swigluoai_uninterleave":
            kwargs.update({k: v for k, v in (("swiglu_alpha", self.swiglu_alpha),
                                             ("swiglu_beta", self.swiglu_beta),
                                             ("swiglu_limit", self.swiglu_limit)) if v is not None})
        filtered = supported_kwargs(flashinfer.b12x_fused_moe, **kwargs)
        if "input_global_scale" in kwargs and "input_global_scale" not in filtered:
            raise RuntimeError("this FlashInfer's b12x_fused_moe has no input_global_scale (needs "
                               ">= 0.6.17, FlashInfer #3932): prepare without a13_scale, or upgrade")
        result = flashinfer.b12x_fused_moe(
            x, prepared.w13, prepared.w13_sf_mma, prepared.w2, prepared.w2_sf_mma,
            topk_ids.to(torch.int32), topk_weights.to(torch.float32),
            prepared.geometry["num_experts"], int(topk_ids.shape[-1]), **filtered)
        if result.data_ptr() != buf.data_ptr():  # older releases may return a new tensor
            buf.copy_(result)
        return buf


class B12xLinear(LinearBackend):
    """NVFP4 dense GEMM through ``mm_fp4(backend="b12x")``; swizzled 128x4 scales, K % 32 == 0
    (K % 128 up to 0.6.13)."""

    fi_backend = "b12x"

    def prepare(self, weights):
        return self.admit(prepare_fp4_linear(weights))

    def apply(self, x, prepared, *, out=None):
        from ._flashinfer import mm_fp4_apply
        return mm_fp4_apply(self.fi_backend, x, prepared, out)
