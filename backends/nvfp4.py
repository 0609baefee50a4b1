"""NVFP4 reference quantization and the scale-factor layouts kernels use (pure torch, CPU or CUDA).

Format (NVIDIA NVFP4, as ModelOpt checkpoints and FlashInfer store it):

- values: FP4 E2M1 {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit; code = sign << 3 | magnitude index.
  Two codes per byte along the last (K) dimension, element ``2i`` in the low nibble and ``2i + 1``
  in the high nibble (FlashInfer ``quantization/fp4_quantization.py``,
  ``_e2m1_and_ufp8sf_scale_to_float_cpu``: "low nibble = even indices, high nibble = odd").
- block scales: one FP8 E4M3 (``torch.float8_e4m3fn``, max 448) per 16 consecutive elements of K.
- global scale: one float32 per tensor (per expert for MoE weights).

Scale convention used throughout ``backends``: ``scale_2`` is the *dequantization* multiplier, as
ModelOpt stores it (``weight_scale_2`` and ``input_scale`` = amax / (6 * 448)), so that::

    value = e2m1(code) * float(block_scale) * scale_2

FlashInfer's ``fp4_quantize(x, global_scale)`` takes the reciprocal, ``global_scale = 1 / scale_2``
(= 448 * 6 / amax); vLLM calls ``1 / input_scale`` ``a1_gscale`` and ``input_scale * weight_scale_2``
``g1_alphas``.

Rounding, as FlashInfer's CUDA quantizer does it (``cvt_warp_fp16_to_fp4``): the block scale is
``amax_block / (6 * scale_2)`` rounded to E4M3 (round-to-nearest-even, saturated at 448), and each
element is ``x / (block_scale * scale_2)`` rounded to E2M1 (round-to-nearest-even, saturated at 6).

Scale layouts:

- linear: ``[..., rows, K // 16]``, what checkpoints store.
- 128x4 swizzled: rows padded to 128 and scale columns to 4, tile ``(r // 128, c // 4)`` holds
  byte ``(r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4`` and tiles are row-block major
  (FlashInfer ``quantization_cute_dsl_utils.compute_sf_index_swizzled_128x4_gpu``;
  ``block_scale_interleave``; vLLM ``nvfp4_utils.swizzle_blockscale``). Returned with the padded
  2-D (or 3-D for experts) shape ``[..., rows_pad, cols_pad]`` as vLLM does.
- MMA (CuTe-DSL): the 6-D strided view ``(32, 4, m_tiles, 4, k_tiles, num_groups)`` of the swizzled
  bytes (FlashInfer ``cute_dsl/utils.py convert_sf_to_mma_layout``, present since v0.6.4, #2398).

torch is imported inside the functions (``import backends.nvfp4`` stays cheap).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Tuple

BLOCK_SIZE = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E4M3_MIN_NORMAL = 2.0 ** -6
E4M3_MIN_SUBNORMAL = 2.0 ** -9
E4M3_REL_HALF_ULP = 2.0 ** -4   # largest relative round-to-nearest error of an E4M3 normal number
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
SF_TILE_ROWS = 128
SF_TILE_COLS = 4


def _torch():
    """torch, imported on first use (the one helper ``backends`` uses for that)."""
    import torch
    return torch


def ceil_to(n: int, m: int) -> int:
    """``n`` rounded up to a multiple of ``m``."""
    return (n + m - 1) // m * m


#: elements processed per step by quantize / dequantize: bounds their temporaries (a few bytes per
#: element) to a few tens of MiB whatever the tensor size; large enough that a loaded machine pays
#: few thread-pool synchronisations (a few per chunk and operation).
CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class NVFP4Tensor:
    """An NVFP4 tensor in checkpoint form.

    packed: uint8 ``[..., rows, K // 2]``; block_scale: float8_e4m3fn ``[..., rows, K // 16]``
    (linear layout); scale_2: float32, 0-d (one scale) or ``[E]`` (one per leading index, i.e.
    per expert). Dequantized value = e2m1 * block_scale * scale_2.
    """

    packed: Any
    block_scale: Any
    scale_2: Any

    @property
    def shape(self) -> Tuple[int, ...]:
        """Logical (unpacked) shape."""
        return tuple(self.packed.shape[:-1]) + (self.packed.shape[-1] * 2,)

    def dequantize(self, dtype=None):
        return dequantize(self.packed, self.block_scale, self.scale_2, dtype=dtype)

    def to(self, device) -> NVFP4Tensor:
        return NVFP4Tensor(self.packed.to(device), self.block_scale.to(device), self.scale_2.to(device))


# ----------------------------------------------------------------------------------------------
# element formats
# ----------------------------------------------------------------------------------------------

def e2m1_values(device=None, dtype=None):
    """The 16 E2M1 code values (index = 4-bit code)."""
    torch = _torch()
    pos = list(E2M1_GRID)
    return torch.tensor(pos + [-v for v in pos], dtype=dtype or torch.float32, device=device)


def encode_e2m1(v):
    """float tensor -> uint8 E2M1 codes, round-to-nearest-even, saturating at +-6 (NaN -> 0)."""
    torch = _torch()
    a = v.abs()
    # Midpoints between neighbours; a tie goes to the even code (0, 1.0, 2.0, 4.0).
    mag = ((a > 0.25).to(torch.uint8) + (a >= 0.75).to(torch.uint8) + (a > 1.25).to(torch.uint8)
           + (a >= 1.75).to(torch.uint8) + (a > 2.5).to(torch.uint8) + (a >= 3.5).to(torch.uint8)
           + (a > 5.0).to(torch.uint8))
    sign = (v < 0).to(torch.uint8) << 3
    return mag | sign


def decode_e2m1(codes, dtype=None):
    """uint8 E2M1 codes -> float values."""
    torch = _torch()
    return e2m1_values(codes.device, dtype or torch.float32)[codes.long()]


def pack_e2m1(codes):
    """``[..., K]`` codes -> ``[..., K // 2]`` bytes, element 2i in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"K must be even to pack FP4, got {codes.shape[-1]}")
    return (codes[..., 0::2] & 0x0F) | ((codes[..., 1::2] & 0x0F) << 4)


def unpack_e2m1(packed):
    """``[..., K // 2]`` bytes -> ``[..., K]`` codes."""
    torch = _torch()
    out = torch.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=torch.uint8,
                      device=packed.device)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = (packed >> 4) & 0x0F
    return out


def to_e4m3(x):
    """float tensor -> float8_e4m3fn, round-to-nearest-even, saturating at +-448 (satfinite)."""
    torch = _torch()
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e4m3_round(x):
    """``x`` rounded to the nearest E4M3 value, returned in x's dtype (for error analysis)."""
    return to_e4m3(x).to(x.dtype)


# ----------------------------------------------------------------------------------------------
# quantize / dequantize
# ----------------------------------------------------------------------------------------------

def _bcast(s, ndim: int):
    """Reshape a 0-d or ``[E, ...]`` scale so that it broadcasts against an ``ndim`` tensor."""
    return s.reshape(tuple(s.shape) + (1,) * (ndim - s.dim()))


_FLOAT_INPUTS = ("float16", "bfloat16", "float32", "float64")


def check_float_tensor(x, name: str = "x") -> None:
    """Refuse what the quantizer and the reference cannot take: non-tensors, integer, bool and
    float8 tensors (an integer input would be truncated on the way out)."""
    torch = _torch()
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if str(x.dtype).replace("torch.", "") not in _FLOAT_INPUTS:
        raise ValueError(f"{name} has dtype {x.dtype}; accepted: {', '.join(_FLOAT_INPUTS)}")


#: the smallest plausible global scale: float32's smallest normal number. Below it (1e-45, a
#: float32 subnormal) every block scale a quantizer computes saturates at 448 and a dequantized
#: value underflows: a corrupt or mis-read scale, never a calibrated one.
MIN_SCALE_2 = 2.0 ** -126
#: the largest: 6 * 448 * MAX_SCALE_2 is float32's largest finite number (above, a full-scale
#: value dequantizes to inf)
MAX_SCALE_2 = 3.4028234663852886e38 / (E2M1_MAX * E4M3_MAX)


def _position(mask) -> str:
    """``[i, j, ...]`` of the first True element of ``mask``, and how many there are."""
    torch = _torch()
    m = mask if mask.dim() else mask.reshape(1)
    first = [int(i) for i in torch.nonzero(m)[0]] if mask.dim() else []
    return f"position {first} ({int(mask.sum())} of {mask.numel()} values)"


def check_scale(s, name: str, *, plausible: bool = False) -> None:
    """A global or activation scale must be finite and positive (0 or inf makes every value inf);
    ``plausible``: also within [MIN_SCALE_2, MAX_SCALE_2]. The error names the first bad position."""
    torch = _torch()
    bad = ~(torch.isfinite(s) & (s > 0))
    if bool(bad.any()):
        raise ValueError(f"{name} must be finite and > 0; got {s[bad].flatten()[:4].tolist()} "
                         f"at {_position(bad)}")
    if plausible:
        bad = (s < MIN_SCALE_2) | (s > MAX_SCALE_2)
        if bool(bad.any()):
            raise ValueError(f"{name} is implausible: {s[bad].flatten()[:4].tolist()} at "
                             f"{_position(bad)}; a global scale lies in [{MIN_SCALE_2:.3g}, "
                             f"{MAX_SCALE_2:.3g}] (a float32 normal number, no overflow at 6 * 448)")


def check_block_scale(bs, name: str) -> None:
    """Refuse E4M3 block scales no quantizer writes: NaN (bytes 0x7f, 0xff) and negative ones (the
    sign bit set, -0 included), naming the tensor and the first position. Both pass through a
    kernel silently (NaN or negated weights)."""
    torch = _torch()
    raw = bs.view(torch.uint8)
    nan = (raw & 0x7F) == 0x7F
    if bool(nan.any()):
        raise ValueError(f"{name} holds E4M3 NaN bytes (0x7f/0xff) at {_position(nan)}; "
                         "block scales must be finite and >= 0")
    neg = raw >= 0x80
    if bool(neg.any()):
        raise ValueError(f"{name} holds negative E4M3 block scales (sign bit set, byte "
                         f"0x{int(raw[neg].flatten()[0]):02x}) at {_position(neg)}; block scales "
                         "must be >= 0")


def amax_checked(x, global_dims: int = 0, name: str = "x"):
    """max |x| (float32; per index of the first ``global_dims`` dimensions), refusing NaN and inf.

    Computed from amax and amin, so no |x| copy is made; NaN propagates through both, so a single
    NaN or inf anywhere is caught (ModelOpt would otherwise get a NaN or inf global scale, and the
    old ``amax > 0`` test silently turned a NaN into 1.0). An empty tensor has amax 0.
    """
    torch = _torch()
    lead = tuple(x.shape[:global_dims])
    if x.numel() == 0:
        return torch.zeros(lead, dtype=torch.float32, device=x.device)
    v = x.reshape(lead + (-1,))
    amax = torch.maximum(v.amax(-1), -v.amin(-1)).to(torch.float32)
    if not bool(torch.isfinite(amax).all()):
        raise ValueError(f"{name} holds {int(torch.isnan(x).sum())} NaN and "
                         f"{int(torch.isinf(x).sum())} infinite values; NVFP4 cannot encode them "
                         "(quantize finite values only)")
    return amax


def scale_2_from_amax(amax):
    """ModelOpt's per-tensor scale: amax / (6 * 448); 1.0 where amax is 0 (an all-zero tensor).
    A NaN or infinite amax is refused, never replaced."""
    torch = _torch()
    amax = torch.as_tensor(amax).to(torch.float32)
    if not bool((torch.isfinite(amax) & (amax >= 0)).all()):
        raise ValueError(f"amax must be finite and >= 0, got {amax.flatten()[:4].tolist()}")
    return torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))


