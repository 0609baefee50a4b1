"""The FlashInfer MoE wrappers' base class and the FlashInfer calls they share (FlashInfer itself
is imported lazily, on apply only).

Every function here is reached only after the selector gate (``KernelBackend.gate``, at
``prepare``) let the layer through: the selector found the device, CUDA runtime and packages the
backend needs.
"""
from __future__ import annotations

from ..common.validate import output_buffer
from ._base import MoEBackend

# Activations b12x_fused_moe takes, under the same names (FlashInfer 0.7.4
# blackwell_sm12x/moe_activation.py SUPPORTED_MOE_ACTIVATIONS): only the [gate; up] SwiGLU-OAI.
B12X_ACTIVATIONS = ("silu", "gelu_tanh", "relu2", "swigluoai_uninterleave")
B12X_GATED = ("silu", "gelu_tanh", "swigluoai_uninterleave")  # GATED_MOE_ACTIVATIONS

# selector activation -> FlashInfer ``ActivationType`` member (tllm_enums.py) for the CUTLASS /
# TRT-LLM / CuTe-DSL MoEs. Both SwiGLU-OAI layouts run as ``Swiglu`` with the OAI alpha, beta and
# clamp passed as the kernel's swiglu/gemm1 arguments (vLLM 0.32.0 flashinfer_utils.py
# ACTIVATION_TO_FI_ACTIVATION); the kernels read [gate; up] halves, so an interleaved
# ``swigluoai`` is accepted only by a wrapper that de-interleaves w13 (``deinterleave_w13``).
FI_ACTIVATION_TYPES = {
    True: {"silu": "Swiglu", "gelu": "Geglu", "gelu_tanh": "GegluTanh",
           "swigluoai": "Swiglu", "swigluoai_uninterleave": "Swiglu"},
    False: {"relu2": "Relu2", "silu": "Silu", "gelu": "Gelu"},
}
SWIGLUOAI = ("swigluoai", "swigluoai_uninterleave")


def kernel_activations(deinterleaves: bool) -> dict:
    """``{gated: activations}`` a CUTLASS / TRT-LLM / CuTe-DSL wrapper runs: the interleaved
    ``swigluoai`` only where the wrapper de-interleaves w13 first."""
    return {gated: tuple(a for a in table if deinterleaves or a != "swigluoai")
            for gated, table in FI_ACTIVATION_TYPES.items()}


class FlashInferMoE(MoEBackend):
    """A CUTLASS / TRT-LLM / CuTe-DSL MoE wrapper: its activations follow ``kernel_activations``;
    one that ``deinterleaves`` takes an interleaved ``swigluoai`` w13 and reorders it in ``prepare``."""

    deinterleaves = False

    @classmethod
    def activations(cls, gated: bool):
        """The activations this wrapper runs (gated or not); the catalogue's rules must agree."""
        return kernel_activations(cls.deinterleaves)[bool(gated)]

    def kernel_layout(self, weights):
        """``weights`` in the [gate; up] w13 layout the kernels read."""
        if self.deinterleaves and self.activation == "swigluoai":
            return deinterleave_w13(weights)
        return weights


def check_activation(backend: str, activation: str, act_and_mul: bool, accepted) -> None:
    """Refuse an activation this wrapper cannot run, naming it and the ones it can."""
    if activation not in accepted:
        kind = "gated" if act_and_mul else "non-gated"
        hint = (" (gate/up interleaved; this kernel reads [gate; up] halves: declare "
                "swigluoai_uninterleave for weights in that order)" if activation == "swigluoai" else "")
        raise ValueError(f"{backend}: {kind} activation {activation!r} is not supported{hint}; "
                         f"accepted: {', '.join(accepted)}")


def activation_type(activation: str, act_and_mul: bool, *, backend: str, deinterleaves: bool) -> int:
    """FlashInfer ``ActivationType`` value for ``activation`` (see ``FI_ACTIVATION_TYPES``)."""
    from flashinfer.tllm_enums import ActivationType  # type: ignore
    check_activation(backend, activation, act_and_mul,
                     kernel_activations(deinterleaves)[bool(act_and_mul)])
    return int(getattr(ActivationType, FI_ACTIVATION_TYPES[bool(act_and_mul)][activation]))


def swiglu_params(activation: str, limit=None, alpha=None, beta=None) -> dict:
    """The SwiGLU alpha / beta / limit a kernel needs (None: not passed): the OAI defaults (vLLM
    SwigluOAIAndMul, FlashInfer moe_activation.py: 1.702, 1.0, 7.0) for both SwiGLU-OAI layouts,
    the clamp alone otherwise (silu's DeepSeek-V4 clamp, swiglustep's limit)."""
    if activation in SWIGLUOAI:
        from ..common.constants import SWIGLUOAI_DEFAULTS as d
        return {"alpha": d["alpha"] if alpha is None else float(alpha),
                "beta": d["beta"] if beta is None else float(beta),
                "limit": d["limit"] if limit is None else float(limit)}
    return {"alpha": None, "beta": None, "limit": None if limit is None else float(limit)}


