"""torch ``_scaled_mm`` FP8 linear backends: vLLM 0.32.0's torch family
(``model_executor/kernels/linear/scaled_mm/pytorch.py``) as selector backends.

- ``torch_per_tensor`` (TorchPerTensorLinear), fp8_tensor / fp8_tensor_dynamic:
  ``_scaled_mm(A, B, sa, sb, bias)`` with scalar scales (cuBLASLt).
- ``torch_row_wise`` (TorchRowWiseLinear), fp8_channel: ``_scaled_mm`` with ``sa [M, 1]`` and
  ``sb [1, N]`` fused in the epilogue (torch's CUTLASS SM90 kernel; bfloat16 output).
- ``torch_channel_wise`` (TorchChannelWiseLinear), fp8_channel: ``_scaled_mm`` with unit scales
  into float32, then ``* sa * sb.T + bias`` (vLLM's unfused path).
- ``torch_block_wise`` (TorchBlockWiseLinear), fp8_block: ``_scaled_mm`` with ``sa [M, K/128]``
  column-major and ``sb [K/128, N/128]`` (cuBLASLt block scaling, SM 9.0).

``prepare(Fp8LinearWeights)`` gates once (the selector must find the backend usable for the
layer), zero-pads the weight to the GEMM's alignment (K and N to 16; K and N to 128 for block
scales, with the scale blocks they need) and keeps ``B = weight.T`` as a column-major view, as
vLLM does. ``apply(x, prepared)`` quantizes the activation with ``backends.formats.fp8.quantize_activation``
(the reference's quantizer), calls ``torch._scaled_mm`` and returns ``[..., N]`` in x's dtype.
torch's CPU build also has ``_scaled_mm`` (per-tensor and row-wise): it runs where the tensors are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

from ..common import validate
from ..formats.fp8 import BLOCK, cdiv, is_fp8_linear_weights, linear_input, quantize_activation
from ._base import LinearBackend

#: _scaled_mm's alignment of K and N (cuBLASLt FP8: both divisible by 16)
ALIGN = 16


def _torch():
    import torch
    return torch


def _pad2(t, rows: int, cols: int):
    torch = _torch()
    r, c = t.shape
    if (r, c) == (rows, cols):
        return t.contiguous()
    out = torch.zeros((rows, cols), dtype=t.dtype, device=t.device)
    out[:r, :c] = t
    return out


@dataclass(frozen=True)
class TorchFp8Prepared:
    """``_scaled_mm`` operands of one FP8 linear layer.

    weight: float8_e4m3fn ``[N_pad, K_pad]`` row-major (the GEMM's B is ``weight.T``, column
    major); weight_scale: the kernel's form (scalar ``[1]``, ``[1, N_pad]`` row-wise,
    ``[N_pad, 1]`` channel-wise, ``[N_pad/128, K_pad/128]`` block); input_scale: the static
    activation scale (fp8_tensor) or None; bias: ``[N]`` or None.
    """

    quant: str
    weight: Any
    weight_scale: Any
    input_scale: Any
    bias: Any
    in_features: int
    out_features: int
    padded_k: int
    padded_n: int
    geometry: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def unpadded_block(cls, weights) -> TorchFp8Prepared:
        """A block-FP8 layer's operands as checkpointed (no padding; the weight and its
        [N/128, K/128] scales contiguous): the kernels that take the checkpoint's layout."""
        n, k = weights.out_features, weights.in_features
        return cls(quant="fp8_block", weight=weights.weight.contiguous(),
                   weight_scale=weights.weight_scale.float().contiguous(), input_scale=None,
                   bias=weights.bias, in_features=k, out_features=n, padded_k=k, padded_n=n,
                   geometry={"hidden_size": k, "out_features": n})


