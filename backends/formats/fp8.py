"""FP8 (E4M3) linear layers: checkpoint tensors, weight and activation quantizers, dequantization.

The four FP8 schemes of ``layer.quant`` (selector/core/schema.py ``QUANT_SCHEMES``; vLLM 0.32.0
QuantKey pairs, ``model_executor/layers/quantization/utils/quant_utils.py``):

=====================  ==================================  =====================================
scheme                 weight scale (``weight_scale``)     activation scale
=====================  ==================================  =====================================
``fp8_tensor``         fp32 scalar                         static fp32 scalar (``input_scale``)
``fp8_tensor_dynamic`` fp32 scalar                         dynamic: amax(x) / 448 per call
``fp8_channel``        fp32 ``[N]`` (per output channel)   dynamic: amax(row) / 448 per token
``fp8_block``          fp32 ``[ceil(N/128), ceil(K/128)]`` dynamic: amax / 448 per 1x128 group
=====================  ==================================  =====================================

Every scale is a *dequantization multiplier* (``value ~ code * scale``), as in FP8 checkpoints
(DeepSeek-V3's ``weight_scale_inv``, compressed-tensors' and ModelOpt's ``weight_scale``).
Quantization is ``clamp(x / scale, -448, 448)`` rounded to E4M3 (round to nearest even), in
float32. The kernels of this package quantize their activations with
:func:`quantize_activation`, the function the reference uses, so a kernel and the reference see
the same FP8 codes and differ only by the GEMM's accumulation and output rounding.

Imports torch only inside functions.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Tuple

from ..common import validate

FP8_QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel", "fp8_block")
FP8_MAX = 448.0  # largest finite E4M3 (float8_e4m3fn)
BLOCK = 128  # DeepSeek-style block: 128x128 weights, 1x128 activations
#: the smallest amax a dynamic scale is computed from (an all-zero row gets a finite scale)
MIN_AMAX = 1e-12


def _torch():
    import torch
    return torch


def check_quant(quant: str) -> None:
    if quant not in FP8_QUANTS:
        raise ValueError(f"quant {quant!r} is not an FP8 scheme; accepted: {', '.join(FP8_QUANTS)}")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def weight_scale_shape(quant: str, n: int, k: int) -> Tuple[int, ...]:
    """The ``weight_scale`` shape of an ``[n, k]`` weight in ``quant``."""
    check_quant(quant)
    if quant in ("fp8_tensor", "fp8_tensor_dynamic"):
        return ()
    if quant == "fp8_channel":
        return (n,)
    return (cdiv(n, BLOCK), cdiv(k, BLOCK))


def _scale_from_amax(amax):
    """``amax * fl32(1/448)``: a float32 multiply by a float32 tensor, the same bits on every
    device. (``amax / 448.0`` is not: CUDA divides a tensor by a Python scalar as a
    multiplication by its reciprocal, the CPU divides, and the 1-ulp scale difference flips the
    E4M3 codes of inputs at rounding ties: bf16 activations hit them often; measured on the
    H200, docs/records/h200.md.)"""
    torch = _torch()
    inv = torch.full((), 1.0 / FP8_MAX, dtype=torch.float32, device=amax.device)
    return amax.to(torch.float32).clamp(min=MIN_AMAX) * inv


def _to_fp8(x, scale):
    """``clamp(x / scale, -448, 448)`` as float8_e4m3fn, computed in float32."""
    torch = _torch()
    return (x.to(torch.float32) / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def _pad_k(x, multiple: int):
    torch = _torch()
    k = x.shape[-1]
    pad = (-k) % multiple
    if not pad:
        return x
    return torch.nn.functional.pad(x, (0, pad))


def quantize_weight(w, quant: str):
    """``(codes float8_e4m3fn [N, K], weight_scale float32)`` of a float ``[N, K]`` weight: the
    scale from the amax of the tensor, of each row, or of each 128x128 block."""
    torch = _torch()
    check_quant(quant)
    if w.dim() != 2:
        raise ValueError(f"weight has shape {list(w.shape)}; expected [out_features, in_features]")
    w = w.to(torch.float32)
    n, k = w.shape
    if quant in ("fp8_tensor", "fp8_tensor_dynamic"):
        s = _scale_from_amax(w.abs().amax())
        return _to_fp8(w, s), s
    if quant == "fp8_channel":
        s = _scale_from_amax(w.abs().amax(dim=1))
        return _to_fp8(w, s[:, None]), s
    nb, kb = cdiv(n, BLOCK), cdiv(k, BLOCK)
    wp = torch.nn.functional.pad(w, (0, kb * BLOCK - k, 0, nb * BLOCK - n))
    blocks = wp.reshape(nb, BLOCK, kb, BLOCK)
    s = _scale_from_amax(blocks.abs().amax(dim=(1, 3)))  # [nb, kb]
    q = _to_fp8(blocks, s[:, None, :, None]).reshape(nb * BLOCK, kb * BLOCK)[:n, :k]
    return q.contiguous(), s


def expand_weight_scale(scale, quant: str, n: int, k: int):
    """The weight scale broadcast to ``[n, k]`` (or a shape that broadcasts to it)."""
    if quant in ("fp8_tensor", "fp8_tensor_dynamic"):
        return scale
    if quant == "fp8_channel":
        return scale[:, None]
    return scale.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]


@dataclass(frozen=True)
class Fp8LinearWeights:
    """An FP8 linear layer as a checkpoint stores it.

    weight: float8_e4m3fn ``[N, K]``; weight_scale: float32, shape per ``quant``
    (:func:`weight_scale_shape`); input_scale: the static activation scale (float32 scalar),
    required for ``fp8_tensor`` and unused otherwise; bias: ``[N]`` or None.
    """

    weight: Any
    weight_scale: Any
    quant: str
    input_scale: Any = None
    bias: Any = None

    def __post_init__(self) -> None:
        torch = _torch()
        check_quant(self.quant)
        w = self.weight
        if not isinstance(w, torch.Tensor) or w.dtype != torch.float8_e4m3fn or w.dim() != 2:
            raise ValueError(f"weight: expected a float8_e4m3fn [N, K] tensor, got "
                             f"{getattr(w, 'dtype', type(w).__name__)} "
                             f"{list(getattr(w, 'shape', []))}")
        n, k = w.shape
        validate.scale("weight_scale", self.weight_scale, [weight_scale_shape(self.quant, n, k)],
                       context=f"for {self.quant} [{n}, {k}]")
        same_device = validate.same_device
        same_device("weight_scale", self.weight_scale, w.device)
        if self.quant == "fp8_tensor":
            if self.input_scale is None:
                raise ValueError("input_scale: fp8_tensor has a static activation scale; got "
                                 "None (a checkpoint without one is fp8_tensor_dynamic)")
            validate.scale("input_scale", self.input_scale, [(), (1,)])
            same_device("input_scale", self.input_scale, w.device)
        validate.bias(self.bias, n, w.device)

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1])

    def to(self, device) -> Fp8LinearWeights:
        def mv(t):
            return None if t is None else t.to(device)
        return Fp8LinearWeights(self.weight.to(device), self.weight_scale.to(device), self.quant,
                                mv(self.input_scale), mv(self.bias))

    def dequantize(self, dtype=None):
        """The weight as ``dtype`` (default float32): codes times the expanded scales."""
        torch = _torch()
        dt = dtype or torch.float32
        n, k = self.weight.shape
        return self.weight.to(dt) * expand_weight_scale(self.weight_scale.to(dt), self.quant, n, k)


def is_fp8_linear_weights(w) -> bool:
    """An ``Fp8LinearWeights`` (by class name: the package is importable as ``backends`` and as
    ``selector.backends``, two module objects for one class)."""
    return type(w).__name__ == "Fp8LinearWeights" and hasattr(w, "weight_scale")


def make_linear_weights(w, quant: str, *, input_scale=None, bias=None) -> Fp8LinearWeights:
    """Quantize a float ``[N, K]`` weight to ``quant`` (a checkpoint as an FP8 quantizer writes it)."""
    torch = _torch()
    validate.tensor("w", w)
    q, s = quantize_weight(w, quant)
    if input_scale is not None:
        input_scale = validate.to_scale("input_scale", input_scale, q.device)
    if bias is not None and not isinstance(bias, torch.Tensor):
        try:
            bias = torch.as_tensor(bias, dtype=torch.float32, device=q.device)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"bias: expected a float tensor [{q.shape[0]}] (or a list of "
                             f"{q.shape[0]} numbers), got {type(bias).__name__}") from None
    return Fp8LinearWeights(q, s, quant, input_scale if quant == "fp8_tensor" else None, bias)

#: the schemes the grouped MoE path runs (row-wise scales: per-tensor ones broadcast per row)
MOE_QUANTS = ("fp8_tensor", "fp8_tensor_dynamic", "fp8_channel")


def moe_weight_scale_shape(quant: str, e: int, rows: int, k: int) -> Tuple[int, ...]:
    return (e,) + weight_scale_shape(quant, rows, k)


@dataclass(frozen=True)
class Fp8MoEWeights:
    """An FP8 fused-MoE layer: ``w13`` float8_e4m3fn ``[E, 2I, H]`` (``[gate; up]`` rows; ``[E, I,
    H]`` non-gated), ``w2`` ``[E, H, I]``, their scales per expert (``[E]``, ``[E, rows]`` or
    ``[E, rows/128, K/128]``), and for fp8_tensor the static activation scales ``a13_scale``
    (one scalar: vLLM reduces w13's to one) and ``a2_scale`` (scalar or ``[E]``)."""

    w13: Any
    w13_scale: Any
    w2: Any
    w2_scale: Any
    quant: str
    a13_scale: Any = None
    a2_scale: Any = None

    def __post_init__(self) -> None:
        torch = _torch()
        check_quant(self.quant)
        for name in ("w13", "w2"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn or t.dim() != 3:
                raise ValueError(f"{name}: expected a float8_e4m3fn [E, rows, K] tensor, got "
                                 f"{getattr(t, 'dtype', type(t).__name__)} "
                                 f"{list(getattr(t, 'shape', []))}")
        e, rows, h = self.w13.shape
        if tuple(self.w2.shape[:2]) != (e, h) or rows not in (self.w2.shape[2], 2 * self.w2.shape[2]):
            raise ValueError(f"w13 {list(self.w13.shape)} and w2 {list(self.w2.shape)} do not make "
                             "one MoE layer ([E, 2I or I, H] and [E, H, I])")
        for name, t in (("w13_scale", self.w13), ("w2_scale", self.w2)):
            validate.scale(name, getattr(self, name), [moe_weight_scale_shape(self.quant, *t.shape)],
                           context=f"for {self.quant}")
            validate.same_device(name, getattr(self, name), self.w13.device)
        if self.quant == "fp8_tensor" and (self.a13_scale is None or self.a2_scale is None):
            raise ValueError("fp8_tensor MoE needs its static a13_scale and a2_scale")
        for name, shapes in (("a13_scale", [(), (1,)]), ("a2_scale", [(), (1,), (e,)])):
            if getattr(self, name) is not None:
                validate.scale(name, getattr(self, name), shapes)
                validate.same_device(name, getattr(self, name), self.w13.device)

    @property
    def num_experts(self) -> int:
        return int(self.w13.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.w13.shape[2])

    @property
    def intermediate_size(self) -> int:
        return int(self.w2.shape[2])

    @property
    def act_and_mul(self) -> bool:
        return int(self.w13.shape[1]) == 2 * self.intermediate_size

    def to(self, device) -> Fp8MoEWeights:
        def mv(t):
            return None if t is None else t.to(device)
        return Fp8MoEWeights(self.w13.to(device), self.w13_scale.to(device), self.w2.to(device),
                             self.w2_scale.to(device), self.quant, mv(self.a13_scale),
                             mv(self.a2_scale))

    def expert(self, name: str, e: int, dtype=None):
        """Expert ``e`` of ``w13`` or ``w2``, dequantized."""
        torch = _torch()
        dt = dtype or torch.float32
        t, s = getattr(self, name)[e], getattr(self, name + "_scale")[e]
        return t.to(dt) * expand_weight_scale(s.to(dt), self.quant, *t.shape)


def make_moe_weights(w13, w2, quant: str, *, a13_scale=None, a2_scale=None) -> Fp8MoEWeights:
    """Quantize float ``[E, 2I, H]`` / ``[E, H, I]`` expert weights to ``quant``, expert by expert."""
    torch = _torch()
    out = []
    for w in (w13, w2):
        qs = [quantize_weight(w[e], quant) for e in range(w.shape[0])]
        out.append((torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])))

    e = int(w13.shape[0])

    def f32(name, v, shapes):
        return None if v is None else validate.to_scale(name, v, w13.device, shapes)
    static = quant == "fp8_tensor"
    return Fp8MoEWeights(out[0][0], out[0][1], out[1][0], out[1][1], quant,
                         f32("a13_scale", a13_scale, [()]) if static else None,
                         f32("a2_scale", a2_scale, [(), (e,)]) if static else None)