def deinterleave_w13(weights):
    """``weights`` with w13's rows (FC1 outputs) reordered from interleaved ``[g0, u0, g1, u1, ...]``
    to ``[gate; up]`` halves, block scales alike: exact (whole rows move; NVFP4 blocks run along K)."""
    import dataclasses

    import torch
    w13 = weights.w13
    rows = w13.packed.shape[-2]
    order = torch.cat([torch.arange(0, rows, 2), torch.arange(1, rows, 2)]).to(w13.packed.device)
    moved = dataclasses.replace(w13, packed=w13.packed.index_select(-2, order),
                                block_scale=w13.block_scale.index_select(-2, order))
    return dataclasses.replace(weights, w13=moved)


def dynamic_gscale(x):
    """FlashInfer-convention global scale from the tensor's amax: 448 * 6 / amax (1 if all zero;
    NaN or inf in ``x`` is refused, never turned into 1)."""
    from ..formats.nvfp4 import amax_checked, scale_2_from_amax
    return (1.0 / scale_2_from_amax(amax_checked(x))).reshape(1)


def pad_last(x, width: int):
    """``x`` zero-padded on its last dimension to ``width`` (a kernel's padded K; vLLM pads the
    activations of layers whose weights it padded, and slices the output back)."""
    import torch
    return x if x.shape[-1] == width else torch.nn.functional.pad(x, (0, width - x.shape[-1]))


def quantize_fp4(x, gscale, *, swizzled: bool = True):
    """``flashinfer.fp4_quantize`` of a 2-D activation (128x4 swizzled or linear scales)."""
    import flashinfer  # type: ignore
    return flashinfer.fp4_quantize(x, gscale, sf_vec_size=16, is_sf_swizzled_layout=swizzled)


def mm_fp4_apply(fi_backend: str, x, prepared, out=None, out_dtype=None):
    """``y = x @ W.T`` through ``flashinfer.mm_fp4(..., backend=fi_backend)``, written into ``out``.

    Operands as vLLM's ``flashinfer_scaled_fp4_mm`` passes them: A quantized with
    ``fp4_quantize(x, 1 / input_scale)`` (128x4 scales), B = weight.T (column-major), B's scales
    transposed, ``alpha = input_scale * weight_scale_2`` (FlashInfer ``gemm/gemm_base.py mm_fp4``).
    """
    import flashinfer  # type: ignore
    import torch
    N, K = prepared.geometry["out_features"], prepared.geometry["hidden_size"]
    Np, Kp = prepared.weight.shape[0], prepared.weight.shape[1] * 2   # padded to 32 (CUTLASS family)
    x2 = x.reshape(-1, K)
    gs = prepared.a_gscale if prepared.a_gscale is not None else dynamic_gscale(x2)
    alpha = prepared.alpha if prepared.alpha is not None else prepared.weight_scale_2 / gs
    x_fp4, x_sf = quantize_fp4(pad_last(x2, Kp), gs)
    out_dtype = out_dtype or x.dtype
    buf = output_buffer(out, tuple(x.shape[:-1]) + (N,), out_dtype, x.device)
    kbuf = buf.view(-1, N) if Np == N else torch.empty(x2.shape[0], Np, dtype=out_dtype, device=x.device)
    a_sf, b_sf = x_sf, prepared.weight_sf
    if fi_backend == "cutlass":  # vLLM flashinfer_scaled_fp4_mm: cutlass takes uint8 scale views
        a_sf, b_sf = a_sf.view(torch.uint8), b_sf.view(torch.uint8)
    else:
        a_sf, b_sf = a_sf.view(torch.float8_e4m3fn), b_sf.view(torch.float8_e4m3fn)
    flashinfer.mm_fp4(x_fp4, prepared.weight.T, a_sf, b_sf.T, alpha, out_dtype,
                      out=kbuf, backend=fi_backend)
    if Np != N:
        buf.view(-1, N).copy_(kbuf[:, :N])
    if prepared.bias is not None:
        buf.add_(prepared.bias.to(buf.dtype))
    return buf


def supported_kwargs(fn, **kwargs):
    """The subset of ``kwargs`` that ``fn`` accepts (older FlashInfer releases lack some)."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def moe_output(out, x):
    return output_buffer(out, tuple(x.shape), x.dtype, x.device)