class _TorchScaledMM(LinearBackend):
    """Shared prepare/apply; subclasses set the alignment, the scale form and the GEMM call."""
    computes = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")

    align_k = ALIGN
    align_n = ALIGN
    schemes: tuple = ()

    def _check(self, weights) -> None:
        if not is_fp8_linear_weights(weights):
            raise ValueError(f"{type(self).__name__}.prepare: expected backends.formats.fp8."
                             f"Fp8LinearWeights, got {type(weights).__name__}")
        if weights.quant != self.quant:
            raise ValueError(f"{type(self).__name__}: the weights are {weights.quant}, this layer "
                             f"was built for quant={self.quant!r}")
        if self.quant not in self.schemes:
            raise ValueError(f"{type(self).__name__} runs {', '.join(self.schemes)}, not "
                             f"{self.quant!r}")

    def _weight_scale(self, weights, n_pad: int, k_pad: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def prepare(self, weights):
        self._check(weights)
        n, k = weights.out_features, weights.in_features
        n_pad, k_pad = cdiv(n, self.align_n) * self.align_n, cdiv(k, self.align_k) * self.align_k
        prepared = TorchFp8Prepared(
            quant=weights.quant, weight=_pad2(weights.weight, n_pad, k_pad),
            weight_scale=self._weight_scale(weights, n_pad, k_pad),
            input_scale=None if weights.input_scale is None else
            weights.input_scale.float().reshape(()),
            bias=weights.bias, in_features=k, out_features=n, padded_k=k_pad, padded_n=n_pad,
            geometry={"hidden_size": k, "out_features": n})
        return self.admit(prepared)

    def _gemm(self, a, a_scale, p: TorchFp8Prepared, out_dtype):  # pragma: no cover
        raise NotImplementedError

    def apply(self, x, prepared, *, out=None):
        from ..common.validate import output_buffer
        torch = _torch()
        p = prepared
        lead, x2 = linear_input(x, p.in_features, p.weight.device)
        if not x2.shape[0]:  # zero tokens: an empty output (the GEMMs refuse M = 0)
            return validate.empty_output(lead + (p.out_features,), x, out)
        a, a_scale = quantize_activation(x2, p.quant, p.input_scale)
        if a.shape[1] != p.padded_k:
            a = torch.nn.functional.pad(a.view(torch.uint8), (0, p.padded_k - a.shape[1])).view(
                torch.float8_e4m3fn)
        y = self._gemm(a.contiguous(), a_scale, p, x.dtype)[:, :p.out_features]
        y = y.reshape(lead + (p.out_features,))
        if out is None:
            return y if y.dtype == x.dtype else y.to(x.dtype)
        buf = output_buffer(out, tuple(y.shape), x.dtype, y.device)
        buf.copy_(y)
        return buf


def _scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
    torch = _torch()
    y = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype)
    return y[0] if isinstance(y, tuple) else y  # torch < 2.5 returned (out, amax)


def _bias_for(p: TorchFp8Prepared, n_pad: int, dtype):
    """The bias padded to ``n_pad``, in the output dtype (_scaled_mm adds it in its epilogue)."""
    torch = _torch()
    if p.bias is None:
        return None
    b = torch.zeros(n_pad, dtype=dtype, device=p.weight.device)
    b[:p.out_features] = p.bias.to(dtype)
    return b


class TorchPerTensorLinear(_TorchScaledMM):
    """vLLM ``PerTensorTorchFP8ScaledMMLinearKernel``: one fp32 scale per operand, the bias in
    the GEMM's epilogue (a float32 output adds it afterwards: cuBLASLt takes no bias there)."""

    schemes = ("fp8_tensor", "fp8_tensor_dynamic")

    def _weight_scale(self, weights, n_pad, k_pad):
        return weights.weight_scale.float().reshape(1)

    def _gemm(self, a, a_scale, p, out_dtype):
        torch = _torch()
        fused = out_dtype != torch.float32
        y = _scaled_mm(a, p.weight.t(), a_scale.reshape(1), p.weight_scale, out_dtype,
                       _bias_for(p, p.padded_n, out_dtype) if fused else None)
        if not fused and p.bias is not None:
            y = y[:, :p.out_features] + p.bias.to(y.dtype)
        return y


class TorchRowWiseLinear(_TorchScaledMM):
    """torch's row-wise ``_scaled_mm``: per-token ``[M, 1]`` and per-channel ``[1, N]`` scales
    applied in the GEMM's epilogue (torch's CUTLASS kernel on SM 9.0; before torch 2.11 bfloat16
    output only: the backend file's dtype rule).
    vLLM's RowWiseTorchFP8ScaledMMLinearKernel is the same call, used on ROCm only."""

    schemes = ("fp8_channel",)

    def _weight_scale(self, weights, n_pad, k_pad):
        torch = _torch()
        s = torch.ones(1, n_pad, dtype=torch.float32, device=weights.weight.device)
        s[0, :weights.out_features] = weights.weight_scale.float()
        return s

    def _gemm(self, a, a_scale, p, out_dtype):
        return _scaled_mm(a, p.weight.t(), a_scale.reshape(-1, 1).contiguous(), p.weight_scale,
                          out_dtype, _bias_for(p, p.padded_n, out_dtype))


