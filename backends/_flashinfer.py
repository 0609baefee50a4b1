"""Calls into FlashInfer shared by the FlashInfer entry points (imported lazily, on apply only).

Every function here is reached only after the selector gate (``KernelBackend.gate``, at
``prepare``) let the layer through: the selector found the device, CUDA runtime and packages the
backend needs.
"""
from __future__ import annotations

from ._base import output_buffer

# The reference's activation names -> b12x_fused_moe's (FlashInfer blackwell_sm12x/moe_activation.py)
B12X_ACTIVATIONS = {"silu": "silu", "gelu_tanh": "gelu_tanh", "relu2": "relu2",
                    "swigluoai": "swigluoai_uninterleave"}


def activation_type(activation: str, act_and_mul: bool) -> int:
    """FlashInfer ``ActivationType`` (``tllm_enums.py``) for the CUTLASS / TRT-LLM / CuTe-DSL MoEs."""
    from flashinfer.tllm_enums import ActivationType  # type: ignore
    table = ({"silu": ActivationType.Swiglu, "gelu": ActivationType.Geglu,
              "gelu_tanh": ActivationType.GegluTanh, "swigluoai": ActivationType.SwigluBias}
             if act_and_mul else
             {"relu2": ActivationType.Relu2, "silu": ActivationType.Silu,
              "gelu": ActivationType.Gelu})
    if activation not in table:
        raise ValueError(f"no FlashInfer ActivationType for {'gated' if act_and_mul else 'non-gated'} "
                         f"{activation!r}")
    return int(table[activation])


def dynamic_gscale(x):
    """FlashInfer-convention global scale from the tensor's amax: 448 * 6 / amax (1 if all zero;
    NaN or inf in ``x`` is refused, never turned into 1)."""
    from .nvfp4 import amax_checked, scale_2_from_amax
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
