"""``flashinfer_trtllm``: FlashInfer's TensorRT-LLM-gen NVFP4 kernels (SM 10.0 / 10.3 cubins only).

MoE: ``flashinfer.fused_moe.trtllm_fp4_block_scale_routed_moe`` with pre-computed routing and
weights shuffled by :func:`backends.prepare.prepare_trtllm_moe` (vLLM
``prepare_static_weights_for_trtllm_fp4_moe``); activations quantized with ``fp4_quantize(...,
is_sf_swizzled_layout=False)`` as vLLM's ``flashinfer_trtllm_fp4_routed_moe`` does. Dense:
``flashinfer.mm_fp4(..., backend="trtllm")`` with shuffled weight rows (bf16 out).
"""
from __future__ import annotations

from ..prepare import prepare_fp4_linear, prepare_trtllm_moe
from ._base import LinearBackend
from ._flashinfer import FlashInferMoE


class TrtllmMoE(FlashInferMoE):
    """Runs the [gate; up] SwiGLU-OAI (``swigluoai_uninterleave``) as ``Swiglu`` with per-expert
    gemm1 alpha / beta / clamp (vLLM's mapping); refuses the interleaved ``swigluoai``."""
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels

    deinterleaves = False

    def prepare(self, weights):
        return self.admit(prepare_trtllm_moe(weights))

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        top_k = int(topk_ids.shape[-1])
        import torch
        from flashinfer.fused_moe import trtllm_fp4_block_scale_routed_moe  # type: ignore

        from ._flashinfer import activation_type, moe_output, pad_last, quantize_fp4, supported_kwargs, swiglu_params
        p = prepared
        g = p.geometry
        buf = moe_output(out, x)
        Hp, Ip = p.padded                      # H to 256, I to 64 / 128 (vLLM pads and slices)
        kbuf = buf if Hp == x.shape[-1] else torch.empty(x.shape[0], Hp, dtype=x.dtype, device=x.device)
        x_fp4, x_sf = quantize_fp4(pad_last(x, Hp), p.a1_gscale[:1], swizzled=False)
        act = activation_type(self.activation, g["act_and_mul"], backend=self.backend,
                              deinterleaves=self.deinterleaves)
        alpha, beta, clamp = (None if v is None else torch.full(
            (g["num_experts"],), v, dtype=torch.float32, device=x.device)
            for v in swiglu_params(self.activation, self.swiglu_limit).values())
        kwargs = dict(activation_type=act, output=kbuf)
        trtllm_fp4_block_scale_routed_moe(
            (topk_ids.to(torch.int32), topk_weights.to(torch.float32)), None, x_fp4,
            x_sf.view(torch.float8_e4m3fn).flatten(), p.w13, p.w13_sf.view(torch.float8_e4m3fn),
            None, alpha, beta, clamp, p.w2, p.w2_sf.view(torch.float8_e4m3fn), None,
            p.g1_scale_c, p.g1_alphas, p.g2_alphas, g["num_experts"], top_k, 0, 0,
            Ip, 0, g["num_experts"], None,
            **supported_kwargs(trtllm_fp4_block_scale_routed_moe, **kwargs))
        if kbuf is not buf:
            buf.copy_(kbuf[:, :x.shape[-1]])
        return buf


class TrtllmLinear(LinearBackend):
    computes = ("nvfp4", "nvfp4_w4a16")  # its FP8/MX schemes: the engine's kernels
    fi_backend = "trtllm"

    def prepare(self, weights):
        return self.admit(prepare_fp4_linear(weights, shuffle_trtllm=True))

    def apply(self, x, prepared, *, out=None):
        from ._flashinfer import mm_fp4_apply
        return mm_fp4_apply(self.fi_backend, x, prepared, out)