def linear_input(x, in_features: int, device: Any = None):
    """``(leading shape, x as a contiguous [M, in_features])`` of a linear layer's input
    ``[..., K]`` in bfloat16, float16 or float32 (on ``device``, the weights'); anything else is
    a ValueError naming what was expected (backends.common.validate). Any strides are accepted: a
    non-contiguous x (a column-major view) is copied once, as the kernels need unit stride."""
    validate.float_input("x", x, last=in_features, device=device)
    x2 = x.reshape(-1, in_features)
    return tuple(x.shape[:-1]), x2 if x2.is_contiguous() else x2.contiguous()


def fused_act_quant(x) -> bool:
    """Whether ``quantize_activation`` runs ``backends.kernels.fp8_act_quant`` (Triton, one launch) for
    this CUDA tensor: triton imports, the GPU converts to E4M3 (SM >= 8.9), and
    ``SELECTOR_FP8_ACT_QUANT`` is not ``torch`` (the torch form, for comparisons; ``triton``,
    empty or unset: the kernel where it runs; anything else is refused naming the variable)."""
    from selector.core.env_vars import fp8_act_quant
    if fp8_act_quant() == "torch":
        return False
    return _fused_device_ok(x.device.index if x.device.index is not None else
                            _torch().cuda.current_device())