def _per_row(s2, lead: Tuple[int, ...], name: str):
    """A 0-d or leading-dims scale as one value per row of ``[prod(lead), K]``."""
    if tuple(s2.shape) != tuple(lead[:s2.dim()]):
        raise ValueError(f"{name} has shape {tuple(s2.shape)}; expected () or a prefix of the "
                         f"leading dimensions {tuple(lead)}")
    rows = math.prod(lead)
    return s2.reshape(-1, 1).expand(-1, rows // max(1, s2.numel())).reshape(rows)


def quantize(x, scale_2=None, *, global_dims: int = 0, check: bool = True) -> NVFP4Tensor:
    """Quantize ``x`` (``[..., K]``, K % 16 == 0) to NVFP4.

    scale_2: the dequantization scale (ModelOpt convention, a float, 0-d tensor or a tensor over
    the leading dimensions); None computes it from amax, over the whole tensor (``global_dims=0``)
    or per index of the first ``global_dims`` dimensions (1 = per expert). NaN or inf in ``x`` and
    a scale that is not finite and positive are refused, and so is a given ``scale_2`` below
    float32's smallest normal number (``MIN_SCALE_2``: every block scale would saturate). The block
    math runs in float32 (float64 for a float64 ``x``), ``CHUNK_ELEMENTS`` at a time, in about 20
    tensor operations per chunk (the per-element work is one division, seven comparisons and a
    few uint8 additions): the peak is the outputs (K/2 + K/16 bytes a row) plus a bounded work
    area. An empty ``x`` gives empty tensors. ``check=False`` skips the value checks (NaN, inf,
    scale range), which wait for the device: for the emulation's own activations.
    """
    torch = _torch()
    check_float_tensor(x)
    if x.dim() == 0:
        raise ValueError("quantize: x is 0-d; expected [..., K] with K a multiple of 16")
    K = x.shape[-1]
    if K % BLOCK_SIZE:
        raise ValueError(f"the last dimension ({K}) must be a multiple of {BLOCK_SIZE}")
    if not 0 <= global_dims < x.dim():
        raise ValueError(f"global_dims={global_dims}: accepted 0..{x.dim() - 1} for a {x.dim()}-D x")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    lead = tuple(x.shape[:-1])
    amax = amax_checked(x, global_dims) if check else None  # NaN and inf refused
    if scale_2 is None:
        if amax is not None:
            s2 = scale_2_from_amax(amax)
        else:
            amax = x.reshape(tuple(x.shape[:global_dims]) + (-1,)).abs().amax(-1).float()
            s2 = torch.where(amax > 0, amax / (E2M1_MAX * E4M3_MAX), torch.ones_like(amax))
    else:
        s2 = torch.as_tensor(scale_2, dtype=torch.float32, device=x.device)
        if check:
            check_scale(s2, "scale_2", plausible=True)
    s2_rows = _per_row(s2, lead, "scale_2").to(work)
    packed = torch.empty(lead + (K // 2,), dtype=torch.uint8, device=x.device)
    bs = torch.empty(lead + (K // BLOCK_SIZE,), dtype=torch.float8_e4m3fn, device=x.device)
    rows = math.prod(lead)
    if rows == 0 or K == 0:
        return NVFP4Tensor(packed, bs, s2)
    x2, p2, b2 = x.reshape(rows, K), packed.view(rows, K // 2), bs.view(rows, K // BLOCK_SIZE)
    nb = K // BLOCK_SIZE
    step = max(1, CHUNK_ELEMENTS // K)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        blocks = x2[r0:r1].reshape(r1 - r0, nb, BLOCK_SIZE)
        lo, hi = torch.aminmax(blocks, dim=-1)
        s2w = s2_rows[r0:r1].unsqueeze(-1)
        bamax = torch.maximum(hi.to(work), -lo.to(work)).abs_()  # never -0
        bsc = to_e4m3(bamax / (E2M1_MAX * s2w))
        denom = bsc.to(work) * s2w
        # a block whose scale is 0 (flushed) encodes as zeros: x / inf = 0
        denom = torch.where(denom > 0, denom, math.inf).unsqueeze(-1)
        scaled = torch.div(blocks, denom) if blocks.dtype == work else blocks.to(work).div_(denom)
        p2[r0:r1] = _encode_pack(scaled.reshape(r1 - r0, K))
        b2[r0:r1] = bsc
    return NVFP4Tensor(packed, bs, s2)


#: E2M1 rounding thresholds on |v| (round-to-nearest-even): ``>`` where a tie goes down to the even
#: code (0, 1.0, 2.0, 4.0), ``>=`` where it goes up
_E2M1_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False),
                    (3.5, True), (5.0, False))


def _encode_pack(v):
    """float ``[rows, K]`` -> packed E2M1 bytes ``[rows, K // 2]`` (what ``pack_e2m1(encode_e2m1(v))``
    gives), in place in uint8 buffers: few full-size temporaries, few passes."""
    torch = _torch()
    a = v.abs()
    mag = torch.empty(v.shape, dtype=torch.uint8, device=v.device)
    hit = torch.empty(v.shape, dtype=torch.bool, device=v.device)
    first = True
    for t, inclusive in _E2M1_THRESHOLDS:
        (torch.ge if inclusive else torch.gt)(a, t, out=hit)
        if first:
            mag.copy_(hit.view(torch.uint8))
            first = False
        else:
            mag.add_(hit.view(torch.uint8))
    torch.lt(v, 0, out=hit)  # sign bit (a negative value that rounds to 0 gives -0, code 8)
    mag.add_(hit.view(torch.uint8), alpha=8)
    return torch.add(mag[:, 0::2], mag[:, 1::2], alpha=16)


def _e2m1_pair_lut(device, dtype):
    """``[256, 2]``: the two E2M1 values of every packed byte (low nibble first)."""
    torch = _torch()
    v = e2m1_values(device, dtype)
    b = torch.arange(256, device=device)
    return torch.stack([v[b & 0x0F], v[b >> 4]], dim=-1)


def dequantize(packed, block_scale, scale_2, dtype=None, *, check: bool = True):
    """NVFP4 -> float (``dtype``, default float32): e2m1 * block_scale * scale_2.

    Computed in float32 (float64 for a float64 ``dtype``) and cast at the end, so a float16 or
    bfloat16 result is the float32 value rounded once (the global scale is never rounded to
    ``dtype`` first). NaN or negative block scales and a NaN, non-positive or implausible
    ``scale_2`` are refused (``check_block_scale``, ``check_scale``), naming the position;
    ``check=False`` skips that for tensors already checked. Works ``CHUNK_ELEMENTS`` at a time into
    the output: the peak is the output plus a bounded work area.
    """
    torch = _torch()
    dtype = dtype or torch.float32
    if packed.dtype != torch.uint8 or block_scale.dtype != torch.float8_e4m3fn:
        raise ValueError(f"dequantize: packed must be uint8 and block_scale float8_e4m3fn; got "
                         f"{packed.dtype} and {block_scale.dtype}")
    if packed.dim() == 0 or (tuple(block_scale.shape[:-1]) != tuple(packed.shape[:-1])
                             or packed.shape[-1] * 2 != block_scale.shape[-1] * BLOCK_SIZE):
        raise ValueError(f"dequantize: packed {tuple(packed.shape)} and block_scale "
                         f"{tuple(block_scale.shape)} do not describe the same [..., K] tensor "
                         f"(expected [..., K/2] and [..., K/{BLOCK_SIZE}])")
    work = torch.float64 if dtype == torch.float64 else torch.float32
    lead, K = tuple(packed.shape[:-1]), packed.shape[-1] * 2
    s2 = torch.as_tensor(scale_2, device=packed.device)
    if check:
        check_scale(s2, "scale_2", plausible=True)
        check_block_scale(block_scale, "block_scale")
    s2_rows = _per_row(s2, lead, "scale_2").to(work)
    out = torch.empty(lead + (K,), dtype=dtype, device=packed.device)
    rows = math.prod(lead)
    if rows == 0 or K == 0:
        return out
    lut = _e2m1_pair_lut(packed.device, work)
    nb = K // BLOCK_SIZE
    p2, b2, o2 = packed.reshape(rows, -1), block_scale.reshape(rows, -1), out.view(rows, K)
    step = max(1, CHUNK_ELEMENTS // K)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        vals = lut[p2[r0:r1].int()].view(r1 - r0, nb, BLOCK_SIZE)
        scale = b2[r0:r1].to(work).mul_(s2_rows[r0:r1].unsqueeze(-1))
        o2[r0:r1].view(r1 - r0, nb, BLOCK_SIZE).copy_(vals.mul_(scale.unsqueeze(-1)))
    return out


def dequantize_unit(packed, block_scale, dtype=None):
    """``e2m1 * block_scale`` without the global scale, in ``dtype`` (default bfloat16): exact in
    bfloat16 and float16 too (the product of a 2-bit and a 4-bit significand); on CUDA by one
    Triton kernel when Triton imports (``backends.nvfp4_triton``). The emulation
    applies ``scale_2`` to the GEMM output instead (``backends.reference.emulate_moe``). No
    checks: for tensors ``prepare`` validated."""
    torch = _torch()
    dtype = dtype or torch.bfloat16
    if packed.is_cuda:
        from . import nvfp4_triton
        if nvfp4_triton.available():
            return nvfp4_triton.dequantize_unit_triton(packed, block_scale, dtype)
    lead, K = tuple(packed.shape[:-1]), packed.shape[-1] * 2
    lut = _e2m1_pair_lut(packed.device, dtype)
    vals = lut[packed.int()].view(lead + (K // BLOCK_SIZE, BLOCK_SIZE))
    return vals.mul_(block_scale.to(dtype).unsqueeze(-1)).view(lead + (K,))


def quantize_dequantize(x, scale_2=None, *, global_dims: int = 0, dtype=None):
    """``dequantize(quantize(x))``: the value a W4A4 kernel sees for an activation."""
    q = quantize(x, scale_2, global_dims=global_dims)
    return q.dequantize(dtype or x.dtype)


def roundtrip_error_bound(x, q: NVFP4Tensor):
    """Per-element bound on |x - dequantize(quantize(x))| for this quantization.

    With s = block_scale * scale_2 and v = |x| / s, round-to-nearest on E2M1 errs by at most half
    a step: 0.25 s for v <= 2, 0.5 s for v <= 4, 1.0 s for v <= 6. Above 6 the code saturates and
    the error is (v - 6) s: under 0.4 s while the block scale is an E4M3 normal number (it rounds
    down by at most 2^-4), but unbounded in those terms once it is subnormal (below 2^-6, where
    rounding can lose up to half of it); a block scale flushed to 0 loses the block (error |x|).
    The bound covers all three cases, so it holds for outlier-heavy data too.
    """
    torch = _torch()
    K = x.shape[-1]
    s = (q.block_scale.to(torch.float64)
         * _bcast(torch.as_tensor(q.scale_2, device=x.device).to(torch.float64), q.block_scale.dim()))
    s = s.repeat_interleave(BLOCK_SIZE, dim=-1).reshape(tuple(x.shape[:-1]) + (K,))
    ax = x.to(torch.float64).abs()
    v = ax / torch.where(s > 0, s, torch.ones_like(s))
    half = torch.where(v <= 2, 0.25, torch.where(v <= 4, 0.5, torch.clamp(v - 6, min=1.0)))
    return torch.where(s > 0, half * s, ax)


# ----------------------------------------------------------------------------------------------
# scale layouts
# ----------------------------------------------------------------------------------------------

def swizzle_128x4(sf):
    """Linear scales ``[rows, cols]`` or ``[E, rows, cols]`` -> the 128x4 swizzled layout.

    Rows are padded to a multiple of 128 and columns to a multiple of 4 with zeros; the result has
    the padded shape ``[(E,) rows_pad, cols_pad]`` and holds the swizzled byte order (the layout
    of ``fp4_quantize(..., is_sf_swizzled_layout=True)`` and vLLM's ``swizzle_blockscale``).
    A new tensor; the input is not modified.
    """
    torch = _torch()
    squeeze = sf.dim() == 2
    s = sf.unsqueeze(0) if squeeze else sf
    if s.dim() != 3:
        raise ValueError(f"expected a 2-D or 3-D scale tensor, got shape {tuple(sf.shape)}")
    E, rows, cols = s.shape
    rp, cp = ceil_to(rows, SF_TILE_ROWS), ceil_to(cols, SF_TILE_COLS)
    raw = s.view(torch.uint8) if s.element_size() == 1 else s
    padded = torch.zeros((E, rp, cp), dtype=raw.dtype, device=s.device)
    padded[:, :rows, :cols] = raw
    out = (padded.reshape(E, rp // 128, 4, 32, cp // 4, 4)
           .permute(0, 1, 4, 3, 2, 5).contiguous().reshape(E, rp, cp))
    if s.element_size() == 1:
        out = out.view(s.dtype)
    return out[0] if squeeze else out


def unswizzle_128x4(sf_swizzled, rows: int, cols: int):
    """Inverse of :func:`swizzle_128x4`: ``[(E,) rows_pad, cols_pad]`` (or flat) -> ``[(E,) rows, cols]``."""
    torch = _torch()
    rp, cp = ceil_to(rows, SF_TILE_ROWS), ceil_to(cols, SF_TILE_COLS)
    n = sf_swizzled.numel()
    if n % (rp * cp):
        raise ValueError(f"{n} scale bytes do not hold a whole number of {rp}x{cp} padded matrices")
    E = n // (rp * cp)
    raw = sf_swizzled.view(torch.uint8) if sf_swizzled.element_size() == 1 else sf_swizzled
    out = (raw.reshape(E, rp // 128, cp // 4, 32, 4, 4).permute(0, 1, 4, 3, 2, 5)
           .reshape(E, rp, cp)[:, :rows, :cols].contiguous())
    if sf_swizzled.element_size() == 1:
        out = out.view(sf_swizzled.dtype)
    return out[0] if sf_swizzled.dim() <= 2 and E == 1 else out


def to_mma_layout(sf_swizzled, m: int, k: int, num_groups: int = 1, sf_vec_size: int = BLOCK_SIZE):
    """Swizzled scales -> the 6-D MMA view ``(32, 4, m_tiles, 4, k_tiles, num_groups)``.

    Same arithmetic as FlashInfer's ``flashinfer.cute_dsl.convert_sf_to_mma_layout`` (a strided
    view of the swizzled bytes, physical order ``(groups, m_tiles, k_tiles, 32, 4, 4)``); used
    where FlashInfer is not importable. ``m`` and ``k`` are the matrix rows and the unpacked K.
    """
    sf_k = -(-k // sf_vec_size)
    m_tiles, k_tiles = -(-m // SF_TILE_ROWS), -(-sf_k // SF_TILE_COLS)
    expected = num_groups * m_tiles * k_tiles * 32 * 4 * 4
    if sf_swizzled.numel() != expected:
        raise ValueError(f"scale tensor has {sf_swizzled.numel()} elements, expected {expected} "
                         f"for m={m}, k={k}, num_groups={num_groups}")
    return sf_swizzled.view(num_groups, m_tiles, k_tiles, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)


def from_mma_layout(sf_mma):
    """Inverse of :func:`to_mma_layout`: 6-D MMA view -> ``[num_groups, m_pad, cols_pad]`` swizzled."""
    g = sf_mma.permute(5, 2, 4, 0, 1, 3).contiguous()  # (groups, m_tiles, k_tiles, 32, 4, 4)
    G, mt, kt = g.shape[:3]
    return g.reshape(G, mt * 128, kt * 4)


def flashinfer_mma_layout(sf_swizzled, m: int, k: int, num_groups: int = 1):
    """``(view, source)``: FlashInfer's ``convert_sf_to_mma_layout`` when importable, else ours."""
    try:
        from flashinfer.cute_dsl import convert_sf_to_mma_layout  # type: ignore
    except Exception:  # flashinfer or cutlass-dsl absent, or broken
        return to_mma_layout(sf_swizzled, m, k, num_groups), "backends.nvfp4.to_mma_layout"
    return (convert_sf_to_mma_layout(sf_swizzled, m=m, k=k, num_groups=num_groups),
            "flashinfer.cute_dsl.convert_sf_to_mma_layout")


def swizzled_index_128x4(row: int, col: int, padded_cols: int) -> int:
    """Flat byte offset of scale ``(row, col)`` in the 128x4 layout (FlashInfer's formula)."""
    return ((col % 4) + (col // 4) * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4
            + (row // 128) * 128 * padded_cols)


# ----------------------------------------------------------------------------------------------
# checkpoint containers
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinearWeights:
    """An NVFP4 linear layer as a ModelOpt checkpoint stores it.

    weight: ``[N, K]`` NVFP4; input_scale: float32 0-d, the calibrated activation scale (ModelOpt
    ``input_scale``, dequantization convention) or None (W4A16 checkpoints have none); bias: ``[N]``
    or None.
    """

    weight: NVFP4Tensor
    input_scale: Any = None
    bias: Any = None

    @property
    def out_features(self) -> int:
        return int(self.weight.packed.shape[-2])

    @property
    def in_features(self) -> int:
        return int(self.weight.packed.shape[-1] * 2)


@dataclass(frozen=True)
class MoEWeights:
    """NVFP4 fused-MoE expert weights in checkpoint (vLLM ``w13``/``w2``) form.

    w13: ``[E, 2I, H]`` for gated activations, rows ``[w1 (gate); w3 (up)]`` as vLLM concatenates
    them (``act(x @ w1.T) * (x @ w3.T)``), or ``[E, I, H]`` non-gated; per-expert ``scale_2`` ``[E]``.
    w2: ``[E, H, I]``. a13_scale / a2_scale: ModelOpt ``input_scale`` of FC1 / FC2, 0-d or ``[E]``,
    or None (W4A16 checkpoints, e.g. ModelOpt ``W4A16_NVFP4``, have no activation scales).
    """

    w13: NVFP4Tensor
    w2: NVFP4Tensor
    a13_scale: Any = None
    a2_scale: Any = None

    @property
    def num_experts(self) -> int:
        return int(self.w13.packed.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.w2.packed.shape[1])

    @property
    def intermediate_size(self) -> int:
        return int(self.w2.packed.shape[2] * 2)

    @property
    def act_and_mul(self) -> bool:
        rows = int(self.w13.packed.shape[1])
        if rows == 2 * self.intermediate_size:
            return True
        if rows == self.intermediate_size:
            return False
        raise ValueError(f"w13 has {rows} rows; expected I={self.intermediate_size} or 2I")


def quantize_linear(w, input_scale=None, bias=None) -> LinearWeights:
    """Quantize a float ``[N, K]`` weight as ModelOpt does (per-tensor scale_2 from amax)."""
    torch = _torch()
    s = None if input_scale is None else torch.as_tensor(input_scale, dtype=torch.float32)
    return LinearWeights(quantize(w), s, bias)


def quantize_moe(w13, w2, a13_scale=None, a2_scale=None) -> MoEWeights:
    """Quantize float expert weights (``[E, 2I|I, H]`` and ``[E, H, I]``), one scale_2 per expert."""
    torch = _torch()

    def f(s):
        return None if s is None else torch.as_tensor(s, dtype=torch.float32, device=w13.device)

    return MoEWeights(quantize(w13, global_dims=1), quantize(w2, global_dims=1), f(a13_scale),
                      f(a2_scale))


def activation_scale_from_amax(x):
    """A calibrated ModelOpt ``input_scale`` for activation ``x``: amax / (6 * 448)."""
    return scale_2_from_amax(amax_checked(x))