class TorchChannelWiseLinear(_TorchScaledMM):
    """vLLM ``ChannelWiseTorchFP8ScaledMMLinearKernel``: ``_scaled_mm`` with unit scales into
    float32, then ``* x_scale * w_scale.T + bias`` outside the GEMM (unfused dequantization)."""

    schemes = ("fp8_channel",)

    def _weight_scale(self, weights, n_pad, k_pad):
        torch = _torch()
        s = torch.ones(n_pad, 1, dtype=torch.float32, device=weights.weight.device)
        s[:weights.out_features, 0] = weights.weight_scale.float()
        return s

    def _gemm(self, a, a_scale, p, out_dtype):
        torch = _torch()
        one = torch.ones(1, dtype=torch.float32, device=a.device)
        y = _scaled_mm(a, p.weight.t(), one, one, torch.float32)
        y = y * a_scale.reshape(-1, 1) * p.weight_scale.t()
        y = y[:, :p.out_features]
        if p.bias is not None:
            y = y + p.bias
        return y.to(out_dtype)


class TorchBlockWiseLinear(_TorchScaledMM):
    """vLLM ``BlockWiseTorchFP8ScaledMMLinearKernel``: DeepSeek-style block scales in
    ``_scaled_mm`` (cuBLASLt, SM 9.0): ``scale_a`` ``[M, K/128]`` column-major, ``scale_b`` the
    transposed ``[N/128, K/128]`` weight scale; M padded to a multiple of 4 (cuBLASLt).

    K is zero-padded to a multiple of 512 (K/128 a multiple of 4) and N to 128: on torch 2.11
    (H200, docs/records/h200.md) the block-scaled ``_scaled_mm`` returns wrong results when K/128 is not
    a multiple of 4 (errors 25-52x the output for K/128 = 2, 3, 6; cuBLASLt's 128x128 scale layout
    rounds K/128 up to 4, pytorch #166752), and refuses the padded scale layout; zero weight
    columns with unit scales leave the product unchanged. vLLM 0.32.0's kernel does not pad."""

    schemes = ("fp8_block",)
    align_k = 4 * BLOCK
    align_n = BLOCK

    def _weight_scale(self, weights, n_pad, k_pad):
        torch = _torch()
        s = weights.weight_scale.float()
        nb, kb = n_pad // BLOCK, k_pad // BLOCK
        out = torch.ones(nb, kb, dtype=torch.float32, device=s.device)
        out[:s.shape[0], :s.shape[1]] = s
        return out

    def _gemm(self, a, a_scale, p, out_dtype):
        torch = _torch()
        m = a.shape[0]
        pad = (-m) % 4
        kb = p.padded_k // BLOCK
        # column-major [M_pad, K_pad/128]: the transpose of a contiguous [K_pad/128, M_pad]
        # (groups beyond the layer's K hold zero codes: their scale is 1)
        sa = torch.ones((kb, m + pad), dtype=torch.float32, device=a.device)
        sa[:a_scale.shape[1], :m] = a_scale.t()
        sa = sa.t()
        if pad:
            a = torch.cat([a.view(torch.uint8), torch.zeros(
                (pad, a.shape[1]), dtype=torch.uint8, device=a.device)]).view(torch.float8_e4m3fn)
        if p.bias is None:
            return _scaled_mm(a, p.weight.t(), sa, p.weight_scale.t(), out_dtype)[:m]
        # cuBLASLt's block-scaled path takes no bias: a float32 output, the bias, one rounding
        y = _scaled_mm(a, p.weight.t(), sa, p.weight_scale.t(), torch.float32)[:m]
        return (y[:, :p.out_features] + p.bias.float()).to(out_dtype)


__all__ = ["TorchPerTensorLinear", "TorchRowWiseLinear", "TorchChannelWiseLinear",
           "TorchBlockWiseLinear", "TorchFp8Prepared"]