@functools.cache
def _fused_device_ok(index: int) -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return tuple(_torch().cuda.get_device_capability(index)) >= (8, 9)


def quantize_activation(x, quant: str, input_scale=None):
    """``(codes float8_e4m3fn [M, K'], scale float32)`` of a 2-D activation ``[M, K]``.

    fp8_tensor: ``input_scale`` (scalar ``()``); fp8_tensor_dynamic: amax(x) / 448 (``()``);
    fp8_channel: per token, ``[M, 1]``; fp8_block: per 1x128 group, ``[M, ceil(K/128)]``, and the
    codes zero-padded to ``K' = 128 * ceil(K/128)`` (the padding holds zeros, which do not
    change any group's amax). Other schemes: ``K' = K``.
    """
    torch = _torch()
    check_quant(quant)
    if x.dim() != 2:
        raise ValueError(f"x has shape {list(x.shape)}; expected [M, K]")
    if x.is_cuda and fused_act_quant(x):  # one Triton launch, the same codes and scales
        from ..kernels.fp8_act_quant import quantize_activation as fused
        return fused(x, quant, input_scale)
    xf = x.to(torch.float32)
    if quant == "fp8_tensor":
        if input_scale is None:
            raise ValueError("fp8_tensor needs its static input_scale")
        s = torch.as_tensor(input_scale, dtype=torch.float32, device=x.device).reshape(())
        return _to_fp8(xf, s), s
    if quant == "fp8_tensor_dynamic":  # no rows (zero tokens): the smallest scale, no codes
        amax = xf.abs().amax() if xf.numel() else xf.new_zeros(())
        s = _scale_from_amax(amax)
        return _to_fp8(xf, s), s
    if quant == "fp8_channel":
        s = _scale_from_amax(xf.abs().amax(dim=1, keepdim=True))
        return _to_fp8(xf, s), s
    xp = _pad_k(xf, BLOCK)
    m, kp = xp.shape
    g = xp.reshape(m, kp // BLOCK, BLOCK)
    s = _scale_from_amax(g.abs().amax(dim=2))  # [M, Kb]
    return _to_fp8(g, s[:, :, None]).reshape(m, kp), s


def dequantize_activation(q, scale, quant: str, dtype=None):
    """Codes times scales (``[M, K']``, as :func:`quantize_activation` returned them)."""
    torch = _torch()
    dt = dtype or torch.float32
    if quant == "fp8_block":
        return q.to(dt) * scale.to(dt).repeat_interleave(BLOCK, 1)[:, :q.shape[1]]
    return q.to(dt) * scale.to(dt)


__all__ = ["FP8_QUANTS", "FP8_MAX", "BLOCK", "Fp8LinearWeights", "make_linear_weights",
           "is_fp8_linear_weights", "Fp8MoEWeights", "make_moe_weights", "MOE_QUANTS",
           "quantize_weight", "quantize_activation", "dequantize_activation",
           "expand_weight_scale", "weight_scale_shape", "check_quant"]
