"""``torch_grouped_fp8``: an FP8 fused MoE on torch's grouped GEMM, ``torch._scaled_grouped_mm``.

torch's FP8 grouped GEMM for SM 9.0 (pytorch #148531: CUTLASS, float8_e4m3fn operands, bfloat16
output, row-wise scales) runs every expert's GEMM of one layer in one launch over a jagged 2-D
input: the routed rows sorted by expert (each expert's group padded to 16 rows, the kernel's
alignment), ``offs`` the groups' ends. Per-token (``fp8_channel``) and per-tensor (``fp8_tensor``,
``fp8_tensor_dynamic``) activation scales are row-wise scales (a per-tensor scale repeated per
row); per-channel and per-tensor weight scales are ``[E, N]`` row-wise scales of B.

``apply(x, prepared, topk_weights, topk_ids)``: FC1's input quantized once per token
(``backends.formats.fp8.quantize_activation``), gathered into expert order, FC1 grouped GEMM, the
activation in float32 on FC1's bf16 output, FC2's input quantized (per row; one dynamic scale
over every routed row; or expert e's static ``a2_scale``), FC2 grouped GEMM, and the top-k
weighted sum in float32. ``backends.reference.reference_fp8_moe`` is its oracle.
selector-only: no engine offers this path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

from ..common import validate
from ..formats.fp8 import MOE_QUANTS
from ._base import MoEBackend

#: rows per group the grouped GEMM is given (each expert's group padded to a multiple)
GROUP_ALIGN = 16


@dataclass(frozen=True)
class GroupedFp8Prepared:
    """w13 / w2: float8_e4m3fn ``[E, rows, K]`` (B is their transpose, column-major per expert);
    w13_scale / w2_scale: float32 ``[E, rows]`` row-wise scales; a13_scale, a2_scale: fp8_tensor's
    static scales (a2 per expert ``[E]``) or None."""

    quant: str
    w13: Any
    w13_scale: Any
    w2: Any
    w2_scale: Any
    a13_scale: Any
    a2_scale: Any
    act_and_mul: bool
    geometry: Dict[str, Any] = field(default_factory=dict)


def _rowwise(scale, quant: str, rows: int):
    """An expert weight scale (``[E]`` or ``[E, rows]``) as ``[E, rows]`` float32."""
    s = scale.float()
    if quant in ("fp8_tensor", "fp8_tensor_dynamic"):
        s = s[:, None].expand(s.shape[0], rows)
    return s.contiguous()


class TorchGroupedFp8MoE(MoEBackend):
    """FP8 fused MoE on ``torch._scaled_grouped_mm`` (SM 9.0). ``prepare(Fp8MoEWeights)``,
    ``apply(x, prepared, topk_weights, topk_ids, out=None)``."""
    computes = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")

    def prepare(self, weights):
        torch = _torch()
        if type(weights).__name__ != "Fp8MoEWeights":
            raise ValueError(f"TorchGroupedFp8MoE.prepare: expected backends.formats.fp8.Fp8MoEWeights, "
                             f"got {type(weights).__name__}")
        if weights.quant != self.quant or self.quant not in MOE_QUANTS:
            raise ValueError(f"torch_grouped_fp8 runs {', '.join(MOE_QUANTS)}; the weights are "
                             f"{weights.quant}, the layer {self.quant}")
        E, H, I = weights.num_experts, weights.hidden_size, weights.intermediate_size
        for name, v in (("hidden_size", H), ("intermediate_size", I)):
            if v % GROUP_ALIGN:
                raise ValueError(f"torch_grouped_fp8: {name} {v} must be a multiple of "
                                 f"{GROUP_ALIGN} (the grouped GEMM's dimensions)")
        a2 = weights.a2_scale
        if a2 is not None:
            a2 = a2.float().reshape(-1).expand(E).contiguous() if a2.numel() == 1 else a2.float()
        prepared = GroupedFp8Prepared(
            quant=weights.quant, w13=weights.w13.contiguous(),
            w13_scale=_rowwise(weights.w13_scale, weights.quant, weights.w13.shape[1]),
            w2=weights.w2.contiguous(), w2_scale=_rowwise(weights.w2_scale, weights.quant, H),
            a13_scale=None if weights.a13_scale is None else
            weights.a13_scale.float().reshape(()),
            a2_scale=a2, act_and_mul=weights.act_and_mul,
            geometry={"num_experts": E, "hidden_size": H, "intermediate_size": I,
                      "act_and_mul": weights.act_and_mul})
        del torch
        return self.admit(prepared)

    def apply(self, x, prepared, topk_weights, topk_ids, *, out=None):
        torch = _torch()
        from ..common.validate import output_buffer
        from ..formats.fp8 import _to_fp8, quantize_activation
        from ..reference import activation_fn
        p = prepared
        E, H = p.w13.shape[0], p.w13.shape[2]
        validate.float_input("x", x, last=H, dim=2, device=p.w13.device)
        validate.routing(topk_weights, topk_ids, x.shape[0], E, p.w13.device)
        T, K = topk_ids.shape
        dev = x.device
        ids = topk_ids.reshape(-1).long()
        valid = ids >= 0
        if not bool(valid.any()):  # zero tokens, or every slot unrouted: nothing to compute
            res = torch.zeros((T, H), dtype=x.dtype, device=dev)
            return res if out is None else validate.empty_output((T, H), x, out).zero_()
        tok = torch.arange(T, device=dev).repeat_interleave(K)[valid]
        wts = topk_weights.reshape(-1)[valid].float()
        ids = ids[valid]
        order = torch.argsort(ids, stable=True)
        ids, tok, wts = ids[order], tok[order], wts[order]
        counts = torch.bincount(ids, minlength=E)
        padded = (counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN
        ends = torch.cumsum(padded, 0)
        starts = ends - padded
        first = torch.cumsum(counts, 0) - counts
        dest = starts[ids] + torch.arange(ids.numel(), device=dev) - first[ids]
        total = int(ends[-1]) if E else 0
        offs = ends.to(torch.int32)
        # FC1: the input quantized once per token, gathered into expert order
        xq, xs = quantize_activation(x, p.quant, p.a13_scale)
        a1 = torch.zeros((total, H), dtype=torch.uint8, device=dev)
        a1[dest] = xq.view(torch.uint8)[tok]
        s1 = torch.ones(total, dtype=torch.float32, device=dev)
        s1[dest] = xs.reshape(-1)[tok] if xs.dim() else xs
        h = torch._scaled_grouped_mm(a1.view(torch.float8_e4m3fn), p.w13.transpose(-2, -1), s1,
                                     p.w13_scale, offs=offs, out_dtype=torch.bfloat16)
        act = activation_fn(h.float(), self.activation, p.act_and_mul,
                            swiglu_limit=self.swiglu_limit)
        # FC2's input: per row, one dynamic scale, or each row's expert's static scale
        if p.quant == "fp8_channel":
            a2q, s2 = quantize_activation(act, "fp8_channel")
            s2 = s2.reshape(-1)
        elif p.quant == "fp8_tensor_dynamic":
            a2q, s = quantize_activation(act, "fp8_tensor_dynamic")
            s2 = s.expand(total).contiguous()
        else:
            row_expert = torch.repeat_interleave(torch.arange(E, device=dev), padded)
            s2 = p.a2_scale[row_expert].contiguous()
            a2q = _to_fp8(act, s2[:, None])
        y = torch._scaled_grouped_mm(a2q, p.w2.transpose(-2, -1), s2, p.w2_scale, offs=offs,
                                     out_dtype=torch.bfloat16)
        res = torch.zeros((T, H), dtype=torch.float32, device=dev)
        res.index_add_(0, tok, y[dest].float() * wts[:, None])
        if out is None:
            return res.to(x.dtype)
        buf = output_buffer(out, (T, H), x.dtype, dev)
        buf.copy_(res)
        return buf


def _torch():
    import torch
    return torch


__all__ = ["TorchGroupedFp8MoE", "GroupedFp8Prepared"]
