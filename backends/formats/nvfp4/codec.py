"""NVFP4 quantization and dequantization as FlashInfer's CUDA quantizer rounds (NVFP4Tensor,
`quantize`, `dequantize`), with the checks of their inputs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Tuple

from .formats import (
    BLOCK_SIZE,
    E2M1_MAX,
    E4M3_MAX,
    _torch,
    e2m1_values,
    to_e4m3,
)

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
    Triton kernel when Triton imports (``backends.kernels.nvfp4_triton``). The emulation
    applies ``scale_2`` to the GEMM output instead (``backends.reference.emulate_moe``). No
    checks: for tensors ``prepare`` validated."""
    torch = _torch()
    dtype = dtype or torch.bfloat16
    if packed.is_cuda:
        from ...kernels import nvfp4_triton
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
